"""LLVM codegen: math-intrinsic accuracy (scalar and vectorized) against the errors claimed in
tvmc/codegen/intrinsics.py, AVX-512 vector IR, GOMP parallel loops, IR dumps and typed errors."""

from __future__ import annotations

import ctypes
import dataclasses
import math
import re

import numpy as np
import pytest

from tvmc import te
from tvmc.codegen import intrinsics
from tvmc.backends import build_library
from tvmc.codegen.build import compile_ir, link_shared
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import CodegenError
from tvmc.graph.ir import Function, TensorType, Var
from tvmc.ops.registry import make_call
from tvmc.target import resolve_target
from tvmc.tir.lower import lower

N = 1 << 16          # elements per accuracy kernel
TRIGONOMETRIC = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
LANES = 16           # float32 lanes of AVX-512 (x86 descriptor: vector_width_bits 512)


@pytest.fixture(scope="module")
def host():
    """This host's CPU (`native`): the kernels below are run here."""
    return resolve_target("native")


def _unary_prim(name, fn, vectorize, n=N, nargs=1, dtype="float32"):
    args = [te.placeholder((n,), dtype, name=f"x{k}") for k in range(nargs)]
    out = te.compute((n,), lambda i: fn(*[a[i] for a in args]), name="y")
    s = te.create_schedule(out)
    if vectorize:
        _, inner = s[out].split(s[out].op.axis[0], LANES)
        s[out].vectorize(inner)
    return lower(s, args + [out], name)


def _load_library(prims, target, path):
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    path.write_bytes(link_shared(compile_ir(cg.ir_text(), target), target))
    return ctypes.CDLL(str(path))


def _caller(lib, name, n=N, dtype=np.float32):
    fn = getattr(lib, name)

    def call(*xs):
        xs = [np.ascontiguousarray(x, dtype=dtype) for x in xs]
        assert all(x.shape == (n,) for x in xs)
        out = np.full(n, np.nan, dtype=dtype)
        fn(*[ctypes.c_void_p(a.ctypes.data) for a in xs + [out]])
        return out

    return call


INTRINSICS = {"exp": te.exp, "log": te.log, "tanh": te.tanh, "erf": te.erf, "sigmoid": te.sigmoid,
              "sqrt": te.sqrt, "fabs": te.fabs, "floor": te.floor, "ceil": te.ceil, "round": te.round,
              **{name: getattr(te, name) for name in TRIGONOMETRIC}}


@pytest.fixture(scope="module")
def kernels(host, tmp_path_factory):
    """{(intrinsic, 'scalar'|'vector'): f(x) -> y} from one library (one LLVM compile)."""
    prims, names = [], {}
    for mode in ("scalar", "vector"):
        for name, fn in INTRINSICS.items():
            prims.append(_unary_prim(f"{name}_{mode}", fn, mode == "vector"))
            names[(name, mode)] = f"{name}_{mode}"
        prims.append(_unary_prim(f"pow_{mode}", te.power, mode == "vector", nargs=2))
        names[("pow", mode)] = f"pow_{mode}"
    lib = _load_library(prims, host, tmp_path_factory.mktemp("codegen") / "intrin.so")
    return {key: _caller(lib, sym) for key, sym in names.items()}


# --- accuracy -------------------------------------------------------------------------------

def claimed_error(name):
    """(kind 'relative'|'absolute', bound) from the intrinsics module docstring."""
    m = re.search(rf"^{name}\s+(relative|absolute)\s+([0-9.]+e-[0-9]+)", intrinsics.__doc__, re.MULTILINE)
    assert m, f"intrinsics.py docstring states no maximum error for {name}"
    return m.group(1), float(m.group(2))


