"""Runtime stage: load a mod.tar and execute it on the device its target names.

Every runtime keeps one executor contract (tvmc.runtime.executor.Executor): construct from an
Artifact or a mod.tar path (checking the artifact before any kernel touches memory),
`input_names`, `output_names`, `input_info(name)`, `set_input(name, array)`, `run()`,
`get_output(index or name)`, `num_outputs`, `profile(runs)`, `set_num_threads(n)`;
`benchmark(executor, ...)` times any of them. `create_executor` asks the artifact's backend (tvmc.backends) for it: one
runtime module per kind of library.
"""

from __future__ import annotations

import os

from tvmc.package import Artifact, load_artifact
from tvmc.runtime.cpu import GraphExecutor
from tvmc.runtime.executor import benchmark

__all__ = ["GraphExecutor", "benchmark", "create_executor", "device_missing"]


def create_executor(artifact: Artifact | str | os.PathLike, device: str | None = None, target: str | None = None,
                    **options):
    """An executor for `artifact` (an Artifact or a mod.tar path) on the runtime its backend
    names (tvmc.backends, by the recorded library format): mod.so -> GraphExecutor (ctypes, this
    host's CPU), or, for a CPU of another architecture, EmulatedExecutor (the C runner under
    qemu-user); mod.cl -> OpenCLExecutor (pyopencl); mod.ptx -> CUDAExecutor (cuda-python;
    `options` such as cuda_graph=False go to it); mod.wasm -> WasmExecutor (wasmtime). `device`
    selects a device where a runtime has several (e.g. "opencl:0:1", "cuda:1"); None takes the
    default. `target` (a --target spec) names the descriptor whose emulator and compiler run a
    CPU artifact of another architecture (default: the shipped descriptor matching the
    artifact's code, tvmc.target.artifact_target); the commands recorded in metadata.json are
    never run.

    Raises ArtifactError when the artifact is invalid or no runtime here can execute it.
    """
    from tvmc.backends import backend_of_artifact

    if not isinstance(artifact, Artifact):
        artifact = load_artifact(artifact)
    return backend_of_artifact(artifact).create_executor(artifact, device, target, **options)


def device_missing(target) -> str | None:
    """None when libraries of `target` (a Target, or a --target spec such as "cuda") can run on
    this machine's default device, else the reason (a missing package, driver, device or
    emulator), as one line (Backend.missing). Raises TargetError for an unknown spec."""
    from tvmc.backends import backend_for
    from tvmc.target import resolve_target

    target = resolve_target(target) if isinstance(target, str) else target
    return backend_for(target).missing(target)
