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
from tvmc.ops.elemwise import INJECTIVE, broadcast_index
from tvmc.ops.gpu.injective import generic_config
from tvmc.ops.gpu.selection import schedule_sequential
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op

SELECTION = {"cpu": [Implementation("selection.cpu", schedule_reduce)],
             "gpu": [Implementation("selection.gpu", schedule_sequential, config_space=generic_config)]}

INT64 = "int64"
# The selections are O(n^2) in the selected extent n (NonZero of 32768 elements: 0.5 s on a Zen 3
# core pair); beyond this n they would run for minutes,
# so they are refused at compile time instead.
SELECTION_MAX_EXTENT = 1 << 16


def _check_extent(n: int, what: str):
    if n > SELECTION_MAX_EXTENT:
        raise ValueError(f"{what} selects among {n} elements; tvmc's selection kernels take O(n^2) steps and "
                         f"compile at most {SELECTION_MAX_EXTENT}")


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


def register_dynamic(name: str, infer, exact, compute, count=None, shape=None, impls=SELECTION):
    """Register `name` (padded data) and `name_shape` (its run-time shape), both with the
    implementations `impls` (the selection schedules unless given).

    infer(in_types, attrs) -> TensorType: the bound, with its dynamic axes.
    exact(*arrays, **attrs) -> np.ndarray: ONNX semantics (constant folding, tests).
    compute(inputs, attrs, out_type) -> te.Tensor: the padded output.
    count(inputs, attrs) -> te.Tensor int64[1]: the run-time extent of the one dynamic axis; or
    shape(inputs, attrs) -> te.Tensor int64[rank]: the run-time shape.
    """
    def shape_type(in_types, attrs):
        return TensorType((len(infer(in_types, attrs).shape),), INT64)

    def shape_compute(inputs, attrs, out_type):
        if shape is not None:
            dims = shape(inputs, attrs)
            return te.compute(out_type.shape, lambda k: dims[k], name=f"{name}_shape")
        bound = infer([TensorType(t.shape, t.dtype) for t in inputs], attrs)
        (axis,) = bound.dynamic_axes
        n = count(inputs, attrs)
        return _shape_tensor([n[0] if a == axis else _one(int(d)) for a, d in enumerate(bound.shape)], f"{name}_shape")

    register_op(OpDef(name, infer, _padded_reference(exact, infer), OpPattern.OPAQUE, compute, impls))
    register_op(OpDef(f"{name}_shape", shape_type, lambda *a, **k: np.array(exact(*a, **k).shape, np.int64),
                      OpPattern.OPAQUE, shape_compute, impls))


def _pick(k, exprs):
    """exprs[k] for an index expression k over a short list of expressions (a select chain)."""
    out = exprs[-1]
    for i in range(len(exprs) - 2, -1, -1):
        out = te.select(te.eq(k, te.const(i)), exprs[i], out)
    return out


def _shape_tensor(extents, name: str):
    """int64[len(extents)]: the run-time shape whose axis a extent is the expression extents[a]."""
    return te.compute((len(extents),), lambda k: _pick(k, extents), name=name)


def _first(t):
    """The one element of a one-element tensor."""
    return t[tuple(te.const(0) for _ in t.shape)]


def _zero(dtype: str):
    """0 (False) of `dtype`: what a padded output holds past its run-time shape."""
    return te.const(False, "bool") if dtype == "bool" else te.const(0, dtype)


def _is_nonzero(x):
    return te.ne(x, _zero(x.dtype))


# ---- nonzero (ONNX NonZero-9/13) --------------------------------------------------------------

def _nonzero_type(in_types, attrs):
    (x,) = in_types
    if not x.shape:
        raise ValueError("NonZero of a rank-0 tensor is not supported")
    _check_extent(math.prod(x.shape), "NonZero")
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
    _check_extent(shape[axis], "Compress")
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
    zero = _zero(x.dtype)
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
    _check_extent(x.shape[axis], "Unique")
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
    zero = _zero(x.dtype)
    return te.compute(out_type.shape, lambda *i: te.select(
        te.cast(INT64, i[axis]) < st.count[0],
        x[tuple((st.src[i[axis]]) if d == axis else v for d, v in enumerate(i))], zero),
        name="unique_values")


def _unique_count(inputs, attrs):
    return _UniqueStages(inputs[0], attrs["axis"], attrs["sorted"]).count