def _fill(points, rng, lo, hi, geometric=False, dtype=np.float32):
    """N inputs of `dtype`: an even grid over [lo, hi], random points, and named edge points."""
    k = N - len(points)
    if geometric:
        grid = np.geomspace(lo, hi, k // 2)
        rand = np.exp(rng.uniform(np.log(lo), np.log(hi), k - k // 2))
    else:
        grid = np.linspace(lo, hi, k // 2)
        rand = rng.uniform(lo, hi, k - k // 2)
    return np.concatenate([grid, rand, np.asarray(points, dtype=np.float64)]).astype(dtype)


_erf64 = np.frompyfunc(math.erf, 1, 1)

# name: (reference in float64, input builder). The extra points are where exhaustive scans of
# the float32 binades found each implementation's worst error, plus range ends.
ACCURACY = {
    "exp": (np.exp, lambda rng: _fill([-80.0, 80.0, 0.0, -0.0, 3.1236, -71.04561614990234, 1e-8], rng, -80, 80)),
    "log": (np.log, lambda rng: _fill([1.1365491151809692, 0.7759832739830017, 1.0, 1.0000001, 0.99999994,
                                       1.17549435e-38, 3.4e38], rng, 1e-30, 1e30, geometric=True)),
    "tanh": (np.tanh, lambda rng: _fill([-20.0, 20.0, 0.0, 1e-4, -1e-4, 1.01e-4, -0.0012797117233276367],
                                        rng, -20, 20)),
    "erf": (lambda x: _erf64(x).astype(np.float64),
            lambda rng: _fill([-6.0, 6.0, 0.0, 0.03796697407960892, -0.03796697407960892, 0.0260711926966905],
                              rng, -6, 6)),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)),
                lambda rng: _fill([-30.0, 30.0, 0.0, 7.859210968017578, -88.0, 88.0], rng, -30, 30)),
}


# The trigonometric and hyperbolic functions, both precisions: name -> (reference, (lo, hi), edge points)
TRIG_RANGES = {
    "sin": (np.sin, (-100, 100), [0.0, 1e-8, np.pi, np.pi / 2, -100.0]),
    "cos": (np.cos, (-100, 100), [0.0, 1e-8, np.pi, np.pi / 2, -100.0]),
    "tan": (np.tan, (-1.5, 1.5), [0.0, 1e-8, 0.785398, 1.5]),
    "asin": (np.arcsin, (-1, 1), [0.0, 1e-8, 1.0, -1.0, 0.5]),
    "acos": (np.arccos, (-1, 1), [0.0, 1e-8, 1.0, -1.0, 0.5, 0.99999]),
    "atan": (np.arctan, (-50, 50), [0.0, 1e-8, 1.0, -1.0, 0.41421356, 1e30]),
    "sinh": (np.sinh, (-80, 80), [0.0, 1e-8, 0.49999, 0.5, 88.0, -88.0]),
    "cosh": (np.cosh, (-80, 80), [0.0, 1e-8, 0.5, 88.0, -88.0]),
    "asinh": (np.arcsinh, (-100, 100), [0.0, 1e-8, 1e-3, 1e10, -1e10, 5000.0]),
    "acosh": (np.arccosh, (1, 100), [1.0, 1.0001, 1e10, 5000.0]),
    "atanh": (np.arctanh, (-0.9999, 0.9999), [0.0, 1e-8, 1e-3, 0.5]),
}
ACCURACY.update({name: (ref, lambda rng, r=r, p=p: _fill(p, rng, *r)) for name, (ref, r, p) in TRIG_RANGES.items()})


@pytest.mark.parametrize("mode", ["scalar", "vector"])
@pytest.mark.parametrize("name", sorted(ACCURACY))
def test_intrinsic_max_error_matches_docstring(kernels, name, mode):
    kind, bound = claimed_error(name)
    ref_fn, inputs = ACCURACY[name]
    x = inputs(np.random.default_rng(0))
    y = kernels[(name, mode)](x).astype(np.float64)
    ref = ref_fn(x.astype(np.float64))
    err = np.abs(y - ref)
    if kind == "relative":  # where the result is 0 (log 1) the error must be 0 too
        err = np.where(ref == 0, err, err / np.where(ref == 0, 1.0, np.abs(ref)))
    worst = int(np.argmax(err))
    assert np.isfinite(y).all()
    assert err[worst] <= bound, (f"{name} ({mode}): {kind} error {err[worst]:.3g} at x={x[worst]!r} "
                                 f"exceeds the documented {bound:g}")


@pytest.fixture(scope="module")
def kernels64(host, tmp_path_factory):
    """{(intrinsic, 'scalar'|'vector'): f(x) -> y} on float64 (4-lane vectors)."""
    prims, names = [], {}
    for mode in ("scalar", "vector"):
        for name in ACCURACY64:
            prims.append(_unary_prim(f"{name}64_{mode}", INTRINSICS[name], mode == "vector", dtype="float64"))
            names[(name, mode)] = f"{name}64_{mode}"
    lib = _load_library(prims, host, tmp_path_factory.mktemp("codegen") / "intrin64.so")
    return {key: _caller(lib, sym, dtype=np.float64) for key, sym in names.items()}


def _fill64(points, rng, lo, hi, geometric=False):
    return _fill(points, rng, lo, hi, geometric, dtype=np.float64)


# float64: range ends, the series / continued-fraction seam of erf at |x| = 2, subnormals
ACCURACY64 = {
    "exp": (np.exp, lambda rng: _fill64([0.0, -0.0, 1e-300, -745.0, -740.0], rng, -708, 709.7)),
    "log": (np.log, lambda rng: _fill64([1.0, 1 + 2 ** -52, 1 - 2 ** -53, 5e-324, 2.2250738585072014e-308],
                                        rng, 1e-320, 1e308, geometric=True)),
    "tanh": (np.tanh, lambda rng: _fill64([0.0, 1e-8, -1e-8, 1e-9, 0.3], rng, -20, 20)),
    "erf": (lambda x: _erf64(x).astype(np.float64),
            lambda rng: _fill64([0.0, 2.0, -2.0, 1.9999999, 6.0, 5.9999], rng, -7, 7)),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda rng: _fill64([0.0, 36.0, -700.0], rng, -40, 40)),
    **{name: (ref, lambda rng, r=r, p=p: _fill64(p, rng, *r)) for name, (ref, r, p) in TRIG_RANGES.items()},
}


@pytest.mark.parametrize("mode", ["scalar", "vector"])
@pytest.mark.parametrize("name", sorted(ACCURACY64))
def test_float64_intrinsic_max_error_matches_docstring(kernels64, name, mode):
    kind, bound = claimed_error(name + "64")
    ref_fn, inputs = ACCURACY64[name]
    x = inputs(np.random.default_rng(0))
    y = kernels64[(name, mode)](x)
    ref = ref_fn(x)
    err = np.abs(y - ref)
    if kind == "relative":
        err = np.where(ref == 0, err, err / np.where(ref == 0, 1.0, np.abs(ref)))
    worst = int(np.argmax(err))
    assert np.isfinite(y).all()
    assert err[worst] <= bound, (f"{name} float64 ({mode}): {kind} error {err[worst]:.3g} at x={x[worst]!r} "
                                 f"exceeds the documented {bound:g}")


@pytest.mark.parametrize("name", sorted(ACCURACY64))
def test_float64_nan_propagates(kernels64, name):
    x = np.full(N, np.nan)
    for mode in ("scalar", "vector"):
        assert np.isnan(kernels64[(name, mode)](x)).all(), mode


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_sqrt_fabs_floor_ceil_are_exact(kernels, mode):
    rng = np.random.default_rng(1)
    x = np.concatenate([np.geomspace(1e-30, 1e30, N // 2), rng.uniform(0, 100, N // 2 - 4),
                        [0.0, 1.0, 2.0, 4.0]]).astype(np.float32)
    np.testing.assert_array_equal(kernels[("sqrt", mode)](x), np.sqrt(x))  # correctly rounded
    s = (x * np.where(np.arange(N) % 2, 1, -1)).astype(np.float32) / 7
    np.testing.assert_array_equal(kernels[("fabs", mode)](s), np.abs(s))
    np.testing.assert_array_equal(kernels[("floor", mode)](s), np.floor(s))
    np.testing.assert_array_equal(kernels[("ceil", mode)](s), np.ceil(s))
    halves = (np.arange(N, dtype=np.float32) - N // 2) / 2  # ties round to even, as ONNX Round
    np.testing.assert_array_equal(kernels[("round", mode)](halves), np.round(halves))


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_pow_positive_base(kernels, mode):
    """pow(x, y) = exp(y * log x): the docstring states no bound; the error of exp(z) grows with
    |z| = |y ln x| because the rounding of z becomes an absolute error in the exponent."""
    rng = np.random.default_rng(2)
    x = np.exp(rng.uniform(np.log(1e-3), np.log(1e3), N)).astype(np.float32)
    y = rng.uniform(-3, 3, N).astype(np.float32)
    x[:3], y[:3] = [2.0, 10.0, 0.5], [0.75, 2.0, -1.0]  # LRN's beta, exact powers
    out = kernels[("pow", mode)](x, y).astype(np.float64)
    ref = np.power(x.astype(np.float64), y.astype(np.float64))
    z = np.abs(y * np.log(x.astype(np.float64)))
    rel = np.abs(out - ref) / ref
    assert (rel <= 2.5e-7 * (1 + z) + 1.2e-7).all(), float(rel.max())


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_exp_underflow_and_overflow_ends(kernels, mode):
    x = np.zeros(N, np.float32)
    x[:6] = [-87.0, -100.0, -1e4, 89.0, 1e4, np.inf]
    y = kernels[("exp", mode)](x)
    assert (np.abs(y[:3] - np.exp(x[:3].astype(np.float64))) < 2e-38).all()
    assert np.isposinf(y[3:6]).all()
    assert (y[6:] == 1.0).all()


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_exp_reaches_the_subnormals_and_is_exactly_zero_below(kernels, mode):
    """Subnormal results down to the smallest (x > -103.97) within one unit of their last place;
    exactly +0 at and below exp_lo (-104: there the scale is an exact 0, no underflowing
    product) and for the masked scores of an attention (-1e4, -1e9, -inf)."""
    x = np.full(N, -1e4, np.float32)
    x[:8] = [-88.0, -95.5, -100.0, -103.0, -103.9, -104.0, -1e9, -np.inf]
    y = kernels[("exp", mode)](x)
    ref = np.exp(x[:5].astype(np.float64))
    assert (y[:5] > 0).all() and (np.abs(y[:5] - ref) <= np.spacing(np.float32(0)) + 2e-7 * ref).all()
    assert (y[5:] == 0).all() and not np.signbit(y[5:]).any()


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_exp_top_of_float32_range_is_finite(kernels, mode):
    x = np.full(N, 88.5, np.float32)
    x[:3] = [88.4, 88.6, 88.72]
    y = kernels[("exp", mode)](x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))  # all below FLT_MAX = 3.4028e38
    np.testing.assert_allclose(y, ref, rtol=2e-7)


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "erf", "log", "sqrt"])
def test_nan_propagates(kernels, name):
    x = np.full(N, np.nan, np.float32)
    for mode in ("scalar", "vector"):
        assert np.isnan(kernels[(name, mode)](x)).all(), mode


