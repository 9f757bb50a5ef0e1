"""Dense and batched matrix multiplication (ONNX Gemm, MatMul)."""

from __future__ import annotations

import math

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.dense import (dense_config, dense_pack_config, matmul_config, matmul_tn_config, schedule_dense,
                                schedule_dense_pack, schedule_matmul, schedule_matmul_tn)
from tvmc.ops.elemwise import broadcast_index, broadcast_shape
from tvmc.ops.gpu.dense import (gemm_config, schedule_dense_small_batch, schedule_gemm, small_batch,
                                small_batch_config)
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.tensorcore import (schedule_dense_tensorcore, schedule_matmul_tensorcore, tensorcore_applies,
                                     tensorcore_config, tensorcore_supports)
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op


def _dense_type(in_types, attrs):
    d, w = in_types
    if len(d.shape) != 2 or len(w.shape) != 2 or d.shape[1] != w.shape[1]:
        raise ValueError(f"dense needs data [M,K] and weight [N,K], got {list(d.shape)} and {list(w.shape)}")
    return TensorType((d.shape[0], w.shape[0]), d.dtype)


def dense(data, weight):
    """out[m, n] = sum_k data[m, k] * weight[n, k]; data [M, K], weight [N, K] (TVM nn.dense)."""
    m, k = data.shape
    n = weight.shape[0]
    rk = te.reduce_axis(k, "k")
    return te.compute((m, n), lambda i, j: te.sum(data[i, rk] * weight[j, rk], rk), name="dense", tag="dense")


register_op(OpDef("nn.dense", _dense_type, lambda x, w: (x.astype(np.float64) @ w.T.astype(np.float64)).astype(x.dtype),
                  OpPattern.OUT_ELEMWISE_FUSABLE, lambda inputs, attrs, out_type: dense(*inputs), {
                      "cpu": [Implementation("dense.cpu", schedule_dense, config_space=dense_config)],
                      "gpu": [Implementation("dense_tensorcore.gpu", None, config_space=tensorcore_config,
                                             applies=tensorcore_applies, template=schedule_dense_tensorcore,
                                             supports=tensorcore_supports),
                              Implementation("dense_small_batch.gpu", schedule_dense_small_batch,
                                             config_space=small_batch_config, applies=small_batch),
                              Implementation("dense.gpu", schedule_gemm, config_space=gemm_config)]}))


def _matmul_type(in_types, attrs):
    a, b = in_types
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul needs [...,M,K] x [...,K,N], got {list(a.shape)} and {list(b.shape)}")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    padded = attrs.get("padded")
    if padded is not None and not (len(padded) == 2 and padded[0] >= a.shape[-2] and padded[1] >= b.shape[-1]):
        raise ValueError(f"padded {list(padded)} must be [Mp, Np] with Mp >= {a.shape[-2]} and Np >= {b.shape[-1]}")
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def matmul(a, b, out_shape, padded=None):
    """Numpy matmul with broadcast batch dims: out[..., i, j] = sum_k a[..., i, k] * b[..., k, j].

    padded: (Mp, Np) >= (M, N), or None: the sums are computed as a [..., Mp, Np] stage
    `matmul_padded` whose leading M x N corner is the output, so that register tiles of the
    vector lanes' width (and rows in fours) cover it without a ragged edge (a ViT's 197 tokens:
    N = 197 has no divisor but 1). Rows of a past M read row M - 1 (their sums are never read);
    columns of b past N read 0 from a zero-padded copy `matmul_pad_b` ([..., K, Np], one pass
    over b). AlterOpLayout sets it on CPU targets (tvmc.ops.cpu.dense.matmul_padding)."""
    rk = te.reduce_axis(a.shape[-1], "k")
    nb = len(out_shape) - 2
    m, n = out_shape[-2], out_shape[-1]
    mp, np_ = padded or (m, n)
    if np_ != n:
        src = b
        b = te.compute(tuple(src.shape[:-1]) + (np_,),
                       lambda *idx: te.select(idx[-1] < n, src[idx], te.const(0, src.dtype)), name="matmul_pad_b")

    def f(*idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        ab = broadcast_index(a.shape[:-2], batch)
        bb = broadcast_index(b.shape[:-2], batch)
        row = te.minimum(i, m - 1) if mp != m else i
        return te.sum(a[ab + (row, rk.var)] * b[bb + (rk.var, j)], rk)

    if (mp, np_) == (m, n):
        return te.compute(out_shape, f, name="matmul", tag="matmul")
    sums = te.compute(tuple(out_shape[:-2]) + (mp, np_), f, name="matmul_padded")
    return te.compute(out_shape, lambda *idx: sums[idx], name="matmul", tag="matmul")


def _unpadded_matmul(inputs, attrs, out_type):
    return matmul(*inputs, out_type.shape)


register_op(OpDef("nn.matmul", _matmul_type,
                  lambda a, b, padded=None: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype),
                  OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: matmul(*inputs, out_type.shape, attrs.get("padded")), {
                      "cpu": [Implementation("matmul.cpu", schedule_matmul, config_space=matmul_config)],
                      # `padded` shapes CPU register tiles; GPU kernels tile the plain sums
                      "gpu": [Implementation("matmul_tensorcore.gpu", None, config_space=tensorcore_config,
                                             applies=tensorcore_applies, template=schedule_matmul_tensorcore,
                                             supports=tensorcore_supports, compute=_unpadded_matmul),
                              Implementation("matmul.gpu", schedule_gemm, config_space=gemm_config,
                                             compute=_unpadded_matmul)]},
                  flops=lambda wl: 2 * math.prod(wl[2]) * wl[0][-1]))  # 2 (outputs) K: padding not counted


