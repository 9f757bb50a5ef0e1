"""ONNX converters, tensor group: shapes, reshapes, data movement, constants, Resize."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from tvmc.frontend.onnx.common import (SymbolicValue, fmt_dims, is_const, is_int_const, norm_axis, np_dtype_name,
                                      prod, reshape, scalar)
from tvmc.graph import symbolic
from tvmc.frontend.onnx.registry import converter
from tvmc.te.expr import is_float


@converter(1, 9, 11, 13, 21, 23, 24, 25)
def Flatten(ctx, node, inputs, attrs, opset):
    """ONNX Flatten(axis=1) -> reshape to [prod(shape[:axis]), prod(shape[axis:])]."""
    x = inputs[0]
    rank = len(x.shape)
    axis = int(attrs.get("axis", 1))
    if not -rank <= axis <= rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    newshape = (prod(x.shape[:axis]), prod(x.shape[axis:]))
    if is_const(x):
        return x.value.reshape(newshape)
    return reshape(ctx, x, newshape)


def _resolve_reshape(ctx, in_shape, shape, allowzero) -> tuple:
    """ONNX Reshape target: 0 copies the input dim (unless allowzero), -1 is inferred."""
    if any(symbolic.is_symbolic(d) for d in (*in_shape, *shape)):
        return _resolve_symbolic_reshape(ctx, in_shape, shape, allowzero)
    out = _copied_zeros(ctx, [int(d) for d in in_shape], [int(d) for d in shape], allowzero)
    total = prod(in_shape)
    if -1 in out:
        known = prod([d for d in out if d != -1])
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape {fmt_dims(in_shape)} to {list(shape)}")
        out[out.index(-1)] = total // known
    if any(d < 0 for d in out) or prod(out) != total:
        raise ctx.error(f"cannot reshape {fmt_dims(in_shape)} to {list(shape)}")
    return tuple(out)


def _copied_zeros(ctx, in_shape, shape, allowzero) -> list:
    """The Reshape target `shape` with each 0 replaced by the input dimension at its index
    (unless allowzero); raises ctx.error for a 0 past the input's rank or more than one -1."""
    out = []
    for i, d in enumerate(shape):
        if not symbolic.is_symbolic(d) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.error(f"shape {list(shape)}: 0 at index {i} has no input dimension to copy")
            out.append(in_shape[i])
        else:
            out.append(d)
    if sum(1 for d in out if not symbolic.is_symbolic(d) and d == -1) > 1:
        raise ctx.error(f"shape {list(shape)} has more than one -1")
    return out


def _resolve_symbolic_reshape(ctx, in_shape, shape, allowzero) -> tuple:
    """_resolve_reshape where the input shape or the target holds symbolic dimensions: the -1 is
    the element count divided by the product of the others, which must divide it exactly, and
    the target's element count must be provably the input's (tvmc.graph.symbolic). Dimensions
    the target shares with the input (a copied 0, the same expression) cancel before dividing, so
    [t, 1, 2, 32] -> [0, 0, -1] gives 64 with t = w // 4 - 1."""
    out = _copied_zeros(ctx, in_shape, [d if symbolic.is_symbolic(d) else int(d) for d in shape], allowzero)
    total = prod(in_shape)
    if -1 in out:
        rest, others = list(in_shape), []
        for d in out:
            if isinstance(d, int) and d == -1:
                continue
            same = next((k for k, e in enumerate(rest) if symbolic.is_symbolic(d) and symbolic.can_prove_equal(d, e)),
                        None)
            if same is None:
                others.append(d)
            else:
                rest.pop(same)
        known = prod(others)
        inferred = symbolic.floordiv(prod(rest), known) if known != 0 else None
        known = prod([d for d in out if not (isinstance(d, int) and d == -1)])
        if inferred is None or not symbolic.can_prove_equal(inferred * known, total):
            raise ctx.error(f"cannot reshape {fmt_dims(in_shape)} to {list(shape)}: {known} does not provably divide "
                            f"the element count {total} ({symbolic.describe_vars((total, known))})")
        out[out.index(-1)] = inferred
    if not all(symbolic.can_prove(d >= 0) for d in out) or not symbolic.can_prove_equal(prod(out), total):
        raise ctx.error(f"cannot reshape {fmt_dims(in_shape)} to {list(shape)}: the element counts {total} and "
                        f"{prod(out)} are not provably equal ({symbolic.describe_vars((total, *out))})")
    return tuple(out)


@converter(1, 5, 13, 14, 19, 21, 23, 24, 25)
def Reshape(ctx, node, inputs, attrs, opset):
    """ONNX Reshape: target shape from the `shape` attribute (opset < 5) or a constant input
    (opset >= 5), 0 and -1 resolved statically -> reshape(newshape); a shape input computed at run
    time -> dyn.reshape (docs/dynamic_shapes.md)."""
    x = inputs[0]
    if opset < 5:
        if "shape" not in attrs:
            raise ctx.error("attribute 'shape' is required")
        shape = attrs["shape"]
    elif len(inputs) > 1 and isinstance(inputs[1], SymbolicValue):  # computed from symbolic dimensions
        shape = inputs[1].values.reshape(-1).tolist()
    elif len(inputs) > 1 and inputs[1] is not None and not is_const(inputs[1]) and x.type.size:
        # a shape computed at run time: every extent bounded by the element count (tvmc/ops/dynamic.py)
        if len(inputs[1].shape) != 1:
            raise ctx.error(f"input 'shape' must be 1-D, got {inputs[1].type}")
        return ctx.dynamic_call("dyn.reshape", [x, inputs[1]], {"allowzero": int(attrs.get("allowzero", 0))})
    else:
        shape = ctx.constant(inputs, 1, "shape").reshape(-1).tolist()
    newshape = _resolve_reshape(ctx, x.shape, shape, int(attrs.get("allowzero", 0)))
    if is_const(x):
        return x.value.reshape(newshape)
    return reshape(ctx, x, newshape)


