"""CUDA without a GPU: every op case of test_ops.py compiled for each shipped CUDA descriptor,
its PTX (LLVM's NVPTX backend) assembled by ptxas for the descriptor's architecture, which checks
it as the driver would (types, address spaces, barriers, register allocation), and the kernel's
entry, launch bounds and shared memory as the lowering planned them. The numerics of the same
loop IR are the OpenCL tests' (PoCL) and, on a GPU, test_ops.py's cuda cases.

make test: the first case of each operator, on the shipped descriptors in turn; make test-all:
every case on every descriptor. Skips naming ptxas where it is not on PATH."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_gpu_schedules import BY_IMPL, _function
from test_ops import CASES
from util import op_function

from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import NVPTX, CodeGenLLVM, block_register_bound
from tvmc.codegen.nvptx import assembler_missing, kernel_resources
from tvmc.ops.fused import lower_fused
from tvmc.target import known_targets, resolve_target

CUDA_TARGETS = [n for n in known_targets() if n != "native" and resolve_target(n).runtime == "cuda"]


def test_at_least_two_gpu_generations_ship():
    assert {"cuda", "cuda-sm80", "cuda-sm90"} <= set(CUDA_TARGETS)


def _params():
    out, ops = [], {}
    for c in CASES:
        first = c.op not in ops
        ops.setdefault(c.op, len(ops))
        for k, name in enumerate(CUDA_TARGETS):
            sample = first and ops[c.op] % len(CUDA_TARGETS) == k
            out.append(pytest.param(c, name, id=f"{name}-{c.id}", marks=() if sample else pytest.mark.slow))
    return out


def compile_kernel(prim, target):
    """(PTX text, what ptxas allocates for the kernel) of a lowered device kernel."""
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    ptx = compile_ir(cg.ir_text(), target, assembly=True)
    return ptx.decode(), kernel_resources(ptx, target)[prim.name]


@pytest.mark.parametrize("case,target_name", _params())
def test_op_case_ptx_is_accepted_by_ptxas(case, target_name, request):
    target = resolve_target(target_name)
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    if case.xfail:
        request.applymarker(pytest.mark.xfail(reason=case.xfail[0], raises=case.xfail[1], strict=True))
    arrays, chain = case.build()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fn, _, _ = op_function(case.op, arrays, case.attrs, chain)
    prim = lower_fused(fn, target)
    ptx, info = compile_kernel(prim, target)
    assert f".target {target.cpu}" in ptx
    entry = re.search(rf"\.entry {prim.name}\(([^)]*)\)", ptx)
    assert entry and entry.group(1).count(".param .u64 .ptr") == len(prim.params)  # one pointer per buffer
    assert ".maxntid " + ", ".join(map(str, prim.launch.block)) in ptx
    assert info["registers"] <= target.max_registers_per_thread
    # the block's registers fit the GPU's register file (else the launch fails)
    assert info["registers"] <= block_register_bound(target, prim.launch.threads_per_block, NVPTX.register_unit)
    shared = prim.launch.shared_bytes
    assert shared <= info["smem"] <= shared + 16 * len(re.findall(r"\.shared \.align", ptx))
    assert ("bar.sync" in ptx) == ("barrier(" in str(prim))


def test_registers_per_thread_bound_the_assembler():
    """The descriptor's registers per thread reach the PTX (.maxnreg), so ptxas spills beyond them."""
    target = resolve_target("cuda-sm80", {"max_registers_per_thread": "32"})
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    fn, _, _ = _function(BY_IMPL["conv2d_nchw.gpu"])  # about 250 registers without the bound
    prim = lower_fused(fn, target)
    ptx, info = compile_kernel(prim, target)
    assert ".maxnreg 32" in ptx and info["registers"] <= 32
    _, unbounded = compile_kernel(lower_fused(fn, resolve_target("cuda-sm80")), resolve_target("cuda-sm80"))
    assert unbounded["registers"] > 32
