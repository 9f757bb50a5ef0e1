"""Injective data-movement operators: reshape, transpose, concatenate, pad (ONNX Reshape,
Flatten, Squeeze/Unsqueeze, Transpose, Concat, Pad)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.elemwise import INJECTIVE_CPU
from tvmc.ops.registry import OpDef, OpPattern, register_op


def unravel(flat, shape):
    """Multi-dimensional index (row-major) of flat index expression `flat` in `shape`."""
    idx = []
    for d in reversed(shape):
        idx.append(flat % d if d != 1 else te.const(0))
        flat = flat // d
    return tuple(reversed(idx))


def ravel(idx, shape):
    flat = te.const(0)
    for i, d in zip(idx, shape):
        flat = flat * d + i
    return flat


def _reshape_type(in_types, attrs):
    t = in_types[0]
    new = tuple(int(d) for d in attrs["newshape"])
    if any(d < 0 for d in new) or int(np.prod(new, dtype=np.int64)) != t.size:
        raise ValueError(f"cannot reshape {list(t.shape)} to {list(new)}")
    return TensorType(new, t.dtype)


def _reshape_compute(inputs, attrs, out_type):
    x = inputs[0]
    return te.compute(out_type.shape, lambda *i: x[unravel(ravel(i, out_type.shape), x.shape)], name="reshape")


register_op(OpDef("reshape", _reshape_type, lambda x, newshape: x.reshape(newshape), OpPattern.INJECTIVE,
                  _reshape_compute, INJECTIVE_CPU))


def _transpose_type(in_types, attrs):
    t = in_types[0]
    axes = tuple(attrs["axes"])
    if sorted(axes) != list(range(len(t.shape))):
        raise ValueError(f"axes {list(axes)} are not a permutation of rank {len(t.shape)}")
    return TensorType(tuple(t.shape[a] for a in axes), t.dtype)


def _transpose_compute(inputs, attrs, out_type):
    x = inputs[0]
    axes = tuple(attrs["axes"])

    def f(*i):
        src = [None] * len(axes)
        for o, a in enumerate(axes):
            src[a] = i[o]
        return x[tuple(src)]

    return te.compute(out_type.shape, f, name="transpose")


register_op(OpDef("transpose", _transpose_type, lambda x, axes: np.transpose(x, axes), OpPattern.INJECTIVE,
                  _transpose_compute, INJECTIVE_CPU))


def _concat_type(in_types, attrs):
    axis = attrs["axis"]
    first = in_types[0]
    for t in in_types[1:]:
        if len(t.shape) != len(first.shape) or any(
                a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis):
            raise ValueError(f"cannot concatenate {list(first.shape)} and {list(t.shape)} on axis {axis}")
        if t.dtype != first.dtype:
            raise ValueError("concatenated tensors have different dtypes")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in in_types)
    return TensorType(tuple(shape), first.dtype)


def _concat_compute(inputs, attrs, out_type):
    axis = attrs["axis"]

    def f(*i):
        offsets, off = [], 0
        for t in inputs:
            offsets.append(off)
            off += t.shape[axis]
        # Nested selects, last input innermost; each branch reads only where it is in range.
        val = None
        for t, o in reversed(list(zip(inputs, offsets))):
            idx = list(i)
            idx[axis] = i[axis] - o
            load = t[tuple(idx)]
            val = load if val is None else te.select(i[axis] < o + t.shape[axis], load, val)
        return val

    return te.compute(out_type.shape, f, name="concatenate")


register_op(OpDef("concatenate", _concat_type, lambda *xs, axis: np.concatenate(xs, axis=axis),
                  OpPattern.INJECTIVE, _concat_compute, INJECTIVE_CPU))


def _pad_type(in_types, attrs):
    t = in_types[0]
    pw = attrs["pad_width"]
    if len(pw) != len(t.shape):
        raise ValueError(f"pad_width has {len(pw)} entries for rank {len(t.shape)}")
    return TensorType(tuple(d + a + b for d, (a, b) in zip(t.shape, pw)), t.dtype)


def pad_compute(x, pad_width, pad_value=0.0, name="pad"):
    """Constant padding of tensor `x` by `pad_width` ((before, after) per axis)."""
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pad_width))
    if all(a == 0 and b == 0 for a, b in pad_width):
        return x

    def f(*i):
        conds, src = [], []
        for k, ((a, b), d) in enumerate(zip(pad_width, x.shape)):
            src.append(i[k] - a)
            if a:
                conds.append(i[k] >= a)
            if b:
                conds.append(i[k] < a + d)
        if not conds:
            return x[tuple(src)]
        return te.select(te.logical_and(*conds), x[tuple(src)], te.const(float(pad_value), x.dtype))

    return te.compute(shape, f, name=name)


register_op(OpDef("pad", _pad_type,
                  lambda x, pad_width, pad_value=0.0: np.pad(x, pad_width, constant_values=pad_value),
                  OpPattern.INJECTIVE,
                  lambda inputs, attrs, out_type: pad_compute(inputs[0], attrs["pad_width"],
                                                              attrs.get("pad_value", 0.0)),
                  INJECTIVE_CPU))
