"""Injective data-movement operators: reshape, transpose, concatenate, pad (ONNX Reshape,
Flatten, Squeeze/Unsqueeze, Transpose, Concat, Pad)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph import symbolic
from tvmc.graph.ir import TensorType
from tvmc.ops.elemwise import INJECTIVE
from tvmc.ops.registry import OpDef, OpPattern, register_op


def unravel(flat, shape):
    """Multi-dimensional index (row-major) of flat index expression `flat` in `shape`, which
    must lie in [0, prod(shape)). A symbolic extent with only 1s outside it takes no modulo (the
    simplifier drops a static one from the bounds; a symbolic one it cannot, and its division
    would run per element)."""
    idx = []
    outer = next((k for k, d in enumerate(shape) if d != 1), None)
    for k, d in zip(reversed(range(len(shape))), reversed(shape)):
        outer_symbolic = k == outer and not isinstance(d, int)
        idx.append(flat if outer_symbolic else flat % d if d != 1 else te.const(0))
        flat = flat // d
    return tuple(reversed(idx))


def ravel(idx, shape):
    flat = te.const(0)
    for i, d in zip(idx, shape):
        flat = flat * d + i
    return flat


def _reshape_type(in_types, attrs):
    """attrs: newshape (ints >= 0, or symbolic dimensions) holding as many elements as the input;
    for symbolic shapes the two element counts must be provably equal."""
    t = in_types[0]
    new = tuple(d if symbolic.is_symbolic(d) else int(d) for d in attrs["newshape"])
    if t.is_symbolic or any(symbolic.is_symbolic(d) for d in new):
        if not all(symbolic.can_prove(d >= 0) for d in new) or not symbolic.can_prove_equal(symbolic.prod(new),
                                                                                              t.size):
            raise ValueError(f"cannot reshape {list(t.shape)} to {list(new)}: the element counts {t.size} and "
                             f"{symbolic.prod(new)} are not provably equal ({symbolic.describe_vars(t.shape + new)})")
        return TensorType(new, t.dtype)
    if any(d < 0 for d in new) or int(np.prod(new, dtype=np.int64)) != t.size:
        raise ValueError(f"cannot reshape {list(t.shape)} to {list(new)}")
    return TensorType(new, t.dtype)


def aligned_groups(src: tuple, dst: tuple) -> list | None:
    """The runs of axes a reshape of static `src` to `dst` maps onto each other: [(src axes, dst
    axes), ...] split wherever the leading products of both shapes agree ([1, 136, 28, 28] ->
    [1, 4, 34, 784]: ([0], [0]), ([1], [1, 2]), ([2, 3], [3])). None for symbolic shapes."""
    if not all(isinstance(d, int) for d in (*src, *dst)):
        return None
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj, pi, pj = [], [], 1, 1
        while True:
            if i < len(src) and (pi <= pj or j == len(dst)) and (not gi or pi != pj or src[i] == 1):
                pi *= src[i]
                gi.append(i)
                i += 1
            elif j < len(dst) and (not gj or pi != pj or dst[j] == 1):
                pj *= dst[j]
                gj.append(j)
                j += 1
            else:
                break
            if gi and gj and pi == pj and (i == len(src) or src[i] != 1) and (j == len(dst) or dst[j] != 1):
                break
        groups.append((gi, gj))
    return groups


def _reshape_compute(inputs, attrs, out_type):
    """Each run of axes (aligned_groups) is raveled and unraveled on its own: the source index of
    [1, 136, 28, 28] -> [1, 4, 34, 784] is [n, g*34 + c, p // 28, p % 28], not a division of the
    whole flat index by every extent (a vector loop over p then reads a ramp or a strided row
    instead of dividing per lane: 460 -> ~20 us for that reshape fused with a layout_transform)."""
    x = inputs[0]
    groups = aligned_groups(tuple(x.shape), tuple(out_type.shape))
    if groups is None:
        return te.compute(out_type.shape, lambda *i: x[unravel(ravel(i, out_type.shape), x.shape)], name="reshape")

    def index(*i):
        src = [None] * len(x.shape)
        for gi, gj in groups:
            part = unravel(ravel([i[j] for j in gj], [out_type.shape[j] for j in gj]), [x.shape[k] for k in gi])
            for k, v in zip(gi, part):
                src[k] = v
        return x[tuple(src)]

    return te.compute(out_type.shape, index, name="reshape")


register_op(OpDef("reshape", _reshape_type, lambda x, newshape: x.reshape(newshape), OpPattern.INJECTIVE,
                  _reshape_compute, INJECTIVE))


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
                  _transpose_compute, INJECTIVE))


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

        def pick(lo, hi):
            """inputs[lo:hi] as a balanced tree of selects on the index along `axis`: each load
            reads only where its input is in range, and the depth is log2 of the inputs (a
            chain of one select per input, 511 deep for a CRNN's 511 LSTM steps at width 2048,
            overflowed the recursion of the passes and the code generator)."""
            if hi - lo == 1:
                idx = list(i)
                idx[axis] = i[axis] - offsets[lo]
                return inputs[lo][tuple(idx)]
            mid = (lo + hi) // 2
            return te.select(i[axis] < offsets[mid], pick(lo, mid), pick(mid, hi))

        return pick(0, len(inputs))

    return te.compute(out_type.shape, f, name="concatenate")


register_op(OpDef("concatenate", _concat_type, lambda *xs, axis: np.concatenate(xs, axis=axis),
                  OpPattern.INJECTIVE, _concat_compute, INJECTIVE))


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
        return te.select(te.logical_and(*conds), x[tuple(src)], te.const(pad_value, x.dtype))

    return te.compute(shape, f, name=name)


register_op(OpDef("pad", _pad_type,
                  lambda x, pad_width, pad_value=0.0: np.pad(x, pad_width, constant_values=pad_value),
                  OpPattern.INJECTIVE,
                  lambda inputs, attrs, out_type: pad_compute(inputs[0], attrs["pad_width"],
                                                              attrs.get("pad_value", 0.0)),
                  INJECTIVE))


# ---- strided_slice (ONNX Slice, Split) -----------------------------------------------------------

def _slice_type(in_types, attrs):
    """attrs: begin, end, strides: one int per axis, already clamped (ONNX Slice semantics
    resolved by the frontend: 0 <= begin <= dim for positive strides, -1 <= end < dim for
    negative ones)."""
    t = in_types[0]
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    if not len(begin) == len(end) == len(strides) == len(t.shape):
        raise ValueError(f"begin/end/strides need {len(t.shape)} values each")
    if any(s == 0 for s in strides):
        raise ValueError("strides must be non-zero")
    return TensorType(tuple(slice_extent(b, e, s) for b, e, s in zip(begin, end, strides)), t.dtype)


def slice_extent(begin, end, stride: int):
    """len(range(begin, end, stride)): the elements a slice takes (stride a nonzero int; begin and
    end ints or symbolic: then max(0, ceil((end - begin) / stride)), simplified by their bounds)."""
    if not (symbolic.is_symbolic(begin) or symbolic.is_symbolic(end)):
        return len(range(begin, end, stride))
    span = end - begin if stride > 0 else begin - end
    step = abs(stride)
    return symbolic.max_(0, symbolic.floordiv(span + step - 1, step))


def _slice_compute(inputs, attrs, out_type):
    x = inputs[0]
    begin, strides = attrs["begin"], attrs["strides"]
    return te.compute(out_type.shape, lambda *i: x[tuple(b + s * v for v, b, s in zip(i, begin, strides))],
                      name="strided_slice")


def _slice_ref(x, begin, end, strides):
    return x[tuple(slice(b, e if e >= 0 else None, s) for b, e, s in zip(begin, end, strides))]


register_op(OpDef("strided_slice", _slice_type, _slice_ref, OpPattern.INJECTIVE, _slice_compute, INJECTIVE))


# ---- take (ONNX Gather) --------------------------------------------------------------------------

def _take_type(in_types, attrs):
    data, idx = in_types
    axis = attrs["axis"]
    if not 0 <= axis < len(data.shape):
        raise ValueError(f"axis {axis} out of range for rank {len(data.shape)}")
    if idx.dtype not in ("int64", "int32"):
        raise ValueError(f"indices must be int32/int64, got {idx.dtype}")
    return TensorType(tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]), data.dtype)


def _take_compute(inputs, attrs, out_type):
    """out[..a, j.., b..] = data[..a, idx[j..], b..]; negative indices count from the end;
    out-of-range indices are clamped (ONNX leaves them undefined) so no load leaves the tensor."""
    data, idx = inputs
    axis = attrs["axis"]
    n = data.shape[axis]

    def f(*i):
        j = index_in(idx[i[axis:axis + len(idx.shape)]], n)
        return data[tuple(i[:axis]) + (j,) + tuple(i[axis + len(idx.shape):])]

    return te.compute(out_type.shape, f, name="take")


def index_in(j, n: int):
    """An index value `j` (any integer dtype) as an int64 index into an axis of size n: negative
    values count from the end, out-of-range ones are clamped (ONNX leaves them undefined) so no
    load leaves the tensor."""
    j = te.cast("int64", j)
    j = te.select(j < te.const(0), j + te.const(n), j)
    return te.minimum(te.maximum(j, te.const(0)), te.const(n - 1))


register_op(OpDef("take", _take_type, lambda data, idx, axis: np.take(data, idx.astype(np.int64), axis=axis),
                  OpPattern.INJECTIVE, _take_compute, INJECTIVE))


# ---- gather_elements, gather_nd (ONNX GatherElements, GatherND) ----------------------------------

def _gather_elements_type(in_types, attrs):
    data, idx = in_types
    if len(idx.shape) != len(data.shape) or not 0 <= attrs["axis"] < len(data.shape):
        raise ValueError(f"indices {list(idx.shape)} must have the rank of data {list(data.shape)}, axis in range")
    return TensorType(idx.shape, data.dtype)


def _gather_elements_compute(inputs, attrs, out_type):
    """out[i] = data[i with i[axis] replaced by idx[i]] (TVM's gather)."""
    data, idx = inputs
    axis = attrs["axis"]
    return te.compute(out_type.shape, lambda *i: data[tuple(index_in(idx[i], data.shape[axis]) if d == axis else v
                                                            for d, v in enumerate(i))], name="gather_elements")


def _gather_elements_ref(data, idx, axis):
    idx = np.where(idx < 0, idx + data.shape[axis], idx).astype(np.int64)
    return np.take_along_axis(data, idx, axis)


register_op(OpDef("gather_elements", _gather_elements_type, _gather_elements_ref, OpPattern.INJECTIVE,
                  _gather_elements_compute, INJECTIVE))


def _gather_nd_type(in_types, attrs):
    """data[b.., d..], indices[b.., i.., k] (b = batch_dims leading axes) -> [b.., i.., d[k:]..]."""
    data, idx = in_types
    b, k = attrs["batch_dims"], idx.shape[-1] if idx.shape else 0
    if not idx.shape or b + k > len(data.shape) or tuple(idx.shape[:b]) != tuple(data.shape[:b]):
        raise ValueError(f"indices {list(idx.shape)} do not index data {list(data.shape)} with batch_dims {b}")
    return TensorType(tuple(idx.shape[:-1]) + tuple(data.shape[b + k:]), data.dtype)


def _gather_nd_compute(inputs, attrs, out_type):
    data, idx = inputs
    b, k = attrs["batch_dims"], idx.shape[-1]
    m = len(idx.shape) - 1  # output axes taken from indices

    def f(*i):
        head = tuple(i[:m])
        picked = tuple(index_in(idx[head + (te.const(j),)], data.shape[b + j]) for j in range(k))
        return data[tuple(i[:b]) + picked + tuple(i[m:])]

    return te.compute(out_type.shape, f, name="gather_nd")


def _gather_nd_ref(data, idx, batch_dims):
    lead = int(np.prod(data.shape[:batch_dims], dtype=np.int64))
    d = data.reshape((lead,) + data.shape[batch_dims:])
    ix = idx.reshape((lead,) + idx.shape[batch_dims:])
    k = idx.shape[-1]
    out = []
    for n in range(lead):
        j = ix[n].reshape(-1, k)
        j = np.where(j < 0, j + np.array(d.shape[1:1 + k]), j)
        out.append(np.stack([d[n][tuple(row)] for row in j]) if len(j) else np.zeros((0,) + d.shape[1 + k:], d.dtype))
    return np.stack(out).reshape(idx.shape[:-1] + data.shape[batch_dims + k:])


register_op(OpDef("gather_nd", _gather_nd_type, _gather_nd_ref, OpPattern.INJECTIVE, _gather_nd_compute,
                  INJECTIVE))


# ---- reverse_sequence (ONNX ReverseSequence) -----------------------------------------------------

def _reverse_sequence_compute(inputs, attrs, out_type):
    """out[.., t, ..] = x[.., len[b] - 1 - t, ..] for t < len[b] (b, t the batch and time axes)."""
    x, lens = inputs
    ba, ta = attrs["batch_axis"], attrs["time_axis"]

    def f(*i):
        n = te.cast("int64", lens[i[ba]])
        t = i[ta]
        src = te.select(t < n, n - te.const(1) - t, t)
        return x[tuple(src if d == ta else v for d, v in enumerate(i))]

    return te.compute(out_type.shape, f, name="reverse_sequence")


def _reverse_sequence_ref(x, lens, batch_axis, time_axis):
    out = x.copy()
    for bi, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = bi, slice(int(n) - 1, None, -1) if n > 0 else slice(0, 0)
        dst = [slice(None)] * x.ndim
        dst[batch_axis], dst[time_axis] = bi, slice(0, int(n))
        out[tuple(dst)] = x[tuple(src)]
    return out


register_op(OpDef("reverse_sequence", lambda t, a: t[0], _reverse_sequence_ref, OpPattern.INJECTIVE,
                  _reverse_sequence_compute, INJECTIVE))


# ---- broadcast_to (ONNX Expand, Tile) ------------------------------------------------------------

def _broadcast_to_type(in_types, attrs):
    t = in_types[0]
    shape = tuple(d if symbolic.is_symbolic(d) else int(d) for d in attrs["shape"])
    if t.is_symbolic or any(symbolic.is_symbolic(d) for d in shape):
        from tvmc.ops.elemwise import broadcast_shape

        if len(shape) < len(t.shape) or broadcast_shape(t.shape, shape) != shape:
            raise ValueError(f"cannot broadcast {list(t.shape)} to {list(shape)}")
        return TensorType(shape, t.dtype)
    try:
        out = np.broadcast_shapes(t.shape, shape)
    except ValueError:
        raise ValueError(f"cannot broadcast {list(t.shape)} to {list(shape)}") from None
    if tuple(out) != shape:
        raise ValueError(f"cannot broadcast {list(t.shape)} to {list(shape)}")
    return TensorType(shape, t.dtype)


def _broadcast_to_compute(inputs, attrs, out_type):
    from tvmc.ops.elemwise import broadcast_index

    x = inputs[0]
    return te.compute(out_type.shape, lambda *i: x[broadcast_index(x.shape, i)], name="broadcast_to")


register_op(OpDef("broadcast_to", _broadcast_to_type, lambda x, shape: np.broadcast_to(x, shape).copy(),
                  OpPattern.BROADCAST, _broadcast_to_compute, INJECTIVE))


# ---- pad with reflect / edge modes (ONNX Pad mode) -----------------------------------------------

def _mirror_pad_compute(inputs, attrs, out_type):
    """Source index per axis: reflect mirrors around the edge element (excluded), edge repeats it,
    wrap continues from the other end (numpy.pad's modes)."""
    x = inputs[0]
    mode = attrs["mode"]

    def f(*i):
        src = []
        for v, (a, _), d in zip(i, attrs["pad_width"], x.shape):
            k = v - a
            if mode == "reflect":
                k = te.select(k < te.const(0), -k, k)
                k = te.select(k > te.const(d - 1), te.const(2 * (d - 1)) - k, k)
            elif mode == "wrap":
                k = k % te.const(d)
            else:
                k = te.minimum(te.maximum(k, te.const(0)), te.const(d - 1))
            src.append(k)
        return x[tuple(src)]

    return te.compute(out_type.shape, f, name=f"pad_{mode}")


def _mirror_pad_type(in_types, attrs):
    t = _pad_type(in_types, attrs)
    if attrs["mode"] not in ("reflect", "edge", "wrap"):
        raise ValueError(f"unknown pad mode '{attrs['mode']}'")
    if attrs["mode"] == "reflect" and any(max(a, b) > d - 1
                                          for d, (a, b) in zip(in_types[0].shape, attrs["pad_width"])):
        raise ValueError("reflect padding must be smaller than the padded dimension")
    return t


register_op(OpDef("mirror_pad", _mirror_pad_type,
                  lambda x, pad_width, mode: np.pad(x, pad_width, mode=mode),
                  OpPattern.INJECTIVE, _mirror_pad_compute, INJECTIVE))


# ---- symbolic values as tensors (the importer's symbolic shape arithmetic, ONNX Range) ------------

def _shape_to_tensor_type(in_types, attrs):
    """attrs: values (ints and symbolic expressions, row-major), shape (() or (n,)), dtype."""
    shape, values = tuple(attrs["shape"]), tuple(attrs["values"])
    if len(shape) > 1 or len(values) != (shape[0] if shape else 1):
        raise ValueError(f"{len(values)} values do not fill the shape {list(shape)}")
    if not attrs["dtype"].startswith(("int", "uint")):
        raise ValueError(f"dtype must be an integer type, got {attrs['dtype']}")
    return TensorType(shape, attrs["dtype"])


def _shape_to_tensor_compute(inputs, attrs, out_type):
    """out[i] = values[i], a select chain over the (few) entries."""
    values, dtype = tuple(attrs["values"]), attrs["dtype"]

    def f(*i):
        out = te.cast(dtype, values[-1])
        for k in range(len(values) - 2, -1, -1):
            out = te.select(te.eq(i[0], te.const(k, "int64")), te.cast(dtype, values[k]), out)
        return out

    scalar = lambda: te.cast(dtype, values[0])  # noqa: E731
    return te.compute(out_type.shape, f if out_type.shape else scalar, name="shape_to_tensor")


def _shape_to_tensor_ref(values, shape, dtype):
    return np.array([int(v) for v in values], dtype=dtype).reshape(shape)


# TVM Relax's shape_to_tensor: integer values (a shape, or arithmetic on one) that the importer knows
# as symbolic expressions, given to an operator that reads them as data. Its compute reads the size
# variables, which kernels take as arguments once symbolic extents reach code generation.
register_op(OpDef("shape_to_tensor", _shape_to_tensor_type, _shape_to_tensor_ref, OpPattern.INJECTIVE,
                  _shape_to_tensor_compute, INJECTIVE))


def _arange_type(in_types, attrs):
    """attrs: start (int or symbolic), step (nonzero int), length (int >= 0 or symbolic), dtype."""
    if attrs["step"] == 0:
        raise ValueError("step must be nonzero")
    return TensorType((attrs["length"],), attrs["dtype"])


def _arange_ref(start, step, length, dtype):
    return (int(start) + int(step) * np.arange(int(length), dtype=np.int64)).astype(dtype)


# ONNX Range with a symbolic limit or start (TVM topi.arange): out[i] = start + i * step, i < length.
register_op(OpDef("arange", _arange_type, _arange_ref, OpPattern.INJECTIVE,
                  lambda inputs, attrs, out_type: te.compute(
                      out_type.shape, lambda i: te.cast(attrs["dtype"], i * attrs["step"] + attrs["start"]),
                      name="arange"), INJECTIVE))
