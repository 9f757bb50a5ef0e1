"""The shipped C runner (tvmc/runtime/tvmc_run.c) and running artifacts of another architecture
under emulation: `tvmc build-runner`, the runner's .npy inputs and outputs, timing loop and
errors (built for this host, run natively), and `tvmc run` of an ARM artifact under qemu-user
(output, timing, the line saying emulated times are not device times, a missing emulator)."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner
from test_c_api import RTOL, ATOL, two_in_two_out_model

from tests.targets import require
from tvmc.cli import cli
from tvmc.driver import compile_model
from tvmc.package import save_artifact
from tvmc.target import resolve_target


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def _inputs():
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
            "y": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}


def _reference(inputs):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(two_in_two_out_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(["a", "b"], sess.run(["a", "b"], inputs)))


def _run(folder, *args):
    return subprocess.run([str(folder / "tvmc_run"), *map(str, args)], cwd=folder, capture_output=True, text=True,
                          timeout=120)


def test_runner_reads_and_writes_npy_and_times_runs(native_runner, tmp_path):
    inputs = _inputs()
    for name, arr in inputs.items():
        np.save(tmp_path / f"{name}.npy", arr)
    res = _run(native_runner, "-p", "mod.params", "-i", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
               "-o", f"b={tmp_path / 'b.npy'}", "-O", tmp_path, "-r", "3", "-n", "2")
    assert res.returncode == 0, res.stderr
    ref = _reference(inputs)
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), ref["b"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.load(tmp_path / "output_0.npy"), ref["a"], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(np.load(tmp_path / "output_1.npy"), np.load(tmp_path / "b.npy"))
    assert "input x float32 [1,3,8,8] <- " in res.stdout and "output b float32 [1,5] -> " in res.stdout
    samples = next(ln for ln in res.stdout.splitlines() if ln.startswith("measurements_ms:")).split()[1:]
    assert len(samples) == 3 and all(float(s) >= 0 for s in samples)
    assert "time per run (ms; 3 measurements x 2 runs): mean " in res.stdout


@pytest.mark.parametrize("case,code,message", [
    ("float64", 8, "input 'x': expected float32 [1,3,8,8] (768 bytes), got float64 of 4 dimensions"),
    # another size, same rank and dtype: the C API says the artifact is fixed-shape (issue 29)
    ("other size", 8, "got float32 of 4 dimensions (1536 bytes); the artifact is fixed-shape: compile it for a "
                      "range of sizes to run others (tvmc compile --input-shapes NAME:[LO..HI,...] or --dim-range "
                      "VAR=LO..HI)"),
    ("not npy", 65, "not a .npy file"),
    ("fortran", 65, "not in C order"),
    ("short", 65, "does not hold exactly the 768 data bytes"),
    ("missing", 66, "cannot open"),
    ("unknown name", 1, "the model has no input named 'z'"),
    ("usage", 64, "-r takes a count, not 'many'"),
    ("params", 2, "params: "),
])
def test_runner_errors_are_one_line_with_a_code(native_runner, tmp_path, case, code, message):
    x = _inputs()["x"]
    path = tmp_path / "x.npy"
    args = ["-p", "mod.params", "-i", f"x={path}"]
    if case == "float64":
        np.save(path, x.astype(np.float64))
    elif case == "other size":
        np.save(path, np.concatenate([x, x]))
    elif case == "not npy":
        path.write_bytes(b"\x00" * 900)
    elif case == "fortran":
        np.save(path, np.asfortranarray(np.zeros((1, 3, 8, 8), np.float32).transpose(0, 1, 3, 2)))
    elif case == "short":
        np.save(path, x)
        path.write_bytes(path.read_bytes()[:-4])
    elif case == "unknown name":
        np.save(path, x)
        args = ["-p", "mod.params", "-i", f"z={path}"]
    elif case == "usage":
        args += ["-r", "many"]
    elif case == "params":
        args = ["-p", path]
        path.write_bytes(b"\x01" * 64)
    res = _run(native_runner, *args)
    assert res.returncode == code, res.stderr
    assert res.stderr.startswith("error: ") and message in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_build_runner_refuses_a_library_that_is_not_a_shared_object(tmp_path):
    """OpenCL artifacts keep their kernels in mod.cl: the C runner does not apply."""
    require("opencl")
    tar = save_artifact(compile_model(two_in_two_out_model(), resolve_target("opencl")), tmp_path / "cl.tar")
    r = invoke("build-runner", tar, "-o", tmp_path / "tvmc_run")
    assert r.exit_code == 7 and "mod.cl" in r.stderr and not (tmp_path / "tvmc_run").exists()


def test_an_aarch64_host_runs_arm_artifacts_natively(monkeypatch):
    """create_executor takes the ctypes runtime when the artifact's architecture is the host's."""
    import tvmc.backends.llvm as llvm_backend
    import tvmc.runtime as runtime
    import tvmc.runtime.cpu as cpu

    made = []
    monkeypatch.setattr(llvm_backend, "host_arch", lambda: "aarch64")
    monkeypatch.setattr(cpu, "GraphExecutor", lambda art: made.append(art) or "ctypes")
    art = type("A", (), {"metadata": {"target": resolve_target("arm").to_dict()}, "path": "arm.tar"})()
    monkeypatch.setattr(runtime, "Artifact", type(art))
    assert runtime.create_executor(art) == "ctypes" and made == [art]


# --- ARM artifacts under qemu-user ---------------------------------------------------------------

@pytest.fixture(scope="module")
def arm_artifact(tmp_path_factory):
    require("arm")
    tmp = tmp_path_factory.mktemp("arm")
    return save_artifact(compile_model(two_in_two_out_model(), resolve_target("arm")), tmp / "arm.tar")


def test_tvmc_run_runs_an_arm_artifact_under_emulation(arm_artifact, tmp_path):
    inputs = _inputs()
    np.savez(tmp_path / "in.npz", **inputs)
    r = invoke("run", arm_artifact, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz",
               "--repeat", "2", "--number", "2", "--print-top", "2", "--threads", "2")
    assert r.exit_code == 0, r.output
    assert "device: aarch64 under emulation (qemu-aarch64); times measured there are not device times" in r.output
    assert "execution time" in r.output and "2 repeats x 2 runs" in r.output and "top-2 of b" in r.output
    ref = _reference(inputs)
    with np.load(tmp_path / "out.npz") as out:
        for name in ("a", "b"):
            np.testing.assert_allclose(out[name], ref[name], rtol=RTOL, atol=ATOL)


def test_fill_mode_and_wrong_inputs_under_emulation(arm_artifact, tmp_path):
    r = invoke("run", arm_artifact, "--fill-mode", "ones", "--outputs", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    ones = {k: np.ones_like(v) for k, v in _inputs().items()}
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["b"], _reference(ones)["b"], rtol=RTOL, atol=ATOL)
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 3, 8, 8), np.float64))
    r = invoke("run", arm_artifact, "--inputs", tmp_path / "bad.npz")
    assert r.exit_code == 8 and "input 'x': expected shape [1,3,8,8] float32, got [1,3,8,8] float64" in r.stderr


def test_profile_is_refused_under_emulation(arm_artifact):
    r = invoke("run", arm_artifact, "--profile")
    assert r.exit_code == 7 and "per-kernel profiling is not available under emulation" in r.stderr


def test_missing_emulator_names_it_and_its_package(arm_artifact, tmp_path):
    (tmp_path / "bin").mkdir()
    r = invoke("run", arm_artifact, env={"PATH": str(tmp_path / "bin")})
    assert r.exit_code == 7
    line = r.stderr.strip()
    assert "\n" not in line and "emulator 'qemu-aarch64' not found" in line and "qemu-user" in line, line


def test_scalar_inputs_cross_as_zero_dimensional_npy(tmp_path):
    """A 0-d input (ONNX Clip's min, Pow's exponent) stays 0-d in the .npy the runner reads."""
    from onnx import TensorProto, helper

    require("arm")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "scale",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    from tvmc.runtime import create_executor

    ex = create_executor(save_artifact(compile_model(model, resolve_target("arm")), tmp_path / "s.tar"))
    ex.set_input("x", np.arange(5, dtype=np.float32))
    ex.set_input("s", np.array(-2.0, np.float32))
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), np.arange(5, dtype=np.float32) * -2.0)


def test_tuning_for_another_architecture_is_refused(tmp_path):
    """Measurements under emulation would time QEMU: tune on the device, compile anywhere."""
    import onnx

    onnx.save(two_in_two_out_model(), str(tmp_path / "m.onnx"))
    r = invoke("tune", tmp_path / "m.onnx", "--target", "arm", "-o", tmp_path / "rec.json", "--trials", "2")
    assert r.exit_code == 9 and "tune on an aarch64 machine" in r.stderr and not (tmp_path / "rec.json").exists()


def test_min_repeat_ms_grows_number_until_a_measurement_lasts_that_long(native_runner):
    """-m MS: the C runner's measurements last at least MS each (NUMBER grows, as tvmc tune's
    runner does it: TVM's min_repeat_ms), or NUMBER reached its cap of 2^20 runs."""
    res = _run(native_runner, "-p", "mod.params", "-r", "2", "-n", "1", "-m", "20")
    assert res.returncode == 0, res.stderr
    number = int(re.search(r"2 measurements x (\d+) runs", res.stdout).group(1))
    samples = [float(s) for s in next(ln for ln in res.stdout.splitlines()
                                      if ln.startswith("measurements_ms:")).split()[1:]]
    assert len(samples) == 2
    # each sample is ms per run printed to 1e-6 ms: a round of `number` runs lasted >= 20 ms
    assert all(s * number >= 20 - 1e-6 * number for s in samples) or number == 1 << 20
    bad = _run(native_runner, "-p", "mod.params", "-r", "2", "-m", "soon")
    assert bad.returncode == 64 and "-m takes milliseconds" in bad.stderr


