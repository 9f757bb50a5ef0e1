"""SimplifyInference: batch norm -> multiply/add with folded constants; dropout/identity removed."""

import numpy as np

from pass_helpers import assert_equivalent, batch_norm, call, const, conv, op_names, snapshot, var
from tvmc.graph.ir import Call, Constant, Graph
from tvmc.passes import PassContext, run_passes


def simplify(graph):
    return run_passes(graph, ["SimplifyInference"], PassContext())


def test_batch_norm_nchw_becomes_scale_shift():
    x = var("x", (1, 3, 6, 6))
    bn = batch_norm(conv(x, 4, "conv"), "bn")
    before = Graph([x], [call("nn.relu", bn)])
    snap = snapshot(before)
    after = simplify(before)

    assert op_names(after) == ["nn.conv2d", "multiply", "add", "nn.relu"]
    add = after.outputs[0].inputs[0]
    mul, shift = add.inputs
    conv_out, scale = mul.inputs
    assert conv_out.op == "nn.conv2d"
    assert isinstance(scale, Constant) and isinstance(shift, Constant)
    assert scale.shape == (4, 1, 1) and shift.shape == (4, 1, 1)
    assert (scale.name, shift.name) == ("bn_scale", "bn_shift")
    g, b, m, v = (i.value.astype(np.float64) for i in bn.inputs[1:])
    expect_scale = g / np.sqrt(v + 1e-5)
    np.testing.assert_allclose(scale.value.reshape(-1), expect_scale, rtol=1e-6)
    np.testing.assert_allclose(shift.value.reshape(-1), b - m * expect_scale, rtol=1e-5, atol=1e-6)
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_batch_norm_on_2d_uses_vector_scale():
    x = var("x", (2, 5))
    before = Graph([x], [batch_norm(x, "bn")])
    after = simplify(before)
    assert op_names(after) == ["multiply", "add"]
    assert after.outputs[0].inputs[1].shape == (5,)
    assert_equivalent(before, after)


def test_batch_norm_with_computed_statistics_emits_ops():
    x = var("x", (1, 2, 4, 4))
    gamma = var("gamma", (2,))
    bn = call("nn.batch_norm", x, gamma, const((2,), "beta", 1), const((2,), "mean", 2),
              const((2,), "var", 3, 0.5, 2.0), name="bn", epsilon=1e-3, axis=1)
    before = Graph([x, gamma], [bn])
    after = simplify(before)
    assert "nn.batch_norm" not in op_names(after)
    out = after.outputs[0]
    assert out.op == "add" and out.inputs[0].op == "multiply" and out.inputs[0].inputs[0] is x
    assert out.inputs[0].inputs[1].shape == (2, 1, 1) and out.inputs[1].shape == (2, 1, 1)
    assert_equivalent(before, after)


def test_dropout_and_identity_removed():
    x = var("x", (2, 8))
    d = call("nn.dropout", call("nn.relu", x), name="drop")
    before = Graph([x], [call("identity", d), call("nn.dropout", x)])
    after = simplify(before)
    assert op_names(after) == ["nn.relu"]
    assert isinstance(after.outputs[0], Call) and after.outputs[0].op == "nn.relu"
    assert after.outputs[1] is x
    assert_equivalent(before, after)


def test_graph_without_targets_is_unchanged():
    x = var("x", (1, 3, 5, 5))
    before = Graph([x], [call("nn.relu", conv(x, 2, "c"))])
    after = simplify(before)
    assert after.outputs[0] is before.outputs[0]
