"""Reliability and security, round 2 (issue 27): every input path under the error contract.

Grouped by the issue's points: artifacts never name the programs tvmc runs (1), bounded work at
compile time (2), --config read like a descriptor (3), non-finite numbers in JSON (4), bounded
reads (5), signals (6), the C runner's files (8), the web output's swap (9), model errors that
name the node (10). Each test fails on the behaviour the probe found and passes on the fix.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jsonschema
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from pathlib import Path

from tvmc.cli import cli

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "tvmc-json.schema.json").read_text())


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def tvmc(*args, env=None, cwd=None, timeout=300):
    """`tvmc ARGS` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "tvmc.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def error_line(stderr: str) -> str:
    """The one `error: ...` line of a failed command (no traceback, nothing before it)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def listing(folder) -> list:
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


def save_model(path, nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    return path


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture
def relu_model(tmp_path):
    return save_model(tmp_path / "relu.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                      [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])


# ---- 3. --config follows the descriptors' input rules -------------------------------------------

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdef", "bcdefg"))


@pytest.mark.parametrize("content,message", [
    (ALIAS_BOMB, "YAML aliases (*a) are not allowed in a config file"),
    ("opt_level: " + "9" * 5000 + "\n", "a value YAML cannot build"),
    ("opt_level: {a: {b: 1}}\n", "malformed at 'opt_level/a'"),
    ("x: " + "[" * 40 + "]" * 40 + "\n", "nested more than 16 levels deep"),
    ("# " + "x" * (70 << 10) + "\n", "larger than 65536 bytes"),
    (b"opt_level: \xff\n", "not UTF-8 text"),
], ids=["aliases", "5000 digits", "schema", "depth", "size", "utf-8"])
def test_config_file_is_read_with_the_descriptor_limits(tmp_path, relu_model, content, message):
    config = tmp_path / "c.yaml"
    (config.write_bytes if isinstance(content, bytes) else config.write_text)(content)
    r = invoke("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar", "--config", config)
    assert r.exit_code == 64 and message in error_line(r.stderr), r.output
    assert not (tmp_path / "o.tar").exists()


def test_config_that_is_a_fifo_is_refused_at_once(tmp_path, relu_model):
    os.mkfifo(tmp_path / "c.yaml")   # nobody writes it: reading would block forever
    r = tvmc("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar", "--config", tmp_path / "c.yaml",
             timeout=120)
    assert r.returncode == 64 and "not a regular file (a FIFO)" in error_line(r.stderr)


# ---- 4. non-finite numbers ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def log_artifact(tmp_path_factory):
    """Log(x), x [4]: Log of 0 and -1 are -inf and NaN."""
    folder = tmp_path_factory.mktemp("log")
    model = save_model(folder / "log.onnx", [helper.make_node("Log", ["x"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])
    r = invoke("compile", model, "--target", "native", "-o", folder / "log.tar")
    assert r.exit_code == 0, r.output
    return folder / "log.tar"


def _strict_json(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("values,expected", [
    ([0, -1, 1, 2], ("NaN", "NaN", "NaN")),
    ([0, 1, 2, 3], ("-Infinity", 1.0986123085021973, "-Infinity")),
])
def test_run_json_with_non_finite_outputs_is_valid_json(tmp_path, log_artifact, values, expected):
    np.savez(tmp_path / "in.npz", x=np.array(values, np.float32))
    r = invoke("run", log_artifact, "--inputs", tmp_path / "in.npz", "--json", "--print-top", "4")
    assert r.exit_code == 0, r.output
    doc = _strict_json(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    out = doc["outputs"][0]
    assert (out["min"], out["max"], out["mean"])[::2] == expected[::2]
    if expected[1] != "NaN":
        assert math.isclose(out["max"], expected[1], rel_tol=1e-6)
    assert all(isinstance(c["score"], (int, float)) or c["score"] in ("NaN", "Infinity", "-Infinity")
               for c in doc["top"]["y"])


@pytest.mark.parametrize("bounds", ["-inf:5", "0:inf", "nan:1", "0:nan", "-1e400:0"])
def test_value_range_bounds_must_be_finite(tmp_path, relu_model, bounds):
    r = invoke("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar", "--value-range", f"x={bounds}")
    assert r.exit_code == 64 and "must be finite numbers" in error_line(r.stderr)


def test_api_value_ranges_must_be_finite(tmp_path, relu_model):
    import tvmc

    with pytest.raises(ValueError, match="must be finite numbers"):
        tvmc.compile(relu_model, target="native", output=tmp_path / "o.tar", value_ranges={"x": (-math.inf, 0)})


def test_artifact_json_members_are_strict_json():
    from tvmc.package import _json_bytes

    assert _strict_json(_json_bytes({"a": [1.5, -2]}).decode()) == {"a": [1.5, -2]}
    with pytest.raises(ValueError):
        _json_bytes({"value_ranges": {"x": [-math.inf, 0.0]}})
