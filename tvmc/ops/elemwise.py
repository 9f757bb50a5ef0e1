"""Elementwise and broadcast operators (ONNX Relu, Sigmoid, Tanh, Clip, Add/Sub/Mul/Div, Cast, ...)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.injective import schedule_injective
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op

INJECTIVE_CPU = {"cpu": [Implementation("injective.cpu", schedule_injective)]}


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """Numpy broadcasting of two shapes; ValueError when incompatible."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ValueError(f"shapes {list(a)} and {list(b)} do not broadcast") from None


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

    register_op(OpDef(name, infer, ref, pattern, compute, INJECTIVE_CPU))


def _f(x, v):
    """A literal of x's dtype (integer tensors get integer literals)."""
    return te.const(float(v) if x.dtype.startswith("float") else int(v), x.dtype)


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
_unary("abs", lambda x, a: te.fabs(x) if x.dtype.startswith("float") else te.select(x < _f(x, 0), -x, x),
       lambda x: np.abs(x))
_unary("clip", lambda x, a: te.minimum(te.maximum(x, _f(x, a["a_min"])), _f(x, a["a_max"])),
       lambda x, a_min, a_max: np.clip(x, np.float32(a_min), np.float32(a_max)).astype(x.dtype))
_unary("identity", lambda x, a: x, lambda x: x)
_unary("nn.dropout", lambda x, a: x, lambda x, **_: x)
_unary("cast", lambda x, a: te.cast(a["dtype"], x), lambda x, dtype: x.astype(dtype),
       infer=lambda t, a: TensorType(t[0].shape, a["dtype"]))


def _binary_type(in_types, attrs):
    a, b = in_types
    if a.dtype != b.dtype:
        raise ValueError(f"operand dtypes differ: {a.dtype} vs {b.dtype}")
    return TensorType(broadcast_shape(a.shape, b.shape), a.dtype)


def _binary(name, fn, ref):
    def compute(inputs, attrs, out_type):
        a, b = inputs
        return te.compute(out_type.shape,
                          lambda *i: fn(a[broadcast_index(a.shape, i)], b[broadcast_index(b.shape, i)]),
                          name=name)

    register_op(OpDef(name, _binary_type, ref, OpPattern.BROADCAST, compute, INJECTIVE_CPU))


_binary("add", lambda a, b: a + b, np.add)
_binary("subtract", lambda a, b: a - b, np.subtract)
_binary("multiply", lambda a, b: a * b, np.multiply)
_binary("divide", lambda a, b: a / b if a.dtype.startswith("float") else a // b,
        lambda a, b: np.divide(a, b).astype(a.dtype) if a.dtype.kind == "f" else np.floor_divide(a, b))
_binary("maximum", te.maximum, np.maximum)
_binary("minimum", te.minimum, np.minimum)
