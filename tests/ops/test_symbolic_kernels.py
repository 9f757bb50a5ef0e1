"""Kernels with symbolic extents (issue 29, point 3): each kernel is lowered once for a range of a
size variable (te.size_var) with the CPU schedules' tiles chosen for the range's upper bound (or
one specialization per size bucket, tvmc.tir.buckets), then
run through the targets' kernel runner (tests/targets.py: ctypes here, wasmtime, the C runner
under qemu) at sizes 1, 7, one that is not a multiple of the vector lanes, one that is, and the
upper bound, against numpy. Float32 results match a float64 reference within rtol 1e-4 and atol
1e-4 (sums of up to 256 products of standard normal values). Also the loop IR the schedules
leave: vector tails lifted out by loop partitioning, reductions without guards, the SizeVars as
the kernels' last arguments, and the simplifier's rules for symbolic extents."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from tests.targets import require
from tvmc import te
from tvmc.backends import backend_for
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ScheduleError
from tvmc.graph import symbolic
from tvmc.graph.ir import TensorType
from tvmc.graph.ir import Var as GraphVar
from tvmc.ops.cpu.conv2d_nchwc import conv2d_nchwc_config, schedule_conv2d_nchwc
from tvmc.ops.cpu.conv2d_winograd import (BUCKETED_STAGES, conv2d_winograd_buckets, conv2d_winograd_config,
                                          schedule_conv2d_winograd, winograd_tiles)
from tvmc.ops.cpu.dense import (dense_config, dense_pack_buckets, dense_pack_config, matmul_config, schedule_dense,
                                schedule_dense_pack, schedule_matmul)
from tvmc.ops.cpu.injective import schedule_injective
from tvmc.ops.cpu.pool import schedule_pool
from tvmc.ops.cpu.reduction import schedule_reduce, schedule_softmax, softmax_buckets
from tvmc.ops.nn_conv2d_nchwc import _reference as conv2d_nchwc_reference
from tvmc.ops.nn_conv2d_nchwc import conv2d_nchwc, pack_weight
from tvmc.ops.nn_conv2d_winograd import conv2d_winograd_nchwc, winograd_weight_transform
from tvmc.ops.nn_dense import dense, dense_pack, matmul, pack_dense_weight
from tvmc.ops.nn_misc import softmax
from tvmc.ops.fused import _size_buckets
from tvmc.ops.registry import get_op, make_call
from tvmc.target import resolve_target
from tvmc.te.expr import IntImm, Var, substitute
from tvmc.te.extent import upper_shape
from tvmc.tir.buckets import lower_buckets
from tvmc.tir.ir import For, IfThenElse, Seq, Store
from tvmc.tir.lower import lower
from tvmc.tir.simplify import expr_bounds, simplify

TOL = dict(rtol=1e-4, atol=1e-4)
CPU_TARGETS = ["native", "wasm", pytest.param("arm", marks=pytest.mark.slow)]


def sizes(target, hi: int) -> list:
    """1, 7, a size that the float32 vector lanes do not divide, one they do, and the upper bound."""
    lanes = target.vector_lanes("float32")
    return sorted({1, 7, 2 * lanes + 3, 4 * lanes, hi})


def run_sizes(name: str, prim, arrays, size_list, tol=TOL, tmp_path=None):
    """Run kernel `prim` (lowered once) on `arrays(size) -> (inputs, reference)` at every size:
    on this host's CPU compiled once into a library (the backend's build_candidate) and called at
    each size (load_candidate, with the SizeVars' values: PrimFunc.size_args); elsewhere through
    the target's kernel runner."""
    t = require(name)
    library = None
    if name == "native" and tmp_path is not None:
        library = str(tmp_path / f"{prim.name}.so")
        backend_for(t.target).build_candidate(prim, t.target, library)
    for size in size_list:
        inputs, ref = arrays(size)
        out = np.zeros(ref.shape, ref.dtype)
        if library is None:
            t.run_kernel(prim, inputs, out)
        else:
            # not closed: unloading a library whose parallel loops started libgomp's threads would
            # unload libgomp under them (the tuner measures in runner processes of their own)
            call, fetch, _, _ = backend_for(t.target).load_candidate(
                library, prim.name, inputs, out, sizes=prim.size_args([a.shape for a in [*inputs, out]]))
            call()
            fetch()
        np.testing.assert_allclose(out, ref, err_msg=f"{prim.name} at size {size} on {name}", **tol)


def rng():
    return np.random.default_rng(29)


# ---- elementwise and broadcast -------------------------------------------------------------------

@pytest.mark.parametrize("name", CPU_TARGETS)
def test_broadcast_add_over_symbolic_rows_and_columns(name, tmp_path):
    """[2, 3, S, S] + [2, 1, 1, S] (an attention mask): the innermost symbolic axis split by the
    lanes with its tail partitioned, the rows in parallel."""
    target = resolve_target(name)
    s_var = te.size_var("S", 1, 128)
    x = te.placeholder((2, 3, s_var, s_var), name="x")
    m = te.placeholder((2, 1, 1, s_var), name="m")
    y = te.compute(x.shape, lambda b, h, i, j: x[b, h, i, j] + m[b, 0, 0, j] * 2.0, name="y")
    s = te.create_schedule(y)
    schedule_injective(s, y, y, None, target)
    prim = lower(s, [x, m, y], "masked_scores")
    r = rng()

    def arrays(n):
        xs, ms = r.standard_normal((2, 3, n, n)).astype("float32"), r.standard_normal((2, 1, 1, n)).astype("float32")
        return [xs, ms], xs + ms * 2

    run_sizes(name, prim, arrays, sizes(target, 128), tmp_path=tmp_path)


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_transpose_to_a_symbolic_last_axis_copies_without_vectors_below_one_vector(name, tmp_path):
    """Attention's K [S, 4, 32] -> [4, 32, S]: a vector along S gathers (stride 128), so the
    function has a size bucket at S = lanes (fused._strided_rows_buckets); below it the kernel
    copies without vectors (a vector there would gather a few lanes per row), from it on it
    gathers whole vectors; every size runs its bucket."""
    target = resolve_target(name)
    lanes = target.vector_lanes("float32")
    x_graph = GraphVar("x", TensorType((symbolic.size_var("S", 1, 64), 4, 32), "float32"))
    var, starts = _size_buckets(make_call("transpose", [x_graph], {"axes": (1, 2, 0)}), target)
    assert var.name == "S" and starts == [lanes]

    def build(sub):
        x = te.placeholder((sub, 4, 32), name="x")
        y = te.compute((4, 32, sub), lambda h, d, j: x[j, h, d], name="y")
        s = te.create_schedule(y)
        schedule_injective(s, y, y, None, target)
        return s, [x, y]

    prim = lower_buckets("k_transpose", te.size_var("S", 1, 64), starts, build)
    assert isinstance(prim.body, IfThenElse)
    assert not _fors(prim.body.then, "vectorize") and _fors(prim.body.otherwise, "vectorize")
    r = rng()

    def arrays(n):
        xs = r.standard_normal((n, 4, 32)).astype("float32")
        return [xs], np.ascontiguousarray(xs.transpose(1, 2, 0))

    run_sizes(name, prim, arrays, sorted({1, 7, lanes - 1, lanes, 64}), tmp_path=tmp_path)


def test_elementwise_main_vectors_are_unguarded_and_the_tail_is_one_masked_step():
    target = resolve_target("x86")
    n_var = te.size_var("N", 1, 4096)
    x = te.placeholder((4, n_var), name="x")
    y = te.compute(x.shape, lambda i, j: te.exp(x[i, j]), name="y")
    s = te.create_schedule(y)
    schedule_injective(s, y, y, None, target)
    prim = lower(s, [x, y], "exp_rows")
    vector_loops = _fors(prim.body, "vectorize")
    assert [_guarded(f) for f in vector_loops] == [False, True]  # the main loop, then the tail
    assert all(f.extent == 16 for f in vector_loops)
    main = next(f for f in _fors(prim.body, "serial") if not isinstance(f.extent, int))
    assert repr(main.extent) == "(N // 16)"


# ---- reductions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CPU_TARGETS)
def test_softmax_over_a_symbolic_axis(name, tmp_path):
    target = resolve_target(name)
    s_var = te.size_var("S", 1, 128)
    x = te.placeholder((3, s_var, s_var), name="x")
    y = softmax(x, 2)
    s = te.create_schedule(y)
    schedule_softmax(s, y, y, None, target)
    prim = lower(s, [x, y], "softmax_scores")
    r = rng()

    def arrays(n):
        xs = (r.standard_normal((3, n, n)) * 3).astype("float32")
        z = np.exp(xs.astype(np.float64) - xs.max(-1, keepdims=True))
        return [xs], (z / z.sum(-1, keepdims=True)).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 128), tmp_path=tmp_path)


