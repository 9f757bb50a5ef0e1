"""AlterOpLayout: NCHW convolutions become NCHW[x]c ones; the blocked layout flows through
elementwise ops, per-channel constants, pooling and concatenation; layout_transform only at the
boundaries (before/expected structure, interpreter equivalence)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pass_helpers import assert_equivalent, call, const, op_names, run_graph, snapshot, var
from tvmc.graph import symbolic
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, get_pass, run_passes
from tvmc.passes.alter_op_layout import blocked_constant, channel_block_for
from tvmc.passes.pass_infra import load_pipeline
from tvmc.target import resolve_target

X86 = resolve_target("x86")


def alter(graph, target=X86, **config):
    """AlterOpLayout on `graph`; Winograd off unless `config` sets its tile (the layout tests)."""
    config.setdefault("AlterOpLayout.winograd_tile_size", 0)
    return run_passes(graph, ["AlterOpLayout"], PassContext(target=target, config=config))


def conv(x, oc, name, k=3, stride=1, groups=1, seed=0):
    pad = k // 2
    w = const((oc, x.shape[1] // groups, k, k), f"{name}_w", seed)
    return call("nn.conv2d", x, w, name=name, strides=(stride, stride), padding=(pad, pad, pad, pad),
                dilation=(1, 1), groups=groups)


def bias_relu(y, name, seed=1):
    return call("nn.relu", call("add", y, const((y.shape[1], 1, 1), f"{name}_b", seed)))


def transforms(graph):
    return [(c.attrs["src_layout"], c.attrs["dst_layout"]) for c in graph.calls() if c.op == "layout_transform"]


def check(before, after):
    assert_equivalent(before, after)
    assert after.outputs[0].type == before.outputs[0].type


def test_two_convs_share_the_blocked_layout():
    x = var("x", (1, 16, 10, 10))
    before = Graph([x], [bias_relu(conv(bias_relu(conv(x, 32, "c1"), "c1"), 32, "c2", seed=2), "c2")])
    snap = snapshot(before)
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "add", "nn.relu",
                               "nn.conv2d_nchwc", "add", "nn.relu", "layout_transform"]
    assert transforms(after) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    c1, c2 = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"]
    assert c1.inputs[1].shape == (2, 1, 3, 3, 16, 16) and c2.inputs[1].shape == (2, 2, 3, 3, 16, 16)
    assert isinstance(c1.inputs[1], Constant) and c2.inputs[0].op == "nn.relu"   # no transform between
    bias = [c for c in after.calls() if c.op == "add"][0].inputs[1]
    assert isinstance(bias, Constant) and bias.shape == (2, 1, 1, 16)          # [C,1,1] -> [C//16,1,1,16]
    assert snapshot(before) == snap
    check(before, after)


def test_three_channel_input_takes_block_1_and_output_block_16():
    x = var("x", (1, 3, 15, 15))
    before = Graph([x], [bias_relu(conv(x, 16, "stem", k=7, stride=2), "stem")])
    after = alter(before)
    assert transforms(after) == [("NCHW", "NCHW1c"), ("NCHW16c", "NCHW")]
    (c,) = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"]
    assert c.inputs[0].shape == (1, 3, 15, 15, 1) and c.inputs[1].shape == (1, 3, 7, 7, 1, 16)
    check(before, after)


def test_transforms_only_at_boundaries():
    """conv -> pool -> conv -> (residual add) -> global pool -> flatten -> dense -> softmax: one
    transform in, one before the reshape."""
    x = var("x", (1, 8, 12, 12))
    a = bias_relu(conv(x, 32, "c1"), "c1")
    p = call("nn.max_pool2d", a, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1),
             ceil_mode=0)
    b = call("nn.relu", call("add", conv(p, 32, "c2", seed=2), p))
    g = call("nn.global_avg_pool2d", b)
    flat = call("reshape", g, newshape=(1, 32))
    d = call("nn.dense", flat, const((10, 32), "fc", 3))
    before = Graph([x], [call("nn.softmax", d, axis=1)])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "add", "nn.relu", "nn.max_pool2d",
                               "nn.conv2d_nchwc", "add", "nn.relu", "nn.global_avg_pool2d", "layout_transform",
                               "reshape", "nn.dense", "nn.softmax"]
    assert transforms(after) == [("NCHW", "NCHW8c"), ("NCHW16c", "NCHW")]
    pools = [c for c in after.calls() if c.op.startswith(("nn.max", "nn.global"))]
    assert [c.attrs["layout"] for c in pools] == ["NCHW16c", "NCHW16c"]
    check(before, after)


def test_ops_that_need_nchw_get_a_transform_each_way():
    x = var("x", (1, 16, 9, 9))
    a = conv(x, 16, "c1")
    lrn = call("nn.lrn", a, size=5, alpha=1e-4, beta=0.75, bias=1.0)
    before = Graph([x], [conv(lrn, 16, "c2", seed=2)])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "layout_transform", "nn.lrn",
                               "layout_transform", "nn.conv2d_nchwc", "layout_transform"]
    check(before, after)


def test_tensor_used_blocked_and_plain_is_transformed_once():
    x = var("x", (1, 16, 6, 6))
    a = call("nn.relu", conv(x, 16, "c1"))
    before = Graph([x], [conv(a, 16, "c2", seed=2), call("transpose", a, axes=(0, 2, 3, 1)), a])
    after = alter(before)
    # `a` feeds c2 blocked; the transpose and the graph output share one transform back
    assert transforms(after) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW16c", "NCHW")]
    back = [c for c in after.calls() if c.op == "layout_transform" and c.attrs["dst_layout"] == "NCHW"]
    assert after.outputs[2] in back and after.outputs[1].inputs[0] in back
    check(before, after)


def test_concatenate_on_channels_stays_blocked():
    x = var("x", (1, 16, 8, 8))
    a, b = conv(x, 32, "a", k=1), conv(x, 16, "b", seed=2)
    cat = call("concatenate", a, b, axis=1)
    before = Graph([x], [conv(call("nn.relu", cat), 16, "c", k=1, seed=3)])
    after = alter(before)
    assert op_names(after).count("layout_transform") == 2
    (c,) = [c for c in after.calls() if c.op == "concatenate"]
    assert c.shape == (1, 3, 8, 8, 16)
    check(before, after)


def test_concatenate_with_a_small_block_input_goes_back_to_nchw():
    x = var("x", (1, 16, 8, 8))
    a, b = conv(x, 16, "a", k=1), conv(x, 4, "b", seed=2)      # 4 channels: below min_block 8
    before = Graph([x], [call("concatenate", a, b, axis=1)])
    after = alter(before)
    (c,) = [c for c in after.calls() if c.op == "concatenate"]
    assert len(c.shape) == 4
    assert [c.op for c in after.calls() if c.op.startswith("nn.conv")] == ["nn.conv2d_nchwc", "nn.conv2d"]
    check(before, after)


def test_depthwise_converts_grouped_conv_stays_nchw_with_grouped_off():
    x = var("x", (1, 32, 9, 9))
    dw = call("nn.relu", conv(conv(x, 32, "pw", k=1), 32, "dw", groups=32, seed=2))
    before = Graph([x], [conv(dw, 32, "grouped", groups=2, seed=3)])
    after = alter(before, **{"AlterOpLayout.grouped": 0})
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "nn.conv2d_nchwc", "nn.relu",
                               "layout_transform", "nn.conv2d"]
    dwc = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"][1]
    assert dwc.attrs["groups"] == 32 and dwc.inputs[1].shape == (2, 1, 3, 3, 1, 16)
    check(before, after)


def test_grouped_conv_takes_blocks_dividing_its_per_group_channels():
    """groups 2 on 32 -> 48 channels: 16 in and 24 out per group, so oc_bn 8 (not 16) and the
    input keeps the depthwise conv's block 16, which divides 16; the weight packs per group."""
    x = var("x", (1, 32, 9, 9))
    dw = call("nn.relu", conv(conv(x, 32, "pw", k=1), 32, "dw", groups=32, seed=2))
    before = Graph([x], [bias_relu(conv(dw, 48, "grouped", groups=2, seed=3), "g")])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "nn.conv2d_nchwc", "nn.relu",
                               "nn.conv2d_nchwc", "add", "nn.relu", "layout_transform"]
    assert transforms(after) == [("NCHW", "NCHW16c"), ("NCHW8c", "NCHW")]
    g = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"][2]
    assert g.attrs["groups"] == 2 and g.attrs["out_layout"] == "NCHW8c"
    assert g.inputs[1].shape == (6, 1, 3, 3, 16, 8)     # [O//8, (C/g)//16, KH, KW, 16, 8]
    check(before, after)