@converter(1, 13, 21, 23, 24, 25)
def Transpose(ctx, node, inputs, attrs, opset):
    """ONNX Transpose(perm, default reversed) -> transpose(axes)."""
    x = inputs[0]
    rank = len(x.shape)
    perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {list(perm)} is not a permutation of {rank} axes")
    if perm == tuple(range(rank)):
        return x
    if is_int_const(x):
        return np.transpose(x.value, perm)
    return ctx.call("transpose", [x], {"axes": perm})


@converter(1, 4, 11, 13)
def Concat(ctx, node, inputs, attrs, opset):
    """ONNX Concat(axis; default 1 in opset 1, negative from 11) -> concatenate."""
    inputs = [e for e in inputs if e is not None]
    if "axis" not in attrs and opset >= 4:
        raise ctx.error("attribute 'axis' is required")
    rank = len(inputs[0].shape)
    axis = norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if all(is_int_const(e) for e in inputs):  # shape arithmetic
        return np.concatenate([e.value for e in inputs], axis=axis)
    return ctx.call("concatenate", inputs, {"axis": axis})


@converter(1, 13, 14, 16, 19, 21, 23, 24, 25)
def Identity(ctx, node, inputs, attrs, opset):
    """ONNX Identity -> identity (a constant passes through unchanged)."""
    x = inputs[0]
    return x if is_const(x) else ctx.call("identity", [x])


@converter(1, 9, 11, 12, 13, 19, 21, 23, 24, 25)
def Constant(ctx, node, inputs, attrs, opset):
    """ONNX Constant (value / value_float(s) / value_int(s)) -> a Constant named after its output."""
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64)
    raise ctx.error(f"unsupported constant attribute(s) {sorted(attrs)}; "
                    f"supported: value, value_float(s), value_int(s)")


@converter(9, 20, 21, 23, 24, 25)
def ConstantOfShape(ctx, node, inputs, attrs, opset):
    """ONNX ConstantOfShape -> np.full with `value` (default float32 0) for a shape known at import,
    else dyn.constant_of_shape bounded by the shape values' range (value_range.py)."""
    if "value" in attrs:
        fill = numpy_helper.to_array(attrs["value"]).reshape(-1)
        if fill.size != 1:
            raise ctx.error(f"attribute 'value' must hold one element, got {fill.size}")
        value, dtype = fill[0], fill.dtype
    else:
        value, dtype = 0, np.dtype(np.float32)
    shape = _shape_values(ctx, inputs, 0)
    if isinstance(shape, np.ndarray) and shape.dtype == object:  # symbolic: the value broadcast
        return ctx.call("broadcast_to", [ctx.const(np.array(value, dtype), "value")],
                        {"shape": tuple(shape.reshape(-1).tolist())})
    if isinstance(shape, np.ndarray):
        ctx.check_constant(shape.reshape(-1), dtype)
        return np.full(tuple(int(d) for d in shape.reshape(-1)), value, dtype=dtype)
    bound, dynamic = _bound(ctx, *shape)
    return ctx.dynamic_call("dyn.constant_of_shape", [inputs[0]], {
        "bound": bound, "dynamic_axes": dynamic, "value": value.item() if hasattr(value, "item") else value,
        "dtype": dtype.name})


def _shape_values(ctx, inputs, i: int, what: str = "shape"):
    """Input `i` (a shape or a Range operand): its value when known at import (a constant, a
    SymbolicValue's object array of ints and SymExprs, or a run-time tensor whose range is one
    value), else its interval (lo, hi) (value_range.py).
    Raises ModelError when neither is known (the error names the --value-range option)."""
    if i >= len(inputs) or inputs[i] is None:
        raise ctx.error(f"missing input {what}")
    if is_const(inputs[i]):
        return inputs[i].value
    if isinstance(inputs[i], SymbolicValue):  # known at import as expressions of the size variables
        return inputs[i].values
    lo, hi = ctx.bounded(inputs, i, what)
    if (lo == hi).all():
        return hi.astype(inputs[i].dtype)
    return lo, hi


def _bound(ctx, lo, hi, static=()):
    """(bound, dynamic axes) of an output whose extents lie in [lo, hi] (static: {axis: extent} of
    the axes whose extent does not follow the values). Raises ModelError beyond DYNAMIC_MAX_BOUND."""
    from tvmc.ops.dynamic import DYNAMIC_MAX_BOUND

    hi = np.minimum(hi, DYNAMIC_MAX_BOUND + 1)  # also an infinite or huge float end: refused below
    bound = tuple(static[a] if a in static else max(int(h), 0) for a, h in enumerate(hi.reshape(-1)))
    dynamic = tuple(a for a, (lo_a, hi_a) in enumerate(zip(lo.reshape(-1), hi.reshape(-1)))
                    if a not in static and lo_a != hi_a)
    if prod(bound) > DYNAMIC_MAX_BOUND:
        raise ctx.error(f"the output's shape is known only at run time, within the bound {fmt_dims(bound)} "
                        f"derived from its inputs' value ranges: more than the {DYNAMIC_MAX_BOUND} elements tvmc "
                        f"allocates for it (narrow --value-range)")
    return bound, dynamic


@converter(1, 13, 15, 19, 21, 23, 24, 25)
def Shape(ctx, node, inputs, attrs, opset):
    """ONNX Shape (start/end from opset 15) -> int64 Constant for a static shape; a SymbolicValue
    (tvmc/frontend/onnx/symbolic.py) when the slice holds symbolic dimensions; for a tensor with
    a run-time shape, its int64[rank] shape tensor (sliced to start:end), or a Constant when the
    slice holds only static axes."""
    x = inputs[0]
    shape = np.asarray([0 if symbolic.is_symbolic(d) else d for d in x.shape], dtype=np.int64)
    rank = len(shape)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    if x.type.is_symbolic and any(symbolic.is_symbolic(d) for d in x.shape[start:end]):
        return SymbolicValue(np.array(x.shape[start:end], dtype=object))
    if not any(start <= a < end for a in x.type.dynamic_axes):
        return shape[start:end]
    dims = ctx.importer.run_time_shapes[x]
    if (start, end) == (0, rank):
        return dims
    return ctx.call("strided_slice", [dims], {"begin": (start,), "end": (end,), "strides": (1,)})


