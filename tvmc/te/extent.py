"""Extent arithmetic for symbolic shapes: a tensor dimension or loop extent is a Python int, or an
int64 expression of SizeVars (te.SizeVar, bounded by [lo, hi]). Every helper keeps static extents
plain ints, so a kernel without SizeVars is scheduled and lowered exactly as before; symbolic
ones are kept simplified (tvmc.tir.simplify) and bounded by their SizeVars' ranges (TVM's
arith::Analyzer on tir.SizeVar shapes).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools

from tvmc.te.expr import INDEX, BinOp, IntImm, PrimExpr, SizeVar, evaluate_int, register_graph_extent, walk

# {graph size variable name: te.SizeVar} while a fused function with symbolic shapes is lowered
# (bind_graph_vars); graph SymExprs met as extents or operands become expressions of these
_GRAPH_VARS: contextvars.ContextVar = contextvars.ContextVar("tvmc_graph_size_vars", default=None)


@contextlib.contextmanager
def bind_graph_vars(variables: dict):
    """Within the block, a graph shape expression (tvmc.graph.symbolic.SymExpr) used as an extent
    (te.placeholder / te.compute shapes, IterVar extents) or as an operand of a te expression is
    the int64 te expression of the SizeVars `variables` ({graph variable name: te.SizeVar}), so
    op computes written for static shapes take the graph's symbolic types unchanged."""
    token = _GRAPH_VARS.set(dict(variables))
    try:
        yield
    finally:
        _GRAPH_VARS.reset(token)


def graph_vars() -> dict | None:
    """The binding of bind_graph_vars in force ({graph variable name: te.SizeVar}), or None."""
    return _GRAPH_VARS.get()


def from_graph(x):
    """The te form of graph dimension `x`: an int stays an int; a SymExpr (canonical polynomial
    over SizeVars and floordiv / floormod / min / max atoms) becomes the int64 expression over the
    bound SizeVars (bind_graph_vars), simplified. Raises TypeError outside a binding or for a
    variable the binding lacks."""
    from tvmc.graph import symbolic

    if not isinstance(x, symbolic.SymExpr):
        return x
    variables = _GRAPH_VARS.get()
    if variables is None:
        raise TypeError(f"symbolic extent {x} outside a binding of its size variables (bind_graph_vars)")

    def conv(v):
        if isinstance(v, int):
            return IntImm(v)
        total = None
        for mono, c in v.terms:
            term = IntImm(c) if (not mono or c != 1) else None
            for atom in mono:
                if isinstance(atom, symbolic.SizeVar):
                    if atom.name not in variables:
                        raise TypeError(f"symbolic extent {x}: no kernel variable for {atom.name}")
                    f = variables[atom.name]
                else:
                    a, b = (conv(arg) for arg in atom.args)
                    f = BinOp(atom.op, a, b)
                term = f if term is None else term * f
            total = term if total is None else total + term
        return total

    return as_extent(conv(x))


register_graph_extent(from_graph)


def _simplifier():
    """tvmc.tir.simplify, imported when first needed (it imports the loop IR, which uses this module)."""
    from tvmc.tir import simplify

    return simplify


def as_extent(x):
    """`x` as an extent: an int (Python or numpy int, IntImm, or an expression that folds to a
    constant), else the simplified int64 expression. Raises TypeError for another dtype."""
    if isinstance(x, IntImm):
        return x.value
    if _GRAPH_VARS.get() is not None and type(x).__name__ == "SymExpr":
        x = from_graph(x)
        if not isinstance(x, PrimExpr):
            return int(x)
    if isinstance(x, PrimExpr):
        if x.dtype != INDEX:
            raise TypeError(f"extent {x!r} is {x.dtype}, not {INDEX}")
        e = _simplifier().simplify(x)
        return e.value if isinstance(e, IntImm) else e
    return int(x)


def is_static(x) -> bool:
    """Whether extent `x` is a constant (an int)."""
    return not isinstance(x, PrimExpr)


def is_static_shape(shape) -> bool:
    """Whether every dimension of `shape` is a constant."""
    return all(is_static(d) for d in shape)


def size_vars(*items) -> list:
    """The SizeVars in `items` (extents, expressions, or nested lists and tuples of them), in the
    order they first appear."""
    out, seen = [], set()

    def visit(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, PrimExpr):
            for n in walk(x):
                if isinstance(n, SizeVar) and n not in seen:
                    seen.add(n)
                    out.append(n)

    visit(items)
    return out


