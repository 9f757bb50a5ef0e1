"""Python API: one call per command, in the spirit of TVM's `tvmc.compile(model, target=...)`.

    import tvmc

    result = tvmc.compile("model.onnx", target="native", output="model.tar",
                          input_shapes={"data": [1, 3, 224, 224]})
    ran = tvmc.run("model.tar", inputs={"data": array}, repeat=10)
    ran.outputs["prob"], ran.timing["median_ms"]
    tuned = tvmc.tune("model.onnx", target="native", records="records.json", trials=200, tasks="0,2-4")

The functions accept what the CLI accepts (a target name, a descriptor YAML path or a Target;
input shapes as a dict) and check their arguments first, raising TypeError or ValueError that
name the argument. Each returns a result object whose `to_json()` is the document `tvmc <command>
--json` prints (docs/json.md; every document carries "tvmc_json": JSON_SCHEMA_VERSION and its
"kind"). The CLI commands are built on these functions.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tvmc
from tvmc.errors import ArtifactError, InputError, ModelError, TuningError
from tvmc.paths import check_output_path, check_regular, open_regular

# Version of the --json documents (docs/json.md, docs/tvmc-json.schema.json). A field is only
# ever added within a version; a renamed or removed field makes a new version.
JSON_SCHEMA_VERSION = 1

FILL_MODES = ("zeros", "ones", "random")
DUMP_STAGES = ("graph", "tir", "ll", "asm")


def json_document(kind: str, body: dict) -> dict:
    """A --json document: the schema version, its kind and tvmc's version, then `body`, with every
    non-finite float written as a string (json_finite), so the document is valid JSON."""
    return json_finite({"tvmc_json": JSON_SCHEMA_VERSION, "kind": kind, "tvmc_version": tvmc.__version__, **body})


def json_finite(value):
    """`value` (dicts, lists, tuples, numbers, ...) with every NaN, +inf and -inf float replaced
    by the string "NaN", "Infinity" or "-Infinity" (docs/json.md): JSON has no such numbers, and
    Python's json would write the non-standard tokens NaN / Infinity that strict parsers refuse."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_finite(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Argument checks (TypeError for a wrong type, ValueError for a wrong value, naming the argument)


def _path(name: str, value, optional=False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def _int(name: str, value, low: int, high: int | None = None, optional=False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be {'in ' + str(low) + '..' + str(high) if high is not None else '>= ' + str(low)}, "
                         f"got {value}")
    return int(value)


def _choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _names(name: str, value) -> tuple:
    """A str ("A,B") or an iterable of str -> tuple of names."""
    if isinstance(value, str):
        value = value.split(",")
    try:
        items = [str(v).strip() for v in value]
    except TypeError:
        raise TypeError(f"{name} must be a str or a list of str, got {type(value).__name__}") from None
    return tuple(dict.fromkeys(v for v in items if v))


def input_shapes_option(shapes) -> tuple:
    """{input name: shape} (a dict of int sequences) -> CompileOptions.input_shapes
    ((name, (d0, d1, ...)), ...); None -> (). Raises TypeError or ValueError (non-positive dims)."""
    if shapes is None:
        return ()
    if not isinstance(shapes, dict):
        raise TypeError(f"input_shapes must be a dict {{input name: shape}}, got {type(shapes).__name__}")
    out = []
    for name, dims in shapes.items():
        if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
            raise TypeError(f"input_shapes['{name}'] must be a sequence of ints, got {dims!r}")
        dims = tuple(dims)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in dims):
            raise ValueError(f"input_shapes['{name}'] must hold positive ints, got {list(dims)}")
        out.append((str(name), tuple(int(d) for d in dims)))
    return tuple(out)


def value_ranges_option(ranges) -> tuple:
    """{input name: (lo, hi)} -> CompileOptions.value_ranges ((name, (lo, hi)), ...); None -> ().
    Raises TypeError, or ValueError when lo > hi."""
    if ranges is None:
        return ()
    if not isinstance(ranges, dict):
        raise TypeError(f"value_ranges must be a dict {{input name: (lo, hi)}}, got {type(ranges).__name__}")
    out = []
    for name, pair in ranges.items():
        try:
            lo, hi = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise TypeError(f"value_ranges['{name}'] must be a pair of numbers (lo, hi), got {pair!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"value_ranges['{name}']: ({lo:g}, {hi:g}) must be finite numbers")
        if not lo <= hi:
            raise ValueError(f"value_ranges['{name}']: ({lo:g}, {hi:g}) is empty (lo must not exceed hi)")
        out.append((str(name), (lo, hi)))
    return tuple(out)


def _resolve(target, target_options):
    from tvmc.target import Target, resolve_target

    if isinstance(target, Target):
        if target_options:
            raise ValueError("target_options apply to a target name or descriptor path, not to a resolved Target")
        return target
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"target must be a target name, a descriptor path or a Target, got {type(target).__name__}")
    if target_options is not None and not isinstance(target_options, dict):
        raise TypeError(f"target_options must be a dict, got {type(target_options).__name__}")
    return resolve_target(os.fspath(target), {k: str(v) for k, v in (target_options or {}).items()})


