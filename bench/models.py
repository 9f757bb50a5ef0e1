"""Benchmark models the bench builds itself with onnx.helper (random weights, fixed seeds):
ResNet-18, MobileNetV2 and a BERT-style encoder, beside the nine light zoo models.

Each builder takes `batch` (default 1: the shapes below), as the CUDA bench's batch 16 needs.

    resnet18      torchvision's ResNet-18 topology (7x7/2 stem, 3x3/2 max pool, four stages of two
                  basic blocks at 64/128/256/512 channels, 1x1/2 projection shortcuts, global
                  average pool, Flatten, Gemm 1000); Conv without bias + BatchNormalization kept
                  (the compiler folds it); input 'input' [1, 3, 224, 224], output 'logits' [1, 1000]
    mobilenet_v2  torchvision's MobileNetV2, width 1.0: 3x3/2 stem of 32, inverted residual blocks
                  (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2)
                  (6,320,1,1): 1x1 expand (t > 1), 3x3 depthwise (group = channels), 1x1 linear
                  projection, residual Add when stride 1 and channels equal; ReLU6 as Clip(0, 6);
                  1x1 conv to 1280, global average pool, Gemm 1000; input [1, 3, 224, 224]
    bert          tests/e2e/builders.bert_encoder with seq 128, hidden 256, 4 heads, 4 layers,
                  vocabulary 1000 (inputs int64 'input_ids' and 'attention_mask' [1, 128])
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # bench/ runs as a script; the test builders live in tests/e2e
    sys.path.insert(0, str(_REPO))

from tests.e2e.builders import _Builder, bert_encoder  # noqa: E402

IMAGE = [1, 3, 224, 224]


def _conv_bn(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int, act: str | None, groups: int = 1) -> str:
    """Conv (no bias, 'same' padding k // 2) + BatchNormalization + activation ('relu', 'relu6', None)."""
    w = b.const(b.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / (cin // groups * k * k)))
    y = b.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=groups)
    scale = b.const(b.rng.uniform(0.5, 1.5, cout))
    bias = b.const(b.rng.standard_normal(cout) * 0.1)
    mean = b.const(b.rng.standard_normal(cout) * 0.1)
    var = b.const(b.rng.uniform(0.5, 1.5, cout))
    y = b.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
    if act == "relu":
        return b.node("Relu", [y])
    if act == "relu6":
        return b.node("Clip", [y, b.const(0.0, "min"), b.const(6.0, "max")])
    return y


def _head(b: _Builder, x: str, channels: int, classes: int = 1000) -> None:
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.const(b.rng.standard_normal((classes, channels)) / np.sqrt(channels))
    b.node("Gemm", [x, w, b.const(b.rng.standard_normal(classes) * 0.1)], transB=1)
    b.nodes[-1].output[0] = "logits"


def _image_model(b: _Builder, name: str, batch: int) -> onnx.ModelProto:
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch] + IMAGE[1:])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], name)


def resnet18(seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """torchvision ResNet-18 (see the module docstring); about 3.6 GFLOP per image."""
    b = _Builder(seed)
    x = _conv_bn(b, "input", 3, 64, 7, 2, "relu")
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = _conv_bn(b, x, cin, cout, 3, stride, "relu")
            y = _conv_bn(b, y, cout, cout, 3, 1, None)
            sc = _conv_bn(b, x, cin, cout, 1, stride, None) if stride != 1 or cin != cout else x
            x = b.node("Relu", [b.node("Add", [sc, y])])
            cin = cout
    _head(b, x, 512)
    return _image_model(b, "resnet18", batch)


MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def mobilenet_v2(seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """torchvision MobileNetV2, width 1.0 (see the module docstring); about 0.6 GFLOP per image."""
    b = _Builder(seed)
    x = _conv_bn(b, "input", 3, 32, 3, 2, "relu6")
    cin = 32
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = _conv_bn(b, x, cin, hidden, 1, 1, "relu6") if t != 1 else x
            y = _conv_bn(b, y, hidden, hidden, 3, stride, "relu6", groups=hidden)
            y = _conv_bn(b, y, hidden, c, 1, 1, None)
            x = b.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = _conv_bn(b, x, cin, 1280, 1, 1, "relu6")
    _head(b, x, 1280)
    return _image_model(b, "mobilenet_v2", batch)


def bert(seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """BERT-style encoder: seq 128, hidden 256, 4 heads, 4 layers (tests/e2e/builders.bert_encoder)."""
    return bert_encoder(seed=seed, seq=128, hidden=256, heads=4, layers=4, vocab=1000, batch=batch)



def bert_inputs(seq: int = 128, vocab: int = 1000, seed: int = 0, batch: int = 1) -> dict:
    """Feeds for `bert`: token ids uniform in [0, vocab) (seed `seed`), attention mask 1 except a
    padded last quarter (0: those keys get the -1e9 bias)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4:] = 0
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}


# name -> (builder, feeds or None for the bench's default uniform [0, 1) float inputs)
BUILT_MODELS = {"resnet18": (resnet18, None), "mobilenet_v2": (mobilenet_v2, None), "bert": (bert, bert_inputs)}
