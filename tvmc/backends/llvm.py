"""The LLVM CPU backends: shared objects for x86-64 and aarch64 (mod.so), and wasm32 modules
(mod.wasm, WasmBackend).

Build: one LLVM module (tvmc.codegen.llvm) of every kernel, for a graph plus its entry
(tvmc.codegen.entry), the module description and the C API (tvmc/runtime/tvmc_runtime.c,
compiled by the descriptor's `linker`, a C compiler driver, with c_flags), linked by that
driver. Run: ctypes on this host's CPU; a CPU of another architecture under the descriptor's
emulator through the C runner (tvmc/runtime/tvmc_run.c, tvmc.runtime.emulated); wasm modules in
wasmtime (tvmc.runtime.wasm).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from tvmc.backends.base import Backend, described, write_dumps
from tvmc.codegen.build import compile_ir, link_shared, run_build_tool
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import ArtifactError
from tvmc.target import host_arch

RUNTIME_SOURCE = "tvmc_runtime.c"
RUNNER_SOURCE = "tvmc_run.c"
_tmp = None
_serial = itertools.count()


def _module(prims, target):
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    return cg


class SharedObjectBackend(Backend):
    """mod.so for a CPU: the kernels, the graph entry and the C API in one shared library."""

    name = "llvm"
    library_format = "so"
    # the C API (tvmc_runtime.c with -DTVMC_SYMBOLIC_SHAPES) binds the size variables for every
    # executor that drives it: ctypes, the C runner (under an emulator), wasmtime and tvmc.js
    symbolic_shapes = True
    storage_views = True
    # flags compiling the shipped C sources (the C API, the C runner): position-independent code
    cflags = ("-std=c99", "-O2", "-fPIC")
    # whether the graph entry calls every kernel rather than letting LLVM inline them into it
    kernels_noinline = False

    def c_flags(self, target) -> tuple:
        """The flags the C API and the C runner are compiled with for `target`."""
        return self.cflags

    # --- building ---------------------------------------------------------------------------
    def build(self, kernels, target, graph_json=None, params=None, dump_ir=(), dump_dir=None, progress=None,
              device_binaries=None) -> bytes:
        from tvmc.codegen import description
        from tvmc.codegen.entry import add_graph_entry

        progress = progress or (lambda stage, done, total: None)
        prims = [k.prim for k in kernels]
        cg = _module(prims, target)
        if self.kernels_noinline:
            for p in prims:
                cg.module.get_global(p.name).attributes.add("noinline")
        progress("llvm", 0, 1)
        if graph_json is not None:
            info = described(graph_json, params)
            add_graph_entry(cg, graph_json)
            description.embed(cg.module, info, self.library_format)
        dumps = {"_want": tuple(dump_ir)}
        obj = compile_ir(cg.ir_text(), target, dumps)
        write_dumps(dump_dir, dump_ir, prims, dumps)
        progress("link", 0, 1)
        runtime = [self.compile_runtime(target, bool(graph_json.get("size_vars")))] if graph_json is not None else []
        return link_shared(obj, target, runtime)

    def compile_runtime(self, target, symbolic: bool = False) -> bytes:
        """Object file of the C API (tvmc/runtime/tvmc_runtime.c) for `target` (_compile_shipped);
        `symbolic`: with the binding of size variables (-DTVMC_SYMBOLIC_SHAPES, models with
        symbolic shapes), so a static model's C API is compiled from the code it always was."""
        return self._compile_shipped(RUNTIME_SOURCE, target, ("-DTVMC_SYMBOLIC_SHAPES",) if symbolic else ())

    def _compile_shipped(self, source: str, target, defines: tuple = ()) -> bytes:
        """Object file of tvmc/runtime/`source` for `target`, compiled by its linker command (a C
        compiler driver such as gcc, aarch64-linux-gnu-gcc or clang for wasm32, with its flags:
        -shared and linker flags are ignored with -c) and c_flags(target); memoized per command,
        flags and source, so a process compiling many models compiles it once."""
        sha = hashlib.sha256(resources.files("tvmc.runtime").joinpath(source).read_bytes()).hexdigest()
        return _compile_c(source, tuple(target.linker), self.c_flags(target) + tuple(defines), sha, target)

    def link_runner(self, library: bytes, target) -> bytes:
        """The C runner (tvmc/runtime/tvmc_run.c: .npy inputs and outputs, a timing loop) as an
        executable for `target`, linked against `library` (the bytes of a mod.so) by the
        target's linker command without `-shared`. It loads `mod.so` from its own folder
        (DT_NEEDED mod.so, RUNPATH $ORIGIN), so it runs with any mod.so of that target beside
        it. Raises CodegenError when the compiler is missing or fails."""
        obj = self._compile_shipped(RUNNER_SOURCE, target)
        with tempfile.TemporaryDirectory(prefix="tvmc-link-") as tmp:
            Path(tmp, "tvmc_run.o").write_bytes(obj)
            Path(tmp, "mod.so").write_bytes(library)
            cmd = [w for w in target.linker if w != "-shared"] + \
                ["-o", "tvmc_run", "tvmc_run.o", "mod.so", "-lm", "-Wl,-rpath,$ORIGIN"]
            return run_build_tool(cmd, "linker", target, tmp, "tvmc_run")

    def build_candidate(self, prim, target, path: str) -> None:
        with open(path, "wb") as f:
            f.write(link_shared(compile_ir(_module([prim], target).ir_text(), target), target))

    def device_requirements(self, library: bytes) -> dict | None:
        from tvmc.codegen.elf import library_requirements

        return library_requirements(library)

    # --- running ----------------------------------------------------------------------------
    def load_candidate(self, path: str, func: str, arrays, out, sizes=()):
        import _ctypes

        lib = ctypes.CDLL(path)
        fn = getattr(lib, func)
        args = [ctypes.c_void_p(a.ctypes.data) for a in list(arrays) + [out]] + [ctypes.c_int64(v) for v in sizes]
        return (lambda: fn(*args)), (lambda: None), None, lambda: _ctypes.dlclose(lib._handle)

    def run_kernel(self, prim, target, arrays, out):
        """Here: the kernel's library through ctypes (a kernel with symbolic extents gets its
        SizeVars' values from the arrays' shapes, PrimFunc.size_args); a CPU of another
        architecture: the kernel as the one node of a graph, run by the C runner under the
        target's emulator."""
        if target.arch != host_arch():
            return self._run_emulated(prim, target, arrays, out)
        global _tmp
        if _tmp is None:
            _tmp = tempfile.TemporaryDirectory(prefix="tvmc-kernels-")
        so = link_shared(compile_ir(_module([prim], target).ir_text(), target), target)
        # a fresh file each time: rewriting a path that is still dlopen()ed corrupts the loaded
        # code, and dlopen() of a known path returns the old library
        path = Path(_tmp.name, f"{prim.name}_{next(_serial)}.so")
        path.write_bytes(so)
        lib = ctypes.CDLL(str(path))
        args = [np.ascontiguousarray(a) for a in arrays] + [out]
        getattr(lib, prim.name)(*[ctypes.c_void_p(a.ctypes.data) for a in args], *size_arguments(prim, args))
        return out

    def _run_emulated(self, prim, target, arrays, out):
        from tvmc.runtime.emulated import EmulatedProgram

        args = [np.ascontiguousarray(a) for a in arrays] + [out]
        library = self.kernel_graph_library(prim, target, [(a.shape, a.dtype) for a in args])
        program = EmulatedProgram(target, library, None, prim.name, self.link_runner)
        try:
            (result,), _ = program.run(args[:-1], 1)
        finally:
            program.close()
        np.copyto(out, result)
        return out

    def kernel_graph_library(self, prim, target, tensors) -> bytes:
        """A mod.so whose graph is the one kernel `prim` (one_kernel_graph over `tensors`: (shape,
        dtype) of its inputs, then of its output), with the graph entry, the module description
        and the C API: what the C runner (tvmc_run.c) runs. Raises CodegenError."""
        from tvmc.codegen import description
        from tvmc.codegen.entry import add_graph_entry

        cg = _module([prim], target)
        graph = one_kernel_graph(bind_sizes(cg, prim, [shape for shape, _ in tensors]), tensors)
        add_graph_entry(cg, graph)
        description.embed(cg.module, description.module_description(graph, {}))
        return link_shared(compile_ir(cg.ir_text(), target), target, [self.compile_runtime(target)])

    def build_emulated_candidate(self, prim, target, path: str, tensors) -> None:
        """A tuning candidate for a device that measures under the target's emulator (`tvmc
        device-worker --emulate`): the kernel as a one-kernel graph library
        (kernel_graph_library), which the C runner times there (tvmc.autotune.measure.EmulatedRunner)."""
        with open(path, "wb") as f:
            f.write(self.kernel_graph_library(prim, target, tensors))

    def check_device(self, device, origin) -> None:
        if device not in (None, "cpu"):
            raise ArtifactError(f"{origin}: a cpu artifact runs on device 'cpu', not '{device}'")

    def create_executor(self, artifact, device=None, target=None, **options):
        self.check_device(device, artifact.path)
        recorded = artifact.metadata.get("target") or {}
        if str(recorded.get("triple", "")).split("-")[0] not in ("", host_arch()):
            from tvmc.runtime.emulated import EmulatedExecutor

            return EmulatedExecutor(artifact, target, self.link_runner)
        from tvmc.runtime.cpu import GraphExecutor

        return GraphExecutor(artifact)

    def measure_missing(self, target) -> str | None:
        """Candidates are timed on this host's CPU: another architecture's code runs here only
        under emulation, whose times say nothing of the device."""
        if target.arch == host_arch():
            return None
        return (f"target {target.name}: tuning measures the kernels on this {host_arch()} host, which runs no "
                f"{target.arch} code (under emulation it would time QEMU, not the device); tune on an "
                f"{target.arch} machine and compile here with --tuning-records")

    def missing(self, target) -> str | None:
        if target.arch == host_arch():
            return None
        from tvmc.runtime.emulated import emulation_missing

        return emulation_missing(target)

    def device_missing(self, target) -> tuple:
        """This host's architecture: the CPU features the target's code needs (tvmc run's
        check_host); another one: its emulator and C compiler (emulated)."""
        if target.arch != host_arch():
            return self.missing(target), self.missing(target) is None
        from tvmc.runtime.executor import check_host

        try:
            check_host({"target": {**target.to_dict(), "host_features": list(target.host_features)}},
                       f"target {target.name}")
        except ArtifactError as e:
            return str(e), False
        return None, False


