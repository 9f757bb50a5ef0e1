"""NVPTX specifics of the build (CUDA targets): the PTX ISA version LLVM declares, and the cubin
that the descriptor's assembler (ptxas) makes from the PTX beside it.

The kernels themselves are CodeGenLLVM's, through the nvptx64 DeviceTable (tvmc/codegen/llvm.py),
and their PTX is LLVM's NVPTX backend's (tvmc.codegen.build.compile_ir): no CUDA toolkit is
needed to compile. ptxas, where it is found, checks the PTX as the driver would and assembles it
for the descriptor's compute capability, so a GPU of that architecture loads machine code
instead of JIT-compiling mod.ptx.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from tvmc.codegen.llvm import DEVICE_TABLES, block_register_bound
from tvmc.errors import CodegenError, TargetError
from tvmc.constants import CUBIN_NAME
from tvmc.process import run_tool
from tvmc.target import isa_table


def _ptx_number(features) -> int:
    return max((int(f[3:]) for f in features if f.startswith("ptx")), default=0)


def ptx_version(target) -> int:
    """The PTX ISA version kernels for nvptx64 `target` declare, as LLVM's feature number (78 for
    PTX 7.8): the newest one its cpu (compute capability) and features enable
    (targets/isa/nvptx64.yaml). Raises TargetError when the descriptor names no cpu or its
    features remove the version the cpu needs (LLVM would abort the process)."""
    isa = isa_table(target.arch)
    origin = f"target {target.name}"
    if target.cpu not in isa.cpus:
        raise TargetError(f"{origin}: needs a cpu (compute capability); known: {', '.join(sorted(isa.cpus))}")
    have = _ptx_number(isa.enabled_features(target.cpu, target.features, origin))
    need = _ptx_number(isa.cpus[target.cpu])
    if have < need:
        raise TargetError(f"{origin}: {target.cpu} needs PTX ISA {need // 10}.{need % 10} (+ptx{need}); "
                          f"its features remove it")
    return have


def assembler_missing(target) -> str | None:
    """None when `target`'s assembler (ptxas) is on PATH, else why not (for messages and test skips)."""
    if not target.assembler:
        return f"target {target.name} names no assembler"
    if shutil.which(target.assembler[0]) is None:
        return f"assembler '{target.assembler[0]}' not found on PATH (it comes with the CUDA toolkit)"
    return None


def assemble(ptx: bytes, target, block_threads: dict) -> dict:
    """{CUBIN_NAME: cubin bytes} of `ptx` assembled by `target`'s assembler for its cpu
    (`ptxas -arch=sm_XY`), or {} when the assembler is not found. `block_threads` ({kernel:
    threads per block}) checks that each kernel's block fits the target's registers per block
    (else the launch would fail on the GPU). Raises CodegenError with the first line of ptxas's
    message and the command that reproduces it when ptxas rejects the PTX, or naming the kernel
    whose block does not fit."""
    if assembler_missing(target):
        return {}
    cubin, stderr = run_ptxas(ptx, target, ["-v"])
    unit = DEVICE_TABLES[target.arch].register_unit
    for name, used in _resources(stderr).items():
        threads = block_threads.get(name, 0)
        if threads and used["registers"] > block_register_bound(target, threads, unit):
            raise CodegenError(f"kernel {name}: ptxas gave each of its {threads} threads {used['registers']} "
                               f"registers, beyond target {target.name}'s {target.registers_per_block} per block")
    return {CUBIN_NAME: cubin}


def run_ptxas(ptx: bytes, target, extra_args=()) -> tuple:
    """(cubin bytes, ptxas's stderr) of `ptx` assembled for `target`'s cpu; `extra_args` are
    added to the command (e.g. ["-v"]: per-kernel register and spill counts on stderr). Raises
    CodegenError when the assembler is missing or rejects the PTX."""
    missing = assembler_missing(target)
    if missing:
        raise CodegenError(missing)
    with tempfile.TemporaryDirectory(prefix="tvmc-ptxas-") as tmp:
        src, out = Path(tmp, "mod.ptx"), Path(tmp, CUBIN_NAME)
        src.write_bytes(ptx)
        cmd = [*target.assembler, f"-arch={target.cpu}", *extra_args, "-o", str(out), str(src)]
        try:
            res = run_tool(cmd, max_output_bytes=16 << 20)  # -v: a few lines per kernel
        except OSError as e:
            raise CodegenError(f"target {target.name}: cannot run assembler '{cmd[0]}': {e.strerror or e}") from None
        if res.returncode != 0:
            err = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()),
                       (res.stderr.strip().splitlines() or ["?"])[0])
            raise CodegenError(f"ptxas rejected the PTX: {err.strip()} (command: {' '.join(cmd)})")
        return out.read_bytes(), res.stderr


def kernel_resources(ptx: bytes, target) -> dict:
    """What ptxas allocates for each kernel of `ptx` on `target`'s GPU (`ptxas -v`): {kernel:
    {"registers": per thread, "smem": static shared memory bytes per block, "spill_bytes": local
    memory bytes stored and loaded for spilled registers}}. Raises CodegenError as run_ptxas."""
    return _resources(run_ptxas(ptx, target, ["-v"])[1])


def _resources(stderr: str) -> dict:
    out, name = {}, None
    for line in stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
            out[name] = {"registers": 0, "smem": 0, "spill_bytes": 0}
        elif name is not None:
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if spills:
                out[name]["spill_bytes"] = int(spills.group(1)) + int(spills.group(2))
            regs = re.search(r"Used (\d+) registers", line)
            if regs:
                out[name]["registers"] = int(regs.group(1))
                smem = re.search(r"(\d+) bytes smem", line)
                out[name]["smem"] = int(smem.group(1)) if smem else 0
    return out
