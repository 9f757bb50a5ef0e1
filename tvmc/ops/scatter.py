"""Scatter operators (ONNX ScatterElements, ScatterND; TVM's topi/scatter_elements.py and
scatter.py): every output element looks up the updates that land on it, a reduction over the
update positions, so the math is one compute (O(outputs x updates along the scattered axes);
simple, for the small index sets of shape and cache updates)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.ops.elemwise import INJECTIVE
from tvmc.ops.reduce import REDUCE
from tvmc.ops.registry import OpDef, OpPattern, register_op
from tvmc.ops.transform import index_in

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _combined(reduction: str, data, out_shape, values, match, axes, name: str):
    """data combined with the update `values(*i)` (an expression over the reduce `axes`) where
    `match(*i)` holds: a reduction stage (a Reduce is a whole stage body) then the combine;
    add/mul/max/min reduce them with data ('none' is handled by the callers: the last match wins)."""
    neutral = {"add": lambda d: te.const(0, d), "mul": lambda d: te.const(1, d),
               "max": te.min_value, "min": te.max_value}[reduction](data.dtype)
    reduce = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}[reduction]
    red = te.compute(out_shape, lambda *i: reduce(te.select(match(*i), values(*i), neutral), axes),
                     name=f"{name}_{reduction}")
    combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": te.maximum, "min": te.minimum}[reduction]
    return te.compute(out_shape, lambda *i: combine(data[i], red[i]), name=name)


def _check_scatter(attrs, data, upd):
    """A known reduction, and updates of data's dtype."""
    if attrs.get("reduction", "none") not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {attrs.get('reduction')!r}")
    if upd.dtype != data.dtype:
        raise ValueError(f"updates dtype {upd.dtype} differs from data {data.dtype}")


# ---- scatter_elements ---------------------------------------------------------------------------

def _scatter_elements_type(in_types, attrs):
    """data[D], indices[U] (int), updates[U] with U <= D on every axis but `axis`."""
    data, idx, upd = in_types
    _check_scatter(attrs, data, upd)
    axis = attrs["axis"]
    if tuple(idx.shape) != tuple(upd.shape) or len(idx.shape) != len(data.shape) or not 0 <= axis < len(data.shape):
        raise ValueError(f"indices {list(idx.shape)} and updates {list(upd.shape)} must match and have the rank "
                         f"of data {list(data.shape)}")
    return data


def _scatter_elements_compute(inputs, attrs, out_type):
    """out[i] = data[i], combined with updates[q] for every q with q = i off `axis` and
    indices[q] = i[axis] (negative indices count from the end); 'none': the last such q wins."""
    data, idx, upd = inputs
    axis, reduction = attrs["axis"], attrs.get("reduction", "none")
    r = te.reduce_axis(upd.shape[axis], "r")

    def at(i, k):  # update position q for output i and axis value k, clamped into updates
        return tuple(k if d == axis else te.minimum(v, te.const(upd.shape[d] - 1)) for d, v in enumerate(i))

    def match(i, k):
        inside = [v < te.const(upd.shape[d]) for d, v in enumerate(i) if d != axis and upd.shape[d] < data.shape[d]]
        hit = te.eq(index_in(idx[at(i, k)], data.shape[axis]), i[axis])
        return te.logical_and(*inside, hit) if inside else hit

    if reduction != "none":
        return _combined(reduction, data, out_type.shape, lambda *i: upd[at(i, r.var)], lambda *i: match(i, r.var), r,
                         "scatter_elements")
    last = te.compute(out_type.shape, lambda *i: te.max(te.select(match(i, r.var), r.var, te.const(-1)), r),
                      name="scatter_last")
    return te.compute(out_type.shape, lambda *i: te.select(
        last[i] >= te.const(0), upd[at(i, te.maximum(last[i], te.const(0)))], data[i]), name="scatter_elements")


def _scatter_elements_ref(data, idx, upd, axis, reduction="none"):
    out = data.copy()
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    for q in np.ndindex(*idx.shape):
        p = tuple(int(idx[q]) if d == axis else v for d, v in enumerate(q))
        out[p] = upd[q] if ufunc is None else ufunc(out[p], upd[q])
    return out


register_op(OpDef("scatter_elements", _scatter_elements_type, _scatter_elements_ref, OpPattern.OPAQUE,
                  _scatter_elements_compute, REDUCE))


# ---- scatter_nd ---------------------------------------------------------------------------------

def _scatter_nd_type(in_types, attrs):
    """data[D], indices[Q.., k] (int), updates[Q.., D[k:]..]."""
    data, idx, upd = in_types
    _check_scatter(attrs, data, upd)
    k = idx.shape[-1] if idx.shape else 0
    if not idx.shape or k > len(data.shape) or tuple(upd.shape) != tuple(idx.shape[:-1]) + tuple(data.shape[k:]):
        raise ValueError(f"updates {list(upd.shape)} must be indices[:-1] {list(idx.shape[:-1])} + "
                         f"data[{k}:] {list(data.shape[k:])}")
    return data


