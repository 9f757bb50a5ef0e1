"""Packaging stage: a CompiledModule to a byte-reproducible mod.tar, and back to an Artifact.

mod.tar members (sorted by name, mtime 0, uid/gid 0, mode 0644, ustar, uncompressed):

    metadata.json    module.metadata (tvmc version, target, inputs/outputs, options, ABI version)
    mod.json         graph in TVM's graph-executor JSON schema (sorted keys, indent 1)
    mod.params       constants in safetensors layout (8-byte LE header length, JSON header, data)
    mod.<format>     the kernel library (`mod.so` for CPU targets; format from the target)
    mod.cubin        (CUDA, where ptxas was found) the PTX assembled for the target's GPU;
                     metadata "device_binaries" lists such members
    tvmc_kernels.h   the kernel C ABI (tvmc/runtime/tvmc_kernels.h)

The web output format (save_web, wasm targets) is a static folder with the same members beside
the JS runtime (tvmc.js) and a page (index.html) that runs the model and shows its outputs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import math
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import safetensors.numpy

from tvmc.constants import CUBIN_NAME, KERNEL_ABI_VERSION, __version__  # noqa: F401 (CUBIN_NAME: re-exported)
from tvmc.codegen.description import check_description, module_description, read_description
from tvmc.errors import ArtifactError
from tvmc.mod_json import graph_attr, runs_kernel, storage_offsets
from tvmc.graph.ir import MAX_TENSOR_BYTES
from tvmc.paths import check_output_path, open_regular
from tvmc.target import schema_message

HEADER_NAME = "tvmc_kernels.h"
GRAPH_NAME = "mod.json"
PARAMS_NAME = "mod.params"
METADATA_NAME = "metadata.json"
MEMBER_BYTES_KEY = "member_bytes"    # metadata.json: {member name: size in bytes} of every other member
MEMBER_SHA256_KEY = "member_sha256"  # metadata.json: {member name: sha256 hex digest} of every other member


def library_name(metadata: dict) -> str:
    """Member name of the kernel library: `mod.<library_format>` (`mod.so` unless the target says otherwise)."""
    fmt = (metadata.get("target") or {}).get("library_format", "so")
    return f"mod.{fmt}"


def kernel_header() -> bytes:
    """The kernel ABI header shipped with tvmc (tvmc/runtime/tvmc_kernels.h), as bytes."""
    return resources.files("tvmc.runtime").joinpath(HEADER_NAME).read_bytes()


def _json_bytes(obj) -> bytes:
    """Strict JSON (no NaN or Infinity tokens: ValueError, a tvmc bug if it happens)."""
    return (json.dumps(obj, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def _params_bytes(params: dict) -> bytes:
    tensors = {str(k): np.require(np.asarray(params[k]), requirements="C") for k in sorted(params)}
    try:
        return safetensors.numpy.save(tensors)
    except Exception as e:  # safetensors raises plain exceptions for unsupported dtypes
        raise ArtifactError(f"cannot serialize params to safetensors: {e}") from None


def write_atomically(path, write, what: str, reads=()) -> Path:
    """Create the regular file `path` through `write(binary file)`: written to a temporary file
    in the same folder, made mode 0644, then renamed over `path`, so an error or a signal never
    leaves a partial file behind.

    `path` must be a file name whose target is a regular file or nothing (tvmc.paths.
    check_output_path: not a folder, device, FIFO, nor one of the files in `reads`). Raises
    ArtifactError ("<path>: cannot write <what>: <reason>") on a refused path or any OSError;
    other exceptions propagate after the temporary file is removed.
    """
    check_output_path(path, ArtifactError, what, reads)
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


def artifact_members(module) -> dict:
    """{member name: bytes} of the mod.tar of `module`. metadata.json is module.metadata plus
    "member_bytes" and "member_sha256", the size and digest of every other member, which
    load_artifact checks (sizes before reading, digests of what it reads)."""
    members = {
        GRAPH_NAME: _json_bytes(module.graph_json),
        PARAMS_NAME: _params_bytes(module.params),
        library_name(module.metadata): bytes(module.library),
        HEADER_NAME: kernel_header(),
        **{name: bytes(data) for name, data in module.device_binaries.items()},
    }
    sizes = {name: len(data) for name, data in sorted(members.items())}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(members.items())}
    members[METADATA_NAME] = _json_bytes({**module.metadata, MEMBER_BYTES_KEY: sizes, MEMBER_SHA256_KEY: digests})
    return members


def save_artifact(module, path, reads=()) -> Path:
    """Write `module` (a tvmc.driver.CompiledModule) to the tar file `path`; return the path.

    Identical modules give byte-identical files. The tar is first written to a temporary file
    in the destination folder, then renamed over `path`, so an error never leaves a partial
    file behind. `reads`: files the caller read (the model), which `path` must not be. Raises
    ArtifactError when the params cannot be serialized or `path` cannot be written.
    """
    members = artifact_members(module)

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

    return write_atomically(path, write_tar, "artifact", reads)


WEB_RUNTIME_FILES = ("tvmc.js", "index.html")  # tvmc/runtime/web/


def save_web(module, folder, reads=()) -> Path:
    """Write `module` (compiled for a wasm target) as a static web folder: the members of its
    mod.tar (mod.wasm, mod.json, mod.params, metadata.json, tvmc_kernels.h), the ES-module
    runtime tvmc.js and index.html, a page that runs the model on tvmc.js's example input and
    shows its outputs and latency. Serve the folder over HTTP, or load it in Node with tvmc.js.

    The files are written into a fresh folder beside `folder`; an existing site is then renamed
    aside, the new folder renamed into its place and the old one removed, so an error or a signal
    at any step leaves either the previous site whole or the new one, never a mix or nothing.
    `folder` must not exist, or be an earlier web output (nothing but these files in it); it must
    not be one of `reads`. Returns the folder. Raises ArtifactError when the target is not a wasm
    one or the folder cannot be written.
    """
    if library_name(module.metadata) != "mod.wasm":
        raise ArtifactError(f"{folder}: the web output format needs a wasm target (e.g. --target wasm), "
                            f"not {module.metadata['target']['name']}")
    folder = Path(folder)
    members = artifact_members(module)
    names = set(members) | set(WEB_RUNTIME_FILES)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ArtifactError(f"{folder}: exists and is not a folder; the web output is a folder")
    if folder.is_dir():
        others = sorted(p.name for p in folder.iterdir() if p.name not in names)
        if others:
            raise ArtifactError(f"{folder}: holds other files ({', '.join(others[:3])}); give the web output "
                                f"a new or empty folder")
    for other in reads:
        if folder.exists() and os.path.samefile(folder, other):
            raise ArtifactError(f"{folder}: is also the input {os.fspath(other)}")
    web = resources.files("tvmc.runtime").joinpath("web")
    members.update({name: web.joinpath(name).read_bytes() for name in WEB_RUNTIME_FILES})
    parent = folder.parent if str(folder.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=parent))
    except OSError as e:
        raise ArtifactError(f"{folder}: cannot write the web output: {e.strerror or e}") from None
    old = None
    try:
        for name, data in sorted(members.items()):
            (tmp / name).write_bytes(data)
            os.chmod(tmp / name, 0o644)
        os.chmod(tmp, 0o755)
        if folder.is_dir():   # the previous site steps aside whole, and comes back if the swap fails
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=parent))
            os.rename(folder, old / "site")
        os.rename(tmp, folder)
    except BaseException as e:
        if old is not None and (old / "site").is_dir() and not folder.exists():
            with contextlib.suppress(OSError):
                os.rename(old / "site", folder)
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if isinstance(e, OSError):
            raise ArtifactError(f"{folder}: cannot write the web output: {e.strerror or e}") from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------------------------------
# Reading

MAX_METADATA_BYTES = 16 << 20     # metadata.json and tvmc_kernels.h
MAX_GRAPH_BYTES = 256 << 20       # mod.json
MAX_MEMBERS = 64

# safetensors dtype codes (the format's "dtype" strings) and the numpy dtypes they hold
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                      "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16",
                      "U8": "uint8", "BOOL": "bool"}


def load_params(data: bytes) -> dict:
    """{name: np.ndarray} of safetensors bytes `data`, each of SAFETENSORS_DTYPES
    (safetensors.numpy.load has no BF16: bfloat16 arrays are ml_dtypes'). Raises
    safetensors' own errors on a malformed file and KeyError on a dtype outside the table."""
    return {name: np.frombuffer(t["data"], np.dtype(SAFETENSORS_DTYPES[t["dtype"]])).reshape(t["shape"])
            for name, t in safetensors.deserialize(data)}

_REF = {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "integer", "minimum": 0}}
_COUNT = {"type": ["integer", "string"], "pattern": "^[0-9]{1,4}$", "minimum": 0, "maximum": 9999}


