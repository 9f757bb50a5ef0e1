"""Runtime stage (OpenCL): run a mod.tar compiled for an OpenCL target through pyopencl.

The artifact's mod.cl is built once for the chosen device (KernelProgram); the graph executor
(tvmc.runtime.device.DeviceExecutor) launches its kernels in graph order with global size = grid
x block and local size = block; `profile` times each kernel with OpenCL profiling events (the
command queue is created with PROFILING_ENABLE: every launch's event carries its start and end).

Devices: `opencl` (the first device of the first platform), `opencl:P` or `opencl:P:D`
(platform P, device D, as `pyopencl.get_platforms()` orders them). PoCL
(pocl-binary-distribution) runs OpenCL on this machine's CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings

import numpy as np

from tvmc.errors import ArtifactError
from tvmc.package import Artifact
from tvmc.runtime.device import DeviceExecutor

DRIVER_HINT = "pip install pyopencl pocl-binary-distribution (PoCL, a CPU OpenCL driver), or a GPU vendor's driver"


def _pyopencl():
    try:
        import pyopencl
    except ImportError:
        raise ArtifactError(f"the OpenCL runtime needs pyopencl: {DRIVER_HINT}") from None
    return pyopencl


def opencl_device(spec: str | None = None):
    """The pyopencl Device that `spec` names: None or 'opencl' (platform 0, device 0),
    'opencl:P', 'opencl:P:D'. Raises ArtifactError when pyopencl, a platform or the device is missing."""
    cl = _pyopencl()
    words = (spec or "opencl").split(":")
    if words[0] != "opencl" or len(words) > 3 or not all(w.isdigit() for w in words[1:]):
        raise ArtifactError(f"device '{spec}': expected opencl, opencl:PLATFORM or opencl:PLATFORM:DEVICE")
    p, d = (int(w) for w in (words[1:] + ["0", "0"])[:2])
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    if not platforms:
        raise ArtifactError(f"no OpenCL platform found: {DRIVER_HINT}")
    if p >= len(platforms):
        raise ArtifactError(f"device '{spec}': OpenCL platform {p} does not exist ({len(platforms)} found)")
    devices = platforms[p].get_devices()
    if d >= len(devices):
        raise ArtifactError(f"device '{spec}': platform {platforms[p].name} has {len(devices)} device(s)")
    return devices[d]


def opencl_available() -> str | None:
    """None when an OpenCL device can run kernels here, else the reason (for test skips)."""
    try:
        opencl_device()
    except ArtifactError as e:
        return str(e)
    return None


@contextlib.contextmanager
def _driver_output_held():
    """Hold what the OpenCL driver writes to the process's stderr (PoCL's compiler prints
    "1 error generated." there, below Python) and pyopencl's compiler-output warnings while a
    program builds: the build log reaches the user through tvmc's one error line instead.
    File descriptor 2 points at a temporary file meanwhile, and is restored afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to hold
        saved = None
    held = tempfile.TemporaryFile() if saved is not None else None
    try:
        if held is not None:
            os.dup2(held.fileno(), 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if held is not None:
            os.dup2(saved, 2)
            os.close(saved)
            held.close()


class KernelProgram:
    """An OpenCL C program built for one device, with a profiling command queue: the program
    interface of tvmc.runtime.device.

    Raises ArtifactError with the first line of the build log when the source does not build."""

    def __init__(self, source: str, device=None, origin: str = "mod.cl"):
        cl = _pyopencl()
        self.cl = cl
        self.device = device if device is not None else opencl_device()
        self.context = cl.Context(devices=[self.device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        try:
            with _driver_output_held():
                self.program = cl.Program(self.context, source).build()
        except cl.RuntimeError as e:
            lines = [ln for ln in str(e).splitlines() if "error" in ln.lower()] or str(e).splitlines() or ["?"]
            raise ArtifactError(f"{origin}: the OpenCL driver rejected the kernels: {lines[0].strip()}") from None
        self._names = set(self.program.kernel_names.split(";"))
        self._kernels: dict = {}
        self.device_name = self.device.name.strip()

    def buffer(self, nbytes: int):
        return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, max(int(nbytes), 1))

    def upload(self, buf, array: np.ndarray):
        self.cl.enqueue_copy(self.queue, buf, np.ascontiguousarray(array))

    def download(self, buf, array: np.ndarray):
        self.cl.enqueue_copy(self.queue, array, buf)

    def kernel(self, name: str):
        """The kernel `name` (one object per name: arguments are set anew at each launch).
        Raises AttributeError when the program has no such kernel."""
        if name not in self._kernels:
            if name not in self._names:
                raise AttributeError(name)
            self._kernels[name] = self.cl.Kernel(self.program, name)
        return self._kernels[name]

    def launch(self, kernel, launch: dict, buffers, timed: bool = False, scalars=()):
        """Enqueue `kernel` over `buffers`, then the int64 `scalars` (a kernel's size arguments,
        `long` in OpenCL C), with launch {"grid": [x,y,z], "block": [x,y,z]}; returns the event
        (every launch has one: the queue profiles)."""
        block = tuple(int(b) for b in launch["block"])
        size = tuple(int(g) * b for g, b in zip(launch["grid"], block))
        kernel.set_args(*buffers, *(np.int64(v) for v in scalars))
        return self.cl.enqueue_nd_range_kernel(self.queue, kernel, size, block)

    @staticmethod
    def elapsed_ms(event) -> float:
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-6

    def finish(self) -> None:
        self.queue.finish()


class OpenCLExecutor(DeviceExecutor):
    """Executes an Artifact (or mod.tar path) compiled for an OpenCL target on an OpenCL device
    (tvmc.runtime.device.DeviceExecutor over a KernelProgram built from mod.cl); `device` as
    opencl_device takes it.

    Raises ArtifactError when the artifact is not an OpenCL one, mod.json lacks a kernel's
    launch, no device is found, or the driver rejects mod.cl."""

    profile_clock = "each kernel timed on the device with OpenCL profiling events"

    def __init__(self, artifact: Artifact | str | os.PathLike, device: str | None = None):
        super().__init__(artifact, "opencl", lambda a: KernelProgram(a.library.decode(), opencl_device(device),
                                                                      f"{a.path}: mod.cl"))
