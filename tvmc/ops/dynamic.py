"""Operators whose output shape depends on the data (ONNX NonZero, Compress, Unique): upper-bound
outputs plus a run-time shape (docs/dynamic_shapes.md; TVM's shape functions).

Each such operator is two graph operators: `<op>` computes the output padded to its bound (type
with `dynamic_axes`, the data in the leading corner, zeros after it) and `<op>_shape` computes
the int64[rank] run-time shape, the bound with the dynamic axis replaced by the count, as TVM's
shape functions do beside the op. Both are sequential selections written as reductions: the
position of an element in the output is the number of selected elements before it (a prefix
count), and output j gathers the element whose position is j. O(n^2) in the selected axis:
meant for the small index sets these ops see in detection heads and tests, not for sorting.
"""

from __future__ import annotations

import math

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.reduction import schedule_reduce
from tvmc.ops.gpu.injective import generic_config
from tvmc.ops.gpu.selection import schedule_sequential
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op

SELECTION = {"cpu": [Implementation("selection.x86", schedule_reduce)],
             "gpu": [Implementation("selection.gpu", schedule_sequential, config_space=generic_config)]}

INT64 = "int64"


def _one(v):
    return te.const(v, INT64)


def _count(flag, n: int, name: str):
    """int64[1]: how many of positions [0, n) have flag(m) true."""
    r = te.reduce_axis(n, f"{name}_m")
    return te.compute((1,), lambda _: te.sum(te.select(flag(r.var), _one(1), _one(0)), r), name=name)


def _prefix(flag, n: int, name: str):
    """int64[n]: for each position i, how many positions m < i have flag(m) true."""
    r = te.reduce_axis(n, f"{name}_m")
    return te.compute((n,), lambda i: te.sum(te.select(te.logical_and(r.var < i, flag(r.var)), _one(1), _one(0)), r),
                      name=name)


def _source(flag, position, n: int, bound: int, name: str):
    """int64[bound]: for each output slot j, the position i < n with flag(i) and position[i] == j
    (0 past the last selected one)."""
    r = te.reduce_axis(n, f"{name}_i")
    return te.compute((bound,), lambda j: te.sum(te.select(
        te.logical_and(flag(r.var), te.eq(position[r.var], te.cast(INT64, j))), te.cast(INT64, r.var), _one(0)), r),
        name=name)


