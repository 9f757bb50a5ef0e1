"""Runtime stage (WebAssembly): run a mod.tar compiled for a wasm32 target in wasmtime (PyPI).

mod.wasm imports nothing and exports its linear memory, the kernels, the graph entry, the C API of
tvmc_kernels.h and the allocator (`malloc`, `free`). The executor drives the module through the C
API, as a C program would: the params blob is copied into memory allocated with the module's
`malloc` and handed to `tvmc_model_create` (which checks it against the description embedded in
the module and keeps its own copy), inputs go through `tvmc_model_set_input`, a run is one
`tvmc_model_run` (the graph entry: every kernel inside the module), outputs come back through
`tvmc_model_get_output`. Addresses are byte offsets into the module's memory (32-bit). numpy only
holds tensors on the host side: every operator runs in the module's code, compiled by wasmtime.
The JS runtime (tvmc/runtime/web/tvmc.js) makes the same calls in browsers and Node.

Signals: Python runs its signal handlers between bytecodes, never inside a call into wasm code,
so a long run (a run-time Loop) would hold Ctrl-C, SIGTERM and SIGHUP until it returned. The
engine is therefore made with epoch interruption; during a call the signal module's wakeup fd
is a socket that a watcher thread reads, and a signal arriving there advances the engine's epoch:
the wasm code traps at its next loop back-edge, and the signal's Python handler then raises
(KeyboardInterrupt, tvmc.errors.Terminated) as it would anywhere else.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import struct
import threading
import weakref

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.package import Artifact, load_artifact
from tvmc.runtime.executor import (CApiExecutor, bind_calls, checked_input, checked_symbolic_input, kernel_names,
                                   output_position, params_blob, profile_calls, symbolic_inputs)

ENGINE_HINT = "pip install wasmtime"
# tvmc_tensor_info on wasm32: name, dtype (pointers), ndim (int32), shape (pointer), nbytes (uint64 at 16)
TENSOR_INFO = struct.Struct("<IIiI Q")
POINTER = struct.Struct("<I")
TVMC_ERR_INPUT = 3  # tvmc_kernels.h


def _wasmtime():
    try:
        import wasmtime
    except ImportError:
        raise ArtifactError(f"the wasm runtime needs wasmtime: {ENGINE_HINT}") from None
    return wasmtime


def wasm_available() -> str | None:
    """None when wasm modules can run here (wasmtime is importable), else the reason (test skips)."""
    try:
        _wasmtime()
    except ArtifactError as e:
        return str(e)
    return None


class _SignalWatcher:
    """Advances `engine`'s epoch when a signal arrives during a call into wasm (module docstring).
    The watcher thread holds the engine and the socket, not this object: when the object goes
    (with its module), the sockets close and the thread ends."""

    def __init__(self, engine):
        self._state = {"received": None}
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        threading.Thread(target=_watch, args=(self._read, engine, self._state), daemon=True,
                         name="tvmc-wasm-signals").start()
        weakref.finalize(self, _close_sockets, self._read, self._write)

    @property
    def received(self):
        return self._state["received"]

    @received.setter
    def received(self, value):
        self._state["received"] = value

    @contextlib.contextmanager
    def watching(self):
        """During the block, signals also wake the watcher (only from the main thread, where
        Python handles signals; elsewhere the block runs as is)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.received = None
        old = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        try:
            yield
        finally:
            signal.set_wakeup_fd(old)

    def raise_pending(self):
        """After a trap that a signal caused: raise what its Python handler raises (the handler
        normally runs first; this covers a handler that returned, e.g. one that only records)."""
        signum = self.received
        if signum is None:
            return
        self.received = None
        from tvmc.errors import Terminated

        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            raise Terminated(signum)


def _watch(sock, engine, state) -> None:
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        if not data:
            return
        state["received"] = data[-1]
        engine.increment_epoch()


def _close_sockets(*socks):
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()


