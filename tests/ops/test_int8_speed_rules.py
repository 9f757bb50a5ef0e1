"""Rules that choose the faster exact form of an int8 op (issue 28): a qnn.conv2d whose input
channels are not a multiple of 4 (an image stem) runs as a float conv on its integer values or
on the u8s8 row kernel, as the target's dot-product form says (AlterOpLayout's
float_narrow_int8, passes/alter_op_layout.py qnn_conv2d_float and qnn_conv2d_rows), and the float
conv's fallback register tile counts the vector registers of an output block wider than one
(tvmc/ops/cpu/conv2d_nchwc.py fallback_register_tile). Outputs compared exactly: the interpreted
graph before and after the pass, and the compiled stem with and without the rule."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.pass_helpers import call, run_graph, var
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, run_passes
from tvmc.target import resolve_target

X86, AVX2 = resolve_target("x86"), resolve_target("x86-avx2")
RULE = "AlterOpLayout.float_narrow_int8"


def _alter(graph, target=X86, **config):
    return run_passes(graph, ["AlterOpLayout"], PassContext(target=target, config=config))


def _qconv(x, w, x_zp, padding=(1, 1, 1, 1), stride=1):
    zeros = Constant(np.zeros(w.shape[0], np.int32), f"{w.name}_w_zp")
    return call("qnn.conv2d", x, w, Constant(np.asarray(x_zp, np.int32), f"{w.name}_x_zp"), zeros,
                strides=(stride, stride), padding=padding, dilation=(1, 1), groups=1)


@pytest.mark.parametrize("target", [X86, AVX2], ids=["x86", "x86-avx2"])
def test_narrow_qnn_conv2d_runs_as_an_exact_float_conv_on_its_integer_values(target):
    """A 3-channel uint8 stem (input zero point 124, the largest |x - x_zp| 131 at 255) and a
    5-channel int8 conv (zero point -7, stride 2, asymmetric padding) -> nn.conv2d_nchwc on
    float32(x) - x_zp with the int8 weight (kept int8 in the graph, cast at run time), producing
    NCHW16c (the u8s8 kernels' block, also on AVX2's 8 lanes), cast to int32: the sums equal
    the integer conv's, bit for bit, at the padded borders too; a requantize after it keeps the
    layout. The 16-channel conv beside them stays on the u8s8 kernel."""
    rng = np.random.default_rng(0)
    xu, xs, x16 = var("xu", (1, 3, 9, 11), "uint8"), var("xs", (2, 5, 8, 7), "int8"), var("x16", (1, 16, 6, 6), "uint8")
    wu = Constant(rng.integers(-128, 128, (16, 3, 3, 3)).astype(np.int8), "wu")
    ws = Constant(rng.integers(-128, 128, (32, 5, 3, 3)).astype(np.int8), "ws")
    w16 = Constant(rng.integers(-128, 128, (16, 16, 3, 3)).astype(np.int8), "w16")
    stem = _qconv(xu, wu, 124)
    scale = Constant((rng.random(16) * 2e-4).astype(np.float32), "scale")
    requantized = call("qnn.requantize", stem, scale, Constant(np.asarray(3, np.int32), "y_zp"), axis=1,
                       out_dtype="uint8")
    before = Graph([xu, xs, x16], [requantized, _qconv(xs, ws, -7, padding=(0, 1, 2, 1), stride=2),
                                   _qconv(x16, w16, 0)])
    after = _alter(before, target)
    convs = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"]
    assert len(convs) == 2 and all(c.attrs["out_layout"] == "NCHW16c" for c in convs)
    for c in convs:
        weight = c.inputs[1]
        assert weight.op == "cast" and weight.inputs[0].dtype == "int8"  # the params stay int8
    assert [c.op for c in after.calls()].count("qnn.conv2d_nchwc_u8s8") == 1
    assert next(c for c in after.calls() if c.op == "qnn.requantize").attrs["layout"] == "NCHW16c"
    inputs = {"xu": rng.integers(0, 256, (1, 3, 9, 11)).astype(np.uint8),
              "xs": rng.integers(-128, 128, (2, 5, 8, 7)).astype(np.int8),
              "x16": rng.integers(0, 256, (1, 16, 6, 6)).astype(np.uint8)}
    inputs["xu"][0, :, 0] = 255  # next to the padding: the widest products
    inputs["xs"][1, :, -1] = 127
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs)):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g, r)


def test_narrow_qnn_conv2d_keeps_the_u8s8_kernel_where_float32_is_not_exact_or_the_rule_is_off():
    """The rule needs max_o sum |w[o]| x max |x - x_zp| < 2^24: 5 channels x 11 x 11 taps of -128
    against data 255 with zero point 0 reach 605 x 128 x 255 = 19.7e6 > 2^24 = 16.8e6, so that conv
    takes the u8s8 row kernel qnn.conv2d_nchw_u8s8 (and is exact); with option float_narrow_int8 0
    the 3-channel stem does too, and a dilated one the channel-quad kernel (its taps are not
    adjacent)."""
    x = var("x", (1, 5, 12, 12), "uint8")
    w = Constant(np.full((16, 5, 11, 11), -128, np.int8), "w_wide")
    before = Graph([x], [_qconv(x, w, 0, padding=(5, 5, 5, 5))])
    after = _alter(before)
    assert [c.op for c in after.calls()].count("qnn.conv2d_nchw_u8s8") == 1
    assert not any(c.op == "nn.conv2d_nchwc" for c in after.calls())
    data = {"x": np.full((1, 5, 12, 12), 255, np.uint8)}
    np.testing.assert_array_equal(run_graph(after, data)[0], run_graph(before, data)[0])

    xs = var("xs", (1, 3, 8, 8), "uint8")
    stem = Graph([xs], [_qconv(xs, Constant(np.ones((16, 3, 3, 3), np.int8), "w3"), 10)])
    assert any(c.op == "nn.conv2d_nchwc" for c in _alter(stem).calls())
    off = _alter(stem, **{RULE: 0})
    assert any(c.op == "qnn.conv2d_nchw_u8s8" for c in off.calls())
    assert not any(c.op == "nn.conv2d_nchwc" for c in off.calls())
    dilated = call("qnn.conv2d", xs, Constant(np.ones((16, 3, 3, 3), np.int8), "w3d"),
                   Constant(np.asarray(10, np.int32), "zp"), Constant(np.zeros(16, np.int32), "w_zp"),
                   strides=(1, 1), padding=(2, 2, 2, 2), dilation=(2, 2), groups=1)
    assert any(c.op == "qnn.conv2d_nchwc_u8s8" for c in _alter(Graph([xs], [dilated]), **{RULE: 0}).calls())


def test_narrow_qnn_conv2d_follows_the_descriptor_dot_on_vnni_float_on_avx2():
    """Without the option the rule is the dot_u8s8 form's `narrow` (targets/isa/x86_64.yaml):
    vpdpbusd (AVX512-VNNI, AVX-VNNI) -> the row kernel on the padded planar data, whose interpreted
    graph equals the integer conv at the padded borders; vpmaddubsw (AVX512-BW, AVX2) -> the float
    conv; option 1 forces the float conv on VNNI too."""
    vnni = resolve_target("x86", {"features": "+avx512vnni"})
    assert (vnni.narrow_int8_conv, X86.narrow_int8_conv, AVX2.narrow_int8_conv) == ("dot", "float", "float")
    rng = np.random.default_rng(3)
    xs = var("xs", (1, 3, 9, 11), "int8")
    w = Constant(rng.integers(-128, 128, (32, 3, 7, 7)).astype(np.int8), "w7")
    before = Graph([xs], [_qconv(xs, w, -5, padding=(3, 2, 3, 4), stride=2)])
    after = _alter(before, vnni)
    ops = [c.op for c in after.calls()]
    assert "qnn.conv2d_nchw_u8s8" in ops and "pad" in ops and "nn.conv2d_nchwc" not in ops
    pad = next(c for c in after.calls() if c.op == "pad")
    assert pad.shape[3] % 16 == 0 and pad.attrs["pad_value"] == 123  # -5 + 128: the shifted zero point
    assert "nn.conv2d_nchwc" in [c.op for c in _alter(before, vnni, **{RULE: 1}).calls()]
    x = {"xs": rng.integers(-128, 128, (1, 3, 9, 11)).astype(np.int8)}
    x["xs"][0, :, :, -1] = 127
    np.testing.assert_array_equal(run_graph(after, x)[0], run_graph(before, x)[0])


def _qlinear_stem(seed: int) -> onnx.ModelProto:
    """QLinearConv: uint8 [1, 3, 20, 18] (zero point 119), int8 per-channel weights [16, 3, 3, 3],
    padding 1 -> uint8 [1, 16, 20, 18] (zero point 5)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(119, np.uint8), "x_zp"),
             numpy_helper.from_array(rng.integers(-127, 128, (16, 3, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array((rng.random(16) * 0.01 + 0.002).astype(np.float32), "w_scale"),
             numpy_helper.from_array(np.zeros(16, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(5, np.uint8), "y_zp")]
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"], ["y"],
                            pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "qstem", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 20, 18])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 16, 20, 18])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("target_name", ["x86", "x86-avx2", "x86-vnni"])
