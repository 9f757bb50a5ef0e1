"""ONNX frontend tests: converters per op and opset, model-level errors, the onnx light models.

Structural tests check the imported graph (op names, attrs, shapes); `test_matches_onnxruntime`
runs every case of CASES through onnxruntime and, where the test-only graph interpreter exists,
compares values (rtol 1e-4, atol 1e-5).
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.errors import ModelError, UnsupportedOpError
from tvmc.frontend.onnx import CONVERTERS, from_onnx, supports
from tvmc.graph.ir import Call, Constant, Var

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

try:
    from tvmc.ops.interpreter import run_graph
except ImportError as e:  # written concurrently by another engineer
    run_graph = None
    _NO_INTERPRETER = f"tvmc.ops.interpreter not available ({e})"

RTOL, ATOL = 1e-4, 1e-5
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
F = TensorProto.FLOAT
I64 = TensorProto.INT64


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def _ir_version(opset):
    return 7 if opset <= 14 else 8 if opset <= 18 else 10 if opset <= 22 else 11


def make_model(nodes, inputs, outputs, inits=(), opset=13, inits_as_inputs=False):
    """inputs/outputs: [(name, elem_type, shape)]; inits: {name: np.ndarray}."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    init_protos = [numpy_helper.from_array(np.asarray(v), name) for name, v in dict(inits).items()]
    if inits_as_inputs:
        vi += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in init_protos]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    graph = helper.make_graph(nodes, "test", vi, outs, initializer=init_protos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=_ir_version(opset))
    # the checker wants typed graph outputs: let ONNX fill in the ones given as shape None
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    for out, out_inferred in zip(model.graph.output, inferred.graph.output):
        if not out.type.tensor_type.HasField("shape"):
            out.CopyFrom(out_inferred)
    onnx.checker.check_model(model)
    return model


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def ops(graph):
    return [c.op_name for c in graph.calls()]


def calls_of(graph, op):
    return [c for c in graph.calls() if c.op_name == op]


def run_ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ---------------------------------------------------------------------------------------------
# Cases: name -> () -> (model, feeds[, input_shapes[, reference]]). Used by the structural
# tests below and by the onnxruntime comparison; `reference(feeds) -> [outputs]` replaces
# onnxruntime for old opsets it no longer implements.
# ---------------------------------------------------------------------------------------------

CASES: dict = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def conv_bias():
    w, b = rand(4, 3, 3, 3, seed=1), rand(4, seed=2)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2])
    return make_model([node], [("x", F, [1, 3, 9, 8])], [("y", F, None)], {"w": w, "b": b}), {"x": rand(1, 3, 9, 8)}


def _conv_auto_pad(auto_pad, opset=11):
    w = rand(2, 3, 3, 3, seed=1)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad=auto_pad, strides=[2, 2])
    model = make_model([node], [("x", F, [1, 3, 8, 7])], [("y", F, None)], {"w": w}, opset=opset)
    return model, {"x": rand(1, 3, 8, 7)}


for _ap in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    CASES[f"conv_{_ap.lower()}"] = (lambda ap: lambda: _conv_auto_pad(ap))(_ap)


@case
def conv_groups_dilation():
    w = rand(6, 2, 3, 3, seed=1)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="g", group=2, dilations=[2, 1], pads=[2, 1, 2, 0])
    return make_model([node], [("x", F, [2, 4, 9, 9])], [("y", F, None)], {"w": w}), {"x": rand(2, 4, 9, 9)}


@case
def conv_depthwise_input_bias():
    w = rand(4, 1, 3, 3, seed=1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="dw", group=4, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    return (make_model([node], [("x", F, [1, 4, 5, 5]), ("b", F, [4])], [("y", F, None)], {"w": w}),
            {"x": rand(1, 4, 5, 5), "b": rand(4, seed=3)})


@case
def conv1d():
    w, b = rand(5, 2, 3, seed=1), rand(5, seed=2)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c1d", pads=[1, 2], strides=[2])
    return make_model([node], [("x", F, [1, 2, 11])], [("y", F, None)], {"w": w, "b": b}), {"x": rand(1, 2, 11)}


@case
def batchnorm():
    c = 3
    inits = {"s": rand(c, seed=1), "bb": rand(c, seed=2), "m": rand(c, seed=3), "v": np.abs(rand(c, seed=4)) + 0.5}
    node = helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], name="bn", epsilon=1e-3)
    return make_model([node], [("x", F, [2, c, 4, 5])], [("y", F, None)], inits), {"x": rand(2, c, 4, 5)}


@case
def batchnorm_opset6_training_outputs_unused():
    c = 2
    inits = {"s": rand(c, seed=1), "bb": rand(c, seed=2), "m": rand(c, seed=3), "v": np.abs(rand(c, seed=4)) + 0.5}
    node = helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y", "rm", "rv", "sm", "sv"],
                            name="bn", is_test=1)

    def reference(feeds):
        r = (1, c, 1, 1)
        scale = inits["s"].reshape(r) / np.sqrt(inits["v"].reshape(r) + 1e-5)
        return [(feeds["x"] - inits["m"].reshape(r)) * scale + inits["bb"].reshape(r)]
    model = make_model([node], [("x", F, [1, c, 3, 3])], [("y", F, [1, c, 3, 3])], inits, opset=6)
    return model, {"x": rand(1, c, 3, 3)}, None, reference


@case
def activations():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Tanh", ["x"], ["c"]), helper.make_node("LeakyRelu", ["x"], ["d"]),
             helper.make_node("LeakyRelu", ["x"], ["e"], alpha=0.3)]
    return (make_model(nodes, [("x", F, [2, 7])], [(n, F, None) for n in "bcde"]),
            {"x": rand(2, 7) * 3})


@case
def clip_opset6():
    node = helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)
    node2 = helper.make_node("Clip", ["x"], ["z"], max=0.1)
    return make_model([node, node2], [("x", F, [3, 4])], [("y", F, None), ("z", F, None)], opset=6), {"x": rand(3, 4)}


@case
def clip_opset13():
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["y"]),
             helper.make_node("Clip", ["x", "", "hi"], ["z"]),
             helper.make_node("Clip", ["x"], ["u"]),
             helper.make_node("Clip", ["x", "dyn_lo"], ["v"])]
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.25, np.float32)}
    return (make_model(nodes, [("x", F, [3, 4]), ("dyn_lo", F, [])], [(n, F, None) for n in "yzuv"], inits),
            {"x": rand(3, 4), "dyn_lo": np.array(-0.1, np.float32)})


@case
def binary_broadcast():
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Sub", ["a", "y"], ["b"]),
             helper.make_node("Mul", ["b", "c"], ["d"]), helper.make_node("Div", ["d", "k"], ["e"])]
    inits = {"c": rand(4, 1, seed=1), "k": np.array([2.0, -4.0, 0.5], np.float32)}
    return (make_model(nodes, [("x", F, [2, 4, 3]), ("y", F, [3])], [("e", F, None)], inits),
            {"x": rand(2, 4, 3), "y": rand(3, seed=5)})


@case
def binary_opset6_axis():
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], broadcast=1, axis=1),
             helper.make_node("Mul", ["a", "s"], ["b"], broadcast=1),
             helper.make_node("Sub", ["b", "x"], ["d"])]
    inits = {"c": rand(3, seed=1), "s": rand(5, seed=2)}

    def reference(feeds):
        x = feeds["x"]
        return [(x + inits["c"].reshape(3, 1, 1)) * inits["s"] - x]
    model = make_model(nodes, [("x", F, [2, 3, 4, 5])], [("d", F, None)], inits, opset=6)
    return model, {"x": rand(2, 3, 4, 5)}, None, reference


@case
def sum_variadic():
    nodes = [helper.make_node("Sum", ["x", "y", "z"], ["s"]), helper.make_node("Sum", ["x"], ["t"])]
    return (make_model(nodes, [("x", F, [2, 3]), ("y", F, [2, 3]), ("z", F, [3])], [("s", F, None), ("t", F, None)]),
            {"x": rand(2, 3), "y": rand(2, 3, seed=1), "z": rand(3, seed=2)})


@case
def matmul_const_2d():
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return make_model([node], [("x", F, [4, 6])], [("y", F, None)], {"w": rand(6, 5, seed=1)}), {"x": rand(4, 6)}


@case
def matmul_const_3d_input():
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return make_model([node], [("x", F, [2, 3, 6])], [("y", F, None)], {"w": rand(6, 5, seed=1)}), {"x": rand(2, 3, 6)}


@case
def matmul_dynamic():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="bmm")
    return (make_model([node], [("a", F, [2, 3, 4]), ("b", F, [4, 5])], [("y", F, None)]),
            {"a": rand(2, 3, 4), "b": rand(4, 5, seed=1)})


