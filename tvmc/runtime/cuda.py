"""Runtime stage (CUDA): run a mod.tar compiled for a CUDA target through the CUDA driver API
(cuda-python's `cuda.bindings.driver`).

KernelModule loads the artifact's kernels into the primary context of one GPU: mod.cubin when it
was assembled for this GPU's architecture (same major compute capability, minor not newer than
the GPU's; an `a` variant only on its exact architecture), else mod.ptx, which the driver
JIT-compiles. The graph executor (tvmc.runtime.device.DeviceExecutor) allocates one device buffer
per storage id, uploads the params once and launches the kernels in graph order on one stream
(grid and block from mod.json, shared memory static in the kernels); `profile` times each kernel
with CUDA events.

Devices: `cuda` (GPU 0) or `cuda:N` (the driver's ordinal N; CUDA_VISIBLE_DEVICES applies).
Without cuda-python, a driver or a GPU, loading fails with one ArtifactError saying which.
"""

from __future__ import annotations

import os
import re

import numpy as np

from tvmc.errors import ArtifactError
from tvmc.package import CUBIN_NAME, Artifact
from tvmc.runtime.device import DeviceExecutor

INSTALL_HINT = "pip install 'cuda-python>=12.6' (the cuda extra of tvmc)"
_NAME_BYTES = 256


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise ArtifactError(f"the CUDA runtime needs cuda-python: {INSTALL_HINT}") from None
    return driver


