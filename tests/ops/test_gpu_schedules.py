"""GPU schedules (tvmc/ops/gpu): every implementation with its fallback config and two other
configs of its space, compiled for OpenCL and run (PoCL here) against numpy; the structure the
schedules promise (shared-memory tiles, cross-thread reductions); configs beyond the
descriptor's limits refused at compile time."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_ops import Case, _assert_close, _packed_weight, _winograd_weight, bias_relu, conv, n, pool, qi, zp
from test_tensorcore import TENSORCORE_CASES
from util import op_function, run_op

from tests.targets import require
from tvmc.autotune.task import tasks_of_functions
from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_row_weight, pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
from tvmc.ops.cpu.int8_mmla import pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight
from tvmc.errors import ScheduleError
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import all_ops
from tvmc.target import resolve_target

OPENCL = resolve_target("opencl")

# one case per GPU implementation (the implementation name is the id)
GPU_CASES = [
    Case("injective.gpu", "add", lambda r: [n(r, (2, 6, 5, 16)), n(r, (6, 1, 1))]),
    Case("reduce.gpu", "mean", lambda r: [n(r, (2, 3, 7, 9))], dict(axis=(2, 3), keepdims=1)),
    Case("topk.gpu", "topk_indices", lambda r: [np.round(n(r, (3, 9)))], dict(axis=1, k=4, largest=1)),
    Case("pool.gpu", "nn.max_pool2d", lambda r: [n(r, (1, 5, 14, 14))], pool((3, 3), (2, 2), (1, 1, 1, 1), ceil=1)),
    Case("global_pool.gpu", "nn.global_avg_pool2d", lambda r: [n(r, (2, 5, 7, 9))], {},
         lambda r: [("add", {}, [n(r, (1, 5, 1, 1))])]),
    Case("softmax.gpu", "nn.softmax", lambda r: [n(r, (3, 7, 45), 3.0)], dict(axis=2)),
    Case("log_softmax.gpu", "nn.log_softmax", lambda r: [n(r, (3, 37, 5), 3.0)], dict(axis=1)),
    Case("lrn.gpu", "nn.lrn", lambda r: [n(r, (1, 10, 6, 7), 3.0)], dict(size=5, alpha=1e-2, beta=0.75, bias=1.0)),
    Case("dense.gpu", "nn.dense", lambda r: [n(r, (37, 70)), n(r, (50, 70))], {},
         lambda r: [("add", {}, [n(r, (50,))]), ("nn.relu", {}, [])]),
    Case("dense_small_batch.gpu", "nn.dense", lambda r: [n(r, (3, 700)), n(r, (50, 700))], {},
         lambda r: [("add", {}, [n(r, (50,))]), ("nn.relu", {}, [])]),
    Case("matmul.gpu", "nn.matmul", lambda r: [n(r, (2, 33, 20)), n(r, (20, 45))]),
    Case("dense_pack.gpu", "nn.dense_pack", lambda r: [n(r, (3, 50)), n(r, (5, 50, 8))]),
    Case("matmul_tn.gpu", "nn.matmul_tn", lambda r: [n(r, (2, 9, 24)), n(r, (2, 9, 49))],
         {"rows": 21, "columns": 48, "padded_rows": 24}),
    Case("conv2d_nchw.gpu", "nn.conv2d", lambda r: [n(r, (1, 8, 15, 15)), n(r, (16, 8, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), bias_relu(16)),
    Case("conv2d_nchw_im2col.gpu", "nn.conv2d", lambda r: [n(r, (2, 5, 11, 13)), n(r, (12, 5, 3, 3))],
         conv(padding=(1, 0, 1, 2), dilation=(1, 2)), bias_relu(12)),
    Case("conv2d_nchw_grouped.gpu", "nn.conv2d", lambda r: [n(r, (1, 12, 13, 13)), n(r, (12, 1, 3, 3))],
         conv(padding=(1, 1, 1, 1), groups=12)),
    Case("conv2d_transpose_nchw.gpu", "nn.conv2d_transpose", lambda r: [n(r, (1, 6, 5, 7)), n(r, (6, 4, 3, 3))],
         dict(strides=(2, 2), padding=(1, 0, 1, 2), dilation=(1, 1), output_padding=(1, 1), groups=1)),
    Case("conv2d_transpose_nchw_grouped.gpu", "nn.conv2d_transpose",
         lambda r: [n(r, (2, 4, 4, 3)), n(r, (4, 3, 2, 3))],
         dict(strides=(3, 2), padding=(0, 0, 0, 0), dilation=(2, 2), output_padding=(0, 0), groups=2)),
    Case("conv2d_nchwc.gpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 2, 9, 9, 4)), n(r, (2, 2, 3, 3, 4, 8))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW8c")),
    Case("qnn_dense.gpu", "qnn.dense",
         lambda r: [qi(r, (5, 13), "uint8"), qi(r, (12, 13)), zp(3), zp(np.arange(12) - 6)]),
    Case("qnn_matmul.gpu", "qnn.matmul", lambda r: [qi(r, (2, 5, 7), "uint8"), qi(r, (7, 33)), zp(100), zp(2)]),
    Case("qnn_conv2d_nchw.gpu", "qnn.conv2d",
         lambda r: [qi(r, (1, 5, 9, 11), "uint8"), qi(r, (6, 5, 3, 3)), zp(131), zp(0)], conv(padding=(1, 1, 1, 1))),
    Case("dense_u8s8.gpu", "qnn.dense_u8s8",
         lambda r: [qi(r, (5, 30), "uint8"), pack_dense_u8s8_weight(qi(r, (37, 30)))], {"units": 37}),
    Case("conv2d_nchwc_u8s8.gpu", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (1, 1, 7, 9, 3), "uint8"), pack_conv2d_u8s8_weight(qi(r, (32, 3, 3, 3)), 3)],
         dict(conv(strides=(2, 2), padding=(1, 0, 1, 2)), pad_value=9, out_layout="NCHW16c")),
    Case("dense_u8s8_mmla.gpu", "qnn.dense_u8s8_mmla",
         lambda r: [qi(r, (5, 30), "uint8"), pack_dense_u8s8_mmla_weight(qi(r, (37, 30)))], {"units": 37}),
    Case("conv2d_nchwc_u8s8_mmla.gpu", "qnn.conv2d_nchwc_u8s8_mmla",
         lambda r: [qi(r, (1, 1, 7, 9, 8), "uint8"), pack_conv2d_u8s8_mmla_weight(qi(r, (16, 8, 3, 3)), 8)],
         dict(conv(strides=(2, 2), padding=(1, 0, 1, 2)), pad_value=9, out_layout="NCHW16c")),
    Case("conv2d_nchw_u8s8.gpu", "qnn.conv2d_nchw_u8s8",
         lambda r: [qi(r, (1, 3, 9, 16), "uint8"), pack_conv2d_u8s8_row_weight(qi(r, (16, 3, 3, 3)))],
         {"strides": (2, 1), "out_width": 11, "out_layout": "NCHW16c"}),
    Case("window_reduce.gpu", "nn.col2im", lambda r: [n(r, (2, 18, 9))],
         dict(image_shape=(7, 8), block_shape=(3, 2), strides=(2, 3), dilation=(2, 1), padding=(1, 0, 2, 2))),
    Case("conv2d_winograd_nchwc.gpu", "nn.conv2d_winograd_nchwc",
         lambda r: [n(r, (1, 2, 7, 6, 4)), _winograd_weight(r, (8, 8, 3, 3), 2, 4, 4)],
         dict(padding=(1, 1, 1, 1), tile_size=2, out_layout="NCHW4c")),
    Case("winograd_weight_transform.gpu", "nn.winograd_weight_transform",
         lambda r: [_packed_weight(r, (12, 8, 3, 3), 4, 4)], dict(tile_size=4)),
    # issue 18, group B (misc ops)
    Case("det.gpu", "det", lambda r: [n(r, (3, 2, 5, 5))]),
    # issue 18 point 5: the data-dependent selections (NonZero, Compress, Unique, TopK, NMS)
    Case("selection.gpu", "nonzero", lambda r: [r.integers(-1, 2, (3, 5)).astype(np.float32)]),
]
BY_IMPL = {c.id: c for c in GPU_CASES}


def _gpu_implementations() -> set:
    return {impl.name for op in all_ops().values() for impl in op.strategy.get("gpu", [])}


def test_every_gpu_implementation_has_a_case():
    """OpenCL cases here; the tensor-core kernels, which OpenCL has no instructions for, in
    test_tensorcore.py (SIMT interpreter and ptxas)."""
    assert _gpu_implementations() == set(BY_IMPL) | {c.id for c in TENSORCORE_CASES}


def _function(case):
    arrays, chain = case.build()
    return op_function(case.op, arrays, case.attrs, chain)


def _configs(case, count=2):
    """The fallback config of the case's implementation and `count` others of its space that fit
    the descriptor (seeded choice)."""
    fn, _, _ = _function(case)
    task = next(t for t in tasks_of_functions([fn], OPENCL) if t.impl == case.id)
    space = task.config_space(OPENCL)
    fallback = space.fallback_config()
    indices = list(range(len(space)))
    random.Random(case.id).shuffle(indices)
    chosen = []
    for i in indices:
        cfg = space.get(i)
        if dict(cfg) == dict(fallback):
            continue
        try:
            lower_fused(fn, OPENCL, config_lookup=lambda name, wl, cfg=cfg: cfg if name == case.id else None)
        except ScheduleError:
            continue  # beyond the descriptor's limits: tuning records such configs as invalid
        chosen.append(cfg)
        if len(chosen) == count:
            break
    return [fallback] + chosen


@pytest.mark.parametrize("impl", sorted(BY_IMPL))
def test_gpu_schedule_fallback_and_two_other_configs(impl):
    target = require("opencl")
    case = BY_IMPL[impl]
    configs = _configs(case)
    assert len(configs) == 3, f"{impl}: fewer than two valid non-default configs"
    arrays, chain = case.build()
    for cfg in configs:
        out, ref = run_op(case.op, arrays, case.attrs, chain, impl=impl, target=target.target, config=cfg)
        try:
            _assert_close(out, ref, case.tol)
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg)}: {e}") from None


def _lower(case, **knobs):
    fn, _, _ = _function(case)
    task = next(t for t in tasks_of_functions([fn], OPENCL) if t.impl == case.id)
    cfg = task.config_space(OPENCL).fallback_config()
    cfg.update(knobs)
    return lower_fused(fn, OPENCL, config_lookup=lambda name, wl: cfg if name == case.id else None)


def test_gemm_stages_operand_tiles_in_shared_memory_between_barriers():
    prim = _lower(BY_IMPL["dense.gpu"])
    text = str(prim)
    assert "allocate arg0_shared" in text and "(shared)" in text and text.count("barrier(shared)") == 2
    assert prim.launch.block[0] * prim.launch.block[1] <= OPENCL.max_threads_per_block
    assert prim.launch.shared_bytes > 0


def test_softmax_is_a_block_per_row_with_cross_thread_reductions():
    prim = _lower(BY_IMPL["softmax.gpu"])
    assert prim.launch.grid == (21, 1, 1)  # 3 x 7 rows
    assert "softmax_max_red" in str(prim) and "softmax_sum_red" in str(prim)


LARGE_DENSE = Case("dense.gpu", "nn.dense", lambda r: [n(r, (128, 64)), n(r, (256, 64))])


@pytest.mark.parametrize("knobs,limit", [
    (dict(tile_x=32, tile_y=16), "512 threads per block .* allows 256"),  # 32 x 16 threads
    (dict(tile_y=8, reg_y=8, tile_x=32, reg_x=8, tile_k=32), "40960 bytes of shared memory .* allows 32768"),
])
def test_configs_beyond_the_descriptor_are_schedule_errors(knobs, limit):
    """(64 + 256) rows x 32 k x 4 bytes of operand tiles exceed the generic GPU's 32 KiB."""
    with pytest.raises(ScheduleError, match=limit) as err:
        _lower(LARGE_DENSE, **knobs)
    assert "\n" not in str(err.value) and "fused_nn_dense" in str(err.value)


def test_injective_contiguous_data_moves_as_float4():
    from tvmc.codegen.opencl import CodeGenOpenCL

    case = Case("injective.gpu", "add", lambda r: [n(r, (4, 64, 32)), n(r, (4, 64, 32))], {},
                lambda r: [("nn.relu", {}, []), ("exp", {}, [])])
    cg = CodeGenOpenCL(OPENCL)
    cg.add_function(_lower(case))
    src = cg.source()
    assert src.count("vload4(") == 2 and "vstore4(exp(tvmc_vmax_float4(" in src
