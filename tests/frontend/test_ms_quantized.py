"""onnxruntime's `com.microsoft` quantized operators (tvmc/frontend/onnx/microsoft.py): a tiny model
per operator, compiled by tvmc for this host's CPU and compared with onnxruntime's outputs of the
same model; the QOperator CNN of tests/e2e/test_int8.py with Add and a global average pool
quantized too; one-line model errors for other com.microsoft operators and bad parameters.

Tolerances (the module docstring of microsoft.py says where the roundings may part): integer
outputs within 1 unit of onnxruntime's; float outputs within one unit of the integer accumulator
(a_scale * b_scale) of onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.errors import ModelError, UnsupportedOpError
from tvmc.frontend.onnx import from_onnx

pytest.importorskip("onnxruntime")
from tests.e2e.models import onnxruntime_outputs  # noqa: E402
from tests.e2e.test_int8 import _compile, _run, kernel_names  # noqa: E402

MS = "com.microsoft"
U8, I8, I32, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.FLOAT
NP = {U8: np.uint8, I8: np.int8, I32: np.int32, F: np.float32}


def _model(node, inputs, outputs, inits=None) -> onnx.ModelProto:
    """One com.microsoft node; inputs / outputs: [(name, elem type, shape)]; inits: {name: array}."""
    graph = helper.make_graph([node], "ms", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)],
                             ir_version=8)


def _data(elem, shape, seed):
    """Seeded 8-bit data over the whole range, its first values the two ends."""
    dtype = NP[elem]
    info = np.iinfo(dtype)
    v = np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)
    v.reshape(-1)[:2] = (info.min, info.max)
    return v


def _check(model, inputs: dict, float_step: float = 0.0, expect_kernel: str | None = None):
    """Compile and run `model`; each output against onnxruntime's: integers within 1 unit, floats
    within `float_step` (+ float32 rounding)."""
    module = _compile(model)
    got, _ = _run(module, inputs)
    ref = onnxruntime_outputs(model, inputs)
    for name, r in ref.items():
        assert got[name].dtype == r.dtype and got[name].shape == r.shape, (name, got[name].dtype, got[name].shape)
        if np.issubdtype(r.dtype, np.integer):
            err = np.abs(got[name].astype(np.int64) - r.astype(np.int64))
            assert err.max() <= 1, f"{name}: {err.max()} units from onnxruntime"
            assert (err == 0).mean() > 0.95, f"{name}: {(err != 0).sum()} of {err.size} values off by one"
        else:
            np.testing.assert_allclose(got[name], r, rtol=1e-5, atol=float_step * 1.0001)
    if expect_kernel:
        names = kernel_names(module)
        assert any(expect_kernel in k for k in names), names
    return got, ref


# --- elementwise ------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [U8, I8], ids=["uint8", "int8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op, elem):
    """A [2, 3, 4, 5] with B [3, 1, 5] broadcast; zero points inside the range, C's scale smaller
    than the inputs' for Add (outputs saturate) and chosen for Mul so products spread."""
    zp = {U8: (118, 131, 125), I8: (-3, 7, -10)}[elem]
    c_scale = 0.05 if op == "QLinearAdd" else 0.6
    inits = {"a_s": np.float32(0.031), "a_z": np.array(zp[0], NP[elem]), "b_s": np.float32(0.047),
             "b_z": np.array(zp[1], NP[elem]), "c_s": np.float32(c_scale), "c_z": np.array(zp[2], NP[elem])}
    node = helper.make_node(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"], domain=MS, name="q")
    model = _model(node, [("a", elem, [2, 3, 4, 5]), ("b", elem, [3, 1, 5])], [("c", elem, [2, 3, 4, 5])], inits)
    got, ref = _check(model, {"a": _data(elem, (2, 3, 4, 5), 1), "b": _data(elem, (3, 1, 5), 2)})
    assert len(np.unique(ref["c"])) > 20  # not all saturated


def test_qlinear_add_without_zero_points():
    """The optional zero points absent mean 0: compared with onnxruntime on the model that states
    them (its type inference refuses QLinearAdd without them)."""
    inits = {"a_s": np.float32(0.02), "b_s": np.float32(0.03), "c_s": np.float32(0.04)}
    zeros = {"a_z": np.uint8(0), "b_z": np.uint8(0), "c_z": np.uint8(0)}
    io = [("a", U8, [4, 8]), ("b", U8, [4, 8])], [("c", U8, [4, 8])]
    absent = _model(helper.make_node("QLinearAdd", ["a", "a_s", "", "b", "b_s", "", "c_s"], ["c"], domain=MS), *io,
                    inits)
    stated = _model(helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"],
                                     domain=MS), *io, {**inits, **zeros})
    inputs = {"a": _data(U8, (4, 8), 3), "b": _data(U8, (4, 8), 4)}
    got, _ = _run(_compile(absent), inputs)
    ref = onnxruntime_outputs(stated, inputs)
    assert np.abs(got["c"].astype(int) - ref["c"].astype(int)).max() <= 1


