"""Elementwise and broadcast operators (ONNX Relu, Sigmoid, Tanh, Clip, Add/Sub/Mul/Div, Cast, ...)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph import symbolic
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.injective import schedule_injective
from tvmc.ops.gpu.injective import injective_config
from tvmc.ops.gpu.injective import schedule_injective as schedule_injective_gpu
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.te.expr import is_float

INJECTIVE = {"cpu": [Implementation("injective.cpu", schedule_injective)],
             "gpu": [Implementation("injective.gpu", schedule_injective_gpu, config_space=injective_config)]}


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """Numpy broadcasting of two shapes; ValueError when incompatible. Symbolic dimensions
    (tvmc.graph.symbolic) broadcast where the rule is decided for every value of their variables:
    equal expressions, or one side 1; a symbolic extent against another extent that is not
    provably equal (s with t, s with 4) is refused."""
    if any(isinstance(d, symbolic.SymExpr) for d in (*a, *b)):
        return _symbolic_broadcast(tuple(a), tuple(b))
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ValueError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


def _symbolic_broadcast(a: tuple, b: tuple) -> tuple:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == 1 or symbolic.can_prove_equal(x, y):
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            raise ValueError(f"shapes {list(a)} and {list(b)} do not broadcast: {x} and {y} are not provably "
                             f"equal ({symbolic.describe_vars((x, y))})")
    return tuple(out)


def broadcast_index(shape: tuple, out_idx: tuple) -> tuple:
    """Index into a tensor of `shape` broadcast to the output index `out_idx` (right-aligned)."""
    lead = len(out_idx) - len(shape)
    return tuple(0 if d == 1 else out_idx[lead + k] for k, d in enumerate(shape))


def _same_type(in_types, attrs):
    return in_types[0]


def _unary(name, fn, ref, pattern=OpPattern.ELEMWISE, infer=_same_type):
    def compute(inputs, attrs, out_type):
        x = inputs[0]
        return te.compute(x.shape, lambda *i: fn(x[i], attrs), name=name.replace(".", "_"))

    register_op(OpDef(name, infer, ref, pattern, compute, INJECTIVE))


def _f(x, v):
    """A literal of x's dtype (integer tensors get integer literals)."""
    return te.const(float(v) if is_float(x.dtype) else int(v), x.dtype)


_unary("nn.relu", lambda x, a: te.maximum(x, _f(x, 0.0)), lambda x: np.maximum(x, 0).astype(x.dtype))
_unary("nn.leaky_relu", lambda x, a: te.select(x > _f(x, 0.0), x, x * _f(x, a["alpha"])),
       lambda x, alpha: np.where(x > 0, x, x * np.float32(alpha)).astype(x.dtype))
def _sigmoid_ref(x):
    e = np.exp(-np.abs(x))  # stable on both sides: never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_unary("sigmoid", lambda x, a: te.sigmoid(x), _sigmoid_ref)
_unary("tanh", lambda x, a: te.tanh(x), lambda x: np.tanh(x))
_unary("exp", lambda x, a: te.exp(x), lambda x: np.exp(x))
_unary("sqrt", lambda x, a: te.sqrt(x), lambda x: np.sqrt(x))
_unary("negative", lambda x, a: -x, lambda x: -x)
_unary("abs", lambda x, a: te.fabs(x) if is_float(x.dtype) else te.select(x < _f(x, 0), -x, x),
       lambda x: np.abs(x))
_unary("clip", lambda x, a: te.minimum(te.maximum(x, _f(x, a["a_min"])), _f(x, a["a_max"])),
       lambda x, a_min, a_max: np.clip(x, np.float32(a_min), np.float32(a_max)).astype(x.dtype))