def _model(model):
    """A model path (checked to exist) or an onnx.ModelProto, as the frontend takes it."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    path = _path("model", model)
    check_regular(path, ModelError, "an ONNX model file")
    return path


MIXED_PRECISION_DTYPES = ("float16",)


def _compile_options(opt_level, input_shapes, disabled_passes, pass_config, tuning_records=None,
                     dump_ir=(), dump_dir=None, value_ranges=None, mixed_precision=None, mixed_precision_ops=None,
                     shipped_records=True):
    from tvmc.driver import CompileOptions
    from tvmc.ops.registry import all_ops

    if pass_config is not None and not isinstance(pass_config, dict):
        raise TypeError(f"pass_config must be a dict {{'Pass.option': value}}, got {type(pass_config).__name__}")
    stages = _names("dump_ir", dump_ir)
    for stage in stages:
        _choice("dump_ir stage", stage, DUMP_STAGES)
    mp_ops = _names("mixed_precision_ops", mixed_precision_ops or ())
    if mixed_precision is not None:
        _choice("mixed_precision", mixed_precision, MIXED_PRECISION_DTYPES)
    elif mp_ops:
        raise ValueError("mixed_precision_ops needs mixed_precision")
    unknown = [n for n in mp_ops if n not in all_ops()]
    if unknown:
        raise ValueError(f"mixed_precision_ops: unknown operator {unknown[0]!r} (tvmc's names, e.g. nn.conv2d, "
                         f"nn.dense, nn.matmul)")
    if not isinstance(shipped_records, bool):
        raise TypeError(f"shipped_records must be a bool, got {type(shipped_records).__name__}")
    return CompileOptions(opt_level=_int("opt_level", opt_level, 0, 3), shipped_records=shipped_records,
                          mixed_precision=mixed_precision or "", mixed_precision_ops=mp_ops,
                          disabled_passes=frozenset(_names("disabled_passes", disabled_passes)),
                          pass_config=tuple(sorted((pass_config or {}).items())),
                          input_shapes=input_shapes_option(input_shapes),
                          value_ranges=value_ranges_option(value_ranges), dump_ir=stages,
                          dump_dir=_path("dump_dir", dump_dir, optional=True),
                          tuning_records=_path("tuning_records", tuning_records, optional=True))


# ---------------------------------------------------------------------------------------------
# compile


def kernel_counts(metadata: dict, graph_json: dict) -> tuple:
    """(distinct kernels, kernel calls): metadata's num_kernels / num_kernel_calls, else counted
    from the graph JSON's tvm_op nodes."""
    ops = [n for n in graph_json.get("nodes", []) if n.get("op") == "tvm_op"]
    distinct = metadata.get("num_kernels")
    calls = metadata.get("num_kernel_calls")
    return (len({n["attrs"]["func_name"] for n in ops}) if distinct is None else distinct,
            len(ops) if calls is None else calls)


@dataclass
class CompileResult:
    """What tvmc.compile made.

    module:    tvmc.driver.CompiledModule (library bytes, graph JSON, params, metadata, timings_s)
    target:    the resolved tvmc.target.Target
    options:   the tvmc.driver.CompileOptions used
    model:     the model as given (a path, or "<ModelProto>")
    output:    path of the saved mod.tar, or None when not saved
    package_s: seconds spent writing the tar (0.0 when not saved)
    """

    module: object
    target: object
    options: object
    model: str
    output: str | None = None
    package_s: float = 0.0

    @property
    def timings_s(self) -> dict:
        """Seconds per stage (import, passes, codegen, package) and their total."""
        stages = {k: v for k, v in self.module.timings_s.items() if "/" not in k}
        if self.output is not None:
            stages["package"] = self.package_s
        return {**stages, "total": sum(stages.values())}

    @property
    def pass_times_s(self) -> dict:
        """Seconds per graph pass, in the order they ran."""
        return {k.split("/", 1)[1]: v for k, v in self.module.timings_s.items() if k.startswith("passes/")}

    def to_json(self) -> dict:
        """The `tvmc compile --json` document (docs/json.md)."""
        meta = self.module.metadata
        distinct, calls = kernel_counts(meta, self.module.graph_json)
        return json_document("compile", {
            "model": self.model,
            "output": self.output,
            "target": self.target.to_dict(),
            "target_hash": self.target.hash,
            "tuning_key": self.target.tuning_key,
            "opt_level": self.options.opt_level,
            "inputs": meta.get("inputs", []),
            "outputs": meta.get("outputs", []),
            "kernels": {"distinct": distinct, "calls": calls},
            "params_bytes": sum(int(np.asarray(v).nbytes) for v in self.module.params.values()),
            "activations": {"planned_bytes": meta.get("planned_activation_bytes"),
                            "unplanned_bytes": meta.get("unplanned_activation_bytes")},
            "timings_s": self.timings_s,
            "pass_times_s": self.pass_times_s,
            "tuning_records": _records_json(meta.get("tuning_records")),
            "shipped_records": _records_json(meta.get("shipped_records")),
        })