def _tagged(items: dict) -> dict:
    plain = {"type": "array", "items": items}
    return {"anyOf": [plain, {"type": "array", "minItems": 2, "maxItems": 2,
                              "prefixItems": [{"type": "string"}, plain]}]}


_TENSORS = {"type": "array", "items": {
    "type": "object", "required": ["name", "shape", "dtype"],
    "properties": {"name": {"type": "string"}, "dtype": {"type": "string"},
                   "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                   "symbolic_shape": {"type": "array", "items": {"type": ["integer", "string"]}}}}}
# symbolic shapes (docs/symbolic_shapes.md): the size variables and their ranges
_SIZE_VARS = {"type": "array", "items": {"type": "object", "required": ["name", "lo", "hi"], "properties": {
    "name": {"type": "string"}, "lo": {"type": "integer", "minimum": 0}, "hi": {"type": "integer", "minimum": 0}}}}
_SHAPE_PROGRAM = {"anyOf": [{"type": "integer", "minimum": 0},
                            {"type": "array", "items": {"type": ["integer", "string"]}}]}
_OPTIONAL_INT = {"type": ["integer", "null"], "minimum": 0}
_DIMS3 = {"type": "array", "minItems": 3, "maxItems": 3,
          "items": {"type": "integer", "minimum": 1, "maximum": (1 << 31) - 1}}
# a GPU launch of a kernel with symbolic extents: an extent may be a postfix program over the
# kernel's size arguments (tvmc.tir.gpu.LaunchConfig.to_dict)
_LAUNCH3 = {"type": "array", "minItems": 3, "maxItems": 3,
            "items": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": (1 << 31) - 1},
                                {"type": "array", "items": {"type": ["integer", "string"]}}]}}

def _metadata_target_schema() -> dict:
    """metadata.json "target": a resolved descriptor as Target.to_dict writes it, checked with the
    descriptor schema's field rules (targets/schema.json: every required field, types, bounds),
    the cache sizes flat and host_features added; fields of other tvmc versions are let through."""
    schema = json.loads(resources.files("tvmc.targets").joinpath("schema.json").read_text())
    props = dict(schema["properties"])
    cache = props.pop("cache")["properties"]
    props.update(cache)
    for key, rule in list(props.items()):  # to_dict writes a field a descriptor left out as 0, "" or []
        rule = {k: v for k, v in rule.items() if k not in ("description", "minItems")}
        if rule.get("type") == "integer" and rule.get("minimum") == 1:
            rule["minimum"] = 0
        if rule.get("type") == "string" and "pattern" in rule and key != "name":
            rule = {"anyOf": [{"const": ""}, rule]}
        props[key] = rule
    props["host_features"] = {"type": "array", "maxItems": 256, "items": {"type": "string", "maxLength": 64}}
    return {"type": "object", "required": schema["required"], "properties": props}


# What tvmc reads of metadata.json and mod.json: checked before any field is used.
METADATA_SCHEMA = {
    "type": "object",
    "required": ["kernel_abi_version", "target", "inputs", "outputs", MEMBER_BYTES_KEY, MEMBER_SHA256_KEY],
    "properties": {
        "kernel_abi_version": {"type": "integer"},
        "target": _metadata_target_schema(),
        "kernel_flops": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0,
                                                                      "maximum": 1 << 62}},
        "kernel_flops_programs": {"type": "object", "additionalProperties": _SHAPE_PROGRAM},
        "tuning_records": {"type": ["object", "null"]},
        "shipped_records": {"type": ["object", "null"]},
        "inputs": _TENSORS,
        "outputs": _TENSORS,
        MEMBER_BYTES_KEY: {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        MEMBER_SHA256_KEY: {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
        "device_binaries": {"type": "array", "items": {"type": "string", "pattern": "^mod\\.[a-z0-9]+$"}},
        "num_kernels": _OPTIONAL_INT,
        "num_kernel_calls": _OPTIONAL_INT,
        "planned_activation_bytes": _OPTIONAL_INT,
        "unplanned_activation_bytes": _OPTIONAL_INT,
        "model_weight_bytes": _OPTIONAL_INT,
        "size_vars": {"type": "array", "items": {"type": "object", "required": ["name", "range"], "properties": {
            "name": {"type": "string"}, "range": {"type": "string", "pattern": "^[0-9]+\\.\\.[0-9]+$"}}}},
    },
}
GRAPH_SCHEMA = {
    "type": "object",
    "required": ["nodes", "arg_nodes", "node_row_ptr", "heads", "attrs"],
    "properties": {
        "nodes": {"type": "array", "items": {
            "type": "object", "required": ["op", "name", "inputs"],
            "properties": {
                "op": {"enum": ["null", "tvm_op", "tvmc_loop", "tvmc_loop_var"]}, "name": {"type": "string"},
                "inputs": {"type": "array", "items": _REF},
                "attrs": {"type": "object", "properties": {"func_name": {"type": "string"},
                                                           "num_inputs": _COUNT, "num_outputs": _COUNT}}},
            "allOf": [
                {"if": {"properties": {"op": {"const": "tvm_op"}}},
                 "then": {"required": ["attrs"], "properties": {"attrs": {"required": ["func_name"]}}}},
                {"if": {"properties": {"op": {"const": "tvmc_loop"}}},
                 "then": {"required": ["attrs"], "properties": {"attrs": {
                     "required": ["num_outputs", "num_carried", "output_index", "body_nodes", "body_inputs",
                                  "body_outputs"],
                     "properties": {"num_carried": _COUNT,
                                    "output_index": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                                    "body_nodes": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                                   "minItems": 2, "maxItems": 2},
                                    "body_inputs": {"type": "array", "items": _REF},
                                    "body_outputs": {"type": "array", "items": _REF}}}}}}]}},
        "arg_nodes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "node_row_ptr": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "heads": {"type": "array", "items": _REF},
        "output_shapes": {"type": "array", "items": {"anyOf": [{"type": "null"}, _REF]}},
        "attrs": {"type": "object", "required": ["shape", "dltype", "storage_id"], "properties": {
            "shape": _tagged({"type": "array", "items": {"type": "integer", "minimum": 0}}),
            "dltype": _tagged({"type": "string"}),
            "storage_id": _tagged({"type": "integer", "minimum": 0}),
            "storage_offset": _tagged({"type": "integer", "minimum": 0})}},
        "storage_bytes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "kernels": {"type": "object", "additionalProperties": {   # GPU artifacts: launch per kernel
            "type": "object", "required": ["grid", "block", "shared_bytes"],
            "properties": {"grid": _LAUNCH3, "block": _LAUNCH3,
                           "shared_bytes": {"type": "integer", "minimum": 0, "maximum": 1 << 31},
                           "flops": {"type": "integer", "minimum": 0},
                           "global_bytes": {"type": "integer", "minimum": 0},
                           "args": {"type": "array", "items": {"type": "object"}}}}},
        "input_names": {"type": "array", "items": {"type": "string"}},
        "output_names": {"type": "array", "items": {"type": "string"}},
        "size_vars": _SIZE_VARS,
        "symbolic_shapes": {"type": "array", "items": {"anyOf": [
            {"type": "null"}, {"type": "array", "items": _SHAPE_PROGRAM}]}},
        "size_args": {"type": "object", "additionalProperties": {"type": "array",
                                                                 "items": {"type": "integer", "minimum": 0}}},
    },
}


