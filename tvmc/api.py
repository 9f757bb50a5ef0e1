"""Python API: one call per command, in the spirit of TVM's `tvmc.compile(model, target=...)`.

    import tvmc

    options = tvmc.CompileOptions(input_shapes={"data": [1, 3, 224, 224]})
    result = tvmc.compile("model.onnx", "native", "model.tar", options)
    ran = tvmc.run("model.tar", inputs={"data": array}, repeat=10)
    ran.outputs["prob"], ran.timing["median_ms"]
    tuned = tvmc.tune("model.onnx", "native", "records.json", tvmc.TuneOptions(trials=200),
                      compile_options=options, tasks="0,2-4")

The functions accept what the CLI accepts (a target name, a descriptor YAML path or a Target;
options objects: tvmc.CompileOptions, tvmc.TuneOptions, tvmc.MeasureOptions, whose fields may
also be given one by one as keyword arguments) and check their arguments first, raising
TypeError or ValueError that name the argument or field. Each returns a result object whose
`to_json()` is the document `tvmc <command> --json` prints (docs/json.md; every document carries
"tvmc_json": JSON_SCHEMA_VERSION and its "kind"). The CLI commands are built on these functions.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvmc.checks import choice_arg, int_arg, path_arg, positive_number_arg
from tvmc.constants import __version__
from tvmc.errors import ArtifactError, InputError, ModelError, TuningError
from tvmc.paths import check_output_path, check_regular, open_regular
from tvmc.te.expr import is_float

# Version of the --json documents (docs/json.md, docs/tvmc-json.schema.json). A field is only
# ever added within a version; a renamed or removed field makes a new version.
JSON_SCHEMA_VERSION = 1

FILL_MODES = ("zeros", "ones", "random")


def json_document(kind: str, body: dict) -> dict:
    """A --json document: the schema version, its kind and tvmc's version, then `body`, with every
    non-finite float written as a string (json_finite), so the document is valid JSON."""
    return json_finite({"tvmc_json": JSON_SCHEMA_VERSION, "kind": kind, "tvmc_version": __version__, **body})


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
# Argument checks (tvmc.checks: TypeError for a wrong type, ValueError for a wrong value, naming
# the argument) and options objects


def _options(cls, options, fields: dict, call: str):
    """`options` (a `cls` dataclass, or None for cls's defaults) with `fields` ({field name:
    value}, the keyword arguments a call gave one by one) replaced. Raises TypeError when
    `options` is no `cls` or a name is no field of cls, and what cls raises for a bad value."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in fields if k not in names]
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument '{unknown[0]}' (options are the fields of "
                        f"{cls.__name__}: {', '.join(names)})")
    if options is None:
        return cls(**fields)
    if not isinstance(options, cls):
        raise TypeError(f"options must be a {cls.__module__}.{cls.__name__}, got {type(options).__name__}")
    return dataclasses.replace(options, **fields) if fields else options


