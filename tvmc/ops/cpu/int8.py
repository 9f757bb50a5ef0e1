"""CPU int8 kernels: u8 x s8 -> int32 matrix products on the dot-product instructions of the target
(TVM's dense_vnni and conv2d_NCHWc_int8 schedules, topi/x86/dense.py and conv2d_int8.py; MLAS's
u8s8 QGEMM kernels).

Every kernel computes the raw product of uint8 data and int8 weights, accumulated in int32; the
zero-point corrections (x_zp * sum_k w, ...) are the graph's (the qnn lowering folds them into a
bias). The weights are packed at compile time, by numpy, into blocks of BLOCK_N output channels x
BLOCK_K reduction elements, the operand of one dot-product step (tir.DotU8S8): 16 int32 lanes,
each adding 4 u8 x s8 products. The step is what the schedules tensorize the innermost loops into
(Stage.tensorize with tvmc.tir.tensorize.DotU8S8Intrin); the code generator spells it in the
target's instructions (Target.dot_u8s8, from targets/isa/<arch>.yaml):

  AVX512-VNNI, AVX-VNNI   vpdpbusd (one 512-bit or two 256-bit per step)
  AVX512-BW, AVX2         vpmaddubsw + vpmaddwd (one or two vectors per step)
  AArch64 +i8mm           usdot (u8 x s8)
  AArch64 +dotprod        udot on the weights read as w + 128, minus 128 x the data quad's sum
  wasm32 relaxed-simd     relaxed_dot_i8x16_i7x16_add_s on the data's low 7 bits and top bit
  wasm32 simd128          i32x4.dot_i16x8_s on bytes widened to int16
  otherwise               widening multiplies (SSE4.2, AArch64 without dotprod, any other CPU)

vpmaddubsw adds each pair of u8 x s8 products into a saturating int16: 255 * 127 * 2 = 64770 does
not fit. onnxruntime's AVX2 u8s8 kernel accepts that (its documentation asks for 7-bit weights,
`reduce_range`, where it matters), oneDNN halves the weights, both change results; the outputs here
are compared with onnxruntime's on a VNNI host, where it computes exactly, so every form here is
exact. The weights are constants: pairs_in_int16 checks at compile time whether any pair of
weights that vpmaddubsw sums can saturate (never for 7-bit weights: |w0| + |w1| <= 128); where none
can, one vpmaddubsw per step (the kernel's `pairs_in_int16` attribute); else each data byte is split
into its low 7 bits and its top bit, two vpmaddubsw that cannot saturate (tir.DotU8S8).
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import worth_parallel
from tvmc.tir.tensorize import DotU8S8Intrin

BLOCK_N = 16  # int32 lanes of one dot-product step: the output channels of a packed weight block
BLOCK_K = 4   # u8 x s8 products summed into each lane per step
INT16_MAX, UINT8_MAX = 32767, 255


# ---- compile-time weight packing -----------------------------------------------------------

def pack_dense_u8s8_weight(weight: np.ndarray) -> np.ndarray:
    """int8 weight [N, K] -> [ceil(N / 16), ceil(K / 4), 16, 4] (block n of 16 output channels,
    block k of 4 reduction elements: packed[nb, kb, i, j] = weight[16 nb + i, 4 kb + j]), N and K
    padded with zeros; run once at compile time on the constant (as nn_dense.pack_dense_weight).
    A 16 x 4 block is the int8 operand of one tir.DotU8S8 step (64 contiguous bytes)."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise ValueError(f"pack_dense_u8s8_weight needs an int8 [N, K] weight, got {weight.dtype} {weight.shape}")
    n, k = weight.shape
    nb, kb = -(-n // BLOCK_N), -(-k // BLOCK_K)
    padded = np.zeros((nb * BLOCK_N, kb * BLOCK_K), np.int8)
    padded[:n, :k] = weight
    return np.ascontiguousarray(padded.reshape(nb, BLOCK_N, kb, BLOCK_K).transpose(0, 2, 1, 3))


def pairs_in_int16(packed: np.ndarray) -> bool:
    """Whether vpmaddubsw cannot saturate on the int8 weights `packed` (any layout whose last axis
    holds the 4 reduction elements of one lane, e.g. pack_dense_u8s8_weight's): for every pair
    (w0, w1) that it sums (elements 0-1 and 2-3 of the last axis) and any uint8 data,
    255 * (max(w0, 0) + max(w1, 0)) <= 32767 and 255 * (max(-w0, 0) + max(-w1, 0)) <= 32768;
    true for 7-bit weights ([-64, 63], onnxruntime's reduce_range) and for most pairs of a tensor,
    false as soon as one pair is two large weights of one sign (e.g. 127, 127)."""
    w = np.asarray(packed, np.int32).reshape(-1, 2)
    pos = np.maximum(w, 0).sum(axis=1)
    neg = np.maximum(-w, 0).sum(axis=1)
    return bool(np.all(UINT8_MAX * pos <= INT16_MAX) and np.all(UINT8_MAX * neg <= INT16_MAX + 1))


# ---- dense ------------------------------------------------------------------------------------

def dense_u8s8(data, weight, units: int | None = None, pairs_in_int16: bool = False):
    """out[m, n] = sum_k int32(data[m, k]) * int32(w[n, k]), int32 (the raw product of TVM's
    qnn.dense, zero points not subtracted).

    data:   uint8 [M, K] (te tensor)
    weight: int8 packed [ceil(N / 16), ceil(K / 4), 16, 4] (pack_dense_u8s8_weight)
    units:  N, the output's columns (default every packed column: N = 16 ceil(N / 16))
    pairs_in_int16: the packed weights' pairs_in_int16 (kept in the compute's attrs: the
            schedule then uses the one-vpmaddubsw form)
    -> int32 [M, units]. Where K is not a multiple of 4 the data is padded with zeros along K
    (a stage `data_pad`); where units < the packed columns, the product is computed for every
    packed column (stage `dense_u8s8_padded`) and the output takes the first `units`.
    Raises ValueError on mismatched shapes or dtypes."""
    m, k = data.shape
    nb, kb, bn, bk = weight.shape
    if data.dtype != "uint8" or weight.dtype != "int8" or (bn, bk) != (BLOCK_N, BLOCK_K) or -(-k // BLOCK_K) != kb:
        raise ValueError(f"dense_u8s8 needs uint8 data [M, K] and int8 weight [N/16, K/4, 16, 4], got "
                         f"{data.dtype} {list(data.shape)} and {weight.dtype} {list(weight.shape)}")
    units = units or nb * BLOCK_N
    if not (nb - 1) * BLOCK_N < units <= nb * BLOCK_N:
        raise ValueError(f"units {units} does not end in the last of {nb} blocks of {BLOCK_N} columns")
    if k % BLOCK_K:
        data = te.compute((m, kb * BLOCK_K), lambda i, j: te.select(
            j < k, data[i, te.minimum(j, k - 1)], te.const(0, "uint8")), name="data_pad")
    ko = te.reduce_axis(kb, "k_outer")
    ki = te.reduce_axis(BLOCK_K, "k_inner")
    attrs = {"pairs_in_int16": bool(pairs_in_int16)}

    def product(i, j):
        return te.sum(te.cast("int32", data[i, ko.var * BLOCK_K + ki.var]) *
                      te.cast("int32", weight[j // BLOCK_N, ko.var, j % BLOCK_N, ki.var]), [ko, ki])

    if units == nb * BLOCK_N:
        return te.compute((m, units), product, name="dense_u8s8", tag="dense_u8s8", attrs=attrs)
    padded = te.compute((m, nb * BLOCK_N), product, name="dense_u8s8_padded", attrs=attrs)
    return te.compute((m, units), lambda i, j: padded[i, j], name="dense_u8s8", tag="dense_u8s8")


def _lane_vectors(target) -> int:
    """Vector registers one 16-lane int32 accumulator takes on `target`: 512 bits over the
    width of its dot-product form (or of its vector unit, for widening multiplies)."""
    form = target.dot_u8s8
    width = form[1] if form else target.vector_width_bits
    return max(1, BLOCK_N * 32 // max(1, width))


def dense_u8s8_config(workload, target) -> ConfigSpace:
    """Knobs of dense_u8s8 (workload: data shape [M, K], packed weight shape [N/16, K/4, 16, 4],
    ...):

    tile_nb  weight blocks (16 output columns each) per register tile;
    tile_m   data rows per register tile: tile_m x tile_nb accumulators of 16 int32 lanes, and
             per step of 4 along K tile_m broadcast data quads and tile_nb weight blocks (a GEMM
             micro-kernel, as dense_pack's, of DotU8S8 steps).

    Fallback (dense_pack's rule, counted in vector registers: an accumulator takes 512 /
    width_bits of them): the budget is half the vector registers (AVX-512: 16, AVX2 and SSE: 8;
    the other half holds the data quads, weight blocks and vpmaddubsw's temporaries).
      M == 1: tile_m = 1, tile_nb = the largest divisor of N/16 <= min(4, budget / per block)
              (bound by reading the weights; a few independent accumulators hide the latency);
      M > 1:  tile_nb = the largest divisor of N/16 <= 2 (1 where one block fills half the
              budget), tile_m = the largest divisor of M with tile_m x tile_nb blocks in budget.
    """
    m, nb = workload[0][0], workload[1][0]
    per_block = _lane_vectors(target)
    budget = max(1, target.num_vector_registers // 2 // per_block)  # accumulators in blocks
    space = ConfigSpace()
    space.define_split("tile_nb", nb, fallback=min(4, budget) if m == 1 else min(2, max(1, budget // 2)),
                       max_factor=8)
    space.define_split("tile_m", m, fallback=max(1, budget // space.fallback["tile_nb"]), max_factor=16)
    return space


def schedule_dense_u8s8(s, out, anchor, cfg, target):
    """Fused dense_u8s8 + epilogue: per (tile of tile_m rows, tile of tile_nb blocks of 16
    columns), tile_m x tile_nb int32 accumulators (16 lanes each) take one DotU8S8 step per
    (row, block) and step of 4 along K; the (row tile, column tile) pairs run in parallel (when
    worth_parallel); the epilogue (a requantize, a bias...) is applied to the tile as it is
    stored. An epilogue that changes the shape, or an output narrower than one tile of whole
    blocks, keeps the product at root (one row per parallel iteration). The weights'
    pairs_in_int16 comes from the compute's attrs."""
    product = next((t for t in [anchor, *anchor.op.input_tensors()] if t.op is not None and t.op.reduce_axis), None)
    if product is None:
        raise ScheduleError(f"schedule_dense_u8s8: {anchor.name} is not a dense_u8s8")
    pad = next((t for t in product.op.input_tensors() if t.op is not None), None)
    intrin = DotU8S8Intrin(BLOCK_N, product.op.attrs.get("pairs_in_int16", False))
    parallel = worth_parallel(product)  # before cache_write turns `anchor` into a copy
    keep = [pad] if pad is not None else []
    if pad is not None:
        schedule_elementwise_loops(s, pad, target)
    # an epilogue that reshapes, or fewer columns than one tile (the split would clamp the tile
    # below whole blocks of 16, e.g. a classifier of 10): the product at root
    if tuple(out.shape) != tuple(anchor.shape) or (product is not anchor and
                                                   anchor.shape[1] < BLOCK_N * cfg["tile_nb"]):
        inline_injective(s, out, keep=[product, *keep])
        st = s[product]
        m, n = st.op.axis
        ko, ki = st.op.reduce_axis
        n_block, n_lane = st.split(n, BLOCK_N)
        st.reorder(m, ko, n_block, n_lane, ki)
        st.vectorize(n_lane)
        st.tensorize(n_lane, intrin)
        if parallel:
            st.parallel(m)
        schedule_elementwise_loops(s, out, target)
        return
    if product is not anchor:  # N padded to whole blocks: the padded sums are the accumulators
        inline_injective(s, out, keep=keep)
        acc = product
    else:
        inline_injective(s, out, keep=[anchor, *keep])
        acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    m, n = st.op.axis
    m_outer, m_inner = st.split(m, cfg["tile_m"])
    n_outer, n_inner = st.split(n, BLOCK_N * cfg["tile_nb"])
    n_block, n_lane = st.split(n_inner, BLOCK_N)
    st.reorder(m_outer, n_outer, m_inner, n_block, n_lane)
    st.unroll(m_inner)
    st.unroll(n_block)
    st.vectorize(n_lane)
    head = st.fuse(m_outer, n_outer)
    if parallel:
        st.parallel(head)
    ast = s[acc]
    ast.compute_at(st, head)
    m, n = ast.op.axis
    ko, ki = ast.op.reduce_axis
    n_block, n_lane = ast.split(n, BLOCK_N)
    ast.reorder(ko, m, n_block, n_lane, ki)
    ast.unroll(m)
    ast.unroll(n_block)
    ast.vectorize(n_lane)  # the accumulators' zero init
    ast.tensorize(n_lane, intrin)
