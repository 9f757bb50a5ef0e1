"""Runtime stage (this host's CPU): run a mod.tar through the C API compiled into its mod.so.

mod.so holds the kernels, the graph entry `tvmc_graph_run` and the C API of tvmc_kernels.h; the
executor calls that API through ctypes, as the C runner (tvmc/runtime/tvmc_run.c), the wasm
executor and tvmc.js do: `tvmc_model_create` checks the params blob against the module
description embedded in the library (the plan the kernels were compiled for: storage, entries,
inputs, outputs, params) and allocates the storage, `tvmc_model_set_input` checks and copies an
input, a run is one `tvmc_model_run` (the graph entry: every kernel inside mod.so), and
`tvmc_model_output_shape` / `tvmc_model_get_output` copy an output out at its run-time shape. The
executor reads neither mod.json nor the plan itself: the library does. numpy only holds tensors on
the host side.

`profile` runs the description's calls kernel by kernel over the model's table of entry pointers
(`tvmc_model_entries`), as the header's "running the kernels by hand" describes. Under
TVMC_GUARD_PAGES=1 (`make fuzz`) the executor moves every storage buffer between inaccessible
pages and points that table, through which the graph entry and the C API reach every tensor, at
the moved buffers, so a kernel that reads or writes past its buffer faults at once.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.package import Artifact, load_artifact
from tvmc.runtime.executor import (ALIGNMENT_BYTES, CApiExecutor, bind_calls, check_host, checked_input,
                                   checked_symbolic_input, kernel_names, load_library, output_position,
                                   params_blob, profile_calls, symbolic_inputs)

GUARD_PAGES_ENV = "TVMC_GUARD_PAGES"
TVMC_ERR_INPUT = 3  # tvmc_kernels.h

_VOIDP = ctypes.c_void_p


class TensorInfo(ctypes.Structure):
    """tvmc_tensor_info of tvmc_kernels.h: name and dtype (UTF-8, NUL-terminated), ndim, shape
    (int64[ndim]) and the tensor's size in bytes."""

    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("nbytes", ctypes.c_uint64)]


# The C API's functions: (restype, argtypes), as declared in tvmc_kernels.h.
C_API = {
    "tvmc_model_create": (ctypes.c_int, [_VOIDP, ctypes.c_size_t, ctypes.POINTER(_VOIDP)]),
    "tvmc_model_destroy": (None, [_VOIDP]),
    "tvmc_model_num_inputs": (ctypes.c_int32, [_VOIDP]),
    "tvmc_model_num_outputs": (ctypes.c_int32, [_VOIDP]),
    "tvmc_model_input_info": (ctypes.c_int, [_VOIDP, ctypes.c_int32, ctypes.POINTER(TensorInfo)]),
    "tvmc_model_output_info": (ctypes.c_int, [_VOIDP, ctypes.c_int32, ctypes.POINTER(TensorInfo)]),
    "tvmc_model_set_input": (ctypes.c_int, [_VOIDP, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64),
                                            ctypes.c_int32, _VOIDP, ctypes.c_size_t]),
    "tvmc_model_run": (ctypes.c_int, [_VOIDP]),
    "tvmc_model_entries": (ctypes.POINTER(_VOIDP), [_VOIDP]),
    "tvmc_model_output_shape": (ctypes.c_int, [_VOIDP, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64),
                                               ctypes.c_int32]),
    "tvmc_model_get_output": (ctypes.c_int, [_VOIDP, ctypes.c_int32, _VOIDP, ctypes.c_size_t]),
    "tvmc_last_error": (ctypes.c_char_p, []),
}


def bind_c_api(lib: ctypes.CDLL, origin: str) -> dict:
    """{name: ctypes function with its signature} of the C API in `lib`. Raises ArtifactError
    naming the first function the library lacks."""
    api = {}
    for name, (restype, argtypes) in C_API.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ArtifactError(f"{origin}: the library has no C API function '{name}'") from None
        fn.restype, fn.argtypes = restype, argtypes
        api[name] = fn
    return api


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


