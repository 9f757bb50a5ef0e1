"""ONNX converters, onnxruntime's `com.microsoft` quantized operators (the ones
onnxruntime.quantization writes in the QOperator format and with quantize_dynamic): QLinearAdd,
QLinearMul, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool, QLinearLeakyRelu,
QLinearSigmoid, QLinearSoftmax, QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat (operator set
com.microsoft 1; MatMulNBits, DynamicQuantizeLSTM and QAttention, built from several of these
and our float ops, are in microsoft_nn.py). Any other operator of the domain is refused by the
importer with the one-line UnsupportedOpError naming it and its nodes.

Source: onnxruntime docs/ContribOperators.md (each converter names its section), and for the
rounding onnxruntime's CPU kernels (MLAS), which define what the operators compute beyond the
documented formula. How each one is lowered and where it may differ from onnxruntime:

- With an integer kernel (QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat,
  QLinearGlobalAveragePool): the int32 accumulator of qnn.dense / qnn.matmul (or a sum of the
  int32 inputs), then qnn.requantize or a float scale, both in float32 as MLAS does
  (MlasRequantizeOutput: round half to even of float32(acc) * float32(scale), + zero point,
  saturated; the float outputs float32(acc) * (a_scale * b_scale) + bias). The accumulators are
  exact; the integer outputs equal onnxruntime's where the float32 product rounds the same way
  (it does, but for a product that our code and MLAS's vector code round across a .5 by fused or
  separate multiply-adds: at most one unit).
- Elementwise ones: MLAS's float32 formula (QLinearAdd: zp_c - (r_a zp_a + r_b zp_b) + r_a a +
  r_b b with r_x = x_scale / c_scale; QLinearMul: (a - zp_a)(b - zp_b) * (a_scale b_scale / c_scale)
  + zp_c), rounded half to even and saturated. onnxruntime's AVX2 kernels evaluate the same
  formula with fused multiply-adds, which may round a value near .5 the other way: one unit.
- Otherwise dequantize -> the float op -> quantize (QLinearConcat of inputs with other scales,
  QLinearAveragePool, QLinearLeakyRelu, QLinearSigmoid, QLinearSoftmax), onnxruntime's rounding:
  QuantizeLinear's round half to even of v / y_scale. onnxruntime tabulates LeakyRelu and Sigmoid
  on the 256 inputs through the same dequantize and quantize, so LeakyRelu is exact; Sigmoid's
  exp (ours: tvmc's polynomial, onnxruntime: MlasComputeLogistic) may differ in the last float
  bit: one unit where that crosses a .5. QLinearSoftmax is onnxruntime's: the output is
  round(softmax(x) * floor(1 / y_scale)) + y_zero_point (floor(1 / y_scale), not 1 / y_scale, as
  onnxruntime's kernel does), saturated; one unit from float32 exp and sum order. onnxruntime's
  int8 QLinearSoftmax wraps a result above 127 (a probability that rounds to 1 with y_zp = -128)
  to -128; tvmc saturates it to 127.
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, prod
from tvmc.frontend.onnx.nn import AveragePool, Softmax
from tvmc.frontend.onnx.quantization import _matmul, _scale, _zero_point
from tvmc.frontend.onnx.registry import domain_converter

DOMAIN = "com.microsoft"
# these operators exist in version 1 of the com.microsoft operator set only
VERSIONS = (1,)
_EIGHT_BIT = ("uint8", "int8")


def _opt(inputs, i):
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def _needs(ctx, inputs, names):
    """Raise the node's ModelError unless every required input (named in order) is present."""
    for i, name in enumerate(names):
        if name and _opt(inputs, i) is None:
            raise ctx.error(f"missing input {i} ({name})")


def _operand(ctx, x, what: str):
    if x.dtype not in _EIGHT_BIT:
        raise ctx.error(f"{what} {x.type} must be uint8 or int8")
    return x


def _params(ctx, x, scale, zp, what: str):
    """(scalar float32 scale, int32 [] zero point) of the 8-bit tensor `x`: the scale a scalar (or
    [1]) float tensor, the zero point absent (0) or a scalar in x's range (a constant of another
    integer type is checked against it); a ModelError naming the node otherwise."""
    _operand(ctx, x, what)
    s = _scale(ctx, scale, f"{what}_scale")
    if s.dtype != "float32":
        s = ctx.call("cast", [s], {"dtype": "float32"})
    return s, _zero_point(ctx, zp, x, f"{what}_zero_point")


