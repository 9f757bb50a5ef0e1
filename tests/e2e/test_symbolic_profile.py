"""`tvmc run --profile` of an artifact compiled for a range of sizes: each kernel's GFLOP/s counts
the FLOPs of the run's sizes (metadata kernel_flops_programs, evaluated at the executor's
profile_sizes), not those of the range's upper bound, on the CPU, wasm and OpenCL executors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvmc.api
from tests.targets import require
from tvmc.driver import CompileOptions, compile_model
from tvmc.package import save_artifact

C, K, H = 8, 16, 6


def conv_matmul_model():
    """x [1, C, H, width] -> Conv 3x3 pad 1 (K channels) -> Relu -> Reshape [K*H, width] ->
    MatMul of its transpose [width, K*H] with a constant [K*H, 10]: a conv and a matmul whose
    FLOPs grow with `width`."""
    r = np.random.default_rng(0)
    w = numpy_helper.from_array(r.standard_normal((K, C, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(r.standard_normal((K * H, 10)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([K * H, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("Transpose", ["f"], ["t"]),
             helper.make_node("MatMul", ["t", "m"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, "width"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["width", 10])], [w, m, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target_name", ["native", "wasm", "opencl"])
def test_profile_counts_the_flops_of_the_run_sizes(target_name, tmp_path):
    target = require(target_name).target
    path = save_artifact(compile_model(conv_matmul_model(), target, CompileOptions(dim_ranges={"width": (1, 512)})),
                         tmp_path / "m.tar")
    for width in (5, 300):
        x = np.random.default_rng(width).standard_normal((1, C, H, width)).astype(np.float32)
        rows = tvmc.api.run(path, {"x": x}, profile=True).profile
        counted = sorted(r["flops"] for r in rows if r["flops"] is not None)
        conv, matmul = 2 * K * H * width * C * 9, 2 * width * K * H * 10
        assert counted == sorted([conv, matmul]), (width, [(r["name"], r["flops"]) for r in rows])
        assert all(r["gflop_s"] is not None for r in rows if r["flops"])