class GraphExecutor(CApiExecutor):
    """Executes an Artifact (or a mod.tar path) on this CPU through the C API inside its mod.so
    (module docstring); the Executor contract of tvmc.runtime.executor.

    Raises ArtifactError when the host cannot run the target (architecture, CPU features), the
    library lacks the C API or a kernel its description calls, or the C API refuses the params
    (its message and code, tvmc_kernels.h).
    """

    def __init__(self, artifact: Artifact | str | os.PathLike):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        check_host(artifact.metadata, origin)
        if artifact.library is None or artifact.params is None:
            raise ArtifactError(f"{origin}: loaded without its library and params (load_artifact read_data=False)")
        self._lib = load_library(artifact.library, artifact.library_name, origin)
        self._api = api = bind_c_api(self._lib, origin)
        self._calls = artifact.description["calls"]
        for func in kernel_names(self._calls):
            if not hasattr(self._lib, func):
                raise ArtifactError(f"{origin}: kernel '{func}' is missing from the library")

        blob = params_blob(artifact)
        model = _VOIDP()
        self._check(api["tvmc_model_create"](blob, len(blob), ctypes.byref(model)))
        del blob
        self._model = model
        self._release = weakref.finalize(self, api["tvmc_model_destroy"], model)

        info = TensorInfo()
        self._inputs = {}   # name -> (shape, dtype, name bytes, dtype bytes, int64 shape array)
        for i in range(api["tvmc_model_num_inputs"](model)):
            name, dtype, shape = self._tensor_info("tvmc_model_input_info", i, info)
            self._inputs[name] = (shape, dtype, name.encode(), dtype.encode(), (ctypes.c_int64 * len(shape))(*shape))
        self.input_names = list(self._inputs)
        self._outputs = [self._tensor_info("tvmc_model_output_info", i, info)
                         for i in range(api["tvmc_model_num_outputs"](model))]  # (name, dtype, bound)
        self.output_names = [o[0] for o in self._outputs]
        self._entries = api["tvmc_model_entries"](model)
        desc = artifact.description
        # symbolic shapes: {input name: its sym_shape}; the C API binds the size variables
        self._symbolic = symbolic_inputs(desc)
        self.size_vars = [(v["name"], v["lo"], v["hi"]) for v in desc.get("size_vars", ())]
        self._guarded = self._move_between_guard_pages() if os.environ.get(GUARD_PAGES_ENV) == "1" else None

    def _check(self, rc: int, inputs: bool = False) -> None:
        """Raise ArtifactError for a failed C API call; InputError (its message alone) where
        `inputs` and the inputs were refused (TVMC_ERR_INPUT: a shape outside the compiled range,
        inputs that disagree on a size variable)."""
        if rc != 0:
            message = (self._api["tvmc_last_error"]() or b"").decode(errors="replace")
            if inputs and rc == TVMC_ERR_INPUT:
                raise InputError(message)
            raise ArtifactError(f"{self.artifact.path}: the C API says: {message} (code {rc})")

    def _tensor_info(self, function: str, index: int, info: TensorInfo) -> tuple:
        self._check(self._api[function](self._model, index, ctypes.byref(info)))
        return (info.name.decode(errors="replace"), info.dtype.decode(), tuple(info.shape[k] for k in range(info.ndim)))

    def _move_between_guard_pages(self) -> dict:
        """Copy every storage buffer (params in) to one between guard pages and point the model's
        entry table at the copies; {storage id: the copy}."""
        desc = self.artifact.description
        guarded = {}
        for e, entry in enumerate(desc["entries"]):
            sid, offset = entry["storage_id"], int(entry.get("offset", 0))
            if sid not in guarded:
                nbytes = int(desc["storage_bytes"][sid])
                guarded[sid] = buf = _guarded_empty(max(nbytes, 1))
                ctypes.memmove(buf.ctypes.data, self._entries[e] - offset, nbytes)
            self._entries[e] = guarded[sid].ctypes.data + offset
        return guarded

    def entry_address(self, entry: int) -> int:
        """Address of data entry `entry`'s buffer (ALIGNMENT_BYTES-aligned) in the model's storage."""
        return int(self._entries[entry])

    def set_input(self, name: str, array) -> None:
        """Copy `array` into input `name` (tvmc_model_set_input).

        Raises InputError (one line naming the tensor, expected vs got) on an unknown name,
        a different shape, or a different dtype; no implicit casts. An input of symbolic shape
        takes any shape whose dimensions lie in the ranges it was compiled for (the C API checks
        them and names the input, the dimension, its value and the range).
        """
        if name in self._symbolic:
            src = checked_symbolic_input(name, array, *self._inputs[name][:2])
            name_c, dtype_c = self._inputs[name][2:4]
            self._check(self._api["tvmc_model_set_input"](self._model, name_c, dtype_c,
                                                          (ctypes.c_int64 * max(src.ndim, 1))(*src.shape), src.ndim,
                                                          src.ctypes.data, src.nbytes), inputs=True)
            return
        src = np.ascontiguousarray(checked_input(name, array, self.input_names,
                                                 {n: v[:2] for n, v in self._inputs.items()}))
        shape, _, name_c, dtype_c, shape_c = self._inputs[name]
        self._check(self._api["tvmc_model_set_input"](self._model, name_c, dtype_c, shape_c, len(shape),
                                                      src.ctypes.data, src.nbytes))

    def run(self) -> None:
        """Run the graph once: one tvmc_model_run, i.e. the library's graph entry."""
        self._check(self._api["tvmc_model_run"](self._model), inputs=bool(self._symbolic))

    def _entry_array(self, entry: int) -> np.ndarray:
        """Data entry `entry` of the description as an ndarray over the model's storage (no copy)."""
        described = self.artifact.description["entries"][entry]
        dtype, shape = np.dtype(described["dtype"]), described["shape"]
        count = int(np.prod(shape, dtype=np.int64))
        raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(self.entry_address(entry))
        return np.frombuffer(raw, dtype, count).reshape(shape)

    def profile(self, runs: int = 1) -> list:
        """Run the graph `runs` times kernel by kernel (the description's calls over the entry table
        of tvmc_model_entries; `run` keeps the graph entry for plain runs), timing every kernel call
        with time.perf_counter (each time includes the ctypes call, about 1 µs), after one untimed
        warm-up run.

        Returns one dict per distinct kernel, in order of first call: {"name": func_name,
        "calls": calls per run, "total_ms": milliseconds per run (mean over `runs`)}. The outputs
        afterwards are those of a plain run. Raises InputError when runs < 1.
        """
        if runs < 1:
            raise InputError(f"profile runs must be at least 1, got {runs}")

        def kernel(func):
            fn = getattr(self._lib, func)
            fn.restype = None
            return fn

        def write(entry, value):
            np.copyto(self._entry_array(entry), value)

        n_entries = len(self.artifact.description["entries"])
        entries = [_VOIDP(self.entry_address(e)) for e in range(n_entries)]
        sizes = []
        if self.size_vars:  # a run binds the size variables (and checks the inputs) first
            self.run()
            values = ctypes.cast(self._entries[n_entries], ctypes.POINTER(ctypes.c_int64))
            sizes = [ctypes.c_int64(values[k]) for k in range(len(self.size_vars))]
            self.profile_sizes = [v.value for v in sizes]
        return profile_calls(bind_calls(self._calls, kernel, entries, self._entry_array, write, sizes), runs)

    def get_output(self, index) -> np.ndarray:
        """A copy of output `index` (position or output name), with its shape (an output whose shape
        depends on the data comes at the shape the last run computed, within its bound).
        Raises InputError on an unknown output, ArtifactError when the run-time shape breaks the bound."""
        k = output_position(index, self.output_names)
        _, dtype, bound = self._outputs[k]
        shape = (ctypes.c_int64 * max(len(bound), 1))()
        self._check(self._api["tvmc_model_output_shape"](self._model, k, shape, len(bound)))
        out = np.empty(tuple(shape[:len(bound)]), dtype)
        self._check(self._api["tvmc_model_get_output"](self._model, k, out.ctypes.data, out.nbytes))
        return out

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
