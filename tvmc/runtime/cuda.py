"""Runtime stage (CUDA): run a mod.tar compiled for a CUDA target through the CUDA driver API
(cuda-python's `cuda.bindings.driver`).

KernelModule loads the artifact's kernels into the primary context of one GPU: mod.cubin when it
was assembled for this GPU's architecture (same major compute capability, minor not newer than
the GPU's; an `a` variant only on its exact architecture), else mod.ptx, which the driver
JIT-compiles. The graph executor (tvmc.runtime.device.DeviceExecutor) allocates one device buffer
per storage id, uploads the params once and launches the kernels in graph order on one stream
(grid and block from mod.json, shared memory static in the kernels); `profile` times each kernel
with CUDA events.

CUDA graphs (launch overhead): CUDAExecutor captures the graph's launches once, when it is built
(stream capture: cuStreamBeginCapture ... cuStreamEndCapture, then cuGraphInstantiate), and each
run() replays them with one cuGraphLaunch. The kernel nodes hold the device pointers of the
executor's fixed buffers, and set_input copies into those buffers, so a replay computes on the
inputs set last. It launches kernel by kernel instead (`cuda_graph` False, `cuda_graph_off` says
why) for two reasons only: it was asked to (cuda_graph=False, `tvmc run --no-cuda-graph`), or
cuda_graph_blocker names what a graph cannot hold (a run-time loop, whose trip count and
condition the host reads between launches; a graph without kernels). A capture the driver
refuses is an ArtifactError, never a silent switch of mode. `profile` always launches kernel by
kernel, with events around each kernel.

Devices: `cuda` (GPU 0) or `cuda:N` (the driver's ordinal N; CUDA_VISIBLE_DEVICES applies).
Without cuda-python, a driver or a GPU, loading fails with one ArtifactError saying which.
"""

from __future__ import annotations

import os
import re

import numpy as np

from tvmc.errors import ArtifactError
from tvmc.mod_json import run_order
from tvmc.constants import CUBIN_NAME
from tvmc.package import Artifact
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


def cuda_graph_blocker(graph_json: dict) -> str | None:
    """Why the run of mod.json `graph_json` cannot be captured as one CUDA graph, as a phrase for
    the user; None when it can. A run-time loop (`tvmc_loop`) cannot: the host reads its trip count
    and condition between launches (tvmc.runtime.control.run_loop), which a replayed graph would
    skip. Nor can a graph without kernels: there is nothing to capture; nor one compiled for ranges
    of sizes (mod.json "size_vars"): each run launches with the grids and size arguments of its
    inputs' sizes, which a replay would keep from the capture."""
    order = run_order(graph_json)
    for item in order:
        if isinstance(item, tuple):
            return f"run-time loop '{graph_json['nodes'][item[0]]['name']}' is driven from the host"
    if graph_json.get("size_vars"):
        return "symbolic shapes: each run's grids and size arguments follow its input sizes"
    if not order:
        return "no kernels to launch"
    return None


def capture_graph(cu, stream, launch_all, kernels: int) -> tuple:
    """Capture the launches `launch_all()` enqueues on `stream` into a CUDA graph and instantiate
    it: (CUgraph, CUgraphExec). `cu` is cuda.bindings.driver. Nothing runs while capturing: each
    kernel node keeps its launch's grid, block and arguments (device pointers), so a replay reads
    whatever the buffers hold then.

    Raises ArtifactError when the driver refuses the capture or the instantiation, or the graph
    does not hold `kernels` nodes (one per launch). The stream has left capture mode and no graph
    is left allocated when it raises."""
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    _call("cuStreamBeginCapture", cu.cuStreamBeginCapture, stream, mode)
    try:
        launch_all()
    except BaseException:
        err, graph = cu.cuStreamEndCapture(stream)  # leave capture mode: the stream stays usable
        if int(err) == 0 and graph is not None and int(graph) != 0:
            cu.cuGraphDestroy(graph)
        raise
    graph = _call("cuStreamEndCapture", cu.cuStreamEndCapture, stream)
    try:
        nodes = _call("cuGraphGetNodes", cu.cuGraphGetNodes, graph)[-1]  # (nodes, count) with count 0 asked
        if int(nodes) != kernels:
            raise ArtifactError(f"the captured CUDA graph holds {int(nodes)} nodes, not the {kernels} kernel launches")
        graph_exec = _call("cuGraphInstantiate", cu.cuGraphInstantiate, graph, 0)
    except BaseException:
        cu.cuGraphDestroy(graph)
        raise
    return graph, graph_exec


