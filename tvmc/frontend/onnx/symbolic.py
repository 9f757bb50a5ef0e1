"""ONNX import, symbolic shape arithmetic: Shape of a symbolically shaped tensor and the integer ops
on it, carried out at import on SymbolicValues (tvmc.frontend.onnx.common) instead of at run time.

An exported model computes shapes from shapes: `Reshape(x, Concat(Gather(Shape(x), 0), [12, 64]))`
splits attention heads whatever the batch, `Slice(pos, 0, Gather(Shape(ids), 1))` takes the first
seq positions. With symbolic input dimensions these values are expressions of the size variables,
known at import (TVM Relax's ShapeExpr); `fold_symbolic` evaluates the node on them (numpy object
arrays of ints and tvmc.graph.symbolic expressions) so that the consumers (Reshape, Expand, Slice,
Range, ConstantOfShape) get symbolic shapes at compile time, and a value that turns out static
becomes a Constant as it does for static models.
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import SymbolicValue, is_int_const, norm_axis, np_dtype_name
from tvmc.graph import symbolic
from tvmc.graph.ir import Constant


class _Undecided(Exception):
    """The bounds do not decide an element (a comparison, the sign for a truncating division):
    the node is converted as usual, its symbolic inputs given as tensors."""


def fold_symbolic(ctx, op_type: str, inputs: list, attrs: dict, opset: int):
    """The result of ONNX node `op_type` whose inputs include SymbolicValues, when it is shape
    arithmetic that the importer carries out: an int or bool numpy array (every element known), a
    SymbolicValue, or None when the node is converted by its converter (an op that is not shape
    arithmetic, an operand computed at run time, an element the bounds do not decide).

    Ops (ONNX semantics, the versions the converters take): Identity, Cast (to an integer type),
    Gather, Concat, Unsqueeze, Squeeze, Reshape, Slice (constant starts/ends/axes/steps), Add,
    Sub, Mul, Div (truncating: operands of provable signs), Mod, Neg, Abs, Min, Max, Equal, Less,
    LessOrEqual, Greater, GreaterOrEqual (decided by the bounds), Where (constant condition).
    Raises ModelError (naming the node) on invalid axes or shapes, as the converters do."""
    fold = _FOLDS.get(op_type)
    if fold is None:
        return None
    values = [_values(e) if e is not None else None for e in inputs]
    try:
        return fold(ctx, inputs, values, attrs, opset)
    except _Undecided:
        return None


def _values(e):
    """The elements of an integer or bool input known at import (object array of ints, bools and
    SymExprs), or None for a tensor computed at run time."""
    if isinstance(e, SymbolicValue):
        return e.values
    if isinstance(e, Constant) and e.value.dtype.kind in "biu":
        return e.value.astype(object)
    return None


def _result(values: np.ndarray, dtype: str):
    """A numpy array of `dtype` when every element is known, else a SymbolicValue."""
    values = np.asarray(values, dtype=object)
    if not any(symbolic.is_symbolic(v) for v in values.reshape(-1)):
        return np.array(values.tolist(), dtype=dtype)
    return SymbolicValue(values, dtype)


def _need(*values):
    if any(v is None for v in values):
        raise _Undecided
    return values


def _identity(ctx, inputs, values, attrs, opset):
    return inputs[0] if isinstance(inputs[0], SymbolicValue) else None


def _cast(ctx, inputs, values, attrs, opset):
    to = np_dtype_name(int(attrs["to"]))
    if not to.startswith(("int", "uint")):
        return None
    return _result(*_need(values[0]), to)


def _gather(ctx, inputs, values, attrs, opset):
    data, = _need(values[0])
    if not is_int_const(inputs[1]):
        return None
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), data.ndim)
    idx = inputs[1].value.astype(np.int64)
    n = data.shape[axis]
    if ((idx < -n) | (idx >= n)).any():
        raise ctx.error(f"indices {idx.reshape(-1).tolist()} out of range for axis {axis} of extent {n}")
    return _result(np.take(data, np.where(idx < 0, idx + n, idx), axis=axis), inputs[0].dtype)


def _concat(ctx, inputs, values, attrs, opset):
    parts = _need(*[v for e, v in zip(inputs, values) if e is not None])
    axis = norm_axis(ctx, int(attrs.get("axis", 1 if opset < 4 else 0)), parts[0].ndim)
    return _result(np.concatenate(parts, axis=axis), inputs[0].dtype)


def _axes(ctx, inputs, attrs, opset):
    if opset < 13:
        return attrs.get("axes")
    if len(inputs) > 1 and inputs[1] is not None:
        return ctx.constant(inputs, 1, "axes").reshape(-1).tolist()
    return None


def _unsqueeze(ctx, inputs, values, attrs, opset):
    data, = _need(values[0])
    axes = _axes(ctx, inputs, attrs, opset)
    if axes is None:
        raise ctx.error("axes are required")
    rank = data.ndim + len(axes)
    axes = sorted(norm_axis(ctx, int(a), rank, "axes") for a in axes)
    dims = iter(data.shape)
    return _result(data.reshape(tuple(1 if i in axes else next(dims) for i in range(rank))), inputs[0].dtype)


def _squeeze(ctx, inputs, values, attrs, opset):
    data, = _need(values[0])
    axes = _axes(ctx, inputs, attrs, opset)
    axes = {norm_axis(ctx, int(a), data.ndim, "axes") for a in axes} if axes is not None \
        else {i for i, d in enumerate(data.shape) if d == 1}
    if any(data.shape[a] != 1 for a in axes):
        raise ctx.error(f"cannot squeeze axes {sorted(axes)} of shape {list(data.shape)}")
    return _result(data.reshape(tuple(d for i, d in enumerate(data.shape) if i not in axes)), inputs[0].dtype)


def _reshape(ctx, inputs, values, attrs, opset):
    from tvmc.frontend.onnx.tensor import _resolve_reshape

    if not isinstance(inputs[0], SymbolicValue):
        return None
    data = values[0]
    shape = attrs.get("shape") if opset < 5 else (inputs[1].value.reshape(-1).tolist() if is_int_const(inputs[1])
                                                  else None)
    if shape is None:
        return None
    return _result(data.reshape(_resolve_reshape(ctx, data.shape, shape, int(attrs.get("allowzero", 0)))),
                   inputs[0].dtype)


def _slice(ctx, inputs, values, attrs, opset):
    from tvmc.frontend.onnx.tensor import _slice_attrs

    if not isinstance(inputs[0], SymbolicValue):
        return None
    data = values[0]
    if opset < 10:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    else:
        if not all(is_int_const(e) for e in inputs[1:] if e is not None):
            return None
        starts, ends = (ctx.constant(inputs, k, w).reshape(-1).tolist() for k, w in ((1, "starts"), (2, "ends")))
        axes, steps = (ctx.constant(inputs, k, w).reshape(-1).tolist() if len(inputs) > k and inputs[k] is not None
                       else None for k, w in ((3, "axes"), (4, "steps")))
    if starts is None or ends is None or len(starts) != len(ends):
        raise ctx.error("starts and ends are required and must have the same length")
    axes = list(range(len(starts))) if axes is None else [norm_axis(ctx, int(a), data.ndim, "axes") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if any(int(s) == 0 for s in steps):
        raise ctx.error("steps must be non-zero")
    begin, end, strides = _slice_attrs(data.shape, starts, ends, axes, steps)
    return _result(data[tuple(slice(b, e if e >= 0 else None, s) for b, e, s in zip(begin, end, strides))],
                   inputs[0].dtype)


def _elementwise(fn, nargs=2, dtype=None):
    """A fold applying `fn` to each element (ints / SymExprs, numpy broadcasting of the operands)."""
    ufunc = np.frompyfunc(fn, nargs, 1)

    def fold(ctx, inputs, values, attrs, opset):
        operands = _need(*values[:nargs]) if nargs else _need(*values)
        out = ufunc(*operands) if nargs else _reduce(ufunc, operands)
        return _result(np.asarray(out, dtype=object), dtype or inputs[0].dtype)

    return fold


def _reduce(ufunc, operands):
    out = operands[0]
    for v in operands[1:]:
        out = ufunc(out, v)
    return out


def _trunc_div(a, b):
    """ONNX Div on integers (truncates toward zero) where the operands' signs are provable."""
    if not (symbolic.is_symbolic(a) or symbolic.is_symbolic(b)):
        q = abs(a) // abs(b) if b else _undecided()
        return q if (a < 0) == (b < 0) else -q
    if symbolic.can_prove(b > 0):
        if symbolic.can_prove(a >= 0):
            return symbolic.floordiv(a, b)
        if symbolic.can_prove(a <= 0):
            return -symbolic.floordiv(-a, b)
    raise _Undecided


