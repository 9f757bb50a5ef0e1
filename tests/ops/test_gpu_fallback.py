"""The occupancy-aware fallback of the GEMM-like GPU tilings (tvmc/ops/gpu/tiling.gemm_tile_fallback,
used by conv2d direct and im2col, conv2d_transpose, dense and matmul): the documented rule on
hand-derived cases, its launch as the schedule builds it, the rule without a multiprocessor count
(OpenCL descriptors) unchanged, and the kernels each multiprocessor count leads to computed right
in the SIMT interpreter (tvmc/tir/simt.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_ops import Case, _assert_close, bias_relu, conv, n
from util import op_function

from tvmc.autotune.task import Task, tasks_of_functions
from tvmc.ops.fused import lower_fused
from tvmc.ops.gpu.tiling import gemm_tile_fallback, pow2_at_least
from tvmc.target import resolve_target
from tvmc.tir.simt import run_kernel

SM90 = resolve_target("cuda-sm90")      # 132 multiprocessors
CUDA = resolve_target("cuda")           # 40
OPENCL = resolve_target("opencl")       # no multiprocessor count


def _knobs(fb) -> tuple:
    return fb["tile_y"], fb["tile_x"], fb["reg_y"], fb["reg_x"]


@pytest.mark.parametrize("target,shape,register_tile,expected", [
    # ResNet-18's 7x7x512 conv at batch 1 (rows 512 channels, 7 columns, 7 output rows): 25088
    # outputs, fewer than 8 warps x 132 SMs of threads even one per thread: 1 x 1; the smallest
    # block (8 x 4 threads) gives 896 blocks, 8 rows of threads 448 >= 2 x 132, 16 rows 224 < 264
    (SM90, (512, 7, 7), (4, 1), (8, 8, 1, 1)),
    # the same on 40 SMs: 2 x 1 outputs per thread make 12544 >= 8 x 32 x 40 threads; blocks of
    # 16 x 8 threads (16 channel pairs): 112 >= 80 blocks, 32 rows would make 56
    (CUDA, (512, 7, 7), (4, 1), (16, 8, 2, 1)),
    # ResNet-18's 56x56x64 conv at batch 16 (16 x 56 output rows): work for every SM with the whole
    # register tile; tile_y grows until the 64 channels / 4 are covered (as before the rule)
    (SM90, (64, 56, 16 * 56), (4, 1), (16, 16, 4, 1)),
    # BERT's [128, 256] x [256, 256] dense at batch 1: 4x4, 2x4, 2x2, 1x2 all leave fewer than
    # 33792 threads, 1 x 1 gives 32768 (as close as it gets); 4 rows of 16 threads: 512 blocks
    (SM90, (128, 256, 1), (4, 4), (4, 16, 1, 1)),
    # the same dense on 40 SMs: 2 x 2 gives 8192 < 10240 threads, 1 x 2 16384; 8 rows: 128 blocks
    (CUDA, (128, 256, 1), (4, 4), (8, 16, 1, 2)),
])
def test_fallback_follows_the_documented_rule(target, shape, register_tile, expected):
    rows, cols, others = shape
    fb = gemm_tile_fallback(target, rows, cols, *register_tile, others=others)
    assert _knobs(fb) == expected
    tile_y, tile_x, reg_y, reg_x = expected
    blocks = others * math.ceil(rows / (tile_y * reg_y)) * math.ceil(cols / (tile_x * reg_x))
    assert blocks >= 2 * target.multiprocessor_count
    assert tile_x * tile_y <= target.max_threads_per_block


@pytest.mark.parametrize("target,shape,expected", [
    # ResNet-18's 7x7x512 conv at batch 16: 4 x 1 outputs per thread give 100352 threads, 3 x the
    # 33792 asked for: blocks of 128 x 8 threads (112 of them), as before the rule (0.79 ms on an
    # H100 against 1.94 for the 448 blocks of 32 x 8 the grid's demand gave)
    (SM90, (512, 7, 16 * 7), (128, 8, 4, 1)),
    # MobileNetV2's 1x1 conv 96 -> 24 at 56 x 56, batch 16: tile_y covers the 24 / 4 channel rows
    (SM90, (24, 56, 16 * 56), (8, 16, 4, 1)),
])
def test_with_ample_parallelism_the_grid_asks_nothing(target, shape, expected):
    rows, cols, others = shape
    fb = gemm_tile_fallback(target, rows, cols, 4, 1, others=others)
    assert _knobs(fb) == expected
    with_demand = gemm_tile_fallback(target, rows, cols, 4, 1, others=1)  # one row of blocks: short of work
    assert with_demand["reg_y"] * with_demand["reg_x"] < 4


@pytest.mark.parametrize("rows,cols,others,register_tile", [
    (512, 7, 7, (4, 1)), (64, 56, 896, (4, 1)), (128, 256, 1, (4, 4)), (1, 1000, 1, (4, 4)),
    (1000, 1, 1, (4, 4)), (3, 5, 2, (4, 4)), (4096, 4096, 1, (4, 4)),
])
def test_without_a_multiprocessor_count_the_fallback_fills_the_block(rows, cols, others, register_tile):
    """OpenCL descriptors state no multiprocessor count: nothing is asked of the grid, and the
    fallback is the one before the rule (the register tile where the extent holds 4 of them,
    half a warp of columns, rows of threads up to the descriptor's limit)."""
    reg_y = register_tile[0] if rows >= 4 * register_tile[0] else 1
    reg_x = register_tile[1] if cols >= 4 * register_tile[1] else 1
    tile_x = min(OPENCL.thread_warp_size // 2, pow2_at_least(-(-cols // reg_x)))
    tile_y = min(OPENCL.max_threads_per_block // tile_x, pow2_at_least(-(-rows // reg_y)))
    fb = gemm_tile_fallback(OPENCL, rows, cols, *register_tile, others=others)
    assert _knobs(fb) == (tile_y, tile_x, reg_y, reg_x)


def test_resnet18_deep_conv_fallback_launches_a_block_per_eight_channels_of_a_row():
    """The 7x7x512 3x3 conv at batch 1 ran as 7 blocks of 896 threads (one per output row, 512
    channels each, 512 reduction steps of one channel); now 448 blocks of 7 x 8 threads."""
    wl = ((1, 512, 7, 7), (512, 512, 3, 3), (1, 512, 7, 7), "float32",
          (("dilation", (1, 1)), ("groups", 1), ("padding", (1, 1, 1, 1)), ("strides", (1, 1))))
    task = Task("nn.conv2d", "conv2d_nchw.gpu", wl, ("float32", "float32"), 2 * 512 * 49 * 512 * 9)
    cfg = task.config_space(SM90).fallback_config()
    assert cfg["tile_k"] == 8  # 8 channels x 9 taps per shared-memory step: 64 steps
    prim = lower_fused(task.function(), SM90, config_lookup=lambda name, w: cfg if name == task.impl else None)
    assert math.prod(prim.launch.grid) == 448 and prim.launch.block == (7, 8, 1)
    assert prim.launch.shared_bytes <= SM90.max_shared_memory_per_block // 2


CASES = [
    Case("conv2d_nchw.gpu", "nn.conv2d", lambda r: [n(r, (1, 16, 7, 7)), n(r, (24, 16, 3, 3))],
         conv(padding=(1, 1, 1, 1)), bias_relu(24)),
    Case("conv2d_nchw_im2col.gpu", "nn.conv2d", lambda r: [n(r, (2, 5, 7, 9)), n(r, (16, 5, 3, 3))],
         conv(padding=(1, 0, 1, 2), dilation=(1, 2)), bias_relu(16)),
    Case("dense.gpu", "nn.dense", lambda r: [n(r, (37, 70)), n(r, (50, 70))]),
    Case("matmul.gpu", "nn.matmul", lambda r: [n(r, (2, 33, 20)), n(r, (20, 45))]),
]


def _fallback_run(case, target):
    arrays, chain = case.build()
    fn, all_arrays, ref = op_function(case.op, arrays, case.attrs, chain)
    task = next(t for t in tasks_of_functions([fn], target) if t.impl == case.id)
    cfg = task.config_space(target).fallback_config()
    prim = lower_fused(fn, target, config_lookup=lambda name, wl: cfg if name == case.id else None)
    out = np.zeros(fn.body.shape, fn.body.dtype)
    run_kernel(prim, [np.ascontiguousarray(a) for a in all_arrays] + [out])
    return dict(cfg), out, ref


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fallback_kernels_match_the_reference_in_the_simt_interpreter(case):
    """On cuda-sm90 these small kernels drop to 1 x 1 register tiles; on a descriptor of one
    multiprocessor they keep larger ones: both computed right."""
    one_sm = resolve_target("cuda-sm90", {"multiprocessor_count": "1"})
    seen = []
    for target in (SM90, one_sm):
        cfg, out, ref = _fallback_run(case, target)
        seen.append((cfg["reg_y"], cfg["reg_x"]))
        try:
            _assert_close(out, ref, case.tol)
        except AssertionError as e:
            raise AssertionError(f"{target.multiprocessor_count} SMs, config {cfg}: {e}") from None
    assert seen[0] == (1, 1) and seen[1] != (1, 1), seen
