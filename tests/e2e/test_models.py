"""End to end: ONNX -> tvmc compile -> mod.tar -> the target's executor, against onnxruntime, on
every target of tests/targets.py that runs here (the light zoo models on OpenCL and ARM are slow
tests)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.e2e.builders import mlp, resnet_style_cnn
from tests.e2e.models import LIGHT_MODELS, compile_and_run, expose_pre_softmax, light_model_path, onnxruntime_outputs
from tests.targets import BY_NAME, require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

# Random-weight models: values are O(1), so an absolute floor is meaningful.
RANDOM_TOL = dict(rtol=1e-3, atol=1e-4)
# Light zoo models: constant weights make activations huge (up to 1e31), so the tolerance is
# relative to the tensor's largest magnitude.
LIGHT_RTOL = 1e-3


def _input_name(model):
    inits = {i.name for i in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in inits)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_resnet_style_cnn_matches_onnxruntime(opt_level, target):
    model = resnet_style_cnn(seed=1, size=33)  # odd size: stride-2 edges and vector tails
    x = np.random.default_rng(0).standard_normal((1, 3, 33, 33)).astype(np.float32)
    got = compile_and_run(model, {"input": x}, opt_level=opt_level, target=target.target)["logits"]
    ref = onnxruntime_outputs(model, {"input": x})["logits"]
    np.testing.assert_allclose(got, ref, **RANDOM_TOL)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_mlp_matches_onnxruntime(opt_level, target):
    model = mlp(seed=2, batch=3, sizes=(50, 130, 70, 10))
    x = np.random.default_rng(1).standard_normal((3, 50)).astype(np.float32) * 3
    got = compile_and_run(model, {"x": x}, opt_level=opt_level, target=target.target)["y"]
    ref = onnxruntime_outputs(model, {"x": x})["y"]
    np.testing.assert_allclose(got, ref, **RANDOM_TOL)


# wasm (one thread in wasmtime) in make test: ShuffleNet; the others in make test-all
WASM_SAMPLE = ("shufflenet",)
# x86 at opt level 0 (no fusion, no layout change) in make test: two models whose graphs hold
# the concat, grouped-conv and plain paths; the big ones at O0 (VGG-19, DenseNet-121, Inception-v1
# and v2, ResNet-50, ZFNet, AlexNet: 5-12 s each) in make test-all
O0_SAMPLE = ("squeezenet", "shufflenet")
# x86 at opt level 3 in make test: ShuffleNet (grouped convs, channel shuffle) and SqueezeNet
# (concat); in make test-all the slowest (8-32 s each), whose paths those and the random-weight
# models hold: AlexNet, VGG-19, ZFNet (plain convs and dense: tests/e2e/builders.mlp and
# resnet_style_cnn; LRN: its ONNX node cases), DenseNet-121, Inception-v1 and v2 (concat),
# ResNet-50 (residual 1 x 1 / 3 x 3 blocks, as resnet_style_cnn)
O3_SLOW = ("bvlc_alexnet", "vgg19", "densenet121", "zfnet512", "inception_v1", "inception_v2", "resnet50")


def _light_params():
    """x86 at opt level 3 in make test but O3_SLOW, at opt level 0 O0_SAMPLE in make test and the others slow;
    OpenCL (PoCL: 20-60 s a model), ARM (qemu-user) and CUDA (a GPU) at opt level 3, slow; wasm at
    opt level 3, WASM_SAMPLE in make test."""
    out = []
    for name in LIGHT_MODELS:
        out.append(pytest.param(name, "native", 0, id=f"native-{name}-O0",
                                marks=() if name in O0_SAMPLE else pytest.mark.slow))
        out.append(pytest.param(name, "native", 3, id=f"native-{name}-O3",
                                marks=pytest.mark.slow if name in O3_SLOW else ()))
        for t in ("opencl", "arm", "cuda"):
            out.append(pytest.param(name, t, 3, id=f"{t}-{name}-O3", marks=(pytest.mark.slow,) + BY_NAME[t].marks))
        out.append(pytest.param(name, "wasm", 3, id=f"wasm-{name}-O3",
                                marks=() if name in WASM_SAMPLE else pytest.mark.slow))
    return out


@pytest.mark.parametrize("name,target_name,opt_level", _light_params())
def test_light_model_matches_onnxruntime(name, target_name, opt_level):
    target = require(target_name)
    model, pre = expose_pre_softmax(onnx.load(light_model_path(name)))
    inp = _input_name(model)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    got = compile_and_run(model, {inp: x}, opt_level=opt_level, target=target.target)
    ref = onnxruntime_outputs(model, {inp: x})
    scale = float(np.abs(ref[pre]).max())
    assert scale > 0
    # (constant weights make this tensor uniform across classes, but it still depends on the
    # input through every layer; the random-weight CNN above is the strong check)
    np.testing.assert_allclose(got[pre], ref[pre], rtol=LIGHT_RTOL, atol=LIGHT_RTOL * scale)


def test_graph_entry_runs_the_whole_model_in_one_call(tmp_path):
    """The library's tvmc_graph_run gives the same outputs as calling the kernels one by one."""
    from tvmc.driver import compile_model
    from tvmc.package import save_artifact
    from tvmc.runtime import GraphExecutor
    from tvmc.target import resolve_target

    model = mlp(seed=4, batch=2, sizes=(40, 60, 30, 5))
    save_artifact(compile_model(model, resolve_target("native")), tmp_path / "m.tar")
    ex = GraphExecutor(tmp_path / "m.tar")
    assert ex.num_kernels > 1
    x, x2 = np.random.default_rng(5).standard_normal((2, 2, 40)).astype(np.float32)
    ex.set_input("x", x)
    ex.run()
    via_entry = ex.get_output(0)
    np.testing.assert_allclose(via_entry, onnxruntime_outputs(model, {"x": x})["y"], **RANDOM_TOL)
    ex.set_input("x", x2)
    ex.profile(1)  # kernel by kernel over the C API's entry table, as a C host following the header's step 5
    by_kernel = ex.get_output(0)
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), by_kernel)
    np.testing.assert_allclose(by_kernel, onnxruntime_outputs(model, {"x": x2})["y"], **RANDOM_TOL)
