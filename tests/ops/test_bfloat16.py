"""bfloat16 tensors (ml_dtypes' numpy type) on every target that runs here (tests/targets.py):
conversions bit for bit as ml_dtypes (round to nearest even with its ties, subnormals, overflow to
infinity; NaN kept a NaN, quiet, with its sign and upper payload), operators computing in float32
and rounding once per stage, matrix products (dense, conv2d) accumulating in float32; the LLVM IR
and the OpenCL C hold bfloat16 as 16-bit integers."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest
from test_ops import _assert_close, conv, n, pool
from util import build_and_run, op_function, run_op

from tests.targets import BY_NAME, TARGETS, require

BF16 = np.dtype(ml_dtypes.bfloat16)
# every target (CUDA on a GPU only: marked cuda; its tensor-core kernels in test_tensorcore.py)
CONVERSION_TARGETS = [pytest.param(t.name, marks=t.marks) for t in TARGETS]
# the op cases: this host's CPU, OpenCL (PoCL), CUDA (the generic GPU schedules, on a GPU)
OP_TARGETS = [pytest.param(name, marks=BY_NAME[name].marks) for name in ("native", "opencl", "cuda")]


def bf(rng, shape, scale=1.0):
    """bfloat16 samples: standard normal rounded, with 0.0 and -0.0 at the ends."""
    return n(rng, shape, scale).astype(BF16)


def _bits_f32(values) -> np.ndarray:
    return np.array(values, np.uint32).view(np.float32)


# float32 bit patterns around bfloat16's rounding points (bfloat16 keeps the upper 16 bits)
ROUNDING = _bits_f32([
    0x3F808000, 0x3F818000,  # ties between 1.0 and its successor: to the even one (down, then up)
    0x3F808001, 0x3F807FFF,  # just above and below a tie
    0x7F7FFFFF, 0x7F7F7FFF,  # float32's largest rounds to infinity; below the tie to bfloat16's largest
    0x7F7F8000, 0xFF7F8000,  # the tie above bfloat16's largest: to infinity (even) with its sign
    0x00008000, 0x00018000,  # subnormal ties: to 0 (even) and to 2 units
    0x80008000, 0x00000001,  # -0.0 from a negative tie; the smallest subnormal to 0
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # zeros and infinities stay
    0x7FC00000, 0xFFC00000,  # quiet NaNs
    0x7F800001, 0xFF800001,  # signalling NaNs with the payload in the low half only: must stay NaN
    0x7F812345, 0x7FBF8000,  # signalling NaNs with an upper payload (and one that looks like a tie)
])


def _f32_rounding_cases(rng) -> np.ndarray:
    """ROUNDING, then random float32 bit patterns (every exponent) and values near ties."""
    rand = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    near_ties = (rng.integers(0, 2**16, 1000, dtype=np.uint64).astype(np.uint32) << 16) | np.uint32(0x8000)
    near_ties[::2] += rng.integers(-2, 3, 500).astype(np.uint32)
    return np.concatenate([ROUNDING, rand.view(np.float32), near_ties.view(np.float32)])


def assert_rounded_bits(out: np.ndarray, x: np.ndarray):
    """`out` (bfloat16) is float32 `x` rounded as ml_dtypes rounds it, bit for bit; where x is NaN,
    a quiet NaN with x's sign and upper payload (ml_dtypes writes 0x7fc0 with the sign: the
    payload is the hardware's choice, x86's vcvtneps2bf16 and Arm's BFCVT keep it)."""
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).view(np.uint16)
    got = out.view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    upper = (x.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(got[nan], upper[nan] | np.uint16(0x0040))


def _target(name):
    return require(name).target


@pytest.mark.parametrize("target_name", CONVERSION_TARGETS)
def test_float32_to_bfloat16_rounds_to_nearest_even(target_name):
    x = _f32_rounding_cases(np.random.default_rng(1))
    with np.errstate(invalid="ignore"):
        out, _ = run_op("cast", [x], dict(dtype="bfloat16"), target=_target(target_name))
    assert out.dtype == BF16
    assert_rounded_bits(out, x)


@pytest.mark.parametrize("target_name", CONVERSION_TARGETS)
def test_every_bfloat16_widens_to_float32_exactly(target_name):
    """All 65536 bit patterns: a float32 whose upper half they are (NaN payloads included)."""
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    out, _ = run_op("cast", [bits.view(BF16)], dict(dtype="float32"), target=_target(target_name))
    np.testing.assert_array_equal(out.view(np.uint32), bits.astype(np.uint32) << 16)


@pytest.mark.parametrize("target_name", CONVERSION_TARGETS)
def test_a_stored_bfloat16_round_trips_through_float32_registers(target_name):
    """A copy (reshape: load, store) of every finite and infinite bfloat16 keeps its bits; NaNs stay
    quiet NaNs with their upper payload (signalling ones are quieted, as a float16 store does)."""
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(BF16).reshape(256, 256)
    out, _ = run_op("reshape", [x], dict(newshape=(2**16,)), target=_target(target_name))
    finite_or_inf = ~np.isnan(x.reshape(-1).astype(np.float32))
    np.testing.assert_array_equal(out.view(np.uint16)[finite_or_inf], bits[finite_or_inf])
    np.testing.assert_array_equal(out.view(np.uint16)[~finite_or_inf], bits[~finite_or_inf] | np.uint16(0x0040))


# (case id, source array) of conversions to bfloat16 from other dtypes: through float32, as
# ml_dtypes (and onnxruntime's Cast) do, so float64 and wide integers may round twice
TO_BFLOAT16 = [
    ("float64", np.array([1 + 2.0**-8 + 1e-12, 1e300, -1e300, 1e-300, np.nan, -np.inf, 3.0, 2.0**-133], np.float64)),
    ("int64", np.array([2**24 + 1, 2**31 - 1, -5, 0x01018001, 257, 259, -(2**40) - 1, 0], np.int64)),
    ("uint8", np.array([0, 1, 127, 128, 255, 254, 253, 129], np.uint8)),
    ("float16", np.array([65504, -65504, 6e-8, 1.0009766, np.inf, np.nan, -0.0, 0.1], np.float16)),
]


@pytest.mark.parametrize("target_name", OP_TARGETS)
@pytest.mark.parametrize("src", TO_BFLOAT16, ids=[c[0] for c in TO_BFLOAT16])
def test_other_dtypes_to_bfloat16_as_ml_dtypes(src, target_name):
    _, x = src
    with np.errstate(invalid="ignore", over="ignore"):
        out, ref = run_op("cast", [x], dict(dtype="bfloat16"), target=_target(target_name))
    nan = np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], ref.view(np.uint16)[~nan])