@case
def matmul_vector():
    node = helper.make_node("MatMul", ["a", "w"], ["y"], name="mv")
    return make_model([node], [("a", F, [4])], [("y", F, None)], {"w": rand(4, 3, seed=1)}), {"a": rand(4)}


def _gemm(trans_a, trans_b, alpha, beta, const_b=True, c_shape=(5,), opset=13):
    m, k, n = 3, 4, 5
    a_shape = [k, m] if trans_a else [m, k]
    b_shape = [n, k] if trans_b else [k, n]
    inputs = [("a", F, a_shape)]
    inits, feeds = {}, {"a": rand(*a_shape)}
    if const_b:
        inits["b"] = rand(*b_shape, seed=1)
    else:
        inputs.append(("b", F, b_shape))
        feeds["b"] = rand(*b_shape, seed=1)
    names = ["a", "b"]
    if c_shape is not None:
        inits["c"] = rand(*c_shape, seed=2)
        names.append("c")
    node = helper.make_node("Gemm", names, ["y"], name="gemm", transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    return make_model([node], inputs, [("y", F, None)], inits, opset=opset), feeds


for _ta in (0, 1):
    for _tb in (0, 1):
        CASES[f"gemm_tA{_ta}_tB{_tb}"] = (lambda ta, tb: lambda: _gemm(ta, tb, 1.0, 1.0))(_ta, _tb)
CASES["gemm_alpha_beta"] = lambda: _gemm(0, 1, 0.5, 2.0, c_shape=(3, 5))
CASES["gemm_dynamic_b_alpha"] = lambda: _gemm(1, 0, 1.5, 0.25, const_b=False, c_shape=(1, 5))
CASES["gemm_no_c_opset11"] = lambda: _gemm(0, 0, 1.0, 1.0, c_shape=None, opset=11)


@case
def maxpool_variants():
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], name="p_ceil", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["b"], name="p_same", kernel_shape=[2, 3], strides=[2, 2],
                              auto_pad="SAME_LOWER"),
             helper.make_node("MaxPool", ["x"], ["c"], name="p_dil", kernel_shape=[2, 2], dilations=[2, 2],
                              pads=[1, 0, 1, 1]),
             helper.make_node("MaxPool", ["x"], ["d", ""], name="p_up", kernel_shape=[3, 2], strides=[1, 2],
                              auto_pad="SAME_UPPER")]
    return (make_model(nodes, [("x", F, [1, 2, 8, 7])], [(n, F, None) for n in "abcd"], opset=12),
            {"x": rand(1, 2, 8, 7)})


@case
def avgpool_variants():
    nodes = [helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
             helper.make_node("AveragePool", ["x"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("AveragePool", ["x"], ["d"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")]
    return (make_model(nodes, [("x", F, [1, 2, 7, 7])], [(n, F, None) for n in "abcd"], opset=11),
            {"x": rand(1, 2, 7, 7)})


@case
def pools_1d_3d():
    nodes = [helper.make_node("MaxPool", ["x1"], ["a"], kernel_shape=[3], strides=[2], pads=[1, 0], ceil_mode=1),
             helper.make_node("AveragePool", ["x1"], ["b"], kernel_shape=[2], auto_pad="SAME_UPPER"),
             helper.make_node("MaxPool", ["x3"], ["c"], kernel_shape=[2, 3, 2], strides=[1, 2, 2],
                              pads=[1, 0, 1, 0, 1, 1]),
             helper.make_node("AveragePool", ["x3"], ["d"], kernel_shape=[3, 2, 2], pads=[1, 1, 0, 1, 0, 1]),
             helper.make_node("AveragePool", ["x3"], ["e"], kernel_shape=[3, 3, 2], pads=[1, 1, 0, 1, 0, 1],
                              count_include_pad=1, strides=[2, 2, 1]),
             helper.make_node("GlobalAveragePool", ["x3"], ["f"]), helper.make_node("GlobalMaxPool", ["x1"], ["g"])]
    feeds = {"x1": rand(1, 3, 11), "x3": rand(2, 2, 5, 6, 7, seed=1)}
    return (make_model(nodes, [("x1", F, [1, 3, 11]), ("x3", F, [2, 2, 5, 6, 7])],
                       [(n, F, None) for n in "abcdefg"], opset=13), feeds)


@case
def topk_largest_and_smallest():
    x = np.round(rand(3, 10) * 2)
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
             helper.make_node("TopK", ["x", "k2"], ["v2", "i2"], axis=0, largest=0)]
    return (make_model(nodes, [("x", F, [3, 10])], [("v", F, None), ("i", I64, None), ("v2", F, None),
                                                     ("i2", I64, None)],
                       {"k": np.array([4], np.int64), "k2": np.array([2], np.int64)}, opset=11), {"x": x})


@case
def convtranspose_variants():
    w, w1, wg = rand(3, 4, 3, 3, seed=1), rand(3, 2, 4, seed=2), rand(4, 2, 3, 2, seed=3)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["a"], strides=[2, 2], pads=[1, 0, 0, 1],
                              output_padding=[1, 0]),
             helper.make_node("ConvTranspose", ["x", "w"], ["b2"], strides=[3, 2], output_shape=[16, 12]),
             helper.make_node("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2], auto_pad="SAME_UPPER",
                              dilations=[2, 1]),
             helper.make_node("ConvTranspose", ["x1", "w1"], ["d"], strides=[2]),
             helper.make_node("ConvTranspose", ["xg", "wg"], ["e"], group=2, strides=[1, 2], pads=[0, 1, 1, 0])]
    inits = {"w": w, "b": rand(4, seed=4), "w1": w1, "wg": wg}
    feeds = {"x": rand(1, 3, 5, 6), "x1": rand(2, 3, 7, seed=5), "xg": rand(1, 4, 4, 5, seed=6)}
    return (make_model(nodes, [("x", F, [1, 3, 5, 6]), ("x1", F, [2, 3, 7]), ("xg", F, [1, 4, 4, 5])],
                       [(n, F, None) for n in ("a", "b2", "c", "d", "e")], inits, opset=11), feeds)


@case
def resize_modes():
    empty = np.zeros(0, np.float32)
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["a"], mode="linear"),
             helper.make_node("Resize", ["x", "", "", "sz"], ["b"], mode="cubic",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Resize", ["x", "", "s2"], ["c"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["x", "roi", "", "sz"], ["d"], mode="nearest"),
             helper.make_node("Resize", ["x", "", "", "sz"], ["e"], mode="linear",
                              coordinate_transformation_mode="pytorch_half_pixel")]
    inits = {"s": np.array([1, 1, 2, 1.5], np.float32), "sz": np.array([1, 2, 3, 11], np.int64),
             "s2": np.array([1, 1, 0.6, 0.5], np.float32), "roi": empty}
    return make_model(nodes, [("x", F, [1, 2, 5, 6])], [(n, F, None) for n in "abcde"], inits), {"x": rand(1, 2, 5, 6)}


@case
def upsample_opset9():
    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear")
    return (make_model([node], [("x", F, [1, 2, 3, 4])], [("y", F, None)],
                       {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9), {"x": rand(1, 2, 3, 4)})


@case
def einsum_equations():
    eqs = [("bij,bjk->bik", ["a3", "b3"]), ("ij,jk->ik", ["a2", "b2"]), ("ij->ji", ["a2"]),
           ("bhid,bhjd->bhij", ["q", "k"]), ("ij->i", ["a2"]), ("...ij,...jk", ["a3", "b3"]),
           ("ij,jk,kl->il", ["a2", "b2", "c2"]), ("bij,jk->bk", ["a3", "b2"])]
    nodes = [helper.make_node("Einsum", ins, [f"y{k}"], equation=eq) for k, (eq, ins) in enumerate(eqs)]
    shapes = {"a3": [2, 3, 4], "b3": [2, 4, 5], "a2": [3, 4], "b2": [4, 5], "c2": [5, 2], "q": [1, 2, 3, 8],
              "k": [1, 2, 6, 8]}
    feeds = {n: rand(*s, seed=k) for k, (n, s) in enumerate(shapes.items())}
    return (make_model(nodes, [(n, F, s) for n, s in shapes.items()], [(f"y{k}", F, None) for k in range(len(eqs))],
                       opset=12), feeds)


@case
def global_pools_lrn():
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["a"]), helper.make_node("GlobalMaxPool", ["x"], ["b"]),
             helper.make_node("LRN", ["x"], ["c"], size=3),
             helper.make_node("LRN", ["x"], ["d"], size=5, alpha=5e-4, beta=0.6, bias=2.0)]
    return make_model(nodes, [("x", F, [1, 6, 4, 3])], [(n, F, None) for n in "abcd"]), {"x": rand(1, 6, 4, 3)}


