"""Range, Expand and ConstantOfShape whose shape inputs are computed at run time
(docs/dynamic_shapes.md): bounds derived by the value-range analysis with no user statement
(shapes taken from NonZero's run-time shape), bounds from `--value-range` on a graph input, the
error when the values at run time break the stated range (Python, wasm and C executors), and the
refusal without a range. Against onnxruntime through `tvmc run` and the C runner."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc
from tests.e2e.test_dynamic_shapes import native_c_runner
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


def _model(nodes, inputs, outputs, inits, opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "dynb", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def from_nonzero_model() -> onnx.ModelProto:
    """x float32[3, 4], col float32[1, 1] -> n = NonZero(x)'s run-time extent (Shape, Gather):
    y = Cast(Range(0, n, 1)) + 0.5, c = ConstantOfShape(Shape(NonZero(x))) of 2.5,
    e = Expand(col, [n, n]), z = Range(0, Size(NonZero(x)), 3)."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["s"]),
             helper.make_node("Gather", ["s", "i1"], ["n1"], axis=0),
             helper.make_node("Squeeze", ["n1"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rc"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["rc", "half"], ["y"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
             helper.make_node("Concat", ["n1", "n1"], ["nn"], axis=0),
             helper.make_node("Expand", ["col", "nn"], ["e"]),
             helper.make_node("Size", ["nz"], ["size"]),
             helper.make_node("Range", ["zero", "size", "three"], ["z"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                          helper.make_tensor_value_info("col", TensorProto.FLOAT, [1, 1])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]),
                   helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, "n"]),
                   helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", "n"]),
                   helper.make_tensor_value_info("z", TensorProto.INT64, ["m"])],
                  [helper.make_tensor("i1", TensorProto.INT64, [1], [1]),
                   helper.make_tensor("zero", TensorProto.INT64, [], [0]),
                   helper.make_tensor("one", TensorProto.INT64, [], [1]),
                   helper.make_tensor("three", TensorProto.INT64, [], [3]),
                   helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])


NONZERO_INPUTS = {"x": np.array([[0, 1.5, 0, 2], [3, 0, 0, 1.5], [0, 0, -1, 0]], np.float32),
                  "col": np.array([[7.0]], np.float32)}


def range_model() -> onnx.ModelProto:
    """start, limit int64 scalars (graph inputs) -> y = Range(start, limit, 2) * 3."""
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="the_range"),
             helper.make_node("Mul", ["r", "three"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in ("start", "limit")],
                  [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])],
                  [helper.make_tensor("delta", TensorProto.INT64, [], [2]),
                   helper.make_tensor("three", TensorProto.INT64, [], [3])])


RANGES = ("--value-range", "start=-3:3", "--value-range", "limit=0:10")  # bound: ceil((10 + 3) / 2) = 7
# (start, limit): within the stated ranges (lengths 7, 0, 1), then limit = 12 breaks them (length 8)
RANGE_CASES = [(-3, 10), (1, 0), (3, 4)]
BROKEN = (-3, 12)


def _inputs(start, limit):
    return {"start": np.array(start, np.int64), "limit": np.array(limit, np.int64)}


def _check(got, want):
    for key, ref in want.items():
        assert got[key].shape == ref.shape and got[key].dtype == ref.dtype, key
        np.testing.assert_array_equal(got[key], ref, err_msg=key)


@pytest.mark.parametrize("name", ["native", pytest.param("wasm", marks=pytest.mark.slow),
                                  pytest.param("opencl", marks=pytest.mark.slow)])
