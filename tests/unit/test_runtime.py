"""Runtime: GraphExecutor on a one-kernel fixture library (inputs, outputs, checks, timing)."""

import os

import numpy as np
import pytest

from test_package import build_fixture_library, fixture_graph, fixture_params, make_fixture_module
from tvmc.errors import ArtifactError, InputError
from tvmc.package import load_artifact, save_artifact
from tvmc.runtime import GraphExecutor, benchmark
from tvmc.runtime.executor import ALIGNMENT_BYTES


@pytest.fixture(scope="module")
def fixture_library(tmp_path_factory):
    return build_fixture_library(str(tmp_path_factory.mktemp("lib")))


@pytest.fixture
def artifact_path(tmp_path, fixture_library):
    return save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar")


def test_run(artifact_path):
    ex = GraphExecutor(artifact_path)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    ex.set_input("data", x)
    ex.run()
    y = ex.get_output(0)
    np.testing.assert_array_equal(y, x * 2 + np.arange(8, dtype=np.float32))
    assert y.shape == (8,) and y.dtype == np.float32
    np.testing.assert_array_equal(ex.get_output("out"), y)
    assert ex.input_names == ["data"] and ex.output_names == ["out"] and ex.num_kernels == 1


def test_repeated_runs_and_output_is_a_copy(artifact_path):
    ex = GraphExecutor(load_artifact(artifact_path))
    ex.set_input("data", np.ones(8, np.float32))
    ex.run()
    first = ex.get_output(0)
    first[:] = -5
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), 2 + np.arange(8, dtype=np.float32))


def test_buffers_aligned(artifact_path):
    ex = GraphExecutor(artifact_path)
    for e in range(3):
        assert ex.entry_address(e) % ALIGNMENT_BYTES == 0


def test_storage_without_storage_bytes(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    del module.graph_json["storage_bytes"]
    ex = GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))
    ex.set_input("data", np.zeros(8, np.float32))
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), np.arange(8, dtype=np.float32))


def _consistent_module(tmp_path, edit):
    """The fixture module with mod.json changed by `edit` and a library compiled for that graph,
    so the artifact checks pass and the executor's own checks are what is left."""
    graph = fixture_graph()
    edit(graph)
    module = make_fixture_module(build_fixture_library(str(tmp_path), graph, fixture_params()))
    module.graph_json = graph
    return module


def test_storage_bytes_too_small(tmp_path):
    module = _consistent_module(tmp_path, lambda g: g.__setitem__("storage_bytes", [32, 32, 16]))
    with pytest.raises(ArtifactError, match="storage 2 has 16 bytes in storage_bytes, entry 2 needs 32"):
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))


def _output_at_offset(g):
    g["storage_bytes"] = [32, 32, 96]
    g["attrs"]["storage_offset"] = ["list_int", [0, 0, 64]]


def test_entry_at_a_storage_offset(tmp_path):
    """An entry placed inside its storage (mod.json storage_offset, PlanMemory's concat_views):
    the C API's entry table points at storage + offset, and the module description carries it."""
    ex = GraphExecutor(save_artifact(_consistent_module(tmp_path, _output_at_offset), tmp_path / "mod.tar"))
    assert [e.get("offset", 0) for e in ex.artifact.description["entries"]] == [0, 0, 64]
    assert ex.entry_address(2) % ALIGNMENT_BYTES == 0
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    ex.set_input("data", x)
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0), x * 2 + np.arange(8, dtype=np.float32))


def test_storage_offset_past_the_storage(tmp_path):
    def edit(g):
        _output_at_offset(g)
        g["storage_bytes"][2] = 64

    module = _consistent_module(tmp_path, edit)
    with pytest.raises(ArtifactError, match="storage 2 has 64 bytes in storage_bytes, entry 2 needs 96"):
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))


def _one_line(err):
    text = str(err.value)
    assert "\n" not in text
    return text


def test_wrong_input_name(artifact_path):
    ex = GraphExecutor(artifact_path)
    with pytest.raises(InputError) as e:
        ex.set_input("x", np.zeros(8, np.float32))
    assert "'x'" in _one_line(e) and "data" in _one_line(e)