@case
def flatten_reshape():
    nodes = [helper.make_node("Flatten", ["x"], ["a"], axis=2), helper.make_node("Flatten", ["x"], ["b"], axis=0),
             helper.make_node("Flatten", ["x"], ["c"], axis=-1),
             helper.make_node("Reshape", ["x", "s1"], ["d"]), helper.make_node("Reshape", ["x", "s2"], ["e"])]
    inits = {"s1": np.array([0, -1, 4], np.int64), "s2": np.array([-1, 0, 2, 0], np.int64)}
    return (make_model(nodes, [("x", F, [2, 3, 4, 5])], [(n, F, None) for n in "abcde"], inits),
            {"x": rand(2, 3, 4, 5)})


@case
def reshape_opset1_attr():
    node = helper.make_node("Reshape", ["x"], ["y"], shape=[0, -1])
    model = make_model([node], [("x", F, [2, 3, 4])], [("y", F, [2, 12])], opset=4)
    return model, {"x": rand(2, 3, 4)}, None, lambda feeds: [feeds["x"].reshape(2, 12)]


@case
def transpose_concat():
    nodes = [helper.make_node("Transpose", ["x"], ["t"]),
             helper.make_node("Transpose", ["x"], ["u"], perm=[0, 2, 1]),
             helper.make_node("Concat", ["u", "y", "u"], ["c"], axis=-1)]
    return (make_model(nodes, [("x", F, [2, 3, 4]), ("y", F, [2, 4, 1])], [("t", F, None), ("c", F, None)]),
            {"x": rand(2, 3, 4), "y": rand(2, 4, 1, seed=1)})


def _softmax(opset, axis):
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", **({} if axis is None else {"axis": axis}))
    return make_model([node], [("x", F, [2, 3, 4])], [("y", F, None)], opset=opset), {"x": rand(2, 3, 4) * 3}


CASES["softmax_opset11_axis1"] = lambda: _softmax(11, 1)
CASES["softmax_opset11_default"] = lambda: _softmax(11, None)
CASES["softmax_opset11_last"] = lambda: _softmax(11, -1)
CASES["softmax_opset13_axis1"] = lambda: _softmax(13, 1)
CASES["softmax_opset13_default"] = lambda: _softmax(13, None)


@case
def dropout_identity():
    nodes = [helper.make_node("Dropout", ["x"], ["a", "mask"], ratio=0.3),
             helper.make_node("Identity", ["a"], ["b"])]
    return make_model(nodes, [("x", F, [2, 3])], [("b", F, None)], opset=10), {"x": rand(2, 3)}


@case
def dropout_training_zero_ratio():
    """Dropout-13 in training mode with ratio 0: output = input, mask all true (ONNX Dropout)."""
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])]
    inits = {"r": np.array(0.0, np.float32), "t": np.array(True)}
    return (make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3]), ("mask", TensorProto.BOOL, [2, 3])], inits),
            {"x": rand(2, 3)})


@case
def constants_and_shapes():
    value = numpy_helper.from_array(rand(3, 2, seed=7), "cv")
    nodes = [helper.make_node("Constant", [], ["k"], value=value),
             helper.make_node("Constant", [], ["kf"], value_float=2.5),
             helper.make_node("Constant", [], ["ki"], value_ints=[1, 6]),
             helper.make_node("ConstantOfShape", ["ki"], ["z"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x", "k"], ["a"]),
             helper.make_node("Mul", ["a", "kf"], ["b"]),
             # PyTorch-style flatten: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, all folded
             helper.make_node("Shape", ["b"], ["sh"]),
             helper.make_node("Constant", [], ["i0"], value_int=0),
             helper.make_node("Gather", ["sh", "i0"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["b", "target"], ["flat"]),
             helper.make_node("Add", ["flat", "z"], ["out"])]
    inits = {"ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return make_model(nodes, [("x", F, [2, 3, 2])], [("out", F, [2, 6])], inits), {"x": rand(2, 3, 2)}


@case
def shape_arithmetic():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             helper.make_node("Gather", ["s", "i1"], ["h"]),
             helper.make_node("Gather", ["s", "i2"], ["w"]),
             helper.make_node("Mul", ["h", "w"], ["hw"]),
             helper.make_node("Div", ["hw", "two"], ["half"]),
             helper.make_node("Concat", ["n", "half", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Div", ["num", "den"], ["q"])]   # integer Div truncates toward zero
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "two": np.array([2], np.int64), "m1": np.array([-1], np.int64),
             "num": np.array([-7, 7, 6], np.int64), "den": np.array([2, -2, 4], np.int64)}
    return (make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 6, 2]), ("q", I64, [3])], inits),
            {"x": rand(2, 3, 4)})


@case
def unsqueeze_squeeze_opset11():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]),
             helper.make_node("Squeeze", ["u"], ["s"], axes=[0]),
             helper.make_node("Squeeze", ["u"], ["t"])]
    return (make_model(nodes, [("x", F, [3, 1, 2])], [("u", F, None), ("s", F, None), ("t", F, None)], opset=11),
            {"x": rand(3, 1, 2)})


@case
def unsqueeze_squeeze_opset13():
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]),
             helper.make_node("Squeeze", ["u", "sq"], ["s"])]
    inits = {"ax": np.array([0, -1], np.int64), "sq": np.array([-1], np.int64)}
    return (make_model(nodes, [("x", F, [3, 1, 2])], [("u", F, None), ("s", F, None)], inits),
            {"x": rand(3, 1, 2)})


@case
def shape_opset15_cast():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
             helper.make_node("Cast", ["s"], ["sf"], to=F),
             helper.make_node("Add", ["x", "sf"], ["y"]),
             helper.make_node("Cast", ["y"], ["yi"], to=TensorProto.INT32),
             helper.make_node("Cast", ["yi"], ["yf"], to=F),
             helper.make_node("Cast", ["yf"], ["same"], to=F)]
    return make_model(nodes, [("x", F, [2, 3, 3])], [("same", F, None)], opset=15), {"x": rand(2, 3, 3) * 4}


@case
def pad_max_min_unary():
    nodes = [helper.make_node("Pad", ["x", "pads", "cv"], ["p"]),
             helper.make_node("Max", ["p", "c"], ["m"]), helper.make_node("Min", ["m", "p", "c2"], ["n"]),
             helper.make_node("Abs", ["n"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
             helper.make_node("Neg", ["s"], ["g"]), helper.make_node("Exp", ["g"], ["e"])]
    inits = {"pads": np.array([0, 1, 2, 0, 0, 1], np.int64), "cv": np.array(0.5, np.float32),
             "c": np.array(-0.3, np.float32), "c2": rand(7, seed=3)}
    return make_model(nodes, [("x", F, [2, 3, 4])], [("e", F, None)], inits), {"x": rand(2, 3, 4)}


@case
def initializers_in_graph_input():
    w, b = rand(4, 3, 1, 1, seed=1), rand(4, seed=2)
    nodes = [helper.make_node("Conv", ["data", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "bb", "m", "v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["y"])]
    inits = {"w": w, "g": np.abs(b), "bb": b, "m": b * 0.1, "v": np.abs(b) + 1.0}
    return (make_model(nodes, [("data", F, [1, 3, 4, 4])], [("y", F, None)], inits, opset=9, inits_as_inputs=True),
            {"data": rand(1, 3, 4, 4)})


@case
def symbolic_batch_fixed():
    node = helper.make_node("Relu", ["x"], ["y"])
    return make_model([node], [("x", F, ["batch", 3])], [("y", F, ["batch", 3])]), {"x": rand(2, 3)}, {"x": (2, 3)}


@case
def rms_normalization_function_body():
    """RMSNormalization-23 has no converter: it imports as its ONNX function body."""
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=-1, epsilon=1e-5)
    return (make_model([node], [("x", F, [2, 3, 8])], [("y", F, None)], {"scale": rand(8, seed=1)}, opset=23),
            {"x": rand(2, 3, 8)})


@case
def group_normalization_function_body():
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gn", num_groups=2)
    inits = {"scale": rand(4, seed=1), "bias": rand(4, seed=2)}
    return (make_model([node], [("x", F, [2, 4, 3, 3])], [("y", F, [2, 4, 3, 3])], inits, opset=21),
            {"x": rand(2, 4, 3, 3)})


@case
def if_runtime_condition():
    """If on a graph-input condition: both branches read the outer x; where picks."""
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [2, 3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = make_model([node], [("c", TensorProto.BOOL, []), ("x", F, [2, 3])], [("y", F, [2, 3])])
    return model, {"c": np.array(False), "x": rand(2, 3)}


@case
def loop_constant_trip_count():
    """Loop-13, trip count 3 and condition true as initializers: y += x three times, each y scanned."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["y_in", "x"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])], "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [2]), helper.make_tensor_value_info("scan", F, [2])])
    node = helper.make_node("Loop", ["m", "c", "y0"], ["y", "ys"], body=body)
    inits = {"m": np.array(3, np.int64), "c": np.array(True)}
    model = make_model([node], [("y0", F, [2]), ("x", F, [2])], [("y", F, [2]), ("ys", F, [3, 2])], inits)
    return model, {"y0": rand(2), "x": rand(2, seed=1)}


@case
def scan_running_sum():
    """Scan-11 over axis 0 of x [4, 3]: the running sum as state and scan output."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["out"])], "body",
                             [helper.make_tensor_value_info("s_in", F, [3]),
                              helper.make_tensor_value_info("row", F, [3])],
                             [helper.make_tensor_value_info("s_out", F, [3]),
                              helper.make_tensor_value_info("out", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "outs"], body=body, num_scan_inputs=1)
    model = make_model([node], [("s0", F, [3]), ("x", F, [4, 3])], [("s", F, [3]), ("outs", F, [4, 3])])
    return model, {"s0": rand(3), "x": rand(4, 3, seed=1)}


# --- issue 18, nn group: DeformConv, Col2Im, MaxUnpool, MaxPool Indices, 3-D ConvTranspose

@case
def deform_conv_groups_offset_groups_mask_bias():
    """Strides, dilations, asymmetric pads, group 2, offset_group 2, offsets reaching outside X."""
    w, b = rand(4, 2, 2, 3, seed=1), rand(4, seed=2)
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], name="dc", group=2,
                            offset_group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 2], kernel_shape=[2, 3])
    inputs = [("x", F, [2, 4, 5, 6]), ("offset", F, [2, 24, 3, 4]), ("mask", F, [2, 12, 3, 4])]
    feeds = {"x": rand(2, 4, 5, 6), "offset": rand(2, 24, 3, 4, seed=3) * 2.5, "mask": rand(2, 12, 3, 4, seed=4)}
    return make_model([node], inputs, [("y", F, None)], {"w": w, "b": b}, opset=19), feeds


@case
def col2im_strides_dilations_pads():
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[2, 3], dilations=[2, 1],
                            pads=[1, 0, 2, 2])
    inits = {"image": np.array([7, 8], np.int64), "block": np.array([3, 2], np.int64)}
    return make_model([node], [("x", F, [2, 18, 9])], [("y", F, None)], inits, opset=18), {"x": rand(2, 18, 9)}


@case
def maxpool_indices_maxunpool_pads():
    """MaxPool's Indices (column-major: storage_order 1) fed to MaxUnpool with the same window."""
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 0, 1])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 0, 1])
    pool_cm = helper.make_node("MaxPool", ["x"], ["q", "j"], kernel_shape=[3, 2], strides=[1, 2], storage_order=1)
    model = make_model([pool, unpool, pool_cm], [("x", F, [2, 3, 6, 7])],
                       [("y", F, None), ("i", I64, None), ("j", I64, None)], opset=22)
    return model, {"x": rand(2, 3, 6, 7)}