register_dynamic("unique", _unique_type, _unique_exact, _unique_compute, _unique_count)
register_op(OpDef("unique_inverse", _unique_type, _unique_exact, OpPattern.OPAQUE, _unique_compute, SELECTION))


# ---- topk with a run-time k (ONNX TopK-10/11/24 whose K is computed) --------------------------
# attrs: axis, largest (0/1), output ('values' or 'indices'); inputs x and k (int64, one element).
# The bound is the axis extent: the whole axis sorted, entries from k on zeroed.

def _topk_type(in_types, attrs):
    x, k = in_types
    axis = attrs["axis"]
    if not 0 <= axis < len(x.shape):
        raise ValueError(f"axis {axis} out of range for rank {len(x.shape)}")
    if k.size != 1 or not k.dtype.startswith("int"):
        raise ValueError(f"K must be one integer, got {k}")
    return TensorType(x.shape, x.dtype if attrs["output"] == "values" else INT64, (axis,))


def _topk_k(inputs, attrs):
    """int64[1]: k clamped into [0, extent]."""
    x, k = inputs
    kk = te.cast(INT64, _first(k))
    return te.compute((1,), lambda _: te.minimum(te.maximum(kk, _one(0)), _one(x.shape[attrs["axis"]])),
                      name="topk_k")


def _topk_compute(inputs, attrs, out_type):
    from tvmc.ops.sort import _topk_indices_compute

    x, axis = inputs[0], attrs["axis"]
    idx = _topk_indices_compute(x, axis, x.shape[axis], attrs.get("largest", 1))
    k = _topk_k(inputs, attrs)
    if attrs["output"] == "values":
        zero = _zero(x.dtype)
        value = lambda j: x[tuple(idx[j] if d == axis else e for d, e in enumerate(j))]  # noqa: E731
    else:
        zero, value = _one(0), lambda j: idx[j]
    return te.compute(out_type.shape, lambda *j: te.select(te.cast(INT64, j[axis]) < k[0], value(j), zero),
                      name=f"topk_{attrs['output']}")


def _topk_exact(x, k, axis, output, largest=1):
    from tvmc.ops.sort import topk_reference

    k = min(max(int(np.asarray(k).reshape(-1)[0]), 0), x.shape[axis])
    return topk_reference(x, axis, k, largest)[0 if output == "values" else 1]


register_dynamic("topk", _topk_type, _topk_exact, _topk_compute, _topk_k)


# ---- non_max_suppression (ONNX NonMaxSuppression-10/11) ---------------------------------------
# inputs: boxes[B, N, 4], scores[B, C, N], max_output_boxes_per_class (int64, one element),
# iou_threshold, score_threshold (float, one element each); attrs: center_point_box (0: corners
# [y1, x1, y2, x2] in any order, 1: [x_center, y_center, width, height]), use_score_threshold (0/1),
# max_boxes (a bound on max_output_boxes_per_class known at compile time, else N).
# Output int64[<= B * C * min(max_boxes, N), 3]: (batch, class, box) rows, per batch and class
# the boxes by decreasing score (ties: lower index), each kept unless its IoU with a box kept
# before it exceeds the threshold, at most max_output_boxes_per_class of them.
#
# The greedy suppression is written as a fixed point: kept_0 = the candidates; kept_s[p] = the
# candidate at sorted position p unless a kept_(s-1) box before it overlaps it. Positions < s are
# final in kept_s, so N - 1 rounds give the greedy result: N stages, so N is limited.

NMS_MAX_BOXES = 64


def _nms_type(in_types, attrs):
    boxes, scores = in_types[:2]
    if len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ValueError(f"boxes must be [B, N, 4] and scores [B, C, N], got {boxes} and {scores}")
    if boxes.shape[1] > NMS_MAX_BOXES:
        raise ValueError(f"{boxes.shape[1]} boxes per batch, more than the {NMS_MAX_BOXES} tvmc's greedy "
                         f"suppression (one stage per box) compiles")
    b, c, n = scores.shape
    return TensorType((b * c * min(n, attrs["max_boxes"]), 3), INT64, (0,))


def _corners(box, center: int):
    """(x_min, x_max, y_min, y_max) of a box given by its four coordinates."""
    if center:
        xc, yc, w, h = box
        return xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
    y1, x1, y2, x2 = box
    return te.minimum(x1, x2), te.maximum(x1, x2), te.minimum(y1, y2), te.maximum(y1, y2)


