"""Reductions over axes: sum, max, min, mean, prod, argmax, argmin (ONNX Reduce*, ArgMax/ArgMin;
TVM's topi/reduction.py), plus cumsum and cumprod (ONNX CumSum, CumProd)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.te import extent as xt
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.reduction import schedule_reduce
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.reduction import reduce_config
from tvmc.ops.gpu.reduction import schedule_reduce as schedule_reduce_gpu
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.te.expr import is_float

REDUCE = {"cpu": [Implementation("reduce.cpu", schedule_reduce)],
          "gpu": [Implementation("reduce.gpu", schedule_reduce_gpu, config_space=reduce_config)]}
# gather-form window operators (col2im, the 3-D transposed convolution, max-pool indices): each
# output element reduces over its own window of taps; no dedicated schedule (not hot ops): the
# reductions at root with their outer loops parallel on CPUs, one output element per thread on GPUs
WINDOW = {"cpu": [Implementation("window_reduce.cpu", schedule_reduce)],
          "gpu": [Implementation("window_reduce.gpu", schedule_generic, config_space=generic_config)]}


def _check_axes(shape, axes):
    axes = tuple(int(a) for a in axes)
    if any(not 0 <= a < len(shape) for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes {list(axes)} invalid for rank {len(shape)}")
    return axes


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _reduce_type(in_types, attrs):
    """attrs: axis (tuple of normalized axes, non-empty), keepdims (0/1)."""
    t = in_types[0]
    axes = _check_axes(t.shape, attrs["axis"])
    if not axes:
        raise ValueError("reduce needs at least one axis")
    return TensorType(_reduced_shape(t.shape, axes, attrs["keepdims"]), t.dtype)


def _reduce_compute(combiner, finish=None):
    def compute(inputs, attrs, out_type):
        x = inputs[0]
        axes = tuple(attrs["axis"])
        keep = attrs["keepdims"]
        raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}

        def source_index(out_idx):
            it = iter(out_idx)
            idx = []
            for k in range(len(x.shape)):
                if k in raxes:
                    if keep:
                        next(it)
                    idx.append(raxes[k].var)
                else:
                    idx.append(next(it))
            return tuple(idx)

        red = te.compute(out_type.shape, lambda *i: getattr(te, combiner)(x[source_index(i)], list(raxes.values())),
                         name=f"{combiner}_red" if finish else combiner)
        if finish is None:
            return red
        count = xt.prod([x.shape[a] for a in axes])  # an expression of SizeVars for symbolic axes
        return te.compute(out_type.shape, lambda *i: finish(red[i], count), name="reduce_out")
    return compute


def _count(n, dtype):
    """The element count `n` of a mean (an int, or an expression of SizeVars) as a `dtype` value."""
    if xt.is_static(n):
        return te.const(float(n) if is_float(dtype) else n, dtype)
    return te.cast(dtype, n)


def _ref(fn):
    def ref(x, axis, keepdims):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64) if is_float(x.dtype.name) else x, axis=tuple(axis),
                                 keepdims=bool(keepdims))).astype(x.dtype)
    return ref


register_op(OpDef("sum", _reduce_type, _ref(np.sum), OpPattern.COMM_REDUCE, _reduce_compute("sum"), REDUCE))
register_op(OpDef("max", _reduce_type, _ref(np.max), OpPattern.COMM_REDUCE, _reduce_compute("max"), REDUCE))
register_op(OpDef("min", _reduce_type, _ref(np.min), OpPattern.COMM_REDUCE, _reduce_compute("min"), REDUCE))
register_op(OpDef("prod", _reduce_type, _ref(np.prod), OpPattern.COMM_REDUCE, _reduce_compute("prod"), REDUCE))
register_op(OpDef("mean", _reduce_type, _ref(np.mean), OpPattern.COMM_REDUCE,
                  _reduce_compute("sum", lambda s, n: s / _count(n, s.dtype) if is_float(s.dtype)
                                  else s // _count(n, s.dtype)), REDUCE))


# ---- argmax / argmin: the first (or last) index of the extreme value, as int64 -------------------

def _arg_type(in_types, attrs):
    t = in_types[0]
    axis = _check_axes(t.shape, (attrs["axis"],))
    if t.shape[axis[0]] == 0:
        raise ValueError("cannot take argmax/argmin of an empty axis")
    return TensorType(_reduced_shape(t.shape, axis, attrs["keepdims"]), "int64")


def _arg_compute(combiner):
    """Two reductions (TVM's argmax is a tuple reduction; ours avoids one): the extreme value m,
    then the min (first) or max (last, select_last_index) index k with x[k] == m."""
    def compute(inputs, attrs, out_type):
        x = inputs[0]
        axis, keep, last = attrs["axis"], attrs["keepdims"], attrs.get("select_last_index", 0)

        def at(out_idx, v):
            idx = list(out_idx)
            if keep:
                idx[axis] = v
            else:
                idx.insert(axis, v)
            return tuple(idx)

        r1 = te.reduce_axis(x.shape[axis], "r")
        ext = te.compute(out_type.shape, lambda *i: getattr(te, combiner)(x[at(i, r1.var)], r1), name="arg_value")
        r2 = te.reduce_axis(x.shape[axis], "k")
        big = x.shape[axis]
        if last:
            return te.compute(out_type.shape, lambda *i: te.max(
                te.select(te.eq(x[at(i, r2.var)], ext[i]), r2.var, te.const(-1)), r2), name="arg_index")
        return te.compute(out_type.shape, lambda *i: te.min(
            te.select(te.eq(x[at(i, r2.var)], ext[i]), r2.var, te.const(big)), r2), name="arg_index")
    return compute


def _arg_ref(fn):
    def ref(x, axis, keepdims, select_last_index=0):
        if select_last_index:
            flipped = np.flip(x, axis)
            out = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            out = fn(x, axis=axis)
        out = out.astype(np.int64)
        return np.expand_dims(out, axis) if keepdims else out
    return ref


register_op(OpDef("argmax", _arg_type, _arg_ref(np.argmax), OpPattern.COMM_REDUCE, _arg_compute("max"), REDUCE))
register_op(OpDef("argmin", _arg_type, _arg_ref(np.argmin), OpPattern.COMM_REDUCE, _arg_compute("min"), REDUCE))


# ---- cumsum, cumprod --------------------------------------------------------------------------------

def _cumulative_type(in_types, attrs):
    t = in_types[0]
    _check_axes(t.shape, (attrs["axis"],))
    return t


def _cumulative_compute(combiner):
    def compute(inputs, attrs, out_type):
        """out[.., i, ..] = sum (prod) over k of x[.., k, ..] where k <= i (k < i when exclusive;
        reversed order with `reverse`): a masked reduction, O(n^2) along the axis."""
        x = inputs[0]
        axis, exclusive, reverse = attrs["axis"], attrs.get("exclusive", 0), attrs.get("reverse", 0)
        n = x.shape[axis]
        r = te.reduce_axis(n, "k")
        neutral = te.const(0 if combiner == "sum" else 1, x.dtype)

        def f(*i):
            k = r.var
            idx = tuple(k if d == axis else v for d, v in enumerate(i))
            cond = (k > i[axis]) if reverse else (k < i[axis])
            if not exclusive:
                cond = te.logical_or(cond, te.eq(k, i[axis]))
            return getattr(te, combiner)(te.select(cond, x[idx], neutral), r)

        return te.compute(out_type.shape, f, name=f"cum{combiner}")
    return compute


def _cumulative_ref(fn, neutral):
    def ref(x, axis, exclusive=0, reverse=0):
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=np.float64 if is_float(x.dtype.name) else x.dtype)
        if exclusive:
            out = np.concatenate([np.full_like(np.take(out, [0], axis), neutral), np.delete(out, -1, axis)], axis)
        out = np.flip(out, axis) if reverse else out
        return out.astype(x.dtype)
    return ref


register_op(OpDef("cumsum", _cumulative_type, _cumulative_ref(np.cumsum, 0), OpPattern.COMM_REDUCE,
                  _cumulative_compute("sum"), REDUCE))
register_op(OpDef("cumprod", _cumulative_type, _cumulative_ref(np.cumprod, 1), OpPattern.COMM_REDUCE,
                  _cumulative_compute("prod"), REDUCE))
