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

def _one_op_artifact(folder, op_type: str, target: str):
    """folder/<op>.tar: the ONNX op `op_type` on x [4] float -> y, compiled for `target`."""
    name = op_type.lower()
    model = save_model(folder / f"{name}.onnx", [helper.make_node(op_type, ["x"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])
    r = invoke("compile", model, "--target", target, "-o", folder / f"{name}.tar")
    assert r.exit_code == 0, r.output
    return folder / f"{name}.tar"


@pytest.fixture(scope="module")
def log_artifact(tmp_path_factory):
    """Log(x), x [4]: Log of 0 and -1 are -inf and NaN."""
    return _one_op_artifact(tmp_path_factory.mktemp("log"), "Log", "native")


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


# ---- 5. every read is bounded ---------------------------------------------------------------------

def test_huge_sparse_records_file_is_a_one_line_error(tmp_path, relu_model):
    records = tmp_path / "records.json"
    with open(records, "wb") as f:
        f.truncate(8 << 30)   # 8 GiB of holes: nothing is written to disk
    r = invoke("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar", "--tuning-records", records)
    assert r.exit_code == 9 and "more than the limit of 1073741824" in error_line(r.stderr)


def test_record_with_zero_cost_is_skipped():
    from tvmc.autotune.record import parse_line

    line = {"version": 1, "target": {"hash": "h"}, "task": {"name": "n", "op": "o", "workload": [],
                                                           "in_dtypes": [], "flops": 10},
            "config": {}, "costs_s": [0.0], "error": 0}
    with pytest.raises(ValueError, match="costs_s/0"):
        parse_line(json.dumps(line))
    line["costs_s"] = [1e-6]
    assert parse_line(json.dumps(line)).mean_s == 1e-6


def _lying_npz(path, shape, data_bytes: int):
    """An .npz whose x.npy header declares `shape` float32 but holds `data_bytes` bytes."""
    import io
    import zipfile

    from numpy.lib import format as npy

    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    buf.write(b"\0" * data_bytes)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", buf.getvalue())
    return path


def test_npz_whose_header_declares_more_than_it_holds_is_refused_before_reading(tmp_path, log_artifact):
    r = invoke("run", log_artifact, "--inputs", _lying_npz(tmp_path / "in.npz", (1 << 36,), 16))
    assert r.exit_code == 8 and "declares shape [68719476736]" in error_line(r.stderr)


def test_npz_over_the_size_limit_is_refused(tmp_path, log_artifact, monkeypatch):
    import tvmc.api

    monkeypatch.setattr(tvmc.api, "MAX_INPUTS_BYTES", 1000)
    np.savez(tmp_path / "in.npz", x=np.zeros(4, np.float32), pad=np.zeros(1000, np.uint8))
    r = invoke("run", log_artifact, "--inputs", tmp_path / "in.npz")
    assert r.exit_code == 8 and "more than the limit of 1000" in error_line(r.stderr)


def test_tool_output_is_bounded_and_its_temporary_folder_removed(tmp_path, monkeypatch):
    import tempfile

    from tvmc.process import run_tool

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = run_tool([sys.executable, "-c", "import sys, os; sys.stderr.write('e' * 5000000); "
                    "open(os.path.join(os.environ['TMPDIR'], 'cc1.s'), 'w').write('x')"], max_output_bytes=1000)
    assert res.returncode == 0 and res.stderr == "e" * 1000 and listing(tmp_path) == []


# ---- 6. signals clean up ----------------------------------------------------------------------------

def _wait_for(path, proc, seconds=300):
    import time

    for _ in range(seconds * 10):   # no assertion depends on how fast this is
        if path.exists() or proc.poll() is not None:
            return
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


@pytest.mark.parametrize("sig,code,line", [("SIGTERM", 143, "error: terminated"), ("SIGINT", 130, "error: interrupted"),
                                           ("SIGHUP", 129, "error: hung up")])
def test_signal_during_compile_kills_the_compiler_and_leaves_no_files(tmp_path, relu_model, sig, code, line):
    """The compiler driver is a script that writes a cc*.s file in its TMPDIR, as gcc does,
    starts a child (cc1's part) and waits: after the signal neither is running and no file is left."""
    (tmp_path / "tmp").mkdir()
    started, pids = tmp_path / "started", tmp_path / "pids"
    driver = tmp_path / "slow-cc"
    driver.write_text(f"#!/bin/sh\necho x > \"$TMPDIR/ccAbCdEf.s\"\nsleep 300 &\necho $$ $! >> {pids}\n"
                      f"touch {started}\nwait\n")
    driver.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    returncode, err = _signal_when_started(["compile", relu_model, "--target", "native", "--target-option",
                                            f"linker={driver}", "-o", out / "m.tar"], started, env, sig)
    assert returncode == code and err.strip().splitlines() == [line]
    assert listing(tmp_path / "tmp") == [] and not out.exists() or listing(out) == []
    assert not any(_alive(int(p)) for p in pids.read_text().split())


@pytest.fixture(scope="module")
def forever_wasm(tmp_path_factory):
    """A wasm artifact whose Loop never ends (no trip count, the condition stays true)."""
    import shutil

    if shutil.which("clang-19") is None or shutil.which("wasm-ld-19") is None:
        pytest.skip("clang-19 and wasm-ld-19 not found: apt-get install clang-19 lld-19 (make install)")
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    from onnx import numpy_helper

    folder = tmp_path_factory.mktemp("forever")
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("v_in", TensorProto.FLOAT, [4])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "one")])
    model = save_model(folder / "forever.onnx", [helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)],
                       [vi("x", TensorProto.FLOAT, [4]), vi("c", TensorProto.BOOL, [])],
                       [vi("y", TensorProto.FLOAT, [4])])
    r = invoke("compile", model, "--target", "wasm", "-o", folder / "forever.tar")
    assert r.exit_code == 0, r.output
    return folder / "forever.tar"