FROM_BFLOAT16 = ["float32", "float64", "float16", "int32", "int8", "uint8", "bool"]


@pytest.mark.parametrize("target_name", OP_TARGETS)
@pytest.mark.parametrize("dst", FROM_BFLOAT16)
def test_bfloat16_to_other_dtypes_as_numpy(dst, target_name):
    """In-range values (integers: truncated toward zero; float16: rounded, overflowing to inf)."""
    rng = np.random.default_rng(zlib.crc32(dst.encode()))
    if dst in ("int8", "uint8"):
        x = rng.uniform(0 if dst == "uint8" else -128, 127, 64).astype(BF16)
    elif dst == "int32":
        x = (rng.standard_normal(64) * 1e6).astype(BF16)
    else:
        x = np.concatenate([bf(rng, 60, 100.0), np.array([np.inf, -np.inf, 1e5, 0.0], BF16)])
    with np.errstate(over="ignore"):
        out, ref = run_op("cast", [x], dict(dtype=dst), target=_target(target_name))
    _assert_close(out, ref, dict(rtol=0, atol=0))


def _ones_dense(rng):
    """K = 4096 products of 1 x 1: 4096 exactly with float32 accumulators; a bfloat16 accumulator
    stops at 256 (256 + 1 rounds back to 256)."""
    return [np.ones((2, 4096), BF16), np.ones((3, 4096), BF16)]


def bias_relu(c):
    return lambda r: [("add", {}, [bf(r, (c, 1, 1))]), ("nn.relu", {}, [])]


