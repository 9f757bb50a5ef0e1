"""Tensor expressions: placeholders, `compute(shape, fcompute)`, reduce axes (TVM's te concepts)."""

from __future__ import annotations

import itertools

from tvmc.te.expr import FLOAT16_DTYPES, Cast, PrimExpr, Reduce, TensorLoad, Var, _wrap
from tvmc.te.extent import as_extent

_uid = itertools.count()


class IterVar:
    """An iteration axis: `var` ranging over [0, extent). kind is 'spatial' or 'reduce'; `extent`
    an int, or an int64 expression of SizeVars (a symbolic extent, tvmc.te.extent)."""

    def __init__(self, extent, name: str, kind: str = "spatial"):
        self.var = Var(name)
        self.extent = as_extent(extent)
        self.kind = kind
        self.name = name

    def __repr__(self):
        return f"IterVar({self.name}, {self.extent}, {self.kind})"


class Tensor:
    """A tensor produced by a PlaceholderOp (input) or ComputeOp. `t[i, j]` builds a load. A
    dimension is an int or an int64 expression of SizeVars (tvmc.te.extent)."""

    def __init__(self, shape, dtype: str, name: str, op=None):
        self.shape = tuple(as_extent(s) for s in shape)
        self.dtype = dtype
        self.name = name
        self.op = op  # None for placeholders, else ComputeOp
        self.uid = next(_uid)

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"{self.name}: {len(idx)} indices for a rank-{len(self.shape)} tensor")
        return TensorLoad(self, idx)

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


class ComputeOp:
    """`out[axis] = body` where body may be a Reduce over `reduce_axis`; `attrs`: facts about the
    operands that its schedules read (e.g. tvmc/ops/cpu/int8.py's pairs_in_int16)."""

    def __init__(self, axis, body: PrimExpr, tag: str = "", attrs: dict | None = None):
        self.axis = list(axis)
        self.body = body
        self.reduce_axis = list(body.axes) if isinstance(body, Reduce) else []
        self.tag = tag
        self.attrs = dict(attrs or {})  # facts a schedule reads (TVM's ComputeOp attrs)

    def input_tensors(self) -> list:
        from tvmc.te.expr import walk

        seen, out = set(), []
        for node in walk(self.body):
            if isinstance(node, TensorLoad) and node.tensor.uid not in seen:
                seen.add(node.tensor.uid)
                out.append(node.tensor)
        return out


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape (ints, or SizeVar expressions: te.size_var) and dtype."""
    return Tensor(shape, dtype, name)


def reduce_axis(extent, name: str = "r") -> IterVar:
    """A reduction axis over [0, extent) (an int or a SizeVar expression)."""
    return IterVar(extent, name, "reduce")


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs: dict | None = None) -> Tensor:
    """`out[i0, .., ik] = fcompute(i0, .., ik)` for an output of `shape` (ints, or SizeVar
    expressions for symbolic extents).

    The dtype is the body's. A body that is a Reduce makes this a reduction stage. `attrs` are
    kept on its ComputeOp for the schedules.
    """
    shape = tuple(as_extent(s) for s in shape)
    axis = [IterVar(s, f"{name}_i{k}") for k, s in enumerate(shape)]
    body = _wrap(fcompute(*[a.var for a in axis]))
    if body.dtype in FLOAT16_DTYPES and not isinstance(body, Reduce):
        # float16 and bfloat16 compute in float32 registers (tvmc/codegen/llvm.py): each stage
        # rounds its value to its dtype as a store would, so results do not depend on inlining
        # (reductions accumulate in float32 and round where they are read, tvmc/tir/lower.py)
        body = Cast(body.dtype, Cast("float32", body))
    return Tensor(shape, body.dtype, name, ComputeOp(axis, body, tag, attrs))


def _reducer(combiner):
    def f(expr, axis, where=None):
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        return Reduce(combiner, _wrap(expr), axes, where)

    f.__name__ = combiner
    f.__doc__ = (f"Commutative reduction '{combiner}' of `expr` over reduce axes `axis`, of the points where "
                 "`where` (a bool expression) holds when given.")
    return f


sum = _reducer("sum")  # noqa: A001  (TVM's name)
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001
prod = _reducer("prod")
