"""Arithmetic simplification of loop-IR expressions: constant folding, linear index canonicalization,
and range-aware floordiv/floormod elimination (TVM's arith::Analyzer, reduced to affine forms).

Symbolic shapes: a SizeVar (te.SizeVar) is an atom bounded by its [lo, hi]; a loop whose extent
is an expression of SizeVars bounds its variable symbolically (i < N is true for i in [0, N)),
products with SizeVar factors are distributed over sums ((i*4 + j) * N = 4 (i*N) + j*N), and
c * (X // c) is bounded as X - X % c. Every rule for them applies only where a SizeVar or a loop
of symbolic extent occurs, so expressions without them simplify as before.
"""

from __future__ import annotations

import math

from tvmc.te.expr import (INDEX, BinOp, Call, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, PrimExpr, Select, SizeVar,
                          Var, is_float, substitute, transform, walk)
from tvmc.tir.ir import Allocate, Barrier, For, IfThenElse, Intrinsic, Seq, Stmt, Store


def structural_key(e):
    """Structural key: equal keys mean equal expressions."""
    if isinstance(e, Var):
        return ("v", id(e))
    if isinstance(e, IntImm):
        return ("i", e.value)
    if isinstance(e, FloatImm):
        return ("f", e.value)
    if isinstance(e, BinOp):
        return (e.op, structural_key(e.a), structural_key(e.b))
    if isinstance(e, Load):
        return ("ld", id(e.buffer), structural_key(e.index))
    if isinstance(e, Cast):
        return ("c", e.dtype, structural_key(e.value))
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
            if e.dtype == INDEX and size_only(e.b) and not size_only(e.a):
                return a.times(e.b)
            if e.dtype == INDEX and size_only(e.a) and not size_only(e.b):
                return b.times(e.a)
            if e.dtype == INDEX and size_only(e.a) and size_only(e.b) and len(a.terms) == len(b.terms) == 1 \
                    and a.const == b.const == 0:  # (c N) (d M) = c d (N M)
                (xa, ca), = a.terms.values()
                (xb, cb), = b.terms.values()
                prod = BinOp("mul", xa, xb)
                return Linear({structural_key(prod): (prod, ca * cb)})
        return Linear({structural_key(e): (e, 1)})

    def times(self, factor: PrimExpr) -> "Linear":
        """This form times `factor`, an expression of SizeVars, distributed over the terms: each
        atom a becomes the atom a*factor, the constant c the form c * factor."""
        out = Linear.of(factor).scale(self.const)
        for atom, c in self.terms.values():
            prod = BinOp("mul", atom, factor)
            out = out.add(Linear({structural_key(prod): (prod, c)}))
        return out

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
        return self.terms.get(structural_key(var), (None, 0))[1]

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


def merge_divmod(lin: Linear) -> Linear:
    """`lin` with each pair k*c*(X // c) + k*(X % c) (c > 0 a literal) replaced by k*X: the flat
    index of a reshape, ((i // 28) * 28 + i % 28), is i again, and a vector loop over i then loads
    a contiguous ramp instead of a gather (TVM's canonical simplifier has the same rule)."""
    for key, (atom, _) in list(lin.terms.items()):
        if not (isinstance(atom, BinOp) and atom.op == "floormod" and isinstance(atom.b, IntImm)
                and atom.b.value > 0 and key in lin.terms):
            continue
        k, c = lin.terms[key][1], atom.b.value  # the current coefficient: an earlier merge may have changed it
        div = BinOp("floordiv", atom.a, atom.b)
        dkey = structural_key(div)
        if lin.terms.get(dkey, (None, 0))[1] != k * c:
            continue
        terms = {kk: v for kk, v in lin.terms.items() if kk not in (key, dkey)}
        lin = Linear(terms, lin.const).add(Linear.of(atom.a).scale(k))
    return lin


def has_size_var(e: PrimExpr) -> bool:
    """Whether a SizeVar occurs in `e`."""
    return any(isinstance(x, SizeVar) for x in walk(e))


def size_only(e: PrimExpr) -> bool:
    """Whether `e` is an int64 expression of SizeVars and literals only (at least one SizeVar): a
    symbolic extent, the same at every point of a kernel."""
    seen = False
    for x in walk(e):
        if isinstance(x, SizeVar):
            seen = True
        elif isinstance(x, (Var, Load)) or not (isinstance(x, (IntImm, BinOp))):
            return False
    return seen and e.dtype == INDEX