def _records_json(summary: dict | None) -> dict | None:
    """metadata's tuning_records summary without the full applied records (their implementations,
    by current name, and configs stay: what compile applied)."""
    from tvmc.autotune.record import IMPL_ALIASES

    if summary is None:
        return None
    out = {k: v for k, v in summary.items() if k != "applied"}
    out["applied"] = [{"implementation": IMPL_ALIASES.get(r["task"]["name"], r["task"]["name"]), "op": r["task"]["op"],
                       "config": r["config"]}
                      for r in summary["applied"]]
    return out


OUTPUT_FORMATS = ("tar", "web")


def compile(model, target="native", output=None, *, target_options=None, opt_level=3,  # noqa: A001 (TVM's name)
            input_shapes=None, disabled_passes=(), pass_config=None, tuning_records=None, dump_ir=(),
            dump_dir=None, progress=None, output_format="tar", value_ranges=None, mixed_precision=None,
            mixed_precision_ops=None, shipped_records=True) -> CompileResult:
    """Compile an ONNX model for a target, as `tvmc compile`; save it as a mod.tar when `output`
    is given.

    model:           path of an .onnx file, or an onnx.ModelProto
    target:          shipped target name ("native", "x86", "x86-avx2", "x86-64", optionally with
                     LLVM-style overrides such as "x86 -mcpu=skylake-avx512"), a descriptor YAML
                     path, or a resolved tvmc.target.Target
    output:          path of the mod.tar to write (into an existing folder), or None
    output_format:   "tar" (mod.tar), or "web" (wasm targets): `output` is then a folder with the
                     model files, the ES-module runtime tvmc.js and an index.html page
                     (tvmc.package.save_web)
    target_options:  {descriptor field: value} overrides (as --target-option)
    opt_level:       0..3
    input_shapes:    {input name: [d0, d1, ...]} fixing symbolic dimensions
    value_ranges:    {input name: (lo, hi)}: every value of that input lies in [lo, hi] at run
                     time (as --value-range); bounds Range, Expand and ConstantOfShape whose shape
                     inputs are computed from it (docs/dynamic_shapes.md)
    disabled_passes: pass names to skip ("A,B" or a list)
    pass_config:     {"Pass.option": value}
    tuning_records:  path of a `tvmc tune` records file to apply
    shipped_records: apply the records tvmc ships for the target's descriptor (configs/tuning/,
                     measured on the GPU the descriptor names) where tuning_records has none;
                     False: the fallback rules there
    mixed_precision: None, or "float16": convolutions and matrix products (and the elementwise
                     and data-movement ops that follow them) compute in float16 with float32
                     accumulation, weights stored in float16 (passes/to_mixed_precision.py); on
                     GPUs with tensor cores they run on them
    mixed_precision_ops: the operators converted (tvmc's names, "nn.conv2d,nn.dense" or a list;
                     default conv2d, conv2d_transpose, dense, matmul)
    dump_ir:         stages to dump ("graph", "tir", "ll", "asm"), into `dump_dir` (default: the
                     output's folder, else the working directory)
    progress:        progress(stage, done, total) called as codegen advances

    Raises:
        TypeError, ValueError: an argument of the wrong type or value (the message names it)
        ModelError (exit code 2): the model file is missing, unreadable or invalid;
            UnsupportedOpError (a ModelError) lists every operator tvmc lacks
        TargetError (3): unknown target name, invalid descriptor, option or CPU name
        PassError (4): unknown pass name or bad pass option
        ScheduleError (5): an operator has no implementation for the target
        CodegenError (6): LLVM or the linker failed
        ArtifactError (7): the output cannot be written (its folder does not exist, or it is not a
            regular file: a folder, a device, a FIFO, or a file the compile reads)
        TuningError (9): the tuning records file is missing or unreadable
    """
    import time

    from tvmc.driver import compile_model
    from tvmc.package import save_artifact, save_web

    model = _model(model)
    output = _path("output", output, optional=True)
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, not {output_format!r}")
    reads = ([model] if isinstance(model, str) else []) + ([os.fspath(tuning_records)] if tuning_records else [])
    if output is not None and output_format == "tar":
        check_output_path(output, ArtifactError, "artifact", reads)
    if dump_dir is None and dump_ir:
        dump_dir = str(Path(output).parent) if output else "."
    options = _compile_options(opt_level, input_shapes, disabled_passes, pass_config, tuning_records,
                               dump_ir, dump_dir, value_ranges, mixed_precision, mixed_precision_ops, shipped_records)
    resolved = _resolve(target, target_options)
    module = compile_model(model, resolved, options, progress=progress)
    result = CompileResult(module, resolved, options, model if isinstance(model, str) else "<ModelProto>")
    if output is not None:
        t0 = time.perf_counter()
        save = save_web if output_format == "web" else save_artifact
        result.output = str(save(module, output, reads))
        result.package_s = time.perf_counter() - t0
    return result