@case
def convtranspose_3d_strides_pads_groups_bias():
    w, b = rand(4, 3, 2, 3, 2, seed=1), rand(6, seed=2)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 1, 2], dilations=[1, 2, 1],
                            pads=[1, 0, 0, 0, 2, 1], output_padding=[1, 0, 0])
    return make_model([node], [("x", F, [1, 4, 3, 4, 3])], [("y", F, None)], {"w": w, "b": b}), \
        {"x": rand(1, 4, 3, 4, 3)}


# --- issue 18, group B (misc ops): Resize antialias, Einsum diagonals, MelWeightMatrix, Det, Scan-8

@case
def resize_antialias():
    """Resize-18 antialias=1 downsampling: linear by sizes (3 and 5 taps wide), cubic by scales
    0.3 x 0.5 (with exclude_outside), an axis upsampled beside one downsampled (plain taps there),
    and W alone downsampled (one matmul)."""
    nodes = [helper.make_node("Resize", ["x", "", "", "sz"], ["a"], mode="linear", antialias=1),
             helper.make_node("Resize", ["x", "", "s"], ["b"], mode="cubic", antialias=1, exclude_outside=1),
             helper.make_node("Resize", ["x", "", "s2"], ["c"], mode="cubic", antialias=1),
             helper.make_node("Resize", ["x", "", "", "sz2"], ["d"], mode="linear", antialias=1)]
    inits = {"sz": np.array([1, 2, 5, 3], np.int64), "s": np.array([1, 1, 0.3, 0.5], np.float32),
             "s2": np.array([1, 1, 1.5, 0.25], np.float32), "sz2": np.array([1, 2, 13, 4], np.int64)}
    return (make_model(nodes, [("x", F, [1, 2, 13, 12])], [(n, F, None) for n in "abcd"], inits, opset=18),
            {"x": rand(1, 2, 13, 12)})


@case
def einsum_diagonals_and_scalar():
    """Repeated letters in one operand (diagonals: ONNX test_einsum_batch_diagonal's "...ii->...i",
    a trace, a 3-fold diagonal beside a contraction) and a rank-0 operand ("->")."""
    eqs = [("...ii->...i", ["d3"]), ("ii", ["d2"]), ("iij,jk->ik", ["d3b", "b2"]), ("iii->i", ["c3"]), ("->", ["s"])]
    nodes = [helper.make_node("Einsum", ins, [f"y{k}"], equation=eq) for k, (eq, ins) in enumerate(eqs)]
    shapes = {"d3": [2, 4, 4], "d2": [3, 3], "d3b": [3, 3, 4], "b2": [4, 5], "c3": [3, 3, 3], "s": []}
    feeds = {n: rand(*s, seed=k) for k, (n, s) in enumerate(shapes.items())}
    return (make_model(nodes, [(n, F, s) for n, s in shapes.items()], [(f"y{k}", F, None) for k in range(len(eqs))],
                       opset=12), feeds)


@case
def melweightmatrix_constant():
    """MelWeightMatrix-17 of constant scalars (folded at import): 10 filters over a 64-point DFT at
    16 kHz, 20 Hz to 7 kHz, in float64; and narrow bands where edges coincide (8 over 16 points)."""
    nodes = [helper.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["a"],
                              output_datatype=TensorProto.DOUBLE),
             helper.make_node("MelWeightMatrix", ["m2", "d2", "r", "lo", "hi2"], ["b"])]
    inits = {"m": np.array(10, np.int64), "d": np.array(64, np.int64), "r": np.array(16000, np.int64),
             "lo": np.array(20, np.float32), "hi": np.array(7000, np.float32), "m2": np.array(8, np.int64),
             "d2": np.array(16, np.int64), "hi2": np.array(1500, np.float32)}
    return make_model(nodes, [], [("a", TensorProto.DOUBLE, [33, 10]), ("b", F, [9, 8])], inits, opset=17), {}


@case
def det_batched():
    """Det-22 of [2, 3, 5, 5] (one matrix singular) and of one [3, 3] matrix (a rank-0 output)."""
    x = rand(2, 3, 5, 5)
    x[1, 2, 4] = x[1, 2, 0]
    nodes = [helper.make_node("Det", ["x"], ["a"]), helper.make_node("Det", ["m"], ["b"])]
    return (make_model(nodes, [("x", F, [2, 3, 5, 5]), ("m", F, [3, 3])], [("a", F, [2, 3]), ("b", F, [])], opset=22),
            {"x": x, "m": rand(3, 3, seed=1)})


