"""ONNX Loop whose trip count M is a graph input (issue 18 point 4): the body compiled as a graph of
its own and run by the executors (docs/dynamic_shapes.md, "Loop with a run-time trip count"),
compared with onnxruntime through the Python executor, `tvmc run` on every target that runs here,
and the C runner; what it cannot bound is refused in one line naming the node."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc
from tests.e2e.test_dynamic_shapes import native_c_runner
from tests.targets import TARGETS, require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info


def running_sum_model(scan_output: bool = False) -> onnx.ModelProto:
    """Loop(M, cond, s0, p0): per iteration i, s += x * i (x read from the outer scope) and
    p *= k (k a body initializer); the body's condition is sum(s) < limit, so the loop may exit
    before M. With `scan_output`, s is also scanned (refused: no bound on M)."""
    outs = [vi("c2", B, []), vi("s2", F, [2, 3]), vi("p2", F, [3])] + ([vi("scan", F, [2, 3])] if scan_output else [])
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["s", "xi"], ["s2"]),
             helper.make_node("Mul", ["p", "k"], ["p2"]),
             helper.make_node("ReduceSum", ["s2"], ["total"], keepdims=0),
             helper.make_node("Less", ["total", "limit"], ["c2"])]
    if scan_output:
        nodes.append(helper.make_node("Identity", ["s2"], ["scan"]))
    body = helper.make_graph(nodes, "body", [vi("i", I64, []), vi("c", B, []), vi("s", F, [2, 3]), vi("p", F, [3])],
                             outs, [helper.make_tensor("k", F, [3], [1.5, 0.5, 2.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "s0", "p0"], ["s", "p"] + (["scans"] if scan_output else []),
                          body=body, name="the_loop")], "running_sum",
        [vi("M", I64, []), vi("cond", B, []), vi("x", F, [2, 3]), vi("s0", F, [2, 3]), vi("p0", F, [3]),
         vi("limit", F, [])],
        [vi("s", F, [2, 3]), vi("p", F, [3])] + ([vi("scans", F, ["n", 2, 3])] if scan_output else []))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def feeds(m: int, cond: bool = True, limit: float = 100.0) -> dict:
    rng = np.random.default_rng(m)
    return {"M": np.array(m, np.int64), "cond": np.array(cond), "x": (rng.random((2, 3)) + 0.5).astype(np.float32),
            "s0": rng.standard_normal((2, 3)).astype(np.float32), "p0": rng.standard_normal(3).astype(np.float32),
            "limit": np.array(limit, np.float32)}


# (M, initial condition, limit): no iteration, one, five, an exit after 2 of 5 by the body's
# condition, and none by the initial condition
RUNS = [(0, True, 100.0), (1, True, 100.0), (5, True, 100.0), (5, True, 4.0), (5, False, 100.0)]


def _assert_matches(got: dict, want: dict):
    for key, ref in want.items():
        assert got[key].shape == ref.shape and got[key].dtype == ref.dtype, key
        np.testing.assert_allclose(got[key], ref, rtol=1e-6, atol=1e-6, err_msg=key)


def test_python_executor_matches_onnxruntime():
    """The graph entry (run) and the interpreter of tvmc/runtime/control.py (profile, which runs
    kernel by kernel) give onnxruntime's results."""
    from tvmc.backend import TvmcBackend

    model = running_sum_model()
    rep = TvmcBackend.prepare(model, target="native")
    for m, cond, limit in RUNS:
        inputs = feeds(m, cond, limit)
        want = onnxruntime_outputs(model, inputs)
        _assert_matches(dict(zip(want, rep.run(inputs))), want)
        rep.executor.profile(1)
        _assert_matches({k: rep.executor.get_output(k) for k in want}, want)