def _f32(ctx, e):
    return e if e.dtype == "float32" else ctx.call("cast", [e], {"dtype": "float32"})


def _dequantize(ctx, x, scale, zp):
    """float32 (x - zp) * scale (ONNX DequantizeLinear; exact for the 8-bit differences)."""
    return ctx.call("qnn.dequantize", [x, scale, zp], {"out_dtype": "float32"})


def _quantize(ctx, v, scale, zp, dtype: str):
    """round half to even of float32 v / scale, + zp, saturated to `dtype` (ONNX QuantizeLinear,
    onnxruntime's MlasQuantizeLinear)."""
    return ctx.call("qnn.quantize", [v, scale, zp], {"out_dtype": dtype})


def _rounded(ctx, v, zp, dtype: str):
    """round half to even of float32 v, + zp, saturated to `dtype`."""
    one = ctx.const(np.float32(1.0), "one")
    return _quantize(ctx, v, one, zp, dtype)


def _output_params(ctx, x, scale, zp, what: str):
    """(scale, int32 zero point, dtype) of an 8-bit output whose zero point may be absent (then
    the output has x's type)."""
    dtype = zp.dtype if zp is not None else x.dtype
    if dtype not in _EIGHT_BIT:
        raise ctx.error(f"{what}_zero_point {zp.type} must be uint8 or int8")
    if zp is not None and zp.dtype != x.dtype:
        raise ctx.error(f"{what}_zero_point {zp.type} must have the type of the input {x.type}")
    s = _f32(ctx, _scale(ctx, scale, f"{what}_scale"))
    z = _zero_point(ctx, zp, zp, f"{what}_zero_point") if zp is not None else \
        ctx.const(np.zeros((), np.int32), "zero_point")
    return s, z, dtype


