"""Quantized operators (TVM's QNN dialect): integer conv2d / dense / matmul with an int32
accumulator, and requantize (int32 -> int8/uint8).

Zero points are tensor inputs, not attributes: int32, a scalar `[]` (or one per output channel
`[O]` for the weight of qnn.conv2d / qnn.dense, one per column `[N]` for qnn.matmul's b, one per
row `[M]` for its a). They are usually constants: a scalar constant inside a fused function
becomes an immediate (tvmc.ops.fused), a vector one a kernel argument; a run-time zero point
(DynamicQuantizeLinear's) is read from its tensor. The integer operands are int8 or uint8 and
are read as such by the kernels (widened to int32 inside the loop: `te.cast`), so constant
weights stay one byte in mod.params.

Semantics (ONNX ConvInteger-10, MatMulInteger-10, QLinearConv-10, QLinearMatMul-10/21):

    out = sum (int32(x) - x_zero_point) * (int32(w) - w_zero_point)      (int32, exact)

and padding of qnn.conv2d is the input zero point (a shifted value of 0), as ONNX's reference
pads the shifted input with zeros.

Schedules: the CPU schedules of the float ops (tvmc/ops/cpu/conv2d.py, dense.py), which tile
and vectorize the int32 accumulators over output columns (conv2d, matmul) or k (dense): correct
generic kernels, not tuned int8 ones. On CPU targets AlterOpLayout turns a qnn.dense with a
constant int8 weight into qnn.dense_u8s8, and a groups-1 qnn.conv2d with one into
qnn.conv2d_nchwc_u8s8 (NCHW[x]c uint8 data, int8 where the target's dot product is s8 x s8
(Target.dot_data_dtype), NCHW16c int32 out; an image stem of C % 4 != 0:
qnn.conv2d_nchw_u8s8 on planar data; on +i8mm targets qnn.conv2d_nchwc_u8s8_mmla, on the int8
matrix multiply-accumulate, tvmc/ops/cpu/int8_mmla.py), the raw u8 x s8 products on the target's
dot-product instructions (tvmc/ops/cpu/int8.py), and the zero-point terms. GPU targets
with a 4 x int8 dot product (Target.gpu_int8_dot: CUDA dp4a, OpenCL) take the same
rewrite, onto tiled GPU kernels of that step (tvmc/ops/gpu/int8.py); the other qnn ops, and all of
them on other GPUs, run one output element per thread (tvmc/ops/gpu/injective.py's generic
schedule).
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d import conv2d_nchw_config, schedule_conv2d_nchw
from tvmc.ops.cpu.dense import dense_config, matmul_config, schedule_dense, schedule_matmul
from tvmc.ops.cpu.int8 import (
    BLOCK_K,
    BLOCK_N,
    DATA_DTYPES,
    conv2d_nchw_u8s8,
    conv2d_nchwc_u8s8,
    conv2d_u8s8_config,
    dense_u8s8,
    dense_u8s8_config,
    schedule_conv2d_nchwc_u8s8,
    schedule_dense_u8s8,
    unpack_conv2d_u8s8_row_weight,
    unpack_conv2d_u8s8_weight,
)
from tvmc.ops.cpu.int8_mmla import (
    MMLA_K,
    conv2d_nchwc_u8s8_mmla,
    conv2d_u8s8_mmla_config,
    dense_u8s8_mmla,
    dense_u8s8_mmla_config,
    schedule_conv2d_nchwc_u8s8_mmla,
    schedule_dense_u8s8_mmla,
    unpack_conv2d_u8s8_mmla_weight,
    unpack_dense_u8s8_mmla_weight,
)
from tvmc.ops.elemwise import INJECTIVE, broadcast_index, broadcast_shape
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.int8 import (
    conv2d_u8s8_gpu_config,
    dense_u8s8_gpu_config,
    schedule_conv2d_nchwc_u8s8_gpu,
    schedule_dense_u8s8_gpu,
)
from tvmc.ops.nn_conv2d import _reference as _float_conv2d_reference
from tvmc.ops.nn_conv2d import _type as _float_conv2d_type
from tvmc.ops.nn_conv2d import conv2d_out_hw
from tvmc.ops.layout import blocked_layout, channel_block, to_layout
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.te.expr import is_float

QUANTIZED_DTYPES = ("int8", "uint8")
# saturation bounds of the requantized types
RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def _check_operand(t, what: str):
    if t.dtype not in QUANTIZED_DTYPES:
        raise ValueError(f"{what} must be int8 or uint8, got {t.dtype}")


def _check_zero_point(t, what: str, channels: int | None = None):
    """A zero point: int32, scalar, or (with `channels`) a vector of that many values."""
    if t.dtype != "int32":
        raise ValueError(f"{what} must be int32, got {t.dtype}")
    if tuple(t.shape) != () and (channels is None or tuple(t.shape) != (channels,)):
        shapes = "[]" if channels is None else f"[] or [{channels}]"
        raise ValueError(f"{what} must have shape {shapes}, got {list(t.shape)}")


def _zp_at(zp, i):
    """The zero point for index `i` along its channel axis (a scalar zero point for every i)."""
    return zp[()] if zp.ndim == 0 else zp[i]


def _widened(x, zp):
    """int32(x) - zero point: the operand as ONNX's integer ops see it."""
    return te.cast("int32", x) - zp


# --- qnn.conv2d -------------------------------------------------------------------------------

