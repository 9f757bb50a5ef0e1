"""The OpenCL target as a user meets it: `tvmc compile --target opencl`, the artifact's members,
`tvmc inspect`'s kernel table, `tvmc run --device` against onnxruntime, `tvmc run --profile`
timing every kernel with OpenCL profiling events (a run-time loop's body included)."""

from __future__ import annotations

import json
import tarfile

import pytest

from tests.e2e.gpu_cli import (check_cli_profile, check_profile, check_profile_of_a_run_time_loop,
                               check_run_matches_onnxruntime, compile_mlp)
from tests.e2e.test_cli_e2e import tvmc
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_mlp(tmp_path_factory.mktemp("cli_opencl"), "opencl")


def test_artifact_holds_opencl_source_and_each_kernels_launch(compiled, tmp_path):
    d, _ = compiled
    with tarfile.open(d / "mlp.tar") as tar:
        names = tar.getnames()
        graph = json.loads(tar.extractfile("mod.json").read())
        source = tar.extractfile("mod.cl").read().decode()
    assert {"mod.cl", "mod.json", "mod.params", "metadata.json"} <= set(names) and "mod.so" not in names
    calls = {n["attrs"]["func_name"]: n for n in graph["nodes"] if n["op"] == "tvm_op"}
    assert set(calls) == set(graph["kernels"])
    for name, node in calls.items():
        k = graph["kernels"][name]
        assert f"__kernel void {name}(" in source
        assert len(k["args"]) == len(node["inputs"]) + 1  # inputs in node order, then the output
        assert len(k["grid"]) == len(k["block"]) == 3 and k["block"][0] * k["block"][1] * k["block"][2] <= 256
    tvmc("compile", d / "mlp.onnx", "--target", "opencl", "-o", tmp_path / "again.tar")
    assert (tmp_path / "again.tar").read_bytes() == (d / "mlp.tar").read_bytes()


def test_inspect_prints_the_device_kernels(compiled):
    d, _ = compiled
    out = tvmc("inspect", d / "mlp.tar").stdout
    assert "device kernels" in out and "fused_nn_dense" in out and "B/FLOP" in out


def test_tampered_launch_is_an_artifact_error(compiled, tmp_path):
    """mod.cl carries the description it was compiled for, kernels' launches included: a grid
    enlarged in mod.json (threads writing past a buffer on a GPU) is refused before any device work."""
    from tests.unit.test_package import _rewrite_tar

    d, _ = compiled
    with tarfile.open(d / "mlp.tar") as tar:
        graph = json.loads(tar.extractfile("mod.json").read())
    name = next(iter(graph["kernels"]))
    graph["kernels"][name]["grid"][0] *= 4
    _rewrite_tar(d / "mlp.tar", tmp_path / "bad.tar", replace={"mod.json": json.dumps(graph).encode()})
    for cmd in (("inspect",), ("run", "--device", "opencl")):
        res = tvmc(cmd[0], tmp_path / "bad.tar", *cmd[1:], check=False)
        assert (res.returncode == 7 and "mod.json does not match mod.cl" in res.stderr
                and f"kernels.{name}" in res.stderr)


def test_run_on_the_opencl_device_matches_onnxruntime(compiled):
    require("opencl")
    check_run_matches_onnxruntime(*compiled, "opencl:0:0")


def test_run_on_a_missing_device_is_one_line(compiled):
    d, _ = compiled
    res = tvmc("run", d / "mlp.tar", "--device", "opencl:9", check=False)
    assert res.returncode == 7 and res.stderr.count("\n") == 1 and "opencl" in res.stderr.lower()


def test_profile_times_each_kernel_with_opencl_events(compiled):
    require("opencl")
    check_profile(compiled[0] / "mlp.tar", "opencl")


def test_run_profile_prints_every_kernel_timed_with_opencl_events(compiled):
    """`tvmc run --device opencl --profile` (a table) and `--profile --json`: every kernel of
    mod.json once, with its calls per run."""
    require("opencl")
    check_cli_profile(compiled[0] / "mlp.tar", "opencl", "OpenCL profiling events")


def test_profile_times_a_run_time_loops_kernels_per_iteration(tmp_path):
    require("opencl")
    check_profile_of_a_run_time_loop(tmp_path, "opencl", "opencl")