def test_grouped_conv_changes_an_input_block_that_does_not_divide_its_groups():
    """4 groups of 8 input channels on NCHW16c data: the input goes to NCHW8c; 4 groups of 4
    output channels (below the minimum block 8) stay NCHW, a 3x3 conv as nn.conv2d, a 1x1 one as
    4 GEMMs over the flattened image (group_conv2d_as_matmul)."""
    x = var("x", (1, 16, 8, 8))
    y = conv(conv(x, 32, "c1", k=1), 32, "g8", k=1, groups=4, seed=2)
    for k, tail in ((3, ["nn.conv2d"]), (1, ["reshape", "nn.matmul", "reshape"])):
        before = Graph([x], [conv(y, 16, "g4", k=k, groups=4, seed=3)])
        after = alter(before)
        assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "layout_transform", "nn.conv2d_nchwc",
                                   "layout_transform", *tail]
        assert transforms(after) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW8c"), ("NCHW8c", "NCHW")]
        check(before, after)


def test_grouped_1x1_conv_below_the_block_is_a_gemm_per_group():
    """ShuffleNet's g = 4 conv over 136 channels (34 per group, no block of 8 divides it): reshape
    to [1, 4, 34, 7 * 9], nn.matmul of the [4, 34, 34] weight with it (M padded to 36, N 63 to 64),
    reshape back; strided or padded 1x1 convs keep the NCHW conv."""
    x = var("x", (1, 136, 7, 9))
    before = Graph([x], [call("nn.relu", conv(x, 136, "g", k=1, groups=4))])
    after = alter(before)
    assert op_names(after) == ["reshape", "nn.matmul", "reshape", "nn.relu"]
    mm = next(e for e in after.calls() if e.op == "nn.matmul")
    assert mm.inputs[0].value.shape == (4, 34, 34) and list(mm.attrs["padded"]) == [36, 64]
    check(before, after)
    strided = Graph([x], [conv(x, 136, "s", k=1, groups=4, stride=2)])
    assert op_names(alter(strided)) == ["nn.conv2d"]


@pytest.mark.parametrize("target_name", ["x86", "x86-avx2"])
def test_grouped_1x1_conv_with_a_short_tail_of_pixels_is_a_transposed_gemm(target_name):
    """ShuffleNet's g = 4 conv over 272 channels at 7 x 7 (68 per group): H*W = 49 is 48 + 1, so
    the weight goes transposed to [4, 68, 80] (O/g padded with zeros to whole vectors) into
    nn.matmul_tn, register tiles over 48 columns and the last one a GEMV along O/g; at 7 x 9
    (63 = 48 + 15 on AVX-512) the tail would cost more than padding, so nn.matmul stays."""
    x = var("x", (1, 272, 7, 7))
    before = Graph([x], [call("nn.relu", conv(x, 272, "g", k=1, groups=4))])
    after = alter(before, resolve_target(target_name))
    assert op_names(after) == ["reshape", "nn.matmul_tn", "reshape", "nn.relu"]
    mm = next(e for e in after.calls() if e.op == "nn.matmul_tn")
    assert mm.inputs[0].value.shape == (4, 68, 80) and not mm.inputs[0].value[:, :, 68:].any()
    assert (mm.attrs["rows"], mm.attrs["columns"], mm.attrs["padded_rows"]) == (68, 48, 68)
    check(before, after)
    x = var("x", (1, 136, 7, 9))
    assert "nn.matmul" in op_names(alter(Graph([x], [conv(x, 136, "g", k=1, groups=4)])))


