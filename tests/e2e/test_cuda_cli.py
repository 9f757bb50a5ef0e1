"""The CUDA target as a user meets it. Without a GPU (this machine, CI): `tvmc compile --target
cuda*` writes mod.ptx and, where ptxas is found, mod.cubin assembled for the descriptor's GPU;
the e2e models compile for every shipped CUDA descriptor with ptxas accepting their PTX; `tvmc
run` and `tvmc tune` say in one line that no GPU runs here. On a GPU (marked cuda, skipped
elsewhere): `tvmc run` against onnxruntime, the cubin loaded when it fits the GPU, kernels timed
with CUDA events, runs replayed from a CUDA graph (or launched kernel by kernel with
--no-cuda-graph, and always for a run-time loop) with the same results. (The e2e models on the
GPU: test_models.py and test_bert.py, target cuda.)"""

from __future__ import annotations

import json
import re
import tarfile

import numpy as np
import onnx
import pytest

from tests.e2e.builders import bert_encoder, mlp, resnet_style_cnn
from tests.e2e.models import LIGHT_MODELS, light_model_path, onnxruntime_outputs
from tests.e2e.gpu_cli import (check_cli_profile, check_profile, check_profile_of_a_run_time_loop,
                               check_run_matches_onnxruntime, compile_mlp)
from tests.e2e.test_cli_e2e import tvmc
from tests.targets import require
from tvmc.codegen.nvptx import assembler_missing
from tvmc.target import known_targets, resolve_target

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

CUDA_TARGETS = [n for n in known_targets() if n != "native" and resolve_target(n).runtime == "cuda"]
ELF_MAGIC, EM_CUDA = b"\x7fELF", 190


def _ptxas(target_name: str):
    reason = assembler_missing(resolve_target(target_name))
    if reason:
        pytest.skip(reason)


