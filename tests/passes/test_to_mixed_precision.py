"""ToMixedPrecision: the matrix operators and what follows them in float16, the rest in float32,
graph inputs and outputs unchanged; the meaning kept within float16 tolerances."""

import numpy as np
import pytest

from pass_helpers import call, const, conv, random_inputs, snapshot, var
from tvmc.errors import PassError
from tvmc.ops.interpreter import run_graph
from tvmc.graph.ir import Call, Constant, Graph
from tvmc.passes import PassContext, run_passes


def mixed(graph, **options):
    config = {f"ToMixedPrecision.{k}": v for k, v in options.items()}
    return run_passes(graph, ["ToMixedPrecision", "FoldConstant"], PassContext(config=config))


def dtypes(graph) -> dict:
    """{op: dtype} of the non-cast calls, the last of each op."""
    return {c.op: c.dtype for c in graph.calls() if c.op != "cast"}


def cnn():
    x = var("x", (1, 3, 8, 8))
    y = call("nn.relu", call("add", conv(x, 4, "c1"), const((4, 1, 1), "b1", 1)))
    y = call("nn.max_pool2d", y, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=0,
             dilation=(1, 1))
    y = call("reshape", y, newshape=(1, 64))
    y = call("nn.dense", y, const((10, 64), "w2", 2))
    return Graph([x], [call("nn.softmax", y, axis=1)])


def test_matrix_ops_and_followers_run_in_float16_the_rest_in_float32():
    before = cnn()
    snap = snapshot(before)
    after = mixed(before)
    assert snapshot(before) == snap  # the input graph is untouched
    kinds = dtypes(after)
    for op in ("nn.conv2d", "add", "nn.relu", "nn.max_pool2d", "reshape", "nn.dense"):
        assert kinds[op] == "float16", op
    assert kinds["nn.softmax"] == "float32"
    assert [v.dtype for v in after.inputs] == ["float32"] and [o.dtype for o in after.outputs] == ["float32"]
    # the weights were folded into float16 constants: no cast of a constant is left
    for c in after.calls():
        if c.op in ("nn.conv2d", "nn.dense"):
            assert c.inputs[1].dtype == "float16" and isinstance(c.inputs[1], Constant)
        if c.op == "cast":
            assert not isinstance(c.inputs[0], Constant)


def test_outputs_stay_within_float16_tolerance_of_the_float32_graph():
    before = cnn()
    inputs = random_inputs(before, edge_values=False)
    ref, = run_graph(before, inputs)
    got, = run_graph(mixed(before), inputs)
    assert got.dtype == ref.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=2e-2 * float(np.abs(ref).max()))


def test_ops_option_chooses_the_converted_operators():
    after = mixed(cnn(), ops="nn.dense")
    kinds = dtypes(after)
    assert kinds["nn.conv2d"] == "float32" and kinds["nn.relu"] == "float32" and kinds["nn.dense"] == "float16"


def test_a_graph_output_of_a_float16_op_is_cast_back():
    x = var("x", (2, 16))
    g = Graph([x], [call("nn.relu", call("nn.dense", x, const((8, 16), "w")))])
    after = mixed(g)
    out = after.outputs[0]
    assert out.dtype == "float32" and isinstance(out, Call) and out.op == "cast"


@pytest.mark.parametrize("options,match", [({"dtype": "bfloat16"}, "supported float16"),
                                           ({"ops": "nn.dense,nn.nonsense"}, "unknown operator 'nn.nonsense'")])
def test_bad_options_are_refused(options, match):
    with pytest.raises(PassError, match=match):
        mixed(cnn(), **options)
