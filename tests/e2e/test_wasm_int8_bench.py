"""`make bench TARGET=wasm INT8=1` (bench/web_bench.py --int8, issue 28) on its smallest model:
the size-32 resnet_style_cnn quantized by bench/int8_models.py's `quantize` (QDQ, uint8
activations, int8 per-channel weights), compiled for `wasm` as the bench compiles it, gives
onnxruntime's int8 outputs under wasmtime and in Node beside onnxruntime-web (bench/web/bench.mjs
with several tvmc builds per model), within web_bench.output_tolerance (one quantization step of
the float logits). Each test skips naming what is missing (wasmtime, node, bench/web's npm
packages, onnxruntime)."""

from __future__ import annotations

import importlib.util
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime.quantization", reason="onnxruntime quantizes the bench's models")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _web_bench():
    """bench/web_bench.py as a module (bench/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("web_bench", BENCH / "web_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_model():
    """(web_bench module, float model, int8 model, feeds) of the bench's size-32 CNN."""
    wb = _web_bench()
    with tempfile.TemporaryDirectory() as tmp:
        [(name, fmodel, qmodel, feeds)] = wb.int8_models("32", False, tmp)
    assert name == "resnet_style_32"
    return wb, fmodel, qmodel, feeds


def _onnxruntime(model, feeds) -> dict:
    from tests.e2e.models import onnxruntime_outputs

    return onnxruntime_outputs(model, feeds)


def test_output_tolerance_is_the_dequantized_step(bench_model):
    """The logits come out of a DequantizeLinear: one step is its scale; an integer output gets 1."""
    wb, _, qmodel, _ = bench_model
    producers = {o: n for n in qmodel.graph.node for o in n.output}
    dq = producers["logits"]
    assert dq.op_type == "DequantizeLinear"
    scale = float(onnx.numpy_helper.to_array(next(t for t in qmodel.graph.initializer if t.name == dq.input[1])))
    assert wb.output_tolerance(qmodel, "logits", np.zeros(10, np.float32)) == scale
    assert wb.output_tolerance(qmodel, "logits", np.zeros(10, np.uint8)) == 1.0


def test_bench_int8_wasm_build_matches_onnxruntime_under_wasmtime(bench_model, tmp_path):
    """The bench's `wasm` build of the int8 model (i32x4.dot_i16x8_s kernels) under wasmtime."""
    import tvmc
    from tvmc.runtime import create_executor, device_missing

    reason = device_missing("wasm")
    if reason:
        pytest.skip(f"target wasm: {reason}")
    wb, _, qmodel, feeds = bench_model
    result = tvmc.compile(qmodel, "wasm", tmp_path / "int8.tar", opt_level=3)
    ex = create_executor(result.output)
    for k, v in feeds.items():
        ex.set_input(k, v)
    ex.run()
    ref = _onnxruntime(qmodel, feeds)["logits"]
    err = float(np.abs(ex.get_output(0) - ref).max())
    assert err <= wb.output_tolerance(qmodel, "logits", ref) * 1.0001, err


def test_bench_mjs_runs_int8_builds_beside_onnxruntime_web(bench_model, tmp_path):
    """bench.mjs with two tvmc builds of one model (the manifest's `sites`): both are timed and
    their outputs come back; the int8 build's logits are onnxruntime-web's within one step."""
    import tvmc

    wb, fmodel, qmodel, feeds = bench_model
    node = wb._node()
    if node is None:
        pytest.skip("needs node and bench/web's npm package onnxruntime-web (make install runs npm install there)")
    onnx.save(qmodel, tmp_path / "int8.onnx")
    sites = {}
    for label, model in (("int8", qmodel), ("float", fmodel)):
        tvmc.compile(model, "wasm", tmp_path / label, output_format="web", opt_level=3)
        sites[label] = str(tmp_path / label)
    manifest = {"repeat": 1, "models": [{"name": "cnn", "onnx": str(tmp_path / "int8.onnx"), "sites": sites,
                                         "inputs": wb._write_inputs(tmp_path, feeds)}]}
    doc, _, _ = wb._run_node(node, "", manifest, str(tmp_path))
    [r] = doc["results"]
    assert set(r["sites"]) == {"int8", "float"}
    ref = np.asarray(r["ort_outputs"]["logits"], np.float32)
    step = wb.output_tolerance(qmodel, "logits", ref)
    np.testing.assert_allclose(ref, _onnxruntime(qmodel, feeds)["logits"].ravel(), rtol=0, atol=step * 1.0001)
    err = float(np.abs(np.asarray(r["sites"]["int8"]["outputs"]["logits"]) - ref).max())
    assert err <= step * 1.0001, err
    assert len(r["sites"]["float"]["outputs"]["logits"]) == 10


def test_wasm_graph_entry_calls_its_kernels(bench_model, tmp_path):
    """On wasm the kernels stay functions of their own that tvmc_graph_run calls (WasmBackend.
    kernels_noinline: V8 compiles one function holding the whole graph worse): the entry's
    assembly calls every kernel of the int8 CNN (inlined, LLVM merges the small ones into it). And
    the requantize epilogues' uint8 -> float32 conversions stay vector operations
    (codegen.llvm.UINT_TO_FLOAT_BY_BITS: no f32.convert_i32_u of one extracted lane at a time)."""
    from tvmc.driver import CompileOptions

    _, _, qmodel, _ = bench_model
    module = _compile_wasm(qmodel, CompileOptions(opt_level=3, dump_ir=("asm",), dump_dir=str(tmp_path)))
    kernels = {n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"}
    asm = (tmp_path / "mod.s").read_text()
    entry = asm[asm.index("tvmc_graph_run:"):]
    entry = entry[:entry.index("end_function")]
    called = set(re.findall(r"^\s+call\s+(\S+)", entry, re.M))
    assert kernels <= called, f"not called from tvmc_graph_run: {sorted(kernels - called)}"
    assert not re.search(r"extract_lane_u\s+\d+\s+f32\.convert_i32_u", asm), "a uint8 -> float conversion per lane"


def _compile_wasm(model, options):
    from tvmc.driver import compile_model
    from tvmc.target import resolve_target

    return compile_model(model, resolve_target("wasm"), options)


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_wasm_unsigned_to_float_cast_is_exact_and_vectorized(dtype, tmp_path):
    """Vector uint8 / uint16 -> float32 casts on wasm (the requantize epilogues' float32(uint8(...)))
    by the mantissa trick (codegen.llvm.uint_to_float_by_bits): every value of the type exactly,
    under wasmtime."""
    from onnx import TensorProto, helper

    from tvmc.driver import CompileOptions
    from tvmc.runtime import create_executor, device_missing
    from tvmc.package import save_artifact

    reason = device_missing("wasm")
    if reason:
        pytest.skip(f"target wasm: {reason}")
    x = np.arange(np.iinfo(dtype).max + 1).astype(dtype).reshape(-1, 256)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "cast",
        [helper.make_tensor_value_info("x", elem, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))]),
        opset_imports=[helper.make_opsetid("", 17)])
    module = _compile_wasm(model, CompileOptions(opt_level=3))
    ex = create_executor(save_artifact(module, tmp_path / "mod.tar"))
    ex.set_input("x", x)
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), x.astype(np.float32))
