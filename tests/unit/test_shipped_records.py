"""Shipped tuning records (configs/tuning/<descriptor>.json, TVM's TopHub without a download):
applied by default when the target is exactly the descriptor they were tuned for, under the
user's --tuning-records, reported by compile, turned off by --no-shipped-records; and every file
tvmc ships is valid records of its descriptor."""

from __future__ import annotations

import json
import tarfile
from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.autotune import record
from tvmc.autotune.measure import MeasureError, MeasureResult
from tvmc.autotune.record import RecordWriter, load_records
from tvmc.driver import extract_tasks
from tvmc.cli import main
from tvmc.target import known_targets, resolve_target


def _model(path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def _write(path, target, task, config, cost):
    with RecordWriter(path) as w:
        w.write(target, task, config, MeasureResult([cost], MeasureError.NO_ERROR))


def _config(task, target):
    cfg = dict(task.config_space(target).fallback_config())
    knob, values = next((k, v) for k, v in task.config_space(target).knobs.items() if len(v) > 1)
    cfg[knob] = next(v for v in values if v != cfg[knob])
    return cfg


@pytest.fixture
def setup(tmp_path, monkeypatch):
    target = resolve_target("native")
    model = _model(tmp_path / "conv.onnx")
    task = extract_tasks(model, target)[0]
    shipped = tmp_path / "shipped.json"
    config = _config(task, target)
    _write(shipped, target, task, config, 1e-3)
    monkeypatch.setattr(record, "shipped_records_path",
                        lambda t: shipped if t.tuning_key == target.tuning_key else None)
    return tmp_path, model, task, target, config


def _meta(tar):
    with tarfile.open(tar) as tf:
        return json.load(tf.extractfile("metadata.json"))


def test_shipped_records_apply_by_default_and_compile_reports_them(setup, capsys):
    tmp, model, task, target, config = setup
    assert main(["compile", model, "--target", "native", "-o", str(tmp / "a.tar")]) == 0
    out = capsys.readouterr().out
    shipped = _meta(tmp / "a.tar")["shipped_records"]
    assert shipped["workloads_from_records"] == 1 and shipped["applied"][0]["config"] == config
    assert "(shipped): 1/1 kernel workloads from records" in out
    assert main(["compile", model, "--target", "native", "-o", str(tmp / "b.tar"), "--no-shipped-records"]) == 0
    assert "shipped_records" not in _meta(tmp / "b.tar")


def test_user_records_come_before_shipped_ones(setup):
    tmp, model, task, target, config = setup
    mine = dict(task.config_space(target).fallback_config())
    _write(tmp / "mine.json", target, task, mine, 5e-3)  # slower than the shipped record, still preferred
    assert main(["compile", model, "--target", "native", "-o", str(tmp / "c.tar"), "--tuning-records",
                 str(tmp / "mine.json")]) == 0
    meta = _meta(tmp / "c.tar")
    assert meta["tuning_records"]["applied"][0]["config"] == mine
    assert "shipped_records" not in meta or meta["shipped_records"]["workloads_from_records"] == 0


def test_a_changed_descriptor_does_not_take_the_shipped_records(setup):
    tmp, model, *_ = setup
    assert main(["compile", model, "--target", "native", "--target-option", "l2_bytes=65536",
                 "-o", str(tmp / "d.tar")]) == 0
    assert "shipped_records" not in _meta(tmp / "d.tar")


def test_a_cross_compiler_keeps_the_shipped_records(setup):
    tmp, model, task, target, config = setup
    assert main(["compile", model, "--target", "native", "--cross-compiler", "cc", "-o", str(tmp / "e.tar")]) == 0
    meta = _meta(tmp / "e.tar")
    assert meta["target"]["linker"][0] == "cc" and meta["tuning_key"] == target.tuning_key
    assert meta["shipped_records"]["applied"][0]["config"] == config


def test_every_shipped_records_file_holds_records_of_its_descriptor():
    folder = resources.files("tvmc.configs").joinpath(record.SHIPPED_FOLDER)
    files = [p for p in folder.iterdir() if p.name.endswith(".json")] if folder.is_dir() else []
    for path in files:
        name = path.name[:-len(".json")]
        assert name in known_targets(), f"{path.name}: no shipped descriptor named {name}"
        target = resolve_target(name)
        records = load_records(path)
        mine = record.of_target(target)
        assert records and all(mine(r) for r in records), path.name
        lookup = record.shipped_records(target)
        assert lookup is not None and len(lookup.best) == len({r.key for r in records if r.ok}), path.name
