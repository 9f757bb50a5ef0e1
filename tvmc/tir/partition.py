"""Loop partitioning for kernels with symbolic extents (TVM's LoopPartition pass).

Splitting an axis of symbolic extent N by a constant factor f leaves a guard `v * f + i < N`
around the loop body (i the inner loop, v the outer one): the last outer iteration may pass N.
A loop `v` whose body holds guards of the form `a * w + rest < 0` (w = v or v // c, a > 0, rest
bounded over the loops inside v) is split at T, the first iteration at which a guard can fail:

    T = (a - 1 - max(rest)) // a        (times c for w = v // c)

so that the iterations [0, T) run a copy of the body simplified under v < T (the guards gone,
the vector loop a plain vector loop) and [T, extent) run the body as it was (the tail: masked
vector stores, guarded rows). A serial loop becomes two loops, or the main loop and one guarded
iteration when the tail is at most one; a parallel loop stays one loop (one launch on the
threads) whose body branches on v < T. max(rest) keeps SizeVars and the enclosing loops'
variables symbolic, so T is an expression computed when the loop starts.
"""

from __future__ import annotations

from tvmc.te.expr import INDEX, BinOp, Cmp, IntImm, PrimExpr, SizeVar, Var, substitute, walk
from tvmc.tir.ir import Allocate, For, IfThenElse, Seq, Stmt
from tvmc.tir.simplify import Linear, atom_bounds, expr_bounds, simplify, simplify_stmt

PARTITIONED_KINDS = ("serial", "parallel")


def partition_loops(s: Stmt, ranges: dict | None = None, only=None) -> Stmt:
    """`s` with every serial or parallel loop that holds a partitionable guard split into its
    main part and its tail (see the module docstring); `ranges` (Var -> extent) are the loops
    enclosing `s`; `only`: a set of loop Vars, the only loops split (Stage.partition, in kernels
    of constant shapes), or None for every loop."""
    return _partition(s, dict(ranges or {}), only)


def _partition(s: Stmt, ranges: dict, only=None) -> Stmt:
    if isinstance(s, For):
        if s.kind in PARTITIONED_KINDS and (only is None or s.var in only):
            threshold = _threshold(s, ranges)
            if threshold is not None:
                return _split(s, threshold, ranges, only)
        return For(s.var, s.extent, s.kind, _partition(s.body, {**ranges, s.var: s.extent}, only), s.min_parallel)
    if isinstance(s, Seq):
        return Seq([_partition(x, ranges, only) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _partition(s.body, ranges, only))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _partition(s.then, ranges, only),
                          _partition(s.otherwise, ranges, only) if s.otherwise is not None else None)
    return s


def _split(loop: For, threshold: PrimExpr, ranges: dict, only=None) -> Stmt:
    """`loop` as its iterations [0, threshold) without the guards, then the rest."""
    v, ext = loop.var, loop.extent
    main = _partition(simplify_stmt(loop.body, {**ranges, v: threshold}), {**ranges, v: threshold}, only)
    if loop.kind == "parallel":
        tail = _partition(simplify_stmt(loop.body, {**ranges, v: ext}), {**ranges, v: ext}, only)
        return For(v, ext, loop.kind, IfThenElse(v < threshold, main, tail), loop.min_parallel)
    first = For(v, threshold, loop.kind, main)
    rest = simplify(ext - threshold, ranges)
    bound = expr_bounds(rest, ranges)
    if bound is not None and bound[1] <= 1:  # at most one iteration: no loop
        last = _partition(simplify_stmt(_subst(loop.body, {v: threshold}), ranges), ranges, only)
        return first if _empty(last) else Seq([first, IfThenElse(simplify(threshold < ext, ranges), last)])
    t = Var(v.name + "_tail", INDEX)
    tail_ranges = {**ranges, t: rest}
    tail = _partition(simplify_stmt(_subst(loop.body, {v: t + threshold}), tail_ranges), tail_ranges, only)
    return first if _empty(tail) else Seq([first, For(t, rest, loop.kind, tail)])


def _empty(s: Stmt) -> bool:
    """Whether `s` does nothing (a guard that the tail can never pass leaves an empty body)."""
    if isinstance(s, Seq):
        return all(_empty(x) for x in s.stmts)
    if isinstance(s, (For, Allocate)):
        return _empty(s.body)
    if isinstance(s, IfThenElse):
        return _empty(s.then) and (s.otherwise is None or _empty(s.otherwise))
    return False


def _threshold(loop: For, ranges: dict):
    """T for `loop` (see the module docstring) from the first partitionable guard in its body,
    or None: no guard, or T is not provably within [0, extent) (nothing to split)."""
    v, ext = loop.var, loop.extent
    outer = {**ranges, v: ext}
    for cmp, inner in _guards(loop.body, {}):
        t = _guard_threshold(cmp, v, inner, outer)
        if t is None:
            continue
        lo = expr_bounds(t, ranges)
        room = expr_bounds(ext - t, ranges)
        if lo is None or room is None or lo[0] < 0 or room[0] < 0 or room[1] <= 0:
            continue
        return t
    return None


