"""FuseOps: anchor + elementwise epilogue groups become primitive Functions."""

import pytest

from pass_helpers import (assert_equivalent, body_ops, call, const, conv, fused_calls, op_names, snapshot,
                          var)
from tvmc.errors import PassError
from tvmc.graph.ir import Constant, Function, Graph, Var
from tvmc.passes import PassContext, run_passes


def fuse(graph, **ctx_kwargs):
    return run_passes(graph, ["FuseOps"], PassContext(**ctx_kwargs))


def test_conv_add_relu_is_one_function_with_constants_as_args():
    x = var("x", (1, 3, 6, 6))
    c = conv(x, 4, "conv")
    bias = const((4, 1, 1), "bias", 1)
    before = Graph([x], [call("nn.relu", call("add", c, bias))])
    snap = snapshot(before)
    after = fuse(before)

    (fc,) = fused_calls(after)
    assert op_names(after) == ["fused_nn_conv2d_add_nn_relu"]
    assert body_ops(fc.op) == ["nn.conv2d", "add", "nn.relu"]
    assert fc.inputs == (x, c.inputs[1], bias)          # constants stay outside as args
    assert all(isinstance(p, Var) for p in fc.op.params)
    assert [p.type for p in fc.op.params] == [i.type for i in fc.inputs]
    assert not any(isinstance(e, Constant) for e in Graph(fc.op.params, [fc.op.body]).topo())
    assert fc.type == before.outputs[0].type
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_intermediate_with_two_users_is_not_fused():
    x = var("x", (1, 2, 5, 5))
    c = conv(x, 2, "conv")
    before = Graph([x], [call("add", call("nn.relu", c), call("sigmoid", c))])
    after = fuse(before)
    names = op_names(after)
    assert names[0] == "fused_nn_conv2d"
    assert sorted(names[1:]) == ["fused_nn_relu", "fused_sigmoid_add"] or \
        sorted(names[1:]) == ["fused_nn_relu_add", "fused_sigmoid"]
    assert_equivalent(before, after)


def test_an_injective_op_on_constants_joins_each_elementwise_reader():
    """An injective op reading constants alone (a range artifact's slice of a constant buffer)
    that only elementwise ops read joins each reader's group, before the reader: no kernel
    writes it to an activation of its own (FuseOps._constant_prologue)."""
    x = var("x", (4, 6))
    k = const((6, 4), "k", 2)
    t = call("transpose", k, axes=(1, 0))
    a = call("add", call("nn.relu", x), t)
    b = call("multiply", call("sigmoid", x), t)
    before = Graph([x], [a, b])
    after = fuse(before)
    bodies = sorted(body_ops(fc.op) for fc in fused_calls(after))
    assert bodies == [["nn.relu", "transpose", "add"], ["sigmoid", "transpose", "multiply"]]
    assert all(k in fc.inputs for fc in fused_calls(after))  # each reads the constant itself
    assert_equivalent(before, after)
    # read by a reduction as well, it stays a kernel of its own
    before = Graph([x], [call("add", call("nn.relu", x), t), call("sum", t, axis=(1,), keepdims=False)])
    assert "fused_transpose" in op_names(fuse(before))


def test_graph_output_is_not_fused_into_successor():
    x = var("x", (1, 2, 5, 5))
    c = conv(x, 2, "conv")
    before = Graph([x], [call("nn.relu", c), c])
    after = fuse(before)
    assert op_names(after) == ["fused_nn_conv2d", "fused_nn_relu"]
    assert_equivalent(before, after)


def test_opaque_op_stays_alone():
    x = var("x", (2, 8))
    before = Graph([x], [call("nn.relu", call("nn.softmax", call("tanh", x), axis=1))])
    after = fuse(before)
    assert op_names(after) == ["fused_tanh", "fused_nn_softmax", "fused_nn_relu"]
    assert_equivalent(before, after)