# ---------------------------------------------------------------------------------------------
# run


def _fill(shape, dtype, fill_mode: str, rng) -> np.ndarray:
    """zeros, ones, or random: floats uniform in [0, 1), integers uniform in [0, 10), bools a fair coin."""
    dt = np.dtype(dtype)
    if fill_mode == "zeros":
        return np.zeros(shape, dt)
    if fill_mode == "ones":
        return np.ones(shape, dt)
    if dt.kind == "f":
        return rng.random(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    return rng.integers(0, 10, shape).astype(dt)


NPZ_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip
NPY_MAGIC = b"\x93NUMPY"


def read_inputs(path) -> dict:
    """Arrays of an .npz file keyed by input name (numeric or bool arrays only).

    Raises InputError (one line naming the file) on a missing or non-regular file, a file that
    is not an .npz (saying what it is when it can: a .npy array, random bytes), and an array
    that is not numeric (strings, objects).
    """
    path = os.fspath(path)
    with open_regular(path, InputError, "an .npz file of inputs") as f:
        magic = f.read(6)
        f.seek(0)
        if magic.startswith(NPY_MAGIC):
            raise InputError(f"{path}: is a .npy file (one array); inputs must be an .npz keyed by input name, "
                             f"e.g. np.savez(path, name=array)")
        if not magic.startswith(NPZ_MAGICS):
            raise InputError(f"{path}: not an .npz file (no zip signature; write it with np.savez)")
        _check_npz_sizes(path, f)
        try:
            with np.load(f, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except ValueError as e:
            if "allow_pickle" in str(e):
                raise InputError(f"{path}: holds object arrays; inputs must be numeric or bool arrays") from None
            raise InputError(f"{path}: cannot read inputs as .npz: {_first_line(e)}") from None
        except Exception as e:  # zipfile.BadZipFile, OSError, EOFError on damaged files
            raise InputError(f"{path}: cannot read inputs as .npz: {type(e).__name__}: {_first_line(e)}") from None
    for name, arr in arrays.items():
        if arr.dtype.kind not in "biuf":
            raise InputError(f"{path}: input '{name}' has dtype {arr.dtype.str} ({arr.dtype.kind!r} kind); "
                             f"inputs must be numeric or bool arrays")
    return arrays


MAX_INPUTS_BYTES = 16 << 30   # the arrays of one --inputs .npz, uncompressed
MAX_INPUT_MEMBERS = 4096


def _check_npz_sizes(path: str, f) -> None:
    """Refuse an .npz that has more than MAX_INPUT_MEMBERS arrays, whose arrays would take more
    than MAX_INPUTS_BYTES once read (the zip entries' uncompressed sizes, which bound what is
    decompressed), or whose .npy headers declare more data than their entries hold (numpy would
    allocate what a header declares): checked on the zip's directory and the arrays' headers,
    before any array data is read."""
    import zipfile

    from numpy.lib import format as npy

    try:
        with zipfile.ZipFile(f) as z:
            infos = z.infolist()
            if len(infos) > MAX_INPUT_MEMBERS:
                raise InputError(f"{path}: {len(infos)} arrays, more than the limit of {MAX_INPUT_MEMBERS}")
            total = sum(i.file_size for i in infos)
            if total > MAX_INPUTS_BYTES:
                raise InputError(f"{path}: its arrays hold {total} bytes, more than the limit of {MAX_INPUTS_BYTES} "
                                 f"for the inputs of a run")
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue
                with z.open(info) as member:
                    version = npy.read_magic(member)
                    read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
                    shape, _, dtype = read_header(member)
                    declared = math.prod(shape) * dtype.itemsize
                    if declared > info.file_size:
                        raise InputError(f"{path}: array '{info.filename[:-4][:80]}' declares shape {list(shape)} "
                                         f"({declared} bytes), more than its {info.file_size} bytes in the file")
    except InputError:
        raise
    except Exception as e:  # zipfile.BadZipFile, OSError, EOFError, ValueError on damaged files
        raise InputError(f"{path}: cannot read inputs as .npz: {type(e).__name__}: {_first_line(e)}") from None
    finally:
        f.seek(0)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


@dataclass
class RunResult:
    """What tvmc.run did.

    artifact:     path of the mod.tar
    inputs:       {input name: "given" or the fill mode that made it}, in the model's order
    input_arrays: {input name: np.ndarray} as fed to the model
    outputs:      {output name: np.ndarray}
    timing:       None, or benchmark statistics in ms per run: mean_ms, median_ms, min_ms,
                  max_ms, std_ms, repeat, number (tvmc.runtime.benchmark)
    profile:      None, or one dict per kernel (see `profile_rows`): name, calls, total_ms,
                  mean_ms, share, flops, gflop_s; plus profile_runs, and profile_clock (how
                  each kernel was timed: from Python, or with the device's events)
    device:       None for a CPU artifact run on this host; else {"name": the device as its
                  driver names it, "cuda_graph": whether run() replayed a CUDA graph (None
                  where the runtime has none), "cuda_graph_off": why not (None when it did or
                  where the runtime has none)}
    """

    artifact: str
    inputs: dict
    input_arrays: dict
    outputs: dict
    timing: dict | None = None
    profile: list | None = None
    profile_runs: int = 0
    profile_clock: str = "each kernel call timed from Python"
    device: dict | None = None

    def top_classes(self, k: int) -> dict:
        """{output name: [(class index, score), ...] (k best, highest first)} for each output with
        at most one non-singleton axis ([N], [1, N], [1, N, 1, 1]); other outputs map to None."""
        out = {}
        for name, arr in self.outputs.items():
            if sum(d > 1 for d in arr.shape) > 1:
                out[name] = None
                continue
            flat = arr.reshape(-1)
            order = np.argsort(-flat.astype(np.float64), kind="stable")[:k]
            out[name] = [(int(c), float(flat[c])) for c in order]
        return out

    def to_json(self, top: int | None = None, outputs_file: str | None = None) -> dict:
        """The `tvmc run --json` document (docs/json.md): inputs, outputs' names, shapes, dtypes
        and statistics, timing, profile, the device, and the top-`top` classes when asked."""
        def stats(arr):
            if not arr.size or arr.dtype.kind not in "fiub":
                return {"min": None, "max": None, "mean": None}
            a = arr.astype(np.float64)
            return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean())}

        doc = {
            "artifact": self.artifact,
            "inputs": [{"name": n, "shape": list(self.input_arrays[n].shape), "dtype": self.input_arrays[n].dtype.name,
                        "source": src} for n, src in self.inputs.items()],
            "outputs": [{"name": n, "shape": list(a.shape), "dtype": a.dtype.name, **stats(a)}
                        for n, a in self.outputs.items()],
            "outputs_file": outputs_file,
            "timing": self.timing,
            "profile": None if self.profile is None else {"runs": self.profile_runs, "kernels": self.profile},
            "device": self.device,
        }
        if top is not None:
            doc["top"] = {name: None if best is None else [{"class": c, "score": s} for c, s in best]
                          for name, best in self.top_classes(top).items()}
        return json_document("run", doc)


