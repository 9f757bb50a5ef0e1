"""Outputs whose shape depends on the data (docs/dynamic_shapes.md): a model where NonZero feeds
Cast and Add and is itself a graph output, and a Unique and a TopK with a computed K, compiled and
run by `tvmc run` on every target that runs here (the Python, OpenCL and wasm executors, the C
runner under qemu for ARM) and by the C runner built for this host, against onnxruntime; a Loop
left early by a condition computed at run time; ops whose result would read the padding are
refused at compile time, naming the node."""

from __future__ import annotations

import shutil
import subprocess
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc
from tests.targets import TARGETS, require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


def dynamic_model() -> onnx.ModelProto:
    """x float32[3, 4], k int64[1] -> y = Cast(NonZero(x)) + 1.5, nz = NonZero(x),
    u = Unique(x) (sorted values), t = TopK(x * 2, K = k + 1) values along axis 1."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.5])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    k_one = helper.make_tensor("k_one", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["c", "one"], ["y"]),
             helper.make_node("Unique", ["x"], ["u"]),
             helper.make_node("Mul", ["x", "two"], ["x2"]),
             helper.make_node("Add", ["k", "k_one"], ["k1"]),
             helper.make_node("TopK", ["x2", "k1"], ["t", "ti"], axis=1)]
    graph = helper.make_graph(nodes, "dyn", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
        helper.make_tensor_value_info("k", TensorProto.INT64, [1])], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"]),
        helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "n"]),
        helper.make_tensor_value_info("u", TensorProto.FLOAT, ["m"]),
        helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, "k"])], [one, two, k_one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


INPUTS = {"x": np.array([[0, 1.5, 0, 2], [3, 0, 0, 1.5], [0, 0, -1, 0]], np.float32), "k": np.array([1], np.int64)}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("dyn")
    onnx.save(dynamic_model(), d / "dyn.onnx")
    np.savez(d / "in.npz", **INPUTS)
    return d


@pytest.mark.parametrize("name", [pytest.param(t.name, marks=t.marks + ((pytest.mark.slow,) if t.name == "arm" else ()))
                                  for t in TARGETS])
def test_tvmc_run_slices_outputs_to_their_run_time_shape(model_file, name, tmp_path):
    target = require(name)
    tvmc("compile", model_file / "dyn.onnx", "--target", target.spec, "-o", tmp_path / "dyn.tar")
    tvmc("run", tmp_path / "dyn.tar", "--inputs", model_file / "in.npz", "--outputs", tmp_path / "out.npz")
    got = np.load(tmp_path / "out.npz")
    want = onnxruntime_outputs(dynamic_model(), INPUTS)
    assert sorted(got.files) == sorted(want)
    for key, ref in want.items():
        assert got[key].shape == ref.shape and got[key].dtype == ref.dtype, key
        np.testing.assert_array_equal(got[key], ref, err_msg=key)


def native_c_runner(model_path, folder, *compile_args):
    """`model_path` compiled for this host (with `compile_args`) into folder/mod.tar, its mod.so and
    mod.params beside it and the C runner folder/tvmc_run built for it (skips without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to build the C runner")
    tvmc("compile", model_path, "--target", "native", *compile_args, "-o", folder / "mod.tar")
    with tarfile.open(folder / "mod.tar") as t:
        for member in ("mod.so", "mod.params"):
            (folder / member).write_bytes(t.extractfile(member).read())
    tvmc("build-runner", folder / "mod.tar", "-o", folder / "tvmc_run")


def test_c_runner_writes_run_time_shapes(model_file, tmp_path):
    native_c_runner(model_file / "dyn.onnx", tmp_path)
    for name, value in INPUTS.items():
        np.save(tmp_path / f"{name}.npy", value)
    (tmp_path / "out").mkdir()
    res = subprocess.run([str(tmp_path / "tvmc_run"), "-p", str(tmp_path / "mod.params"), "-i", f"x={tmp_path}/x.npy",
                          "-i", f"k={tmp_path}/k.npy", "-O", str(tmp_path / "out")], capture_output=True, text=True,
                         cwd=tmp_path, env={"LD_LIBRARY_PATH": str(tmp_path)}, timeout=300)
    assert res.returncode == 0, res.stderr
    want = onnxruntime_outputs(dynamic_model(), INPUTS)
    for k, (key, ref) in enumerate(want.items()):
        got = np.load(tmp_path / "out" / f"output_{k}.npy")
        assert got.shape == ref.shape, key
        np.testing.assert_array_equal(got, ref, err_msg=key)
    assert "output nz int64 [2,5]" in res.stdout


@pytest.mark.parametrize("op,why", [("ReduceSum", "would read its padding"),
                                    ("Transpose", "would read its padding")])
def test_padding_dependent_users_are_refused_naming_the_node(tmp_path, op, why):
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node(op, ["nz"], ["y"], name="the_user")]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, ["d"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, tmp_path / "bad.onnx")
    res = tvmc("compile", tmp_path / "bad.onnx", "--target", "native", "-o", tmp_path / "bad.tar", check=False)
    assert res.returncode != 0 and not (tmp_path / "bad.tar").exists()
    line = res.stderr.strip()
    assert "\n" not in line and "the_user" in line and why in line and "Traceback" not in line, line