@case
def scan8_batch_reversed():
    """Scan-8 over x [2, 4, 3] (batch 2, 4 steps), scanned backwards, with a constant
    sequence_lens of full length: running sum and running product per batch element."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_out"]),
                              helper.make_node("Mul", ["p_in", "row"], ["p_out"]),
                              helper.make_node("Identity", ["s_out"], ["out"])], "body",
                             [helper.make_tensor_value_info(n, F, [3]) for n in ("s_in", "p_in", "row")],
                             [helper.make_tensor_value_info(n, F, [3]) for n in ("s_out", "p_out", "out")])
    node = helper.make_node("Scan", ["lens", "s0", "p0", "x"], ["s", "p", "outs"], body=body, num_scan_inputs=1,
                            directions=[1])
    model = make_model([node], [("s0", F, [2, 3]), ("p0", F, [2, 3]), ("x", F, [2, 4, 3])],
                       [("s", F, [2, 3]), ("p", F, [2, 3]), ("outs", F, [2, 4, 3])],
                       {"lens": np.array([4, 4], np.int64)}, opset=8)
    return model, {"s0": rand(2, 3), "p0": rand(2, 3, seed=2), "x": rand(2, 4, 3, seed=1)}


# FlexAttention (issue 18 point 2): ai.onnx.preview's function op, imported through its
# context-dependent body. onnxruntime 1.32 has no FlexAttention kernel: onnx.reference is the
# reference (it evaluates the same body).
@case
def flexattention_gqa_soft_cap_score_mod():
    """FlexAttention-1 with grouped-query heads (Q 4 heads, K/V 2), an explicit scale and a
    score_mod graph (soft cap: 5 * tanh(scores / 5)) inlined into the body."""
    cap = numpy_helper.from_array(np.array(5.0, np.float32), "cap")
    score_mod = helper.make_graph(
        [helper.make_node("Div", ["scores", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
         helper.make_node("Mul", ["t", "cap"], ["scores_out"])], "soft_cap",
        [helper.make_tensor_value_info("scores", F, None)], [helper.make_tensor_value_info("scores_out", F, None)],
        initializer=[cap])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], name="flex", domain="ai.onnx.preview",
                            scale=0.4, score_mod=score_mod)
    shapes = {"Q": (2, 4, 3, 8), "K": (2, 2, 5, 8), "V": (2, 2, 5, 6)}
    graph = helper.make_graph([node], "test", [helper.make_tensor_value_info(n, F, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info("Y", F, [2, 4, 3, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid("ai.onnx.preview", 1)], ir_version=11)
    onnx.checker.check_model(model)
    feeds = {n: 2 * rand(*s, seed=k) for k, (n, s) in enumerate(shapes.items())}

    def reference(feeds):
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(model).run(None, feeds)
    return model, feeds, None, reference


# --- issue 18 point 2: DFT and STFT (onnxruntime 1.32 fails them: numpy.fft is the reference) ---

def _complex(x):
    """[..., 1 or 2] real/imaginary pairs -> complex128 [...]."""
    x = x.astype(np.float64)
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0] + 0j


def _pairs(z):
    return np.stack([z.real, z.imag], axis=-1).astype(np.float32)


@case
def dft20_lengths_and_axes():
    """DFT-20 with constant axis and dft_length: complex [2, 6, 5, 2] along axis 1 zero-padded to
    8, inverse along axis -2 truncated to 3; real [2, 7, 3, 1] one-sided (RFFT) along the default
    axis -2, and IRFFT of a one-sided spectrum [2, 4, 3, 2] along axis 1 (default length 6)."""
    nodes = [helper.make_node("DFT", ["c", "n8", "a1"], ["y0"]),
             helper.make_node("DFT", ["c", "n3", "am2"], ["y1"], inverse=1),
             helper.make_node("DFT", ["r"], ["y2"], onesided=1),
             helper.make_node("DFT", ["h", "", "a1"], ["y3"], onesided=1, inverse=1)]
    inits = {"n8": np.array(8, np.int64), "n3": np.array(3, np.int64), "a1": np.array(1, np.int64),
             "am2": np.array(-2, np.int64)}
    feeds = {"c": rand(2, 6, 5, 2), "r": rand(2, 7, 3, 1, seed=1), "h": rand(2, 4, 3, 2, seed=2)}

    def reference(f):
        c = _complex(f["c"])
        return [_pairs(np.fft.fft(c, n=8, axis=1)), _pairs(np.fft.ifft(c, n=3, axis=2)),
                _pairs(np.fft.rfft(f["r"][..., 0].astype(np.float64), axis=2)),
                np.fft.irfft(_complex(f["h"]), axis=1)[..., None].astype(np.float32)]
    model = make_model(nodes, [(n, F, list(v.shape)) for n, v in feeds.items()],
                       [("y0", F, [2, 8, 5, 2]), ("y1", F, [2, 6, 3, 2]), ("y2", F, [2, 7, 2, 2]),
                        ("y3", F, [2, 6, 3, 1])], inits, opset=20)
    return model, feeds, None, reference


@case
def dft17_axis_attribute_irfft_odd():
    """DFT-17 (axis attribute): a rank-2 complex signal [5, 2] along axis 0, and IRFFT to an odd
    length 7 from 5 bins of [3, 5, 2] (bins above 7 // 2 ignored, as numpy.fft.irfft)."""
    nodes = [helper.make_node("DFT", ["v"], ["y0"], axis=0),
             helper.make_node("DFT", ["h", "n7"], ["y1"], axis=1, onesided=1, inverse=1)]
    feeds = {"v": rand(5, 2), "h": rand(3, 5, 2, seed=1)}

    def reference(f):
        return [_pairs(np.fft.fft(_complex(f["v"]))),
                np.fft.irfft(_complex(f["h"]), n=7, axis=1)[..., None].astype(np.float32)]
    model = make_model(nodes, [("v", F, [5, 2]), ("h", F, [3, 5, 2])], [("y0", F, [5, 2]), ("y1", F, [3, 7, 1])],
                       {"n7": np.array(7, np.int64)}, opset=17)
    return model, feeds, None, reference


@case
def stft_windows():
    """STFT-17 of a real signal [2, 30, 1], step 4: with a constant Hann window of 8 (folded into
    the DFT matrix), with a run-time window and frame_length 8, and two-sided on a complex
    signal [1, 21, 2] with frame_length 6, step 5 and no window."""
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(8) / 8)).astype(np.float32)
    # onesided=1 is the default, stated because onnx 1.23's shape inference takes 0 when it is absent
    nodes = [helper.make_node("STFT", ["s", "step4", "hann"], ["y0"], onesided=1),
             helper.make_node("STFT", ["s", "step4", "w", "len8"], ["y1"], onesided=1),
             helper.make_node("STFT", ["z", "step5", "", "len6"], ["y2"], onesided=0)]
    inits = {"step4": np.array(4, np.int64), "step5": np.array(5, np.int64), "hann": hann,
             "len8": np.array(8, np.int64), "len6": np.array(6, np.int64)}
    feeds = {"s": rand(2, 30, 1), "w": rand(8, seed=1), "z": rand(1, 21, 2, seed=2)}

    def stft(x, step, length, window, onesided):
        frames = np.stack([x[:, k:k + length] for k in range(0, x.shape[1] - length + 1, step)], axis=1)
        spectrum = np.fft.fft(frames * window, axis=2)
        return _pairs(spectrum[:, :, :length // 2 + 1] if onesided else spectrum)

    def reference(f):
        s = _complex(f["s"])
        return [stft(s, 4, 8, hann, True), stft(s, 4, 8, f["w"], True), stft(_complex(f["z"]), 5, 6, 1.0, False)]
    model = make_model(nodes, [(n, F, list(v.shape)) for n, v in feeds.items()],
                       [(f"y{k}", F, None) for k in range(3)], inits, opset=17)
    return model, feeds, None, reference


# ---------------------------------------------------------------------------------------------
# Numerics against onnxruntime, every case
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name):
    model, feeds, *rest = CASES[name]()
    graph = from_onnx(model, rest[0] if rest else None)
    expected = rest[1](feeds) if len(rest) > 1 else run_ort(model, feeds)
    assert [tuple(o.shape) for o in graph.outputs] == [e.shape for e in expected]
    assert [o.dtype for o in graph.outputs] == [e.dtype.name for e in expected]
    if run_graph is None:
        pytest.skip(_NO_INTERPRETER)
    got = run_graph(graph, feeds)
    for g, e, out_name in zip(got, expected, graph.output_names):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg=f"output {out_name} of case {name}")


# ---------------------------------------------------------------------------------------------
# Structure of the imported graphs
# ---------------------------------------------------------------------------------------------

def build(name):
    model, _feeds, *rest = CASES[name]()
    return from_onnx(model, rest[0] if rest else None)


