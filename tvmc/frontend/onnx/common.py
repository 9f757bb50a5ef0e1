"""Helpers shared by the ONNX converters: constants, axes, reshapes, padding, dtype names."""

from __future__ import annotations

import numpy as np
import onnx

from tvmc.graph import ir, symbolic
from tvmc.graph.ir import Expr

# dtypes a tensor may have: numpy's own (ONNX FLOAT16 .. UINT64, BOOL) and BFLOAT16 (ml_dtypes'
# numpy type, computed in float32 as float16 is); float8, int4 and string tensors are refused
SUPPORTED_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8",
                    "uint16", "uint32", "uint64", "bool")


def np_dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


def fmt_dims(dims) -> str:
    return "[" + ",".join(str(d) if d is not None else "?" for d in dims) + "]"


def is_const(e) -> bool:
    return isinstance(e, ir.Constant)


class SymbolicValue(Expr):
    """An integer tensor of rank 0 or 1 known at import as symbolic expressions of the input size
    variables (tvmc.graph.symbolic): ONNX Shape of a symbolically shaped tensor and the shape
    arithmetic on it (Gather, Concat, Unsqueeze, Slice, Add, ...), which the importer carries out on
    `values` (a numpy object array of ints and SymExprs, shaped like the tensor) instead of
    leaving it to run time, as TVM Relax keeps a ShapeExpr. Lives in the importer only: a
    converter that reads it as a shape (Reshape, Expand, Slice, Range, ConstantOfShape) takes its
    values; one that reads it as data gets a `shape_to_tensor` call (_NodeContext.call)."""

    def __init__(self, values: np.ndarray, dtype: str = "int64"):
        super().__init__()
        self.values = np.asarray(values, dtype=object)
        self.type = ir.TensorType(tuple(self.values.shape), dtype)

    def __repr__(self):
        return f"SymbolicValue({self.values.tolist()}: {self.type})"


def reshape(ctx, x: Expr, newshape) -> Expr:
    newshape = tuple(d if symbolic.is_symbolic(d) else int(d) for d in newshape)
    if tuple(x.shape) == newshape:
        return x
    if is_const(x):
        return ctx.derived(x, "reshape" + "x".join(map(str, newshape)), lambda v: v.reshape(newshape))
    return ctx.call("reshape", [x], {"newshape": newshape})


def norm_axis(ctx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"{what} {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def prod(dims):
    """The product of a shape's dimensions: an int, or a SymExpr when one is symbolic."""
    dims = list(dims)
    if any(symbolic.is_symbolic(d) for d in dims):
        return symbolic.prod(dims)
    return int(np.prod(dims, dtype=np.int64))


def is_int_const(e) -> bool:
    return is_const(e) and np.issubdtype(e.value.dtype, np.integer)


def auto_pads(ctx, attrs, in_spatial, kernel, strides, dilations) -> tuple:
    """Pads (x1_begin, x2_begin, ..., x1_end, x2_end, ...) in ONNX order, resolving auto_pad.

    ONNX Conv/MaxPool/AveragePool: SAME_UPPER / SAME_LOWER give output = ceil(in / stride) with
    the odd padding at the end (UPPER) or the beginning (LOWER); VALID means no padding.
    """
    n = len(in_spatial)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = tuple(attrs.get("pads", [0] * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {list(pads)} must have {2 * n} values")
        return pads
    if auto_pad == "VALID":
        return (0,) * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"unknown auto_pad '{auto_pad}'")
    begin, end = [], []
    for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


def scalar(ctx, like: Expr, value, suffix: str) -> ir.Constant:
    """A 0-d constant of `like`'s dtype."""
    return ctx.const(np.asarray(value, dtype=like.dtype), suffix)