def _scatter_nd_compute(inputs, attrs, out_type):
    """out[p] = data[p], combined with updates[q, p[k:]] for every update position q with
    indices[q, :] = p[:k]; 'none': the last such q (row-major) wins."""
    data, idx, upd = inputs
    reduction = attrs.get("reduction", "none")
    k = idx.shape[-1]
    qshape = tuple(idx.shape[:-1]) or (1,)
    rq = [te.reduce_axis(n, f"q{d}") for d, n in enumerate(qshape)]

    def q_of(vars_):
        return tuple(vars_) if idx.shape[:-1] else ()

    def match(p, qv):
        return te.logical_and(*[te.eq(index_in(idx[q_of(qv) + (te.const(j),)], data.shape[j]), p[j]) for j in range(k)])

    qvars = [a.var for a in rq]
    if reduction != "none":
        return _combined(reduction, data, out_type.shape, lambda *p: upd[q_of(qvars) + tuple(p[k:])],
                         lambda *p: match(p, qvars), rq, "scatter_nd")
    strides = [int(np.prod(qshape[d + 1:], dtype=np.int64)) for d in range(len(qshape))]
    linear = sum((v * te.const(s) for v, s in zip(qvars[1:], strides[1:])), qvars[0] * te.const(strides[0]))
    last = te.compute(out_type.shape, lambda *p: te.max(te.select(match(p, qvars), linear, te.const(-1)), rq),
                      name="scatter_last")

    def decoded(lin):
        return tuple((lin // te.const(s)) % te.const(n) for s, n in zip(strides, qshape))

    return te.compute(out_type.shape, lambda *p: te.select(
        last[p] >= te.const(0), upd[q_of(decoded(te.maximum(last[p], te.const(0)))) + tuple(p[k:])], data[p]),
        name="scatter_nd")


def _scatter_nd_ref(data, idx, upd, reduction="none"):
    out = data.copy()
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    for q in np.ndindex(*idx.shape[:-1]):
        p = tuple(int(v) + (data.shape[j] if v < 0 else 0) for j, v in enumerate(idx[q]))
        out[p] = upd[q] if ufunc is None else ufunc(out[p], upd[q])
    return out


register_op(OpDef("scatter_nd", _scatter_nd_type, _scatter_nd_ref, OpPattern.OPAQUE, _scatter_nd_compute,
                  REDUCE))


# ---- tensor_scatter (ONNX TensorScatter: a KV-cache write) -------------------------------------

def _tensor_scatter_type(in_types, attrs):
    """past[.., M, ..], update[.., S, ..] (S <= M on `axis`), write_indices[batch] (int)."""
    past, upd, w = in_types
    axis = attrs["axis"]
    if (len(upd.shape) != len(past.shape) or not 0 < axis < len(past.shape) or upd.shape[axis] > past.shape[axis]
            or any(a != b for d, (a, b) in enumerate(zip(past.shape, upd.shape)) if d != axis)):
        raise ValueError(f"update {list(upd.shape)} must be past {list(past.shape)} but for axis {axis}")
    if tuple(w.shape) != (past.shape[0],):
        raise ValueError(f"write_indices {list(w.shape)} must be [{past.shape[0]}]")
    return past


def _tensor_scatter_compute(inputs, attrs, out_type):
    """present[p] = update[p with t on axis] where t = p[axis] - write_indices[p[0]] (modulo the
    cache length when circular) is a row of the update, else past[p]."""
    past, upd, w = inputs
    axis, m, s = attrs["axis"], past.shape[attrs["axis"]], upd.shape[attrs["axis"]]

    def f(*p):
        t = p[axis] - te.cast("int64", w[p[0]])
        if attrs.get("mode", "linear") == "circular":
            t = t % te.const(m)
        inside = te.logical_and(t >= te.const(0), t < te.const(s))
        src = te.minimum(te.maximum(t, te.const(0)), te.const(s - 1))
        return te.select(inside, upd[tuple(src if d == axis else v for d, v in enumerate(p))], past[p])

    return te.compute(out_type.shape, f, name="tensor_scatter")


def _tensor_scatter_ref(past, upd, w, axis, mode="linear"):
    out = past.copy()
    m = past.shape[axis]
    for prefix in np.ndindex(*past.shape[:axis]):
        for t in range(upd.shape[axis]):
            c = int(w[prefix[0]]) + t
            out[prefix + (c % m if mode == "circular" else c,)] = upd[prefix + (t,)]
    return out


register_op(OpDef("tensor_scatter", _tensor_scatter_type, _tensor_scatter_ref, OpPattern.INJECTIVE,
                  _tensor_scatter_compute, INJECTIVE))