class WasmBackend(SharedObjectBackend):
    """mod.wasm for wasm32: the same LLVM module and C API, linked into one module by clang
    (wasm-ld), run by wasmtime here, by Node or a browser through tvmc.js."""

    name = "wasm"
    library_format = "wasm"
    # libc without files (wasi-libc's malloc and string functions, no stdio: a module that imports
    # nothing), its functions exported (clang hides wasm symbols by default)
    cflags = ("-std=c99", "-O2", "-DTVMC_RUNTIME_NO_FILES", "-fvisibility=default")
    # Kernels inlined into tvmc_graph_run make one function of the whole graph, which V8 compiles
    # worse (TurboFan, Node 20 --no-liftoff: the BERT-style int8 encoder 31 ms inlined, 23 ms as
    # calls) and tiers up late (its first optimized run comes after many Liftoff runs of the
    # graph); a call per kernel costs nothing measurable, and V8's CPU profiles name the kernels.
    kernels_noinline = True

    def c_flags(self, target) -> tuple:
        """cflags plus the target's cpu and clang's -m<feature> / -mno-<feature> spellings of its
        features (an engine refuses a module that uses a feature it lacks)."""
        flags = self.cflags
        if target.cpu:
            flags += (f"-mcpu={target.cpu}",)
        return flags + tuple(("-m" if f[0] == "+" else "-mno-") + f[1:] for f in target.features)

    def link_runner(self, library: bytes, target) -> bytes:
        from tvmc.errors import CodegenError

        raise CodegenError(f"target {target.name}: the C runner needs a shared-library target "
                           f"(this one builds {self.library_format})")

    def build_candidate(self, prim, target, path: str) -> None:
        Backend.build_candidate(self, prim, target, path)

    def build_emulated_candidate(self, prim, target, path: str, tensors) -> None:
        Backend.build_emulated_candidate(self, prim, target, path, tensors)

    def device_requirements(self, library: bytes) -> dict | None:
        return None

    def device_missing(self, target) -> tuple:
        """The engine and the linker's tools (missing): a wasm module runs in wasmtime, not emulated."""
        return self.missing(target), False

    def run_kernel(self, prim, target, arrays, out):
        from tvmc.runtime.wasm import run_kernel

        arrays = [np.ascontiguousarray(a) for a in arrays]
        sizes = prim.size_args([a.shape for a in arrays + [out]]) if prim.size_vars else []
        module = link_shared(compile_ir(_module([prim], target).ir_text(), target), target)
        return run_kernel(module, prim.name, arrays, out, prim.name, sizes)

    def check_device(self, device, origin) -> None:
        if device not in (None, "wasm"):
            raise ArtifactError(f"{origin}: a wasm artifact runs on device 'wasm', not '{device}'")

    def create_executor(self, artifact, device=None, target=None, **options):
        self.check_device(device, artifact.path)
        from tvmc.runtime.wasm import WasmExecutor

        return WasmExecutor(artifact)

    def missing(self, target) -> str | None:
        """The engine (wasmtime), the linker or one of its tools (each named with its package)."""
        from tvmc.errors import CodegenError
        from tvmc.runtime.wasm import wasm_available
        from tvmc.toolchain import find_linker_tools, find_tool

        try:
            find_tool(target.linker, target.linker_package, "linker", CodegenError)
            find_linker_tools(target, CodegenError)
        except CodegenError as e:
            return str(e)
        return wasm_available()