class WasmModule:
    """An instantiated wasm module with its memory and exported functions (wasmtime).

    Raises ArtifactError (naming `origin`) when the engine rejects the module, e.g. one that uses
    a wasm feature (simd128, relaxed-simd) this engine does not implement."""

    def __init__(self, data: bytes, origin: str = "mod.wasm"):
        wt = _wasmtime()
        config = wt.Config()
        config.wasm_simd = True
        config.wasm_relaxed_simd = True
        config.wasm_bulk_memory = True
        config.wasm_reference_types = True
        config.wasm_multi_value = True
        config.epoch_interruption = True
        self.engine = wt.Engine(config)
        self.store = wt.Store(self.engine)
        self._signals = _SignalWatcher(self.engine)
        try:
            module = wt.Module(self.engine, data)
            self.instance = wt.Instance(self.store, module, [])
        except (wt.WasmtimeError, wt.Trap) as e:
            line = (str(e).strip().splitlines() or ["?"])[0]
            raise ArtifactError(f"{origin}: the wasm engine rejected the module: {line[:200]}") from None
        self.exports = self.instance.exports(self.store)
        self.memory = self.exports["memory"]
        self.origin = origin

    def function(self, name: str):
        """The exported function `name`; AttributeError when the module does not export it."""
        try:
            return self.exports[name]
        except KeyError:
            raise AttributeError(name) from None

    def call(self, name: str, *args):
        try:
            with self._signals.watching():
                self.store.set_epoch_deadline(1)
                return self.function(name)(self.store, *args)
        except _wasmtime().Trap as e:
            self._signals.raise_pending()
            line = (str(e).strip().splitlines() or ["?"])[0]
            raise ArtifactError(f"{self.origin}: {name} trapped: {line[:200]}") from None

    def malloc(self, nbytes: int) -> int:
        """Address of `nbytes` bytes allocated with the module's malloc; ArtifactError when it fails."""
        addr = self.call("malloc", max(int(nbytes), 1))
        if addr == 0:
            raise ArtifactError(f"{self.origin}: out of memory allocating {nbytes} bytes in the wasm module")
        return addr

    def write(self, addr: int, data) -> None:
        self.memory.write(self.store, bytes(data) if not isinstance(data, (bytes, bytearray)) else data, addr)

    def read(self, addr: int, nbytes: int) -> bytes:
        return bytes(self.memory.read(self.store, addr, addr + nbytes))

    def c_string(self, addr: int, limit: int = 4096) -> str:
        data = self.read(addr, min(limit, self.memory.data_len(self.store) - addr))
        return data.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def run_kernel(data: bytes, name: str, arrays, out: np.ndarray, origin: str = "kernel", sizes=()) -> np.ndarray:
    """Instantiate the wasm module `data`, call its kernel `name` once on numpy `arrays` (inputs)
    and `out` (output, filled in, 64-byte aligned copies in the module's memory), then `sizes`
    (int64 values of a kernel's SizeVars); returns `out`."""
    mod = WasmModule(data, origin)
    addrs = []
    for a in list(arrays) + [out]:
        a = np.ascontiguousarray(a)
        raw = mod.malloc(a.nbytes + 64)
        addr = raw + (-raw) % 64
        mod.write(addr, a.tobytes())
        addrs.append(addr)
    mod.call(name, *addrs, *[int(v) for v in sizes])
    out[...] = np.frombuffer(mod.read(addrs[-1], out.nbytes), out.dtype).reshape(out.shape)
    return out