def _axes(ctx, inputs, attrs, opset, since_input=13):
    if opset < since_input:
        return attrs.get("axes")
    if len(inputs) > 1 and inputs[1] is not None:
        return ctx.constant(inputs, 1, "axes").reshape(-1).tolist()
    return None


@converter(1, 11, 13, 21, 23, 24, 25)
def Unsqueeze(ctx, node, inputs, attrs, opset):
    """ONNX Unsqueeze (axes attribute before 13, input from 13; axes index the output)
    -> reshape with a static newshape."""
    x = inputs[0]
    axes = _axes(ctx, inputs, attrs, opset)
    if axes is None:
        raise ctx.error("axes are required")
    out_rank = len(x.shape) + len(axes)
    axes = sorted(norm_axis(ctx, int(a), out_rank, "axes") for a in axes)
    if len(set(axes)) != len(axes):
        raise ctx.error(f"duplicate axes {axes}")
    dims = iter(x.shape)
    newshape = tuple(1 if i in axes else next(dims) for i in range(out_rank))
    if is_const(x):
        return x.value.reshape(newshape)
    return reshape(ctx, x, newshape)


@converter(1, 11, 13, 21, 23, 24, 25)
def Squeeze(ctx, node, inputs, attrs, opset):
    """ONNX Squeeze (axes attribute before 13, input from 13; none = every 1-dim)
    -> reshape with a static newshape."""
    x = inputs[0]
    rank = len(x.shape)
    axes = _axes(ctx, inputs, attrs, opset)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {norm_axis(ctx, int(a), rank, "axes") for a in axes}
    for a in sorted(axes):
        if x.shape[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of {x.type}: size is not 1")
    newshape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if is_const(x):
        return x.value.reshape(newshape)
    return reshape(ctx, x, newshape)


@converter(1, 11, 13)
def Gather(ctx, node, inputs, attrs, opset):
    """ONNX Gather -> take(axis); folded with np.take when data and indices are constants."""
    data, indices = inputs[0], inputs[1]
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), len(data.shape))
    if is_const(data) and is_const(indices):
        n = data.shape[axis]
        idx = indices.value.astype(np.int64)
        return np.take(data.value, np.where(idx < 0, idx + n, idx), axis=axis)
    if indices.dtype not in ("int64", "int32"):
        raise ctx.error(f"indices '{ctx.input_name(1)}' must be int32/int64, got {indices.dtype}")
    return ctx.call("take", [data, indices], {"axis": axis})


