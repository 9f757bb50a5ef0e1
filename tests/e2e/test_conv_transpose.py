"""End to end (issue 30 point 4): a decoder of strided transposed convolutions (a U-Net's or an OCR
text detector's upsampling path) compiled at opt level 3, where SubpixelConvTranspose turns each
into convolutions of its output phases and a pixel shuffle, against onnxruntime on this host's
CPU, wasm and ARM (the latter under qemu, slow), and with the pass left out of the pipeline (the
dilated gather form)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.e2e.models import compile_module, onnxruntime_outputs, run_module
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

TOL = dict(rtol=1e-4, atol=1e-4)


def decoder(seed: int = 0, size: int = 9) -> onnx.ModelProto:
    """conv 3x3 (3 -> 16) -> relu -> ConvTranspose k4 s2 p1 (16 -> 16) + bias -> relu ->
    ConvTranspose k3 s2 p1, output_padding 1 (16 -> 8) -> relu -> ConvTranspose k2 s2 (8 -> 4):
    [1, 3, size, size] -> [1, 4, 8 size, 8 size]."""
    r = np.random.default_rng(seed)

    def init(name, shape):
        return numpy_helper.from_array((r.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [init("w0", (16, 3, 3, 3)), init("w1", (16, 16, 4, 4)), init("b1", (16,)), init("w2", (16, 8, 3, 3)),
             init("w3", (8, 4, 2, 2))]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("ConvTranspose", ["r0", "w1", "b1"], ["t1"], kernel_shape=[4, 4], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t1"], ["r1"]),
             helper.make_node("ConvTranspose", ["r1", "w2"], ["t2"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1]),
             helper.make_node("Relu", ["t2"], ["r2"]),
             helper.make_node("ConvTranspose", ["r2", "w3"], ["output"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                               [1, 3, size, size])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                             [1, 4, 8 * size, 8 * size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("name", ["native", "wasm", pytest.param("arm", marks=pytest.mark.slow)])
def test_strided_conv_transposes_as_phase_convolutions_match_onnxruntime(name):
    from tvmc.target import resolve_target

    target = resolve_target(require(name).target.name if name != "native" else "native")
    model = decoder(seed=1, size=9)
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 9)).astype(np.float32)
    module = compile_module(model, target)
    funcs = [n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"]
    assert not any("conv2d_transpose" in f for f in funcs) and any("nchwc" in f for f in funcs), funcs
    got = run_module(module, {"input": x})["output"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["output"], **TOL)


def test_without_the_pass_the_dilated_form_computes_the_same():
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.target import resolve_target

    model = decoder(seed=2, size=6)
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    module = compile_model(model, resolve_target("native"), CompileOptions(disabled_passes={"SubpixelConvTranspose"}))
    funcs = [n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"]
    assert sum("conv2d_transpose" in f for f in funcs) == 3, funcs
    np.testing.assert_allclose(run_module(module, {"input": x})["output"],
                               onnxruntime_outputs(model, {"input": x})["output"], **TOL)
