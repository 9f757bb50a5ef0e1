"""Packaging stage: a CompiledModule to a byte-reproducible mod.tar, and back to an Artifact.

mod.tar members (sorted by name, mtime 0, uid/gid 0, mode 0644, ustar, uncompressed):

    metadata.json    module.metadata (tvmc version, target, inputs/outputs, options, ABI version)
    mod.json         graph in TVM's graph-executor JSON schema (sorted keys, indent 1)
    mod.params       constants in safetensors layout (8-byte LE header length, JSON header, data)
    mod.<format>     the kernel library (`mod.so` for CPU targets; format from the target)
    mod.cubin        (CUDA, where ptxas was found) the PTX assembled for the target's GPU;
                     metadata "device_binaries" lists such members
    tvmc_kernels.h   the kernel C ABI (tvmc/runtime/tvmc_kernels.h)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import safetensors.numpy

import tvmc
from tvmc.errors import ArtifactError

HEADER_NAME = "tvmc_kernels.h"
GRAPH_NAME = "mod.json"
PARAMS_NAME = "mod.params"
METADATA_NAME = "metadata.json"
CUBIN_NAME = "mod.cubin"  # a CUDA artifact's PTX assembled for its GPU (tvmc.codegen.nvptx), where ptxas was found


def library_name(metadata: dict) -> str:
    """Member name of the kernel library: `mod.<library_format>` (`mod.so` unless the target says otherwise)."""
    fmt = (metadata.get("target") or {}).get("library_format", "so")
    return f"mod.{fmt}"


def kernel_header() -> bytes:
    """The kernel ABI header shipped with tvmc (tvmc/runtime/tvmc_kernels.h), as bytes."""
    return resources.files("tvmc.runtime").joinpath(HEADER_NAME).read_bytes()


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1) + "\n").encode()


def _params_bytes(params: dict) -> bytes:
    tensors = {str(k): np.require(np.asarray(params[k]), requirements="C") for k in sorted(params)}
    try:
        return safetensors.numpy.save(tensors)
    except Exception as e:  # safetensors raises plain exceptions for unsupported dtypes
        raise ArtifactError(f"cannot serialize params to safetensors: {e}") from None


def write_atomically(path, write, what: str) -> Path:
    """Create `path` through `write(binary file)`: written to a temporary file in the same folder,
    made mode 0644, then renamed over `path`, so an error never leaves a partial file behind.

    Raises ArtifactError ("<path>: cannot write <what>: <reason>") on any OSError; other
    exceptions propagate after the temporary file is removed.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise ArtifactError(f"{path}: cannot write {what}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ArtifactError(f"{path}: cannot write {what}: {e.strerror or e}") from None
        raise
    return path


def save_artifact(module, path) -> Path:
    """Write `module` (a tvmc.driver.CompiledModule) to the tar file `path`; return the path.

    Identical modules give byte-identical files. The tar is first written to a temporary file
    in the destination folder, then renamed over `path`, so an error never leaves a partial
    file behind. Raises ArtifactError when the params cannot be serialized or `path` cannot
    be written.
    """
    path = Path(path)
    members = {
        METADATA_NAME: _json_bytes(module.metadata),
        GRAPH_NAME: _json_bytes(module.graph_json),
        PARAMS_NAME: _params_bytes(module.params),
        library_name(module.metadata): bytes(module.library),
        HEADER_NAME: kernel_header(),
        **{name: bytes(data) for name, data in module.device_binaries.items()},
    }

    def write_tar(f):
        with tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name in sorted(members):
                data = members[name]
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.type = tarfile.REGTYPE
                tar.addfile(info, io.BytesIO(data))

    return write_atomically(path, write_tar, "artifact")


# ---------------------------------------------------------------------------------------------
# Reading


def graph_attr(graph_json: dict, name: str) -> list:
    """Per-entry attribute list `name` ('shape', 'dltype', 'storage_id') of a graph-executor JSON.

    Accepts TVM's tagged form (`["list_shape", [...]]`) and a plain list. Raises KeyError when absent.
    """
    value = graph_json["attrs"][name]
    if len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], list):
        return value[1]
    return value


def param_nodes(graph_json: dict, metadata: dict) -> list:
    """(node id, name) of every `null` node that is not a model input, i.e. that needs a param."""
    inputs = {i["name"] for i in metadata.get("inputs", [])}
    return [(nid, n["name"]) for nid, n in enumerate(graph_json["nodes"])
            if n.get("op") == "null" and n["name"] not in inputs]


@dataclass
class Artifact:
    """A loaded mod.tar.

    path:         the tar file it was read from
    graph_json:   dict, TVM graph-executor JSON (mod.json)
    params:       {name: np.ndarray} (mod.params)
    metadata:     dict (metadata.json)
    library_path: path of the kernel library, extracted into a private temporary folder that
                  is deleted when this object is garbage collected
    header:       text of tvmc_kernels.h as shipped in the tar
    device_binaries: {member name: bytes} of the device binaries metadata.json lists (mod.cubin)
    """

    path: str
    graph_json: dict
    params: dict
    metadata: dict
    library_path: str
    header: str
    _tmpdir: tempfile.TemporaryDirectory = field(repr=False, compare=False)
    device_binaries: dict = field(default_factory=dict, repr=False)

    @property
    def library(self) -> bytes:
        """Bytes of the kernel library."""
        return Path(self.library_path).read_bytes()

    @property
    def params_bytes(self) -> int:
        """Total size of the params in bytes."""
        return sum(int(v.nbytes) for v in self.params.values())


