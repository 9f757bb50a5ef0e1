"""Cross-compiling for ARM (aarch64) on this host: descriptors, NEON code generation, linking
with the descriptor's cross toolchain, what the library needs on the device, toolchain errors.
Nothing here runs aarch64 code (tests/e2e and tests/ops run it under qemu-user)."""

from __future__ import annotations

import re
import shutil

import pytest

from tvmc import te
from tvmc.codegen.build import compile_ir, link_shared
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import CodegenError, TargetError
from tvmc.target import resolve_target, with_cross_compiler
from tvmc.tir.lower import lower

ARM_DESCRIPTORS = ["arm", "arm-cortex-a72", "arm-neoverse-n1"]


def _needs_cross_linker():
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("aarch64-linux-gnu-gcc not found (Debian package gcc-aarch64-linux-gnu; make install installs it)")


@pytest.mark.parametrize("name", ARM_DESCRIPTORS)
def test_arm_descriptors(name):
    """128-bit NEON vectors, 32 vector registers (4 float32 lanes: NCHW4c blocks), aarch64 Linux."""
    t = resolve_target(name)
    assert t.triple.startswith("aarch64-") and t.arch == "aarch64"
    assert (t.vector_width_bits, t.num_vector_registers, t.vector_lanes("float32")) == (128, 32, 4)
    assert {"asimd", "fp"} <= set(t.host_features)
    assert t.emulator[0] == "qemu-aarch64" and t.emulator_package == "deb:qemu-user"


def test_core_descriptors_carry_their_features():
    assert "asimddp" in resolve_target("arm-neoverse-n1").host_features      # +dotprod
    assert "asimdhp" in resolve_target("arm-neoverse-n1").host_features      # +fullfp16
    assert "asimddp" not in resolve_target("arm-cortex-a72").host_features
    assert "crc32" in resolve_target("arm-cortex-a72").host_features
    assert resolve_target("arm-neoverse-n1").l1d_bytes == 65536


def test_cpu_tables_follow_llvm():
    """What each cpu implies is what LLVM emits for it: A64FX (Fugaku) has SVE and FP16 but no dot
    product or RCpc (LLVM selects no sdot and no ldapr for it), so its artifacts must not demand
    asimddp or lrcpc from the device; Cortex-A53 has CRC but not the 8.1 atomics."""
    a64fx = set(resolve_target("arm -mcpu=a64fx").host_features)
    assert {"sve", "asimdhp", "atomics", "asimdrdm"} <= a64fx and not {"asimddp", "lrcpc"} & a64fx
    a53 = set(resolve_target("arm -mcpu=cortex-a53").host_features)
    assert "crc32" in a53 and "atomics" not in a53


def test_arm_overrides_change_what_the_device_must_have():
    """-mcpu and -mattr overrides work as on x86, and change the run-time CPU check with the code."""
    a55 = resolve_target("arm -mcpu=cortex-a55")
    assert a55.cpu == "cortex-a55" and "asimddp" in a55.host_features
    assert "asimddp" in resolve_target("arm -mattr=+dotprod").host_features
    no_fp16 = resolve_target("arm-neoverse-n1 -mattr=-fullfp16")
    assert "asimdhp" not in no_fp16.host_features and "asimddp" in no_fp16.host_features
    with pytest.raises(TargetError, match="unknown cpu 'cortex-a99' for aarch64"):
        resolve_target("arm -mcpu=cortex-a99")
    with pytest.raises(TargetError, match="unknown feature '\\+avx2' for aarch64"):
        resolve_target("arm -mattr=+avx2")


def _vector_prim(name, fn, n=64, lanes=4):
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: fn(x[i]), name="y")
    s = te.create_schedule(y)
    _, inner = s[y].split(s[y].op.axis[0], lanes)
    s[y].vectorize(inner)
    return lower(s, [x, y], name)


def _asm(prims, target) -> str:
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    dumps = {"_want": ("asm",)}
    compile_ir(cg.ir_text(), target, dumps)
    return dumps["asm"]


def test_neon_fma_and_vectorized_polynomials():
    """x * 1.5 + 1 is one NEON fmla on 4 lanes; exp/tanh/erf/sigmoid are the polynomial
    intrinsics on <4 x float> with no libm call (no `bl expf`)."""
    arm = resolve_target("arm")
    asm = _asm([_vector_prim("fma4", lambda v: v * 1.5 + 1.0),
                _vector_prim("exp4", te.exp), _vector_prim("tanh4", te.tanh),
                _vector_prim("erf4", te.erf), _vector_prim("sigmoid4", te.sigmoid)], arm)
    assert re.search(r"\bfmla\s+v\d+\.4s", asm)
    assert not re.search(r"\bbl\s+(expf?|tanhf?|erff?|logf?)\b", asm)
    for fn in ("exp4", "tanh4", "erf4", "sigmoid4"):
        body = asm.split(f"{fn}:")[1].split(".Lfunc_end")[0]
        assert re.search(r"\bf(mul|mla|add)\s+v\d+\.4s", body), fn


def test_cross_linked_library_and_its_device_requirements(tmp_path):
    """The descriptor's cross linker writes an aarch64 ELF; metadata lists what the device needs."""
    _needs_cross_linker()
    from tvmc.codegen.elf import library_requirements

    arm = resolve_target("arm")
    x = te.placeholder((64, 256), "float32", name="x")
    y = te.compute((64, 256), lambda i, j: x[i, j] * 1.5 + 1.0, name="y")
    s = te.create_schedule(y)
    s[y].parallel(s[y].op.axis[0])
    cg = CodeGenLLVM(arm)
    cg.add_function(lower(s, [x, y], "par"))
    so = link_shared(compile_ir(cg.ir_text(), arm), arm)
    assert so[:4] == b"\x7fELF" and so[18:20] == (183).to_bytes(2, "little")  # e_machine EM_AARCH64
    req = library_requirements(so)  # parallel loops run on libgomp threads on the device
    assert req["shared_libraries"][0] == "libgomp.so.1"
    assert req["glibc"] is None or re.fullmatch(r"2\.\d+(\.\d+)?", req["glibc"])


def test_compile_records_device_requirements(tmp_path):
    _needs_cross_linker()
    from onnx import TensorProto, helper

    from tvmc.driver import compile_model

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])])
    module = compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                           resolve_target("arm"))
    req = module.metadata["device_requirements"]
    assert set(req) == {"shared_libraries", "glibc"} and isinstance(req["shared_libraries"], list)


def test_missing_linker_names_its_package():
    arm = resolve_target("arm")
    import dataclasses

    missing = dataclasses.replace(arm, linker=("tvmc-no-such-aarch64-gcc", "-shared"))
    with pytest.raises(CodegenError) as e:
        link_shared(b"", missing)
    msg = str(e.value)
    assert "tvmc-no-such-aarch64-gcc" in msg and "gcc-aarch64-linux-gnu" in msg and "\n" not in msg


def test_cross_compiler_flags():
    """--cross-compiler replaces the linker's driver (and its package hint), --cross-compiler-options
    are appended, shell-quoted."""
    arm = with_cross_compiler(resolve_target("arm"), "clang", "--target=aarch64-linux-gnu '-Wl,-rpath,$ORIGIN'")
    assert arm.linker == ("clang", "-shared", "-fopenmp", "--target=aarch64-linux-gnu", "-Wl,-rpath,$ORIGIN")
    assert arm.linker_package == ""
    with pytest.raises(TargetError, match="cross-compiler-options"):
        with_cross_compiler(arm, None, "'unbalanced")