def bounds(x) -> tuple:
    """(lo, hi) of extent `x` over its SizeVars' ranges. Raises ValueError when an expression is
    not bounded (it holds something other than SizeVars and literals)."""
    if is_static(x):
        return int(x), int(x)
    b = _simplifier().expr_bounds(x)
    if b is None:
        raise ValueError(f"extent {x!r} is not bounded by its size variables")
    return b


def upper_bound(x) -> int:
    """The largest value extent `x` takes (the extent itself when static)."""
    return bounds(x)[1]


def lower_bound(x) -> int:
    """The smallest value extent `x` takes (the extent itself when static)."""
    return bounds(x)[0]


def upper_shape(shape) -> tuple:
    """`shape` with every dimension at its upper bound: what a schedule's tiles are chosen for."""
    return tuple(upper_bound(d) for d in shape)


def ceildiv(x, f: int):
    """ceil(x / f) for an extent x and a constant f > 0."""
    if is_static(x):
        return -(-int(x) // f)
    return as_extent((x + (f - 1)) // f)


def mul(a, b):
    """a * b of two extents."""
    if is_static(a) and is_static(b):
        return int(a) * int(b)
    return as_extent(IntImm(a) * b if is_static(a) else a * b)


def prod(extents):
    """The product of extents (1 for none)."""
    out = 1
    for e in extents:
        out = mul(out, e)
    return out


def divides(f: int, x) -> bool:
    """Whether the constant f divides extent x for every value of its SizeVars (an expression:
    when every coefficient of its linear form and its constant are multiples of f)."""
    if is_static(x):
        return int(x) % f == 0
    lin = _simplifier().Linear.of(x)
    return lin.const % f == 0 and all(c % f == 0 for _, c in lin.terms.values())


def provably_le(a, b) -> bool:
    """Whether extent a <= extent b for every value of their SizeVars."""
    if is_static(a) and is_static(b):
        return int(a) <= int(b)
    return lower_bound(as_extent(b - a if not is_static(b) else IntImm(b) - a)) >= 0


# the most points (tuples of SizeVar values) `same` evaluates an expression at to compare it
SAME_CHECK_POINTS = 4096


def same(a, b) -> bool:
    """Whether extents a and b are equal for every value of their SizeVars: their difference
    simplifies to 0, or (forms the simplifier does not bring together, such as a convolution's
    (H - 1) // 2 + 1 and the graph's (H + 1) // 2) it is 0 at every point of the variables' ranges
    where those hold at most SAME_CHECK_POINTS points."""
    if is_static(a) and is_static(b):
        return int(a) == int(b)
    d = as_extent((IntImm(a) if is_static(a) else a) - b)
    if is_static(d):
        return d == 0
    variables = size_vars(d)
    points = 1
    for v in variables:
        points *= v.hi - v.lo + 1
    if points > SAME_CHECK_POINTS:
        return False
    return all(evaluate_int(d, dict(zip(variables, p))) == 0
               for p in itertools.product(*(range(v.lo, v.hi + 1) for v in variables)))


def same_shape(a, b) -> bool:
    """Whether shapes a and b (sequences of extents) are equal for every value of their SizeVars."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


_PROGRAM_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%", "min": "min", "max": "max"}


def to_program(x, size_vars) -> int | list:
    """Extent `x` (an int, or an int64 expression of the SizeVars `size_vars`) as an int or a
    postfix program (tvmc.graph.symbolic.to_postfix's tokens, "$k" the k-th of `size_vars`;
    evaluated by tvmc.graph.symbolic.eval_postfix). Raises ValueError naming the first node that
    is not +, -, *, //, %, min, max of ints and those variables."""
    if is_static(x):
        return int(x)
    index = {v: k for k, v in enumerate(size_vars)}
    out: list = []

    def emit(e):
        if isinstance(e, IntImm):
            out.extend([e.value] if e.value >= 0 else [0, -e.value, "-"])
        elif isinstance(e, SizeVar) and e in index:
            out.append(f"${index[e]}")
        elif isinstance(e, BinOp) and e.op in _PROGRAM_OPS:
            emit(e.a)
            emit(e.b)
            out.append(_PROGRAM_OPS[e.op])
        else:
            raise ValueError(f"{e!r} is not an expression of the size variables")

    emit(x)
    return out


def evaluate(x, values: dict) -> int:
    """The value of extent `x` with SizeVars set by `values` (SizeVar -> int). Raises ValueError
    when one is missing."""
    return evaluate_int(x if not is_static(x) else int(x), values)
