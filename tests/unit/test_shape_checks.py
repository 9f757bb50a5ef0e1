"""Shapes are checked at compile time (graph IR type checking): negative dimensions, tensors
beyond MAX_TENSOR_BYTES and empty tensors where an op cannot take them are model errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvmc.errors import ModelError
from tvmc.frontend.onnx import from_onnx
from tvmc.graph.ir import MAX_TENSOR_BYTES, TensorType, Var
from tvmc.ops.registry import make_call


def _model(op, shape, out_dtype=TensorProto.FLOAT, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n1", **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", out_dtype, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)   # the checker wants the output's type complete


@pytest.mark.parametrize("shape,message", [
    ([1, -4], "graph input 'x': shape [1,-4] has a negative dimension"),
    ([2 ** 32, 2 ** 32], f"is 73786976294838206464 bytes, more than the limit of {MAX_TENSOR_BYTES} bytes"),
    ([2 ** 62, 4], "more than the limit"),
])
def test_bad_input_shapes_are_model_errors(shape, message):
    with pytest.raises(ModelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_onnx(_model("Relu", shape))


@pytest.mark.parametrize("op,shape,attrs", [
    ("GlobalAveragePool", [1, 2, 0, 0], {}), ("GlobalMaxPool", [1, 0, 3, 3], {}), ("LRN", [1, 0, 3, 3], {"size": 3}),
    ("Softmax", [2, 0], {"axis": 1}),
])
def test_empty_tensor_where_the_op_cannot_take_it(op, shape, attrs):
    with pytest.raises(ModelError, match=r"node 'n1' \(nn\.\w+\): input 0 has shape .*with a dimension of 0"):
        from_onnx(_model(op, shape, **attrs))


@pytest.mark.parametrize("op,shape,attrs", [("Relu", [0, 4], {}), ("Transpose", [0, 3, 3], {}),
                                           ("ReduceSum", [2, 0], {"keepdims": 0})])
def test_empty_tensor_where_the_op_takes_it(op, shape, attrs):
    graph = from_onnx(_model(op, shape, **attrs))
    assert 0 in graph.inputs[0].shape


def test_type_rules_that_overflow_are_model_errors():
    x = Var("x", TensorType((1 << 10, 1 << 10)))
    with pytest.raises(ModelError, match=r"node 'r' \(broadcast_to\): shape .* more than the limit"):
        make_call("broadcast_to", [x], {"shape": (1 << 30, 1 << 10, 1 << 10)}, name="r")


def test_tensor_type_checks():
    with pytest.raises(ValueError, match="negative"):
        TensorType((3, -1))
    with pytest.raises(ValueError, match="not an integer"):
        TensorType((3, 1.5))
    assert TensorType((np.int64(3), 0)).size == 0