def shuffle(x, groups):
    n, c, h, w = x.shape
    r = call("reshape", x, newshape=(n, groups, c // groups, h, w))
    return call("reshape", call("transpose", r, axes=(0, 2, 1, 3, 4)), newshape=(n, c, h, w))


def test_channel_shuffle_of_a_blocked_tensor_stays_blocked():
    """ShuffleNet's unit: grouped 1x1, relu, shuffle (Reshape-Transpose-Reshape), depthwise 3x3,
    grouped 1x1, residual add: one transform in and one out, the shuffle one op in NCHW16c."""
    x = var("x", (1, 64, 8, 8))
    y = call("nn.relu", conv(x, 64, "g1", k=1, groups=4))
    y = conv(shuffle(y, 4), 64, "dw", groups=64, seed=2)
    before = Graph([x], [call("add", conv(y, 64, "g2", k=1, groups=4, seed=3), x)])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "nn.relu", "channel_shuffle",
                               "nn.conv2d_nchwc", "nn.conv2d_nchwc", "add", "layout_transform"]
    assert transforms(after) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    (sh,) = [c for c in after.calls() if c.op == "channel_shuffle"]
    assert sh.attrs == {"groups": 4, "layout": "NCHW16c"}
    check(before, after)


def test_channel_shuffle_of_an_nchw_tensor_or_another_pattern_is_left_alone():
    x = var("x", (1, 12, 5, 5))
    n, c, h, w = x.shape
    r = call("reshape", x, newshape=(n, 3, 4, h, w))
    other = call("reshape", call("transpose", r, axes=(0, 1, 2, 4, 3)), newshape=(n, c, h, w))
    before = Graph([x], [shuffle(x, 3), other])
    after = alter(before)
    assert "channel_shuffle" not in op_names(after)
    check(before, after)


def test_broadcast_operands():
    """Blocked (+) per-channel constant, spatial constant, scalar, same-shape NCHW tensor; a
    non-constant broadcast operand sends the op back to NCHW."""
    x, y = var("x", (1, 16, 6, 6)), var("y", (1, 16, 6, 6))
    a = conv(x, 16, "c1")
    e = call("multiply", a, const((1, 16, 1, 1), "scale", 1))
    e = call("add", const((6, 6), "spatial", 2), e)
    e = call("subtract", e, Constant(np.float32(0.5), "half"))
    e = call("maximum", e, y)                                       # a graph input: transformed
    blocked_out = call("nn.relu", e)
    z = var("z", (1, 1, 6, 6))
    plain = call("add", blocked_out, call("nn.relu", z))            # [1,1,6,6] non-constant: NCHW
    before = Graph([x, y, z], [plain])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "multiply", "add", "subtract",
                               "layout_transform", "maximum", "nn.relu", "layout_transform", "nn.relu", "add"]
    consts = {c.op: c.inputs for c in after.calls() if c.op in ("multiply", "add", "subtract")}
    assert consts["multiply"][1].shape == (1, 1, 1, 1, 16)
    assert consts["subtract"][1].shape == ()
    check(before, after)


def test_blocked_constant_shapes():
    c = np.arange(32, dtype=np.float32)
    assert blocked_constant(c.reshape(32, 1, 1), 32, 16).shape == (2, 1, 1, 16)
    assert blocked_constant(c.reshape(1, 32, 1, 1), 32, 16).shape == (1, 2, 1, 1, 16)
    assert blocked_constant(np.ones((5, 7), np.float32), 32, 16).shape == (5, 7, 1)
    assert blocked_constant(c.reshape(32, 1, 1), 32, 8)[1, 0, 0, 3] == 11.0
    with pytest.raises(ValueError):
        blocked_constant(np.ones((3, 1, 1), np.float32), 32, 16)
    assert [channel_block_for(c, 16) for c in (3, 8, 24, 48, 64, 1000)] == [1, 8, 8, 16, 16, 8]
    assert channel_block_for(64, 8) == 8


def test_adjacent_inverse_transforms_cancel():
    x = var("x", (1, 16, 4, 4))
    t1 = call("layout_transform", x, src_layout="NCHW", dst_layout="NCHW16c")
    t2 = call("layout_transform", t1, src_layout="NCHW16c", dst_layout="NCHW")
    t3 = call("layout_transform", call("nn.relu", x), src_layout="NCHW", dst_layout="NCHW8c")
    t4 = call("layout_transform", t3, src_layout="NCHW8c", dst_layout="NCHW16c")
    before = Graph([x], [call("nn.relu", t2), t4])
    after = alter(before)
    assert op_names(after) == ["nn.relu", "nn.relu", "layout_transform"]
    assert transforms(after) == [("NCHW", "NCHW16c")]
    check(before, after)