def test_pad_fuses_into_conv_as_producer():
    x = var("x", (1, 2, 5, 5))
    p = call("pad", call("nn.relu", x), pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), pad_value=0.0)
    w = const((3, 2, 3, 3), "w")
    y = call("nn.conv2d", p, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    before = Graph([x], [call("nn.relu", y)])
    after = fuse(before)
    assert op_names(after) == ["fused_nn_relu", "fused_pad_nn_conv2d_nn_relu"]
    assert_equivalent(before, after)


def test_injective_fusion_rules():
    x = var("x", (1, 4, 2, 2))
    c = conv(x, 4, "conv", k=1, pad=0)
    r = call("reshape", c, newshape=(1, 16))
    t = call("transpose", r, axes=(1, 0))
    before = Graph([x], [call("nn.relu", t)])
    after = fuse(before)
    # conv takes no injective epilogue; the injective chain takes the elementwise op
    assert op_names(after) == ["fused_nn_conv2d", "fused_reshape_transpose_nn_relu"]
    assert_equivalent(before, after)


def test_elementwise_group_takes_concat():
    x, y = var("x", (1, 2, 3, 3)), var("y", (1, 2, 3, 3))
    before = Graph([x, y], [call("concatenate", call("nn.relu", x), y, axis=1)])
    after = fuse(before)
    assert op_names(after) == ["fused_nn_relu_concatenate"]
    assert fused_calls(after)[0].inputs == (x, y)
    assert_equivalent(before, after)


def test_max_depth_option_bounds_groups():
    x = var("x", (4,))
    e = x
    for _ in range(5):
        e = call("nn.relu", e)
    before = Graph([x], [e])
    assert op_names(fuse(before)) == ["fused_" + "_".join(["nn_relu"] * 5)]
    after = fuse(before, config={"FuseOps.max_depth": 2})
    assert op_names(after) == ["fused_nn_relu_nn_relu"] * 2 + ["fused_nn_relu"]
    assert_equivalent(before, after)
    with pytest.raises(PassError):
        fuse(before, config={"FuseOps.max_depth": 0})


@pytest.mark.parametrize("kwargs", [{"opt_level": 0}, {"disabled_passes": {"FuseOps"}}])
def test_fusion_off_gives_one_function_per_op(kwargs):
    x = var("x", (1, 3, 6, 6))
    before = Graph([x], [call("nn.relu", call("add", conv(x, 4, "conv"), const((4, 1, 1), "b")))])
    after = fuse(before, **kwargs)
    assert op_names(after) == ["fused_nn_conv2d", "fused_add", "fused_nn_relu"]
    assert all(len(body_ops(c.op)) == 1 for c in fused_calls(after))
    assert_equivalent(before, after)


def test_identical_groups_share_function_and_different_ones_get_suffix():
    x = var("x", (1, 2, 4, 4))
    a = call("nn.relu", conv(x, 2, "c1", seed=1))
    b = call("nn.relu", conv(a, 2, "c2", seed=2))       # same types, other weights: same Function
    c = call("nn.relu", conv(b, 3, "c3", seed=3))       # other output channels: other Function
    before = Graph([x], [c])
    after = fuse(before)
    f1, f2, f3 = (fc.op for fc in fused_calls(after))
    assert f1 is f2 and f1 is not f3
    assert f1.name == "fused_nn_conv2d_nn_relu" and f3.name == "fused_nn_conv2d_nn_relu_1"
    assert_equivalent(before, after)


def test_long_names_are_truncated_with_hash():
    x = var("x", (4,))
    e = x
    for _ in range(30):
        e = call("sigmoid", e)
    after = fuse(Graph([x], [e]))
    (fc,) = fused_calls(after)
    assert fc.op.name.startswith("fused_sigmoid_sigmoid") and len(fc.op.name) == 80 + 9


def test_outputs_that_are_inputs_constants_or_repeated_get_copies():
    x = var("x", (3,))
    k = const((3,), "k")
    r = call("nn.relu", x)
    before = Graph([x], [x, k, r, r], ["a", "b", "c", "d"])
    after = fuse(before)
    outs = after.outputs
    assert all(isinstance(o.op, Function) for o in outs)
    assert len(set(outs)) == 4
    assert [body_ops(o.op) for o in outs] == [["identity"], ["identity"], ["nn.relu"], ["identity"]]
    assert after.output_names == ("a", "b", "c", "d")
    assert_equivalent(before, after)


def test_fuse_ops_is_idempotent():
    x = var("x", (1, 3, 6, 6))
    once = fuse(Graph([x], [call("nn.relu", conv(x, 4, "conv"))]))
    twice = fuse(once)
    assert fused_calls(twice) == fused_calls(once)          # the very same calls


def test_epilogue_that_broadcasts_the_anchor_up_is_not_fused():
    x, y = var("x", (1, 3, 4, 4)), var("y", (1, 2, 4, 4))
    pooled = call("nn.global_avg_pool2d", conv(x, 2, "c"))                 # [1,2,1,1]
    before = Graph([x, y], [call("add", pooled, y)])                       # -> [1,2,4,4]
    after = fuse(before)
    assert op_names(after) == ["fused_nn_conv2d", "fused_nn_global_avg_pool2d", "fused_add"]
    assert_equivalent(before, after)


def test_an_elementwise_op_joins_the_anchored_group_of_its_operands():
    """add(reshape(r), dense(x) + bias), the reshape first (a residual add after a rank-3
    MatMul): the add joins the dense's group as its epilogue, not the reshape's, which stays
    alone (PlanMemory makes it a view: no kernel)."""
    x, r = var("x", (4, 8)), var("r", (1, 4, 6))
    dense = call("add", call("nn.dense", x, const((6, 8), "w")), const((6,), "b", 1))
    before = Graph([x, r], [call("add", call("reshape", call("nn.relu", r), newshape=(4, 6)), dense)])
    after = fuse(before)
    assert op_names(after) == ["fused_nn_relu_reshape", "fused_nn_dense_add_add"]
    assert_equivalent(before, after)
