"""ONNX import of the quantized operators as qnn ops (tvmc/frontend/onnx/quantization.py): the
8-bit weights stay 8-bit constants, and bad quantization parameters are one-line model errors
naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.errors import ModelError
from tvmc.frontend.onnx import from_onnx
from tvmc.graph.ir import Call, Constant, post_order


def _qlinear_conv(w_scale=None, w_zp=None, x_zp=None, bias=True):
    """QLinearConv of a [1, 3, 6, 6] uint8 input with a constant int8 [4, 3, 3, 3] weight."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.float32(0.02), "x_scale"),
             numpy_helper.from_array(np.uint8(120) if x_zp is None else x_zp, "x_zp"),
             numpy_helper.from_array(np.full(4, 0.003, np.float32) if w_scale is None else w_scale, "w_scale"),
             numpy_helper.from_array(np.int8(0) if w_zp is None else w_zp, "w_zp"),
             numpy_helper.from_array(np.float32(0.05), "y_scale"),
             numpy_helper.from_array(np.uint8(128), "y_zp"),
             numpy_helper.from_array(rng.integers(-500, 500, 4).astype(np.int32), "b")]
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"]
                            + (["b"] if bias else []), ["y"], name="qconv", pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _calls(graph):
    return [e for e in post_order(graph.outputs) if isinstance(e, Call)]


def test_qlinear_conv_imports_as_qnn_conv2d_with_int8_weight():
    g = from_onnx(_qlinear_conv())
    calls = {c.op: c for c in _calls(g)}
    assert {"qnn.conv2d", "add", "qnn.requantize"} <= set(calls)
    assert not {"nn.conv2d", "cast"} & set(calls)
    weight = calls["qnn.conv2d"].inputs[1]
    assert isinstance(weight, Constant) and weight.value.dtype == np.int8 and weight.shape == (4, 3, 3, 3)
    assert calls["qnn.requantize"].attrs["out_dtype"] == "uint8"
    assert calls["qnn.requantize"].inputs[1].shape == (4,)  # per-channel scale x_scale * w_scale / y_scale


def test_zero_point_outside_its_operand_range_is_a_model_error():
    # an int32 weight zero point of 300 for an int8 weight
    with pytest.raises(ModelError, match=r"node 'qconv' \(QLinearConv\): w_zero_point 300 is outside int8's range"):
        from_onnx(_qlinear_conv(w_zp=np.int32(300)))


def test_per_axis_scale_of_wrong_length_is_a_model_error():
    with pytest.raises(ModelError, match=r"node 'qconv' \(QLinearConv\): w_scale .*\[5\].* must be a scalar or \[4\]"):
        from_onnx(_qlinear_conv(w_scale=np.full(5, 0.01, np.float32)))


def test_per_channel_zero_point_of_wrong_length_is_a_model_error():
    with pytest.raises(ModelError, match=r"node 'qconv' \(QLinearConv\): w_zero_point .* must be a scalar or \[4\]"):
        from_onnx(_qlinear_conv(w_zp=np.zeros(3, np.int8)))


def test_matmul_integer_with_constant_weight_runs_as_qnn_dense_on_int8():
    rng = np.random.default_rng(1)
    b = rng.integers(-128, 128, (16, 8)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zp"], ["y"], name="mmi")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 5, 16]),
                                            helper.make_tensor_value_info("a_zp", TensorProto.UINT8, [])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 5, 8])],
                              [numpy_helper.from_array(b, "b")])
    g = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))
    dense = next(c for c in _calls(g) if c.op == "qnn.dense")
    assert dense.inputs[1].value.dtype == np.int8 and dense.inputs[1].shape == (8, 16)
    np.testing.assert_array_equal(dense.inputs[1].value, b.T)
    assert not isinstance(dense.inputs[2], Constant)  # the run-time zero point, cast to int32 in the graph