def test_non_constant_weight_small_channels_and_other_dtypes_stay_nchw():
    x, w = var("x", (1, 16, 6, 6)), var("w", (16, 16, 3, 3))
    dyn = call("nn.conv2d", x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    small = conv(x, 4, "small")                                     # oc block 4 < min_block 8
    before = Graph([x, w], [dyn, small])
    after = alter(before)
    assert op_names(after) == ["nn.conv2d", "nn.conv2d"]
    after4 = alter(Graph([x], [small]), **{"AlterOpLayout.min_block": 4})
    assert op_names(after4) == ["layout_transform", "nn.conv2d_nchwc", "layout_transform"]
    check(Graph([x], [small]), after4)


def test_conv_with_channels_the_lanes_do_not_divide_computes_padded_channels():
    """O = 248 (blocks of 8 only): 256 channels in NCHW16c with zero weights in the last 8, kept
    through bias, relu and global pooling, sliced off where the tensor goes back to NCHW; a conv
    reading the padded tensor gets it sliced and blocked by its own channels (NCHW8c). SqueezeNet's
    1000-class 1x1 conv ran at 78-86 GFLOP/s in blocks of 8, 116-121 padded to 1008 (63 blocks of
    16: one-block register tiles), ~135 padded to 1024 (two-block tiles) (AVX-512, 1 thread)."""
    x = var("x", (1, 16, 6, 6))
    head = bias_relu(conv(x, 248, "cls", k=1), "cls")            # 256 = 8 x 32: an even block count
    before = Graph([x], [call("reshape", call("nn.global_avg_pool2d", head), newshape=(1, 248))])
    after = alter(before)
    assert op_names(after) == ["layout_transform", "nn.conv2d_nchwc", "add", "nn.relu", "nn.global_avg_pool2d",
                               "layout_transform", "strided_slice", "reshape"]
    (c,) = [c for c in after.calls() if c.op == "nn.conv2d_nchwc"]
    assert c.inputs[1].shape == (16, 1, 1, 1, 16, 16) and not c.inputs[1].value[15, ..., 8:].any()
    assert [c for c in after.calls() if c.op == "add"][0].inputs[1].shape == (16, 1, 1, 16)
    check(before, after)
    chained = Graph([x], [bias_relu(conv(head, 16, "next", k=1), "next")])
    after = alter(chained)
    assert ("NCHW", "NCHW8c") in transforms(after) and "strided_slice" in op_names(after)
    check(chained, after)
    off = alter(before, **{"AlterOpLayout.pad_channels": 0})
    assert "strided_slice" not in op_names(off)
    assert [c for c in off.calls() if c.op == "nn.conv2d_nchwc"][0].inputs[1].shape == (31, 1, 1, 1, 16, 8)


def test_dense_with_constant_weight_becomes_dense_pack():
    """[N, K] weights packed to [N//bn, K, bn] at compile time (N=1000 -> bn 8); the bias add and
    relu stay after it; N=20 (no block of at least min_block divides it) is packed to blocks of the
    16 lanes with the last padded (units 20); a non-constant weight and N=4 (below the lanes) stay
    nn.dense."""
    x, w = var("x", (3, 40)), var("w", (12, 40))
    wide = call("nn.relu", call("add", call("nn.dense", x, const((1000, 40), "fc_w", 0)), const((1000,), "fc_b", 1)))
    ragged = call("nn.dense", x, const((20, 40), "ragged_w", 3))
    narrow = call("nn.dense", x, const((4, 40), "small_w", 2))
    before = Graph([x, w], [wide, ragged, narrow, call("nn.dense", x, w)])
    after = alter(before)
    assert sorted(op_names(after)) == sorted(["nn.dense_pack", "nn.dense_pack", "add", "nn.relu", "nn.dense",
                                              "nn.dense"])
    packed, padded = [c for c in after.calls() if c.op == "nn.dense_pack"]
    assert isinstance(packed.inputs[1], Constant) and packed.inputs[1].shape == (125, 40, 8)
    assert padded.inputs[1].shape == (2, 40, 16) and padded.attrs["units"] == 20 and padded.shape == (3, 20)
    assert not padded.inputs[1].value[1, :, 4:].any()  # the padding columns are zeros
    check(before, after)


def test_ragged_matmul_computes_padded_sums():
    """A ViT's attention: Q.K^T [3,197,64] x [3,64,197] pads N to whole vectors of the target's
    lanes (16 on x86, 4 with 128-bit vectors) and M to a multiple of 4 (197 has no divisor from 4
    to 8); P.V [3,197,197] x [3,197,64] pads M only; M = 12 (divisors 4, 6) and N = 64 stay."""
    q, k, v = var("q", (3, 197, 64)), var("kt", (3, 64, 197)), var("v", (3, 197, 64))
    a, b = var("a", (3, 12, 64)), var("b", (3, 64, 64))
    before = Graph([q, k, v, a, b], [call("nn.matmul", q, k), call("nn.matmul", call("nn.matmul", q, k), v),
                                     call("nn.matmul", a, b)])
    after = alter(before)
    assert [c.attrs.get("padded") for c in after.calls()] == [[200, 208], [200, 208], [200, 64], None]
    check(before, after)
    neon_like = dataclasses.replace(X86, vector_width_bits=128)
    assert [c.attrs.get("padded") for c in alter(before, target=neon_like).calls()] == \
        [[200, 200], [200, 200], [200, 64], None]


def test_blocks_follow_the_target_vector_width():
    """128-bit vectors (4 float32 lanes): blocks of 4, and min_block 8 shrinks to the lanes."""
    neon_like = dataclasses.replace(X86, vector_width_bits=128)
    x = var("x", (1, 16, 6, 6))
    before = Graph([x], [conv(conv(x, 12, "c1"), 16, "c2", seed=2)])
    after = alter(before, target=neon_like)
    assert transforms(after) == [("NCHW", "NCHW4c"), ("NCHW4c", "NCHW")]
    assert [c.shape for c in after.calls() if c.op == "nn.conv2d_nchwc"] == [(1, 3, 6, 6, 4), (1, 4, 6, 6, 4)]
    check(before, after)


def test_needs_a_cpu_target():
    x = var("x", (1, 16, 6, 6))
    before = Graph([x], [conv(x, 16, "c")])
    assert alter(before, target=None) is before
    gpu = dataclasses.replace(X86, name="gpu", kind="gpu", family="gpu")
    assert alter(before, target=gpu) is before
    assert get_pass("AlterOpLayout").opt_level == 3


def test_in_the_level_3_pipeline_before_fuse_ops():
    names = load_pipeline(3)
    assert "AlterOpLayout" in names and names.index("AlterOpLayout") < names.index("FuseOps")
    assert "AlterOpLayout" not in load_pipeline(2)


# --- random graphs -------------------------------------------------------------------------------

@st.composite
def blocked_graphs(draw):
    """Chains of convs (1x1/3x3, stride 1/2, depthwise, grouped), channel shuffles, bias, relu,
    pooling, residual adds, concatenations and a boundary op, over channel counts the pass blocks
    (and some it does not)."""
    c = draw(st.sampled_from([3, 8, 16, 24]))
    x = var("x", (1, c, 9, 9))
    cur, k = x, 0
    for _ in range(draw(st.integers(1, 6))):
        k += 1
        kind = draw(st.sampled_from(["conv", "conv", "dw", "group", "shuffle", "bias", "relu", "pool", "residual",
                                     "concat", "lrn"]))
        ch = cur.shape[1]
        if kind == "conv":
            oc = draw(st.sampled_from([4, 8, 16, 32, 48, 56]))
            cur = conv(cur, oc, f"c{k}", k=draw(st.sampled_from([1, 3])), stride=draw(st.sampled_from([1, 2])),
                       seed=k)
        elif kind == "dw":
            cur = conv(cur, ch, f"dw{k}", groups=ch, seed=k)
        elif kind == "group" and ch % 2 == 0:
            groups = draw(st.sampled_from([g for g in (2, 4) if ch % g == 0]))
            cur = conv(cur, groups * draw(st.sampled_from([4, 8, 12])), f"g{k}", k=draw(st.sampled_from([1, 3])),
                       groups=groups, seed=k)
        elif kind == "shuffle" and ch % 2 == 0:
            cur = shuffle(cur, draw(st.sampled_from([g for g in (2, 4) if ch % g == 0])))
        elif kind == "bias":
            cur = call("add", cur, const(draw(st.sampled_from([(ch, 1, 1), (1, ch, 1, 1), ()])), f"b{k}", k))
        elif kind == "relu":
            cur = call("nn.relu", cur)
        elif kind == "pool" and cur.shape[2] >= 3:
            op = draw(st.sampled_from(["nn.max_pool2d", "nn.avg_pool2d"]))
            extra = {"count_include_pad": 0} if op == "nn.avg_pool2d" else {}
            cur = call(op, cur, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1),
                       ceil_mode=draw(st.sampled_from([0, 1])), **extra)
        elif kind == "residual":
            cur = call("add", cur, call("nn.relu", conv(cur, ch, f"r{k}", seed=k)))
        elif kind == "concat":
            cur = call("concatenate", cur, conv(cur, draw(st.sampled_from([8, 16])), f"cc{k}", k=1, seed=k), axis=1)
        elif kind == "lrn":
            cur = call("nn.lrn", cur, size=3, alpha=1e-4, beta=0.75, bias=1.0)
    tail = draw(st.sampled_from(["none", "global", "flatten"]))
    if tail == "global":
        cur = call("nn.global_avg_pool2d", cur)
    elif tail == "flatten":
        cur = call("reshape", cur, newshape=(1, int(np.prod(cur.shape))))
    return Graph([x], [cur])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocked_graphs())
