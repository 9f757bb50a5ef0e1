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


def _i64(b: _Builder, arr, prefix: str = "i") -> str:
    """An int64 initializer of `b` (shapes, axes, indices)."""
    nm = b.name(prefix)
    b.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.int64), nm))
    return nm


def gpt2_prefill(seed: int = 0, hidden: int = 64, heads: int = 4, layers: int = 2, vocab: int = 256,
                 max_pos: int = 256, mask: str = "slice") -> onnx.ModelProto:
    """A GPT-2-style decoder prefill (opset 17) as Hugging Face exports it, over a symbolic
    sequence length: input 'input_ids' int64 [1, 'seq'] (dim_param seq, at most `max_pos`); output
    'logits' float32 [1, seq, vocab].

    Token embeddings Gather(wte, ids); positions Range(0, seq, 1) from Shape(input_ids), then
    Gather(wpe, positions); per layer (pre-norm): LayerNormalization, one fused QKV MatMul + Add
    split into three, heads by Reshape to [1, seq, heads, hidden / heads] (shape computed from Shape)
    and Transpose, scores Q K^T / sqrt(head dim), the causal mask (mask='slice': Slice of the constant
    lower-triangular [max_pos, max_pos] bool buffer to [seq, seq], as GPT-2's `bias` buffer;
    mask='trilu': Trilu(upper=0) of a ConstantOfShape([seq, seq]) of ones), Where(mask, scores,
    -3.4e38), Softmax, context MatMul, merge, projection, residual; LayerNormalization, the tanh GELU
    MLP of 4 * hidden (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), residual; final
    LayerNormalization and the LM head tied to wte (MatMul with wte^T)."""
    b = _Builder(seed)
    dh = hidden // heads

    def ln(x):
        return b.node("LayerNormalization", [x, b.const(b.rng.uniform(0.8, 1.2, hidden)),
                                             b.const(b.rng.standard_normal(hidden) * 0.05)], axis=-1, epsilon=1e-5)

    def dense(x, cin, cout):
        w = b.const(b.rng.standard_normal((cin, cout)) * 0.02 * np.sqrt(768 / cin))
        return b.node("Add", [b.node("MatMul", [x, w]), b.const(b.rng.standard_normal(cout) * 0.02)])

    wte = b.const(b.rng.standard_normal((vocab, hidden)) * 0.1)
    shape = b.node("Shape", ["input_ids"])
    seq = b.node("Gather", [shape, _i64(b, 1)], axis=0)  # scalar
    seq1 = b.node("Unsqueeze", [seq, _i64(b, [0])])
    pos = b.node("Range", [_i64(b, 0), seq, _i64(b, 1)])
    pos = b.node("Unsqueeze", [pos, _i64(b, [0])])
    x = b.node("Add", [b.node("Gather", [wte, "input_ids"]),
                       b.node("Gather", [b.const(b.rng.standard_normal((max_pos, hidden)) * 0.05), pos])])
    if mask == "slice":
        tril = b.name("bias")
        b.inits.append(numpy_helper.from_array(np.tril(np.ones((max_pos, max_pos), bool)), tril))
        causal = b.node("Slice", [tril, _i64(b, [0, 0]), b.node("Concat", [seq1, seq1], axis=0), _i64(b, [0, 1])])
    elif mask == "trilu":
        ones = b.node("ConstantOfShape", [b.node("Concat", [seq1, seq1], axis=0)],
                      value=numpy_helper.from_array(np.array([1], np.int64)))
        causal = b.node("Cast", [b.node("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    else:
        raise ValueError(f"mask must be 'slice' or 'trilu', got {mask!r}")
    split = b.node("Concat", [_i64(b, [1]), seq1, _i64(b, [heads, dh])], axis=0)
    merge = b.node("Concat", [_i64(b, [1]), seq1, _i64(b, [hidden])], axis=0)
    neg = b.const(np.float32(-3.4e38))
    for _ in range(layers):
        qkv = dense(ln(x), hidden, 3 * hidden)
        q, k, v = (b.name("qkv") for _ in range(3))
        b.nodes.append(helper.make_node("Split", [qkv, _i64(b, [hidden] * 3)], [q, k, v], axis=-1))
        q, k, v = (b.node("Transpose", [b.node("Reshape", [t, split])], perm=p)
                   for t, p in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])))
        scores = b.node("Div", [b.node("MatMul", [q, k]), b.const(np.float32(np.sqrt(dh)))])
        probs = b.node("Softmax", [b.node("Where", [causal, scores, neg])], axis=-1)
        ctx = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge])
        x = b.node("Add", [x, dense(ctx, hidden, hidden)])
        h = dense(ln(x), hidden, 4 * hidden)
        inner = b.node("Mul", [b.node("Add", [h, b.node("Mul", [b.node("Pow", [h, b.const(np.float32(3.0))]),
                                                                 b.const(np.float32(0.044715))])]),
                               b.const(np.float32(np.sqrt(2 / np.pi)))])
        gelu = b.node("Mul", [b.node("Mul", [h, b.const(np.float32(0.5))]),
                              b.node("Add", [b.const(np.float32(1.0)), b.node("Tanh", [inner])])])
        x = b.node("Add", [x, dense(gelu, 4 * hidden, hidden)])
    b.node("MatMul", [ln(x), b.node("Transpose", [wte], perm=[1, 0])])
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", vocab])],
                   "gpt2_prefill", opset=17)


