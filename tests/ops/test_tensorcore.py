"""Tensor-core GEMM kernels (tvmc/ops/gpu/tensorcore.py) without a GPU: each implementation with
its fallback config and others of its space, in float16, bfloat16 and TF32, lowered for cuda-sm90
and run by the SIMT interpreter of the loop IR (tvmc/tir/simt.py: warps in lockstep, ldmatrix and mma.sync by their
PTX ISA lane maps) against the numpy reference; their PTX (mma.sync, ldmatrix, cp.async) accepted
by ptxas for sm_80 and sm_90; which targets and workloads they serve. On a GPU the same kernels
run in test_ops.py's cuda cases and the mixed-precision e2e tests."""

from __future__ import annotations

import random
import re

import ml_dtypes
import numpy as np
import pytest
from test_ops import Case, _assert_close, conv, n, u
from util import op_function

from tvmc.autotune.task import tasks_of_functions
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.codegen.nvptx import assembler_missing, kernel_resources
from tvmc.errors import ScheduleError
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import get_op
from tvmc.target import resolve_target
from tvmc.tir.simt import _tf32, run_kernel

SM90 = resolve_target("cuda-sm90")
SM90_TF32 = resolve_target("cuda-sm90", {"allow_tf32": "true"})
# TF32 keeps 10 of float32's 23 mantissa bits (rounded to nearest): products lose up to 2**-10 relative
TF32_TOL = dict(rtol=2e-2, atol=2e-2)


def h(rng, shape, scale=1.0):
    """float16 samples (standard normal with 0.0 and -0.0 at the ends)."""
    return n(rng, shape, scale).astype(np.float16)


def bias_relu16(c, shape=None):
    return lambda r: [("add", {}, [h(r, shape or (c, 1, 1))]), ("nn.relu", {}, [])]


def bf(rng, shape, scale=1.0):
    """bfloat16 samples (standard normal with 0.0 and -0.0 at the ends)."""
    return n(rng, shape, scale).astype(ml_dtypes.bfloat16)


# one case per tensor-core implementation (the id), then edge cases of the same implementations
TENSORCORE_CASES = [
    Case("dense_tensorcore.gpu", "nn.dense", lambda r: [h(r, (37, 72)), h(r, (50, 72))], {}, bias_relu16(50, (50,))),
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [h(r, (2, 33, 24)), h(r, (24, 45))]),
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [h(r, (1, 8, 15, 15)), h(r, (16, 8, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), bias_relu16(16)),
]
# --mixed-precision bfloat16: the same kernels with bfloat16 operands (mma m16n8k16 .bf16); the
# products are exact in float32 and the sums float32, so one bfloat16 ulp of the result
BF16_CASES = [
    Case("dense_tensorcore.gpu", "nn.dense", lambda r: [bf(r, (37, 72)), bf(r, (50, 72))], {},
         lambda r: [("add", {}, [bf(r, (50,))]), ("nn.relu", {}, [])]),
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [bf(r, (2, 33, 24)), bf(r, (24, 45))]),
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [bf(r, (1, 8, 15, 15)), bf(r, (16, 8, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), lambda r: [("add", {}, [bf(r, (16, 1, 1))]), ("nn.relu", {}, [])]),
    # K = 27: gathered and zero-filled past K; N a multiple of 8 (16-byte copies of B)
    Case("dense_tensorcore.gpu", "nn.dense", lambda r: [bf(r, (5, 27)), bf(r, (9, 27))]),
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [bf(r, (3, 1, 18, 40)), bf(r, (2, 40, 16))]),
]
# float32 models with --target-option allow_tf32=true: the m16n8k8 TF32 form
TF32_CASES = [
    Case("dense_tensorcore.gpu", "nn.dense", lambda r: [n(r, (37, 72)), n(r, (50, 72))], {},
         lambda r: [("add", {}, [n(r, (50,))]), ("nn.relu", {}, [])], tol=TF32_TOL),
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [n(r, (2, 33, 24)), n(r, (24, 45))], tol=TF32_TOL),
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [n(r, (2, 20, 30)), n(r, (30, 16))], tol=TF32_TOL),
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [n(r, (2, 3, 11, 13)), n(r, (12, 3, 3, 3))],
         conv(padding=(1, 0, 1, 2), dilation=(1, 2)), tol=TF32_TOL),
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [n(r, (1, 8, 9, 9)), n(r, (16, 8, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), tol=TF32_TOL),
]
# operands uniform in [1, 2): every product positive, so a conversion to TF32 that rounds toward zero
# (what the mma does with a float32 register's bits: the 13 low mantissa bits dropped) leaves the
# outputs too small on average, by about 2 x 2**-11 x ln 2 = 6.8e-4 relative (the dropped bits' mean
# over each operand), where rounding to nearest leaves a mean relative error near 0 (below 1e-5)
TF32_BIAS_CASE = Case("dense_tensorcore.gpu", "nn.dense", lambda r: [u(r, (32, 256), 1, 2), u(r, (24, 256), 1, 2)])
EDGE_CASES = [
    # K not a multiple of 8: every operand gathered element by element, zero-filled past K
    Case("dense_tensorcore.gpu", "nn.dense", lambda r: [h(r, (5, 27)), h(r, (9, 27))]),
    # N a multiple of 8: B copied 16 bytes at a time; broadcast batch on A
    Case("matmul_tensorcore.gpu", "nn.matmul", lambda r: [h(r, (3, 1, 18, 40)), h(r, (2, 40, 16))]),
    # 3 input channels (K = 27), asymmetric padding, dilation, batch 2 folded into N
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [h(r, (2, 3, 11, 13)), h(r, (12, 3, 3, 3))],
         conv(padding=(1, 0, 1, 2), dilation=(1, 2))),
    # 1 x 1 convolution, K a multiple of 8 (weight copied 16 bytes at a time)
    Case("conv2d_nchw_tensorcore.gpu", "nn.conv2d", lambda r: [h(r, (1, 16, 7, 7)), h(r, (24, 16, 1, 1))], conv()),
]