def test_random_graphs_keep_their_meaning(before):
    after = alter(before)
    check(before, after)
    # padded channels (56 -> 64 with pad_channels 4) through every rule
    padded = alter(before, **{"AlterOpLayout.pad_channels": 4})
    check(before, padded)
    # no transform feeds another transform, and none converts a layout to itself
    for c in after.calls():
        if c.op == "layout_transform":
            assert c.attrs["src_layout"] != c.attrs["dst_layout"]
            assert getattr(c.inputs[0], "op", None) != "layout_transform"


def test_qnn_dense_with_an_int8_weight_becomes_the_dot_product_kernel():
    """qnn.dense with a constant int8 weight and zero weight zero points -> qnn.dense_u8s8 of the
    packed weight minus the zero-point term: a constant per column for uint8 data and a constant
    input zero point; zero point + 128 (int8 data shifted into uint8) times the weight's column
    sums for a run-time zero point. A nonzero weight zero point, a uint8 weight or a run-time
    weight stay qnn.dense."""
    rng = np.random.default_rng(0)
    w = Constant(rng.integers(-128, 128, (20, 30)).astype(np.int8), "w")
    zero = Constant(np.zeros((), np.int32), "w_zp")
    xu, xs, zp = var("xu", (3, 30), "uint8"), var("xs", (3, 30), "int8"), var("x_zp", (), "int32")
    fixed = call("qnn.dense", xu, w, Constant(np.array(7, np.int32), "x_zp7"), zero)
    dynamic = call("qnn.dense", xs, w, zp, zero)
    kept = [call("qnn.dense", xu, w, zp, Constant(np.full((), 3, np.int32), "w_zp3")),
            call("qnn.dense", xu, Constant(rng.integers(0, 256, (20, 30)).astype(np.uint8), "wu"), zp, zero),
            call("qnn.dense", xu, var("wv", (20, 30), "int8"), zp, zero)]
    before = Graph([xu, xs, zp, kept[2].inputs[1]], [fixed, dynamic, *kept])
    after = alter(before)
    products = [c for c in after.calls() if c.op == "qnn.dense_u8s8"]
    assert len(products) == 2 and all(p.inputs[1].shape == (2, 8, 16, 4) for p in products)
    assert op_names(after).count("qnn.dense") == 3
    inputs = {"xu": rng.integers(0, 256, (3, 30)).astype(np.uint8), "x_zp": np.array(-5, np.int32),
              "xs": rng.integers(-128, 128, (3, 30)).astype(np.int8),
              "wv": rng.integers(-128, 128, (20, 30)).astype(np.int8)}
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs)):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, r)  # integers: exact


