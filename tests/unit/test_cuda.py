"""The CUDA target's parts that need no GPU: descriptors and the nvptx64 ISA table, the NVPTX
spellings of CodeGenLLVM's device kernels (LLVM IR and PTX), ptxas and its errors, the
artifact's cubin member, and the runtime's choices and errors without a driver."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from tests.e2e.builders import mlp
from tests.unit.test_gpu_lower import _elementwise, _tiled_matmul
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.codegen.nvptx import assembler_missing, ptx_version, run_ptxas
from tvmc.errors import ArtifactError, CodegenError, TargetError
from tvmc.target import resolve_target
from tvmc.te.expr import FloatImm, Var
from tvmc.tir.gpu import lower_device
from tvmc.tir.ir import Buffer, For, PrimFunc, Seq, Store
from tvmc.tir.lower import lower

CUDA = resolve_target("cuda")


def _ptx(prim, target=CUDA) -> str:
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    return compile_ir(cg.ir_text(), target, assembly=True).decode()


def _need_ptxas():
    reason = assembler_missing(CUDA)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("name,cpu,ptx", [("cuda", "sm_75", 63), ("cuda-sm80", "sm_80", 70), ("cuda-sm90", "sm_90", 78)])
def test_shipped_cuda_descriptors(name, cpu, ptx):
    t = resolve_target(name)
    assert (t.kind, t.family, t.codegen, t.triple, t.cpu) == ("gpu", "gpu", "llvm", "nvptx64-nvidia-cuda", cpu)
    assert (t.max_threads_per_block, t.thread_warp_size, t.max_registers_per_thread) == (1024, 32, 255)
    assert t.max_shared_memory_per_block == 48 * 1024  # static shared memory, every compute capability
    assert (t.library_format, t.runtime, t.linker, t.assembler) == ("ptx", "cuda", (), ("ptxas",))
    assert t.host_features == () and ptx_version(t) == ptx


def test_gpu_facts_stay_out_of_cpu_descriptors():
    assert not {"max_registers_per_thread", "assembler"} & set(resolve_target("x86").to_dict())


@pytest.mark.parametrize("spec,cpu,version", [("cuda -mcpu=sm_86", "sm_86", "7.1"), ("cuda-sm90 -mcpu=sm_89", "sm_89", "7.8"),
                                              ("cuda -mattr=+ptx80", "sm_75", "8.0"),
                                              ("cuda-sm90 -mattr=+ptx70", "sm_90", "7.8")])
def test_mcpu_and_mattr_set_the_architecture_and_the_ptx_version(spec, cpu, version):
    s, a, b = _elementwise()
    target = resolve_target(spec)
    ptx = _ptx(lower_device(lower(s, [a, b], "add_one"), target), target)
    assert f".target {cpu}" in ptx and f".version {version}" in ptx


@pytest.mark.parametrize("spec,message", [
    ("cuda -mcpu=sm_61", "unknown cpu 'sm_61' for nvptx64; known: sm_100"),
    ("cuda -mattr=+ptx99", "unknown feature '+ptx99'"),
])
def test_unknown_architectures_and_ptx_versions_are_target_errors(spec, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        resolve_target(spec)


def test_removing_the_ptx_version_the_architecture_needs_is_a_target_error_before_llvm():
    target = resolve_target("cuda-sm90 -mattr=-ptx78")  # LLVM would abort the process on it
    s, a, b = _elementwise()
    with pytest.raises(TargetError, match=r"sm_90 needs PTX ISA 7\.8 \(\+ptx78\)"):
        _ptx(lower_device(lower(s, [a, b], "add_one"), target), target)


def test_device_kernel_in_nvvm_ir_and_ptx():
    """Thread indices from the special registers, tiles in shared memory (address space 3)
    between bar.sync barriers, a kernel entry with its block as launch bound."""
    s, A, B, C = _tiled_matmul()
    prim = lower_device(lower(s, [A, B, C], "matmul"), CUDA)
    cg = CodeGenLLVM(CUDA)
    cg.add_function(prim)
    ir = cg.ir_text()
    text = ir.replace('"', "")  # llvmlite quotes every name
    assert "define ptx_kernel void @matmul(" in text
    assert "call i32 @llvm.nvvm.read.ptx.sreg.tid.x()" in text and "call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()" in text
    assert text.count("addrspace(3) global [32 x float]") == 2 and text.count("call void @llvm.nvvm.barrier0()") == 2
    assert "ptr @matmul, !maxntidx, i32 8 }" in text and "ptr @matmul, !maxntidy, i32 8 }" in text
    ptx = compile_ir(ir, CUDA, assembly=True).decode()
    assert ".maxntid 8, 8, 1" in ptx and ".maxnreg 255" in ptx
    assert "%tid.x" in ptx and "%ctaid.y" in ptx and len(re.findall(r"bar\.sync\s+0;", ptx)) >= 2
    assert "ld.shared" in ptx and "st.shared" in ptx and len(re.findall(r"\.shared \.align 16 \.b8 \S+\[128\]", ptx)) == 2


def test_a_thread_loop_narrower_than_the_launch_runs_guarded():
    out = Buffer("out", (64,), "float32")
    tx, ty = Var("tx"), Var("ty")
    body = Seq([For(tx, 64, "threadIdx.x", Store(out, tx, FloatImm(1.0))),
                For(ty, 32, "threadIdx.x", Store(out, ty, FloatImm(2.0)))])
    prim = lower_device(PrimFunc("two_widths", [out], body), CUDA)
    cg = CodeGenLLVM(CUDA)
    cg.add_function(prim)
    ir = cg.ir_text()
    assert re.search(r'icmp slt i64 %"?ty"?, 32', ir) and not re.search(r'icmp slt i64 %"?tx"?, 64', ir)


def test_ptxas_rejection_is_one_line_with_the_command():
    _need_ptxas()
    with pytest.raises(CodegenError) as err:
        run_ptxas(b".version 7.0\n.target sm_80\n.address_size 64\nthis is not ptx\n", resolve_target("cuda-sm80"))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("ptxas rejected the PTX: ") and "(command: ptxas -arch=sm_80" in msg


def test_kernels_and_triples_must_match():
    s, a, b = _elementwise()
    cpu_prim = lower(s, [a, b], "add_one")
    with pytest.raises(CodegenError, match="not lowered for the GPU target cuda"):
        CodeGenLLVM(CUDA).add_function(cpu_prim)
    with pytest.raises(CodegenError, match="has no GPU codegen"):
        CodeGenLLVM(resolve_target("x86")).add_function(lower_device(cpu_prim, CUDA))


# ---- artifact and runtime ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_module():
    from tvmc.driver import compile_model

    return compile_model(mlp(seed=5, batch=2, sizes=(16, 24, 4)), resolve_target("cuda"))


def test_a_listed_device_binary_must_be_in_the_tar(cuda_module, tmp_path):
    from dataclasses import replace

    from tvmc.package import load_artifact, save_artifact

    _need_ptxas()
    assert load_artifact(save_artifact(cuda_module, tmp_path / "ok.tar")).device_binaries.keys() == {"mod.cubin"}
    broken = replace(cuda_module, device_binaries={})  # metadata still lists mod.cubin
    with pytest.raises(ArtifactError, match="missing member mod.cubin"):
        load_artifact(save_artifact(broken, tmp_path / "broken.tar"))


def test_without_cuda_python_the_error_names_it(cuda_module, tmp_path, monkeypatch):
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor

    path = save_artifact(cuda_module, tmp_path / "m.tar")
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(ArtifactError, match=r"needs cuda-python: pip install 'cuda-python>=12\.6'"):
        create_executor(path)


def test_without_a_driver_the_error_says_so(cuda_module, tmp_path):
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor
    from tvmc.runtime.cuda import cuda_available

    if cuda_available() is None:
        pytest.skip("a CUDA GPU runs here")
    with pytest.raises(ArtifactError) as err:
        create_executor(save_artifact(cuda_module, tmp_path / "m.tar"), "cuda")
    assert "\n" not in str(err.value) and "CUDA" in str(err.value)
    with pytest.raises(ArtifactError, match="expected cuda or cuda:ORDINAL"):
        create_executor(tmp_path / "m.tar", "cuda:first")


@pytest.mark.parametrize("arch,capability,cubin,ptx", [
    ("sm_80", (8, 0), True, True), ("sm_80", (8, 6), True, True), ("sm_86", (8, 0), False, False),
    ("sm_80", (9, 0), False, True), ("sm_90a", (9, 0), True, True), ("sm_90a", (10, 0), False, False),
    ("sm_75", (12, 0), False, True), ("sm_100", (10, 3), True, True),
])
def test_which_image_runs_on_which_gpu(arch, capability, cubin, ptx):
    from tvmc.runtime.cuda import cubin_runs_on, ptx_runs_on

    assert cubin_runs_on(arch, capability) == cubin and ptx_runs_on(arch, capability) == ptx


@pytest.mark.cuda
def test_device_data_round_trip_through_the_program_interface():
    """run_kernel drives any program of tvmc.runtime.device; on a GPU, a CUDA KernelModule."""
    from tests.targets import require

    target = require("cuda")
    s, a, b = _elementwise()
    prim = lower_device(lower(s, [a, b], "add_one"), target.target)
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(target.run_kernel(prim, [x], np.zeros(1000, np.float32)), x + 1)


def test_a_block_beyond_the_register_file_is_refused_at_compile_time():
    """ptxas fits each block into the register file of a real GPU; a descriptor with a smaller one
    (here 512 registers per block) gets a one-line CodegenError naming the kernel."""
    from tvmc.driver import compile_model

    _need_ptxas()
    small = resolve_target("cuda", {"registers_per_block": "512"})
    with pytest.raises(CodegenError, match=r"kernel fused_\w+: ptxas gave each of its \d+ threads \d+ registers, "
                                           r"beyond target cuda's 512 per block") as err:
        compile_model(mlp(seed=5, batch=2, sizes=(16, 24, 4)), small)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("offset,wide", [(0, True), (2, False)])
def test_aligned_vector_accesses_become_one_wide_load_and_store(offset, wide):
    """out[4 tx + v + offset] = a[4 tx + v + offset] + 1 over v in 0..4, vectorized: 16-byte
    aligned when offset is 0 (ld.global.nc.v4 / st.global.v4), element-aligned otherwise."""
    from tvmc.te.expr import IntImm, Load

    a, out = Buffer("a", (68,), "float32"), Buffer("out", (68,), "float32")
    tx, v = Var("tx"), Var("v")
    index = tx * IntImm(4) + v + IntImm(offset)
    body = For(tx, 16, "threadIdx.x", For(v, 4, "vectorize", Store(out, index, Load(a, index) + FloatImm(1.0))))
    ptx = _ptx(lower_device(PrimFunc("shifted", [a, out], body), CUDA))
    assert (re.search(r"ld\.global\.nc\.v4\.\w+", ptx) is not None) == wide
    assert (re.search(r"st\.global\.v4\.\w+", ptx) is not None) == wide
