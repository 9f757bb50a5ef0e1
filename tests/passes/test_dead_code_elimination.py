"""DeadCodeElimination: unused calls disappear, identity-like calls are replaced by their input."""

from pass_helpers import assert_equivalent, assert_same_graph, call, conv, op_names, snapshot, var
from tvmc.graph.ir import Call, Graph
from tvmc.passes import PassContext, run_passes


def dce(graph, names=("DeadCodeElimination",)):
    return run_passes(graph, list(names), PassContext())


def test_identity_like_calls_are_removed():
    x = var("x", (1, 3, 4, 5))
    e = call("reshape", x, newshape=(1, 3, 4, 5))
    e = call("transpose", e, axes=(0, 1, 2, 3))
    e = call("cast", e, dtype="float32")
    e = call("identity", call("nn.dropout", call("nn.relu", e)))
    before = Graph([x], [call("sigmoid", e)])
    snap = snapshot(before)
    after = dce(before)
    assert_same_graph(after, Graph([x], [call("sigmoid", call("nn.relu", x))]))
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_real_reshape_transpose_cast_stay():
    x = var("x", (2, 3, 4))
    e = call("reshape", x, newshape=(6, 4))
    e = call("transpose", e, axes=(1, 0))
    before = Graph([x], [call("cast", e, dtype="int32")])
    after = dce(before)
    assert op_names(after) == ["reshape", "transpose", "cast"]
    assert after.outputs[0] is before.outputs[0]


def test_output_copy_of_an_input_is_kept_but_of_a_call_is_not():
    x = var("x", (2, 8))
    r = call("nn.relu", x)
    before = Graph([x], [call("identity", x), call("nn.dropout", r)])
    after = dce(before)
    assert op_names(after) == ["identity", "nn.relu"]
    assert after.outputs[0].op == "identity" and after.outputs[1] is r
    assert_equivalent(before, after)


def test_unused_results_after_rewrites_are_dropped_and_inputs_kept():
    x, unused = var("x", (1, 2, 4, 4)), var("unused", (3,))
    # after SimplifyExpr cancels the transposes, the branch through `t` has no user left
    t = call("transpose", call("nn.relu", x), axes=(0, 2, 3, 1))
    back = call("transpose", t, axes=(0, 3, 1, 2))
    before = Graph([x, unused], [call("add", back, conv(x, 2, "c", k=1, pad=0))])
    after = dce(before, ["SimplifyExpr", "DeadCodeElimination"])
    assert "transpose" not in op_names(after)
    assert t not in after.topo()
    assert after.inputs == before.inputs                # never removes graph inputs
    assert_equivalent(before, after)


def test_graph_without_identities_is_unchanged():
    x = var("x", (1, 3, 5, 5))
    before = Graph([x], [call("nn.relu", conv(x, 2, "c"))])
    after = dce(before)
    assert after.outputs[0] is before.outputs[0] and isinstance(after.outputs[0], Call)