@converter(1, 2, 11, 13, 18, 19, 21, 23, 24, 25)
def Pad(ctx, node, inputs, attrs, opset):
    """ONNX Pad (pads as attribute before 11, constant inputs from 11; axes input from 18):
    mode 'constant' -> pad(pad_width, pad_value); 'reflect' / 'edge' -> mirror_pad(pad_width, mode)."""
    x = inputs[0]
    rank = len(x.shape)
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"mode '{mode}' is not supported (constant, reflect, edge, wrap)")
    if opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        value = float(attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ctx.constant(inputs, 1, "pads").reshape(-1).tolist()
        value = 0.0
        if len(inputs) > 2 and inputs[2] is not None:
            value = float(ctx.constant(inputs, 2, "constant_value").reshape(-1)[0])
        axes = list(range(rank))
        if opset >= 18 and len(inputs) > 3 and inputs[3] is not None:
            axes = [norm_axis(ctx, int(a), rank, "axes") for a in ctx.constant(inputs, 3, "axes").reshape(-1)]
    if pads is None or len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have {2 * len(axes)} values")
    width = [[0, 0] for _ in range(rank)]
    for j, a in enumerate(axes):
        width[a] = [int(pads[j]), int(pads[j + len(axes)])]
    if any(b < 0 or e < 0 for b, e in width):
        raise ctx.error(f"negative pads {pads} are not supported")
    if not any(b or e for b, e in width):
        return x
    if mode != "constant":
        return ctx.call("mirror_pad", [x], {"pad_width": tuple(tuple(w) for w in width), "mode": mode})
    return ctx.call("pad", [x], {"pad_width": tuple(tuple(w) for w in width), "pad_value": value})


@converter(1, 13, 19, 21, 23, 24, 25)
def Size(ctx, node, inputs, attrs, opset):
    """ONNX Size -> int64 scalar Constant for a static shape, else the product of the run-time shape."""
    x = inputs[0]
    if x.type.is_symbolic:
        return SymbolicValue(np.array(x.type.size, dtype=object))
    if not x.type.is_dynamic:
        return np.asarray(prod(x.shape), dtype=np.int64)
    return ctx.call("prod", [ctx.importer.run_time_shapes[x]], {"axis": (0,), "keepdims": 0})


@converter(11, 27)
def Range(ctx, node, inputs, attrs, opset):
    """ONNX Range(start, limit, delta) -> a Constant when the three are known at import (np.arange
    semantics: ceil((limit - start) / delta) elements), else dyn.range, bounded by the largest
    length the operands' ranges allow (value_range.py)."""
    from tvmc.ops.dynamic import range_reference

    values = [_shape_values(ctx, inputs, k, w) for k, w in enumerate(("start", "limit", "delta"))]
    if any(isinstance(v, np.ndarray) and v.dtype == object for v in values):
        return _symbolic_range(ctx, inputs, *(v.reshape(-1)[0] if isinstance(v, np.ndarray) else None
                                              for v in values))
    if all(isinstance(v, np.ndarray) for v in values):
        start, limit, delta = (v.reshape(-1)[0] if v.size else v for v in values)
        with np.errstate(all="ignore"):
            length = np.ceil((np.float64(limit) - np.float64(start)) / np.float64(delta)) if delta else np.inf
        if not np.isfinite(length):
            raise ctx.error(f"Range({start}, {limit}, {delta}) has no finite length")
        ctx.check_constant((max(int(length), 0),), values[0].dtype)
        return range_reference(*values)
    (slo, shi), (llo, lhi), (dlo, dhi) = (v if isinstance(v, tuple) else (v.astype(np.float64),) * 2 for v in values)
    if dlo <= 0 <= dhi:
        raise ctx.error(f"delta ('{ctx.input_name(2)}') is computed at run time and its range [{dlo}, {dhi}] "
                        f"holds 0: no bound on the length")
    longest = np.ceil((lhi - slo) / dlo) if dlo > 0 else np.ceil((llo - shi) / dhi)
    args = [ctx.const(v, w) if isinstance(v, np.ndarray) and not is_const(e) else e
            for e, v, w in zip(inputs, values, ("start", "limit", "delta"))]
    bound, _ = _bound(ctx, np.zeros(1), np.array([longest]))
    return ctx.dynamic_call("dyn.range", args, {"bound": bound[0]})


def _symbolic_range(ctx, inputs, start, limit, delta):
    """Range whose start or limit is a symbolic expression (a SymbolicValue): `arange` with
    length max(0, ceil((limit - start) / delta)); delta must be a nonzero constant and the dtype
    an integer one."""
    dtype = inputs[0].dtype
    if start is None or limit is None or delta is None or symbolic.is_symbolic(delta) or not dtype.startswith("int"):
        raise ctx.error(f"Range({start}, {limit}, {delta}) of {dtype} with a symbolic operand needs integer start "
                        f"and limit known at import and a constant delta")
    delta = int(delta)
    if delta == 0:
        raise ctx.error("delta is 0: no finite length")
    span = limit - start if delta > 0 else start - limit
    length = symbolic.max_(0, symbolic.floordiv(span + abs(delta) - 1, abs(delta)))
    return ctx.call("arange", [], {"start": start if symbolic.is_symbolic(start) else int(start), "step": delta,
                                   "length": length, "dtype": dtype})


# ---------------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------------

def _slice_attrs(shape, starts, ends, axes, steps):
    """ONNX Slice semantics resolved into per-axis begin/end/strides (clamped, numpy-like); with
    symbolic dimensions, starts or ends, clamped by symbolic min/max (a negative start or end must
    be provably negative or provably not: SymbolicError otherwise)."""
    rank = len(shape)
    begin, end, strides = [0] * rank, list(shape), [1] * rank
    lo_, hi_ = symbolic.min_, symbolic.max_
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = shape[a]
        s, e, st = (v if symbolic.is_symbolic(v) else int(v) for v in (s, e, st))
        s = s + d if bool(s < 0) else s
        e = e + d if bool(e < 0) else e
        if st > 0:
            s, e = lo_(hi_(s, 0), d), lo_(hi_(e, 0), d)
        else:
            s, e = lo_(hi_(s, -1), d - 1), lo_(hi_(e, -1), d - 1)
        begin[a], end[a], strides[a] = s, e, st
    return tuple(begin), tuple(end), tuple(strides)


def _strided_slice(ctx, x, begin, end, strides):
    if is_const(x) and not any(symbolic.is_symbolic(v) for v in (*begin, *end)):
        return x.value[tuple(slice(b, e if e >= 0 else None, s) for b, e, s in zip(begin, end, strides))]
    if tuple(begin) == (0,) * len(begin) and tuple(end) == tuple(x.shape) and set(strides) <= {1}:
        return ctx.call("identity", [x])
    return ctx.call("strided_slice", [x], {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides)})


@converter(1, 10, 11, 13)
def Slice(ctx, node, inputs, attrs, opset):
    """ONNX Slice (starts/ends/axes attributes before 10; constant inputs starts, ends, axes,
    steps from 10) -> strided_slice with clamped begin/end."""
    x = inputs[0]
    rank = len(x.shape)
    if opset < 10:
        starts, ends = attrs.get("starts"), attrs.get("ends")
        axes, steps = attrs.get("axes"), None
    else:
        starts, ends = (ctx.shape_operand(inputs, k) if isinstance(inputs[k], SymbolicValue) else
                        ctx.constant(inputs, k, what) for k, what in ((1, "starts"), (2, "ends")))
        starts, ends = starts.reshape(-1).tolist(), ends.reshape(-1).tolist()
        axes = ctx.constant(inputs, 3, "axes").reshape(-1).tolist() if len(inputs) > 3 and inputs[3] is not None \
            else None
        steps = ctx.constant(inputs, 4, "steps").reshape(-1).tolist() if len(inputs) > 4 and inputs[4] is not None \
            else None
    if starts is None or ends is None or len(starts) != len(ends):
        raise ctx.error("starts and ends are required and must have the same length")
    axes = list(range(len(starts))) if axes is None else [norm_axis(ctx, int(a), rank, "axes") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if any(int(s) == 0 for s in steps):
        raise ctx.error("steps must be non-zero")
    try:
        attrs = _slice_attrs(x.shape, starts, ends, axes, steps)
    except symbolic.SymbolicError as e:
        raise ctx.error(f"starts {starts} / ends {ends}: {e}") from None
    return _strided_slice(ctx, x, *attrs)


@converter(1, 2, 11, 13, 18)
def Split(ctx, node, inputs, attrs, opset):
    """ONNX Split (split sizes as attribute before 13, constant input from 13; num_outputs from
    18; equal parts otherwise, the last one smaller) -> one strided_slice per output."""
    x = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), len(x.shape))
    n_out = len(node.output)
    if opset >= 13:
        split = ctx.constant(inputs, 1, "split").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None \
            else None
    elif opset == 1 and len(inputs) > 1 and inputs[1] is not None:
        split = ctx.constant(inputs, 1, "split").reshape(-1).tolist()
    else:
        split = attrs.get("split")
    d = x.shape[axis]
    if split is None:
        n = int(attrs.get("num_outputs", n_out)) if opset >= 18 else n_out
        part = -(-d // n)
        split = [min(part, d - k * part) for k in range(n)]
    if len(split) != n_out or sum(int(s) for s in split) != d:
        raise ctx.error(f"split {list(split)} does not divide dimension {d} into {n_out} outputs")
    outs, start = [], 0
    for size in split:
        begin = [0] * len(x.shape)
        end = list(x.shape)
        begin[axis], end[axis] = start, start + int(size)
        outs.append(_strided_slice(ctx, x, begin, end, [1] * len(x.shape)))
        start += int(size)
    return tuple(outs)


@converter(8, 13)
def Expand(ctx, node, inputs, attrs, opset):
    """ONNX Expand(x, shape): bidirectional broadcast of x with the shape -> broadcast_to when the
    shape is known at import, else dyn.expand, bounded by the shape values' range (value_range.py)
    along the axes where x has extent 1 (or none)."""
    x = inputs[0]
    shape = _shape_values(ctx, inputs, 1)
    if isinstance(shape, tuple):
        lo, hi = (v.reshape(-1) for v in shape)
        rank = max(len(x.shape), len(lo))
        xs = (1,) * (rank - len(x.shape)) + tuple(x.shape)
        lo, hi = (np.concatenate([np.ones(rank - len(v)), v]) for v in (lo, hi))
        bound, dynamic = _bound(ctx, lo, hi, {a: d for a, d in enumerate(xs) if d != 1})
        if dynamic:
            return ctx.dynamic_call("dyn.expand", [x, inputs[1]], {"bound": bound, "dynamic_axes": dynamic})
        shape = np.array(bound, np.int64)
    shape = shape.reshape(-1).tolist()
    if x.type.is_symbolic or any(symbolic.is_symbolic(d) for d in shape):
        from tvmc.ops.elemwise import broadcast_shape

        try:
            out = broadcast_shape(tuple(x.shape), tuple(shape))
        except ValueError as e:
            raise ctx.error(f"cannot expand {x.type} to {shape}: {e}") from None
        return x if out == tuple(x.shape) and not is_const(x) else ctx.call("broadcast_to", [x], {"shape": out})
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(tuple(x.shape), tuple(int(s) for s in shape)))
    except ValueError:
        raise ctx.error(f"cannot expand {x.type} to {shape}") from None
    if is_const(x):
        ctx.check_constant(out, x.dtype)
        return np.broadcast_to(x.value, out).copy()
    if out == tuple(x.shape):
        return ctx.call("identity", [x])
    return ctx.call("broadcast_to", [x], {"shape": out})


