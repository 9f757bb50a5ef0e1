"""ONNX converters, reduce group: Reduce*, ArgMax/ArgMin, TopK, CumSum."""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, reshape
from tvmc.frontend.onnx.registry import converter
from tvmc.te.expr import is_float


def _reduce_axes(ctx, inputs, attrs, opset, since_input):
    """Normalized reduction axes, or None for 'all axes'; () when noop_with_empty_axes applies."""
    x = inputs[0]
    if opset >= since_input:
        axes = ctx.constant(inputs, 1, "axes").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None \
            else None
    else:
        axes = attrs.get("axes")
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None:
        if attrs.get("noop_with_empty_axes", 0) and opset >= since_input:
            return ()
        return tuple(range(len(x.shape)))
    return tuple(sorted({norm_axis(ctx, int(a), len(x.shape), "axes") for a in axes}))


# value of a reduction over an empty set (ONNX Reduce* on a zero-size axis)
_EMPTY_REDUCTION = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf, "mean": np.nan}


def _reduce(ctx, inputs, attrs, opset, op, since_input=18, pre=None, post=None):
    x = inputs[0]
    axes = _reduce_axes(ctx, inputs, attrs, opset, since_input)
    keep = int(attrs.get("keepdims", 1))
    if axes and any(x.shape[a] == 0 for a in axes):
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep \
            else tuple(d for k, d in enumerate(x.shape) if k not in axes)
        fill = (op == "min") if x.dtype == "bool" else _EMPTY_REDUCTION[op]  # all() / any() of nothing
        ctx.check_constant(shape, np.float64)
        value = np.full(shape, fill, dtype=np.float64)
        return _empty_reduction(ctx, value, x.dtype, post)
    if x.dtype == "bool" and op in ("max", "min"):  # any / all
        y = _reduce(ctx, [ctx.call("cast", [x], {"dtype": "int32"})] + list(inputs[1:]), attrs, opset, op,
                    since_input, pre, post)
        return ctx.call("cast", [y], {"dtype": "bool"})
    if pre is not None:
        x = pre(x)
    if axes == ():
        out = x if pre is not None else ctx.call("identity", [x])
    elif len(x.shape) == 0:
        out = ctx.call("identity", [x])
    else:
        out = ctx.call(op, [x], {"axis": axes, "keepdims": keep})
    return post(out) if post is not None else out


def _empty_reduction(ctx, value, dtype, post):
    out = ctx.const(value.astype(dtype), "empty_reduction")
    return post(out) if post is not None else out


@converter(1, 11, 13, 18)
def ReduceMean(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMean (axes attribute; input from 18; keepdims) -> mean."""
    return _reduce(ctx, inputs, attrs, opset, "mean")


@converter(1, 11, 13)
def ReduceSum(ctx, node, inputs, attrs, opset):
    """ONNX ReduceSum (axes attribute; input from 13; noop_with_empty_axes) -> sum."""
    return _reduce(ctx, inputs, attrs, opset, "sum", since_input=13)


@converter(1, 11, 12, 13, 18, 20)
def ReduceMax(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMax -> max."""
    return _reduce(ctx, inputs, attrs, opset, "max")


@converter(1, 11, 12, 13, 18, 20)
def ReduceMin(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMin -> min."""
    return _reduce(ctx, inputs, attrs, opset, "min")


@converter(1, 11, 13, 18)
def ReduceProd(ctx, node, inputs, attrs, opset):
    """ONNX ReduceProd -> prod."""
    return _reduce(ctx, inputs, attrs, opset, "prod")


@converter(1, 11, 13, 18)
def ReduceL2(ctx, node, inputs, attrs, opset):
    """ONNX ReduceL2: sqrt(sum(x * x))."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("multiply", [x, x]),
                   post=lambda y: ctx.call("sqrt", [y]))


@converter(1, 11, 13, 18)
def ReduceL1(ctx, node, inputs, attrs, opset):
    """ONNX ReduceL1: sum(|x|)."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("abs", [x]))


@converter(1, 11, 13, 18)
def ReduceSumSquare(ctx, node, inputs, attrs, opset):
    """ONNX ReduceSumSquare: sum(x * x)."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("multiply", [x, x]))


def _arg(ctx, inputs, attrs, opset, op):
    x = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), len(x.shape))
    last = int(attrs.get("select_last_index", 0)) if opset >= 12 else 0
    return ctx.call(op, [x], {"axis": axis, "keepdims": int(attrs.get("keepdims", 1)), "select_last_index": last})