def _check_module(module, target_name: str):
    """The compiled module of a CUDA target: every kernel of mod.json in the PTX with its launch,
    and the cubin ptxas assembled from it for the descriptor's GPU (an ELF for EM_CUDA)."""
    target = resolve_target(target_name)
    ptx = module.library.decode()
    assert f".target {target.cpu}" in ptx
    calls = {n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"}
    assert calls == set(module.graph_json["kernels"])
    for name in calls:
        block = module.graph_json["kernels"][name]["block"]
        assert re.search(rf"\.entry {name}\([^)]*\)\s*\.maxntid {block[0]}, {block[1]}, {block[2]}", ptx), name
    assert module.metadata["device_binaries"] == ["mod.cubin"]
    cubin = module.device_binaries["mod.cubin"]
    assert cubin[:4] == ELF_MAGIC and int.from_bytes(cubin[18:20], "little") == EM_CUDA


def _e2e_models():
    """(target, model builder): the CNN for the first shipped descriptor in make test; for the
    others, and the MLP, the BERT encoder and the light models for all, in make test-all."""
    out = [pytest.param(t, lambda: resnet_style_cnn(seed=1, size=33), id=f"{t}-cnn",
                        marks=() if t == CUDA_TARGETS[0] else pytest.mark.slow) for t in CUDA_TARGETS]
    slow = [("mlp", lambda: mlp(seed=2, batch=3, sizes=(50, 130, 70, 10))),
            ("bert", lambda: bert_encoder(seed=3, seq=128, hidden=256, heads=4, layers=2, vocab=1000))]
    slow += [(name, lambda name=name: onnx.load(light_model_path(name))) for name in LIGHT_MODELS]
    out += [pytest.param(t, build, id=f"{t}-{name}", marks=pytest.mark.slow) for name, build in slow
            for t in CUDA_TARGETS]
    return out


@pytest.mark.parametrize("target_name,build", _e2e_models())
def test_e2e_model_compiles_to_ptx_that_ptxas_accepts(target_name, build):
    from tvmc.driver import compile_model

    _ptxas(target_name)
    _check_module(compile_model(build(), resolve_target(target_name)), target_name)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_mlp(tmp_path_factory.mktemp("cli_cuda"), "cuda-sm80")


def test_artifact_holds_ptx_cubin_and_each_kernels_launch(compiled, tmp_path):
    _ptxas("cuda-sm80")
    d, _ = compiled
    with tarfile.open(d / "mlp.tar") as tar:
        names = tar.getnames()
        graph = json.loads(tar.extractfile("mod.json").read())
        metadata = json.loads(tar.extractfile("metadata.json").read())
        ptx = tar.extractfile("mod.ptx").read().decode()
    assert {"mod.ptx", "mod.cubin", "mod.json", "mod.params", "metadata.json"} <= set(names)
    assert "mod.so" not in names and metadata["device_binaries"] == ["mod.cubin"]
    assert metadata["target"]["cpu"] == "sm_80" and ".version 7.0" in ptx and ".target sm_80" in ptx
    for name, k in graph["kernels"].items():
        assert f".entry {name}(" in ptx and len(k["block"]) == 3 and np.prod(k["block"]) <= 1024
    tvmc("compile", d / "mlp.onnx", "--target", "cuda-sm80", "-o", tmp_path / "again.tar")
    assert (tmp_path / "again.tar").read_bytes() == (d / "mlp.tar").read_bytes()


def test_without_ptxas_the_tar_holds_the_ptx_alone(compiled, tmp_path):
    d, _ = compiled
    tvmc("compile", d / "mlp.onnx", "--target", "cuda -mcpu=sm_86", "--target-option", "assembler=no-such-ptxas",
         "-o", tmp_path / "ptx.tar")
    with tarfile.open(tmp_path / "ptx.tar") as tar:
        assert "mod.cubin" not in tar.getnames()
        assert ".target sm_86" in tar.extractfile("mod.ptx").read().decode()
        assert "device_binaries" not in json.loads(tar.extractfile("metadata.json").read())


def test_inspect_prints_the_device_kernels(compiled):
    d, _ = compiled
    out = tvmc("inspect", d / "mlp.tar").stdout
    assert "device kernels" in out and "fused_nn_dense" in out


def _no_gpu():
    from tvmc.runtime.cuda import cuda_available

    if cuda_available() is None:
        pytest.skip("a CUDA GPU runs here")


def test_run_without_a_gpu_is_one_line(compiled):
    _no_gpu()
    d, _ = compiled
    res = tvmc("run", d / "mlp.tar", check=False)
    assert res.returncode == 7 and res.stderr.count("\n") == 1 and "CUDA" in res.stderr


def test_tune_without_a_gpu_is_one_line_and_writes_nothing(compiled, tmp_path):
    _no_gpu()
    d, _ = compiled
    res = tvmc("tune", d / "mlp.onnx", "--target", "cuda", "-o", tmp_path / "r.json", "--trials", "2", check=False)
    assert res.returncode == 9 and res.stderr.count("\n") == 1 and "cuda" in res.stderr.lower()
    assert not (tmp_path / "r.json").exists()


# ---- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.cuda
def test_run_on_the_gpu_matches_onnxruntime(compiled):
    require("cuda")
    check_run_matches_onnxruntime(*compiled, "cuda:0")


@pytest.mark.cuda
def test_the_cubin_is_loaded_on_its_architecture_and_the_ptx_elsewhere(compiled, tmp_path):
    from tvmc.runtime import create_executor
    from tvmc.runtime.cuda import architecture, cubin_runs_on, gpu_info, ptx_runs_on
    from tvmc.target import isa_table

    require("cuda")
    _ptxas("cuda")
    d, model = compiled
    arch = gpu_info()[1]
    if arch not in isa_table("nvptx64").cpus:
        pytest.skip(f"targets/isa/nvptx64.yaml does not list this GPU's architecture {arch}")
    tvmc("compile", d / "mlp.onnx", "--target", f"cuda -mcpu={arch}", "-o", tmp_path / "own.tar")
    capability = architecture(arch)[:2]
    cases = [(tmp_path / "own.tar", "cubin")]
    if ptx_runs_on("sm_80", capability):  # the sm_80 artifact: its cubin on sm_8x GPUs, its PTX on newer ones
        cases.append((d / "mlp.tar", "cubin" if cubin_runs_on("sm_80", capability) else "ptx"))
    x = np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32)
    ref = onnxruntime_outputs(model, {"x": x})["y"]
    for tar, image in cases:
        ex = create_executor(tar, "cuda")
        assert ex.image == image, (tar, arch)
        ex.set_input("x", x)
        ex.run()
        np.testing.assert_allclose(ex.get_output(0), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_profile_times_each_kernel_with_cuda_events(compiled):
    require("cuda")
    check_profile(compiled[0] / "mlp.tar", "cuda")


@pytest.mark.cuda
def test_run_profile_prints_every_kernel_timed_with_cuda_events(compiled):
    """`tvmc run --device cuda --profile` (a table) and `--profile --json`: every kernel of
    mod.json once, with its calls per run (the OpenCL test's mirror)."""
    require("cuda")
    check_cli_profile(compiled[0] / "mlp.tar", "cuda:0", "CUDA events")


@pytest.mark.cuda
def test_profile_times_a_run_time_loops_kernels_per_iteration(tmp_path):
    require("cuda")
    check_profile_of_a_run_time_loop(tmp_path, "cuda", "cuda:0")


@pytest.mark.cuda
def test_profile_without_the_cuda_graph(compiled):
    from tvmc.runtime.cuda import CUDAExecutor

    require("cuda")
    check_profile(compiled[0] / "mlp.tar", "cuda", lambda tar, device: CUDAExecutor(tar, device, cuda_graph=False))
    check_cli_profile(compiled[0] / "mlp.tar", "cuda:0", "CUDA events", "--no-cuda-graph")


@pytest.mark.cuda
def test_cuda_graph_replays_compute_on_the_inputs_set_last(compiled):
    """With and without the CUDA graph: each run after set_input of new values matches onnxruntime
    on those values (the graph's kernels read the executor's fixed buffers), a replay after a
    profile too, and both modes give the same outputs; close() frees the graph."""
    from tvmc.runtime.cuda import CUDAExecutor

    require("cuda")
    d, model = compiled
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((2, 32)).astype(np.float32) for _ in range(3)]
    refs = [onnxruntime_outputs(model, {"x": x})["y"] for x in xs]
    outputs = {}
    for graph in (True, False):
        ex = CUDAExecutor(d / "mlp.tar", "cuda", cuda_graph=graph)
        try:
            assert ex.cuda_graph is graph and (ex.cuda_graph_off is None) is graph
            assert (ex.program._graph_exec is not None) is graph
            outputs[graph] = []
            for x, ref in zip(xs, refs):
                ex.set_input("x", x)
                ex.run()
                outputs[graph].append(ex.get_output(0))
                np.testing.assert_allclose(outputs[graph][-1], ref, rtol=1e-4, atol=1e-5)
            ex.profile(1)
            ex.set_input("x", xs[0])
            ex.run()
            np.testing.assert_array_equal(ex.get_output(0), outputs[graph][0])
        finally:
            ex.close()
        assert ex.program._graph_exec is None and ex.program._graph is None and ex.program.module is None
    for with_graph, without in zip(outputs[True], outputs[False]):
        np.testing.assert_array_equal(with_graph, without)