def profile_rows(raw: list, kernel_flops: dict) -> list:
    """Per-kernel profile rows from GraphExecutor.profile's `raw` rows and metadata's
    kernel_flops: name, calls (per run), total_ms (per run), mean_ms (per call), share (of the
    kernels' total), flops (one call; None when unknown) and gflop_s (None when unknown), sorted
    by total time, largest first."""
    total = sum(r["total_ms"] for r in raw) or 1.0
    rows = []
    for r in raw:
        flops = kernel_flops.get(r["name"])
        seconds = r["total_ms"] / 1e3
        rows.append({**r, "mean_ms": r["total_ms"] / r["calls"], "share": r["total_ms"] / total, "flops": flops,
                     "gflop_s": flops * r["calls"] / seconds / 1e9 if flops and seconds > 0 else None})
    return sorted(rows, key=lambda r: -r["total_ms"])


def _create_executor(artifact, device, cuda_graph: bool, target=None):
    """tvmc.runtime.create_executor(artifact, device, target), except that a CUDA artifact's
    executor replays a CUDA graph only with `cuda_graph` (CUDAExecutor's argument of that name)."""
    from tvmc.package import Artifact, load_artifact
    from tvmc.runtime import create_executor

    if cuda_graph:
        return create_executor(artifact, device, target)
    if not isinstance(artifact, Artifact):
        artifact = load_artifact(artifact)
    from tvmc.backends import backend_of_artifact

    if backend_of_artifact(artifact).name == "cuda":
        return create_executor(artifact, device, target, cuda_graph=False)
    return create_executor(artifact, device, target)