def _conv2d_type(in_types, attrs):
    d, w, x_zp, w_zp = in_types
    _check_operand(d, "data")
    _check_operand(w, "weight")
    shape = _float_conv2d_type(in_types[:2], attrs).shape  # nn.conv2d's rule: ranks, groups, the window
    _check_zero_point(x_zp, "input zero point")
    _check_zero_point(w_zp, "kernel zero point", w.shape[0])
    return TensorType(shape, "int32")


def qnn_conv2d_nchw(data, weight, input_zero_point, kernel_zero_point, strides, padding, dilation, groups=1):
    """Quantized NCHW conv2d (TVM qnn.conv2d; ONNX ConvInteger / QLinearConv's accumulator):

        out[n, o, y, x] = sum_{ic, kh, kw} (int32(pad(data)[n, g(o)*Cg + ic, y*sh + kh*dh, x*sw + kw*dw])
                                            - input_zero_point) * (int32(weight[o, ic, kh, kw]) - kernel_zp[o])

    data [N, C, H, W] and weight [O, C/groups, KH, KW] int8/uint8, input_zero_point int32 [],
    kernel_zero_point int32 [] or [O]; out int32 [N, O, OH, OW]. The padding (stage `pad_data`, in
    data's dtype) holds the input zero point."""
    n, c, h, w = data.shape
    o, cg, kh, kw = weight.shape
    pt, pl, pb, pr = padding
    oh, ow = conv2d_out_hw(h, w, kh, kw, strides, padding, dilation)
    padded = data
    if any(padding):
        def pad(nn, ic, yy, xx):
            inside = te.logical_and(yy >= pt, yy < pt + h, xx >= pl, xx < pl + w)
            return te.select(inside, data[nn, ic, yy - pt, xx - pl], te.cast(data.dtype, input_zero_point[()]))

        padded = te.compute((n, c, h + pt + pb, w + pl + pr), pad, name="pad_data")
    ric, rkh, rkw = te.reduce_axis(cg, "ic"), te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    og = o // groups
    sh, sw = strides
    dh, dw = dilation

    def f(nn, oc, y, x):
        cin = ric.var if groups == 1 else (oc // og) * cg + ric.var
        xv = _widened(padded[nn, cin, y * sh + rkh.var * dh, x * sw + rkw.var * dw], input_zero_point[()])
        wv = _widened(weight[oc, ric, rkh, rkw], _zp_at(kernel_zero_point, oc))
        return te.sum(xv * wv, [ric, rkh, rkw])

    return te.compute((n, o, oh, ow), f, name="qnn_conv2d", tag="qnn_conv2d_nchw")


def _conv2d_reference(x, w, x_zp, w_zp, strides, padding, dilation, groups=1):
    xs = x.astype(np.float64) - float(x_zp)  # padding the shifted input with 0 pads x with its zero point
    ws = w.astype(np.float64) - np.asarray(w_zp, np.float64).reshape(-1, 1, 1, 1)
    return _float_conv2d_reference(xs, ws, strides, padding, dilation, groups).astype(np.int32)


def _conv2d_compute(inputs, attrs, out_type):
    return qnn_conv2d_nchw(*inputs, attrs["strides"], attrs["padding"], attrs["dilation"], attrs.get("groups", 1))


def _without_zero_points(config_space):
    """A float op's config space on a qnn workload: (data, weight, x_zp, w_zp, out, dtype, attrs)
    read as (data, weight, out, dtype, attrs)."""
    return lambda workload, target: config_space(workload[:2] + workload[4:], target)


register_op(OpDef("qnn.conv2d", _conv2d_type, _conv2d_reference, OpPattern.OUT_ELEMWISE_FUSABLE, _conv2d_compute, {
    "cpu": [Implementation("qnn_conv2d_nchw.cpu", schedule_conv2d_nchw,
                           config_space=_without_zero_points(conv2d_nchw_config))],
    "gpu": [Implementation("qnn_conv2d_nchw.gpu", schedule_generic, config_space=generic_config)],
}))


# --- qnn.conv2d_nchwc_u8s8 (CPU: the dot-product instructions) ----------------------------------

def _conv2d_u8s8_type(in_types, attrs):
    d, w = in_types
    if d.dtype not in DATA_DTYPES or w.dtype != "int8" or len(d.shape) != 5 or len(w.shape) != 7 or \
            tuple(w.shape[5:]) != (BLOCK_N, BLOCK_K) or w.shape[1] != d.shape[1] or \
            w.shape[4] != -(-d.shape[4] // BLOCK_K):
        raise ValueError(f"qnn.conv2d_nchwc_u8s8 needs uint8 (or int8) data [N,C/ib,H,W,ib] and int8 weight "
                         f"[O/{BLOCK_N},C/ib,"
                         f"KH,KW,ceil(ib/{BLOCK_K}),{BLOCK_N},{BLOCK_K}], got {d.dtype} {list(d.shape)} and "
                         f"{w.dtype} {list(w.shape)}")
    return _blocked_u8s8_out_type(d, w, attrs, "qnn.conv2d_nchwc_u8s8")


def _blocked_u8s8_out_type(d, w, attrs, op: str):
    """The int32 NCHW16c output type of a blocked u8 x s8 conv (data [N,C/ib,H,W,ib], packed
    weight [O/16,C/ib,KH,KW,...]) once its operands are checked; raises ValueError naming `op` on
    bad attributes."""
    if attrs.get("out_layout", blocked_layout(BLOCK_N)) != blocked_layout(BLOCK_N):
        raise ValueError(f"out_layout must be {blocked_layout(BLOCK_N)}, got {attrs['out_layout']}")
    lo, hi = DATA_DTYPES.get(d.dtype, DATA_DTYPES["uint8"])
    if not lo <= attrs.get("pad_value", 0) <= hi:
        raise ValueError(f"pad_value {attrs['pad_value']} is not a {d.dtype} value")
    if attrs.get("groups", 1) != 1:
        raise ValueError(f"groups={attrs['groups']}: {op} computes groups=1 only")
    n, _, h, wd, _ = d.shape
    kh, kw = w.shape[2:4]
    oh, ow = conv2d_out_hw(h, wd, kh, kw, attrs["strides"], attrs["padding"], attrs["dilation"])
    if oh <= 0 or ow <= 0:
        raise ValueError(f"kernel {kh}x{kw} does not fit input {h}x{wd}")
    return TensorType((n, w.shape[0], oh, ow, BLOCK_N), "int32")


def _conv2d_u8s8_reference(x, w, strides, padding, dilation, pad_value=0, pairs_in_int16=False,
                           out_layout=None, groups=1, data_pairs=False):
    """Unblock data and weight, pad with pad_value, convolve exactly (float64 sums of integer
    products below 2^53), block the result as NCHW16c."""
    return _blocked_u8s8_reference(x, unpack_conv2d_u8s8_weight(w, x.shape[4]), strides, padding, dilation, pad_value)


def _blocked_u8s8_reference(x, oihw, strides, padding, dilation, pad_value):
    """numpy: NCHW16c int32 of NCHW[ib]c uint8 (or int8) data `x`, padded with pad_value, convolved with the
    OIHW int8 weight `oihw` (exact in float64)."""
    nchw = to_layout(x, blocked_layout(x.shape[4]), "NCHW").astype(np.float64)
    pt, pl, pb, pr = padding
    padded = np.pad(nchw, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    out = _float_conv2d_reference(padded, oihw.astype(np.float64), strides, (0, 0, 0, 0), dilation, 1)
    return to_layout(out.astype(np.int32), "NCHW", blocked_layout(BLOCK_N))


def _conv2d_u8s8_compute(inputs, attrs, out_type):
    return conv2d_nchwc_u8s8(*inputs, attrs["strides"], attrs["padding"], attrs["dilation"], attrs.get("pad_value", 0),
                             attrs.get("pairs_in_int16", False), attrs.get("data_pairs", False))


def _conv2d_u8s8_flops(workload):
    """2 x N x O x OH x OW x C x KH x KW (the real input channels: a block padded to 4 not counted)."""
    data, weight, out = workload[:3]
    return 2 * out[0] * out[1] * out[4] * out[2] * out[3] * data[1] * data[4] * weight[2] * weight[3]


# The raw u8 x s8 product of a blocked conv2d with a packed constant weight (tvmc.ops.cpu.int8;
# AlterOpLayout rewrites a qnn.conv2d into it and its zero-point term on CPU targets): uint8
# NCHW[ib]c data padded with `pad_value`, int32 NCHW16c out, no zero points.
register_op(OpDef("qnn.conv2d_nchwc_u8s8", _conv2d_u8s8_type, _conv2d_u8s8_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  _conv2d_u8s8_compute, {
                      "cpu": [Implementation("conv2d_nchwc_u8s8.cpu", schedule_conv2d_nchwc_u8s8,
                                             config_space=conv2d_u8s8_config)],
                      "gpu": [Implementation("conv2d_nchwc_u8s8.gpu", schedule_conv2d_nchwc_u8s8_gpu,
                                             config_space=conv2d_u8s8_gpu_config)]},
                  flops=_conv2d_u8s8_flops))


# --- qnn.conv2d_nchwc_u8s8_mmla (CPU: the int8 matrix multiply-accumulate, +i8mm) ---------------

def _conv2d_mmla_type(in_types, attrs):
    d, w = in_types
    if d.dtype != "uint8" or w.dtype != "int8" or len(d.shape) != 5 or len(w.shape) != 8 or \
            tuple(w.shape[5:]) != (BLOCK_N // 2, 2, MMLA_K) or w.shape[1] != d.shape[1] or \
            w.shape[4] * MMLA_K != d.shape[4]:
        raise ValueError(f"qnn.conv2d_nchwc_u8s8_mmla needs uint8 data [N,C/ib,H,W,ib] (ib a multiple of {MMLA_K}) "
                         f"and int8 weight [O/{BLOCK_N},C/ib,KH,KW,ib/{MMLA_K},{BLOCK_N // 2},2,{MMLA_K}], got "
                         f"{d.dtype} {list(d.shape)} and {w.dtype} {list(w.shape)}")
    return _blocked_u8s8_out_type(d, w, attrs, "qnn.conv2d_nchwc_u8s8_mmla")


# The same product as qnn.conv2d_nchwc_u8s8 in steps of an int8 matrix multiply-accumulate (two
# output pixels x two output channels x 8 input channels: AArch64 USMMLA; tvmc.ops.cpu.int8_mmla),
# its weight packed for that step; AlterOpLayout emits it on targets with Target.mmla_u8s8.
register_op(OpDef("qnn.conv2d_nchwc_u8s8_mmla", _conv2d_mmla_type,
                  lambda x, w, strides, padding, dilation, pad_value=0, out_layout=None, groups=1:
                  _blocked_u8s8_reference(x, unpack_conv2d_u8s8_mmla_weight(w), strides, padding, dilation, pad_value),
                  OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: conv2d_nchwc_u8s8_mmla(*inputs, attrs["strides"], attrs["padding"],
                                                                         attrs["dilation"], attrs.get("pad_value", 0)),
                  {"cpu": [Implementation("conv2d_nchwc_u8s8_mmla.cpu", schedule_conv2d_nchwc_u8s8_mmla,
                                          config_space=conv2d_u8s8_mmla_config)],
                   # CPU only in practice (AlterOpLayout); on a GPU one output element per thread
                   "gpu": [Implementation("conv2d_nchwc_u8s8_mmla.gpu", schedule_generic,
                                          config_space=generic_config)]},
                  flops=_conv2d_u8s8_flops))


# --- qnn.conv2d_nchw_u8s8 (CPU: an image stem on the dot-product instructions) ------------------

def _conv2d_row_type(in_types, attrs):
    d, w = in_types
    if d.dtype != "uint8" or w.dtype != "int8" or len(d.shape) != 4 or len(w.shape) != 6 or \
            tuple(w.shape[4:]) != (BLOCK_N, BLOCK_K) or w.shape[1] != d.shape[1]:
        raise ValueError(f"qnn.conv2d_nchw_u8s8 needs uint8 data [N,C,H,W] and int8 weight [O/{BLOCK_N},C,KH,"
                         f"ceil(KW/{BLOCK_K}),{BLOCK_N},{BLOCK_K}], got {d.dtype} {list(d.shape)} and {w.dtype} "
                         f"{list(w.shape)}")
    if attrs.get("out_layout", blocked_layout(BLOCK_N)) != blocked_layout(BLOCK_N):
        raise ValueError(f"out_layout must be {blocked_layout(BLOCK_N)}, got {attrs['out_layout']}")
    n, _, h, wd = d.shape
    sh, sw = attrs["strides"]
    oh, ow = (h - w.shape[2]) // sh + 1, attrs["out_width"]
    if oh <= 0 or not 0 < (ow - 1) * sw + w.shape[3] * BLOCK_K <= wd:
        raise ValueError(f"{ow} columns of a {w.shape[2]}x{w.shape[3] * BLOCK_K} window do not fit input {h}x{wd}")
    return TensorType((n, w.shape[0], oh, ow, BLOCK_N), "int32")


def _conv2d_row_reference(x, w, strides, out_width, pairs_in_int16=False, out_layout=None):
    """Unpack the weight (4 ceil(KW/4) taps, the padded ones zero), convolve exactly (float64
    sums of integer products below 2^53) over the columns the out_width outputs read, block the
    result as NCHW16c."""
    ws = unpack_conv2d_u8s8_row_weight(w, w.shape[3] * BLOCK_K).astype(np.float64)
    x = x[..., :(out_width - 1) * strides[1] + w.shape[3] * BLOCK_K].astype(np.float64)
    out = _float_conv2d_reference(x, ws, strides, (0, 0, 0, 0), (1, 1), 1).astype(np.int32)
    return to_layout(out, "NCHW", blocked_layout(BLOCK_N))


def _conv2d_row_flops(workload):
    """2 x N x O x OH x OW x C x KH x 4 ceil(KW/4) (the taps a step computes, padded ones included)."""
    data, weight, out = workload[:3]
    return 2 * out[0] * out[1] * out[4] * out[2] * out[3] * data[1] * weight[2] * weight[3] * BLOCK_K


# The raw u8 x s8 product of a conv2d whose input channels are not a multiple of 4 (an image stem):
# planar uint8 data, padded in the graph, each dot-product step 4 adjacent taps of a kernel row
# (tvmc.ops.cpu.int8.conv2d_nchw_u8s8; AlterOpLayout's qnn_conv2d_rows on CPU targets).
register_op(OpDef("qnn.conv2d_nchw_u8s8", _conv2d_row_type, _conv2d_row_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: conv2d_nchw_u8s8(*inputs, attrs["strides"], attrs["out_width"],
                                                                   attrs.get("pairs_in_int16", False)),
                  {"cpu": [Implementation("conv2d_nchw_u8s8.cpu", schedule_conv2d_nchwc_u8s8,
                                          config_space=conv2d_u8s8_config)],
                   # GPUs keep a stem on conv2d_nchwc_u8s8 (AlterOpLayout); this one per output element
                   "gpu": [Implementation("conv2d_nchw_u8s8.gpu", schedule_generic, config_space=generic_config)]},
                  flops=_conv2d_row_flops))


# --- qnn.dense --------------------------------------------------------------------------------

def _dense_type(in_types, attrs):
    d, w, x_zp, w_zp = in_types
    _check_operand(d, "data")
    _check_operand(w, "weight")
    if len(d.shape) != 2 or len(w.shape) != 2 or d.shape[1] != w.shape[1]:
        raise ValueError(f"qnn.dense needs data [M,K] and weight [N,K], got {list(d.shape)} and {list(w.shape)}")
    _check_zero_point(x_zp, "input zero point")
    _check_zero_point(w_zp, "kernel zero point", w.shape[0])
    return TensorType((d.shape[0], w.shape[0]), "int32")


def qnn_dense(data, weight, input_zero_point, kernel_zero_point):
    """Quantized dense (TVM qnn.dense): out[m, n] = sum_k (int32(data[m, k]) - input_zero_point)
    * (int32(weight[n, k]) - kernel_zero_point[n]); data [M, K], weight [N, K] int8/uint8, zero
    points int32 [] (kernel: or [N]); out int32 [M, N]."""
    m, k = data.shape
    n = weight.shape[0]
    rk = te.reduce_axis(k, "k")
    return te.compute((m, n), lambda i, j: te.sum(
        _widened(data[i, rk], input_zero_point[()]) * _widened(weight[j, rk], _zp_at(kernel_zero_point, j)), rk),
        name="qnn_dense", tag="qnn_dense")


def _dense_reference(x, w, x_zp, w_zp):
    xs = x.astype(np.int64) - np.int64(x_zp)
    ws = w.astype(np.int64) - np.asarray(w_zp, np.int64).reshape(-1, 1)
    return (xs @ ws.T).astype(np.int32)


register_op(OpDef("qnn.dense", _dense_type, _dense_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: qnn_dense(*inputs), {
                      "cpu": [Implementation("qnn_dense.cpu", schedule_dense,
                                             config_space=_without_zero_points(dense_config))],
                      "gpu": [Implementation("qnn_dense.gpu", schedule_generic, config_space=generic_config)]}))


# --- qnn.dense_u8s8 (CPU: the dot-product instructions) -----------------------------------------

def _dense_u8s8_type(in_types, attrs):
    d, w = in_types
    if d.dtype not in DATA_DTYPES or w.dtype != "int8" or len(d.shape) != 2 or len(w.shape) != 4 or \
            tuple(w.shape[2:]) != (BLOCK_N, BLOCK_K) or w.shape[1] != -(-d.shape[1] // BLOCK_K):
        raise ValueError(f"qnn.dense_u8s8 needs uint8 (or int8) data [M,K] and int8 weight "
                         f"[N/{BLOCK_N},K/{BLOCK_K},{BLOCK_N},{BLOCK_K}], got {d.dtype} {list(d.shape)} and "
                         f"{w.dtype} {list(w.shape)}")
    return _dense_out_type(d, w, attrs)


def _dense_out_type(d, w, attrs):
    """int32 [M, units] of a dense on a weight packed in blocks of 16 columns (w.shape[0] of
    them); raises ValueError where `units` does not end in the last block."""
    units = attrs.get("units") or w.shape[0] * BLOCK_N
    if not (w.shape[0] - 1) * BLOCK_N < units <= w.shape[0] * BLOCK_N:
        raise ValueError(f"units {units} does not end in the last of {w.shape[0]} blocks of {BLOCK_N} columns")
    return TensorType((d.shape[0], units), "int32")


def _dense_u8s8_reference(x, w, units=None, pairs_in_int16=False, data_pairs=False):
    nb, kb, bn, bk = w.shape
    unpacked = w.transpose(0, 2, 1, 3).reshape(nb * bn, kb * bk)[:units or nb * bn, :x.shape[1]]
    return (x.astype(np.int64) @ unpacked.T.astype(np.int64)).astype(np.int32)


def _dense_u8s8_flops(workload):
    """2 x M x N x K (the padding of a packed weight not counted)."""
    return 2 * workload[2][0] * workload[2][1] * workload[0][1]


# The raw u8 x s8 product of a packed constant weight (tvmc.ops.cpu.int8; AlterOpLayout rewrites
# a qnn.dense into it and the zero-point terms on CPU targets): no zero points, int32 [M, units].
register_op(OpDef("qnn.dense_u8s8", _dense_u8s8_type, _dense_u8s8_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: dense_u8s8(*inputs, attrs.get("units"),
                                                             attrs.get("pairs_in_int16", False),
                                                             attrs.get("data_pairs", False)), {
                      "cpu": [Implementation("dense_u8s8.cpu", schedule_dense_u8s8, config_space=dense_u8s8_config)],
                      "gpu": [Implementation("dense_u8s8.gpu", schedule_dense_u8s8_gpu,
                                             config_space=dense_u8s8_gpu_config)]},
                  flops=_dense_u8s8_flops))


def _dense_mmla_type(in_types, attrs):
    d, w = in_types
    if d.dtype != "uint8" or w.dtype != "int8" or len(d.shape) != 2 or len(w.shape) != 5 or \
            tuple(w.shape[2:]) != (BLOCK_N // 2, 2, MMLA_K) or w.shape[1] != -(-d.shape[1] // MMLA_K):
        raise ValueError(f"qnn.dense_u8s8_mmla needs uint8 data [M,K] and int8 weight "
                         f"[N/{BLOCK_N},K/{MMLA_K},{BLOCK_N // 2},2,{MMLA_K}], got {d.dtype} {list(d.shape)} and "
                         f"{w.dtype} {list(w.shape)}")
    return _dense_out_type(d, w, attrs)


def _dense_mmla_reference(x, w, units=None):
    unpacked = unpack_dense_u8s8_mmla_weight(w)[:units or w.shape[0] * BLOCK_N, :x.shape[1]]
    return (x.astype(np.int64) @ unpacked.T.astype(np.int64)).astype(np.int32)


# qnn.dense_u8s8's product in steps of the int8 matrix multiply-accumulate (two data rows x two
# output columns x 8 reduction elements: AArch64 USMMLA; tvmc.ops.cpu.int8_mmla), its weight
# packed for that step; AlterOpLayout emits it on targets with Target.mmla_u8s8 for M > 1.
register_op(OpDef("qnn.dense_u8s8_mmla", _dense_mmla_type, _dense_mmla_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: dense_u8s8_mmla(*inputs, attrs.get("units")),
                  {"cpu": [Implementation("dense_u8s8_mmla.cpu", schedule_dense_u8s8_mmla,
                                          config_space=dense_u8s8_mmla_config)],
                   "gpu": [Implementation("dense_u8s8_mmla.gpu", schedule_generic, config_space=generic_config)]},
                  flops=_dense_u8s8_flops))


# --- qnn.matmul -------------------------------------------------------------------------------

def _matmul_type(in_types, attrs):
    a, b, a_zp, b_zp = in_types
    _check_operand(a, "a")
    _check_operand(b, "b")
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"qnn.matmul needs [...,M,K] x [...,K,N], got {list(a.shape)} and {list(b.shape)}")
    _check_zero_point(a_zp, "a zero point", a.shape[-2])
    _check_zero_point(b_zp, "b zero point", b.shape[-1])
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), "int32")


def qnn_matmul(a, b, a_zero_point, b_zero_point, out_shape):
    """Quantized batched matmul (ONNX MatMulInteger, QLinearMatMul; numpy broadcasting of the
    batch axes): out[..., i, j] = sum_k (int32(a[..., i, k]) - a_zp[i]) * (int32(b[..., k, j]) - b_zp[j]);
    a [..., M, K], b [..., K, N] int8/uint8, a_zp int32 [] or [M] (per row), b_zp int32 [] or [N]
    (per column); out int32."""
    rk = te.reduce_axis(a.shape[-1], "k")
    nb = len(out_shape) - 2

    def f(*idx):
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        ab = broadcast_index(a.shape[:-2], batch)
        bb = broadcast_index(b.shape[:-2], batch)
        return te.sum(_widened(a[ab + (i, rk.var)], _zp_at(a_zero_point, i))
                      * _widened(b[bb + (rk.var, j)], _zp_at(b_zero_point, j)), rk)

    return te.compute(out_shape, f, name="qnn_matmul", tag="qnn_matmul")


def _matmul_reference(a, b, a_zp, b_zp):
    a_zp, b_zp = np.asarray(a_zp, np.int64), np.asarray(b_zp, np.int64)
    av = a.astype(np.int64) - (a_zp.reshape(-1, 1) if a_zp.ndim else a_zp)
    bv = b.astype(np.int64) - b_zp
    return np.matmul(av, bv).astype(np.int32)


register_op(OpDef("qnn.matmul", _matmul_type, _matmul_reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  lambda inputs, attrs, out_type: qnn_matmul(*inputs, out_type.shape), {
                      "cpu": [Implementation("qnn_matmul.cpu", schedule_matmul,
                                             config_space=_without_zero_points(matmul_config))],
                      "gpu": [Implementation("qnn_matmul.gpu", schedule_generic, config_space=generic_config)]}))


# --- qnn.requantize ---------------------------------------------------------------------------

def _requantize_type(in_types, attrs):
    x, scale, zp = in_types
    if x.dtype != "int32":
        raise ValueError(f"qnn.requantize takes an int32 accumulator, got {x.dtype}")
    if scale.dtype not in ("float16", "float32", "float64"):
        raise ValueError(f"scale must be a float tensor, got {scale.dtype}")
    block = channel_block(attrs.get("layout", "NCHW"))
    if block is not None and tuple(scale.shape) != ():
        if len(x.shape) != 5 or x.shape[4] != block or attrs.get("axis", 1) != 1 or \
                tuple(scale.shape) != (x.shape[1] * block,):
            raise ValueError(f"layout {attrs['layout']}: a per-channel scale {list(scale.shape)} needs x "
                             f"[N,C/{block},H,W,{block}] (axis 1) and C scales, got x {list(x.shape)}")
    elif tuple(scale.shape) != ():
        axis = attrs.get("axis", 1)
        if not 0 <= axis < len(x.shape) or tuple(scale.shape) != (x.shape[axis],):
            raise ValueError(f"a per-axis scale {list(scale.shape)} must be [{x.shape[axis]}] (axis {axis} of "
                             f"{list(x.shape)})" if 0 <= axis < len(x.shape) else f"axis {axis} out of range")
    _check_zero_point(zp, "output zero point")
    if attrs["out_dtype"] not in RANGES:
        raise ValueError(f"out_dtype must be int8 or uint8, got {attrs['out_dtype']}")
    if attrs.get("compute_dtype", "float64") not in ("float32", "float64"):
        raise ValueError(f"compute_dtype must be float32 or float64, got {attrs['compute_dtype']}")
    return TensorType(x.shape, attrs["out_dtype"])


def _requantize_compute(inputs, attrs, out_type):
    """out = saturate(round_half_to_even(float(x) * float(scale)) + output_zero_point), in
    compute_dtype (see qnn_requantize); with a blocked `layout` NCHW[b]c a per-channel scale is
    read at channel i[1] * b + i[4]."""
    x, scale, zp = inputs
    cd = attrs.get("compute_dtype", "float64")
    lo, hi = RANGES[attrs["out_dtype"]]
    axis = attrs.get("axis", 1)
    block = channel_block(attrs.get("layout", "NCHW"))

    def f(*i):
        if scale.ndim == 0:
            s = scale[()]
        else:
            s = scale[i[axis]] if block is None else scale[i[1] * block + i[4]]
        r = te.round(te.cast(cd, x[i]) * te.cast(cd, s)) + te.cast(cd, zp[()])
        r = te.minimum(te.maximum(r, te.const(float(lo), cd)), te.const(float(hi), cd))
        return te.cast(attrs["out_dtype"], r)

    return te.compute(x.shape, f, name="qnn_requantize")


def qnn_requantize_reference(x, scale, zp, out_dtype, axis=1, compute_dtype="float64", layout="NCHW"):
    """Numpy qnn.requantize: x int32, scale [] or [x.shape[axis]], zp int32 [] -> out_dtype; with a
    blocked `layout` NCHW[b]c (x [N, C/b, H, W, b]) a per-channel scale [C] is blocked the same way.

    round(x * scale) rounds half to even (numpy's rint, ONNX QuantizeLinear's rounding), then
    the zero point is added and the sum saturated to out_dtype's range. compute_dtype float64 is
    what the ONNX reference evaluator does for QLinearConv / QLinearMatMul (the int32 accumulator
    times the scale x_scale * w_scale / y_scale, itself computed in float32); float32 is what
    onnxruntime's MLAS requantization does (MlasRequantizeOutput). The two differ only where the
    float32 product rounds across a .5 boundary: at most one unit in the output."""
    scale = np.asarray(scale)
    block = channel_block(layout)
    if scale.ndim and block is not None:
        scale = scale.reshape(1, -1, 1, 1, block)
    elif scale.ndim:
        shape = [1] * x.ndim
        shape[axis] = scale.shape[0]
        scale = scale.reshape(shape)
    v = np.rint(x.astype(compute_dtype) * scale.astype(compute_dtype)) + np.asarray(zp).astype(compute_dtype)
    lo, hi = RANGES[out_dtype]
    return np.clip(v, lo, hi).astype(out_dtype)


register_op(OpDef("qnn.requantize", _requantize_type, qnn_requantize_reference, OpPattern.BROADCAST,
                  _requantize_compute, INJECTIVE))


# --- qnn.dequantize / qnn.quantize (ONNX DequantizeLinear / QuantizeLinear) -------------------

def _broadcast3_type(in_types, out_dtype):
    x, scale, zp = in_types
    shape = broadcast_shape(broadcast_shape(x.shape, scale.shape), zp.shape)
    if tuple(shape) != tuple(x.shape):
        raise ValueError(f"scale {list(scale.shape)} and zero point {list(zp.shape)} may not grow {list(x.shape)}")
    return TensorType(x.shape, out_dtype)


def _dequantize_type(in_types, attrs):
    if in_types[0].dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
        raise ValueError(f"qnn.dequantize takes an integer tensor, got {in_types[0].dtype}")
    return _broadcast3_type(in_types, attrs["out_dtype"])


def _dequantize_compute(inputs, attrs, out_type):
    """(float32(x) - float32(zp)) * float32(scale), cast to out_dtype (numpy broadcasting)."""
    x, scale, zp = inputs

    def f(*i):
        v = (te.cast("float32", x[i]) - te.cast("float32", zp[broadcast_index(zp.shape, i)])) \
            * te.cast("float32", scale[broadcast_index(scale.shape, i)])
        return te.cast(attrs["out_dtype"], v)

    return te.compute(x.shape, f, name="qnn_dequantize")


def qnn_dequantize_reference(x, scale, zp, out_dtype):
    """ONNX DequantizeLinear: (float32(x) - zero point) * scale in float32, then out_dtype; scale
    and zp broadcast against x (a per-axis one already shaped [C, 1, ...])."""
    v = (x.astype(np.float32) - np.asarray(zp).astype(np.float32)) * np.asarray(scale).astype(np.float32)
    return v.astype(out_dtype)


register_op(OpDef("qnn.dequantize", _dequantize_type, qnn_dequantize_reference, OpPattern.BROADCAST,
                  _dequantize_compute, INJECTIVE))

QUANTIZE_RANGES = {**RANGES, "uint16": (0, 65535), "int16": (-32768, 32767)}


def _quantize_type(in_types, attrs):
    x, scale, _ = in_types
    if x.dtype != scale.dtype or not is_float(x.dtype):
        raise ValueError(f"qnn.quantize divides in one float type, got {x.dtype} and {scale.dtype}")
    if attrs["out_dtype"] not in QUANTIZE_RANGES:
        raise ValueError(f"out_dtype must be one of {', '.join(QUANTIZE_RANGES)}, got {attrs['out_dtype']}")
    return _broadcast3_type(in_types, attrs["out_dtype"])


def _quantize_compute(inputs, attrs, out_type):
    """saturate(round_half_to_even(x / scale) + zp) in x's float type, cast to out_dtype."""
    x, scale, zp = inputs
    lo, hi = QUANTIZE_RANGES[attrs["out_dtype"]]
    d = x.dtype

    def f(*i):
        r = te.round(x[i] / scale[broadcast_index(scale.shape, i)]) + te.cast(d, zp[broadcast_index(zp.shape, i)])
        return te.cast(attrs["out_dtype"], te.minimum(te.maximum(r, te.const(float(lo), d)), te.const(float(hi), d)))

    return te.compute(x.shape, f, name="qnn_quantize")


def qnn_quantize_reference(x, scale, zp, out_dtype):
    """ONNX QuantizeLinear: round half to even of x / scale (in x's float type) + zero point,
    saturated to out_dtype; scale and zp broadcast against x."""
    lo, hi = QUANTIZE_RANGES[out_dtype]
    r = np.rint(x / np.asarray(scale)) + np.asarray(zp).astype(x.dtype)
    return np.clip(r, np.asarray(lo, x.dtype), np.asarray(hi, x.dtype)).astype(out_dtype)


register_op(OpDef("qnn.quantize", _quantize_type, qnn_quantize_reference, OpPattern.BROADCAST,
                  _quantize_compute, INJECTIVE))


# --- qnn.rescale (an 8-bit tensor through a per-channel affine map into another quantization) --

def _rescale_type(in_types, attrs):
    x, x_zp, scale, shift, y_zp = in_types
    if x.dtype not in QUANTIZED_DTYPES + ("int32",):
        raise ValueError(f"qnn.rescale takes an int8, uint8 or int32 tensor, got {x.dtype}")
    for t, what in ((x_zp, "input zero point"), (y_zp, "output zero point")):
        _check_zero_point(t, what)
    for t, what in ((scale, "scale"), (shift, "shift")):
        if t.dtype != "float32":
            raise ValueError(f"qnn.rescale's {what} must be float32, got {t.dtype}")
    if attrs["out_dtype"] not in RANGES:
        raise ValueError(f"out_dtype must be int8 or uint8, got {attrs['out_dtype']}")
    if broadcast_shape(broadcast_shape(x.shape, scale.shape), shift.shape) != tuple(x.shape):
        raise ValueError(f"scale {list(scale.shape)} and shift {list(shift.shape)} may not grow {list(x.shape)}")
    return TensorType(x.shape, attrs["out_dtype"])


def _rescale_compute(inputs, attrs, out_type):
    """saturate(round_half_to_even((float32(x) - x_zp) * scale + shift) + y_zp) in float32."""
    x, x_zp, scale, shift, y_zp = inputs
    lo, hi = RANGES[attrs["out_dtype"]]

    def f(*i):
        v = (te.cast("float32", x[i]) - te.cast("float32", x_zp[()])) * scale[broadcast_index(scale.shape, i)] \
            + shift[broadcast_index(shift.shape, i)]
        r = te.round(v) + te.cast("float32", y_zp[()])
        return te.cast(attrs["out_dtype"], te.minimum(te.maximum(r, te.const(float(lo), "float32")),
                                                      te.const(float(hi), "float32")))

    return te.compute(x.shape, f, name="qnn_rescale")


def qnn_rescale_reference(x, x_zp, scale, shift, y_zp, out_dtype):
    """Numpy qnn.rescale: x int8/uint8/int32, zero points int32 [], scale and shift float32
    broadcasting against x (per channel: [C, 1, 1] for NCHW) -> out_dtype:

        out = saturate(round_half_to_even((float32(x) - x_zp) * scale + shift) + y_zp)

    in float32: QuantizeLinear(f(DequantizeLinear(x))) for an affine f(v) = a * v + b, with
    scale = x_scale * a / y_scale and shift = b / y_scale (passes/fold_quantized_chains.py).
    Float32 rounding of the folded constants can move a value near .5 by one unit."""
    v = (x.astype(np.float32) - np.float32(x_zp)) * np.asarray(scale, np.float32) + np.asarray(shift, np.float32)
    lo, hi = RANGES[out_dtype]
    return np.clip(np.rint(v) + np.float32(y_zp), lo, hi).astype(out_dtype)


register_op(OpDef("qnn.rescale", _rescale_type, qnn_rescale_reference, OpPattern.BROADCAST, _rescale_compute,
                  INJECTIVE))


# --- qnn.add (two 8-bit tensors added in a third quantization) -----------------------------------

def _add_type(in_types, attrs):
    a, a_zp, a_scale, b, b_zp, b_scale, y_zp = in_types
    _check_operand(a, "a")
    _check_operand(b, "b")
    for t, what in ((a_zp, "a zero point"), (b_zp, "b zero point"), (y_zp, "output zero point")):
        _check_zero_point(t, what)
    for t, what in ((a_scale, "a scale"), (b_scale, "b scale")):
        if t.dtype != "float32" or tuple(t.shape) != ():
            raise ValueError(f"qnn.add's {what} must be a float32 scalar, got {t.dtype} {list(t.shape)}")
    if attrs["out_dtype"] not in RANGES:
        raise ValueError(f"out_dtype must be int8 or uint8, got {attrs['out_dtype']}")
    return TensorType(broadcast_shape(a.shape, b.shape), attrs["out_dtype"])


def _add_compute(inputs, attrs, out_type):
    """saturate(round_half_to_even((a - a_zp) * a_scale + (b - b_zp) * b_scale) + y_zp) in float32."""
    a, a_zp, a_scale, b, b_zp, b_scale, y_zp = inputs
    lo, hi = RANGES[attrs["out_dtype"]]

    def term(x, zp, scale, i):
        return (te.cast("float32", x[broadcast_index(x.shape, i)]) - te.cast("float32", zp[()])) * scale[()]

    def f(*i):
        r = te.round(term(a, a_zp, a_scale, i) + term(b, b_zp, b_scale, i)) + te.cast("float32", y_zp[()])
        return te.cast(attrs["out_dtype"], te.minimum(te.maximum(r, te.const(float(lo), "float32")),
                                                      te.const(float(hi), "float32")))

    return te.compute(out_type.shape, f, name="qnn_add")


def qnn_add_reference(a, a_zp, a_scale, b, b_zp, b_scale, y_zp, out_dtype):
    """Numpy qnn.add (TVM's qnn.add; QuantizeLinear(DequantizeLinear(a) + DequantizeLinear(b))):
    a, b int8/uint8 (numpy broadcasting), zero points int32 [], a_scale = a's scale / y's scale and
    b_scale likewise float32 []:

        out = saturate(round_half_to_even((a - a_zp) * a_scale + (b - b_zp) * b_scale) + y_zp)

    in float32 (within one unit of the float chain, which divides by y's scale after the sum)."""
    va = (a.astype(np.float32) - np.float32(a_zp)) * np.float32(a_scale)
    vb = (b.astype(np.float32) - np.float32(b_zp)) * np.float32(b_scale)
    lo, hi = RANGES[out_dtype]
    return np.clip(np.rint(va + vb) + np.float32(y_zp), lo, hi).astype(out_dtype)


register_op(OpDef("qnn.add", _add_type, qnn_add_reference, OpPattern.BROADCAST, _add_compute, INJECTIVE))