def test_qlinear_concat_copies_and_requantizes():
    """Three inputs on axis 1: the first with Y's scale and zero point (copied), the others
    requantized (one of them a constant)."""
    inits = {"y_s": np.float32(0.05), "y_z": np.uint8(128), "s0": np.float32(0.05), "z0": np.uint8(128),
             "s1": np.float32(0.11), "z1": np.uint8(100), "x2": _data(U8, (2, 2, 3), 9), "s2": np.float32(0.02),
             "z2": np.uint8(3)}
    node = helper.make_node("QLinearConcat", ["y_s", "y_z", "x0", "s0", "z0", "x1", "s1", "z1", "x2", "s2", "z2"],
                            ["y"], domain=MS, axis=1)
    model = _model(node, [("x0", U8, [2, 3, 3]), ("x1", U8, [2, 4, 3])], [("y", U8, [2, 9, 3])], inits)
    x0 = _data(U8, (2, 3, 3), 5)
    got, ref = _check(model, {"x0": x0, "x1": _data(U8, (2, 4, 3), 6)})
    np.testing.assert_array_equal(got["y"][:, :3], x0)


@pytest.mark.parametrize("elem", [U8, I8], ids=["uint8", "int8"])
def test_qlinear_leaky_relu(elem):
    zp = {U8: (120, 30), I8: (-5, -100)}[elem]
    inits = {"x_s": np.float32(0.07), "x_z": np.array(zp[0], NP[elem]), "y_s": np.float32(0.05),
             "y_z": np.array(zp[1], NP[elem])}
    node = helper.make_node("QLinearLeakyRelu", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, alpha=0.3)
    model = _model(node, [("x", elem, [3, 5, 7])], [("y", elem, [3, 5, 7])], inits)
    _check(model, {"x": _data(elem, (3, 5, 7), 11)})


@pytest.mark.parametrize("elem", [U8, I8], ids=["uint8", "int8"])
def test_qlinear_sigmoid(elem):
    zp = {U8: (128, 0), I8: (0, -128)}[elem]
    inits = {"x_s": np.float32(0.05), "x_z": np.array(zp[0], NP[elem]), "y_s": np.float32(1 / 256),
             "y_z": np.array(zp[1], NP[elem])}
    node = helper.make_node("QLinearSigmoid", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS)
    model = _model(node, [("x", elem, [4, 64])], [("y", elem, [4, 64])], inits)
    # every input value once (and more): the whole 256-entry table onnxruntime builds
    x = np.arange(256).astype(np.uint8).view(NP[elem]).reshape(4, 64)
    _check(model, {"x": x})


@pytest.mark.parametrize("case", ["uint8_13", "int8_13_axis1", "uint8_12_coerced"])
def test_qlinear_softmax(case):
    """opset 13 along the last axis and along axis 1 (uint8 with y_zp 0, int8 with y_zp -128, y_scale
    1/256 as onnxruntime's quantizer sets it); opset 12: coerced to 2-D from axis 1."""
    elem = I8 if case.startswith("int8") else U8
    opset = 12 if case.endswith("coerced") else 13
    axis = 1 if "axis1" in case or opset == 12 else -1
    inits = {"x_s": np.float32(0.06), "x_z": np.array(-10 if elem == I8 else 120, NP[elem]),
             "y_s": np.float32(1 / 256), "y_z": np.array(-128 if elem == I8 else 0, NP[elem])}
    node = helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, opset=opset,
                            axis=axis)
    shape = [2, 5, 6]
    model = _model(node, [("x", elem, shape)], [("y", elem, shape)], inits)
    _check(model, {"x": _data(elem, shape, 13)})