_unary("log", lambda x, a: te.log(x), lambda x: np.log(x))
_unary("floor", lambda x, a: te.floor(x), lambda x: np.floor(x))
_unary("ceil", lambda x, a: te.ceil(x), lambda x: np.ceil(x))
_unary("erf", lambda x, a: te.erf(x), lambda x: _erf_ref(x))
_unary("nn.gelu", lambda x, a: x * _f(x, 0.5) * (_f(x, 1.0) + te.erf(x * _f(x, 0.7071067811865476))),
       lambda x: (0.5 * x * (1.0 + _erf_ref(x.astype(np.float64) * 0.7071067811865476))).astype(x.dtype))
_unary("logical_not", lambda x, a: te.expr.Not(x), lambda x: np.logical_not(x))
_unary("nn.elu", lambda x, a: te.select(x < _f(x, 0.0), (te.exp(x) - _f(x, 1.0)) * _f(x, a["alpha"]), x),
       lambda x, alpha: np.where(x < 0, (np.exp(x) - 1) * np.float32(alpha), x).astype(x.dtype))
_unary("nn.selu", lambda x, a: te.select(x > _f(x, 0.0), x * _f(x, a["gamma"]),
                                         (te.exp(x) * _f(x, a["alpha"]) - _f(x, a["alpha"])) * _f(x, a["gamma"])),
       lambda x, alpha, gamma: np.where(x > 0, x * np.float32(gamma),
                                        (np.exp(x) * np.float32(alpha) - np.float32(alpha)) * np.float32(gamma)
                                        ).astype(x.dtype))
_unary("identity", lambda x, a: x, lambda x: x)
_unary("nn.dropout", lambda x, a: x, lambda x, **_: x)
_unary("cast", lambda x, a: te.cast(a["dtype"], x), lambda x, dtype: x.astype(dtype),
       infer=lambda t, a: TensorType(t[0].shape, a["dtype"]))


def _erf_ref(x):
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _binary_type(in_types, attrs):
    a, b = in_types
    if a.dtype != b.dtype:
        raise ValueError(f"operand dtypes differ: {a.dtype} vs {b.dtype}")
    return TensorType(broadcast_shape(a.shape, b.shape), a.dtype)


def _binary(name, fn, ref, infer=_binary_type):
    """Register a broadcasting binary op: out[i] = fn(a[bcast(i)], b[bcast(i)])."""
    def compute(inputs, attrs, out_type):
        a, b = inputs
        return te.compute(out_type.shape,
                          lambda *i: fn(a[broadcast_index(a.shape, i)], b[broadcast_index(b.shape, i)]),
                          name=name)

    register_op(OpDef(name, infer, ref, OpPattern.BROADCAST, compute, INJECTIVE))


_binary("add", lambda a, b: a + b, np.add)
_binary("subtract", lambda a, b: a - b, np.subtract)
_binary("multiply", lambda a, b: a * b, np.multiply)
def _trunc_div(a, b):
    """Integer division rounding toward zero (C, ONNX Div, TVM's truncdiv): |a| // |b| with
    the sign of a * b."""
    if a.dtype in ("uint8", "bool"):
        return a // b
    zero = _f(a, 0)
    q = te.select(a < zero, -a, a) // te.select(b < zero, -b, b)
    return te.select(te.ne(a < zero, b < zero), -q, q)


def _trunc_div_ref(a, b):
    if is_float(a.dtype.name):
        return np.divide(a, b).astype(a.dtype)
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


# integer division truncates toward zero (ONNX Div; relay.divide), floats divide exactly
_binary("divide", lambda a, b: a / b if is_float(a.dtype) else _trunc_div(a, b), _trunc_div_ref)
_binary("maximum", te.maximum, np.maximum)
_binary("minimum", te.minimum, np.minimum)
def _power(a, b):
    if is_float(a.dtype):
        return te.power(a, b)
    # integer power: |a| ** b through float32 pow, rounded (exact while results stay below
    # 2**24), negated for a negative base and an odd exponent
    zero = _f(a, 0)
    mag = te.select(a < zero, -a, a)
    p = te.power(te.cast("float32", mag), te.cast("float32", b))
    p = te.cast(a.dtype, te.floor(p + te.const(0.5, "float32")))
    odd = te.ne(b % te.const(2, b.dtype), te.const(0, b.dtype))
    return te.select(te.logical_and(a < zero, odd), -p, p)


