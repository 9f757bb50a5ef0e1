"""Tuning on an OpenCL target: candidates are built as OpenCL C and measured on the OpenCL device;
configs beyond the descriptor's limits are recorded as invalid and the search goes on."""

from __future__ import annotations

import pytest

from tests.targets import require
from tvmc.autotune.measure import MeasureError, MeasureOptions, Measurer
from tvmc.autotune.task import tasks_of_functions
from tvmc.graph.ir import Function, TensorType, Var, make_call


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