@domain_converter(DOMAIN, *VERSIONS)
def QLinearAdd(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearAdd(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
    C_zero_point): C = (A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale + C_zp, numpy
    broadcasting, uint8 or int8 (A's type), per-tensor parameters. Computed as MLAS does, in
    float32: (zp_c - (r_a zp_a + r_b zp_b) + r_a A) + r_b B with r_x = X_scale / C_scale, rounded
    half to even and saturated. ContribOperators.md, com.microsoft.QLinearAdd."""
    return _binary(ctx, inputs, "add")


@domain_converter(DOMAIN, *VERSIONS)
def QLinearMul(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearMul(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
    C_zero_point): C = (A - A_zp) (B - B_zp) * (A_scale B_scale / C_scale) + C_zp, numpy
    broadcasting, uint8 or int8 (A's type), per-tensor parameters; the product and its scaling in
    float32, rounded half to even, saturated. ContribOperators.md, com.microsoft.QLinearMul."""
    return _binary(ctx, inputs, "multiply")


def _binary(ctx, inputs, op: str):
    _needs(ctx, inputs, ["A", "A_scale", "", "B", "B_scale", "", "C_scale"])
    a, b = inputs[0], inputs[3]
    a_s, a_z = _params(ctx, a, inputs[1], _opt(inputs, 2), "A")
    b_s, b_z = _params(ctx, b, inputs[4], _opt(inputs, 5), "B")
    if a.dtype != b.dtype:
        raise ctx.error(f"A {a.type} and B {b.type} must have one type")
    c_s, c_z, dtype = _output_params(ctx, a, inputs[6], _opt(inputs, 7), "C")
    if op == "add":
        r_a = ctx.call("divide", [a_s, c_s])
        r_b = ctx.call("divide", [b_s, c_s])
        fixed = ctx.call("subtract", [_f32(ctx, c_z), ctx.call("add", [ctx.call("multiply", [r_a, _f32(ctx, a_z)]),
                                                                        ctx.call("multiply", [r_b, _f32(ctx, b_z)])])])
        v = ctx.call("add", [ctx.call("add", [fixed, ctx.call("multiply", [_f32(ctx, a), r_a])]),
                             ctx.call("multiply", [_f32(ctx, b), r_b])])
        return _rounded(ctx, v, ctx.const(np.zeros((), np.int32), "zero"), dtype)
    ratio = ctx.call("divide", [ctx.call("multiply", [a_s, b_s]), c_s])
    da = ctx.call("subtract", [_f32(ctx, a), _f32(ctx, a_z)])
    db = ctx.call("subtract", [_f32(ctx, b), _f32(ctx, b_z)])
    return _rounded(ctx, ctx.call("multiply", [ctx.call("multiply", [da, db]), ratio]), c_z, dtype)


def _same_param(p, q) -> bool:
    return is_const(p) and is_const(q) and np.array_equal(p.value.reshape(-1), q.value.reshape(-1))


@domain_converter(DOMAIN, *VERSIONS)
def QLinearConcat(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearConcat(Y_scale, Y_zero_point, X_1, X_1_scale, X_1_zero_point, ...; axis):
    the inputs requantized to Y's parameters, concatenated on `axis`. An input with Y's scale and
    zero point (both constants) is copied; another is dequantized and quantized (round half to
    even), as onnxruntime's table does. uint8 or int8. ContribOperators.md,
    com.microsoft.QLinearConcat."""
    if len(inputs) < 5 or (len(inputs) - 2) % 3:
        raise ctx.error(f"needs Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, got {len(inputs)} "
                        "inputs")
    if "axis" not in attrs:
        raise ctx.error("attribute 'axis' is required")
    _needs(ctx, inputs, ["Y_scale", "Y_zero_point"])
    y_zp = inputs[1]
    y_s, y_z, dtype = _output_params(ctx, y_zp, inputs[0], y_zp, "Y")
    parts = []
    for k in range(2, len(inputs), 3):
        x, x_scale, x_zp = inputs[k], inputs[k + 1], inputs[k + 2]
        if x is None or x_scale is None or x_zp is None:
            raise ctx.error(f"input triple {(k - 2) // 3} needs X, X_scale and X_zero_point")
        if x.dtype != dtype:
            raise ctx.error(f"input {x.type} must have Y_zero_point's type {dtype}")
        s, z = _params(ctx, x, x_scale, x_zp, f"X_{(k - 2) // 3}")
        if _same_param(x_scale, inputs[0]) and _same_param(x_zp, y_zp):
            parts.append(x)
        else:
            parts.append(_quantize(ctx, _dequantize(ctx, x, s, z), y_s, y_z, dtype))
    rank = len(parts[0].shape)
    return ctx.call("concatenate", parts, {"axis": norm_axis(ctx, int(attrs["axis"]), rank)})


def _to_nchw(ctx, x, channels_last: bool):
    rank = len(x.shape)
    if not channels_last:
        return x
    return ctx.call("transpose", [x], {"axes": (0, rank - 1) + tuple(range(1, rank - 1))})


def _from_nchw(ctx, y, channels_last: bool):
    rank = len(y.shape)
    if not channels_last:
        return y
    return ctx.call("transpose", [y], {"axes": (0,) + tuple(range(2, rank)) + (1,)})


@domain_converter(DOMAIN, *VERSIONS)
def QLinearAveragePool(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearAveragePool(X, x_scale, x_zero_point, y_scale, y_zero_point; kernel_shape,
    strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last): dequantize, ONNX
    AveragePool in float32 (1-D, 2-D, 3-D; NCHW, or NHWC with channels_last), quantize (round half
    to even). ContribOperators.md, com.microsoft.QLinearAveragePool."""
    _needs(ctx, inputs, ["X", "x_scale", "", "y_scale"])
    x = inputs[0]
    x_s, x_z = _params(ctx, x, inputs[1], _opt(inputs, 2), "x")
    y_s, y_z, dtype = _output_params(ctx, x, inputs[3], _opt(inputs, 4), "y")
    last = bool(attrs.get("channels_last", 0))
    xf = _dequantize(ctx, _to_nchw(ctx, x, last), x_s, x_z)
    pool_attrs = {k: v for k, v in attrs.items() if k != "channels_last"}
    y = AveragePool(ctx, node, [xf], pool_attrs, 11)  # AveragePool-11: ceil_mode, count_include_pad, no dilations
    return _from_nchw(ctx, _quantize(ctx, y, y_s, y_z, dtype), last)


@domain_converter(DOMAIN, *VERSIONS)
def QLinearGlobalAveragePool(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearGlobalAveragePool(X, x_scale, x_zero_point, y_scale, y_zero_point;
    channels_last): the int32 sum of X over the spatial axes minus x_zp * image_size, requantized
    by x_scale / (y_scale * image_size) (float32, as MLAS's QLinearGlobalAveragePool: round half to
    even, + y_zp, saturated); output [N, C, 1, ...] (or [N, 1, ..., C]). ContribOperators.md,
    com.microsoft.QLinearGlobalAveragePool."""
    _needs(ctx, inputs, ["X", "x_scale", "", "y_scale"])
    x = inputs[0]
    if len(x.shape) < 3:
        raise ctx.error(f"X {x.type} must have rank >= 3")
    x_s, x_z = _params(ctx, x, inputs[1], _opt(inputs, 2), "x")
    y_s, y_z, dtype = _output_params(ctx, x, inputs[3], _opt(inputs, 4), "y")
    rank = len(x.shape)
    axes = tuple(range(1, rank - 1)) if attrs.get("channels_last", 0) else tuple(range(2, rank))
    size = prod([x.shape[a] for a in axes])
    acc = ctx.call("sum", [ctx.call("cast", [x], {"dtype": "int32"})], {"axis": axes, "keepdims": 1})
    bias = ctx.call("multiply", [x_z, ctx.const(np.int32(size), "image_size")])
    acc = ctx.call("subtract", [acc, bias])
    scale = ctx.call("divide", [x_s, ctx.call("multiply", [y_s, ctx.const(np.float32(size), "image_size_f")])])
    return ctx.call("qnn.requantize", [acc, scale, y_z], {"out_dtype": dtype, "compute_dtype": "float32"})


def _unary(ctx, inputs, float_op):
    _needs(ctx, inputs, ["X", "X_scale", "", "Y_scale"])
    x = inputs[0]
    x_s, x_z = _params(ctx, x, inputs[1], _opt(inputs, 2), "X")
    y_s, y_z, dtype = _output_params(ctx, x, inputs[3], _opt(inputs, 4), "Y")
    return _quantize(ctx, float_op(_dequantize(ctx, x, x_s, x_z)), y_s, y_z, dtype)


@domain_converter(DOMAIN, *VERSIONS)
def QLinearLeakyRelu(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearLeakyRelu(X, X_scale, X_zero_point, Y_scale, Y_zero_point; alpha = 0.01):
    quantize(LeakyRelu(dequantize(X))), uint8 or int8, float32 in between. ContribOperators.md,
    com.microsoft.QLinearLeakyRelu."""
    alpha = float(attrs.get("alpha", 0.01))
    return _unary(ctx, inputs, lambda v: ctx.call("nn.leaky_relu", [v], {"alpha": alpha}))


@domain_converter(DOMAIN, *VERSIONS)
def QLinearSigmoid(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearSigmoid(X, X_scale, X_zero_point, Y_scale, Y_zero_point):
    quantize(Sigmoid(dequantize(X))), uint8 or int8, float32 in between. ContribOperators.md,
    com.microsoft.QLinearSigmoid."""
    return _unary(ctx, inputs, lambda v: ctx.call("sigmoid", [v]))


@domain_converter(DOMAIN, *VERSIONS)
def QLinearSoftmax(ctx, node, inputs, attrs, opset):
    """com.microsoft QLinearSoftmax(X, X_scale, x_zero_point, y_scale, y_zero_point; axis, opset):
    ONNX Softmax of the dequantized X with the semantics of the Softmax version `opset` names
    (below 13: coerced to 2-D from `axis`, default 1; from 13: along `axis`, default -1), then
    round half to even of p * floor(1 / y_scale) + y_zero_point, saturated (onnxruntime's kernel
    scales by the floored reciprocal). ContribOperators.md, com.microsoft.QLinearSoftmax."""
    if "opset" not in attrs:
        raise ctx.error("attribute 'opset' is required")
    _needs(ctx, inputs, ["X", "X_scale", "", "y_scale"])
    x = inputs[0]
    x_s, x_z = _params(ctx, x, inputs[1], _opt(inputs, 2), "X")
    y_s, y_z, dtype = _output_params(ctx, x, inputs[3], _opt(inputs, 4), "y")
    softmax_attrs = {"axis": int(attrs["axis"])} if "axis" in attrs else {}
    p = Softmax(ctx, ctx.node, [_dequantize(ctx, x, x_s, x_z)], softmax_attrs, 13 if int(attrs["opset"]) >= 13 else 11)
    steps = ctx.call("floor", [ctx.call("divide", [ctx.const(np.float32(1.0), "one"), y_s])])
    return _rounded(ctx, ctx.call("multiply", [p, steps]), y_z, dtype)


def _transposed(ctx, e):
    if is_const(e):
        return ctx.derived(e, "transposed_input", lambda v: np.ascontiguousarray(v.T))
    return ctx.call("transpose", [e], {"axes": (1, 0)})


def _float_scale(ctx, a_scale, b_scale, n: int, alpha: float = 1.0, y_scale=None):
    """float32 alpha * a_scale * b_scale (/ y_scale): [] or one per column [n]."""
    s = ctx.call("multiply", [_f32(ctx, _scale(ctx, a_scale, "a_scale")),
                              _f32(ctx, _scale(ctx, b_scale, "b_scale", n))])
    if alpha != 1.0:
        s = ctx.call("multiply", [ctx.const(np.float32(alpha), "alpha"), s])
    if y_scale is not None:
        s = ctx.call("divide", [s, _f32(ctx, _scale(ctx, y_scale, "y_scale"))])
    return s


def _bias(ctx, bias, n: int):
    if bias.dtype != "float32" or tuple(bias.shape) != (n,):
        raise ctx.error(f"bias {bias.type} must be float32 [{n}]")
    return bias


def _to_float(ctx, acc, scale, bias):
    """float32(acc) * scale (+ bias): MLAS's scale-and-bias output of an integer matmul."""
    y = ctx.call("multiply", [ctx.call("cast", [acc], {"dtype": "float32"}), scale])
    return ctx.call("add", [y, bias]) if bias is not None else y


@domain_converter(DOMAIN, *VERSIONS)
def QGemm(ctx, node, inputs, attrs, opset):
    """com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale,
    y_zero_point; alpha, transA, transB): the int32 product (A' - a_zp)(B' - b_zp) (qnn.dense on a
    constant B, kept 8-bit; qnn.matmul otherwise) plus C (int32, broadcast to [M, N]), then with
    y_scale: qnn.requantize by alpha a_scale b_scale / y_scale (float32; b_scale per column or not)
    to y_zero_point's type; without: float32 acc * alpha a_scale b_scale. ContribOperators.md,
    com.microsoft.QGemm."""
    _needs(ctx, inputs, ["A", "a_scale", "a_zero_point", "B", "b_scale"])
    a, b = _operand(ctx, inputs[0], "A"), _operand(ctx, inputs[3], "B")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"A {a.type} and B {b.type} must be 2-D")
    if int(attrs.get("transA", 0)):
        a = _transposed(ctx, a)
    if int(attrs.get("transB", 0)):
        b = _transposed(ctx, b)
    if a.shape[1] != b.shape[0]:
        raise ctx.error(f"A' {list(a.shape)} and B' {list(b.shape)} do not multiply")
    n = b.shape[1]
    acc = _matmul(ctx, a, b, inputs[2], _opt(inputs, 5))
    c = _opt(inputs, 6)
    if c is not None:
        if c.dtype != "int32":
            raise ctx.error(f"C {c.type} must be int32")
        acc = ctx.call("add", [acc, c])
    alpha = float(attrs.get("alpha", 1.0))
    y_scale, y_zp = _opt(inputs, 7), _opt(inputs, 8)
    if y_scale is None:
        return _to_float(ctx, acc, _float_scale(ctx, inputs[1], inputs[4], n, alpha), None)
    if y_zp is None:
        raise ctx.error("y_scale needs y_zero_point (the output type)")
    y_z, dtype = _output_params(ctx, y_zp, y_scale, y_zp, "y")[1:]
    scale = _float_scale(ctx, inputs[1], inputs[4], n, alpha, y_scale)
    return ctx.call("qnn.requantize", [acc, scale, y_z], {"out_dtype": dtype, "axis": 1, "compute_dtype": "float32"})


def _matmul_to_float(ctx, a, b, a_zp, b_zp, a_scale, b_scale, bias):
    """float32 (A - a_zp)(B - b_zp) * a_scale b_scale + bias for A [..., M, K], B [K, N] (or
    batched), b_scale and b_zp scalars or one per column."""
    _operand(ctx, a, "A")
    _operand(ctx, b, "B")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.error(f"A {a.type} and B {b.type} must have rank >= 2")
    if a_scale.type.size != 1:
        raise ctx.error(f"a_scale {a_scale.type} must be a scalar")
    n = b.shape[-1]
    acc = _matmul(ctx, a, b, a_zp, b_zp)
    return _to_float(ctx, acc, _float_scale(ctx, a_scale, b_scale, n), _bias(ctx, bias, n) if bias is not None
                     else None)


@domain_converter(DOMAIN, *VERSIONS)
def MatMulIntegerToFloat(ctx, node, inputs, attrs, opset):
    """com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias):
    Y = float32 (A - a_zp)(B - b_zp) * (a_scale * b_scale) + bias, the product an int32 qnn.dense /
    qnn.matmul (numpy matmul broadcasting), a_scale a scalar, b_scale and b_zero_point scalars or
    one per column of B. ContribOperators.md, com.microsoft.MatMulIntegerToFloat."""
    _needs(ctx, inputs, ["A", "B", "a_scale", "b_scale"])
    return _matmul_to_float(ctx, inputs[0], inputs[1], _opt(inputs, 4), _opt(inputs, 5), inputs[2], inputs[3],
                            _opt(inputs, 6))


@domain_converter(DOMAIN, *VERSIONS)
def DynamicQuantizeMatMul(ctx, node, inputs, attrs, opset):
    """com.microsoft DynamicQuantizeMatMul(A float32, B, b_scale, b_zero_point, bias): A quantized at
    run time to uint8 as onnxruntime does (range [min(0, min A), max(0, max A)], scale = range / 255
    or 1 for an all-zero A, zero point = round half to even of clamp(-min / scale, 0, 255)), then
    MatMulIntegerToFloat. ContribOperators.md, com.microsoft.DynamicQuantizeMatMul."""
    _needs(ctx, inputs, ["A", "B", "b_scale"])
    a = inputs[0]
    if a.dtype != "float32":
        raise ctx.error(f"A {a.type} must be float32")
    qa, scale, zp = dynamic_quantize(ctx, a)
    return _matmul_to_float(ctx, qa, inputs[1], zp, _opt(inputs, 3), scale, inputs[2], _opt(inputs, 4))


def dynamic_quantize(ctx, a):
    """(uint8 qa, float32 [] scale, uint8 [] zero point) of the float32 tensor `a` quantized at run
    time as onnxruntime does (DynamicQuantizeLinear, MLAS's GetQuantizationParameter): range
    [min(0, min a), max(0, max a)] over the whole tensor, scale = range / 255 (1 for an all-zero
    a), zero point = round half to even of clamp(-min / scale, 0, 255), qa = QuantizeLinear."""
    axes = tuple(range(len(a.shape)))
    zero = ctx.const(np.float32(0.0), "zero")
    lo = ctx.call("minimum", [ctx.call("min", [a], {"axis": axes, "keepdims": 0}), zero])
    hi = ctx.call("maximum", [ctx.call("max", [a], {"axis": axes, "keepdims": 0}), zero])
    span = ctx.call("subtract", [hi, lo])
    scale = ctx.call("where", [ctx.call("equal", [span, zero]), ctx.const(np.float32(1.0), "one"),
                               ctx.call("divide", [span, ctx.const(np.float32(255.0), "qrange")])])
    zp = ctx.call("round", [ctx.call("clip", [ctx.call("negative", [ctx.call("divide", [lo, scale])])],
                                     {"a_min": 0.0, "a_max": 255.0})])
    zp = ctx.call("cast", [zp], {"dtype": "uint8"})
    return _quantize(ctx, a, scale, zp, "uint8"), scale, zp
