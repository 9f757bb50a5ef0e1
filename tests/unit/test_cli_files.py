"""Files go only where the user asked: -o and --dump-ir path rules, and no temporary file left
behind by a failure, SIGTERM or Ctrl-C (tvmc run as a user runs it, in a subprocess)."""

import os
import signal
import subprocess
import sys
import time

import onnx
import pytest
from onnx import TensorProto, helper


def tvmc(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "tvmc.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture
def model(tmp_path):
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def listing(folder) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def one_error_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_dumps_go_to_a_folder_named_after_the_output_and_replace_stale_ones(tmp_path, model):
    out = tmp_path / "out"
    res = tvmc("compile", model, "--target", "native", "-o", out / "a.tar", "--dump-ir", "graph,tir,ll")
    assert res.returncode == 0, res.stderr
    first = listing(out / "a.dumps")
    assert "mod.ll" in first and "mod.tir" in first and any(n.startswith("graph.") for n in first)
    (out / "a.dumps" / "stale.txt").write_text("old")
    res = tvmc("compile", model, "--target", "native", "-o", out / "a.tar", "--dump-ir", "ll")
    assert res.returncode == 0, res.stderr
    assert listing(out / "a.dumps") == ["mod.ll"]
    res = tvmc("compile", model, "--target", "native", "-o", out / "b.tar", "--dump-ir", "ll")
    assert listing(out) == ["a.dumps", "a.dumps/mod.ll", "a.tar", "b.dumps", "b.dumps/mod.ll", "b.tar"]


def test_planted_symlink_is_replaced_not_followed(tmp_path, model):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mod.ll").write_text("precious")
    os.symlink(victim, tmp_path / "m.dumps")
    res = tvmc("compile", model, "--target", "native", "-o", tmp_path / "m.tar", "--dump-ir", "ll")
    assert res.returncode == 0, res.stderr
    assert (victim / "mod.ll").read_text() == "precious" and listing(victim) == ["mod.ll"]
    assert not os.path.islink(tmp_path / "m.dumps") and listing(tmp_path / "m.dumps") == ["mod.ll"]


@pytest.mark.parametrize("verbose", [False, True])
def test_failed_compile_leaves_no_files(tmp_path, model, verbose):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out"
    res = tvmc("compile", model, "--target", "native", "--target-option", "linker=false", "-o", out / "m.tar",
               "--dump-ir", "graph,tir,ll", *(["--verbose"] if verbose else []), env=env)
    assert res.returncode == 6
    # the linker driver compiles the C API first
    assert res.stderr.strip().splitlines()[-1].startswith("error: C compiler failed")
    assert listing(tmp_path / "tmp") == []
    if verbose:   # the dumps are kept for the bug report
        assert listing(out) == sorted(["m.dumps"] + [f"m.dumps/{n}" for n in os.listdir(out / "m.dumps")])
        assert "mod.ll" in os.listdir(out / "m.dumps")
    else:
        assert listing(out) == []


@pytest.mark.parametrize("where,code", [("model", 7), ("slash", 7), ("device", 7), ("folder", 64)])
def test_output_path_rules(tmp_path, model, where, code):
    (tmp_path / "folder").mkdir()
    target = {"model": model, "slash": str(tmp_path / "newdir") + "/", "device": "/dev/null",
              "folder": tmp_path / "folder"}[where]
    before = model.read_bytes()
    res = tvmc("compile", model, "--target", "native", "-o", target)
    assert res.returncode == code and one_error_line(res).startswith("error: ")
    assert model.read_bytes() == before and os.path.exists("/dev/null") and not (tmp_path / "newdir").exists()
    assert listing(tmp_path) == ["folder", "model.onnx"]


def test_model_that_is_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "m.onnx")
    res = tvmc("compile", tmp_path / "m.onnx", "--target", "native", "-o", tmp_path / "m.tar")
    assert res.returncode == 2 and "not a regular file (a FIFO)" in one_error_line(res)


@pytest.mark.parametrize("sig,code,line", [(signal.SIGTERM, 143, "error: terminated"),
                                           (signal.SIGINT, 130, "error: interrupted")])
def test_signal_during_linking_leaves_no_temporary_files(tmp_path, model, sig, code, line):
    """The linker is a script that says it started, then sleeps: the signal arrives while tvmc
    waits for it, with the link folder and the dump folder in place."""
    (tmp_path / "tmp").mkdir()
    started = tmp_path / "started"
    linker = tmp_path / "slow-ld"
    linker.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 300\n")
    linker.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.Popen([sys.executable, "-m", "tvmc.cli", "compile", str(model), "--target", "native",
                             "--target-option", f"linker={linker}", "-o", str(out / "m.tar"), "--dump-ir", "ll"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for _ in range(6000):   # the compile reaches the linker; no assertion depends on how fast
            if started.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), proc.communicate()[1]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code and err.strip().splitlines() == [line]
    assert listing(tmp_path / "tmp") == [] and listing(out) == []
