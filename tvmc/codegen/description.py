"""Module description: what a kernel library was compiled for, embedded in the library itself.

The description binds the parts of a mod.tar together. It is computed once at compile time from
the graph-executor JSON and the params, embedded into the library as the NUL-terminated data
symbol `tvmc_module_description` (canonical JSON, sorted keys, no spaces), and checked before
any kernel touches memory: by the Python runtime (tvmc.package.load_artifact) against mod.json,
mod.params and metadata.json, and by the C API (tvmc/runtime/tvmc_runtime.c) against the params
blob and every input. `tvmc inspect` reads it from the library file without loading the library.

Format version 2 (version 1 had no loop items in "calls"):

    {"version": 2,
     "kernel_abi_version": 4,
     "storage_bytes": [bytes per storage id],
     "entries": [{"storage_id": sid, "dtype": "float32", "shape": [1, 3, 224, 224]}, ...],
                (an entry placed inside its storage at a byte offset other than 0, mod.json's
                "storage_offset", also has "offset": the input of a concatenation that runs no kernel)
     "inputs":  [{"name": ..., "entry": e, "dtype": ..., "shape": [...]}, ...],
     "outputs": [{"name": ..., "entry": e, "dtype": ..., "shape": [...]}, ...],
                (an output whose shape is known at run time also has "shape_entry": the entry of
                its int64[rank] shape tensor; "shape" is then its bound, docs/dynamic_shapes.md)
     "params":  [{"name": ..., "entry": e, "dtype": ..., "shape": [...], "nbytes": n}, ...],
     "calls":   [{"func": "fused_nn_conv2d_add", "args": [entry ids: inputs, then outputs]}, ...]}
                (a kernel with symbolic extents also has "sizes": [index into "size_vars" of
                each int64 argument after its buffers])

A model with symbolic shapes (issue 29, docs/symbolic_shapes.md) also has "size_vars": [{"name",
"lo", "hi"}, ...], and each entry of symbolic shape "sym_shape": its dimensions as ints or
postfix programs over the variables (tvmc.graph.symbolic.to_postfix); its "shape" is the bound
(every dimension at its upper bound) that its storage holds. The C API binds the variables from
the inputs' shapes (each must be a variable or a constant), checks them against their ranges and
evaluates every sym_shape before a run. Static models have neither key.
                (a run-time loop is one item {"loop": name, "trip_count", "cond", "init",
                "body_inputs", "body_outputs", "outputs", "output_index", "calls": its body's}, see
                tvmc.mod_json.loop_entries)

Entry e is data entry `node_row_ptr[node] + output index` of mod.json; `calls` lists the tvm_op
nodes in the order the graph entry `tvmc_graph_run` runs them (tvmc.mod_json.program:
node order, `__nop` views and load-time kernels left out, a loop's body inside its loop item).
A model with load-time kernels (mod.json nodes with attrs "load_time", tvmc.mod_json.load_order:
Winograd weight transforms, which take only params) also has "load_calls", the same items for
them: the graph entry `tvmc_graph_init` runs them once, when the C API has copied the params in
(tvmc_model_create), and their outputs keep their storage for every run (kernel ABI version 5).

Readers are per library format (`READERS`): `so` reads the symbol through the ELF symbol table
(pyelftools); `wasm` modules carry the same bytes a second time as the custom section
`tvmc_module_description` (the data symbol, which the C API inside the module reads, exists only
in the linear memory of an instantiated module); source-code libraries (`cl`, `ptx`) carry it as
their first line, a `//` comment (embed_in_source), and GPU descriptions add mod.json's
"kernels" (launch and argument order of each device kernel).
"""

from __future__ import annotations

import json
import math

import numpy as np

from tvmc.constants import KERNEL_ABI_VERSION
from tvmc.errors import ArtifactError
from tvmc.mod_json import graph_attr, load_order, program, storage_offsets

SYMBOL = "tvmc_module_description"
VERSION = 2
MAX_DESCRIPTION_BYTES = 64 << 20


def _entry_id(graph_json: dict, ref) -> int:
    return int(graph_json["node_row_ptr"][int(ref[0])]) + int(ref[1])