def test_nested_run_time_loops():
    """A run-time Loop inside a run-time Loop's body: the inner trip count is the outer iteration."""
    from tvmc.backend import TvmcBackend

    inner = helper.make_graph([helper.make_node("Add", ["a", "one"], ["a2"]),
                               helper.make_node("Identity", ["c"], ["c2"])], "inner",
                              [vi("j", I64, []), vi("c", B, []), vi("a", F, [2])], [vi("c2", B, []), vi("a2", F, [2])],
                              [helper.make_tensor("one", F, [], [1.0])])
    outer = helper.make_graph([helper.make_node("Loop", ["i", "t", "v"], ["v2"], body=inner),
                               helper.make_node("Identity", ["c"], ["c2"])], "outer",
                              [vi("i", I64, []), vi("c", B, []), vi("v", F, [2])], [vi("c2", B, []), vi("v2", F, [2])],
                              [helper.make_tensor("t", B, [], [True])])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=outer)], "nested",
                              [vi("M", I64, []), vi("v0", F, [2])], [vi("v", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rep = TvmcBackend.prepare(model, target="native")
    for m in (0, 1, 5):
        inputs = {"M": np.array(m, np.int64), "v0": np.array([0.5, -1], np.float32)}
        want = onnxruntime_outputs(model, inputs)
        _assert_matches(dict(zip(want, rep.run(inputs))), want)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop")
    onnx.save(running_sum_model(), d / "loop.onnx")
    for k, run in enumerate(RUNS):
        np.savez(d / f"in{k}.npz", **feeds(*run))
    return d


@pytest.mark.parametrize("name", [pytest.param(t.name, marks=t.marks + ((pytest.mark.slow,) if t.name == "arm" else ()))
                                  for t in TARGETS])
def test_tvmc_run_matches_onnxruntime(model_dir, name, tmp_path):
    target = require(name)
    tvmc("compile", model_dir / "loop.onnx", "--target", target.spec, "-o", tmp_path / "loop.tar")
    for k, run in enumerate(RUNS[:3]):
        tvmc("run", tmp_path / "loop.tar", "--inputs", model_dir / f"in{k}.npz", "--outputs", tmp_path / "out.npz")
        got = np.load(tmp_path / "out.npz")
        _assert_matches({key: got[key] for key in got.files}, onnxruntime_outputs(running_sum_model(), feeds(*run)))


def test_c_runner_matches_onnxruntime(model_dir, tmp_path):
    native_c_runner(model_dir / "loop.onnx", tmp_path)
    for k, run in enumerate(RUNS):
        inputs = feeds(*run)
        args = []
        for key, value in inputs.items():
            np.save(tmp_path / f"{key}.npy", value)
            args += ["-i", f"{key}={tmp_path}/{key}.npy"]
        out = tmp_path / f"out{k}"
        out.mkdir()
        res = subprocess.run([str(tmp_path / "tvmc_run"), "-p", str(tmp_path / "mod.params"), *args, "-O", str(out)],
                             capture_output=True, text=True, cwd=tmp_path, env={"LD_LIBRARY_PATH": str(tmp_path)},
                             timeout=300)
        assert res.returncode == 0, res.stderr
        want = onnxruntime_outputs(running_sum_model(), inputs)
        _assert_matches({key: np.load(out / f"output_{j}.npy") for j, key in enumerate(want)}, want)


def test_scan_outputs_of_a_run_time_loop_are_refused_naming_the_node(tmp_path):
    onnx.save(running_sum_model(scan_output=True), tmp_path / "scan.onnx")
    res = tvmc("compile", tmp_path / "scan.onnx", "--target", "native", "-o", tmp_path / "scan.tar", check=False)
    assert res.returncode != 0 and not (tmp_path / "scan.tar").exists()
    line = res.stderr.strip()
    assert "\n" not in line and "the_loop" in line and "scan outputs" in line and "Traceback" not in line, line


def test_a_carried_value_that_changes_type_is_refused(tmp_path):
    body = helper.make_graph([helper.make_node("Concat", ["v", "v"], ["v2"], axis=0),
                              helper.make_node("Identity", ["c"], ["c2"])], "body",
                             [vi("i", I64, []), vi("c", B, []), vi("v", F, [2])], [vi("c2", B, []), vi("v2", F, [4])])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body, name="growing")], "g",
                              [vi("M", I64, []), vi("v0", F, [2])], [vi("v", F, ["n"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "g.onnx")
    res = tvmc("compile", tmp_path / "g.onnx", "--target", "native", "-o", tmp_path / "g.tar", check=False)
    line = res.stderr.strip()
    assert res.returncode != 0 and "\n" not in line and "growing" in line and "changes from" in line, line


def test_tvmc_js_runs_the_loop(tmp_path):
    """tvmc.js (Node) on the web output of a wasm build: the module's graph entry runs the loop."""
    import json

    import tvmc
    from tests.e2e.test_web import _node, run_node_module

    _node()
    model = running_sum_model()
    tvmc.compile(model, target=require("wasm").target, output=tmp_path / "site", output_format="web")
    runs = []
    for m, cond, limit in RUNS:
        inputs = feeds(m, cond, limit)
        runs.append({"M": [m], "cond": [int(cond)], **{k: inputs[k].reshape(-1).tolist() for k in ("x", "s0", "p0")},
                     "limit": [limit]})
    got_runs = run_node_module(tmp_path,
        'import { loadModel } from "./site/tvmc.js";\n'
        'const m = await loadModel(new URL("./site/", import.meta.url));\n'
        f"const runs = {json.dumps(runs)};\n"
        "const typed = { M: (v) => BigInt64Array.from(v.map(BigInt)), cond: (v) => Uint8Array.from(v) };\n"
        "const out = runs.map((r) => {\n"
        "  for (const [k, v] of Object.entries(r)) m.setInput(k, (typed[k] || ((a) => Float32Array.from(a)))(v));\n"
        "  m.run();\n"
        "  return [0, 1].map((i) => Array.from(m.getOutput(i)));\n"
        "});\n"
        "console.log(JSON.stringify(out));\n"
        "m.destroy();\n")
    for got, run in zip(got_runs, RUNS):
        want = onnxruntime_outputs(model, feeds(*run))
        _assert_matches({k: np.array(g, np.float32).reshape(want[k].shape) for k, g in zip(want, got)}, want)


@pytest.mark.parametrize("edit,why", [
    (lambda attrs: attrs.update(body_outputs=attrs["body_outputs"][:1] + attrs["body_outputs"][2:] * 2),
     "changes type"),
    (lambda attrs: attrs.update(body_nodes=[0, attrs["body_nodes"][1]]), "inconsistent body")])
def test_a_malformed_loop_node_is_refused_at_load(tmp_path, edit, why):
    """load_artifact checks the tvmc_loop node before any executor copies through it."""
    from tvmc.driver import compile_model
    from tvmc.errors import ArtifactError
    from tvmc.package import load_artifact, save_artifact
    from tvmc.target import resolve_target

    module = compile_model(running_sum_model(), resolve_target("native"))
    loop = next(n for n in module.graph_json["nodes"] if n["op"] == "tvmc_loop")
    edit(loop["attrs"])
    save_artifact(module, tmp_path / "bad.tar")
    with pytest.raises(ArtifactError, match=why):
        load_artifact(tmp_path / "bad.tar")


def test_while_loop_with_a_constant_unbounded_trip_count():
    """A `while` as exporters write it: M = INT64_MAX (an initializer) and the body's condition;
    no scan output, so it stays a loop instead of being unrolled M times."""
    from tvmc.backend import TvmcBackend

    body = helper.make_graph([helper.make_node("Mul", ["v", "two"], ["v2"]),
                              helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
                              helper.make_node("Less", ["s", "limit"], ["c2"])], "body",
                             [vi("i", I64, []), vi("c", B, []), vi("v", F, [3])], [vi("c2", B, []), vi("v2", F, [3])],
                             [helper.make_tensor("two", F, [], [2.0])])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)], "while",
                              [vi("v0", F, [3]), vi("limit", F, [])], [vi("v", F, [3])],
                              [helper.make_tensor("M", I64, [], [np.iinfo(np.int64).max])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rep = TvmcBackend.prepare(model, target="native")
    assert any(n["op"] == "tvmc_loop" for n in rep.module.graph_json["nodes"])
    for limit in (0.0, 10.0, 1e6):
        inputs = {"v0": np.array([0.25, 0.5, 1], np.float32), "limit": np.array(limit, np.float32)}
        want = onnxruntime_outputs(model, inputs)
        _assert_matches(dict(zip(want, rep.run(inputs))), want)


def test_tuning_tasks_include_the_body_kernels():
    """`tvmc tune` extracts the body's anchors too (a dense here), so tuning records apply to them."""
    from tvmc.driver import extract_tasks
    from tvmc.target import resolve_target

    body = helper.make_graph([helper.make_node("MatMul", ["v", "w"], ["v2"]),
                              helper.make_node("Identity", ["c"], ["c2"])], "body",
                             [vi("i", I64, []), vi("c", B, []), vi("v", F, [4, 16])],
                             [vi("c2", B, []), vi("v2", F, [4, 16])],
                             [helper.make_tensor("w", F, [16, 16], np.eye(16, dtype=np.float32).reshape(-1))])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)], "g",
                              [vi("M", I64, []), vi("v0", F, [4, 16])], [vi("v", F, [4, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    tasks = extract_tasks(model, resolve_target("native"))
    assert len(tasks) == 1 and tasks[0].op.startswith("nn.dense"), tasks


def test_graph_dumps_of_a_body_go_to_their_own_folder(model_dir, tmp_path):
    tvmc("compile", model_dir / "loop.onnx", "--target", "native", "-o", tmp_path / "m.tar", "--dump-ir", "graph")
    main, body = tmp_path / "m.dumps", tmp_path / "m.dumps" / "loop0"
    (fused,) = main.glob("graph.*_FuseOps.txt")  # numbered by the pass's place in the pipeline
    assert (body / fused.name).exists()
    assert "control.loop" in fused.read_text()
