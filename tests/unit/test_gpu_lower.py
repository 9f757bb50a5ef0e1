"""GPU lowering (tvmc.tir.gpu and the GPU parts of tvmc.tir.lower): thread bindings and the
launch configuration, shared-memory regions and barriers, cross-thread reductions, the compile
time checks; the OpenCL C printer's spellings; numbers on OpenCL where a driver is installed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.targets import require
from tvmc import te
from tvmc.codegen.opencl import CodeGenOpenCL
from tvmc.errors import ScheduleError
from tvmc.target import resolve_target
from tvmc.tir.gpu import lower_device
from tvmc.tir.ir import Barrier, stmt_children
from tvmc.tir.lower import lower

GPU = resolve_target("opencl")


def _stmts(s):
    yield s
    for c in stmt_children(s):
        yield from _stmts(c)


def _barriers(prim) -> int:
    return sum(isinstance(s, Barrier) for s in _stmts(prim.body))


def _run(prim, arrays, out_shape, dtype="float32"):
    return require("opencl").run_kernel(prim, arrays, np.zeros(out_shape, dtype))


def _elementwise(n=1000, threads=128):
    a = te.placeholder((n,), name="a")
    b = te.compute((n,), lambda i: a[i] + te.const(1.0), name="b")
    s = te.create_schedule(b)
    bx, tx = s[b].split(b.op.axis[0], threads)
    s[b].bind(bx, te.thread_axis("blockIdx.x"))
    s[b].bind(tx, te.thread_axis("threadIdx.x"))
    return s, a, b


def test_bind_gives_the_launch_and_the_opencl_spelling():
    s, a, b = _elementwise()
    prim = lower_device(lower(s, [a, b], "add_one"), GPU)
    assert prim.launch.grid == (8, 1, 1) and prim.launch.block == (128, 1, 1) and prim.launch.shared_bytes == 0
    cg = CodeGenOpenCL(GPU)
    cg.add_function(prim)
    src = cg.source()
    assert "__kernel void add_one(__global float* restrict a" in src
    assert "get_group_id(0)" in src and "get_local_id(0)" in src and "< 1000L" in src  # the tail guard
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(_run(prim, [x], (1000,)), x + 1)


def _tiled_matmul(m=40, k=24, n=36, tile=8, tk=4, shared=True):
    """C = A x B with 8 x 8 blocks of 8 x 8 threads, one output per thread, K in steps of tk
    staged in shared memory."""
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], r), name="C")
    s = te.create_schedule(C)
    acc = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, tile)
    jo, ji = s[C].split(j, tile)
    s[C].reorder(io, jo, ii, ji)
    for iv, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        s[C].bind(iv, te.thread_axis(tag))
    s[acc].compute_at(s[C], ji)
    ko, ki = s[acc].split(s[acc].op.reduce_axis[0], tk)
    if shared:
        for t in (A, B):
            cache = s.cache_read(t, "shared", [acc])
            s[cache].compute_at(s[acc], ko)
            fused = s[cache].fuse(*s[cache].op.axis)
            rest, tx = s[cache].split(fused, tile)
            s[cache].bind(tx, te.thread_axis("threadIdx.x"))
            _, ty = s[cache].split(rest, tile)
            s[cache].bind(ty, te.thread_axis("threadIdx.y"))
    return s, A, B, C


def test_shared_tiles_cover_the_block_and_get_barriers():
    s, A, B, C = _tiled_matmul()
    prim = lower_device(lower(s, [A, B, C], "matmul"), GPU)
    text = str(prim)
    # the region is relaxed over the block's threads: 8 rows x 4 k of A, 4 k x 8 columns of B
    assert "allocate A_shared: float32[8,4] (shared)" in text and "allocate B_shared: float32[4,8] (shared)" in text
    assert prim.launch.shared_bytes == 2 * 32 * 4 and prim.launch.grid == (5, 5, 1)
    assert _barriers(prim) == 2  # after the loads (read after write), at the end of a k step (write after read)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 36)).astype(np.float32)
    np.testing.assert_allclose(_run(prim, [a, b], (40, 36)), a @ b, rtol=1e-5, atol=1e-5)


def test_cross_thread_reduction_halves_through_shared_memory():
    x = te.placeholder((5, 100), name="x")
    r = te.reduce_axis(100, "r")
    y = te.compute((5,), lambda i: te.max(x[i, r], r), name="y")
    s = te.create_schedule(y)
    s[y].bind(y.op.axis[0], te.thread_axis("blockIdx.x"))
    _, ki = s[y].split(r, 64)
    s[y].bind(ki, te.thread_axis("threadIdx.x"))
    prim = lower_device(lower(s, [x, y], "row_max"), GPU)
    assert "allocate y_red: float32[64] (shared)" in str(prim)
    assert _barriers(prim) == 1 + 6 + 1  # partials stored, log2(64) halving steps, buffer reuse
    a = np.random.default_rng(1).standard_normal((5, 100)).astype(np.float32)
    np.testing.assert_array_equal(_run(prim, [a], (5,)), a.max(axis=1))


def test_more_threads_than_the_descriptor_allows_is_a_schedule_error():
    s, a, b = _elementwise(threads=512)
    with pytest.raises(ScheduleError, match="add_one: 512 threads per block .* allows 256"):
        lower_device(lower(s, [a, b], "add_one"), GPU)


def test_too_much_shared_memory_is_a_schedule_error():
    s, A, B, C = _tiled_matmul(m=64, k=4096, n=64, tk=2048)
    with pytest.raises(ScheduleError, match="131072 bytes of shared memory per block, target opencl allows 32768"):
        lower_device(lower(s, [A, B, C], "matmul"), GPU)


def test_unbound_kernel_and_uncovered_stores_are_schedule_errors():
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * te.const(2.0), name="b")
    with pytest.raises(ScheduleError, match="no loop is bound to blockIdx/threadIdx"):
        lower_device(lower(te.create_schedule(b), [a, b], "k"), GPU)
    # a shared stage binds threadIdx.x, the output only blockIdx.x: every thread would store
    c = te.compute((64,), lambda i: a[i] * te.const(2.0), name="c")
    s = te.create_schedule(c)
    co, ci = s[c].split(c.op.axis[0], 16)
    s[c].bind(co, te.thread_axis("blockIdx.x"))
    cache = s.cache_read(a, "shared", [c])
    s[cache].compute_at(s[c], co)
    s[cache].bind(s[cache].op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="store to c is not inside loops bound to threadIdx.x"):
        lower_device(lower(s, [a, c], "k"), GPU)


def test_a_stage_left_at_root_needs_global_memory_and_is_refused():
    a = te.placeholder((64,), name="a")
    t = te.compute((64,), lambda i: a[i] + te.const(1.0), name="t")
    b = te.compute((64,), lambda i: t[i] * te.const(2.0), name="b")
    s = te.create_schedule(b)
    for st, x in ((s[t], t), (s[b], b)):
        bx, tx = st.split(x.op.axis[0], 32)
        st.bind(bx, te.thread_axis("blockIdx.x"))
        st.bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="stage t needs a global buffer inside the kernel"):
        lower_device(lower(s, [a, b], "k"), GPU)


def test_a_barrier_only_some_threads_reach_is_refused():
    """A 64-thread cross-thread reduction inside a 32-thread loop of the same axis: the launch has
    64 threads, the outer loop runs guarded, and the reduction's barriers sit under the guard."""
    x = te.placeholder((32, 100), name="x")
    r = te.reduce_axis(100, "r")
    y = te.compute((32,), lambda i: te.sum(x[i, r], r), name="y")
    z = te.compute((32,), lambda i: y[i] * te.const(2.0), name="z")
    s = te.create_schedule(z)
    s[z].bind(z.op.axis[0], te.thread_axis("threadIdx.x"))
    s[y].set_scope("local")
    s[y].compute_at(s[z], z.op.axis[0])
    _, ki = s[y].split(r, 64)
    s[y].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="barrier is reached by only some threads"):
        lower_device(lower(s, [x, z], "k"), GPU)


def test_thread_axis_and_scope_names_are_checked():
    with pytest.raises(ScheduleError, match="unknown thread axis 'warpIdx.x'"):
        te.thread_axis("warpIdx.x")
    s, a, b = _elementwise()
    with pytest.raises(ScheduleError, match="unknown scope 'texture'"):
        s[b].set_scope("texture")
