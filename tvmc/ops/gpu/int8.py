"""GPU int8 kernels: the raw u8 x s8 -> int32 products of qnn.dense_u8s8 and qnn.conv2d_nchwc_u8s8
(tvmc/ops/cpu/int8.py's computes, with their compile-time packed weights) as shared-memory tiled
GEMMs whose reduction goes 4 int8 values at a time through one 32-bit dot-product step (TVM's
CUDA conv2d_NCHWc_int8 and dense_int8 schedules, topi/cuda/conv2d_int8.py and dense.py, which
use dp4a the same way).

The step (tir.DotU8S8 with one lane, Stage.tensorize with DotU8S8Intrin(1)): an int32
accumulator += the sum of the products of 4 consecutive uint8 data values and the 4 int8
weights packed beside them, spelled by the code generator as
  CUDA    PTX dp4a.u32.s32 (sm_61 on: targets/isa/nvptx64.yaml dot_u8s8; LLVM's
          llvm.nvvm.idp4a.u.s), both operands loaded as 32-bit words;
  OpenCL  the dot(uchar4, char4) of cl_khr_integer_dot_product where the device compiler
          defines __opencl_c_integer_dot_product_input_4x8bit, else widening multiply-adds of
          the vload4'ed uchar4 and char4 (tvmc/codegen/opencl.py's tvmc_dot_u8s8).
u8 x s8, not s8 x s8: int8 data enters as x + 128 (uint8) and the zero-point term the CPU kernels
use absorbs the shift (passes/alter_op_layout.py qnn_dense / qnn_conv2d: sum (x - x_zp) w =
sum x_u8 w - (128 + x_zp) sum w, a compile-time constant per output channel), so the same
rewrite, packing and epilogue serve every target. Exact: each product fits 16 bits, the int32
accumulation wraps as the reference's does.

Weights are packed at compile time with the 4 reduction values of a step contiguous (16 x 4
blocks: [N/16, K/4, 16, 4] for dense, [O/16, C/ib, KH, KW, ib/4, 16, 4] for conv2d, whose data
is NCHW[ib]c, ib a multiple of 4: TVM's conv2d_NCHWc_int8 ic blocks of 4, here of ib).

dense  rows = M, columns = the output's N; per block (tile_y * reg_y) x (tile_x * reg_x)
       outputs, reg_y x reg_x int32 accumulators per thread; K in steps of tile_k quads (4 k
       values each): per step the data rows [rows, 4 tile_k] and the weight blocks they meet are
       staged in shared memory by the whole block, 4 bytes per thread and copy (one 32-bit word).
conv2d rows = the 16 output channels of an NCHW16c block, columns = output columns OW, block
       positions (blockIdx.z) = (n, output channel block, output row); the reduction (input
       channel blocks ico, kh, kw, quads, 4) with ico in steps of tile_k: per step the padded
       input window [tile_k, window rows, window columns, ib] (padding inlined into the copy) and
       the weights [tile_k, KH, KW, ib/4, 16, 4] of the channel block.
The fused epilogue (the zero-point term, a requantize to int8/uint8, an activation...) is
applied to each thread's accumulators as they are stored. An epilogue that changes the shape
falls back on one output per thread (tiling.schedule_per_thread, without the dot step).

Knobs: tile_x, tile_y, reg_x, reg_y (tiling.define_gemm_tile), tile_k (quads for dense, input
channel blocks for conv2d). Fallback: tiling.gemm_tile_fallback from the descriptor (threads per
block, warp size, multiprocessor count) with register tiles of REGISTER_TILE (dense: 4 x 4 as
the float GEMM; conv2d: 4 channels x 1 column as the float direct conv); tile_k: dense the largest
divisor of K/4 <= TILE_K_QUADS (32 k values per step), conv2d the largest divisor of C/ib <=
TILE_K_BLOCKS whose two shared tiles fit half of max_shared_memory_per_block.

Applies where Target.gpu_int8_dot holds: a CUDA descriptor whose ISA table has the dp4a form,
or an OpenCL one (OpenCL C always has char4 / uchar4 arithmetic); on other GPU targets
AlterOpLayout leaves qnn.dense and qnn.conv2d as they are, on the generic per-thread kernels.
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.int8 import BLOCK_N
from tvmc.ops.gpu.tiling import cooperative_fetch, define_gemm_tile, schedule_per_thread, tile_gemm_output
from tvmc.tir.tensorize import DotU8S8Intrin

QUAD = 4                 # int8 values per dot-product step (one 32-bit word)
TILE_K_QUADS = 8         # dense fallback: quads per shared-memory step (32 k values)
TILE_K_BLOCKS = 4        # conv2d fallback: input channel blocks per step at most
DENSE_REGISTER_TILE = (4, 4)
CONV_REGISTER_TILE = (4, 1)


def _gemm_tile_dot(s, out, product, cfg, row_axis, col_axis, split_reduce, order, global_operands=()):
    """The tiled GEMM of `product` (a u8 x s8 reduction whose last reduce axis is the quad of 4)
    into `out` (its elementwise epilogue, same rank and axes; its extents may be smaller: a padded
    product), as tiling.schedule_gemm_tile but with the reduction ordered
    (split_reduce outer, split_reduce inner, *order, row, col, quad) and the quad tensorized into
    the one-lane dot step. Operands in `global_operands` are read from global memory, not
    staged. Returns the accumulator."""
    acc, xt, yt, operands = tile_gemm_output(s, out, product, cfg, row_axis, col_axis, vector_x=False)
    ast = s[acc]
    *_, quad = ast.op.reduce_axis
    k_outer, k_inner = ast.split(split_reduce, cfg["tile_k"])
    ast.reorder(k_outer, k_inner, *order, *ast.op.axis, quad)
    for iv in ast.op.axis:
        ast.unroll(iv)
    ast.tensorize(quad, DotU8S8Intrin(1))
    for t in operands:
        if any(t.uid == g.uid for g in global_operands):
            continue
        cache = s.cache_read(t, "shared", [acc])
        s[cache].compute_at(ast, k_outer)
        cooperative_fetch(s, cache, xt.extent, yt.extent, vector_lanes=QUAD)
    return acc


# ---- dense ------------------------------------------------------------------------------------

def dense_u8s8_gpu_config(workload, target) -> ConfigSpace:
    """Knobs of dense_u8s8.gpu (workload: data [M, K], packed weight [N/16, K/4, 16, 4], out
    [M, N], ...): the GEMM tile over M x N (tiling.define_gemm_tile) and tile_k, quads of K per
    shared-memory step (module docstring)."""
    out = workload[2]
    quads = workload[1][1]
    space = ConfigSpace()
    define_gemm_tile(space, target, out[0], out[1], *DENSE_REGISTER_TILE)
    space.define_split("tile_k", quads, fallback=TILE_K_QUADS, max_factor=16)
    return space


def schedule_dense_u8s8_gpu(s, out, anchor, cfg, target):
    """Fused dense_u8s8 + epilogue as the tiled dot-product GEMM (module docstring). The padded
    product of an output narrower than its packed blocks (`units`) is tiled by the output's
    extents (its copy inlined). Raises ScheduleError when `anchor` is not a dense_u8s8."""
    product = next((t for t in [anchor, *anchor.op.input_tensors()] if t.op is not None and t.op.reduce_axis), None)
    if product is None or anchor.op.tag != "dense_u8s8":
        raise ScheduleError(f"schedule_dense_u8s8_gpu: {anchor.name} is not a dense_u8s8")
    if tuple(out.shape) != tuple(anchor.shape):
        schedule_per_thread(s, out, target.max_threads_per_block)
        return
    m, n = product.op.axis
    ko, _ = product.op.reduce_axis
    # the weight blocks a block's columns meet: a count bounds inference can prove constant only
    # where those columns are whole blocks of 16 (else, e.g. a classifier of 10 or 1000 columns, or
    # tiles of fewer than 16 columns, the weights come from global memory, each thread reading its
    # columns' quads)
    weight = next(t for t in product.op.input_tensors() if t.dtype == "int8")
    whole = min(cfg["tile_x"] * cfg["reg_x"], out.shape[1]) % BLOCK_N == 0
    _gemm_tile_dot(s, out, product, cfg, m, n, ko, (), () if whole else (weight,))


# ---- conv2d -------------------------------------------------------------------------------------

def _conv_shared_bytes(cfg, data, weight, attrs, tile_k: int) -> int:
    """Bytes of the two shared tiles of one step: the padded input window and the weights."""
    ibp = weight[4] * QUAD
    kh, kw = weight[2], weight[3]
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    cols = cfg["tile_x"] * cfg["reg_x"]
    window = ((kh - 1) * dh + 1) * ((cols - 1) * sw + (kw - 1) * dw + 1) * ibp
    return tile_k * (window + kh * kw * ibp * weight[5])


def conv2d_u8s8_gpu_config(workload, target) -> ConfigSpace:
    """Knobs of conv2d_nchwc_u8s8.gpu (workload: data [N, C/ib, H, W, ib], packed weight
    [O/16, C/ib, KH, KW, ib/4, 16, 4], out [N, O/16, OH, OW, 16], ...): the GEMM tile over the 16
    channels of a block x OW, (N, O/16, OH) as block positions, and tile_k, input channel blocks
    per shared-memory step (module docstring)."""
    data, weight, out = workload[:3]
    attrs = dict(workload[-1])
    space = ConfigSpace()
    define_gemm_tile(space, target, out[4], out[3], *CONV_REGISTER_TILE, others=out[0] * out[1] * out[2])
    fits = [f for f in range(1, min(data[1], TILE_K_BLOCKS) + 1)
            if data[1] % f == 0 and _conv_shared_bytes(space.fallback, data, weight, attrs, f)
            <= target.max_shared_memory_per_block // 2]
    space.define_split("tile_k", data[1], fallback=max(fits or [1]), max_factor=16)
    return space


def schedule_conv2d_nchwc_u8s8_gpu(s, out, anchor, cfg, target):
    """Fused conv2d_nchwc_u8s8 + epilogue as the tiled dot-product GEMM (module docstring).
    Raises ScheduleError when `anchor` is not a conv2d_nchwc_u8s8."""
    if anchor.op.tag != "conv2d_nchwc_u8s8":
        raise ScheduleError(f"schedule_conv2d_nchwc_u8s8_gpu: {anchor.name} is not a conv2d_nchwc_u8s8")
    if tuple(out.shape) != tuple(anchor.shape):
        schedule_per_thread(s, out, target.max_threads_per_block)
        return
    n, oco, oh, ow, oci = anchor.op.axis
    ico, kh, kw, icq, _ = anchor.op.reduce_axis
    _gemm_tile_dot(s, out, anchor, cfg, oci, ow, ico, (kh, kw, icq))