# --- pooling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["nchw", "nhwc_count_pad"])
def test_qlinear_average_pool(layout):
    """3x3, stride 2, padding 1 on [1, 4, 7, 7] (NCHW; or NHWC with channels_last and
    count_include_pad)."""
    last = layout.startswith("nhwc")
    shape, out = ([1, 7, 7, 4], [1, 4, 4, 4]) if last else ([1, 4, 7, 7], [1, 4, 4, 4])
    inits = {"x_s": np.float32(0.04), "x_z": np.uint8(100), "y_s": np.float32(0.03), "y_z": np.uint8(90)}
    node = helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS,
                            kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], channels_last=int(last),
                            count_include_pad=int(last))
    model = _model(node, [("x", U8, shape)], [("y", U8, out)], inits)
    _check(model, {"x": _data(U8, shape, 17)})


@pytest.mark.parametrize("case", ["uint8_nchw", "int8_nhwc"])
def test_qlinear_global_average_pool(case):
    elem = I8 if case.startswith("int8") else U8
    last = case.endswith("nhwc")
    shape, out = ([2, 5, 5, 8], [2, 1, 1, 8]) if last else ([2, 8, 5, 5], [2, 8, 1, 1])
    inits = {"x_s": np.float32(0.05), "x_z": np.array(-7 if elem == I8 else 127, NP[elem]),
             "y_s": np.float32(0.01), "y_z": np.array(3 if elem == I8 else 126, NP[elem])}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS,
                            channels_last=int(last))
    model = _model(node, [("x", elem, shape)], [("y", elem, out)], inits)
    got, ref = _check(model, {"x": _data(elem, shape, 19)})
    assert len(np.unique(ref["y"])) > 4


# --- matrix products --------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["uint8_out_per_column", "float_out_alpha"])
def test_qgemm(case):
    """uint8 A [5, 16] x a constant int8 B given transposed [8, 16] (transB), int32 C [8]; a uint8
    output (b_scale per column) or a float one (alpha 0.5, no y_scale)."""
    rng = np.random.default_rng(23)
    quantized = case.startswith("uint8")
    inits = {"a_s": np.float32(0.02), "a_z": np.uint8(120), "b": rng.integers(-127, 128, (8, 16)).astype(np.int8),
             "b_s": (rng.uniform(0.002, 0.01, 8) if quantized else np.array(0.004)).astype(np.float32),
             "b_z": np.zeros(8 if quantized else (), np.int8), "c": rng.integers(-2000, 2000, 8).astype(np.int32)}
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "c"]
    if quantized:
        inits.update(y_s=np.float32(0.08), y_z=np.uint8(128))
        names += ["y_s", "y_z"]
    node = helper.make_node("QGemm", names, ["y"], domain=MS, transB=1, **({} if quantized else {"alpha": 0.5}))
    model = _model(node, [("a", U8, [5, 16])], [("y", U8 if quantized else F, [5, 8])], inits)
    _check(model, {"a": _data(U8, (5, 16), 29)}, float_step=0.5 * 0.02 * 0.004, expect_kernel="qnn_dense")


def test_matmul_integer_to_float():
    """uint8 A [2, 3, 16] (run-time) x constant int8 B [16, 8] with per-column scales and zero
    points, + bias."""
    rng = np.random.default_rng(31)
    inits = {"b": rng.integers(-128, 128, (16, 8)).astype(np.int8), "a_s": np.float32(0.03),
             "b_s": rng.uniform(0.001, 0.01, 8).astype(np.float32), "a_z": np.uint8(125),
             "b_z": np.zeros(8, np.int8), "bias": rng.standard_normal(8).astype(np.float32)}
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "a_s", "b_s", "a_z", "b_z", "bias"], ["y"], domain=MS)
    model = _model(node, [("a", U8, [2, 3, 16])], [("y", F, [2, 3, 8])], inits)
    _check(model, {"a": _data(U8, (2, 3, 16), 37)}, float_step=0.03 * 0.01, expect_kernel="qnn_dense")