@converter(1, 6, 13)
def Tile(ctx, node, inputs, attrs, opset):
    """ONNX Tile(x, repeats) -> reshape to [1, d0, 1, d1, ...], broadcast_to [r0, d0, r1, d1, ...],
    reshape to [r0 * d0, ...]."""
    x = inputs[0]
    if opset < 6:
        raise ctx.error("Tile-1 (tiles/axis inputs) is not supported")
    reps = [int(r) for r in ctx.constant(inputs, 1, "repeats").reshape(-1)]
    if len(reps) != len(x.shape):
        raise ctx.error(f"repeats {reps} must have {len(x.shape)} values")
    if any(r < 0 for r in reps):
        raise ctx.error(f"repeats {reps} must not be negative")
    if is_const(x):
        ctx.check_constant([r * d for r, d in zip(reps, x.shape)], x.dtype)
        return np.tile(x.value, reps)
    inter = tuple(v for d in x.shape for v in (1, d))
    wide = tuple(v for r, d in zip(reps, x.shape) for v in (r, d))
    y = ctx.call("broadcast_to", [reshape(ctx, x, inter)], {"shape": wide})
    return reshape(ctx, y, tuple(r * d for r, d in zip(reps, x.shape)))


def _resize(ctx, x, scales, sizes, method, coord_mode, nearest_mode="round_prefer_floor", cubic_a=-0.75,
            exclude_outside=0, extrapolation=0.0, roi=None, axes=None, policy="stretch", antialias=0):
    """Resize/Upsample -> image.resize2d over the two trailing axes (a rank != 4 input runs as
    [prod(leading), 1, H, W]; antialiased float data as two matmuls, _resize_as_matmuls); scales
    or sizes per resized axis (`axes`, default all), ONNX Resize-18 keep_aspect_ratio_policy;
    tf_crop_and_resize positions outside the input take `extrapolation` through a where over a
    constant mask."""
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [norm_axis(ctx, int(a), rank, "axes") for a in axes]
    scale_of = {a: 1.0 for a in range(rank)}
    out_of = {a: int(d) for a, d in enumerate(x.shape)}
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ctx.error(f"sizes {list(sizes)} must have {len(axes)} values")
        for a, n in zip(axes, sizes):
            scale_of[a], out_of[a] = int(n) / x.shape[a], int(n)
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise ctx.error(f"unknown keep_aspect_ratio_policy '{policy}'")
            s = pick(scale_of[a] for a in axes)
            for a in axes:
                scale_of[a], out_of[a] = s, int(s * x.shape[a] + 0.5)
    else:
        if len(scales) != len(axes):
            raise ctx.error(f"scales {list(scales)} must have {len(axes)} values")
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ctx.error(f"scales {list(scales)} must be positive")
            scale_of[a], out_of[a] = float(s), int(float(s) * x.shape[a])
    roi_of = {a: (0.0, 1.0) for a in range(rank)}
    if roi is not None and len(roi) == 2 * len(axes):
        for k, a in enumerate(axes):
            roi_of[a] = (float(roi[k]), float(roi[k + len(axes)]))
    resized = [a for a in range(rank) if out_of[a] != x.shape[a] or scale_of[a] != 1.0
               or (coord_mode == "tf_crop_and_resize" and roi_of[a] != (0.0, 1.0))]
    if not resized:
        return ctx.call("identity", [x])
    if rank < 2 or any(a < rank - 2 for a in resized):
        raise ctx.error(f"only the two trailing axes can be resized; {x.type} to "
                        f"{fmt_dims([out_of[a] for a in range(rank)])}")
    from tvmc.ops.image import resize_tables

    tables = [resize_tables(int(x.shape[a]), out_of[a], scale_of[a], method, coord_mode, nearest_mode, cubic_a,
                            exclude_outside, roi_of[a], antialias) for a in (rank - 2, rank - 1)]
    (ih, wh, oh), (iw, ww, ow) = tables
    h, w = x.shape[-2:]
    if antialias and method != "nearest" and is_float(x.dtype):
        y = _resize_as_matmuls(ctx, reshape(ctx, x, (prod(x.shape[:-2]), h, w)), tables)
    else:
        y = reshape(ctx, x, (prod(x.shape[:-2]), 1, h, w)) if rank != 4 else x
        args = [y, ctx.const(ih, "idx_h"), ctx.const(iw, "idx_w")]
        if method != "nearest":
            args += [ctx.const(wh, "w_h"), ctx.const(ww, "w_w")]
        y = ctx.call("image.resize2d", args)
    if oh.any() or ow.any():
        mask = ctx.const(oh[:, None] | ow[None, :], "outside")
        y = ctx.call("where", [mask, scalar(ctx, y, extrapolation, "extrapolation"), y])
    return reshape(ctx, y, tuple(out_of[a] for a in range(rank)))


