"""Packaging: mod.tar round trip, byte reproducibility, and the checks of load_artifact."""

import hashlib
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
from tvmc.codegen.description import SYMBOL, encode, module_description, param_info
from tvmc.driver import CompiledModule
from tvmc.errors import ArtifactError
from tvmc.package import Artifact, kernel_header, load_artifact, save_artifact

# Test fixture, not product code: a one-kernel library, y = x * 2 + w over 8 floats, with the graph
# entry that runs it over the table of data entries (its three entries), an empty load-time entry
# (no load-time kernels) and, linked in, the C API.
FIXTURE_C = """
void k(void *a, void *b, void *c) {
    const float *x = a; const float *w = b; float *y = c;
    for (int i = 0; i < 8; i++) y[i] = x[i] * 2.0f + w[i];
}
void tvmc_graph_run(void *const *entries) { k(entries[0], entries[1], entries[2]); }
void tvmc_graph_init(void *const *entries) { (void)entries; }
"""


def fixture_graph() -> dict:
    """mod.json of the fixture: data[8] float32 (input), w[8] (param) -> k(data, w) -> out[8]."""
    return {
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
        "input_names": ["data"],
        "output_names": ["out"],
    }


def fixture_params() -> dict:
    return {"w": np.arange(8, dtype=np.float32)}


def description_c(graph_json: dict, params: dict) -> str:
    """C definition of the module description symbol for `graph_json`, as the codegen embeds it."""
    data = encode(module_description(graph_json, param_info(params))) + b"\0"
    return f"const char {SYMBOL}[{len(data)}] = {{{', '.join(str(b) for b in data)}}};\n"


