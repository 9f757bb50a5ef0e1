"""Shared by the GPU targets' CLI tests (test_opencl_cli.py, test_cuda_cli.py): an MLP compiled by
`tvmc compile`, run by `tvmc run --device` against onnxruntime, profiled kernel by kernel with the
device's events (by the executor, and by `tvmc run --profile` as a table and as JSON)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.e2e.builders import mlp
from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc


def compile_mlp(folder, target: str) -> tuple:
    """`tvmc compile` of a small MLP (input x [2, 32], output y) for `target` into
    folder/mlp.tar (the model beside it as mlp.onnx); returns (folder, ModelProto)."""
    model = mlp(seed=3, batch=2, sizes=(32, 48, 16, 8))
    onnx.save(model, folder / "mlp.onnx")
    tvmc("compile", folder / "mlp.onnx", "--target", target, "-o", folder / "mlp.tar")
    return folder, model


def check_run_matches_onnxruntime(folder, model, device: str) -> None:
    """`tvmc run folder/mlp.tar --device DEVICE` prints the device and matches onnxruntime."""
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    np.savez(folder / "in.npz", x=x)
    res = tvmc("run", folder / "mlp.tar", "--device", device, "--inputs", folder / "in.npz", "--outputs",
               folder / "out.npz", "--print-time", "--repeat", "2")
    assert res.stdout.startswith("device: ")
    np.testing.assert_allclose(np.load(folder / "out.npz")["y"], onnxruntime_outputs(model, {"x": x})["y"],
                               rtol=1e-4, atol=1e-5)


def _kernel_calls(tar) -> dict:
    """{func_name: its nodes in mod.json of `tar`} (loop bodies' nodes included): the calls per run
    of a graph without run-time loops."""
    from tvmc.package import load_artifact

    calls: dict = {}
    for node in load_artifact(tar).graph_json["nodes"]:
        if node["op"] == "tvm_op" and node["attrs"]["func_name"] != "__nop":
            calls[node["attrs"]["func_name"]] = calls.get(node["attrs"]["func_name"], 0) + 1
    return calls


def check_profile(tar, device: str, make_executor=None) -> None:
    """The profile of the executor `make_executor(tar, device)` (default: create_executor) times
    every kernel launch on the device, in the CPU executors' row format, and leaves the outputs
    of a plain run."""
    from tvmc.errors import InputError
    from tvmc.runtime import create_executor

    ex = (make_executor or create_executor)(tar, device)
    try:
        ex.set_input("x", np.random.default_rng(2).standard_normal((2, 32)).astype(np.float32))
        ex.run()
        plain = ex.get_output(0)
        rows = ex.profile(3)
        assert [r["name"] for r in rows] == list(_kernel_calls(tar)) and len(rows) == ex.num_kernels
        assert all(set(r) == {"name", "calls", "total_ms"} and r["calls"] == 1 and r["total_ms"] >= 0 for r in rows)
        assert sum(r["total_ms"] for r in rows) > 0
        np.testing.assert_array_equal(ex.get_output(0), plain)
        with pytest.raises(InputError, match="at least 1"):
            ex.profile(0)
    finally:
        ex.close()


def check_cli_profile(tar, device: str, clock: str, *options) -> None:
    """`tvmc run TAR --device DEVICE --profile` prints a row per kernel of mod.json, timed by
    `clock` (words of the table's header), and `--profile --json` a row per kernel: every kernel
    once, its calls per run, shares summing to 1. `options`: more `tvmc run` options."""
    calls = _kernel_calls(tar)
    out = tvmc("run", tar, "--device", device, "--profile", "--repeat", "2", *options).stdout
    assert out.startswith("device: ")
    header = next(line for line in out.splitlines() if line.startswith("profile ("))
    assert header.startswith("profile (kernel by kernel, 2 runs;") and clock in header, header
    lines = out.splitlines()[out.splitlines().index(header) + 2:]  # after the column titles
    end = next(k for k, line in enumerate(lines) if line.strip().startswith("all kernels"))
    rows = {line.split()[0]: line.split() for line in lines[:end]}
    assert set(rows) == set(calls) and len(rows) == end, out
    assert all(int(rows[name][1]) == n for name, n in calls.items())
    assert int(lines[end].split()[2]) == sum(calls.values())

    res = tvmc("run", tar, "--device", device, "--profile", "--json", *options)
    doc = json.loads(res.stdout)
    assert res.stderr.startswith("device: ") and doc["device"]["name"] in res.stderr
    kernels = doc["profile"]["kernels"]
    assert doc["profile"]["runs"] == 1 and doc["timing"] is None
    assert sorted(k["name"] for k in kernels) == sorted(calls)
    assert all(k["calls"] == calls[k["name"]] and k["total_ms"] >= 0 and k["mean_ms"] >= 0 for k in kernels)
    assert abs(sum(k["share"] for k in kernels) - 1.0) < 1e-9
    assert [k["total_ms"] for k in kernels] == sorted((k["total_ms"] for k in kernels), reverse=True)


def loop_iterations(inputs: dict) -> int:
    """How many times the body of test_run_time_loop.running_sum_model runs on `inputs` (numpy)."""
    s, n = inputs["s0"].astype(np.float64), 0
    go = bool(inputs["cond"])
    while n < int(inputs["M"]) and go:
        s = s + inputs["x"] * n
        go = bool(s.sum() < inputs["limit"])
        n += 1
    return n


def check_profile_of_a_run_time_loop(folder, target: str, device: str, *options) -> None:
    """`tvmc run --profile --json` of an ONNX Loop whose trip count is an input, compiled for
    `target` and run on `device`: the body's kernels, launched from the host once per iteration,
    are each timed once per iteration, and the outputs still match onnxruntime."""
    from tests.e2e.test_run_time_loop import feeds, running_sum_model

    model = running_sum_model()
    onnx.save(model, folder / "loop.onnx")
    tvmc("compile", folder / "loop.onnx", "--target", target, "-o", folder / "loop.tar")
    kernels = set(_kernel_calls(folder / "loop.tar"))
    for m, cond, limit in [(5, True, 100.0), (5, True, 4.0)]:  # five iterations; an exit after two
        inputs = feeds(m, cond, limit)
        np.savez(folder / "in.npz", **inputs)
        doc = json.loads(tvmc("run", folder / "loop.tar", "--device", device, "--inputs", folder / "in.npz",
                              "--outputs", folder / "out.npz", "--profile", "--repeat", "2", "--json",
                              *options).stdout)
        iterations = loop_iterations(inputs)
        assert iterations == (5 if limit > 10 else 2)
        assert {k["name"] for k in doc["profile"]["kernels"]} == kernels and doc["profile"]["runs"] == 2
        assert all(k["calls"] == iterations for k in doc["profile"]["kernels"]), doc["profile"]
        got, want = np.load(folder / "out.npz"), onnxruntime_outputs(model, inputs)
        for key, ref in want.items():
            np.testing.assert_allclose(got[key], ref, rtol=1e-6, atol=1e-6, err_msg=key)
