"""Dispatch by size bucket (TVM's bucketed dispatch of dynamic shapes): one kernel holding a
specialization of its loop nest per sub-range of a SizeVar, picked at run time by the variable's
value. Each specialization is scheduled and lowered for a SizeVar bounded to its bucket, so its
tiles are chosen for the bucket's upper bound (a register tile of 8 rows for M in 8..512, another
form for M < 8) and the simplifier and loop partitioning use the bucket's bounds; the kernel's
arguments and ABI are those of one symbolic kernel (PrimFunc.size_vars)."""

from __future__ import annotations

import copy

from tvmc.errors import ScheduleError
from tvmc.te.expr import Load, PrimExpr, SizeVar, Var, transform
from tvmc.tir.ir import Allocate, Buffer, For, IfThenElse, Intrinsic, PrimFunc, Seq, Stmt, Store
from tvmc.tir.lower import lower


def lower_buckets(name: str, var: SizeVar, starts, build) -> PrimFunc:
    """A kernel `name` with one specialization per bucket of `var`'s range [lo, hi]: the buckets
    start at lo and at each of `starts` (sorted, each in (lo, hi]). `build(sub)` returns
    (schedule, args) of the kernel for `sub`, a SizeVar of var's name bounded to one bucket, used
    in place of `var` in the tensor shapes; every bucket's args must match the first's in count,
    dtype and rank. The kernel runs `if var < starts[0]: bucket 0 elif var < starts[1]: ... else:
    the last bucket`. Raises ScheduleError for bad starts or args that differ between buckets."""
    starts = [int(x) for x in starts]
    if sorted(set(starts)) != starts or any(not var.lo < x <= var.hi for x in starts):
        raise ScheduleError(f"{name}: bucket starts {starts} must increase within ({var.lo}, {var.hi}] of {var.name}")
    edges = [var.lo, *starts, var.hi + 1]
    lowered = []
    for lo, end in zip(edges, edges[1:]):
        sub = SizeVar(var.name, lo, end - 1)
        sch, args = build(sub)
        lowered.append((sub, lower(sch, args, name)))
    first_sub, first = lowered[0]
    params = [Buffer(b.name, [_subst_extent(d, {first_sub: var}) for d in b.shape], b.dtype, b.scope)
              for b in first.params]
    body = None
    for k in reversed(range(len(lowered))):
        sub, prim = lowered[k]
        if [(b.dtype, len(b.shape)) for b in prim.params] != [(b.dtype, len(b.shape)) for b in params]:
            raise ScheduleError(f"{name}: bucket {k} of {var.name} has other arguments than bucket 0")
        stmt = _Rebind({sub: var}, dict(zip(prim.params, params))).stmt(prim.body)
        body = stmt if body is None else IfThenElse(var < edges[k + 1], stmt, body)
    size_vars = [var if v is first_sub else v for v in first.size_vars]
    return PrimFunc(name, params, body, size_vars=size_vars)


def _subst_extent(e, mapping):
    from tvmc.te import extent as xt
    from tvmc.te.expr import substitute

    return xt.as_extent(substitute(e, mapping)) if isinstance(e, PrimExpr) else e


class _Rebind:
    """A statement with its Vars replaced (`vars`: Var -> expression) and its buffers exchanged
    (`buffers`: Buffer -> Buffer); a buffer allocated inside gets a copy of its shape rewritten."""

    def __init__(self, variables: dict, buffers: dict):
        self.vars, self.buffers = variables, dict(buffers)

    def buffer(self, b: Buffer) -> Buffer:
        if b not in self.buffers:
            self.buffers[b] = Buffer(b.name, [_subst_extent(d, self.vars) for d in b.shape], b.dtype, b.scope)
        return self.buffers[b]

    def expr(self, e):
        if not isinstance(e, PrimExpr):
            return e

        def rule(x):
            if isinstance(x, Var):
                return self.vars.get(x)
            if isinstance(x, Load):
                return Load(self.buffer(x.buffer), x.index)
            return None

        return transform(e, rule)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            return For(s.var, self.expr(s.extent), s.kind, self.stmt(s.body), self.expr(s.min_parallel))
        if isinstance(s, Store):
            return Store(self.buffer(s.buffer), self.expr(s.index), self.expr(s.value))
        if isinstance(s, Allocate):
            return Allocate(self.buffer(s.buffer), self.stmt(s.body))
        if isinstance(s, Seq):
            return Seq([self.stmt(x) for x in s.stmts])
        if isinstance(s, IfThenElse):
            return IfThenElse(self.expr(s.cond), self.stmt(s.then),
                              self.stmt(s.otherwise) if s.otherwise is not None else None)
        if isinstance(s, Intrinsic):
            out = s.with_exprs([self.expr(e) for e in s.exprs])
            out = copy.copy(out)
            for field, value in vars(out).items():
                if isinstance(value, Buffer):
                    setattr(out, field, self.buffer(value))
            return out
        return s
