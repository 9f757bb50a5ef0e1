"""ONNX converters, quantization group: QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv (DynamicQuantizeLinear imports through its function body).

Integer arithmetic stays integer (int32 matmul and conv of the zero-point-shifted operands), and
requantization computes as the ONNX reference does: QuantizeLinear divides in the input's float
type and rounds half to even; QLinear* scale their int32 accumulators in float64.
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import norm_axis, np_dtype_name, reshape
from tvmc.frontend.onnx.nn import Conv
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


def quantize(ctx, y, zp, dtype: str):
    """round(y) + zp, saturated to dtype's range: y a float tensor, zp (int or None) broadcastable."""
    lo, hi = _RANGES[dtype]
    r = ctx.call("round", [y])
    if zp is not None:
        r = ctx.call("add", [r, ctx.call("cast", [zp], {"dtype": y.dtype})])
    return ctx.call("cast", [ctx.call("clip", [r], {"a_min": float(lo), "a_max": float(hi)})], {"dtype": dtype})


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
    y = ctx.call("divide", [xd, _per_axis(ctx, sd, x, attrs, "y_scale")])
    return quantize(ctx, y, _per_axis(ctx, zp, x, attrs, "y_zero_point") if zp is not None else None, dtype)


@converter(10, 13, 19, 21, 23, 24, 25, 28)
def DequantizeLinear(ctx, node, inputs, attrs, opset):
    """ONNX DequantizeLinear(x, x_scale, x_zero_point; axis, block_size, output_dtype) ->
    (float32(x) - zero_point) * scale, in the scale's float type (or output_dtype)."""
    x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
    dx = ctx.call("cast", [x], {"dtype": "float32"})
    if zp is not None:
        zpf = ctx.call("cast", [_per_axis(ctx, zp, x, attrs, "x_zero_point")], {"dtype": "float32"})
        dx = ctx.call("subtract", [dx, zpf])
    s = _per_axis(ctx, scale, x, attrs, "x_scale")
    y = ctx.call("multiply", [dx, ctx.call("cast", [s], {"dtype": "float32"})])
    out = np_dtype_name(int(attrs["output_dtype"])) if attrs.get("output_dtype") else scale.dtype
    return ctx.call("cast", [y], {"dtype": out})


def _shifted(ctx, x, zp, shape_of_zp):
    """int32(x) - int32(zero point) (zero point reshaped by `shape_of_zp` to broadcast)."""
    x32 = ctx.call("cast", [x], {"dtype": "int32"})
    if zp is None:
        return x32
    z = ctx.call("cast", [shape_of_zp(zp)], {"dtype": "int32"})
    return ctx.call("subtract", [x32, z])


def _matmul_operands(ctx, inputs, a_zp, b_zp):
    a, b = inputs[0], inputs[1]
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.error(f"operands {a.type} and {b.type} must have rank >= 2")

    def a_zp_shape(z):  # scalar, or one per row of A
        return reshape(ctx, z, ()) if z.type.size == 1 else reshape(ctx, z, (z.shape[-1], 1))

    def b_zp_shape(z):  # scalar, or one per column of B
        return reshape(ctx, z, ()) if z.type.size == 1 else reshape(ctx, z, (z.shape[-1],))

    return _shifted(ctx, a, a_zp, a_zp_shape), _shifted(ctx, b, b_zp, b_zp_shape)


@converter(10)
def MatMulInteger(ctx, node, inputs, attrs, opset):
    """ONNX MatMulInteger(A, B, a_zero_point, b_zero_point) -> int32 nn.matmul of the shifted operands."""
    a, b = _matmul_operands(ctx, inputs, _opt(inputs, 2), _opt(inputs, 3))
    return ctx.call("nn.matmul", [a, b])


def _requantize(ctx, acc, a_scale, b_scale, y_scale, y_zp, dtype):
    """acc (int32) * (a_scale * b_scale / y_scale) in float64 (the scales' product in their own
    type, as the ONNX reference), + y_zero_point, rounded half to even and saturated; the scales
    broadcast against acc (scalars, or per output channel)."""
    s = ctx.call("divide", [ctx.call("multiply", [a_scale, b_scale]), y_scale])
    y = ctx.call("multiply", [ctx.call("cast", [acc], {"dtype": "float64"}),
                              ctx.call("cast", [s], {"dtype": "float64"})])
    return quantize(ctx, y, y_zp, dtype)


@converter(10, 21)
def QLinearMatMul(ctx, node, inputs, attrs, opset):
    """ONNX QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): int32 matmul of the
    shifted operands, requantized to y_zp's type."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs[:8]
    acc = ctx.call("nn.matmul", list(_matmul_operands(ctx, [a, b], a_zp, b_zp)))
    return _requantize(ctx, acc, reshape(ctx, a_scale, ()), reshape(ctx, b_scale, ()) if b_scale.type.size == 1
                       else b_scale, reshape(ctx, y_scale, ()), reshape(ctx, y_zp, ()), y_zp.dtype)


def _conv_integer(ctx, x, w, x_zp, w_zp, attrs):
    """int32 conv of x - x_zero_point and w - w_zero_point (w's zero point scalar or per output
    channel; a constant weight stays constant: integer calls on constants fold at import)."""
    xs = _shifted(ctx, x, x_zp, lambda z: reshape(ctx, z, ()))
    ws = _shifted(ctx, w, w_zp, lambda z: reshape(ctx, z, ()) if z.type.size == 1
                  else reshape(ctx, z, (z.shape[0],) + (1,) * (len(w.shape) - 1)))
    return Conv(ctx, None, [xs, ws], attrs, 11)


@converter(10)
def ConvInteger(ctx, node, inputs, attrs, opset):
    """ONNX ConvInteger(x, w, x_zero_point, w_zero_point) -> int32 nn.conv2d of the shifted operands."""
    return _conv_integer(ctx, inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3), attrs)


@converter(10)
def QLinearConv(ctx, node, inputs, attrs, opset):
    """ONNX QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B int32): int32 conv of the
    shifted operands plus B, requantized (w_scale per output channel or scalar)."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    per_channel = (w_scale.shape[0],) + (1,) * (len(x.shape) - 2)
    acc = _conv_integer(ctx, x, w, x_zp, w_zp, attrs)
    bias = _opt(inputs, 8)
    if bias is not None:
        acc = ctx.call("add", [acc, reshape(ctx, bias, (bias.shape[0],) + (1,) * (len(x.shape) - 2))])
    w_scale = reshape(ctx, w_scale, per_channel if w_scale.type.size > 1 else ())
    return _requantize(ctx, acc, reshape(ctx, x_scale, ()), w_scale, reshape(ctx, y_scale, ()),
                       reshape(ctx, y_zp, ()) if y_zp is not None else None,
                       y_zp.dtype if y_zp is not None else x.dtype)
