"""SimplifyExpr: reshape/transpose chains collapse, no-op casts and neutral-constant arithmetic vanish."""

import numpy as np
import pytest

from pass_helpers import assert_equivalent, assert_same_graph, call, op_names, snapshot, var
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, run_passes


def simplify(graph):
    return run_passes(graph, ["SimplifyExpr"], PassContext())


def test_reshape_chain_becomes_one_reshape():
    x = var("x", (2, 3, 4))
    e = call("reshape", x, newshape=(6, 4))
    e = call("reshape", e, newshape=(24,))
    e = call("reshape", e, newshape=(4, 6))
    before = Graph([x], [call("nn.relu", e)])
    snap = snapshot(before)
    after = simplify(before)
    assert_same_graph(after, Graph([x], [call("nn.relu", call("reshape", x, newshape=(4, 6)))]))
    assert snapshot(before) == snap
    assert_equivalent(before, after)


def test_reshape_back_to_input_shape_disappears():
    x = var("x", (2, 3, 4))
    back = call("reshape", call("reshape", x, newshape=(24,)), newshape=(2, 3, 4))
    before = Graph([x], [call("nn.relu", back)])
    after = simplify(before)
    assert_same_graph(after, Graph([x], [call("nn.relu", x)]))


@pytest.mark.parametrize("a1,a2", [((0, 2, 3, 1), (0, 3, 1, 2)), ((1, 0, 3, 2), (2, 3, 0, 1)),
                                   ((3, 2, 1, 0), (0, 2, 1, 3))])
def test_transpose_pair_composes(a1, a2):
    x = var("x", (2, 3, 4, 5))
    before = Graph([x], [call("nn.relu", call("transpose", call("transpose", x, axes=a1), axes=a2))])
    after = simplify(before)
    composed = tuple(a1[a] for a in a2)
    expected = call("nn.relu", x if composed == (0, 1, 2, 3) else call("transpose", x, axes=composed))
    assert_same_graph(after, Graph([x], [expected]))
    assert_equivalent(before, after)


def test_no_op_reshape_transpose_cast_removed_real_ones_kept():
    x = var("x", (2, 3))
    e = call("cast", call("transpose", call("reshape", x, newshape=(2, 3)), axes=(0, 1)), dtype="float32")
    before = Graph([x], [call("nn.relu", e), call("cast", x, dtype="int32")])
    after = simplify(before)
    assert_same_graph(after, Graph([x], [call("nn.relu", x), call("cast", x, dtype="int32")]))


NEUTRAL_CASES = [
    ("multiply", 1.0, False), ("multiply", 1.0, True), ("divide", 1.0, False),
    ("add", 0.0, False), ("add", 0.0, True), ("add", -0.0, False), ("subtract", 0.0, False),
]


@pytest.mark.parametrize("op,value,const_first", NEUTRAL_CASES)
@pytest.mark.parametrize("shape", [(), (4, 1, 1), (1, 4, 1, 1), (1, 4, 5, 6)])
def test_neutral_constant_arithmetic_removed(op, value, const_first, shape):
    x = var("x", (1, 4, 5, 6))
    c = Constant(np.full(shape, value, "float32"), "c")
    r = call("nn.relu", x)
    before = Graph([x], [call("sigmoid", call(op, *((c, r) if const_first else (r, c))))])
    after = simplify(before)
    assert_same_graph(after, Graph([x], [call("sigmoid", call("nn.relu", x))]))
    assert_equivalent(before, after)


def _pooled(x):
    return call("nn.global_avg_pool2d", x)


def _full(shape, value, name):
    return Constant(np.full(shape, value, "float32"), name)


@pytest.mark.parametrize("make", [
    lambda x: call("subtract", _full((4, 1, 1), 0.0, "z"), x),                 # 0 - x = -x
    lambda x: call("divide", _full((4, 1, 1), 1.0, "o"), x),                   # 1 / x
    lambda x: call("multiply", x, _full((4, 1, 1), 2.0, "two")),
    lambda x: call("multiply", x, Constant(np.array([1, 1, 2, 1], "float32").reshape(4, 1, 1), "mixed")),
    lambda x: call("add", x, _full((2, 1, 4, 5, 6), 0.0, "widen")),            # broadcasts x to rank 5
    lambda x: call("multiply", _pooled(x), _full((1, 4, 5, 6), 1.0, "ones")),  # [1,4,1,1] grows
], ids=["zero_minus", "one_over", "times_two", "mixed", "widen", "grow"])
def test_non_neutral_arithmetic_kept(make):
    x = var("x", (1, 4, 5, 6))
    before = Graph([x], [make(call("sigmoid", x))])
    after = simplify(before)
    assert op_names(after) == op_names(before)
    assert_equivalent(before, after)


