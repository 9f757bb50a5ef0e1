"""Winograd or direct, chosen by measurement (issue 30, point 3): `tvmc tune` takes the tasks of
every form of a 3x3 convolution (direct NCHWc, F(2x2, 3x3), F(4x4, 3x3)), and a compile with the
records lets AlterOpLayout choose each conv's form by the records' costs (PassContext.config_lookup,
plan_winograd's `measured`), within the size budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvmc
from tvmc.driver import CompileOptions, extract_tasks
from tvmc.package import save_artifact
from tvmc.runtime.cpu import GraphExecutor
from tvmc.target import resolve_target

RNG = np.random.default_rng(3)
WEIGHT = RNG.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1
NO_BUDGET = {"AlterOpLayout.size_budget": 0.0}  # one conv: any transformed weight is over 1.25x


def conv_model():
    """y = relu(conv3x3(x)), x [1, 32, 20, 20], 32 output channels, padding 1."""
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 20, 20])],
        [numpy_helper.from_array(WEIGHT, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def form_of(data: dict) -> int:
    """0 for a record of the direct conv (NCHWc or its im2col), else its Winograd output tile."""
    task = data["task"]
    if task["name"].startswith("conv2d_winograd"):
        return dict(task["workload"][-1])["tile_size"]
    return 0


def test_tuning_takes_the_tasks_of_every_form():
    tasks = extract_tasks(conv_model(), resolve_target("native"), CompileOptions())
    forms = sorted({dict(t.workload[-1]).get("tile_size", 0) for t in tasks if t.op.startswith("nn.conv2d")})
    assert forms == [0, 2, 4], [t.describe() for t in tasks]
    fixed = extract_tasks(conv_model(), resolve_target("native"),
                          CompileOptions(pass_config={"AlterOpLayout.winograd_tile_size": 0}))
    assert all("winograd" not in t.impl for t in fixed)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("wino") / "records.json"
    tvmc.tune(conv_model(), "native", str(path), trials=4, tuner="random", number=1, repeat=1)
    return path


def _with_costs(src, dst, cost_of_form: dict):
    """`src`'s records with every conv record's cost set to cost_of_form[its form] seconds."""
    lines = []
    for line in src.read_text().splitlines():
        data = json.loads(line)
        if data["task"]["op"].startswith("nn.conv2d"):
            data["costs_s"] = [cost_of_form[form_of(data)]]
        lines.append(json.dumps(data))
    dst.write_text("\n".join(lines) + "\n")


def _compiled_form(records_path) -> tuple:
    module = tvmc.compile(conv_model(), "native", tuning_records=str(records_path), pass_config=NO_BUDGET).module
    applied = [r for r in module.metadata["tuning_records"]["applied"] if r["task"]["op"].startswith("nn.conv2d")]
    assert len(applied) == 1, applied
    return form_of(applied[0]), module


def test_the_compile_takes_the_fastest_measured_form(records):
    best: dict = {}
    for line in records.read_text().splitlines():
        data = json.loads(line)
        if data["task"]["op"].startswith("nn.conv2d") and not data["error"]:
            form, cost = form_of(data), sum(data["costs_s"]) / len(data["costs_s"])
            best[form] = min(best.get(form, cost), cost)
    assert set(best) == {0, 2, 4}, best
    assert _compiled_form(records)[0] == min(best, key=best.get)


@pytest.mark.parametrize("costs,form", [({0: 1e-3, 2: 2e-3, 4: 3e-3}, 0), ({0: 3e-3, 2: 2e-3, 4: 1e-3}, 4),
                                        ({0: 3e-3, 2: 1e-3, 4: 2e-3}, 2)])
def test_the_choice_follows_the_costs_and_the_output_matches(records, tmp_path, costs, form):
    edited = tmp_path / "edited.json"
    _with_costs(records, edited, costs)
    chosen, module = _compiled_form(edited)
    assert chosen == form
    ex = GraphExecutor(save_artifact(module, tmp_path / "conv.tar"))
    x = RNG.standard_normal((1, 32, 20, 20)).astype(np.float32)
    ex.set_input("x", x)
    ex.run()
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(conv_model().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(ex.get_output(0), want, rtol=1e-4, atol=1e-4)


def test_the_size_budget_still_holds(records, tmp_path):
    """With the weights transformed at compile time (winograd_at_load 0), the default budget (1.25x)
    keeps the conv direct whatever the records say; transformed at load time (the default), the
    records' fastest form is taken and the params stay the model's weights."""
    edited = tmp_path / "edited.json"
    _with_costs(records, edited, {0: 3e-3, 2: 2e-3, 4: 1e-3})
    for at_load, form in ((0, 0), (1, 4)):
        module = tvmc.compile(conv_model(), "native", tuning_records=str(edited),
                              pass_config={"AlterOpLayout.winograd_at_load": at_load}).module
        applied = [r for r in module.metadata["tuning_records"]["applied"] if r["task"]["op"].startswith("nn.conv2d")]
        assert [form_of(r) for r in applied] == [form]
        assert sum(v.nbytes for v in module.params.values()) <= 1.25 * WEIGHT.nbytes
