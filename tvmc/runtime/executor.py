"""Runtime stage (CPU): run a loaded mod.tar by calling its kernels through ctypes in graph order.

numpy only holds tensors here; every operator runs inside mod.so. See tvmc_kernels.h for the ABI.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import statistics
import tempfile
import time
from typing import Protocol, runtime_checkable

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.mod_json import graph_attr, loop_entries, run_order
from tvmc.package import Artifact, load_artifact
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
    profile(runs)              time every kernel over `runs` runs: [{"name", "calls", "total_ms"}]
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
        raise InputError(f"input '{name}': expected shape {_fmt_shape(shape)} {np.dtype(dtype).name}, "
                         f"got {_fmt_shape(src.shape)} {src.dtype.name}")
    return src


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


GUARD_PAGES_ENV = "TVMC_GUARD_PAGES"


def _guarded_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` bytes (ALIGNMENT_BYTES-aligned) whose size rounded up to
    ALIGNMENT_BYTES ends where an inaccessible page begins, with another one before it: a kernel
    reading or writing past the buffer faults at once (an electric-fence allocator, for
    `make fuzz`; PlanMemory's storages are whole multiples of ALIGNMENT_BYTES)."""
    page = mmap.PAGESIZE
    size = -(-max(nbytes, 1) // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
    data_pages = -(-size // page)
    region = mmap.mmap(-1, (data_pages + 2) * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start in (base, base + (data_pages + 1) * page):
        if libc.mprotect(start, page, 0) != 0:   # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect failed")
    return np.frombuffer(region, np.uint8, count=nbytes, offset=(data_pages + 1) * page - size)


def _aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` bytes whose data starts on an ALIGNMENT_BYTES boundary (between
    guard pages when the environment sets TVMC_GUARD_PAGES=1, see _guarded_empty)."""
    if os.environ.get(GUARD_PAGES_ENV) == "1":
        return _guarded_empty(nbytes)
    raw = np.empty(nbytes + ALIGNMENT_BYTES, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT_BYTES
    return raw[offset:offset + nbytes]


def run_calls(calls) -> None:
    """Run a bound program in order: `calls` holds (callable, args, name) per kernel call or
    run-time loop (what the CPU and wasm executors bind from mod.json)."""
    for fn, args, _ in calls:
        fn(*args)


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


class GraphExecutor:
    """Executes an Artifact (or a mod.tar path) on this CPU.

    Storage: one 64-byte-aligned buffer per storage id (size from mod.json "storage_bytes",
    else the largest entry mapped to it). Params are copied in once at construction.
    Every `tvm_op` node becomes a ctypes call with precomputed pointer arguments
    (inputs, then output). Raises ArtifactError when the host cannot run the target, a kernel
    is missing from the library, or the storage plan is inconsistent.
    """

    def __init__(self, artifact: Artifact | str | os.PathLike):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        check_host(artifact.metadata, origin)
        if artifact.library is None or artifact.params is None:
            raise ArtifactError(f"{origin}: loaded without its library and params (load_artifact read_data=False)")
        g = artifact.graph_json
        self._lib = load_library(artifact.library, artifact.library_name, origin)

        nodes, row_ptr = g["nodes"], g["node_row_ptr"]
        shapes = graph_attr(g, "shape")
        dtypes = [np.dtype(d) for d in graph_attr(g, "dltype")]
        sids = [int(s) for s in graph_attr(g, "storage_id")]

        sizes = {}
        for eid, sid in enumerate(sids):
            nbytes = int(np.prod(shapes[eid], dtype=np.int64)) * dtypes[eid].itemsize
            sizes[sid] = max(sizes.get(sid, 0), nbytes)
        planned = g.get("storage_bytes")
        if planned is not None:
            planned = {int(k): int(v) for k, v in planned.items()} if isinstance(planned, dict) \
                else dict(enumerate(int(v) for v in planned))
            for sid, need in sizes.items():
                if planned.get(sid, 0) < need:
                    raise ArtifactError(f"{origin}: storage {sid} has {planned.get(sid, 0)} bytes in "
                                        f"storage_bytes, its largest tensor needs {need}")
            sizes.update(planned)
        self._storage = {sid: _aligned_empty(max(n, 1)) for sid, n in sorted(sizes.items())}

        # One numpy view per entry, with its shape and dtype, over its storage buffer.
        def view(eid):
            n = int(np.prod(shapes[eid], dtype=np.int64)) * dtypes[eid].itemsize
            return self._storage[sids[eid]][:n].view(dtypes[eid]).reshape(shapes[eid])

        self._views = [view(e) for e in range(len(sids))]

        params = artifact.params
        input_names = [i["name"] for i in artifact.metadata.get("inputs", [])]
        self._inputs = {}
        fixed_sids = {}
        for nid, node in enumerate(nodes):
            if node.get("op") != "null":
                continue
            eid = row_ptr[nid]
            if node["name"] in params:
                np.copyto(self._views[eid], params[node["name"]].reshape(self._views[eid].shape))
                fixed_sids[sids[eid]] = f"param '{node['name']}'"
            else:
                self._inputs[node["name"]] = eid
                fixed_sids[sids[eid]] = f"input '{node['name']}'"
        self.input_names = [n for n in input_names if n in self._inputs] + \
            [n for n in self._inputs if n not in input_names]

        def calls(order):
            """(ctypes function, pointer args, name) per kernel of `order` (run_order); a run-time
            loop is one call of its interpreter (tvmc.runtime.control) over its body's calls."""
            out = []
            for item in order:
                if isinstance(item, tuple):
                    nid, body = item[0], calls(item[1])
                    loop = functools.partial(run_loop, loop_entries(g, nid), functools.partial(run_calls, body),
                                             self._views.__getitem__, lambda e, a: np.copyto(self._views[e], a))
                    out.append((loop, (), f"tvmc_loop '{nodes[nid]['name']}'"))
                    continue
                node = nodes[item]
                func = node["attrs"]["func_name"]
                outs = [row_ptr[item] + k for k in range(int(node["attrs"].get("num_outputs", 1)))]
                for eid in outs:
                    if sids[eid] in fixed_sids:
                        raise ArtifactError(f"{origin}: kernel '{func}' writes the storage of "
                                            f"{fixed_sids[sids[eid]]} (bad storage plan)")
                ins = [row_ptr[i[0]] + i[1] for i in node["inputs"]]
                try:
                    fn = getattr(self._lib, func)
                except AttributeError:
                    raise ArtifactError(f"{origin}: kernel '{func}' (node '{node['name']}') "
                                        f"is missing from the library") from None
                args = tuple(ctypes.c_void_p(self._views[e].ctypes.data) for e in ins + outs)
                fn.argtypes = [ctypes.c_void_p] * len(args)
                fn.restype = None
                out.append((fn, args, func))
            return out

        self._calls = calls(run_order(g))  # (callable, args, name): run_calls, profile_calls

        # The graph entry (tvmc_graph_run) runs all kernels in one native call over a table of
        # one pointer per data entry; libraries without it are run kernel by kernel.
        self._entry = getattr(self._lib, "tvmc_graph_run", None) if self._calls else None
        if self._entry is not None:
            self._entry.argtypes = [ctypes.c_void_p]
            self._entry.restype = None
            table = (ctypes.c_void_p * len(self._views))(*[v.ctypes.data for v in self._views])
            self._entry_args = (table,)

        self._heads = [row_ptr[h[0]] + h[1] for h in g["heads"]]
        self._head_shapes = run_time_heads(g)
        names = [o["name"] for o in artifact.metadata.get("outputs", [])]
        if len(names) != len(self._heads):
            names = list(g.get("output_names", []))
        if len(names) != len(self._heads):
            names = [f"output_{i}" for i in range(len(self._heads))]
        self.output_names = names

    @property
    def num_kernels(self) -> int:
        """Number of kernel calls one run() makes."""
        return len(self._calls)

    def input_info(self, name: str) -> tuple:
        """(shape tuple, dtype name) of input `name`."""
        v = self._views[self._inputs[name]]
        return tuple(v.shape), v.dtype.name

    def set_input(self, name: str, array) -> None:
        """Copy `array` into input `name`.

        Raises InputError (one line naming the tensor, expected vs got) on an unknown name,
        a different shape, or a different dtype; no implicit casts.
        """
        expected = {n: (self._views[k].shape, self._views[k].dtype) for n, k in self._inputs.items()}
        src = checked_input(name, array, self.input_names, expected)
        np.copyto(self._views[self._inputs[name]], src)

    def run(self) -> None:
        """Run the graph once: one call of the library's graph entry, or, for libraries
        without one, every kernel in graph order."""
        if self._entry is not None:
            self._entry(*self._entry_args)
            return
        run_calls(self._calls)

    def profile(self, runs: int = 1) -> list:
        """Run the graph `runs` times kernel by kernel (not through the graph entry, which `run`
        keeps for plain runs), timing every kernel call with time.perf_counter (each time includes
        the ctypes call, about 1 µs), after one untimed warm-up run.

        Returns one dict per distinct kernel, in order of first call: {"name": func_name,
        "calls": calls per run, "total_ms": milliseconds per run (mean over `runs`)}. The outputs
        afterwards are those of a plain run. Raises InputError when runs < 1.
        """
        if runs < 1:
            raise InputError(f"profile runs must be at least 1, got {runs}")
        return profile_calls(self._calls, runs)

    def get_output(self, index) -> np.ndarray:
        """A copy of output `index` (position in mod.json heads, or output name), with its shape
        (an output with a run-time shape is sliced to the shape the last run computed)."""
        k = output_position(index, self.output_names)
        data, shape = self._views[self._heads[k]], self._head_shapes[k]
        if shape is None:
            return data.copy()
        return sliced_output(data, self._views[shape], self.artifact.path, self.output_names[k])

    @property
    def num_outputs(self) -> int:
        return len(self._heads)

    @staticmethod
    def set_num_threads(n: int) -> None:
        """Use `n` threads in the kernels' parallel loops (libgomp's omp_set_num_threads).

        Applies to kernels called from this thread. Setting OMP_NUM_THREADS in the environment
        before the process starts works as well. Raises ArtifactError if libgomp cannot be loaded.
        """
        if n < 1:
            raise InputError(f"thread count must be at least 1, got {n}")
        try:
            gomp = ctypes.CDLL("libgomp.so.1")
        except OSError as e:
            raise ArtifactError(f"cannot load libgomp.so.1 to set the thread count: {e}") from None
        gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
        gomp.omp_set_num_threads.restype = None
        gomp.omp_set_num_threads(int(n))


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