def test_log_special_values(kernels):
    x = np.ones(N, np.float32)
    x[:5] = [0.0, -0.0, -1.0, np.inf, 1.17549435e-38]
    y = kernels[("log", "vector")](x)
    assert np.isneginf(y[:2]).all() and np.isnan(y[2]) and np.isposinf(y[3])
    assert abs(y[4] - np.log(np.float64(1.17549435e-38))) < 1e-5
    assert (y[5:] == 0).all()


def test_intrinsic_on_integer_is_a_codegen_error(host):
    a = te.placeholder((4,), "int64", name="a")
    b = te.compute((4,), lambda i: te.exp(a[i]), name="b")
    cg = CodeGenLLVM(host)
    with pytest.raises(CodegenError, match="needs a float argument"):
        cg.add_function(lower(te.create_schedule(b), [a, b], "bad"))


# --- vector IR, parallel loops ----------------------------------------------------------------

def test_vectorized_kernel_uses_16_lane_vectors():
    x86 = resolve_target("x86")  # the AVX-512 descriptor, compiled only
    prim = _unary_prim("vadd", lambda v: v * 2.0 + 1.0, vectorize=True, n=64)
    cg = CodeGenLLVM(x86)
    cg.add_function(prim)
    ir_text = cg.ir_text()
    assert re.search(r"load <16 x float>", ir_text)
    assert re.search(r"fmul contract <16 x float>", ir_text) and re.search(r"fadd contract <16 x float>", ir_text)
    assert re.search(r"store <16 x float>", ir_text)
    dumps = {"_want": ("asm",)}
    compile_ir(ir_text, x86, dumps)
    assert "<16 x float>" in dumps["ll"]  # survives LLVM's O3 pipeline
    assert "zmm" in dumps["asm"]          # AVX-512 registers
    assert "vfmadd" in dumps["asm"]       # x * 2 + 1: the contractable multiply-add is one FMA