def _device_of(executor) -> dict | None:
    """RunResult.device for `executor` (None without a device_name: a CPU artifact here)."""
    name = getattr(executor, "device_name", None)
    if not name:
        return None
    return {"name": name, "cuda_graph": getattr(executor, "cuda_graph", None),
            "cuda_graph_off": getattr(executor, "cuda_graph_off", None)}


def run(artifact, inputs=None, *, fill_mode="random", seed=0, repeat=None, number=None, threads=None,
        profile=False, device=None, on_device=None, cuda_graph=True, target=None) -> RunResult:
    """Run a compiled mod.tar on this machine, as `tvmc run`.

    artifact:  path of the mod.tar (or a tvmc.package.Artifact)
    inputs:    {input name: array}, or the path of an .npz keyed by input name, or None; inputs
               it leaves out are made by `fill_mode` (TVM's tvmc run does the same)
    fill_mode: "zeros", "ones" or "random" (seeded with `seed`: floats uniform in [0, 1),
               integers in [0, 10), bools a fair coin)
    repeat, number: time the run: `repeat` measurements, each the mean of `number` runs (either
               given alone makes the other 1); both None runs the model once, untimed
    threads:   threads of the kernels' parallel loops (default: OMP_NUM_THREADS, else all cores)
    profile:   also run kernel by kernel, timing each kernel (repeat x number runs, at least 1, after
               one warm-up run; times in ms per run): from Python on CPUs, with the device's events
               (OpenCL profiling events, CUDA events) on GPUs; plain runs and timing use the
               library's whole-graph entry (CPU) or the CUDA graph
    device:    the device of a GPU artifact ("opencl", "opencl:PLATFORM:DEVICE", "cuda:ORDINAL"; default: the
               first); None or "cpu" for CPU artifacts
    on_device: called with the device's name once the executor has chosen one (GPU runtimes), followed,
               for CUDA, by how run() launches in parentheses ("(CUDA graph)", or "(kernel by kernel, no
               CUDA graph: why)")
    target:    a --target spec (shipped name or descriptor file) whose emulator and C compiler run a
               CPU artifact of another architecture; its code facts must be the artifact's. None:
               the shipped descriptor that matches them. Commands in metadata.json are never run.
    cuda_graph: CUDA artifacts: capture the graph once and replay it on each run (default); False
               launches kernel by kernel. A graph with a run-time loop is always launched kernel by
               kernel (tvmc.runtime.cuda); RunResult.device says which mode ran. Ignored elsewhere.

    Raises:
        TypeError, ValueError: an argument of the wrong type or value (the message names it)
        ArtifactError (exit code 7): the artifact is missing or invalid, or cannot run here
            (another architecture, CPU features this host lacks, no device, a CUDA graph the
            driver refuses to capture)
        InputError (8): an input name the model does not have, a wrong shape or dtype, or an
            .npz file that cannot be read
    """
    from tvmc.package import Artifact
    from tvmc.runtime import benchmark

    if not isinstance(artifact, Artifact):
        artifact = _path("artifact", artifact)
    _choice("fill_mode", fill_mode, FILL_MODES)
    repeat = _int("repeat", repeat, 1, optional=True)
    number = _int("number", number, 1, optional=True)
    threads = _int("threads", threads, 1, optional=True)
    origin = ""
    if inputs is not None and not isinstance(inputs, dict):
        origin = _path("inputs", inputs)
        inputs = read_inputs(origin)
    given = dict(inputs or {})

    executor = _create_executor(artifact, device, cuda_graph, target)
    try:
        device_info = _device_of(executor)
        if on_device is not None and device_info is not None:
            mode = getattr(executor, "launch_mode", None)
            on_device(device_info["name"] + (f" ({mode})" if mode else ""))
        unknown = sorted(set(given) - set(executor.input_names))
        if unknown:
            raise InputError(f"{origin + ': ' if origin else ''}unknown input{'s' * (len(unknown) > 1)} "
                             f"{', '.join(unknown)}; the model's inputs are: {', '.join(executor.input_names)}")
        if threads:
            executor.set_num_threads(threads)
        rng = np.random.default_rng(seed)
        arrays, sources = {}, {}
        for name in executor.input_names:
            if name in given:
                arrays[name], sources[name] = np.asarray(given[name]), "given"
            else:
                arrays[name], sources[name] = _fill(*executor.input_info(name), fill_mode, rng), fill_mode
            executor.set_input(name, arrays[name])

        timed = repeat is not None or number is not None
        repeat, number = repeat or 1, number or 1
        result = RunResult(getattr(artifact, "path", artifact), sources, arrays, {}, device=device_info)
        if timed:
            result.timing = benchmark(executor, repeat, number)
        else:
            executor.run()
        if profile:
            result.profile_runs = repeat * number
            kernel_flops = executor.artifact.metadata.get("kernel_flops") or {}
            result.profile = profile_rows(executor.profile(result.profile_runs), kernel_flops)
            result.profile_clock = getattr(executor, "profile_clock", result.profile_clock)
        result.outputs = {name: executor.get_output(i) for i, name in enumerate(executor.output_names)}
        return result
    finally:
        close = getattr(executor, "close", None)  # a GPU's memory is freed now, not when collected
        if close is not None:
            close()