def build_fixture_library(tmp_dir, graph_json=None, params=None) -> bytes:
    """Compile FIXTURE_C, with the description of `graph_json` and `params` (default: the
    fixture's), and the C API (tvmc/runtime/tvmc_runtime.c) with gcc into a shared library; skip
    the test when gcc is missing."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to build the fixture kernel library")
    src = os.path.join(tmp_dir, "fixture.c")
    lib = os.path.join(tmp_dir, "fixture.so")
    with open(src, "w") as f:
        f.write(FIXTURE_C + description_c(graph_json or fixture_graph(), params or fixture_params()))
    runtime = os.path.join(os.path.dirname(tvmc.__file__), "runtime")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-std=c99", f"-I{runtime}", "-o", lib, src,
                    os.path.join(runtime, "tvmc_runtime.c")], check=True, capture_output=True)
    with open(lib, "rb") as f:
        return f.read()


def make_fixture_module(library: bytes, host_features=(), triple=None) -> CompiledModule:
    """A CompiledModule for the fixture graph (fixture_graph) and its library."""
    graph_json = fixture_graph()
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
    return CompiledModule(library, graph_json, fixture_params(), metadata, {"import": 0.0})


@pytest.fixture(scope="module")
def fixture_library(tmp_path_factory):
    return build_fixture_library(str(tmp_path_factory.mktemp("lib")))


def _rewrite_tar(src, dst, drop=(), replace=None, resize=True):
    """Copy tar `src` to `dst` without members in `drop`, with member bytes from `replace`; with
    `resize`, metadata.json records the new sizes and digests (a tamperer who knew the format)."""
    replace = dict(replace or {})
    with tarfile.open(src) as tin:
        members = {m.name: (m, tin.extractfile(m).read()) for m in tin.getmembers()}
    if resize and "metadata.json" not in replace:
        meta = json.loads(members["metadata.json"][1])
        for name, data in replace.items():
            meta["member_bytes"][name] = len(data)
            meta["member_sha256"][name] = hashlib.sha256(data).hexdigest()
        replace["metadata.json"] = json.dumps(meta).encode()
    with tarfile.open(dst, "w", format=tarfile.USTAR_FORMAT) as tout:
        for name, (m, data) in members.items():
            if name in drop:
                continue
            data = replace.get(name, data)
            m.size = len(data)
            tout.addfile(m, io.BytesIO(data))


def test_round_trip(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    path = save_artifact(module, tmp_path / "mod.tar")
    art = load_artifact(path)
    assert isinstance(art, Artifact)
    assert art.graph_json == module.graph_json
    with tarfile.open(path) as tar:
        data = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.name != "metadata.json"}
    sizes = {k: len(v) for k, v in data.items()}
    digests = {k: hashlib.sha256(v).hexdigest() for k, v in data.items()}
    assert art.metadata == {**module.metadata, "member_bytes": sizes, "member_sha256": digests}
    assert art.member_bytes == sizes
    assert set(art.params) == {"w"} and art.param_info == {"w": ("float32", (8,))} and art.params_bytes == 32
    np.testing.assert_array_equal(art.params["w"], module.params["w"])
    assert art.library == fixture_library and art.library_name == "mod.so"
    assert art.description == module_description(module.graph_json, param_info(module.params))
    assert "TVMC_KERNEL_ABI_VERSION" in art.header


def test_load_without_data_reads_headers_only(tmp_path, fixture_library):
    art = load_artifact(save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar"), read_data=False)
    assert art.params is None and art.library is None
    assert art.param_info == {"w": ("float32", (8,))} and art.description["calls"] == [{"func": "k", "args": [0, 1, 2]}]


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
    with pytest.raises(ArtifactError, match="mod.params does not match mod.so: params.0..'w'..dtype is \"float64\""):
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


def _tampered(tmp_path, fixture_library, member, edit, resize=True):
    """A copy of the fixture artifact whose `member` is `edit(bytes or parsed JSON)`."""
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    with tarfile.open(good) as tar:
        data = tar.extractfile(member).read()
    if member.endswith(".json"):
        value = json.loads(data)
        edit(value)
        new = json.dumps(value).encode()
    else:
        new = edit(data)
    bad = tmp_path / "bad.tar"
    _rewrite_tar(good, bad, replace={member: new}, resize=resize)
    return bad


def _set_shape(entry, shape):
    def edit(g):
        g["attrs"]["shape"][1][entry] = shape
    return edit


@pytest.mark.parametrize("member,edit,message", [
    # an output shrunk in mod.json (the kernel would write past its buffer)
    ("mod.json", _set_shape(2, [4]),
     "mod.json does not match mod.so: entries[2].shape is [4], mod.so was compiled for [8]"),
    # a shrunk input
    ("mod.json", _set_shape(0, [2]), "mod.json does not match mod.so: entries[0].shape is [2]"),
    # a dtype changed
    ("mod.json", lambda g: g["attrs"]["dltype"][1].__setitem__(2, "float64"),
     "mod.json does not match mod.so: entries[2].dtype is \"float64\", mod.so was compiled for \"float32\""),
    # a smaller storage
    ("mod.json", lambda g: g["storage_bytes"].__setitem__(2, 16),
     "storage_bytes is [32,32,16], mod.so was compiled for [32,32,32]"),
    # a storage plan writing into the param's storage
    ("mod.json", lambda g: g["attrs"]["storage_id"][1].__setitem__(2, 1), "entries[2].storage_id is 1"),
    # another kernel name
    ("mod.json", lambda g: g["nodes"][2]["attrs"].__setitem__("func_name", "other"), "calls[0].func"),
    # metadata.json disagreeing with the library
    ("metadata.json", lambda m: m["outputs"][0].__setitem__("shape", [1]),
     "metadata.json does not match mod.so: outputs[0]('out').shape is [1], mod.so was compiled for [8]"),
])
def test_tampered_artifact_is_refused(tmp_path, fixture_library, member, edit, message):
    bad = _tampered(tmp_path, fixture_library, member, edit)
    for read_data in (True, False):   # tvmc run and tvmc inspect see the same check
        with pytest.raises(ArtifactError) as e:
            load_artifact(bad, read_data=read_data)
        assert message in str(e.value) and str(bad) in str(e.value) and "\n" not in str(e.value)


def test_shrunk_param_is_refused(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    module.params = {"w": np.zeros(4, np.float32)}
    module.graph_json["attrs"]["shape"][1][1] = [4]
    with pytest.raises(ArtifactError, match="mod.json does not match mod.so: entries.1..shape is .4."):
        load_artifact(save_artifact(module, tmp_path / "mod.tar"))


def test_other_models_library_is_refused(tmp_path, fixture_library):
    """Another model's mod.so with the same kernel names: its description differs."""
    other = fixture_graph()
    for shapes in (other["attrs"]["shape"][1],):
        shapes[:] = [[16], [16], [16]]
    other["storage_bytes"] = [64, 64, 64]
    lib = build_fixture_library(str(tmp_path), other, {"w": np.zeros(16, np.float32)})
    bad = _tampered(tmp_path, fixture_library, "mod.so", lambda _: lib)
    with pytest.raises(ArtifactError, match="mod.json does not match mod.so: entries.0..shape is .8., "
                                            "mod.so was compiled for .16."):
        load_artifact(bad)