@functools.lru_cache(maxsize=8)
def _compile_c(source: str, linker: tuple, cflags: tuple, source_sha256: str, target) -> bytes:
    obj = source[:-2] + ".o"
    with tempfile.TemporaryDirectory(prefix="tvmc-cc-") as tmp:
        for name in (source, "tvmc_kernels.h"):
            Path(tmp, name).write_bytes(resources.files("tvmc.runtime").joinpath(name).read_bytes())
        cmd = list(linker) + list(cflags) + ["-c", "-o", obj, source]
        return run_build_tool(cmd, "C compiler", target, tmp, obj)


def size_arguments(prim, arrays) -> list:
    """The int64 arguments after the buffers of kernel `prim` run on numpy `arrays` (inputs, then
    the output): the values of its SizeVars read from the arrays' shapes (PrimFunc.size_args), as
    ctypes values; none for a kernel of static shapes. Raises ValueError naming a shape that
    does not fit."""
    if not prim.size_vars:
        return []
    return [ctypes.c_int64(v) for v in prim.size_args([a.shape for a in arrays])]


def bind_sizes(cg: CodeGenLLVM, prim, shapes) -> str:
    """The name of a function of `cg`'s module that runs kernel `prim` on buffers alone: the
    kernel itself, or for a kernel with symbolic extents a wrapper `<name>_sized(ptr...)` that
    passes the SizeVars' values for the buffers' `shapes` (inputs, then the output) as constants
    (a graph entry calls kernels with buffers only: tvmc.codegen.entry)."""
    if not prim.size_vars:
        return prim.name
    from llvmlite import ir

    from tvmc.codegen.llvm import I64, PTR, VOID

    kernel = cg.module.get_global(prim.name)
    name = f"{prim.name}_sized"
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR] * len(prim.params)), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(kernel, list(fn.args) + [I64(v) for v in prim.size_args(list(shapes))])
    b.ret_void()
    return name


def one_kernel_graph(name: str, tensors) -> dict:
    """Graph-executor JSON of one kernel `name` over `tensors` ((shape, dtype) of its inputs, then
    of its output), each a graph input or output with a storage of its own."""
    n = len(tensors)
    nodes = [{"op": "null", "name": f"arg{k}", "inputs": []} for k in range(n - 1)]
    nodes.append({"op": "tvm_op", "name": name, "inputs": [[k, 0, 0] for k in range(n - 1)],
                  "attrs": {"func_name": name, "num_inputs": n - 1, "num_outputs": 1}})
    return {"nodes": nodes, "arg_nodes": list(range(n - 1)), "node_row_ptr": list(range(n + 1)),
            "heads": [[n - 1, 0, 0]],
            "attrs": {"shape": ["list_shape", [[int(d) for d in shape] for shape, _ in tensors]],
                      "dltype": ["list_str", [np.dtype(dtype).name for _, dtype in tensors]],
                      "storage_id": ["list_int", list(range(n))]}}