def test_conv_with_constant_bias():
    g = build("conv_bias")
    assert ops(g) == ["nn.conv2d", "add"]
    conv, add = g.calls()
    assert conv.attrs == {"strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    assert isinstance(conv.inputs[1], Constant) and conv.inputs[1].name == "w"
    bias = add.inputs[1]
    assert isinstance(bias, Constant) and bias.shape == (4, 1, 1) and bias.name.startswith("conv1.")
    assert g.outputs[0].shape == (1, 4, 5, 4) and g.output_names == ("y",)


@pytest.mark.parametrize("auto_pad, padding, out_hw", [
    ("SAME_UPPER", (0, 1, 1, 1), (4, 4)),   # H: 8 -> total 1 (end); W: 7 -> total 2
    ("SAME_LOWER", (1, 1, 0, 1), (4, 4)),
    ("VALID", (0, 0, 0, 0), (3, 3)),
])
def test_conv_auto_pad(auto_pad, padding, out_hw):
    g = build(f"conv_{auto_pad.lower()}")
    conv = calls_of(g, "nn.conv2d")[0]
    assert conv.attrs["padding"] == padding
    assert g.outputs[0].shape[2:] == out_hw


def test_conv_groups_dilation_and_input_bias():
    conv = calls_of(build("conv_groups_dilation"), "nn.conv2d")[0]
    assert conv.attrs["groups"] == 2 and conv.attrs["dilation"] == (2, 1) and conv.attrs["padding"] == (2, 1, 2, 0)
    g = build("conv_depthwise_input_bias")
    assert ops(g) == ["nn.conv2d", "reshape", "add"]
    assert calls_of(g, "reshape")[0].attrs["newshape"] == (4, 1, 1)
    assert calls_of(g, "nn.conv2d")[0].attrs["groups"] == 4


def test_conv1d_runs_as_conv2d():
    g = build("conv1d")
    conv = calls_of(g, "nn.conv2d")[0]
    assert conv.attrs["strides"] == (1, 2) and conv.attrs["padding"] == (0, 1, 0, 2)
    assert conv.inputs[1].shape == (5, 2, 1, 3)
    assert g.outputs[0].shape == (1, 5, 6)


def test_batchnorm():
    g = build("batchnorm")
    (bn,) = g.calls()
    assert bn.op_name == "nn.batch_norm" and bn.attrs["axis"] == 1
    assert bn.attrs["epsilon"] == pytest.approx(1e-3)
    assert [i.name for i in bn.inputs[1:]] == ["s", "bb", "m", "v"]
    assert ops(build("batchnorm_opset6_training_outputs_unused")) == ["nn.batch_norm"]


def test_batchnorm_training_output_used_is_an_error():
    model, *_ = CASES["batchnorm_opset6_training_outputs_unused"]()
    model.graph.node.append(helper.make_node("Relu", ["rm"], ["r"], name="reads_mean"))
    model.graph.output.append(helper.make_tensor_value_info("r", F, [2]))
    with pytest.raises(ModelError, match=r"reads_mean.*'rm'.*BatchNormalization"):
        from_onnx(model)


def test_activations():
    g = build("activations")
    assert sorted(ops(g)) == sorted(["nn.relu", "sigmoid", "tanh", "nn.leaky_relu", "nn.leaky_relu"])
    alphas = sorted(c.attrs["alpha"] for c in calls_of(g, "nn.leaky_relu"))
    assert alphas == [pytest.approx(0.01), pytest.approx(0.3)]


def test_clip_opset6_attributes_vs_opset13_inputs():
    g6 = build("clip_opset6")
    y, z = g6.outputs
    assert (y.attrs["a_min"], y.attrs["a_max"]) == (pytest.approx(-0.5), pytest.approx(0.25))
    assert z.attrs["a_min"] == -np.inf and z.attrs["a_max"] == pytest.approx(0.1)
    g13 = build("clip_opset13")
    y, z, u, v = g13.outputs
    assert (y.op_name, y.attrs["a_min"], y.attrs["a_max"]) == ("clip", pytest.approx(-0.5), pytest.approx(0.25))
    assert (z.attrs["a_min"], z.attrs["a_max"]) == (-np.inf, pytest.approx(0.25))
    assert (u.attrs["a_min"], u.attrs["a_max"]) == (-np.inf, np.inf)
    assert v.op_name == "maximum"


def test_binary_ops():
    g = build("binary_broadcast")
    assert ops(g) == ["add", "subtract", "multiply", "divide"]
    assert g.outputs[0].shape == (2, 4, 3)
    g6 = build("binary_opset6_axis")
    add = calls_of(g6, "add")[0]
    assert isinstance(add.inputs[1], Constant) and add.inputs[1].shape == (3, 1, 1)
    assert calls_of(g6, "multiply")[0].inputs[1].shape == (5,)
    assert g6.outputs[0].shape == (2, 3, 4, 5)


def test_sum():
    g = build("sum_variadic")
    s, t = g.outputs
    assert s.op_name == "add" and s.inputs[0].op_name == "add" and s.shape == (2, 3)
    assert t.op_name == "identity"


def test_matmul():
    g = build("matmul_const_2d")
    (dense,) = g.calls()
    assert dense.op_name == "nn.dense"
    w = dense.inputs[1]
    assert isinstance(w, Constant) and w.shape == (5, 6) and w.name == "mm.weight_t"
    model, _ = CASES["matmul_const_2d"]()
    np.testing.assert_array_equal(w.value, numpy_helper.to_array(model.graph.initializer[0]).T)
    g3 = build("matmul_const_3d_input")
    assert ops(g3) == ["reshape", "nn.dense", "reshape"] and g3.outputs[0].shape == (2, 3, 5)
    gd = build("matmul_dynamic")
    assert ops(gd) == ["nn.matmul"] and gd.outputs[0].shape == (2, 3, 5)
    gv = build("matmul_vector")
    assert gv.outputs[0].shape == (3,)


@pytest.mark.parametrize("ta, tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes(ta, tb):
    g = build(f"gemm_tA{ta}_tB{tb}")
    assert ops(g) == (["transpose"] if ta else []) + ["nn.dense", "add"]
    dense = calls_of(g, "nn.dense")[0]
    w = dense.inputs[1]
    assert isinstance(w, Constant) and w.shape == (5, 4)
    assert w.name == ("b" if tb else "gemm.weight_t")
    assert g.outputs[0].shape == (3, 5)


def test_gemm_alpha_beta_folded_into_constants():
    model, _ = CASES["gemm_alpha_beta"]()
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    g = from_onnx(model)
    assert ops(g) == ["nn.dense", "add"]
    dense, add = g.calls()
    np.testing.assert_allclose(dense.inputs[1].value, inits["b"] * 0.5)
    np.testing.assert_allclose(add.inputs[1].value, inits["c"] * 2.0)
    g2 = build("gemm_dynamic_b_alpha")
    assert ops(g2) == ["transpose", "transpose", "nn.dense", "multiply", "add"]
    assert ops(build("gemm_no_c_opset11")) == ["nn.dense"]


def test_pools():
    g = build("maxpool_variants")
    a, b, c, d = g.outputs
    assert a.attrs["ceil_mode"] == 1 and a.shape == (1, 2, 4, 3)
    assert b.attrs["padding"] == (0, 1, 0, 1) and b.shape == (1, 2, 4, 4)
    assert c.attrs["dilation"] == (2, 2) and c.attrs["padding"] == (1, 0, 1, 1)
    assert d.attrs["padding"] == (1, 0, 1, 1) and d.shape == (1, 2, 8, 4)
    assert all(o.op_name == "nn.max_pool2d" for o in g.outputs)
    ga = build("avgpool_variants")
    a, b, c, d = ga.outputs
    assert a.op_name == "nn.avg_pool2d" and a.attrs["count_include_pad"] == 1
    assert b.attrs["count_include_pad"] == 0 and b.shape == (1, 2, 4, 4)
    assert c.attrs["ceil_mode"] == 1 and c.shape == (1, 2, 4, 4)
    assert d.attrs["padding"] == (1, 1, 1, 1) and d.shape == (1, 2, 4, 4)


def test_maxpool_indices_import_as_their_op_and_3d_indices_are_an_error():
    node = helper.make_node("MaxPool", ["x"], ["y", "idx"], name="mp", kernel_shape=[2, 2], storage_order=1)
    g = from_onnx(make_model([node], [("x", F, [1, 1, 4, 4])], [("y", F, None), ("idx", I64, None)]))
    assert [o.op_name for o in g.outputs] == ["nn.max_pool2d", "nn.max_pool2d_indices"]
    assert g.outputs[1].attrs["storage_order"] == 1 and g.outputs[1].dtype == "int64"
    node = helper.make_node("MaxPool", ["x"], ["y", "idx"], name="mp3", kernel_shape=[2, 2, 2])
    model = make_model([node], [("x", F, [1, 1, 4, 4, 4])], [("y", F, None), ("idx", I64, None)])
    with pytest.raises(ModelError, match=r"'mp3'.*Indices output of a 3-D MaxPool"):
        from_onnx(model)


def test_global_pools_and_lrn():
    g = build("global_pools_lrn")
    a, b, c, d = g.outputs
    assert (a.op_name, b.op_name) == ("nn.global_avg_pool2d", "nn.global_max_pool2d")
    assert a.shape == b.shape == (1, 6, 1, 1)
    assert c.op_name == "nn.lrn" and c.attrs == {"size": 3, "alpha": pytest.approx(1e-4), "beta": 0.75, "bias": 1.0}
    assert d.attrs == {"size": 5, "alpha": pytest.approx(5e-4), "beta": pytest.approx(0.6), "bias": 2.0}


def test_flatten_and_reshape_static():
    g = build("flatten_reshape")
    assert ops(g) == ["reshape"] * 5
    assert [o.attrs["newshape"] for o in g.outputs] == [(6, 20), (1, 120), (24, 5), (2, 15, 4), (4, 3, 2, 5)]
    assert build("reshape_opset1_attr").outputs[0].shape == (2, 12)


def test_reshape_allowzero_and_dynamic_shape_error():
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)
    model = make_model([node], [("x", F, [0, 3])], [("y", F, None)], {"s": np.array([3, 0], np.int64)}, opset=14)
    assert from_onnx(model).outputs[0].shape == (3, 0)
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="dyn")
    model = make_model([node], [("x", F, [2, 3]), ("s", I64, [2])], [("y", F, [3, 2])])
    y = from_onnx(model).outputs[0]  # a shape computed at run time: bounded by the element count
    assert y.op_name == "dyn.reshape" and y.shape == (6, 6) and y.type.dynamic_axes == (0, 1)
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="dyn")
    model = make_model([node], [("x", F, [8, 8]), ("s", I64, [4])], [("y", F, [4, 4, 2, 2])])
    with pytest.raises(ModelError, match=r"dyn.*64\^4 elements"):
        from_onnx(model)


