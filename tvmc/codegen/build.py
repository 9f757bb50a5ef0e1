"""Build: fused functions -> loop IR -> the target's kernel library.

CPU targets: one LLVM module -> object file -> shared library (mod.so) with the graph entry.
GPU targets: one device kernel per fused function, each kernel's launch in mod.json "kernels";
printed as OpenCL C (mod.cl, tvmc.codegen.opencl) or compiled by LLVM's NVPTX backend to PTX
(mod.ptx), with a cubin beside it where the descriptor's assembler (ptxas) is found
(tvmc.codegen.nvptx).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.errors import CodegenError
from tvmc.toolchain import find_tool

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
    return tgt.create_target_machine(cpu=target.cpu, features=llvm_features(target), opt=3,
                                     reloc="pic", codemodel="default")


def llvm_features(target) -> str:
    """LLVM's -mattr for `target`: the descriptor's features; for nvptx64 the PTX ISA version
    (tvmc.codegen.nvptx.ptx_version), which LLVM would otherwise default per its own version."""
    if target.arch == "nvptx64":
        from tvmc.codegen.nvptx import ptx_version

        return f"+ptx{ptx_version(target)}"
    return ",".join(target.features)


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
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the generated IR: {str(e).strip().splitlines()[0]}") from None
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    optimize(mod, tm)
    if dumps is not None:
        dumps["ll"] = str(mod)  # before emission: the backend's passes change the module
    asm = tm.emit_assembly(mod) if assembly or "asm" in (dumps or {}).get("_want", ()) else None
    if dumps is not None and asm is not None:
        dumps["asm"] = asm
    return asm.encode() if assembly else tm.emit_object(mod)


def link_shared(obj: bytes, target) -> bytes:
    """Link an object into a shared library with the descriptor's linker command."""
    with tempfile.TemporaryDirectory(prefix="tvmc-link-") as tmp:
        o, so = Path(tmp, "mod.o"), Path(tmp, "mod.so")
        o.write_bytes(obj)
        cmd = list(target.linker) + ["-o", str(so), str(o)]
        find_tool(cmd, target.linker_package, f"target {target.name}: linker", CodegenError)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise CodegenError(f"target {target.name}: cannot run linker '{cmd[0]}': {e.strerror or e}") from None
        if res.returncode != 0:
            err = (res.stderr.strip().splitlines() or ["?"])[0]
            raise CodegenError(f"linking failed: {err} (command: {' '.join(cmd)})")
        return so.read_bytes()


def kernel_info(prim, flops: int) -> dict:
    """What mod.json records of a device kernel: its launch (grid, block, shared bytes), its
    arguments in call order (inputs, then the output; name, shape, dtype), its FLOPs (the anchor
    op's, tvmc.autotune.task.task_flops) and the global memory bytes it loads and stores
    (tvmc.tir.gpu.global_traffic_bytes)."""
    from tvmc.tir.gpu import global_traffic_bytes

    return dict(prim.launch.to_dict(), args=[{"name": b.name, "shape": list(b.shape), "dtype": b.dtype}
                                             for b in prim.params],
                flops=flops, global_bytes=global_traffic_bytes(prim))


def _flops(func) -> int:
    from tvmc.autotune.task import task_flops
    from tvmc.ops.fused import anchor_call, workload

    anchor = anchor_call(func)
    return task_flops(anchor.op, workload(anchor), tuple(i.dtype for i in anchor.inputs))


def _write_dumps(dump_dir, dump_ir, prims, dumps: dict) -> None:
    """Write the stages listed in `dump_ir` into `dump_dir`: mod.tir (the loop IR of `prims`),
    mod.ll and mod.s (from `dumps`, where the target's codegen produced them)."""
    if not dump_dir or not dump_ir:
        return
    os.makedirs(dump_dir, exist_ok=True)
    if "tir" in dump_ir:
        Path(dump_dir, "mod.tir").write_text("".join(str(p) for p in prims))
    for stage, name in (("ll", "mod.ll"), ("asm", "mod.s")):
        if stage in dump_ir and stage in dumps:
            Path(dump_dir, name).write_text(dumps[stage])


def build_library(functions, target, dump_ir=(), dump_dir=None, graph_json=None, config_lookup=None,
                  device_binaries: dict | None = None) -> bytes:
    """Compile fused graph `Function`s for `target` into its kernel library (module docstring).

    CPU: shared-library bytes; each Function becomes a kernel `void <name>(void* arg0, ...,
    void* out)` (see the kernel ABI header tvmc_kernels.h); with `graph_json`, the library also
    gets the graph entry `tvmc_graph_run` (tvmc.codegen.entry). GPU: OpenCL C or PTX text; with
    `graph_json`, each kernel's launch configuration and argument order are added to it as
    graph_json["kernels"][func_name] (kernel_info), and `device_binaries` (a dict) receives
    {member name: bytes} of device code assembled beside the library (mod.cubin).
    `dump_ir` may contain 'tir', 'll', 'asm': those stages are written into `dump_dir` as
    mod.tir, mod.ll, mod.s (LLVM targets; mod.s is the PTX for CUDA). `config_lookup(impl_name,
    workload) -> ConfigEntity | None` (e.g. autotune.record.ApplyHistoryBest) supplies tuned
    configs to lower_fused. Raises ScheduleError (a kernel beyond the target's limits) or
    CodegenError.
    """
    from tvmc.codegen.entry import add_graph_entry
    from tvmc.ops.fused import lower_fused

    prims = [lower_fused(f, target, config_lookup) for f in functions]
    if target.kind == "gpu" and graph_json is not None:
        graph_json["kernels"] = {p.name: kernel_info(p, _flops(f)) for p, f in zip(prims, functions)}
    dumps = {"_want": tuple(dump_ir)}
    if target.codegen == "opencl":
        from tvmc.codegen.opencl import CodeGenOpenCL

        cl = CodeGenOpenCL(target)
        for p in prims:
            cl.add_function(p)
        _write_dumps(dump_dir, dump_ir, prims, dumps)
        return cl.source().encode()
    cg = CodeGenLLVM(target)
    for p in prims:
        cg.add_function(p)
    if target.library_format == "ptx":
        from tvmc.codegen.nvptx import assemble

        ptx = compile_ir(cg.ir_text(), target, dumps, assembly=True)
        _write_dumps(dump_dir, dump_ir, prims, dumps)
        if device_binaries is not None:
            device_binaries.update(assemble(ptx, target, {p.name: p.launch.threads_per_block for p in prims}))
        return ptx
    if graph_json is not None:
        add_graph_entry(cg, graph_json)
    obj = compile_ir(cg.ir_text(), target, dumps)
    _write_dumps(dump_dir, dump_ir, prims, dumps)
    return link_shared(obj, target)