def _resize_as_matmuls(ctx, x, tables):
    """x [B, H, W] resized separably by constant [OW, W] and [OH, H] weight matrices (the tables'
    taps, summed where the edge clamps them onto one index): nn.matmul(x, W_w^T), then
    nn.matmul(W_h, that); an axis whose matrix is the identity is skipped. For antialiased
    downsampling, whose taps grow as 1/scale per axis: two matmuls instead of taps_h * taps_w
    unrolled terms per output."""
    from tvmc.ops.image import resize_matrix

    (ih, wh, _), (iw, ww, _) = tables
    m_h, m_w = resize_matrix(ih, wh, x.shape[1]), resize_matrix(iw, ww, x.shape[2])
    if m_w.shape != (x.shape[2],) * 2 or not np.array_equal(m_w, np.eye(x.shape[2])):
        x = ctx.call("nn.matmul", [x, ctx.const(m_w.T.astype(x.dtype), "w_w")])
    if m_h.shape != (x.shape[1],) * 2 or not np.array_equal(m_h, np.eye(x.shape[1])):
        x = ctx.call("nn.matmul", [ctx.const(m_h.astype(x.dtype), "w_h"), x])
    return x


_RESIZE_METHODS = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}


@converter(10, 11, 13, 18, 19)
def Resize(ctx, node, inputs, attrs, opset):
    """ONNX Resize: 10 (X, scales; asymmetric coordinates, nearest rounds as Upsample does),
    11/13 (roi, scales or sizes; coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
    exclude_outside, extrapolation_value), 18/19 (axes, keep_aspect_ratio_policy, antialias,
    half_pixel_symmetric) -> image.resize2d. Scales/sizes must be constant; antialias widens the
    linear/cubic taps of a downsampled axis (tvmc.ops.image.resize_tables), applied as matmuls."""
    x = inputs[0]
    method = _RESIZE_METHODS.get(attrs.get("mode", "nearest"))
    if method is None or (opset < 11 and method == "cubic"):
        raise ctx.error(f"unknown mode '{attrs.get('mode')}'")
    if opset < 11:
        scales = ctx.constant(inputs, 1, "scales").reshape(-1).tolist()
        return _resize(ctx, x, scales, None, method, "asymmetric", "simple")
    roi = ctx.constant(inputs, 1, "roi").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None else None
    scales = ctx.constant(inputs, 2, "scales").reshape(-1).tolist() \
        if len(inputs) > 2 and inputs[2] is not None else None
    sizes = ctx.constant(inputs, 3, "sizes").reshape(-1).tolist() if len(inputs) > 3 and inputs[3] is not None else None
    if not scales:
        scales = None
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of scales and sizes must be given")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    from tvmc.ops.image import COORDINATE_MODES, NEAREST_MODES

    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    if coord not in COORDINATE_MODES or nearest_mode not in NEAREST_MODES[:4]:
        raise ctx.error(f"unknown coordinate_transformation_mode '{coord}' or nearest_mode '{nearest_mode}'")
    return _resize(ctx, x, scales, sizes, method, coord, nearest_mode, float(attrs.get("cubic_coeff_a", -0.75)),
                   int(attrs.get("exclude_outside", 0)), float(attrs.get("extrapolation_value", 0.0)), roi,
                   attrs.get("axes") if opset >= 18 else None, attrs.get("keep_aspect_ratio_policy", "stretch"),
                   int(attrs.get("antialias", 0)) if opset >= 18 else 0)


@converter(7, 9, 10)
def Upsample(ctx, node, inputs, attrs, opset):
    """ONNX Upsample-7 (scales attribute) / -9 and -10 (deprecated; scales input): nearest or (bi)linear with
    asymmetric coordinates -> image.resize2d."""
    method = _RESIZE_METHODS.get(attrs.get("mode", "nearest"))
    if method not in ("nearest", "linear"):
        raise ctx.error(f"unknown mode '{attrs.get('mode')}'")
    scales = attrs.get("scales") if opset < 9 else ctx.constant(inputs, 1, "scales").reshape(-1).tolist()
    if scales is None:
        raise ctx.error("scales are required")
    return _resize(ctx, inputs[0], scales, None, method, "asymmetric", "simple")


