"""FoldScaleAxis: per-output-channel constant scales after conv2d / dense move into the weights."""

import numpy as np
import pytest

from pass_helpers import (assert_equivalent, assert_same_graph, batch_norm, body_ops, call, const, conv,
                          fused_calls, op_names, snapshot, var)
from tvmc.graph.ir import Call, Constant, Graph
from tvmc.passes import PassContext, optimize, run_passes


def fold(graph, names=("FoldScaleAxis",)):
    return run_passes(graph, list(names), PassContext())


def scaled(c: Constant, scale, shape) -> Constant:
    value = c.value.astype(np.float64) * np.asarray(scale, np.float64).reshape(shape)
    return Constant(value.astype(c.dtype), f"{c.name}_scaled")


def conv_on(x, w, groups=1, name="conv"):
    return call("nn.conv2d", x, w, name=name, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                groups=groups)


@pytest.mark.parametrize("scale_shape", [(4, 1, 1), (1, 4, 1, 1), (), (1, 1, 1)])
@pytest.mark.parametrize("scale_first", [False, True])
def test_conv_times_channel_scale_folds_into_weight(scale_shape, scale_first):
    x = var("x", (1, 3, 6, 6))
    w = const((4, 3, 3, 3), "w")
    s = const(scale_shape, "s", 1, 0.5, 2.0)
    c = conv_on(x, w)
    y = call("multiply", *((s, c) if scale_first else (c, s)))
    before = Graph([x], [call("nn.relu", y)])
    snap = snapshot(before)
    after = fold(before)
    per_channel = np.broadcast_to(s.value.reshape(-1), (4,))
    expected = Graph([x], [call("nn.relu", conv_on(x, scaled(w, per_channel, (4, 1, 1, 1))))])
    assert_same_graph(after, expected)
    assert snapshot(before) == snap
    assert_equivalent(before, after)


@pytest.mark.parametrize("bias_shape", [(4, 1, 1), (1, 4, 6, 6), ()])
def test_bias_between_conv_and_scale_is_scaled_too(bias_shape):
    x = var("x", (1, 3, 6, 6))
    w, b, s = const((4, 3, 3, 3), "w"), const(bias_shape, "b", 2), const((4, 1, 1), "s", 3, -2.0, 2.0)
    before = Graph([x], [call("multiply", call("add", conv_on(x, w), b), s)])
    after = fold(before)
    new_bias = scaled(b, s.value.reshape(-1), (1, 4, 1, 1))
    expected = Graph([x], [call("add", conv_on(x, scaled(w, s.value.reshape(-1), (4, 1, 1, 1))), new_bias)])
    assert_same_graph(after, expected)
    assert_equivalent(before, after)


def test_grouped_and_depthwise_conv():
    x = var("x", (1, 4, 5, 5))
    for groups, ic in ((2, 2), (4, 1)):
        w = const((4, ic, 3, 3), "w", groups)
        s = const((1, 4, 1, 1), "s", 5, 0.5, 2.0)
        before = Graph([x], [call("multiply", conv_on(x, w, groups), s)])
        after = fold(before)
        assert op_names(after) == ["nn.conv2d"]
        assert_same_graph(after, Graph([x], [conv_on(x, scaled(w, s.value.reshape(-1), (4, 1, 1, 1)), groups)]))
        assert_equivalent(before, after)


@pytest.mark.parametrize("scale_shape", [(5,), (1, 5), ()])
def test_dense_times_unit_scale(scale_shape):
    x = var("x", (3, 8))
    w, s = const((5, 8), "w"), const(scale_shape, "s", 1, 0.5, 2.0)
    b = const((5,), "b", 2)
    before = Graph([x], [call("multiply", call("add", call("nn.dense", x, w), b), s)])
    after = fold(before)
    per_unit = np.broadcast_to(s.value.reshape(-1), (5,))
    expected = Graph([x], [call("add", call("nn.dense", x, scaled(w, per_unit, (5, 1))),
                                scaled(b, per_unit, (1, 5)))])
    assert_same_graph(after, expected)
    assert_equivalent(before, after)


def test_chained_scales_all_fold():
    x = var("x", (1, 3, 6, 6))
    w = const((4, 3, 3, 3), "w")
    s1, s2 = const((4, 1, 1), "s1", 1, 0.5, 2.0), const((1, 4, 1, 1), "s2", 2, 0.5, 2.0)
    before = Graph([x], [call("multiply", call("multiply", conv_on(x, w), s1), s2)])
    after = fold(before)
    assert op_names(after) == ["nn.conv2d"]
    assert_equivalent(before, after)