@pytest.mark.parametrize("name,align", [("x86", 64), ("x86-avx2", 32), ("arm", None), ("wasm", None)])
def test_kernels_align_their_stack_frame_to_the_vector_width(name, align):
    """A CPU kernel and its parallel loop's body carry alignstack(vector bytes) where vectors are
    wider than 16 bytes: their zmm / ymm spill slots are then aligned (vmovaps at a 64-byte
    aligned rsp), where at the ABI's 16-byte alignment a spilled zmm straddled two cache lines in
    3 of 4 stack placements (ASLR) and a CRNN's 1-channel stem conv ran 57 us instead of 10."""
    from test_wasm import _parallel_kernel

    target = resolve_target(name)
    defines = [line for line in _parallel_kernel(target).splitlines() if line.startswith("define")]
    kernel_and_body = [d for d in defines if '@"k"(' in d or '.body"(' in d]
    assert len(kernel_and_body) == (2 if target.threaded else 1)  # wasm32: no threads, no body
    for d in kernel_and_body:
        assert (f"alignstack({align})" in d) == (align is not None), d


def test_constant_index_offsets_are_separate_geps(host):
    """y[i] = x[i + 3]: the address is x + i, then + 3 as its own GEP, so that unrolled tiles keep
    their constant offsets as displacements of one pointer."""
    x = te.placeholder((64,), "float32", name="x")
    y = te.compute((61,), lambda i: x[i + 3], name="y")
    cg = CodeGenLLVM(host)
    cg.add_function(lower(te.create_schedule(y), [x, y], "shifted"))
    assert re.search(r"getelementptr inbounds float, ptr %\"?[.\w]+\"?, i64 3\b", cg.ir_text())