def test_qnn_dense_on_aarch64_takes_sdot_data_or_the_matrix_multiply_accumulate():
    """arm-neoverse-n1 (SDOT): qnn.dense_u8s8 on int8 data (uint8 data shifted by -128, also
    under a run-time zero point). With +i8mm: qnn.dense_u8s8_mmla (weight [N/16, K/8, 8, 2, 8])
    where M > 1, qnn.dense_u8s8 for one row. Exact against the graph before."""
    rng = np.random.default_rng(2)
    w = Constant(rng.integers(-128, 128, (20, 30)).astype(np.int8), "w")
    zero = Constant(np.zeros((), np.int32), "w_zp")
    xu, xs, x1 = var("xu", (3, 30), "uint8"), var("xs", (3, 30), "int8"), var("x1", (1, 30), "uint8")
    zp = var("x_zp", (), "int32")
    before = Graph([xu, xs, x1, zp], [call("qnn.dense", xu, w, Constant(np.array(7, np.int32), "x_zp7"), zero),
                                      call("qnn.dense", xs, w, zp, zero),
                                      call("qnn.dense", x1, w, Constant(np.array(200, np.int32), "x_zp200"), zero)])
    inputs = {"xu": rng.integers(0, 256, (3, 30)).astype(np.uint8), "x_zp": np.array(-5, np.int32),
              "xs": rng.integers(-128, 128, (3, 30)).astype(np.int8),
              "x1": rng.integers(0, 256, (1, 30)).astype(np.uint8)}
    sdot = alter(before, resolve_target("arm-neoverse-n1"))
    products = [c for c in sdot.calls() if c.op == "qnn.dense_u8s8"]
    assert len(products) == 3 and {p.inputs[0].dtype for p in products} == {"int8"}
    i8mm = alter(before, resolve_target("arm-neoverse-n1", {"features": "+i8mm"}))
    mmla = [c for c in i8mm.calls() if c.op == "qnn.dense_u8s8_mmla"]
    assert [p.inputs[1].shape for p in mmla] == [(2, 4, 8, 2, 8)] * 2
    assert [p.inputs[0].shape for p in i8mm.calls() if p.op == "qnn.dense_u8s8"] == [(1, 30)]
    for graph in (sdot, i8mm):
        for r, g in zip(run_graph(before, inputs), run_graph(graph, inputs)):
            np.testing.assert_array_equal(g, r)  # integers: exact


def _qconv(x, w, x_zp, w_zp, stride=1, padding=(1, 1, 1, 1), groups=1, name=""):
    return call("qnn.conv2d", x, w, x_zp, w_zp, name=name, strides=(stride, stride), padding=padding,
                dilation=(1, 1), groups=groups)


def test_qnn_conv2d_on_i8mm_becomes_the_matrix_multiply_accumulate_kernel():
    """On a target with an int8 matrix multiply-accumulate (arm-neoverse-n1 with +i8mm: USMMLA),
    a qnn.conv2d of C a multiple of 8 -> qnn.conv2d_nchwc_u8s8_mmla on NCHW16c (C = 32, int8 data
    shifted by 128, stride 2) or NCHW8c (C = 24) uint8 data, its weight packed for the step, minus
    the same zero-point term; C = 12 keeps the dot-product kernel on NCHW4c. Without +i8mm
    (arm-neoverse-n1: SDOT, Target.dot_data_dtype int8) every conv takes the dot-product kernel
    on int8 data: uint8 data shifted by -128 (pad value 131 - 128), int8 data as it is (-7).
    Exact against the graph before."""
    rng = np.random.default_rng(1)

    def zp(value):
        return Constant(np.asarray(value, np.int32), f"zp{np.size(value)}_{np.ravel(value)[0]}")

    def qconv(x, o, stride=1):
        w = Constant(rng.integers(-128, 128, (o, x.shape[1], 3, 3)).astype(np.int8), f"w{x.name}{o}")
        return _qconv(x, w, zp(-7 if x.dtype == "int8" else 131), zp(np.zeros(o)), stride=stride)

    xs, xu = var("xs", (1, 32, 9, 9), "int8"), var("xu", (2, 24, 6, 7), "uint8")
    x12 = var("x12", (1, 12, 5, 5), "uint8")
    before = Graph([xs, xu, x12], [qconv(xs, 16, stride=2), qconv(xu, 32), qconv(x12, 16)])
    i8mm = resolve_target("arm-neoverse-n1", {"features": "+i8mm"})
    after = alter(before, i8mm)
    mmla = [c for c in after.calls() if c.op == "qnn.conv2d_nchwc_u8s8_mmla"]
    assert sorted(c.inputs[1].shape for c in mmla) == [(1, 2, 3, 3, 2, 8, 2, 8), (2, 3, 3, 3, 1, 8, 2, 8)]
    assert sorted(c.attrs["pad_value"] for c in mmla) == [121, 131]
    assert [c.inputs[1].shape for c in after.calls() if c.op == "qnn.conv2d_nchwc_u8s8"] == [(1, 3, 3, 3, 1, 16, 4)]
    symbolic_batch = var("xn", (symbolic.size_var("n", 1, 4), 16, 5, 5), "uint8")  # the dot-product kernel
    ops = [c.op for c in alter(Graph([symbolic_batch], [qconv(symbolic_batch, 16)]), i8mm).calls()]
    assert "qnn.conv2d_nchwc_u8s8" in ops and "qnn.conv2d_nchwc_u8s8_mmla" not in ops
    dot = alter(before, resolve_target("arm-neoverse-n1"))
    products = [c for c in dot.calls() if c.op == "qnn.conv2d_nchwc_u8s8"]
    assert sorted(c.attrs["pad_value"] for c in products) == [-7, 3, 3]
    assert {c.inputs[0].dtype for c in products} == {"int8"}
    assert "qnn.conv2d_nchwc_u8s8_mmla" not in [c.op for c in dot.calls()]
    inputs = {"xs": rng.integers(-128, 128, (1, 32, 9, 9)).astype(np.int8),
              "xu": rng.integers(0, 256, (2, 24, 6, 7)).astype(np.uint8),
              "x12": rng.integers(0, 256, (1, 12, 5, 5)).astype(np.uint8)}
    for graph in (after, dot):
        for r, g in zip(run_graph(before, inputs), run_graph(graph, inputs)):
            np.testing.assert_array_equal(g, r)  # integers: exact


