"""EliminateCommonSubexpr: equal calls on the same inputs and equal small constants merge."""

import numpy as np

from pass_helpers import assert_equivalent, assert_same_graph, call, const, op_names, snapshot, var
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, optimize, run_passes


def cse(graph):
    return run_passes(graph, ["EliminateCommonSubexpr"], PassContext())


def conv_with(x, w, name):
    return call("nn.conv2d", x, w, name=name, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)


def test_equal_calls_merge_and_their_users_follow():
    x = var("x", (1, 3, 6, 6))
    w = const((4, 3, 3, 3), "w")
    a = call("nn.relu", conv_with(x, w, "c0"), name="r0")
    b = call("nn.relu", conv_with(x, w, "c1"), name="r1")     # same op, attrs and inputs as a
    before = Graph([x], [call("add", call("sigmoid", a), call("sigmoid", b))])
    snap = snapshot(before)
    after = cse(before)

    c = conv_with(x, w, "c0")
    s = call("sigmoid", call("nn.relu", c, name="r0"))
    assert_same_graph(after, Graph([x], [call("add", s, s)]))
    add = after.outputs[0]
    assert add.inputs[0] is add.inputs[1]
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_different_attrs_or_inputs_stay_apart():
    x, y = var("x", (2, 8)), var("y", (2, 8))
    outs = [call("nn.leaky_relu", x, alpha=0.1), call("nn.leaky_relu", x, alpha=0.2),
            call("nn.relu", x), call("nn.relu", y), call("sigmoid", x)]
    before = Graph([x, y], outs)
    after = cse(before)
    assert op_names(after) == op_names(before)
    assert len(set(after.outputs)) == 5


def test_attr_values_compare_with_their_types():
    x = var("x", (2, 8))
    a = call("clip", x, a_min=0, a_max=6)
    b = call("clip", x, a_min=0.0, a_max=6.0)
    after = cse(Graph([x], [call("add", a, b)]))
    assert len(op_names(after)) == 3


def test_equal_small_constants_merge_by_value():
    x = var("x", (4, 8))
    c1 = Constant(np.full((8,), 2.0, "float32"), "c1")
    c2 = Constant(np.full((8,), 2.0, "float32"), "c2")
    before = Graph([x], [call("add", call("multiply", x, c1), call("multiply", x, c2))])
    after = cse(before)
    m = call("multiply", x, c1)
    assert_same_graph(after, Graph([x], [call("add", m, m)]))
    assert_equivalent(before, after)


def test_constants_differing_in_sign_of_zero_dtype_shape_or_size_stay_apart():
    x = var("x", (2, 8))
    zero, neg_zero = np.zeros((8,), "float32"), np.full((8,), -0.0, "float32")
    pairs = [(Constant(zero, "z"), Constant(neg_zero, "nz")),
             (Constant(np.ones((1, 8), "float32"), "row"), Constant(np.ones((2, 8), "float32"), "full")),
             (Constant(np.ones((8,), "int32"), "i"), Constant(np.ones((8,), "int64"), "l"))]
    for a, b in pairs:
        before = Graph([x], [a, b])
        after = cse(before)
        assert after.outputs[0] is a and after.outputs[1] is b
    big = np.zeros((512, 1024), "float32")                    # 2 MiB: compared by identity only
    y = var("y", (512, 1024))
    before = Graph([y], [call("add", y, Constant(big, "b1")), call("add", y, Constant(big.copy(), "b2"))])
    after = cse(before)
    assert after.outputs[0] is not after.outputs[1]


def test_duplicate_outputs_still_compile_to_distinct_storage():
    x = var("x", (1, 2, 4, 4))
    before = Graph([x], [call("nn.relu", x), call("nn.relu", x)], ["a", "b"])
    after = cse(before)
    assert after.outputs[0] is after.outputs[1]
    fused = optimize(before, PassContext(opt_level=3))
    sid = fused.meta["storage_id"]
    assert sid[fused.outputs[0]] != sid[fused.outputs[1]]
    assert_equivalent(before, fused)


def test_inputs_are_never_merged():
    x, y = var("x", (2, 2)), var("y", (2, 2))
    before = Graph([x, y], [call("add", x, y)])
    after = cse(before)
    assert after.inputs == before.inputs and after.outputs[0] is before.outputs[0]