def test_softmax_reduction_is_vectorized_through_rfactor_with_a_partitioned_tail():
    """The max and the sum over k < S: lane-wise partial results per vector of k (rfactor), the
    last vector's lanes past S skipped (a Reduce condition), every other vector unguarded."""
    target = resolve_target("x86")
    s_var = te.size_var("S", 1, 512)
    x = te.placeholder((s_var, s_var), name="x")
    y = softmax(x, 1)
    s = te.create_schedule(y)
    schedule_softmax(s, y, y, None, target)
    prim = lower(s, [x, y], "softmax_rows")
    text = str(prim)
    assert "softmax_max_rf" in text and "softmax_sum_rf" in text
    reduce_loops = [f for f in _fors(prim.body, "serial") if f.var.name in ("k_outer", "k2_outer")]
    assert [repr(f.extent) for f in reduce_loops] == ["(S // 16)", "(S // 16)"]
    assert not any(_guarded(f) for f in reduce_loops)


def test_softmax_rows_of_a_symbolic_length_take_a_row_buffer_of_the_run_extent():
    """Where S reaches two vectors, softmax runs row by row (tvmc.ops.cpu.reduction._row_softmax): the
    exp of one row goes to a local buffer whose region is symbolic (S rounded up to the vector),
    bounded by S's upper bound, and the parallel loop over the rows encloses every stage."""
    target = resolve_target("x86")
    s_var = te.size_var("S", 1, 512)
    x = te.placeholder((4, s_var, s_var), name="x")
    y = softmax(x, 2)
    s = te.create_schedule(y)
    schedule_softmax(s, y, y, None, target)
    text = str(lower(s, [x, y], "softmax_rows"))
    assert text.index("parallel") < text.index("allocate softmax_exp: float32[1,1,(((S + 15) // 16) * 16)] (local)")
    assert "(global)" not in text


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_mean_over_a_symbolic_axis(name, tmp_path):
    """mean over the symbolic sequence axis of [S, 40]: the count is S at run time."""
    target = resolve_target(name)
    s_var = te.size_var("S", 1, 256)
    x = te.placeholder((s_var, 40), name="x")
    out = get_op("mean").compute([x], {"axis": (0,), "keepdims": 0}, SimpleNamespace(shape=(40,), dtype="float32"))
    s = te.create_schedule(out)
    schedule_reduce(s, out, out, None, target)
    prim = lower(s, [x, out], "mean_tokens")
    r = rng()

    def arrays(n):
        xs = r.standard_normal((n, 40)).astype("float32")
        return [xs], xs.astype(np.float64).mean(0).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 256), tmp_path=tmp_path)


