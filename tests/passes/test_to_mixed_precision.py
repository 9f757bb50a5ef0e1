"""ToMixedPrecision: the matrix operators and what follows them in float16 or bfloat16, the rest in
float32, graph inputs and outputs unchanged; the meaning kept within that dtype's tolerance."""

import numpy as np
import pytest

from pass_helpers import call, const, conv, random_inputs, snapshot, var
from tvmc.errors import PassError
from tvmc.ops.interpreter import run_graph
from tvmc.graph.ir import Call, Constant, Graph
from tvmc.passes import PassContext, run_passes


DTYPES = ("float16", "bfloat16")
# of the float32 graph's largest output magnitude, as tests/e2e/test_mixed_precision.py's ATOL
# (bfloat16: 16 of its unit roundoffs 2**-8; this graph measures up to 6.7 of them on other
# input seeds, its softmax amplifying the logits' rounding)
TOLERANCE = {"float16": 2e-2, "bfloat16": 16 * 2.0**-8}


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


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_ops_and_followers_run_in_the_low_dtype_the_rest_in_float32(dtype):
    before = cnn()
    snap = snapshot(before)
    after = mixed(before, dtype=dtype)
    assert snapshot(before) == snap  # the input graph is untouched
    kinds = dtypes(after)
    for op in ("nn.conv2d", "add", "nn.relu", "nn.max_pool2d", "reshape", "nn.dense"):
        assert kinds[op] == dtype, op
    assert kinds["nn.softmax"] == "float32"
    assert [v.dtype for v in after.inputs] == ["float32"] and [o.dtype for o in after.outputs] == ["float32"]
    # the weights were folded into constants of the low dtype: no cast of a constant is left
    for c in after.calls():
        if c.op in ("nn.conv2d", "nn.dense"):
            w = c.inputs[1]
            assert w.dtype == dtype and isinstance(w, Constant) and w.value.dtype == np.dtype(dtype)
        if c.op == "cast":
            assert not isinstance(c.inputs[0], Constant)


@pytest.mark.parametrize("dtype", DTYPES)
def test_outputs_stay_within_the_low_dtype_tolerance_of_the_float32_graph(dtype):
    before = cnn()
    inputs = random_inputs(before, edge_values=False)
    ref, = run_graph(before, inputs)
    got, = run_graph(mixed(before, dtype=dtype), inputs)
    assert got.dtype == ref.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=TOLERANCE[dtype] * float(np.abs(ref).max()))
    assert not np.array_equal(got, ref)  # the graph did change its numerics


def test_bfloat16_weights_are_the_float32_ones_rounded_to_nearest_even():
    """FoldConstant casts the weights with ml_dtypes' bfloat16 (round to nearest even), which is
    how every code generator rounds too (tests/ops/test_bfloat16.py)."""
    before, after = cnn(), mixed(cnn(), dtype="bfloat16")
    w32 = next(c.inputs[1] for c in before.calls() if c.op == "nn.dense").value
    w16 = next(c.inputs[1] for c in after.calls() if c.op == "nn.dense").value
    np.testing.assert_array_equal(w16.view(np.uint16), w32.astype("bfloat16").view(np.uint16))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_option_chooses_the_converted_operators(dtype):
    after = mixed(cnn(), ops="nn.dense", dtype=dtype)
    kinds = dtypes(after)
    assert kinds["nn.conv2d"] == "float32" and kinds["nn.relu"] == "float32" and kinds["nn.dense"] == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_graph_output_of_a_low_dtype_op_is_cast_back(dtype):
    x = var("x", (2, 16))
    g = Graph([x], [call("nn.relu", call("nn.dense", x, const((8, 16), "w")))])
    after = mixed(g, dtype=dtype)
    out = after.outputs[0]
    assert out.dtype == "float32" and isinstance(out, Call) and out.op == "cast"


def test_a_float16_model_is_left_in_float16_under_bfloat16():
    x = var("x", (2, 16), "float16")
    w = Constant(np.ones((8, 16), np.float16), "w")
    g = Graph([x], [call("nn.relu", call("nn.dense", x, w))])
    assert dtypes(mixed(g, dtype="bfloat16")) == {"nn.dense": "float16", "nn.relu": "float16"}


@pytest.mark.parametrize("options,match", [({"dtype": "float8_e4m3fn"}, "supported float16, bfloat16"),
                                           ({"ops": "nn.dense,nn.nonsense"}, "unknown operator 'nn.nonsense'")])
def test_bad_options_are_refused(options, match):
    with pytest.raises(PassError, match=match):
        mixed(cnn(), **options)