def _nbytes(dtype: str, shape) -> int:
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def module_description(graph_json: dict, params: dict, input_names=None, output_names=None) -> dict:
    """The description (module docstring) of a graph-executor JSON and its params.

    graph_json: TVM graph-executor JSON as written to mod.json (tvmc.graph.executor_json).
    params:     {name: (dtype name, shape)} of every param (arrays give theirs through
                `param_info`); a param node whose name is missing here is described with the
                graph's own dtype and shape.
    input_names, output_names: default to graph_json's "input_names" / "output_names" (else
                the null nodes that are not params, and output_<i>).
    Raises KeyError / IndexError / TypeError / ValueError on a malformed graph (callers that read
    untrusted files check its structure first).
    """
    shapes = graph_attr(graph_json, "shape")
    dtypes = graph_attr(graph_json, "dltype")
    sids = graph_attr(graph_json, "storage_id")
    nodes = graph_json["nodes"]
    row_ptr = graph_json["node_row_ptr"]
    entries = [{"storage_id": int(s), "dtype": str(d), "shape": [int(x) for x in shp]}
               for s, d, shp in zip(sids, dtypes, shapes)]
    for entry, offset in zip(entries, storage_offsets(graph_json)):
        if int(offset):
            entry["offset"] = int(offset)
    for entry, sym in zip(entries, graph_json.get("symbolic_shapes") or []):
        if sym is not None:
            entry["sym_shape"] = sym
    if not len(entries) == len(shapes) == len(dtypes) == len(sids):
        raise ValueError("attrs shape, dltype and storage_id differ in length")
    if input_names is None:
        input_names = graph_json.get("input_names")
    if input_names is None:
        input_names = [n["name"] for n in nodes if n["op"] == "null" and n["name"] not in params]
    inputs, descr_params = [], []
    for nid, node in enumerate(nodes):
        if node["op"] != "null":
            continue
        e = int(row_ptr[nid])
        item = {"name": str(node["name"]), "entry": e, "dtype": entries[e]["dtype"], "shape": entries[e]["shape"]}
        if node["name"] in input_names:
            inputs.append(item)
        else:
            dtype, shape = params.get(node["name"], (item["dtype"], item["shape"]))
            descr_params.append({"name": item["name"], "entry": e, "dtype": str(dtype),
                                 "shape": [int(d) for d in shape], "nbytes": _nbytes(dtype, shape)})
    heads = [_entry_id(graph_json, h) for h in graph_json["heads"]]
    if output_names is None:
        output_names = graph_json.get("output_names") or [f"output_{i}" for i in range(len(heads))]
    outputs = [{"name": str(n), "entry": e, "dtype": entries[e]["dtype"], "shape": entries[e]["shape"]}
               for n, e in zip(output_names, heads)]
    for out, ref in zip(outputs, graph_json.get("output_shapes") or []):
        if ref is not None:
            out["shape_entry"] = _entry_id(graph_json, ref)
    calls = program(graph_json)
    load_calls = program(graph_json, load_order(graph_json))
    storage = graph_json.get("storage_bytes")
    if storage is None:
        storage = [0] * (max((e["storage_id"] for e in entries), default=-1) + 1)
        for e in entries:
            end = e.get("offset", 0) + _nbytes(e["dtype"], e["shape"])
            storage[e["storage_id"]] = max(storage[e["storage_id"]], end)
    out = {"version": VERSION, "kernel_abi_version": KERNEL_ABI_VERSION,
           "storage_bytes": [int(b) for b in storage], "entries": entries, "inputs": inputs,
           "outputs": outputs, "params": descr_params, "calls": calls}
    if load_calls:
        out["load_calls"] = load_calls
    if graph_json.get("size_vars"):
        out["size_vars"] = [{"name": str(v["name"]), "lo": int(v["lo"]), "hi": int(v["hi"])}
                            for v in graph_json["size_vars"]]
    if "kernels" in graph_json:  # GPU libraries: each kernel's launch and arguments are part of the plan
        out["kernels"] = graph_json["kernels"]
    return out


def param_info(params: dict) -> dict:
    """{name: (dtype name, shape)} of numpy params, the form module_description takes."""
    return {k: (np.asarray(v).dtype.name, tuple(np.shape(v))) for k, v in params.items()}


