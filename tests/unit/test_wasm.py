"""The wasm32 target's pieces: descriptors and ISA facts, codegen differences behind the per-triple
tables (serial parallel loops, 32-bit size_t, static relocation), the description's custom
section and its reader, the toolchain data. Running code on wasm is in tests/ops and tests/e2e."""

from __future__ import annotations

import io
import re

import pytest

from tests.targets import require
from tvmc import te
from tvmc.codegen import description
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ArtifactError, TargetError
from tvmc.target import resolve_target
from tvmc.tir.lower import lower


def test_wasm_descriptors_resolve_to_their_vector_units():
    simd, scalar = resolve_target("wasm"), resolve_target("wasm-nosimd")
    assert (simd.vector_lanes(), simd.num_vector_registers, simd.threaded) == (4, 16, False)
    assert (scalar.vector_lanes(), scalar.threaded) == (1, False)
    assert resolve_target("wasm -mattr=-simd128").vector_lanes() == 1  # the scalar unit, from the ISA table
    relaxed = resolve_target("wasm -mattr=+relaxed-simd")
    assert {"relaxed-simd", "simd128"} <= set(relaxed.host_features)
    with pytest.raises(TargetError, match="unknown feature '\\+avx2' for wasm32"):
        resolve_target("wasm -mattr=+avx2")
    assert resolve_target("x86-avx2").threaded and "num_cores" not in resolve_target("x86-avx2").to_dict()


def _parallel_kernel(target):
    a = te.placeholder((64, 8), "float32", name="a")
    b = te.compute((64, 8), lambda i, j: a[i, j] * 2.0, name="b")
    s = te.create_schedule(b)
    s[b].parallel(s[b].op.axis[0])
    cg = CodeGenLLVM(target)
    cg.add_function(lower(s, [a, b], "k"))
    return cg.ir_text()


def test_parallel_loops_run_serially_without_threads():
    assert "GOMP_parallel" in _parallel_kernel(resolve_target("x86-avx2"))
    assert "GOMP_parallel" not in _parallel_kernel(resolve_target("wasm"))


def test_wasm_module_exports_the_c_api_and_imports_nothing():
    require("wasm")
    import wasmtime

    from tests.e2e.builders import mlp
    from tvmc.driver import compile_model

    module = compile_model(mlp(seed=1, batch=1, sizes=(6, 5)), resolve_target("wasm"))
    wasm = wasmtime.Module(wasmtime.Engine(), module.library)
    assert list(wasm.imports) == []
    exports = {e.name for e in wasm.exports}
    assert {"memory", "malloc", "free", "tvmc_graph_run", "tvmc_graph_init", "tvmc_model_create", "tvmc_model_run",
            "tvmc_model_entries", "tvmc_module_description"} <= exports
    desc = description.read_description(io.BytesIO(module.library), len(module.library), "wasm", "mod.wasm")
    assert desc["outputs"][0]["shape"] == [1, 5]
    assert re.search(rb"tvmc_module_description", module.library)


@pytest.mark.parametrize("data,message", [
    (b"\0asm\x01\0\0\0", "no custom section tvmc_module_description"),
    (b"\x7fELF\x02\x01\x01\0", "not a WebAssembly 1.0 module"),
    (b"\0asm\x01\0\0\0\x00\xff\xff\xff\xff\x0f", "exceeds the file"),
    (b"\0asm\x01\0\0\0\x00\x05\x03abc", "runs past the end"),
])
def test_wasm_description_reader_refuses_damaged_modules(data, message):
    with pytest.raises(ArtifactError, match=message):
        description.read_description(io.BytesIO(data), len(data), "wasm", "m.tar: mod.wasm")


def test_toolchain_names_the_wasm_packages():
    from tvmc.toolchain import shipped_packages

    packages = shipped_packages()
    assert packages["deb:lld-19"] == ["wasm-ld-19"] and packages["deb:chromium"] == ["chromium"]
    assert packages["deb:wasi-libc"] == ["/usr/lib/wasm32-wasi/libc.a"]


@pytest.mark.parametrize("spec", ["wasm-nosimd", "wasm -mattr=+relaxed-simd"])
def test_scalar_and_relaxed_simd_builds_match_onnxruntime(spec):
    """The no-SIMD descriptor (scalar schedules, 1 lane) and relaxed SIMD (f32x4.relaxed_madd)."""
    import numpy as np

    from tests.e2e.builders import resnet_style_cnn
    from tests.e2e.models import compile_and_run, onnxruntime_outputs

    require("wasm")
    model = resnet_style_cnn(seed=1, size=17)
    x = np.random.default_rng(0).standard_normal((1, 3, 17, 17)).astype(np.float32)
    got = compile_and_run(model, {"input": x}, target=resolve_target(spec))["logits"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["logits"], rtol=1e-3, atol=1e-4)
