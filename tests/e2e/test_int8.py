"""End to end, int8: models quantized here with onnxruntime.quantization (quantize_static in the
QOperator and QDQ formats, per tensor and per channel, calibrated on seeded random inputs;
quantize_dynamic), compiled by tvmc for this host's CPU and compared with onnxruntime's outputs of
the same quantized model (issue 28), not with the float model's.

Tolerances: an integer (quantized) output within 1 unit; a float output (a dequantized one, or
the float Add after a quantized MatMul) within 1 quantization step of the tensor it dequantizes.
The one-unit slack covers requantization rounding: tvmc multiplies the int32 accumulator by the
scale in float64 as ONNX's reference does, onnxruntime's MLAS in float32, and the two may round
a value near .5 to neighbouring integers.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.e2e.builders import _Builder
from tests.e2e.models import onnxruntime_outputs

quantization = pytest.importorskip("onnxruntime.quantization", reason="quantize_static / quantize_dynamic")

# mod.params of an int8 model against its float original (issue 28: at most 0.3x)
MAX_PARAMS_RATIO = 0.3
# the kernel of a qnn.conv2d that AlterOpLayout's float_narrow_int8 rule runs as a float conv on its
# integer values (x - x_zp, w; exact), its sums cast to int32 and requantized: a 3-channel stem
INTEGER_VALUED_FLOAT_CONV = "nn_conv2d_nchwc_cast_"
CNN_INPUT = (1, 3, 16, 16)


def _stem_kernel(target=None) -> str:
    """The kernel name part of a 3-channel stem on `target` (default this host): the u8s8 row
    kernel where its dot-product form says `narrow: dot` (VNNI), else the float conv on integer
    values (targets/isa/*.yaml dot_u8s8)."""
    from tvmc.target import resolve_target

    dot = (target or resolve_target("native")).narrow_int8_conv == "dot"
    return "qnn_conv2d_nchw_u8s8" if dot else INTEGER_VALUED_FLOAT_CONV


def _cnn(seed: int = 0) -> onnx.ModelProto:
    """Two 3x3 convs (+ bias, relu, max pooling; the second stride 2) and a MatMul + Add head:
    input [1, 3, 16, 16] -> logits [1, 10]."""
    b = _Builder(seed)
    r = b.rng
    w1, b1 = b.const(r.standard_normal((16, 3, 3, 3)) * 0.3), b.const(r.standard_normal(16) * 0.1)
    y = b.node("Relu", [b.node("Conv", ["input", w1, b1], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    w2, b2 = b.const(r.standard_normal((32, 16, 3, 3)) * 0.1), b.const(r.standard_normal(32) * 0.1)
    y = b.node("Relu", [b.node("Conv", [y, w2, b2], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])])
    y = b.node("Flatten", [b.node("MaxPool", [y], kernel_shape=[4, 4], strides=[4, 4])])
    y = b.node("Add", [b.node("MatMul", [y, b.const(r.standard_normal((32, 10)) * 0.2)]),
                       b.const(r.standard_normal(10) * 0.1)])
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, list(CNN_INPUT))],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 10])], "cnn")


def _mlp(seed: int = 0, seq: int = 8, hidden: int = 64) -> onnx.ModelProto:
    """A transformer-style feed-forward block on x [2, seq, hidden]: MatMul + Add, Relu, MatMul +
    Add, the residual Add."""
    b = _Builder(seed)
    r = b.rng
    h = b.node("Add", [b.node("MatMul", ["x", b.const(r.standard_normal((hidden, 4 * hidden)) * 0.1)]),
                       b.const(r.standard_normal(4 * hidden) * 0.1)])
    h = b.node("Relu", [h])
    h = b.node("Add", [b.node("MatMul", [h, b.const(r.standard_normal((4 * hidden, hidden)) * 0.05)]),
                       b.const(r.standard_normal(hidden) * 0.1)])
    y = b.node("Add", ["x", h])
    shape = [2, seq, hidden]
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, shape)], "mlp")


class _Reader(quantization.CalibrationDataReader):
    """Calibration data: a few seeded standard-normal inputs."""

    def __init__(self, name: str, shape, count: int = 4, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


def _quantize_static(model, fmt: str, per_channel: bool, activation: str = "QUInt8") -> onnx.ModelProto:
    """The CNN quantized by onnxruntime: uint8 activations (or `activation` QInt8), int8 weights;
    Conv and MatMul only (the QOperator form of Add, QLinearAdd, is a com.microsoft operator)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "float.onnx"), Path(tmp, "int8.onnx")
        onnx.save(model, src)
        quantization.quantize_static(str(src), str(dst), _Reader("input", CNN_INPUT),
                                     quant_format=getattr(quantization.QuantFormat, fmt), per_channel=per_channel,
                                     op_types_to_quantize=["Conv", "MatMul", "Relu", "MaxPool", "Flatten"],
                                     activation_type=getattr(quantization.QuantType, activation),
                                     weight_type=quantization.QuantType.QInt8)
        return onnx.load(dst)


def _quantize_resnet_style(model, size: int = 16) -> onnx.ModelProto:
    """builders.resnet_style_cnn quantized by onnxruntime: QDQ, per-channel int8 weights, uint8
    activations (BatchNorm left unfolded, residual Adds, a Gemm head), calibrated on _Reader's."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "float.onnx"), Path(tmp, "int8.onnx")
        onnx.save(model, src)
        quantization.quantize_static(str(src), str(dst), _Reader("input", (1, 3, size, size)),
                                     quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                     activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8)
        return onnx.load(dst)


def _quantize_dynamic(model) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "float.onnx"), Path(tmp, "int8.onnx")
        onnx.save(model, src)
        quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8)
        return onnx.load(dst)


def _compile(model, target=None, options=None):
    """`model` compiled for the resolved `target` (default: this host, "native") at opt level 3."""
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.target import resolve_target

    return compile_model(model, target or resolve_target("native"), options or CompileOptions(opt_level=3))


def _run(module, inputs: dict) -> dict:
    from tvmc.package import load_artifact, save_artifact
    from tvmc.runtime import create_executor

    with tempfile.TemporaryDirectory() as tmp:
        path = save_artifact(module, Path(tmp, "mod.tar"))
        params_bytes = load_artifact(path).params_bytes
        ex = create_executor(path)
        for k, v in inputs.items():
            ex.set_input(k, v)
        ex.run()
        names = [o["name"] for o in module.metadata["outputs"]]
        return {n: ex.get_output(i) for i, n in enumerate(names)}, params_bytes


def kernel_names(module) -> list:
    return [n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"]


def _float_params_bytes(model) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _dequantized_step(model, output: str) -> float:
    """The scale of the DequantizeLinear whose output feeds `output` (through a float Add or
    directly): one quantization step of that float output."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = producers[output]
    while node.op_type != "DequantizeLinear":
        node = next(producers[i] for i in node.input if i in producers)
    return float(np.max(inits[node.input[1]]))


def expose_quantized(model, op_types=("QLinearConv", "QLinearMatMul", "QuantizeLinear")) -> onnx.ModelProto:
    """`model` with the outputs of its `op_types` nodes (8-bit tensors) as extra graph outputs,
    so their integers are compared too."""
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {v.name: v for v in inferred.graph.value_info}
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        if node.op_type in op_types and node.output[0] in infos and node.output[0] not in have:
            model.graph.output.append(infos[node.output[0]])
    return model


def _check_int8_model(qmodel, float_model, inputs: dict, expect_kernels: tuple, target=None, options=None):
    """Compile (for `target` with `options`, default this host) and run `qmodel`: outputs within
    one quantization step of onnxruntime's (see the module docstring), mod.params at most
    MAX_PARAMS_RATIO of the float model's initializers, and the integer ops compiled as qnn
    kernels (no float conv/dense/matmul kernel left but a float conv on integer values, AlterOpLayout's
    float_narrow_int8 rule for a conv of fewer than 4 / not a multiple of 4 input channels: its
    kernel casts the exact sums to int32 and requantizes, `nn_conv2d_nchwc_cast_`)."""
    module = _compile(qmodel, target, options)
    got, params_bytes = _run(module, inputs)
    ref = onnxruntime_outputs(qmodel, inputs)
    assert any(np.issubdtype(r.dtype, np.integer) for r in ref.values())
    for name, r in ref.items():
        if np.issubdtype(r.dtype, np.integer):
            err = np.abs(got[name].astype(np.int64) - r.astype(np.int64)).max()
            assert err <= 1, f"{name}: {err} units from onnxruntime"
        else:
            step = _dequantized_step(qmodel, name)
            err = np.abs(got[name] - r).max()
            assert err <= step * 1.0001, f"{name}: {err} from onnxruntime, one step is {step}"
    ratio = params_bytes / _float_params_bytes(float_model)
    assert ratio <= MAX_PARAMS_RATIO, f"mod.params {params_bytes} bytes: {ratio:.2f}x the float model's"
    names = kernel_names(module)
    for op in expect_kernels:
        assert any(op in k for k in names), f"no {op} kernel in {names}"
    float_anchors = [k for k in names if any(f in k.replace(f"qnn_{f}", "") for f in ("conv2d", "dense", "matmul"))
                     and INTEGER_VALUED_FLOAT_CONV not in k]
    assert not float_anchors, f"float kernels left: {float_anchors}"
    return module


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_quantize_static_cnn_matches_onnxruntime(fmt, per_channel):
    """QOperator: QLinearConv x2 (relu folded into their output range by the quantizer), uint8
    MaxPool, QLinearMatMul, then DequantizeLinear and the float Add. QDQ: the same chains as
    DequantizeLinear -> Conv / MatMul -> QuantizeLinear (an int32 bias through DequantizeLinear),
    which FakeQuantizationToInteger turns into qnn ops (the MatMul into qnn.dense); MaxPool stays
    float between a dequantize and a quantize. The 16 -> 32 channel conv (symmetric int8 weights)
    runs on the dot-product kernel (qnn.conv2d_nchwc_u8s8, AlterOpLayout), the 3-channel stem on
    the row kernel (VNNI) or as a float conv on its integer values (the float_narrow_int8 rule, as
    the host's dot-product form says), none on the generic qnn.conv2d,
    and both formats' MatMul (a constant 2-D weight) on qnn.dense_u8s8."""
    model = _cnn(seed=3)
    qmodel = expose_quantized(_quantize_static(model, fmt, per_channel))
    ops = {n.op_type for n in qmodel.graph.node}
    assert {"QLinearConv", "QLinearMatMul"} <= ops if fmt == "QOperator" else {"Conv", "DequantizeLinear"} <= ops
    x = np.random.default_rng(7).standard_normal(CNN_INPUT).astype(np.float32)
    module = _check_int8_model(qmodel, model, {"input": x}, ("qnn_conv2d_nchwc_u8s8", "qnn_dense_u8s8"))
    convs = [k for k in kernel_names(module) if "qnn_conv2d" in k]
    stem = _stem_kernel()
    assert sum("qnn_conv2d_nchwc_u8s8" in k for k in convs) == 1, convs
    assert len(convs) == 1 + (stem != INTEGER_VALUED_FLOAT_CONV), convs
    assert sum(stem in k for k in kernel_names(module)) == 1


def test_quantize_static_resnet_style_has_no_float_chains_between_convs():
    """A small ResNet (BatchNorm unfolded by the quantizer, MaxPool, residual Adds, a Gemm head)
    quantized QDQ per channel: onnxruntime's int8 outputs within one unit (every quantized tensor
    exposed), and, compiled as it is, no float op between the convs (FoldQuantizedChains): each
    conv kernel ends in qnn.rescale (the BatchNorm) or qnn.add (the residual), none dequantizes
    but the last (into the float GlobalAveragePool), and the MaxPool runs on the uint8 tensor."""
    from tests.e2e.builders import resnet_style_cnn

    model = resnet_style_cnn(seed=2, size=16)
    qmodel = _quantize_resnet_style(model)
    assert "BatchNormalization" in {n.op_type for n in qmodel.graph.node}
    x = np.random.default_rng(11).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ("qnn_conv2d_nchwc_u8s8", "qnn_dense_u8s8")
    _check_int8_model(expose_quantized(onnx.ModelProto.FromString(qmodel.SerializeToString())), model, {"input": x},
                      expected)
    module = _compile(qmodel)
    got, _ = _run(module, {"input": x})
    ref = onnxruntime_outputs(qmodel, {"input": x})["logits"]
    assert np.abs(got["logits"] - ref).max() <= _dequantized_step(qmodel, "logits") * 1.0001
    names = kernel_names(module)
    convs = [k for k in names if "qnn_conv2d" in k or INTEGER_VALUED_FLOAT_CONV in k]
    assert len(convs) == 6 and all("qnn_rescale" in k for k in convs), convs
    assert not any("qnn_dequantize" in k or "multiply" in k for k in convs[:-1]), convs
    pools = [k for k in names if "max_pool2d" in k]
    assert pools and not any("quantize" in k for k in pools), pools


# (target spec, --target-option features, the dot-product instruction of its dense_u8s8 kernel,
# the instruction of its 16 -> 32 channel conv kernel)
DOT_PRODUCT_TARGETS = [
    # one data row: the split form's vpmaddubsw; the conv: vpmaddwd on int16 data pairs
    pytest.param("x86-avx2", None, "vpmaddubsw", "vpmaddwd", id="x86-avx2"),
    pytest.param("arm-neoverse-n1", None, "sdot", "sdot", id="arm-neoverse-n1"),
    pytest.param("arm-neoverse-n1", "+i8mm", "usdot", "usmmla", id="arm-i8mm"),
    pytest.param("wasm", None, "i32x4.dot_i16x8_s", "i32x4.dot_i16x8_s", id="wasm"),
    pytest.param("wasm", "+relaxed-simd", "i32x4.relaxed_dot_i8x16_i7x16_add_s",
                 "i32x4.relaxed_dot_i8x16_i7x16_add_s", id="wasm-relaxed"),
]


@pytest.mark.parametrize("spec,features,insn,conv_insn", DOT_PRODUCT_TARGETS)
def test_quantize_static_cnn_on_dot_product_targets(spec, features, insn, conv_insn):
    """The QOperator CNN on x86's AVX2 form and the AArch64 and wasm32 dot-product forms
    (targets/isa/*.yaml dot_u8s8), run here or under qemu-user or wasmtime: onnxruntime's int8
    outputs, and in the `asm` dump
    the dense kernel (QLinearMatMul -> qnn.dense_u8s8) shows the form's instruction, the second
    conv's kernel (16 -> 32 channels) the form's, or on +i8mm the matrix multiply-accumulate
    (qnn.conv2d_nchwc_u8s8_mmla: usmmla)."""
    from tvmc.driver import CompileOptions
    from tvmc.runtime import device_missing
    from tvmc.target import resolve_target

    target = resolve_target(spec, {"features": features} if features else None)
    reason = device_missing(target)
    if reason:
        pytest.skip(f"target {target.name}: {reason}")
    model = _cnn(seed=3)
    qmodel = expose_quantized(_quantize_static(model, "QOperator", False))
    x = np.random.default_rng(7).standard_normal(CNN_INPUT).astype(np.float32)
    with tempfile.TemporaryDirectory() as dumps:
        options = CompileOptions(opt_level=3, dump_ir=("asm",), dump_dir=dumps)
        _check_int8_model(qmodel, model, {"input": x}, ("qnn_conv2d", "qnn_dense_u8s8"), target, options)
        asm = "\n".join(p.read_text() for p in Path(dumps).rglob("*.s"))
    for prefix, want in (("fused_qnn_dense_u8s8", insn), ("fused_qnn_conv2d_nchwc", conv_insn)):
        assert re.search(rf"^\s+{re.escape(want)}\s", _kernel_asm(asm, prefix), re.M), \
            f"no {want} in the assembly of {prefix}"


def test_quantize_static_cnn_int8_activations_matches_onnxruntime():
    """QDQ with int8 activations (onnxruntime's s8s8): the convs' data is shifted into uint8 by
    +128 on the way into the dot-product kernel, which pads it with 128 + the input zero point."""
    model = _cnn(seed=5)
    qmodel = expose_quantized(_quantize_static(model, "QDQ", True, activation="QInt8"))
    x = np.random.default_rng(9).standard_normal(CNN_INPUT).astype(np.float32)
    _check_int8_model(qmodel, model, {"input": x}, ("qnn_conv2d_nchwc_u8s8", "qnn_dense_u8s8"))


def test_dynamic_mlp_matches_onnxruntime():
    """quantize_dynamic: DynamicQuantizeLinear (run-time uint8 scale and zero point) feeding
    MatMulInteger with int8 weights, the int32 result scaled back to float."""
    model = _mlp(seed=4)
    qmodel = _quantize_dynamic(model)
    assert "MatMulInteger" in {n.op_type for n in qmodel.graph.node}
    x = np.random.default_rng(8).standard_normal((2, 8, 64)).astype(np.float32)
    module = _compile(qmodel)
    got, params_bytes = _run(module, {"x": x})
    ref = onnxruntime_outputs(qmodel, {"x": x})
    name = next(iter(ref))
    # float output: the int32 products are exact on both sides; what differs is the run-time
    # quantization of activations (the same formula) and float32 rounding of the rescale
    np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-5)
    assert params_bytes / _float_params_bytes(model) <= MAX_PARAMS_RATIO
    names = kernel_names(module)
    assert any("qnn_dense" in k for k in names), names


@pytest.mark.parametrize("features,conv_insn", [(None, "sdot"), ("+i8mm", "usmmla")], ids=["sdot", "i8mm"])
def test_aarch64_int8_models_match_onnxruntime_under_qemu(features, conv_insn):
    """The AArch64 int8 forms end to end under qemu-user: a resnet-style CNN through
    quantize_static (QDQ, uint8 activations, per-channel int8 weights) and a BERT-style encoder
    through quantize_dynamic, compiled for arm-neoverse-n1 (SDOT on int8 data) and with +i8mm
    (USMMLA convolutions, USDOT dense), against onnxruntime's int8 outputs (integers within 1
    unit, the BERT's float output as test_dynamic_mlp_matches_onnxruntime compares it); the
    convolution kernels show the form's instruction in the `asm` dump."""
    from tvmc.driver import CompileOptions
    from tvmc.runtime import device_missing
    from tvmc.target import resolve_target

    from tests.e2e.builders import bert_encoder, resnet_style_cnn

    target = resolve_target("arm-neoverse-n1", {"features": features} if features else None)
    reason = device_missing(target)
    if reason:
        pytest.skip(f"target {target.name}: {reason}")
    cnn = resnet_style_cnn(seed=4, size=16)
    qcnn = _quantize_resnet_style(cnn)
    x = np.random.default_rng(12).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with tempfile.TemporaryDirectory() as dumps:
        options = CompileOptions(opt_level=3, dump_ir=("asm",), dump_dir=dumps)
        _check_int8_model(expose_quantized(qcnn), cnn, {"input": x}, ("qnn_conv2d_nchwc_u8s8",), target, options)
        asm = "\n".join(p.read_text() for p in Path(dumps).rglob("*.s"))
    assert re.search(rf"^\s+{conv_insn}\s", _kernel_asm(asm, "fused_qnn_conv2d_nchwc"), re.M), \
        f"no {conv_insn} in the conv kernels"
    bert = bert_encoder(seed=2, seq=8, hidden=32, heads=2, layers=1, vocab=50)
    qbert = _quantize_dynamic(bert)
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 50, (1, 8)).astype(np.int64), "attention_mask": np.ones((1, 8), np.int64)}
    with tempfile.TemporaryDirectory() as dumps:
        module = _compile(qbert, target, CompileOptions(opt_level=3, dump_ir=("asm",), dump_dir=dumps))
        asm = "\n".join(p.read_text() for p in Path(dumps).rglob("*.s"))
    got, _ = _run(module, feeds)
    ref = onnxruntime_outputs(qbert, feeds)["last_hidden_state"]
    np.testing.assert_allclose(got["last_hidden_state"], ref, rtol=1e-4, atol=1e-4)
    # the projections (8 rows): on +i8mm the matrix multiply-accumulate, else SDOT
    dense = "qnn_dense_u8s8_mmla" if features else "qnn_dense_u8s8"
    assert sum(dense in k for k in kernel_names(module)) >= 6, kernel_names(module)
    assert re.search(rf"^\s+{conv_insn}\s", _kernel_asm(asm, f"fused_{dense}"), re.M), f"no {conv_insn} in {dense}"


def _kernel_asm(asm: str, prefix: str) -> str:
    """The text of the functions of an `asm` dump whose names start with `prefix`, each from its
    label to the next one (a parallel body's label included)."""
    functions = dict(re.findall(r"^(fused_[\w.]+):\n(.*?)(?=^[A-Za-z_][\w.]*:$|\Z)", asm, re.M | re.S))
    return "\n".join(body for name, body in functions.items() if name.startswith(prefix))