def _not_folded_cases():
    x = var("x", (1, 3, 6, 6))
    w = const((4, 3, 3, 3), "w")
    s = const((4, 1, 1), "s", 1, 0.5, 2.0)
    c = conv_on(x, w)
    wv = var("wv", (4, 3, 3, 3))
    sv = var("sv", (4, 1, 1))
    return {
        "conv_has_two_users": Graph([x], [call("add", call("multiply", c, s), c)]),
        "conv_is_an_output": Graph([x], [call("multiply", c, s), c]),
        "scale_not_constant": Graph([x, sv], [call("multiply", c, sv)]),
        "weight_not_constant": Graph([x, wv], [call("multiply", conv_on(x, wv), s)]),
        "spatial_scale": Graph([x], [call("multiply", c, const((1, 1, 6, 6), "hw", 2))]),
        "width_vector": Graph([x], [call("multiply", c, const((6,), "wvec", 3))]),
        "scale_grows_output": Graph([x], [call("multiply", c, const((2, 4, 1, 1), "grow", 4))]),
        "bias_add_of_a_tensor": Graph([x], [call("multiply", call("add", c, call("nn.relu", c)), s)]),
        "not_after_an_anchor": Graph([x], [call("multiply", call("nn.relu", x), const((3, 1, 1), "s3", 5))]),
    }


@pytest.mark.parametrize("case", sorted(_not_folded_cases()))
def test_not_folded(case):
    before = _not_folded_cases()[case]
    after = fold(before)
    assert op_names(after) == op_names(before)
    assert "multiply" in op_names(after)


def conv_bn_net(with_conv_bias: bool):
    """conv -> BN -> relu, twice, plus a BN after a pooling (not foldable) and a dense head."""
    x = var("x", (1, 3, 8, 8))
    e = x
    for k, oc in enumerate((4, 6)):
        e = conv(e, oc, f"conv{k}", seed=k)
        if with_conv_bias:
            e = call("add", e, const((oc, 1, 1), f"conv{k}_b", 10 + k))
        e = call("nn.relu", batch_norm(e, f"bn{k}", seed=20 + 4 * k))
    pooled = call("nn.max_pool2d", e, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
                  ceil_mode=0)
    e = batch_norm(pooled, "bn_pool", seed=40)
    flat = call("reshape", e, newshape=(1, 6 * 4 * 4))
    return Graph([x], [call("nn.dense", flat, const((10, 96), "fc_w", 50))])


@pytest.mark.parametrize("with_conv_bias", [False, True])
def test_batch_norm_after_conv_becomes_free(with_conv_bias):
    before = conv_bn_net(with_conv_bias)
    after = fold(before, ["SimplifyInference", "FoldConstant", "FoldScaleAxis"])
    for c in after.calls():
        if c.op == "multiply":
            # the only multiply left is the batch norm after the pooling
            assert c.inputs[0].op == "nn.max_pool2d"
        if c.op == "nn.conv2d":
            (user,) = [u for u in after.calls() if c in u.inputs]
            assert user.op == "add"                       # the bias (BN shift) stays for FuseOps
    assert op_names(after).count("multiply") == 1
    assert_equivalent(before, after)

    fused = optimize(before, PassContext(opt_level=3))
    convs = [f for f in fused_calls(fused) if "nn.conv2d" in body_ops(f.op)]
    # conv bias and BN shift stay two adds (SimplifyExpr, which could merge them, runs earlier)
    epilogue = ["add", "add", "nn.relu"] if with_conv_bias else ["add", "nn.relu"]
    assert len(convs) == 2 and all(body_ops(f.op) == ["nn.conv2d"] + epilogue for f in convs)
    assert_equivalent(before, fused)


def test_not_run_below_opt_level_3():
    x = var("x", (1, 3, 6, 6))
    c = call("multiply", conv_on(x, const((4, 3, 3, 3), "w")), const((4, 1, 1), "s"))
    g = Graph([x], [c])
    out = run_passes(g, ["FoldScaleAxis"], PassContext(opt_level=2))
    assert out.outputs[0] is c and isinstance(out.outputs[0], Call)