def param_nodes(graph_json: dict, metadata: dict) -> list:
    """(node id, name) of every `null` node that is not a model input, i.e. that needs a param."""
    inputs = {i["name"] for i in metadata.get("inputs", [])}
    return [(nid, n["name"]) for nid, n in enumerate(graph_json["nodes"])
            if n.get("op") == "null" and n["name"] not in inputs]


@dataclass
class Artifact:
    """A loaded, checked mod.tar.

    path:          the tar file it was read from
    graph_json:    dict, TVM graph-executor JSON (mod.json)
    metadata:      dict (metadata.json)
    header:        text of tvmc_kernels.h as shipped in the tar
    description:   the module description embedded in the library (tvmc.codegen.description)
    library_name:  member name of the kernel library (mod.so, ...)
    param_info:    {name: (dtype name, shape tuple)} from the mod.params header
    params:        {name: np.ndarray} (mod.params); None when loaded without data (inspect)
    library:       bytes of the kernel library; None when loaded without data (inspect)
    device_binaries: {member name: bytes} of the device binaries metadata.json lists (mod.cubin);
                   empty when loaded without data
    """

    path: str
    graph_json: dict
    metadata: dict
    header: str
    description: dict
    library_name: str
    param_info: dict
    params: dict | None = field(default=None, repr=False)
    library: bytes | None = field(default=None, repr=False)
    device_binaries: dict = field(default_factory=dict, repr=False)

    @property
    def member_bytes(self) -> dict:
        """{member name: size in bytes} as recorded in metadata.json (and checked against the tar)."""
        return dict(self.metadata[MEMBER_BYTES_KEY])

    @property
    def params_bytes(self) -> int:
        """Total size of the params in bytes."""
        return sum(_nbytes(dtype, shape) for dtype, shape in self.param_info.values())