def test_qnn_conv2d_with_an_int8_weight_becomes_the_dot_product_kernel():
    """qnn.conv2d with a constant int8 weight, zero weight zero points and a constant input zero
    point -> qnn.conv2d_nchwc_u8s8 on NCHW[ib]c uint8 data padded with the shifted input zero point,
    minus the constant term (shift + x_zp) * sum w per channel: exact at the padded borders too,
    for uint8 data (zero point 131; 5 channels: the row kernel qnn.conv2d_nchw_u8s8 on the planar
    data, padded in the graph to rows of 16), int8 data (shifted by 128,
    zero point -7, stride 2, asymmetric padding) and a second conv that reads the first one's
    requantized NCHW16c output (per-channel scale through the `layout` attribute) without a
    layout_transform between them. A nonzero weight zero point, 12 output channels, groups 2 and
    a run-time input zero point stay qnn.conv2d."""
    rng = np.random.default_rng(0)

    def weight(shape, name):
        return Constant(rng.integers(-128, 128, shape).astype(np.int8), name)

    def zp(value, name):
        return Constant(np.asarray(value, np.int32), name)

    xu, xs, dyn = var("xu", (1, 5, 9, 11), "uint8"), var("xs", (2, 16, 8, 8), "int8"), var("x_zp", (), "int32")
    zeros32, zeros16 = zp(np.zeros(32), "w_zp32"), zp(np.zeros(16), "w_zp16")
    first = _qconv(xu, weight((32, 5, 3, 3), "w1"), zp(131, "zp131"), zeros32)
    scale = Constant((rng.random(32) * 2e-4).astype(np.float32), "scale")
    requantized = call("qnn.requantize", first, scale, zp(3, "y_zp"), axis=1, out_dtype="uint8")
    second = _qconv(requantized, weight((16, 32, 3, 3), "w2"), zp(3, "zp3"), zeros16)
    shifted = _qconv(xs, weight((16, 16, 3, 3), "w3"), zp(-7, "zp-7"), zeros16, stride=2, padding=(0, 1, 2, 1))
    kept = [_qconv(xu, weight((32, 5, 3, 3), "w4"), zp(131, "zp131"), zp(np.arange(32) % 3, "w_zp_asym")),
            _qconv(xu, weight((12, 5, 3, 3), "w5"), zp(131, "zp131"), zp(np.zeros(12), "w_zp12")),
            _qconv(xs, weight((32, 8, 3, 3), "w6"), zp(-7, "zp-7"), zeros32, groups=2),
            _qconv(xs, weight((16, 16, 1, 1), "w7"), dyn, zeros16, padding=(0, 0, 0, 0))]
    before = Graph([xu, xs, dyn], [first, second, shifted, *kept])
    after = alter(before, **{"AlterOpLayout.float_narrow_int8": 0})  # the 5-channel conv on the u8s8 row kernel
    products = [c for c in after.calls() if c.op == "qnn.conv2d_nchwc_u8s8"]
    assert sorted(p.attrs["pad_value"] for p in products) == [3, 121]
    assert sorted(p.inputs[1].shape for p in products) == [(1, 1, 3, 3, 4, 16, 4), (1, 2, 3, 3, 4, 16, 4)]
    (rows,) = [c for c in after.calls() if c.op == "qnn.conv2d_nchw_u8s8"]
    assert rows.inputs[1].shape == (2, 5, 3, 1, 16, 4) and rows.inputs[0].op == "pad"
    assert rows.inputs[0].attrs["pad_value"] == 131 and rows.inputs[0].shape == (1, 5, 11, 16)
    assert op_names(after).count("qnn.conv2d") == 4
    # the second conv reads the requantize's NCHW16c output as it is
    assert ("NCHW16c", "NCHW") in transforms(after) and ("NCHW16c", "NCHW16c") not in transforms(after)
    requantize = next(c for c in after.calls() if c.op == "qnn.requantize")
    assert requantize.attrs["layout"] == "NCHW16c" and len(requantize.shape) == 5
    inputs = {"xu": rng.integers(0, 256, (1, 5, 9, 11)).astype(np.uint8), "x_zp": np.array(-5, np.int32),
              "xs": rng.integers(-128, 128, (2, 16, 8, 8)).astype(np.int8)}
    inputs["xu"][0, :, 0] = 255  # the border row next to the padding: the widest products
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs)):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, r)  # integers: exact


