"""ONNX converters, elementwise group: activations, arithmetic, comparisons and logic, Cast."""

from __future__ import annotations

import numpy as np
import onnx

from tvmc.frontend.onnx.common import (SUPPORTED_DTYPES, is_const, is_int_const, norm_axis, np_dtype_name, reshape,
                                      scalar)
from tvmc.frontend.onnx.registry import converter
from tvmc.te.expr import is_float




def _unary(op_type: str, op: str, *versions: int):
    """Register the converter of a one-input ONNX op that maps 1:1 onto our op `op`."""

    def convert(ctx, node, inputs, attrs, opset):
        return ctx.call(op, [inputs[0]])

    convert.__name__ = op_type
    convert.__doc__ = f"ONNX {op_type} -> {op}."
    converter(*versions)(convert)


_unary("Relu", "nn.relu", 1, 6, 13, 14)
_unary("Sigmoid", "sigmoid", 1, 6, 13)
_unary("Tanh", "tanh", 1, 6, 13)
_unary("Exp", "exp", 1, 6, 13)
_unary("Sqrt", "sqrt", 1, 6, 13)
_unary("Neg", "negative", 1, 6, 13)
_unary("Abs", "abs", 1, 6, 13)
_unary("Log", "log", 1, 6, 13)
_unary("Floor", "floor", 1, 6, 13)
_unary("Ceil", "ceil", 1, 6, 13)
_unary("Erf", "erf", 9, 13)
_unary("Not", "logical_not", 1)


@converter(1, 6, 16)
def LeakyRelu(ctx, node, inputs, attrs, opset):
    """ONNX LeakyRelu (alpha default 0.01) -> nn.leaky_relu."""
    return ctx.call("nn.leaky_relu", [inputs[0]], {"alpha": float(attrs.get("alpha", 0.01))})


@converter(1, 6, 11, 12, 13)
def Clip(ctx, node, inputs, attrs, opset):
    """ONNX Clip -> clip(a_min, a_max): bounds are attributes before opset 11 and optional
    inputs from 11. A missing float bound is -inf/inf; with a missing integer bound, or a
    non-constant bound, the given bounds become maximum/minimum."""
    x = inputs[0]
    if opset < 11:
        return ctx.call("clip", [x], {"a_min": float(attrs.get("min", -np.inf)),
                                      "a_max": float(attrs.get("max", np.inf))})
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    for e, i in ((lo, 1), (hi, 2)):
        if e is not None and e.type.size != 1:
            raise ctx.error(f"bound '{ctx.input_name(i)}' must be a scalar, got {e.type}")
    floating = is_float(x.dtype)
    both = lo is not None and hi is not None
    if (lo is None or is_const(lo)) and (hi is None or is_const(hi)) and (floating or both):
        bounds = [float(e.value.reshape(())) if e is not None else default
                  for e, default in ((lo, -np.inf), (hi, np.inf))]
        return ctx.call("clip", [x], {"a_min": bounds[0], "a_max": bounds[1]})
    out = x
    if lo is not None:
        out = ctx.call("maximum", [out, reshape(ctx, lo, ())])
    if hi is not None:
        out = ctx.call("minimum", [out, reshape(ctx, hi, ())])
    return out


_BINARY = {"Add": ("add", np.add), "Sub": ("subtract", np.subtract),
           "Mul": ("multiply", np.multiply), "Div": ("divide", None)}


def _binary(ctx, node, inputs, attrs, opset):
    """Add/Sub/Mul/Div: numpy broadcasting; before opset 7, `broadcast`/`axis` attributes
    align B with A starting at `axis` (B is reshaped to that rank)."""
    op, fn = _BINARY[ctx.op_type]
    a, b = inputs[0], inputs[1]
    if opset < 7:
        if attrs.get("broadcast", 0) and "axis" in attrs:
            axis = norm_axis(ctx, int(attrs["axis"]), len(a.shape))
            trailing = len(a.shape) - axis - len(b.shape)
            if trailing < 0:
                raise ctx.error(f"axis {axis} does not fit B {b.type} into A {a.type}")
            b = reshape(ctx, b, tuple(b.shape) + (1,) * trailing)
        elif not attrs.get("broadcast", 0) and tuple(a.shape) != tuple(b.shape):
            raise ctx.error(f"shapes {a.type} and {b.type} differ and broadcast=0")
    if is_int_const(a) and is_int_const(b):  # shape arithmetic
        if ctx.op_type == "Div":  # ONNX integer Div truncates toward zero
            q = np.abs(a.value) // np.abs(b.value)
            return np.where((a.value < 0) != (b.value < 0), -q, q)
        return fn(a.value, b.value)
    return ctx.call(op, [a, b])


