"""FoldQuantizedChains: the float ops between a dequantize and a quantize become integer ones
(qnn.rescale and integer clips for affine chains and clamps, the movement op itself on the 8-bit
tensor for max pooling and reshapes); outputs the float chain's within one unit (exact for the
movement ops)."""

import numpy as np
import pytest

from pass_helpers import call, op_names, run_graph, var
from pass_helpers import dequantize as _dq
from pass_helpers import qconst as _c
from pass_helpers import quantize as _q
from tvmc.graph.ir import Graph
from tvmc.passes import PassContext, run_passes


def _fold(graph):
    return run_passes(graph, ["FoldQuantizedChains"], PassContext(opt_level=1))


def _inputs(seed=0, shape=(1, 8, 6, 6)):
    """Standard-normal data with edge values: zeros and magnitudes that saturate the quantizers."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 2
    flat = x.reshape(-1)
    flat[:4] = [0.0, -0.0, 1e4, -1e4]
    return {"x": x}


def _units_apart(before, after, inputs):
    worst = 0
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs), strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        worst = max(worst, int(np.abs(g.astype(np.int64) - r.astype(np.int64)).max()))
    return worst


@pytest.mark.parametrize("out_dtype,zp", [("uint8", np.uint8(3)), ("int8", np.int8(-5))])
def test_batch_norm_and_relu_between_quantizations_become_rescale(out_dtype, zp):
    """quantize(relu(dq(q) * a + b)) with per-channel a of both signs and a subtract / divide in
    the chain -> clip(qnn.rescale(q)); within one unit of the float chain, mostly exact."""
    rng = np.random.default_rng(1)
    x = var("x", (1, 8, 6, 6))
    q = _q(x, 0.03, np.uint8(120), "xq")
    a = (rng.standard_normal((8, 1, 1)) * 1.5).astype(np.float32)
    b = (rng.standard_normal((8, 1, 1)) * 0.5).astype(np.float32)
    y = call("add", call("multiply", _dq(q, 0.03, np.uint8(120), "xd"), _c(a, "a")), _c(b, "b"))
    y = call("divide", call("subtract", _c(np.float32(0.25), "c"), y), _c(np.float32(0.5), "d"))
    out = _q(call("nn.relu", y), 0.02, zp, "yq", out_dtype)
    before = Graph([x], [out])
    after = _fold(before)
    ops = op_names(after)
    assert "qnn.rescale" in ops and "clip" in ops
    assert not {"multiply", "add", "subtract", "divide", "nn.relu", "qnn.dequantize"} & set(ops)
    for seed in range(3):
        inputs = _inputs(seed)
        assert _units_apart(before, after, inputs) <= 1
        r, g = run_graph(before, inputs)[0], run_graph(after, inputs)[0]
        assert (r == g).mean() > 0.98
        assert (g >= zp).all() and (g == zp).any()  # the relu's bound, reached


def test_max_pool_flatten_and_concat_run_on_the_quantized_tensor():
    """quantize(max_pool(dq(q))) and quantize(reshape(dq(q))) with q's own scale and zero point
    -> the op on q (exact); concatenate of two such dequantizes -> the concatenation of the
    8-bit tensors; quantize(dq(q)) with q's parameters -> q."""
    x = var("x", (1, 8, 6, 6))
    q = _q(x, 0.05, np.uint8(10), "xq")
    pooled = _q(call("nn.max_pool2d", _dq(q, 0.05, np.uint8(10), "d1"), pool_size=(3, 3), strides=(2, 2),
                     padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=False), 0.05, np.uint8(10), "p")
    flat = _q(call("reshape", _dq(pooled, 0.05, np.uint8(10), "d2"), newshape=(1, 72)), 0.05, np.uint8(10), "f")
    cat = _q(call("concatenate", _dq(q, 0.05, np.uint8(10), "d3"), _dq(q, 0.05, np.uint8(10), "d4"), axis=1),
             0.05, np.uint8(10), "c")
    same = _q(_dq(q, 0.05, np.uint8(10), "d5"), 0.05, np.uint8(10), "s")
    before = Graph([x], [flat, cat, same])
    after = _fold(before)
    ops = op_names(after)
    assert ops.count("qnn.quantize") == 1 and "qnn.dequantize" not in ops, ops
    assert {"nn.max_pool2d", "reshape", "concatenate"} <= set(ops)
    inputs = _inputs(2)
    for r, g in zip(run_graph(before, inputs), run_graph(after, inputs), strict=True):
        np.testing.assert_array_equal(g, r)