# ---- dense and batched matmul --------------------------------------------------------------------

def _dense_pack_kernel(target, hi=512, k=48, n=64):
    bn = target.vector_lanes("float32")
    m_var = te.size_var("M", 1, hi)
    x = te.placeholder((m_var, k), name="x")
    w = te.placeholder((n // bn, k, bn), name="w")
    y = dense_pack(x, w)
    cfg = dense_pack_config(((hi, k), (n // bn, k, bn), (hi, n), "float32", ()), target).fallback_config()
    s = te.create_schedule(y)
    schedule_dense_pack(s, y, y, cfg, target)
    return lower(s, [x, w, y], "dense_pack_rows"), cfg, bn


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_dense_pack_over_symbolic_rows(name, tmp_path):
    """rows = batch x sequence: register tiles of the fallback's tile_m rows for M = 512, the last
    tile's rows past M computed on the last row and not stored."""
    target = resolve_target(name)
    k, n = 48, 64
    prim, _, bn = _dense_pack_kernel(target, k=k, n=n)
    r = rng()
    weight = r.standard_normal((n, k)).astype("float32")

    def arrays(m):
        xs = r.standard_normal((m, k)).astype("float32")
        return [xs, pack_dense_weight(weight, bn)], (xs.astype(np.float64) @ weight.T).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 512), tmp_path=tmp_path)


def test_dense_pack_whole_tiles_have_no_guard_and_the_last_tile_guards_its_rows():
    """The whole row tiles run without a branch; the last one computes and stores only the rows
    inside M (guarded, not clamped: clamped rows would redo the last row up to tile_m - 1 times)."""
    target = resolve_target("x86")
    prim, cfg, _ = _dense_pack_kernel(target)
    assert cfg["tile_m"] > 1
    (head,) = _fors(prim.body, "parallel")
    assert not isinstance(head.extent, int)
    branch = head.body
    assert isinstance(branch, IfThenElse)  # main tiles | the last row tile
    main_k, = [f for f in _fors(branch.then) if f.var.name == "k"]
    last_k, = [f for f in _fors(branch.otherwise) if f.var.name == "k"]
    assert not _guarded(main_k) and _guarded(last_k)
    main_stores = [x for x in _stmts(branch.then) if isinstance(x, Store) and x.buffer.name == "dense_pack"]
    assert main_stores and not any(isinstance(x, IfThenElse) for x in _stmts(branch.then))
    assert any(isinstance(x, IfThenElse) for x in _stmts(branch.otherwise))


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_unpacked_dense_over_symbolic_rows(name, tmp_path):
    target = resolve_target(name)
    k, n = 64, 40
    m_var = te.size_var("M", 1, 256)
    x = te.placeholder((m_var, k), name="x")
    w = te.placeholder((n, k), name="w")
    y = dense(x, w)
    cfg = dense_config(((256, k), (n, k), (256, n), "float32", ()), target).fallback_config()
    s = te.create_schedule(y)
    schedule_dense(s, y, y, cfg, target)
    prim = lower(s, [x, w, y], "dense_rows")
    r = rng()
    weight = r.standard_normal((n, k)).astype("float32")

    def arrays(m):
        xs = r.standard_normal((m, k)).astype("float32")
        return [xs, weight], (xs.astype(np.float64) @ weight.T).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 256), tmp_path=tmp_path)


def _matmul_kernel(target, a_shape, b_shape, out_shape, upper):
    a = te.placeholder(a_shape, name="a")
    b = te.placeholder(b_shape, name="b")
    c = matmul(a, b, out_shape)
    wl = tuple(tuple(upper.get(d, d) for d in shape) for shape in (a_shape, b_shape, out_shape)) + ("float32", ())
    cfg = matmul_config(wl, target).fallback_config()
    s = te.create_schedule(c)
    schedule_matmul(s, c, c, cfg, target)
    return lower(s, [a, b, c], "batch_matmul")


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_batch_matmul_attention_scores_over_symbolic_sequence(name, tmp_path):
    """Q K^T: [4, S, 32] x [4, 32, S] -> [4, S, S], symbolic rows (M) and columns (N)."""
    target = resolve_target(name)
    s_var = te.size_var("S", 1, 128)
    prim = _matmul_kernel(target, (4, s_var, 32), (4, 32, s_var), (4, s_var, s_var), {s_var: 128})
    r = rng()

    def arrays(n):
        q, kt = r.standard_normal((4, n, 32)).astype("float32"), r.standard_normal((4, 32, n)).astype("float32")
        return [q, kt], (q.astype(np.float64) @ kt).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 128), tmp_path=tmp_path)


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_batch_matmul_attention_values_over_symbolic_sequence(name, tmp_path):
    """P V: [4, S, S] x [4, S, 32] -> [4, S, 32], symbolic rows (M) and reduction (K)."""
    target = resolve_target(name)
    s_var = te.size_var("S", 1, 128)
    prim = _matmul_kernel(target, (4, s_var, s_var), (4, s_var, 32), (4, s_var, 32), {s_var: 128})
    r = rng()

    def arrays(n):
        p, v = r.standard_normal((4, n, n)).astype("float32"), r.standard_normal((4, n, 32)).astype("float32")
        return [p, v], (p.astype(np.float64) @ v).astype("float32")

    run_sizes(name, prim, arrays, sizes(target, 128), tmp_path=tmp_path)


