"""Runtime stage: the executor contract every runtime keeps (Executor) and what the executors
share: input checks, output lookup, the host's CPU checks, loading a library, binding and timing a
module description's calls kernel by kernel, benchmark().

The executors: tvmc.runtime.cpu.GraphExecutor (this host's CPU, through the C API inside mod.so),
tvmc.runtime.emulated (a CPU of another architecture), tvmc.runtime.wasm, tvmc.runtime.device
(OpenCL, CUDA). See tvmc_kernels.h for the ABI.
"""

from __future__ import annotations

import ctypes
import functools
import os
import statistics
import tempfile
import time
from typing import Protocol, runtime_checkable

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.package import Artifact
from tvmc.runtime.control import run_loop
from tvmc.target import host_arch

ALIGNMENT_BYTES = 64


@runtime_checkable
class Executor(Protocol):
    """What every runtime's executor does (GraphExecutor: ctypes; EmulatedExecutor: the C runner
    under an emulator; WasmExecutor: wasmtime; DeviceExecutor: OpenCL and CUDA), whatever the
    library: `tvmc run`, the API, the benchmarks and the tests use only this. The C API header
    (tvmc_kernels.h) and tvmc.js state the same contract in their languages.

    input_names, output_names  the model's inputs and outputs, in order
    num_outputs                len(output_names)
    input_info(name)           (shape tuple, dtype name) of an input
    set_input(name, array)     copy an input in; InputError (one line) on another name, shape, dtype
    run()                      run the graph once and wait for it
    get_output(index)          a host copy of an output (position or name), at its run-time shape
    profile(runs)              time every kernel over `runs` runs: [{"name", "calls", "total_ms"}];
                               an artifact with symbolic shapes then has `profile_sizes`, the size
                               variables' values of those runs (mod.json "size_vars" order)
    set_num_threads(n)         threads of the kernels' parallel loops (GPUs and wasm accept it)
    """

    input_names: list
    output_names: list

    @property
    def num_outputs(self) -> int: ...

    def input_info(self, name: str) -> tuple: ...

    def set_input(self, name: str, array) -> None: ...

    def run(self) -> None: ...

    def get_output(self, index) -> np.ndarray: ...

    def profile(self, runs: int = 1) -> list: ...

    def set_num_threads(self, n: int) -> None: ...


def _fmt_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def checked_input(name: str, array, input_names, expected) -> np.ndarray:
    """`array` as the ndarray for input `name`, which every executor's set_input takes: `expected`
    maps the model's input names to (shape tuple, dtype) and `input_names` lists them in order.

    Raises InputError (one line naming the tensor, expected vs got) on an unknown name, another
    shape or another dtype: no implicit casts."""
    if name not in expected:
        raise InputError(f"unknown input '{name}'; the model's inputs are: {', '.join(input_names)}")
    shape, dtype = expected[name]
    src = np.asarray(array)
    if tuple(src.shape) != tuple(shape) or src.dtype != np.dtype(dtype):
        hint = ""
        if src.ndim == len(shape) and src.dtype == np.dtype(dtype):  # another size of the same rank
            ranged = [d if d == g else f"1..{max(d, g)}" for d, g in zip(shape, src.shape)]
            hint = (f"; the artifact is fixed-shape: compile it for a range of sizes to run others, e.g. "
                    f"--input-shapes \"{name}:[{','.join(map(str, ranged))}]\" (or --dim-range NAME=LO..HI)")
        raise InputError(f"input '{name}': expected shape {_fmt_shape(shape)} {np.dtype(dtype).name}, "
                         f"got {_fmt_shape(src.shape)} {src.dtype.name}{hint}")
    return src


def symbolic_inputs(description: dict) -> dict:
    """{input name: its "sym_shape"} of the inputs of symbolic shape in a module description
    (tvmc.codegen.description): those whose size the C API binds to the size variables at
    set_input; empty for a static model."""
    entries = description["entries"]
    return {i["name"]: entries[i["entry"]]["sym_shape"] for i in description["inputs"]
            if "sym_shape" in entries[i["entry"]]}


