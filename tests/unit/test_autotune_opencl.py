"""Tuning on an OpenCL target: candidates are built as OpenCL C and measured on the OpenCL device;
configs beyond the descriptor's limits are recorded as invalid and the search goes on; `tvmc tune`
with its default tuner (xgb, on the GPU features of the device kernels) runs there, and on CUDA
where a GPU is present."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.targets import BY_NAME, require
from tvmc.autotune import features, tune
from tvmc.autotune.measure import MeasureError, MeasureOptions, Measurer
from tvmc.autotune.record import load_records
from tvmc.autotune.task import tasks_of_functions
from tvmc.cli import main
from tvmc.graph.ir import Function, TensorType, Var
from tvmc.ops.registry import make_call


@pytest.fixture(scope="module")
def opencl():
    return require("opencl").target


def test_measure_on_opencl_records_oversized_configs_as_invalid(opencl):
    x, w = Var("x", TensorType((64, 32), "float32")), Var("w", TensorType((128, 32), "float32"))
    task = next(t for t in tasks_of_functions([Function([x, w], make_call("nn.dense", [x, w]), "f")], opencl)
                if t.impl == "dense.gpu")
    space = task.config_space(opencl)
    fallback = space.fallback_config()
    too_many_threads = dict(fallback, tile_x=32, tile_y=16)  # 512 threads, the descriptor allows 256
    other = dict(fallback, tile_k=4, reg_x=2)
    with Measurer(opencl, MeasureOptions(number=1, repeat=1, parallel=1, timeout_s=60)) as m:
        results = m.measure(task, [fallback, too_many_threads, other], reference=True)
    assert results[0].ok and results[2].ok, [r.error_msg for r in results]
    assert results[1].error == MeasureError.INSTANTIATION_ERROR
    assert "threads per block" in results[1].error_msg and results[1].costs_s == []


def _dense_model(path, m=24, n=32, k=64) -> str:  # m > 16: one task, dense.gpu (not dense_small_batch.gpu)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, k)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.mark.parametrize("gpu", [pytest.param(name, marks=BY_NAME[name].marks) for name in ("opencl", "cuda")])
def test_cli_tune_with_the_default_tuner_on_a_gpu(gpu, tmp_path, capsys, monkeypatch):
    """`tvmc tune --target opencl` (cuda) with the default tuner: after the first batch (random)
    the xgb model proposes on the device kernels' features; the records are written."""
    require(gpu)
    vectors = []

    def config_features(task, target, config):
        vec = features.config_features(task, target, config)
        vectors.append(vec)
        return vec

    monkeypatch.setattr(tune, "config_features", config_features)
    model, out = _dense_model(tmp_path / "dense.onnx"), tmp_path / "records.json"
    assert main(["tune", model, "--target", gpu, "-o", str(out), "--trials", "12", "--number", "1",
                 "--repeat", "1", "--parallel", "1"]) == 0
    text = capsys.readouterr().out
    assert "[Task  1/ 1]" in text and "dense.gpu" in text
    records = load_records(out)
    assert len(records) == 12 and sum(r.ok for r in records) >= 2
    assert len({r.config_key() for r in records}) == 12
    gpu = [v for v in vectors if v[features.SLOT["kernel.is_gpu"]] == 1.0]
    assert len(gpu) >= 12  # the measured configs and the ones the annealing scored