def _parse_json(path, name, data):
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: {name} is not valid JSON: {e}") from None


def _check_graph(path, graph_json, metadata, params):
    if not isinstance(graph_json, dict):
        raise ArtifactError(f"{path}: {GRAPH_NAME} is not a graph-executor JSON object")
    missing = [k for k in ("nodes", "arg_nodes", "heads", "node_row_ptr", "attrs") if k not in graph_json]
    if missing:
        raise ArtifactError(f"{path}: {GRAPH_NAME} lacks fields {', '.join(missing)}")
    try:
        shapes = graph_attr(graph_json, "shape")
        dtypes = graph_attr(graph_json, "dltype")
        graph_attr(graph_json, "storage_id")
    except (KeyError, TypeError, IndexError) as e:
        raise ArtifactError(f"{path}: {GRAPH_NAME} attrs lack {e}") from None
    row_ptr = graph_json["node_row_ptr"]
    absent = [name for _, name in param_nodes(graph_json, metadata) if name not in params]
    if absent:
        shown = ", ".join(absent[:5]) + (f", ... ({len(absent)} in all)" if len(absent) > 5 else "")
        raise ArtifactError(f"{path}: {PARAMS_NAME} lacks params {shown}")
    for nid, name in param_nodes(graph_json, metadata):
        eid = row_ptr[nid]
        want = np.dtype(dtypes[eid])
        size = int(np.prod(shapes[eid], dtype=np.int64))
        got = params[name]
        if got.dtype != want or got.size != size:
            raise ArtifactError(f"{path}: param '{name}' is {list(got.shape)} {got.dtype}, "
                                f"{GRAPH_NAME} expects {list(shapes[eid])} {want}")


def load_artifact(path) -> Artifact:
    """Read and check a mod.tar written by save_artifact.

    Checks that the file exists and is a tar, that every member is present, that the kernel
    ABI version in metadata.json equals tvmc.KERNEL_ABI_VERSION, and that mod.params holds
    a tensor of the right dtype and size for every param node of mod.json.
    Raises ArtifactError (one line, naming `path`) on any failure.
    """
    path = str(path)
    if not os.path.exists(path):
        raise ArtifactError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ArtifactError(f"{path}: is a directory, expected a mod.tar file")
    try:
        with tarfile.open(path, mode="r:") as tar:
            contents = {}
            for m in tar.getmembers():
                if m.isfile() and "/" not in m.name and m.name not in contents:
                    contents[m.name] = tar.extractfile(m).read()
    except (tarfile.TarError, EOFError) as e:
        raise ArtifactError(f"{path}: not a tvmc artifact (not a tar file: {e})") from None
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read: {e.strerror or e}") from None

    if METADATA_NAME not in contents:
        raise ArtifactError(f"{path}: missing member {METADATA_NAME}")
    metadata = _parse_json(path, METADATA_NAME, contents[METADATA_NAME])
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{path}: {METADATA_NAME} is not a JSON object")
    lib = library_name(metadata)
    binaries = metadata.get("device_binaries", [])
    if not isinstance(binaries, list) or not all(isinstance(b, str) for b in binaries):
        raise ArtifactError(f"{path}: {METADATA_NAME} 'device_binaries' is not a list of member names")
    required = [GRAPH_NAME, PARAMS_NAME, lib, HEADER_NAME] + binaries
    missing = [m for m in required if m not in contents]
    if missing:
        raise ArtifactError(f"{path}: missing member{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    abi = metadata.get("kernel_abi_version")
    if abi != tvmc.KERNEL_ABI_VERSION:
        raise ArtifactError(f"{path}: kernel ABI version {abi}, this tvmc {tvmc.__version__} runs "
                            f"version {tvmc.KERNEL_ABI_VERSION}; recompile the model")
    graph_json = _parse_json(path, GRAPH_NAME, contents[GRAPH_NAME])
    try:
        params = safetensors.numpy.load(contents[PARAMS_NAME])
    except Exception as e:  # safetensors raises its own SafetensorError / ValueError types
        raise ArtifactError(f"{path}: {PARAMS_NAME} is not a valid safetensors file: {e}") from None
    try:
        _check_graph(path, graph_json, metadata, params)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: {GRAPH_NAME} is malformed ({type(e).__name__}: {e})") from None

    tmpdir = tempfile.TemporaryDirectory(prefix="tvmc-artifact-")
    library_path = os.path.join(tmpdir.name, lib)
    with open(library_path, "wb") as f:
        f.write(contents[lib])
    return Artifact(path=path, graph_json=graph_json, params=params, metadata=metadata,
                    library_path=library_path, header=contents[HEADER_NAME].decode(errors="replace"),
                    _tmpdir=tmpdir, device_binaries={name: contents[name] for name in binaries})
