"""ONNX converters, quantization group: QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv (DynamicQuantizeLinear imports through its function body).

The integer operators become qnn ops (tvmc/ops/qnn.py) on the 8-bit operands, so constant weights
stay one byte in mod.params: qnn.conv2d / qnn.dense / qnn.matmul accumulate in int32, and
QLinear* requantize with qnn.requantize as the ONNX reference does (the accumulator times
x_scale * w_scale / y_scale in float64, rounded half to even, plus y_zero_point, saturated).
Zero points may be run-time tensors (DynamicQuantizeLinear's); scales too. QuantizeLinear divides
in the input's float type and rounds half to even.
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, np_dtype_name, prod, reshape
from tvmc.frontend.onnx.nn import conv2d_call
from tvmc.frontend.onnx.registry import converter

# integer quantized types and their ranges (int4/uint4/float8 have no numpy dtype: refused)
_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _per_axis(ctx, p, x, attrs, what: str):
    """Scale or zero point `p` broadcastable against x: a scalar, a 1-D vector along `axis`, or
    (with block_size) a tensor of x's shape but ceil(n / block_size) on `axis`, repeated over blocks."""
    rank = len(x.shape)
    block = int(attrs.get("block_size", 0))
    if p.type.size == 1 and not block:
        return reshape(ctx, p, ())
    axis = norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if not block:
        if len(p.shape) != 1 or p.shape[0] != x.shape[axis]:
            raise ctx.error(f"{what} {p.type} must be a scalar or [{x.shape[axis]}] (axis {axis})")
        return reshape(ctx, p, (p.shape[0],) + (1,) * (rank - axis - 1))
    blocks = -(-x.shape[axis] // block)
    if len(p.shape) != rank or p.shape[axis] != blocks:
        raise ctx.error(f"{what} {p.type} does not block {x.type} by {block} on axis {axis}")
    index = ctx.const(np.arange(x.shape[axis], dtype=np.int64) // block, "blocks")
    return ctx.call("take", [p, index], {"axis": axis})


def _quant_dtype(ctx, zp, attrs) -> str:
    dtype = zp.dtype if zp is not None else np_dtype_name(int(attrs["output_dtype"])) if attrs.get("output_dtype") \
        else "uint8"
    if dtype not in _RANGES:
        raise ctx.error(f"quantized type {dtype} is not supported (uint8, int8, uint16, int16)")
    return dtype


def _opt(inputs, i):
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


@converter(10, 13, 19, 21, 23, 24, 25, 28)
def QuantizeLinear(ctx, node, inputs, attrs, opset):
    """ONNX QuantizeLinear(x, y_scale, y_zero_point; axis, block_size, output_dtype, precision) ->
    round(x / scale) + zero_point saturated to the quantized type (uint8 by default); the division
    in `precision`'s type, else in the promotion of x's and the scale's."""
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    dtype = _quant_dtype(ctx, zp, attrs)
    div = np_dtype_name(int(attrs["precision"])) if attrs.get("precision") else \
        np.result_type(x.dtype, scale.dtype).name
    xd = x if x.dtype == div else ctx.call("cast", [x], {"dtype": div})
    sd = scale if scale.dtype == div else ctx.call("cast", [scale], {"dtype": div})
    zp = _per_axis(ctx, zp, x, attrs, "y_zero_point") if zp is not None else \
        ctx.const(np.zeros((), dtype), "zero_point")
    return ctx.call("qnn.quantize", [xd, _per_axis(ctx, sd, x, attrs, "y_scale"), zp], {"out_dtype": dtype})


@converter(10, 13, 19, 21, 23, 24, 25, 28)
def DequantizeLinear(ctx, node, inputs, attrs, opset):
    """ONNX DequantizeLinear(x, x_scale, x_zero_point; axis, block_size, output_dtype) -> qnn.dequantize:
    (float32(x) - zero_point) * scale in float32, then the scale's float type (or output_dtype). Not
    folded at import where x is a constant (a weight): FakeQuantizationToInteger reads it as int8."""
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    zp = _per_axis(ctx, zp, x, attrs, "x_zero_point") if zp is not None else ctx.const(np.zeros((), x.dtype),
                                                                                         "zero_point")
    out = np_dtype_name(int(attrs["output_dtype"])) if attrs.get("output_dtype") else scale.dtype
    return ctx.call("qnn.dequantize", [x, _per_axis(ctx, scale, x, attrs, "x_scale"), zp], {"out_dtype": out},
                    fold=False)


def _zero_point(ctx, zp, x, what: str, channels: int | None = None, rank: int = 1):
    """Zero point `zp` of the 8-bit operand `x` as qnn ops take it: int32, a scalar [] or (where
    `channels` is given) one value per channel [channels]; None -> 0. A constant one is checked and
    converted at import; a run-time one (DynamicQuantizeLinear's) is cast in the graph. Raises the
    node's ModelError for a zero point of another type than x's whose values leave x's range, or
    of a shape that is neither a scalar nor [channels] (`rank`: the axes a per-channel one may
    have, all but one of extent 1)."""
    if zp is None:
        return ctx.const(np.zeros((), np.int32), "zero_point")
    if x.dtype not in ("int8", "uint8"):
        raise ctx.error(f"input {x.type} must be int8 or uint8")
    lo, hi = _RANGES[x.dtype]
    if zp.dtype != x.dtype and not (is_const(zp) and np.issubdtype(zp.value.dtype, np.integer)):
        raise ctx.error(f"{what} {zp.type} must have the type of its operand {x.type}")
    if is_const(zp) and zp.value.size and not (lo <= zp.value.min() and zp.value.max() <= hi):
        raise ctx.error(f"{what} {zp.value.min() if zp.value.min() < lo else zp.value.max()} is outside "
                        f"{x.dtype}'s range [{lo}, {hi}]")
    if zp.type.size == 1 and len(zp.shape) <= rank:
        shape = ()
    elif channels is not None and len(zp.shape) <= rank and zp.type.size == channels \
            and sorted(zp.shape)[:-1] == [1] * (len(zp.shape) - 1):
        shape = (channels,)
    else:
        per = f" or [{channels}]" if channels is not None else ""
        raise ctx.error(f"{what} {zp.type} must be a scalar{per}")
    if is_const(zp):
        return ctx.derived(zp, "zero_point_int32", lambda v: v.astype(np.int32).reshape(shape))
    return ctx.call("cast", [reshape(ctx, zp, shape)], {"dtype": "int32"})


def _scale(ctx, s, what: str, channels: int | None = None):
    """A scale as qnn.requantize's factors take it: a scalar [] or one per channel [channels];
    raises the node's ModelError for another shape (a per-axis scale of the wrong length)."""
    if s.dtype not in ("float32", "float64", "float16"):
        raise ctx.error(f"{what} {s.type} must be a float tensor")
    if s.type.size == 1:
        return reshape(ctx, s, ())
    if channels is not None and len(s.shape) == 1 and s.shape[0] == channels:
        return s
    per = f" or [{channels}] (one per output channel)" if channels is not None else ""
    raise ctx.error(f"{what} {s.type} must be a scalar{per}")


def _requantize(ctx, acc, x_scale, w_scale, y_scale, y_zp, dtype, axis):
    """qnn.requantize of the int32 accumulator by x_scale * w_scale / y_scale (computed in the
    scales' own type, as the ONNX reference does; folded at import when constant) in float64,
    + y_zero_point, rounded half to even and saturated to `dtype`; w_scale [] or per channel
    along `axis`."""
    s = ctx.call("divide", [ctx.call("multiply", [x_scale, w_scale]), y_scale])
    return ctx.call("qnn.requantize", [acc, s, y_zp], {"out_dtype": dtype, "axis": axis, "compute_dtype": "float64"})


def _matmul(ctx, a, b, a_zp, b_zp):
    """int32 qnn matmul of a [..., M, K] and b [..., K, N] (8-bit) with zero points a_zp [] or
    per row [M], b_zp [] or per column [N]. A constant 2-D b with a per-tensor a_zp runs as
    qnn.dense on b transposed once at import ([N, K], still 8-bit; a's leading axes flattened
    into rows), anything else as qnn.matmul."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.error(f"operands {a.type} and {b.type} must have rank >= 2")
    az = _zero_point(ctx, a_zp, a, "a_zero_point", a.shape[-2], rank=2)
    bz = _zero_point(ctx, b_zp, b, "b_zero_point", b.shape[-1])
    if is_const(b) and len(b.shape) == 2 and az.shape == () and a.shape[-1] == b.shape[0]:
        wt = ctx.derived(b, "transposed", lambda v: np.ascontiguousarray(v.T))
        rows = reshape(ctx, a, (prod(a.shape[:-1]), a.shape[-1]))
        out = ctx.call("qnn.dense", [rows, wt, az, bz])
        return reshape(ctx, out, tuple(a.shape[:-1]) + (b.shape[1],))
    return ctx.call("qnn.matmul", [a, b, az, bz])


@converter(10)
def MatMulInteger(ctx, node, inputs, attrs, opset):
    """ONNX MatMulInteger-10(A, B, a_zero_point, b_zero_point) -> int32 qnn.dense / qnn.matmul on
    the 8-bit operands (B stays 8-bit: one byte per weight in mod.params)."""
    return _matmul(ctx, inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3))


@converter(10, 21)
def QLinearMatMul(ctx, node, inputs, attrs, opset):
    """ONNX QLinearMatMul-10/21(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the int32 qnn
    matmul, then qnn.requantize to y_zp's type (a_scale and y_scale scalars, b_scale a scalar or
    one per column)."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs[:8]
    acc = _matmul(ctx, a, b, a_zp, b_zp)
    n = b.shape[-1] if len(b.shape) >= 2 else None
    return _requantize(ctx, acc, _scale(ctx, a_scale, "a_scale"), _scale(ctx, b_scale, "b_scale", n),
                       _scale(ctx, y_scale, "y_scale"), _zero_point(ctx, y_zp, y_zp, "y_zero_point"), y_zp.dtype,
                       len(acc.shape) - 1)


def _conv_integer(ctx, inputs, x_zp, w_zp, attrs, op_type):
    """(int32 qnn.conv2d [N, O, OH, OW] of x and w with their zero points, number of spatial axes):
    w's zero point a scalar or one per output channel."""
    x, w = inputs[0], inputs[1]
    xz = _zero_point(ctx, x_zp, x, "x_zero_point")
    wz = _zero_point(ctx, w_zp, w, "w_zero_point", w.shape[0] if w.shape else None)
    acc, _, n_sp = conv2d_call(ctx, [x, w], attrs, op="qnn.conv2d", op_type=op_type, extra=(xz, wz))
    return acc, n_sp


def _drop_h(ctx, out, n_sp):
    """A 1-D convolution's output without the H = 1 axis it ran with."""
    return reshape(ctx, out, (out.shape[0], out.shape[1], out.shape[3])) if n_sp == 1 else out


@converter(10)
def ConvInteger(ctx, node, inputs, attrs, opset):
    """ONNX ConvInteger-10(x, w, x_zero_point, w_zero_point) -> int32 qnn.conv2d on the 8-bit
    operands (w stays 8-bit: one byte per weight in mod.params)."""
    acc, n_sp = _conv_integer(ctx, inputs, _opt(inputs, 2), _opt(inputs, 3), attrs, "ConvInteger")
    return _drop_h(ctx, acc, n_sp)


@converter(10)
def QLinearConv(ctx, node, inputs, attrs, opset):
    """ONNX QLinearConv-10(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B int32): int32
    qnn.conv2d plus B, then qnn.requantize (w_scale a scalar or one per output channel) to
    y_zp's type."""
    if len(inputs) < 8:
        raise ctx.error("QLinearConv needs inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale")
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    acc, n_sp = _conv_integer(ctx, [x, w], x_zp, w_zp, attrs, "QLinearConv")
    channels = acc.shape[1]
    bias = _opt(inputs, 8)
    if bias is not None:
        if bias.dtype != "int32" or tuple(bias.shape) != (channels,):
            raise ctx.error(f"bias B {bias.type} must be int32 [{channels}]")
        acc = ctx.call("add", [acc, reshape(ctx, bias, (channels, 1, 1))])
    dtype = y_zp.dtype if y_zp is not None else x.dtype
    yz = _zero_point(ctx, y_zp, y_zp, "y_zero_point") if y_zp is not None else \
        ctx.const(np.zeros((), np.int32), "zero_point")
    out = _requantize(ctx, acc, _scale(ctx, x_scale, "x_scale"), _scale(ctx, w_scale, "w_scale", channels),
                      _scale(ctx, y_scale, "y_scale"), yz, dtype, 1)
    return _drop_h(ctx, out, n_sp)