def crnn(seed: int = 0, channels=(16, 32, 48, 64), hidden: int = 32, classes: int = 37,
         lstm_layers: int = 2) -> onnx.ModelProto:
    """A CRNN text recognizer (Shi, Bai and Yao 2015, "An End-to-End Trainable Neural Network for
    Image-based Sequence Recognition"), narrowed, opset 14: input 'image' float32 [1, 1, 32,
    'width'] (dim_param width); output 'logits' float32 ['steps', 1, classes] with steps = width / 4 - 1
    per the stack below.

    Conv 3x3 c0 + ReLU, MaxPool 2x2 (H 16); Conv 3x3 c1 + ReLU, MaxPool 2x2 (H 8); Conv 3x3 c2 +
    BN + ReLU, Conv 3x3 c2 + ReLU, MaxPool (2, 1) stride (2, 1) (H 4); Conv 3x3 c3 + BN + ReLU,
    MaxPool (2, 1) (H 2); Conv 2x2 valid c3 + BN + ReLU (H 1, W / 4 - 1). Squeeze the height,
    Transpose to [T, 1, c3]; `lstm_layers` bidirectional LSTMs of `hidden` (Y [T, 2, 1, hidden]
    -> Transpose -> Reshape [T, 1, 2 hidden] with shape [0, 0, -1]), a Linear (MatMul + Add) to
    `hidden` between them and to `classes` after the last, per time step (the CTC logits)."""
    b = _Builder(seed)
    c0, c1, c2, c3 = channels

    def conv(x, cin, cout, k=3, pad=1, bn=False):
        w = b.const(b.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        y = b.node("Conv", [x, w, b.const(b.rng.standard_normal(cout) * 0.1)], kernel_shape=[k, k], pads=[pad] * 4)
        if bn:
            y = b.node("BatchNormalization", [y, b.const(b.rng.uniform(0.5, 1.5, cout)),
                                              b.const(b.rng.standard_normal(cout) * 0.1),
                                              b.const(b.rng.standard_normal(cout) * 0.1),
                                              b.const(b.rng.uniform(0.5, 1.5, cout))], epsilon=1e-5)
        return b.node("Relu", [y])

    def pool(x, kh, kw):
        return b.node("MaxPool", [x], kernel_shape=[kh, kw], strides=[kh, kw])

    x = pool(conv("image", 1, c0), 2, 2)
    x = pool(conv(x, c0, c1), 2, 2)
    x = pool(conv(conv(x, c1, c2, bn=True), c2, c2), 2, 1)
    x = pool(conv(x, c2, c3, bn=True), 2, 1)
    x = conv(x, c3, c3, k=2, pad=0, bn=True)
    x = b.node("Transpose", [b.node("Squeeze", [x, _i64(b, [2])])], perm=[2, 0, 1])  # [T, 1, c3]
    cin = c3
    for layer in range(lstm_layers):
        s = 1.0 / np.sqrt(hidden)
        w = b.const(b.rng.uniform(-s, s, (2, 4 * hidden, cin)))
        r = b.const(b.rng.uniform(-s, s, (2, 4 * hidden, hidden)))
        bias = b.const(b.rng.uniform(-s, s, (2, 8 * hidden)))
        y = b.name("lstm")
        b.nodes.append(helper.make_node("LSTM", [x, w, r, bias], [y], name=y, hidden_size=hidden,
                                        direction="bidirectional"))
        y = b.node("Reshape", [b.node("Transpose", [y], perm=[0, 2, 1, 3]), _i64(b, [0, 0, -1])])
        cout = classes if layer == lstm_layers - 1 else hidden
        w = b.const(b.rng.standard_normal((2 * hidden, cout)) / np.sqrt(2 * hidden))
        x = b.node("Add", [b.node("MatMul", [y, w]), b.const(b.rng.standard_normal(cout) * 0.1)])
        cin = cout
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 32, "width"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["steps", 1, classes])],
                   "crnn", opset=14)