def test_output_is_not_replaced_by_an_input():
    x = var("x", (2, 8))
    before = Graph([x], [call("multiply", x, Constant(np.ones((8,), "float32"), "one")),
                         call("reshape", call("reshape", x, newshape=(16,)), newshape=(2, 8))])
    after = simplify(before)
    assert [o.op for o in after.outputs] == ["multiply", "reshape"]
    assert after.outputs[1].inputs[0] is x             # the chain still collapses to one reshape
    assert_equivalent(before, after)


def test_integer_neutral_elements():
    x = var("x", (3, 4), "int32")
    one = Constant(np.ones((4,), "int32"), "one")
    zero = Constant(np.zeros((4,), "int32"), "zero")
    r = call("abs", x)
    before = Graph([x], [call("add", call("divide", call("multiply", r, one), one), zero)])
    after = simplify(before)
    assert_same_graph(after, Graph([x], [call("abs", x)]))


def test_elementwise_ops_sink_below_the_reshape_of_a_dense():
    """A rank-3 MatMul imports as reshape(dense(reshape(x))): the bias add, a GELU-like chain of
    scalar ops and the residual add move below the reshape, onto the dense's 2-D output, where
    FuseOps makes them its epilogue; a constant that varies along a reshaped axis stops them."""
    from pass_helpers import const

    x = var("x", (1, 4, 8))
    w = const((6, 8), "w")
    h = call("reshape", call("nn.dense", call("reshape", x, newshape=(4, 8)), w), newshape=(1, 4, 6))
    h = call("add", h, const((6,), "bias", 1))
    g = call("multiply", call("erf", call("multiply", h, Constant(np.float32(0.7), "s"))), h)
    r = var("r", (1, 4, 6))
    stop = call("add", call("add", g, r), const((4, 1), "rows", 2))
    before = Graph([x, r], [stop])
    after = simplify(before)
    assert_equivalent(before, after)
    # x reshaped, dense, bias add, GELU-like chain, r reshaped to [4, 6], residual add, then the
    # one reshape back before the row constant
    assert op_names(after) == ["reshape", "nn.dense", "add", "multiply", "erf", "multiply", "reshape", "add",
                               "reshape", "add"]
    dense_consumers = [c for c in after.calls() if any(getattr(i, "op", None) == "nn.dense" for i in c.inputs)]
    assert [c.op for c in dense_consumers] == ["add"] and dense_consumers[0].shape == (4, 6)
    last = after.outputs[0]
    assert last.op == "add" and last.inputs[0].op == "reshape"   # the row constant keeps its reshape


def test_a_dequantize_sinks_below_the_reshape_of_an_int32_dense():
    """A dynamically quantized MatMul: reshape(int32 product) -> cast to float32 -> multiply by a
    run-time scalar scale (computed from the data) -> bias add: the cast (a change of dtype), the
    computed scalar's multiply and the add all move below the reshape, onto the product's 2-D
    output, where FuseOps makes them its epilogue."""
    from pass_helpers import const

    x = var("x", (4, 8), "int32")
    s = var("s", (), "float32")
    w = Constant(np.arange(48, dtype=np.int32).reshape(6, 8) % 7 - 3, "w")
    product = call("nn.dense", x, w)
    h = call("cast", call("reshape", product, newshape=(1, 4, 6)), dtype="float32")
    out = call("add", call("multiply", h, call("abs", s)), const((6,), "bias", 1))
    before = Graph([x, s], [out])
    after = simplify(before)
    assert_equivalent(before, after)
    assert op_names(after) == ["nn.dense", "cast", "abs", "multiply", "add", "reshape"]
    assert after.outputs[0].op == "reshape" and after.outputs[0].inputs[0].shape == (4, 6)