def _unravel(flat, shape):
    """Row-major coordinates of the index expression `flat` in `shape`."""
    coords, stride = [], math.prod(shape)
    for d in shape:
        stride //= d
        coords.append((flat // stride) % d if stride > 1 else flat % d)
    return coords


def _padded_reference(exact, infer):
    """The numpy reference of the padded operator: the exact ONNX result in the leading corner of
    the bound, zeros after it."""
    def ref(*arrays, **attrs):
        value = exact(*arrays, **attrs)
        bound = infer([TensorType(a.shape, a.dtype.name) for a in arrays], attrs)
        out = np.zeros(bound.shape, bound.dtype)
        out[tuple(slice(0, d) for d in value.shape)] = value
        return out
    return ref


def register_dynamic(name: str, infer, exact, compute, count):
    """Register `name` (padded data) and `name_shape` (its run-time shape).

    infer(in_types, attrs) -> TensorType: the bound, with one dynamic axis.
    exact(*arrays, **attrs) -> np.ndarray: ONNX semantics (constant folding, tests).
    compute(inputs, attrs, out_type) -> te.Tensor: the padded output.
    count(inputs, attrs) -> te.Tensor int64[1]: the run-time extent of the dynamic axis.
    """
    def shape_type(in_types, attrs):
        return TensorType((len(infer(in_types, attrs).shape),), INT64)

    def shape_compute(inputs, attrs, out_type):
        bound = infer([TensorType(t.shape, t.dtype) for t in inputs], attrs)
        (axis,) = bound.dynamic_axes
        n = count(inputs, attrs)
        extents = [n[0] if a == axis else _one(int(d)) for a, d in enumerate(bound.shape)]
        return te.compute(out_type.shape, lambda k: _pick(k, extents), name=f"{name}_shape")

    register_op(OpDef(name, infer, _padded_reference(exact, infer), OpPattern.OPAQUE, compute, SELECTION))
    register_op(OpDef(f"{name}_shape", shape_type, lambda *a, **k: np.array(exact(*a, **k).shape, np.int64),
                      OpPattern.OPAQUE, shape_compute, SELECTION))


def _pick(k, exprs):
    """exprs[k] for an index expression k over a short list of expressions (a select chain)."""
    out = exprs[-1]
    for i in range(len(exprs) - 2, -1, -1):
        out = te.select(te.eq(k, te.const(i)), exprs[i], out)
    return out


def _is_nonzero(x):
    return te.ne(x, te.const(0, x.dtype) if x.dtype != "bool" else te.const(False, "bool"))


# ---- nonzero (ONNX NonZero-9/13) --------------------------------------------------------------

def _nonzero_type(in_types, attrs):
    (x,) = in_types
    if not x.shape:
        raise ValueError("NonZero of a rank-0 tensor is not supported")
    return TensorType((len(x.shape), math.prod(x.shape)), INT64, (1,))


def _nonzero_flag(x):
    return lambda m: _is_nonzero(x[tuple(_unravel(m, x.shape))])


def _nonzero_compute(inputs, attrs, out_type):
    """out[d, j] = coordinate d of the j-th nonzero element of x in row-major order."""
    (x,) = inputs
    n, flag = math.prod(x.shape), _nonzero_flag(x)
    src = _source(flag, _prefix(flag, n, "nonzero_prefix"), n, n, "nonzero_src")
    count = _count(flag, n, "nonzero_count")
    return te.compute(out_type.shape, lambda d, j: te.select(
        te.cast(INT64, j) < count[0], te.cast(INT64, _pick(d, _unravel(src[j], x.shape))), _one(0)),
        name="nonzero")


register_dynamic("nonzero", _nonzero_type, lambda x: np.array(np.nonzero(x), np.int64), _nonzero_compute,
                 lambda inputs, attrs: _count(_nonzero_flag(inputs[0]), math.prod(inputs[0].shape), "nonzero_count"))


# ---- compress (ONNX Compress-9/11) ------------------------------------------------------------

def _compress_type(in_types, attrs):
    """x[..., A, ...], condition bool[L] -> x with the axis bounded by min(A, L)."""
    x, cond = in_types
    axis = attrs["axis"]
    if len(cond.shape) != 1 or cond.dtype != "bool":
        raise ValueError(f"condition must be a 1-D bool tensor, got {cond}")
    shape = list(x.shape)
    shape[axis] = min(shape[axis], cond.shape[0])
    return TensorType(tuple(shape), x.dtype, (axis,))


def _compress_flag(inputs, attrs):
    x, cond = inputs
    return (lambda m: cond[(m,)]), min(x.shape[attrs["axis"]], cond.shape[0])


def _compress_compute(inputs, attrs, out_type):
    """out[.., j, ..] = x[.., i, ..] for the j-th i with condition[i] (zero past the count)."""
    x, cond = inputs
    axis = attrs["axis"]
    flag, n = _compress_flag(inputs, attrs)
    src = _source(flag, _prefix(flag, n, "compress_prefix"), n, n, "compress_src")
    count = _count(flag, n, "compress_count")
    zero = te.const(False, "bool") if x.dtype == "bool" else te.const(0, x.dtype)
    return te.compute(out_type.shape, lambda *i: te.select(
        te.cast(INT64, i[axis]) < count[0],
        x[tuple((src[i[axis]]) if d == axis else v for d, v in enumerate(i))], zero),
        name="compress")


def _compress_exact(x, cond, axis):
    return np.compress(cond, x, axis=axis)


register_dynamic("compress", _compress_type, _compress_exact, _compress_compute,
                 lambda inputs, attrs: _count(*_compress_flag(inputs, attrs), "compress_count"))


# ---- unique (ONNX Unique-11) ------------------------------------------------------------------
# attrs: axis (of the slices compared; x is flattened to 1-D by the frontend when ONNX has no
# axis), sorted (0/1), output ('values', 'indices', 'counts'; 'inverse' is static: unique_inverse)

UNIQUE_OUTPUTS = ("values", "indices", "inverse", "counts")


def _unique_exact_all(x, axis, sorted):
    """(values, indices, inverse, counts) as ONNX Unique: numpy's sorted unique, reordered by
    first occurrence when not sorted."""
    values, indices, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                                 axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(indices, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values, indices, counts, inverse = np.take(values, order, axis=axis), indices[order], counts[order], \
            rank[inverse]
    return values, indices.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _unique_exact(x, axis, sorted, output):
    return _unique_exact_all(x, axis, sorted)[UNIQUE_OUTPUTS.index(output)]


def _unique_type(in_types, attrs):
    (x,) = in_types
    axis, output = attrs["axis"], attrs["output"]
    if not 0 <= axis < len(x.shape):
        raise ValueError(f"axis {axis} out of range for rank {len(x.shape)}")
    if output == "inverse":
        return TensorType((x.shape[axis],), INT64)
    if output == "values":
        return TensorType(x.shape, x.dtype, (axis,))
    return TensorType((x.shape[axis],), INT64, (0,))


class _UniqueStages:
    """The selection shared by Unique's outputs over the A slices of x along `axis` (each of K
    elements): `same[m, i]` (slices equal), `first[i]` (no equal slice before i), `rank[i]`
    (position of slice i's value among the unique ones: sorted lexicographically, or by first
    occurrence), `count`, and `src[j]` (the first slice of the j-th unique value)."""

    def __init__(self, x, axis: int, sorted: int):
        self.x, self.axis = x, axis
        self.a = a = x.shape[axis]
        self.rest = rest = tuple(d for k, d in enumerate(x.shape) if k != axis)
        self.k = k = math.prod(rest)
        r = te.reduce_axis(k, "unique_k")
        self.same = te.compute((a, a), lambda m, i: te.min(te.select(
            te.eq(self.elem(m, r.var), self.elem(i, r.var)), _one(1), _one(0)), r), name="unique_same")
        rm = te.reduce_axis(a, "unique_dup_m")
        dup = te.compute((a,), lambda i: te.max(te.select(
            te.logical_and(rm.var < i, te.eq(self.same[rm.var, i], _one(1))), _one(1), _one(0)), rm), name="unique_dup")
        self.first = lambda i: te.eq(dup[(i,)], _one(0))
        if sorted:
            rd = te.reduce_axis(k, "unique_kd")
            diff = te.compute((a, a), lambda m, i: te.min(te.select(
                te.ne(self.elem(m, rd.var), self.elem(i, rd.var)), te.cast(INT64, rd.var), _one(k)), rd),
                name="unique_diff")

            def before(m, i):  # slice m sorts before slice i: first differing element smaller
                pos = (te.minimum(diff[m, i], _one(k - 1)))
                return te.logical_and(diff[m, i] < _one(k), self.elem(m, pos) < self.elem(i, pos))
        else:
            rf = te.reduce_axis(a, "unique_first_m")
            first_of = te.compute((a,), lambda i: te.min(te.select(
                te.eq(self.same[rf.var, i], _one(1)), te.cast(INT64, rf.var), _one(a)), rf), name="unique_first_of")

            def before(m, i):
                return te.cast(INT64, m) < first_of[(i,)]
        rr = te.reduce_axis(a, "unique_rank_m")
        self.rank = te.compute((a,), lambda i: te.sum(te.select(
            te.logical_and(self.first(rr.var), before(rr.var, i)), _one(1), _one(0)), rr), name="unique_rank")
        self.count = _count(self.first, a, "unique_count")
        self.src = _source(self.first, self.rank, a, a, "unique_src")

    def elem(self, i, flat):
        """x at slice i and element `flat` (row-major over the other axes) of the slice."""
        coords = iter(_unravel(flat, self.rest)) if self.rest else iter(())
        return self.x[tuple(i if d == self.axis else next(coords) for d in range(len(self.x.shape)))]


def _unique_compute(inputs, attrs, out_type):
    (x,) = inputs
    st = _UniqueStages(x, attrs["axis"], attrs["sorted"])
    output, axis = attrs["output"], attrs["axis"]
    if output == "inverse":
        return te.compute(out_type.shape, lambda i: st.rank[i], name="unique_inverse")
    if output == "counts":
        rc = te.reduce_axis(st.a, "unique_counts_i")
        return te.compute(out_type.shape, lambda j: te.sum(te.select(
            te.eq(st.rank[rc.var], te.cast(INT64, j)), _one(1), _one(0)), rc), name="unique_counts")
    if output == "indices":
        return te.compute(out_type.shape, lambda j: st.src[j], name="unique_indices")
    zero = te.const(False, "bool") if x.dtype == "bool" else te.const(0, x.dtype)
    return te.compute(out_type.shape, lambda *i: te.select(
        te.cast(INT64, i[axis]) < st.count[0],
        x[tuple((st.src[i[axis]]) if d == axis else v for d, v in enumerate(i))], zero),
        name="unique_values")


def _unique_count(inputs, attrs):
    return _UniqueStages(inputs[0], attrs["axis"], attrs["sorted"]).count


register_dynamic("unique", _unique_type, _unique_exact, _unique_compute, _unique_count)
register_op(OpDef("unique_inverse", _unique_type, _unique_exact, OpPattern.OPAQUE, _unique_compute, SELECTION))