def test_unrolled_offsets_share_one_base_pointer_per_block(host, tmp_path):
    """y[i, k] = x[i * 8 + k] + x[i * 8 + k + 1], k unrolled: the base x + i * 8 is computed once in
    the loop's body and every access takes its constant offset from it (16 constant GEPs, one
    base); the results match numpy."""
    x = te.placeholder((65,), "float32", name="x")
    y = te.compute((8, 8), lambda i, k: x[i * 8 + k] + x[i * 8 + k + 1], name="y")
    s = te.create_schedule(y)
    s[y].unroll(y.op.axis[1])
    prim = lower(s, [x, y], "unrolled")
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    body = cg.ir_text().split('define void @"unrolled"', 1)[1]
    variable = re.findall(r"getelementptr inbounds float, ptr %\"?x\"?, i64 %", body)
    constant = re.findall(r"getelementptr inbounds float, ptr %[.\w\"]+, i64 \d+\b", body)
    assert len(variable) == 2 and len(constant) >= 15, (variable, constant)  # x + i*8 for x and for y
    lib = _load_library([prim], host, tmp_path / "unrolled.so")
    xs = np.arange(65, dtype=np.float32)
    out = np.zeros((8, 8), np.float32)
    lib.unrolled(ctypes.c_void_p(xs.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    np.testing.assert_array_equal(out, (xs[:64] + xs[1:]).reshape(8, 8))


def test_a_buffer_allocated_in_each_unrolled_iteration_gets_its_own_addresses(host, tmp_path):
    """for i in 0..3 unrolled: allocate acc[1]; acc[0] = 0; for k: acc[0] += x[i*32 + k]; y[i] =
    acc[0]: each iteration binds acc to a new stack slot within the same basic block, and every
    access must use the iteration's slot (a pointer cached per Buffer zeroed the first iteration's
    slot and summed into an unset one: a bfloat16 dense read 8192 for 4096)."""
    from tvmc.te.expr import FloatImm, IntImm, Load, Var
    from tvmc.tir.ir import Allocate, Buffer, For, PrimFunc, Seq, Store

    x, y = Buffer("x", (96,), "float32"), Buffer("y", (3,), "float32")
    acc = Buffer("acc", (1,), "float32", "local")
    i, k = Var("i"), Var("k")
    zero = IntImm(0)
    body = Allocate(acc, Seq([Store(acc, zero, FloatImm(0.0)),
                              For(k, 32, "serial", Store(acc, zero, Load(acc, zero) + Load(x, i * 32 + k))),
                              Store(y, i, Load(acc, zero))]))
    prim = PrimFunc("sums", [x, y], For(i, 3, "unroll", body))
    lib = _load_library([prim], host, tmp_path / "sums.so")
    xs = np.random.default_rng(3).standard_normal(96).astype(np.float32)
    out = np.full(3, np.nan, np.float32)
    lib.sums(ctypes.c_void_p(xs.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    np.testing.assert_allclose(out, xs.reshape(3, 32).sum(axis=1), rtol=1e-5)


def test_rolled_loop_is_not_unrolled_by_llvm(host):
    """Stage.rolled: the loop's back edge carries llvm.loop.unroll.disable, which survives LLVM's
    O3 pipeline on the 4-trip reduction; a plain loop carries none."""
    x = te.placeholder((64, 4), "float32", name="x")
    k = te.reduce_axis(4, "k")
    y = te.compute((64,), lambda i: te.sum(x[i, k], axis=k), name="y")

    def optimized(rolled: bool) -> str:
        s = te.create_schedule(y)
        if rolled:
            s[y].rolled(k)
        cg = CodeGenLLVM(host)
        cg.add_function(lower(s, [x, y], "rowsum"))
        dumps = {"_want": ()}
        compile_ir(cg.ir_text(), host, dumps)
        return dumps["ll"]

    ll = optimized(True)
    assert re.search(r"!llvm\.loop !(\d+)", ll) and '!"llvm.loop.unroll.disable"' in ll
    assert '!"llvm.loop.unroll.disable"' not in optimized(False)


def test_scalar_loops_of_symbolic_extent_stay_scalar(host):
    """A loop of symbolic extent that the schedule left scalar carries
    llvm.loop.vectorize.enable = false: LLVM's loop vectorizer turned the strided rows of a
    [1, seq, 384] -> [1, 4, 32, seq] transpose (GPT-2's keys, small-size bucket) into masked
    gathers, 0.9 us at sequence 1 against 0.1 us of scalar copies. A loop of constant extent
    keeps LLVM's choice."""
    seq = te.size_var("seq", 1, 256)
    x = te.placeholder((seq, 384), "float32", name="x")
    y = te.compute((128, seq), lambda c, t: x[t, c + 128], name="y")
    s = te.create_schedule(y)
    cg = CodeGenLLVM(host)
    cg.add_function(lower(s, [x, y], "keys"))
    dumps = {"_want": ("asm",)}
    compile_ir(cg.ir_text(), host, dumps)
    assert '!"llvm.loop.vectorize.enable", i1 false' in dumps["ll"]
    assert "gather" not in dumps["asm"]
    fixed = te.placeholder((16, 384), "float32", name="x")
    z = te.compute((128, 16), lambda c, t: fixed[t, c + 128], name="z")
    cg = CodeGenLLVM(host)
    cg.add_function(lower(te.create_schedule(z), [fixed, z], "keys16"))
    assert "llvm.loop.vectorize.enable" not in cg.ir_text()


def _vectorized_by_16(out, args, name, target, axis=0, reorder=None):
    """(PrimFunc, LLVM IR text) of `out`'s stage with its axis `axis` split by 16 and the inner
    part vectorized (`reorder`: a new order of the stage's axes first)."""
    s = te.create_schedule(out)
    if reorder is not None:
        s[out].reorder(*(s[out].op.axis[k] for k in reorder))
    _, inner = s[out].split(s[out].op.axis[axis], 16)
    s[out].vectorize(inner)
    prim = lower(s, args, name)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    return prim, cg.ir_text()


@pytest.mark.parametrize("stride", [2, 3, 8, 9])
def test_strided_vector_loads_are_one_span_load_and_a_shuffle(host, stride, tmp_path):
    """y[i] = x[stride * i + 1] vectorized by 16: strides 2 to MAX_SHUFFLED_STRIDE (8) load the
    span the lanes cover at once and keep every stride-th element (a shufflevector, no per-lane
    loads), which ends exactly at the last lane's element; 9 stays one load per lane. The values
    equal numpy's either way, the span's last element being the buffer's last."""
    from tvmc.codegen.llvm import MAX_SHUFFLED_STRIDE

    n = 32
    x = te.placeholder((stride * (n - 1) + 2,), "float32", name="x")
    y = te.compute((n,), lambda i: x[i * stride + 1], name="y")
    prim, text = _vectorized_by_16(y, [x, y], f"strided{stride}", host)
    shuffled = stride <= MAX_SHUFFLED_STRIDE
    assert (f"load <{15 * stride + 1} x float>" in text) == shuffled
    gathered = not shuffled and host.vector_gather_scatter
    assert ("llvm.masked.gather" in text) == gathered
    assert ("load float" not in text) == (shuffled or gathered)  # else one scalar load per lane
    lib = _load_library([prim], host, tmp_path / f"strided{stride}.so")
    xv = np.arange(x.shape[0], dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    fn = getattr(lib, f"strided{stride}")
    fn.restype = None
    fn(xv.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(out, xv[1::stride][:n])


def test_permuted_vector_loads_are_one_span_load_and_a_shuffle(host, tmp_path):
    """y[i] = x[i - i % 4 + 2 (i % 2) + (i % 4) // 2 + 3] (each quad in the order 0, 2, 1, 3: a
    data_pairs stage's widening) vectorized by 16: the lanes read a permutation of 16 contiguous
    elements, one load and a shufflevector instead of a load per lane; a lane pattern that skips
    an element (i + i % 2) is not a permutation and keeps the per-lane loads. Values equal numpy's."""
    n = 32
    x = te.placeholder((n + 4,), "float32", name="x")
    y = te.compute((n,), lambda i: x[i - i % 4 + (i % 2) * 2 + (i % 4) // 2 + 3], name="y")
    prim, text = _vectorized_by_16(y, [x, y], "permuted", host)
    assert "load <16 x float>" in text and "shufflevector" in text and "load float" not in text
    z = te.compute((n,), lambda i: x[i + i % 2], name="z")
    _, skipped = _vectorized_by_16(z, [x, z], "skipping", host)
    assert "load <16 x float>" not in skipped
    lib = _load_library([prim], host, tmp_path / "permuted.so")
    xv = np.arange(x.shape[0], dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    fn = lib.permuted
    fn.restype = None
    fn(xv.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(out, xv[3:][np.arange(n).reshape(-1, 4)[:, [0, 2, 1, 3]].ravel()])


@pytest.mark.parametrize("target_name", ["x86", "x86-avx2"])
def test_gather_and_scatter_where_the_vector_unit_has_them(host, target_name, tmp_path):
    """y[i] = x[9i + 2] * 2 and z[i, j] = y[i] + 1 (stored along i: stride 9), vectorized by 16:
    AVX-512 (Target.vector_gather_scatter) loads and stores the lanes with llvm.masked.gather /
    scatter, AVX2 one lane at a time; the values equal numpy's where the host runs the code."""
    target = resolve_target(target_name)
    n = 32
    x = te.placeholder((9 * n + 2,), "float32", name="x")
    y = te.compute((n,), lambda i: x[9 * i + 2] * 2.0, name="y")
    body, text = _vectorized_by_16(y, [x, y], f"gather_{target.name.replace('-', '_')}", target)
    assert ("llvm.masked.gather.v16f32" in text) == target.vector_gather_scatter == (target_name == "x86")
    # the scatter: the store of z along i, stride 9
    yin = te.placeholder((n,), "float32", name="yin")
    z = te.compute((n, 9), lambda i, j: yin[i] + 1.0, name="z")
    scatter, text = _vectorized_by_16(z, [yin, z], f"scatter_{target.name.replace('-', '_')}", target,
                                      reorder=(1, 0))
    assert ("llvm.masked.scatter.v16f32" in text) == target.vector_gather_scatter
    if not set(target.host_features) <= set(host.host_features):
        pytest.skip(f"this host does not run {target_name} code")
    lib = _load_library([body, scatter], target, tmp_path / "gs.so")
    xv = np.arange(x.shape[0], dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    gather = getattr(lib, body.name)
    gather.restype = None
    gather(xv.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(out, xv[2::9][:n] * 2)
    zv = np.full((n, 9), np.nan, np.float32)
    fn = getattr(lib, scatter.name)
    fn.restype = None
    fn(out.ctypes.data_as(ctypes.c_void_p), zv.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(zv, np.repeat(out[:, None] + 1, 9, axis=1))


def test_vectorized_tail_uses_masked_accesses(host):
    prim = _unary_prim("vtail", lambda v: v + 1.0, vectorize=True, n=50)
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    text = cg.ir_text()
    assert re.search(r"call <16 x float> @\"?llvm\.masked\.load\.v16f32", text)
    assert re.search(r"call void @\"?llvm\.masked\.store\.v16f32", text)


def test_parallel_kernel_calls_gomp_parallel(host, tmp_path):
    a = te.placeholder((64, 128), name="a")
    b = te.compute((64, 128), lambda i, j: te.tanh(a[i, j]) * 3.0, name="b")
    s = te.create_schedule(b)
    i, j = s[b].op.axis
    s[b].parallel(i)
    _, ji = s[b].split(j, LANES)
    s[b].vectorize(ji)
    prim = lower(s, [a, b], "par")
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    text = cg.ir_text()
    assert re.search(r"call void @\"?GOMP_parallel\"?\(", text)
    assert "omp_get_thread_num" in text and "omp_get_num_threads" in text
    # the loop runs in a function of its own whose buffers are noalias parameters (not loaded
    # from the closure without alias facts), inlined into the threads' function
    assert re.search(r'define internal void @"par\.par1\.body"\(ptr noalias %".*", ptr noalias', text)
    # with one thread (omp_get_max_threads) the kernel calls the loop's body itself, without
    # GOMP_parallel's team start and futex wake
    assert 'call i32 @"omp_get_max_threads"()' in text and text.count('call void @"par.par1.body"(ptr') == 2
    lib = _load_library([prim], host, tmp_path / "par.so")
    gomp = ctypes.CDLL("libgomp.so.1")
    x = np.random.default_rng(3).uniform(-4, 4, (64, 128)).astype(np.float32)
    before = gomp.omp_get_max_threads()
    try:
        for threads in (1, 2):  # the serial call and the launch compute the same rows
            gomp.omp_set_num_threads(threads)
            out = np.zeros_like(x)
            lib.par(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data))
            np.testing.assert_allclose(out, np.tanh(x.astype(np.float64)) * 3, rtol=1e-6, atol=1e-6)
    finally:
        gomp.omp_set_num_threads(before)


# --- tvmc.backends.build_library: IR dumps and errors ----------------------------------------------------------

def _relu_add_function():
    x = Var("x", TensorType((2, 3, 5, 7), "float32"))
    b = Var("b", TensorType((1, 3, 1, 1), "float32"))
    body = make_call("nn.relu", [make_call("add", [x, b])])
    return Function([x, b], body, "fused_add_nn_relu")


def test_build_library_dumps_tir_ll_asm(host, tmp_path):
    fn = _relu_add_function()
    dump = tmp_path / "dump"
    so = build_library([fn], host, dump_ir=("tir", "ll", "asm"), dump_dir=str(dump))
    assert so[:4] == b"\x7fELF"
    assert sorted(p.name for p in dump.iterdir()) == ["mod.ll", "mod.s", "mod.tir"]
    assert "primfn fused_add_nn_relu(" in (dump / "mod.tir").read_text()
    assert re.search(r"define void @\"?fused_add_nn_relu\"?\(", (dump / "mod.ll").read_text())
    assert re.search(r"^fused_add_nn_relu:", (dump / "mod.s").read_text(), re.MULTILINE)
    # the library runs
    path = tmp_path / "mod.so"
    path.write_bytes(so)
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    ba = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    out = np.zeros_like(xa)
    ctypes.CDLL(str(path)).fused_add_nn_relu(*[ctypes.c_void_p(a.ctypes.data) for a in (xa, ba, out)])
    np.testing.assert_allclose(out, np.maximum(xa + ba, 0), rtol=1e-6)


def test_build_library_dump_subset(host, tmp_path):
    build_library([_relu_add_function()], host, dump_ir=("ll",), dump_dir=str(tmp_path / "d"))
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["mod.ll"]


def test_broken_linker_is_a_codegen_error(host):
    target = dataclasses.replace(host, linker=("false",))
    with pytest.raises(CodegenError, match=r"linker failed.*command: false -o"):
        build_library([_relu_add_function()], target)


def test_linker_that_writes_nothing_is_a_codegen_error(host):
    target = dataclasses.replace(host, linker=("true",))
    with pytest.raises(CodegenError, match=r"linker exited 0 but wrote no mod.so \(command: true -o mod.so mod.o\)"):
        build_library([_relu_add_function()], target)


def test_broken_c_compiler_is_a_codegen_error(host):
    from tvmc.backends import backend_for

    target = dataclasses.replace(host, linker=("/nonexistent/tvmc-cc", "-shared"))
    with pytest.raises(CodegenError, match="C compiler '/nonexistent/tvmc-cc' not found"):
        backend_for(target).compile_runtime(target)


def test_cpu_llvm_does_not_know_is_a_target_error(host):
    """Where tvmc has no ISA table (here: aarch64), LLVM's own 'not a recognized processor'
    warning becomes a TargetError instead of a warning on stderr and a library for another cpu."""
    from tvmc.errors import TargetError

    target = dataclasses.replace(host, triple="aarch64-unknown-linux-gnu", cpu="no-such-cpu", features=())
    with pytest.raises(TargetError, match="LLVM says 'no-such-cpu' is not a recognized processor"):
        compile_ir("", target)


def test_missing_linker_is_a_codegen_error(host):
    target = dataclasses.replace(host, linker=("/nonexistent/tvmc-ld",))
    with pytest.raises(CodegenError, match="not found"):
        link_shared(b"", target)


def test_invalid_ir_is_a_codegen_error_and_unknown_triple_a_target_error(host):
    from tvmc.errors import TargetError

    with pytest.raises(CodegenError, match="LLVM rejected"):
        compile_ir("define void @f() { ret i32 0 }", host)
    with pytest.raises(TargetError, match="triple"):
        compile_ir("", dataclasses.replace(host, triple="nonsense-unknown-none"))


def test_requantize_then_rescale_epilogue_is_exact_with_fewer_instructions(host, tmp_path):
    """A requantize (int32 -> uint8) read back by a rescale (uint8 -> uint8), as FuseOps fuses
    them into an int8 conv's epilogue: the simplifier drops the zero point added by the one and
    subtracted by the other (tvmc.tir.simplify._unshifted_clamp), and on x86 the last rounding,
    clamp and zero point become one lrint (cvtps2dq) plus an integer add (rounded_then_shifted).
    Both are exact: every output equals numpy's two-step reference, including values on .5
    boundaries, saturating ones and zero points at the ends of the range."""
    if host.arch != "x86_64":
        pytest.skip("the lrint form is emitted for x86_64 hosts only")
    n = 4096
    acc = te.placeholder((n,), "int32", name="acc")
    s1, a, b2 = (te.placeholder((n,), "float32", name=k) for k in ("s1", "a", "b2"))
    zp1, zp2 = te.placeholder((1,), "int32", name="zp1"), te.placeholder((1,), "int32", name="zp2")

    def clamp_u8(v):
        return te.minimum(te.maximum(v, te.const(0.0, "float32")), te.const(255.0, "float32"))

    q1 = te.compute((n,), lambda i: te.cast("uint8", clamp_u8(
        te.round(te.cast("float32", acc[i]) * s1[i]) + te.cast("float32", zp1[0]))), name="q1")
    q2 = te.compute((n,), lambda i: te.cast("uint8", clamp_u8(te.round(
        (te.cast("float32", q1[i]) - te.cast("float32", zp1[0])) * a[i] + b2[i]) + te.cast("float32", zp2[0]))),
        name="q2")
    s = te.create_schedule(q2)
    s[q1].compute_inline()
    _, inner = s[q2].split(s[q2].op.axis[0], LANES)
    s[q2].vectorize(inner)
    prim = lower(s, [acc, s1, a, b2, zp1, zp2, q2], "epilogue")
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    text = cg.ir_text()
    assert "llvm.lrint.v16i32.v16f32" in text
    assert "fsub <16 x float>" not in text  # no zero point subtracted per element (only from the bounds)
    lib = _load_library([prim], host, tmp_path / "epilogue.so")
    rng = np.random.default_rng(7)
    x = rng.integers(-3000, 3000, n).astype(np.int32)
    x[:64] = np.arange(-32, 32) * 2 + 1  # odd accumulators times 0.5: every one a .5 boundary
    scale1 = np.full(n, 0.5, np.float32)
    scale1[64:] = rng.uniform(0.01, 0.2, n - 64).astype(np.float32)
    mul = rng.uniform(-2.0, 2.0, n).astype(np.float32)
    mul[:64] = 1.0
    shift = (rng.integers(-40, 40, n) + rng.choice([0.0, 0.5, 0.25], n)).astype(np.float32)
    for z1, z2 in ((128, 3), (0, 255), (255, 0)):
        out = np.zeros(n, np.uint8)
        zs = [np.array([z1], np.int32), np.array([z2], np.int32)]
        lib.epilogue(*[ctypes.c_void_p(t.ctypes.data) for t in (x, scale1, mul, shift, *zs, out)])
        first = np.clip(np.rint(x.astype(np.float32) * scale1) + np.float32(z1), 0, 255)
        ref = np.clip(np.rint((first - np.float32(z1)) * mul + shift) + np.float32(z2), 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(out, ref)


def test_a_uniform_select_of_loads_in_a_vector_loop_branches(host, tmp_path):
    """select(cond, x[..], y[..]) in a vectorized loop with a condition the same for every lane
    (here on the outer loop): a branch and a vector phi, so only the taken side's loads run, not
    both under masks (CodeGenLLVM._branch_select); the result is the select's."""
    n = 64
    xs = [te.placeholder((n, 32), "float32", name=f"x{k}") for k in range(4)]

    def pick(r, c):
        q = r % 4
        return te.select(q < 2, te.select(q < 1, xs[0][r, c], xs[1][r, c]),
                         te.select(q < 3, xs[2][r, c], xs[3][r, c]))

    y = te.compute((n, 32), pick, name="y")
    s = te.create_schedule(y)
    _, inner = s[y].split(s[y].op.axis[1], LANES)
    s[y].vectorize(inner)
    prim = lower(s, [*xs, y], "pick")
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    text = cg.ir_text()
    assert "masked.load" not in text and re.search(r"phi\s+<16 x float>", text)
    lib = _load_library([prim], host, tmp_path / "pick.so")
    arrays = [np.random.default_rng(k).standard_normal((n, 32)).astype(np.float32) for k in range(4)]
    out = np.zeros((n, 32), np.float32)
    lib.pick(*[ctypes.c_void_p(t.ctypes.data) for t in (*arrays, out)])
    np.testing.assert_array_equal(out, np.stack([arrays[r % 4][r] for r in range(n)]))


def test_kernel_scratch_comes_from_the_thread_workspace(host, tmp_path):
    """Global buffers a kernel allocates inside (here two, nested, of the run's size n) come from
    the module's per-thread workspace (CodeGenLLVM._workspace), not malloc: the kernel calls
    only the workspace's push / pop, which fall back to malloc while the arena is too small and
    then grow it once it is empty. Runs at growing and shrinking sizes, each twice, compute what
    numpy does (the buffers stay disjoint and the arena's regrowth keeps no stale pointer)."""
    n = te.size_var("n", 1, 1 << 20)
    x = te.placeholder((n,), "float32", name="x")
    t = te.compute((n,), lambda i: x[i] * 2.0, name="t")
    u = te.compute((n,), lambda i: t[i] + 1.0, name="u")
    y = te.compute((n,), lambda i: u[n - 1 - i] * t[i], name="y")
    prim = lower(te.create_schedule(y), [x, y], "scratch")
    cg = CodeGenLLVM(host)
    cg.add_function(prim)
    text = cg.ir_text()
    kernel = text[text.index('define void @"scratch"'):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "@\"malloc\"" not in kernel and kernel.count("tvmc.ws.push") == 2 and kernel.count("tvmc.ws.pop") == 2
    assert "internal thread_local global" in text
    lib = _load_library([prim], host, tmp_path / "scratch.so")
    for size in (5, 5, 1000, 1000, 300000, 300000, 17, 17):
        a = np.random.default_rng(size).standard_normal(size).astype(np.float32)
        out = np.zeros_like(a)
        lib.scratch(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_int64(size))
        np.testing.assert_allclose(out, (a * 2 + 1)[::-1] * (a * 2), rtol=1e-6)