# ---------------------------------------------------------------------------------------------
# tune

_TASK_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_task_indices(text: str) -> tuple:
    """'0,2-4' -> (0, 2, 3, 4): comma-separated indices and inclusive ranges, sorted, each once.
    Raises ValueError on anything else (an empty item, a reversed range, a negative number)."""
    out = set()
    for item in str(text).split(","):
        m = _TASK_RANGE.match(item)
        if not m:
            raise ValueError(f"'{item.strip()}' is not a task index or range (e.g. 0,2-4)")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise ValueError(f"'{item.strip()}': a range runs from low to high")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


@dataclass
class TaskList:
    """A model's tuning tasks, as `tvmc tune --list-tasks` prints them.

    model, target: what they were extracted for (the model path, the resolved Target)
    tasks:         tvmc.autotune.task.Task list, index = position
    space_sizes:   config-space size of each task
    """

    model: str
    target: object
    tasks: list
    space_sizes: list

    @property
    def num_workloads(self) -> int:
        """Distinct kernel workloads among the tasks (what compile's record summary counts)."""
        from tvmc.autotune.task import workload_count

        return workload_count(t.key for t in self.tasks)

    def rows(self) -> list:
        """One dict per task: index, op, implementation, workload, flops (one call), calls,
        config_space_size."""
        return [{"index": k, "op": t.op, "implementation": t.impl, "workload": t.describe(), "flops": t.flops,
                 "calls": t.calls, "config_space_size": size}
                for k, (t, size) in enumerate(zip(self.tasks, self.space_sizes))]

    def to_json(self) -> dict:
        """The `tvmc tune --list-tasks --json` document (docs/json.md)."""
        return json_document("tasks", {"model": self.model, "target": self.target.to_dict(),
                                       "num_tasks": len(self.tasks), "num_workloads": self.num_workloads,
                                       "tasks": self.rows()})


def list_tasks(model, target="native", *, target_options=None, opt_level=3, input_shapes=None,
               value_ranges=None, mixed_precision=None, mixed_precision_ops=None) -> TaskList:
    """The tuning tasks of a model, as `tvmc tune --list-tasks`: one per (implementation, kernel
    workload) after the graph passes of `opt_level` (tvmc.autotune.task); input_shapes,
    value_ranges and mixed precision as for tvmc.compile.

    Raises TypeError, ValueError (bad arguments), ModelError (2), TargetError (3), PassError (4).
    """
    from tvmc.autotune.task import extract_tasks

    model = _model(model)
    options = _compile_options(opt_level, input_shapes, (), None, value_ranges=value_ranges,
                               mixed_precision=mixed_precision, mixed_precision_ops=mixed_precision_ops)
    resolved = _resolve(target, target_options)
    tasks = extract_tasks(model, resolved, options)
    return TaskList(model if isinstance(model, str) else "<ModelProto>", resolved, tasks,
                    [len(t.config_space(resolved)) for t in tasks])


@dataclass
class TuneResult:
    """What tvmc.tune did: `tasks` (the model's TaskList), `indices` (the tuned tasks' indices in
    it), `results` (one tvmc.autotune.tune.TaskResult per tuned task) and the `records` path."""

    tasks: TaskList
    indices: tuple
    results: list
    records: str

    def to_json(self) -> dict:
        """The `tvmc tune --json` document (docs/json.md): per tuned task its listing fields plus
        trials, best and fallback GFLOP/s, speed-up (null when not measured), best config."""
        from tvmc.autotune.tune import chosen_results

        chosen = chosen_results(self.results)
        per_workload = Counter((r.task.op, r.task.key[1]) for r in self.results)
        listed = self.tasks.rows()
        tasks = []
        for k, r in zip(self.indices, self.results):
            tasks.append({**listed[k], "trials": r.trials, "resumed": r.resumed, "best_gflop_s": r.best_flops / 1e9,
                          "fallback_gflop_s": r.fallback_flops / 1e9,
                          "speedup": r.speedup if r.speedup == r.speedup else None, "best_config": r.best_config,
                          "fastest_of_workload": per_workload[(r.task.op, r.task.key[1])] == 1 or id(r) in chosen,
                          "errors": {str(code): n for code, n in r.errors.items()}, "seconds": r.seconds})
        return json_document("tune", {"model": self.tasks.model, "target": self.tasks.target.to_dict(),
                                      "records": self.records, "num_tasks": len(self.tasks.tasks),
                                      "num_workloads": self.tasks.num_workloads, "tasks": tasks})


