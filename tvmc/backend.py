"""ONNX backend interface (onnx.backend.base.Backend) over the whole tvmc pipeline on this CPU.

`TvmcBackend.prepare(model)` compiles with tvmc.driver.compile_model for x86, writes the mod.tar
with tvmc.package.save_artifact, and loads it into a tvmc.runtime.GraphExecutor; the returned
`TvmcBackendRep.run(inputs)` sets the inputs, runs the library and returns the outputs. This is
what the onnx package's own test machinery (onnx.backend.test.runner) drives, and what the
conformance runner (tvmc/conformance.py) uses for each node case.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from tvmc.errors import InputError

DEFAULT_TARGET = "native"


class TvmcBackendRep(BackendRep):
    """A compiled model ready to run: `run(inputs)` -> tuple of numpy outputs (graph order).

    inputs: a list/tuple in the order of the graph's non-initializer inputs, a dict
    {input name: array}, or a single array for a one-input model. Arrays are converted to the
    input's dtype only when the values are exactly representable (no silent narrowing of
    floats); a wrong shape raises tvmc.errors.InputError.
    """

    def __init__(self, module, target_name: str):
        from tvmc.package import save_artifact
        from tvmc.runtime import create_executor

        self.module = module
        self.target_name = target_name
        self._tmp = tempfile.TemporaryDirectory(prefix="tvmc-backend-")
        path = save_artifact(module, Path(self._tmp.name, "mod.tar"))
        self.executor = create_executor(path)
        self.input_names = [i["name"] for i in module.metadata["inputs"]]
        self.output_names = [o["name"] for o in module.metadata["outputs"]]

    def run(self, inputs, **kwargs) -> tuple:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise InputError(f"expected {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                 f"got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        for name, value in feeds.items():
            shape, dtype = self.executor.input_info(name)
            value = np.asarray(value)
            if value.dtype != np.dtype(dtype) and np.array_equal(value.astype(dtype), value):
                value = value.astype(dtype)
            self.executor.set_input(name, value)
        self.executor.run()
        return tuple(self.executor.get_output(i) for i in range(self.executor.num_outputs))


class TvmcBackend(Backend):
    """tvmc as an ONNX backend: compile for this host's CPU (the x86 target), run natively.

    prepare(model, device="CPU", target="x86", opt_level=3, value_ranges=None) (value_ranges:
    {graph input name: (lo, hi)}, as tvmc.compile's) raises the typed errors of
    tvmc.errors: UnsupportedOpError for operators (or opset versions) tvmc does not implement,
    ModelError for shapes or attributes it cannot handle, and so on.
    """

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        from tvmc.frontend.onnx import supports

        opsets = {"ai.onnx": 1, **{o.domain or "ai.onnx": o.version for o in model.opset_import}}
        return cls.supports_device(device) and all(
            supports(n.op_type, opsets.get(n.domain or "ai.onnx", 0), n.domain) for n in model.graph.node)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> TvmcBackendRep:
        if not cls.supports_device(device):
            raise ValueError(f"tvmc backend runs on CPU only, not '{device}'")
        return TvmcBackendRep(cls.compile(model, **kwargs), kwargs.get("target", DEFAULT_TARGET))

    @classmethod
    def compile(cls, model, **kwargs):
        """The tvmc.driver.CompiledModule of `model` (a ModelProto or its bytes) for
        kwargs["target"] (default x86), without an executor: prepare's first half, which needs no
        device (a GPU target's module holds its PTX or OpenCL C, and a cubin where the target's
        assembler is found). kwargs and errors as prepare's."""
        from tvmc.driver import CompileOptions, compile_model
        from tvmc.target import resolve_target

        if isinstance(model, (str, bytes)) and not isinstance(model, str):
            model = onnx.load_from_string(model)
        options = CompileOptions(opt_level=int(kwargs.get("opt_level", 3)),
                                 value_ranges=kwargs.get("value_ranges") or ())
        return compile_model(model, resolve_target(kwargs.get("target", DEFAULT_TARGET)), options)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs) -> tuple:
        """Run one NodeProto: wrapped in a one-node model whose inputs are `inputs` (numpy arrays,
        in the node's input order; empty names skipped) and whose outputs are the node's."""
        from onnx import helper

        super().run_node(node, inputs, device=device, outputs_info=outputs_info, **kwargs)
        names = [n for n in node.input if n]
        arrays = [np.asarray(a) for a in inputs]
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
               for n, a in zip(names, arrays)]
        outs = []
        for k, name in enumerate(o for o in node.output if o):
            if outputs_info and k < len(outputs_info):
                dtype, shape = outputs_info[k]
                outs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                          shape))
            else:
                outs.append(helper.make_empty_tensor_value_info(name))
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        graph = helper.make_graph([node], f"run_node_{node.op_type}", vis, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model = onnx.shape_inference.infer_shapes(model)
        for out in model.graph.output:
            if not out.type.HasField("tensor_type"):
                inferred = next((v for v in model.graph.value_info if v.name == out.name), None)
                if inferred is not None:
                    out.CopyFrom(inferred)
        return cls.run_model(model, arrays, device, **{k: v for k, v in kwargs.items() if k != "opset_version"})

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"


prepare = TvmcBackend.prepare
run_model = TvmcBackend.run_model
run_node = TvmcBackend.run_node
supports_device = TvmcBackend.supports_device
