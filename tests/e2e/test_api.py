"""The one-call Python API (tvmc.compile / tvmc.run / tvmc.list_tasks) against onnxruntime, and
its argument checks; plus `tvmc run --profile` and `--json` on a real compiled model."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import tvmc
from tests.e2e.builders import mlp
from tests.e2e.models import onnxruntime_outputs
from tvmc.errors import InputError, ModelError, TargetError

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "mlp.onnx"
    onnx.save(mlp(seed=5, batch=2, sizes=(32, 48, 16, 8)), path)
    return path


@pytest.fixture(scope="module")
def artifact(model_file):
    (model_file.parent / "out").mkdir()
    return tvmc.compile(model_file, "native", model_file.parent / "out" / "mlp.tar")


def test_compile_and_run_match_onnxruntime(model_file, artifact):
    assert artifact.output == str(model_file.parent / "out" / "mlp.tar")
    doc = artifact.to_json()
    assert doc["kind"] == "compile" and doc["inputs"] == [{"name": "x", "shape": [2, 32], "dtype": "float32"}]
    x = np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32)
    ran = tvmc.run(artifact.output, {"x": x}, repeat=2, number=2)
    want = onnxruntime_outputs(onnx.load(model_file), {"x": x})["y"]
    np.testing.assert_allclose(ran.outputs["y"], want, rtol=1e-3, atol=1e-4)
    assert ran.inputs == {"x": "given"} and ran.timing["repeat"] == 2 and ran.timing["number"] == 2
    # a plain run is not timed, and fills the inputs it is not given
    plain = tvmc.run(artifact.output, fill_mode="zeros")
    assert plain.timing is None and plain.inputs == {"x": "zeros"} and not plain.input_arrays["x"].any()


def test_profile_counts_every_kernel_call_and_dense_gflops(artifact):
    ran = tvmc.run(artifact.output, profile=True, repeat=3)
    meta = artifact.module.metadata
    assert sum(k["calls"] for k in ran.profile) == meta["num_kernel_calls"] and ran.profile_runs == 3
    assert {k["name"] for k in ran.profile} <= set(meta["kernel_flops"]) | {
        n["attrs"]["func_name"] for n in artifact.module.graph_json["nodes"] if n["op"] == "tvm_op"}
    assert abs(sum(k["share"] for k in ran.profile) - 1.0) < 1e-9
    dense = [k for k in ran.profile if k["flops"]]
    assert dense and all(k["gflop_s"] > 0 for k in dense)
    # the MLP's first MatMul: [2, 32] x [32, 48], 2 FLOPs per multiply-add
    assert 2 * 2 * 32 * 48 in meta["kernel_flops"].values()
    # profiling runs kernel by kernel, yet gives the outputs of a plain run
    np.testing.assert_array_equal(ran.outputs["y"], tvmc.run(artifact.output).outputs["y"])


def test_cli_run_profile_json_on_a_compiled_model(artifact):
    res = subprocess.run([sys.executable, "-m", "tvmc.cli", "run", artifact.output, "--profile", "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "run" and doc["profile"]["runs"] == 1 and doc["timing"] is None
    assert any(k["gflop_s"] for k in doc["profile"]["kernels"])


def test_list_tasks(model_file):
    listing = tvmc.list_tasks(model_file, "native")
    assert listing.tasks and all(size >= 1 for size in listing.space_sizes)
    assert listing.num_workloads <= len(listing.tasks)
    assert [r["index"] for r in listing.rows()] == list(range(len(listing.tasks)))


def test_options_objects_and_their_fields_one_by_one(model_file, artifact, tmp_path):
    options = tvmc.CompileOptions(opt_level=2, input_shapes={"x": [2, 32]})
    by_object = tvmc.compile(model_file, "native", tmp_path / "a.tar", options)
    by_fields = tvmc.compile(model_file, "native", tmp_path / "b.tar", opt_level=2, input_shapes={"x": [2, 32]})
    assert by_object.options == by_fields.options == options
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    meta = by_object.module.metadata["options"]
    assert meta["opt_level"] == 2 and meta["input_shapes"] == {"x": [2, 32]} and meta["shipped_records"] is True
    # a field given one by one replaces that field of the options object
    assert tvmc.compile(model_file, "native", None, options, opt_level=1).options == tvmc.CompileOptions(
        opt_level=1, input_shapes={"x": [2, 32]})
    # IR dumps, and where they go, do not change the artifact
    dumped = tvmc.compile(model_file, "native", tmp_path / "c.tar", options, dump_ir="ll", dump_dir=tmp_path)
    assert (tmp_path / "mod.ll").is_file() and dumped.options.dump_ir == ("ll",)
    assert (tmp_path / "c.tar").read_bytes() == (tmp_path / "a.tar").read_bytes()
    listing = tvmc.list_tasks(model_file, "native", options)
    assert listing.options == options and listing.tasks == tvmc.list_tasks(model_file, "native", opt_level=2,
                                                                          input_shapes={"x": [2, 32]}).tasks


@pytest.mark.parametrize("call,error,words", [
    (lambda m: tvmc.compile(m, "native", colour="red"), TypeError, "unexpected keyword argument 'colour'"),
    (lambda m: tvmc.compile(m, "native", None, {"opt_level": 2}), TypeError,
     "options must be a tvmc.driver.CompileOptions"),
    (lambda m: tvmc.list_tasks(m, "native", trials=3), TypeError, "list_tasks() got an unexpected keyword argument"),
    (lambda m: tvmc.tune(m, "native", m.parent / "r.json", tvmc.CompileOptions()), TypeError,
     "options must be a tvmc.autotune.tune.TuneOptions"),
    (lambda m: tvmc.tune(m, "native", m.parent / "r.json", number=0), ValueError, "number must be >= 1"),

    (lambda m: tvmc.compile(m, "native", opt_level=4), ValueError, "opt_level must be in 0..3"),
    (lambda m: tvmc.compile(m, "native", opt_level="3"), TypeError, "opt_level must be an int"),
    (lambda m: tvmc.compile(m, "native", input_shapes=[1, 32]), TypeError, "input_shapes must be a dict"),
    (lambda m: tvmc.compile(m, "native", input_shapes={"x": [2, 0]}), ValueError, "input_shapes['x']"),
    (lambda m: tvmc.compile(m, "native", dump_ir="ll,pdf"), ValueError, "dump_ir stage must be one of"),
    (lambda m: tvmc.compile(m, 86), TypeError, "target must be"),
    (lambda m: tvmc.compile(m, "nosuch"), TargetError, "unknown target 'nosuch'"),
    (lambda m: tvmc.compile(m.parent / "missing.onnx"), ModelError, "no such file"),
    (lambda m: tvmc.run(m.parent / "out" / "mlp.tar", fill_mode="twos"), ValueError, "fill_mode must be one of"),
    (lambda m: tvmc.run(m.parent / "out" / "mlp.tar", repeat=0), ValueError, "repeat must be >= 1"),
    (lambda m: tvmc.run(m.parent / "out" / "mlp.tar", {"z": np.zeros(1)}), InputError, "unknown input z"),
    (lambda m: tvmc.tune(m, "native", m.parent / "r.json", tuner="anneal"), ValueError, "tuner must be one of"),
    (lambda m: tvmc.tune(m, "native", m.parent / "r.json", tasks="1-0"), ValueError, "runs from low to high"),
])
def test_arguments_are_checked(model_file, artifact, call, error, words):
    with pytest.raises(error) as info:
        call(model_file)
    assert words in str(info.value)