def tune(model, target="native", records="records.json", *, target_options=None, trials=200, tuner="xgb",
         tasks=None, early_stopping=None, number=4, repeat=3, min_repeat_ms=0.0, timeout_s=10.0, parallel=None,
         prior_records=None, input_shapes=None, value_ranges=None, opt_level=3, task_list=None,
         progress=None, mixed_precision=None, mixed_precision_ops=None, time_budget_s=None) -> TuneResult:
    """Tune a model's kernels on this machine, as `tvmc tune`, appending records to `records`
    (resumed when it exists).

    model, target, target_options, input_shapes, value_ranges, opt_level, mixed_precision,
    mixed_precision_ops: as for tvmc.compile (use the compile's: tasks are taken after its passes)
    trials:          total measurements, split over the tuned tasks in proportion to their FLOPs
    tuner:           "xgb", "ga", "random" or "grid"
    tasks:           indices of the tasks to tune ("0,2-4" or a list of ints; see list_tasks),
                     None for all
    early_stopping:  stop a task after this many trials without a new best
    time_budget_s:   seconds for the whole search, shared by the tasks in proportion to their
                     trials (a task stops after the batch that passes its share); None: no limit
    number, repeat, min_repeat_ms, timeout_s, parallel: measurement (tvmc.autotune.measure)
    prior_records:   records whose configs are not measured again; other tasks' train xgb
    task_list:       a TaskList of this model and target from list_tasks, not to extract again
    progress:        a tvmc.autotune.tune.Progress (default: the progress line on stdout)

    Raises:
        TypeError, ValueError: an argument of the wrong type or value (the message names it)
        ModelError (2), TargetError (3), PassError (4): as for compile
        TuningError (9): a task index out of range, a records file that cannot be read or written,
            a CPU target of another architecture than this host's (e.g. arm on x86-64)
    """
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.autotune.tune import TuneOptions, tune_tasks
    from tvmc.autotune.tuner import TUNERS
    from tvmc.backends import backend_for

    records = _path("records", records)
    _int("trials", trials, 1)
    _choice("tuner", tuner, TUNERS)
    _int("early_stopping", early_stopping, 1, optional=True)
    measure = MeasureOptions(number=_int("number", number, 1), repeat=_int("repeat", repeat, 1),
                             min_repeat_ms=float(min_repeat_ms), timeout_s=float(timeout_s),
                             parallel=_int("parallel", parallel if parallel is not None else os.cpu_count() or 1, 1))
    if measure.min_repeat_ms < 0 or measure.timeout_s <= 0:
        raise ValueError("min_repeat_ms must be >= 0 and timeout_s > 0")
    if time_budget_s is not None and (isinstance(time_budget_s, bool) or not isinstance(time_budget_s, (int, float))
                                      or not time_budget_s > 0):
        raise ValueError(f"time_budget_s must be a positive number of seconds, got {time_budget_s!r}")
    options = TuneOptions(trials=trials, tuner=tuner, early_stopping=early_stopping, time_budget_s=time_budget_s,
                          prior_records=_path("prior_records", prior_records, optional=True), measure=measure)
    if task_list is None:
        task_list = list_tasks(model, target, target_options=target_options, opt_level=opt_level,
                               input_shapes=input_shapes, value_ranges=value_ranges, mixed_precision=mixed_precision,
                               mixed_precision_ops=mixed_precision_ops)
    n = len(task_list.tasks)
    if tasks is None:
        indices = tuple(range(n))
    elif isinstance(tasks, str):
        indices = parse_task_indices(tasks)
    else:
        indices = tuple(sorted({_int("task index", k, 0) for k in tasks}))
    outside = [k for k in indices if k >= n]
    if outside:
        raise TuningError(f"{task_list.model}: task index {outside[0]} out of range: the model has {n} tasks "
                          f"(0-{n - 1}; see tvmc tune --list-tasks)" if n else f"{task_list.model}: the model has no tuning tasks")
    target = task_list.target
    missing = backend_for(target).measure_missing(target)
    if missing:
        raise TuningError(missing)
    results = tune_tasks([task_list.tasks[k] for k in indices], target, records, options, progress)
    return TuneResult(task_list, indices, results, records)
