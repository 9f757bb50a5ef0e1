"""The CLI as a user meets it: `tvmc compile` then `tvmc run` in subprocesses, against onnxruntime."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests.e2e.builders import mlp
from tests.e2e.models import onnxruntime_outputs

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


def tvmc(*args, check=True):
    res = subprocess.run([sys.executable, "-m", "tvmc.cli", *map(str, args)], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"tvmc {' '.join(map(str, args))} failed ({res.returncode}): {res.stderr}")
    return res


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    model = mlp(seed=3, batch=2, sizes=(32, 48, 16, 8))
    path = d / "mlp.onnx"
    onnx.save(model, path)
    tvmc("compile", path, "--target", "x86", "-o", d / "mlp.tar")
    return d, model


def test_compile_run_matches_onnxruntime(compiled):
    d, model = compiled
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    np.savez(d / "in.npz", x=x)
    res = tvmc("run", d / "mlp.tar", "--inputs", d / "in.npz", "--outputs", d / "out.npz",
               "--print-time", "--repeat", "3", "--number", "2")
    assert "median" in res.stdout
    got = np.load(d / "out.npz")["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x})["y"], rtol=1e-3, atol=1e-4)


def test_same_inputs_give_byte_identical_tar(compiled, tmp_path):
    d, _ = compiled
    tvmc("compile", d / "mlp.onnx", "--target", "x86", "-o", tmp_path / "again.tar")
    assert (tmp_path / "again.tar").read_bytes() == (d / "mlp.tar").read_bytes()


def test_wrong_input_shape_is_one_line_error(compiled):
    d, _ = compiled
    np.savez(d / "bad.npz", x=np.zeros((2, 31), np.float32))
    res = tvmc("run", d / "mlp.tar", "--inputs", d / "bad.npz", "--outputs", d / "never.npz", check=False)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "'x'" in lines[0] and "[2,32]" in lines[0] and "[2,31]" in lines[0], res.stderr
    assert not (d / "never.npz").exists()


def test_unsupported_ops_listed_before_compiling(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Einsum", ["a", "a"], ["b"], name="e1", equation="ij,ij->ij"),
             helper.make_node("Hardmax", ["b"], ["c"], name="h1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 2])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    res = tvmc("compile", path, "--target", "x86", "-o", tmp_path / "bad.tar", check=False)
    assert res.returncode != 0
    assert "Einsum" in res.stderr and "Hardmax" in res.stderr and "e1" in res.stderr and "h1" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "bad.tar").exists()
