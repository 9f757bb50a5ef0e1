"""GeluFusion: the erf GELU subgraph becomes one nn.gelu; outputs unchanged (interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from tvmc.ops.interpreter import run_graph
from tvmc.graph.ir import Constant, Graph, TensorType, Var
from tvmc.ops.registry import make_call
from tvmc.passes import PassContext, run_passes


def _c(v):
    return Constant(np.array(v, np.float32))


def _gelu_graph(order: int, erf_by_divide: bool):
    x0 = Var("x", TensorType((4, 8)))
    w = Constant(np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32), "w")
    x = make_call("nn.dense", [x0, w])
    z = make_call("divide", [x, _c(np.sqrt(2.0))]) if erf_by_divide else \
        make_call("multiply", [_c(1 / np.sqrt(2.0)), x])
    one_plus = make_call("add", [_c(1.0), make_call("erf", [z])])
    half = make_call("multiply", [x, _c(0.5)])
    out = make_call("multiply", [half, one_plus] if order == 0 else [one_plus, half])
    return Graph([x0], [out])


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("erf_by_divide", [True, False])
def test_gelu_subgraph_becomes_one_op(order, erf_by_divide):
    g = _gelu_graph(order, erf_by_divide)
    after = run_passes(g, ["GeluFusion", "DeadCodeElimination"], PassContext(opt_level=3))
    ops = [c.op for c in after.calls()]
    assert ops == ["nn.dense", "nn.gelu"]
    x = {"x": np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32) * 3}
    np.testing.assert_allclose(run_graph(after, x)[0], run_graph(g, x)[0], rtol=1e-5, atol=1e-6)


def test_other_constants_are_left_alone():
    x = Var("x", TensorType((3,)))
    out = make_call("multiply", [make_call("multiply", [x, _c(0.4)]),
                                 make_call("add", [_c(1.0), make_call("erf", [make_call("divide", [x, _c(1.5)])])])])
    after = run_passes(Graph([x], [out]), ["GeluFusion"], PassContext(opt_level=3))
    assert "nn.gelu" not in [c.op for c in after.calls()]


def test_gelu_fuses_into_the_dense_epilogue():
    from tvmc.graph.ir import Call, Function

    g = run_passes(_gelu_graph(0, True), ["GeluFusion", "DeadCodeElimination", "FuseOps"], PassContext(opt_level=3))
    fns = [c.op.name for c in g.calls() if isinstance(c.op, Function)]
    assert fns == ["fused_nn_dense_nn_gelu"]
    assert all(isinstance(c, Call) for c in g.calls())
