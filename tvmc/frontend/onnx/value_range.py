"""Value-range analysis of the small integer tensors on a model's shape path (docs/dynamic_shapes.md).

Range, Expand and ConstantOfShape size their output by the values of an input. When those values
are computed at run time, the output gets an upper-bound buffer (the design of the data-dependent
ops), and the bound comes from an interval [lo, hi] per element of the input, derived at import:

- a Constant is its own interval;
- a graph input has the interval the user states (`tvmc compile --value-range NAME=LO:HI`, TVM
  Relax's `tir_var_upper_bound` is the precedent), else none;
- the run-time shape of a tensor with dynamic axes (`Shape` of it) is exact along its static
  axes and in [0, bound] along the dynamic ones;
- data movement (take, strided_slice, concatenate, reshape, transpose, broadcast_to, identity,
  cast, where with a constant condition) and add, maximum, minimum, sum, max, min, and prod of
  non-negative values are monotone in each operand: the interval of the result is the op
  applied to the lower ends and to the upper ends; subtract and negative swap the ends of the
  subtracted operand; multiply and divide (divisor interval without 0) take the extremes of the
  four corner products/quotients.

Anything else, or an operand outside these rules, has no interval: `Unbounded` says which tensor
stopped the analysis, so the converter's error can name it.
"""

from __future__ import annotations

import numpy as np

from tvmc.graph import ir

# ops increasing in every operand whose interval is tracked; the value of the others (take's
# indices, where's condition) must be constant
_MONOTONE = {"identity": (0,), "cast": (0,), "reshape": (0,), "transpose": (0,), "broadcast_to": (0,),
             "take": (0,), "strided_slice": (0,), "concatenate": None, "add": None, "maximum": None,
             "minimum": None, "sum": (0,), "max": (0,), "min": (0,), "where": (1, 2)}
# the largest element count analysed (shape tensors are a handful of elements)
MAX_ELEMENTS = 64


class Unbounded(Exception):
    """No interval is derivable; str(self) says why (names the tensor or graph input)."""


def value_range(expr, ranges: dict, shape_of: dict) -> tuple:
    """(lo, hi): float64 arrays of expr's shape holding every value expr can take at run time.

    ranges:   {graph input name: (lo, hi)} stated by the user (--value-range)
    shape_of: {run-time shape Expr: the tensor with dynamic axes whose shape it is}
    Raises Unbounded when no interval is derivable."""
    return _Analysis(ranges, shape_of).of(expr)


class _Analysis:
    def __init__(self, ranges, shape_of):
        self.ranges, self.shape_of, self.memo = ranges, shape_of, {}

    def of(self, e) -> tuple:
        if e not in self.memo:
            self.memo[e] = self._of(e)
        return self.memo[e]

    def _of(self, e) -> tuple:
        if isinstance(e, ir.Constant):
            v = np.asarray(e.value, np.float64)
            return v, v
        name = getattr(e, "name", None) or "?"
        if e.type.is_dynamic:
            raise Unbounded(f"tensor '{name}' has a run-time shape ({e.type})")
        if e.type.size > MAX_ELEMENTS or e.dtype == "bool":
            raise Unbounded(f"tensor '{name}' ({e.type}) is not a small numeric tensor")
        if isinstance(e, ir.Var):
            if e.name not in self.ranges:
                raise Unbounded(f"graph input '{e.name}' has no stated range")
            lo, hi = self.ranges[e.name]
            return np.full(e.shape, lo, np.float64), np.full(e.shape, hi, np.float64)
        if e in self.shape_of:
            t = self.shape_of[e].type
            hi = np.array(t.shape, np.float64)
            lo = np.where(np.isin(np.arange(len(t.shape)), t.dynamic_axes), 0.0, hi)
            return lo, hi
        if not isinstance(e, ir.Call):
            raise Unbounded(f"tensor '{name}' has no derivable range")
        return self._call(e)

    def _call(self, e) -> tuple:
        from tvmc.ops.registry import get_op

        op, args, attrs = e.op, e.inputs, dict(e.attrs)
        ref = get_op(op).reference
        if op in _MONOTONE:
            tracked = range(len(args)) if _MONOTONE[op] is None else _MONOTONE[op]
            ends = []
            for k, a in enumerate(args):
                if k in tracked:
                    ends.append(self.of(a))
                elif isinstance(a, ir.Constant):
                    ends.append((a.value, a.value))
                else:
                    raise Unbounded(f"{op} '{e.name}' has a run-time operand {k}")
            with np.errstate(all="ignore"):
                out = [np.asarray(ref(*[end[s] for end in ends], **attrs), np.float64) for s in (0, 1)]
            if op == "cast" and np.dtype(e.dtype).kind in "iu":
                out = [np.trunc(v) for v in out]
            return out[0], out[1]
        if op == "negative":
            lo, hi = self.of(args[0])
            return -hi, -lo
        if op == "subtract":
            (alo, ahi), (blo, bhi) = self.of(args[0]), self.of(args[1])
            return alo - bhi, ahi - blo
        if op == "prod":
            lo, hi = self.of(args[0])
            if (lo < 0).any():
                raise Unbounded(f"prod '{e.name}' of possibly negative values")
            return np.asarray(ref(lo, **attrs), np.float64), np.asarray(ref(hi, **attrs), np.float64)
        if op in ("multiply", "divide"):
            (alo, ahi), (blo, bhi) = self.of(args[0]), self.of(args[1])
            if op == "divide" and ((blo <= 0) & (bhi >= 0)).any():
                raise Unbounded(f"divide '{e.name}': the divisor's range holds 0")
            dtype = np.dtype(e.dtype)
            with np.errstate(all="ignore"):
                corners = [np.asarray(ref(a.astype(dtype), b.astype(dtype)), np.float64)
                           for a in (alo, ahi) for b in (blo, bhi)]
            return np.minimum.reduce(corners), np.maximum.reduce(corners)
        raise Unbounded(f"{op} '{e.name}' is outside the value-range analysis")
