"""Tensor expressions, schedule primitives, lowering to loop IR and index simplification; a few
schedules compiled for x86 and checked against numpy."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tvmc import te
from tvmc.codegen.build import compile_ir, link_shared
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ScheduleError
from tvmc.target import resolve_target
from tvmc.te.expr import BinOp, IntImm, Reduce, Var, const
from tvmc.tir.ir import Allocate, For, IfThenElse, stmt_children
from tvmc.tir.lower import lower
from tvmc.tir.simplify import simplify

TOLERANCE = {"float32": dict(rtol=1e-5, atol=1e-5)}


# --- helpers ---------------------------------------------------------------------------------

def _stmts(s):
    yield s
    for c in stmt_children(s):
        yield from _stmts(c)


def loops(prim):
    """[(var name, extent, kind)] of every For in pre-order."""
    return [(s.var.name, s.extent, s.kind) for s in _stmts(prim.body) if isinstance(s, For)]


def allocations(prim):
    return {s.buffer.name: s.buffer for s in _stmts(prim.body) if isinstance(s, Allocate)}


def guards(prim):
    return [s for s in _stmts(prim.body) if isinstance(s, IfThenElse)]


@pytest.fixture(scope="module")
def x86():
    return resolve_target("native")


@pytest.fixture(scope="module")
def compile_prim(x86, tmp_path_factory):
    """Compile a PrimFunc to a shared library and return a numpy-callable kernel."""
    root = tmp_path_factory.mktemp("te_lower")
    count = [0]

    def build(prim):
        cg = CodeGenLLVM(x86)
        cg.add_function(prim)
        count[0] += 1
        path = root / f"{prim.name}_{count[0]}.so"
        path.write_bytes(link_shared(compile_ir(cg.ir_text(), x86), x86))
        fn = getattr(ctypes.CDLL(str(path)), prim.name)

        def call(*arrays):
            arrays = [np.ascontiguousarray(a) for a in arrays]
            fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays])

        return call

    return build


# --- tensor expressions ------------------------------------------------------------------------

def test_placeholder_compute_reduce():
    A = te.placeholder((8, 5), "float32", name="A")
    k = te.reduce_axis(5, "k")
    S = te.compute((8,), lambda i: te.sum(A[i, k] * 2.0, k), name="S")
    assert A.op is None and A.shape == (8, 5) and A.ndim == 2
    assert S.shape == (8,) and S.dtype == "float32"
    assert isinstance(S.op.body, Reduce) and S.op.body.combiner == "sum"
    assert S.op.reduce_axis == [k] and k.kind == "reduce" and k.extent == 5
    assert [t.name for t in S.op.input_tensors()] == ["A"]
    M = te.compute((8,), lambda i: te.max(A[i, k], k), name="M")
    assert M.op.body.identity().value < -1e38
    assert te.compute((8,), lambda i: te.min(A[i, k], k)).op.body.identity().value > 1e38
    assert te.compute((2,), lambda i: te.cast("int64", A[i, 0])).dtype == "int64"
    with pytest.raises(IndexError):
        A[0]


def test_compute_chain_input_tensors_and_schedule_order():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: B[i] * A[i], name="C")
    assert {t.name for t in C.op.input_tensors()} == {"A", "B"}
    s = te.create_schedule(C)
    assert [st.tensor.name for st in s.stages] == ["B", "C"]  # producers first, no placeholders
    with pytest.raises(ScheduleError):
        s[A]


# --- schedule primitives and the loop IR they lower to ----------------------------------------

def test_split_divisible_has_no_guard():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(s[B].op.axis[0], 16)
    assert (o.extent, i.extent) == (4, 16)
    prim = lower(s, [A, B], "k")
    assert loops(prim) == [("B_i0_outer", 4, "serial"), ("B_i0_inner", 16, "serial")]
    assert guards(prim) == []
    # index (outer*16 + inner) stays affine
    assert "B[(B_i0_inner + (B_i0_outer * 16))]" in str(prim)


def test_split_non_divisible_adds_guard():
    A = te.placeholder((50,), name="A")
    B = te.compute((50,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(s[B].op.axis[0], 16)
    assert (o.extent, i.extent) == (4, 16)  # ceil(50 / 16)
    prim = lower(s, [A, B], "k")
    assert loops(prim) == [("B_i0_outer", 4, "serial"), ("B_i0_inner", 16, "serial")]
    (g,) = guards(prim)
    assert "< 50" in repr(g.cond)


def test_partition_of_a_static_loop_takes_the_guard_out_of_its_whole_tiles(compile_prim):
    """Stage.partition: a kernel of constant shapes keeps its guards (one tile of 16 past 50
    guarded in every iteration) unless a loop is marked; the marked one runs its 3 whole tiles
    without a guard and its last iteration apart, with the select of the last column folded."""
    A = te.placeholder((50,), name="A")
    B = te.compute((50,), lambda i: te.select(i < 48, A[i] * 2.0, A[i] * 3.0), name="B")

    def scheduled(mark):
        s = te.create_schedule(B)
        o, i = s[B].split(s[B].op.axis[0], 16)
        if mark:
            s[B].partition(o)
        return lower(s, [A, B], "k")

    assert len(guards(scheduled(False))) == 1 and "B_i0_outer" in str(guards(scheduled(False))[0].cond)
    prim = scheduled(True)
    text = str(prim)
    assert ("B_i0_outer", 3, "serial") in loops(prim) and "select" not in text
    (g,) = [x for x in guards(prim) if "B_i0_inner" in repr(x.cond)]  # the last tile's guard only
    assert "B_i0_outer" not in repr(g.cond)
    a = np.arange(50, dtype=np.float32)
    out = np.zeros(50, np.float32)
    compile_prim(prim)(a, out)
    np.testing.assert_array_equal(out, np.where(np.arange(50) < 48, a * 2, a * 3))


def test_split_factor_larger_than_extent_is_clamped():
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i], name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(s[B].op.axis[0], 64)
    assert (o.extent, i.extent) == (1, 5)


def test_fuse_reorder_annotations_print():
    A = te.placeholder((4, 6, 32), name="A")
    B = te.compute((4, 6, 32), lambda a, b, c: A[a, b, c] + 1.0, name="B")
    s = te.create_schedule(B)
    st = s[B]
    a, b, c = st.op.axis
    f = st.fuse(a, b)
    assert f.extent == 24 and st.leaf == [f, c]
    co, ci = st.split(c, 16)
    st.reorder(co, f, ci)
    assert st.leaf == [co, f, ci]
    st.parallel(co)
    st.unroll(f)
    st.vectorize(ci)
    prim = lower(s, [A, B], "k")
    assert loops(prim) == [("B_i2_outer", 2, "parallel"), ("B_i0.B_i1", 24, "unroll"),
                           ("B_i2_inner", 16, "vectorize")]
    text = str(prim)
    assert re.search(r"parallel for B_i2_outer in 0\.\.2 \{", text)
    assert re.search(r"unroll for B_i0\.B_i1 in 0\.\.24 \{", text)
    assert re.search(r"vectorize for B_i2_inner in 0\.\.16 \{", text)
    # the fused index, recovered as (f // 6, f % 6), addresses A at (f // 6) * 192 + (f % 6) * 32,
    # which the simplifier merges back into f * 32 (merge_divmod)
    assert "// 6" not in text and "% 6" not in text and "(B_i0.B_i1 * 32)" in text


def test_compute_inline_removes_the_buffer():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((16,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C)
    prim_root = lower(s, [A, C], "k")
    assert "B" in allocations(prim_root)  # materialized at root
    s = te.create_schedule(C)
    s[B].compute_inline()
    prim = lower(s, [A, C], "k")
    assert allocations(prim) == {}
    assert loops(prim) == [("C_i0", 16, "serial")]
    assert "C[C_i0] = ((A[C_i0] * 3.0) + 1.0)" in str(prim)


def _window():
    A = te.placeholder((20,), name="A")
    B = te.compute((20,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((18,), lambda i: B[i] + B[i + 2], name="C")
    return A, B, C


def test_compute_at_bound_inference_region():
    A, B, C = _window()
    s = te.create_schedule(C)
    o, _ = s[C].split(s[C].op.axis[0], 6)
    s[B].compute_at(s[C], o)
    prim = lower(s, [A, C], "k")
    buf = allocations(prim)["B"]
    assert buf.shape == (8,) and buf.scope == "local"  # 6 outputs read B[i .. i+7]
    assert loops(prim) == [("C_i0_outer", 3, "serial"), ("B_i0", 8, "serial"), ("C_i0_inner", 6, "serial")]
    assert guards(prim) == []


def test_compute_at_non_divisible_guards_producer_edge():
    A, B, C = _window()
    s = te.create_schedule(C)
    o, _ = s[C].split(s[C].op.axis[0], 4)
    s[B].compute_at(s[C], o)
    prim = lower(s, [A, C], "k")
    assert allocations(prim)["B"].shape == (6,)
    conds = [repr(g.cond) for g in guards(prim)]
    assert any("< 20" in c for c in conds)  # last tile's producer region runs past B's edge
    assert any("< 18" in c for c in conds)  # split tail of C


def test_compute_at_2d_region():
    A = te.placeholder((10, 12), name="A")
    B = te.compute((10, 12), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 10), lambda i, j: B[i, j] + B[i + 2, j + 2], name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, 4)
    jo, ji = s[C].split(j, 5)
    s[C].reorder(io, jo, ii, ji)
    s[B].compute_at(s[C], jo)
    prim = lower(s, [A, C], "k")
    assert allocations(prim)["B"].shape == (6, 7)


def test_compute_at_chain_of_siblings_and_a_data_dependent_row():
    """B and P attached at C's row loop with C: B is read only by its sibling R (through a row
    index computed from P's data, so R needs all of B's rows), P only by R: their regions come
    from R's loads (det's elimination chain)."""
    A = te.placeholder((3, 4, 5), name="A")
    B = te.compute((3, 4, 5), lambda b, i, j: A[b, i, j] * 2.0, name="B")
    k = te.reduce_axis(4, "k")
    P = te.compute((3,), lambda b: te.max(te.cast("int64", A[b, k, 0]), k), name="P")
    R = te.compute((3, 4, 5), lambda b, i, j: B[b, te.select(te.eq(i, 0), P[b], i), j], name="R")
    C = te.compute((3,), lambda b: R[b, 0, 2] + R[b, 0, 3], name="C")
    s = te.create_schedule(C)
    (b,) = s[C].op.axis
    for t in (B, P, R):
        s[t].compute_at(s[C], b)
    prim = lower(s, [A, C], "k")
    bufs = allocations(prim)
    assert bufs["R"].shape == (1, 1, 2) and bufs["P"].shape == (1,)
    assert bufs["B"].shape == (1, 4, 2)  # every row: the row index is P's data


def test_cache_write_creates_local_accumulator():
    A = te.placeholder((8, 16), name="A")
    k = te.reduce_axis(16, "k")
    C = te.compute((8,), lambda i: te.sum(A[i, k], k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C)
    assert CL.name == "C_local" and [st.tensor.name for st in s.stages] == ["C_local", "C"]
    assert s[CL].op.reduce_axis and not s[C].op.reduce_axis
    o, _ = s[C].split(s[C].op.axis[0], 4)
    s[CL].compute_at(s[C], o)
    prim = lower(s, [A, C], "k")
    assert allocations(prim)["C_local"].shape == (4,)
    assert allocations(prim)["C_local"].scope == "local"


# --- misuse ------------------------------------------------------------------------------------

def test_schedule_errors():
    A = te.placeholder((4, 5, 6), name="A")
    B = te.compute((4, 5, 6), lambda a, b, c: A[a, b, c] * 2.0, name="B")
    s = te.create_schedule(B)
    st = s[B]
    a, _, c = st.op.axis
    st.split(c, 2)
    with pytest.raises(ScheduleError, match="not a current loop"):
        st.split(c, 3)  # c is no longer a leaf
    with pytest.raises(ScheduleError, match="not adjacent"):
        st.fuse(a, st.leaf[2])
    with pytest.raises(ScheduleError, match="not a current loop"):
        st.vectorize(c)
    with pytest.raises(ScheduleError, match="not a current loop"):
        st.reorder(c, a)
    with pytest.raises(ScheduleError, match="cache_write must come before"):
        s.cache_write(B)

    k = te.reduce_axis(6, "k")
    R = te.compute((4,), lambda i: te.sum(A[i, 0, k], k), name="R")
    S = te.compute((4,), lambda i: R[i] + 1.0, name="S")
    s2 = te.create_schedule(S)
    with pytest.raises(ScheduleError, match="is a reduction"):
        s2[R].compute_inline()
    with pytest.raises(ScheduleError, match="cannot fuse a reduce axis"):
        s2[R].fuse(s2[R].op.axis[0], k)
    with pytest.raises(ScheduleError, match="not a current loop"):
        s2[R].compute_at(s2[S], s2[R].op.axis[0])  # a loop of R, not of S
    s2[S].compute_inline()
    with pytest.raises(ScheduleError, match="cannot be inlined"):
        lower(s2, [A, S], "k")


# --- simplification ------------------------------------------------------------------------------

def test_simplify_constant_folding():
    folded = simplify((const(3) + 4) * 2 - const(20) // 3)
    assert isinstance(folded, IntImm) and folded.value == 8
    assert simplify(const(-7) // 2).value == -4 and simplify(const(-7) % 2).value == 1  # floor semantics
    assert simplify(const(1.5) * 2.0).value == 3.0
    x = Var("x")
    assert simplify(x * 2 + 3 - x * 2).value == 3
    assert simplify(te.minimum(x + 1, x)) is not None and repr(simplify(te.maximum(x + 1, x))) == "(x + 1)"


def test_simplify_floordiv_floormod_with_ranges():
    io, ii = Var("io"), Var("ii")
    ranges = {io: 4, ii: 16}
    assert simplify((io * 16 + ii) // 16, ranges) is io
    assert simplify((io * 16 + ii) % 16, ranges) is ii
    assert repr(simplify((io * 32 + ii * 2 + 1) // 2, ranges)) == "(ii + (io * 16))"
    assert simplify((io * 32 + ii * 2 + 1) % 2, ranges).value == 1
    # not provable: the inner range exceeds the divisor, or no ranges at all
    assert isinstance(simplify((io * 16 + ii) // 16, {io: 4, ii: 17}), BinOp)
    assert isinstance(simplify((io * 16 + ii) // 16), BinOp)
    assert isinstance(simplify((ii - 1) % 16, ranges), BinOp)


def test_simplify_comparisons_with_ranges():
    ii = Var("ii")
    assert simplify(ii < 16, {ii: 16}).value == 1
    assert simplify(ii >= 16, {ii: 16}).value == 0
    assert repr(simplify(ii < 15, {ii: 16})) == "(ii < 15)"
    assert simplify(te.select(ii < 16, const(1.0), const(2.0)), {ii: 16}).value == 1.0


def test_simplify_bounds_of_fused_loop_indices():
    """Coordinates recovered from a fused loop (f // 56 % 4, f % 56) have known bounds: the
    guards that compute_at adds on them fold away, and so do their divisions."""
    f, i = Var("f"), Var("i")
    ranges = {f: 224, i: 1}
    assert simplify((f // 56) % 4 + i < 4, ranges).value == 1
    assert simplify(f % 56 < 56, ranges).value == 1
    assert simplify(f // 56 < 4, ranges).value == 1
    assert repr(simplify(f // 56 < 3, ranges)) == "((f // 56) < 3)"      # f // 56 reaches 3
    assert simplify(((f // 56) % 4) // 4, ranges).value == 0
    assert repr(simplify((f // 56) % 4, ranges)) == "(f // 56)"          # f // 56 < 4 already
    assert isinstance(simplify((f // 8) % 4, ranges), BinOp)              # f // 8 reaches 27
    assert simplify(f % 7 - 7 < 0).value == 1                             # % c is in [0, c) always


# --- compiled schedules ------------------------------------------------------------------------

def _matmul(m, k, n):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], r), name="C")
    return A, B, C


def _mm_data(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    return a, b, (a.astype(np.float64) @ b.astype(np.float64)).astype("float32")


@pytest.mark.parametrize("m,k,n,tile_i,tile_j", [(64, 32, 64, 4, 16), (37, 19, 50, 4, 16), (5, 3, 7, 8, 16)],
                         ids=["divisible", "tails", "tiny"])
def test_scheduled_matmul(compile_prim, m, k, n, tile_i, tile_j):
    """cache_write accumulator computed at the tile, vectorized j, parallel outer loop, tails masked."""
    A, B, C = _matmul(m, k, n)
    s = te.create_schedule(C)
    CL = s.cache_write(C)
    st = s[C]
    i, j = st.op.axis
    io, ii = st.split(i, tile_i)
    jo, ji = st.split(j, tile_j)
    st.reorder(io, jo, ii, ji)
    st.vectorize(ji)
    st.unroll(ii)
    st.parallel(io)
    s[CL].compute_at(st, jo)
    ci, cj = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], ci, cj)
    s[CL].vectorize(cj)
    prim = lower(s, [A, B, C], "mm")
    kinds = {kind for _, _, kind in loops(prim)}
    assert {"parallel", "vectorize", "unroll"} <= kinds
    # a factor above the extent is clamped to it, so only a real tail needs a guard
    assert bool(guards(prim)) == (m % min(tile_i, m) != 0 or n % min(tile_j, n) != 0)
    a, b, ref = _mm_data(m, k, n)
    out = np.full((m, n), np.nan, dtype="float32")
    compile_prim(prim)(a, b, out)
    np.testing.assert_allclose(out, ref, **TOLERANCE["float32"])


def test_scheduled_elementwise_tail_does_not_write_past_the_end(compile_prim):
    """A non-divisible vectorized split must mask the tail: the guard sentinel stays untouched."""
    A = te.placeholder((50,), name="A")
    B = te.compute((50,), lambda i: te.exp(A[i]) * 2.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(s[B].op.axis[0], 16)
    s[B].vectorize(i)
    s[B].parallel(o)
    fn = compile_prim(lower(s, [A, B], "tail"))
    a = np.linspace(-3, 3, 50, dtype="float32")
    buf = np.full(64, 12345.0, dtype="float32")
    fn(a, buf)  # the kernel writes buf[:50]; buf[50:] is guard space
    np.testing.assert_allclose(buf[:50], np.exp(a.astype(np.float64)) * 2, **TOLERANCE["float32"])
    assert (buf[50:] == 12345.0).all()


def test_compiled_compute_at_window_and_inline(compile_prim):
    A, B, C = _window()
    D = te.compute((18,), lambda i: C[i] * C[i], name="D")
    s = te.create_schedule(D)
    s[C].compute_inline()
    o, i = s[D].split(s[D].op.axis[0], 4)
    s[B].compute_at(s[D], o)
    s[D].vectorize(i)
    fn = compile_prim(lower(s, [A, D], "win"))
    a = np.arange(20, dtype="float32") - 7.5
    out = np.zeros(18, dtype="float32")
    fn(a, out)
    b = a * 2
    np.testing.assert_allclose(out, (b[:18] + b[2:]) ** 2, **TOLERANCE["float32"])


def test_compiled_reductions_max_min_and_fuse(compile_prim):
    A = te.placeholder((6, 7, 9), name="A")
    k = te.reduce_axis(9, "k")
    MX = te.compute((6, 7), lambda a, b: te.max(A[a, b, k], k), name="MX")
    MN = te.compute((6, 7), lambda a, b: te.min(A[a, b, k], k), name="MN")
    OUT = te.compute((6, 7), lambda a, b: MX[a, b] - MN[a, b], name="OUT")
    s = te.create_schedule(OUT)
    f = s[OUT].fuse(*s[OUT].op.axis)
    fo, fi = s[OUT].split(f, 8)
    s[OUT].parallel(fo)
    s[OUT].vectorize(fi)
    s[MX].parallel(s[MX].op.axis[0])
    fn = compile_prim(lower(s, [A, OUT], "range"))
    a = np.random.default_rng(1).standard_normal((6, 7, 9)).astype("float32")
    a[0, 0] = -1e30  # very negative rows must not be clipped by the max identity
    out = np.zeros((6, 7), dtype="float32")
    fn(a, out)
    np.testing.assert_allclose(out, a.max(2) - a.min(2), **TOLERANCE["float32"])


def test_compiled_integer_index_arithmetic(compile_prim):
    """int64 floordiv / floormod of negative values follow floor semantics (Python, numpy)."""
    A = te.placeholder((16,), "int64", name="A")
    B = te.compute((16,), lambda i: A[i] // 3 + (A[i] % 5) * 100, name="B")
    s = te.create_schedule(B)
    fn = compile_prim(lower(s, [A, B], "idx"))
    a = np.arange(-8, 8, dtype=np.int64) * 7
    out = np.zeros(16, dtype=np.int64)
    fn(a, out)
    np.testing.assert_array_equal(out, a // 3 + (a % 5) * 100)


def test_rfactor_vectorizes_a_contiguous_reduction(compile_prim):
    """rfactor(C, 16): a [5, 16] stage of lane-wise partial sums/maxima (vectorized over the
    lanes, reduced over k_outer), then C reduces the 16 lanes; same result as the plain reduction."""
    A = te.placeholder((5, 64), name="A")
    k = te.reduce_axis(64, "k")
    S = te.compute((5,), lambda i: te.sum(A[i, k] * 2.0, k), name="S")
    k2 = te.reduce_axis(64, "k2")
    M = te.compute((5,), lambda i: te.max(A[i, k2], k2), name="M")
    OUT = te.compute((5,), lambda i: S[i] + M[i], name="OUT")
    s = te.create_schedule(OUT)
    for t in (S, M):
        rf = s.rfactor(t, 16)
        assert rf.shape == (5, 16) and [iv.extent for iv in s[rf].op.reduce_axis] == [4]
        assert [iv.extent for iv in s[t].op.reduce_axis] == [16]
        row, lane = s[rf].op.axis
        s[rf].reorder(row, s[rf].op.reduce_axis[0], lane)
        s[rf].vectorize(lane)
    assert sorted(st.tensor.name for st in s.stages) == ["M", "M_rf", "OUT", "S", "S_rf"]
    prim = lower(s, [A, OUT], "rfactor")
    vector_loops = [(name, e) for name, e, kd in loops(prim) if kd == "vectorize"]
    assert {name.split("_lane")[0] for name, _ in vector_loops} == {"S", "M"}   # S_rf/M_rf: init and update
    assert all(e == 16 for _, e in vector_loops)
    a = np.random.default_rng(3).standard_normal((5, 64)).astype("float32")
    a[1] = -1e30
    out = np.zeros(5, dtype="float32")
    compile_prim(prim)(a, out)
    np.testing.assert_allclose(out, (a * 2).sum(1) + a.max(1), rtol=1e-5, atol=1e-5)


def test_rfactor_errors():
    A = te.placeholder((5, 64), name="A")
    k = te.reduce_axis(64, "k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], k), name="S")
    T = te.compute((5,), lambda i: S[i] * 2.0, name="T")
    s = te.create_schedule(T)
    with pytest.raises(ScheduleError, match="does not divide"):
        s.rfactor(S, 3)
    with pytest.raises(ScheduleError, match="is not a reduction"):
        s.rfactor(T, 2)


def test_rfactor_of_a_reduction_over_every_axis_factors_the_innermost(compile_prim):
    """min over [6, 40] to a scalar (DynamicQuantizeLinear's): the partial minima reduce over the
    rows and k_outer into 8 lanes, vectorized, then S over the lanes; numpy's value."""
    A = te.placeholder((6, 40), name="A")
    i, k = te.reduce_axis(6, "i"), te.reduce_axis(40, "k")
    S = te.compute((1,), lambda _: te.min(A[i, k], [i, k]), name="S")
    s = te.create_schedule(S)
    partial = s.rfactor(S, 8)
    assert partial.shape == (1, 8) and [iv.extent for iv in s[partial].op.reduce_axis] == [6, 5]
    row, lane = s[partial].op.axis
    s[partial].reorder(*s[partial].op.reduce_axis, row, lane)
    s[partial].vectorize(lane)
    prim = lower(s, [A, S], "rfactor_all")
    vector_loops = [e for _, e, kd in loops(prim) if kd == "vectorize"]
    assert vector_loops and all(e == 8 for e in vector_loops)
    a = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)
    out = np.zeros(1, np.float32)
    compile_prim(prim)(a, out)
    assert out[0] == a.min()