@pytest.mark.parametrize("case", ["per_column_bias", "per_tensor"])
def test_dynamic_quantize_matmul(case):
    """float A [2, 4, 16] quantized at run time to uint8, x constant int8 B [16, 8]."""
    rng = np.random.default_rng(41)
    per_column = case == "per_column_bias"
    inits = {"b": rng.integers(-128, 128, (16, 8)).astype(np.int8),
             "b_s": (rng.uniform(0.001, 0.01, 8) if per_column else np.array(0.005)).astype(np.float32)}
    names = ["a", "b", "b_s"]
    if per_column:
        inits.update(b_z=np.zeros(8, np.int8), bias=rng.standard_normal(8).astype(np.float32))
        names += ["b_z", "bias"]
    node = helper.make_node("DynamicQuantizeMatMul", names, ["y"], domain=MS)
    model = _model(node, [("a", F, [2, 4, 16])], [("y", F, [2, 4, 8])], inits)
    a = rng.standard_normal((2, 4, 16)).astype(np.float32)
    a_step = (a.max() - min(a.min(), 0)) / 255
    # the same quantization of A on both sides: the accumulators agree, the float scaling rounds
    _check(model, {"a": a}, float_step=a_step * 0.01, expect_kernel="qnn_dense")


# --- errors -----------------------------------------------------------------------------------

def test_unsupported_com_microsoft_op_is_a_one_line_error():
    node = helper.make_node("QLinearWhere", ["c", "x", "x_s", "x_z", "y", "y_s", "y_z", "z_s", "z_z"], ["z"],
                            domain=MS, name="where0")
    inits = {"x_s": np.float32(0.1), "x_z": np.uint8(0), "y_s": np.float32(0.1), "y_z": np.uint8(0),
             "z_s": np.float32(0.1), "z_z": np.uint8(0)}
    model = _model(node, [("c", TensorProto.BOOL, [4]), ("x", U8, [4]), ("y", U8, [4])], [("z", U8, [4])], inits)
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "\n" not in message
    assert "com.microsoft.QLinearWhere (opset 1) at where0" in message


def _qadd(a_s=None, a_z=None) -> onnx.ModelProto:
    inits = {"a_s": np.float32(0.1) if a_s is None else a_s, "a_z": np.uint8(3) if a_z is None else a_z,
             "b_s": np.float32(0.1), "b_z": np.uint8(0), "c_s": np.float32(0.1), "c_z": np.uint8(0)}
    node = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"], domain=MS,
                            name="add0")
    return _model(node, [("a", U8, [4]), ("b", U8, [4])], [("c", U8, [4])], inits)


def test_scale_of_wrong_shape_is_a_model_error():
    with pytest.raises(ModelError, match=r"node 'add0' \(QLinearAdd\): A_scale .*\[2\].* must be a scalar"):
        from_onnx(_qadd(a_s=np.full(2, 0.1, np.float32)))


def test_zero_point_of_wrong_shape_is_a_model_error():
    with pytest.raises(ModelError, match=r"node 'add0' \(QLinearAdd\): A_zero_point .* must be a scalar"):
        from_onnx(_qadd(a_z=np.zeros(3, np.uint8)))


def test_zero_point_outside_its_range_is_a_model_error():
    with pytest.raises(ModelError, match=r"node 'add0' \(QLinearAdd\): A_zero_point 300 is outside uint8's range"):
        from_onnx(_qadd(a_z=np.int32(300)))


