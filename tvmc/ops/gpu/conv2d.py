"""GPU schedules for NCHW conv2d (and conv2d_transpose, which is a conv2d of its dilated input).

Both forms tile the output like a GEMM whose rows are output channels and whose columns are the
output columns of one output row (tiling.schedule_gemm_tile): a block computes
(tile_y * reg_y) channels x (tile_x * reg_x) columns of one (n, oh) row, each thread reg_y
channels x reg_x columns in registers; per step of the split reduction, the block stages the
operands it needs in shared memory.

direct:  reduction (ic, kh, kw), ic split by tile_k: per step the weights [channels, tile_k,
         KH, KW] and the padded input window [tile_k, (KH-1)*dh+1 rows, (cols-1)*sw+(KW-1)*dw+1]
         are staged (TVM's conv2d_direct).
im2col:  reduction over k = (ic, kh, kw) flattened (nn_conv2d.conv2d_nchw_im2col), split by
         tile_k: per step the weight panel [channels, tile_k] and the im2col panel [tile_k,
         cols], gathered from the padded input while it is staged, are a plain GEMM step.
grouped and depthwise (groups > 1): one output per thread (tiling.schedule_per_thread).

Knobs: tile_x, tile_y, reg_x, reg_y (tiling.define_gemm_tile), tile_k.
Fallback: the occupancy-aware rule of tiling.gemm_tile_fallback over rows = output channels,
columns = OW and N * OH block positions: a register tile of 4 channels x 1 column per thread
(halved while the kernel would leave the descriptor's multiprocessors short of threads or
blocks), tile_x the power of two covering OW (<= 16), tile_y grown while the grid keeps two
blocks per multiprocessor (ResNet-18's 7 x 7 x 512 layers at batch 1: 448 blocks of 7 x 8
threads, one output each, where the rule without the multiprocessor count gave 7 blocks of
7 x 128); tile_k: direct, the largest divisor of C whose two shared tiles fit half of
max_shared_memory_per_block (8 at most: 8 channels x KH x KW taps per step; where even one
channel does not fit, reg_y and then tile_y are halved until it does); im2col, the largest
divisor of C*KH*KW <= 8.
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.gpu.tiling import define_gemm_tile, schedule_gemm_tile, schedule_per_thread
from tvmc.te.extent import same_shape

TILE_K_MAX = 8
# register tile per thread the fallback starts from: 4 output channels x 4 output columns (per
# reduction step 4 weights and 4 input values for 16 multiply-adds); the fallback rule halves it
# where the kernel would have too few threads (tiling.gemm_tile_fallback), so batch 1 mostly runs
# smaller ones. Measured on an H100 (bench/results/cuda_h100.md, sixth run), float32, fallback
# configs, against 4 x 1: ResNet-18 batch 16 13.13 -> 9.56 ms (8 x 4: 20.97, 4 x 8: 9.42),
# MobileNetV2 batch 16 3.24 -> 3.22, ResNet-18 batch 1 2.13 -> 2.12, MobileNetV2 batch 1 0.503 ->
# 0.517.
REGISTER_TILE = (4, 4)


def _direct_shared_bytes(cfg, weight, attrs, tile_ic: int, itemsize: int = 4) -> int:
    _, _, kh, kw = weight
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    channels = cfg["tile_y"] * cfg["reg_y"]
    cols = cfg["tile_x"] * cfg["reg_x"]
    window = ((kh - 1) * dh + 1) * ((cols - 1) * sw + (kw - 1) * dw + 1)
    return itemsize * tile_ic * (channels * kh * kw + window)


def conv2d_direct_config(workload, target) -> ConfigSpace:
    """Config space of conv2d_nchw.gpu on workload (data, weight, out shape, dtype, attrs);
    conv2d_transpose's weight is IOHW, so the reduction's channels are read from the data."""
    data, weight, out = workload[:3]
    attrs = dict(workload[-1])
    space = ConfigSpace()
    define_gemm_tile(space, target, out[1], out[3], *REGISTER_TILE, others=out[0] * out[2])
    c = data[1]
    kernel = (0, 0) + tuple(weight[2:])

    def fitting(budget):
        return [f for f in range(1, min(c, TILE_K_MAX) + 1)
                if c % f == 0 and _direct_shared_bytes(space.fallback, kernel, attrs, f) <= budget]

    # large kernels (AlexNet's 11 x 11): fewer channels per thread, then per block, until one
    # input channel's tiles fit the descriptor's shared memory
    fb = space.fallback
    while not fitting(target.max_shared_memory_per_block) and fb["tile_y"] * fb["reg_y"] > 1:
        if fb["reg_y"] > 1:
            fb["reg_y"] //= 2
        else:
            fb["tile_y"] //= 2
    fits = fitting(target.max_shared_memory_per_block // 2) or fitting(target.max_shared_memory_per_block)
    space.define_split("tile_k", c, fallback=max(fits or [1]), max_factor=32)
    return space


def conv2d_im2col_config(workload, target) -> ConfigSpace:
    """Config space of conv2d_nchw_im2col.gpu: the GEMM tile and tile_k over C*KH*KW."""
    data, weight, out = workload[:3]
    space = ConfigSpace()
    define_gemm_tile(space, target, out[1], out[3], *REGISTER_TILE, others=out[0] * out[2])
    space.define_split("tile_k", data[1] * weight[2] * weight[3], fallback=TILE_K_MAX, max_factor=32)
    return space


def schedule_conv2d_direct(s, out, anchor, cfg, target):
    """Fused conv2d (groups 1) + epilogue: the direct form (module docstring)."""
    if not same_shape(out.shape, anchor.shape):
        schedule_per_thread(s, out, target.max_threads_per_block)
        return
    n, oc, oh, ow = anchor.op.axis
    ic, *_ = anchor.op.reduce_axis  # direct: (ic, kh, kw); im2col: k, (ic, kh, kw) flattened
    schedule_gemm_tile(s, out, anchor, cfg, row_axis=oc, col_axis=ow, split_reduce=ic)


def schedule_conv2d_im2col(s, out, anchor, cfg, target):
    """Fused conv2d as im2col + GEMM + epilogue (module docstring)."""
    schedule_conv2d_direct(s, out, anchor, cfg, target)