def _guards(s: Stmt, inner: dict):
    """(comparison, the loops around it inside the partitioned loop: Var -> extent) for every
    conjunct of every IfThenElse condition in `s`."""
    if isinstance(s, For):
        yield from _guards(s.body, {**inner, s.var: s.extent})
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _guards(x, inner)
    elif isinstance(s, Allocate):
        yield from _guards(s.body, inner)
    elif isinstance(s, IfThenElse):
        for c in _conjuncts(s.cond):
            if isinstance(c, Cmp):
                yield c, inner
        yield from _guards(s.then, inner)
        if s.otherwise is not None:
            yield from _guards(s.otherwise, inner)


def _conjuncts(cond):
    if isinstance(cond, BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _negative_form(cmp: Cmp):
    """The Linear d with `cmp` equivalent to d < 0, or None (==, !=, not int64)."""
    if cmp.a.dtype != INDEX:
        return None
    a, b = Linear.of(simplify(cmp.a)), Linear.of(simplify(cmp.b))
    if cmp.op == "lt":
        return a.add(b, -1)
    if cmp.op == "le":
        return a.add(b, -1).add(Linear(const=-1))
    if cmp.op == "gt":
        return b.add(a, -1)
    if cmp.op == "ge":
        return b.add(a, -1).add(Linear(const=-1))
    return None


def _guard_threshold(cmp: Cmp, v: Var, inner: dict, outer: dict):
    """T such that `cmp` holds for every v < T and every value of the `inner` loops, or None
    when `cmp` is not of the form a * w + rest < 0 (w = v or v // c, a > 0)."""
    d = _negative_form(cmp)
    if d is None:
        return None
    coef, scale, rest = 0, 1, Linear(const=d.const)
    for key, (atom, c) in d.terms.items():
        if atom is v:
            coef, scale = c, 1
        elif isinstance(atom, BinOp) and atom.op == "floordiv" and atom.a is v and isinstance(atom.b, IntImm) \
                and atom.b.value > 0:
            coef, scale = c, atom.b.value
        else:
            rest = rest.add(Linear({key: (atom, c)}))
    if coef <= 0 or sum(1 for atom, _ in d.terms.values() if atom is v or (isinstance(atom, BinOp) and atom.a is v
                                                                           and atom.op == "floordiv")) != 1:
        return None
    top = _upper_form(rest, v, inner, outer)
    if top is None:
        return None
    numerator = top.scale(-1).add(Linear(const=coef - 1)).to_expr()
    t = simplify(BinOp("floordiv", numerator, IntImm(coef)) * IntImm(scale), outer)
    if any(isinstance(x, Var) and not isinstance(x, SizeVar) and x not in outer for x in walk(t)) or \
            any(x is v for x in walk(t)):
        return None
    return t


def _upper_form(rest: Linear, v: Var, inner: dict, outer: dict):
    """An upper bound of `rest` over the `inner` loops and every v in its loop, as a Linear that
    keeps SizeVars and the variables of loops outside v symbolic; None when an atom is unbounded."""
    out = Linear(const=rest.const)
    local = set(inner) | {v}
    for key, (atom, c) in rest.terms.items():
        names = {x for x in walk(atom) if isinstance(x, Var) and not isinstance(x, SizeVar)}
        if not names & local:
            out = out.add(Linear({key: (atom, c)}))
        elif isinstance(atom, Var) and atom in inner:
            if c > 0:
                ext = inner[atom]
                last = Linear(const=ext - 1) if isinstance(ext, int) else Linear.of(simplify(ext - 1, outer))
                out = out.add(last.scale(c))
        else:
            b = atom_bounds(atom, {**outer, **inner})
            if b is None:
                return None
            out = out.add(Linear(const=c * (b[1] if c > 0 else b[0])))
    return out


def _subst(s: Stmt, mapping: dict) -> Stmt:
    """`s` with the variables of `mapping` replaced in every expression and loop extent."""
    from tvmc.tir.ir import Intrinsic, Store

    def sub(e):
        return substitute(e, mapping) if isinstance(e, PrimExpr) else e

    if isinstance(s, For):
        return For(s.var, sub(s.extent), s.kind, _subst(s.body, mapping), s.min_parallel)
    if isinstance(s, Store):
        return Store(s.buffer, sub(s.index), sub(s.value))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _subst(s.body, mapping))
    if isinstance(s, Seq):
        return Seq([_subst(x, mapping) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(sub(s.cond), _subst(s.then, mapping),
                          _subst(s.otherwise, mapping) if s.otherwise is not None else None)
    if isinstance(s, Intrinsic):
        return s.with_exprs([sub(e) for e in s.exprs])
    return s
