"""Targets the tests run on: one registry, so op and model tests are parametrized over targets
instead of being copied per target (DESIGN.md section 7).

Each entry names the target spec tvmc resolves, why it cannot run here (None when it can: the
reason names the missing tool and how to install it, and becomes the test's skip message), the
pytest marks of its tests (`-m cuda` selects the GPU ones) and how one compiled kernel runs on it
(`run_kernel(prim, arrays, out)`: its backend's, tvmc.backends: ctypes on this host's CPU,
pyopencl for OpenCL, cuda-python for CUDA, the C runner under qemu-user for ARM, wasmtime for
wasm). Adding a target is one entry here; a new kind of library brings its backend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import pytest

from tvmc.target import resolve_target


def kernel_runner(target) -> Callable:
    """How one compiled kernel of the resolved tvmc Target runs here: its backend's run_kernel
    (ctypes, pyopencl, cuda-python, wasmtime; a CPU of another architecture under emulation)."""
    from tvmc.backends import backend_for

    return backend_for(target).run_kernel


def run_cuda_kernel(prim, target, arrays, out):
    """Compile `prim` to PTX, load it on the first CUDA GPU and run it once."""
    return kernel_runner(target)(prim, target, arrays, out)


def _always() -> None:
    return None


def _missing(spec: str) -> Callable:
    """() -> why `spec`'s libraries cannot run here (its backend's `missing`), else None."""
    def missing() -> str | None:
        from tvmc.runtime import device_missing

        return device_missing(resolve_target(spec))

    return missing


@dataclass(frozen=True)
class TargetUnderTest:
    """name: the pytest id; spec: what `--target` takes; missing: () -> None when the target runs
    here, else the skip reason naming the missing tool; marks: pytest marks of its tests;
    op_sample: make test runs the first case of each operator there (False: every op case is a
    slow test, and make test's sample is one case per schedule, tests/ops/test_cpu_schedules.py)."""

    name: str
    spec: str
    missing: Callable = _always
    marks: tuple = ()
    op_sample: bool = True

    @functools.cached_property
    def target(self):
        return resolve_target(self.spec)

    def run_kernel(self, prim, arrays, out):
        return kernel_runner(self.target)(prim, self.target, arrays, out)


TARGETS = [
    TargetUnderTest("native", "native"),
    TargetUnderTest("opencl", "opencl", _missing("opencl")),
    TargetUnderTest("arm", "arm", _missing("arm"), op_sample=False),
    TargetUnderTest("wasm", "wasm", _missing("wasm")),
    TargetUnderTest("cuda", "cuda", _missing("cuda"), (pytest.mark.cuda,)),
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
    """The kernel runner of a resolved tvmc Target (see kernel_runner)."""
    return functools.partial(kernel_runner(target), target=target)