def _target(case):
    """cuda-sm90, with allow_tf32 for float32 cases."""
    return SM90_TF32 if case.build()[0][0].dtype == np.float32 else SM90


def _configs(case, count=2):
    """The fallback config of the case's implementation and `count` others of its space that
    lower (seeded choice)."""
    arrays, chain = case.build()
    fn, _, _ = op_function(case.op, arrays, case.attrs, chain)
    target = _target(case)
    task = next(t for t in tasks_of_functions([fn], target) if t.impl == case.id)
    space = task.config_space(target)
    indices = list(range(len(space)))
    random.Random(case.id + str(fn.params[0].type.shape)).shuffle(indices)
    chosen = [space.fallback_config()]
    for i in indices:
        cfg = space.get(i)
        if dict(cfg) == dict(chosen[0]):
            continue
        try:
            lower_fused(fn, target, config_lookup=lambda name, wl, cfg=cfg: cfg if name == case.id else None)
        except ScheduleError:
            continue  # beyond the register, thread or shared-memory budget: invalid for the tuner too
        chosen.append(cfg)
        if len(chosen) == count + 1:
            break
    return chosen


def _run(case, cfg):
    arrays, chain = case.build()
    fn, all_arrays, ref = op_function(case.op, arrays, case.attrs, chain)
    prim = lower_fused(fn, _target(case), config_lookup=lambda name, wl: cfg if name == case.id else None)
    out = np.zeros(fn.body.shape, fn.body.dtype)
    run_kernel(prim, [np.ascontiguousarray(a) for a in all_arrays] + [out])
    return out, ref, prim


ALL_CASES = TENSORCORE_CASES + EDGE_CASES + BF16_CASES + TF32_CASES
ALL_IDS = [f"{c.id}-{c.build()[0][0].dtype.name}-{k}" for k, c in enumerate(ALL_CASES)]  # -k bfloat16 selects


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_tensorcore_kernel_matches_reference_in_the_simt_interpreter(case):
    configs = _configs(case)
    assert len(configs) == 3
    tf32 = case in TF32_CASES
    for cfg in configs:
        out, ref, prim = _run(case, cfg)
        assert ("mma.m16n8k8" in str(prim)) == tf32 and ("ldmatrix" in str(prim)) != tf32
        try:
            _assert_close(out, ref, case.tol)
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg)}: {e}") from None


def _assert_tf32_rounded_to_nearest(out, ref):
    """TF32_BIAS_CASE's output `out` against its float32 reference: no bias toward zero (mean
    relative error within 5e-5, truncated operands give -6.8e-4), each output within two operand
    roundings (2 x 2**-11 relative) plus the float32 sums."""
    rel = (out.astype(np.float64) - ref) / ref
    assert abs(rel.mean()) < 5e-5, f"mean relative error {rel.mean():.2e}: TF32 operands not rounded to nearest"
    assert np.abs(rel).max() < 2 * 2.0 ** -11 + 1e-5, f"relative error up to {np.abs(rel).max():.2e}"


