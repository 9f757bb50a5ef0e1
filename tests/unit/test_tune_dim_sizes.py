"""`tvmc tune --dim-sizes`: a compile of size ranges is tuned at representative sizes (the static
graphs of those sizes), and a compile of the range applies the records per size bucket
(tvmc.ops.fused._tuned_buckets): outputs match numpy at sizes inside, at and between the buckets'
edges. Issue 29, point 3."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import tvmc
from tvmc.cli import cli
from tvmc.driver import CompileOptions, extract_tasks
from tvmc.errors import ModelError, TuningError
from tvmc.package import save_artifact
from tvmc.runtime.cpu import GraphExecutor
from tvmc.target import resolve_target

RNG = np.random.default_rng(7)
W = RNG.standard_normal((48, 40)).astype(np.float32)  # MatMul weight [K, N]
B = RNG.standard_normal(40).astype(np.float32)


def dense_model():
    """y = relu(x @ W + B), x: [M, 48] with the symbolic row count M (dim_param 'M')."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["z"]),
         helper.make_node("Relu", ["z"], ["y"])],
        "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 40])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


RANGE = CompileOptions(dim_ranges={"M": (1, 64)})


def _dense_workload_rows(tasks) -> list:
    return sorted(t.workload[0][0] for t in tasks if t.op.startswith("nn.dense"))


def test_tasks_are_those_of_each_size():
    tasks = extract_tasks(dense_model(), resolve_target("native"), RANGE, {"M": [4, 32]})
    rows = _dense_workload_rows(tasks)
    assert set(rows) == {4, 32}, [t.describe() for t in tasks]


def test_a_range_without_sizes_says_how_to_tune_it():
    with pytest.raises(TuningError, match=r"M in 1\.\.64.*--dim-sizes M=1,32,64"):
        extract_tasks(dense_model(), resolve_target("native"), RANGE)


@pytest.mark.parametrize("sizes,message", [
    ({"N": [4]}, r"--dim-sizes names 'N', not a size variable.*'M'"),
    ({"M": [65]}, r"--dim-sizes gives 'M' the size 65, outside its range 1\.\.64")])
def test_bad_sizes_name_the_variable(sizes, message):
    with pytest.raises(ModelError, match=message):
        extract_tasks(dense_model(), resolve_target("native"), RANGE, sizes)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The range artifact compiled with the records of a short tune at M = 4 and 32."""
    tmp = tmp_path_factory.mktemp("dimsizes")
    records = tmp / "records.json"
    tvmc.tune(dense_model(), "native", str(records), trials=6, tuner="random", number=1, repeat=1,
              dim_ranges={"M": (1, 64)}, dim_sizes={"M": [4, 32]})
    module = tvmc.compile(dense_model(), "native", dim_ranges={"M": (1, 64)}, tuning_records=str(records)).module
    return records, save_artifact(module, tmp / "range.tar"), module


def test_the_range_compile_applies_the_records_of_each_size(tuned):
    records, _, module = tuned
    applied = module.metadata["tuning_records"]["applied"]
    rows = sorted(r["task"]["workload"][0][0] for r in applied if r["task"]["op"].startswith("nn.dense"))
    assert rows == [4, 32], json.dumps(applied)[:400]


@pytest.mark.parametrize("m", [1, 4, 5, 31, 32, 33, 64])
def test_every_bucket_matches_numpy(tuned, m):
    _, path, _ = tuned
    ex = GraphExecutor(path)
    x = RNG.standard_normal((m, 48)).astype(np.float32)
    ex.set_input("x", x)
    ex.run()
    np.testing.assert_allclose(ex.get_output(0), np.maximum(x @ W + B, 0), rtol=1e-5, atol=1e-5)


def test_cli_lists_the_tasks_of_each_size(tmp_path):
    model = tmp_path / "dense.onnx"
    model.write_bytes(dense_model().SerializeToString())
    r = CliRunner().invoke(cli, ["tune", str(model), "--target", "native", "--dim-range", "M=1..64",
                                 "--dim-sizes", "M=32,4", "--list-tasks", "--json"])
    assert r.exit_code == 0, r.output
    shown = sorted(t["workload"] for t in json.loads(r.output)["tasks"] if t["op"].startswith("nn.dense"))
    assert [w.split("x")[0] for w in shown] == ["[32,48]", "[4,48]"], shown
    bad = CliRunner().invoke(cli, ["tune", str(model), "--target", "native", "--dim-sizes", "M=4,x", "--list-tasks"])
    assert bad.exit_code != 0 and "expected NAME=SIZE,SIZE" in bad.output
