"""CPU int8 kernels: u8 x s8 -> int32 matrix products (dense_u8s8) and convolutions on channel-blocked
data (conv2d_nchwc_u8s8) on the dot-product instructions of the target (TVM's dense_vnni and
conv2d_NCHWc_int8 schedules, topi/x86/dense.py and conv2d_int8.py; MLAS's u8s8 QGEMM kernels).

Every kernel computes the raw product of uint8 data and int8 weights, accumulated in int32; the
zero-point corrections (x_zp * sum_k w, ...) are the graph's (the qnn lowering folds them into a
bias). The weights are packed at compile time, by numpy, into blocks of BLOCK_N output channels x
BLOCK_K reduction elements, the operand of one dot-product step (tir.DotU8S8): 16 int32 lanes,
each adding 4 u8 x s8 products. The step is what the schedules tensorize the innermost loops into
(Stage.tensorize with tvmc.tir.tensorize.DotU8S8Intrin); the code generator spells it in the
target's instructions (Target.dot_u8s8, from targets/isa/<arch>.yaml):

  AVX512-VNNI, AVX-VNNI   vpdpbusd (one 512-bit or two 256-bit per step)
  AVX512-BW, AVX2         vpmaddubsw + vpmaddwd, or vpmaddwd on weights widened to int16 (below)
  AArch64 +i8mm           usdot (u8 x s8)
  AArch64 +dotprod        sdot on int8 data (Target.dot_data_dtype; uint8 data: udot on the
                          weights read as w + 128, minus 128 x the data quad's sum)
  wasm32 relaxed-simd     relaxed_dot_i8x16_i7x16_add_s on the data's low 7 bits and top bit
  wasm32 simd128          i32x4.dot_i16x8_s on bytes widened to int16
  otherwise               widening multiplies (SSE4.2, AArch64 without dotprod, any other CPU)

vpmaddubsw adds each pair of u8 x s8 products into a saturating int16: 255 * 127 * 2 = 64770 does
not fit. onnxruntime's AVX2 u8s8 kernel accepts that (its documentation asks for 7-bit weights,
`reduce_range`, where it matters), oneDNN halves the weights, both change results; the outputs here
are compared with onnxruntime's on a VNNI host, where it computes exactly, so every form here is
exact. The weights are constants: pairs_in_int16 checks at compile time whether any pair of
weights that vpmaddubsw sums can saturate (never for 7-bit weights: |w0| + |w1| <= 128); where none
can, one vpmaddubsw per step (the kernel's `pairs_in_int16` attribute). Else, in a register tile of
several data rows, the weights are widened to int16 by shifts, once per block for all the rows, and
each row takes two vpmaddwd (i16 x i16 pairs -> int32, exact); the data is then widened to int16
once, before the product (the kernels' `data_pairs`: a stage holding each quad in tir.PAIR_ORDER, so a
step broadcasts the words (a0, a2) and (a1, a3) it multiplies straight from memory). With one row
(M = 1) each data byte is split into its low 7 bits and its top bit, two vpmaddubsw that cannot
saturate (tir.DotU8S8; CodeGenLLVM._dot_pairs). Measured (bench/int8_kernels.py, 8-bit weights,
M >= 64, Zen 4, one thread): the widened form on int16 pairs 161-165 GOP/s on x86-avx2, against
98-103 for float32 dense_pack (the split, M = 1: 99).
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.injective import inline_injective, schedule_blocked_loops, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import schedule_gemm_tiles, worth_parallel
from tvmc.tir.tensorize import DotU8S8Intrin
from tvmc.te.extent import same_shape

BLOCK_N = 16  # int32 lanes of one dot-product step: the output channels of a packed weight block
BLOCK_K = 4   # u8 x s8 products summed into each lane per step
INT16_MAX, UINT8_MAX = 32767, 255
# the data operand's types (uint8; int8 where the target's dot product is s8 x s8, Target.dot_data_dtype)
# and their ranges, which a pad value must fall in
DATA_DTYPES = {"uint8": (0, UINT8_MAX), "int8": (-128, 127)}


# ---- compile-time weight packing -----------------------------------------------------------

def pack_dense_u8s8_weight(weight: np.ndarray) -> np.ndarray:
    """int8 weight [N, K] -> [ceil(N / 16), ceil(K / 4), 16, 4] (block n of 16 output channels,
    block k of 4 reduction elements: packed[nb, kb, i, j] = weight[16 nb + i, 4 kb + j]), N and K
    padded with zeros; run once at compile time on the constant (as nn_dense.pack_dense_weight).
    A 16 x 4 block is the int8 operand of one tir.DotU8S8 step (64 contiguous bytes)."""
    padded = padded_dense_weight(weight, BLOCK_K, "pack_dense_u8s8_weight")
    nb, kb = padded.shape[0] // BLOCK_N, padded.shape[1] // BLOCK_K
    return np.ascontiguousarray(padded.reshape(nb, BLOCK_N, kb, BLOCK_K).transpose(0, 2, 1, 3))


def padded_dense_weight(weight: np.ndarray, block_k: int, caller: str) -> np.ndarray:
    """numpy: an int8 weight [N, K] zero-padded to [16 ceil(N / 16), block_k ceil(K / block_k)],
    what the dense weight packings block. Raises ValueError naming `caller` on a weight that is
    not int8 [N, K]."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise ValueError(f"{caller} needs an int8 [N, K] weight, got {weight.dtype} {weight.shape}")
    n, k = weight.shape
    padded = np.zeros((-(-n // BLOCK_N) * BLOCK_N, -(-k // block_k) * block_k), np.int8)
    padded[:n, :k] = weight
    return padded


def pair_position(j):
    """Where element j (0-3, a te expression) of a data quad sits in a data_pairs stage's quad:
    tvmc.tir.ir.PAIR_ORDER as arithmetic, 2 (j % 2) + j // 2 (its own inverse)."""
    return (j % 2) * 2 + j // 2


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

def dense_u8s8(data, weight, units: int | None = None, pairs_in_int16: bool = False, data_pairs: bool = False):
    """out[m, n] = sum_k int32(data[m, k]) * int32(w[n, k]), int32 (the raw product of TVM's
    qnn.dense, zero points not subtracted).

    data:   uint8 [M, K] (te tensor); int8 on targets whose dot product is s8 x s8
            (Target.dot_data_dtype: the product is then of the int8 values)
    weight: int8 packed [ceil(N / 16), ceil(K / 4), 16, 4] (pack_dense_u8s8_weight)
    units:  N, the output's columns (default every packed column: N = 16 ceil(N / 16))
    pairs_in_int16: the packed weights' pairs_in_int16 (kept in the compute's attrs: the
            schedule then uses the one-vpmaddubsw form)
    data_pairs: the data widened to int16 once, each quad stored in PAIR_ORDER (a stage
            `data_pairs` [M, 4 ceil(K / 4)] int16, zero-padded along K), for the vpmaddwd form of
            the x86 pmaddubsw targets: a step then reads the (a0, a2) and (a1, a3) words it
            multiplies as two broadcasts, instead of splitting the quad in every step
    -> int32 [M, units]. Where K is not a multiple of 4 the data is padded with zeros along K
    (a stage `data_pad`); where units < the packed columns, the product is computed for every
    packed column (stage `dense_u8s8_padded`) and the output takes the first `units`.
    Raises ValueError on mismatched shapes or dtypes."""
    m, k = data.shape
    nb, kb, bn, bk = weight.shape
    if data.dtype not in DATA_DTYPES or weight.dtype != "int8" or (bn, bk) != (BLOCK_N, BLOCK_K) or \
            -(-k // BLOCK_K) != kb:
        raise ValueError(f"dense_u8s8 needs uint8 (or int8) data [M, K] and int8 weight [N/16, K/4, 16, 4], got "
                         f"{data.dtype} {list(data.shape)} and {weight.dtype} {list(weight.shape)}")
    units = units or nb * BLOCK_N
    if not (nb - 1) * BLOCK_N < units <= nb * BLOCK_N:
        raise ValueError(f"units {units} does not end in the last of {nb} blocks of {BLOCK_N} columns")
    if data_pairs:
        def widened(i, c):
            src = c - c % BLOCK_K + pair_position(c % BLOCK_K)
            value = te.cast("int16", data[i, te.minimum(src, k - 1)])
            return te.select(src < k, value, te.const(0, "int16")) if k % BLOCK_K else value

        data = te.compute((m, kb * BLOCK_K), widened, name="data_pairs")
    elif k % BLOCK_K:
        data = te.compute((m, kb * BLOCK_K), lambda i, j: te.select(
            j < k, data[i, te.minimum(j, k - 1)], te.const(0, data.dtype)), name="data_pad")
    ko = te.reduce_axis(kb, "k_outer")
    ki = te.reduce_axis(BLOCK_K, "k_inner")
    attrs = {"pairs_in_int16": bool(pairs_in_int16)}
    position = pair_position(ki.var) if data_pairs else ki.var

    def product(i, j):
        return te.sum(te.cast("int32", data[i, ko.var * BLOCK_K + position]) *
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
              budget, and on the forms that widen the weights for vpmaddwd, Target.dot_data_pairs,
              where the rows share each block's widening), tile_m = the largest divisor of M
              with tile_m x tile_nb blocks in budget. Measured on Zen 4, one thread, M = 64,
              K = N = 768, 8-bit weights, data_pairs: x86-avx2 (4, 1) 162 GOP/s against (2, 2)
              129; x86 without VNNI (16, 1) 180, (8, 2) 185.
    """
    m, nb = workload[0][0], workload[1][0]
    per_block = _lane_vectors(target)
    budget = max(1, target.num_vector_registers // 2 // per_block)  # accumulators in blocks
    blocks = 1 if target.dot_data_pairs and budget < 8 else min(2, max(1, budget // 2))
    space = ConfigSpace()
    space.define_split("tile_nb", nb, fallback=min(4, budget) if m == 1 else blocks, max_factor=8)
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
    if not same_shape(out.shape, anchor.shape) or (product is not anchor and
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
    # N padded to whole blocks: the padded sums are the accumulators
    acc = schedule_gemm_tiles(s, out, anchor, product if product is not anchor else None, cfg["tile_m"], BLOCK_N,
                              cfg["tile_nb"], parallel, keep=keep)
    ast = s[acc]
    m, n = ast.op.axis
    ko, ki = ast.op.reduce_axis
    n_block, n_lane = ast.split(n, BLOCK_N)
    ast.reorder(ko, m, n_block, n_lane, ki)
    ast.unroll(m)
    ast.unroll(n_block)
    ast.vectorize(n_lane)  # the accumulators' zero init
    ast.tensorize(n_lane, intrin)


# ---- conv2d (NCHW[x]c data, NCHW16c output) ----------------------------------------------------

def pack_conv2d_u8s8_weight(weight: np.ndarray, ic_bn: int) -> np.ndarray:
    """int8 OIHW weight [O, C, KH, KW] -> [O/16, C/ic_bn, KH, KW, ceil(ic_bn/4), 16, 4] (TVM's
    OIHW[ic_bn/4]i16o4i of conv2d_NCHWc_int8): packed[oco, ico, kh, kw, icq, oci, j] =
    weight[16 oco + oci, ic_bn ico + 4 icq + j, kh, kw], zero where 4 icq + j >= ic_bn (an input
    channel block that is not a multiple of 4, e.g. a 3-channel image, is padded to one). The
    innermost 16 x 4 block is the int8 operand of one tir.DotU8S8 step: 16 output channels x 4
    input channels. Run once at compile time on the constant. Raises ValueError when O is not a
    multiple of 16, C not one of ic_bn, or the weight is not int8 OIHW."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise ValueError(f"pack_conv2d_u8s8_weight needs an int8 OIHW weight, got {weight.dtype} {weight.shape}")
    o, c, kh, kw = weight.shape
    if o % BLOCK_N or c % ic_bn:
        raise ValueError(f"weight {list(weight.shape)} does not divide into {BLOCK_N} output and {ic_bn} input "
                         "channel blocks")
    quads = -(-ic_bn // BLOCK_K)
    padded = np.zeros((o, c // ic_bn, quads * BLOCK_K, kh, kw), np.int8)
    padded[:, :, :ic_bn] = weight.reshape(o, c // ic_bn, ic_bn, kh, kw)
    # [O/16, 16, C/ib, quads, 4, KH, KW] -> [O/16, C/ib, KH, KW, quads, 16, 4]
    blocks = padded.reshape(o // BLOCK_N, BLOCK_N, c // ic_bn, quads, BLOCK_K, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 5, 6, 3, 1, 4))


def unpack_conv2d_u8s8_weight(packed: np.ndarray, ic_bn: int) -> np.ndarray:
    """numpy: inverse of pack_conv2d_u8s8_weight (the input channel padding dropped): OIHW."""
    oco, ico, kh, kw, quads, bn, bk = packed.shape
    w = packed.transpose(0, 5, 1, 4, 6, 2, 3).reshape(oco * bn, ico, quads * bk, kh, kw)[:, :, :ic_bn]
    return np.ascontiguousarray(w.reshape(oco * bn, ico * ic_bn, kh, kw))


def conv2d_nchwc_u8s8(data, weight, strides, padding, dilation, pad_value: int = 0, pairs_in_int16: bool = False,
                      data_pairs: bool = False):
    """The raw u8 x s8 product of a blocked conv2d (TVM's conv2d_NCHWc_int8, topi/x86/conv2d_int8.py;
    zero points not subtracted):

        out[n, oco, y, x, oci] = sum_{ico, kh, kw, ic} int32(pad(data)[n, ico, y*sh + kh*dh, x*sw + kw*dw, ic])
                                                       * int32(weight[oco, ico, kh, kw, ic / 4, oci, ic % 4])

    data:      uint8 NCHW[ib]c [N, C/ib, H, W, ib] (te tensor), any ib (a multiple of 4 reads
               no padding along the block); int8 on targets whose dot product is s8 x s8
               (Target.dot_data_dtype)
    weight:    int8 [O/16, C/ib, KH, KW, ceil(ib/4), 16, 4] (pack_conv2d_u8s8_weight)
    padding:   (top, left, bottom, right); the padded input holds `pad_value` (a value of the data's type) there
               and in the channels that round ib up to a multiple of 4 (their weights are zero)
    data_pairs: the padded input widened to int16, each quad of input channels stored in
               PAIR_ORDER (as dense_u8s8's data_pairs; the stage `pad_data` then always exists)
    -> int32 NCHW16c [N, O/16, OH, OW, 16]. The padded input is its own stage `pad_data` where any
    padding exists. Reduce axes in order (ic_outer, kh, kw, ic_quad, ic_inner): ic_inner (4) is
    the reduction of one DotU8S8 step. Raises ValueError on mismatched shapes or dtypes."""
    n, ico, h, w, ib = data.shape
    oco, wico, kh, kw, quads, bn, bk = weight.shape
    if data.dtype not in DATA_DTYPES or weight.dtype != "int8" or (bn, bk) != (BLOCK_N, BLOCK_K) or \
            wico != ico or quads != -(-ib // BLOCK_K):
        raise ValueError(f"conv2d_nchwc_u8s8 needs uint8 (or int8) data [N, C/ib, H, W, ib] and int8 weight "
                         f"[O/16, C/ib, KH, KW, ceil(ib/4), 16, 4], got {data.dtype} {list(data.shape)} and "
                         f"{weight.dtype} {list(weight.shape)}")
    lo, hi = DATA_DTYPES[data.dtype]
    if not lo <= pad_value <= hi:
        raise ValueError(f"pad_value {pad_value} is not a {data.dtype} value")
    pt, pl, pb, pr = padding
    sh, sw = strides
    dh, dw = dilation
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    ibp = quads * BLOCK_K
    padded = data
    if any(padding) or ibp != ib or data_pairs:
        dtype = "int16" if data_pairs else data.dtype

        def pad(nn, c, yy, xx, ci):
            if data_pairs:
                ci = ci - ci % BLOCK_K + pair_position(ci % BLOCK_K)
            conds = [yy >= pt, yy < pt + h, xx >= pl, xx < pl + w] if any(padding) else []
            if ibp != ib:
                conds.append(ci < ib)
            src = te.cast(dtype, data[nn, c, yy - pt, xx - pl, te.minimum(ci, ib - 1) if ibp != ib else ci])
            return te.select(te.logical_and(*conds), src, te.const(pad_value, dtype)) if conds else src

        padded = te.compute((n, ico, h + pt + pb, w + pl + pr, ibp), pad, name="pad_data")
    rico, rkh, rkw = te.reduce_axis(ico, "ic_outer"), te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    ricq, rici = te.reduce_axis(quads, "ic_quad"), te.reduce_axis(BLOCK_K, "ic_inner")

    position = pair_position(rici.var) if data_pairs else rici.var

    def f(nn, oc, y, x, oci):
        xv = padded[nn, rico, y * sh + rkh.var * dh, x * sw + rkw.var * dw, ricq.var * BLOCK_K + position]
        return te.sum(te.cast("int32", xv) * te.cast("int32", weight[oc, rico, rkh, rkw, ricq, oci, rici]),
                      [rico, rkh, rkw, ricq, rici])

    return te.compute((n, oco, oh, ow, BLOCK_N), f, name="conv2d_nchwc_u8s8", tag="conv2d_nchwc_u8s8",
                      attrs={"pairs_in_int16": bool(pairs_in_int16)})


# ---- conv2d of an image stem (planar NCHW uint8 data, the quad along the kernel row) ---------

def pack_conv2d_u8s8_row_weight(weight: np.ndarray) -> np.ndarray:
    """int8 OIHW weight [O, C, KH, KW] -> [O/16, C, KH, ceil(KW/4), 16, 4]: packed[oco, c, kh, q,
    oci, j] = weight[16 oco + oci, c, kh, 4 q + j], zero where 4 q + j >= KW. The innermost 16 x 4
    block is the int8 operand of one tir.DotU8S8 step: 16 output channels x 4 taps of one kernel
    row. Run once at compile time on the constant. Raises ValueError when O is not a multiple of
    16 or the weight is not int8 OIHW."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 4 or weight.shape[0] % BLOCK_N:
        raise ValueError(f"pack_conv2d_u8s8_row_weight needs an int8 OIHW weight of O a multiple of {BLOCK_N}, "
                         f"got {weight.dtype} {weight.shape}")
    o, c, kh, kw = weight.shape
    quads = -(-kw // BLOCK_K)
    padded = np.zeros((o, c, kh, quads * BLOCK_K), np.int8)
    padded[..., :kw] = weight
    # [O/16, 16, C, KH, quads, 4] -> [O/16, C, KH, quads, 16, 4]
    blocks = padded.reshape(o // BLOCK_N, BLOCK_N, c, kh, quads, BLOCK_K)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 4, 1, 5))


def unpack_conv2d_u8s8_row_weight(packed: np.ndarray, kw: int) -> np.ndarray:
    """numpy: inverse of pack_conv2d_u8s8_row_weight for a kernel width `kw`: OIHW."""
    oco, c, kh, quads, bn, bk = packed.shape
    w = packed.transpose(0, 4, 1, 2, 3, 5).reshape(oco * bn, c, kh, quads * bk)
    return np.ascontiguousarray(w[..., :kw])


def conv2d_nchw_u8s8(data, weight, strides, out_width: int, pairs_in_int16: bool = False):
    """The raw u8 x s8 product of a conv2d whose input channels do not fill the 4-byte channel
    quads of conv2d_nchwc_u8s8 (an image stem, C = 3), on planar data, each DotU8S8 step taking 4
    adjacent taps of one kernel row instead (zero points not subtracted):

        out[n, oco, y, x, oci] = sum_{c, kh, q, j} int32(data[n, c, y*sh + kh, x*sw + 4q + j])
                                                   * int32(weight[oco, c, kh, q, oci, j])

    data:    uint8 NCHW [N, C, HP, WP] (te tensor), already padded (the caller's pad holds the
             input zero point at the borders) and WP wide enough for the last quad:
             WP >= (OW - 1) * sw + 4 ceil(KW / 4) (the taps past KW meet zero weights; wider
             rows, e.g. rounded up to whole vectors for the kernel that pads them, are not read)
    weight:  int8 [O/16, C, KH, ceil(KW/4), 16, 4] (pack_conv2d_u8s8_row_weight)
    strides: (sh, sw); dilation 1 (a dilated row is not 4 adjacent bytes)
    out_width: OW
    -> int32 NCHW16c [N, O/16, OH, OW, 16], OH = (HP - KH) // sh + 1.
    The 4 data bytes of a step are adjacent whatever the stride (one dword broadcast), so the
    data needs no channel interleave: a 3-channel stem at 3x3 takes 9 steps per output pixel
    as NCHW4c would (3 of 4 products used), at 7x7 42 (NCHW4c: 49), and its input stays planar,
    quantized and padded by a kernel that runs along the rows. Reduce axes in order (c, kh,
    kw_quad, kw_inner). Raises ValueError on mismatched shapes or dtypes."""
    n, c, hp, wp = data.shape
    oco, wc, kh, quads, bn, bk = weight.shape
    if data.dtype != "uint8" or weight.dtype != "int8" or (bn, bk) != (BLOCK_N, BLOCK_K) or wc != c:
        raise ValueError(f"conv2d_nchw_u8s8 needs uint8 data [N, C, H, W] and int8 weight [O/16, C, KH, KW/4, 16, 4], "
                         f"got {data.dtype} {list(data.shape)} and {weight.dtype} {list(weight.shape)}")
    sh, sw = strides
    oh, ow = (hp - kh) // sh + 1, out_width
    if oh <= 0 or not 0 < (ow - 1) * sw + quads * BLOCK_K <= wp:
        raise ValueError(f"conv2d_nchw_u8s8: {ow} columns of a {kh} x {quads * BLOCK_K} window do not fit data "
                         f"{list(data.shape)}")
    rc, rkh = te.reduce_axis(c, "ic"), te.reduce_axis(kh, "kh")
    rq, rj = te.reduce_axis(quads, "kw_quad"), te.reduce_axis(BLOCK_K, "kw_inner")

    def f(nn, oc, y, x, oci):
        xv = data[nn, rc, y * sh + rkh.var, x * sw + rq.var * BLOCK_K + rj.var]
        return te.sum(te.cast("int32", xv) * te.cast("int32", weight[oc, rc, rkh, rq, oci, rj]), [rc, rkh, rq, rj])

    return te.compute((n, oco, oh, ow, BLOCK_N), f, name="conv2d_nchw_u8s8", tag="conv2d_nchw_u8s8",
                      attrs={"pairs_in_int16": bool(pairs_in_int16)})


def conv2d_u8s8_config(workload, target) -> ConfigSpace:
    """Knobs of conv2d_nchwc_u8s8 (workload: data shape [N, C/ib, H, W, ib], packed weight shape
    [O/16, C/ib, KH, KW, ib/4, 16, 4], out shape [N, O/16, OH, OW, 16], ...):

    tile_ow  output columns per register tile (divisors of OW);
    tile_oc  output channel blocks (16 channels each) per register tile (divisors of O/16, up to 4):
             the tile holds tile_oc x tile_ow accumulators of 16 int32 lanes; per DotU8S8 step
             (4 input channels of one kernel tap) it broadcasts tile_ow data quads and loads
             tile_oc weight blocks (TVM's conv2d_NCHWc_int8 register tile: reg_n x oc_bn, here with
             several oc blocks as in its 1x1 schedule).

    Fallback, counted in vector registers as dense_u8s8's (an accumulator takes 512 / width_bits
    of them): an accumulator budget of half the vector registers (AVX-512: 16 zmm; AVX2 and
    AVX-VNNI: 8 ymm = 4 blocks); tile_oc = the largest divisor of O/16 <= 2 (1 where the budget
    holds fewer than 4 blocks, and on the forms that widen the weights for vpmaddwd,
    Target.dot_data_pairs, whose columns share each block's widening), then tile_ow = the
    largest divisor of OW with tile_oc x tile_ow blocks within the budget. Measured on Zen 4
    (AVX-512 VNNI, one thread, a loaded machine: +-30%), 3x3 convs of 64 channels at 56 x 56 and
    128 at 14 x 14: tiles of 28 accumulators (14 x 2) ran at 170-180 GOP/s, tiles of 14-16 (7 x
    2, 8 x 2, 4 x 4) at 260-300, (7, 1) at 320. x86-avx2 (data_pairs, 8-bit weights), 64
    channels at 16 x 16: (4, 1) 161, (2, 2) 145; x86 without VNNI (16, 1) 180, (8, 2) 166."""
    out = workload[2]
    oc_blocks, ow = out[1], out[3]
    budget = max(1, target.num_vector_registers // 2 // _lane_vectors(target))
    most = 1 if budget < 4 or target.dot_data_pairs else 2
    tile_oc = max(f for f in range(1, min(most, oc_blocks) + 1) if oc_blocks % f == 0)
    tile_ow = max(f for f in range(1, ow + 1) if ow % f == 0 and tile_oc * f <= budget)
    space = ConfigSpace()
    space.define_knob("tile_ow", [f for f in range(1, min(ow, 32) + 1) if ow % f == 0] +
                      ([tile_ow] if tile_ow > 32 else []), fallback=tile_ow)
    space.define_knob("tile_oc", [f for f in range(1, min(oc_blocks, 4) + 1) if oc_blocks % f == 0],
                      fallback=tile_oc)
    return space


def schedule_conv2d_nchwc_u8s8(s, out, anchor, cfg, target):
    """Fused conv2d_nchwc_u8s8 + epilogue: the padded input materialized once (rows in parallel);
    per (n, tile of tile_oc channel blocks, output row, tile of tile_ow columns) a register tile of
    tile_oc x tile_ow int32 accumulators of 16 lanes, the reduction (ic_outer, kh, kw, ic_quad;
    conv2d_nchw_u8s8's ic, kh, kw_quad) outside it and one DotU8S8 step per (block, column)
    inside; the epilogue (subtracting the zero-point term, a requantize...) applied to the tile as
    it is stored; (n, oc tiles, rows)
    fused into the parallel loop. An epilogue that changes the shape keeps the product at root
    (its (n, oc block, row) loops in parallel, one DotU8S8 step per column)."""
    if anchor.op.tag not in ("conv2d_nchwc_u8s8", "conv2d_nchw_u8s8"):
        raise ScheduleError(f"schedule_conv2d_nchwc_u8s8: {anchor.name} is not a conv2d_nchwc_u8s8 or conv2d_nchw_u8s8")
    pad = next((t for t in anchor.op.input_tensors() if t.op is not None), None)
    intrin = DotU8S8Intrin(BLOCK_N, anchor.op.attrs.get("pairs_in_int16", False))
    parallel = worth_parallel(anchor)  # before cache_write turns `anchor` into a copy
    keep = [pad] if pad is not None else []
    if pad is not None:
        schedule_blocked_loops(s, pad, target)
    if not same_shape(out.shape, anchor.shape):
        inline_injective(s, out, keep=[anchor, *keep])
        st = s[anchor]
        n, oco, oh, ow, oci = st.op.axis
        *outer, inner = st.op.reduce_axis
        st.reorder(n, oco, oh, *outer, ow, oci, inner)
        st.vectorize(oci)
        st.tensorize(oci, intrin)
        if parallel:
            st.parallel(st.fuse(n, oco, oh))
        schedule_elementwise_loops(s, out, target)
        return
    inline_injective(s, out, keep=[anchor, *keep])
    acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    n, oco, oh, ow, oci = st.op.axis
    oc_outer, oc_inner = st.split(oco, cfg["tile_oc"])
    ow_outer, ow_inner = st.split(ow, cfg["tile_ow"])
    st.reorder(n, oc_outer, oh, ow_outer, oc_inner, ow_inner, oci)
    st.unroll(oc_inner)
    st.unroll(ow_inner)
    st.vectorize(oci)
    head = st.fuse(n, oc_outer, oh)
    if parallel:
        st.parallel(head)
    ast = s[acc]
    ast.compute_at(st, ow_outer)
    n, oco, oh, ow, oci = ast.op.axis
    *outer, inner = ast.op.reduce_axis
    ast.reorder(n, oh, *outer, oco, ow, oci, inner)
    ast.unroll(oco)
    ast.unroll(ow)
    ast.vectorize(oci)  # the accumulators' zero init
    ast.tensorize(oci, intrin)