# (id, op, inputs(rng), attrs, chain)
OP_CASES = [
    ("add_broadcast", "add", lambda r: [bf(r, (2, 3, 19)), bf(r, (3, 1))], {}, None),
    ("multiply_overflows_to_inf", "multiply",
     lambda r: [np.array([3e38, -3e38, 2.0, 1e-30, 1e-30, -0.0, 3.0, 0.1], BF16),
                np.array([2.0, 2.0, 0.5, 1e-10, 1e10, 1.0, 1 / 3, 0.1], BF16)], {}, None),
    ("exp_tanh", "exp", lambda r: [bf(r, (3, 40), 3.0)], {}, lambda r: [("tanh", {}, [])]),
    ("relu_nan_inf", "nn.relu", lambda r: [np.array([np.nan, np.inf, -np.inf, -0.0, 1.5, -1.5, 3e38, -1e-39],
                                                    BF16)], {}, None),
    ("maximum_nan", "maximum", lambda r: [np.array([np.nan, 1.0, -np.inf, 2.0], BF16),
                                          np.array([0.0, np.nan, 1.0, np.inf], BF16)], {}, None),
    ("softmax", "nn.softmax", lambda r: [bf(r, (3, 40), 4.0)], dict(axis=1), None),
    ("sum_accumulates_in_float32", "sum", lambda r: [r.uniform(0.5, 1.5, (2, 3000)).astype(BF16)],
     dict(axis=(1,), keepdims=0), None),
    ("dense_ones_k4096_accumulates_in_float32", "nn.dense", _ones_dense, {}, None),
    ("dense_bias_relu", "nn.dense", lambda r: [bf(r, (5, 72)), bf(r, (10, 72))], {},
     lambda r: [("add", {}, [bf(r, (10,))]), ("nn.relu", {}, [])]),
    ("matmul_batched", "nn.matmul", lambda r: [bf(r, (2, 7, 33)), bf(r, (33, 9))], {}, None),
    ("conv2d_3x3_pad1_bias_relu", "nn.conv2d", lambda r: [bf(r, (1, 8, 15, 15)), bf(r, (16, 8, 3, 3))],
     conv(padding=(1, 1, 1, 1)), bias_relu(16)),
    ("conv2d_depthwise_stride2", "nn.conv2d", lambda r: [bf(r, (1, 6, 13, 13)), bf(r, (6, 1, 3, 3))],
     conv(strides=(2, 2), padding=(1, 1, 1, 1), groups=6), None),
    ("max_pool2d", "nn.max_pool2d", lambda r: [bf(r, (1, 3, 8, 8))], pool((2, 2), (2, 2)), None),
    ("reinterpret_int16_bfloat16", "reinterpret", lambda r: [r.integers(-2**15, 2**15, (2, 16)).astype(np.int16)],
     dict(dtype="bfloat16"), None),
]


@pytest.mark.parametrize("target_name", OP_TARGETS)
@pytest.mark.parametrize("case", OP_CASES, ids=[c[0] for c in OP_CASES])
def test_bfloat16_op_vs_numpy(case, target_name):
    """Against the op's numpy reference on ml_dtypes arrays (float64 math rounded to bfloat16
    through float32): within one bfloat16 ulp (test_ops.TOLERANCE), NaN and inf where it has them."""
    name, op, inputs, attrs, chain = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = inputs(rng)
    with np.errstate(all="ignore"):
        out, ref = run_op(op, arrays, attrs, chain(rng) if chain else (), target=_target(target_name))
    assert out.dtype == ref.dtype == BF16
    if name.startswith("dense_ones"):
        np.testing.assert_array_equal(out.astype(np.float32), np.full((2, 3), 4096.0, np.float32))
    _assert_close(out, ref)


def test_llvm_ir_holds_bfloat16_as_i16_without_bfloat_conversions():
    """Loads and stores of i16, the float32 math between them, no LLVM `bfloat` (a libcall on
    x86-64 without AVX512-BF16, no instruction selection on wasm32)."""
    from tvmc.codegen.llvm import CodeGenLLVM

    rng = np.random.default_rng(0)
    fn, arrays, _ = op_function("add", [bf(rng, (4, 64)), bf(rng, (4, 64))])
    _, prim = build_and_run(fn, arrays)
    cg = CodeGenLLVM(_target("native"))
    cg.add_function(prim)
    text = cg.ir_text()
    assert "bfloat" not in text and "half" not in text
    assert "load <" in text and "x i16>" in text and "fadd" in text


def test_opencl_source_keeps_bfloat16_as_ushort():
    from tvmc.codegen.opencl import CodeGenOpenCL
    from tvmc.ops.fused import lower_fused

    target = _target("opencl")
    rng = np.random.default_rng(0)
    fn, _, _ = op_function("multiply", [bf(rng, (4, 64)), bf(rng, (64,))])
    cg = CodeGenOpenCL(target)
    cg.add_function(lower_fused(fn, target))
    src = cg.source()
    assert "__global ushort* restrict" in src and "half" not in src
    assert "tvmc_bf16_bits_float" in src and "tvmc_bf16_from_bits_float" in src


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rfactor_partial_sums_are_combined_unrounded(dtype):
    """A 16-bit dense whose CPU schedule splits K over vector lanes (rfactor): the lanes' float32
    partial sums are added as they are, the result rounded once (rounding each partial to the
    16-bit type first would leave float32 accumulation within a lane only)."""
    import re

    from tvmc.ops.fused import lower_fused

    rng = np.random.default_rng(0)
    fn, _, _ = op_function("nn.dense", [n(rng, (32, 64)).astype(dtype), n(rng, (64, 64)).astype(dtype)])
    text = str(lower_fused(fn, _target("native")))
    assert "_rf[" in text
    assert not re.search(rf"{dtype}\(\w*_rf\[", text), text
