"""CPU int8 convolution on an int8 matrix multiply-accumulate (AArch64 FEAT_I8MM USMMLA): the raw
u8 x s8 -> int32 product of a blocked conv2d (qnn.conv2d_nchwc_u8s8_mmla), as conv2d_nchwc_u8s8
(tvmc/ops/cpu/int8.py) computes it, in steps of tir.MmlaU8S8.

One USMMLA multiplies a 2 x 8 uint8 block by the transpose of a 2 x 8 int8 block into a 2 x 2
int32 block: 32 products, twice USDOT's 16 per instruction. Here the two data rows are two
adjacent output pixels (x = 2 xp, 2 xp + 1: their 8 input channels at one kernel tap, NCHW[ib]c
data with ib a multiple of 8) and the two weight rows are two output channels (2 cp, 2 cp + 1),
so a register tile of tile_xp pixel pairs x 16 output channels holds 8 tile_xp accumulators of
4 lanes [(x0, c0), (x0, c1), (x1, c0), (x1, c1)], and each step of 8 input channels loads
tile_xp data blocks and 8 weight blocks for 8 tile_xp USMMLAs (Arm's "int8 matrix multiply"
kernels in Arm Compute Library and XNNPACK's i8mm GEMMs pair rows the same way). The product
is computed in that layout (stage `conv2d_mmla`, [N, O/16, OH, ceil(OW/2), 8, 2, 2]) and the
output stage, which the epilogue (the zero-point term, a requantize) fuses into, reads it back as
NCHW16c. The weights are packed at compile time into the layout of the step's int8 operand.

qnn.dense_u8s8_mmla pairs rows the same way: two data rows x two output columns x 8 reduction
elements per step (stage `dense_mmla`, [ceil(M/2), ceil(N/16), 8, 2, 2]), read back as [M, N].
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.injective import inline_injective, schedule_blocked_loops, schedule_elementwise_loops
from tvmc.ops.cpu.int8 import BLOCK_N, UINT8_MAX, padded_dense_weight
from tvmc.ops.cpu.tiling import worth_parallel
from tvmc.ops.nn_conv2d import conv2d_out_hw
from tvmc.te.extent import same_shape
from tvmc.tir.tensorize import MmlaU8S8Intrin

MMLA_K = 8  # input channels per step: the 8 bytes of each row of the 2 x 8 operands
MMLA_ACCUMULATORS = BLOCK_N // 2  # 2 x 2 blocks per pixel pair and 16 output channels


def pack_conv2d_u8s8_mmla_weight(weight: np.ndarray, ic_bn: int) -> np.ndarray:
    """int8 OIHW weight [O, C, KH, KW] -> [O/16, C/ic_bn, KH, KW, ic_bn/8, 8, 2, 8]:
    packed[oco, ico, kh, kw, q, cp, ci, k] = weight[16 oco + 2 cp + ci, ic_bn ico + 8 q + k, kh, kw].
    The innermost 2 x 8 block is the int8 operand of one tir.MmlaU8S8 step (two output channels x
    8 input channels, 16 contiguous bytes). Run once at compile time on the constant. Raises
    ValueError when O is not a multiple of 16, ic_bn not one of 8, C not one of ic_bn, or the
    weight is not int8 OIHW."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise ValueError(f"pack_conv2d_u8s8_mmla_weight needs an int8 OIHW weight, got {weight.dtype} {weight.shape}")
    o, c, kh, kw = weight.shape
    if o % BLOCK_N or ic_bn % MMLA_K or c % ic_bn:
        raise ValueError(f"weight {list(weight.shape)} does not divide into {BLOCK_N} output channel blocks and "
                         f"input channel blocks of {ic_bn} (a multiple of {MMLA_K})")
    # [O/16, 8, 2, C/ib, ib/8, 8, KH, KW] -> [O/16, C/ib, KH, KW, ib/8, 8, 2, 8]
    blocks = weight.reshape(o // BLOCK_N, BLOCK_N // 2, 2, c // ic_bn, ic_bn // MMLA_K, MMLA_K, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 3, 6, 7, 4, 1, 2, 5))


def unpack_conv2d_u8s8_mmla_weight(packed: np.ndarray) -> np.ndarray:
    """numpy: inverse of pack_conv2d_u8s8_mmla_weight: OIHW."""
    oco, ico, kh, kw, q, cp, ci, k = packed.shape
    w = packed.transpose(0, 5, 6, 1, 4, 7, 2, 3)
    return np.ascontiguousarray(w.reshape(oco * cp * ci, ico * q * k, kh, kw))


def conv2d_nchwc_u8s8_mmla(data, weight, strides, padding, dilation, pad_value: int = 0):
    """The raw u8 x s8 product of a blocked conv2d (zero points not subtracted), as
    tvmc.ops.cpu.int8.conv2d_nchwc_u8s8 computes it, in the pixel-pair layout of tir.MmlaU8S8:

        mmla[n, oco, y, xp, cp, xi, ci] = sum_{ico, kh, kw, q, k}
            int32(pad(data)[n, ico, y*sh + kh*dh, (2 xp + xi)*sw + kw*dw, 8 q + k])
            * int32(weight[oco, ico, kh, kw, q, cp, ci, k])
        out[n, oco, y, x, oc] = mmla[n, oco, y, x // 2, oc // 2, x % 2, oc % 2]

    data:    uint8 NCHW[ib]c [N, C/ib, H, W, ib] (te tensor), ib a multiple of 8
    weight:  int8 [O/16, C/ib, KH, KW, ib/8, 8, 2, 8] (pack_conv2d_u8s8_mmla_weight)
    padding: (top, left, bottom, right); the padded input holds `pad_value` (a uint8 value) there,
             and in the column an odd OW adds on the right for the last pixel pair (whose second
             pixel is computed and not stored)
    -> int32 NCHW16c [N, O/16, OH, OW, 16] (tag conv2d_nchwc_u8s8_mmla; the product is its input
    stage `conv2d_mmla`, the padded input `pad_data` where one is needed). Reduce axes in order
    (ic_outer, kh, kw, ic_octet, ic_inner): ic_inner (8) is the reduction of one step. Raises
    ValueError on mismatched shapes or dtypes."""
    n, ico, h, w, ib = data.shape
    oco, wico, kh, kw, octets, cp, ci, k8 = weight.shape
    if data.dtype != "uint8" or weight.dtype != "int8" or (cp, ci, k8) != (MMLA_ACCUMULATORS, 2, MMLA_K) or \
            wico != ico or ib != octets * MMLA_K:
        raise ValueError(f"conv2d_nchwc_u8s8_mmla needs uint8 data [N, C/ib, H, W, ib] (ib a multiple of 8) and int8 "
                         f"weight [O/16, C/ib, KH, KW, ib/8, 8, 2, 8], got {data.dtype} {list(data.shape)} and "
                         f"{weight.dtype} {list(weight.shape)}")
    if not 0 <= pad_value <= UINT8_MAX:
        raise ValueError(f"pad_value {pad_value} is not a uint8 value")
    pt, pl, pb, pr = padding
    sh, sw = strides
    dh, dw = dilation
    oh, ow = conv2d_out_hw(h, w, kh, kw, strides, padding, dilation)
    pairs = -(-ow // 2)
    width = max(w + pl + pr, (2 * pairs - 1) * sw + (kw - 1) * dw + 1)  # the odd OW's extra pixel
    padded = data
    if any(padding) or width != w:
        def pad(nn, c, yy, xx, cc):
            inside = te.logical_and(yy >= pt, yy < pt + h, xx >= pl, xx < pl + w)
            return te.select(inside, data[nn, c, yy - pt, xx - pl, cc], te.const(pad_value, "uint8"))

        padded = te.compute((n, ico, h + pt + pb, width, ib), pad, name="pad_data")
    rico, rkh, rkw = te.reduce_axis(ico, "ic_outer"), te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    rq, rk = te.reduce_axis(octets, "ic_octet"), te.reduce_axis(MMLA_K, "ic_inner")

    def f(nn, oc, y, xp, c2, xi, c1):
        xv = padded[nn, rico, y * sh + rkh.var * dh, (xp * 2 + xi) * sw + rkw.var * dw, rq.var * MMLA_K + rk.var]
        return te.sum(te.cast("int32", xv) * te.cast("int32", weight[oc, rico, rkh, rkw, rq, c2, c1, rk]),
                      [rico, rkh, rkw, rq, rk])

    mmla = te.compute((n, oco, oh, pairs, MMLA_ACCUMULATORS, 2, 2), f, name="conv2d_mmla")
    return te.compute((n, oco, oh, ow, BLOCK_N), lambda nn, oc, y, x, c: mmla[nn, oc, y, x // 2, c // 2, x % 2, c % 2],
                      name="conv2d_nchwc_u8s8_mmla", tag="conv2d_nchwc_u8s8_mmla")


def _product_stage(s, out, anchor, tag: str, schedule_pad, target):
    """(the product stage of an MMLA kernel `anchor` (the op tagged `tag`), whether it is worth
    running in parallel): its padded input (if any) kept at root and scheduled by
    `schedule_pad(s, pad, target)`, every other injective stage inlined into `out`. Raises
    ScheduleError when `anchor` is not tagged `tag`."""
    if anchor.op.tag != tag:
        raise ScheduleError(f"schedule of {tag}: {anchor.name} is not a {tag}")
    product = anchor.op.input_tensors()[0]
    pad = next((t for t in product.op.input_tensors() if t.op is not None), None)
    parallel = worth_parallel(product)
    if pad is not None:
        schedule_pad(s, pad, target)
    inline_injective(s, out, keep=[product] + ([pad] if pad is not None else []))
    return product, parallel


def _pair_tiles(rows: int, target) -> tuple:
    """(the pair tiles of `rows` output pixels or data rows: the divisors of ceil(rows / 2) up
    to 4, the fallback's budget in such pairs of 16 channels: 8 accumulators each, half the
    vector registers in all (NEON: 2 pairs), the rest for the data and weight blocks in flight)."""
    pairs = -(-rows // 2)
    budget = max(1, target.num_vector_registers // 2 // MMLA_ACCUMULATORS)
    return [f for f in range(1, min(pairs, 4) + 1) if pairs % f == 0], budget


def conv2d_u8s8_mmla_config(workload, target) -> ConfigSpace:
    """Knobs of conv2d_nchwc_u8s8_mmla (workload: data shape [N, C/ib, H, W, ib], packed weight
    shape [O/16, C/ib, KH, KW, ib/8, 8, 2, 8], out shape [N, O/16, OH, OW, 16], ...):

    tile_xp  output pixel pairs per register tile (divisors of ceil(OW / 2), up to 4);
    tile_oc  output channel blocks (16 channels each) per register tile (divisors of O/16, up to 2):
             the tile holds 8 x tile_xp x tile_oc accumulators (4 int32 lanes, one 128-bit register
             each); per step of 8 input channels it loads tile_xp data blocks and 8 tile_oc weight
             blocks for 8 tile_xp tile_oc USMMLAs.

    Fallback: 16 accumulators, half of NEON's 32 registers (the rest hold the data and weight
    blocks in flight), as conv2d_u8s8_config's budget: tile_xp = the largest divisor of the pairs
    <= 2, then tile_oc = 2 where tile_xp is 1 and O/16 is even, else 1."""
    out = workload[2]
    oc_blocks = out[1]
    xp_choices, budget = _pair_tiles(out[3], target)
    oc_choices = [f for f in range(1, min(oc_blocks, 2) + 1) if oc_blocks % f == 0]
    tile_xp = max(f for f in xp_choices if f <= budget)
    tile_oc = max(f for f in oc_choices if f * tile_xp <= budget)
    space = ConfigSpace()
    space.define_knob("tile_xp", xp_choices, fallback=tile_xp)
    space.define_knob("tile_oc", oc_choices, fallback=tile_oc)
    return space


def schedule_conv2d_nchwc_u8s8_mmla(s, out, anchor, cfg, target):
    """Fused conv2d_nchwc_u8s8_mmla + epilogue: the padded input materialized once (rows in
    parallel); per (n, tile of tile_oc channel blocks, output row, tile of 2 tile_xp columns) the
    product's register tile (compute_at: tile_oc x tile_xp x 8 accumulators of 4 lanes), the
    reduction (ic_outer, kh, kw, ic_octet) outside it and one MmlaU8S8 step per (block, pair,
    channel pair) inside; the output tile (the epilogue applied) read back from the accumulators
    as NCHW16c vectors; (n, oc tiles, rows) fused into the parallel loop. An epilogue that changes
    the shape, or OW = 1, keeps the product at root (its (n, oc block, row) loops in parallel)."""
    product, parallel = _product_stage(s, out, anchor, "conv2d_nchwc_u8s8_mmla", schedule_blocked_loops, target)
    pst = s[product]
    # an epilogue that reshapes, or one output column (a tile would bound the pixel pair to it)
    if not same_shape(out.shape, anchor.shape) or anchor.shape[3] == 1:
        n, oco, oh, xp, cp, xi, ci = pst.op.axis
        *outer, k = pst.op.reduce_axis
        pst.reorder(n, oco, oh, *outer, xp, cp, xi, ci, k)
        pst.tensorize(xi, MmlaU8S8Intrin())
        if parallel:
            pst.parallel(pst.fuse(n, oco, oh))
        schedule_elementwise_loops(s, out, target)
        return
    st = s[out]
    n, oco, oh, ow, oci = st.op.axis
    oc_outer, oc_inner = st.split(oco, cfg["tile_oc"])
    whole_row = 2 * cfg["tile_xp"] > ow.extent  # an odd OW in one tile: split would clamp the tile to OW
    if whole_row:
        ow_outer, (ow_pair, ow_inner) = None, st.split(ow, 2)
        st.reorder(n, oc_outer, oh, oc_inner, ow_pair, ow_inner, oci)
    else:
        ow_outer, ow_rest = st.split(ow, 2 * cfg["tile_xp"])
        ow_pair, ow_inner = st.split(ow_rest, 2)
        st.reorder(n, oc_outer, oh, ow_outer, oc_inner, ow_pair, ow_inner, oci)
    st.unroll(oc_inner)
    st.unroll(ow_pair)
    st.unroll(ow_inner)
    st.vectorize(oci)
    head = st.fuse(n, oc_outer, oh)
    if parallel:
        st.parallel(head)
    pst.compute_at(st, head if whole_row else ow_outer)
    n, oco, oh, xp, cp, xi, ci = pst.op.axis
    *outer, k = pst.op.reduce_axis
    pst.reorder(n, oh, *outer, oco, xp, cp, xi, ci, k)
    # the input channel blocks stay a loop: unrolled (a 1x1 conv of 4 blocks: 8 steps of 16
    # USMMLAs), LLVM hoists the weight loads of later steps and spills accumulators
    pst.rolled(outer[0])
    pst.unroll(oco)
    pst.unroll(xp)
    pst.unroll(cp)
    pst.vectorize(ci)  # the accumulators' zero init
    pst.tensorize(xi, MmlaU8S8Intrin())


# ---- dense ------------------------------------------------------------------------------------

def pack_dense_u8s8_mmla_weight(weight: np.ndarray) -> np.ndarray:
    """int8 weight [N, K] -> [ceil(N/16), ceil(K/8), 8, 2, 8]: packed[nb, kb, cp, ci, k] =
    weight[16 nb + 2 cp + ci, 8 kb + k], N and K padded with zeros. The innermost 2 x 8 block is
    the int8 operand of one tir.MmlaU8S8 step (two output columns x 8 reduction elements). Run
    once at compile time on the constant. Raises ValueError on a weight that is not int8 [N, K]."""
    padded = padded_dense_weight(weight, MMLA_K, "pack_dense_u8s8_mmla_weight")
    nb, kb = padded.shape[0] // BLOCK_N, padded.shape[1] // MMLA_K
    # [N/16, 8, 2, K/8, 8] -> [N/16, K/8, 8, 2, 8]
    return np.ascontiguousarray(padded.reshape(nb, MMLA_ACCUMULATORS, 2, kb, MMLA_K).transpose(0, 3, 1, 2, 4))


def unpack_dense_u8s8_mmla_weight(packed: np.ndarray) -> np.ndarray:
    """numpy: inverse of pack_dense_u8s8_mmla_weight, with the padding: [16 ceil(N/16), 8 ceil(K/8)]."""
    nb, kb, cp, ci, k = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 2, 3, 1, 4).reshape(nb * cp * ci, kb * k))


def dense_u8s8_mmla(data, weight, units: int | None = None):
    """out[m, n] = sum_k int32(data[m, k]) * int32(w[n, k]), int32 (qnn.dense_u8s8's product), in
    the row-pair layout of tir.MmlaU8S8:

        mmla[mp, nb, cp, mi, ci] = sum_{kb, k} int32(data[2 mp + mi, 8 kb + k]) * int32(weight[nb, kb, cp, ci, k])
        out[m, n] = mmla[m // 2, n // 16, (n % 16) // 2, m % 2, n % 2]

    data:   uint8 [M, K] (te tensor)
    weight: int8 [ceil(N/16), ceil(K/8), 8, 2, 8] (pack_dense_u8s8_mmla_weight)
    units:  N (default every packed column)
    -> int32 [M, units] (tag dense_u8s8_mmla; the product is its input stage `dense_mmla`). An odd
    M or a K that is not a multiple of 8 reads the data through a stage `data_pad` (zeros; the
    extra row's sums are not stored). Raises ValueError on mismatched shapes or dtypes."""
    m, k = data.shape
    nb, kb, cp, ci, k8 = weight.shape
    if data.dtype != "uint8" or weight.dtype != "int8" or (cp, ci, k8) != (MMLA_ACCUMULATORS, 2, MMLA_K) or \
            -(-k // MMLA_K) != kb:
        raise ValueError(f"dense_u8s8_mmla needs uint8 data [M, K] and int8 weight [N/16, K/8, 8, 2, 8], got "
                         f"{data.dtype} {list(data.shape)} and {weight.dtype} {list(weight.shape)}")
    units = units or nb * BLOCK_N
    if not (nb - 1) * BLOCK_N < units <= nb * BLOCK_N:
        raise ValueError(f"units {units} does not end in the last of {nb} blocks of {BLOCK_N} columns")
    pairs = -(-m // 2)
    if 2 * pairs != m or kb * MMLA_K != k:
        source = data
        data = te.compute((2 * pairs, kb * MMLA_K), lambda i, j: te.select(
            te.logical_and(i < m, j < k), source[te.minimum(i, m - 1), te.minimum(j, k - 1)], te.const(0, "uint8")),
            name="data_pad")
    rkb, rk = te.reduce_axis(kb, "k_outer"), te.reduce_axis(MMLA_K, "k_inner")

    def f(mp, b, c2, mi, c1):
        return te.sum(te.cast("int32", data[mp * 2 + mi, rkb.var * MMLA_K + rk.var]) *
                      te.cast("int32", weight[b, rkb, c2, c1, rk]), [rkb, rk])

    mmla = te.compute((pairs, nb, MMLA_ACCUMULATORS, 2, 2), f, name="dense_mmla")
    return te.compute((m, units), lambda i, j: mmla[i // 2, j // BLOCK_N, (j % BLOCK_N) // 2, i % 2, j % 2],
                      name="dense_u8s8_mmla", tag="dense_u8s8_mmla")


def dense_u8s8_mmla_config(workload, target) -> ConfigSpace:
    """Knobs of dense_u8s8_mmla (workload: data shape [M, K], packed weight shape [N/16, K/8, 8,
    2, 8], ...):

    tile_mp  data row pairs per register tile (divisors of ceil(M/2), up to 4), each with 8
             accumulators over 16 output columns: per step of 8 reduction elements tile_mp data
             blocks (two 8-byte rows each) and 8 weight blocks for 8 tile_mp USMMLAs.

    Fallback: 16 accumulators (conv2d_u8s8_mmla_config's budget): the largest divisor of the
    pairs <= 2."""
    choices, budget = _pair_tiles(workload[0][0], target)
    space = ConfigSpace()
    space.define_knob("tile_mp", choices, fallback=max(f for f in choices if f <= budget))
    return space


def schedule_dense_u8s8_mmla(s, out, anchor, cfg, target):
    """Fused dense_u8s8_mmla + epilogue: per (tile of 2 tile_mp rows, block of 16 columns) the
    product's register tile (compute_at: tile_mp x 8 accumulators of 4 lanes), the reduction
    outside it and one MmlaU8S8 step per (row pair, column pair) inside; the output tile (the
    epilogue applied) read back from the accumulators as rows of 16; the (row tile, column block)
    pairs fused in parallel (when worth it). An epilogue that changes the shape, or M = 1, keeps
    the product at root (its row pairs in parallel)."""
    product, parallel = _product_stage(s, out, anchor, "dense_u8s8_mmla", schedule_elementwise_loops, target)
    pst = s[product]
    # an epilogue that reshapes, or one data row (a tile would bound the row pair to that row)
    if not same_shape(out.shape, anchor.shape) or anchor.shape[0] == 1:
        _mmla_steps(pst, tile=False)
        if parallel:
            pst.parallel(pst.op.axis[0])
        schedule_elementwise_loops(s, out, target)
        return
    st = s[out]
    m, n = st.op.axis
    n_outer, n_lane = st.split(n, BLOCK_N)
    whole = 2 * cfg["tile_mp"] > m.extent  # an odd M in one tile: split would clamp the tile to M
    if whole:
        m_pair, m_inner = st.split(m, 2)
        st.reorder(n_outer, m_pair, m_inner, n_lane)
        head = n_outer
    else:
        m_outer, m_rest = st.split(m, 2 * cfg["tile_mp"])
        m_pair, m_inner = st.split(m_rest, 2)
        st.reorder(m_outer, n_outer, m_pair, m_inner, n_lane)
        head = st.fuse(m_outer, n_outer)
    st.unroll(m_pair)
    st.unroll(m_inner)
    st.vectorize(n_lane)
    if parallel:
        st.parallel(head)
    pst.compute_at(st, head)
    _mmla_steps(pst, tile=True)


def _mmla_steps(pst, tile: bool):
    """The product stage of a dense_u8s8_mmla in MmlaU8S8 steps (tensorized at the row-in-pair
    loop), its 8 column pairs unrolled: with `tile` (a register tile of a few row pairs, computed
    at the output tile) the reduction outside the row pairs, unrolled; else (at root) row pairs,
    column blocks, the reduction, then the column pairs."""
    mp, nb, cp, mi, ci = pst.op.axis
    ko, k = pst.op.reduce_axis
    if tile:
        pst.reorder(nb, ko, mp, cp, mi, ci, k)
        pst.unroll(mp)
    else:
        pst.reorder(mp, nb, ko, cp, mi, ci, k)
    pst.unroll(cp)
    pst.vectorize(ci)  # the accumulators' zero init
    pst.tensorize(mi, MmlaU8S8Intrin())
