"""Targets the tests run on: one registry, so op and model tests are parametrized over targets
instead of being copied per target (DESIGN.md section 7).

Each entry names the target spec tvmc resolves, why it cannot run here (None when it can: the
reason names the missing tool and how to install it, and becomes the test's skip message), the
pytest marks of its tests (`-m cuda` selects the GPU ones) and how one compiled kernel runs on it
(`run_kernel(prim, arrays, out)`). Adding a target (ARM under qemu, wasm) is one entry here and,
where its runtime is new, one kernel runner.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from tvmc.target import resolve_target

_tmp = tempfile.TemporaryDirectory(prefix="tvmc-test-kernels-")
_serial = itertools.count()


def run_cpu_kernel(prim, target, arrays, out):
    """Compile `prim` with the LLVM codegen into a shared library and call it through ctypes."""
    from tvmc.codegen.build import compile_ir, link_shared
    from tvmc.codegen.llvm import CodeGenLLVM

    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    so = link_shared(compile_ir(cg.ir_text(), target), target)
    # a fresh file each time: rewriting a path that is still dlopen()ed corrupts the loaded code,
    # and dlopen() of a known path returns the old library
    path = Path(_tmp.name, f"{prim.name}_{next(_serial)}.so")
    path.write_bytes(so)
    lib = ctypes.CDLL(str(path))
    args = [np.ascontiguousarray(a) for a in arrays] + [out]
    getattr(lib, prim.name)(*[ctypes.c_void_p(a.ctypes.data) for a in args])
    return out


def run_opencl_kernel(prim, target, arrays, out):
    """Print `prim` as OpenCL C, build it for the first OpenCL device and run it once."""
    from tvmc.codegen.opencl import CodeGenOpenCL
    from tvmc.runtime.device import run_kernel
    from tvmc.runtime.opencl import KernelProgram

    cg = CodeGenOpenCL(target)
    cg.add_function(prim)
    return run_kernel(KernelProgram(cg.source()), prim.name, prim.launch.to_dict(),
                      [np.ascontiguousarray(a) for a in arrays], out)


def run_cuda_kernel(prim, target, arrays, out):
    """Compile `prim` to PTX with the LLVM codegen (nvptx64), load it on the first CUDA GPU and
    run it once."""
    from tvmc.codegen.build import compile_ir
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.runtime.cuda import KernelModule
    from tvmc.runtime.device import run_kernel

    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    module = KernelModule(compile_ir(cg.ir_text(), target, assembly=True), arch=target.cpu)
    return run_kernel(module, prim.name, prim.launch.to_dict(), [np.ascontiguousarray(a) for a in arrays], out)


def _always() -> None:
    return None


def _opencl_missing() -> str | None:
    from tvmc.runtime.opencl import opencl_available

    return opencl_available()


def _cuda_missing() -> str | None:
    from tvmc.runtime.cuda import cuda_available

    return cuda_available()


KERNEL_RUNNERS = {"cpu": run_cpu_kernel, "opencl": run_opencl_kernel, "cuda": run_cuda_kernel}


@dataclass(frozen=True)
class TargetUnderTest:
    """name: the pytest id; spec: what `--target` takes; missing: () -> None when the target runs
    here, else the skip reason naming the missing tool; marks: pytest marks of its tests."""

    name: str
    spec: str
    missing: Callable = _always
    marks: tuple = ()

    @functools.cached_property
    def target(self):
        return resolve_target(self.spec)

    def run_kernel(self, prim, arrays, out):
        return KERNEL_RUNNERS[self.target.runtime](prim, self.target, arrays, out)


TARGETS = [
    TargetUnderTest("native", "native"),
    TargetUnderTest("opencl", "opencl", _opencl_missing),
    TargetUnderTest("cuda", "cuda", _cuda_missing, (pytest.mark.cuda,)),
]
BY_NAME = {t.name: t for t in TARGETS}


def require(name: str) -> TargetUnderTest:
    """The target `name` when it runs here; otherwise the calling test is skipped with the reason."""
    t = BY_NAME[name]
    reason = t.missing()
    if reason:
        pytest.skip(f"target {name}: {reason}")
    return t


def by_runtime(target) -> Callable:
    """The kernel runner of a resolved tvmc Target (by its runtime)."""
    return functools.partial(KERNEL_RUNNERS[target.runtime], target=target)