def _undecided():
    raise _Undecided


def _mod(ctx, inputs, values, attrs, opset):
    if int(attrs.get("fmod", 0)):  # C's fmod: the dividend's sign; equal to floormod for a >= 0, b > 0
        def fn(a, b):
            if symbolic.can_prove(a >= 0) and symbolic.can_prove(b > 0):
                return symbolic.floormod(a, b)
            raise _Undecided
    else:
        def fn(a, b):
            if b == 0:
                raise _Undecided
            return symbolic.floormod(a, b)
    return _elementwise(fn)(ctx, inputs, values, attrs, opset)


def _abs(a):
    if symbolic.can_prove(a >= 0):
        return a
    if symbolic.can_prove(a <= 0):
        return -a
    raise _Undecided


def _compare(op):
    """Equal / Less / ... of two elements where the bounds of their difference decide it."""
    def fn(a, b):
        if op == "==":
            if symbolic.can_prove_equal(a, b):
                return True
            lo, hi = symbolic.bounds(a - b)
            if lo > 0 or hi < 0:
                return False
            raise _Undecided
        verdict = symbolic.Condition(a, op, b).decide() if symbolic.is_symbolic(a - b) else \
            {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        if verdict is None:
            raise _Undecided
        return bool(verdict)
    return _elementwise(fn, dtype="bool")


def _where(ctx, inputs, values, attrs, opset):
    cond = inputs[0]
    if not isinstance(cond, Constant) or cond.dtype != "bool":
        return None
    a, b = _need(values[1], values[2])
    return _result(np.where(cond.value, a, b), inputs[1].dtype)


_FOLDS = {
    "Identity": _identity,
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Slice": _slice,
    "Add": _elementwise(lambda a, b: a + b),
    "Sub": _elementwise(lambda a, b: a - b),
    "Mul": _elementwise(lambda a, b: a * b),
    "Div": _elementwise(_trunc_div),
    "Mod": _mod,
    "Neg": _elementwise(lambda a: -a, 1),
    "Abs": _elementwise(_abs, 1),
    "Min": _elementwise(symbolic.min_, 0),
    "Max": _elementwise(symbolic.max_, 0),
    "Equal": _compare("=="),
    "Less": _compare("<"),
    "LessOrEqual": _compare("<="),
    "Greater": _compare(">"),
    "GreaterOrEqual": _compare(">="),
    "Where": _where,
}
