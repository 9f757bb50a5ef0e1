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
    b.node("Gemm", [x, w, bias], transB=1)
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
    b.node("Add", [b.node("Tanh", [x]), b.node("Sigmoid", [x])])
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])], "mlp")


def bert_encoder(seed: int = 0, seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 2,
                 vocab: int = 1000, batch: int = 1) -> onnx.ModelProto:
    """A BERT-style encoder (opset 17): token + position embeddings (Gather on int64 ids),
    LayerNormalization; per layer Q/K/V MatMul + Add, reshape/transpose to heads, batched MatMul
    scaled by 1/sqrt(head dim) plus the attention-mask bias (Where on mask == 0: -1e9), Softmax,
    context MatMul, output projection, residual, LayerNormalization; a GELU (Erf) feed-forward
    of 4 * hidden, residual, LayerNormalization. Layer 1 (the second) writes its normalizations
    as ReduceMean/Sub/Pow/Sqrt/Div, the others as LayerNormalization.
    Inputs 'input_ids' and 'attention_mask' int64 [batch, seq]; output 'last_hidden_state'
    float32 [batch, seq, hidden]."""
    b = _Builder(seed)
    dh = hidden // heads

    def i64(arr, prefix="i"):
        nm = b.name(prefix)
        b.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.int64), nm))
        return nm

    def dense(x, cin, cout):
        w = b.const(b.rng.standard_normal((cin, cout)) / np.sqrt(cin))
        return b.node("Add", [b.node("MatMul", [x, w]), b.const(b.rng.standard_normal(cout) * 0.1)])

    def layer_norm(x, decomposed):
        gamma, beta = b.const(b.rng.uniform(0.5, 1.5, hidden)), b.const(b.rng.standard_normal(hidden) * 0.1)
        if not decomposed:
            return b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        mean = b.node("ReduceMean", [x], axes=[-1])
        d = b.node("Sub", [x, mean])
        var = b.node("ReduceMean", [b.node("Pow", [d, b.const(2.0)])], axes=[-1])
        y = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [var, b.const(1e-5)])])])
        return b.node("Add", [b.node("Mul", [y, gamma]), beta])

    def heads_of(x, perm):
        return b.node("Transpose", [b.node("Reshape", [x, i64([batch, seq, heads, dh])])], perm=perm)

    tok = b.node("Gather", [b.const(b.rng.standard_normal((vocab, hidden))), "input_ids"])
    pos = b.node("Gather", [b.const(b.rng.standard_normal((seq, hidden)) * 0.5), i64(np.arange(seq)[None, :])])
    x = layer_norm(b.node("Add", [tok, pos]), decomposed=False)
    pad = b.node("Equal", ["attention_mask", i64(0)])
    pad = b.node("Unsqueeze", [pad, i64([1, 2])])  # [batch, 1, 1, seq]
    mask_bias = b.node("Where", [pad, b.const(-1e9), b.const(0.0)])
    for layer in range(layers):
        decomposed = layer == 1
        q = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(dense(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
        scores = b.node("Div", [b.node("MatMul", [q, k]), b.const(np.sqrt(dh))])
        probs = b.node("Softmax", [b.node("Add", [scores, mask_bias])], axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, i64([batch, seq, hidden])])
        x = layer_norm(b.node("Add", [x, dense(ctx, hidden, hidden)]), decomposed)
        h = dense(x, hidden, 4 * hidden)
        gelu = b.node("Mul", [b.node("Mul", [h, b.const(0.5)]),
                              b.node("Add", [b.const(1.0),
                                             b.node("Erf", [b.node("Div", [h, b.const(np.sqrt(2.0))])])])])
        x = layer_norm(b.node("Add", [x, dense(gelu, 4 * hidden, hidden)]), decomposed)
    b.nodes[-1].output[0] = "last_hidden_state"
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq]) for n in ("input_ids", "attention_mask")]
    return b.model(ids, [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
                   "bert_encoder", opset=17)


def shufflenet_style(seed: int = 0, size: int = 32, stages=((64, 2), (128, 2)), groups: int = 4,
                     stem: int = 24, classes: int = 10) -> onnx.ModelProto:
    """A ShuffleNet (v1, Zhang et al. 2017) built of its units: 3x3 stride-2 stem conv, max pool,
    then per stage (out_channels, units) a stride-2 unit (grouped 1x1 conv, channel shuffle,
    depthwise 3x3 stride 2, grouped 1x1 conv; concatenated with a 3x3 average pool of its input)
    and stride-1 units (the same with stride 1, added to the input); BN after every conv, ReLU
    after the first and after the join; global average pool, Flatten, Gemm. Bottlenecks are a
    quarter of the stage width; the first 1x1 conv of the network (on the stem's channels) is not
    grouped, as in the paper. The channel shuffle is ONNX's Reshape [N, g, C/g, H, W] ->
    Transpose (0, 2, 1, 3, 4) -> Reshape [N, C, H, W]. Input 'input' [1, 3, size, size]; output
    'logits' [1, classes]. Stage widths must divide by 4 * groups."""
    b = _Builder(seed)
    hw = [size]

    def out_hw(k, s, p):
        hw[0] = (hw[0] + 2 * p - k) // s + 1

    def gconv_bn(x, cin, cout, g, relu):
        w = b.const(b.rng.standard_normal((cout, cin // g, 1, 1)) * np.sqrt(2.0 / (cin // g)))
        y = b.node("Conv", [x, w], kernel_shape=[1, 1], group=g)
        y = b.node("BatchNormalization", [y, b.const(b.rng.uniform(0.5, 1.5, cout)),
                                          b.const(b.rng.standard_normal(cout) * 0.1),
                                          b.const(b.rng.standard_normal(cout) * 0.1),
                                          b.const(b.rng.uniform(0.5, 1.5, cout))], epsilon=1e-5)
        return b.node("Relu", [y]) if relu else y

    def shape_const(dims):
        nm = b.name("shape")
        b.inits.append(numpy_helper.from_array(np.array(dims, np.int64), nm))
        return nm

    def shuffle(x, c, g):
        y = b.node("Reshape", [x, shape_const([1, g, c // g, hw[0], hw[0]])])
        y = b.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [y, shape_const([1, c, hw[0], hw[0]])])

    def unit(x, cin, cout, stride, first_groups):
        mid = cout // 4
        y = gconv_bn(x, cin, mid, first_groups, relu=True)
        if first_groups > 1:
            y = shuffle(y, mid, first_groups)
        w = b.const(b.rng.standard_normal((mid, 1, 3, 3)) * np.sqrt(2.0 / 9))
        y = b.node("Conv", [y, w], kernel_shape=[3, 3], strides=[stride, stride], pads=[1, 1, 1, 1], group=mid)
        out_hw(3, stride, 1)
        y = b.node("BatchNormalization", [y, b.const(b.rng.uniform(0.5, 1.5, mid)),
                                          b.const(b.rng.standard_normal(mid) * 0.1),
                                          b.const(b.rng.standard_normal(mid) * 0.1),
                                          b.const(b.rng.uniform(0.5, 1.5, mid))], epsilon=1e-5)
        if stride == 1:
            y = gconv_bn(y, mid, cout, groups, relu=False)
            return b.node("Relu", [b.node("Add", [x, y])])
        y = gconv_bn(y, mid, cout - cin, groups, relu=False)
        pooled = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        return b.node("Relu", [b.node("Concat", [pooled, y], axis=1)])

    x = b.conv_bn_relu("input", 3, stem, 3, 2)
    out_hw(3, 2, 1)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    out_hw(3, 2, 1)
    cin = stem
    for k, (cout, units) in enumerate(stages):
        x = unit(x, cin, cout, 2, 1 if k == 0 else groups)
        for _ in range(units - 1):
            x = unit(x, cout, cout, 1, groups)
        cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.const(b.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin))
    b.node("Gemm", [x, w, b.const(b.rng.standard_normal(classes) * 0.1)], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], "shufflenet_style")