def test_compiled_float_stem_equals_the_u8s8_stem(target_name):
    """A QLinearConv stem compiled at opt level 3 with the rule (kernel nn_conv2d_nchwc_cast...)
    and without it (the row kernel qnn_conv2d_nchw_u8s8...) gives the same uint8 output, bit for
    bit (the int32 sums are equal; the requantize is the same code)."""
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor, device_missing

    target = resolve_target("x86", {"features": "+avx512vnni"}) if target_name == "x86-vnni" else \
        resolve_target(target_name)
    if device_missing(target):
        pytest.skip(f"{target_name}: {device_missing(target)}")
    model = _qlinear_stem(1)
    x = np.random.default_rng(2).integers(0, 256, (1, 3, 20, 18)).astype(np.uint8)
    x[0, :, :, 0] = 255
    outs, kernels = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rule in (1, 0):
            module = compile_model(model, target, CompileOptions(opt_level=3, pass_config={RULE: rule}))
            kernels.append([n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"])
            ex = create_executor(save_artifact(module, Path(tmp, f"m{rule}.tar")))
            ex.set_input("x", x)
            ex.run()
            outs.append(ex.get_output(0))
    assert any("nn_conv2d_nchwc_cast" in k for k in kernels[0]), kernels[0]
    assert any("qnn_conv2d_nchw_u8s8" in k for k in kernels[1]), kernels[1]
    assert outs[0].dtype == np.uint8 and len(np.unique(outs[0])) > 10
    np.testing.assert_array_equal(outs[0], outs[1])


def test_float_conv_fallback_tile_counts_the_registers_of_a_wide_block():
    """nn.conv2d_nchwc with oc_bn = 16 on AVX2 (8 float lanes: each accumulator two ymm): the
    fallback tile keeps tile_oc x tile_ow x 2 within accumulator_registers (12), where a block of
    one register may use all 12 (64 columns: (1, 4) against (1, 8) at oc_bn 8, two blocks (2, 4)
    or (1, 8))."""
    from tvmc.ops.cpu.conv2d_nchwc import accumulator_registers, conv2d_nchwc_config

    attrs = (("groups", 1),)
    for ic_bn in (1, 3, 8):
        wide = conv2d_nchwc_config(((1, 1, 66, 66, ic_bn), (1, 1, 3, 3, ic_bn, 16), (1, 1, 64, 64, 16), "float32",
                                    attrs), AVX2).fallback
        assert 2 * wide["tile_oc"] * wide["tile_ow"] <= accumulator_registers(AVX2, ic_bn)
        assert wide["tile_ow"] >= 4
        narrow = conv2d_nchwc_config(((1, 1, 66, 66, ic_bn), (2, 1, 3, 3, ic_bn, 8), (1, 2, 64, 64, 8), "float32",
                                      attrs), AVX2).fallback
        assert narrow["tile_oc"] * narrow["tile_ow"] > accumulator_registers(AVX2, ic_bn) // 2


def test_simplify_drops_the_exact_round_trip_of_a_clamped_integer_through_uint8():
    """float32(uint8(v)) -> v where v is provably an integer in [0, 255] (a requantize's
    min(max(round(y) + float32(zp), 0), 255) read back by the rescale fused after it), and only
    there: without the round, with an int8 target range that 255 leaves, or through int32 from an
    int32 cast (float32(2^31 - 1) rounds to 2^31, outside int32), the casts stay. Evaluated on the
    edge values with numpy: the dropped round trip changes no value."""
    from tvmc.te.expr import BinOp, Call, Cast, FloatImm, Var
    from tvmc.tir.simplify import integral_bounds, simplify

    y, zp = Var("y", "float32"), Var("zp", "int32")
    clamped = BinOp("min", BinOp("max", BinOp("add", Call("round", [y], "float32"), Cast("float32", zp)),
                                 FloatImm(0.0)), FloatImm(255.0))
    assert integral_bounds(clamped) == (0.0, 255.0)
    assert repr(simplify(Cast("float32", Cast("uint8", clamped)))) == repr(clamped)
    kept = [Cast("float32", Cast("uint8", BinOp("min", BinOp("max", y, FloatImm(0.0)), FloatImm(255.0)))),
            Cast("float32", Cast("int8", clamped)),
            Cast("float32", Cast("int32", Cast("float32", zp)))]
    for e in kept:
        out = simplify(e)
        assert isinstance(out, Cast) and isinstance(out.value, Cast), out
    for v in (-3.5, -0.5, 0.5, 1.5, 2.5, 127.5, 254.5, 255.5, 1e9):
        for z in (0, 7, 128):
            exact = float(np.float32(np.clip(np.round(np.float32(v)) + np.float32(z), 0, 255)))
            assert float(np.float32(np.uint8(exact))) == exact


def test_int8_saturate_lets_vpmaddubsw_pairs_saturate_as_mlas_does():
    """AlterOpLayout.int8_saturate 1 marks every u8s8 kernel pairs_in_int16 (one vpmaddubsw per
    step, saturating as onnxruntime's MLAS on AVX2), 0 (default) only where no pair can saturate;
    with data that cannot saturate (|x| <= 1) both give the exact sums."""
    rng = np.random.default_rng(4)
    x = var("x", (1, 16, 6, 6), "uint8")
    w = Constant(np.full((16, 16, 3, 3), 127, np.int8), "w")  # every pair 127 + 127: can saturate
    before = Graph([x], [_qconv(x, w, 0)])

    def marks(graph):
        return [c.attrs["pairs_in_int16"] for c in graph.calls() if c.op == "qnn.conv2d_nchwc_u8s8"]

    exact, saturating = _alter(before, AVX2), _alter(before, AVX2, **{"AlterOpLayout.int8_saturate": 1})
    assert marks(exact) == [False] and marks(saturating) == [True]
    feeds = {"x": rng.integers(0, 2, (1, 16, 6, 6)).astype(np.uint8)}
    want = run_graph(before, feeds)[0]
    np.testing.assert_array_equal(run_graph(saturating, feeds)[0], want)