@converter(1, 6, 7, 13, 14)
def Add(ctx, node, inputs, attrs, opset):
    """ONNX Add -> add."""
    return _binary(ctx, node, inputs, attrs, opset)


@converter(1, 6, 7, 13, 14)
def Sub(ctx, node, inputs, attrs, opset):
    """ONNX Sub -> subtract."""
    return _binary(ctx, node, inputs, attrs, opset)


@converter(1, 6, 7, 13, 14)
def Mul(ctx, node, inputs, attrs, opset):
    """ONNX Mul -> multiply."""
    return _binary(ctx, node, inputs, attrs, opset)


@converter(1, 6, 7, 13, 14)
def Div(ctx, node, inputs, attrs, opset):
    """ONNX Div -> divide."""
    return _binary(ctx, node, inputs, attrs, opset)


def _variadic(ctx, inputs, op):
    out = inputs[0]
    if len(inputs) == 1:
        return out if is_const(out) else ctx.call("identity", [out])
    for e in inputs[1:]:
        out = ctx.call(op, [out, e])
    return out


@converter(1, 6, 8, 13)
def Sum(ctx, node, inputs, attrs, opset):
    """ONNX Sum -> chain of add (one input -> identity)."""
    return _variadic(ctx, inputs, "add")


@converter(1, 6, 8, 12, 13)
def Max(ctx, node, inputs, attrs, opset):
    """ONNX Max -> chain of maximum."""
    return _variadic(ctx, inputs, "maximum")


@converter(1, 6, 8, 12, 13)
def Min(ctx, node, inputs, attrs, opset):
    """ONNX Min -> chain of minimum."""
    return _variadic(ctx, inputs, "minimum")


@converter(1, 6, 9, 13, 19, 21, 23, 24, 25, 28)
def Cast(ctx, node, inputs, attrs, opset):
    """ONNX Cast(to) -> cast(dtype); nothing when the dtype is unchanged; folded for constants."""
    x = inputs[0]
    to = attrs.get("to")
    if isinstance(to, str):  # Cast-1 names the type as a string
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ctx.error(f"unknown type '{to}'") from None
    dtype = np_dtype_name(int(to))
    if dtype == x.dtype:
        return x
    if is_const(x):
        try:
            return x.value.astype(dtype)
        except TypeError:
            raise ctx.error(f"cannot cast constant to {dtype}") from None
    if dtype not in SUPPORTED_DTYPES:
        raise ctx.error(f"tensor '{node.output[0]}' would have dtype {dtype}; "
                        f"supported: {', '.join(SUPPORTED_DTYPES)}")
    return ctx.call("cast", [x], {"dtype": dtype})


@converter(1, 6, 13)
def Reciprocal(ctx, node, inputs, attrs, opset):
    """ONNX Reciprocal -> divide(1, x)."""
    x = inputs[0]
    return ctx.call("divide", [scalar(ctx, x, 1, "one"), x])


@converter(1, 22)
def Softplus(ctx, node, inputs, attrs, opset):
    """ONNX Softplus: log(exp(x) + 1) -> exp, add, log."""
    return _softplus(ctx, inputs[0])


def _softplus(ctx, x):
    return ctx.call("log", [ctx.call("add", [ctx.call("exp", [x]), scalar(ctx, x, 1, "one")])])


@converter(1, 6, 22)
def Elu(ctx, node, inputs, attrs, opset):
    """ONNX Elu (alpha 1.0) -> nn.elu."""
    return ctx.call("nn.elu", [inputs[0]], {"alpha": float(attrs.get("alpha", 1.0))})


@converter(1, 6, 22)
def Selu(ctx, node, inputs, attrs, opset):
    """ONNX Selu (alpha 1.67326..., gamma 1.0507...) -> nn.selu."""
    return ctx.call("nn.selu", [inputs[0]], {"alpha": float(attrs.get("alpha", 1.67326319217681884765625)),
                                             "gamma": float(attrs.get("gamma", 1.05070102214813232421875))})


