"""OpenCL C printer (tvmc/codegen/opencl.py) on the dtypes beyond float32: float16 as half
memory with float registers (no cl_khr_fp16) in global, shared and private memory, bfloat16 as
ushort bits there, 64-bit integer literals at the ends of their range, min/max keeping a NaN on
either side (scalar and vector forms); each kernel built and run by the OpenCL driver here (PoCL)
against numpy, exactly. The op cases of tests/ops/test_ops.py and tests/ops/test_bfloat16.py cover
the operators."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from tests.targets import require
from tvmc import te
from tvmc.codegen.opencl import CodeGenOpenCL
from tvmc.target import resolve_target
from tvmc.te.expr import BinOp, FloatImm, IntImm, Load, Var
from tvmc.tir.gpu import LaunchConfig, lower_device
from tvmc.tir.ir import Allocate, Barrier, Buffer, For, PrimFunc, Seq, Store
from tvmc.tir.lower import lower

GPU = resolve_target("opencl")


def _source(prim) -> str:
    cg = CodeGenOpenCL(GPU)
    cg.add_function(prim)
    return cg.source()


def _row_max_float16():
    """y[i] = max over r of h[i, r] + float16(x[i, r] * 3), h and y float16, x float32: a block
    per row, its 64 threads reducing (in float32, as every float16 reduction) through shared
    memory."""
    h = te.placeholder((5, 100), "float16", name="h")
    x = te.placeholder((5, 100), "float32", name="x")
    r = te.reduce_axis(100, "r")
    y = te.compute((5,), lambda i: te.max(h[i, r] + te.cast("float16", x[i, r] * te.const(3.0)), r), name="y")
    s = te.create_schedule(y)
    s[y].bind(y.op.axis[0], te.thread_axis("blockIdx.x"))
    _, ki = s[y].split(r, 64)
    s[y].bind(ki, te.thread_axis("threadIdx.x"))
    return lower_device(lower(s, [h, x, y], "row_max_f16"), GPU)


def _no_half_values(src: str) -> bool:
    """`half` only ever names a pointee: no half values, no half arithmetic, no extension."""
    return not re.findall(r"\bhalf\b(?!\*)", src) and "cl_khr_fp16" not in src


def test_float16_is_half_memory_through_vload_vstore_and_float_arithmetic():
    prim = _row_max_float16()
    src = _source(prim)
    assert "__global half* restrict h" in src and "__global half* restrict y" in src
    assert "vload_half(" in src and "vstore_half_rte(" in src
    assert "tvmc_to_half_float(" in src  # the cast rounds to float16
    assert _no_half_values(src), src

    rng = np.random.default_rng(16)
    h = rng.standard_normal((5, 100)).astype(np.float16)
    x = (rng.standard_normal((5, 100)) * 300).astype(np.float32)
    x[0, :3] = [1 / 3, 65504 / 3, 1e30]  # rounds at float16's ulp, overflows in float16 only, inf
    out = require("opencl").run_kernel(prim, [h, x], np.zeros(5, np.float16))
    # the sums are float, their maximum is rounded to float16 at the store: the maximum of the
    # rounded sums (rounding is monotonic)
    with np.errstate(over="ignore"):
        ref = (h.astype(np.float32) + (x * 3).astype(np.float16).astype(np.float32)).astype(np.float16).max(axis=1)
    np.testing.assert_array_equal(out, ref)


def test_float16_shared_and_private_arrays_hold_half_bits():
    """tvmc.tir.lower holds float16 intermediates in float32; loop IR written directly may
    stage float16 in shared and private arrays: y[i] = float16(t * 1.5), t = float16(3 * x[63 - i])
    through shared s and private t, each store rounding to float16."""
    x, y = Buffer("x", (64,), "float16"), Buffer("y", (64,), "float16")
    shared, private = Buffer("s", (64,), "float16", "shared"), Buffer("t", (1,), "float16", "local")
    i, zero = Var("i", "int64"), IntImm(0)
    body = For(i, 64, "threadIdx.x", Allocate(shared, Allocate(private, Seq([
        Store(shared, i, Load(x, i)),
        Barrier("shared"),
        Store(private, zero, BinOp("mul", Load(shared, BinOp("sub", IntImm(63), i)), FloatImm(3.0, "float16"))),
        Store(y, i, BinOp("mul", Load(private, zero), FloatImm(1.5, "float16")))]))))
    prim = PrimFunc("stage_f16", [x, y], body, LaunchConfig((1, 1, 1), (64, 1, 1), 128))
    src = _source(prim)
    assert "__local ushort s[64];" in src and "ushort t[1];" in src
    assert "vstore_half_rte(vload_half(i, x), i, ((__local half*)s));" in src
    assert "vload_half(0L, ((half*)t))" in src
    assert _no_half_values(src), src

    a = (np.random.default_rng(7).standard_normal(64) * 1000).astype(np.float16)
    out = require("opencl").run_kernel(prim, [a], np.zeros(64, np.float16))
    t = (a[::-1].astype(np.float32) * 3).astype(np.float16)
    np.testing.assert_array_equal(out, (t.astype(np.float32) * 1.5).astype(np.float16))


def test_bfloat16_shared_and_private_arrays_hold_its_bits():
    """The float16 staging kernel above in bfloat16: every buffer is ushort, loaded by a shift
    into a float's upper half, each store rounding to nearest even."""
    bf16 = np.dtype(ml_dtypes.bfloat16)
    x, y = Buffer("x", (64,), "bfloat16"), Buffer("y", (64,), "bfloat16")
    shared, private = Buffer("s", (64,), "bfloat16", "shared"), Buffer("t", (1,), "bfloat16", "local")
    i, zero = Var("i", "int64"), IntImm(0)
    body = For(i, 64, "threadIdx.x", Allocate(shared, Allocate(private, Seq([
        Store(shared, i, Load(x, i)),
        Barrier("shared"),
        Store(private, zero, BinOp("mul", Load(shared, BinOp("sub", IntImm(63), i)), FloatImm(3.0, "bfloat16"))),
        Store(y, i, BinOp("mul", Load(private, zero), FloatImm(1.1, "bfloat16")))]))))
    prim = PrimFunc("stage_bf16", [x, y], body, LaunchConfig((1, 1, 1), (64, 1, 1), 128))
    src = _source(prim)
    assert "__global ushort* restrict x" in src and "__local ushort s[64];" in src and "ushort t[1];" in src
    assert "s[i] = tvmc_bf16_bits_float(tvmc_bf16_from_bits_float(x[i]));" in src
    assert "half" not in src, src

    a = (np.random.default_rng(7).standard_normal(64) * 1e30).astype(bf16)
    a[:4] = [np.inf, -np.inf, np.nan, 2e38]  # 2e38 * 3 overflows to inf in float32 already
    with np.errstate(over="ignore", invalid="ignore"):
        out = require("opencl").run_kernel(prim, [a], np.zeros(64, bf16))
        t = (a[::-1].astype(np.float32) * 3).astype(bf16)
        ref = (t.astype(np.float32) * np.float32(bf16.type(1.1))).astype(bf16)
    # A NaN's payload is the device's choice (IEEE 754 6.2.3): PoCL keeps numpy's 0x7FC0, NVIDIA's
    # driver returns its canonical 0x7FFFFFFF, stored as 0x7FFF; both must stay NaN, the rest exact.
    nan = np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], ref.view(np.uint16)[~nan])