def test_qgemm_per_column_scale_of_wrong_length_is_a_model_error():
    inits = {"a_s": np.float32(0.02), "a_z": np.uint8(120), "b": np.ones((16, 8), np.int8),
             "b_s": np.full(5, 0.01, np.float32), "b_z": np.int8(0)}
    node = helper.make_node("QGemm", ["a", "a_s", "a_z", "b", "b_s", "b_z"], ["y"], domain=MS, name="gemm0")
    model = _model(node, [("a", U8, [5, 16])], [("y", F, [5, 8])], inits)
    with pytest.raises(ModelError, match=r"node 'gemm0' \(QGemm\): b_scale .*\[5\].* must be a scalar or \[8\]"):
        from_onnx(model)


# --- end to end: onnxruntime.quantization's QOperator CNN with QLinearAdd and the global pool --

def _residual_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv + Relu, a residual block (Conv + Relu, Add), GlobalAveragePool, Flatten, MatMul + Add:
    input [1, 3, 16, 16] -> logits [1, 10]."""
    from tests.e2e.builders import _Builder
    from tests.e2e.test_int8 import CNN_INPUT

    b = _Builder(seed)
    r = b.rng
    w1, b1 = b.const(r.standard_normal((32, 3, 3, 3)) * 0.3), b.const(r.standard_normal(32) * 0.1)
    y = b.node("Relu", [b.node("Conv", ["input", w1, b1], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    w2, b2 = b.const(r.standard_normal((32, 32, 3, 3)) * 0.1), b.const(r.standard_normal(32) * 0.1)
    z = b.node("Relu", [b.node("Conv", [y, w2, b2], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    y = b.node("Flatten", [b.node("GlobalAveragePool", [b.node("Add", [y, z])])])
    y = b.node("Add", [b.node("MatMul", [y, b.const(r.standard_normal((32, 10)) * 0.2)]),
                       b.const(r.standard_normal(10) * 0.1)])
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, list(CNN_INPUT))],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 10])], "residual_cnn")


def test_quantize_static_qoperator_cnn_with_add_and_global_pool_matches_onnxruntime(tmp_path):
    """quantize_static (QOperator, uint8 activations, int8 weights, calibrated on seeded inputs) with
    Add and GlobalAveragePool quantized: QLinearConv, QLinearAdd (com.microsoft),
    QLinearGlobalAveragePool (com.microsoft), QLinearMatMul; every 8-bit tensor within one unit of
    onnxruntime's and the float logits within one quantization step (tests/e2e/test_int8.py)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    from tests.e2e.test_int8 import CNN_INPUT, _check_int8_model, _Reader, expose_quantized

    model = _residual_cnn(seed=5)
    src, dst = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(model, src)
    quantization.quantize_static(str(src), str(dst), _Reader("input", CNN_INPUT),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 op_types_to_quantize=["Conv", "MatMul", "Relu", "Add", "GlobalAveragePool",
                                                       "Flatten"],
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    ops = {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QLinearMatMul", "QuantizeLinear"}
    qmodel = expose_quantized(onnx.load(dst), tuple(ops))
    assert {(n.domain, n.op_type) for n in qmodel.graph.node} >= {(MS, "QLinearAdd"), (MS, "QLinearGlobalAveragePool")}
    # ONNX's shape inference does not know the com.microsoft outputs: expose each with its rank (that of
    # its first input, known once the outputs before it are declared) and symbolic extents
    pending = [n for n in qmodel.graph.node if n.domain == MS]
    while pending:
        inferred = onnx.shape_inference.infer_shapes(qmodel).graph
        ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*inferred.value_info, *inferred.output]}
        ready = [n for n in pending if n.input[0] in ranks]
        assert ready, [n.name for n in pending]
        qmodel.graph.output.extend(helper.make_tensor_value_info(n.output[0], U8, [f"{n.output[0]}_{i}" for i in
                                                                                   range(ranks[n.input[0]])])
                                   for n in ready)
        pending = [n for n in pending if n not in ready]
    assert len(qmodel.graph.output) == 7  # logits, QuantizeLinear, 2 QLinearConv, 2 QLinearAdd, the pool
    x = np.random.default_rng(7).standard_normal(CNN_INPUT).astype(np.float32)
    _check_int8_model(qmodel, model, {"input": x}, ("qnn_conv2d", "qnn_dense"))
