"""Channel-blocked operators compiled for x86: layout_transform, nn.conv2d_nchwc (against the NCHW
conv2d reference, through the layout conversions), pooling with a layout attribute."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from util import TOLERANCE, build_and_run, run_op

from tvmc.autotune.space import ConfigEntity
from tvmc.autotune.task import tasks_of_functions
from tvmc.errors import ModelError
from tvmc.graph.ir import Function, TensorType, Var
from tvmc.ops.cpu.conv2d_nchwc import conv2d_nchwc_config, fallback_tile_ow
from tvmc.ops.fused import lower_fused, workload
from tvmc.ops.layout import channel_block, logical_shape, physical_shape, to_layout
from tvmc.ops.nn_conv2d import _reference as conv2d_nchw
from tvmc.ops.nn_conv2d_nchwc import pack_weight, unpack_weight
from tvmc.ops.registry import get_op, make_call
from tvmc.target import resolve_target


def rng_for(case_id: str):
    return np.random.default_rng(zlib.crc32(case_id.encode()))


def normal(rng, shape):
    """float32 normal samples with -0.0 and 0.0 at the ends."""
    a = rng.standard_normal(shape).astype(np.float32)
    a.reshape(-1)[[0, -1]] = [-0.0, 0.0]
    return a


# --- layouts -----------------------------------------------------------------------------------

def test_layout_names_and_shapes():
    assert channel_block("NCHW") is None and channel_block("NCHW16c") == 16 and channel_block("NCHW1c") == 1
    for bad in ("NHWC", "NCHW0c", "NCHWc", "nchw16c"):
        with pytest.raises(ValueError, match="unknown layout"):
            channel_block(bad)
    assert physical_shape((2, 32, 5, 7), "NCHW16c") == (2, 2, 5, 7, 16)
    assert logical_shape((2, 2, 5, 7, 16), "NCHW16c") == (2, 32, 5, 7)
    with pytest.raises(ValueError, match="not a multiple"):
        physical_shape((1, 24, 5, 5), "NCHW16c")
    with pytest.raises(ModelError, match="layout_transform"):
        make_call("layout_transform", [Var("x", TensorType((1, 12, 3, 3)))], {"src_layout": "NCHW",
                                                                             "dst_layout": "NCHW8c"})


@pytest.mark.parametrize("src,dst,shape", [
    ("NCHW", "NCHW16c", (2, 32, 5, 7)),
    ("NCHW", "NCHW1c", (1, 3, 9, 9)),
    ("NCHW8c", "NCHW", (1, 3, 5, 17, 8)),
    ("NCHW16c", "NCHW4c", (1, 2, 3, 5, 16)),
    ("NCHW4c", "NCHW16c", (1, 8, 3, 5, 4)),
])
def test_layout_transform_vs_numpy(src, dst, shape):
    x = normal(rng_for(src + dst), shape)
    out, ref = run_op("layout_transform", [x], {"src_layout": src, "dst_layout": dst})
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))
    # the numpy conversion is the plain reshape/transpose definition
    nchw = x if src == "NCHW" else x.transpose(0, 1, 4, 2, 3).reshape(logical_shape(shape, src))
    np.testing.assert_array_equal(to_layout(ref, dst, "NCHW"), nchw)


def test_layout_transform_round_trip_compiled():
    """NCHW -> NCHW16c -> NCHW in one fused kernel gives the input back, bit for bit."""
    x = normal(rng_for("round_trip"), (2, 48, 7, 9))
    v = Var("x", TensorType(x.shape))
    blocked = make_call("layout_transform", [v], {"src_layout": "NCHW", "dst_layout": "NCHW16c"})
    back = make_call("layout_transform", [blocked], {"src_layout": "NCHW16c", "dst_layout": "NCHW"})
    out, _ = build_and_run(Function([v], back, "fused_layout_round_trip"), [x])
    np.testing.assert_array_equal(out, x)


def test_weight_packing_round_trip():
    w = normal(rng_for("pack"), (32, 24, 3, 3))
    packed = pack_weight(w, 8, 16)
    assert packed.shape == (2, 3, 3, 3, 8, 16)
    # OIHW8i16o: packed[oc // 16, ic // 8, kh, kw, ic % 8, oc % 16] == w[oc, ic, kh, kw]
    assert packed[1, 2, 0, 2, 5, 3] == w[16 + 3, 16 + 5, 0, 2]
    np.testing.assert_array_equal(unpack_weight(packed), w)
    dw = normal(rng_for("pack_dw"), (32, 1, 3, 3))
    assert pack_weight(dw, 16, 16, depthwise=True).shape == (2, 1, 3, 3, 1, 16)
    np.testing.assert_array_equal(unpack_weight(pack_weight(dw, 16, 16, depthwise=True)), dw)
    with pytest.raises(ValueError):
        pack_weight(w, 16, 16)


# --- nn.conv2d_nchwc against the NCHW reference ---------------------------------------------------

CONVS = [
    # id, (N, C, H, W), (O, KH, KW), strides, padding (t, l, b, r), dilation, groups, ic_bn, oc_bn
    ("3x3_pad1", (1, 32, 14, 14), (32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 16, 16),
    ("3x3_stride2_asym_pad", (1, 16, 15, 13), (32, 3, 3), (2, 2), (0, 1, 1, 0), (1, 1), 1, 16, 16),
    ("1x1", (2, 64, 7, 7), (32, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, 16, 16),
    ("1x1_stride2_ib8_ob16", (1, 24, 13, 13), (16, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, 8, 16),
    ("7x7_stride2_3_channels", (1, 3, 31, 31), (16, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, 1, 16),
    ("3x3_dilation2", (1, 16, 13, 13), (8, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, 16, 8),
    ("5x3_rect_kernel", (1, 8, 12, 10), (16, 5, 3), (1, 2), (2, 1, 2, 1), (1, 1), 1, 8, 16),
    ("depthwise_3x3", (1, 32, 12, 12), (32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 32, 16, 16),
    ("depthwise_stride2_dilation2", (1, 16, 15, 17), (16, 3, 3), (2, 2), (2, 2, 2, 2), (2, 2), 16, 8, 8),
    # OW = 31: no divisor of 31 up to 28 is useful, the fallback takes tile_ow = 16 and a partial tile
    ("ow31_partial_tile", (1, 16, 5, 33), (16, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, 16, 16),
    ("ow109_stem_partial_tile", (1, 3, 9, 223), (16, 7, 7), (2, 2), (0, 0, 0, 0), (1, 1), 1, 1, 16),
]


def _conv_case(case):
    cid, dshape, (o, kh, kw), strides, padding, dilation, groups, ib, ob = case
    rng = rng_for(cid)
    x = normal(rng, dshape)
    w = normal(rng, (o, dshape[1] // groups, kh, kw))
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups, out_layout=f"NCHW{ob}c")
    xb = to_layout(x, "NCHW", f"NCHW{ib}c")
    wb = pack_weight(w, ib, ob, depthwise=groups > 1)
    ref = conv2d_nchw(x, w, strides, padding, dilation, groups)
    return x, w, xb, wb, attrs, ref


@pytest.mark.parametrize("case", CONVS, ids=[c[0] for c in CONVS])
def test_conv2d_nchwc_vs_nchw_reference(case):
    x, w, xb, wb, attrs, ref = _conv_case(case)
    out, op_ref = run_op("nn.conv2d_nchwc", [xb, wb], attrs)
    block = attrs["out_layout"]
    np.testing.assert_allclose(to_layout(op_ref, block, "NCHW"), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(to_layout(out, block, "NCHW"), ref, **TOLERANCE["float32"])


@pytest.mark.parametrize("case", [c for c in CONVS if c[6] == 1], ids=[c[0] for c in CONVS if c[6] == 1])
def test_conv2d_nchwc_im2col_vs_nchw_reference(case):
    """The im2col + GEMM implementation (the tuner's alternative to the direct form)."""
    _, _, xb, wb, attrs, ref = _conv_case(case)
    out, _ = run_op("nn.conv2d_nchwc", [xb, wb], attrs, impl="conv2d_nchwc_im2col.cpu")
    np.testing.assert_allclose(to_layout(out, attrs["out_layout"], "NCHW"), ref, **TOLERANCE["float32"])


def _conv_function(xb, wb, attrs, name="fused_conv2d_nchwc_cfg"):
    params = [Var("x", TensorType(xb.shape)), Var("w", TensorType(wb.shape))]
    return Function(params, make_call("nn.conv2d_nchwc", params, attrs), name)


def test_im2col_applies_to_groups_1_only():
    """Depthwise convolutions offer only the direct form, so tvmc tune extracts one task for them."""
    target = resolve_target("native")
    names = {}
    for case in (CONVS[0], CONVS[7]):
        _, _, xb, wb, attrs, _ = _conv_case(case)
        names[case[0]] = [t.impl for t in tasks_of_functions([_conv_function(xb, wb, attrs)], target)]
    assert names == {"3x3_pad1": ["conv2d_nchwc.cpu", "conv2d_nchwc_im2col.cpu"],
                     "depthwise_3x3": ["conv2d_nchwc.cpu"]}


@pytest.mark.parametrize("faster", ["conv2d_nchwc.cpu", "conv2d_nchwc_im2col.cpu"])
def test_records_choose_the_faster_implementation(faster):
    """With a tuned config for both implementations, lowering takes the one of lower cost."""
    target = resolve_target("native")
    _, _, xb, wb, attrs, _ = _conv_case(CONVS[0])
    fn = _conv_function(xb, wb, attrs)
    configs = {}
    for t in tasks_of_functions([fn], target):
        cfg = ConfigEntity(t.config_space(target).fallback)
        cfg.cost_s = 1e-4 if t.impl == faster else 2e-4
        configs[t.impl] = cfg
    prim = lower_fused(fn, target, lambda name, wl: configs.get(name))
    assert ("im2col" in str(prim)) == (faster == "conv2d_nchwc_im2col.cpu")


def test_partial_tile_cases_do_take_a_partial_tile():
    target = resolve_target("x86")  # the AVX-512 descriptor's fallback (compile only)
    regs = target.num_vector_registers - 4
    assert fallback_tile_ow(31, regs) == 16 and fallback_tile_ow(109, regs) == 22
    assert fallback_tile_ow(56, regs) == 28 and fallback_tile_ow(7, regs) == 7


@pytest.mark.parametrize("target_name, size, channels, want", [
    ("x86", 7, 512, (2, 2, 7)),     # two rows of (2, 7): 28 accumulators
    ("x86", 4, 512, (2, 3, 4)),     # 24 (4 rows: 32 > 28)
    ("x86", 14, 256, (2, 1, 14)),   # (2, 14) holds 28 already
    ("x86-avx2", 7, 512, (1, 1, 7)),  # R = 12
    ("arm", 7, 512, (1, 1, 7)),     # NEON's by-element FMA: one row, as measured there
])
def test_fallback_rows_fill_the_accumulators(target_name, size, channels, want):
    """(tile_oc, tile_oh, tile_ow) of the fallback: narrow x86 layers stack rows (fallback_tile_oh)."""
    target = resolve_target(target_name)
    lanes = target.vector_lanes("float32")
    c = channels // lanes
    wl = ((1, c, size + 2, size + 2, lanes), (c, c, 3, 3, lanes, lanes), (1, c, size, size, lanes), "float32",
          (("groups", 1),))
    cfg = conv2d_nchwc_config(wl, target).fallback_config()
    assert (cfg["tile_oc"], cfg["tile_oh"], cfg["tile_ow"]) == want


def test_fallback_rows_with_a_partial_row_tile():
    """The narrow-layer fallback (2 blocks, 2 rows of 7) over OH = 7: the last row tile is partial."""
    case = ("rows_fallback", (1, 32, 7, 7), (32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 16, 16)
    _, _, xb, wb, attrs, ref = _conv_case(case)
    params = [Var("x", TensorType(xb.shape)), Var("w", TensorType(wb.shape))]
    func = Function(params, make_call("nn.conv2d_nchwc", params, attrs), "fused_conv2d_nchwc_rows")
    cfg = dict(tile_ow=7, unroll_ic=False, unroll_kw=False, tile_oh=2, tile_oc=2, reorder_kernel_first=False)
    out, _ = build_and_run(func, [xb, wb], config=ConfigEntity(cfg))
    np.testing.assert_allclose(to_layout(out, "NCHW16c", "NCHW"), ref, **TOLERANCE["float32"])


def test_conv2d_nchwc_fused_bias_relu_residual():
    """conv -> + bias [C//16,1,1,16] -> + residual (NCHW16c) -> relu, as AlterOpLayout emits it
    for a ResNet block, in one kernel."""
    case = ("residual", (1, 32, 10, 10), (32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 16, 16)
    x, w, xb, wb, attrs, ref = _conv_case(case)
    rng = rng_for("residual_extra")
    bias = normal(rng, (32, 1, 1))
    residual = normal(rng, ref.shape)
    chain = [("add", {}, [to_layout(bias[None], "NCHW", "NCHW16c")[0]]),
             ("add", {}, [to_layout(residual, "NCHW", "NCHW16c")]),
             ("nn.relu", {}, [])]
    out, _ = run_op("nn.conv2d_nchwc", [xb, wb], attrs, chain)
    want = np.maximum(ref + bias + residual, 0)
    np.testing.assert_allclose(to_layout(out, "NCHW16c", "NCHW"), want, **TOLERANCE["float32"])


_SLOW = pytest.mark.slow  # make test keeps a partial-width and a partial-height tile


@pytest.mark.parametrize("cfg", [
    pytest.param(dict(tile_ow=8, unroll_ic=True, unroll_kw=True), id="tile8_unroll_all", marks=_SLOW),
    pytest.param(dict(tile_ow=5, unroll_ic=False, unroll_kw=True), id="tile5"),
    pytest.param(dict(tile_ow=16, unroll_ic=True, unroll_kw=False), id="tile16_unroll_ic", marks=_SLOW),
    pytest.param(dict(tile_ow=7, unroll_ic=False, unroll_kw=False, tile_oh=4), id="rows4_partial"),
    pytest.param(dict(tile_ow=14, unroll_ic=False, unroll_kw=True, tile_oh=2), id="rows2", marks=_SLOW),
    pytest.param(dict(tile_ow=9, unroll_ic=True, unroll_kw=False, tile_oh=3, reorder_kernel_first=True),
                 id="kernel_first", marks=_SLOW)])
def test_conv2d_nchwc_tuned_configs(cfg):
    """Configs a tuner may pick, including tiles that do not divide OW = 14 or OH = 14."""
    case = ("configs", (1, 16, 16, 16), (16, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, 16, 16)
    x, w, xb, wb, attrs, ref = _conv_case(case)
    params = [Var("x", TensorType(xb.shape)), Var("w", TensorType(wb.shape))]
    func = Function(params, make_call("nn.conv2d_nchwc", params, attrs), "fused_conv2d_nchwc_cfg")
    out, prim = build_and_run(func, [xb, wb], config=ConfigEntity(cfg))
    assert ("unroll for ic_inner" in str(prim)) == cfg["unroll_ic"]
    np.testing.assert_allclose(to_layout(out, "NCHW16c", "NCHW"), ref, **TOLERANCE["float32"])
    out, _ = build_and_run(func, [xb, wb], config=ConfigEntity(cfg), impl="conv2d_nchwc_im2col.cpu")
    np.testing.assert_allclose(to_layout(out, "NCHW16c", "NCHW"), ref, **TOLERANCE["float32"])


def test_conv2d_nchwc_schedule_shape():
    """The register tile: a local accumulator of tile_oc x tile_ow x oc_bn (x86: two channel
    blocks of 14 columns), the oc_bn loop vectorized inside the channel blocks' loop inside the
    columns' loop (each broadcast input feeds two FMAs in a row), the (n, oc_outer, oh) loops
    fused in parallel, no bounds guards left when the tile divides OW."""
    target = resolve_target("x86")  # the AVX-512 descriptor's fallback (compile only)
    x = Var("x", TensorType((1, 4, 56, 56, 16)))
    w = Var("w", TensorType((4, 4, 3, 3, 16, 16)))
    b = Var("b", TensorType((4, 1, 1, 16)))
    conv = make_call("nn.conv2d_nchwc", [x, w], dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                                                     groups=1, out_layout="NCHW16c"))
    body = make_call("nn.relu", [make_call("add", [conv, b])])
    cfg = conv2d_nchwc_config(workload(conv), target).fallback_config()
    assert dict(cfg) == {"tile_ow": 14, "unroll_ic": False, "unroll_kw": False, "tile_oh": 1, "tile_oc": 2,
                         "reorder_kernel_first": False}
    text = str(lower_fused(Function([x, w, b], body, "fused_conv"), target))
    assert "allocate conv2d_nchwc: float32[1,2,1,14,16] (local)" in text
    assert "parallel for nn_relu_i0.nn_relu_i1_outer.nn_relu_i2 in 0..112" in text
    assert ("unroll for conv2d_nchwc_i3 in 0..14 {\n"
            "                    unroll for conv2d_nchwc_i1 in 0..2 {\n"
            "                      vectorize for conv2d_nchwc_i4 in 0..16") in text
    assert " if " not in text


def test_conv2d_nchwc_tile_of_several_channel_blocks():
    """wasm's fallback for a 14x14, 32-channel-block layer: tile_oc = 4 blocks x tile_ow = 2
    columns of accumulators, the block loop unrolled outside the column loop, the ic_inner
    reduction loop kept a loop (rolled) (compile only)."""
    target = resolve_target("wasm")
    x = Var("x", TensorType((1, 8, 14, 14, 4)))
    w = Var("w", TensorType((32, 8, 3, 3, 4, 4)))
    conv = make_call("nn.conv2d_nchwc", [x, w], dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                                                     groups=1, out_layout="NCHW4c"))
    cfg = conv2d_nchwc_config(workload(conv), target).fallback_config()
    assert (cfg["tile_oc"], cfg["tile_ow"]) == (4, 2)
    text = str(lower_fused(Function([x, w], make_call("nn.relu", [conv]), "fused_conv"), target))
    assert "allocate conv2d_nchwc: float32[1,4,1,2,4] (local)" in text
    assert "unroll for conv2d_nchwc_i1 in 0..4" in text and "unroll for conv2d_nchwc_i3 in 0..2" in text
    assert "rolled for ic_inner in 0..4" in text
    assert " if " not in text


@pytest.mark.parametrize("attrs,message", [
    (dict(groups=2), "groups=2"),
    (dict(out_layout="NCHW8c"), "out_layout"),
])
def test_conv2d_nchwc_type_errors(attrs, message):
    x = Var("x", TensorType((1, 2, 8, 8, 16)))
    w = Var("w", TensorType((2, 2, 3, 3, 16, 16)))
    base = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, out_layout="NCHW16c")
    with pytest.raises(ModelError, match=message):
        make_call("nn.conv2d_nchwc", [x, w], dict(base, **attrs), name="c")
    with pytest.raises(ModelError, match="does not match data"):
        make_call("nn.conv2d_nchwc", [x, Var("w", TensorType((2, 1, 3, 3, 16, 16)))], base, name="c")


# --- pooling in NCHW[x]c ------------------------------------------------------------------------

POOLS = [
    ("max_3x3_s2_ceil", "nn.max_pool2d", (1, 32, 15, 15),
     dict(pool_size=(3, 3), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=1, dilation=(1, 1))),
    ("max_3x3_s1_pad1", "nn.max_pool2d", (2, 16, 13, 13),
     dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), ceil_mode=0, dilation=(1, 1))),
    ("avg_3x3_pad1_excl", "nn.avg_pool2d", (1, 16, 14, 14),
     dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), ceil_mode=0, dilation=(1, 1),
          count_include_pad=0)),
    ("avg_2x2_s2", "nn.avg_pool2d", (1, 32, 28, 28),
     dict(pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=0, dilation=(1, 1),
          count_include_pad=1)),
    ("global_avg", "nn.global_avg_pool2d", (1, 64, 7, 7), {}),
    ("global_max", "nn.global_max_pool2d", (2, 32, 5, 9), {}),
]


@pytest.mark.parametrize("case", POOLS, ids=[c[0] for c in POOLS])
@pytest.mark.parametrize("block", [8, 16])
def test_pool_nchwc_vs_nchw_reference(case, block):
    cid, op, shape, attrs = case
    x = normal(rng_for(cid), shape)
    ref = get_op(op).reference(x, **attrs)
    layout = f"NCHW{block}c"
    out, _ = run_op(op, [to_layout(x, "NCHW", layout)], dict(attrs, layout=layout),
                    [("nn.relu", {}, [])])
    np.testing.assert_allclose(to_layout(out, layout, "NCHW"), np.maximum(ref, 0), **TOLERANCE["float32"])