@converter(1, 11, 12, 13)
def ArgMax(ctx, node, inputs, attrs, opset):
    """ONNX ArgMax (axis, keepdims, select_last_index from 12) -> argmax (int64)."""
    return _arg(ctx, inputs, attrs, opset, "argmax")


@converter(1, 11, 12, 13)
def ArgMin(ctx, node, inputs, attrs, opset):
    """ONNX ArgMin -> argmin (int64)."""
    return _arg(ctx, inputs, attrs, opset, "argmin")


@converter(1, 10, 11, 24)
def TopK(ctx, node, inputs, attrs, opset):
    """ONNX TopK (k attribute before 10, constant input from 10; largest and sorted from 11)
    -> (topk_values, topk_indices), both sorted (ties: lower index first)."""
    x = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", -1)), len(x.shape))
    largest = int(attrs.get("largest", 1)) if opset >= 11 else 1
    if opset < 10:
        if "k" not in attrs:
            raise ctx.error("attribute 'k' is required")
        k = int(attrs["k"])
    elif len(inputs) > 1 and not is_const(inputs[1]):
        # k computed at run time: the whole axis sorted, bounded by its extent (tvmc/ops/dynamic.py)
        if inputs[1].type.size != 1 or not inputs[1].dtype.startswith("int"):
            raise ctx.error(f"input K must be one integer, got {inputs[1].type}")
        kattrs = {"axis": axis, "largest": largest}
        return tuple(ctx.dynamic_call("topk", [x, inputs[1]], {**kattrs, "output": out})
                     for out in ("values", "indices"))
    else:
        k = int(ctx.constant(inputs, 1, "K").reshape(-1)[0])
    if not 0 <= k <= x.shape[axis]:
        raise ctx.error(f"k={k} out of range for axis {axis} of {x.type}")
    tattrs = {"axis": axis, "k": k, "largest": largest}
    return ctx.call("topk_values", [x], tattrs), ctx.call("topk_indices", [x], tattrs)


@converter(11, 14)
def CumSum(ctx, node, inputs, attrs, opset):
    """ONNX CumSum(x, axis input; exclusive, reverse) -> cumsum."""
    return _cumulative(ctx, inputs, attrs, "cumsum")


@converter(26)
def CumProd(ctx, node, inputs, attrs, opset):
    """ONNX CumProd(x, axis input; exclusive, reverse) -> cumprod."""
    return _cumulative(ctx, inputs, attrs, "cumprod")


def _cumulative(ctx, inputs, attrs, op):
    x = inputs[0]
    axis = norm_axis(ctx, int(ctx.constant(inputs, 1, "axis").reshape(-1)[0]), len(x.shape))
    return ctx.call(op, [x], {"axis": axis, "exclusive": int(attrs.get("exclusive", 0)),
                              "reverse": int(attrs.get("reverse", 0))})


@converter(1, 11, 13, 18, 28)
def ReduceLogSum(ctx, node, inputs, attrs, opset):
    """ONNX ReduceLogSum: log(sum(x))."""
    return _reduce(ctx, inputs, attrs, opset, "sum", post=lambda y: ctx.call("log", [y]))


@converter(1, 11, 13, 18, 28)
def ReduceLogSumExp(ctx, node, inputs, attrs, opset):
    """ONNX ReduceLogSumExp: log(sum(exp(x - m))) + m with m the maximum (kept finite: an infinite
    maximum shifts by 0), so large inputs do not overflow."""
    x = inputs[0]
    axes = _reduce_axes(ctx, inputs, attrs, opset, 18)
    if not axes or any(x.shape[a] == 0 for a in axes) or not is_float(x.dtype):
        return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda v: ctx.call("exp", [v]),
                       post=lambda y: ctx.call("log", [y]))
    m = ctx.call("max", [x], {"axis": axes, "keepdims": 1})
    zero = ctx.const(np.zeros((), x.dtype), "zero")
    m = ctx.call("where", [ctx.call("isinf", [m], {"detect_positive": 1, "detect_negative": 1}), zero, m])
    s = ctx.call("sum", [ctx.call("exp", [ctx.call("subtract", [x, m])])], {"axis": axes, "keepdims": 1})
    out = ctx.call("add", [ctx.call("log", [s]), m])
    if int(attrs.get("keepdims", 1)):
        return out
    return reshape(ctx, out, tuple(d for k, d in enumerate(x.shape) if k not in axes))