def early_exit_loop() -> onnx.ModelProto:
    """Loop with M = 6 whose condition comes from the inputs (c0) and from the body
    (sum(v * 2) < limit): carried v, scan output v * 2 + v."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Add", ["v_out", "v_in"], ["scan"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "c0", "v0"], ["v", "scans"], body=body)], "loop",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("limit", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("c0", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor("M", TensorProto.INT64, [], [6]), helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_loop_with_a_run_time_condition_matches_onnxruntime():
    from tvmc.backend import TvmcBackend

    model = early_exit_loop()
    rep = TvmcBackend.prepare(model, target="native")
    for limit, c0, runs in [(20.0, True, 3), (1e3, True, 6), (1.0, True, 1), (20.0, False, 0)]:
        inputs = {"v0": np.array([1, 2], np.float32), "limit": np.array(limit, np.float32), "c0": np.array(c0)}
        got = rep.run(list(inputs.values()))
        want = onnxruntime_outputs(model, inputs)
        assert got[1].shape == (runs, 2)
        for g, (key, ref) in zip(got, want.items()):
            np.testing.assert_array_equal(g, ref, err_msg=key)


def test_tvmc_js_gives_run_time_shapes(tmp_path):
    """tvmc.js (Node) on the web output of a wasm build: outputShape and getOutput of NonZero."""
    import tvmc
    from tests.e2e.test_web import _node, example_input, run_node_module

    _node()
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.BOOL, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    tvmc.compile(model, target=require("wasm").target, output=tmp_path / "site", output_format="web")
    got = run_node_module(tmp_path,
        'import { exampleInput, loadModel } from "./site/tvmc.js";\n'
        'const m = await loadModel(new URL("./site/", import.meta.url));\n'
        "m.setInput('x', exampleInput('bool', 12));\n"
        "m.run();\n"
        "console.log(JSON.stringify({ bound: m.outputs[0].shape, shape: m.outputShape(0),\n"
        "                             data: Array.from(m.getOutput(0)) }));\n"
        "m.destroy();\n")
    want = onnxruntime_outputs(model, {"x": example_input("bool", (3, 4))})["y"]
    assert got["bound"] == [2, 12] and got["shape"] == list(want.shape)
    np.testing.assert_array_equal(np.array(got["data"], np.float32).reshape(want.shape), want)


def test_reductions_and_scans_along_static_axes_keep_the_run_time_shape():
    """ReduceSum (keepdims 0), ReduceMax (keepdims 1) and CumSum along axis 0 of NonZero's
    [2, n] output: the dynamic axis is kept (renumbered), its shape derived from NonZero's."""
    from tvmc.backend import TvmcBackend

    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["c", "axis"], ["s0"], keepdims=0),
             helper.make_node("ReduceMax", ["c", "axis"], ["s1"], keepdims=1),
             helper.make_node("CumSum", ["c", "axis"], ["s2"])]
    graph = helper.make_graph(nodes, "red", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("s0", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("s1", TensorProto.FLOAT, [1, "n"]),
                               helper.make_tensor_value_info("s2", TensorProto.FLOAT, [2, "n"])],
                              [helper.make_tensor("axis", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    got = TvmcBackend.prepare(model, target="native").run([INPUTS["x"]])
    for g, (key, ref) in zip(got, onnxruntime_outputs(model, {"x": INPUTS["x"]}).items()):
        assert g.shape == ref.shape, key
        np.testing.assert_array_equal(g, ref, err_msg=key)
