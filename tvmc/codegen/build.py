"""Build: fused functions -> loop IR -> one LLVM module -> object file -> shared library (mod.so)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import CodegenError

_initialized = False


def _init_llvm():
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def target_machine(target):
    """An LLVM TargetMachine for the descriptor's triple, cpu and features (PIC, O3)."""
    _init_llvm()
    try:
        tgt = llvm.Target.from_triple(target.triple)
    except RuntimeError as e:
        raise CodegenError(f"target {target.name}: LLVM does not know triple {target.triple}: {e}") from None
    return tgt.create_target_machine(cpu=target.cpu, features=",".join(target.features), opt=3,
                                     reloc="pic", codemodel="default")


def optimize(mod, tm, speed_level: int = 3):
    """Run LLVM's new-pass-manager O3 pipeline (loop and SLP vectorizers on) over `mod`."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(ir_text: str, target, dumps: dict | None = None) -> bytes:
    """LLVM IR text -> optimized object file bytes for `target`. Raises CodegenError."""
    tm = target_machine(target)
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the generated IR: {str(e).strip().splitlines()[0]}") from None
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    optimize(mod, tm)
    if dumps is not None:
        dumps["ll"] = str(mod)
        if "asm" in dumps.get("_want", ()):
            dumps["asm"] = tm.emit_assembly(mod)
    return tm.emit_object(mod)


def link_shared(obj: bytes, target) -> bytes:
    """Link an object into a shared library with the descriptor's linker command."""
    with tempfile.TemporaryDirectory(prefix="tvmc-link-") as tmp:
        o, so = Path(tmp, "mod.o"), Path(tmp, "mod.so")
        o.write_bytes(obj)
        cmd = list(target.linker) + ["-o", str(so), str(o)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise CodegenError(f"linker '{cmd[0]}' not found (target {target.name} needs it)") from None
        if res.returncode != 0:
            err = (res.stderr.strip().splitlines() or ["?"])[0]
            raise CodegenError(f"linking failed: {err} (command: {' '.join(cmd)})")
        return so.read_bytes()


def build_library(functions, target, dump_ir=(), dump_dir=None, graph_json=None, config_lookup=None,
                  progress=None) -> bytes:
    """Compile fused graph `Function`s for `target` into shared-library bytes.

    Each Function becomes a kernel `void <name>(void* arg0, ..., void* out)` (see the kernel
    ABI header tvmc_kernels.h); with `graph_json`, the library also gets the graph entry
    `tvmc_graph_run` (tvmc.codegen.entry). `dump_ir` may contain 'tir', 'll', 'asm': those
    stages are written into `dump_dir` as mod.tir, mod.ll, mod.s. `config_lookup(impl_name,
    workload) -> ConfigEntity | None` (e.g. autotune.record.ApplyHistoryBest) supplies tuned
    configs to lower_fused. `progress(stage, done, total)`, when given, is called after each
    kernel is lowered (stage "lower", total = number of functions), before LLVM optimizes and
    emits the module ("llvm", 0 of 1) and before linking ("link", 0 of 1).
    """
    from tvmc.codegen.entry import add_graph_entry
    from tvmc.ops.fused import lower_fused

    progress = progress or (lambda stage, done, total: None)
    prims = []
    for f in functions:
        prims.append(lower_fused(f, target, config_lookup))
        progress("lower", len(prims), len(functions))
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    if graph_json is not None:
        add_graph_entry(cg, graph_json)
    dumps = {"_want": tuple(dump_ir)}
    progress("llvm", 0, 1)
    obj = compile_ir(cg.ir_text(), target, dumps)
    if dump_dir and dump_ir:
        os.makedirs(dump_dir, exist_ok=True)
        if "tir" in dump_ir:
            Path(dump_dir, "mod.tir").write_text("".join(str(p) for p in prims))
        if "ll" in dump_ir:
            Path(dump_dir, "mod.ll").write_text(dumps["ll"])
        if "asm" in dump_ir:
            Path(dump_dir, "mod.s").write_text(dumps["asm"])
    progress("link", 0, 1)
    return link_shared(obj, target)