@converter(1, 11, 13, 28)
def DepthToSpace(ctx, node, inputs, attrs, opset):
    """ONNX DepthToSpace (blocksize; mode DCR or CRD from 11) -> reshape, transpose, reshape."""
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input {x.type} must be NCHW")
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if c % (b * b):
        raise ctx.error(f"channels {c} not divisible by blocksize^2 = {b * b}")
    if attrs.get("mode", "DCR") == "DCR":
        y = reshape(ctx, x, (n, b, b, c // (b * b), h, w))
        perm = (0, 3, 4, 1, 5, 2)
    else:
        y = reshape(ctx, x, (n, c // (b * b), b, b, h, w))
        perm = (0, 1, 4, 2, 5, 3)
    y = ctx.call("transpose", [y], {"axes": perm})
    return reshape(ctx, y, (n, c // (b * b), h * b, w * b))


@converter(1, 13, 28)
def SpaceToDepth(ctx, node, inputs, attrs, opset):
    """ONNX SpaceToDepth (blocksize; mode DCR or CRD from 28) -> reshape, transpose, reshape."""
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input {x.type} must be NCHW")
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ctx.error(f"spatial size {h}x{w} not divisible by blocksize {b}")
    y = reshape(ctx, x, (n, c, h // b, b, w // b, b))
    crd = opset >= 28 and attrs.get("mode", "DCR") == "CRD"
    y = ctx.call("transpose", [y], {"axes": (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)})
    return reshape(ctx, y, (n, c * b * b, h // b, w // b))


# ---------------------------------------------------------------------------------------------
# Masks and one-hot tensors built from static shapes
# ---------------------------------------------------------------------------------------------

@converter(14)
def Trilu(ctx, node, inputs, attrs, opset):
    """ONNX Trilu(x[..., N, M], k = 0; upper = 1) -> where(mask, x, 0) with the constant [N, M]
    mask j - i >= k (upper) or j - i <= k (lower). With a symbolic N or M (tvmc.graph.symbolic) the
    mask is computed: arange(M)[None, :] - arange(N)[:, None] compared with k."""
    x = inputs[0]
    if len(x.shape) < 2:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must have rank >= 2")
    k = int(ctx.constant(inputs, 1, "k").reshape(())) if len(inputs) > 1 and inputs[1] is not None else 0
    n, m = x.shape[-2:]
    upper = int(attrs.get("upper", 1))
    if symbolic.is_symbolic(n) or symbolic.is_symbolic(m):
        rows, cols = (ctx.call("arange", [], {"start": 0, "step": 1, "length": d, "dtype": "int64"}) for d in (n, m))
        diff = ctx.call("subtract", [reshape(ctx, cols, (1, m)), reshape(ctx, rows, (n, 1))])
        mask = ctx.call("greater_equal" if upper else "less_equal", [diff, ctx.const(np.array(k, np.int64), "k")])
        return ctx.call("where", [mask, x, scalar(ctx, x, 0, "zero")])
    ctx.check_constant(x.shape if is_const(x) else (n, m), x.dtype if is_const(x) else "bool", "its mask")
    diff = np.arange(m)[None, :] - np.arange(n)[:, None]
    mask = diff >= k if upper else diff <= k
    if is_const(x):
        return np.where(mask, x.value, np.zeros((), x.dtype))
    return ctx.call("where", [ctx.const(mask, "mask"), x, scalar(ctx, x, 0, "zero")])


@converter(9, 22)
def EyeLike(ctx, node, inputs, attrs, opset):
    """ONNX EyeLike(x[N, M]; dtype = x's, k = 0) -> a constant with ones on diagonal k (only x's
    shape is read)."""
    x = inputs[0]
    if len(x.shape) != 2:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must be 2-D")
    dtype = np_dtype_name(int(attrs["dtype"])) if "dtype" in attrs else x.dtype
    ctx.check_constant(x.shape, dtype)
    return np.eye(x.shape[0], x.shape[1], k=int(attrs.get("k", 0)), dtype=dtype)


@converter(17)
def MelWeightMatrix(ctx, node, inputs, attrs, opset):
    """ONNX MelWeightMatrix-17(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
    upper_edge_hertz; output_datatype = float32) -> the [dft_length // 2 + 1, num_mel_bins]
    matrix of triangular filters, folded at compile time (every input must be a constant).

    As ONNX's reference: num_mel_bins + 2 edges spaced evenly on the mel scale
    mel(f) = 2595 log10(1 + f / 700) from lower to upper edge in steps of (high - low) /
    (num_mel_bins + 2), mapped back to hertz and to spectrogram bins floor((dft_length + 1) *
    f / sample_rate); filter i rises linearly from edge i to 1 at edge i + 1 (1 at the center
    when they coincide) and falls to 0 at edge i + 2."""
    n_mel, dft_length, rate = (int(ctx.constant(inputs, k, what).reshape(()))
                               for k, what in enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    low, high = (float(ctx.constant(inputs, k, what).reshape(()))
                 for k, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    if n_mel <= 0 or dft_length <= 0 or rate <= 0 or not 0 <= low <= high:
        raise ctx.error(f"needs num_mel_bins, dft_length, sample_rate > 0 and 0 <= lower_edge_hertz <= "
                        f"upper_edge_hertz; got {n_mel}, {dft_length}, {rate}, {low}, {high}")
    ctx.check_constant((dft_length // 2 + 1, n_mel + 2), "float64")
    mel_low, mel_high = (2595.0 * np.log10(1.0 + f / 700.0) for f in (low, high))
    mels = mel_low + np.arange(n_mel + 2) * ((mel_high - mel_low) / (n_mel + 2))
    hertz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = (((dft_length + 1) * hertz) // rate).astype(np.int64)
    j = np.arange(dft_length // 2 + 1)[:, None]
    left, center, right = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(center > left, (j - left) / np.maximum(center - left, 1), j == center)
        fall = (right - j) / np.maximum(right - center, 1)
    out = np.where((j >= left) & (j <= center), rise, 0.0)
    out = np.where((right > center) & (j >= center) & (j < right), fall, out)
    dtype = np_dtype_name(int(attrs["output_datatype"])) if "output_datatype" in attrs else "float32"
    return out.astype(dtype)


def one_hot_mask(ctx, indices, depth: int, axis: int):
    """indices (any int or float dtype, negative ones counted from `depth`) == the positions
    0..depth-1 along a new output axis `axis` -> a bool tensor of shape indices.shape with depth
    inserted at `axis`."""
    if indices.dtype != "int64":
        indices = ctx.call("cast", [indices], {"dtype": "int64"})
    rank = len(indices.shape) + 1
    wrapped = ctx.call("where", [ctx.call("less", [indices, scalar(ctx, indices, 0, "zero")]),
                                 ctx.call("add", [indices, scalar(ctx, indices, depth, "depth")]), indices])
    idx = reshape(ctx, wrapped, tuple(indices.shape[:axis]) + (1,) + tuple(indices.shape[axis:]))
    positions = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (rank - axis - 1))
    return ctx.call("equal", [idx, ctx.const(positions, "positions")])


@converter(9, 11, 28)
def OneHot(ctx, node, inputs, attrs, opset):
    """ONNX OneHot(indices, depth, values [off, on]; axis = -1) -> where(indices == positions,
    on, off) with depth a constant; negative indices count from depth (from 11), out-of-range
    ones give all-off rows."""
    indices, values = inputs[0], inputs[2]
    depth = int(np.asarray(ctx.constant(inputs, 1, "depth")).reshape(-1)[0])
    ctx.check_constant((max(depth, 0),), "int64", "its depth positions")
    axis = norm_axis(ctx, int(attrs.get("axis", -1)), len(indices.shape) + 1)
    if tuple(values.shape) != (2,):
        raise ctx.error(f"values '{ctx.input_name(2)}' {values.type} must be [off, on]")
    off = ctx.call("strided_slice", [values], {"begin": (0,), "end": (1,), "strides": (1,)}) if not is_const(values) \
        else values.value[:1]
    on = ctx.call("strided_slice", [values], {"begin": (1,), "end": (2,), "strides": (1,)}) if not is_const(values) \
        else values.value[1:]
    on = ctx.const(on, "on") if isinstance(on, np.ndarray) else on
    off = ctx.const(off, "off") if isinstance(off, np.ndarray) else off
    return ctx.call("where", [one_hot_mask(ctx, indices, depth, axis), reshape(ctx, on, ()), reshape(ctx, off, ())])


# ---------------------------------------------------------------------------------------------
# Gather and scatter
# ---------------------------------------------------------------------------------------------

def _indices(ctx, inputs, i: int):
    e = inputs[i]
    if e.dtype not in ("int64", "int32"):
        raise ctx.error(f"indices '{ctx.input_name(i)}' must be int32/int64, got {e.dtype}")
    return e


@converter(11, 13)
def GatherElements(ctx, node, inputs, attrs, opset):
    """ONNX GatherElements(data, indices; axis) -> gather_elements."""
    data = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), len(data.shape))
    return ctx.call("gather_elements", [data, _indices(ctx, inputs, 1)], {"axis": axis})


@converter(11, 12, 13)
def GatherND(ctx, node, inputs, attrs, opset):
    """ONNX GatherND(data, indices; batch_dims from 12) -> gather_nd."""
    return ctx.call("gather_nd", [inputs[0], _indices(ctx, inputs, 1)], {"batch_dims": int(attrs.get("batch_dims", 0))})


@converter(11, 13, 16, 18)
def ScatterElements(ctx, node, inputs, attrs, opset):
    """ONNX ScatterElements(data, indices, updates; axis, reduction add/mul from 16, max/min from
    18) -> scatter_elements."""
    data = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", 0)), len(data.shape))
    return ctx.call("scatter_elements", [data, _indices(ctx, inputs, 1), inputs[2]],
                    {"axis": axis, "reduction": attrs.get("reduction", "none")})


@converter(9, 11)
def Scatter(ctx, node, inputs, attrs, opset):
    """ONNX Scatter (deprecated; ScatterElements without reduction) -> scatter_elements."""
    return ScatterElements(ctx, node, inputs, {"axis": attrs.get("axis", 0)}, opset)


@converter(11, 13, 16, 18)
def ScatterND(ctx, node, inputs, attrs, opset):
    """ONNX ScatterND(data, indices, updates; reduction add/mul from 16, max/min from 18) -> scatter_nd."""
    return ctx.call("scatter_nd", [inputs[0], _indices(ctx, inputs, 1), inputs[2]],
                    {"reduction": attrs.get("reduction", "none")})


@converter(24)
def TensorScatter(ctx, node, inputs, attrs, opset):
    """ONNX TensorScatter(past_cache, update, write_indices = 0; axis -2, mode linear/circular) ->
    tensor_scatter."""
    past, upd = inputs[0], inputs[1]
    axis = norm_axis(ctx, int(attrs.get("axis", -2)), len(past.shape))
    w = inputs[2] if len(inputs) > 2 and inputs[2] is not None else ctx.const(np.zeros(past.shape[0], np.int64), "w")
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(f"mode must be linear or circular, got '{mode}'")
    return ctx.call("tensor_scatter", [past, upd, w], {"axis": axis, "mode": mode})


@converter(10, 28)
def ReverseSequence(ctx, node, inputs, attrs, opset):
    """ONNX ReverseSequence(x, sequence_lens; batch_axis 1, time_axis 0) -> reverse_sequence."""
    x = inputs[0]
    rank = len(x.shape)
    ba = norm_axis(ctx, int(attrs.get("batch_axis", 1)), rank)
    ta = norm_axis(ctx, int(attrs.get("time_axis", 0)), rank)
    return ctx.call("reverse_sequence", [x, _indices(ctx, inputs, 1)], {"batch_axis": ba, "time_axis": ta})


@converter(16, 20, 22)
def GridSample(ctx, node, inputs, attrs, opset):
    """ONNX GridSample(X, grid; mode bilinear/nearest/bicubic (16) or linear/nearest/cubic (20),
    padding_mode zeros/border/reflection, align_corners) -> image.grid_sample; 2-D from 16, N-D
    from 20."""
    x, grid = inputs[0], inputs[1]
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "bilinear" if opset < 20 else "linear"),
                                                          attrs.get("mode", "linear"))
    if opset < 20 and len(x.shape) != 4:
        raise ctx.error(f"GridSample-16 samples 4-D inputs, got {x.type}")
    return ctx.call("image.grid_sample", [x, grid], {"mode": mode, "padding_mode": attrs.get("padding_mode", "zeros"),
                                                     "align_corners": int(attrs.get("align_corners", 0))})
