"""Graph IR, symbolic shapes: integer expressions of named, bounded size variables.

A tensor dimension of the graph IR is an `int` or a `SymExpr`: an integer expression of
`SizeVar`s (a named variable with inclusive bounds lo..hi, TVM's `tir.SizeVar` as Relax's
symbolic shapes use it) built with +, -, *, floordiv (`//`), floormod (`%`), `min_` and `max_`.

Canonical form (TVM's arith canonical simplifier, reduced to what shapes need): an expression is
a polynomial, a sum of monomials with integer coefficients, each monomial a sorted product of
atoms; an atom is a variable or an application floordiv / floormod / min / max that did not
simplify. Division by a constant c > 0 splits the dividend into the part divisible by c and a
remainder (coefficients in 0..c-1), divides out the gcd of the remainder's coefficients and c,
and drops the remainder's floordiv when its bounds prove it in 0..c'-1; `b * (x // b) + x % b`
becomes x; min/max of operands whose difference has a provable sign is that operand. So equal
expressions built by the arithmetic of shapes (`(s*64)//64`, `s+1-1`, `(s//4)*4 + s%4`) compare
equal and hash alike; an expression that is a constant is a plain `int`.

Bounds are interval arithmetic over the canonical form (`bounds`); comparisons (`<`, `<=`,
`>`, `>=`) give a `Condition` that is True or False where the bounds decide it and raises
`SymbolicError` (a ValueError: a type rule's error, named after its node) where they do not;
`can_prove` asks without raising. `==` and `hash` are structural (equal canonical forms).
`int()` of a symbolic expression raises SymbolicError: code that needs a static extent says so.

Source: TVM's arith module (src/arith/canonical_simplify.cc: SplitExpr and SumExpr; const_int_bound.cc:
interval bounds), tir.SizeVar, and Relax's symbolic shape design (relax.ShapeExpr of PrimExprs).
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["SymbolicError", "SizeVar", "SymExpr", "Condition", "size_var", "min_", "max_", "floordiv", "floormod",
           "prod", "bounds", "exact_bounds", "upper_bound", "lower_bound", "can_prove", "can_prove_equal",
           "substitute", "free_vars", "is_symbolic", "describe_vars"]


class SymbolicError(ValueError):
    """A symbolic expression where a static value, or a fact the bounds cannot prove, is needed.
    A ValueError, so an operator's type rule that meets one becomes the node's ModelError."""


# ---------------------------------------------------------------------------------------------
# atoms: variables and applications that did not simplify


class SizeVar:
    """A named integer variable with inclusive bounds `lo` <= value <= `hi` (ints, lo <= hi).
    Compared and hashed by (name, lo, hi). Build expressions from `size_var`, which wraps one."""

    __slots__ = ("name", "lo", "hi", "key")

    def __init__(self, name: str, lo: int, hi: int):
        self.name, self.lo, self.hi = str(name), int(lo), int(hi)
        if self.lo > self.hi:
            raise SymbolicError(f"size variable '{self.name}': empty range {self.lo}..{self.hi}")
        self.key = (0, self.name, self.lo, self.hi)

    def __eq__(self, other):
        return isinstance(other, SizeVar) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"{self.name} in {self.lo}..{self.hi}"


class _Apply:
    """An atom `op(args)` (op: floordiv, floormod, min, max) whose arguments are canonical
    (int or SymExpr); min and max keep their arguments sorted."""

    __slots__ = ("op", "args", "key")

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args
        self.key = (1, op, tuple(_key(a) for a in args))

    def __eq__(self, other):
        return isinstance(other, _Apply) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _key(x) -> tuple:
    """A total order over canonical values: ints first, then expressions by their terms."""
    return (0, x) if isinstance(x, int) else (1, x.key)


# ---------------------------------------------------------------------------------------------
# the expression: a canonical polynomial over atoms


def _as_int(x):
    """int for Python and numpy integers (bool refused), the SymExpr itself, else None."""
    if isinstance(x, SymExpr):
        return x
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return int(x)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return None


def _poly(x) -> dict:
    """{monomial (sorted tuple of atoms): coefficient} of a canonical value; () is the constant."""
    if isinstance(x, int):
        return {(): x} if x else {}
    return dict(x.terms)


def _mono_mul(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(a + b, key=lambda atom: atom.key))


def _add_poly(p: dict, q: dict, scale: int = 1) -> dict:
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + scale * c
    return out


def _mul_poly(p: dict, q: dict) -> dict:
    out: dict = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = _mono_mul(m1, m2)
            out[m] = out.get(m, 0) + c1 * c2
    return out


def _wrap(p: dict):
    """The canonical value of polynomial `p`: zero terms dropped, `b * (x // b) + x % b` merged
    into x, an int when only the constant is left."""
    p = {m: c for m, c in p.items() if c}
    changed = True
    while changed:
        changed = False
        for m, k in list(p.items()):
            if len(m) != 1 or not isinstance(m[0], _Apply) or not isinstance(m[0].args[-1], int):
                continue
            x, b = m[0].args
            if m[0].op == "floormod":  # k * (x % b) + k * b * (x // b) -> k * x
                div = (_Apply("floordiv", (x, b)),)
                if p.get(div) == k * b:
                    del p[m], p[div]
                    p = {mm: c for mm, c in _add_poly(p, _poly(x), k).items() if c}
                    changed = True
                    break
            elif m[0].op == "floordiv" and k % b == 0:  # n * x - n * b * (x // b) -> n * (x % b)
                n = -k // b
                terms = {mm: c for mm, c in _poly(x).items() if mm}
                if all(p.get(mm) == n * c for mm, c in terms.items()):
                    p = _add_poly(p, _poly(x), -n)
                    p[m] = 0
                    p = {mm: c for mm, c in _add_poly(p, _poly(floormod(x, b)), n).items() if c}
                    changed = True
                    break
    if not p:
        return 0
    if list(p) == [()]:
        return p[()]
    return SymExpr(tuple(sorted(p.items(), key=lambda mc: tuple(a.key for a in mc[0]))))


def _canon(x, what: str = "operand"):
    v = _as_int(x)
    if v is None:
        raise TypeError(f"a symbolic shape {what} must be an int or a SymExpr, got {type(x).__name__}")
    return v


class SymExpr:
    """A symbolic integer expression in canonical form (module docstring). Immutable.

    terms: ((monomial, coefficient), ...) sorted; a monomial is a sorted tuple of atoms
    (SizeVar or an unsimplified floordiv/floormod/min/max), () the constant term.
    Arithmetic with ints and other SymExprs returns a canonical value (an int when constant);
    `/` is refused (shapes use floor division). Comparisons return a `Condition`.
    """

    __slots__ = ("terms", "key", "_hash", "_bounds")
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    def __init__(self, terms: tuple):
        self.terms = terms
        self.key = tuple((tuple(a.key for a in m), c) for m, c in terms)
        self._hash = hash(self.key)
        self._bounds = None

    # -- arithmetic --------------------------------------------------------------------------
    def __add__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else _wrap(_add_poly(_poly(self), _poly(other)))

    __radd__ = __add__

    def __sub__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else _wrap(_add_poly(_poly(self), _poly(other), -1))

    def __rsub__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else _wrap(_add_poly(_poly(other), _poly(self), -1))

    def __mul__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else _wrap(_mul_poly(_poly(self), _poly(other)))

    __rmul__ = __mul__

    def __neg__(self):
        return _wrap({m: -c for m, c in self.terms})

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else floordiv(self, other)

    def __rfloordiv__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else floordiv(other, self)

    def __mod__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else floormod(self, other)

    def __rmod__(self, other):
        other = _as_int(other)
        return NotImplemented if other is None else floormod(other, self)

    def __truediv__(self, other):
        raise SymbolicError(f"true division of the symbolic extent {self}; shapes divide with // (floordiv)")

    __rtruediv__ = __truediv__

    # -- comparisons -------------------------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, SymExpr) and self.key == other.key

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return self._hash

    def _compare(self, other, op):
        other = _as_int(other)
        return NotImplemented if other is None else Condition(self, op, other)

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __bool__(self):
        lo, hi = bounds(self)
        if lo > 0 or hi < 0:
            return True
        raise SymbolicError(f"cannot decide whether {self} is nonzero ({describe_vars([self])})")

    # -- no static value -----------------------------------------------------------------------
    def _static(self, *args):
        raise SymbolicError(f"the extent {self} is symbolic ({describe_vars([self])}); a static value is needed here")

    __int__ = __index__ = __float__ = _static

    def __str__(self):
        return _str(self)

    __repr__ = __str__


class Condition:
    """`lhs op rhs` (op one of <, <=, >, >=) over ints and SymExprs. bool() is its truth where the
    bounds of lhs - rhs decide it, else raises SymbolicError naming both sides and the variables'
    ranges; `decide()` gives True, False or None (unknown)."""

    __slots__ = ("lhs", "op", "rhs")

    def __init__(self, lhs, op: str, rhs):
        self.lhs, self.op, self.rhs = lhs, op, rhs

    def decide(self):
        diff = self.lhs - self.rhs
        verdict = self._decide(*bounds(diff))
        if verdict is None:
            exact = exact_bounds(diff)
            verdict = None if exact is None else self._decide(*exact)
        return verdict

    def _decide(self, lo, hi):
        test = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0), ">=": (lo >= 0, hi < 0)}
        true, false = test[self.op]
        return True if true else False if false else None

    def __bool__(self):
        verdict = self.decide()
        if verdict is None:
            raise SymbolicError(f"cannot prove or disprove {self} ({describe_vars([self.lhs, self.rhs])})")
        return verdict

    def __str__(self):
        return f"{self.lhs} {self.op} {self.rhs}"

    __repr__ = __str__


# ---------------------------------------------------------------------------------------------
# constructors and operations


def size_var(name: str, lo: int, hi: int):
    """The expression of a new size variable `name` in lo..hi (inclusive ints); lo == hi gives the
    int itself. Raises SymbolicError on an empty range."""
    var = SizeVar(name, lo, hi)
    return var.lo if var.lo == var.hi else SymExpr((((var,), 1),))


def _split_const_div(p: dict, c: int):
    """(quotient, remainder) polynomials with p = c * quotient + remainder, every coefficient of
    the remainder in 0..c-1 (c > 0)."""
    q, r = {}, {}
    for m, k in p.items():
        q[m], r[m] = divmod(k, c)
    return q, r


def _exact_div(p: dict, d: dict):
    """p / d as a polynomial when d is one term that divides every term of p exactly, else None."""
    if len(d) != 1:
        return None
    (md, cd), = d.items()
    out = {}
    for m, k in p.items():
        rest = list(m)
        for atom in md:
            if atom not in rest:
                return None
            rest.remove(atom)
        if k % cd:
            return None
        out[tuple(rest)] = k // cd
    return out


def _reduce_by_const(a, c: int):
    """For floor division of canonical `a` by the int c > 0: (q, g, x, k0) with
    a = c*q + g*x + k0 where x is canonical, g = gcd of the remainder's coefficients and c,
    0 <= k0 < g; then a // c = q + x // (c // g) and a % c = g * (x % (c // g)) + k0."""
    q, r = _split_const_div(_poly(a), c)
    const = r.pop((), 0)
    g = math.gcd(c, *[k for k in r.values() if k]) if any(r.values()) else c
    x = _wrap({**{m: k // g for m, k in r.items()}, (): const // g})
    return _wrap(q), g, x, const % g


def floordiv(a, b):
    """floor(a / b) of ints / SymExprs (TVM's floordiv), simplified as the module docstring says.
    Raises SymbolicError for a divisor that is 0 (or may be 0 where nothing else simplifies)."""
    a, b = _canon(a, "dividend"), _canon(b, "divisor")
    if isinstance(b, int):
        if b == 0:
            raise SymbolicError(f"division of {a} by zero")
        if b < 0:
            return floordiv(-a, -b)
        if isinstance(a, int):
            return a // b
        if all(c < 0 for m, c in a.terms if m):  # floor(a / b) = -ceil(-a / b): the ceil-division form
            return -floordiv(-a + b - 1, b)
        q, g, x, _ = _reduce_by_const(a, b)
        c = b // g
        if isinstance(x, int):
            return q + x // c
        lo, hi = bounds(x)
        if _same_quotient(lo, hi, c):
            return q + lo // c
        nested = _nested_floordiv(x)
        if nested is not None:  # (y // d + k) // c = (y + k * d) // (d * c)
            y, d, k = nested
            return q + floordiv(y + k * d, d * c)
        return q + _atom("floordiv", (x, c))
    if a == b:
        _nonzero_divisor(b, a)
        return 1
    exact = _exact_div(_poly(a), _poly(b))
    if exact is not None:
        _nonzero_divisor(b, a)
        return _wrap(exact)
    if can_prove(b > 0) and can_prove(a >= 0) and can_prove(a < b):
        return 0
    return _atom("floordiv", (a, b))


def floormod(a, b):
    """a - b * floor(a / b) of ints / SymExprs (TVM's floormod: the divisor's sign), simplified as
    the module docstring says. Raises SymbolicError for a divisor that is 0."""
    a, b = _canon(a, "dividend"), _canon(b, "divisor")
    if isinstance(b, int):
        if b == 0:
            raise SymbolicError(f"remainder of {a} by zero")
        if b < 0:
            return -floormod(-a, -b)
        if isinstance(a, int):
            return a % b
        _, g, x, k0 = _reduce_by_const(a, b)
        c = b // g
        if isinstance(x, int):
            return g * (x % c) + k0
        lo, hi = bounds(x)
        if _same_quotient(lo, hi, c):
            return g * (x - (lo // c) * c) + k0
        return g * _atom("floormod", (x, c)) + k0
    if a == b or _exact_div(_poly(a), _poly(b)) is not None:
        _nonzero_divisor(b, a)
        return 0
    if can_prove(b > 0) and can_prove(a >= 0) and can_prove(a < b):
        return a
    return _atom("floormod", (a, b))


def _nested_floordiv(x):
    """(y, d, k) when canonical `x` is y // d + k (d, k ints), else None."""
    terms = [(m, c) for m, c in x.terms if m]
    if len(terms) != 1 or terms[0][1] != 1 or len(terms[0][0]) != 1:
        return None
    atom = terms[0][0][0]
    if not isinstance(atom, _Apply) or atom.op != "floordiv" or not isinstance(atom.args[1], int):
        return None
    return atom.args[0], atom.args[1], _poly(x).get((), 0)


def _same_quotient(lo, hi, c: int) -> bool:
    """True when every value in lo..hi (finite) has the same floor quotient by c > 0."""
    return math.inf not in (abs(lo), abs(hi)) and lo // c == hi // c


def _nonzero_divisor(b, a):
    lo, hi = bounds(b)
    if lo <= 0 <= hi:
        raise SymbolicError(f"division of {a} by {b}, which may be 0 ({describe_vars([b])})")


def _atom(op: str, args: tuple):
    return SymExpr((((_Apply(op, args),), 1),))


def min_(a, b):
    """The smaller of ints / SymExprs: the operand itself where the sign of a - b is provable,
    else a min atom (arguments in canonical order)."""
    return _extreme("min", _canon(a), _canon(b))


def max_(a, b):
    """The larger of ints / SymExprs (see min_)."""
    return _extreme("max", _canon(a), _canon(b))


def _extreme(op, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if op == "min" else max(a, b)
    if a == b:
        return a
    lo, hi = bounds(a - b)
    if lo < 0 < hi:
        lo, hi = exact_bounds(a - b) or (lo, hi)
    if hi <= 0:
        return a if op == "min" else b
    if lo >= 0:
        return b if op == "min" else a
    return _atom(op, tuple(sorted((a, b), key=_key)))


def prod(dims: Iterable):
    """The product of ints / SymExprs (1 when empty): an int for ints (no overflow), else canonical."""
    out = 1
    for d in dims:
        out = out * _canon(d, "dimension")
    return out


# ---------------------------------------------------------------------------------------------
# bounds and proofs


def _mul_bound(x, y):
    return 0 if x == 0 or y == 0 else x * y


def _interval_mul(a: tuple, b: tuple) -> tuple:
    corners = [_mul_bound(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _interval_pow(lo, hi, k: int) -> tuple:
    ends = (lo ** k if abs(lo) != math.inf else (math.inf if k % 2 == 0 else lo),
            hi ** k if abs(hi) != math.inf else (math.inf if k % 2 == 0 else hi))
    if k % 2 == 0 and lo < 0 < hi:
        return 0, max(ends)
    return min(ends), max(ends)


def _atom_bounds(atom) -> tuple:
    if isinstance(atom, SizeVar):
        return atom.lo, atom.hi
    op, (a, b) = atom.op, atom.args
    (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
    if op == "min":
        return min(alo, blo), min(ahi, bhi)
    if op == "max":
        return max(alo, blo), max(ahi, bhi)
    if blo <= 0 <= bhi:
        return -math.inf, math.inf
    if op == "floordiv":
        corners = [_floor_div_bound(x, y) for x in (alo, ahi) for y in (blo, bhi)]
        return min(corners), max(corners)
    # floormod: the divisor's sign
    if blo > 0:
        return (0, min(bhi - 1, ahi)) if alo >= 0 else (0, bhi - 1)
    return (max(blo + 1, alo), 0) if ahi <= 0 else (blo + 1, 0)


def _floor_div_bound(x, y):
    if abs(y) == math.inf:
        return 0 if abs(x) != math.inf else (math.inf if (x > 0) == (y > 0) else -math.inf)
    if abs(x) == math.inf:
        return x if y > 0 else -x
    return x // y


def bounds(x) -> tuple:
    """(lo, hi): the least and greatest value int / SymExpr `x` can take with every variable in its
    range (interval arithmetic over the canonical form; sound, not always tight: a bound may be
    math.inf / -math.inf where a divisor's range holds 0)."""
    x = _canon(x)
    if isinstance(x, int):
        return x, x
    if x._bounds is None:
        lo = hi = 0
        for mono, c in x.terms:
            t = (1, 1)
            i = 0
            while i < len(mono):
                j = i
                while j < len(mono) and mono[j] == mono[i]:
                    j += 1
                t = _interval_mul(t, _interval_pow(*_atom_bounds(mono[i]), j - i))
                i = j
            t = _interval_mul(t, (c, c))
            lo, hi = lo + t[0], hi + t[1]
        x._bounds = (lo, hi)
    return x._bounds


# The most points (value combinations of an expression's variables) exact_bounds evaluates.
ENUMERATE_MAX = 4096


def exact_bounds(x):
    """(lo, hi) of int / SymExpr `x` evaluated at every combination of its variables' values, when
    there are at most ENUMERATE_MAX of them (an exhaustive proof where interval arithmetic loses
    the correlation between terms, e.g. x - x // 2 >= 1); None for larger domains or a division by
    zero somewhere in the domain."""
    x = _canon(x)
    if isinstance(x, int):
        return x, x
    variables = free_vars(x)
    if math.prod(v.hi - v.lo + 1 for v in variables) > ENUMERATE_MAX:
        return None
    import itertools

    lo = hi = None
    try:
        for point in itertools.product(*(range(v.lo, v.hi + 1) for v in variables)):
            value = _evaluate(x, dict(zip(variables, point)))
            lo = value if lo is None or value < lo else lo
            hi = value if hi is None or value > hi else hi
    except ZeroDivisionError:
        return None
    return lo, hi


def _evaluate(x, env: dict) -> int:
    """The int value of canonical `x` with the SizeVars of `env` ({SizeVar: int}) set; raises
    ZeroDivisionError where a divisor is 0."""
    if isinstance(x, int):
        return x
    total = 0
    for mono, c in x.terms:
        for atom in mono:
            if isinstance(atom, SizeVar):
                c *= env[atom]
            else:
                a, b = (_evaluate(arg, env) for arg in atom.args)
                if atom.op == "floordiv":
                    c *= a // b
                elif atom.op == "floormod":
                    c *= a % b
                else:
                    c *= min(a, b) if atom.op == "min" else max(a, b)
        total += c
    return total


def upper_bound(x):
    """The greatest value `x` can take (bounds(x)[1])."""
    return bounds(x)[1]


def lower_bound(x):
    """The least value `x` can take (bounds(x)[0])."""
    return bounds(x)[0]


def can_prove(cond) -> bool:
    """True when `cond` (a bool, or a Condition such as `e >= 0`) holds for every value of its
    variables; False when it does not or cannot be proven. Never raises."""
    if isinstance(cond, Condition):
        return cond.decide() is True
    return bool(cond)


def can_prove_equal(a, b) -> bool:
    """True when ints / SymExprs a and b are equal for every value of their variables (equal
    canonical forms, or a difference whose bounds are 0..0)."""
    a, b = _canon(a), _canon(b)
    return a == b or bounds(a - b) == (0, 0)


# ---------------------------------------------------------------------------------------------
# variables, substitution, printing


def is_symbolic(x) -> bool:
    """True for a SymExpr (a dimension with variables), False for ints."""
    return isinstance(x, SymExpr)


def free_vars(xs) -> list:
    """The SizeVars in a value or an iterable of values (ints, SymExprs, SizeVars, nested tuples and
    lists), sorted by name."""
    found: dict = {}

    def visit(x):
        if isinstance(x, SizeVar):
            found[x.key] = x
        elif isinstance(x, SymExpr):
            for mono, _ in x.terms:
                for atom in mono:
                    if isinstance(atom, SizeVar):
                        found[atom.key] = atom
                    else:
                        for a in atom.args:
                            visit(a)
        elif isinstance(x, (tuple, list)):
            for y in x:
                visit(y)

    visit(xs)
    return [found[k] for k in sorted(found, key=lambda k: k[1:])]


def describe_vars(xs) -> str:
    """'seq in 1..512, batch in 1..16': the variables of `xs` with their ranges."""
    return ", ".join(repr(v) for v in free_vars(list(xs))) or "no variables"


def substitute(x, values: dict):
    """`x` with the variables named in `values` ({name: int or SymExpr}) replaced, simplified again
    (an int when every variable is given). Raises SymbolicError when an int value lies outside its
    variable's range. Evaluating a shape at a concrete size: substitute(dim, {"seq": 77})."""
    x = _canon(x)
    if isinstance(x, int):
        return x
    out = 0
    for mono, c in x.terms:
        term = c
        for atom in mono:
            term = term * _substitute_atom(atom, values)
        out = out + term
    return out


def _substitute_atom(atom, values):
    if isinstance(atom, SizeVar):
        if atom.name not in values:
            return SymExpr((((atom,), 1),))
        v = _canon(values[atom.name], f"value of '{atom.name}'")
        if isinstance(v, int) and not atom.lo <= v <= atom.hi:
            raise SymbolicError(f"{atom.name}={v} is outside its range {atom.lo}..{atom.hi}")
        return v
    args = [substitute(a, values) for a in atom.args]
    return {"floordiv": floordiv, "floormod": floormod, "min": min_, "max": max_}[atom.op](*args)


def _str(x) -> str:
    if isinstance(x, int):
        return str(x)
    parts = []
    for mono, c in sorted(x.terms, key=lambda mc: not mc[0]):  # the constant last
        if not mono:
            parts.append((c, str(abs(c))))
            continue
        factors = []
        i = 0
        while i < len(mono):
            j = i
            while j < len(mono) and mono[j] == mono[i]:
                j += 1
            text = _str_atom(mono[i], nested=len(mono) > 1 or c != 1)
            factors.append(text if j - i == 1 else "*".join([text] * (j - i)))
            i = j
        body = "*".join(factors)
        parts.append((c, body if abs(c) == 1 else f"{abs(c)}*{body}"))
    text = ""
    for k, (c, body) in enumerate(parts):
        text += (("-" if c < 0 else "") if k == 0 else (" - " if c < 0 else " + ")) + body
    return text


def _str_atom(atom, nested: bool) -> str:
    if isinstance(atom, SizeVar):
        return atom.name
    a, b = atom.args
    if atom.op in ("min", "max"):
        return f"{atom.op}({_str(a)}, {_str(b)})"
    text = f"{_paren(a)} {'//' if atom.op == 'floordiv' else '%'} {_paren(b)}"
    return f"({text})" if nested else text


def _paren(x) -> str:
    text = _str(x)
    simple = isinstance(x, int) or (len(x.terms) == 1 and x.terms[0][1] == 1 and len(x.terms[0][0]) == 1
                                    and isinstance(x.terms[0][0][0], SizeVar))
    return text if simple or (isinstance(x, int) and x >= 0) else f"({text})"


# ---------------------------------------------------------------------------------------------
# the run-time form: postfix programs the executors evaluate

POSTFIX_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
               "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max}
_POSTFIX_OF = {"floordiv": "//", "floormod": "%", "min": "min", "max": "max"}


def to_postfix(x, order: list):
    """Dimension `x` in the form artifacts carry (mod.json "symbolic_shapes", the module
    description's "sym_shape"): an int stays an int; a SymExpr becomes a postfix program, a list
    of tokens evaluated on a stack: a non-negative int pushes itself, "$k" pushes the value of
    size variable k of `order` (a list of SizeVars), "+", "-", "*", "//" (floor division), "%"
    (floor modulo), "min", "max" pop b, then a, and push a op b. E.g. (seq + 3) // 4 with order
    [seq]: ["$0", 3, "+", 4, "//"]. Raises ValueError for a variable that is not in `order`."""
    x = _canon(x)
    if isinstance(x, int):
        return x
    index = {v: k for k, v in enumerate(order)}
    out: list = []

    def atom(a):
        if isinstance(a, SizeVar):
            if a not in index:
                raise ValueError(f"size variable {a!r} is not one of {describe_vars(order)}")
            out.append(f"${index[a]}")
        else:
            for arg in a.args:
                emit(arg)
            out.append(_POSTFIX_OF[a.op])

    def emit(v):
        if isinstance(v, int):
            if v < 0:
                out.extend([0, -v, "-"])
            else:
                out.append(v)
            return
        for k, (mono, c) in enumerate(v.terms):
            if k == 0 and c < 0:
                out.append(0)
            if mono and abs(c) == 1:
                atom(mono[0])
                rest = mono[1:]
            else:
                out.append(abs(c))
                rest = mono
            for a in rest:
                atom(a)
                out.append("*")
            if k > 0 or c < 0:
                out.append("-" if c < 0 else "+")

    emit(x)
    return out


def eval_postfix(program, values: list) -> int:
    """The value of a dimension in the form of to_postfix, size variable k being values[k].
    Raises ValueError on a malformed program or a division by zero."""
    if isinstance(program, int):
        return program
    stack: list = []
    for tok in program:
        if isinstance(tok, int) and not isinstance(tok, bool) and tok >= 0:
            stack.append(tok)
        elif isinstance(tok, str) and tok.startswith("$") and tok[1:].isdigit() and int(tok[1:]) < len(values):
            stack.append(int(values[int(tok[1:])]))
        elif tok in POSTFIX_OPS and len(stack) >= 2:
            b, a = stack.pop(), stack.pop()
            if tok in ("//", "%") and b == 0:
                raise ValueError(f"division by zero in {program}")
            stack.append(POSTFIX_OPS[tok](a, b))
        else:
            raise ValueError(f"malformed shape program {program}")
    if len(stack) != 1:
        raise ValueError(f"malformed shape program {program}")
    return stack[0]


def postfix_text(program, names: list) -> str:
    """A dimension in the form of to_postfix as infix text for people ("(16*seq + 255) // 256"),
    size variable k named names[k]. Raises ValueError on a malformed program."""
    if isinstance(program, int):
        return str(program)
    stack: list = []
    for tok in program:
        if isinstance(tok, int) and not isinstance(tok, bool) and tok >= 0:
            stack.append(str(tok))
        elif isinstance(tok, str) and tok.startswith("$") and tok[1:].isdigit() and int(tok[1:]) < len(names):
            stack.append(str(names[int(tok[1:])]))
        elif tok in POSTFIX_OPS and len(stack) >= 2:
            b, a = stack.pop(), stack.pop()
            stack.append(f"{tok}({_bare(a)}, {_bare(b)})" if tok in ("min", "max") else
                         f"{a}*{b}" if tok == "*" else f"({a} {tok} {b})")
        else:
            raise ValueError(f"malformed shape program {program}")
    if len(stack) != 1:
        raise ValueError(f"malformed shape program {program}")
    return _bare(stack[0])


def _bare(text: str) -> str:
    """`text` without parentheses around the whole of it."""
    return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]) else text


def _balanced(text: str) -> bool:
    depth = 0
    for c in text:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0