# The tail GEMVs of nn.matmul_tn compute M rounded up to a multiple of this: the most
# float32 lanes of the CPU targets (AVX-512), a multiple of every narrower target's lanes.
MAX_LANES = 16


def _matmul_tn_type(in_types, attrs):
    at, b = in_types
    if len(at.shape) < 2 or len(b.shape) < 2 or at.shape[-2] != b.shape[-2]:
        raise ValueError(f"matmul_tn needs a^T [...,K,M] x b [...,K,N], got {list(at.shape)} and "
                         f"{list(b.shape)}")
    m, n = attrs.get("rows", at.shape[-1]), b.shape[-1]
    columns, rows = attrs.get("columns", n), attrs.get("padded_rows", m)
    if not (0 < columns <= n and rows >= m and 0 < m <= at.shape[-1]):
        raise ValueError(f"rows {m} must be in 1..{at.shape[-1]}, columns {columns} in 1..{n} and padded_rows "
                         f"{rows} at least the rows")
    return TensorType(broadcast_shape(at.shape[:-2], b.shape[:-2]) + (m, n), at.dtype)


def matmul_tn(at, b, out_shape, columns=None, padded_rows=None):
    """out[..., i, j] = sum_k at[..., k, i] * b[..., k, j] for i < M: nn.matmul with its left
    operand given transposed (at [..., K, Ma], b [..., K, N] -> [..., M, N], M = the `rows`
    attribute <= Ma, default Ma; BLAS's "TN" GEMM, TVM's nn.matmul with transpose_a), float32.
    AlterOpLayout gives a constant left operand this way where the vector lanes leave a short
    tail of N (tvmc.ops.cpu.dense.matmul_tail_columns): the register tiles then run along rows of
    b over its leading `columns` (a multiple of the lanes) only, and the last N - columns columns
    are GEMVs vectorized along M instead, reading at's rows as vectors, so no multiply-add is
    spent on padding columns (ShuffleNet's grouped 1x1 convs at 7 x 7: N = 49 = 48 + 1 instead
    of 49 padded to 64). Raises nothing itself: the type rule checks rows, columns, padded_rows.

    Stages: `matmul_main` [..., Mp, 2 * columns] (Mp = padded_rows >= M: rows past Ma read row
    Ma - 1, and columns past N column N - 1; the schedule computes whole register tiles of it,
    only those left of `columns` reach the output), `matmul_tail` [..., N - columns, Mt] (Mt: M up
    to a multiple of MAX_LANES, rows past Ma read row Ma - 1: a gather where at is not padded
    that far; AlterOpLayout pads it with zeros) and the output, which takes columns < `columns`
    from the first and the others from the second. columns = N: no tail (one GEMM)."""
    nb = len(out_shape) - 2
    m, n = out_shape[-2], out_shape[-1]
    columns = columns or n
    mp = padded_rows or m
    rk = te.reduce_axis(at.shape[-2], "k")
    ma = at.shape[-1]

    def operand_a(batch, i, rows):
        return at[broadcast_index(at.shape[:-2], batch) + (rk.var, te.minimum(i, ma - 1) if rows > ma else i)]

    width = 2 * columns if columns < n else n

    def f(*idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        col = te.minimum(j, n - 1) if width > n else j
        return te.sum(operand_a(batch, i, mp) * b[broadcast_index(b.shape[:-2], batch) + (rk.var, col)], rk)

    main = te.compute(tuple(out_shape[:-2]) + (mp, width), f, name="matmul_main")
    if columns == n:
        return te.compute(out_shape, lambda *idx: main[idx], name="matmul_tn", tag="matmul_tn")
    tail_rows = -(-m // MAX_LANES) * MAX_LANES

    def g(*idx):
        batch, jt, i = idx[:nb], idx[nb], idx[nb + 1]
        b_index = broadcast_index(b.shape[:-2], batch) + (rk.var, columns + jt)
        return te.sum(operand_a(batch, i, tail_rows) * b[b_index], rk)

    tail = te.compute(tuple(out_shape[:-2]) + (n - columns, tail_rows), g, name="matmul_tail")

    def out(*idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        jt = te.minimum(te.maximum(j - columns, 0), n - columns - 1)
        return te.select(j < columns, main[batch + (i, j)], tail[batch + (jt, i)])

    return te.compute(out_shape, out, name="matmul_tn", tag="matmul_tn")


def _plain_matmul_tn(inputs, attrs, out_type):
    at, b = inputs
    shape = out_type.shape
    nb = len(shape) - 2
    rk = te.reduce_axis(at.shape[-2], "k")
    return te.compute(shape, lambda *idx: te.sum(at[broadcast_index(at.shape[:-2], idx[:nb]) + (rk.var, idx[nb])]
                                                 * b[broadcast_index(b.shape[:-2], idx[:nb]) + (rk.var, idx[nb + 1])],
                                                 rk), name="matmul_tn", tag="matmul_tn")


register_op(OpDef("nn.matmul_tn", _matmul_tn_type,
                  lambda at, b, rows=None, columns=None, padded_rows=None: np.matmul(
                      np.swapaxes(at[..., :rows or at.shape[-1]], -1, -2).astype(np.float64),
                      b.astype(np.float64)).astype(b.dtype),
                  OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: matmul_tn(*inputs, out_type.shape, attrs.get("columns"),
                                                                     attrs.get("padded_rows")), {
                      "cpu": [Implementation("matmul_tn.cpu", schedule_matmul_tn,
                                             config_space=matmul_tn_config)],
                      # `columns` and `padded_rows` shape CPU register tiles; GPUs compute the plain sums
                      "gpu": [Implementation("matmul_tn.gpu", schedule_generic, config_space=generic_config,
                                             compute=_plain_matmul_tn)]},
                  flops=lambda wl: 2 * math.prod(wl[2]) * wl[0][-2]))  # 2 (outputs) K: padding not counted


def pack_dense_weight(weight: np.ndarray, bn: int) -> np.ndarray:
    """Weight [N, K] -> packed [ceil(N / bn), K, bn] (column blocks of `bn` outputs contiguous per
    k), done once at compile time; where bn does not divide N the last block is padded with zero
    columns (nn.dense_pack's `units` attribute then keeps the output at N columns)."""
    n, k = weight.shape
    nb = -(-n // bn)
    padded = np.zeros((nb * bn, k), weight.dtype)
    padded[:n] = weight
    return np.ascontiguousarray(padded.reshape(nb, bn, k).transpose(0, 2, 1))


def _dense_pack_type(in_types, attrs):
    d, w = in_types
    if len(d.shape) != 2 or len(w.shape) != 3 or d.shape[1] != w.shape[1]:
        raise ValueError(f"dense_pack needs data [M,K] and weight [N/bn,K,bn], got {list(d.shape)} and {list(w.shape)}")
    nb, _, bn = w.shape
    units = attrs.get("units") or nb * bn
    if not (nb - 1) * bn < units <= nb * bn:
        raise ValueError(f"units {units} does not end in the last of {nb} blocks of {bn} columns")
    return TensorType((d.shape[0], units), d.dtype)


def dense_pack(data, weight, units: int | None = None):
    """out[m, n] = sum_k data[m, k] * weight[n // bn, k, n % bn]; data [M, K], weight packed
    [ceil(N/bn), K, bn] (TVM's dense_pack.x86): a block of bn outputs reads one contiguous vector
    per k; out [M, units] (units = N, default every packed column; with padding columns, a stage
    dense_pack_padded sums whole blocks and the output takes its first units columns)."""
    m, k = data.shape
    nb, _, bn = weight.shape
    rk = te.reduce_axis(k, "k")
    if not units or units == nb * bn:
        return te.compute((m, nb * bn), lambda i, j: te.sum(data[i, rk] * weight[j // bn, rk, j % bn], rk),
                          name="dense_pack", tag="dense_pack")
    # every packed column summed (whole blocks: no guard in the reduction), then the first units
    padded = te.compute((m, nb * bn), lambda i, j: te.sum(data[i, rk] * weight[j // bn, rk, j % bn], rk),
                        name="dense_pack_padded")
    return te.compute((m, units), lambda i, j: padded[i, j], name="dense_pack", tag="dense_pack")


def _dense_pack_ref(x, w, units=None):
    nb, k, bn = w.shape
    unpacked = w.transpose(0, 2, 1).reshape(nb * bn, k)[:units or nb * bn]
    return (x.astype(np.float64) @ unpacked.T.astype(np.float64)).astype(x.dtype)


register_op(OpDef("nn.dense_pack", _dense_pack_type, _dense_pack_ref, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: dense_pack(*inputs, attrs.get("units")), {
                      "cpu": [Implementation("dense_pack.cpu", schedule_dense_pack, config_space=dense_pack_config)],
                      "gpu": [Implementation("dense_pack.gpu", schedule_generic, config_space=generic_config)]},
                  flops=lambda wl: 2 * wl[2][0] * wl[2][1] * wl[0][1]))  # 2 M N K: padding columns not counted