def test_tf32_operands_are_rounded_to_nearest():
    """tir.MMA m16n8k8 rounds its float32 operands to TF32 (cvt.rna.tf32.f32 in the PTX, one per
    fragment element loaded, not per mma), so a GEMM of positive operands is unbiased."""
    out, ref, prim = _run(TF32_BIAS_CASE, None)  # the fallback config
    _assert_tf32_rounded_to_nearest(out, ref)
    # the interpreter's rounding: to nearest, ties away from zero, overflow to inf, inf and nan kept
    one = np.float32(1.0)
    x = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 2.0 ** -11 - 2.0 ** -23,
                  np.finfo(np.float32).max, np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(_tf32(x), [one + 2.0 ** -10, -(one + 2.0 ** -10), one, np.inf, np.inf, np.nan])
    cg = CodeGenLLVM(SM90_TF32)
    cg.add_function(prim)
    text = compile_ir(cg.ir_text(), SM90_TF32, assembly=True).decode()
    assert text.count("cvt.rna.tf32.f32") == len(re.findall(r"\bld\.shared\.(?:b32|f32)", text)) > 0


def test_each_stage_count_and_copy_form_matches():
    """Double-buffered (stages 2, cp.async) and single-stage kernels, both copy forms."""
    case = EDGE_CASES[1]
    base = dict(warps_m=1, warps_n=2, frag_m=2, frag_n=1, block_k=16)
    for stages in (1, 2):
        out, ref, prim = _run(case, dict(base, stages=stages))
        _assert_close(out, ref)
        text = str(prim)
        assert "cp.async" in text and text.count("cp.async.wait(pending=%d)" % (stages - 1)) == 1


def test_fallback_config_follows_the_documented_rule():
    from tvmc.ops.gpu.tensorcore import tensorcore_config

    big = tensorcore_config(((128, 256), (512, 256), (128, 512), "float16", ()), SM90).fallback
    assert big == dict(warps_m=2, warps_n=2, frag_m=2, frag_n=4, block_k=32, stages=2)
    small = tensorcore_config(((1, 64), (10, 64), (1, 10), "float16", ()), SM90).fallback
    assert small == dict(warps_m=1, warps_n=1, frag_m=1, frag_n=2, block_k=32, stages=2)
    sm75 = tensorcore_config(((128, 256), (512, 256), (128, 512), "float16", ()), resolve_target("cuda"))
    assert sm75.knobs["stages"] == [1]


def test_too_many_accumulators_is_refused():
    case = TENSORCORE_CASES[0]
    with pytest.raises(ScheduleError, match="accumulators per thread"):
        _run(case, dict(warps_m=1, warps_n=1, frag_m=4, frag_n=8, block_k=16, stages=1))


def test_only_targets_with_tensor_cores_get_them_and_float32_only_with_allow_tf32():
    dense = get_op("nn.dense")
    f16 = ((32, 16), (8, 16), (32, 8), "float16", ())
    f32 = ((32, 16), (8, 16), (32, 8), "float32", ())
    assert dense.implementations("gpu", f16, SM90)[0].name == "dense_tensorcore.gpu"
    assert dense.implementations("gpu", f16, resolve_target("cuda-sm80"))[0].name == "dense_tensorcore.gpu"
    for name in ("cuda", "opencl"):  # sm_75 has no m16n8k16; OpenCL no warp-level matrix instructions
        assert dense.implementations("gpu", f16, resolve_target(name))[0].name == "dense.gpu"
        assert dense.implementations("gpu", f32, resolve_target(name, {"allow_tf32": "true"}))[0].name == "dense.gpu"
    assert dense.implementations("gpu", f32, SM90)[0].name == "dense.gpu"
    assert dense.implementations("gpu", f32, SM90_TF32)[0].name == "dense_tensorcore.gpu"
    assert SM90_TF32.hash != SM90.hash  # records and shipped records keep the two apart
    bf16 = ((32, 16), (8, 16), (32, 8), "bfloat16", ())
    for name in ("cuda-sm80", "cuda-sm90"):
        assert dense.implementations("gpu", bf16, resolve_target(name))[0].name == "dense_tensorcore.gpu"
    for name in ("cuda", "opencl"):
        assert dense.implementations("gpu", bf16, resolve_target(name))[0].name == "dense.gpu"
    grouped = ((1, 8, 5, 5), (8, 1, 3, 3), (1, 8, 3, 3), "float16", (("groups", 8),))
    assert get_op("nn.conv2d").implementations("gpu", grouped, SM90)[0].name == "conv2d_nchw_grouped.gpu"