def test_wrong_input_shape(artifact_path):
    ex = GraphExecutor(artifact_path)
    with pytest.raises(InputError) as e:
        ex.set_input("data", np.zeros((1, 8), np.float32))
    assert _one_line(e) == "input 'data': expected shape [8] float32, got [1,8] float32"


def test_wrong_input_dtype(artifact_path):
    ex = GraphExecutor(artifact_path)
    with pytest.raises(InputError) as e:
        ex.set_input("data", np.zeros(8, np.float64))
    assert _one_line(e) == "input 'data': expected shape [8] float32, got [8] float64"


def test_bad_output_index(artifact_path):
    ex = GraphExecutor(artifact_path)
    with pytest.raises(InputError, match="out of range"):
        ex.get_output(1)
    with pytest.raises(InputError, match="unknown output 'nope'"):
        ex.get_output("nope")


def test_missing_host_feature(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library, host_features=["sse2", "no_such_feature_xyz"])
    with pytest.raises(ArtifactError) as e:
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))
    assert "no_such_feature_xyz" in _one_line(e) and "sse2" not in _one_line(e)


def test_wrong_arch(tmp_path, fixture_library):
    import platform

    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    module = make_fixture_module(fixture_library, triple=f"{other}-unknown-linux-gnu")
    # the fixture's mod.so is this host's code under another triple: refused when loaded, for its ELF machine
    with pytest.raises(ArtifactError, match=f"mod.so is code for {platform.machine()}, but the artifact's target "
                                            f"'fixture' is {other}"):
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))


def test_missing_kernel(tmp_path):
    module = _consistent_module(tmp_path, lambda g: g["nodes"][2]["attrs"].__setitem__("func_name", "no_such_kernel"))
    with pytest.raises(ArtifactError, match="kernel 'no_such_kernel'"):
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))


def test_plan_writing_into_param_storage_rejected(tmp_path):
    module = _consistent_module(tmp_path, lambda g: g["attrs"].__setitem__("storage_id", ["list_int", [0, 1, 1]]))
    with pytest.raises(ArtifactError, match="kernel 'k' writes the storage of 'w', a graph input or param"):
        GraphExecutor(save_artifact(module, tmp_path / "mod.tar"))


def test_set_num_threads(artifact_path):
    ex = GraphExecutor(artifact_path)
    try:
        ex.set_num_threads(1)
    except ArtifactError as e:
        pytest.skip(str(e))
    with pytest.raises(InputError):
        ex.set_num_threads(0)


def test_benchmark(artifact_path):
    ex = GraphExecutor(artifact_path)
    ex.set_input("data", np.zeros(8, np.float32))
    stats = benchmark(ex, repeat=3, number=2)
    assert set(stats) == {"mean_ms", "median_ms", "min_ms", "max_ms", "std_ms", "repeat", "number"}
    assert 0 <= stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]
    assert stats["min_ms"] <= stats["mean_ms"] <= stats["max_ms"]
    with pytest.raises(InputError):
        benchmark(ex, repeat=0, number=1)


def test_guard_pages_fault_on_out_of_bounds_writes(tmp_path, fixture_library):
    """Under TVMC_GUARD_PAGES=1 (make fuzz) a buffer ends at an inaccessible page: the fixture
    run works, and a write past a storage buffer (rounded up to ALIGNMENT_BYTES, as PlanMemory
    sizes storages) kills the process."""
    import subprocess
    import sys

    path = save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar")
    code = f"""
import ctypes, numpy as np
from tvmc.runtime import GraphExecutor
ex = GraphExecutor({str(path)!r})
ex.set_input("data", np.ones(8, np.float32)); ex.run()
assert (ex.get_output(0) == 2 + np.arange(8)).all()
buf = ex._guarded[2]
assert ex.entry_address(2) == buf.ctypes.data
print("ran", flush=True)
ctypes.memmove(buf.ctypes.data + -(-buf.nbytes // 64) * 64, b"x", 1)
print("not reached", flush=True)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TVMC_GUARD_PAGES": "1"})
    assert res.stdout.split() == ["ran"] and res.returncode == -11, res.stderr
