"""tvmc.graph.symbolic: canonical forms, bounds, proofs and substitution of symbolic shape
expressions, each identity also checked by evaluating both sides at every value in range."""

from __future__ import annotations

import numpy as np
import pytest

from tvmc.graph import symbolic as sym
from tvmc.graph.symbolic import SymbolicError, can_prove, can_prove_equal, size_var, substitute

S = size_var("s", 1, 64)
T = size_var("t", 1, 8)


def values(e, name="s", lo=1, hi=64):
    return [substitute(e, {name: v}) for v in range(lo, hi + 1)]


@pytest.mark.parametrize("expr, expected", [
    ((S * 64) // 64, S),
    (S + 1 - 1, S),
    ((S // 4) * 4 + S % 4, S),
    (S - 2 * (S // 2), S % 2),
    (((S + 1) // 2 + 1) // 2, (S + 3) // 4),
    (-(-S // 2), (S + 1) // 2),
    ((S * T) // T, S),
    ((S * T) % T, 0),
    (S // S, 1),
    ((4 * S + 2) // 8, S // 2),
    (sym.min_(S, 64), S),
    (sym.max_(S, 1), S),
    (sym.min_(S, T) - sym.min_(T, S), 0),
    (S * 3 - S - 2 * S, 0),
])
def test_equal_expressions_are_equal_and_hash_alike(expr, expected):
    assert expr == expected and hash(expr) == hash(expected)
    assert can_prove_equal(expr, expected)


@pytest.mark.parametrize("build, ref", [
    (lambda s: (2 * s + 3) // 2, lambda v: (2 * v + 3) // 2),
    (lambda s: (2 * s + 3) % 2, lambda v: (2 * v + 3) % 2),
    (lambda s: (-s + 5) // 3, lambda v: (-v + 5) // 3),
    (lambda s: (-s + 5) % 3, lambda v: (-v + 5) % 3),
    (lambda s: (s // 3 + 2) // 5, lambda v: (v // 3 + 2) // 5),
    (lambda s: (4 * s + 2) % 8, lambda v: (4 * v + 2) % 8),
    (lambda s: s * s - 3 * s + (s - 7) // -2, lambda v: v * v - 3 * v + (v - 7) // -2),
    (lambda s: (s + 3) % -4, lambda v: (v + 3) % -4),
    (lambda s: sym.max_(s - 10, 0) * 2, lambda v: max(v - 10, 0) * 2),
])
def test_simplified_forms_keep_their_value(build, ref):
    e = build(S)
    assert values(e) == [ref(v) for v in range(1, 65)]
    lo, hi = sym.bounds(e)
    assert lo <= min(values(e)) and max(values(e)) <= hi


def test_constants_are_ints():
    assert isinstance(S - S, int) and S - S == 0
    assert isinstance((S % 1), int) and sym.prod([2, 3, 4]) == 24
    assert size_var("k", 5, 5) == 5  # a one-value range is that value


def test_bounds_are_intervals_of_the_range():
    assert sym.bounds(S) == (1, 64)
    assert sym.bounds((S + 3) // 4) == (1, 16)
    lo, hi = sym.bounds(S * T - S)  # sound, not tight: the terms are bounded one by one
    assert lo <= 0 and hi >= 448 and sym.exact_bounds(S * T - S) == (0, 448)
    assert sym.exact_bounds(size_var("big", 0, 10 ** 6)) is None  # beyond ENUMERATE_MAX points
    assert sym.bounds(S % 8) == (0, 7)
    assert sym.bounds(sym.min_(S, T + 10)) == (1, 18)
    assert sym.upper_bound(S * 64) == 4096 and sym.lower_bound(S - 65) == -64


def test_prover():
    assert can_prove(S >= 1) and can_prove(S - 1 >= 0) and can_prove(S * T <= 512)
    assert not can_prove(S > 1) and not can_prove(S >= T)
    assert can_prove(S - S >= 0) and can_prove(True) and not can_prove(False)
    # interval arithmetic loses x - x // 2 >= 1; the exhaustive check over s in 1..64 proves it
    assert can_prove(S - S // 2 >= 1)
    assert bool(S > 0) and not bool(S < 1)
    with pytest.raises(SymbolicError, match=r"cannot prove or disprove s > 10 \(s in 1..64\)"):
        bool(S > 10)
    assert not can_prove_equal(S, T) and not can_prove_equal(S, 4)


def test_static_values_are_refused():
    with pytest.raises(SymbolicError, match=r"the extent s is symbolic \(s in 1..64\)"):
        int(S)
    with pytest.raises(SymbolicError):
        range(S)
    with pytest.raises(SymbolicError, match="floordiv"):
        S / 2
    with pytest.raises(SymbolicError, match="by zero"):
        S // 0
    with pytest.raises(SymbolicError, match="empty range"):
        size_var("e", 3, 2)


def test_substitution_evaluates_and_checks_the_range():
    e = (S + 3) // 4 * T
    assert substitute(e, {"s": 77 - 13, "t": 2}) == 32
    assert substitute(e, {"s": 5}) == 2 * T
    assert substitute(e, {"t": 3}) == 3 * ((S + 3) // 4)
    with pytest.raises(SymbolicError, match=r"s=65 is outside its range 1..64"):
        substitute(e, {"s": 65})


def test_numpy_and_python_operands():
    assert np.int64(3) * S == 3 * S and S + np.int32(2) == S + 2
    assert np.array([S, 4], dtype=object).dot([2, 1]) == 2 * S + 4
    assert sum([S, T, 1]) == S + T + 1


def test_free_vars_and_printing():
    e = (S + 1) // 2 * T + sym.max_(S, T)
    assert [v.name for v in sym.free_vars([e, (3, S)])] == ["s", "t"]
    assert sym.describe_vars([e]) == "s in 1..64, t in 1..8"
    assert str((S + 1) // 2) == "(s + 1) // 2" and str(3 * S * T + 2) == "3*s*t + 2"
    assert str(-((S + 2) // 3)) == "-((s + 2) // 3)" and str(sym.min_(S, T)) == "min(s, t)"
    assert repr([1, S]) == "[1, s]"


def test_postfix_programs_evaluate_like_the_expressions():
    """to_postfix: the run-time form of a dimension (mod.json symbolic_shapes), evaluated by the C
    API as eval_postfix does; every point of two small ranges."""
    import itertools

    from tvmc.graph import symbolic as s

    a, b = s.size_var("a", 1, 9), s.size_var("b", 2, 7)
    order = s.free_vars([a, b])
    assert s.to_postfix((a + 3) // 4, order) == [3, "$0", "+", 4, "//"]
    assert s.to_postfix(5, order) == 5
    for e in [a, (a + 3) // 4, 2 * a * b - 5 * b + 7, a % 3 - a, s.min_(a, b) * 3, 5 - a * a, s.max_(a, 2 * b) // 3]:
        program = s.to_postfix(e, order)
        for va, vb in itertools.product(range(1, 10), range(2, 8)):
            assert s.eval_postfix(program, [va, vb]) == s.substitute(e, {"a": va, "b": vb}), (e, program)
    with pytest.raises(ValueError, match="malformed"):
        s.eval_postfix(["$0", "+"], [1])
    with pytest.raises(ValueError, match="is not one of"):
        s.to_postfix(a, [order[1]])