def _nbytes(dtype: str, shape) -> int:
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _parse_json(origin: str, name: str, data: bytes):
    try:
        return json.loads(data)
    except RecursionError:
        raise ArtifactError(f"{origin}: {name} is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ArtifactError(f"{origin}: {name} is not valid JSON: {_short(e)}") from None


def _check_schema(origin: str, name: str, data, schema: dict) -> None:
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ArtifactError(f"{origin}: {name} is malformed at '{_short(where, 80)}': "
                            f"{schema_message(e, 160)}") from None


def _check_graph_structure(origin: str, g: dict) -> None:
    """Indices of mod.json in range and tensor sizes bounded, so the description can be computed."""
    bad = functools.partial(_malformed, origin)
    nodes, row_ptr = g["nodes"], g["node_row_ptr"]
    outputs = [int(n.get("attrs", {}).get("num_outputs", 1)) for n in nodes]
    if len(row_ptr) != len(nodes) + 1 or row_ptr[0] != 0 or \
            any(row_ptr[i + 1] - row_ptr[i] != outputs[i] for i in range(len(nodes))):
        bad("node_row_ptr does not match the nodes and their num_outputs")
    shapes, dtypes, sids = (graph_attr(g, k) for k in ("shape", "dltype", "storage_id"))
    if not len(shapes) == len(dtypes) == len(sids) == row_ptr[-1]:
        bad(f"attrs list {len(shapes)} shapes, {len(dtypes)} dtypes, {len(sids)} storage ids "
            f"for {row_ptr[-1]} entries")
    if len(storage_offsets(g)) != len(sids):
        bad(f"attrs list {len(storage_offsets(g))} storage offsets for {len(sids)} entries")

    def check_ref(ref, before: int, what: str):
        if ref[0] >= before or ref[1] >= outputs[ref[0]]:
            bad(f"{what} refers to entry {ref[:2]}, which does not exist")

    for nid, node in enumerate(nodes):
        for ref in node["inputs"]:
            check_ref(ref, nid, f"node {nid} ('{_short(node['name'], 40)}')")
    for nid, node in enumerate(nodes):
        if node["op"] == "tvmc_loop":
            _check_loop(nid, node, check_ref, lambda r: (list(shapes[row_ptr[r[0]] + r[1]]),
                                                         dtypes[row_ptr[r[0]] + r[1]]), len(nodes), bad)
    kernels = g.get("kernels")
    if kernels is not None:
        absent = sorted({n["attrs"]["func_name"] for n in nodes if runs_kernel(n)} - set(kernels))
        if absent:
            bad(f"kernels has no launch for {_short(', '.join(absent[:3]), 120)}")
    for ref in g["heads"]:
        check_ref(ref, len(nodes), "heads")
    run_time_shapes = g.get("output_shapes", [])
    if len(run_time_shapes) not in (0, len(g["heads"])):
        bad(f"output_shapes lists {len(run_time_shapes)} entries for {len(g['heads'])} heads")
    for head, ref in zip(g["heads"], run_time_shapes):
        if ref is None:
            continue
        check_ref(ref, len(nodes), "output_shapes")
        e, h = row_ptr[ref[0]] + ref[1], row_ptr[head[0]] + head[1]
        if dtypes[e] != "int64" or list(shapes[e]) != [len(shapes[h])]:
            bad(f"the run-time shape of entry {h} is entry {e}, which is not int64[{len(shapes[h])}]")
    storage = g.get("storage_bytes")
    for e, (shape, dtype, sid) in enumerate(zip(shapes, dtypes, sids)):
        try:
            nbytes = _nbytes(dtype, shape)
        except TypeError:
            bad(f"entry {e} has dtype '{_short(dtype, 40)}', which is not a tensor dtype")
        if nbytes > MAX_TENSOR_BYTES:
            bad(f"entry {e} has {nbytes} bytes, more than the limit of {MAX_TENSOR_BYTES}")
        if storage is not None and sid >= len(storage):
            bad(f"entry {e} is in storage {sid}, but storage_bytes lists {len(storage)} storages")


def _check_plan(origin: str, g: dict) -> None:
    """mod.json's storage plan is one that kernels can run in: every storage holds its largest
    entry, and no kernel writes the storage of a graph input or a param (PlanMemory keeps them
    apart). Raises ArtifactError."""
    bad = functools.partial(_malformed, origin)
    nodes, row_ptr = g["nodes"], g["node_row_ptr"]
    shapes, dtypes, sids = (graph_attr(g, k) for k in ("shape", "dltype", "storage_id"))
    storage = g.get("storage_bytes")
    for e, (shape, dtype, sid, offset) in enumerate(zip(shapes, dtypes, sids, storage_offsets(g))):
        if storage is not None and storage[sid] < offset + _nbytes(dtype, shape):
            bad(f"storage {sid} has {storage[sid]} bytes in storage_bytes, entry {e} needs "
                f"{offset + _nbytes(dtype, shape)}")
    fixed = {sids[row_ptr[nid]]: _short(node["name"], 40) for nid, node in enumerate(nodes) if node["op"] == "null"}
    for nid, node in enumerate(nodes):
        if runs_kernel(node):  # a NOP writes nothing: a reshape may be a view of a graph input
            for e in range(row_ptr[nid], row_ptr[nid + 1]):
                if sids[e] in fixed:
                    bad(f"kernel '{_short(node['attrs'].get('func_name'), 60)}' writes the storage of "
                        f"'{fixed[sids[e]]}', a graph input or param (bad storage plan)")


def _check_loop(nid: int, node: dict, check_ref, type_of, num_nodes: int, bad) -> None:
    """A `tvmc_loop` node (tvmc.graph.executor_json): its body after it, and the types the
    executors copy between match (trip count int64 scalar, conditions bool scalars, each carried
    value one type from the initial value through the body; a scan output, body output 1 + k for
    output index k >= num_carried, is the body's per-iteration type with a leading axis)."""
    attrs, what = node["attrs"], f"loop node {nid} ('{_short(node['name'], 40)}')"
    n = int(attrs["num_carried"])
    begin, end = attrs["body_nodes"]
    scans = len(attrs["body_outputs"]) - 1 - n
    if not nid < begin <= end <= num_nodes or len(node["inputs"]) < 2 + n or len(attrs["body_inputs"]) != 2 + n \
            or scans < 0 or len(attrs["output_index"]) != int(attrs["num_outputs"]) \
            or any(k >= n + scans for k in attrs["output_index"]):
        bad(f"{what} has an inconsistent body")
    for j, k in enumerate(attrs["output_index"]):
        if k >= n:
            (shape, dtype), (per, per_dtype) = type_of([nid, j]), type_of(attrs["body_outputs"][1 + k])
            if list(shape[1:]) != list(per) or dtype != per_dtype:
                bad(f"{what}: scan output {k - n} is {dtype}{shape}, not its body value {per_dtype}{per} stacked")
    for ref in attrs["body_inputs"] + attrs["body_outputs"]:
        check_ref(ref, num_nodes, what)
    scalars = [type_of(r) for r in node["inputs"][:2] + attrs["body_inputs"][:2] + attrs["body_outputs"][:1]]
    if scalars != [([], "int64"), ([], "bool")] * 2 + [([], "bool")]:
        bad(f"{what}: trip count and conditions must be int64 and bool scalars")
    carried = [type_of(r) for r in node["inputs"][2:2 + n]]
    if [type_of(r) for r in attrs["body_inputs"][2:]] != carried or \
            [type_of(r) for r in attrs["body_outputs"][1:1 + n]] != carried or \
            [type_of([nid, j]) for j, k in enumerate(attrs["output_index"]) if k < n] != \
            [carried[k] for k in attrs["output_index"] if k < n]:
        bad(f"{what}: a loop-carried value changes type")


def _malformed(origin: str, what: str):
    raise ArtifactError(f"{origin}: {GRAPH_NAME} is malformed: {what}")


def _read_params_header(origin: str, f, size: int) -> dict:
    """{name: (dtype, shape)} from the header of the safetensors member `f` of `size` bytes,
    checking that the tensors' byte ranges are well formed and cover the data exactly."""
    bad = functools.partial(_bad_params, origin)
    prefix = f.read(8)
    if len(prefix) < 8:
        bad("shorter than its 8-byte header length")
    n = int.from_bytes(prefix, "little")
    if n > min(size - 8, MAX_METADATA_BYTES):
        bad(f"header length {n} exceeds the file ({size} bytes) or the limit of {MAX_METADATA_BYTES}")
    header = _parse_json(origin, PARAMS_NAME, f.read(n))
    if not isinstance(header, dict):
        bad("header is not a JSON object")
    info, ranges = {}, []
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[spec["dtype"]]
            shape = tuple(spec["shape"])
            begin, end = spec["data_offsets"]
            ok = all(isinstance(d, int) and d >= 0 for d in (*shape, begin, end)) and \
                end - begin == _nbytes(dtype, shape)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            bad(f"tensor '{_short(name, 40)}' has a malformed entry {_short(json.dumps(spec), 80)}")
        info[name] = (dtype, shape)
        ranges.append((begin, end))
    pos = 0
    for begin, end in sorted(ranges):
        if begin != pos:
            bad("tensor data ranges overlap or leave gaps")
        pos = end
    if 8 + n + pos != size:
        bad(f"{size} bytes, its header describes {8 + n + pos}")
    return info


def _bad_params(origin: str, what: str):
    raise ArtifactError(f"{origin}: {PARAMS_NAME} is not a valid safetensors file: {what}")


class _Members:
    """The members of an open, uncompressed tar (headers read, data not), each readable once its
    size is checked against metadata.json."""

    def __init__(self, origin: str, f):
        self.origin = origin
        self.infos = {}
        try:
            self.tar = tarfile.open(fileobj=f, mode="r:")
            for count, m in enumerate(self.tar):
                if count >= MAX_MEMBERS:
                    raise ArtifactError(f"{origin}: more than {MAX_MEMBERS} tar members; not a tvmc artifact")
                if m.name in self.infos:
                    raise ArtifactError(f"{origin}: member {_short(m.name, 60)} appears twice")
                self.infos[m.name] = m
        except (tarfile.TarError, EOFError) as e:
            raise ArtifactError(f"{origin}: not a tvmc artifact (not a tar file: {_short(e)})") from None
        except OSError as e:
            raise ArtifactError(f"{origin}: cannot read: {e.strerror or e}") from None

    def require(self, names) -> None:
        missing = [m for m in names if m not in self.infos]
        if missing:
            raise ArtifactError(f"{self.origin}: missing member{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        for name in names:
            m = self.infos[name]
            if not m.isreg() or m.issparse():
                raise ArtifactError(f"{self.origin}: member {name} is not a regular file")

    def size(self, name: str) -> int:
        return self.infos[name].size

    def open(self, name: str, expected: int | None = None):
        """A seekable binary file over member `name`; its size must equal `expected`."""
        m = self.infos[name]
        if expected is not None and m.size != expected:
            raise ArtifactError(f"{self.origin}: {name} is {m.size} bytes, {METADATA_NAME} records {expected} "
                                f"(the member was changed after packaging)")
        return self.tar.extractfile(m)

    def check_digest(self, name: str, expected: int, sha256: str) -> None:
        """Member `name` has size `expected` and digest `sha256` (read in chunks, not kept)."""
        h, n = hashlib.sha256(), 0
        with self.open(name, expected) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                n += len(chunk)
        if n != expected:
            raise ArtifactError(f"{self.origin}: {name} is truncated")
        if h.hexdigest() != sha256:
            raise ArtifactError(f"{self.origin}: {name} differs from the one packaged (its sha256 is not the one "
                                f"{METADATA_NAME} records)")

    def read(self, name: str, expected: int | None = None, limit: int | None = None,
             sha256: str | None = None) -> bytes:
        """The bytes of member `name`: its size must be `expected` (and at most `limit`), their
        digest `sha256`, when given."""
        if limit is not None and self.size(name) > limit:
            raise ArtifactError(f"{self.origin}: {name} is {self.size(name)} bytes, more than the limit of {limit}")
        with self.open(name, expected) as f:
            data = f.read()
        if len(data) != self.size(name):
            raise ArtifactError(f"{self.origin}: {name} is truncated")
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise ArtifactError(f"{self.origin}: {name} differs from the one packaged (its sha256 is not the one "
                                f"{METADATA_NAME} records)")
        return data


def load_artifact(path, read_data: bool = True) -> Artifact:
    """Read and check a mod.tar written by save_artifact, before any of its code is loaded.

    Checks, in order: `path` is a regular file (a FIFO or a device is refused at once); it is
    an uncompressed tar with every member present once; metadata.json (at most
    MAX_METADATA_BYTES) is JSON of the expected structure, with the kernel ABI version of this
    tvmc; every other member has the size metadata.json records for it (so a member is read
    only when its size is the packaged one) and, when read whole, its sha256 (a damaged or
    swapped member, the library's code included, is refused); mod.json has the expected structure, indices in
    range and tensors of at most MAX_TENSOR_BYTES; the mod.params header is well formed; and
    the description embedded in the library (tvmc.codegen.description) equals the one of
    mod.json, mod.params and metadata.json. With `read_data` False (tvmc inspect) the library
    and the param data are not read: only the library's description symbol and the params'
    header. Raises ArtifactError (one line naming `path`, the member and the mismatch).
    """
    origin = os.fspath(path)
    with open_regular(origin, ArtifactError, "a mod.tar file") as f:
        members = _Members(origin, f)
        members.require([METADATA_NAME])
        metadata = _parse_json(origin, METADATA_NAME, members.read(METADATA_NAME, limit=MAX_METADATA_BYTES))
        if isinstance(metadata, dict) and metadata.get("kernel_abi_version") != KERNEL_ABI_VERSION:
            raise ArtifactError(f"{origin}: kernel ABI version {_short(metadata.get('kernel_abi_version'), 20)}, "
                                f"this tvmc {__version__} runs version {KERNEL_ABI_VERSION}; "
                                f"recompile the model")
        _check_schema(origin, METADATA_NAME, metadata, METADATA_SCHEMA)
        lib = library_name(metadata)
        binaries = sorted(set(metadata.get("device_binaries", [])))
        members.require([GRAPH_NAME, PARAMS_NAME, lib, HEADER_NAME] + binaries)
        sizes, digests = metadata[MEMBER_BYTES_KEY], metadata[MEMBER_SHA256_KEY]
        unrecorded = [m for m in [GRAPH_NAME, PARAMS_NAME, lib, HEADER_NAME] + binaries
                      if m not in sizes or m not in digests]
        if unrecorded:
            raise ArtifactError(f"{origin}: {METADATA_NAME} records no size or sha256 for {', '.join(unrecorded)}")

        header = members.read(HEADER_NAME, sizes[HEADER_NAME], MAX_METADATA_BYTES, digests[HEADER_NAME])
        graph_json = _parse_json(origin, GRAPH_NAME, members.read(GRAPH_NAME, sizes[GRAPH_NAME], MAX_GRAPH_BYTES,
                                                                  digests[GRAPH_NAME]))
        _check_schema(origin, GRAPH_NAME, graph_json, GRAPH_SCHEMA)
        _check_graph_structure(origin, graph_json)
        with members.open(PARAMS_NAME, sizes[PARAMS_NAME]) as pf:
            info = _read_params_header(origin, pf, sizes[PARAMS_NAME])
        params = library = None
        device_binaries = {}
        fmt = lib.split(".", 1)[1]
        if read_data:
            library = members.read(lib, sizes[lib], sha256=digests[lib])
            device_binaries = {b: members.read(b, sizes[b], sha256=digests[b]) for b in binaries}
            description = read_description(io.BytesIO(library), len(library), fmt, f"{origin}: {lib}")
            try:
                params = load_params(members.read(PARAMS_NAME, sizes[PARAMS_NAME], sha256=digests[PARAMS_NAME]))
            except Exception as e:  # safetensors raises its own SafetensorError / ValueError types
                raise ArtifactError(f"{origin}: {PARAMS_NAME} is not a valid safetensors file: {_short(e)}") from None
        else:  # inspect: every member's digest, streamed, nothing kept but the description and headers
            for name in [lib, PARAMS_NAME] + binaries:
                members.check_digest(name, sizes[name], digests[name])
            with members.open(lib, sizes[lib]) as lf:
                description = read_description(lf, sizes[lib], fmt, f"{origin}: {lib}")
        with members.open(lib, sizes[lib]) as lf:
            _check_library_kind(origin, lib, lf.read(64), metadata["target"])

    _check_parts(origin, graph_json, metadata, info, description, lib)
    return Artifact(path=origin, graph_json=graph_json, metadata=metadata,
                    header=header.decode(errors="replace"), description=description, library_name=lib,
                    param_info=info, params=params, library=library, device_binaries=device_binaries)


# ELF e_machine of the architectures tvmc emits shared objects for (the triple's first component)
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}


def _check_library_kind(origin: str, lib: str, head: bytes, target: dict) -> None:
    """The library's first bytes say it is code for the artifact's target: a 64-bit little-endian
    ELF of the triple's architecture (mod.so), a wasm module (mod.wasm). Raises ArtifactError."""
    fmt = target.get("library_format")
    arch = str(target.get("triple", "")).split("-")[0]
    if fmt == "so":
        if head[:4] != b"\x7fELF" or len(head) < 20:
            raise ArtifactError(f"{origin}: {lib} is not an ELF shared object")
        machine = int.from_bytes(head[18:20], "little") if head[5] == 1 else int.from_bytes(head[18:20], "big")
        wanted = ELF_MACHINES.get(arch)
        if head[4] != 2 or head[5] != 1 or wanted is None or machine != wanted:
            name = next((a for a, m in ELF_MACHINES.items() if m == machine), f"ELF machine {machine}")
            raise ArtifactError(f"{origin}: {lib} is code for {name}, but the artifact's target "
                                f"'{target.get('name')}' is {arch}")
    elif fmt == "wasm" and head[:4] != b"\0asm":
        raise ArtifactError(f"{origin}: {lib} is not a WebAssembly module")


def _check_parts(origin, graph_json, metadata, info, description, lib) -> None:
    """mod.json, mod.params and metadata.json against each other and the library's description,
    then the storage plan they agree on (_check_plan)."""
    absent = [name for _, name in param_nodes(graph_json, metadata) if name not in info]
    if absent:
        shown = ", ".join(absent[:5]) + (f", ... ({len(absent)} in all)" if len(absent) > 5 else "")
        raise ArtifactError(f"{origin}: {PARAMS_NAME} lacks params {_short(shown)}")
    input_names = [i["name"] for i in metadata["inputs"]]
    actual = module_description(graph_json, info, input_names=graph_json.get("input_names", input_names))
    check_description(description, actual, {k: GRAPH_NAME for k in actual} | {"params": PARAMS_NAME},
                      lib, origin)

    def tensors(items) -> list:
        return [{"name": t["name"], "dtype": t["dtype"], "shape": t["shape"]} for t in items]

    keys = ("inputs", "outputs")
    check_description({k: tensors(description.get(k) or []) for k in keys}, {k: tensors(metadata[k]) for k in keys},
                      dict.fromkeys(keys, METADATA_NAME), lib, origin)
    _check_plan(origin, graph_json)
