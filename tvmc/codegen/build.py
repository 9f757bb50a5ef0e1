"""Build: fused functions -> loop IR -> the target's kernel library.

CPU targets (mod.so, mod.wasm): one LLVM module -> object file -> library. The library of a graph
also holds the C API (tvmc/runtime/tvmc_runtime.c), compiled and linked by the descriptor's
`linker`, a C compiler driver: a command that tvmc runs. For wasm32 the same driver (clang) links
one mod.wasm that exports the kernels, the graph entry and the C API, with wasi-libc's malloc as
the module's allocator (RUNTIME_CFLAGS says how the C API is built).
GPU targets: one device kernel per fused function, each kernel's launch in mod.json "kernels";
printed as OpenCL C (mod.cl, tvmc.codegen.opencl) or compiled by LLVM's NVPTX backend to PTX
(mod.ptx), with a cubin beside it where the descriptor's assembler (ptxas) is found
(tvmc.codegen.nvptx); both carry the module description as their first line.
LLVM's own diagnostics (written to the process's stderr) are captured: an unknown cpu or
feature is a TargetError, other messages go to the `tvmc` logger (shown by `--verbose`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shlex
import tempfile
from importlib import resources
from pathlib import Path

import llvmlite.binding as llvm

from tvmc.codegen import description
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import CodegenError, ScheduleError, TargetError, TVMCError
from tvmc.paths import write_new_text
from tvmc.process import run_tool
from tvmc.toolchain import find_linker_tools, find_tool

RUNTIME_SOURCE = "tvmc_runtime.c"
log = logging.getLogger("tvmc")
_initialized = False


@contextlib.contextmanager
def native_stderr(sink: list):
    """Redirect file descriptor 2 (where LLVM's C++ code prints) into a temporary file while the
    block runs; append what was written to `sink`."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to capture
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace").strip()
            if text:
                sink.append(text)


def _init_llvm():
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


# Relocation model per architecture: position-independent code for shared libraries; wasm32
# modules are linked statically (PIC wasm would import its memory and table bases).
RELOCATION = {"wasm32": "static"}


def target_machine(target):
    """An LLVM TargetMachine for the descriptor's triple, cpu and features (RELOCATION, else
    PIC; O3).

    Raises TargetError when LLVM does not know the triple, or says the cpu or a feature is not
    one of the triple's (LLVM would ignore them, or abort later while selecting instructions).
    """
    _init_llvm()
    try:
        tgt = llvm.Target.from_triple(target.triple)
    except RuntimeError as e:
        raise TargetError(f"target {target.name}: LLVM does not know triple {target.triple}: {e}") from None
    said: list = []
    with native_stderr(said):
        tm = tgt.create_target_machine(cpu=target.cpu, features=llvm_features(target), opt=3,
                                       reloc=RELOCATION.get(target.arch, "pic"), codemodel="default")
        probe = llvm.parse_assembly(f'target triple = "{target.triple}"')
        # NVPTX emits no object files, only assembly (PTX)
        tm.emit_assembly(probe) if target.library_format == "ptx" else tm.emit_object(probe)
    for line in "\n".join(said).splitlines():
        if "is not a recognized" in line:
            raise TargetError(f"target {target.name} ({target.triple}): LLVM says {line.strip()[:200]}")
    _log_llvm(said)
    return tm


def llvm_features(target) -> str:
    """LLVM's -mattr for `target`: the descriptor's features; for nvptx64 the PTX ISA version
    (tvmc.codegen.nvptx.ptx_version), which LLVM would otherwise default per its own version."""
    if target.arch == "nvptx64":
        from tvmc.codegen.nvptx import ptx_version

        return f"+ptx{ptx_version(target)}"
    return ",".join(target.features)


def _log_llvm(said: list) -> None:
    for text in said:
        log.info("LLVM: %s", text)


def optimize(mod, tm, speed_level: int = 3):
    """Run LLVM's new-pass-manager O3 pipeline (loop and SLP vectorizers on) over `mod`."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(ir_text: str, target, dumps: dict | None = None, assembly: bool = False) -> bytes:
    """LLVM IR text -> optimized object file bytes for `target` (with `assembly`, the assembly
    text instead: PTX for nvptx64). `dumps` receives 'll' (and 'asm' when listed in its '_want').
    Raises CodegenError."""
    tm = target_machine(target)
    said: list = []
    with native_stderr(said):
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
        except RuntimeError as e:
            raise CodegenError(f"LLVM rejected the generated IR: {str(e).strip().splitlines()[0][:300]}") from None
        mod.triple = target.triple
        mod.data_layout = str(tm.target_data)
        optimize(mod, tm)
        if dumps is not None:
            dumps["ll"] = str(mod)  # before emission: the backend's passes change the module
        asm = tm.emit_assembly(mod) if assembly or "asm" in (dumps or {}).get("_want", ()) else None
        if dumps is not None and asm is not None:
            dumps["asm"] = asm
        obj = asm.encode() if assembly else tm.emit_object(mod)
    _log_llvm(said)
    return obj


def _run_tool(cmd: list, what: str, target, cwd: str, output: str) -> bytes:
    """Run a toolchain command in `cwd` (tvmc.process.run_tool: its own process group and
    temporary folder, bounded output, killed on a signal); return the bytes of the file `output`
    it must write. Raises CodegenError naming the tool, its first line of stderr and the command."""
    find_tool(cmd, target.linker_package, f"target {target.name}: {what}", CodegenError)
    try:
        res = run_tool(cmd, cwd=cwd)
    except FileNotFoundError:
        raise CodegenError(f"{what} '{cmd[0]}' not found (target {target.name} needs it)") from None
    except OSError as e:
        raise CodegenError(f"{what} '{cmd[0]}' cannot run: {e.strerror or e} (target {target.name})") from None
    if res.returncode != 0:
        err = (res.stderr.strip().splitlines() or ["?"])[0][:300]
        raise CodegenError(f"{what} failed: {err} (command: {shlex.join(cmd)})")
    path = Path(cwd, output)
    if not path.is_file() or path.stat().st_size == 0:
        raise CodegenError(f"{what} exited 0 but wrote no {output} (command: {shlex.join(cmd)})")
    return path.read_bytes()


def runtime_source() -> bytes:
    """The C API's source, tvmc/runtime/tvmc_runtime.c, with the header it includes."""
    return resources.files("tvmc.runtime").joinpath(RUNTIME_SOURCE).read_bytes()


# Flags compiling the shipped C sources (the C API, the C runner), per library format:
# position-independent code for shared libraries; for wasm, libc without files (wasi-libc's malloc
# and string functions, no stdio: a module that imports nothing), its functions exported (clang
# hides wasm symbols by default), and the target's cpu and features (an engine refuses a module
# that uses a feature it lacks).
RUNTIME_CFLAGS = {
    "so": ("-std=c99", "-O2", "-fPIC"),
    "wasm": ("-std=c99", "-O2", "-DTVMC_RUNTIME_NO_FILES", "-fvisibility=default"),
}
CPU_FLAGS_FORMATS = ("wasm",)
RUNNER_SOURCE = "tvmc_run.c"


def runtime_cflags(target) -> tuple:
    """RUNTIME_CFLAGS of the target's library format, with -mcpu and clang's -m<feature> /
    -mno-<feature> spellings of its cpu and features for the formats in CPU_FLAGS_FORMATS."""
    flags = RUNTIME_CFLAGS[target.library_format]
    if target.library_format in CPU_FLAGS_FORMATS:
        if target.cpu:
            flags += (f"-mcpu={target.cpu}",)
        flags += tuple(("-m" if f[0] == "+" else "-mno-") + f[1:] for f in target.features)
    return flags


@functools.lru_cache(maxsize=8)
def _compile_c(source: str, linker: tuple, cflags: tuple, source_sha256: str, target) -> bytes:
    obj = source[:-2] + ".o"
    with tempfile.TemporaryDirectory(prefix="tvmc-cc-") as tmp:
        for name in (source, "tvmc_kernels.h"):
            Path(tmp, name).write_bytes(resources.files("tvmc.runtime").joinpath(name).read_bytes())
        cmd = list(linker) + list(cflags) + ["-c", "-o", obj, source]
        return _run_tool(cmd, "C compiler", target, tmp, obj)


def _compile_shipped(source: str, target) -> bytes:
    """Object file of tvmc/runtime/`source` for `target`, compiled by its linker command (a C
    compiler driver such as gcc, aarch64-linux-gnu-gcc or clang for wasm32, with its flags:
    -shared and linker flags are ignored with -c) and runtime_cflags(target); memoized per
    command, flags and source, so a process compiling many models compiles it once."""
    sha = hashlib.sha256(resources.files("tvmc.runtime").joinpath(source).read_bytes()).hexdigest()
    return _compile_c(source, tuple(target.linker), runtime_cflags(target), sha, target)


def compile_runtime(target) -> bytes:
    """Object file of the C API (tvmc/runtime/tvmc_runtime.c) for `target` (see _compile_shipped)."""
    return _compile_shipped(RUNTIME_SOURCE, target)


def link_runner(library: bytes, target) -> bytes:
    """The C runner (tvmc/runtime/tvmc_run.c: .npy inputs and outputs, a timing loop) as an
    executable for `target`, linked against `library` (the bytes of a mod.so) by the target's
    linker command without `-shared`. It loads `mod.so` from its own folder (DT_NEEDED mod.so,
    RUNPATH $ORIGIN), so it runs with any mod.so of that target beside it. Raises CodegenError
    when the compiler is missing or fails, or the target builds no shared library (wasm)."""
    if target.library_format != "so":
        raise CodegenError(f"target {target.name}: the C runner needs a shared-library target "
                           f"(this one builds {target.library_format})")
    obj = _compile_shipped(RUNNER_SOURCE, target)
    with tempfile.TemporaryDirectory(prefix="tvmc-link-") as tmp:
        Path(tmp, "tvmc_run.o").write_bytes(obj)
        Path(tmp, "mod.so").write_bytes(library)
        cmd = [w for w in target.linker if w != "-shared"] + \
            ["-o", "tvmc_run", "tvmc_run.o", "mod.so", "-lm", "-Wl,-rpath,$ORIGIN"]
        return _run_tool(cmd, "linker", target, tmp, "tvmc_run")


def link_shared(obj: bytes, target, extra_objects=()) -> bytes:
    """Link an object (and `extra_objects`, object file bytes) into the target's library
    (mod.<library_format>: a shared library, or a wasm module) with the descriptor's linker
    command. Raises CodegenError when the linker or one of the descriptor's `tools` is missing,
    the linker fails, or exits 0 without writing the library."""
    find_linker_tools(target, CodegenError)
    output = f"mod.{target.library_format}"
    with tempfile.TemporaryDirectory(prefix="tvmc-link-") as tmp:
        names = ["mod.o"] + [f"extra{i}.o" for i in range(len(extra_objects))]
        for name, data in zip(names, [obj, *extra_objects]):
            Path(tmp, name).write_bytes(data)
        return _run_tool(list(target.linker) + ["-o", output, *names], "linker", target, tmp, output)


def kernel_info(prim, flops: int) -> dict:
    """What mod.json records of a device kernel: its launch (grid, block, shared bytes), its
    arguments in call order (inputs, then the output; name, shape, dtype), its FLOPs (the anchor
    op's, tvmc.autotune.task.task_flops) and the global memory bytes it loads and stores
    (tvmc.tir.gpu.global_traffic_bytes)."""
    from tvmc.tir.gpu import global_traffic_bytes

    return dict(prim.launch.to_dict(), args=[{"name": b.name, "shape": list(b.shape), "dtype": b.dtype}
                                             for b in prim.params],
                flops=flops, global_bytes=global_traffic_bytes(prim))


def _anchor_name(func) -> str:
    """The graph node a fused function was made from (its anchor call's name), or '?'."""
    from tvmc.ops.fused import anchor_call

    try:
        return anchor_call(func).name or "?"
    except Exception:  # only for an error message
        return "?"


def _flops(func) -> int:
    from tvmc.autotune.task import task_flops
    from tvmc.ops.fused import anchor_call, workload

    anchor = anchor_call(func)
    return task_flops(anchor.op, workload(anchor), tuple(i.dtype for i in anchor.inputs))


def _write_dumps(dump_dir, dump_ir, prims, dumps: dict) -> None:
    """Write the stages listed in `dump_ir` into `dump_dir` (files created exclusively,
    tvmc.paths.write_new_text): mod.tir (the loop IR of `prims`), mod.ll and mod.s (from
    `dumps`, where the target's codegen produced them)."""
    if not dump_dir or not dump_ir:
        return
    os.makedirs(dump_dir, exist_ok=True)
    if "tir" in dump_ir:
        write_new_text(Path(dump_dir, "mod.tir"), "".join(str(p) for p in prims))
    for stage, name in (("ll", "mod.ll"), ("asm", "mod.s")):
        if stage in dump_ir and stage in dumps:
            write_new_text(Path(dump_dir, name), dumps[stage])


def build_library(functions, target, dump_ir=(), dump_dir=None, graph_json=None, config_lookup=None,
                  params=None, progress=None, device_binaries: dict | None = None) -> bytes:
    """Compile fused graph `Function`s for `target` into its kernel library (module docstring).

    CPU: library bytes (mod.so, mod.wasm); each Function becomes a kernel `void <name>(void*
    arg0, ..., void* out)` (see the kernel ABI header tvmc_kernels.h); with `graph_json` (and
    its `params`, {name: np.ndarray}), the library also gets the graph entry `tvmc_graph_run`
    (tvmc.codegen.entry), the module description it was compiled for (tvmc.codegen.description)
    and the C API. GPU: OpenCL C or PTX text; with `graph_json`, each kernel's launch
    configuration and argument order are added to it as graph_json["kernels"][func_name]
    (kernel_info), the module description becomes the text's first line, and
    `device_binaries` (a dict) receives {member name: bytes} of device code assembled beside
    the library (mod.cubin). `dump_ir` may contain 'tir', 'll', 'asm': those stages are written
    into `dump_dir` as mod.tir, mod.ll, mod.s (LLVM targets; mod.s is the PTX for CUDA).
    `config_lookup(impl_name, workload) -> ConfigEntity | None` (e.g.
    autotune.record.ApplyHistoryBest) supplies tuned configs to lower_fused.
    `progress(stage, done, total)`, when given, is called after each kernel is lowered (stage
    "lower", total = number of functions), before LLVM optimizes and emits the module ("llvm",
    0 of 1) and before linking ("link", 0 of 1). Raises ScheduleError (a kernel beyond the
    target's limits) or CodegenError.
    """
    from tvmc.codegen.entry import add_graph_entry
    from tvmc.ops.fused import lower_fused

    progress = progress or (lambda stage, done, total: None)
    prims = []
    for f in functions:
        try:
            prims.append(lower_fused(f, target, config_lookup))
        except (TVMCError, RecursionError):
            raise
        except Exception as e:  # a schedule's own bug or a workload it did not foresee: name the kernel
            raise ScheduleError(f"kernel {f.name} (node '{_anchor_name(f)}'): lowering failed: "
                                f"{type(e).__name__}: {str(e).strip()[:200]}") from e
        progress("lower", len(prims), len(functions))
    if target.kind == "gpu" and graph_json is not None:
        graph_json["kernels"] = {p.name: kernel_info(p, _flops(f)) for p, f in zip(prims, functions)}
    described = None if graph_json is None else \
        description.module_description(graph_json, description.param_info(params or {}))
    dumps = {"_want": tuple(dump_ir)}
    if target.codegen == "opencl":
        from tvmc.codegen.opencl import CodeGenOpenCL

        cl = CodeGenOpenCL(target)
        for p in prims:
            cl.add_function(p)
        _write_dumps(dump_dir, dump_ir, prims, dumps)
        source = cl.source()
        return (source if described is None else description.embed_in_source(source, described)).encode()
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    progress("llvm", 0, 1)
    if target.library_format == "ptx":
        from tvmc.codegen.nvptx import assemble

        ptx = compile_ir(cg.ir_text(), target, dumps, assembly=True)
        _write_dumps(dump_dir, dump_ir, prims, dumps)
        if device_binaries is not None:
            device_binaries.update(assemble(ptx, target, {p.name: p.launch.threads_per_block for p in prims}))
        return ptx if described is None else description.embed_in_source(ptx.decode(), described).encode()
    if graph_json is not None:
        add_graph_entry(cg, graph_json)
        description.embed(cg.module, described, target.library_format)
    obj = compile_ir(cg.ir_text(), target, dumps)
    _write_dumps(dump_dir, dump_ir, prims, dumps)
    progress("link", 0, 1)
    return link_shared(obj, target, [compile_runtime(target)] if graph_json is not None else [])
