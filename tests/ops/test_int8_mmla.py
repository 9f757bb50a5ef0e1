"""The int8 convolution and dense on the matrix multiply-accumulate step (tvmc/ops/cpu/int8_mmla.py,
tir.MmlaU8S8) through the real LLVM codegen: AArch64 USMMLA on +i8mm under qemu-user (its default
CPU has FEAT_I8MM), the widening form of the same step on arm-neoverse-n1 (no i8mm), x86 and
wasm32. Compared exactly with numpy's products; the instruction is checked in the assembly."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from tests.ops.test_int8_kernels import (_conv_kernel, _conv_reference, _count, _exact_on_three_configs, _resolve,
                                         _runnable)
from tests.targets import kernel_runner
from tvmc import te
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ArtifactError, ScheduleError
from tvmc.ops.cpu.int8_mmla import (conv2d_nchwc_u8s8_mmla, conv2d_u8s8_mmla_config, dense_u8s8_mmla,
                                    dense_u8s8_mmla_config, pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight,
                                    schedule_conv2d_nchwc_u8s8_mmla, schedule_dense_u8s8_mmla,
                                    unpack_conv2d_u8s8_mmla_weight, unpack_dense_u8s8_mmla_weight)
from tvmc.ops.layout import blocked_layout, to_layout
from tvmc.tir.lower import lower
from tvmc.tir.tensorize import MmlaU8S8Intrin

I8MM = "arm-neoverse-n1 --target-option features=+i8mm"
# (id, target spec, Target.mmla_u8s8)
MMLA_TARGETS = [
    pytest.param(I8MM, "usmmla", id="arm-i8mm"),
    pytest.param("arm-neoverse-n1", None, id="arm-neoverse-n1"),
    pytest.param("x86", None, id="x86"),
    pytest.param("wasm", None, id="wasm"),
]


def _mmla_kernel(data_shape, packed_shape, strides, padding, pad_value, target, config=None):
    """(PrimFunc, config space) of conv2d_nchwc_u8s8_mmla for `target` (fallback config, or `config`)."""
    return _conv_kernel(data_shape, packed_shape, strides, padding, pad_value, target, config,
                        (conv2d_nchwc_u8s8_mmla, conv2d_u8s8_mmla_config, schedule_conv2d_nchwc_u8s8_mmla))


MMLA_SHAPES = [  # (id, N C H W, O, K, stride, padding, ib, pad_value)
    ("3x3_pad1_c32_ow11", (1, 32, 9, 11), 32, 3, 1, (1, 1, 1, 1), 16, 131),
    ("3x3_s2_asym_ib8_ow5", (1, 8, 13, 10), 16, 3, 2, (0, 1, 2, 1), 8, 255),
    ("1x1_s2_ib8_n2", (2, 16, 7, 7), 48, 1, 2, (0, 0, 0, 0), 8, 0),
]


def _case(shape):
    _, (n, c, h, w), o, k, stride, padding, ib, pad_value = shape
    rng = np.random.default_rng(c * 100 + o + k)
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    x[:, 0] = 255
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    wt[0], wt[1] = 127, -128
    return x, wt


def test_target_mmla_form():
    assert _resolve(I8MM).mmla_u8s8 == "usmmla"
    assert _resolve("arm-neoverse-n1").mmla_u8s8 is None and _resolve("x86").mmla_u8s8 is None


@pytest.mark.parametrize("shape", MMLA_SHAPES, ids=lambda s: s[0])
@pytest.mark.parametrize("spec,form", MMLA_TARGETS)
def test_conv2d_nchwc_u8s8_mmla_matches_numpy(spec, form, shape):
    """Fallback config and two others (tiles of 1-4 pixel pairs, 1-2 channel blocks); an odd OW
    (the last pair's second pixel computed on the padded column, not stored), data of 255s in the
    first channel, weights of 127 and -128 for the first two output channels; exact."""
    target = _runnable(_resolve(spec))
    _, _, _, _, stride, padding, ib, pad_value = shape
    x, wt = _case(shape)
    packed = pack_conv2d_u8s8_mmla_weight(wt, ib)
    data = to_layout(x, "NCHW", blocked_layout(ib))
    ref = _conv_reference(x, wt, (stride, stride), padding, pad_value)
    _exact_on_three_configs(lambda cfg: _mmla_kernel(data.shape, packed.shape, (stride, stride), padding, pad_value,
                                                     target, cfg), target, [data, packed], ref)


@pytest.mark.parametrize("spec,form", MMLA_TARGETS)
def test_conv2d_nchwc_u8s8_mmla_assembly(spec, form):
    """+i8mm: one USMMLA per (pixel pair, channel pair) of the register tile and step, and no
    other dot product; elsewhere no USMMLA (the widening form)."""
    target = _resolve(spec)
    prim, _ = _mmla_kernel((1, 2, 8, 8, 16), (2, 2, 3, 3, 2, 8, 2, 8), (1, 1), (1, 1, 1, 1), 128, target)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    asm = compile_ir(cg.ir_text(), target, assembly=True).decode()
    if form:
        assert _count("usmmla", asm) >= 16 and not _count("usdot", asm) and not _count("udot", asm)
        assert not re.search(r"\bstr\s+q\d+, \[sp", asm)  # the accumulators stay in registers
    else:
        assert not _count("usmmla", asm)


def test_conv2d_nchwc_u8s8_mmla_is_i8mm_code():
    """The +i8mm kernel is an undefined instruction on an emulated Neoverse N1 (qemu-user's `-cpu
    neoverse-n1`: dot products, no i8mm), so the emulated default CPU that runs the tests above does
    execute USMMLA."""
    n1 = _runnable(_resolve(I8MM))
    target = replace(n1, emulator=(n1.emulator[0], "-cpu", "neoverse-n1", *n1.emulator[1:]))
    shape = MMLA_SHAPES[2]
    x, wt = _case(shape)
    packed = pack_conv2d_u8s8_mmla_weight(wt, 8)
    data = to_layout(x, "NCHW", blocked_layout(8))
    prim, _ = _mmla_kernel(data.shape, packed.shape, (2, 2), (0, 0, 0, 0), 0, target)
    with pytest.raises(ArtifactError, match="Illegal instruction"):
        kernel_runner(target)(prim, target, [data, packed], np.zeros((2, 3, 4, 4, 16), np.int32))


def test_pack_conv2d_u8s8_mmla_weight_layout():
    """[O/16, C/ib, KH, KW, ib/8, 8, 2, 8]: element (oco, ico, kh, kw, q, cp, ci, k) is
    weight[16 oco + 2 cp + ci, ib ico + 8 q + k, kh, kw]."""
    w = np.random.default_rng(2).integers(-128, 128, (32, 32, 3, 2)).astype(np.int8)
    p = pack_conv2d_u8s8_mmla_weight(w, 16)
    assert p.shape == (2, 2, 3, 2, 2, 8, 2, 8) and p.flags.c_contiguous and p.dtype == np.int8
    assert p[1, 1, 2, 0, 1, 3, 1, 5] == w[16 + 7, 16 + 8 + 5, 2, 0]
    np.testing.assert_array_equal(unpack_conv2d_u8s8_mmla_weight(p), w)
    for bad in (w[:24], w[:, :12]):
        with pytest.raises(ValueError, match="blocks"):
            pack_conv2d_u8s8_mmla_weight(bad, 16 if bad.shape[1] == 32 else 12)


def test_tensorize_mmla_refuses_what_the_step_does_not_compute():
    """Loops of the wrong extents, or a weight whose two rows are not 8 elements apart, fail at
    lowering by name."""
    d = te.placeholder((1, 1, 4, 4, 8), "uint8", "data")
    w = te.placeholder((1, 1, 1, 1, 1, 8, 2, 8), "int8", "weight")
    out = conv2d_nchwc_u8s8_mmla(d, w, (1, 1), (0, 0, 0, 0), (1, 1))
    product = out.op.input_tensors()[0]
    s = te.create_schedule(out)
    n, oco, y, xp, cp, xi, ci = s[product].op.axis
    *outer, k8 = s[product].op.reduce_axis
    s[product].reorder(n, oco, y, xp, *outer, cp, xi, ci, k8)
    s[product].tensorize(cp, MmlaU8S8Intrin())  # three spatial loops inside: (8, 2, 2)
    with pytest.raises(ScheduleError, match="two spatial loops of 2"):
        lower(s, [d, w, out], "bad")
    wf = te.placeholder((8, 2), "int8", "w2")  # B transposed: steps by 1 along j, 2 along k
    k = te.reduce_axis(8, "k")
    plain = te.compute((2, 2), lambda i, j: te.sum(te.cast("int32", d[0, 0, 0, i, k]) *
                                                   te.cast("int32", wf[k, j]), k))
    s = te.create_schedule(plain)
    i, j = s[plain].op.axis
    k_outer, k_inner = s[plain].split(k, 8)
    s[plain].reorder(k_outer, i, j, k_inner)
    s[plain].tensorize(i, MmlaU8S8Intrin())
    with pytest.raises(ScheduleError, match="int8 operand"):
        lower(s, [d, wf, plain], "bad")


# --- dense_u8s8_mmla ---------------------------------------------------------------------------

def _dense_kernel(m, k, n, target, config=None, epilogue=None):
    """(PrimFunc, config space, extra inputs) of dense_u8s8_mmla [m, k] x [n, k] (fallback config
    or `config`), the output through `epilogue(anchor) -> (out, inputs)`."""
    d = te.placeholder((m, k), "uint8", "data")
    w = te.placeholder((-(-n // 16), -(-k // 8), 8, 2, 8), "int8", "weight")
    anchor = dense_u8s8_mmla(d, w, n)
    out, extra = epilogue(anchor) if epilogue else (anchor, [])
    s = te.create_schedule(out)
    space = dense_u8s8_mmla_config(((m, k), w.shape, (m, n), "uint8", {}), target)
    schedule_dense_u8s8_mmla(s, out, anchor, config or space.fallback_config(), target)
    return lower(s, [d, w, *extra, out], "dense_u8s8_mmla"), space


@pytest.mark.parametrize("shape", [(7, 70, 37), (8, 64, 32), (1, 40, 20)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("spec,form", MMLA_TARGETS)
def test_dense_u8s8_mmla_matches_numpy(spec, form, shape):
    """Fallback config and two others (1-4 row pairs per tile); an odd M (the last pair's second
    row zeros, not stored), K and N that do not fill whole steps and blocks, one row (the product
    at root); rows of 255 and 0, weights of 127 and -128; exact."""
    target = _runnable(_resolve(spec))
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    a[0] = 255
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w[0], w[1] = 127, -128
    ref = (a.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)
    _exact_on_three_configs(lambda cfg: _dense_kernel(m, k, n, target, cfg), target,
                            [a, pack_dense_u8s8_mmla_weight(w)], ref)


def test_dense_u8s8_mmla_fused_epilogue_and_assembly():
    """An epilogue applied to the register tile as it is stored, and one that reshapes (the
    product at root), exact under qemu; the +i8mm kernel holds one USMMLA per row pair and column
    pair of its tile and step."""
    target = _runnable(_resolve(I8MM))
    m, k, n = 6, 24, 32
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    bias = rng.integers(-1000, 1000, n).astype(np.int32)
    ref = (a.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)

    def add_bias(anchor):
        b = te.placeholder((n,), "int32", "bias")
        return te.compute((m, n), lambda i, j: anchor[i, j] * 3 + b[j], name="epilogue"), [b]

    def reshape(anchor):
        return te.compute((m * n,), lambda i: anchor[i // n, i % n], name="flat"), []

    packed = pack_dense_u8s8_mmla_weight(w)
    prim, _ = _dense_kernel(m, k, n, target, epilogue=add_bias)
    out = kernel_runner(target)(prim, target, [a, packed, bias], np.zeros((m, n), np.int32))
    np.testing.assert_array_equal(out, ref * 3 + bias)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    asm = compile_ir(cg.ir_text(), target, assembly=True).decode()
    assert _count("usmmla", asm) >= 8 and not _count("usdot", asm)
    prim, _ = _dense_kernel(m, k, n, target, epilogue=reshape)
    out = kernel_runner(target)(prim, target, [a, packed], np.zeros(m * n, np.int32))
    np.testing.assert_array_equal(out, ref.reshape(-1))


def test_pack_dense_u8s8_mmla_weight_layout():
    """[ceil(N/16), ceil(K/8), 8, 2, 8]: element (nb, kb, cp, ci, k) is weight[16 nb + 2 cp + ci,
    8 kb + k], zero past N and K."""
    w = np.random.default_rng(3).integers(-128, 128, (37, 70)).astype(np.int8)
    p = pack_dense_u8s8_mmla_weight(w)
    assert p.shape == (3, 9, 8, 2, 8) and p.flags.c_contiguous
    assert p[2, 8, 2, 0, 5] == w[36, 69] and not p[2, 8, 2, 1].any() and not p[2, 8, :, :, 6:].any()
    np.testing.assert_array_equal(unpack_dense_u8s8_mmla_weight(p)[:37, :70], w)
