"""Arithmetic simplification of loop-IR expressions: constant folding, linear index canonicalization,
and range-aware floordiv/floormod elimination (TVM's arith::Analyzer, reduced to affine forms).
"""

from __future__ import annotations

from tvmc.te.expr import (INDEX, BinOp, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, PrimExpr, Select, Var,
                          is_float, substitute, transform)
from tvmc.tir.ir import Allocate, Barrier, For, IfThenElse, Intrinsic, Seq, Stmt, Store


def _key(e):
    """Structural key: equal keys mean equal expressions."""
    if isinstance(e, Var):
        return ("v", id(e))
    if isinstance(e, IntImm):
        return ("i", e.value)
    if isinstance(e, FloatImm):
        return ("f", e.value)
    if isinstance(e, BinOp):
        return (e.op, _key(e.a), _key(e.b))
    if isinstance(e, Load):
        return ("ld", id(e.buffer), _key(e.index))
    return ("x", id(e))


class Linear:
    """sum(coef * atom) + const over int64 atoms (Vars or opaque non-linear sub-expressions)."""

    def __init__(self, terms=None, const=0):
        self.terms = dict(terms or {})  # key -> (atom, coef)
        self.const = const

    @staticmethod
    def of(e: PrimExpr) -> "Linear":
        if isinstance(e, IntImm):
            return Linear(const=e.value)
        if isinstance(e, BinOp) and e.op in ("add", "sub"):
            a, b = Linear.of(e.a), Linear.of(e.b)
            return a.add(b, 1 if e.op == "add" else -1)
        if isinstance(e, BinOp) and e.op == "mul":
            a, b = Linear.of(e.a), Linear.of(e.b)
            if not a.terms:
                return b.scale(a.const)
            if not b.terms:
                return a.scale(b.const)
        return Linear({_key(e): (e, 1)})

    def add(self, o: "Linear", sign=1) -> "Linear":
        t = dict(self.terms)
        for k, (atom, c) in o.terms.items():
            c0 = t.get(k, (atom, 0))[1]
            t[k] = (atom, c0 + sign * c)
        return Linear({k: v for k, v in t.items() if v[1] != 0}, self.const + sign * o.const)

    def scale(self, c: int) -> "Linear":
        if c == 0:
            return Linear()
        return Linear({k: (a, v * c) for k, (a, v) in self.terms.items()}, self.const * c)

    def coef(self, var: Var) -> int:
        return self.terms.get(_key(var), (None, 0))[1]

    def to_expr(self) -> PrimExpr:
        out = None
        # order by printed form (stable for ties), never by object ids: builds must be reproducible
        for atom, c in sorted(self.terms.values(), key=lambda ac: repr(ac[0])):
            term = atom if c == 1 else atom * IntImm(c)
            out = term if out is None else BinOp("add", out, term)
        if out is None:
            return IntImm(self.const)
        return BinOp("add", out, IntImm(self.const)) if self.const else out

    def bounds(self, ranges: dict):
        """(lo, hi) of this form when every atom has known bounds (see `atom_bounds`), else None."""
        lo = hi = self.const
        for atom, c in self.terms.values():
            b = atom_bounds(atom, ranges)
            if b is None:
                return None
            alo, ahi = b
            if c > 0:
                lo, hi = lo + c * alo, hi + c * ahi
            else:
                lo, hi = lo + c * ahi, hi + c * alo
        return lo, hi