def test_batch_matmul_main_column_tiles_are_plain_vectors():
    """Columns past N are guarded only in the last column tile: the reduction of every other
    tile holds no branch."""
    target = resolve_target("x86")
    s_var = te.size_var("S", 1, 512)
    prim = _matmul_kernel(target, (4, s_var, 64), (4, 64, s_var), (4, s_var, s_var), {s_var: 512})
    (columns,) = [f for f in _fors(prim.body) if f.var.name == "matmul_c2_outer"]
    assert repr(columns.extent) == "(S // 32)"
    (k_loop,) = [f for f in _fors(columns.body) if f.var.name == "k"]
    assert not _guarded(k_loop)
    assert len([f for f in _fors(prim.body) if f.var.name == "k" and _guarded(f)]) == 1  # the last column tile


# ---- conv2d ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CPU_TARGETS)
@pytest.mark.parametrize("depthwise", [False, True])
def test_conv2d_nchwc_over_a_symbolic_batch(name, depthwise, tmp_path):
    target = resolve_target(name)
    lanes = target.vector_lanes("float32")
    c, h, w, stride = 2 * lanes, 9, 10, (1, 1) if not depthwise else (2, 2)
    n_var = te.size_var("N", 1, 8)
    x = te.placeholder((n_var, c // lanes, h, w, lanes), name="x")
    groups = c if depthwise else 1
    w_shape = (c // lanes, 1, 3, 3, 1, lanes) if depthwise else (c // lanes, c // lanes, 3, 3, lanes, lanes)
    wt = te.placeholder(w_shape, name="w")
    y = conv2d_nchwc(x, wt, stride, (1, 1, 1, 1), (1, 1), groups)
    wl = ((8,) + x.shape[1:], w_shape, (8,) + y.shape[1:], "float32", (("groups", groups),))
    s = te.create_schedule(y)
    schedule_conv2d_nchwc(s, y, y, conv2d_nchwc_config(wl, target).fallback_config(), target)
    prim = lower(s, [x, wt, y], "conv2d_batch")
    r = rng()
    weight = pack_weight(r.standard_normal((c, 1 if depthwise else c, 3, 3)).astype("float32"), lanes, lanes,
                         depthwise)

    def arrays(n):
        xs = r.standard_normal((n, c // lanes, h, w, lanes)).astype("float32")
        return [xs, weight], conv2d_nchwc_reference(xs, weight, stride, (1, 1, 1, 1), (1, 1), groups)

    run_sizes(name, prim, arrays, [1, 3, 8], tol=dict(rtol=1e-4, atol=2e-4), tmp_path=tmp_path)


@pytest.mark.parametrize("name", CPU_TARGETS)
@pytest.mark.parametrize("stride,depthwise", [(1, False), (2, False), (1, True)])
def test_conv2d_nchwc_over_a_symbolic_width(name, stride, depthwise, tmp_path):
    """A text-line recognizer's convolution: width W in 1..160, register tiles of tile_ow columns
    chosen for W = 160, the last partial tile's columns clamped and its stores guarded."""
    target = resolve_target(name)
    lanes = target.vector_lanes("float32")
    c, h = 2 * lanes, 6
    w_var = te.size_var("W", 1, 160)
    x = te.placeholder((1, c // lanes, h, w_var, lanes), name="x")
    groups = c if depthwise else 1
    w_shape = (c // lanes, 1, 3, 3, 1, lanes) if depthwise else (c // lanes, c // lanes, 3, 3, lanes, lanes)
    wt = te.placeholder(w_shape, name="w")
    y = conv2d_nchwc(x, wt, (stride, stride), (1, 1, 1, 1), (1, 1), groups)
    wl = (upper_shape(x.shape), w_shape, upper_shape(y.shape), "float32", (("groups", groups),))
    s = te.create_schedule(y)
    schedule_conv2d_nchwc(s, y, y, conv2d_nchwc_config(wl, target).fallback_config(), target)
    prim = lower(s, [x, wt, y], "conv2d_width")
    r = rng()
    weight = pack_weight(r.standard_normal((c, 1 if depthwise else c, 3, 3)).astype("float32"), lanes, lanes,
                         depthwise)

    def arrays(n):
        xs = r.standard_normal((1, c // lanes, h, n, lanes)).astype("float32")
        return [xs, weight], conv2d_nchwc_reference(xs, weight, (stride, stride), (1, 1, 1, 1), (1, 1), groups)

    run_sizes(name, prim, arrays, sizes(target, 160), tol=dict(rtol=1e-4, atol=2e-4), tmp_path=tmp_path)


@pytest.mark.parametrize("name,tile_size", [("native", 2), ("wasm", 2),  # F(4x4): an override's (~20 s, 2 min)
                                            pytest.param("native", 4, marks=pytest.mark.slow),
                                            pytest.param("wasm", 4, marks=pytest.mark.slow),
                                            pytest.param("arm", 2, marks=pytest.mark.slow)])
def test_conv2d_winograd_over_a_symbolic_width_in_size_buckets(name, tile_size, tmp_path):
    """A CRNN's 3x3 layer as Winograd F(m x m, 3x3) over width W in 1..32: P = ceil(6/m) * ceil(W/m)
    output tiles, one specialization per bucket where P reaches 2, 3, ... (conv2d_winograd_buckets),
    each tiled for its own upper bound; every size runs its bucket."""
    target = resolve_target(name)
    lanes = target.vector_lanes("float32")
    c, h = 2 * lanes, 6
    w_graph = symbolic.size_var("W", 1, 32)
    r = rng()
    g = r.standard_normal((c, c, 3, 3)).astype("float32")
    u = winograd_weight_transform(g, tile_size, lanes, lanes)
    attrs = (("out_layout", f"NCHW{lanes}c"), ("padding", (1, 1, 1, 1)), ("tile_size", tile_size))
    upper_wl = ((1, c // lanes, h, 32, lanes), u.shape, (1, c // lanes, h, 32, lanes), "float32", attrs)
    tiles = winograd_tiles(1, h, w_graph, tile_size)
    starts = conv2d_winograd_buckets(upper_wl, target, symbolic.free_vars([w_graph])[0], tiles)
    assert starts and starts == sorted(starts) and all(1 < v <= 32 for v in starts)
    assert all(symbolic.substitute(tiles, {"W": v - 1}) < symbolic.substitute(tiles, {"W": v}) for v in starts)

    def build(sub):
        x = te.placeholder((1, c // lanes, h, sub, lanes), name="x")
        wt = te.placeholder(u.shape, name="u")
        y = conv2d_winograd_nchwc(x, wt, (1, 1, 1, 1), tile_size)
        hi_wl = ((1, c // lanes, h, sub.hi, lanes), u.shape, (1, c // lanes, h, sub.hi, lanes), "float32", attrs)
        s = te.create_schedule(y)
        schedule_conv2d_winograd(s, y, y, conv2d_winograd_config(hi_wl, target).fallback_config(), target)
        return s, [x, wt, y]

    prim = lower_buckets("conv2d_winograd_width", te.size_var("W", 1, 32), starts, build, stages=BUCKETED_STAGES)
    stores = re.findall(r"^ *(\w+)\[", str(prim), re.M)  # the input transform once, the GEMM in every bucket
    assert stores.count("input_tile") == 1 and stores.count("batch_gemm") >= len(starts) + 1
    packed = pack_weight(g, lanes, lanes)

    def arrays(n):
        xs = r.standard_normal((1, c // lanes, h, n, lanes)).astype("float32")
        return [xs, u], conv2d_nchwc_reference(xs, packed, (1, 1), (1, 1, 1, 1), (1, 1))

    run_sizes(name, prim, arrays, sorted({1, 2, 5, *starts, 32}), tol=dict(rtol=1e-3, atol=1e-3), tmp_path=tmp_path)


# ---- size buckets ----------------------------------------------------------------------------------

def _bucketed_dense_pack(target, k=48, n=64, hi=512):
    bn = target.vector_lanes("float32")
    m_var = te.size_var("M", 1, hi)
    w = te.placeholder((n // bn, k, bn), name="w")

    def build(sub):
        x = te.placeholder((sub, k), name="x")
        y = dense_pack(x, w)
        cfg = dense_pack_config(((sub.hi, k), (n // bn, k, bn), (sub.hi, n), "float32", ()), target).fallback_config()
        s = te.create_schedule(y)
        schedule_dense_pack(s, y, y, cfg, target)
        return s, [x, w, y]

    starts = dense_pack_buckets(((hi, k), (n // bn, k, bn), (hi, n), "float32", ()), target, m_var)
    return lower_buckets("dense_pack_buckets", m_var, starts, build), starts, bn


@pytest.mark.parametrize("name", CPU_TARGETS)
def test_dense_pack_size_buckets_run_every_size_of_the_range(name, tmp_path):
    """One kernel, one specialization per bucket of M (each M below tile_m; tile_m on), each tiled
    for its own upper bound: every size runs the bucket it falls in."""
    target = resolve_target(name)
    k, n = 48, 64
    prim, starts, bn = _bucketed_dense_pack(target, k, n)
    r = rng()
    weight = r.standard_normal((n, k)).astype("float32")

    def arrays(m):
        xs = r.standard_normal((m, k)).astype("float32")
        return [xs, pack_dense_weight(weight, bn)], (xs.astype(np.float64) @ weight.T).astype("float32")

    edges = sorted({s for x in starts for s in (x - 1, x)})
    run_sizes(name, prim, arrays, sorted(set(sizes(target, 512) + edges)), tmp_path=tmp_path)


def test_dense_pack_buckets_tile_each_range_for_its_upper_bound():
    target = resolve_target("x86")
    prim, starts, _ = _bucketed_dense_pack(target)
    tile_m = dense_pack_config(((512, 48), (4, 48, 16), (512, 64), "float32", ()), target).fallback_config()["tile_m"]
    assert starts == list(range(2, tile_m + 1)) and prim.size_vars[0].name == "M"
    bodies, s = [], prim.body
    while isinstance(s, IfThenElse):
        assert repr(s.cond) == f"(M < {starts[len(bodies)]})"
        bodies.append(s.then)
        s = s.otherwise
    bodies.append(s)
    rows = [max((f.extent for f in _fors(b, "unroll") if f.var.name == "dense_pack_c0_inner"), default=1)
            for b in bodies]
    assert rows == list(range(1, tile_m + 1))  # below the bound's tile, exactly M rows


def test_bucket_starts_must_lie_in_the_range():
    m_var = te.size_var("M", 1, 64)
    with pytest.raises(ScheduleError, match="must increase within"):
        lower_buckets("k", m_var, [1], lambda sub: None)
    with pytest.raises(ScheduleError, match="must increase within"):
        lower_buckets("k", m_var, [8, 4], lambda sub: None)


def test_softmax_buckets_start_where_the_reduction_is_factored_by_the_lanes():
    x86, avx2 = resolve_target("x86"), resolve_target("x86-avx2")
    assert softmax_buckets(te.size_var("S", 1, 512), x86) == [32]
    assert softmax_buckets(te.size_var("S", 1, 512), avx2) == [16]
    assert softmax_buckets(te.size_var("S", 64, 512), x86) == []


# ---- kernel arguments and the simplifier --------------------------------------------------------

def test_size_vars_are_int64_arguments_after_the_buffers():
    n_var = te.size_var("N", 1, 64)
    x = te.placeholder((n_var, 3), name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] + 1.0, name="y")
    prim = lower(te.create_schedule(y), [x, y], "plus_one")
    assert prim.size_vars == [n_var]
    cg = CodeGenLLVM(resolve_target("x86"))
    cg.add_function(prim)
    assert 'define void @"plus_one"(ptr noalias %"x", ptr noalias %"y", i64 %"N")' in cg.ir_text()
    static = te.placeholder((5, 3), name="x")
    z = te.compute(static.shape, lambda i, j: static[i, j] + 1.0, name="y")
    assert lower(te.create_schedule(z), [static, z], "plus_one").size_vars == []


def test_size_args_read_the_shapes_and_check_the_range():
    n_var, m_var = te.size_var("N", 1, 64), te.size_var("M", 2, 8)
    x = te.placeholder((n_var, m_var), name="x")
    y = te.compute((n_var, m_var + 1), lambda i, j: te.select(j < m_var, x[i, te.minimum(j, m_var - 1)], 0.0),
                   name="y")
    prim = lower(te.create_schedule(y), [x, y], "pad_column")
    assert prim.size_args([(5, 3), (5, 4)]) == [5, 3]
    with pytest.raises(ValueError, match=r"M = 9 is outside its range 2..8"):
        prim.size_args([(5, 9), (5, 10)])
    with pytest.raises(ValueError, match=r"buffer y dimension 1 is \(M \+ 1\) = 4, got 5"):
        prim.size_args([(5, 3), (5, 5)])


def test_a_size_var_needs_bounds_and_an_argument_that_carries_it():
    with pytest.raises(ValueError, match="0 <= lo <= hi"):
        te.size_var("S", 4, 2)
    n_var = te.size_var("N", 1, 8)
    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: x[i] * 2.0, name="y")
    hidden = te.compute((n_var,), lambda i: y[0] + 1.0, name="hidden")
    out = te.compute((4,), lambda i: hidden[0] + y[i], name="out")
    with pytest.raises(ScheduleError, match="N appear in no argument's shape"):
        lower(te.create_schedule(out), [x, out], "hidden_size")


def test_gpu_kernels_take_symbolic_extents_as_size_arguments_and_launch_by_them():
    """On a GPU target the SizeVars stay the kernel's arguments and the grid becomes a program of
    them (mod.json's postfix form), evaluated per launch; tests/e2e/test_symbolic_gpu.py runs them."""
    from tvmc.ops.gpu.tiling import bind_threads
    from tvmc.tir.gpu import launch_dims, lower_device

    n_var = te.size_var("N", 1, 64)
    x = te.placeholder((n_var,), name="x")
    y = te.compute(x.shape, lambda i: x[i] + 1.0, name="y")
    s = te.create_schedule(y)
    bind_threads(s, y, 16)
    prim = lower_device(lower(s, [x, y], "plus_one", partition=False), resolve_target("opencl"))
    assert prim.size_vars == [n_var]
    launch = prim.launch.to_dict(prim.size_vars)
    assert launch["grid"] == [["$0", 15, "+", 16, "//"], 1, 1] and launch["block"] == [16, 1, 1]
    assert launch_dims(launch, [33]) == ((3, 1, 1), (16, 1, 1))
    assert prim.launch.upper.grid == (4, 1, 1)


def test_simplifier_bounds_symbolic_extents():
    n_var = te.size_var("N", 1, 512)
    i = Var("i")
    ranges = {i: n_var}
    assert isinstance(simplify(i < n_var, ranges), IntImm)  # true for every i in [0, N)
    assert simplify(i < n_var, ranges).value == 1
    assert simplify((n_var // 16) * 16 <= n_var).value == 1
    assert simplify(n_var - (n_var // 8) * 8 < 8).value == 1
    assert repr(simplify(i // n_var, ranges)) == "0"
    assert repr(simplify(i % n_var, ranges)) == "i"
    assert repr(simplify((i * 4 + 2) * n_var)) == "(((i * N) * 4) + (N * 2))"  # distributed over the sum
    assert repr(simplify(te.minimum(i, n_var - 1), ranges)) == "i"
    assert not isinstance(simplify(i + 1 < n_var, ranges), IntImm)  # i = N - 1 fails it
    # a fused loop f over 2 N rows (a GPU block index): f // N // 2 is 0, f % N below N, and a
    # division by N of a non-negative value bounded by N's range
    f, j = Var("f"), Var("j")
    rows = {f: n_var * 2, j: 8}
    assert simplify((f // n_var) // 2 < 1, rows).value == 1
    assert simplify(f % n_var + 0 * j < n_var, rows).value == 1
    assert not isinstance(simplify(f % n_var + 1 < n_var, rows), IntImm)
    assert expr_bounds(j // n_var, rows) == (0, 7) and expr_bounds(j % n_var, rows) == (0, 7)


def test_simplifier_bounds_nested_divisions_and_folds_a_bucket_to_constants():
    """A pool's rows over width // 2 in tiles of 8: in the main loop (o < (W // 2) // 8) the guard
    o * 8 + i < W // 2 holds (the nested division expanded outermost first), and in a size
    bucket where W // 4 has one value the loop body reads it as that literal (points=True)."""
    w_var = te.size_var("W", 16, 2048)
    o, i = Var("o"), Var("i")
    rows = {o: (w_var // 2) // 8, i: 8}
    assert simplify(i + o * 8 < w_var // 2, rows).value == 1
    assert expr_bounds(i + o * 8 - w_var // 2, rows)[1] == -1
    assert not isinstance(simplify(i + o * 8 + 1 < w_var // 2, rows), IntImm)  # fails at W // 2 = 8 (o + 1) - 1
    bucket = te.size_var("W", 16, 19)
    assert repr(simplify(bucket // 4 * 16 + i, points=True)) == "(i + 64)"
    assert not isinstance(simplify(bucket // 4), IntImm)  # shapes (tvmc.te.extent) keep the expression
    assert not isinstance(simplify(bucket // 2, points=True), IntImm)  # 8 or 9


def test_symbolic_pool_runs_small_widths_serially_and_last_tiles_guard_or_clamp_their_rows():
    """A max pool over NCHW16c rows of symbolic width: its parallel loop of constant extent over
    symbolic work launches threads only past min_parallel (a width-16 run stays on the calling
    thread, as the static kernel at that size does). A conv over a constant height of 4 in tiles
    of 3 and a symbolic width guards the last tiles' rows (each tile loop partitions); the row tiles
    of Q K^T, fused after the heads into the parallel loop, are clamped."""
    target = resolve_target("x86")
    w_var = te.size_var("W", 16, 2048)
    x = te.placeholder((1, 1, 32, w_var, 16), name="x")
    rh, rw = te.reduce_axis(2, "rh"), te.reduce_axis(2, "rw")
    y = te.compute((1, 1, 16, w_var // 2, 16), lambda a, b, i, j, c: te.max(
        x[a, b, i * 2 + rh.var, j * 2 + rw.var, c], [rh, rw]), name="max_pool2d")
    s = te.create_schedule(y)
    schedule_pool(s, y, y, None, target)
    prim = lower(s, [x, y], "pool_width")
    (par,) = _fors(prim.body, "parallel")
    assert par.extent == 16 and not isinstance(par.min_parallel, int)
    least = simplify(substitute(par.min_parallel, {w_var: IntImm(16)}))
    assert least.value > 16  # a width-16 run stays on the calling thread
    main = _fors(par.body)[0]  # whole tiles of 8 columns, then the partial one
    assert not _guarded(main) and not any("min(" in repr(x.index) for x in _stmts(main) if isinstance(x, Store))
    wt = te.placeholder((4, 3, 3, 3, 16, 16), name="w")
    xc = te.placeholder((1, 3, 4, w_var // 4, 16), name="xc")
    yc = conv2d_nchwc(xc, wt, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    s = te.create_schedule(yc)
    cfg = conv2d_nchwc_config((upper_shape(xc.shape), wt.shape, upper_shape(yc.shape), "float32", ()),
                              target).fallback_config()
    cfg["tile_oh"] = 3
    schedule_conv2d_nchwc(s, yc, yc, cfg, target)
    acc = next(st for st in s.stages
               if st.tensor.name.startswith("conv2d_nchwc") and st.attach not in ("root", "inline"))
    assert not acc.clamped
    s_var = te.size_var("S", 1, 128)
    a, b = te.placeholder((4, s_var, 32), name="a"), te.placeholder((4, 32, s_var), name="b")
    c = matmul(a, b, (4, s_var, s_var))
    s = te.create_schedule(c)
    schedule_matmul(s, c, c, matmul_config(((4, 128, 32), (4, 32, 128), (4, 128, 128), "float32", ()),
                                           target).fallback_config(), target)
    acc = next(st for st in s.stages if st.attach not in ("root", "inline") and st.op.reduce_axis)
    assert [iv.name for iv in acc.clamped] == [acc.op.axis[1].name]  # the rows, not the vector columns


def test_symbolic_winograd_transforms_launch_threads_only_where_the_gemm_would():
    """The input and output tile loops of a Winograd conv over a symbolic width carry the fewest
    iterations worth a launch, from the GEMM's multiply-adds (parallel_min_extent), as the GEMM's
    own parallel loop does: a CRNN's 16 -> 32 conv at 16 x 8 (width 16) runs them on the calling
    thread, as the static kernel of that size, which has no parallel loop there, does (F(4x4), one
    thread: 15.1 -> 12.7 us against 7.8 static)."""
    target = resolve_target("x86")
    w_var = te.size_var("W", 8, 1024)
    x = te.placeholder((1, 1, 16, w_var, 16), name="x")
    wt = te.placeholder((36, 2, 1, 16, 16), name="u")
    y = conv2d_winograd_nchwc(x, wt, (1, 1, 1, 1), 4)
    s = te.create_schedule(y)
    upper = ((1, 1, 16, 1024, 16), wt.shape, (1, 2, 16, 1024, 16), "float32", (("tile_size", 4),))
    schedule_conv2d_winograd(s, y, y, conv2d_winograd_config(upper, target).fallback_config(), target)
    prim = lower(s, [x, wt, y], "winograd_width")
    loops = _fors(prim.body, "parallel")
    assert len(loops) >= 3
    for par in loops[1:]:  # the pad stage, an elementwise copy, decides by its own elements
        least = par.min_parallel
        assert least and not (isinstance(least, int) and least <= 1)
        at_8 = simplify(substitute(least, {w_var: IntImm(8)})) if not isinstance(least, int) else IntImm(least)
        extent = simplify(substitute(par.extent, {w_var: IntImm(8)})) if not isinstance(par.extent, int) \
            else IntImm(par.extent)
        assert extent.value < at_8.value  # width 8: P = 4 x 2 tiles, stays on the calling thread


def test_small_runs_of_symbolic_parallel_loops_stay_on_the_calling_thread():
    """A parallel loop of symbolic extent carries the fewest iterations worth a launch
    (min_parallel); the LLVM code calls GOMP_parallel only past it (and with more than one
    thread), else the loop's body function on every iteration, whose buffers are noalias
    parameters: the buffers loaded from GOMP's closure would otherwise lose their noalias."""
    target = resolve_target("x86")
    s_var = te.size_var("S", 1, 4096)
    x = te.placeholder((s_var, 256), name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 3.0, name="y")
    s = te.create_schedule(y)
    schedule_injective(s, y, y, None, target)
    prim = lower(s, [x, y], "scale_rows")
    (par,) = _fors(prim.body, "parallel")
    assert par.min_parallel == 16  # 4096 elements / 256 per row
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    text = cg.ir_text()
    assert text.count("call void @\"GOMP_parallel\"") == 1
    assert 'call void @"scale_rows.par1.body"(ptr' in text and text.count('@"scale_rows.par1.body"(ptr') == 3
    define = next(line for line in text.splitlines() if line.startswith('define internal void @"scale_rows.par1.body"'))
    assert define.count("ptr noalias") == 2 and define.count("i64") == 3  # x, y; S, begin, end


# ---- helpers -------------------------------------------------------------------------------------

def _stmts(s):
    """Every statement of a tree, pre-order."""
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from _stmts(x)
    elif isinstance(s, IfThenElse):
        yield from _stmts(s.then)
        if s.otherwise is not None:
            yield from _stmts(s.otherwise)
    elif hasattr(s, "body"):
        yield from _stmts(s.body)


def _fors(s, kind=None) -> list:
    """The For loops of a tree (of `kind` when given), pre-order."""
    return [x for x in _stmts(s) if isinstance(x, For) and (kind is None or x.kind == kind)]


def _guarded(loop) -> bool:
    """Whether an IfThenElse sits inside `loop`."""
    return any(isinstance(x, IfThenElse) for x in _stmts(loop.body))