# the PTX mma of each operand dtype (f32 accumulators)
MMA_PTX = {"float16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
           "bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
           "float32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}


def _dtype(case) -> str:
    return case.build()[0][0].dtype.name


@pytest.mark.parametrize("target_name", ["cuda-sm80", "cuda-sm90"])
@pytest.mark.parametrize("case", TENSORCORE_CASES + BF16_CASES[:3] + TF32_CASES[:1],
                         ids=[c.id for c in TENSORCORE_CASES] + [f"{c.id}-bfloat16" for c in BF16_CASES[:3]] +
                         ["dense_tf32"])
def test_tensorcore_ptx_has_mma_and_is_accepted_by_ptxas(case, target_name):
    tf32 = case in TF32_CASES
    target = resolve_target(target_name, {"allow_tf32": "true"} if tf32 else None)
    arrays, chain = case.build()
    fn, _, _ = op_function(case.op, arrays, case.attrs, chain)
    prim = lower_fused(fn, target)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    ptx = compile_ir(cg.ir_text(), target, assembly=True)
    text = ptx.decode()
    assert MMA_PTX[_dtype(case)] in text
    if tf32:
        assert "cvt.rna.tf32.f32" in text
    else:
        assert re.search(r"ldmatrix\.sync\.aligned\.m8n8\.x[24](\.trans)?\.shared\.b16", text)
    if case.id != "matmul_tensorcore.gpu":  # its B (N = 45) is gathered; dense and conv copy A with cp.async
        assert "cp.async.cg.shared.global" in text and "cp.async.wait_group" in text
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    info = kernel_resources(ptx, target)[prim.name]
    assert info["registers"] <= target.max_registers_per_thread and info["spill_bytes"] == 0
    assert info["smem"] >= prim.launch.shared_bytes


# the GPU's output against the interpreter's: one ulp of float16 (2**-10) or bfloat16 (2**-7)
_GPU_VS_SIMT = {"float16": dict(rtol=1e-3, atol=1e-3), "float32": dict(rtol=1e-3, atol=1e-3),
                "bfloat16": dict(rtol=8e-3, atol=8e-3)}


@pytest.mark.cuda
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_tensorcore_kernel_on_the_gpu_matches_reference_and_the_interpreter(case):
    """On an NVIDIA GPU with tensor cores: the fallback and two other configs, compiled for this
    GPU's architecture, against the numpy reference and against the SIMT interpreter's output
    (the same 16-bit operands and float32 accumulators: within one rounding of the output dtype,
    since the tensor cores sum inside an mma in their own order)."""
    from tests.targets import require, run_cuda_kernel
    from tvmc.ops.gpu.tensorcore import tensorcore_supports
    from tvmc.runtime.cuda import gpu_info

    require("cuda")
    tf32 = case in TF32_CASES
    target = resolve_target(f"cuda -mcpu={gpu_info()[1]}", {"allow_tf32": "true"} if tf32 else None)
    wl_dtype = _dtype(case)
    if not tensorcore_supports(target, ((), (), (), wl_dtype, ())):
        pytest.skip(f"{target.cpu} has no {wl_dtype} tensor-core mma that tvmc uses")
    arrays, chain = case.build()
    fn, all_arrays, ref = op_function(case.op, arrays, case.attrs, chain)
    for cfg in _configs(case):
        prim = lower_fused(fn, target, config_lookup=lambda name, wl, cfg=cfg: cfg if name == case.id else None)
        out = run_cuda_kernel(prim, target, all_arrays, np.zeros(fn.body.shape, fn.body.dtype))
        simulated, _, _ = _run(case, cfg)
        try:
            _assert_close(out, ref, case.tol)
            np.testing.assert_allclose(out.astype(np.float32), simulated.astype(np.float32), **_GPU_VS_SIMT[wl_dtype])
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg)}: {e}") from None


@pytest.mark.cuda
def test_tf32_operands_are_rounded_to_nearest_on_the_gpu():
    """On an NVIDIA GPU with TF32 tensor cores: TF32_BIAS_CASE, fallback config, unbiased (the
    mma given float32 bits as they are would truncate them: mean relative error -6.8e-4)."""
    from tests.targets import require, run_cuda_kernel
    from tvmc.ops.gpu.tensorcore import tensorcore_supports
    from tvmc.runtime.cuda import gpu_info

    require("cuda")
    target = resolve_target(f"cuda -mcpu={gpu_info()[1]}", {"allow_tf32": "true"})
    if not tensorcore_supports(target, ((), (), (), "float32", ())):
        pytest.skip(f"{target.cpu} has no TF32 tensor-core mma")
    arrays, chain = TF32_BIAS_CASE.build()
    fn, all_arrays, ref = op_function(TF32_BIAS_CASE.op, arrays, TF32_BIAS_CASE.attrs, chain)
    out = run_cuda_kernel(lower_fused(fn, target), target, all_arrays, np.zeros(fn.body.shape, fn.body.dtype))
    _assert_tf32_rounded_to_nearest(out, ref)
