"""FakeQuantizationToInteger: QDQ chains around conv2d / matmul become qnn integer ops whose
outputs are the float chain's within one unit (requantize rounds once, the float chain twice)."""

import numpy as np

from pass_helpers import call, op_names, run_graph, var
from pass_helpers import dequantize as _dq
from pass_helpers import qconst as _c
from pass_helpers import quantize as _q
from tvmc.graph.ir import Graph
from tvmc.passes import PassContext, run_passes


def _run(graph, x):
    return run_graph(graph, {"x": x})


def _fq(graph):
    return run_passes(graph, ["FakeQuantizationToInteger"], PassContext(opt_level=1))


def test_conv_and_matmul_chains_become_integer():
    """quantize(conv2d(dq(x_q), dq(W_q)) + b) -> requantize(qnn.conv2d + int32 bias), with per-channel
    weight scales; quantize(matmul(dq(y_q), dq(W2_q))) with a constant 2-D weight -> qnn.dense on the
    transposed weight between reshapes. Outputs within one unit of the float chain's."""
    rng = np.random.default_rng(0)
    x = var("x", (1, 3, 6, 6))
    xq = _q(x, 0.02, np.uint8(128), "xq")
    w = _c(rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "w")
    wd = call("qnn.dequantize", w, _c((rng.random((4, 1, 1, 1)) * 0.01 + 0.001).astype(np.float32), "w_s"),
              _c(np.int8(0), "w_z"), out_dtype="float32")
    y = call("nn.conv2d", _dq(xq, 0.02, np.uint8(128), "xd"), wd, strides=(1, 1), padding=(1, 1, 1, 1),
             dilation=(1, 1), groups=1)
    y = call("add", y, _c((rng.standard_normal((4, 1, 1)) * 0.1).astype(np.float32), "b"))
    yq = _q(y, 0.05, np.uint8(100), "yq")
    flat = _dq(call("reshape", yq, newshape=(1, 4, 36)), 0.05, np.uint8(100), "yd")  # a quantized Flatten
    w2 = _c(rng.integers(-127, 128, (36, 5)).astype(np.int8), "w2")
    z = call("nn.matmul", flat, _dq(w2, 0.004, np.int8(0), "w2d"))
    before = Graph([x], [yq, _q(z, 0.1, np.int8(0), "zq", "int8")])
    after = _fq(before)
    ops = op_names(after)
    assert {"qnn.conv2d", "qnn.dense", "qnn.requantize"} <= set(ops)
    assert "nn.conv2d" not in ops and "nn.matmul" not in ops
    data = rng.standard_normal((1, 3, 6, 6)).astype(np.float32) * 2
    for r, g in zip(_run(before, data), _run(after, data)):
        assert g.dtype == r.dtype and g.shape == r.shape
        assert np.abs(g.astype(np.int64) - r.astype(np.int64)).max() <= 1
        assert (g == r).mean() > 0.9  # mostly exact: one unit only near a rounding boundary


def test_chains_that_do_not_match_stay_float():
    """A conv whose float output has a second user, and a weight that is not a constant dequantize,
    stay as they were."""
    rng = np.random.default_rng(1)
    x, wv = var("x", (1, 2, 4, 4)), var("wv", (3, 2, 1, 1), "int8")
    xd = _dq(_q(x, 0.03, np.uint8(128), "xq"), 0.03, np.uint8(128), "xd")
    w = _dq(_c(rng.integers(-127, 128, (3, 2, 1, 1)).astype(np.int8), "w"), 0.01, np.int8(0), "wd")
    conv_attrs = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    shared = call("nn.conv2d", xd, w, **conv_attrs)
    runtime_weight = call("nn.conv2d", xd, _dq(wv, 0.01, np.int8(0), "wvd"), **conv_attrs)
    before = Graph([x, wv], [_q(shared, 0.05, np.uint8(0), "a"), shared, _q(runtime_weight, 0.05, np.uint8(0), "b")])
    after = _fq(before)
    assert op_names(after).count("nn.conv2d") == 2 and "qnn.conv2d" not in op_names(after)


def test_a_run_time_scale_deep_in_a_shared_graph_is_seen_as_such_at_once():
    """A quantize whose scale is computed at run time (DynamicQuantizeLinear) from a graph that is
    deep (3000 nodes, below Python's recursion limit) and shares nodes (60 doublings y + y: 2^60
    paths) is left alone, each node looked at once."""
    x = var("x", ())
    y = x
    for _ in range(3000):
        y = call("nn.relu", y)
    for _ in range(60):
        y = call("add", y, y)
    scale = call("add", y, _c(np.float32(1.0), "one"))
    q = call("qnn.quantize", var("v", (4,)), scale, _c(np.uint8(0), "z"), out_dtype="uint8")
    before = Graph([x, q.inputs[0]], [q])
    assert op_names(_fq(before)) == op_names(before)
