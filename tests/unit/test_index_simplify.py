"""The flat-index rules that make reshapes copies of ramps: merge_divmod (tvmc.tir.simplify) and
the runs of axes a reshape ravels on their own (tvmc.ops.transform.aligned_groups)."""

from __future__ import annotations

import itertools

import pytest

from tvmc.ops.transform import aligned_groups
from tvmc.te.expr import BinOp, IntImm, Var
from tvmc.tir.simplify import simplify


def _eval(e, env):
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
           "floormod": lambda: a % b}
    return ops[e.op]()


def test_a_split_index_recombined_by_its_divisor_is_the_index_again():
    i, j = Var("i", "int64"), Var("j", "int64")
    x = i * IntImm(16) + j
    div, mod = BinOp("floordiv", x, IntImm(28)), BinOp("floormod", x, IntImm(28))
    ranges = {i: 49, j: 16}
    assert str(simplify(div * IntImm(28) + mod + IntImm(5), ranges)) == "(((i * 16) + j) + 5)"
    # a common factor (a blocked layout's 8 lanes) and another term stay exact
    e = div * IntImm(224) + mod * IntImm(8) + j * IntImm(3)
    got = simplify(e, ranges)
    assert "//" not in str(got) and "%" not in str(got)
    for iv, jv in itertools.product(range(49), range(16)):
        assert _eval(got, {i: iv, j: jv}) == _eval(e, {i: iv, j: jv})
    # coefficients that do not pair (28 * 2 against 1) keep the division
    assert "//" in str(simplify(div * IntImm(56) + mod, ranges))


@pytest.mark.parametrize("src,dst,groups", [
    ((1, 136, 28, 28), (1, 4, 34, 784), [([0], [0]), ([1], [1, 2]), ([2, 3], [3])]),
    ((6, 4), (4, 6), [([0, 1], [0, 1])]),
    ((2, 3, 5), (6, 5), [([0, 1], [0]), ([2], [1])]),
    ((1, 6, 1, 5), (6, 5, 1), [([0, 1, 2], [0]), ([3], [1, 2])]),
    ((), (1, 1), [([], [0, 1])]),
])
def test_aligned_groups(src, dst, groups):
    assert aligned_groups(src, dst) == groups


def test_multiples_of_the_divisor_leave_a_division_and_a_remainder():
    """(8 X + i) // 4 = 2 X + i // 4 and (8 X + i) % 4 = i % 4 for any integers (floor semantics):
    a shuffled channel c = 8 cb + lane gives per-lane offsets independent of the block cb."""
    x, i = Var("x", "int64"), Var("i", "int64")
    e = x * IntImm(8) + i - IntImm(3)
    div, mod = simplify(BinOp("floordiv", e, IntImm(4)), {i: 8}), simplify(BinOp("floormod", e, IntImm(4)), {i: 8})
    assert "x" not in str(mod) and str(div).count("x") == 1
    for xv, iv in itertools.product(range(-5, 6), range(8)):
        env = {x: xv, i: iv}
        assert (_eval(div, env), _eval(mod, env)) == divmod(8 * xv + iv - 3, 4)


def test_a_merge_that_changes_another_pairs_coefficient_keeps_the_value():
    """Merging (Z // 4) * 4 + Z % 4 into Z, with Z = i + x % 2, adds to the coefficient of x % 2,
    which another pair, (x // 2) * 2 + x % 2, also uses: each merge reads the current coefficient."""
    x, i = Var("x", "int64"), Var("i", "int64")
    two = BinOp("floormod", x, IntImm(2))
    z = i + two
    e = BinOp("floormod", z, IntImm(4)) + BinOp("floordiv", z, IntImm(4)) * IntImm(4) + two + \
        BinOp("floordiv", x, IntImm(2)) * IntImm(2)
    got = simplify(e, {i: 8})
    for xv, iv in itertools.product(range(-6, 7), range(8)):
        env = {x: xv, i: iv}
        assert _eval(got, env) == _eval(e, env), (xv, iv, got)


@pytest.mark.parametrize("whole", [0, 3, -2])
@pytest.mark.parametrize("a,c,o_ext,extra", [(16, 32, 4, 0), (8, 48, 12, 0), (4, 12, 9, 2), (16, 64, 7, 3)])
def test_a_vector_lane_under_a_coarser_divisor_leaves_the_lane_out(a, c, o_ext, extra, whole):
    """(c*w + a*o + i + k) // c with a | c and i + k in [0, a) (i a vector lane): w + o // (c/a),
    so that a condition on it is the same for every lane (a concatenation's select tree,
    CodeGenLLVM _branch_select); and the remainder a*(o % (c/a)) + i + k. Both checked at every
    point, with `whole` multiples of c in the constant too."""
    o, i = Var("o", "int64"), Var("i", "int64")
    shift = extra + whole * c
    x = o * IntImm(a) + i + IntImm(shift)
    ranges = {o: o_ext, i: a - extra}
    div, mod = simplify(BinOp("floordiv", x, IntImm(c)), ranges), simplify(BinOp("floormod", x, IntImm(c)), ranges)
    assert not any(v is i for v in _vars(div))  # the lane is gone from the quotient
    for vo, vi in itertools.product(range(o_ext), range(a - extra)):
        env = {o: vo, i: vi}
        assert _eval(div, env) == (vo * a + vi + shift) // c and _eval(mod, env) == (vo * a + vi + shift) % c


def test_a_lane_that_can_cross_the_divisor_stays():
    o, i = Var("o", "int64"), Var("i", "int64")
    x = o * IntImm(16) + i
    assert any(v is i for v in _vars(simplify(BinOp("floordiv", x, IntImm(32)), {o: 4, i: 17})))


def _vars(e):
    if isinstance(e, Var):
        return [e]
    if isinstance(e, BinOp):
        return _vars(e.a) + _vars(e.b)
    return []