def _call(what: str, fn, *args):
    """`fn(*args)` of cuda.bindings.driver, which returns (CUresult, values...): the values (one
    value alone). Raises ArtifactError naming `what` and the CUDA error on failure."""
    err, *values = fn(*args)
    if int(err) != 0:
        raise ArtifactError(f"CUDA {what} failed: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else tuple(values)


def _init(cu) -> None:
    try:
        err, = cu.cuInit(0)
    except RuntimeError as e:  # cuda-python found no driver library (libcuda.so)
        lines = str(e).strip().splitlines() or ["libcuda.so not found"]
        raise ArtifactError(f"no CUDA driver on this machine: {lines[0]}") from None
    if int(err) != 0:
        raise ArtifactError(f"no usable CUDA GPU on this machine: cuInit failed with {getattr(err, 'name', err)}")


def cuda_device(spec: str | None = None) -> int:
    """The driver ordinal of the GPU `spec` names: None or 'cuda' (0), 'cuda:N'. Raises
    ArtifactError when cuda-python, the driver, any GPU or that GPU is missing."""
    words = (spec or "cuda").split(":")
    if words[0] != "cuda" or len(words) > 2 or not all(w.isdigit() for w in words[1:]):
        raise ArtifactError(f"device '{spec}': expected cuda or cuda:ORDINAL")
    ordinal = int(words[1]) if len(words) == 2 else 0
    cu = _driver()
    _init(cu)
    count = _call("cuDeviceGetCount", cu.cuDeviceGetCount)
    if count == 0:
        raise ArtifactError("no CUDA GPU found by the driver")
    if ordinal >= count:
        raise ArtifactError(f"device '{spec}': the driver finds {count} CUDA GPU(s)")
    return ordinal


def cuda_available() -> str | None:
    """None when a CUDA GPU can run kernels here, else the reason (for test skips and tune)."""
    try:
        cuda_device()
    except ArtifactError as e:
        return str(e)
    return None


def _device_info(ordinal: int) -> tuple:
    """(CUdevice, name, (compute capability major, minor)) of GPU `ordinal` (driver initialized)."""
    cu = _driver()
    dev = _call("cuDeviceGet", cu.cuDeviceGet, ordinal)
    name = _call("cuDeviceGetName", cu.cuDeviceGetName, _NAME_BYTES, dev).split(b"\0", 1)[0]
    attr = cu.CUdevice_attribute
    capability = tuple(_call("cuDeviceGetAttribute", cu.cuDeviceGetAttribute, a, dev) for a in (
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    return dev, name.decode(errors="replace").strip(), capability


def gpu_info(device: str | None = None) -> tuple:
    """(name, 'sm_XY') of the GPU `device` names (as cuda_device takes it); sm_XY is the cpu
    `--target "cuda -mcpu=sm_XY"` compiles for, so that its cubin loads without a JIT. Raises
    ArtifactError."""
    _, name, (major, minor) = _device_info(cuda_device(device))
    return name, f"sm_{major}{minor}"


def architecture(cpu: str) -> tuple:
    """'sm_86' -> (8, 6, ''), 'sm_90a' -> (9, 0, 'a'), 'sm_100' -> (10, 0, ''): compute
    capability major, minor and the architecture-specific suffix. Raises ArtifactError otherwise."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", cpu or "")
    if m is None:
        raise ArtifactError(f"'{cpu}' is not a CUDA architecture (sm_XY)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def cubin_runs_on(cpu: str, capability: tuple) -> bool:
    """Whether a cubin assembled for `cpu` (sm_XY) runs on a GPU of compute capability
    (major, minor): same major, minor not newer (NVIDIA's binary compatibility); an `a` variant
    only on exactly its architecture."""
    major, minor, suffix = architecture(cpu)
    return major == capability[0] and (minor == capability[1] if suffix else minor <= capability[1])


def ptx_runs_on(cpu: str, capability: tuple) -> bool:
    """Whether PTX for `cpu` JIT-compiles for a GPU of compute capability (major, minor): the
    GPU is at least that architecture (an `a` variant: exactly it)."""
    major, minor, suffix = architecture(cpu)
    return (major, minor) == tuple(capability) if suffix else (major, minor) <= tuple(capability)


class KernelModule:
    """A CUDA module loaded into the primary context of GPU `device` (an ordinal; default 0),
    with one stream: the program interface of tvmc.runtime.device. Loads `cubin` when it was
    assembled (for `arch`, sm_XY) for this GPU's architecture, else `ptx` (JIT-compiled by the
    driver); `image` says which ('cubin' or 'ptx'). Buffers and the module are freed by close()
    (also when the object is collected).

    Raises ArtifactError when the GPU is older than `arch`, or the driver rejects the module."""

    def __init__(self, ptx: bytes, cubin: bytes | None = None, arch: str = "", device: int | None = None,
                 origin: str = "mod.ptx"):
        self._buffers: list = []
        self.module = self.stream = self.context = None
        cu = _driver()
        self.cu = cu
        self._device, self.device_name, self.capability = _device_info(cuda_device() if device is None else device)
        gpu = f"sm_{self.capability[0]}{self.capability[1]}"
        if arch and not ptx_runs_on(arch, self.capability):
            raise ArtifactError(f"{origin}: compiled for {arch}, the GPU {self.device_name} is {gpu}; "
                                f"compile with --target \"cuda -mcpu={gpu}\"")
        self.context = _call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain, self._device)
        _call("cuCtxSetCurrent", cu.cuCtxSetCurrent, self.context)
        self.stream = _call("cuStreamCreate", cu.cuStreamCreate, 0)
        use_cubin = cubin is not None and arch and cubin_runs_on(arch, self.capability)
        self.image = "cubin" if use_cubin else "ptx"
        # the driver reads PTX up to a NUL byte; the array lives until the load returns
        data = np.frombuffer((cubin if use_cubin else ptx) + b"\0", dtype=np.uint8)
        err, module = cu.cuModuleLoadData(data.ctypes.data)
        if int(err) != 0:
            raise ArtifactError(f"{origin}: the CUDA driver rejected the {self.image} for {self.device_name} "
                                f"({gpu}): {getattr(err, 'name', err)}")
        self.module = module
        self._kernels: dict = {}

    def buffer(self, nbytes: int):
        ptr = _call("cuMemAlloc", self.cu.cuMemAlloc, max(int(nbytes), 1))
        self._buffers.append(ptr)
        return ptr

    def upload(self, buf, array: np.ndarray) -> None:
        src = np.ascontiguousarray(array)
        if src.nbytes:
            _call("cuMemcpyHtoDAsync", self.cu.cuMemcpyHtoDAsync, buf, src.ctypes.data, src.nbytes, self.stream)
            self.finish()  # `src` may be a temporary: the copy is done before it goes

    def download(self, buf, array: np.ndarray) -> None:
        if array.nbytes:
            _call("cuMemcpyDtoHAsync", self.cu.cuMemcpyDtoHAsync, array.ctypes.data, buf, array.nbytes, self.stream)
            self.finish()

    def kernel(self, name: str):
        """The CUfunction `name`. Raises AttributeError when the module has no such kernel."""
        if name not in self._kernels:
            err, fn = self.cu.cuModuleGetFunction(self.module, name.encode())
            if int(err) != 0:
                raise AttributeError(name)
            self._kernels[name] = fn
        return self._kernels[name]

    def _event(self):
        ev = _call("cuEventCreate", self.cu.cuEventCreate, 0)
        _call("cuEventRecord", self.cu.cuEventRecord, ev, self.stream)
        return ev

    def launch(self, kernel, launch: dict, buffers, timed: bool = False):
        """Launch `kernel` over `buffers` (device pointers, in argument order) on the stream with
        launch {"grid": [x,y,z], "block": [x,y,z]}; with `timed`, returns (start, end) events."""
        start = self._event() if timed else None
        # kernelParams: an array of pointers, each to one argument's value (a device pointer)
        values = np.array([int(b) for b in buffers], dtype=np.uint64)
        params = np.array([values.ctypes.data + k * values.itemsize for k in range(len(values))], dtype=np.uint64)
        _call("cuLaunchKernel", self.cu.cuLaunchKernel, kernel, *(int(g) for g in launch["grid"]),
              *(int(b) for b in launch["block"]), 0, self.stream, params.ctypes.data, 0)
        return (start, self._event()) if timed else None

    def elapsed_ms(self, events) -> float:
        start, end = events
        _call("cuEventSynchronize", self.cu.cuEventSynchronize, end)
        ms = _call("cuEventElapsedTime", self.cu.cuEventElapsedTime, start, end)
        for ev in events:
            self.cu.cuEventDestroy(ev)
        return float(ms)

    def finish(self) -> None:
        _call("cuStreamSynchronize", self.cu.cuStreamSynchronize, self.stream)

    def close(self) -> None:
        """Free the buffers, unload the module, release the context (idempotent)."""
        cu = self.cu
        for ptr in self._buffers:
            cu.cuMemFree(ptr)
        self._buffers = []
        if self.module is not None:
            cu.cuModuleUnload(self.module)
        if self.stream is not None:
            cu.cuStreamDestroy(self.stream)
        if self.context is not None:
            cu.cuDevicePrimaryCtxRelease(self._device)
        self.module = self.stream = self.context = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass


class CUDAExecutor(DeviceExecutor):
    """Executes an Artifact (or mod.tar path) compiled for a CUDA target on a GPU
    (tvmc.runtime.device.DeviceExecutor over a KernelModule of mod.ptx / mod.cubin); `device`
    as cuda_device takes it. `image` says whether the cubin or the PTX was loaded.

    Raises ArtifactError when the artifact is not a CUDA one, mod.json lacks a kernel's launch,
    cuda-python, the driver or the GPU is missing, the GPU is older than the artifact's
    architecture, or the driver rejects the module."""

    profile_clock = "each kernel timed on the device with CUDA events"

    def __init__(self, artifact: Artifact | str | os.PathLike, device: str | None = None):
        def load(a):
            arch = (a.metadata.get("target") or {}).get("cpu", "")
            return KernelModule(a.library, a.device_binaries.get(CUBIN_NAME), arch, cuda_device(device),
                                f"{a.path}: mod.ptx")

        super().__init__(artifact, "cuda", load)
        self.image = self.program.image
