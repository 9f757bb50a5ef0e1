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
    tvmc("compile", path, "--target", "native", "-o", d / "mlp.tar")
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
    tvmc("compile", d / "mlp.onnx", "--target", "native", "-o", tmp_path / "again.tar")
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

    nodes = [helper.make_node("RandomNormalLike", ["a"], ["b"], name="e1"),
             helper.make_node("Multinomial", ["a"], ["c"], name="h1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2]),
                           helper.make_tensor_value_info("c", TensorProto.INT32, [2, 1])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    res = tvmc("compile", path, "--target", "native", "-o", tmp_path / "bad.tar", check=False)
    assert res.returncode != 0
    assert ("RandomNormalLike" in res.stderr and "Multinomial" in res.stderr
            and "e1" in res.stderr and "h1" in res.stderr)
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "bad.tar").exists()


def _symbolic_model():
    """Two inputs with symbolic dims: image 'x' [batch,3,h,w] (conv, global pool) and 'tokens'
    [batch, seq] (a max over seq); output [batch, 4 + 1]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("ReduceMax", ["tokens"], ["s"], axes=[1], keepdims=1),
             helper.make_node("Concat", ["f", "s"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "sym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"]),
                                         helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_input_shapes_fix_symbolic_dims_end_to_end(tmp_path):
    model = _symbolic_model()
    onnx.save(model, tmp_path / "sym.onnx")
    tvmc("compile", tmp_path / "sym.onnx", "--target", "native", "-o", tmp_path / "sym.tar",
         "--input-shapes", "x:[2,3,9,7] tokens:[2,128]")
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 3, 9, 7)).astype(np.float32),
             "tokens": rng.standard_normal((2, 128)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    tvmc("run", tmp_path / "sym.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    got = np.load(tmp_path / "out.npz")["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)["y"], rtol=1e-3, atol=1e-4)


def test_unresolved_symbolic_dims_are_one_line_naming_them_all(tmp_path):
    onnx.save(_symbolic_model(), tmp_path / "sym.onnx")
    res = tvmc("compile", tmp_path / "sym.onnx", "--target", "native", "-o", tmp_path / "sym.tar", check=False)
    assert res.returncode != 0 and not (tmp_path / "sym.tar").exists()
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    for part in ("'batch' (x[0], tokens[0])", "'h' (x[2])", "'w' (x[3])", "'seq' (tokens[1])",
                 "--dim-range batch=1..256 --dim-range h=1..256 --dim-range w=1..256 --dim-range seq=1..256",
                 '--input-shapes "x:[64,3,64,64] tokens:[64,64]"'):
        assert part in line, line


@pytest.mark.slow  # three compiles; the error line above runs in make test
def test_the_suggested_size_and_range_of_unresolved_dims_compile(tmp_path):
    """The size and the range the one-line error suggests compile; the range (x86) runs other sizes."""
    onnx.save(_symbolic_model(), tmp_path / "sym.onnx")
    res = tvmc("compile", tmp_path / "sym.onnx", "--target", "native", "-o", tmp_path / "sym.tar",
               "--input-shapes", "x:[64,3,64,64] tokens:[64,64]")
    assert (tmp_path / "sym.tar").exists()
    res = tvmc("compile", tmp_path / "sym.onnx", "--target", "native", "-o", tmp_path / "range.tar",
               *"--dim-range batch=1..256 --dim-range h=1..256 --dim-range w=1..256 --dim-range seq=1..256".split(),
               )
    rng = np.random.default_rng(6)
    for batch, h, w, seq in ((1, 5, 9, 1), (3, 17, 8, 200)):
        feeds = {"x": rng.standard_normal((batch, 3, h, w)).astype(np.float32),
                 "tokens": rng.standard_normal((batch, seq)).astype(np.float32)}
        np.savez(tmp_path / "in.npz", **feeds)
        tvmc("run", tmp_path / "range.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
        want = onnxruntime_outputs(_symbolic_model(), feeds)["y"]
        np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-3, atol=1e-4)
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3, 300, 8), np.float32), tokens=np.zeros((1, 4), np.float32))
    res = tvmc("run", tmp_path / "range.tar", "--inputs", tmp_path / "in.npz", check=False)
    assert res.returncode == 8 and "input 'x': dimension 2 is 300, outside the range of h in 1..256" in res.stderr
    # fixing only some of them names the rest and keeps the given shapes in the suggestion
    res = tvmc("compile", tmp_path / "sym.onnx", "--target", "native", "-o", tmp_path / "sym.tar",
               "--input-shapes", "x:[1,3,8,8]", check=False)
    assert res.returncode != 0 and "'seq' (tokens[1])" in res.stderr and "'batch'" not in res.stderr
    assert '--input-shapes "x:[1,3,8,8] tokens:[1,64]"' in res.stderr
    assert '--dim-range seq=1..256 --input-shapes "x:[1,3,8,8]"' in res.stderr