def encode(description: dict) -> bytes:
    """Canonical bytes of a description: compact JSON with sorted keys, ASCII only."""
    return json.dumps(description, sort_keys=True, separators=(",", ":")).encode("ascii")


def embed(module, description: dict, library_format: str = "so") -> None:
    """Add the description to an llvmlite ir.Module as the exported constant
    `tvmc_module_description` (i8 array, NUL-terminated); for a `wasm` library also as the
    custom section of that name (named metadata `wasm.custom_sections`)."""
    from llvmlite import ir

    data = encode(description) + b"\0"
    ty = ir.ArrayType(ir.IntType(8), len(data))
    var = ir.GlobalVariable(module, ty, SYMBOL)
    var.global_constant = True
    var.initializer = ir.Constant(ty, bytearray(data))
    if library_format == "wasm":  # LLVM's WebAssembly backend writes these pairs as custom sections
        module.add_named_metadata("wasm.custom_sections",
                                  module.add_metadata([ir.MetaDataString(module, SYMBOL),
                                                       ir.MetaDataString(module, data.decode("ascii"))]))


SOURCE_PREFIX = f"// {SYMBOL}: "


def embed_in_source(source: str, description: dict) -> str:
    """Source-code libraries (OpenCL C, PTX: both take `//` comments) carry the description as
    their first line, `// tvmc_module_description: <canonical JSON>`."""
    return SOURCE_PREFIX + encode(description).decode("ascii") + "\n" + source


# ---------------------------------------------------------------------------------------------
# Reading a description back from a library file, per library format


def _read_source_comment(f, size: int) -> bytes:
    """The description from the first line of a source-code library (embed_in_source)."""
    line = f.readline(len(SOURCE_PREFIX) + MAX_DESCRIPTION_BYTES + 1)
    if not line.startswith(SOURCE_PREFIX.encode()):
        raise LookupError(f"the library does not start with the comment '{SOURCE_PREFIX.strip()}'")
    if not line.endswith(b"\n"):
        raise ValueError("the description comment is longer than the limit or unterminated")
    return line[len(SOURCE_PREFIX):-1] + b"\0"