def checked_symbolic_input(name: str, array, bound, dtype) -> np.ndarray:
    """`array` as a C-contiguous ndarray for input `name` of symbolic shape (`bound`: its shape at
    the variables' upper bounds, `dtype` its dtype): any shape of that rank and dtype passes here,
    the C API then checks each dimension against its range (tvmc_runtime.c). Raises InputError
    (one line naming the tensor) on another dtype or rank: no implicit casts."""
    src = np.ascontiguousarray(array)
    if src.dtype != np.dtype(dtype) or src.ndim != len(bound):
        raise InputError(f"input '{name}': expected {np.dtype(dtype).name} of {len(bound)} dimensions, got "
                         f"{src.dtype.name} of shape {_fmt_shape(src.shape)}")
    return src


class SizeBinding:
    """The size variables of a mod.json compiled for ranges (graph_json "size_vars", "symbolic_shapes",
    tvmc.graph.executor_json), bound from the input shapes for the executors that launch kernels
    from Python (tvmc.runtime.device: OpenCL, CUDA) by the rule of the C API (tvmc_runtime.c):
    set_input of an input of symbolic shape checks its dtype and rank, each dimension that is a
    variable within that variable's range (it binds the variable), each constant one equal; a run
    then evaluates every entry's shape and checks that each input's shape equals its evaluated one
    (inputs sharing a variable agree). The messages are the C API's, word for word.

    `input_entries` maps each input name to its data entry."""

    def __init__(self, graph_json: dict, input_entries: dict):
        self.vars = [(v["name"], int(v["lo"]), int(v["hi"])) for v in graph_json.get("size_vars", ())]
        self.programs = graph_json.get("symbolic_shapes") or []
        self.inputs = {n: e for n, e in input_entries.items()
                       if e < len(self.programs) and self.programs[e] is not None}
        self.values = [hi for _, _, hi in self.vars]   # the variables' values; the bounds until bound
        self.set_by = [None] * len(self.vars)          # the input that bound each variable
        self.given: dict = {}                          # input name -> its shape as last set

    def __bool__(self):
        return bool(self.vars)

    def _var(self, dim) -> int | None:
        """The variable that a dimension program is (["$k"]), else None."""
        if isinstance(dim, list) and len(dim) == 1 and isinstance(dim[0], str) and dim[0][1:].isdigit():
            k = int(dim[0][1:])
            return k if k < len(self.vars) else None
        return None

    def _range(self, k: int) -> str:
        name, lo, hi = self.vars[k]
        return f"{name} in {lo}..{hi}"

    def set_input(self, name: str, array, bound, dtype) -> np.ndarray:
        """Check `array` for input `name` of symbolic shape (`bound`: its shape at the upper
        bounds) and bind the variables its dimensions are; returns it C-contiguous. Raises
        InputError (one line: the input, the dimension, its value and the range)."""
        src = checked_symbolic_input(name, array, bound, dtype)
        for k, (dim, d) in enumerate(zip(self.programs[self.inputs[name]], src.shape)):
            var = self._var(dim)
            if var is not None:
                _, lo, hi = self.vars[var]
                if not lo <= d <= hi:
                    raise InputError(f"input '{name}': dimension {k} is {d}, outside the range of {self._range(var)} "
                                     "the model was compiled for")
            elif isinstance(dim, int) and d != dim:
                raise InputError(f"input '{name}': dimension {k} must be {dim}, got {_fmt_shape(src.shape)}")
            if d > bound[k]:
                raise InputError(f"input '{name}': a dimension is outside its bound")
        for dim, d in zip(self.programs[self.inputs[name]], src.shape):
            var = self._var(dim)
            if var is not None:
                self.values[var] = int(d)
                self.set_by[var] = name
        self.given[name] = tuple(src.shape)
        return src

    def shape(self, entry: int, bound) -> tuple:
        """Data entry `entry`'s shape at the variables' current values (`bound` when static)."""
        from tvmc.graph.symbolic import eval_postfix

        dims = self.programs[entry] if entry < len(self.programs) else None
        return tuple(bound) if dims is None else tuple(eval_postfix(d, self.values) for d in dims)

    def bind(self, bounds: dict) -> list:
        """Before a run: the variables' values, once every input of symbolic shape set so far
        agrees with its shape evaluated at them (`bounds`: {input name: its bound shape}).
        Raises InputError naming the input, the dimension and the variable's source."""
        for name, entry in self.inputs.items():
            given = self.given.get(name, tuple(bounds[name]))
            want = self.shape(entry, bounds[name])
            for k, (g, w) in enumerate(zip(given, want)):
                if g == w:
                    continue
                var = self._var(self.programs[entry][k])
                if var is None:
                    raise InputError(f"input '{name}': dimension {k} is {g}, but the other inputs' sizes make it {w}")
                source = f" (from input '{self.set_by[var]}')" if self.set_by[var] is not None else ""
                raise InputError(f"input '{name}': dimension {k} is {g}, but {self.vars[var][0]} is "
                                 f"{self.values[var]}{source}")
        return list(self.values)