def _overlaps(a, b, center: int, threshold):
    """Boxes a and b (four coordinate expressions each) overlap by an IoU above `threshold`."""
    ax0, ax1, ay0, ay1 = _corners(a, center)
    bx0, bx1, by0, by1 = _corners(b, center)
    w = te.minimum(ax1, bx1) - te.maximum(ax0, bx0)
    h = te.minimum(ay1, by1) - te.maximum(ay0, by0)
    zero = te.const(0, w.dtype)
    inter = w * h
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    return te.logical_and(w > zero, h > zero, area_a > zero, area_b > zero, union > zero,
                          inter / te.select(union > zero, union, te.const(1, w.dtype)) > threshold)


class _NmsStages:
    """sorted position -> box (`order`), the final kept flags (`kept`), the selection limited to
    max_output_boxes_per_class (`selected`), their `count` and the flat source of each output row."""

    def __init__(self, inputs, attrs):
        boxes, scores, max_out, iou_th, score_th = inputs
        b, c, n = scores.shape
        rm = te.reduce_axis(n, "nms_rank_m")

        def ahead(bb, cc, m, i):  # box m sorts before box i: higher score, ties by lower index
            sm, si = scores[bb, cc, m], scores[bb, cc, i]
            return te.logical_or(sm > si, te.logical_and(te.eq(sm, si), m < i))
        rank = te.compute((b, c, n), lambda bb, cc, i: te.sum(te.select(ahead(bb, cc, rm.var, i), _one(1), _one(0)),
                                                             rm), name="nms_rank")
        ro = te.reduce_axis(n, "nms_order_i")
        order = te.compute((b, c, n), lambda bb, cc, p: te.sum(te.select(
            te.eq(rank[bb, cc, ro.var], te.cast(INT64, p)), te.cast(INT64, ro.var), _one(0)), ro), name="nms_order")

        def candidate(bb, cc, p):
            if not attrs["use_score_threshold"]:
                return te.const(True, "bool")
            return scores[bb, cc, order[bb, cc, p]] > _first(score_th)

        def box(bb, cc, p):
            return [boxes[bb, order[bb, cc, p], te.const(k)] for k in range(4)]

        def overlap(bb, cc, p, q):
            return _overlaps(box(bb, cc, q), box(bb, cc, p), attrs["center_point_box"], _first(iou_th))

        kept = te.compute((b, c, n), lambda bb, cc, p: te.select(candidate(bb, cc, p), _one(1), _one(0)),
                          name="nms_kept0")
        for s in range(1, n):
            rq = te.reduce_axis(n, f"nms_kept{s}_q")
            prev = kept
            suppressed = te.compute((b, c, n), lambda bb, cc, p, prev=prev, rq=rq: te.max(te.select(te.logical_and(
                rq.var < p, te.eq(prev[bb, cc, rq.var], _one(1)), overlap(bb, cc, p, rq.var)), _one(1), _one(0)), rq),
                name=f"nms_suppressed{s}")
            kept = te.compute((b, c, n), lambda bb, cc, p, sup=suppressed: te.select(
                candidate(bb, cc, p), _one(1) - sup[bb, cc, p], _one(0)), name=f"nms_kept{s}")
        limit = te.maximum(te.cast(INT64, _first(max_out)), _one(0))
        rb = te.reduce_axis(n, "nms_before_q")
        before = te.compute((b, c, n), lambda bb, cc, p: te.sum(te.select(
            te.logical_and(rb.var < p, te.eq(kept[bb, cc, rb.var], _one(1))), _one(1), _one(0)), rb), name="nms_before")
        total = b * c * n
        self.unravel = lambda f: _unravel(f, (b, c, n))  # noqa: E731
        self.order = order

        def selected(f):
            bb, cc, p = self.unravel(f)
            return te.logical_and(te.eq(kept[bb, cc, p], _one(1)), before[bb, cc, p] < limit)
        self.count = _count(selected, total, "nms_count")
        self.src = _source(selected, _prefix(selected, total, "nms_prefix"), total, total, "nms_src")


def _nms_compute(inputs, attrs, out_type):
    st = _NmsStages(inputs, attrs)

    def row(r, k):
        f = st.src[r]
        bb, cc, p = st.unravel(f)
        return te.select(te.eq(k, te.const(0)), bb, te.select(te.eq(k, te.const(1)), cc, st.order[bb, cc, p]))
    return te.compute(out_type.shape, lambda r, k: te.select(te.cast(INT64, r) < st.count[0], row(r, k), _one(0)),
                      name="non_max_suppression")