def _read_elf(f, size: int) -> bytes:
    """The bytes of symbol SYMBOL in an ELF shared library (dynamic symbol table first)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(f)
    for section_name in (".dynsym", ".symtab"):
        table = elf.get_section_by_name(section_name)
        if table is None:
            continue
        syms = table.get_symbol_by_name(SYMBOL)
        if not syms:
            continue
        sym = syms[0]
        nbytes = int(sym["st_size"])
        shndx = sym["st_shndx"]
        if not isinstance(shndx, int) or nbytes <= 0 or nbytes > MAX_DESCRIPTION_BYTES:
            raise ValueError(f"symbol {SYMBOL} has size {nbytes} in section {shndx}")
        sec = elf.get_section(shndx)
        offset = int(sec["sh_offset"]) + int(sym["st_value"]) - int(sec["sh_addr"])
        if sec["sh_type"] == "SHT_NOBITS" or offset < 0 or offset + nbytes > size:
            raise ValueError(f"symbol {SYMBOL} lies outside the file")
        f.seek(offset)
        return f.read(nbytes)
    raise LookupError(f"the library has no symbol {SYMBOL}")


WASM_MAGIC = b"\0asm\1\0\0\0"


def _leb_u32(f, limit: int) -> int:
    """An unsigned LEB128 number (at most 5 bytes) from `f`; ValueError when it is malformed or
    exceeds `limit`."""
    value = 0
    for shift in range(0, 35, 7):
        byte = f.read(1)
        if not byte:
            raise ValueError("truncated")
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            if value > limit:
                raise ValueError(f"a section length {value} exceeds the file")
            return value
    raise ValueError("malformed LEB128 number")


def _read_wasm(f, size: int) -> bytes:
    """The payload of the custom section SYMBOL of a WebAssembly module (binary format 1:
    sections as id byte, LEB128 length, content; a custom section, id 0, starts with its name)."""
    if f.read(8) != WASM_MAGIC:
        raise ValueError("not a WebAssembly 1.0 module")
    pos = 8
    while pos < size:
        f.seek(pos)
        section_id = f.read(1)[0]
        length = _leb_u32(f, size)
        start = f.tell()
        if start + length > size:
            raise ValueError("a section runs past the end of the file")
        if section_id == 0:
            name = f.read(_leb_u32(f, length))
            if name == SYMBOL.encode():
                nbytes = start + length - f.tell()
                if nbytes > MAX_DESCRIPTION_BYTES:
                    raise ValueError(f"the section holds {nbytes} bytes, more than the limit")
                return f.read(nbytes)
        pos = start + length
    raise LookupError(f"the module has no custom section {SYMBOL}")


READERS = {"so": _read_elf, "wasm": _read_wasm, "cl": _read_source_comment, "ptx": _read_source_comment}


def read_description(f, size: int, library_format: str, origin: str) -> dict:
    """The description embedded in a library of `library_format`, read from the seekable binary
    file `f` of `size` bytes without loading the library.

    Raises ArtifactError (naming `origin`, e.g. "model.tar: mod.so") when the format has no
    reader, the symbol is missing, or its bytes are not a description.
    """
    reader = READERS.get(library_format)
    if reader is None:
        raise ArtifactError(f"{origin}: no reader for the description embedded in a '{library_format}' library")
    try:
        data = reader(f, size)
    except LookupError as e:
        raise ArtifactError(f"{origin}: {e}; it was not built by this tvmc (recompile the model)") from None
    except Exception as e:  # a damaged file: pyelftools raises ELFError, struct errors, ...
        raise ArtifactError(f"{origin}: cannot read the embedded description: {type(e).__name__}: "
                            f"{str(e)[:200]}") from None
    if not data.endswith(b"\0"):
        raise ArtifactError(f"{origin}: the embedded description is not NUL-terminated")
    try:
        desc = json.loads(data[:-1].decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ArtifactError(f"{origin}: the embedded description is not JSON: {str(e)[:200]}") from None
    if not isinstance(desc, dict) or desc.get("version") != VERSION:
        raise ArtifactError(f"{origin}: embedded description of an unknown format version; recompile the model")
    return desc


# ---------------------------------------------------------------------------------------------
# Comparing


def _fmt(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(got, want, path: str = "") -> tuple | None:
    """(path, got, want) of the first place where two JSON values differ, else None. Items of
    lists of named objects are shown with their name: `params[2]('w').shape`; short lists of plain
    values (shapes) are compared whole."""
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            if key not in got or key not in want:
                return (f"{path}.{key}".lstrip("."), got.get(key, "(absent)"), want.get(key, "(absent)"))
            diff = first_difference(got[key], want[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    flat = isinstance(got, list) and isinstance(want, list) and \
        len(got) + len(want) <= 16 and not any(isinstance(v, (list, dict)) for v in got + want)
    if isinstance(got, list) and isinstance(want, list) and not flat:
        for i, (g, w) in enumerate(zip(got, want)):
            name = w.get("name") if isinstance(w, dict) else None
            diff = first_difference(g, w, f"{path}[{i}]" + (f"('{name}')" if isinstance(name, str) else ""))
            if diff:
                return diff
        if len(got) != len(want):
            return (f"{path.lstrip('.')} length", len(got), len(want))
        return None
    if got != want or type(got) is not type(want):
        return (path.lstrip("."), got, want)
    return None


def check_description(embedded: dict, actual: dict, member_of: dict, library: str, origin: str) -> None:
    """Raise ArtifactError unless the description computed from the artifact's files (`actual`)
    equals the one embedded in the library. `member_of` maps a top-level key to the member
    that holds it ("storage_bytes": "mod.json", "params": "mod.params", ...); the message
    names that member, the place and both values, e.g. "model.tar: mod.json does not match
    mod.so: outputs[0]('y').shape is [1,10], mod.so was compiled for [1,1000]"."""
    diff = first_difference(actual, embedded)
    if diff is None:
        return
    where, got, want = diff
    member = member_of.get(where.split(".")[0].split("[")[0].split(" ")[0], "the artifact")
    raise ArtifactError(f"{origin}: {member} does not match {library}: {where} is {_fmt(got)}, "
                        f"{library} was compiled for {_fmt(want)}")
