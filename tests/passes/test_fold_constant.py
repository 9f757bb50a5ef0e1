"""FoldConstant: calls on constants are evaluated at compile time with the op references."""

import numpy as np

from pass_helpers import assert_equivalent, call, const, conv, op_names, snapshot, var
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, run_passes


def fold(graph, names=("FoldConstant",)):
    return run_passes(graph, list(names), PassContext())


def test_binary_on_constants_folds_to_named_constant():
    x = var("x", (4,))
    a, b = const((4,), "a", 1), const((4,), "b", 2)
    before = Graph([x], [call("add", x, call("multiply", a, b, name="ab"))])
    snap = snapshot(before)
    after = fold(before)
    assert op_names(after) == ["add"]
    folded = after.outputs[0].inputs[1]
    assert isinstance(folded, Constant) and folded.name == "ab"
    assert folded.dtype == "float32"
    np.testing.assert_allclose(folded.value, a.value * b.value)
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_constant_subgraph_collapses_and_unnamed_gets_op_name():
    x = var("x", (1, 3, 6, 6))
    w = const((3, 3, 3, 4), "w_t")
    w_oihw = call("transpose", w, axes=(3, 2, 0, 1))
    w_scaled = call("multiply", w_oihw, const((4, 1, 1, 1), "s", 3))
    y = call("nn.conv2d", x, w_scaled, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    before = Graph([x], [y])
    after = fold(before)
    assert op_names(after) == ["nn.conv2d"]
    weight = after.outputs[0].inputs[1]
    assert isinstance(weight, Constant) and weight.shape == (4, 3, 3, 3) and weight.name == "multiply"
    assert_equivalent(before, after)


def test_calls_on_inputs_are_kept():
    x = var("x", (1, 3, 4, 4))
    before = Graph([x], [call("nn.relu", conv(x, 2, "c"))])
    after = fold(before)
    assert op_names(after) == ["nn.conv2d", "nn.relu"]


def test_folds_batch_norm_constants_after_simplify_inference():
    x = var("x", (1, 2, 4, 4))
    gamma = call("multiply", const((2,), "g0", 1, 0.5, 1.0), const((2,), "g1", 2, 0.5, 1.0))
    bn = call("nn.batch_norm", x, gamma, const((2,), "beta", 3), const((2,), "mean", 4),
              const((2,), "var", 5, 0.5, 2.0), name="bn", epsilon=1e-5, axis=1)
    before = Graph([x], [bn])
    simplified = fold(before, ["SimplifyInference"])
    assert len(op_names(simplified)) > 2          # scale/shift arithmetic emitted as ops
    after = fold(simplified)
    assert op_names(after) == ["multiply", "add"]
    scale = after.outputs[0].inputs[0].inputs[1]
    shift = after.outputs[0].inputs[1]
    assert isinstance(scale, Constant) and isinstance(shift, Constant)
    assert scale.shape == (2, 1, 1) and scale.name == "bn_scale" and shift.name == "bn_shift"
    assert_equivalent(before, after)


def test_values_above_the_constant_limit_are_left_to_run_time(monkeypatch):
    """MAX_CONSTANT_BYTES: a value of exactly that many bytes folds, one byte-size step more stays a call."""
    import tvmc.graph.ir as ir

    monkeypatch.setattr(ir, "MAX_CONSTANT_BYTES", 64)
    x = var("x", (16,))
    exact = call("broadcast_to", const((1,), "a", 1), shape=(16,))      # 16 float32: 64 bytes
    over = call("broadcast_to", const((1,), "b", 2), shape=(17,))       # 68 bytes
    before = Graph([x], [call("add", x, exact), over])
    after = fold(before)
    assert isinstance(after.outputs[0].inputs[1], Constant)
    assert not isinstance(after.outputs[1], Constant) and after.outputs[1].op == "broadcast_to"
    assert_equivalent(before, after)


def test_symbolic_calls_on_constants_stay_calls():
    """A call whose type or attributes depend on size variables (positions sliced to seq) has no
    value at compile time: it is left to run time; its static neighbours still fold."""
    from tvmc.graph import symbolic

    seq = symbolic.size_var("seq", 1, 64)
    x = var("x", (1, 4))
    positions = const((1, 64), "positions")
    sliced = call("strided_slice", positions, begin=(0, 0), end=(1, seq), strides=(1, 1))
    scale = call("multiply", const((4,), "a", 1), const((4,), "b", 2), name="ab")
    before = Graph([x], [sliced, call("add", x, scale)])
    after = fold(before)
    assert op_names(after) == ["strided_slice", "add"] and after.outputs[0].shape == (1, seq)
    assert isinstance(after.outputs[1].inputs[1], Constant)