def _hard_sigmoid(ctx, x, alpha, beta):
    y = ctx.call("multiply", [x, scalar(ctx, x, alpha, "alpha")])
    return ctx.call("clip", [ctx.call("add", [y, scalar(ctx, x, beta, "beta")])], {"a_min": 0.0, "a_max": 1.0})


@converter(1, 6, 22)
def HardSigmoid(ctx, node, inputs, attrs, opset):
    """ONNX HardSigmoid: clip(alpha * x + beta, 0, 1) (alpha 0.2, beta 0.5)."""
    return _hard_sigmoid(ctx, inputs[0], float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))


@converter(14, 22)
def HardSwish(ctx, node, inputs, attrs, opset):
    """ONNX HardSwish: x * clip(x / 6 + 1/2, 0, 1)."""
    x = inputs[0]
    return ctx.call("multiply", [x, _hard_sigmoid(ctx, x, 1.0 / 6.0, 0.5)])


@converter(20)
def Gelu(ctx, node, inputs, attrs, opset):
    """ONNX Gelu: approximate='none': x/2 * (1 + erf(x / sqrt 2)); 'tanh':
    x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
    x = inputs[0]
    approx = attrs.get("approximate", "none")
    if approx == "none":
        inner = ctx.call("erf", [ctx.call("multiply", [x, scalar(ctx, x, 1 / np.sqrt(2.0), "rsqrt2")])])
    elif approx == "tanh":
        cube = ctx.call("multiply", [ctx.call("multiply", [x, x]), x])
        poly = ctx.call("add", [x, ctx.call("multiply", [cube, scalar(ctx, x, 0.044715, "c")])])
        inner = ctx.call("tanh", [ctx.call("multiply", [poly, scalar(ctx, x, np.sqrt(2 / np.pi), "k")])])
    else:
        raise ctx.error(f"unknown approximate '{approx}' (none, tanh)")
    half = ctx.call("multiply", [x, scalar(ctx, x, 0.5, "half")])
    return ctx.call("multiply", [half, ctx.call("add", [inner, scalar(ctx, x, 1, "one")])])


@converter(1, 6, 7, 9, 16)
def PRelu(ctx, node, inputs, attrs, opset):
    """ONNX PRelu: x < 0 ? slope * x : x, slope broadcast onto x (unidirectionally) -> nn.prelu."""
    x, slope = inputs[0], inputs[1]
    if opset < 7 and len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1]:
        slope = reshape(ctx, slope, (slope.shape[0],) + (1,) * (len(x.shape) - 2))
    return ctx.call("nn.prelu", [x, slope])


@converter(1, 6, 8, 13)
def Mean(ctx, node, inputs, attrs, opset):
    """ONNX Mean -> chain of add, then divide by the input count."""
    out = _variadic(ctx, inputs, "add")
    if len(inputs) == 1:
        return out
    return ctx.call("divide", [out, scalar(ctx, out, len(inputs), "count")])


@converter(1, 7, 12, 13, 15)
def Pow(ctx, node, inputs, attrs, opset):
    """ONNX Pow -> power (an exponent of another dtype is cast to the base's); x**2 -> multiply."""
    x, y = inputs[0], inputs[1]
    if y.dtype != x.dtype:
        y = ctx.derived(y, "as_" + x.dtype, lambda v: v.astype(x.dtype)) if is_const(y) \
            else ctx.call("cast", [y], {"dtype": x.dtype})
    if is_const(y) and y.value.size == 1 and len(y.shape) <= len(x.shape):  # x's shape is the result's
        e = float(y.value.reshape(()))
        if e in (1.0, 2.0, 3.0, 4.0):  # small integer exponents as products: exact, and defined for x < 0
            out = x
            for _ in range(int(e) - 1):
                out = ctx.call("multiply", [out, x])
            return out if e != 1.0 else ctx.call("identity", [x])
    return ctx.call("power", [x, y])


def _compare(op: str, op_type: str, *versions: int):
    def convert(ctx, node, inputs, attrs, opset):
        a, b = inputs[0], inputs[1]
        if is_const(a) and is_const(b):
            return ir_ref(op, a.value, b.value)
        return ctx.call(op, [a, b])

    convert.__name__ = op_type
    convert.__doc__ = f"ONNX {op_type} -> {op} (bool result; folded for constants)."
    converter(*versions)(convert)


def ir_ref(op: str, *arrays, **attrs):
    """The registered op's numpy reference (constant folding at import)."""
    from tvmc.ops.registry import get_op

    return np.asarray(get_op(op).reference(*arrays, **attrs))


_compare("equal", "Equal", 1, 7, 11, 13, 19)
_compare("less", "Less", 1, 7, 9, 13)
_compare("greater", "Greater", 1, 7, 9, 13)
_compare("less_equal", "LessOrEqual", 12, 16)
_compare("greater_equal", "GreaterOrEqual", 12, 16)
_compare("logical_and", "And", 1, 7)
_compare("logical_or", "Or", 1, 7)
_compare("logical_xor", "Xor", 1, 7)


@converter(9, 16)
def Where(ctx, node, inputs, attrs, opset):
    """ONNX Where(cond, x, y) -> where (numpy broadcasting of all three)."""
    c, a, b = inputs
    if all(is_const(e) for e in inputs):
        return np.where(c.value, a.value, b.value)
    return ctx.call("where", [c, a, b])


@converter(15, 19, 21, 23, 24, 25)
def CastLike(ctx, node, inputs, attrs, opset):
    """ONNX CastLike(x, like) -> cast to like's dtype (nothing when equal)."""
    x, like = inputs[0], inputs[1]
    if x.dtype == like.dtype:
        return x
    if is_const(x):
        return x.value.astype(like.dtype)
    return ctx.call("cast", [x], {"dtype": like.dtype})


# ---------------------------------------------------------------------------------------------
# Classification, rounding, trigonometric and bitwise operators
# ---------------------------------------------------------------------------------------------

_unary("IsNaN", "isnan", 9, 13, 20)
_unary("Sign", "sign", 9, 13)
_unary("Round", "round", 11, 22)
for _op_type, _op, _since in (("Sin", "sin", 7), ("Cos", "cos", 7), ("Tan", "tan", 7), ("Asin", "asin", 7),
                              ("Acos", "acos", 7), ("Atan", "atan", 7), ("Sinh", "sinh", 9), ("Cosh", "cosh", 9),
                              ("Asinh", "asinh", 9), ("Acosh", "acosh", 9), ("Atanh", "atanh", 9)):
    _unary(_op_type, _op, _since, 22)
_unary("BitwiseNot", "bitwise_not", 18)


@converter(10, 20)
def IsInf(ctx, node, inputs, attrs, opset):
    """ONNX IsInf (detect_positive, detect_negative; both default 1) -> isinf (bool)."""
    return ctx.call("isinf", [inputs[0]], {"detect_positive": int(attrs.get("detect_positive", 1)),
                                           "detect_negative": int(attrs.get("detect_negative", 1))})


def _bitwise(op_type: str, op: str):
    def convert(ctx, node, inputs, attrs, opset):
        return ctx.call(op, [inputs[0], inputs[1]])

    convert.__name__ = op_type
    convert.__doc__ = f"ONNX {op_type}-18 -> {op} (integer operands, numpy broadcasting)."
    converter(18)(convert)


_bitwise("BitwiseAnd", "bitwise_and")
_bitwise("BitwiseOr", "bitwise_or")
_bitwise("BitwiseXor", "bitwise_xor")


@converter(11, 28)
def BitShift(ctx, node, inputs, attrs, opset):
    """ONNX BitShift (direction LEFT / RIGHT; signed types from 28) -> left_shift / right_shift:
    a shift by a negative amount or by the bit width or more shifts every bit out (0, or -1 for a
    negative value shifted right)."""
    direction = attrs.get("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction must be LEFT or RIGHT, got '{direction}'")
    return ctx.call("left_shift" if direction == "LEFT" else "right_shift", [inputs[0], inputs[1]])


@converter(10, 13, 28)
def Mod(ctx, node, inputs, attrs, opset):
    """ONNX Mod: fmod=1 -> trunc_mod (C's fmod, the dividend's sign), fmod=0 -> floor_mod (the
    divisor's sign, as Python's %)."""
    return ctx.call("trunc_mod" if int(attrs.get("fmod", 0)) else "floor_mod", [inputs[0], inputs[1]])


@converter(26)
def BitCast(ctx, node, inputs, attrs, opset):
    """ONNX BitCast(to) -> reinterpret: the bits read as a type of the same size."""
    x = inputs[0]
    dtype = np_dtype_name(int(attrs["to"]))
    if dtype not in SUPPORTED_DTYPES:
        raise ctx.error(f"tensor '{node.output[0]}' would have dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
    if np.dtype(dtype).itemsize != np.dtype(x.dtype).itemsize:
        raise ctx.error(f"BitCast from {x.dtype} to {dtype}: the sizes differ")
    if is_const(x):
        return x.value.view(dtype)
    return x if dtype == x.dtype else ctx.call("reinterpret", [x], {"dtype": dtype})


# ---------------------------------------------------------------------------------------------
# Activations composed of elementwise ops (continued)
# ---------------------------------------------------------------------------------------------

@converter(1, 22)
def Softsign(ctx, node, inputs, attrs, opset):
    """ONNX Softsign: x / (1 + |x|)."""
    x = inputs[0]
    return ctx.call("divide", [x, ctx.call("add", [ctx.call("abs", [x]), scalar(ctx, x, 1, "one")])])


@converter(10, 22)
def ThresholdedRelu(ctx, node, inputs, attrs, opset):
    """ONNX ThresholdedRelu: x > alpha ? x : 0 (alpha 1.0)."""
    x = inputs[0]
    keep = ctx.call("greater", [x, scalar(ctx, x, float(attrs.get("alpha", 1.0)), "alpha")])
    return ctx.call("where", [keep, x, scalar(ctx, x, 0, "zero")])


@converter(9)
def Shrink(ctx, node, inputs, attrs, opset):
    """ONNX Shrink: x < -lambd ? x + bias : x > lambd ? x - bias : 0 (lambd 0.5, bias 0)."""
    x = inputs[0]
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    below = ctx.call("less", [x, scalar(ctx, x, -lambd, "neg_lambd")])
    above = ctx.call("greater", [x, scalar(ctx, x, lambd, "lambd")])
    b = scalar(ctx, x, bias, "bias")
    inner = ctx.call("where", [above, ctx.call("subtract", [x, b]), scalar(ctx, x, 0, "zero")])
    return ctx.call("where", [below, ctx.call("add", [x, b]), inner])


@converter(12, 28)
def Celu(ctx, node, inputs, attrs, opset):
    """ONNX Celu: max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (alpha 1.0)."""
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    e = ctx.call("exp", [ctx.call("multiply", [x, scalar(ctx, x, 1.0 / alpha, "inv_alpha")])])
    neg = ctx.call("multiply", [ctx.call("subtract", [e, scalar(ctx, x, 1, "one")]), scalar(ctx, x, alpha, "alpha")])
    zero = scalar(ctx, x, 0, "zero")
    return ctx.call("add", [ctx.call("maximum", [x, zero]), ctx.call("minimum", [neg, zero])])


@converter(18, 22)
def Mish(ctx, node, inputs, attrs, opset):
    """ONNX Mish: x * tanh(softplus(x))."""
    x = inputs[0]
    return ctx.call("multiply", [x, ctx.call("tanh", [_softplus(ctx, x)])])


def _swish(ctx, x, alpha):
    gate = x if alpha == 1.0 else ctx.call("multiply", [x, scalar(ctx, x, alpha, "alpha")])
    return ctx.call("multiply", [x, ctx.call("sigmoid", [gate])])


@converter(24)
def Swish(ctx, node, inputs, attrs, opset):
    """ONNX Swish: x * sigmoid(alpha * x) (alpha 1.0)."""
    return _swish(ctx, inputs[0], float(attrs.get("alpha", 1.0)))


@converter(28)
def SwiGLU(ctx, node, inputs, attrs, opset):
    """ONNX SwiGLU(A, B): Swish_alpha(A) * B (alpha 1.0; A and B of one shape)."""
    a, b = inputs[0], inputs[1]
    if tuple(a.shape) != tuple(b.shape):
        raise ctx.error(f"inputs A {a.type} and B {b.type} must have the same shape")
    return ctx.call("multiply", [_swish(ctx, a, float(attrs.get("alpha", 1.0))), b])