def _max_min_kernel(vector: bool):
    """y[k] = max(x[k], 0) and y[256 + k] = min(1, x[k]), k < 256, over 64 threads x 4 elements:
    the max in a vectorized loop (vstore4 of fmax) or an unrolled one (the scalar helper)."""
    x, y = Buffer("x", (256,), "float32"), Buffer("y", (512,), "float32")
    i, v = Var("i", "int64"), Var("v", "int64")
    at = BinOp("add", BinOp("mul", i, IntImm(4)), v)
    body = For(i, 64, "threadIdx.x", Seq([
        For(v, 4, "vectorize" if vector else "unroll", Store(y, at, BinOp("max", Load(x, at), FloatImm(0.0)))),
        For(v, 4, "unroll", Store(y, BinOp("add", at, IntImm(256)), BinOp("min", FloatImm(1.0), Load(x, at))))]))
    return PrimFunc("max_min", [x, y], body, LaunchConfig((1, 1, 1), (64, 1, 1)))


def test_min_and_max_keep_a_nan_on_either_side():
    """numpy's maximum/minimum (onnxruntime's Relu, Max, Min, Clip): NaN wins from either operand,
    in the scalar helpers and in the vector fmax form (which alone would drop it)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(256).astype(np.float32)
    a[[0, 5, 130, 255]] = np.nan
    a[[1, 2]] = [np.inf, -np.inf]
    for vector in (True, False):
        prim = _max_min_kernel(vector)
        assert ("vstore4(tvmc_vmax_float4(" in _source(prim)) == vector
        out = require("opencl").run_kernel(prim, [a], np.zeros(512, np.float32))
        np.testing.assert_array_equal(out, np.concatenate([np.maximum(a, 0), np.minimum(1, a)]))


def test_64_bit_integer_literals_at_the_ends_of_their_range():
    """2**64 - 1 and -2**63 have no plain C literal (the latter is the negation of a literal
    that does not fit a long)."""
    u = te.placeholder((8,), "uint64", name="u")
    v = te.placeholder((8,), "int64", name="v")
    y = te.compute((8,), lambda i: te.bitwise_xor(te.cast("uint64", te.maximum(v[i], te.const(-2**63, "int64"))),
                                                  te.bitwise_and(u[i], te.const(2**64 - 1, "uint64"))), name="y")
    s = te.create_schedule(y)
    s[y].bind(y.op.axis[0], te.thread_axis("threadIdx.x"))
    prim = lower_device(lower(s, [u, v, y], "ends"), GPU)
    src = _source(prim)
    assert "18446744073709551615UL" in src and "(-9223372036854775807L - 1L)" in src
    uu = np.array([0, 1, 2**64 - 1, 2**63, 5, 6, 7, 2**40], np.uint64)
    vv = np.array([-2**63, 2**63 - 1, -1, 0, 3, -7, 9, 11], np.int64)
    out = require("opencl").run_kernel(prim, [uu, vv], np.zeros(8, np.uint64))
    np.testing.assert_array_equal(out, vv.view(np.uint64) ^ uu)