def host_cpu_flags() -> set | None:
    """CPU feature flags of this host from /proc/cpuinfo ('flags' or 'Features'); None if unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return None


def check_host(metadata: dict, origin: str = "artifact") -> None:
    """Raise ArtifactError unless this host can run code for metadata["target"].

    Checks the runtime kind (only 'cpu' runs here), the triple's architecture against this
    host's, and that every target host_features flag (the CPU features the generated code may
    use, derived at compile time from the target's cpu and features) is in /proc/cpuinfo.
    """
    target = metadata.get("target") or {}
    name = target.get("name", "?")
    runtime = target.get("runtime", "cpu")
    if runtime != "cpu":
        raise ArtifactError(f"{origin}: target '{name}' needs the '{runtime}' runtime; "
                            f"this tvmc runs 'cpu' artifacts only")
    arch = str(target.get("triple", "")).split("-")[0]
    if arch and arch != host_arch():
        raise ArtifactError(f"{origin}: compiled for {arch} (target '{name}'), this host is {host_arch()}")
    wanted = list(target.get("host_features") or [])
    flags = host_cpu_flags()
    if wanted and flags is not None:
        missing = [f for f in wanted if f not in flags]
        if missing:
            raise ArtifactError(f"{origin}: this CPU lacks features {', '.join(missing)} required by "
                                f"target '{name}'; recompile for this host (e.g. --target-option)")


def output_position(index, output_names) -> int:
    """Position of output `index` (a position, or an output name) among `output_names`.
    Raises InputError on an unknown name or a position out of range."""
    if isinstance(index, str):
        if index not in output_names:
            raise InputError(f"unknown output '{index}'; the model's outputs are: {', '.join(output_names)}")
        index = output_names.index(index)
    if not 0 <= index < len(output_names):
        raise InputError(f"output index {index} out of range: the model has {len(output_names)} outputs")
    return index


def run_time_heads(graph_json: dict) -> list:
    """Per head of mod.json, the data entry of its int64[rank] run-time shape, or None for an
    output whose shape is static (mod.json "output_shapes", docs/dynamic_shapes.md)."""
    row_ptr = graph_json["node_row_ptr"]
    refs = graph_json.get("output_shapes") or [None] * len(graph_json["heads"])
    return [None if r is None else row_ptr[r[0]] + r[1] for r in refs]


def sliced_output(bound: np.ndarray, shape, origin: str, name: str) -> np.ndarray:
    """The run-time-shaped output held in the leading corner of its `bound` buffer: a copy of
    bound[:shape[0], :shape[1], ...]. Raises ArtifactError when `shape` (int64[rank], written by
    a kernel) does not fit the bound."""
    shape = [int(d) for d in shape]
    if len(shape) != bound.ndim or any(not 0 <= d <= b for d, b in zip(shape, bound.shape)):
        raise ArtifactError(f"{origin}: output '{name}' has run-time shape {_fmt_shape(shape)}, outside its "
                            f"bound {_fmt_shape(bound.shape)} (do the inputs break a --value-range stated at compile "
                            f"time?)")
    return bound[tuple(slice(0, d) for d in shape)].copy()


def load_library(data: bytes, name: str, origin: str) -> ctypes.CDLL:
    """dlopen the library bytes `data` from a file in a fresh private folder that is removed as
    soon as the library is loaded, so no run (not even one that crashes in a kernel) leaves it
    behind. The unique path also keeps the dynamic loader from handing back another library
    loaded earlier under the same name. Loading runs the library's initializers: load checked
    artifacts only. Raises ArtifactError."""
    with tempfile.TemporaryDirectory(prefix="tvmc-lib-") as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        try:
            return ctypes.CDLL(path, mode=os.RTLD_LOCAL | getattr(os, "RTLD_NOW", 0))
        except OSError as e:
            raise ArtifactError(f"{origin}: cannot load kernel library: {str(e)[:200]}") from None


def run_calls(calls) -> None:
    """Run a bound program in order: `calls` holds (callable, args, name) per kernel call or
    run-time loop (what the CPU and wasm executors bind from mod.json)."""
    for fn, args, _ in calls:
        fn(*args)


def kernel_names(calls) -> list:
    """The kernel of every item of a module description's "calls" (tvmc.codegen.description), the
    bodies of run-time loops included, in order."""
    return [n for c in calls for n in (kernel_names(c["calls"]) if "loop" in c else [c["func"]])]


def bind_calls(calls, kernel, entries, read, write, sizes=()) -> list:
    """A module description's "calls" bound for run_calls and profile_calls: (callable, args,
    name) per item. `kernel(func)` is the callable of a kernel, `entries[e]` the address of data
    entry e as the kernel takes it (the C API's tvmc_model_entries table), `read(e) -> ndarray`
    and `write(e, array)` access an entry for a run-time loop, which becomes one call of its
    interpreter (tvmc.runtime.control.run_loop) over its body's bound calls. `sizes`: the size
    variables' values as the kernels take them (symbolic shapes: a call's "sizes" index it)."""
    return [(functools.partial(run_loop, c, functools.partial(run_calls, bind_calls(c["calls"], kernel, entries,
                                                                                    read, write, sizes)), read, write),
             (), f"tvmc_loop '{c['loop']}'") if "loop" in c else
            (kernel(c["func"]), [entries[a] for a in c["args"]] + [sizes[k] for k in c.get("sizes", ())], c["func"])
            for c in calls]


class CApiExecutor:
    """What the executors that drive the C API of tvmc_kernels.h share (tvmc.runtime.cpu through
    ctypes, tvmc.runtime.wasm in wasmtime): `_calls`, the module description's calls; `_inputs`,
    {name: (shape, dtype, ...)} and `_outputs`, [(name, ...)], as the C API's input_info and
    output_info described them."""

    _calls: list
    _inputs: dict
    _outputs: list

    @property
    def num_kernels(self) -> int:
        """Number of kernel calls one run() makes (a run-time loop counts as one)."""
        return len(self._calls)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def input_info(self, name: str) -> tuple:
        """(shape tuple, dtype name) of input `name`."""
        shape, dtype = self._inputs[name][:2]
        return shape, dtype


def params_blob(artifact: Artifact) -> bytes:
    """The params of `artifact` in safetensors layout (the bytes of mod.params), as the C API's
    tvmc_model_create takes them."""
    import safetensors.numpy

    return safetensors.numpy.save({k: np.require(v, requirements="C") for k, v in artifact.params.items()})


def profile_calls(calls, runs: int) -> list:
    """Run `calls` (as for run_calls) once untimed, then `runs` times timing every call with
    time.perf_counter: one dict per distinct name, in order of first call: {"name", "calls" per
    run, "total_ms" per run (mean over `runs`)}."""
    run_calls(calls)
    clock = time.perf_counter
    names = [name for _, _, name in calls]
    totals = dict.fromkeys(names, 0.0)
    for _ in range(runs):
        for fn, args, name in calls:
            t0 = clock()
            fn(*args)
            totals[name] += clock() - t0
    return [{"name": name, "calls": names.count(name), "total_ms": seconds * 1e3 / runs}
            for name, seconds in totals.items()]


def benchmark(executor: Executor, repeat: int = 1, number: int = 1) -> dict:
    """Time executor.run(): `repeat` measurements, each the mean over `number` consecutive runs.

    One untimed warm-up run comes first. An executor whose runs happen in another process
    (EmulatedExecutor) measures them there: its `timed_runs(repeat, number)` gives the samples.
    Returns {"mean_ms", "median_ms", "min_ms", "max_ms", "std_ms"} in milliseconds per run (std
    is the population standard deviation over the `repeat` measurements), plus "repeat" and
    "number".
    """
    if repeat < 1 or number < 1:
        raise InputError(f"repeat and number must be at least 1, got repeat={repeat} number={number}")
    timed_runs = getattr(executor, "timed_runs", None)
    if timed_runs is not None:
        samples = timed_runs(repeat, number)
    else:
        executor.run()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                executor.run()
            samples.append((time.perf_counter() - t0) * 1e3 / number)
    return {
        "mean_ms": statistics.fmean(samples),
        "median_ms": statistics.median(samples),
        "min_ms": min(samples),
        "max_ms": max(samples),
        "std_ms": statistics.pstdev(samples),
        "repeat": repeat,
        "number": number,
    }
