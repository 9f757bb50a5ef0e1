"""Shared helpers for end-to-end tests: light zoo models, pre-softmax exposure, compile+run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx

LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512"]


def light_model_path(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def expose_pre_softmax(model: onnx.ModelProto) -> tuple:
    """Add the tensor feeding the final Softmax as an extra graph output (the light models'
    weights are constant, so their Softmax output is uniform for any input and proves nothing).
    Returns (model, name of the exposed tensor)."""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if not softmax:  # (densenet121 ends without one: its output is already informative)
        return model, model.graph.output[0].name
    name = softmax[-1].input[0]
    inferred = onnx.shape_inference.infer_shapes(model)
    info = next(v for v in inferred.graph.value_info if v.name == name)
    model.graph.output.append(info)
    return model, name


def compile_module(model, target=None, opt_level: int = 3, pass_config=None):
    """tvmc.driver.CompiledModule of `model` (ModelProto) for `target` (a resolved Target, default
    this host's CPU) with `pass_config` ({'Pass.option': value})."""
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.target import resolve_target

    return compile_model(model, target or resolve_target("native"),
                         CompileOptions(opt_level=opt_level, pass_config=pass_config or {}))


def run_module(module, inputs: dict) -> dict:
    """Outputs {name: array} of a CompiledModule run once through the package/runtime path (the
    runtime its target names)."""
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "mod.tar")
        save_artifact(module, path)
        ex = create_executor(path)
        for k, v in inputs.items():
            ex.set_input(k, v)
        ex.run()
        names = [o["name"] for o in module.metadata["outputs"]]
        return {n: ex.get_output(i) for i, n in enumerate(names)}


def compile_and_run(model, inputs: dict, opt_level: int = 3, target=None):
    """Compile `model` (ModelProto) for `target` (a resolved Target, default this host's CPU)
    through the package/runtime path (the runtime the target names); return outputs dict."""
    return run_module(compile_module(model, target, opt_level), inputs)


def onnxruntime_outputs(model, inputs: dict) -> dict:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))