@pytest.fixture(scope="module")
def dense_task():
    """(task, arm target): the dense task of a small MLP, for aarch64 (16 configs)."""
    require("arm")
    import tempfile

    import onnx

    from tests.e2e.builders import mlp
    from tvmc.api import list_tasks

    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(mlp(seed=3, batch=4, sizes=(32, 32, 8, 4)), f"{tmp}/m.onnx")
        tl = list_tasks(f"{tmp}/m.onnx", "arm")
    return tl.tasks[0], tl.target


def test_an_emulated_device_measures_arm_candidates_by_the_runners_protocol(dense_task, tmp_path):
    """EmulatedRunner (a cluster's `tvmc device-worker --emulate` node): an arm candidate built in
    the emulated form runs under qemu-aarch64 in the C runner, with the runner's seeded inputs, its
    output is the x86 build's (the same kernel and config, through the local Runner), a wrong
    reference is a WRONG_ANSWER, and a run past its limit a RUN_TIMEOUT."""
    from tvmc.autotune.measure import (EmulatedRunner, MeasureError, MeasureOptions, Runner, build_candidate,
                                       candidate_request)

    task, arm = dense_task
    x86 = resolve_target("native")
    space = task.config_space(arm)
    options = MeasureOptions(number=2, repeat=3, min_repeat_ms=1.0)
    emulated, native = EmulatedRunner(arm), Runner()
    try:
        outputs = []
        for k, cfg in enumerate([space.fallback_config(), space.get(len(space) - 1)]):
            path = str(tmp_path / f"arm{k}.so")
            assert build_candidate(task, arm, dict(cfg), path, emulated=True)[0] == MeasureError.NO_ERROR
            req = candidate_request(task, path, options, "llvm", want_output=True)
            err, msg, costs, out = emulated.run(req, outputs[0] if outputs else None, 60.0)
            assert err == MeasureError.NO_ERROR, msg
            assert len(costs) == 3 and all(c > 0 for c in costs)
            outputs.append(out)
        np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)
        host = str(tmp_path / "x86.so")
        assert build_candidate(task, x86, dict(space.fallback_config()), host)[0] == MeasureError.NO_ERROR
        err, msg, _, host_out = native.run(candidate_request(task, host, options, "llvm", want_output=True), None, 60)
        assert err == MeasureError.NO_ERROR, msg
        np.testing.assert_allclose(outputs[0], host_out, rtol=1e-4, atol=1e-5 * float(np.abs(host_out).max()))
        req = candidate_request(task, path, options, "llvm", want_output=False)
        err, msg, costs, _ = emulated.run(req, outputs[0] + 1.0, 60.0)
        assert err == MeasureError.WRONG_ANSWER and "against the fallback config's output" in msg and costs == []
        err, msg, _, _ = emulated.run(dict(req, min_repeat_ms=60_000.0), None, 0.5)
        assert err == MeasureError.RUN_TIMEOUT and "under emulation" in msg
    finally:
        emulated.stop()
        native.stop()


def test_a_device_worker_measures_under_emulation_only_when_asked():
    """tvmc device-worker checks the host before it joins: an arm target on this x86-64 host needs
    --emulate (its times are QEMU's), and --emulate on the host's own architecture is refused."""
    require("arm")
    from tvmc.cluster import check_device_host
    from tvmc.errors import ClusterError
    from tvmc.target import host_arch

    if host_arch() == "aarch64":
        pytest.skip("this host runs arm code natively")
    arm = resolve_target("arm")
    with pytest.raises(ClusterError, match="only under emulation .*--emulate makes it a device"):
        check_device_host(arm)
    assert check_device_host(arm, emulate=True) is True
    with pytest.raises(ClusterError, match="--emulate: this host runs target x86 natively"):
        check_device_host(resolve_target("x86"), emulate=True)
    r = invoke("device-worker", "--address", "127.0.0.1:1", "--key", "armq", "--target", "arm")
    assert r.exit_code == 10 and "--emulate" in r.stderr and r.stderr.count("\n") == 1, r.stderr
