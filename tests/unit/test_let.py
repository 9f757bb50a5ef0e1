"""Let (te.let, TVM's tir.Let) through the pipeline: the tensor expression, inlining and lowering,
simplification, the LLVM codegen (scalar and vectorized loops) and the OpenCL printer, each
kernel checked against numpy; and the expression size of a grid_sample that binds its repeated
coordinates."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tests.targets import require
from tvmc import te
from tvmc.codegen.build import compile_ir, link_shared
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.codegen.opencl import CodeGenOpenCL
from tvmc.graph.ir import TensorType
from tvmc.ops.registry import get_op
from tvmc.target import resolve_target
from tvmc.te.expr import FloatImm, Let, Var, substitute, walk
from tvmc.tir.gpu import lower_device
from tvmc.tir.ir import Store, stmt_children
from tvmc.tir.lower import lower
from tvmc.tir.simplify import simplify


def _stores(s):
    if isinstance(s, Store):
        yield s
    for c in stmt_children(s):
        yield from _stores(c)


def _chain(n=37):
    """C[i] = B[i] + B[(i + 1) % n] with B[i] = let v = A[i] * 2 + 1 in v * v - v inlined twice:
    one Var bound by two Lets in one expression."""
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: te.let(a[i] * 2.0 + 1.0, lambda v: v * v - v), name="B")
    c = te.compute((n,), lambda i: b[i] + b[(i + 1) % n], name="C")
    return a, b, c


def _reference(x):
    v = x * np.float32(2) + np.float32(1)
    b = v * v - v
    return b + np.roll(b, -1)


def _emit(codegen, prim):
    codegen.add_function(prim)
    return codegen


def test_let_binds_a_fresh_var_once_and_passes_literals_and_vars_through():
    x = Var("x", "float32")
    e = te.let(x * 3.0, lambda v: v * v)
    assert isinstance(e, Let) and e.var.dtype == "float32" and e.dtype == "float32"
    assert sum(1 for n in walk(e) if n is e.var) == 2 and sum(1 for n in walk(e) if n is x) == 1
    assert te.let(x, lambda v: v + 1.0).a is x  # nothing to bind
    assert isinstance(te.let(2.0, lambda v: v), FloatImm)


def test_substitute_and_simplify_go_through_let():
    i = Var("i")
    e = te.let(i * 4 + 0, lambda v: v + v)
    s = substitute(e, {i: te.const(3)})
    assert isinstance(s, Let) and repr(s.value) == "((3 * 4) + 0)"
    folded = simplify(s)  # the value folds to 12, then the Let of a literal is substituted away
    assert not isinstance(folded, Let) and folded.value == 24
    kept = simplify(e)
    assert isinstance(kept, Let) and repr(kept.body) == f"({kept.var!r} * 2)"


def test_lowered_inlined_let_runs_on_cpu(tmp_path):
    target = resolve_target("native")
    a, b, c = _chain()
    s = te.create_schedule(c)
    s[b].compute_inline()
    prim = lower(s, [a, c], "let_chain")
    (store,) = list(_stores(prim.body))
    lets = [n for n in walk(store.value) if isinstance(n, Let)]
    assert len(lets) == 2 and lets[0].var is lets[1].var
    path = tmp_path / "let_chain.so"
    path.write_bytes(link_shared(compile_ir(_emit(CodeGenLLVM(target), prim).ir_text(), target), target))
    x = np.random.default_rng(3).standard_normal(37).astype(np.float32)
    out = np.zeros(37, np.float32)
    ctypes.CDLL(str(path)).let_chain(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    np.testing.assert_allclose(out, _reference(x), rtol=1e-5, atol=1e-6)  # FMA contraction


@pytest.mark.parametrize("name", ["native", "opencl"])
def test_let_inlined_into_its_own_index_restores_the_outer_binding(name):
    """D[i] = B[B[i] % n] with B inlined: the outer Let's body reads the index holding the inner
    Let of the same var before it reads the var, which must then be the outer value again."""
    t = require(name)
    n = 11
    a = te.placeholder((n,), "int64", name="A")
    b = te.compute((n,), lambda i: te.let(a[i] * 3, lambda v: a[(i + 1) % n] + v), name="B")
    d = te.compute((n,), lambda i: b[b[i] % n], name="D")
    s = te.create_schedule(d)
    s[b].compute_inline()
    if name == "opencl":
        s[d].bind(s[d].op.axis[0], te.thread_axis("threadIdx.x"))
        prim = lower_device(lower(s, [a, d], "let_nested"), t.target)
    else:
        prim = lower(s, [a, d], "let_nested")
    x = np.random.default_rng(6).integers(-50, 50, n).astype(np.int64)
    out = t.run_kernel(prim, [x], np.zeros(n, np.int64))
    ref = np.roll(x, -1) + 3 * x
    np.testing.assert_array_equal(out, ref[ref % n])


@pytest.mark.parametrize("name", ["native", "wasm"])
def test_vectorized_loop_with_let_is_correct(name):
    """A vectorized loop whose body binds a Let is emitted as a scalar loop (its vars would hide
    the lane dependence of indices); the result is the same."""
    t = require(name)
    a, b, c = _chain(48)
    s = te.create_schedule(c)
    s[b].compute_inline()
    _, inner = s[c].split(s[c].op.axis[0], 8)
    s[c].vectorize(inner)
    x = np.random.default_rng(4).standard_normal(48).astype(np.float32)
    out = t.run_kernel(lower(s, [a, c], "let_vec"), [x], np.zeros(48, np.float32))
    np.testing.assert_allclose(out, _reference(x), rtol=1e-5, atol=1e-6)  # FMA contraction


def _gpu_chain(target):
    a, b, c = _chain()
    s = te.create_schedule(c)
    s[b].compute_inline()
    bx, tx = s[c].split(s[c].op.axis[0], 16)
    s[c].bind(bx, te.thread_axis("blockIdx.x"))
    s[c].bind(tx, te.thread_axis("threadIdx.x"))
    return lower_device(lower(s, [a, c], "let_gpu"), target)


def test_opencl_declares_each_let_once_under_its_own_name():
    gpu = resolve_target("opencl")
    prim = _gpu_chain(gpu)
    src = _emit(CodeGenOpenCL(gpu), prim).source()
    names = re.findall(r"const float (\w+) = ", src)
    assert len(names) == 2 and len(set(names)) == 2, src
    x = np.random.default_rng(5).standard_normal(37).astype(np.float32)
    out = require("opencl").run_kernel(prim, [x], np.zeros(37, np.float32))
    np.testing.assert_allclose(out, _reference(x), rtol=1e-5, atol=1e-6)  # FMA contraction


def test_ptx_binds_let():
    """The nvptx64 path is the LLVM codegen: each Let's value is computed once, its var read twice."""
    cuda = resolve_target("cuda")
    ll = _emit(CodeGenLLVM(cuda), _gpu_chain(cuda)).ir_text()
    # per binding: one load of A and two multiplies (x * 2, v * v); substituting v would make three of each
    assert ll.count("load float") == 2 and ll.count("fmul") == 4, ll


def test_grid_sample_cubic_reflection_expression_stays_small():
    """Cubic 2-D grid_sample with reflection padding binds its coordinates, reflections, taps and
    weights: the stored expression, walked as a tree, has about 1,000 nodes (written without Lets
    it had 730,000, and took minutes to lower and compile)."""
    x = te.placeholder((1, 2, 4, 5), "float32", name="x")
    grid = te.placeholder((1, 3, 6, 2), "float32", name="grid")
    op = get_op("image.grid_sample")
    out = op.compute([x, grid], dict(mode="cubic", padding_mode="reflection", align_corners=1),
                     TensorType((1, 2, 3, 6), "float32"))
    size = sum(1 for _ in walk(out.op.body))
    assert size < 5000, size
