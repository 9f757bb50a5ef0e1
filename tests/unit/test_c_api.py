"""The C API compiled into mod.so (tvmc_kernels.h): a C program built against the header runs a
model and matches onnxruntime; damaged params and wrong inputs are refused with a code and a
message before any kernel runs."""

import os
import shutil
import subprocess
import tarfile

import numpy as np
import onnx
import pytest
import safetensors.numpy
from onnx import TensorProto, helper, numpy_helper

from tvmc.driver import compile_model
from tvmc.package import save_artifact
from tvmc.runtime.cpu import GraphExecutor
from tvmc.target import resolve_target

RUNNER_C = os.path.join(os.path.dirname(__file__), "c", "run_model.c")
RTOL, ATOL = 1e-4, 1e-5   # float32, kernels sum in another order than onnxruntime


def two_in_two_out_model() -> onnx.ModelProto:
    """x [1,3,8,8], y [1,4,8,8] -> a = Relu(Conv3x3(x) + y) [1,4,8,8], b = Sigmoid(Flatten(a) @ W2) [1,5]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 5)).astype(np.float32) * 0.1, "W2")
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "y"], ["s"]),
        helper.make_node("Relu", ["s"], ["a"]),
        helper.make_node("Flatten", ["a"], ["f"]),
        helper.make_node("MatMul", ["f", "W2"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["b"]),
    ]
    graph = helper.make_graph(nodes, "two", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4, 8, 8]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 5])], [w, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(folder with mod.so, mod.params, tvmc_kernels.h and the runner, model, inputs)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to build the C runner")
    tmp = tmp_path_factory.mktemp("capi")
    model = two_in_two_out_model()
    tar = save_artifact(compile_model(model, resolve_target("native")), tmp / "mod.tar")
    with tarfile.open(tar) as t:
        for name in ("mod.so", "mod.params", "tvmc_kernels.h"):
            (tmp / name).write_bytes(t.extractfile(name).read())
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(tmp), "-o", str(tmp / "run_model"),
                    RUNNER_C, str(tmp / "mod.so"), f"-Wl,-rpath,{tmp}"], check=True, capture_output=True)
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
              "y": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    return tmp, model, inputs


def run_c(folder, params, inputs: dict, tmp_path):
    """Run the C runner; returns (CompletedProcess, [output arrays as float32 bytes])."""
    args = [str(folder / "run_model"), str(params)]
    for name, arr in inputs.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(np.ascontiguousarray(arr).tobytes())
        args.append(str(path))
    outs = [tmp_path / "out0.bin", tmp_path / "out1.bin"]
    res = subprocess.run(args + [str(o) for o in outs], capture_output=True, text=True, timeout=300)
    return res, [np.frombuffer(o.read_bytes(), np.float32) if o.exists() else None for o in outs]


def test_c_program_matches_onnxruntime(built, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    folder, model, inputs = built
    res, (a, b) = run_c(folder, folder / "mod.params", inputs, tmp_path)
    assert res.returncode == 0, res.stderr
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want_a, want_b = sess.run(["a", "b"], inputs)
    np.testing.assert_allclose(a.reshape(want_a.shape), want_a, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(b.reshape(want_b.shape), want_b, rtol=RTOL, atol=ATOL)


def test_c_api_and_python_runtime_agree_exactly(built, tmp_path):
    folder, _, inputs = built
    res, outs = run_c(folder, folder / "mod.params", inputs, tmp_path)
    assert res.returncode == 0, res.stderr
    ex = GraphExecutor(folder / "mod.tar")
    for name, arr in inputs.items():
        ex.set_input(name, arr)
    ex.run()
    for i, got in enumerate(outs):
        np.testing.assert_array_equal(got, ex.get_output(i).reshape(-1))


def _params_with(folder, tmp_path, **changes):
    params = safetensors.numpy.load((folder / "mod.params").read_bytes())
    params.update(changes)
    path = tmp_path / "bad.params"
    path.write_bytes(safetensors.numpy.save(params))
    return path


@pytest.mark.parametrize("case,code,message", [
    ("shrunk", 2, "params: param 'W' has another shape than float32 [4,3,3,3] (432 bytes)"),
    ("dtype", 2, "params: param 'W' has another dtype than float32"),
    ("missing", 2, "params: param 'W' is missing"),
    ("random", 2, "params: header length exceeds the blob"),
    ("truncated", 2, "params: "),
    ("no file", 6, ": cannot open"),
])
def test_bad_params_are_refused(built, tmp_path, case, code, message):
    folder, _, inputs = built
    params = folder / "mod.params"
    if case == "shrunk":
        params = _params_with(folder, tmp_path, W=np.zeros((2, 3, 3, 3), np.float32))
    elif case == "dtype":
        params = _params_with(folder, tmp_path, W=np.zeros((4, 3, 3, 3), np.float64))
    elif case == "missing":
        kept = {k: v for k, v in safetensors.numpy.load(params.read_bytes()).items() if k != "W"}
        params = tmp_path / "bad.params"
        params.write_bytes(safetensors.numpy.save(kept))
    elif case == "random":
        params = tmp_path / "bad.params"
        params.write_bytes(np.random.default_rng(0).bytes(4096))
    elif case == "truncated":
        data = (folder / "mod.params").read_bytes()
        params = tmp_path / "bad.params"
        params.write_bytes(data[:len(data) // 2])
    else:
        params = tmp_path / "nope.params"
    res, outs = run_c(folder, params, inputs, tmp_path)
    assert res.returncode == code and message in res.stderr, res.stderr
    assert outs == [None, None]


def test_wrong_input_is_refused(built, tmp_path):
    folder, _, inputs = built
    res, outs = run_c(folder, folder / "mod.params", {"x": inputs["x"][:, :2], "y": inputs["y"]}, tmp_path)
    assert res.returncode == 3 and outs == [None, None]
    assert "input 'x': expected float32 [1,3,8,8] (768 bytes), got float32 of 4 dimensions (512 bytes)" in res.stderr
