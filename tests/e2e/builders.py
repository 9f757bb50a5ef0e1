"""ONNX models built with onnx.helper and seeded random weights, for end-to-end tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, arr, prefix="w"):
        nm = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), nm))
        return nm

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower() + "_")
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn_relu(self, x, cin, cout, k, stride, relu=True):
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        y = self.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        scale = self.const(self.rng.uniform(0.5, 1.5, cout))
        bias = self.const(self.rng.standard_normal(cout) * 0.1)
        mean = self.const(self.rng.standard_normal(cout) * 0.1)
        var = self.const(self.rng.uniform(0.5, 1.5, cout))
        y = self.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        return self.node("Relu", [y]) if relu else y

    def model(self, inputs, outputs, name, opset=13):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        # IR version 8 keeps the file readable by onnxruntime releases older than this onnx
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        onnx.checker.check_model(m)
        return m


def resnet_style_cnn(seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """A small ResNet: 3x3 stem conv, max pool, two basic blocks (one with stride 2 and a 1x1
    projection shortcut), BN + ReLU, residual Adds, global average pool, Flatten, Gemm.
    Input 'input' [1, 3, size, size]; output 'logits' [1, 10]."""
    b = _Builder(seed)
    x = b.conv_bn_relu("input", 3, 16, 3, 1)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # block 1: identity shortcut
    y = b.conv_bn_relu(x, 16, 16, 3, 1)
    y = b.conv_bn_relu(y, 16, 16, 3, 1, relu=False)
    x = b.node("Relu", [b.node("Add", [x, y])])
    # block 2: stride 2, 1x1 projection
    y = b.conv_bn_relu(x, 16, 32, 3, 2)
    y = b.conv_bn_relu(y, 32, 32, 3, 1, relu=False)
    sc = b.conv_bn_relu(x, 16, 32, 1, 2, relu=False)
    x = b.node("Relu", [b.node("Add", [sc, y])])
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    w = b.const(b.rng.standard_normal((10, 32)) * 0.2)
    bias = b.const(b.rng.standard_normal(10) * 0.1)
    out = b.node("Gemm", [x, w, bias], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], "resnet_style")


def mlp(seed: int = 0, batch: int = 4, sizes=(64, 128, 96, 10)) -> onnx.ModelProto:
    """An MLP: MatMul + Add + Relu layers, a Gemm, then Tanh and Sigmoid heads summed.
    Input 'x' [batch, sizes[0]]; output 'y' [batch, sizes[-1]]."""
    b = _Builder(seed)
    x = "x"
    for cin, cout in zip(sizes[:-2], sizes[1:-1]):
        w = b.const(b.rng.standard_normal((cin, cout)) / np.sqrt(cin))
        x = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w]), b.const(b.rng.standard_normal(cout) * 0.1)])])
    w = b.const(b.rng.standard_normal((sizes[-1], sizes[-2])) / np.sqrt(sizes[-2]))
    x = b.node("Gemm", [x, w, b.const(b.rng.standard_normal(sizes[-1]) * 0.1)], transB=1, alpha=0.5, beta=2.0)
    y = b.node("Add", [b.node("Tanh", [x]), b.node("Sigmoid", [x])])
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])], "mlp")