def test_transpose_concat():
    g = build("transpose_concat")
    t, c = g.outputs
    assert t.op_name == "transpose" and t.attrs["axes"] == (2, 1, 0) and t.shape == (4, 3, 2)
    assert c.op_name == "concatenate" and c.attrs["axis"] == 2 and c.shape == (2, 4, 7)


def test_softmax_opset11_vs_opset13_on_rank3():
    g11 = build("softmax_opset11_axis1")
    assert ops(g11) == ["reshape", "nn.softmax", "reshape"]
    assert calls_of(g11, "reshape")[0].attrs["newshape"] == (2, 12)
    assert calls_of(g11, "nn.softmax")[0].attrs["axis"] == 1
    assert g11.outputs[0].shape == (2, 3, 4)
    assert ops(build("softmax_opset11_default")) == ["reshape", "nn.softmax", "reshape"]
    last = build("softmax_opset11_last")
    assert ops(last) == ["nn.softmax"] and last.outputs[0].attrs["axis"] == 2
    g13 = build("softmax_opset13_axis1")
    assert ops(g13) == ["nn.softmax"] and g13.outputs[0].attrs["axis"] == 1
    assert build("softmax_opset13_default").outputs[0].attrs["axis"] == 2


def test_dropout_identity_and_its_inference_mask():
    assert ops(build("dropout_identity")) == ["nn.dropout", "identity"]
    model, _ = CASES["dropout_identity"]()
    model.graph.output.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 3]))
    mask = from_onnx(model).outputs[1]
    assert isinstance(mask, Constant) and mask.value.dtype == bool and mask.value.all()


def test_training_dropout_keeps_every_element_only_at_ratio_zero():
    g = build("dropout_training_zero_ratio")
    assert ops(g) == ["nn.dropout"]
    mask = g.outputs[1]
    assert isinstance(mask, Constant) and mask.value.dtype == bool and mask.value.all()
    model, _ = CASES["dropout_training_zero_ratio"]()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(0.25, np.float32), "r"))
    with pytest.raises(ModelError, match=r"training_mode=true with ratio 0.25 drops elements at random"):
        from_onnx(model)
    del model.graph.initializer[0]  # no ratio input: the default 0.5
    model.graph.node[0].input[1] = ""
    with pytest.raises(ModelError, match=r"ratio 0.5 drops"):
        from_onnx(model)


def test_constant_folding_of_shape_arithmetic():
    g = build("constants_and_shapes")
    assert ops(g) == ["add", "multiply", "reshape", "add"]
    reshape = calls_of(g, "reshape")[0]
    assert reshape.attrs["newshape"] == (2, 6)
    z = g.outputs[0].inputs[1]
    assert isinstance(z, Constant) and z.name == "z" and z.dtype == "float32"
    np.testing.assert_array_equal(z.value, np.full((1, 6), 0.5, np.float32))
    k = calls_of(g, "add")[0].inputs[1]
    assert isinstance(k, Constant) and k.name == "k"


def test_integer_shape_arithmetic_is_folded():
    g = build("shape_arithmetic")
    y, q = g.outputs
    assert ops(g) == ["reshape"] and y.attrs["newshape"] == (2, 6, 2)
    assert isinstance(q, Constant) and q.name == "q" and q.value.tolist() == [-3, -3, 1]


def test_unsqueeze_squeeze_opsets():
    g11 = build("unsqueeze_squeeze_opset11")
    u, s, t = g11.outputs
    assert u.attrs["newshape"] == (1, 3, 1, 2, 1) and s.shape == (3, 1, 2, 1) and t.shape == (3, 2)
    g13 = build("unsqueeze_squeeze_opset13")
    u, s = g13.outputs
    assert u.shape == (1, 3, 1, 2, 1) and s.shape == (1, 3, 1, 2)
    assert ops(g13) == ["reshape", "reshape"]


def test_shape_start_end_and_cast():
    g = build("shape_opset15_cast")
    add = calls_of(g, "add")[0]
    assert isinstance(add.inputs[1], Constant) and add.inputs[1].value.tolist() == [3.0]
    assert ops(g) == ["add", "cast", "cast"]
    assert [c.attrs["dtype"] for c in calls_of(g, "cast")] == ["int32", "float32"]


def test_initializers_listed_as_graph_inputs():
    g = build("initializers_in_graph_input")
    assert [v.name for v in g.inputs] == ["data"]
    consts = {e.name for e in g.topo() if isinstance(e, Constant)}
    assert {"w", "g", "bb", "m", "v"} <= consts
    assert ops(g) == ["nn.conv2d", "nn.batch_norm", "nn.relu"]


def test_constant_names_are_unique():
    for name in ("conv_bias", "gemm_alpha_beta", "constants_and_shapes", "matmul_const_3d_input"):
        g = build(name)
        names = [e.name for e in g.topo() if isinstance(e, Constant)]
        assert len(names) == len(set(names)) and all(names), (name, names)


def test_node_names_and_model_proto_input():
    model, _ = CASES["matmul_const_2d"]()
    g = from_onnx(model)
    assert g.calls()[0].name == "mm"
    model, _ = CASES["sum_variadic"]()  # unnamed nodes are named after their output tensor
    assert {c.name for c in from_onnx(model).calls()} == {"s", "t"}


# ---------------------------------------------------------------------------------------------
# Input shapes, dtypes
# ---------------------------------------------------------------------------------------------

def test_input_shapes_fix_symbolic_dims():
    g = build("symbolic_batch_fixed")
    assert g.inputs[0].shape == (2, 3) and g.outputs[0].shape == (2, 3)


def test_unresolved_symbolic_dim_suggests_a_range_and_a_size():
    model, *_ = CASES["symbolic_batch_fixed"]()
    with pytest.raises(ModelError, match=r"symbolic input dimensions without a bound: 'batch' \(x\[0\]\); bound each, "
                                         r"e.g. --dim-range batch=1..256, or fix one size, e.g. "
                                         r"--input-shapes \"x:\[64,3\]\"$"):
        from_onnx(model)


def test_input_shapes_unknown_name_lists_inputs():
    model, *_ = CASES["symbolic_batch_fixed"]()
    with pytest.raises(ModelError, match=r"'nope'.*inputs: x"):
        from_onnx(model, {"nope": (1, 3)})


def test_input_shapes_rank_mismatch():
    model, *_ = CASES["symbolic_batch_fixed"]()
    with pytest.raises(ModelError, match=r"rank 3.*rank 2"):
        from_onnx(model, {"x": (1, 3, 1)})


def test_unsupported_dtype_on_graph_input():
    node = helper.make_node("Identity", ["x"], ["y"])
    model = make_model([node], [("x", TensorProto.FLOAT8E4M3FN, [2])], [("y", TensorProto.FLOAT8E4M3FN, None)],
                       opset=19)
    with pytest.raises(ModelError, match=r"input 'x' has dtype float8_e4m3fn"):
        from_onnx(model)


def test_unsupported_dtype_on_constant_path():
    node = helper.make_node("Cast", ["x"], ["h"], name="to_f8", to=TensorProto.FLOAT8E4M3FN)
    model = make_model([node], [("x", F, [2])], [("h", TensorProto.FLOAT8E4M3FN, None)], opset=19)
    with pytest.raises(ModelError, match=r"to_f8.*'h'.*float8_e4m3fn"):
        from_onnx(model)


def test_bfloat16_tensors_import_as_ml_dtypes_bfloat16():
    """BFLOAT16 graph inputs, initializers and Cast targets: tvmc's bfloat16 (ml_dtypes' numpy
    type), the initializer's bits kept."""
    import ml_dtypes

    w = (np.arange(12, dtype=np.float32).reshape(4, 3) / 7).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["xb", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"])]
    model = make_model(nodes, [("x", F, [2, 4]), ("b", TensorProto.BFLOAT16, [3])],
                       [("z", TensorProto.BFLOAT16, None)], inits={"w": w})
    graph = from_onnx(model)
    assert [v.dtype for v in graph.inputs] == ["float32", "bfloat16"] and graph.outputs[0].dtype == "bfloat16"
    const, = [i for call in graph.calls() for i in call.inputs if isinstance(i, Constant)]
    assert const.value.dtype == np.dtype("bfloat16")
    np.testing.assert_array_equal(const.value.view(np.uint16), w.view(np.uint16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "int16", "uint16", "uint32", "uint64"])
def test_every_numpy_dtype_imports(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=F)]
    graph = from_onnx(make_model(nodes, [("x", elem, [2, 3])], [("y", F, None)]))
    assert graph.inputs[0].dtype == dtype and graph.outputs[0].dtype == "float32"