def nms_reference(boxes, scores, max_out, iou_th, score_th, center_point_box, use_score_threshold, max_boxes=0):
    """ONNX NonMaxSuppression on numpy arrays: int64[selected, 3] (module comment above)."""
    limit = max(int(np.asarray(max_out).reshape(-1)[0]), 0)
    iou_th, score_th = float(np.asarray(iou_th).reshape(-1)[0]), float(np.asarray(score_th).reshape(-1)[0])

    def corners(bx):
        if center_point_box:
            return bx[0] - bx[2] / 2, bx[0] + bx[2] / 2, bx[1] - bx[3] / 2, bx[1] + bx[3] / 2
        return min(bx[1], bx[3]), max(bx[1], bx[3]), min(bx[0], bx[2]), max(bx[0], bx[2])

    def overlap(a, b):
        ax0, ax1, ay0, ay1 = corners(a)
        bx0, bx1, by0, by1 = corners(b)
        w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
        area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
        union = area_a + area_b - w * h
        return w > 0 and h > 0 and area_a > 0 and area_b > 0 and union > 0 and w * h / union > iou_th

    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            kept = []
            for i in sorted(range(scores.shape[2]), key=lambda i: (-scores[b, c, i], i)):
                if len(kept) == limit:
                    break
                if use_score_threshold and not scores[b, c, i] > score_th:
                    continue
                if not any(overlap(boxes[b, k], boxes[b, i]) for k in kept):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def _nms_count(inputs, attrs):
    return _NmsStages(inputs, attrs).count


register_dynamic("non_max_suppression", _nms_type, nms_reference, _nms_compute, _nms_count)


# ---- dyn.reshape (ONNX Reshape-5..25 whose shape input is computed at run time; TVM's dyn.reshape) --
# inputs: x (static shape S), shape int64[r]; attrs: allowzero (0/1). The element count is known,
# so each output extent is at most size(x): the bound is size(x) along all r axes, which is only
# affordable for a small x or rank (DYNAMIC_MAX_BOUND elements, the most any bound derived at
# compile time may hold: also Range's, Expand's and ConstantOfShape's). A shape whose product is not
# size(x) gives an unspecified result (kernels report no errors).

DYNAMIC_MAX_BOUND = 1 << 22


def _reshape_type(in_types, attrs):
    x, shape = in_types
    if len(shape.shape) != 1 or not shape.dtype.startswith("int"):
        raise ValueError(f"shape must be a 1-D integer tensor, got {shape}")
    r, n = shape.shape[0], x.size
    if n ** r > DYNAMIC_MAX_BOUND:
        raise ValueError(f"a reshape of {n} elements to a rank-{r} shape known only at run time needs a bound of "
                         f"{n}^{r} elements, more than the {DYNAMIC_MAX_BOUND} tvmc allocates for it")
    return TensorType((n,) * r, x.dtype, tuple(range(r)))


def _reshape_dims(inputs, attrs):
    """int64[r]: the run-time output shape (0 copies the input extent unless allowzero; -1 is
    inferred from the element count)."""
    x, shape = inputs
    r, n = shape.shape[0], math.prod(x.shape)

    def raw(k):
        s = te.cast(INT64, shape[(k,)])
        if attrs.get("allowzero", 0) or not x.shape:
            return s
        copied = _pick(k, [_one(d) for d in x.shape] + [_one(0)])
        return te.select(te.logical_and(te.eq(s, _one(0)), k < te.const(len(x.shape))), copied, s)
    rk = te.reduce_axis(r, "reshape_known_k")
    known = te.compute((1,), lambda _: te.prod(te.select(te.eq(raw(rk.var), _one(-1)), _one(1), raw(rk.var)), rk),
                       name="reshape_known")
    return te.compute((r,), lambda k: te.select(te.eq(raw(k), _one(-1)), _one(n) // te.maximum(known[0], _one(1)),
                                                 raw(k)), name="reshape_dims")


