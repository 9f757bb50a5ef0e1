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
from tvmc.tir.ir import Allocate, Buffer, For, IfThenElse, Intrinsic, PrimFunc, Seq, Stmt, Store, stmt_children
from tvmc.tir.lower import lower


def lower_buckets(name: str, var: SizeVar, starts, build, stages=None) -> PrimFunc:
    """A kernel `name` with one specialization per bucket of `var`'s range [lo, hi]: the buckets
    start at lo and at each of `starts` (sorted, each in (lo, hi]). `build(sub)` returns
    (schedule, args) of the kernel for `sub`, a SizeVar of var's name bounded to one bucket, used
    in place of `var` in the tensor shapes; every bucket's args must match the first's in count,
    dtype and rank. The kernel runs `if var < starts[0]: bucket 0 elif var < starts[1]: ... else:
    the last bucket`.

    `stages`: the names of the root stages specialized per bucket, the rest lowered once for the
    whole range (build(sub) with sub over all of it) and shared; every stage when None. A
    Winograd conv's batched GEMM takes its register tile per bucket, while its transforms read
    the same in every bucket and are unrolled 36 positions wide: shared, a CRNN's F(4x4) conv
    compiles them once instead of once per bucket.

    Raises ScheduleError for bad starts or args that differ between buckets."""
    starts = [int(x) for x in starts]
    if sorted(set(starts)) != starts or any(not var.lo < x <= var.hi for x in starts):
        raise ScheduleError(f"{name}: bucket starts {starts} must increase within ({var.lo}, {var.hi}] of {var.name}")
    edges = [var.lo, *starts, var.hi + 1]
    lowered = []
    for lo, end in zip(edges, edges[1:]):
        sub = SizeVar(var.name, lo, end - 1)
        sch, args = build(sub)
        lowered.append((sub, lower(sch, args, name, stages=stages)))
    shared = None
    if stages is not None:
        sub = SizeVar(var.name, var.lo, var.hi)
        shared = (sub, lower(*build(sub), name))
    first_sub, first = shared or lowered[0]
    params = [Buffer(b.name, [_subst_extent(d, {first_sub: var}) for d in b.shape], b.dtype, b.scope)
              for b in first.params]
    outer = _Rebind({first_sub: var}, dict(zip(first.params, params)))
    body = None
    for k in reversed(range(len(lowered))):
        sub, prim = lowered[k]
        if [(b.dtype, len(b.shape)) for b in prim.params] != [(b.dtype, len(b.shape)) for b in params]:
            raise ScheduleError(f"{name}: bucket {k} of {var.name} has other arguments than bucket 0")
        if shared is None:
            stmt = _Rebind({sub: var}, dict(zip(prim.params, params))).stmt(prim.body)
        else:  # its nests alone, on the shared kernel's buffers
            allocated, nests = _allocations(prim.body)
            buffers = {**dict(zip(prim.params, params)),
                       **{b: outer.buffer(_named(first.body, b.name, name)) for b in allocated}}
            stmt = _Rebind({sub: var}, buffers).stmt(nests)
        body = stmt if body is None else IfThenElse(var < edges[k + 1], stmt, body)
    if shared is not None:
        body = _replace_stages(outer.stmt(first.body), body, {b.name for b in _allocations(lowered[0][1].body)[0]
                                                              if _stores_to(body, b.name)}, name)
    size_vars = [var if v is first_sub else v for v in first.size_vars]
    return PrimFunc(name, params, body, size_vars=size_vars)


def _allocations(s: Stmt):
    """([Buffers allocated], the statement inside) of `s`'s leading Allocates."""
    allocated = []
    while isinstance(s, Allocate):
        allocated.append(s.buffer)
        s = s.body
    return allocated, s


def _named(s: Stmt, buffer_name: str, kernel: str) -> Buffer:
    """The buffer that `s`'s leading Allocates allocate under `buffer_name`."""
    for b in _allocations(s)[0]:
        if b.name == buffer_name:
            return b
    raise ScheduleError(f"{kernel}: the shared kernel allocates no buffer {buffer_name}")


def _stores_to(s: Stmt, buffer_name: str) -> bool:
    """Whether a Store in `s` writes the buffer named `buffer_name`."""
    if isinstance(s, Store):
        return s.buffer.name == buffer_name
    return any(_stores_to(c, buffer_name) for c in stmt_children(s))


def _replace_stages(shared: Stmt, dispatch: Stmt, written: set, kernel: str) -> Stmt:
    """`shared` (its Allocates around a Seq of stage nests) with the nests that write a buffer of
    `written` (consecutive ones) replaced by `dispatch`."""
    allocated, seq = _allocations(shared)
    nests = seq.stmts if isinstance(seq, Seq) else [seq]
    hits = [k for k, x in enumerate(nests) if any(_stores_to(x, n) for n in written)]
    if not hits or hits != list(range(hits[0], hits[-1] + 1)):
        raise ScheduleError(f"{kernel}: the stages written by {sorted(written)} are not one run of loop nests")
    body = Seq(nests[:hits[0]] + [dispatch] + nests[hits[-1] + 1:])
    for b in reversed(allocated):
        body = Allocate(b, body)
    return body


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