def _split(fields: dict, cls) -> dict:
    """The entries of `fields` named after fields of dataclass `cls`, taken out of `fields`."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: fields.pop(k) for k in list(fields) if k in names}


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
    path = path_arg("model", model)
    check_regular(path, ModelError, "an ONNX model file")
    return path


# ---------------------------------------------------------------------------------------------
# compile


def kernel_counts(metadata: dict, graph_json: dict) -> tuple:
    """(distinct kernels, kernel calls per run, load-time kernel calls): metadata's num_kernels /
    num_kernel_calls, else counted from the graph JSON's tvm_op nodes; the load-time calls (run
    once when the artifact loads, tvmc.mod_json.load_time) from the graph JSON."""
    from tvmc.mod_json import load_time, runs_kernel

    ops = [n for n in graph_json.get("nodes", []) if runs_kernel(n)]
    load = sum(1 for n in ops if load_time(n))
    distinct = metadata.get("num_kernels")
    calls = metadata.get("num_kernel_calls")
    return (len({n["attrs"]["func_name"] for n in ops}) if distinct is None else distinct,
            len(ops) - load if calls is None else calls, load)


def kernels_line(distinct: int, calls: int, load: int) -> str:
    """The kernel counts as the compile summary and `tvmc inspect` print them."""
    return f"{distinct} distinct, {calls} calls" + (f" per run, {load} at load time" if load else "")


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
        distinct, calls, load = kernel_counts(meta, self.module.graph_json)
        return json_document("compile", {
            "model": self.model,
            "output": self.output,
            "target": self.target.to_dict(),
            "target_hash": self.target.hash,
            "tuning_key": self.target.tuning_key,
            "opt_level": self.options.opt_level,
            "inputs": meta.get("inputs", []),
            "outputs": meta.get("outputs", []),
            "size_vars": meta.get("size_vars", []),
            "kernels": {"distinct": distinct, "calls": calls, "load_calls": load},
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


def compile(model, target="native", output=None, options=None, *, target_options=None,  # noqa: A001 (TVM's name)
            output_format="tar", progress=None, **fields) -> CompileResult:
    """Compile an ONNX model for a target, as `tvmc compile`; save it as a mod.tar when `output`
    is given.

    model:           path of an .onnx file, or an onnx.ModelProto
    target:          shipped target name ("native", "x86", "x86-avx2", "x86-64", optionally with
                     LLVM-style overrides such as "x86 -mcpu=skylake-avx512"), a descriptor YAML
                     path, or a resolved tvmc.target.Target
    output:          path of the mod.tar to write (into an existing folder), or None
    options:         a tvmc.CompileOptions (tvmc.driver.CompileOptions: opt level, passes, input
                     shapes, value ranges, mixed precision, tuning records, IR dumps, ...; each
                     field's meaning and checks are there), or None for its defaults
    **fields:        CompileOptions fields given one by one (opt_level=2, input_shapes={"x": [1, 8]},
                     as before options objects); they replace those fields of `options`
    output_format:   "tar" (mod.tar), or "web" (wasm targets): `output` is then a folder with the
                     model files, the ES-module runtime tvmc.js and an index.html page
                     (tvmc.package.save_web)
    target_options:  {descriptor field: value} overrides (as --target-option)
    progress:        progress(stage, done, total) called as codegen advances

    IR dumps (options.dump_ir) go into options.dump_dir, by default the output's folder, else the
    working directory.

    Raises:
        TypeError, ValueError: an argument or option of the wrong type or value (the message names it)
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

    from tvmc.driver import CompileOptions, compile_model
    from tvmc.package import save_artifact, save_web

    model = _model(model)
    output = path_arg("output", output, optional=True)
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, not {output_format!r}")
    options = _options(CompileOptions, options, fields, "compile")
    reads = ([model] if isinstance(model, str) else []) + ([options.tuning_records] if options.tuning_records else [])
    if output is not None and output_format == "tar":
        check_output_path(output, ArtifactError, "artifact", reads)
    if options.dump_dir is None and options.dump_ir:
        options = dataclasses.replace(options, dump_dir=str(Path(output).parent) if output else ".")
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
    if is_float(dt.name):
        return rng.random(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    return rng.integers(0, 10, shape).astype(dt)


NPZ_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip
NPY_MAGIC = b"\x93NUMPY"


def read_inputs(path) -> dict:
    """Arrays of an .npz file keyed by input name (numeric or bool arrays only; 2-byte void
    arrays are bfloat16: numpy writes ml_dtypes' bfloat16 arrays so).

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
        if arr.dtype == np.dtype("V2"):
            arrays[name] = arr = arr.view("bfloat16")
        if arr.dtype.kind not in "biuf" and not is_float(arr.dtype.name):
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


def profile_rows(raw: list, kernel_flops: dict, flops_programs: dict | None = None, sizes: list | None = None) -> list:
    """Per-kernel profile rows from GraphExecutor.profile's `raw` rows and metadata's
    kernel_flops: name, calls (per run), total_ms (per run), mean_ms (per call), share (of the
    kernels' total), flops (one call; None when unknown) and gflop_s (None when unknown), sorted
    by total time, largest first. A kernel with symbolic extents counts the FLOPs of its program
    in `flops_programs` (metadata kernel_flops_programs) at the profiled runs' `sizes` (the
    executor's profile_sizes), never those of the upper bounds: unknown without the sizes."""
    from tvmc.graph.symbolic import eval_postfix

    total = sum(r["total_ms"] for r in raw) or 1.0
    rows = []
    for r in raw:
        program = (flops_programs or {}).get(r["name"])
        if program is not None:
            flops = eval_postfix(program, sizes) if sizes is not None else None
        else:
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
        profile=False, device=None, on_device=None, cuda_graph=True, target=None, cluster=None,
        device_key=None) -> RunResult:
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
    cluster, device_key: run on device `device_key` of the Ray cluster at `cluster` (`ray://HOST:10001`,
               `HOST:6379`; tvmc.cluster.run_on_device) instead of this machine: the artifact and the
               inputs travel there, the outputs and timings come back; the other arguments as here

    Raises:
        TypeError, ValueError: an argument of the wrong type or value (the message names it)
        ArtifactError (exit code 7): the artifact is missing or invalid, or cannot run here
            (another architecture, CPU features this host lacks, no device, a CUDA graph the
            driver refuses to capture)
        InputError (8): an input name the model does not have, a wrong shape or dtype, or an
            .npz file that cannot be read
        ClusterError (10): with `cluster`, the cluster cannot be reached or has no device `device_key`
    """
    from tvmc.package import Artifact
    from tvmc.runtime import benchmark

    if not isinstance(artifact, Artifact):
        artifact = path_arg("artifact", artifact)
    choice_arg("fill_mode", fill_mode, FILL_MODES)
    repeat = int_arg("repeat", repeat, 1, optional=True)
    number = int_arg("number", number, 1, optional=True)
    threads = int_arg("threads", threads, 1, optional=True)
    origin = ""
    if inputs is not None and not isinstance(inputs, dict):
        origin = path_arg("inputs", inputs)
        inputs = read_inputs(origin)
    given = dict(inputs or {})
    if cluster is not None:
        from tvmc.cluster import cluster_session, device_resource, run_on_device

        if isinstance(artifact, Artifact):
            raise TypeError("artifact: a run on a cluster takes the mod.tar's path, not a loaded Artifact")
        device_resource(device_key)
        with cluster_session(cluster):
            return run_on_device(run, artifact, device_key, given, on_device, fill_mode=fill_mode, seed=seed,
                                 repeat=repeat, number=number, threads=threads, profile=profile, device=device,
                                 cuda_graph=cuda_graph, target=target)

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
            meta = executor.artifact.metadata
            raw = executor.profile(result.profile_runs)
            result.profile = profile_rows(raw, meta.get("kernel_flops") or {}, meta.get("kernel_flops_programs"),
                                          getattr(executor, "profile_sizes", None))
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
    options:       the tvmc.driver.CompileOptions whose graph passes they were taken after
    """

    model: str
    target: object
    tasks: list
    space_sizes: list
    options: object = None

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


def list_tasks(model, target="native", options=None, *, target_options=None, dim_sizes=None, **fields) -> TaskList:
    """The tuning tasks of a model, as `tvmc tune --list-tasks`: one per (implementation, kernel
    workload) after the graph passes that a compile with `options` (a tvmc.CompileOptions, or
    None for its defaults; **fields replace its fields, as for tvmc.compile) runs
    (tvmc.autotune.task). Use the options of the compile that will apply the records: the opt
    level, passes, input shapes, value ranges and mixed precision decide the tasks.
    dim_sizes: {size variable: [sizes]} (`--dim-sizes seq=32,128,512`), needed when the options
    give size ranges: the tasks of the static graphs at those sizes (driver.extract_tasks).

    Raises TypeError, ValueError (bad arguments), ModelError (2), TargetError (3), PassError (4),
    TuningError (9: size ranges without dim_sizes).
    """
    from tvmc.driver import CompileOptions, extract_tasks

    model = _model(model)
    options = _options(CompileOptions, options, fields, "list_tasks")
    resolved = _resolve(target, target_options)
    tasks = extract_tasks(model, resolved, options, _dim_sizes(dim_sizes))
    return TaskList(model if isinstance(model, str) else "<ModelProto>", resolved, tasks,
                    [len(t.config_space(resolved)) for t in tasks], options)


def _dim_sizes(value) -> dict:
    """{size variable: [sizes]} checked: names are strings, sizes lists of non-negative ints."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"dim_sizes must be a dict {{size variable: [sizes]}}, got {type(value).__name__}")
    out = {}
    for name, sizes in value.items():
        sizes = [sizes] if isinstance(sizes, int) else sizes
        if not isinstance(name, str) or not isinstance(sizes, (list, tuple)) or not sizes or any(
                not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in sizes):
            raise ValueError(f"dim_sizes[{name!r}] must be a non-empty list of non-negative ints, got {sizes!r}")
        out[name] = sorted(set(sizes))
    return out


@dataclass
class TuneResult:
    """What tvmc.tune did: `tasks` (the model's TaskList), `indices` (the tuned tasks' indices in
    it), `results` (one tvmc.autotune.tune.TaskResult per tuned task) and the `records` path."""

    tasks: TaskList
    indices: tuple
    results: list
    records: str

    @property
    def stopped(self) -> str | None:
        """Why the tune stopped before its end (a cluster's device left), or None."""
        return next((r.stopped for r in self.results if r.stopped), None)

    @property
    def measured(self) -> str:
        """"emulated" when the candidates were timed under an emulator (a cluster's device started
        with `tvmc device-worker --emulate`: the times are the emulator's), else "native"."""
        return "emulated" if any(r.emulated for r in self.results) else "native"

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
                                      "num_workloads": self.tasks.num_workloads, "tasks": tasks,
                                      "stopped": self.stopped, "measured": self.measured})


def tune(model, target="native", records="records.json", options=None, *, compile_options=None, tasks=None,
         target_options=None, task_list=None, progress=None, cluster=None, device_key=None, device_wait_s=60.0,
         dim_sizes=None, **fields) -> TuneResult:
    """Tune a model's kernels on this machine, as `tvmc tune`, appending records to `records`
    (resumed when it exists).

    model, target, target_options: as for tvmc.compile
    options:         a tvmc.TuneOptions (tvmc.autotune.tune.TuneOptions: trials, tuner, early
                     stopping, time budget, prior records, and `measure`, a tvmc.MeasureOptions:
                     number, repeat, min_repeat_ms, timeout_s, parallel, ...), or None for its
                     defaults
    compile_options: the tvmc.CompileOptions of the compile that will apply the records (tasks are
                     taken after its graph passes), or None for its defaults
    **fields:        fields of TuneOptions, MeasureOptions or CompileOptions given one by one
                     (trials=50, number=2, opt_level=2, input_shapes={...}, as before options
                     objects); they replace those fields of `options`, `options.measure` and
                     `compile_options`
    tasks:           indices of the tasks to tune ("0,2-4" or a list of ints; see list_tasks),
                     None for all
    task_list:       a TaskList of this model and target from list_tasks, not to extract again
                     (compile_options are then its options)
    dim_sizes:       {size variable: [sizes]}: the sizes to tune a compile with size ranges at
                     (list_tasks)
    progress:        a tvmc.autotune.tune.Progress (default: the progress line on stdout)
    cluster:         a Ray cluster's address (`ray://HOST:10001`, `HOST:6379` or `local`; tvmc.cluster):
                     candidates are built on its nodes and measured on its device `device_key`
                     (tvmc.autotune.cluster.ClusterMeasurer); None: on this machine
    device_wait_s:   seconds to wait for the device to come back when it leaves mid-tune; then the
                     tune stops with what it measured (TaskResult.stopped, TuneResult.stopped)

    Raises:
        TypeError, ValueError: an argument or option of the wrong type or value (the message names it)
        ModelError (2), TargetError (3), PassError (4): as for compile
        TuningError (9): a task index out of range, a records file that cannot be read or written,
            a CPU target of another architecture than this host's (e.g. arm on x86-64)
        ClusterError (10): the cluster cannot be reached, has no device `device_key`, or that
            device cannot measure the target
    """
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.autotune.tune import TuneOptions, tune_tasks
    from tvmc.backends import backend_for
    from tvmc.driver import CompileOptions

    records = path_arg("records", records)
    measure_fields = _split(fields, MeasureOptions)
    compile_fields = _split(fields, CompileOptions)
    options = _options(TuneOptions, options, fields, "tune")
    if measure_fields:
        options = dataclasses.replace(options, measure=dataclasses.replace(options.measure, **measure_fields))
    compile_options = _options(CompileOptions, compile_options, compile_fields, "tune")
    if task_list is None:
        task_list = list_tasks(model, target, compile_options, target_options=target_options, dim_sizes=dim_sizes)
    n = len(task_list.tasks)
    if tasks is None:
        indices = tuple(range(n))
    elif isinstance(tasks, str):
        indices = parse_task_indices(tasks)
    else:
        indices = tuple(sorted({int_arg("task index", k, 0) for k in tasks}))
    outside = [k for k in indices if k >= n]
    if outside:
        raise TuningError(f"{task_list.model}: task index {outside[0]} out of range: the model has {n} tasks "
                          f"(0-{n - 1}; see tvmc tune --list-tasks)" if n
                          else f"{task_list.model}: the model has no tuning tasks")
    target = task_list.target
    chosen = [task_list.tasks[k] for k in indices]
    if cluster is not None:
        from tvmc.autotune.cluster import ClusterMeasurer
        from tvmc.cluster import cluster_session, device_resource

        device_resource(device_key)
        device_wait_s = positive_number_arg("device_wait_s", device_wait_s, "seconds", zero=True)
        with cluster_session(cluster, device_key, target):
            results = tune_tasks(chosen, target, records, options, progress, measurer=lambda: ClusterMeasurer(
                target, options.measure, device_key, device_wait_s=device_wait_s))
        return TuneResult(task_list, indices[:len(results)], results, records)
    missing = backend_for(target).measure_missing(target)
    if missing:
        raise TuningError(missing)
    results = tune_tasks(chosen, target, records, options, progress)
    return TuneResult(task_list, indices, results, records)
