"""Packaging: mod.tar round trip, byte reproducibility, and the checks of load_artifact."""

import io
import json
import os
import platform
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

import tvmc
from tvmc.driver import CompiledModule
from tvmc.errors import ArtifactError
from tvmc.package import Artifact, kernel_header, load_artifact, save_artifact

# Test fixture, not product code: a one-kernel library, y = x * 2 + w over 8 floats.
FIXTURE_C = """
void k(void *a, void *b, void *c) {
    const float *x = a; const float *w = b; float *y = c;
    for (int i = 0; i < 8; i++) y[i] = x[i] * 2.0f + w[i];
}
"""


def build_fixture_library(tmp_dir) -> bytes:
    """Compile FIXTURE_C with gcc into a shared library; skip the test when gcc is missing."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to build the fixture kernel library")
    src = os.path.join(tmp_dir, "fixture.c")
    lib = os.path.join(tmp_dir, "fixture.so")
    with open(src, "w") as f:
        f.write(FIXTURE_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", lib, src], check=True, capture_output=True)
    with open(lib, "rb") as f:
        return f.read()


def make_fixture_module(library: bytes, host_features=(), triple=None) -> CompiledModule:
    """A CompiledModule for data[8] float32 (input), w[8] (param) -> k(data, w) -> out[8]."""
    graph_json = {
        "nodes": [
            {"op": "null", "name": "data", "inputs": []},
            {"op": "null", "name": "w", "inputs": []},
            {"op": "tvm_op", "name": "k", "inputs": [[0, 0, 0], [1, 0, 0]],
             "attrs": {"func_name": "k", "num_inputs": "2", "num_outputs": "1", "flatten_data": "0"}},
        ],
        "arg_nodes": [0, 1],
        "node_row_ptr": [0, 1, 2, 3],
        "heads": [[2, 0, 0]],
        "attrs": {
            "shape": ["list_shape", [[8], [8], [8]]],
            "dltype": ["list_str", ["float32", "float32", "float32"]],
            "storage_id": ["list_int", [0, 1, 2]],
        },
        "storage_bytes": [32, 32, 32],
    }
    target = {"name": "fixture", "kind": "cpu", "family": "cpu", "codegen": "llvm",
              "triple": triple or f"{platform.machine()}-unknown-linux-gnu", "library_format": "so",
              "runtime": "cpu", "host_features": list(host_features), "vector_width_bits": 128}
    metadata = {
        "tvmc_version": tvmc.__version__,
        "kernel_abi_version": tvmc.KERNEL_ABI_VERSION,
        "target": target,
        "inputs": [{"name": "data", "shape": [8], "dtype": "float32"}],
        "outputs": [{"name": "out", "shape": [8], "dtype": "float32"}],
        "num_kernels": 1,
    }
    params = {"w": np.arange(8, dtype=np.float32)}
    return CompiledModule(library, graph_json, params, metadata, {"import": 0.0})


@pytest.fixture(scope="module")
def fixture_library(tmp_path_factory):
    return build_fixture_library(str(tmp_path_factory.mktemp("lib")))


def _rewrite_tar(src, dst, drop=(), replace=None):
    """Copy tar `src` to `dst` without members in `drop`, with member bytes from `replace`."""
    replace = replace or {}
    with tarfile.open(src) as tin, tarfile.open(dst, "w", format=tarfile.USTAR_FORMAT) as tout:
        for m in tin.getmembers():
            if m.name in drop:
                continue
            data = replace.get(m.name, tin.extractfile(m).read())
            m.size = len(data)
            tout.addfile(m, io.BytesIO(data))


def test_round_trip(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    path = save_artifact(module, tmp_path / "mod.tar")
    art = load_artifact(path)
    assert isinstance(art, Artifact)
    assert art.graph_json == module.graph_json
    assert art.metadata == module.metadata
    assert set(art.params) == {"w"}
    np.testing.assert_array_equal(art.params["w"], module.params["w"])
    assert art.library == fixture_library
    assert os.path.basename(art.library_path) == "mod.so"
    assert "TVMC_KERNEL_ABI_VERSION" in art.header


def test_tar_layout(tmp_path, fixture_library):
    save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar")
    with tarfile.open(tmp_path / "mod.tar") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["metadata.json", "mod.json", "mod.params", "mod.so", "tvmc_kernels.h"]
        for m in members:
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
        text = tar.extractfile("mod.json").read().decode()
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=1) + "\n"
        params = tar.extractfile("mod.params").read()
    header_len = int.from_bytes(params[:8], "little")
    header = json.loads(params[8:8 + header_len])
    assert header["w"]["dtype"] == "F32" and header["w"]["shape"] == [8]


def test_byte_identical(tmp_path, fixture_library):
    a = save_artifact(make_fixture_module(fixture_library), tmp_path / "a.tar")
    b = save_artifact(make_fixture_module(fixture_library), tmp_path / "b.tar")
    assert a.read_bytes() == b.read_bytes()


def test_params_order_does_not_matter(tmp_path, fixture_library):
    m1 = make_fixture_module(fixture_library)
    m1.params = {"b": np.zeros(2, np.int64), "a": np.ones((2, 2), np.float32), "w": m1.params["w"]}
    m2 = make_fixture_module(fixture_library)
    m2.params = {k: m1.params[k] for k in ("w", "a", "b")}
    assert save_artifact(m1, tmp_path / "1.tar").read_bytes() == save_artifact(m2, tmp_path / "2.tar").read_bytes()


def test_header_matches_abi_version_and_compiles(tmp_path):
    text = kernel_header().decode()
    assert f"#define TVMC_KERNEL_ABI_VERSION {tvmc.KERNEL_ABI_VERSION}\n" in text
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to compile the header")
    hdr = tmp_path / "tvmc_kernels.h"
    hdr.write_text(text)
    subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Werror", "-x", "c", str(hdr)], check=True)


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="no such file") as e:
        load_artifact(tmp_path / "nope.tar")
    assert str(tmp_path / "nope.tar") in str(e.value)


def test_not_a_tar(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07not a tar at all" * 10)
    with pytest.raises(ArtifactError, match="not a tar") as e:
        load_artifact(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("member", ["mod.json", "mod.params", "mod.so", "tvmc_kernels.h", "metadata.json"])
def test_missing_member(tmp_path, fixture_library, member):
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    bad = tmp_path / "bad.tar"
    _rewrite_tar(good, bad, drop={member})
    with pytest.raises(ArtifactError, match=f"missing member.*{member}") as e:
        load_artifact(bad)
    assert str(bad) in str(e.value)


def test_wrong_abi_version(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    module.metadata["kernel_abi_version"] = tvmc.KERNEL_ABI_VERSION + 1
    path = save_artifact(module, tmp_path / "mod.tar")
    with pytest.raises(ArtifactError, match="kernel ABI version"):
        load_artifact(path)


def test_missing_param(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    module.params = {}
    path = save_artifact(module, tmp_path / "mod.tar")
    with pytest.raises(ArtifactError, match="lacks params w"):
        load_artifact(path)


def test_param_wrong_dtype(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    module.params = {"w": np.zeros(8, np.float64)}
    path = save_artifact(module, tmp_path / "mod.tar")
    with pytest.raises(ArtifactError, match="param 'w'"):
        load_artifact(path)


def test_corrupt_json(tmp_path, fixture_library):
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    bad = tmp_path / "bad.tar"
    _rewrite_tar(good, bad, replace={"mod.json": b"{nope"})
    with pytest.raises(ArtifactError, match="mod.json is not valid JSON"):
        load_artifact(bad)


def test_no_temp_file_left_when_folder_is_a_file(tmp_path, fixture_library):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArtifactError, match="cannot write"):
        save_artifact(make_fixture_module(fixture_library), blocker / "mod.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can write to read-only folders")
def test_no_temp_file_left_in_unwritable_dir(tmp_path, fixture_library):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ArtifactError, match="cannot write"):
            save_artifact(make_fixture_module(fixture_library), ro / "mod.tar")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_no_partial_file_when_writing_fails(tmp_path, fixture_library, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", fail)
    with pytest.raises(ArtifactError, match="No space left"):
        save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_kept_when_writing_fails(tmp_path, fixture_library, monkeypatch):
    out = tmp_path / "mod.tar"
    out.write_bytes(b"previous")

    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(tarfile.TarFile, "addfile", fail)
    with pytest.raises(RuntimeError):
        save_artifact(make_fixture_module(fixture_library), out)
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["mod.tar"]


def test_library_dir_removed_with_artifact(tmp_path, fixture_library):
    art = load_artifact(save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar"))
    folder = os.path.dirname(art.library_path)
    assert os.path.isfile(art.library_path)
    del art
    import gc

    gc.collect()
    assert not os.path.exists(folder)
