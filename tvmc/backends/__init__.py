"""Backends: one per kind of library a target builds (tvmc.backends.base.Backend; DESIGN.md
section 9). `backend_for(target)` is the one place that maps a target's facts to the code that
builds, loads, measures and runs its libraries:

    library_format  backend                         runs here through
    so              llvm.SharedObjectBackend        ctypes; another architecture: its emulator
    wasm            llvm.WasmBackend                wasmtime
    cl              gpu.OpenCLBackend               pyopencl
    ptx             gpu.CUDABackend                 cuda-python

Adding a target with a new kind of library is a descriptor plus one backend here (and its codegen
or runtime where those are new).
"""

from __future__ import annotations

from tvmc.backends.base import Backend
from tvmc.backends.gpu import CUDABackend, OpenCLBackend
from tvmc.backends.llvm import SharedObjectBackend, WasmBackend
from tvmc.errors import ArtifactError, TargetError

BACKENDS = {b.library_format: b for b in (SharedObjectBackend(), WasmBackend(), OpenCLBackend(), CUDABackend())}
_BY_NAME = {b.name: b for b in BACKENDS.values()}


def backend_for(target) -> Backend:
    """The backend of a resolved Target (by its library format). Raises TargetError for a format
    no backend builds."""
    try:
        return BACKENDS[target.library_format]
    except KeyError:
        raise TargetError(f"target {target.name}: no backend builds '{target.library_format}' libraries; "
                          f"known: {', '.join(sorted(BACKENDS))}") from None


def backend_named(name: str) -> Backend:
    """The backend called `name` (Backend.name: what a tuning candidate's request names)."""
    return _BY_NAME[name]


def backend_of_artifact(artifact) -> Backend:
    """The backend of a loaded Artifact, by its recorded target's library format (metadata.json
    was checked against the schema when loaded). Raises ArtifactError for an unknown one."""
    recorded = artifact.metadata.get("target") or {}
    fmt = recorded.get("library_format", "so")
    if fmt not in BACKENDS:
        raise ArtifactError(f"{artifact.path}: library format '{fmt}' is not supported by this tvmc")
    return BACKENDS[fmt]


def build_library(functions, target, config_lookup=None, **options) -> bytes:
    """Lower fused graph Functions for `target` (tvmc.ops.fused.lower_functions) and build its
    library (Backend.build, which takes `options`): the compile pipeline's lower and codegen
    stages in one call, for tests and tools. Raises ScheduleError or CodegenError."""
    from tvmc.ops.fused import lower_functions

    kernels = lower_functions(functions, target, config_lookup, options.get("progress"))
    return backend_for(target).build(kernels, target, **options)


__all__ = ["BACKENDS", "Backend", "backend_for", "backend_named", "backend_of_artifact", "build_library"]