def test_chains_that_do_not_match_stay_float():
    """A float value with a second user, a max pool quantized with another scale, and a
    per-tensor chain on a non-constant scale stay float."""
    x, s = var("x", (1, 8, 6, 6)), var("s", (), "float32")
    q = _q(x, 0.05, np.uint8(10), "xq")
    bn = call("multiply", _dq(q, 0.05, np.uint8(10), "d1"), _c(np.float32(2.0), "a"))
    pool = call("nn.max_pool2d", _dq(q, 0.05, np.uint8(10), "d2"), pool_size=(2, 2), strides=(2, 2),
                padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False)
    runtime = call("multiply", _dq(q, 0.05, np.uint8(10), "d3"), s)
    before = Graph([x, s], [_q(bn, 0.1, np.uint8(0), "a"), bn, _q(pool, 0.07, np.uint8(10), "b"),
                            _q(runtime, 0.1, np.uint8(0), "c")])
    after = _fold(before)
    assert op_names(after) == op_names(before)


def test_pipeline_folds_batch_norm_after_integer_conv():
    """At -O1 FakeQuantizationToInteger then FoldQuantizedChains: a QDQ conv with an unfolded
    BatchNorm between quantizations is qnn.conv2d -> qnn.requantize -> qnn.rescale, no float op
    left, within one unit of the float chain."""
    rng = np.random.default_rng(3)
    x = var("x", (1, 3, 6, 6))
    xq = _q(x, 0.02, np.uint8(128), "xq")
    w = _c(rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8), "w")
    conv = call("nn.conv2d", _dq(xq, 0.02, np.uint8(128), "xd"), _dq(w, 0.005, np.int8(0), "wd"), strides=(1, 1),
                padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    yq = _q(conv, 0.04, np.uint8(110), "yq")
    bn = call("add", call("multiply", _dq(yq, 0.04, np.uint8(110), "yd"),
                          _c((rng.random((8, 1, 1)) + 0.5).astype(np.float32), "g")),
              _c((rng.standard_normal((8, 1, 1)) * 0.3).astype(np.float32), "beta"))
    before = Graph([x], [_q(bn, 0.03, np.uint8(0), "zq")])
    after = run_passes(before, ["FakeQuantizationToInteger", "FoldQuantizedChains", "DeadCodeElimination"],
                       PassContext(opt_level=1))
    ops = op_names(after)
    assert ops == ["qnn.quantize", "qnn.conv2d", "qnn.requantize", "qnn.rescale"], ops
    assert _units_apart(before, after, _inputs(4, (1, 3, 6, 6))) <= 1


def test_residual_add_becomes_qnn_add():
    """quantize(relu(dq(a) + dq(b))) with two quantizations of the summands -> clip(qnn.add(a, b)),
    within one unit of the float chain (saturating values included)."""
    x = var("x", (1, 8, 6, 6))
    a = _q(x, 0.03, np.uint8(120), "aq")
    b = _q(call("multiply", x, _c(np.float32(-0.7), "m")), 0.05, np.int8(4), "bq", "int8")
    y = call("add", _dq(a, 0.03, np.uint8(120), "ad"), _dq(b, 0.05, np.int8(4), "bd"))
    before = Graph([x], [_q(call("nn.relu", y), 0.02, np.uint8(9), "yq")])
    after = _fold(before)
    ops = op_names(after)
    assert "qnn.add" in ops and "clip" in ops and "add" not in ops and "qnn.dequantize" not in ops, ops
    for seed in range(3):
        assert _units_apart(before, after, _inputs(seed)) <= 1