class KernelModule:
    """A CUDA module loaded into the primary context of GPU `device` (an ordinal; default 0),
    with one stream: the program interface of tvmc.runtime.device. Loads `cubin` when it was
    assembled (for `arch`, sm_XY) for this GPU's architecture, else `ptx` (JIT-compiled by the
    driver); `image` says which ('cubin' or 'ptx'). capture() records launches as a CUDA graph
    that launch_graph() replays. Buffers, the graph and the module are freed by close() (also when
    the object is collected).

    Raises ArtifactError when the GPU is older than `arch`, or the driver rejects the module."""

    def __init__(self, ptx: bytes, cubin: bytes | None = None, arch: str = "", device: int | None = None,
                 origin: str = "mod.ptx"):
        self._buffers: list = []
        self.module = self.stream = self.context = None
        self._graph = self._graph_exec = None
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

    def launch(self, kernel, launch: dict, buffers, timed: bool = False, scalars=()):
        """Launch `kernel` over `buffers` (device pointers, in argument order), then the int64
        `scalars` (a kernel's size arguments), on the stream with launch {"grid": [x,y,z],
        "block": [x,y,z]}; with `timed`, returns (start, end) events."""
        start = self._event() if timed else None
        # kernelParams: an array of pointers, each to one argument's value (a device pointer, or
        # an int64 size argument: both 8 bytes, the size's two's complement bits)
        values = np.array([int(b) for b in buffers] + [int(v) % 2**64 for v in scalars], dtype=np.uint64)
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

    def capture(self, launch_all, kernels: int) -> None:
        """Capture the `kernels` launches `launch_all()` makes on the stream as the CUDA graph that
        launch_graph() replays (capture_graph; a graph captured before is freed). Raises
        ArtifactError as capture_graph."""
        self._free_graph()
        self._graph, self._graph_exec = capture_graph(self.cu, self.stream, launch_all, kernels)

    def launch_graph(self) -> None:
        """Enqueue one replay of the captured graph on the stream (finish() waits for it). Raises
        ArtifactError when nothing was captured or the driver refuses the launch."""
        if self._graph_exec is None:
            raise ArtifactError("no CUDA graph was captured")
        _call("cuGraphLaunch", self.cu.cuGraphLaunch, self._graph_exec, self.stream)

    def _free_graph(self) -> None:
        if self._graph_exec is not None:
            self.cu.cuGraphExecDestroy(self._graph_exec)
        if self._graph is not None:
            self.cu.cuGraphDestroy(self._graph)
        self._graph = self._graph_exec = None

    def close(self) -> None:
        """Free the CUDA graph and its executable graph, the buffers, unload the module, release
        the context (idempotent)."""
        cu = self.cu
        self._free_graph()  # its kernel nodes use the module and the buffers
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

    With `cuda_graph` (the default), the graph's launches are captured once here as a CUDA graph
    that every run() replays (see the module docstring). `cuda_graph` (attribute) says whether
    run() replays one; when not, `cuda_graph_off` says why: "turned off" (cuda_graph=False) or
    cuda_graph_blocker's reason. close() frees the graph with the rest.

    Raises ArtifactError when the artifact is not a CUDA one, mod.json lacks a kernel's launch,
    cuda-python, the driver or the GPU is missing, the GPU is older than the artifact's
    architecture, the driver rejects the module, or it refuses to capture or instantiate the CUDA
    graph (the message names cuda_graph=False / --no-cuda-graph)."""

    profile_clock = "each kernel timed on the device with CUDA events"

    def __init__(self, artifact: Artifact | str | os.PathLike, device: str | None = None, cuda_graph: bool = True):
        def load(a):
            arch = (a.metadata.get("target") or {}).get("cpu", "")
            return KernelModule(a.library, a.device_binaries.get(CUBIN_NAME), arch, cuda_device(device),
                                f"{a.path}: mod.ptx")

        super().__init__(artifact, "cuda", load)
        self.image = self.program.image
        self.cuda_graph = False
        self.cuda_graph_off = cuda_graph_blocker(self.artifact.graph_json) if cuda_graph else "turned off"
        if self.cuda_graph_off is None:
            try:
                self.program.capture(self._launch_all, self.num_kernels)
            except ArtifactError as e:
                self.close()
                raise ArtifactError(f"{self.artifact.path}: capturing the CUDA graph failed: {e} "
                                    f"(--no-cuda-graph, or cuda_graph=False, launches kernel by kernel)") from None
            self.cuda_graph = True

    @property
    def launch_mode(self) -> str:
        """How run() launches the kernels, for the user: "CUDA graph", or "kernel by kernel, no
        CUDA graph: <why>"."""
        return "CUDA graph" if self.cuda_graph else f"kernel by kernel, no CUDA graph: {self.cuda_graph_off}"

    def run(self) -> None:
        """One replay of the captured CUDA graph, or (cuda_graph False) every kernel launched in
        graph order; returns when the GPU is done. Raises ArtifactError when the driver fails."""
        if not self.cuda_graph:
            super().run()
            return
        self.program.launch_graph()
        self.program.finish()
