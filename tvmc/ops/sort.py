"""Selection: top-k values and indices along an axis (ONNX TopK-1/10/11; TVM's topi.topk).

The graph IR gives a call one output, so TopK is two operators, `topk_values` and
`topk_indices`, each computing its own output from the same selection: the rank of element i
along the axis is the number of elements that come before it in the sorted order (larger, for
`largest`; smaller otherwise; equal elements keep their index order, as ONNX requires), and
output j is the element of rank j. O(n^2) along the axis: meant for the small axes TopK sees
in classifier heads and tests, not for sorting.
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.reduction import schedule_reduce
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op

TOPK = {"cpu": [Implementation("topk.cpu", schedule_reduce)],
        "gpu": [Implementation("topk.gpu", schedule_generic, config_space=generic_config)]}


def _topk_type(dtype):
    def infer(in_types, attrs):
        t = in_types[0]
        axis, k = attrs["axis"], attrs["k"]
        if not 0 <= axis < len(t.shape):
            raise ValueError(f"axis {axis} out of range for rank {len(t.shape)}")
        if not 0 <= k <= t.shape[axis]:
            raise ValueError(f"k={k} out of range for axis of size {t.shape[axis]}")
        shape = list(t.shape)
        shape[axis] = k
        return TensorType(tuple(shape), dtype or t.dtype)
    return infer


def _topk_indices_compute(x, axis, k, largest):
    """[.., k, ..] int64 indices of the top k along `axis` (ties: lower index first)."""
    n = x.shape[axis]

    def at(i, v):
        return tuple(v if d == axis else e for d, e in enumerate(i))

    rm = te.reduce_axis(n, "m")

    def rank(*i):
        a, b = x[at(i, rm.var)], x[i]
        before = (a > b) if largest else (a < b)
        before = te.logical_or(before, te.logical_and(te.eq(a, b), rm.var < i[axis]))
        return te.sum(te.select(before, te.const(1, "int64"), te.const(0, "int64")), rm)

    ranks = te.compute(x.shape, rank, name="topk_rank")
    shape = list(x.shape)
    shape[axis] = k
    ri = te.reduce_axis(n, "i")
    return te.compute(tuple(shape), lambda *j: te.sum(
        te.select(te.eq(ranks[at(j, ri.var)], te.cast("int64", j[axis])), te.cast("int64", ri.var),
                  te.const(0, "int64")), ri), name="topk_indices")


def _indices_compute(inputs, attrs, out_type):
    return _topk_indices_compute(inputs[0], attrs["axis"], attrs["k"], attrs.get("largest", 1))


def _values_compute(inputs, attrs, out_type):
    x, axis = inputs[0], attrs["axis"]
    idx = _topk_indices_compute(x, axis, attrs["k"], attrs.get("largest", 1))
    return te.compute(out_type.shape, lambda *j: x[tuple(idx[j] if d == axis else e for d, e in enumerate(j))],
                      name="topk_values")


def topk_reference(x, axis, k, largest=1):
    """(values, indices) with a stable sort: equal values keep their index order."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


register_op(OpDef("topk_values", _topk_type(None), lambda x, axis, k, largest=1: topk_reference(x, axis, k, largest)[0],
                  OpPattern.OPAQUE, _values_compute, TOPK))
register_op(OpDef("topk_indices", _topk_type("int64"),
                  lambda x, axis, k, largest=1: topk_reference(x, axis, k, largest)[1],
                  OpPattern.OPAQUE, _indices_compute, TOPK))