def concat_net(seed: int = 0, size: int = 16, batch: int = 1) -> onnx.ModelProto:
    """The concatenations of SqueezeNet, Inception and DenseNet in one small network: a 3x3 stem
    (16 channels); a fire module (1x1 squeeze to 8, then 1x1 and 3x3 expands of 16 each,
    concatenated); an Inception block (1x1, 3x3, 5x5 and max pool + 1x1 branches, 16 channels
    each, concatenated); a dense block of three layers (BN, ReLU, 3x3 conv of 16 channels), each
    concatenated onto the block's running features, the running tensor also read by the next
    layer; a 3-channel branch concatenated last (in NCHW: the 3-channel conv is not blocked);
    global average pool, Flatten, Gemm. Input 'input' [batch, 3, size, size]; output
    'logits' [batch, 10]."""
    b = _Builder(seed)
    x = b.conv_bn_relu("input", 3, 16, 3, 1)
    # fire module
    s = b.conv_bn_relu(x, 16, 8, 1, 1)
    x = b.node("Concat", [b.conv_bn_relu(s, 8, 16, 1, 1), b.conv_bn_relu(s, 8, 16, 3, 1)], axis=1)
    # Inception block
    pooled = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    x = b.node("Concat", [b.conv_bn_relu(x, 32, 16, 1, 1), b.conv_bn_relu(x, 32, 16, 3, 1),
                          b.conv_bn_relu(x, 32, 16, 5, 1), b.conv_bn_relu(pooled, 32, 16, 1, 1)], axis=1)
    # dense block: concat(concat(concat(x, y1), y2), y3)
    c = 64
    for _ in range(3):
        y = b.node("Relu", [b.node("BatchNormalization", [x, b.const(b.rng.uniform(0.5, 1.5, c)),
                                                          b.const(b.rng.standard_normal(c) * 0.1),
                                                          b.const(b.rng.standard_normal(c) * 0.1),
                                                          b.const(b.rng.uniform(0.5, 1.5, c))], epsilon=1e-5)])
        w = b.const(b.rng.standard_normal((16, c, 3, 3)) * np.sqrt(2.0 / (c * 9)))
        x = b.node("Concat", [x, b.node("Conv", [y, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], axis=1)
        c += 16
    x = b.node("Concat", [x, b.conv_bn_relu(x, c, 3, 1, 1)], axis=1)
    c += 3
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.const(b.rng.standard_normal((10, c)) * np.sqrt(1.0 / c))
    b.node("Gemm", [x, w, b.const(b.rng.standard_normal(10) * 0.1)], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], "concat_net")