def test_shapes_from_nonzero_are_bounded_with_no_statement(name, tmp_path):
    target = require(name)
    onnx.save(from_nonzero_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", **NONZERO_INPUTS)
    tvmc("compile", tmp_path / "m.onnx", "--target", target.spec, "-o", tmp_path / "m.tar")
    tvmc("run", tmp_path / "m.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    _check(np.load(tmp_path / "out.npz"), onnxruntime_outputs(from_nonzero_model(), NONZERO_INPUTS))


@pytest.mark.parametrize("name", ["native", "wasm"])
def test_range_of_a_graph_input_with_a_stated_range(name, tmp_path):
    """Within the range: as onnxruntime; beyond it: `tvmc run` fails naming the output."""
    target = require(name)
    onnx.save(range_model(), tmp_path / "r.onnx")
    tvmc("compile", tmp_path / "r.onnx", "--target", target.spec, *RANGES, "-o", tmp_path / "r.tar")
    for start, limit in RANGE_CASES:
        np.savez(tmp_path / "in.npz", **_inputs(start, limit))
        tvmc("run", tmp_path / "r.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
        _check(np.load(tmp_path / "out.npz"), onnxruntime_outputs(range_model(), _inputs(start, limit)))
    np.savez(tmp_path / "in.npz", **_inputs(*BROKEN))
    res = tvmc("run", tmp_path / "r.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "bad.npz",
               check=False)
    line = res.stderr.strip()
    assert res.returncode == 7 and not (tmp_path / "bad.npz").exists(), line
    assert ("\n" not in line and "'y'" in line and "[8]" in line and "bound [7]" in line
            and "--value-range" in line), line


def _c_run(folder, inputs: dict):
    """The C runner of `folder` (native_c_runner) on `inputs`: (the process, its outputs in order)."""
    args = []
    for name, value in inputs.items():
        np.save(folder / f"{name}.npy", value)
        args += ["-i", f"{name}={folder}/{name}.npy"]
    (folder / "out").mkdir(exist_ok=True)
    res = subprocess.run([str(folder / "tvmc_run"), "-p", str(folder / "mod.params"), *args, "-O", str(folder / "out")],
                         capture_output=True, text=True, cwd=folder, env={"LD_LIBRARY_PATH": str(folder)}, timeout=300)
    return res, [np.load(folder / "out" / f"output_{k}.npy") for k in range(4) if res.returncode == 0
                 and (folder / "out" / f"output_{k}.npy").exists()]


def test_c_runner_bounds_and_broken_range(tmp_path):
    """The C runner (tvmc_model_output_shape / tvmc_model_get_output of the C API): NonZero-derived
    shapes, a stated range, and the error code and tvmc_last_error line when it is broken."""
    for sub in ("nz", "r"):
        (tmp_path / sub).mkdir()
    onnx.save(from_nonzero_model(), tmp_path / "m.onnx")
    native_c_runner(tmp_path / "m.onnx", tmp_path / "nz")
    res, got = _c_run(tmp_path / "nz", NONZERO_INPUTS)
    assert res.returncode == 0, res.stderr
    for g, ref in zip(got, onnxruntime_outputs(from_nonzero_model(), NONZERO_INPUTS).values(), strict=True):
        np.testing.assert_array_equal(g, ref)

    onnx.save(range_model(), tmp_path / "r.onnx")
    native_c_runner(tmp_path / "r.onnx", tmp_path / "r", *RANGES)
    res, got = _c_run(tmp_path / "r", _inputs(*RANGE_CASES[0]))
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(got[0], onnxruntime_outputs(range_model(), _inputs(*RANGE_CASES[0]))["y"])
    res, _ = _c_run(tmp_path / "r", _inputs(*BROKEN))
    assert res.returncode != 0 and "'y'" in res.stderr and "outside its bound" in res.stderr, res.stderr


def test_without_a_range_the_error_names_the_node_and_the_option(tmp_path):
    onnx.save(range_model(), tmp_path / "r.onnx")
    res = tvmc("compile", tmp_path / "r.onnx", "--target", "native", "-o", tmp_path / "r.tar", check=False)
    line = res.stderr.strip()
    assert res.returncode == 2 and not (tmp_path / "r.tar").exists(), line
    assert "\n" not in line and "the_range" in line and "'start'" in line and "--value-range" in line, line


def test_value_range_analysis_bounds():
    """The bound follows the interval arithmetic: limit = (n * 3 - 1) / 2 with n in [1, 4] is in
    [1, 5] (integer division), start = -min(n, 2) in [-2, -1], so Range(start, limit, 1) has at
    most 5 + 2 = 7 elements; Expand of a [1, 3] tensor to [n, 1] is bounded by [4, 3]."""
    from tvmc.frontend.onnx import from_onnx

    ints = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [], [v])  # noqa: E731
    nodes = [helper.make_node("Mul", ["n", "c3"], ["a"]), helper.make_node("Sub", ["a", "c1"], ["b"]),
             helper.make_node("Div", ["b", "c2"], ["limit"]), helper.make_node("Min", ["n", "c2"], ["m"]),
             helper.make_node("Neg", ["m"], ["start"]), helper.make_node("Range", ["start", "limit", "c1"], ["y"]),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "one"], ["sh"], axis=0),
             helper.make_node("Expand", ["row", "sh"], ["e"])]
    model = _model(nodes, [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                           helper.make_tensor_value_info("row", TensorProto.FLOAT, [1, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, ["k"]),
                    helper.make_tensor_value_info("e", TensorProto.FLOAT, ["k", 3])],
                   [ints("c1", 1), ints("c2", 2), ints("c3", 3), helper.make_tensor("ax", TensorProto.INT64, [1], [0]),
                    helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    graph = from_onnx(model, value_ranges={"n": (1, 4)})
    y, e = graph.outputs[:2]
    assert (y.shape, y.type.dynamic_axes) == ((7,), (0,))
    assert (e.shape, e.type.dynamic_axes) == ((4, 3), (0,))


def test_tvmc_js_reports_a_broken_range(tmp_path):
    """tvmc.js (Node) on a wasm web build with --value-range: a run within the range gives
    onnxruntime's output; one beyond it makes outputShape throw the C API's line naming 'y'."""
    import tvmc
    from tests.e2e.test_web import _node, run_node_module

    _node()
    tvmc.compile(range_model(), target=require("wasm").target, output=tmp_path / "site", output_format="web",
                 value_ranges={"start": (-3, 3), "limit": (0, 10)})
    got = run_node_module(tmp_path,
        'import { loadModel } from "./site/tvmc.js";\n'
        'const m = await loadModel(new URL("./site/", import.meta.url));\n'
        "const result = {};\n"
        f"for (const [start, limit] of [[{RANGE_CASES[0][0]}, {RANGE_CASES[0][1]}], [{BROKEN[0]}, {BROKEN[1]}]]) {{\n"
        "  m.setInput('start', BigInt64Array.of(BigInt(start)));\n"
        "  m.setInput('limit', BigInt64Array.of(BigInt(limit)));\n"
        "  m.run();\n"
        "  try { result[limit] = Array.from(m.getOutput(0), Number); } catch (e) { result.error = e.message; }\n"
        "}\n"
        "console.log(JSON.stringify(result));\n"
        "m.destroy();\n")
    want = onnxruntime_outputs(range_model(), _inputs(*RANGE_CASES[0]))["y"]
    assert got[str(RANGE_CASES[0][1])] == want.tolist()
    assert "'y'" in got["error"] and "outside its bound [7]" in got["error"] and "(code 4)" in got["error"], got


def test_tune_and_the_onnx_backend_take_the_stated_ranges(tmp_path):
    """`tvmc tune --list-tasks` imports the model only with its --value-range (else exit 2 naming
    the option); TvmcBackend.prepare(value_ranges=...) runs it as onnxruntime."""
    from tvmc.backend import TvmcBackend

    onnx.save(range_model(), tmp_path / "r.onnx")
    res = tvmc("tune", tmp_path / "r.onnx", "--target", "native", "--list-tasks", check=False)
    assert res.returncode == 2 and "--value-range" in res.stderr, res.stderr
    res = tvmc("tune", tmp_path / "r.onnx", "--target", "native", "--list-tasks", *RANGES, check=False)
    assert res.returncode == 0, res.stderr
    rep = TvmcBackend.prepare(range_model(), value_ranges={"start": (-3, 3), "limit": (0, 10)})
    names = [o.name for o in range_model().graph.output]
    got = dict(zip(names, rep.run(list(_inputs(3, 4).values()))))
    _check(got, onnxruntime_outputs(range_model(), _inputs(3, 4)))