_binary("power", _power, lambda a, b: np.power(a, b).astype(a.dtype))
_binary("nn.prelu", lambda x, slope: te.select(x < _f(x, 0.0), x * slope, x),
        lambda x, slope: np.where(x < 0, x * slope, x).astype(x.dtype))


def _compare_type(in_types, attrs):
    return TensorType(_binary_type(in_types, attrs).shape, "bool")


def _compare(name, fn, ref):
    """Broadcasting comparison / logical op with a bool result (ONNX Equal, Less, And, ...)."""
    _binary(name, fn, ref, infer=_compare_type)


_compare("equal", te.eq, np.equal)
_compare("less", lambda a, b: a < b, np.less)
_compare("less_equal", lambda a, b: a <= b, np.less_equal)
_compare("greater", lambda a, b: a > b, np.greater)
_compare("greater_equal", lambda a, b: a >= b, np.greater_equal)
_compare("logical_and", te.logical_and, np.logical_and)
_compare("logical_or", te.logical_or, np.logical_or)
_compare("logical_xor", te.ne, np.logical_xor)


def _where_type(in_types, attrs):
    c, a, b = in_types
    if c.dtype != "bool":
        raise ValueError(f"condition dtype must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise ValueError(f"operand dtypes differ: {a.dtype} vs {b.dtype}")
    return TensorType(broadcast_shape(broadcast_shape(c.shape, a.shape), b.shape), a.dtype)


def _where_compute(inputs, attrs, out_type):
    c, a, b = inputs
    return te.compute(out_type.shape, lambda *i: te.select(c[broadcast_index(c.shape, i)],
                                                           a[broadcast_index(a.shape, i)],
                                                           b[broadcast_index(b.shape, i)]), name="where")


register_op(OpDef("where", _where_type, lambda c, a, b: np.where(c, a, b), OpPattern.BROADCAST, _where_compute,
                  INJECTIVE))


# ---- float classification, sign and rounding (ONNX IsNaN, IsInf, Sign, Round) --------------------

def _bool_type(in_types, attrs):
    return TensorType(in_types[0].shape, "bool")


def _isinf(x, a):
    if not is_float(x.dtype):
        return te.const(False, "bool")
    conds = [te.eq(x, te.const(v, x.dtype)) for v, on in ((np.inf, a.get("detect_positive", 1)),
                                                          (-np.inf, a.get("detect_negative", 1))) if on]
    return te.logical_or(*conds) if conds else te.const(False, "bool")


def _isinf_ref(x, detect_positive=1, detect_negative=1):
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


# x != x holds for NaN only (an unordered comparison)
_unary("isnan", lambda x, a: te.ne(x, x), lambda x: np.isnan(x), infer=_bool_type)
_unary("isinf", _isinf, _isinf_ref, infer=_bool_type)
_unary("sign", lambda x, a: te.select(x > _f(x, 0), _f(x, 1), te.select(x < _f(x, 0), _f(x, -1), x)),
       lambda x: np.sign(x))
_unary("round", lambda x, a: te.round(x) if is_float(x.dtype) else x, lambda x: np.round(x))


# ---- trigonometric and hyperbolic functions (ONNX Sin .. Atanh; codegen/intrinsics.py) ------------

def _float64_ref(fn):
    def ref(x):
        with np.errstate(all="ignore"):
            return fn(x.astype(np.float64)).astype(x.dtype)
    return ref


def _te_unary(f):
    """The compute of te's unary function `f` (a function, so each loop iteration below binds its own f)."""
    return lambda x, a: f(x)


for _name, _fn in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("asin", np.arcsin), ("acos", np.arccos),
                   ("atan", np.arctan), ("sinh", np.sinh), ("cosh", np.cosh), ("asinh", np.arcsinh),
                   ("acosh", np.arccosh), ("atanh", np.arctanh)):
    _unary(_name, _te_unary(getattr(te, _name)), _float64_ref(_fn))