class WasmExecutor(CApiExecutor):
    """Executes an Artifact (or mod.tar path) compiled for a wasm32 target in wasmtime, through the
    module's C API (see the module docstring); the executor contract of tvmc.runtime.

    Raises ArtifactError when the artifact is not a wasm one, wasmtime is missing or rejects the
    module, or the module's C API refuses the params."""

    def __init__(self, artifact: Artifact | str | os.PathLike):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        runtime = (artifact.metadata.get("target") or {}).get("runtime")
        if runtime != "wasm":
            raise ArtifactError(f"{origin}: target runtime '{runtime}' is not wasm")
        if artifact.library is None or artifact.params is None:
            raise ArtifactError(f"{origin}: loaded without its library and params (load_artifact read_data=False)")
        self.module = mod = WasmModule(artifact.library, f"{origin}: {artifact.library_name}")
        blob = params_blob(artifact)
        params = mod.malloc(len(blob))
        mod.write(params, blob)
        out = mod.malloc(POINTER.size)
        rc = mod.call("tvmc_model_create", params, len(blob), out)
        mod.call("free", params)
        self._check(rc)
        self._model = POINTER.unpack(mod.read(out, POINTER.size))[0]
        mod.call("free", out)

        self._info = mod.malloc(TENSOR_INFO.size)
        self._inputs = {}   # name -> (shape, dtype, name address, dtype address, shape address, buffer)
        for i in range(mod.call("tvmc_model_num_inputs", self._model)):
            name, dtype, shape, addrs = self._tensor_info("tvmc_model_input_info", i)
            self._inputs[name] = (shape, dtype, *addrs, mod.malloc(_nbytes(shape, dtype)))
        self.input_names = list(self._inputs)
        self._outputs = []  # (name, shape, dtype, buffer)
        for i in range(mod.call("tvmc_model_num_outputs", self._model)):
            name, dtype, shape, _ = self._tensor_info("tvmc_model_output_info", i)
            self._outputs.append((name, shape, dtype, mod.malloc(_nbytes(shape, dtype))))
        self.output_names = [o[0] for o in self._outputs]
        desc = artifact.description
        # symbolic shapes: {input name: its sym_shape}; the C API binds the size variables
        self._symbolic = symbolic_inputs(desc)
        self.size_vars = [(v["name"], v["lo"], v["hi"]) for v in desc.get("size_vars", ())]
        self._shape_buf = mod.malloc(8 * max([len(o[1]) for o in self._outputs] +
                                             [len(v[0]) for v in self._inputs.values()] + [1]))
        self._calls = desc["calls"]
        for func in kernel_names(self._calls):
            try:
                mod.function(func)
            except AttributeError:
                raise ArtifactError(f"{origin}: kernel '{func}' is missing from {artifact.library_name}") from None

    def _check(self, rc: int, inputs: bool = False) -> None:
        """Raise ArtifactError for a failed C API call; InputError (its message alone) where
        `inputs` and the inputs were refused (TVMC_ERR_INPUT: a shape outside the compiled range,
        inputs that disagree on a size variable)."""
        if rc != 0:
            message = self.module.c_string(self.module.call("tvmc_last_error"))
            if inputs and rc == TVMC_ERR_INPUT:
                raise InputError(message)
            raise ArtifactError(f"{self.artifact.path}: the module's C API says: {message} (code {rc})")

    def _tensor_info(self, function: str, index: int):
        mod = self.module
        self._check(mod.call(function, self._model, index, self._info))
        name_addr, dtype_addr, ndim, shape_addr, _ = TENSOR_INFO.unpack(mod.read(self._info, TENSOR_INFO.size))
        shape = struct.unpack(f"<{ndim}q", mod.read(shape_addr, 8 * ndim)) if ndim else ()
        return (mod.c_string(name_addr), mod.c_string(dtype_addr), tuple(int(d) for d in shape),
                (name_addr, dtype_addr, shape_addr))

    def set_input(self, name: str, array) -> None:
        """Copy `array` into input `name` (tvmc_model_set_input). Raises InputError (one line naming
        the tensor, expected vs got) on an unknown name, another shape or dtype; no implicit casts.
        An input of symbolic shape takes any shape whose dimensions lie in the ranges it was
        compiled for (the C API checks them and names the input, the dimension, its value and
        the range); its buffer holds the bound, so any such shape fits."""
        if name in self._symbolic:
            shape, dtype, name_addr, dtype_addr, _, buf = self._inputs[name]
            src = checked_symbolic_input(name, array, shape, dtype)
            # a shape past the bound (which the C API refuses) is handed over from a buffer of its own
            staged = self.module.malloc(src.nbytes) if src.nbytes > _nbytes(shape, dtype) else buf
            try:
                self.module.write(staged, src.tobytes())
                if src.ndim:
                    self.module.write(self._shape_buf, struct.pack(f"<{src.ndim}q", *src.shape))
                self._check(self.module.call("tvmc_model_set_input", self._model, name_addr, dtype_addr,
                                             self._shape_buf, src.ndim, staged, src.nbytes), inputs=True)
            finally:
                if staged != buf:
                    self.module.call("free", staged)
            return
        src = checked_input(name, array, self.input_names, {n: v[:2] for n, v in self._inputs.items()})
        shape, dtype, name_addr, dtype_addr, shape_addr, buf = self._inputs[name]
        self.module.write(buf, np.ascontiguousarray(src).tobytes())
        self._check(self.module.call("tvmc_model_set_input", self._model, name_addr, dtype_addr, shape_addr,
                                     len(shape), buf, src.nbytes))

    def run(self) -> None:
        """Run the graph once: one tvmc_model_run, i.e. the module's graph entry."""
        self._check(self.module.call("tvmc_model_run", self._model), inputs=bool(self._symbolic))

    def profile(self, runs: int = 1) -> list:
        """Run the graph `runs` times kernel by kernel (the entry table of tvmc_model_entries and the
        description's calls), timing every call with time.perf_counter (each time includes the
        host-to-wasm call, about 1 µs), after one untimed warm-up run. Returns one dict per distinct
        kernel, in order of first call: {"name", "calls" per run, "total_ms" per run (mean over
        `runs`)}. Raises InputError when runs < 1."""
        if runs < 1:
            raise InputError(f"profile runs must be at least 1, got {runs}")
        mod = self.module
        table = mod.call("tvmc_model_entries", self._model)
        count = len(self.artifact.description["entries"])
        entries = struct.unpack(f"<{count}I", mod.read(table, 4 * count))
        described = self.artifact.description["entries"]

        def read(e):
            shape, dtype = described[e]["shape"], np.dtype(described[e]["dtype"])
            return np.frombuffer(mod.read(entries[e], int(np.prod(shape)) * dtype.itemsize), dtype).reshape(shape)

        def write(e, value):
            mod.write(entries[e], np.ascontiguousarray(value).tobytes())

        def kernel(func):
            return functools.partial(mod.function(func), mod.store)

        sizes = []
        if self.size_vars:  # a run binds the size variables (and checks the inputs) first
            self.run()      # entries[count] points at their int64 values (tvmc.codegen.entry)
            at = POINTER.unpack(mod.read(table + 4 * count, 4))[0]
            sizes = list(struct.unpack(f"<{len(self.size_vars)}q", mod.read(at, 8 * len(self.size_vars))))
            self.profile_sizes = sizes
        return profile_calls(bind_calls(self._calls, kernel, entries, read, write, sizes), runs)

    def get_output(self, index) -> np.ndarray:
        """A copy of output `index` (position or output name), with its shape."""
        i = output_position(index, self.output_names)
        _, bound, dtype, buf = self._outputs[i]
        # the shape of this run: the bound, or within it for an output whose shape depends on the data
        self._check(self.module.call("tvmc_model_output_shape", self._model, i, self._shape_buf, len(bound)))
        shape = struct.unpack(f"<{len(bound)}q", self.module.read(self._shape_buf, 8 * len(bound))) if bound else ()
        nbytes = _nbytes(shape, dtype)
        self._check(self.module.call("tvmc_model_get_output", self._model, i, buf, nbytes))
        return np.frombuffer(self.module.read(buf, nbytes), dtype).reshape(shape).copy()

    @staticmethod
    def set_num_threads(n: int) -> None:
        """Accepted for the executor contract; a wasm32 module runs on the calling thread."""
        if n < 1:
            raise InputError(f"thread count must be at least 1, got {n}")


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