@pytest.mark.parametrize("sig,code,line", [pytest.param("SIGINT", 130, "error: interrupted", marks=pytest.mark.slow),
                                           ("SIGTERM", 143, "error: terminated")])
def test_signal_during_a_wasm_run_is_not_swallowed(tmp_path, forever_wasm, sig, code, line):
    import signal as signals
    import time

    proc = subprocess.Popen([sys.executable, "-m", "tvmc.cli", "run", str(forever_wasm), "--fill-mode", "ones"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(5)   # in the wasm call by now, or still starting: either way the signal must end the run
        proc.send_signal(getattr(signals, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code and err.strip().splitlines() == [line]


# ---- 9. web output: a failed rewrite leaves the previous site whole ---------------------------------

def test_failed_rewrite_of_a_web_folder_keeps_the_previous_site(tmp_path, relu_model, monkeypatch):
    import shutil

    if shutil.which("clang-19") is None or shutil.which("wasm-ld-19") is None:
        pytest.skip("clang-19 and wasm-ld-19 not found: apt-get install clang-19 lld-19 (make install)")
    site = tmp_path / "site"
    r = invoke("compile", relu_model, "--target", "wasm", "--output-format", "web", "-o", site)
    assert r.exit_code == 0, r.output
    before = {p: (site / p).read_bytes() for p in listing(site)}
    real_rename, real_replace = os.rename, os.replace

    def failing(src, dst, *args, **kwargs):   # the step that puts the new site in place fails
        if Path(dst) == site and Path(src).name.startswith(".site.") and ".old." not in Path(src).name:
            raise OSError(28, "No space left on device")
        return (real_replace if failing.replace else real_rename)(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", lambda *a, **k: (setattr(failing, "replace", False), failing(*a, **k))[1])
    monkeypatch.setattr(os, "replace", lambda *a, **k: (setattr(failing, "replace", True), failing(*a, **k))[1])
    r = invoke("compile", relu_model, "--target", "wasm", "--output-format", "web", "-o", site, "-O", "1")
    monkeypatch.undo()
    assert r.exit_code == 7 and "No space left on device" in error_line(r.stderr)
    assert {p: (site / p).read_bytes() for p in listing(site)} == before
    assert listing(tmp_path) == sorted(["relu.onnx", "site"] + [f"site/{p}" for p in before])


# ---- 8. the C runner's files ---------------------------------------------------------------------------

# native_runner (tests/unit/conftest.py): the runner built for this host
from test_emulated import _inputs, _run  # noqa: E402


@pytest.mark.parametrize("flag", ["-p", "-i"])
def test_runner_refuses_a_fifo_at_once(native_runner, tmp_path, flag):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)   # nobody writes it: opening it for reading would block forever
    args = ["-p", fifo] if flag == "-p" else ["-p", "mod.params", "-i", f"x={fifo}"]
    res = _run(native_runner, *args)
    assert res.returncode == 66 and "not a regular file (a FIFO)" in error_line(res.stderr)


@pytest.mark.parametrize("victim", ["mod.so", "mod.params", "tvmc_run", "input", "link to mod.so"])
def test_runner_never_writes_an_output_over_what_it_reads(native_runner, tmp_path, victim):
    np.save(tmp_path / "x.npy", _inputs()["x"])
    if victim == "input":
        target = tmp_path / "x.npy"
    elif victim == "link to mod.so":
        target = tmp_path / "alias.so"
        os.symlink(native_runner / "mod.so", target)
    else:
        target = native_runner / victim
    before = target.read_bytes()
    res = _run(native_runner, "-p", "mod.params", "-i", f"x={tmp_path / 'x.npy'}", "-o", f"b={target}")
    assert res.returncode == 73 and "is a file this run reads" in error_line(res.stderr)
    assert target.read_bytes() == before
    assert _run(native_runner, "-p", "mod.params", "-i", f"x={tmp_path / 'x.npy'}").returncode == 0


def test_runner_output_is_written_whole_through_a_temporary_file(native_runner, tmp_path):
    np.save(tmp_path / "x.npy", _inputs()["x"])
    (tmp_path / "b.npy").write_bytes(b"old")
    res = _run(native_runner, "-p", "mod.params", "-i", f"x={tmp_path / 'x.npy'}", "-o", f"b={tmp_path / 'b.npy'}")
    assert res.returncode == 0, res.stderr
    assert np.load(tmp_path / "b.npy").shape == (1, 5) and sorted(os.listdir(tmp_path)) == ["b.npy", "x.npy"]


# ---- 1. an artifact never makes tvmc run a program --------------------------------------------------

import hashlib  # noqa: E402
import io  # noqa: E402
import tarfile  # noqa: E402

from tests.targets import require  # noqa: E402


def tar_members(path) -> dict:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


def repack(members: dict, path, reseal: bool = True, edit_metadata=None):
    """A tar of `members` at `path`; `edit_metadata(meta)` changes metadata.json, and with `reseal`
    it records the members' new sizes and digests (what a forger does: metadata.json has none)."""
    members = dict(members)
    meta = json.loads(members["metadata.json"])
    if edit_metadata is not None:
        edit_metadata(meta)
    if reseal:
        for name, blob in members.items():
            if name != "metadata.json":
                meta["member_bytes"][name] = len(blob)
                meta["member_sha256"][name] = hashlib.sha256(blob).hexdigest()
    members["metadata.json"] = json.dumps(meta).encode()
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return path


@pytest.fixture(scope="module")
def relu_tars(tmp_path_factory):
    """Relu(x + w), x [4], compiled for this host (native) and, where it runs here, for arm."""
    from onnx import numpy_helper

    folder = tmp_path_factory.mktemp("relu")
    model = save_model(folder / "relu.onnx", [helper.make_node("Add", ["x", "w"], ["s"]),
                                              helper.make_node("Relu", ["s"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])],
                       [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")])
    out = {}
    for name in ("native", "arm"):
        r = invoke("compile", model, "--target", name, "-o", folder / f"{name}.tar", "-O", "0")
        if r.exit_code == 0:
            out[name] = folder / f"{name}.tar"
    assert "native" in out
    return out


def _planted(tmp_path):
    """A command that would leave evidence (a file) if tvmc ran it."""
    evidence = tmp_path / "PWNED"
    return ["/bin/sh", "-c", f"touch {evidence}", "sh"], evidence


def test_build_runner_never_runs_the_linker_named_in_the_artifact(tmp_path, relu_tars):
    command, evidence = _planted(tmp_path)

    def plant(meta):
        meta["target"]["linker"] = command

    forged = repack(tar_members(relu_tars["native"]), tmp_path / "forged.tar", edit_metadata=plant)
    r = invoke("build-runner", forged, "-o", tmp_path / "tvmc_run")
    assert r.exit_code == 0, r.output
    assert not evidence.exists() and (tmp_path / "tvmc_run").is_file()
    assert "built by gcc" in r.stdout


def test_run_under_emulation_never_runs_the_emulator_named_in_the_artifact(tmp_path, relu_tars):
    require("arm")
    command, evidence = _planted(tmp_path)

    def plant(meta):
        meta["target"]["emulator"] = command
        meta["target"]["linker"] = command

    forged = repack(tar_members(relu_tars["arm"]), tmp_path / "forged.tar", edit_metadata=plant)
    r = invoke("run", forged, "--fill-mode", "ones")
    assert r.exit_code == 0, r.output
    assert not evidence.exists() and "under emulation (qemu-aarch64)" in r.stdout


def test_a_target_whose_code_differs_from_the_artifact_is_an_artifact_error(tmp_path, relu_tars):
    r = invoke("build-runner", relu_tars["native"], "--target", "arm", "-o", tmp_path / "tvmc_run")
    assert r.exit_code == 7 and "--target arm has kind cpu, codegen llvm, triple aarch64" in error_line(r.stderr)

    def alien(meta):
        meta["target"]["codegen"] = "opencl"

    forged = repack(tar_members(relu_tars["native"]), tmp_path / "alien.tar", edit_metadata=alien)
    r = invoke("build-runner", forged, "-o", tmp_path / "tvmc_run")
    assert r.exit_code == 7 and "no shipped target descriptor produces code like" in error_line(r.stderr)


@pytest.mark.parametrize("edit,where", [
    (lambda m: m.__setitem__("kernel_flops", {"k": "many"}), "kernel_flops/k"),
    (lambda m: m.__setitem__("kernel_flops", [1, 2]), "kernel_flops"),
    (lambda m: m["target"].pop("triple"), "(top level)"),
    (lambda m: m["target"].__setitem__("vector_width_bits", 10 ** 400), "target/vector_width_bits"),
    (lambda m: m["target"].__setitem__("linker", "gcc -shared"), "target/linker"),
], ids=["flops value", "flops list", "target field missing", "huge int", "linker string"])
def test_metadata_is_checked_against_its_schema_before_use(tmp_path, relu_tars, edit, where):
    forged = repack(tar_members(relu_tars["native"]), tmp_path / "forged.tar", edit_metadata=edit)
    for command in (["inspect", forged], ["run", forged, "--profile"], ["build-runner", forged, "-o", tmp_path / "r"]):
        r = invoke(*command)
        line = error_line(r.stderr)
        assert r.exit_code == 7 and "metadata.json" in line, (command, line)


def test_inspect_checks_digests_not_only_sizes(tmp_path, relu_tars):
    members = tar_members(relu_tars["native"])
    params = bytearray(members["mod.params"])
    params[-1] ^= 0xFF   # same size, same header: only the digest tells
    members["mod.params"] = bytes(params)
    damaged = repack(members, tmp_path / "damaged.tar", reseal=False)
    r = invoke("inspect", damaged)
    assert r.exit_code == 7 and "mod.params differs from the one packaged" in error_line(r.stderr)


def test_inspect_refuses_a_library_of_another_architecture(tmp_path, relu_tars):
    require("arm")
    members = tar_members(relu_tars["arm"])
    members["mod.so"] = tar_members(relu_tars["native"])["mod.so"]   # the same model, compiled for x86-64
    swapped = repack(members, tmp_path / "swapped.tar")
    for command in ("inspect", "run"):
        r = invoke(command, swapped)
        assert r.exit_code == 7 and "mod.so is code for x86_64, but the artifact's target 'arm' is aarch64" \
            in error_line(r.stderr)


# ---- 2. bounded work at compile time ---------------------------------------------------------------

from onnx import numpy_helper as nh  # noqa: E402


def _reduce_sum_of(node, inits, out_dtype=TensorProto.FLOAT):
    return [node, helper.make_node("ReduceSum", [node.output[0]], ["y"], keepdims=0)], inits, \
        [vi("y", out_dtype, [])]


HUGE_CONSTANTS = {
    "Range": _reduce_sum_of(helper.make_node("Range", ["s", "l", "d"], ["r"]),
                            [nh.from_array(np.array(0, np.int64), "s"), nh.from_array(np.array(1 << 36, np.int64), "l"),
                             nh.from_array(np.array(1, np.int64), "d")], TensorProto.INT64),
    "ConstantOfShape": _reduce_sum_of(helper.make_node("ConstantOfShape", ["sh"], ["r"]),
                                      [nh.from_array(np.array([1 << 20, 1 << 20], np.int64), "sh")]),
    "Tile": _reduce_sum_of(helper.make_node("Tile", ["w", "reps"], ["r"]),
                           [nh.from_array(np.ones((4, 4), np.float32), "w"),
                            nh.from_array(np.array([1 << 18, 1 << 18], np.int64), "reps")]),
    "Expand": _reduce_sum_of(helper.make_node("Expand", ["w", "sh"], ["r"]),
                             [nh.from_array(np.ones((1, 4), np.float32), "w"),
                              nh.from_array(np.array([1 << 30, 4], np.int64), "sh")]),
}


@pytest.mark.parametrize("op", sorted(HUGE_CONSTANTS))
def test_huge_compile_time_constants_are_refused_naming_the_node(tmp_path, op):
    nodes, inits, outputs = HUGE_CONSTANTS[op]
    model = save_model(tmp_path / "m.onnx", nodes, [], outputs, inits)
    r = invoke("compile", model, "--target", "native", "-o", tmp_path / "m.tar")
    line = error_line(r.stderr)
    assert r.exit_code == 2 and f"node 'r' ({op})" in line and "more than the limit of 1073741824 bytes" in line


@pytest.mark.parametrize("n,ok", [(16, True), (17, False)])
def test_a_constant_of_exactly_the_limit_is_built(tmp_path, monkeypatch, n, ok):
    import tvmc.graph.ir as ir

    monkeypatch.setattr(ir, "MAX_CONSTANT_BYTES", 64)   # 16 float32
    nodes, inits, outputs = _reduce_sum_of(helper.make_node("ConstantOfShape", ["sh"], ["r"]),
                                           [nh.from_array(np.array([n], np.int64), "sh")])
    model = save_model(tmp_path / "m.onnx", nodes, [], outputs, inits)
    r = invoke("compile", model, "--target", "native", "-o", tmp_path / "m.tar")
    assert (r.exit_code == 0) == ok, r.output
    if not ok:
        assert "would be [17] float32 (68 bytes), more than the limit of 64" in error_line(r.stderr)


def _counting_loop(tmp_path, trip: int, scan: bool, cond: bool = False):
    """Loop(M = trip, cond?, v = x): v + 1 per iteration; with `scan`, v is also a scan output."""
    extra = [helper.make_node("Identity", ["v_out"], ["v_scan"])] if scan else []
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])]
        + extra,
        "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("v_in", TensorProto.FLOAT, [1])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [1])]
        + ([vi("v_scan", TensorProto.FLOAT, [1])] if scan else []),
        [nh.from_array(np.ones(1, np.float32), "one")])
    outs = ["y"] + (["s"] if scan else [])
    model = save_model(tmp_path / "loop.onnx",
                       [helper.make_node("Loop", ["M", "c" if cond else "", "x"], outs, body=body)],
                       [vi("x", TensorProto.FLOAT, [1])] + ([vi("c", TensorProto.BOOL, [])] if cond else []),
                       [vi("y", TensorProto.FLOAT, [1])] + ([vi("s", TensorProto.FLOAT, [trip, 1])] if scan else []),
                       [nh.from_array(np.array(trip, np.int64), "M")])
    return model


def test_a_long_constant_loop_stays_a_run_time_loop(tmp_path):
    model = _counting_loop(tmp_path, 10 ** 6, scan=False)
    r = invoke("compile", model, "--target", "native", "-o", tmp_path / "m.tar")
    assert r.exit_code == 0, r.output
    np.savez(tmp_path / "in.npz", x=np.zeros(1, np.float32))
    r = invoke("run", tmp_path / "m.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    assert np.load(tmp_path / "out.npz")["y"].tolist() == [1e6]


def test_a_short_constant_loop_is_still_unrolled(tmp_path):
    model = _counting_loop(tmp_path, 5, scan=True)
    r = invoke("compile", model, "--target", "native", "-o", tmp_path / "m.tar", "--json")
    assert r.exit_code == 0, r.output
    np.savez(tmp_path / "in.npz", x=np.zeros(1, np.float32))
    r = invoke("run", tmp_path / "m.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert np.load(tmp_path / "out.npz")["s"].reshape(-1).tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("cond", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_loop_with_scan_outputs_beyond_the_unroll_limit_is_refused(tmp_path, cond):
    model = _counting_loop(tmp_path, 10 ** 9, scan=True, cond=cond)
    r = tvmc("compile", model, "--target", "native", "-o", tmp_path / "m.tar", timeout=120)
    line = error_line(r.stderr)
    assert r.returncode == 2 and "node 'y' (Loop)" in line and "more than the limit of 16384" in line


def test_a_scan_beyond_the_unroll_limit_is_refused(tmp_path):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"])], "body",
                             [vi("s_in", TensorProto.FLOAT, [1]), vi("x_t", TensorProto.FLOAT, [1])],
                             [vi("s_out", TensorProto.FLOAT, [1])])
    model = save_model(tmp_path / "scan.onnx",
                       [helper.make_node("Scan", ["s", "xs"], ["y"], body=body, num_scan_inputs=1)],
                       [vi("s", TensorProto.FLOAT, [1]), vi("xs", TensorProto.FLOAT, [100000, 1])],
                       [vi("y", TensorProto.FLOAT, [1])], opset=11)
    r = tvmc("compile", model, "--target", "native", "-o", tmp_path / "m.tar", timeout=120)
    assert r.returncode == 2 and "node 'y' (Scan)" in error_line(r.stderr)


# ---- 10. no internal error on any model ----------------------------------------------------------

def _vad_like(tmp_path):
    """A voice-activity-like model: If(sr == 16000) frames x [1, 16000] by 160 (then) or by 80
    (else) and runs an LSTM whose weights take 160-sample frames: the else branch is invalid for
    this input shape."""
    from onnx import numpy_helper

    hidden = 4

    def branch(name, frame):
        nodes = [helper.make_node("Reshape", ["x", f"shape_{name}"], [f"f_{name}"]),
                 helper.make_node("Transpose", [f"f_{name}"], [f"t_{name}"], perm=[1, 0, 2]),
                 helper.make_node("LSTM", [f"t_{name}", "W", "R"], [f"y_{name}"], hidden_size=hidden),
                 helper.make_node("ReduceMean", [f"y_{name}"], [f"o_{name}"], axes=[0, 1, 2, 3], keepdims=0)]
        return helper.make_graph(nodes, name, [], [vi(f"o_{name}", TensorProto.FLOAT, [])],
                                 [numpy_helper.from_array(np.array([1, -1, frame], np.int64), f"shape_{name}")])

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(16000, np.int64), "k16"),
             numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, 160)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R")]
    nodes = [helper.make_node("Equal", ["sr", "k16"], ["is16"]),
             helper.make_node("If", ["is16"], ["y"], then_branch=branch("then", 160), else_branch=branch("else", 80))]
    return save_model(tmp_path / "vad.onnx", nodes,
                      [vi("x", TensorProto.FLOAT, [1, 16000]), vi("sr", TensorProto.INT64, [])],
                      [vi("y", TensorProto.FLOAT, [])], inits)


def test_if_with_a_run_time_condition_and_an_invalid_branch_is_refused_clearly(tmp_path):
    r = invoke("compile", _vad_like(tmp_path), "--target", "native", "-o", tmp_path / "vad.tar")
    line = error_line(r.stderr)
    assert r.exit_code == 2 and "node 'y' (If)" in line and "else_branch cannot be" in line
    assert "node 'y_else' (LSTM)" in line and "--value-range" in line


def test_value_range_proves_the_invalid_branch_unreachable(tmp_path):
    model = _vad_like(tmp_path)
    r = invoke("compile", model, "--target", "native", "-o", tmp_path / "vad.tar", "--value-range", "sr=16000:16000")
    assert r.exit_code == 0, r.output
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal((1, 16000)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, sr=np.array(16000, np.int64))
    r = invoke("run", tmp_path / "vad.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    expected = ort.InferenceSession(str(model)).run(None, {"x": x, "sr": np.array(16000, np.int64)})[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], expected, rtol=1e-4, atol=1e-5)


def test_an_unforeseen_converter_failure_is_a_model_error_naming_the_node(tmp_path, relu_model, monkeypatch):
    from tvmc.frontend.onnx import registry

    def broken(ctx, node, inputs, attrs, opset):
        a, _ = [1, 2, 3]   # the recurrent converter's "too many values to unpack", say
        return a

    broken.versions = registry.CONVERTERS["Relu"].versions
    monkeypatch.setitem(registry.CONVERTERS, "Relu", broken)
    r = invoke("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar")
    line = error_line(r.stderr)
    assert r.exit_code == 2 and "node 'y' (Relu): cannot import it (ValueError: too many values to unpack" in line


def test_an_unforeseen_lowering_failure_is_a_schedule_error_naming_the_kernel(tmp_path, relu_model, monkeypatch):
    import tvmc.ops.fused

    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(tvmc.ops.fused, "lower_fused", broken)
    r = invoke("compile", relu_model, "--target", "native", "-o", tmp_path / "o.tar")
    line = error_line(r.stderr)
    assert r.exit_code == 5 and "lowering failed: IndexError: list index out of range" in line and "node 'y'" in line


@pytest.mark.parametrize("field", ["num_vector_registers", "l2_bytes"])
def test_a_5000_digit_integer_in_a_descriptor_is_a_target_error(tmp_path, relu_model, field):
    from importlib import resources

    text = resources.files("tvmc.targets").joinpath("x86-64.yaml").read_text()
    key = {"num_vector_registers": "num_vector_registers:", "l2_bytes": "l2_bytes:"}[field]
    lines = [(ln.split(":")[0] + ": " + "9" * 5000) if ln.strip().startswith(key) else ln for ln in text.splitlines()]
    (tmp_path / "t.yaml").write_text("\n".join(lines) + "\n")
    r = invoke("compile", relu_model, "--target", tmp_path / "t.yaml", "-o", tmp_path / "o.tar")
    assert r.exit_code == 3 and "t.yaml" in error_line(r.stderr)
    lines = [(ln.split(":")[0] + ": " + "9" * 4000) if ln.strip().startswith(key) else ln for ln in text.splitlines()]
    (tmp_path / "t.yaml").write_text("\n".join(lines) + "\n")
    r = invoke("compile", relu_model, "--target", tmp_path / "t.yaml", "-o", tmp_path / "o.tar")
    line = error_line(r.stderr)
    assert r.exit_code == 3 and "is greater than the maximum" in line and len(line) < 300


@pytest.fixture(scope="module")
def opencl_tar(tmp_path_factory):
    require("opencl")
    return _one_op_artifact(tmp_path_factory.mktemp("ocl"), "Relu", "opencl")


@pytest.mark.parametrize("damage", ["list", "grid string", "block of two", "missing kernel"])
def test_malformed_kernels_in_a_gpu_mod_json_are_artifact_errors(tmp_path, opencl_tar, damage):
    """A consistent forgery: mod.cl is text, so its first line (the module description, which
    holds the kernels' launches) is rewritten with mod.json, and the digests resealed."""
    from tvmc.codegen.description import SOURCE_PREFIX, encode

    members = tar_members(opencl_tar)
    graph = json.loads(members["mod.json"])
    line, source = members["mod.cl"].decode().split("\n", 1)
    description = json.loads(line[len(SOURCE_PREFIX):])
    name = next(iter(graph["kernels"]))
    for holder in (graph, description):
        if damage == "list":
            holder["kernels"] = [holder["kernels"][name]]
        elif damage == "grid string":
            holder["kernels"][name]["grid"] = "1x1x1"
        elif damage == "block of two":
            holder["kernels"][name]["block"] = [1, 1]
        else:
            holder["kernels"] = {}
    members["mod.json"] = json.dumps(graph).encode()
    members["mod.cl"] = (SOURCE_PREFIX + encode(description).decode() + "\n" + source).encode()
    forged = repack(members, tmp_path / "forged.tar")
    for command in ("inspect", "run"):
        r = invoke(command, forged)
        assert r.exit_code == 7 and "mod.json" in error_line(r.stderr), (command, r.output)


# ---- 7. the bound check is the same on every target ------------------------------------------------

@pytest.fixture(scope="module", params=["native", "wasm", "opencl", "arm"])
def float_range_tar(request, tmp_path_factory):
    """Range(0, n, 1) of a float graph input n, compiled with --value-range n=0:10 (bound 10)."""
    from onnx import numpy_helper

    if request.param != "native":
        require(request.param)
    folder = tmp_path_factory.mktemp(f"range_{request.param}")
    model = save_model(folder / "range.onnx", [helper.make_node("Range", ["s", "n", "d"], ["y"])],
                       [vi("n", TensorProto.FLOAT, [])], [vi("y", TensorProto.FLOAT, ["k"])],
                       [numpy_helper.from_array(np.array(0, np.float32), "s"),
                        numpy_helper.from_array(np.array(1, np.float32), "d")])
    r = invoke("compile", model, "--target", request.param, "-o", folder / "range.tar", "--value-range", "n=0:10")
    assert r.exit_code == 0, r.output
    return folder / "range.tar"


@pytest.mark.parametrize("n", [100.0, 1e30, math.inf, math.nan])
def test_a_float_range_beyond_its_bound_is_reported_on_every_target(tmp_path, float_range_tar, n):
    np.savez(tmp_path / "in.npz", n=np.array(n, np.float32))
    r = invoke("run", float_range_tar, "--inputs", tmp_path / "in.npz")
    assert r.exit_code == 7 and "outside its bound [10]" in error_line(r.stderr), r.output
    np.savez(tmp_path / "in.npz", n=np.array(5.0, np.float32))
    r = invoke("run", float_range_tar, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert r.exit_code == 0 and np.load(tmp_path / "out.npz")["y"].tolist() == [0, 1, 2, 3, 4]


# ---- 11. the OpenCL driver's own messages do not precede tvmc's error line ---------------------------

def test_an_opencl_build_failure_is_tvmc_s_one_line_only(tmp_path, opencl_tar):
    members = tar_members(opencl_tar)
    description, source = members["mod.cl"].decode().split("\n", 1)
    members["mod.cl"] = (description + "\n" + source.replace("{", "{ this is not OpenCL C;", 1)).encode()
    forged = repack(members, tmp_path / "forged.tar")
    r = tvmc("run", forged, "--device", "opencl", timeout=300)   # a subprocess: the driver writes to fd 2 itself
    assert r.returncode == 7 and "the OpenCL driver rejected the kernels" in error_line(r.stderr)
    assert "generated" not in r.stderr


def _slow_tool(tmp_path, name):
    """A program that writes a cc*.s file in its TMPDIR, starts a child and waits (its pids in a file)."""
    started, pids = tmp_path / f"{name}.started", tmp_path / f"{name}.pids"
    tool = tmp_path / name
    tool.write_text(f"#!/bin/sh\necho x > \"$TMPDIR/ccXyZ.s\"\nsleep 300 &\necho $$ $! >> {pids}\n"
                    f"touch {started}\nwait\n")
    tool.chmod(0o755)
    return tool, started, pids


def _signal_when_started(args, started, env, sig="SIGTERM"):
    import signal as signals

    proc = subprocess.Popen([sys.executable, "-m", "tvmc.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(started, proc)
        assert started.exists(), proc.communicate()[1]
        proc.send_signal(getattr(signals, sig))
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


def test_signal_during_build_runner_leaves_no_files_and_no_compiler(tmp_path, relu_tars):
    (tmp_path / "tmp").mkdir()
    cc, started, pids = _slow_tool(tmp_path, "slow-cc")
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    code, err = _signal_when_started(["build-runner", relu_tars["native"], "--cross-compiler", cc,
                                      "-o", tmp_path / "out" / "tvmc_run"], started, env)
    assert code == 143 and err.strip().splitlines() == ["error: terminated"]
    assert listing(tmp_path / "tmp") == [] and not (tmp_path / "out" / "tvmc_run").exists()
    assert not any(_alive(int(p)) for p in pids.read_text().split())


def test_signal_during_an_emulated_run_kills_the_emulator(tmp_path, relu_tars):
    """The emulator comes from a user-given descriptor (--target): a copy of arm's naming a slow program."""
    require("arm")
    from importlib import resources

    (tmp_path / "tmp").mkdir()
    emulator, started, pids = _slow_tool(tmp_path, "slow-qemu")
    text = resources.files("tvmc.targets").joinpath("arm.yaml").read_text()
    text = "\n".join(f'emulator: ["{emulator}"]' if ln.startswith("emulator:") else ln for ln in text.splitlines())
    (tmp_path / "my-arm.yaml").write_text(text + "\n")
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    code, err = _signal_when_started(["run", relu_tars["arm"], "--target", tmp_path / "my-arm.yaml"], started, env,
                                     "SIGINT")
    assert code == 130 and err.strip().splitlines() == ["error: interrupted"]
    assert listing(tmp_path / "tmp") == []
    assert not any(_alive(int(p)) for p in pids.read_text().split())


def test_signal_during_tune_stops_the_build_workers_and_their_compilers_quietly(tmp_path):
    from onnx import numpy_helper

    model = save_model(tmp_path / "mm.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [4, 16])], [vi("y", TensorProto.FLOAT, [4, 8])],
                       [numpy_helper.from_array(np.ones((16, 8), np.float32), "w")])
    (tmp_path / "tmp").mkdir()
    cc, started, pids = _slow_tool(tmp_path, "slow-cc")
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    code, err = _signal_when_started(["tune", model, "--target", "native", "--target-option", f"linker={cc}",
                                      "-o", tmp_path / "records.json", "--trials", "4", "--parallel", "2"],
                                     started, env)
    assert code == 143 and err.strip().splitlines()[-1] == "error: terminated" and "Traceback" not in err
    assert listing(tmp_path / "tmp") == []
    assert not any(_alive(int(p)) for p in pids.read_text().split())
