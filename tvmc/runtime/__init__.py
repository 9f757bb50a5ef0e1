"""Runtime stage: load a mod.tar and execute it on the device its target names.

Every runtime keeps one executor contract (GraphExecutor's public methods): construct from an
Artifact or a mod.tar path (checking the artifact before any kernel touches memory),
`input_names`, `output_names`, `input_info(name)`, `set_input(name, array)`, `run()`,
`get_output(index or name)`, `num_outputs`, `set_num_threads(n)`; `benchmark(executor, ...)`
times any of them. `create_executor` picks the runtime module from the artifact's metadata
(target "runtime" field): one module per device kind, added with the target that needs it.
"""

from __future__ import annotations

import os

from tvmc.errors import ArtifactError
from tvmc.package import Artifact, load_artifact
from tvmc.runtime.executor import GraphExecutor, benchmark
from tvmc.target import host_arch

__all__ = ["GraphExecutor", "benchmark", "create_executor", "device_missing"]


def create_executor(artifact: Artifact | str | os.PathLike, device: str | None = None, target: str | None = None):
    """An executor for `artifact` (an Artifact or a mod.tar path) on the runtime its target
    names: `cpu` -> GraphExecutor (ctypes, this host's CPU), or, for a CPU of another
    architecture whose descriptor names an emulator, EmulatedExecutor (the C runner under
    qemu-user); `opencl` -> OpenCLExecutor (pyopencl); `cuda` -> CUDAExecutor (cuda-python);
    `wasm` -> WasmExecutor (wasmtime). `device` selects a device where a runtime has several
    (e.g. "opencl:0:1", "cuda:1"); None takes the default. `target` (a --target spec) names the
    descriptor whose emulator and compiler run a CPU artifact of another architecture (default:
    the shipped descriptor matching the artifact's code, tvmc.target.artifact_target); the
    commands recorded in metadata.json are never run.

    Raises ArtifactError when the artifact is invalid or no runtime here can execute it.
    """
    if not isinstance(artifact, Artifact):
        artifact = load_artifact(artifact)
    recorded = artifact.metadata.get("target") or {}
    runtime = recorded.get("runtime", "cpu")
    if runtime == "cpu":
        if device not in (None, "cpu"):
            raise ArtifactError(f"{artifact.path}: a cpu artifact runs on device 'cpu', not '{device}'")
        if str(recorded.get("triple", "")).split("-")[0] not in ("", host_arch()):
            from tvmc.runtime.emulated import EmulatedExecutor

            return EmulatedExecutor(artifact, target)
        return GraphExecutor(artifact)
    if runtime == "opencl":
        from tvmc.runtime.opencl import OpenCLExecutor

        return OpenCLExecutor(artifact, device)
    if runtime == "cuda":
        from tvmc.runtime.cuda import CUDAExecutor

        return CUDAExecutor(artifact, device)
    if runtime == "wasm":
        if device not in (None, "wasm"):
            raise ArtifactError(f"{artifact.path}: a wasm artifact runs on device 'wasm', not '{device}'")
        from tvmc.runtime.wasm import WasmExecutor

        return WasmExecutor(artifact)
    raise ArtifactError(f"{artifact.path}: target runtime '{runtime}' is not supported by this tvmc")


def device_missing(runtime: str) -> str | None:
    """None when the default device of `runtime` ('cpu', 'opencl', 'cuda') can run kernels
    here, else the reason (a missing package, driver or device), as one line."""
    if runtime == "opencl":
        from tvmc.runtime.opencl import opencl_available

        return opencl_available()
    if runtime == "cuda":
        from tvmc.runtime.cuda import cuda_available

        return cuda_available()
    return None