@pytest.mark.cuda
def test_a_run_time_loop_runs_kernel_by_kernel_on_the_gpu(tmp_path):
    from tests.e2e.test_run_time_loop import RUNS, feeds, running_sum_model
    from tvmc.runtime.cuda import CUDAExecutor

    require("cuda")
    model = running_sum_model()
    onnx.save(model, tmp_path / "loop.onnx")
    tvmc("compile", tmp_path / "loop.onnx", "--target", "cuda", "-o", tmp_path / "loop.tar")
    ex = CUDAExecutor(tmp_path / "loop.tar", "cuda")
    try:
        assert ex.cuda_graph is False and ex.cuda_graph_off.startswith("run-time loop 'the_loop'")
        for run in RUNS:
            inputs = feeds(*run)
            for name, value in inputs.items():
                ex.set_input(name, value)
            ex.run()
            for k, (name, ref) in enumerate(onnxruntime_outputs(model, inputs).items()):
                np.testing.assert_allclose(ex.get_output(k), ref, rtol=1e-6, atol=1e-6, err_msg=name)
    finally:
        ex.close()
    res = tvmc("run", tmp_path / "loop.tar", "--device", "cuda")
    assert res.stdout.splitlines()[0].endswith(
        " (kernel by kernel, no CUDA graph: run-time loop 'the_loop' is driven from the host)")


@pytest.mark.cuda
def test_tvmc_run_says_which_launch_mode_ran_and_both_agree(compiled):
    require("cuda")
    d, _ = compiled
    x = np.random.default_rng(5).standard_normal((2, 32)).astype(np.float32)
    np.savez(d / "in5.npz", x=x)
    lines, outs = {}, {}
    for flag in ("--cuda-graph", "--no-cuda-graph"):
        res = tvmc("run", d / "mlp.tar", "--device", "cuda:0", flag, "--inputs", d / "in5.npz", "--outputs",
                   d / f"out{flag}.npz", "--repeat", "3")
        lines[flag], outs[flag] = res.stdout.splitlines()[0], np.load(d / f"out{flag}.npz")["y"]
        doc = json.loads(tvmc("run", d / "mlp.tar", "--device", "cuda:0", flag, "--json").stdout)
        assert doc["device"]["cuda_graph"] is (flag == "--cuda-graph")
        assert doc["device"]["cuda_graph_off"] == (None if flag == "--cuda-graph" else "turned off")
    assert lines["--cuda-graph"].startswith("device: ") and lines["--cuda-graph"].endswith(" (CUDA graph)")
    assert lines["--no-cuda-graph"].endswith(" (kernel by kernel, no CUDA graph: turned off)")
    np.testing.assert_array_equal(outs["--cuda-graph"], outs["--no-cuda-graph"])