def atom_bounds(atom: PrimExpr, ranges: dict):
    """(lo, hi) of an int64 atom, else None: a loop Var in [0, extent); x // c and x % c (c > 0)
    from the bounds of x (x % c is always in [0, c), floor semantics). Fused and split loop
    indices are such atoms: ((i.j // 56) % 4) lies in [0, 3]."""
    if isinstance(atom, Var):
        return (0, ranges[atom] - 1) if atom in ranges else None
    if isinstance(atom, BinOp) and atom.op in ("floordiv", "floormod") and isinstance(atom.b, IntImm) \
            and atom.b.value > 0:
        c = atom.b.value
        inner = Linear.of(atom.a).bounds(ranges)
        if atom.op == "floordiv":
            return None if inner is None else (inner[0] // c, inner[1] // c)
        if inner is not None and 0 <= inner[0] and inner[1] < c:
            return inner
        return 0, c - 1
    return None


def fold_int(op, a, b):
    """`a op b` for op in add, sub, mul, floordiv, floormod, min, max (Python semantics); None for
    another op or a division by zero."""
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "floordiv":
        return a // b if b else None
    if op == "floormod":
        return a % b if b else None
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    return None


def _divmod_linear(lin: Linear, c: int, ranges: dict):
    """Split lin = c*q + r with r provably in [0, c); returns (q, r) Linears or None."""
    q, r = Linear(), Linear()
    for k, (atom, coef) in lin.terms.items():
        if coef % c == 0:
            q.terms[k] = (atom, coef // c)
        else:
            r.terms[k] = (atom, coef)
    q.const, r.const = lin.const // c, lin.const % c
    b = r.bounds(ranges)
    if b is None or b[0] < 0 or b[1] >= c:
        return None
    return q, r


def simplify(e: PrimExpr, ranges: dict | None = None) -> PrimExpr:
    """Fold constants and canonicalize int64 index arithmetic.

    `ranges` maps loop Vars to their extents (var in [0, extent)), enabling
    floordiv/floormod elimination such as (i_outer*16 + i_inner) // 16 -> i_outer.
    """
    ranges = ranges or {}

    def rule(x):
        if isinstance(x, BinOp):
            a, b = x.a, x.b
            if isinstance(a, IntImm) and isinstance(b, IntImm) and x.dtype != "bool":
                v = fold_int(x.op, a.value, b.value)
                if v is not None:
                    return IntImm(v, x.dtype)
            if isinstance(a, FloatImm) and isinstance(b, FloatImm):
                fa, fb = a.value, b.value
                v = {"add": fa + fb, "sub": fa - fb, "mul": fa * fb,
                     "min": fa if fa != fa else fb if fb != fb else min(fa, fb),
                     "max": fa if fa != fa else fb if fb != fb else max(fa, fb)}.get(x.op)
                if v is None and x.op == "div" and fb != 0:
                    v = fa / fb
                if v is not None:
                    return FloatImm(v, x.dtype)
            if is_float(x.dtype):
                if x.op == "mul" and isinstance(b, FloatImm) and b.value == 1.0:
                    return a
                if x.op == "add" and isinstance(b, FloatImm) and b.value == 0.0:
                    return a
                return None
            if x.dtype != INDEX:  # canonical forms build int64 literals: index arithmetic only
                return None
            if x.op in ("add", "sub", "mul"):
                return Linear.of(x).to_expr()
            if x.op in ("floordiv", "floormod") and isinstance(b, IntImm) and b.value > 0:
                c = b.value
                if c == 1:
                    return a if x.op == "floordiv" else IntImm(0)
                qr = _divmod_linear(Linear.of(a), c, ranges)
                if qr is not None:
                    return (qr[0] if x.op == "floordiv" else qr[1]).to_expr()
            if x.op in ("min", "max"):
                la, lb = Linear.of(a), Linear.of(b)
                d = la.add(lb, -1)
                if not d.terms:
                    return a if (d.const <= 0) == (x.op == "min") else b
            return None
        if isinstance(x, Cmp) and x.a.dtype == INDEX:
            d = Linear.of(x.a).add(Linear.of(x.b), -1)
            bnd = d.bounds(ranges) if d.terms else (d.const, d.const)
            if bnd is not None:
                lo, hi = bnd
                truth = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
                         "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
                         "ne": (lo > 0 or hi < 0, lo == hi == 0)}[x.op]
                if truth[0]:
                    return IntImm(1, "bool")
                if truth[1]:
                    return IntImm(0, "bool")
            return None
        if isinstance(x, BinOp) and x.op in ("and", "or"):
            return None
        if isinstance(x, Not) and isinstance(x.a, IntImm):
            return IntImm(1 - x.a.value, "bool")
        if isinstance(x, Select) and isinstance(x.cond, IntImm):
            return x.t if x.cond.value else x.f
        if isinstance(x, Let) and isinstance(x.value, (IntImm, FloatImm, Var)):  # nothing left to bind
            return simplify(substitute(x.body, {x.var: x.value}), ranges)
        if isinstance(x, Cast) and isinstance(x.value, (IntImm, FloatImm)):
            if is_float(x.dtype):
                return FloatImm(float(x.value.value), x.dtype)
            if x.dtype != "bool":
                return IntImm(int(x.value.value), x.dtype)
        return None

    def bool_rule(x):
        if isinstance(x, BinOp) and x.op in ("and", "or"):
            a, b = x.a, x.b
            for p, q in ((a, b), (b, a)):
                if isinstance(p, IntImm):
                    if x.op == "and":
                        return q if p.value else IntImm(0, "bool")
                    return IntImm(1, "bool") if p.value else q
        return rule(x)

    return transform(e, bool_rule)


def simplify_stmt(s: Stmt, ranges: dict | None = None) -> Stmt:
    """Simplify every expression in a statement tree, with loop extents as ranges; drops
    statically true guards and statically false branches."""
    ranges = dict(ranges or {})
    if isinstance(s, For):
        ranges[s.var] = s.extent
        return For(s.var, s.extent, s.kind, simplify_stmt(s.body, ranges))
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges), simplify(s.value, ranges))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, simplify_stmt(s.body, ranges))
    if isinstance(s, Seq):
        return Seq([simplify_stmt(x, ranges) for x in s.stmts])
    if isinstance(s, IfThenElse):
        c = simplify(s.cond, ranges)
        if isinstance(c, IntImm):
            if c.value:
                return simplify_stmt(s.then, ranges)
            return simplify_stmt(s.otherwise, ranges) if s.otherwise is not None else Seq([])
        return IfThenElse(c, simplify_stmt(s.then, ranges),
                          simplify_stmt(s.otherwise, ranges) if s.otherwise is not None else None)
    if isinstance(s, Barrier):
        return s
    if isinstance(s, Intrinsic):
        return s.with_exprs([simplify(e, ranges) for e in s.exprs])
    raise TypeError(s)