def _symbolic_extent(ext) -> bool:
    return isinstance(ext, PrimExpr)


def atom_bounds(atom: PrimExpr, ranges: dict):
    """(lo, hi) of an int64 atom, else None: a loop Var in [0, extent) (a symbolic extent by its
    upper bound); a SizeVar in [lo, hi]; x // c and x % c (c > 0) from the bounds of x (x % c is
    always in [0, c), floor semantics). Fused and split loop indices are such atoms: ((i.j // 56)
    % 4) lies in [0, 3]. Products and min/max with a SizeVar in them: from their operands; x // b
    and x % b of a non-negative x by a symbolic b >= 1: [lo(x) // hi(b), hi(x) // lo(b)] and
    [0, min(hi(x), hi(b) - 1)]."""
    if isinstance(atom, SizeVar):
        return atom.lo, atom.hi
    if isinstance(atom, Var):
        if atom not in ranges:
            return None
        ext = ranges[atom]
        if _symbolic_extent(ext):
            top = Linear.of(ext).bounds(ranges)
            return None if top is None else (0, max(0, top[1] - 1))
        return 0, ext - 1
    if isinstance(atom, BinOp) and atom.op in ("floordiv", "floormod") and isinstance(atom.b, IntImm) \
            and atom.b.value > 0:
        c = atom.b.value
        inner = Linear.of(atom.a).bounds(ranges)
        if atom.op == "floordiv":
            return None if inner is None else (inner[0] // c, inner[1] // c)
        if inner is not None and 0 <= inner[0] and inner[1] < c:
            return inner
        return 0, c - 1
    if isinstance(atom, BinOp) and atom.op in ("mul", "min", "max") and atom.dtype == INDEX and has_size_var(atom):
        ba, bb = Linear.of(atom.a).bounds(ranges), Linear.of(atom.b).bounds(ranges)
        if ba is None or bb is None:
            return None
        if atom.op == "mul":
            prods = [x * y for x in ba for y in bb]
            return min(prods), max(prods)
        f = min if atom.op == "min" else max
        return f(ba[0], bb[0]), f(ba[1], bb[1])
    if isinstance(atom, BinOp) and atom.op in ("floordiv", "floormod") and atom.dtype == INDEX and has_size_var(atom.b):
        # by a symbolic divisor b >= 1 (a SizeVar's range): x // b and x % b of a non-negative x
        ba, bb = Linear.of(atom.a).bounds(ranges), Linear.of(atom.b).bounds(ranges)
        if ba is None or bb is None or ba[0] < 0 or bb[0] < 1:
            return None
        return (ba[0] // bb[1], ba[1] // bb[0]) if atom.op == "floordiv" else (0, min(ba[1], bb[1] - 1))
    return None


def _is_symbolic(lin: Linear, ranges: dict) -> bool:
    """Whether a form has a SizeVar in it or a variable of a loop of symbolic extent."""
    for atom, _ in lin.terms.values():
        if has_size_var(atom) or any(isinstance(x, Var) and _symbolic_extent(ranges.get(x)) for x in walk(atom)):
            return True
    return False


def _const_div_of_size(atom) -> bool:
    """Whether `atom` is X // c with c > 0 a literal and a SizeVar in X."""
    return isinstance(atom, BinOp) and atom.op == "floordiv" and isinstance(atom.b, IntImm) and atom.b.value > 0 \
        and has_size_var(atom.a)


def _expanded_bounds(lin: Linear, ranges: dict):
    """Bounds of `lin` with each atom X // c (c > 0, X with a SizeVar in it) replaced by
    (X - X % c) / c: the form is scaled by the divisors' lcm L, bounded, and the bounds divided
    by L (rounded inwards: the form is an integer). N - 8 (N // 8) is then bounded by [0, 7].
    The outermost divisions go first and the form is expanded again while it has such atoms, so
    that a nested one cancels too: 8 ((N // 2) // 8) - N // 2 becomes -((N // 2) % 8), at most 0."""
    plain = lin.bounds(ranges)
    out, scale = lin, 1
    for _ in range(4):
        divs = [(key, atom) for key, (atom, _) in out.terms.items() if _const_div_of_size(atom)]
        inner = {structural_key(x) for _, atom in divs for x in walk(atom.a)}
        divs = [(key, atom) for key, atom in divs if key not in inner]
        if not divs:
            break
        step = math.lcm(*(atom.b.value for _, atom in divs))
        picked = {key for key, _ in divs}
        nxt = Linear(const=out.const * step)
        for key, (atom, c) in out.terms.items():
            if key in picked:
                k = c * step // atom.b.value
                mod = BinOp("floormod", atom.a, atom.b)
                nxt = nxt.add(Linear.of(atom.a).scale(k)).add(Linear({structural_key(mod): (mod, -k)}))
            else:
                nxt = nxt.add(Linear({key: (atom, c * step)}))
        out, scale = nxt, scale * step
    if scale == 1:
        return plain
    b = out.bounds(ranges)
    if b is None:
        return plain
    b = (-(-b[0] // scale), b[1] // scale)
    return b if plain is None else (max(b[0], plain[0]), min(b[1], plain[1]))


def _symbolic_last(atom, ranges: dict):
    """The largest value of `atom` as an expression, where it is the variable v of a loop of
    symbolic extent E (E - 1), such an atom divided by a constant c (its largest // c), v // b
    for a symbolic b that E is a constant multiple q of (q - 1: a fused loop's outer index), or
    x % b of a non-negative x by a symbolic b >= 1 (b - 1); else None. All are at least 0."""
    if isinstance(atom, Var) and _symbolic_extent(ranges.get(atom)):
        return ranges[atom] - 1
    if not isinstance(atom, BinOp) or atom.op not in ("floordiv", "floormod"):
        return None
    if atom.op == "floordiv" and isinstance(atom.b, IntImm) and atom.b.value > 0:
        inner = _symbolic_last(atom.a, ranges)
        return None if inner is None else inner // atom.b
    if not has_size_var(atom.b) or atom.b.dtype != INDEX:
        return None
    divisor = Linear.of(atom.b).bounds(ranges)
    if divisor is None or divisor[0] < 1:
        return None
    if atom.op == "floormod":
        x = Linear.of(atom.a).bounds(ranges)
        return atom.b - 1 if x is not None and x[0] >= 0 else None
    if isinstance(atom.a, Var) and _symbolic_extent(ranges.get(atom.a)):
        q = _multiple(Linear.of(ranges[atom.a]), Linear.of(atom.b))
        if q is not None and q >= 1:
            return IntImm(q - 1)
    return None


def _multiple(e: Linear, b: Linear):
    """The constant q with e = q * b as forms (2 * seq of seq: 2), else None."""
    if not b.terms or b.const:
        return None
    key, (_, cb) = next(iter(b.terms.items()))
    if key not in e.terms or e.terms[key][1] % cb:
        return None
    q = e.terms[key][1] // cb
    rest = e.add(b, -q)
    return q if rest.const == 0 and not any(c for _, c in rest.terms.values()) else None


def symbolic_bounds(lin: Linear, ranges: dict):
    """(lo, hi) of an int64 form where SizeVars or loops of symbolic extent occur, or None: each
    variable of such a loop (or such a variable // c) is replaced by 0 or by its largest value
    (whichever bounds the form), so that i - N, i in [0, N), is at most -1 whatever N is; then
    SizeVars by their bounds, after _expanded_bounds. Sound for any values of the SizeVars within their bounds."""
    lo_l, hi_l = Linear(const=lin.const), Linear(const=lin.const)
    for key, (atom, c) in lin.terms.items():
        last = _symbolic_last(atom, ranges)
        if last is not None:
            top = Linear.of(simplify(last, ranges)).scale(c)
            if c > 0:
                hi_l = hi_l.add(top)
            else:
                lo_l = lo_l.add(top)
        else:
            term = Linear({key: (atom, c)})
            lo_l, hi_l = lo_l.add(term), hi_l.add(term)
    lo, hi = _expanded_bounds(lo_l, ranges), _expanded_bounds(hi_l, ranges)
    if lo is None or hi is None:
        return None
    return lo[0], hi[1]


def form_bounds(lin: Linear, ranges: dict):
    """(lo, hi) of an int64 form: its atoms' bounds (Linear.bounds), narrowed by symbolic_bounds
    where a SizeVar or a loop of symbolic extent occurs in it; None where neither bounds it."""
    if not lin.terms:
        return lin.const, lin.const
    plain = lin.bounds(ranges)
    sym = symbolic_bounds(lin, ranges) if _is_symbolic(lin, ranges) else None
    if plain is None or sym is None:
        return plain or sym
    return max(plain[0], sym[0]), min(plain[1], sym[1])


def expr_bounds(e: PrimExpr, ranges: dict | None = None):
    """(lo, hi) of int64 expression `e` (loop Vars bounded by `ranges`, Var -> extent, SizeVars by
    their bounds), or None where an atom is unbounded (a load, a free variable)."""
    ranges = ranges or {}
    return form_bounds(Linear.of(simplify(e, ranges)), ranges)


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


def _split_multiples(lin: Linear, c: int):
    """(q, r) Linears with lin = c*q + r: q takes the terms whose coefficients c divides and
    const // c, r the other terms and const % c."""
    q, r = Linear(), Linear()
    for k, (atom, coef) in lin.terms.items():
        if coef % c == 0:
            q.terms[k] = (atom, coef // c)
        else:
            r.terms[k] = (atom, coef)
    q.const, r.const = lin.const // c, lin.const % c
    return q, r


def _split_at_divisor(lin: Linear, c: int, ranges: dict):
    """(a, q, r) with lin = a*q + r, a a divisor of c (1 < a < c, the largest that works), q a
    Linear and r provably in [0, a): then lin // c = q // (c/a) and lin % c = a*(q % (c/a)) + r,
    since a*q is a multiple of a and r cannot carry it past the next multiple of c (also one of
    a). E.g. (16*o + i) // 32 = o // 2 for a vector lane i in [0, 16): the lanes of a 16-wide
    vector of a concatenation's output all read the same input. None where no divisor does."""
    for a in sorted((d for d in range(2, c) if c % d == 0), reverse=True):
        q, r = _split_multiples(lin, a)
        if not q.terms:
            continue
        rb = r.bounds(ranges)
        if rb is not None and 0 <= rb[0] and rb[1] < a:
            return a, q, r
    return None


_INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
               "int32": (-2 ** 31, 2 ** 31 - 1)}


def integral_bounds(e: PrimExpr):
    """(lo, hi) where the float expression `e` is provably an integer in [lo, hi] (or a NaN),
    else None: round / floor / ceil of anything (unbounded), a float literal that is an integer,
    and min / max of such expressions (a requantize's clamp: min(max(round(y), 0.0), 255.0) is an
    integer in [0, 255])."""
    if isinstance(e, FloatImm):
        return (e.value, e.value) if math.isfinite(e.value) and e.value == int(e.value) else None
    if isinstance(e, Call) and e.name in ("round", "floor", "ceil") and is_float(e.dtype):
        return (-math.inf, math.inf)
    if isinstance(e, Cast) and is_float(e.dtype) and e.value.dtype in _INT_RANGES:
        lo, hi = _INT_RANGES[e.value.dtype]
        return (lo, hi) if hi <= 2 ** 24 else (lo, hi + 1)  # float32(2^31 - 1) rounds up to 2^31
    if isinstance(e, BinOp) and e.op in ("min", "max", "add", "sub") and is_float(e.dtype):
        a, b = integral_bounds(e.a), integral_bounds(e.b)
        if a is None or b is None:
            return None
        if e.op in ("add", "sub"):  # a float sum of integers rounds to an integer (past 2^24 all floats are)
            lo, hi = (a[0] + b[0], a[1] + b[1]) if e.op == "add" else (a[0] - b[1], a[1] - b[0])
            return (-math.inf, math.inf) if math.isnan(lo) or math.isnan(hi) else (lo, hi)
        pick = min if e.op == "min" else max
        return pick(a[0], b[0]), pick(a[1], b[1])
    return None


def _clamped_sum(e: PrimExpr):
    """(t, c, lo, hi) where `e` is min(max(t + c, lo), hi) with literal float bounds within
    2^24 in magnitude (a requantize's clamp of round(y) + zero point), else None."""
    if not (isinstance(e, BinOp) and e.op == "min" and isinstance(e.b, FloatImm) and isinstance(e.a, BinOp)
            and e.a.op == "max" and isinstance(e.a.b, FloatImm) and isinstance(e.a.a, BinOp) and e.a.a.op == "add"):
        return None
    lo, hi = e.a.b, e.b
    if max(abs(lo.value), abs(hi.value)) > 2 ** 24:
        return None
    return e.a.a.a, e.a.a.b, lo, hi


def _clamp_shifted(t: PrimExpr, lo: FloatImm, hi: FloatImm, c: PrimExpr) -> PrimExpr:
    """min(max(t, lo - c), hi - c)."""
    return BinOp("min", BinOp("max", t, BinOp("sub", lo, c)), BinOp("sub", hi, c))


def _unshifted_clamp(a: PrimExpr, c: PrimExpr) -> PrimExpr | None:
    """min(max(t + c, lo), hi) - c -> min(max(t, lo - c), hi - c) where t and c are integers (a
    requantize's round(y) + zero point, clamped, read back by the rescale or dequantize fused after
    it, which subtracts the same zero point): two float ops fewer per vector of a fused int8 epilogue.
    Exact: below 2^24 every step is an integer sum; past it both forms give a bound."""
    form = _clamped_sum(a)
    if form is None:
        return None
    t, shift, lo, hi = form
    if structural_key(shift) != structural_key(c) or integral_bounds(t) is None or integral_bounds(c) is None:
        return None
    return _clamp_shifted(t, lo, hi, c)


def rounded_then_shifted(x: Cast) -> PrimExpr | None:
    """int(min(max(round(v) + c, lo), hi)) -> int(int32(round(min(max(v, lo - c), hi - c))) + int32(c))
    for an integer c (a requantize's output zero point): the clamp moves before the rounding (lo
    and hi are integers, so rounding a clamped value stays within them) and the zero point is added
    to the integer, so that the rounding and the conversion are one instruction where the code
    generator has one (x86's cvtps2dq: CodeGenLLVM._expr applies this there; elsewhere it costs
    as many instructions as the original). Exact as _unshifted_clamp. None where `x` is not of
    that form."""
    form = _clamped_sum(x.value) if x.dtype in _INT_RANGES and x.value.dtype == "float32" else None
    if form is None:
        return None
    r, c, lo, hi = form
    if not (isinstance(r, Call) and r.name == "round") or integral_bounds(c) is None or \
            not (_INT_RANGES[x.dtype][0] <= lo.value <= hi.value <= _INT_RANGES[x.dtype][1]):
        return None
    clamped = _clamp_shifted(r.args[0], lo, hi, c)
    total = BinOp("add", Cast("int32", Call("round", [clamped], "float32")), Cast("int32", c))
    return total if x.dtype == "int32" else Cast(x.dtype, total)


def linear_steps(index, variables) -> tuple | None:
    """The constant step of `index` along each of `variables`, or None when one of them appears
    other than linearly (inside a division, a product with another variable)."""
    lin = Linear.of(index)
    for atom, _ in lin.terms.values():
        if not isinstance(atom, Var) and any(x is v for x in walk(atom) for v in variables):
            return None
    return tuple(lin.coef(v) for v in variables)


def simplify(e: PrimExpr, ranges: dict | None = None, points: bool = False) -> PrimExpr:
    """Fold constants and canonicalize int64 index arithmetic.

    `ranges` maps loop Vars to their extents (var in [0, extent)), enabling
    floordiv/floormod elimination such as (i_outer*16 + i_inner) // 16 -> i_outer.
    `points`: a division of SizeVars that has one value over their bounds becomes that literal
    (width // 4 in a size bucket of width 16..19 is 4): for loop bodies (simplify_stmt), not for
    the tensor shapes (tvmc.te.extent), which stay expressions of the kernel's arguments.
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
                if x.op == "sub":
                    return _unshifted_clamp(a, b)
                if x.op == "mul" and isinstance(b, FloatImm) and b.value == 1.0:
                    return a
                if x.op == "add" and isinstance(b, FloatImm) and b.value == 0.0:
                    return a
                return None
            if x.dtype != INDEX:  # canonical forms build int64 literals: index arithmetic only
                return None
            if x.op in ("add", "sub", "mul"):
                return merge_divmod(Linear.of(x)).to_expr()
            if x.op in ("floordiv", "floormod") and isinstance(b, IntImm) and b.value > 0:
                c = b.value
                if c == 1:
                    return a if x.op == "floordiv" else IntImm(0)
                if points and size_only(a):  # one value over the SizeVars' bounds (width // 4 for 16..19)
                    point = atom_bounds(x, ranges)
                    if point is not None and point[0] == point[1]:
                        return IntImm(point[0])
                q, r = _split_multiples(Linear.of(a), c)
                rb = r.bounds(ranges)
                if rb is None or rb[0] < 0 or rb[1] >= c:
                    # with symbolic bounds: ((f // S) * 32 + j) % 128, f a fused loop over 4 S rows
                    rb = form_bounds(r, ranges)
                if rb is not None and 0 <= rb[0] and rb[1] < c:  # r provably in [0, c)
                    return (q if x.op == "floordiv" else r).to_expr()
                if q.terms:  # (c*q + r) // c = q + r // c and (c*q + r) % c = r % c, for any integer r
                    rest = BinOp(x.op, r.to_expr(), b)
                    return BinOp("add", q.to_expr(), rest) if x.op == "floordiv" else rest
                split = _split_at_divisor(r, c, ranges) if c <= 4096 else None
                if split is not None:  # (c*k + a*q + r) // c = k + q // (c/a) for r in [0, a), a | c
                    d, q2, r2 = split
                    part = BinOp(x.op, q2.to_expr(), IntImm(c // d))
                    if x.op == "floordiv":
                        return Linear.of(part).add(q).to_expr()  # q: the constant k = lin.const // c
                    return Linear.of(part).scale(d).add(r2).to_expr()
            if x.op in ("min", "max"):
                la, lb = Linear.of(a), Linear.of(b)
                d = la.add(lb, -1)
                if not d.terms:
                    return a if (d.const <= 0) == (x.op == "min") else b
                bnd = form_bounds(d, ranges) if _is_symbolic(d, ranges) else None
                if bnd is not None and (bnd[1] <= 0 or bnd[0] >= 0):
                    return a if (bnd[1] <= 0) == (x.op == "min") else b
            if x.op in ("floordiv", "floormod") and not isinstance(b, IntImm) and size_only(b):
                # x // N = 0 and x % N = x where 0 <= x < N (a fused loop of extent N inside)
                la = Linear.of(a)
                lo = symbolic_bounds(la, ranges) if _is_symbolic(la, ranges) else la.bounds(ranges)
                gap = la.add(Linear.of(b), -1)
                hi = symbolic_bounds(gap, ranges) if _is_symbolic(gap, ranges) else None
                if lo is not None and hi is not None and lo[0] >= 0 and hi[1] < 0:
                    return IntImm(0) if x.op == "floordiv" else a
            return None
        if isinstance(x, Cmp) and x.a.dtype == INDEX:
            bnd = form_bounds(Linear.of(x.a).add(Linear.of(x.b), -1), ranges)
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
            return simplify(substitute(x.body, {x.var: x.value}), ranges, points)
        if isinstance(x, Cast) and isinstance(x.value, Cast) and x.dtype == x.value.value.dtype and \
                is_float(x.dtype) and x.value.dtype in _INT_RANGES:
            # float(int(v)) -> v where v is provably an integer within the int type's range: the
            # round trip through the integer is exact (a requantize's uint8 result read back as
            # float32 by the rescale fused after it: cvttps2dq, two packs, vpmovzxbd, cvtdq2ps)
            bounds, (lo, hi) = integral_bounds(x.value.value), _INT_RANGES[x.value.dtype]
            if bounds is not None and lo <= bounds[0] and bounds[1] <= hi:
                return x.value.value
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
        extent = s.extent
        if isinstance(extent, PrimExpr):  # a symbolic extent: canonical, an int when it folds
            extent = simplify(extent, ranges, points=True)
            extent = extent.value if isinstance(extent, IntImm) else extent
        ranges[s.var] = extent
        return For(s.var, extent, s.kind, simplify_stmt(s.body, ranges), s.min_parallel)
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges, points=True), simplify(s.value, ranges, points=True))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, simplify_stmt(s.body, ranges))
    if isinstance(s, Seq):
        return Seq([simplify_stmt(x, ranges) for x in s.stmts])
    if isinstance(s, IfThenElse):
        c = simplify(s.cond, ranges, points=True)
        if isinstance(c, IntImm):
            if c.value:
                return simplify_stmt(s.then, ranges)
            return simplify_stmt(s.otherwise, ranges) if s.otherwise is not None else Seq([])
        return IfThenElse(c, simplify_stmt(s.then, ranges),
                          simplify_stmt(s.otherwise, ranges) if s.otherwise is not None else None)
    if isinstance(s, Barrier):
        return s
    if isinstance(s, Intrinsic):
        return s.with_exprs([simplify(e, ranges, points=True) for e in s.exprs])
    raise TypeError(s)