def test_exact_int8_kernels_on_vpmaddubsw_take_int16_data_pairs():
    """On x86-avx2 (Target.dot_data_pairs) the exact u8s8 kernels take data_pairs: a dense of
    several rows, a padded 3x3 conv, a 1x1 conv of stride 1. Not: one row (the split form), 7-bit
    weights (pairs_in_int16: one vpmaddubsw), a 1x1 conv of stride 2 without padding (it reads a
    quarter of its input); nor anything on a VNNI target. Exact against the graph before."""
    rng = np.random.default_rng(3)
    zero = Constant(np.zeros((), np.int32), "w_zp")
    x_zp = Constant(np.array(9, np.int32), "x_zp")
    xm, x1 = var("xm", (3, 40), "uint8"), var("x1", (1, 40), "uint8")
    w8 = Constant(rng.integers(-128, 128, (32, 40)).astype(np.int8), "w8")
    w7 = Constant(rng.integers(-64, 64, (32, 40)).astype(np.int8), "w7")
    xc = var("xc", (1, 16, 8, 8), "uint8")

    def wconv(k):
        return Constant(rng.integers(-128, 128, (16, 16, k, k)).astype(np.int8), f"wc{k}")

    zeros16 = Constant(np.zeros(16, np.int32), "w_zp16")
    outputs = [call("qnn.dense", xm, w8, x_zp, zero, name="rows"), call("qnn.dense", x1, w8, x_zp, zero, name="one"),
               call("qnn.dense", xm, w7, x_zp, zero, name="seven_bit"),
               _qconv(xc, wconv(3), x_zp, zeros16, name="padded"),
               _qconv(xc, wconv(1), x_zp, zeros16, padding=(0, 0, 0, 0), name="pointwise"),
               _qconv(xc, wconv(1), x_zp, zeros16, stride=2, padding=(0, 0, 0, 0), name="strided")]
    before = Graph([xm, x1, xc], outputs)
    after = alter(before, resolve_target("x86-avx2"))
    kernels = ("qnn.dense_u8s8", "qnn.conv2d_nchwc_u8s8")
    widened = {c.name: c.attrs["data_pairs"] for c in after.calls() if c.op in kernels}
    assert widened == {"rows": True, "one": False, "seven_bit": False, "padded": True, "pointwise": True,
                       "strided": False}
    vnni = alter(before, resolve_target("x86", {"features": "+avx512vnni"}))
    assert not any(c.attrs.get("data_pairs") for c in vnni.calls())
    inputs = {"xm": rng.integers(0, 256, (3, 40)).astype(np.uint8),
              "x1": rng.integers(0, 256, (1, 40)).astype(np.uint8),
              "xc": rng.integers(0, 256, (1, 16, 8, 8)).astype(np.uint8)}
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs)):
        np.testing.assert_array_equal(g, r)  # integers: exact


def _constant_bytes(graph):
    return sum(e.value.nbytes for e in graph.topo() if isinstance(e, Constant))


def test_size_budget_bounds_the_growth_of_the_params_by_winograd_weights(monkeypatch):
    """Weights transformed at compile time (winograd_at_load 0) are (m+2)^2/9 times the direct ones:
    without a budget (size_budget=0) every conv takes F(4x4) on x86-avx2 (the register rule) and the
    constants grow past 1.25x; with the default budget (1.25) they stay within 1.25x of the bytes
    before the pass, some convs still take Winograd (those saving most per byte first), and the
    graph keeps its meaning."""
    from tvmc.ops.cpu import conv2d_winograd

    monkeypatch.setattr(conv2d_winograd, "load_cost_table", lambda name: None)
    avx2 = resolve_target("x86-avx2")
    before = _three_convs()
    at_compile = {"AlterOpLayout.winograd_tile_size": -1, "AlterOpLayout.winograd_at_load": 0}
    unbounded = alter(before, avx2, **at_compile, **{"AlterOpLayout.size_budget": 0})
    assert op_names(unbounded).count("nn.conv2d_winograd_nchwc") == 3
    assert _constant_bytes(unbounded) > 1.25 * _constant_bytes(before)
    assert alter(before, avx2, **at_compile, **{"AlterOpLayout.size_budget": float("inf")}).calls()[1].op == \
        "nn.conv2d_winograd_nchwc"
    bounded = alter(before, avx2, **at_compile)
    assert _constant_bytes(bounded) <= 1.25 * _constant_bytes(before)
    winograd = [c for c in bounded.calls() if c.op == "nn.conv2d_winograd_nchwc"]
    assert winograd and winograd[0].name == "c1"
    assert op_names(bounded).count("nn.conv2d_nchwc") == 3 - len(winograd)
    tight = alter(before, avx2, **at_compile, **{"AlterOpLayout.size_budget": 1.0})
    assert "nn.conv2d_winograd_nchwc" not in op_names(tight)
    check(before, bounded)


def _three_convs():
    x = var("x", (1, 16, 24, 24))
    y = bias_relu(conv(x, 16, "c1"), "c1")
    y = bias_relu(conv(y, 32, "c2", seed=2), "c2", seed=3)
    y = bias_relu(conv(y, 64, "c3", seed=4), "c3", seed=5)
    return Graph([x], [y])


def test_winograd_weights_transformed_at_load_time_keep_the_params_the_size_of_the_weights(monkeypatch):
    """By default (winograd_at_load 1) each Winograd conv takes its transform from a
    nn.winograd_weight_transform call on the weight packed as for the direct conv: every conv takes
    F(4x4) on x86-avx2 whatever the size budget, the constants keep the bytes they had before the
    pass, and the graph keeps its meaning (the transform's reference is the compile-time one)."""
    from tvmc.ops.cpu import conv2d_winograd

    monkeypatch.setattr(conv2d_winograd, "load_cost_table", lambda name: None)
    avx2 = resolve_target("x86-avx2")
    before = _three_convs()
    after = alter(before, avx2, **{"AlterOpLayout.winograd_tile_size": -1})
    convs = [c for c in after.calls() if c.op == "nn.conv2d_winograd_nchwc"]
    assert len(convs) == 3 and _constant_bytes(after) == _constant_bytes(before)
    for c in convs:
        u = c.inputs[1]
        assert u.op == "nn.winograd_weight_transform" and u.attrs["tile_size"] == 4
        assert isinstance(u.inputs[0], Constant) and u.inputs[0].shape[2:4] == (3, 3)
    check(before, after)


def test_size_budget_counts_the_weights_inside_run_time_loop_bodies():
    """A CRNN imported for a range of widths keeps its LSTM weights in the bodies of its run-time
    loops (15% of the model's bytes): the Winograd size budget counts them, as it does for the
    artifact of one width whose LSTMs are unrolled into the main graph."""
    from tests.e2e.builders import crnn
    from tvmc.frontend.onnx.importer import from_onnx
    from tvmc.passes.alter_op_layout import _constant_bytes

    model = crnn()
    weights = sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer)
    ranged = from_onnx(model, {}, {}, {"width": (16, 2048)})
    main_only = sum(e.value.nbytes for e in ranged.topo() if isinstance(e, Constant))
    assert main_only < 0.9 * weights
    assert abs(_constant_bytes(ranged) - weights) <= 0.01 * weights