def test_library_without_description_is_refused(tmp_path, fixture_library):
    plain = os.path.join(tmp_path, "plain.so")
    src = os.path.join(tmp_path, "plain.c")
    with open(src, "w") as f:
        f.write(FIXTURE_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", plain, src], check=True)
    bad = _tampered(tmp_path, fixture_library, "mod.so", lambda _: open(plain, "rb").read())
    with pytest.raises(ArtifactError, match="mod.so: the library has no symbol tvmc_module_description"):
        load_artifact(bad)


def test_damaged_library_is_refused(tmp_path, fixture_library):
    bad = _tampered(tmp_path, fixture_library, "mod.so", lambda data: data[:64] + b"\xff" * (len(data) - 64))
    with pytest.raises(ArtifactError, match="mod.so: cannot read the embedded description"):
        load_artifact(bad)


def test_member_size_must_match_metadata(tmp_path, fixture_library):
    bad = _tampered(tmp_path, fixture_library, "mod.json", lambda g: g.__setitem__("extra", 1), resize=False)
    with pytest.raises(ArtifactError, match=r"mod.json is \d+ bytes, metadata.json records \d+"):
        load_artifact(bad)


@pytest.mark.parametrize("member", ["mod.so", "mod.params", "mod.json"])
def test_member_digest_must_match_metadata(tmp_path, fixture_library, member):
    """One flipped byte (same size): a damaged library never runs."""
    def flip(data):
        return data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    with tarfile.open(good) as tar:
        data = tar.extractfile(member).read()
    bad = tmp_path / "bad.tar"
    _rewrite_tar(good, bad, replace={member: flip(data)}, resize=False)
    with pytest.raises(ArtifactError, match=f"{member} differs from the one packaged"):
        load_artifact(bad)


def test_sparse_member_is_not_read(tmp_path, fixture_library):
    """A member claiming 8 GiB (a sparse file in the tar) is refused from its header alone."""
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as tin, tarfile.open(bad, "w", format=tarfile.GNU_FORMAT) as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name == "mod.params":
                m.size = 8 << 30
                tout.fileobj.write(m.tobuf(tarfile.GNU_FORMAT))
                tout.fileobj.seek(m.size, 1)   # a hole: nothing is written
                tout.offset += 512 + m.size
                continue
            tout.addfile(m, io.BytesIO(data))
    with pytest.raises(ArtifactError, match="mod.params is 8589934592 bytes, metadata.json records 96"):
        load_artifact(bad)


def _raw(data):
    def edit(_):
        return data
    edit.raw = True
    return edit


@pytest.mark.parametrize("member,edit,message", [
    ("metadata.json", _raw(b"[" * 100000), "metadata.json is nested too deeply"),
    ("metadata.json", lambda m: m.__setitem__("target", "x86"), "metadata.json is malformed at 'target'"),
    ("metadata.json", lambda m: m["target"].__setitem__("library_format", "so/../../x"),
     "metadata.json is malformed at 'target/library_format'"),
    ("metadata.json", lambda m: m.__setitem__("num_kernels", "many"), "metadata.json is malformed at 'num_kernels'"),
    ("mod.json", _raw(b"{nope"), "mod.json is not valid JSON"),
    ("mod.json", lambda g: g.__setitem__("nodes", 3), "mod.json is malformed at 'nodes'"),
    ("mod.json", lambda g: g["heads"].__setitem__(0, [7, 0, 0]), "mod.json is malformed: heads refers to entry"),
    ("mod.json", lambda g: g["attrs"]["shape"][1].__setitem__(0, [1 << 32, 1 << 32]),
     "mod.json is malformed: entry 0 has 73786976294838206464 bytes, more than the limit"),
    ("mod.json", lambda g: g["attrs"]["dltype"][1].__setitem__(0, "string"), "entry 0 has dtype 'string'"),
    ("mod.params", _raw(b"\x10\x00\x00\x00\x00\x00\x00\x00{}"), "mod.params is not a valid safetensors file"),
    ("mod.params", _raw(b"\xff" * 8 + b"{}"), "mod.params is not a valid safetensors file: header length"),
])
def test_malformed_members_are_artifact_errors(tmp_path, fixture_library, member, edit, message):
    good = save_artifact(make_fixture_module(fixture_library), tmp_path / "good.tar")
    with tarfile.open(good) as tar:
        data = tar.extractfile(member).read()
    if getattr(edit, "raw", False):
        new = edit(data)
    else:
        value = json.loads(data)
        edit(value)
        new = json.dumps(value).encode()
    bad = tmp_path / "bad.tar"
    _rewrite_tar(good, bad, replace={member: new})
    with pytest.raises(ArtifactError, match=message) as e:
        load_artifact(bad)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


def test_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo.tar"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError, match="not a regular file .a FIFO."):
        load_artifact(fifo)


@pytest.mark.parametrize("target", ["dir/", "folder", "/dev/null", "model"])
def test_output_must_be_a_regular_file(tmp_path, fixture_library, target):
    (tmp_path / "folder").mkdir()
    model = tmp_path / "model.onnx"
    model.write_bytes(b"model")
    path = {"dir/": str(tmp_path / "dir") + "/", "folder": tmp_path / "folder", "/dev/null": "/dev/null",
            "model": model}[target]
    with pytest.raises(ArtifactError):
        save_artifact(make_fixture_module(fixture_library), path, reads=[model])
    assert model.read_bytes() == b"model" and os.path.exists("/dev/null") and not (tmp_path / "dir").exists()