def _reshape_compute(inputs, attrs, out_type):
    """out[i] = x's element at the row-major position of i in the run-time shape (zero outside it)."""
    x = inputs[0]
    dims = _reshape_dims(inputs, attrs)
    r = len(out_type.shape)
    zero = _zero(x.dtype)

    def body(*i):
        flat, inside = None, []
        for k in range(r):
            extent = dims[(te.const(k),)]
            inside.append(te.cast(INT64, i[k]) < extent)
            flat = te.cast(INT64, i[k]) if flat is None else flat * extent + te.cast(INT64, i[k])
        if not x.shape:
            return te.select(te.logical_and(*inside), x[()], zero) if inside else x[()]
        value = x[tuple(_unravel(te.minimum(flat, _one(max(math.prod(x.shape) - 1, 0))), x.shape))]
        return te.select(te.logical_and(*inside), value, zero) if inside else value
    return te.compute(out_type.shape, body, name="dyn_reshape")


def _reshape_exact(x, shape, allowzero=0):
    dims = [int(d) for d in shape]
    if not allowzero:
        dims = [x.shape[k] if d == 0 and k < x.ndim else d for k, d in enumerate(dims)]
    return x.reshape(dims)


register_dynamic("dyn.reshape", _reshape_type, _reshape_exact, _reshape_compute, shape=_reshape_dims)


# ---- dyn.head: the first n entries along axis 0, n computed at run time ------------------------
# inputs: x (static shape, the bound), n (int64, one element). A Loop unrolled to its constant trip
# count but left early by a condition computed at run time stacks its scan outputs over every
# iteration; the ones that ran are the first n (tvmc/frontend/onnx/control_flow.py).

def _head_type(in_types, attrs):
    x, n = in_types
    if not x.shape or n.size != 1 or not n.dtype.startswith("int"):
        raise ValueError(f"dyn.head takes a tensor of rank >= 1 and one integer, got {x} and {n}")
    return TensorType(x.shape, x.dtype, (0,))


def _head_count(inputs, attrs):
    x, n = inputs
    first = te.cast(INT64, _first(n))
    return te.compute((1,), lambda _: te.minimum(te.maximum(first, _one(0)), _one(x.shape[0])), name="head_count")


def _head_compute(inputs, attrs, out_type):
    x = inputs[0]
    count = _head_count(inputs, attrs)
    zero = _zero(x.dtype)
    return te.compute(out_type.shape, lambda *i: te.select(te.cast(INT64, i[0]) < count[0], x[i], zero),
                      name="dyn_head")


def _head_exact(x, n):
    return x[:min(max(int(np.asarray(n).reshape(-1)[0]), 0), x.shape[0])]


register_dynamic("dyn.head", _head_type, _head_exact, _head_compute, _head_count)


# ---- shapes given by values computed at run time: dyn.range, dyn.expand, dyn.constant_of_shape --
# (ONNX Range, Expand and ConstantOfShape whose shape inputs are computed at run time.) The bound
# comes from the value-range analysis of those inputs at import (tvmc/frontend/onnx/value_range.py)
# and is an attribute: `bound` (the output's static shape) and `dynamic_axes`. The data kernels loop
# over the bound only, so values beyond it cannot reach memory outside the buffer; the shape
# kernels write the run-time shape as the values give it, unclamped, so that an executor reading an
# output whose run-time shape breaks its bound reports it (docs/dynamic_shapes.md). All three are
# injective: the CPU and GPU injective schedules.

def _inside(i, extents: dict):
    """The output index i lies within the run-time extents {axis: int64 expression}."""
    return te.logical_and(*[te.cast(INT64, i[a]) < n for a, n in extents.items()]) if extents else None


def _padded(i, extents: dict, value, dtype: str):
    inside = _inside(i, extents)
    return value if inside is None else te.select(inside, value, _zero(dtype))


def range_reference(start, limit, delta):
    """ONNX Range-11 on one-element arrays: start + k * delta for k < max(ceil((limit - start) / delta), 0)."""
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)


def _range_type(in_types, attrs):
    if any(t.size != 1 for t in in_types) or len({t.dtype for t in in_types}) != 1:
        raise ValueError(f"Range takes three one-element tensors of one dtype, got {', '.join(map(str, in_types))}")
    return TensorType((attrs["bound"],), in_types[0].dtype, (0,))


# A float Range length at or beyond this (also +inf and NaN) is this: beyond every bound, so every
# target reports it the same way. Converting it to int64 unclamped is undefined (x86 gives INT64_MIN,
# an empty output; AArch64 and wasm saturate, NaN to 0).
_RANGE_LENGTH_CAP = float(1 << 62)


