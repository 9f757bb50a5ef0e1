"""LLVM and the toolchain: an LLVM module's text -> object file or assembly (PTX) for the
descriptor's triple, cpu and features (target_machine, compile_ir), and the descriptor's linker,
a C compiler driver that tvmc runs (link_shared, run_build_tool). The backends
(tvmc/backends/) put these together into each kind of library.

LLVM's own diagnostics (written to the process's stderr) are captured: an unknown cpu or
feature is a TargetError, other messages go to the `tvmc` logger (shown by `--verbose`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import tempfile
from importlib import resources
from pathlib import Path

import llvmlite.binding as llvm

from tvmc.errors import CodegenError, TargetError
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
# Architectures LLVM emits assembly for, never object files (NVPTX: PTX text)
ASSEMBLY_ONLY = ("nvptx64",)


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
        tm.emit_assembly(probe) if target.arch in ASSEMBLY_ONLY else tm.emit_object(probe)
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


def run_build_tool(cmd: list, what: str, target, cwd: str, output: str) -> bytes:
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
        return run_build_tool(list(target.linker) + ["-o", output, *names], "linker", target, tmp, output)