# ---- integer bit operations (ONNX BitwiseAnd/Or/Xor/Not, BitShift) and remainders (Mod) ----------

_binary("bitwise_and", te.bitwise_and, np.bitwise_and)
_binary("bitwise_or", te.bitwise_or, np.bitwise_or)
_binary("bitwise_xor", te.bitwise_xor, np.bitwise_xor)
_unary("bitwise_not", lambda x, a: te.bitwise_xor(x, _f(x, -1 if x.dtype.startswith("int") else np.iinfo(x.dtype).max)),
       lambda x: np.invert(x))


def _shift_in_range(b, dtype):
    """0 <= b < bit width: shifts outside shift every bit out (ONNX BitShift-26 semantics)."""
    width = _f(b, np.iinfo(dtype).bits)
    return te.logical_and(b >= _f(b, 0), b < width) if dtype.startswith("int") else b < width


def _shift_ref(direction):
    def ref(a, b):
        a, b = np.broadcast_arrays(a, b)
        width = np.iinfo(a.dtype).bits
        ok = (b >= 0) & (b < width)
        bs = np.where(ok, b, 0).astype(a.dtype)
        if direction == "left":
            u = np.dtype(f"u{a.dtype.itemsize}")
            return np.where(ok, np.left_shift(a.view(u), bs.view(u)).view(a.dtype), 0).astype(a.dtype)
        return np.where(ok, np.right_shift(a, bs), np.where(a < 0, -1, 0)).astype(a.dtype)
    return ref


_binary("left_shift", lambda a, b: te.select(_shift_in_range(b, a.dtype), te.left_shift(a, b), _f(a, 0)),
        _shift_ref("left"))
_binary("right_shift", lambda a, b: te.select(
    _shift_in_range(b, a.dtype), te.right_shift(a, b),
    te.select(a < _f(a, 0), _f(a, -1), _f(a, 0)) if a.dtype.startswith("int") else _f(a, 0)), _shift_ref("right"))


def _floor_mod(a, b):
    """Remainder with the divisor's sign (Python's %, numpy.mod): integers through floormod;
    floats as fmod(a, b) moved by b when the signs differ (inf divisor: a, or b when the signs
    differ, as numpy)."""
    if not is_float(a.dtype):
        return a % b
    r = te.fmod(a, b)
    zero = _f(a, 0)
    fix = te.logical_and(te.ne(r, zero), te.ne(r < zero, b < zero))
    return te.select(fix, r + b, r)


def _mod_ref(fn):
    def ref(a, b):
        with np.errstate(all="ignore"):
            return fn(a, b).astype(a.dtype)
    return ref


# ONNX Mod fmod=1 (C's fmod / %: the dividend's sign) and fmod=0 (the divisor's sign)
_binary("trunc_mod", te.fmod, _mod_ref(np.fmod))
_binary("floor_mod", _floor_mod, _mod_ref(np.mod))


# ---- reinterpret (ONNX BitCast) ----------------------------------------------------------------

def _reinterpret_type(in_types, attrs):
    t = in_types[0]
    if np.dtype(t.dtype).itemsize != np.dtype(attrs["dtype"]).itemsize:
        raise ValueError(f"cannot reinterpret {t.dtype} as {attrs['dtype']}: sizes differ")
    return TensorType(t.shape, attrs["dtype"])


_unary("reinterpret", lambda x, a: te.reinterpret(a["dtype"], x) if x.dtype != "bool" else
       te.cast(a["dtype"], x), lambda x, dtype: x.view(dtype), infer=_reinterpret_type)