def _range_length(inputs):
    """int64: max(ceil((limit - start) / delta), 0); for integers -floor((start - limit) / delta).
    A float length that is NaN or not below 2^62 becomes 2^62, which no bound holds."""
    start, limit, delta = (_first(t) for t in inputs)
    if inputs[0].dtype.startswith(("int", "uint")):
        start, limit, delta = (te.cast(INT64, v) for v in (start, limit, delta))
        n = _one(0) - (start - limit) // delta
    else:
        dtype = inputs[0].dtype
        f = te.ceil((limit - start) / delta)
        cap, zero = te.const(_RANGE_LENGTH_CAP, dtype), te.const(0.0, dtype)
        f = te.select(f < cap, f, cap)    # NaN compares false: the cap
        f = te.select(f > zero, f, zero)  # -inf and negative lengths: 0
        n = te.cast(INT64, f)
    return te.maximum(n, _one(0))


def _range_compute(inputs, attrs, out_type):
    """out[i] = start + i * delta for i below the run-time length, 0 after it."""
    start, delta = _first(inputs[0]), _first(inputs[2])
    n = _range_length(inputs)
    return te.compute(out_type.shape, lambda i: _padded(
        (i,), {0: n}, start + te.cast(out_type.dtype, i) * delta, out_type.dtype), name="dyn_range")


register_dynamic("dyn.range", _range_type, lambda start, limit, delta, bound: range_reference(start, limit, delta),
                 _range_compute, lambda inputs, attrs: te.compute((1,), lambda _: _range_length(inputs),
                                                                   name="dyn_range_length"), impls=INJECTIVE)


def _shape_values(shape, rank: int):
    """{output axis: int64 value of the (right-aligned) shape input} for the axes it gives."""
    off = rank - shape.shape[0]
    return {a: te.cast(INT64, shape[(te.const(a - off),)]) for a in range(off, rank)}


def _bounded_type(dtype_of):
    def infer(in_types, attrs):
        shape = in_types[-1]
        if len(shape.shape) != 1 or not shape.dtype.startswith("int"):
            raise ValueError(f"shape must be a 1-D integer tensor, got {shape}")
        return TensorType(tuple(attrs["bound"]), dtype_of(in_types, attrs), tuple(attrs["dynamic_axes"]))
    return infer


def _constant_of_shape_compute(inputs, attrs, out_type):
    """out[i] = value within the run-time shape (the shape input's values), 0 outside."""
    values = _shape_values(inputs[0], len(out_type.shape))
    fill = te.const(attrs["value"], out_type.dtype)
    return te.compute(out_type.shape, lambda *i: _padded(
        i, {a: values[a] for a in attrs["dynamic_axes"]}, fill, out_type.dtype), name="dyn_constant_of_shape")


def _constant_of_shape_dims(inputs, attrs):
    values = _shape_values(inputs[0], len(attrs["bound"]))
    return _shape_tensor([values[a] for a in range(len(values))], "dyn_constant_of_shape_dims")


register_dynamic("dyn.constant_of_shape", _bounded_type(lambda t, attrs: attrs["dtype"]),
                 lambda shape, bound, dynamic_axes, value, dtype: np.full(tuple(int(d) for d in shape), value, dtype),
                 _constant_of_shape_compute, shape=_constant_of_shape_dims, impls=INJECTIVE)


def _expand_dims(inputs, attrs):
    """{output axis: run-time extent}: the shape value along dynamic axes (where x has extent 1 or
    no axis), the bound elsewhere."""
    values = _shape_values(inputs[1], len(attrs["bound"]))
    return {a: values[a] if a in attrs["dynamic_axes"] else _one(d) for a, d in enumerate(attrs["bound"])}


def _expand_compute(inputs, attrs, out_type):
    """out[i] = x[i broadcast to x's shape] within the run-time shape, 0 outside."""
    x = inputs[0]
    dims = _expand_dims(inputs, attrs)
    return te.compute(out_type.shape, lambda *i: _padded(
        i, {a: dims[a] for a in attrs["dynamic_axes"]}, x[broadcast_index(x.shape, i)], x.dtype), name="dyn_expand")


def _expand_shape(inputs, attrs):
    dims = _expand_dims(inputs, attrs)
    return _shape_tensor([dims[a] for a in range(len(dims))], "dyn_expand_dims")


register_dynamic("dyn.expand", _bounded_type(lambda t, attrs: t[0].dtype),
                 lambda x, shape, bound, dynamic_axes: np.broadcast_to(
                     x, np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))).copy(),
                 _expand_compute, shape=_expand_shape, impls=INJECTIVE)
