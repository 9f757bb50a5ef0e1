"""int8 kernels (tvmc/ops/cpu/int8.py): dense_u8s8 and conv2d_nchwc_u8s8 through the real LLVM
codegen for every dot-product form of targets/isa/*.yaml dot_u8s8: on this host, x86's
AVX512-VNNI and AVX-VNNI vpdpbusd, AVX512-BW and AVX2 vpmaddubsw (exact, with and without the
weights' pairs_in_int16), widening multiplies on x86-64; under qemu-user, AArch64's udot
(+dotprod, arm-neoverse-n1: sdot on int8 data, udot on uint8) and usdot (+i8mm), widening
multiplies on `arm`; under wasmtime,
wasm32's i32x4.dot_i16x8_s (simd128) and i32x4.relaxed_dot_i8x16_i7x16_add_s (relaxed-simd),
scalar widening on wasm-nosimd. Compared exactly with numpy's int64 products; the instructions are
checked in the generated assembly (no host feature needed for that)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from tests.targets import kernel_runner
from tvmc import te
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ArtifactError, ScheduleError
from tvmc.ops.cpu.int8 import (BLOCK_K, BLOCK_N, conv2d_nchw_u8s8, conv2d_nchwc_u8s8, conv2d_u8s8_config,
                               dense_u8s8, dense_u8s8_config, pack_conv2d_u8s8_row_weight, pack_conv2d_u8s8_weight,
                               pack_dense_u8s8_weight, pairs_in_int16, schedule_conv2d_nchwc_u8s8,
                               schedule_dense_u8s8, unpack_conv2d_u8s8_row_weight, unpack_conv2d_u8s8_weight)
from tvmc.ops.layout import blocked_layout, to_layout
from tvmc.ops.nn_conv2d import _reference as conv2d_reference
from tvmc.runtime import device_missing
from tvmc.runtime.executor import host_cpu_flags
from tvmc.target import resolve_target
from tvmc.tir.lower import lower
from tvmc.tir.tensorize import DotU8S8Intrin

# (id, target spec, dot-product form, the instruction its assembly must hold)
INT8_TARGETS = [
    ("x86", "x86", ("pmaddubsw", 512), "vpmaddubsw"),
    ("x86-vnni", "x86 --target-option features=+avx512vnni", ("vpdpbusd", 512), "vpdpbusd"),
    ("x86-avx2", "x86-avx2", ("pmaddubsw", 256), "vpmaddubsw"),
    ("x86-avx2-vnni", "x86-avx2 --target-option features=+avxvnni", ("vpdpbusd", 256), "vpdpbusd"),
    ("x86-64", "x86-64", None, None),
    ("arm", "arm", None, None),
    ("arm-neoverse-n1", "arm-neoverse-n1", ("sdot", 128), "udot"),  # udot on uint8 data, sdot on int8
    ("arm-i8mm", "arm-neoverse-n1 --target-option features=+i8mm", ("usdot", 128), "usdot"),
    ("wasm", "wasm", ("dot_i16x8", 128), "i32x4.dot_i16x8_s"),
    ("wasm-relaxed", "wasm --target-option features=+relaxed-simd", ("relaxed_dot", 128),
     "i32x4.relaxed_dot_i8x16_i7x16_add_s"),
    ("wasm-nosimd", "wasm-nosimd", None, None),
]
# every form's instruction, and what the widening multiplies of each architecture show
DOT_INSNS = ["vpdpbusd", "vpmaddubsw", "udot", "sdot", "usdot", "usmmla", "i32x4.dot_i16x8_s",
             "i32x4.relaxed_dot_i8x16_i7x16_add_s"]
WIDENING = {"x86_64": ("pmulld", "pmaddwd"), "aarch64": ("smull", "smlal"), "wasm32": ("i32.mul", "i32x4.mul")}
TARGET_PARAMS = [pytest.param(spec, form, insn, id=name) for name, spec, form, insn in INT8_TARGETS]


def _resolve(spec: str):
    """`NAME --target-option key=value` as the CLI resolves it."""
    name, _, option = spec.partition(" --target-option ")
    return resolve_target(name, dict([option.split("=", 1)]) if option else None)


def _runnable(target):
    """The target, or a skip naming the CPU flags this host lacks (e.g. avx_vnni on Zen 4), or
    the tool missing to run it (qemu-user, the aarch64 cross compiler, wasmtime)."""
    reason = device_missing(target)
    if reason:
        pytest.skip(f"target {target.name}: {reason}")
    if target.arch != "x86_64":  # emulated or in a wasm engine: no host CPU flag to check
        return target
    flags = host_cpu_flags()
    if flags is None:
        pytest.skip("cannot read /proc/cpuinfo")
    missing = sorted(set(target.host_features) - set(flags))
    if missing:
        pytest.skip(f"target {target.name}: this host's CPU lacks {', '.join(missing)}")
    return target


def _dense_kernel(m, k, n, target, pairs=False, config=None, epilogue=None, data_pairs=False):
    """(PrimFunc, packed-weight shape, extra inputs) of dense_u8s8 [m, k] x [n, k] for `target`
    with the fallback config (or `config`), the output through `epilogue(anchor) -> (out, inputs)`."""
    packed_shape = (-(-n // BLOCK_N), -(-k // BLOCK_K), BLOCK_N, BLOCK_K)
    d = te.placeholder((m, k), "uint8", "data")
    w = te.placeholder(packed_shape, "int8", "weight")
    anchor = dense_u8s8(d, w, n, pairs, data_pairs)
    out, extra = epilogue(anchor) if epilogue else (anchor, [])
    s = te.create_schedule(out)
    space = dense_u8s8_config(((m, k), packed_shape, (m, n), "uint8", {}), target)
    schedule_dense_u8s8(s, out, anchor, config or space.fallback_config(), target)
    return lower(s, [d, w, *extra, out], "dense_u8s8"), space


def _edge_inputs(rng, m, k, n, weight_range=(-128, 128)):
    """Seeded uint8 data and int8 weights with the extremes in place: a data row of 255s and one
    of 0s, weight rows of 127s and of -128s (the pairs that saturate int16 in vpmaddubsw)."""
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(*weight_range, (n, k)).astype(np.int8)
    a[0] = 255
    if m > 2:
        a[m - 1] = 0
    lo, hi = weight_range
    w[0] = hi - 1
    if n > 1:
        w[1] = lo
    return a, w


def _reference(a, w):
    return (a.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)


def _exact_on_three_configs(build, target, inputs, ref):
    """`build(config)` -> (PrimFunc, config space) of a kernel (config None: the fallback): the
    fallback and the first and last other configs of its space, run on `target`, equal `ref`."""
    _, space = build(None)
    fallback = space.fallback_config()
    others = [space.get(i) for i in range(len(space)) if dict(space.get(i)) != dict(fallback)]
    for cfg in [fallback] + ([others[0], others[-1]] if others else []):
        prim, _ = build(cfg)
        out = kernel_runner(target)(prim, target, inputs, np.zeros(ref.shape, np.int32))
        np.testing.assert_array_equal(out, ref, err_msg=f"config {dict(cfg)}")


@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_target_dot_product_form(spec, form, insn):
    assert _resolve(spec).dot_u8s8 == form


@pytest.mark.parametrize("shape", [(7, 70, 37), (4, 64, 32), (1, 256, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_dense_u8s8_matches_numpy(spec, form, insn, shape):
    """Fallback config and two others of the space; K and N that do not fill whole blocks pad."""
    target = _runnable(_resolve(spec))
    m, k, n = shape
    a, w = _edge_inputs(np.random.default_rng(m * 1000 + k + n), m, k, n)
    packed = pack_dense_u8s8_weight(w)
    assert not pairs_in_int16(packed)  # the exact vpmaddubsw form (data bytes split) is what runs
    _exact_on_three_configs(lambda cfg: _dense_kernel(m, k, n, target, config=cfg), target, [a, packed],
                            _reference(a, w))


@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_dense_u8s8_pairs_in_int16_at_the_boundary(spec, form, insn):
    """The one-vpmaddubsw form is exact as long as pairs_in_int16 holds: weight pairs at its
    limit ((127, 1): 255 * 128 = 32640; (-128, 0); (-1, -127)) against data of 255s give pair sums
    of +-32640, the largest that fit int16; and 7-bit weights (onnxruntime's reduce_range)."""
    target = _runnable(_resolve(spec))
    m, k, n = 3, 64, 32
    rng = np.random.default_rng(7)
    a, w = _edge_inputs(rng, m, k, n, weight_range=(-64, 64))
    w[2] = np.tile([127, 1], k // 2)
    w[3] = np.tile([-128, 0], k // 2)
    w[4] = np.tile([-1, -127], k // 2)
    packed = pack_dense_u8s8_weight(w)
    assert pairs_in_int16(packed)
    prim, _ = _dense_kernel(m, k, n, target, pairs=True)
    out = kernel_runner(target)(prim, target, [a, packed], np.zeros((m, n), np.int32))
    np.testing.assert_array_equal(out, _reference(a, w))
    assert out[0, 2] == 255 * 128 * (k // 2) and out[0, 3] == -255 * 128 * (k // 2)


def test_pairs_in_int16_limits():
    def fits(*pair):
        return pairs_in_int16(np.array([[[pair + (0, 0)]]], np.int8))

    assert fits(127, 1) and fits(-128, 0) and fits(-64, -64) and fits(127, -128) and fits(63, 63)
    assert not fits(127, 2) and not fits(-128, -1) and not fits(127, 127) and not fits(-65, -64)
    assert pairs_in_int16(np.random.default_rng(0).integers(-64, 64, (3, 5, 16, 4)).astype(np.int8))


def test_pack_dense_u8s8_weight_layout():
    w = np.random.default_rng(1).integers(-128, 128, (37, 70)).astype(np.int8)
    p = pack_dense_u8s8_weight(w)
    assert p.shape == (3, 18, 16, 4) and p.dtype == np.int8 and p.flags.c_contiguous
    nb, kb, i, j = np.meshgrid(*[np.arange(e) for e in p.shape], indexing="ij")
    rows, cols = 16 * nb + i, 4 * kb + j
    inside = (rows < 37) & (cols < 70)
    np.testing.assert_array_equal(p[inside], w[rows[inside], cols[inside]])
    assert not p[~inside].any()
    with pytest.raises(ValueError):
        pack_dense_u8s8_weight(w.astype(np.int32))


def _assembly(target, pairs: bool, m: int = 4) -> str:
    prim, _ = _dense_kernel(m, 64, 32, target, pairs=pairs)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    return compile_ir(cg.ir_text(), target, assembly=True).decode()


def _count(insn: str, asm: str) -> int:
    return len(re.findall(rf"(?<![\w.]){re.escape(insn)}(?![\w.])", asm))


@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_dense_u8s8_assembly_uses_the_instruction(spec, form, insn):
    """vpdpbusd on VNNI targets; vpmaddubsw on AVX512-BW / AVX2 with pairs_in_int16; without it,
    on a register tile of several rows, none: the weights widened to int16 by shifts and two
    vpmaddwd per step, and with one row (M = 1) twice as many vpmaddubsw and vpmaddwd (each data
    byte split into its low 7 bits and its top bit); udot with the
    weights' eor on +dotprod (usdot would not run on a Neoverse N1), usdot alone on +i8mm;
    i32x4.dot_i16x8_s on simd128, the relaxed dot on relaxed-simd; no dot instruction and the
    widening multiplies elsewhere."""
    target = _resolve(spec)
    exact, paired = _assembly(target, False), _assembly(target, True)
    if insn == "vpmaddubsw":
        assert not _count("vpmaddubsw", exact) and _count("vpsraw", exact) > 0  # the weights widened
        assert _count("vpmaddwd", exact) == 2 * _count("vpmaddwd", paired) > 0
        exact = _assembly(target, False, m=1)  # one row: the data bytes split
    for asm in (exact, paired):
        assert [i for i in DOT_INSNS if _count(i, asm)] == ([insn] if insn else [])
    if insn is None:
        for asm in (exact, paired):
            assert any(_count(i, asm) for i in WIDENING[target.arch])  # the widening multiplies
        return
    if insn == "vpmaddubsw":
        # one vpmaddwd per vpmaddubsw in both; only the split masks the data quad into its low 7 bits
        # and top bits (LLVM unrolls the two one-row loops differently: no ratio of their counts)
        for asm in (exact, paired):
            assert _count("vpmaddubsw", asm) == _count("vpmaddwd", asm) > 0
        split_masks = ("$2139062143", "$16843009")  # 0x7F7F7F7F, 0x01010101
        assert all(mask in exact and mask not in paired for mask in split_masks)
    elif target.arch != "x86_64":
        assert exact == paired  # pairs_in_int16 is vpmaddubsw's alone
        assert (_count("eor", exact) > 0) == (insn == "udot")  # the weights' w ^ 0x80


@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_int8_data_kernels_match_numpy(spec, form, insn):
    """int8 data (what AlterOpLayout gives the kernels where Target.dot_data_dtype is int8:
    AArch64 +dotprod's SDOT): dense_u8s8 and conv2d_nchwc_u8s8 (padded with -3) compute the
    product of the int8 values, exactly, on every target: SDOT on arm-neoverse-n1, the widening
    multiplies (sign-extended data) elsewhere."""
    target = _runnable(_resolve(spec))
    rng = np.random.default_rng(21)
    m, k, n = 7, 70, 37
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    a[0], a[1] = -128, 127
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w[0], w[1] = 127, -128
    d = te.placeholder((m, k), "int8", "data")
    wp = te.placeholder((3, 18, BLOCK_N, BLOCK_K), "int8", "weight")
    out = dense_u8s8(d, wp, n)
    s = te.create_schedule(out)
    space = dense_u8s8_config(((m, k), wp.shape, (m, n), "int8", {}), target)
    schedule_dense_u8s8(s, out, out, space.fallback_config(), target)
    got = kernel_runner(target)(lower(s, [d, wp, out], "dense_s8"), target, [a, pack_dense_u8s8_weight(w)],
                                np.zeros((m, n), np.int32))
    np.testing.assert_array_equal(got, _reference(a, w))
    x = rng.integers(-128, 128, (1, 32, 6, 7)).astype(np.int8)
    x[:, 0] = -128
    wt = rng.integers(-128, 128, (32, 32, 3, 3)).astype(np.int8)
    packed = pack_conv2d_u8s8_weight(wt, 16)
    data = to_layout(x, "NCHW", blocked_layout(16))
    prim, _ = _conv_kernel(data.shape, packed.shape, (1, 1), (1, 1, 1, 1), -3, target, dtype="int8")
    ref = _conv_reference(x, wt, (1, 1), (1, 1, 1, 1), -3)
    got = kernel_runner(target)(prim, target, [data, packed], np.zeros(ref.shape, np.int32))
    np.testing.assert_array_equal(got, ref)


def test_int8_data_dense_is_one_sdot_per_four_lanes():
    """On arm-neoverse-n1 (+dotprod) int8 data takes SDOT alone: 4 per 16 lanes and step (a
    4-row tile: 16 per step), no UDOT and no EOR of the weights (uint8 data's form)."""
    target = _resolve("arm-neoverse-n1")
    d = te.placeholder((4, 64), "int8", "data")
    w = te.placeholder((2, 16, BLOCK_N, BLOCK_K), "int8", "weight")
    out = dense_u8s8(d, w)
    s = te.create_schedule(out)
    space = dense_u8s8_config(((4, 64), w.shape, (4, 32), "int8", {}), target)
    schedule_dense_u8s8(s, out, out, space.fallback_config(), target)
    cg = CodeGenLLVM(target)
    cg.add_function(lower(s, [d, w, out], "dense_s8"))
    asm = compile_ir(cg.ir_text(), target, assembly=True).decode()
    assert _count("sdot", asm) >= 16 and not _count("udot", asm) and not _count("eor", asm)
    assert not _count("sdot", _assembly(target, False))  # uint8 data: udot


def test_dense_u8s8_dotprod_form_runs_on_a_neoverse_n1():
    """arm-neoverse-n1's form (udot) runs exactly on an emulated Neoverse N1 (qemu-user's
    `-cpu neoverse-n1`: dot products, no i8mm), where the +i8mm form's usdot is an undefined
    instruction: the emulated CPU does check the instruction set."""
    n1 = _runnable(_resolve("arm-neoverse-n1"))
    emulator = (n1.emulator[0], "-cpu", "neoverse-n1", *n1.emulator[1:])
    m, k, n = 3, 40, 32
    a, w = _edge_inputs(np.random.default_rng(11), m, k, n)
    for spec, runs in (("arm-neoverse-n1", True), ("arm-neoverse-n1 --target-option features=+i8mm", False)):
        target = replace(_resolve(spec), emulator=emulator)
        prim, _ = _dense_kernel(m, k, n, target)
        run = kernel_runner(target)
        if runs:
            out = run(prim, target, [a, pack_dense_u8s8_weight(w)], np.zeros((m, n), np.int32))
            np.testing.assert_array_equal(out, _reference(a, w))
        else:
            with pytest.raises(ArtifactError, match="Illegal instruction"):
                run(prim, target, [a, pack_dense_u8s8_weight(w)], np.zeros((m, n), np.int32))


def test_dense_u8s8_fused_epilogue():
    """An int32 epilogue (what a requantize reads) applied to the register tile as it is stored,
    and one that reshapes (the product kept at root)."""
    target = _runnable(_resolve("x86"))
    m, k, n = 5, 36, 48
    a, w = _edge_inputs(np.random.default_rng(3), m, k, n)
    bias = np.random.default_rng(4).integers(-1000, 1000, n).astype(np.int32)
    ref = _reference(a, w)

    def add_bias(anchor):
        b = te.placeholder((n,), "int32", "bias")
        return te.compute((m, n), lambda i, j: anchor[i, j] * 3 + b[j], name="epilogue"), [b]

    def reshape(anchor):
        return te.compute((m * n,), lambda i: anchor[i // n, i % n], name="flat"), []

    prim, _ = _dense_kernel(m, k, n, target, epilogue=add_bias)
    out = kernel_runner(target)(prim, target, [a, pack_dense_u8s8_weight(w), bias], np.zeros((m, n), np.int32))
    np.testing.assert_array_equal(out, ref * 3 + bias)
    prim, _ = _dense_kernel(m, k, n, target, epilogue=reshape)
    out = kernel_runner(target)(prim, target, [a, pack_dense_u8s8_weight(w)], np.zeros(m * n, np.int32))
    np.testing.assert_array_equal(out, ref.reshape(-1))


def test_tensorize_refuses_what_the_intrinsic_does_not_compute():
    """Loops of the wrong extent, or operands that are not u8 x s8, fail at lowering by name."""
    d = te.placeholder((4, 16), "uint8", "data")
    w = te.placeholder((1, 4, 16, 4), "int8", "weight")
    out = dense_u8s8(d, w)
    s = te.create_schedule(out)
    m, n = s[out].op.axis
    ko, ki = s[out].op.reduce_axis
    n_outer, n_inner = s[out].split(n, 8)  # 8 lanes, the intrinsic has 16
    s[out].reorder(m, ko, n_outer, n_inner, ki)
    s[out].tensorize(n_inner, DotU8S8Intrin(16))
    with pytest.raises(ScheduleError, match="spatial loop of 16"):
        lower(s, [d, w, out], "bad")
    wf = te.placeholder((16, 16), "int8", "w2")
    k = te.reduce_axis(16, "k")
    plain = te.compute((4, 16), lambda i, j: te.sum(te.cast("int32", d[i, k]) * te.cast("int32", wf[j, k]), k))
    s = te.create_schedule(plain)
    k_outer, k_inner = s[plain].split(k, 4)
    i, j = s[plain].op.axis
    s[plain].reorder(i, k_outer, j, k_inner)
    s[plain].tensorize(j, DotU8S8Intrin(16))  # weight [N, K] unpacked: steps by 16 along j, not 4
    with pytest.raises(ScheduleError, match="int8 operand"):
        lower(s, [d, wf, plain], "bad")


# --- conv2d_nchwc_u8s8 ---------------------------------------------------------------------------

def _conv_kernel(data_shape, packed_shape, strides, padding, pad_value, target, config=None,
                 kernel=(conv2d_nchwc_u8s8, conv2d_u8s8_config, schedule_conv2d_nchwc_u8s8), dtype="uint8",
                 **compute_attrs):
    """(PrimFunc, config space) of a blocked int8 conv for `target` (fallback config, or
    `config`): `kernel` = (compute, config space, schedule), by default conv2d_nchwc_u8s8's, on
    `dtype` data, `compute_attrs` passed to the compute (data_pairs=True)."""
    compute, config_space, schedule = kernel
    d = te.placeholder(data_shape, dtype, "data")
    w = te.placeholder(packed_shape, "int8", "weight")
    out = compute(d, w, strides, padding, (1, 1), pad_value, **compute_attrs)
    s = te.create_schedule(out)
    space = config_space((data_shape, packed_shape, out.shape, dtype, ()), target)
    schedule(s, out, out, config or space.fallback_config(), target)
    return lower(s, [d, w, out], compute.__name__), space


def _conv_reference(x, w, strides, padding, pad_value):
    """NCHW16c int32: x uint8 NCHW padded with pad_value, then a plain convolution (exact in
    float64)."""
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    out = conv2d_reference(xp, w.astype(np.float64), strides, (0, 0, 0, 0), (1, 1), 1).astype(np.int32)
    return to_layout(out, "NCHW", blocked_layout(BLOCK_N))


CONV_SHAPES = [  # (id, N C H W, O, K, stride, padding, ib, pad_value)
    ("3x3_pad1_c32", (1, 32, 9, 11), 32, 3, 1, (1, 1, 1, 1), 16, 131),
    ("stem_c3_s2_asym", (1, 3, 13, 10), 16, 3, 2, (0, 1, 2, 1), 3, 255),
    ("1x1_s2_ib8_n2", (2, 16, 7, 7), 48, 1, 2, (0, 0, 0, 0), 8, 0),
]


@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: s[0])
@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_conv2d_nchwc_u8s8_matches_numpy(spec, form, insn, shape):
    """Fallback config and two others; data of 255s in the first channel, weights of 127 and -128
    for the first two output channels (vpmaddubsw's saturating pairs), a pad value at the edge of
    uint8; every result exact."""
    _conv_exact_on_three_configs(_runnable(_resolve(spec)), shape)


def _conv_exact_on_three_configs(target, shape, **compute_attrs):
    """A CONV_SHAPES case on `target` (fallback config and two others; compute_attrs to the
    compute): data of 255s in the first channel, weights of 127 and -128 for the first two output
    channels, exact against numpy."""
    _, (n, c, h, w), o, k, stride, padding, ib, pad_value = shape
    rng = np.random.default_rng(c * 100 + o)
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    x[:, 0] = 255
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    wt[0], wt[1] = 127, -128
    packed = pack_conv2d_u8s8_weight(wt, ib)
    data = to_layout(x, "NCHW", blocked_layout(ib))
    ref = _conv_reference(x, wt, (stride, stride), padding, pad_value)
    _exact_on_three_configs(lambda cfg: _conv_kernel(data.shape, packed.shape, (stride, stride), padding, pad_value,
                                                     target, cfg, **compute_attrs), target, [data, packed], ref)


def test_pack_conv2d_u8s8_weight_layout():
    """[O/16, C/ib, KH, KW, ceil(ib/4), 16, 4]: element (oco, ico, kh, kw, q, i, j) is weight[16 oco + i,
    ib ico + 4 q + j, kh, kw]; the channels that round ib = 3 up to 4 are zero."""
    w = np.random.default_rng(2).integers(-128, 128, (32, 6, 3, 2)).astype(np.int8)
    p = pack_conv2d_u8s8_weight(w, 3)
    assert p.shape == (2, 2, 3, 2, 1, 16, 4) and p.flags.c_contiguous
    assert p[1, 1, 2, 0, 0, 5, 2] == w[21, 5, 2, 0] and not p[..., 3].any()
    np.testing.assert_array_equal(unpack_conv2d_u8s8_weight(p, 3), w)
    np.testing.assert_array_equal(unpack_conv2d_u8s8_weight(pack_conv2d_u8s8_weight(w[:, :4], 4), 4), w[:, :4])
    with pytest.raises(ValueError, match="16 output"):
        pack_conv2d_u8s8_weight(w[:24], 3)


@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_conv2d_nchwc_u8s8_assembly_uses_the_instruction(spec, form, insn):
    """A 3x3 conv's kernel holds the target's dot-product instruction: vpdpbusd on VNNI targets
    (and no vpmaddubsw); on AVX512-BW / AVX2, for full-range weights (no pairs_in_int16) and a register
    tile of several output columns, vpmaddwd on the weights widened by shifts (no vpmaddubsw); neither on
    x86-64."""
    target = _resolve(spec)
    prim, _ = _conv_kernel((1, 2, 8, 8, 16), (2, 2, 3, 3, 4, 16, 4), (1, 1), (1, 1, 1, 1), 128, target)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    asm = compile_ir(cg.ir_text(), target, assembly=True).decode()
    if insn is None:
        assert "vpdpbusd" not in asm and "pmaddubsw" not in asm
        return
    if insn == "vpmaddubsw":
        assert "vpmaddwd" in asm and "vpsraw" in asm and "pmaddubsw" not in asm and "vpdpbusd" not in asm
        return
    assert insn in asm
    if insn == "vpdpbusd":
        assert "pmaddubsw" not in asm


# --- data_pairs: the data widened to int16 once, quads in pair order ------------------------------

DATA_PAIRS_TARGETS = [p for p in TARGET_PARAMS if p.id in ("x86", "x86-avx2", "x86-64", "wasm")]


@pytest.mark.parametrize("shape", [(7, 70, 37), (4, 64, 32)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("spec,form,insn", DATA_PAIRS_TARGETS)
def test_data_pairs_dense_matches_numpy(spec, form, insn, shape):
    """dense_u8s8 with data_pairs (what AlterOpLayout gives the exact kernels on
    Target.dot_data_pairs forms): the vpmaddwd steps on int16 pairs on x86's AVX512-BW and AVX2
    forms, the widening multiplies of the quad put back in element order elsewhere (x86-64,
    wasm32); fallback and two other configs, ragged K and N, data of 255s against weights of 127
    and -128; exact."""
    target = _runnable(_resolve(spec))
    m, k, n = shape
    a, w = _edge_inputs(np.random.default_rng(m + k + n), m, k, n)
    _exact_on_three_configs(lambda cfg: _dense_kernel(m, k, n, target, config=cfg, data_pairs=True), target,
                            [a, pack_dense_u8s8_weight(w)], _reference(a, w))


@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: s[0])
@pytest.mark.parametrize("spec,form,insn", DATA_PAIRS_TARGETS)
def test_data_pairs_conv_matches_numpy(spec, form, insn, shape):
    """conv2d_nchwc_u8s8 with data_pairs: the padded input widened to int16 with each quad in
    pair order (the 3-channel stem's quad padded); fallback and two other configs, data of 255s
    against weights of 127 and -128; exact."""
    _conv_exact_on_three_configs(_runnable(_resolve(spec)), shape, data_pairs=True)


def test_data_pairs_steps_broadcast_the_words_from_memory():
    """On x86-avx2 a data_pairs dense step broadcasts the words (a0, a2) and (a1, a3) from the
    int16 stage: per row and step two vpbroadcastd and two vpmaddwd, and no vpsrlw splitting a
    quad; the quad split from bytes (no data_pairs) takes one vpsrlw per row and step."""
    target = resolve_target("x86-avx2")
    asm = {}
    for widened in (False, True):
        prim, _ = _dense_kernel(4, 64, 16, target, config={"tile_m": 4, "tile_nb": 1}, data_pairs=widened)
        cg = CodeGenLLVM(target)
        cg.add_function(prim)
        asm[widened] = compile_ir(cg.ir_text(), target, assembly=True).decode()
    assert _count("vpsrlw", asm[False]) > 0 and _count("vpsrlw", asm[True]) == 0
    assert _count("vpbroadcastd", asm[True]) == _count("vpmaddwd", asm[True]) // 2 > 0  # 2 ymm per 16 lanes
    assert _count("vpmaddubsw", asm[True]) == 0


def test_tensorize_checks_the_pair_order_of_int16_data():
    """An int16 data operand must read its quad at offsets (0, 2, 1, 3): the same compute with
    the quad in element order fails at lowering, naming the pair order."""
    d = te.placeholder((4, 16), "int16", "data")
    w = te.placeholder((1, 4, 16, 4), "int8", "weight")
    ko, ki = te.reduce_axis(4, "k_outer"), te.reduce_axis(4, "k_inner")
    out = te.compute((4, 16), lambda i, j: te.sum(te.cast("int32", d[i, ko.var * 4 + ki.var]) *
                                                  te.cast("int32", w[0, ko.var, j, ki.var]), [ko, ki]))
    s = te.create_schedule(out)
    i, j = s[out].op.axis
    s[out].reorder(i, ko, j, ki)
    s[out].tensorize(j, DotU8S8Intrin(16))
    with pytest.raises(ScheduleError, match="pair order"):
        lower(s, [d, w, out], "bad")


# --- conv2d_nchw_u8s8 (an image stem: planar data, the quad along the kernel row) ---------------

def _row_kernel(data_shape, packed_shape, strides, out_width, target, pairs=False, config=None):
    """(PrimFunc, config space) of conv2d_nchw_u8s8 for `target` (fallback config, or `config`)."""
    d = te.placeholder(data_shape, "uint8", "data")
    w = te.placeholder(packed_shape, "int8", "weight")
    out = conv2d_nchw_u8s8(d, w, strides, out_width, pairs)
    s = te.create_schedule(out)
    space = conv2d_u8s8_config((data_shape, packed_shape, out.shape, "uint8", ()), target)
    schedule_conv2d_nchwc_u8s8(s, out, out, config or space.fallback_config(), target)
    return lower(s, [d, w, out], "conv2d_nchw_u8s8"), space


ROW_SHAPES = [  # (id, N C HP WP (already padded, rows wider than read), O, KH x KW, stride, OW)
    ("3x3_c3", (1, 3, 11, 16), 16, (3, 3), 1, 9),
    ("7x7_s2_c3_n2", (2, 3, 15, 32), 32, (7, 7), 2, 12),
    ("5x2_c1", (1, 1, 6, 12), 16, (5, 2), 1, 7),
]


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: s[0])
@pytest.mark.parametrize("spec,form,insn", TARGET_PARAMS)
def test_conv2d_nchw_u8s8_matches_numpy(spec, form, insn, shape):
    """Fallback config and two others, with and without pairs_in_int16 where the weights allow
    it; data of 255s in the first channel, weights of 127 and -128 for the first two output
    channels; the columns past the last quad hold 255s that no output may read; exact."""
    target = _runnable(_resolve(spec))
    _, (n, c, hp, wp), o, (kh, kw), stride, ow = shape
    rng = np.random.default_rng(c * 100 + o + kw)
    used = (ow - 1) * stride + -(-kw // BLOCK_K) * BLOCK_K
    x = rng.integers(0, 256, (n, c, hp, wp)).astype(np.uint8)
    x[:, 0] = 255
    x[..., used:] = 255
    wt = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
    wt[0], wt[1] = 127, -128
    packed = pack_conv2d_u8s8_row_weight(wt)
    ref = _conv_reference(x[..., :(ow - 1) * stride + kw], wt, (stride, stride), (0, 0, 0, 0), 0)
    _exact_on_three_configs(lambda cfg: _row_kernel(x.shape, packed.shape, (stride, stride), ow, target, False, cfg),
                            target, [x, packed], ref)
    small = (wt // 4).astype(np.int8)  # |w| <= 32: no pair can saturate vpmaddubsw
    assert pairs_in_int16(pack_conv2d_u8s8_row_weight(small))
    prim, _ = _row_kernel(x.shape, packed.shape, (stride, stride), ow, target, True)
    out = kernel_runner(target)(prim, target, [x, pack_conv2d_u8s8_row_weight(small)], np.zeros(ref.shape, np.int32))
    ref = _conv_reference(x[..., :(ow - 1) * stride + kw], small, (stride, stride), (0, 0, 0, 0), 0)
    np.testing.assert_array_equal(out, ref)


def test_pack_conv2d_u8s8_row_weight_layout():
    """[O/16, C, KH, ceil(KW/4), 16, 4]: element (oco, c, kh, q, i, j) is weight[16 oco + i, c, kh,
    4 q + j]; the taps that round KW = 7 up to 8 are zero; O not a multiple of 16 is refused."""
    w = np.random.default_rng(5).integers(-128, 128, (32, 3, 2, 7)).astype(np.int8)
    p = pack_conv2d_u8s8_row_weight(w)
    assert p.shape == (2, 3, 2, 2, 16, 4) and p.flags.c_contiguous
    assert p[1, 2, 1, 1, 5, 2] == w[21, 2, 1, 6] and not p[:, :, :, 1, :, 3].any()
    np.testing.assert_array_equal(unpack_conv2d_u8s8_row_weight(p, 7), w)
    with pytest.raises(ValueError, match="multiple of 16"):
        pack_conv2d_u8s8_row_weight(w[:24])


def test_conv2d_nchw_u8s8_refuses_rows_too_short_for_its_columns():
    """out_width columns whose last quad passes the data's rows: a ValueError, not a read past them."""
    d = te.placeholder((1, 3, 8, 10), "uint8", "data")
    w = te.placeholder((1, 3, 3, 1, 16, 4), "int8", "weight")
    assert conv2d_nchw_u8s8(d, w, (1, 1), 7).shape[3] == 7
    with pytest.raises(ValueError, match="do not fit"):
        conv2d_nchw_u8s8(d, w, (1, 1), 8)