# ---------------------------------------------------------------------------------------------
# Unsupported operators, bad files
# ---------------------------------------------------------------------------------------------

def test_unsupported_ops_are_all_listed_before_conversion():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("RandomNormalLike", ["r"], ["e"], name="rnd1"),
             helper.make_node("RandomNormalLike", ["x"], ["e2"], name="rnd2"),
             helper.make_node("Multinomial", ["x"], ["sel"], name="draw")]
    model = make_model(nodes, [("x", F, [2, 2])], [("e", F, None), ("e2", F, None), ("sel", TensorProto.INT32, None)])
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert "RandomNormalLike (opset 13) at rnd1, rnd2" in msg and "Multinomial (opset 13) at draw" in msg
    assert [m[0] for m in info.value.missing] == ["RandomNormalLike", "Multinomial"]
    assert "\n" not in msg


def test_unsupported_opset_version_and_custom_domain():
    assert supports("Conv", 22) and supports("Conv", 1) and not supports("ConstantOfShape", 8)
    assert all(hasattr(fn, "versions") for fn in CONVERTERS.values())
    node = helper.make_node("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1])],
                              [helper.make_tensor_value_info("y", F, [1])])
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=7)
    with pytest.raises(UnsupportedOpError, match=r"com\.microsoft\.FusedConv \(opset 1\) at fc"):
        from_onnx(model)


def test_converters_cover_every_version_of_the_installed_onnx():
    """A new operator version in an onnx upgrade must be reviewed before a converter claims it."""
    import onnx.defs
    for op_type, fn in CONVERTERS.items():
        defined = set()
        for opset in range(1, onnx.defs.onnx_opset_version() + 1):
            try:
                defined.add(onnx.defs.get_schema(op_type, opset, "").since_version)
            except Exception:
                pass
        assert defined, op_type
        first = min(fn.versions)
        assert {v for v in defined if v >= first} <= fn.versions, (op_type, sorted(defined), sorted(fn.versions))


def test_function_body_nodes_are_named_after_the_node():
    g = build("rms_normalization_function_body")
    assert {"sqrt", "multiply", "mean"} <= set(ops(g)) and "RMSNormalization" not in ops(g)
    assert all(c.name.startswith("rms/") for c in g.calls())


def test_flexattention_imports_as_its_body():
    """FlexAttention (ai.onnx.preview) becomes its function body: matmuls and a softmax named
    after the node, the score_mod graph's tanh inlined, the GQA heads expanded."""
    g = build("flexattention_gqa_soft_cap_score_mod")
    assert {"nn.matmul", "nn.softmax", "tanh"} <= set(ops(g)) and "FlexAttention" not in ops(g)
    assert all(c.name.startswith("flex/") for c in g.calls())
    assert g.outputs[0].shape == (2, 4, 3, 6)
    assert supports("FlexAttention", 1, "ai.onnx.preview") and not supports("FlexAttention", 1)

def test_unsupported_op_in_a_function_body_names_the_function():
    node = helper.make_node("Bernoulli", ["p"], ["y"], name="coin", seed=1.0)
    model = make_model([node], [("p", F, [2, 3])], [("y", F, [2, 3])], opset=22)
    with pytest.raises(UnsupportedOpError, match=r"RandomUniformLike \(in the function body of Bernoulli\)"):
        from_onnx(model)


def test_if_with_a_run_time_condition_selects_per_output():
    g = build("if_runtime_condition")
    assert "where" in ops(g) and {"add", "multiply"} <= set(ops(g))


def test_loop_and_scan_unroll():
    assert ops(build("loop_constant_trip_count")).count("add") == 3
    assert ops(build("scan_running_sum")).count("add") == 4


def test_scan8_with_short_sequences_is_a_clear_error():
    model, _ = CASES["scan8_batch_reversed"]()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([4, 2], np.int64), "lens"))
    with pytest.raises(ModelError, match=r"sequence_lens \[4, 2\] must all equal the scan length \[4\]"):
        from_onnx(model)


def test_operator_docs_are_generated_from_the_table():
    from tvmc.frontend.onnx.registry import operator_table

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "onnx_operators.md")
    with open(path) as f:
        assert f.read() == operator_table(), "docs/onnx_operators.md is stale: run python -m tvmc.frontend.onnx"
    assert "| Conv | nn | 1, 11, 22 | - |" in operator_table()


def test_missing_file(tmp_path):
    path = tmp_path / "nothere.onnx"
    with pytest.raises(ModelError, match=f"{path}.*no such file"):
        from_onnx(path)


def test_garbage_file(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00\xffthis is not a protobuf\x13\x37" * 10)
    with pytest.raises(ModelError) as info:
        from_onnx(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_checker_failure(tmp_path):
    # Relu reads a tensor that nothing defines
    node = helper.make_node("Relu", ["undefined"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1])],
                              [helper.make_tensor_value_info("y", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelError) as info:
        from_onnx(str(path))
    msg = str(info.value)
    assert msg.startswith(f"{path}: onnx.checker failed:") and "\n" not in msg


def test_shape_mismatch_between_model_and_value_info():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    with pytest.raises(ModelError, match=r"'y'"):
        from_onnx(model)


# ---------------------------------------------------------------------------------------------
# The onnx package's light model zoo
# ---------------------------------------------------------------------------------------------

LIGHT_MODELS = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))


def test_light_models_are_present():
    assert len(LIGHT_MODELS) == 9, LIGHT_DIR


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_imports(path):
    model = onnx.load(path)
    reference = onnx.TensorProto()
    with open(path[:-5] + "_output_0.pb", "rb") as f:
        reference.ParseFromString(f.read())
    g = from_onnx(path)
    assert len(g.inputs) == 1 and g.inputs[0].shape == (1, 3, 224, 224) and g.inputs[0].dtype == "float32"
    assert g.output_names == tuple(o.name for o in model.graph.output)
    assert g.outputs[0].shape == tuple(reference.dims)
    assert g.outputs[0].shape in ((1, 1000), (1, 1000, 1, 1))
    assert not any(isinstance(e, Var) and e.name != g.inputs[0].name for e in g.topo())
    assert all(isinstance(c, Call) for c in g.calls())


def test_einsum_lowers_to_transpose_reshape_matmul_sum():
    g = build("einsum_equations")
    assert set(ops(g)) <= {"nn.matmul", "transpose", "reshape", "sum"}
    assert len(calls_of(g, "nn.matmul")) == 7 and calls_of(g, "sum")


def test_resize_antialias_is_one_matmul_per_resized_axis():
    g = build("resize_antialias")
    assert len(calls_of(g, "nn.matmul")) == 7 and not calls_of(g, "image.resize2d")


def test_dft_is_one_dense_per_transform_and_stft_one_take():
    g = build("dft20_lengths_and_axes")
    assert len(calls_of(g, "nn.dense")) == 4 and set(ops(g)) <= {"transpose", "reshape", "nn.dense"}
    g = build("stft_windows")
    assert len(calls_of(g, "take")) == 3 and len(calls_of(g, "nn.dense")) == 3
    assert len(calls_of(g, "multiply")) == 1  # the run-time window; the constant one is in the DFT matrix


def test_stft_default_onesided_is_one_sided_despite_onnx_inference():
    """STFT-17 without `onesided` is one-sided (its default), which onnx 1.23's shape inference
    reads as two-sided: the importer states the default before inferring, so the STFT and the Abs
    after it import with one-sided shapes instead of a cross-check error."""
    nodes = [helper.make_node("STFT", ["s", "step"], ["y"]), helper.make_node("Abs", ["y"], ["a"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s", F, [2, 24, 1])],
                              [helper.make_tensor_value_info("a", F, ["n", "frames", "bins", "c"])],
                              [numpy_helper.from_array(np.array(4, np.int64), "step"),
                               numpy_helper.from_array(np.ones(8, np.float32), "w")])
    graph.node[0].input.append("w")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert list(from_onnx(model).outputs[0].shape) == [2, 5, 5, 2]


def test_dft_length_input_must_be_a_constant():
    model = make_model([helper.make_node("DFT", ["x", "n"], ["y"], name="dft1")],
                       [("x", F, [2, 4, 2]), ("n", I64, [])], [("y", F, None)], opset=20)
    with pytest.raises(ModelError, match=r"'dft1'.*dft_length \('n'\) must be a constant"):
        from_onnx(model)


def test_einsum_diagonal_is_a_take_of_the_flattened_axes():
    g = build("einsum_diagonals_and_scalar")
    takes = calls_of(g, "take")
    assert [t.attrs["axis"] for t in takes] == [1, 0, 1, 0]  # after the batch axis, or alone
    assert "identity" in ops(g)  # "->" on a rank-0 operand: its value, as a new tensor
