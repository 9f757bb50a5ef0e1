"""Runtime stage (OpenCL): run a mod.tar compiled for an OpenCL target through pyopencl.

The artifact's mod.cl is built once for the chosen device; mod.json's "kernels" gives each
kernel's launch (grid and block sizes) and arguments. Storage: one device buffer per storage
id; params are uploaded once; a run enqueues every kernel in graph order (global size = grid x
block, local size = block) and waits; `profile` times each kernel with OpenCL events. numpy only
holds tensors on the host side: every operator runs in the OpenCL kernels.

Devices: `opencl` (the first device of the first platform), `opencl:P` or `opencl:P:D`
(platform P, device D, as `pyopencl.get_platforms()` orders them). PoCL
(pocl-binary-distribution) runs OpenCL on this machine's CPU.
"""

from __future__ import annotations

import os

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.package import Artifact, graph_attr, load_artifact
from tvmc.runtime.executor import output_position

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


class KernelProgram:
    """An OpenCL C program built for one device, with a profiling command queue.

    Raises ArtifactError with the first line of the build log when the source does not build."""

    def __init__(self, source: str, device=None, origin: str = "mod.cl"):
        cl = _pyopencl()
        self.cl = cl
        self.device = device if device is not None else opencl_device()
        self.context = cl.Context(devices=[self.device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        try:
            self.program = cl.Program(self.context, source).build()
        except cl.RuntimeError as e:
            lines = [ln for ln in str(e).splitlines() if "error" in ln.lower()] or str(e).splitlines() or ["?"]
            raise ArtifactError(f"{origin}: the OpenCL driver rejected the kernels: {lines[0].strip()}") from None
        self._names = set(self.program.kernel_names.split(";"))
        self._kernels: dict = {}

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

    def launch(self, kernel, launch: dict, buffers):
        """Enqueue `kernel` over `buffers` with launch {"grid": [x,y,z], "block": [x,y,z]};
        returns the event."""
        block = tuple(int(b) for b in launch["block"])
        size = tuple(int(g) * b for g, b in zip(launch["grid"], block))
        kernel.set_args(*buffers)
        return self.cl.enqueue_nd_range_kernel(self.queue, kernel, size, block)

    @staticmethod
    def elapsed_ms(event) -> float:
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-6


def run_kernel(program: KernelProgram, name: str, launch: dict, arrays, out: np.ndarray) -> np.ndarray:
    """Run kernel `name` once on numpy `arrays` (inputs) and `out` (output, filled in); returns `out`."""
    bufs = []
    for a in list(arrays) + [out]:
        b = program.buffer(a.nbytes)
        program.upload(b, a)
        bufs.append(b)
    program.launch(program.kernel(name), launch, bufs).wait()
    program.download(bufs[-1], out)
    return out


class OpenCLExecutor:
    """Executes an Artifact (or mod.tar path) compiled for an OpenCL target on an OpenCL device
    (see the module docstring); the executor contract of tvmc.runtime.

    Raises ArtifactError when the artifact is not an OpenCL one, mod.json lacks a kernel's
    launch, no device is found, or the driver rejects mod.cl."""

    def __init__(self, artifact: Artifact | str | os.PathLike, device: str | None = None):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        runtime = (artifact.metadata.get("target") or {}).get("runtime")
        if runtime != "opencl":
            raise ArtifactError(f"{origin}: target runtime '{runtime}' is not opencl")
        g = artifact.graph_json
        kernels = g.get("kernels")
        if not isinstance(kernels, dict):
            raise ArtifactError(f"{origin}: mod.json has no kernel launch configurations ('kernels')")
        source = artifact.library.decode()
        self.program = KernelProgram(source, opencl_device(device), f"{origin}: mod.cl")
        self.device_name = self.program.device.name.strip()

        nodes, row_ptr = g["nodes"], g["node_row_ptr"]
        shapes = graph_attr(g, "shape")
        dtypes = [np.dtype(d) for d in graph_attr(g, "dltype")]
        sids = [int(s) for s in graph_attr(g, "storage_id")]
        sizes: dict = {}
        for eid, sid in enumerate(sids):
            sizes[sid] = max(sizes.get(sid, 0), int(np.prod(shapes[eid], dtype=np.int64)) * dtypes[eid].itemsize)
        self._buffers = {sid: self.program.buffer(n) for sid, n in sorted(sizes.items())}
        self._entries = [(sids[e], tuple(shapes[e]), dtypes[e]) for e in range(len(sids))]

        params = artifact.params
        self._inputs = {}
        for nid, node in enumerate(nodes):
            if node.get("op") != "null":
                continue
            eid = row_ptr[nid]
            if node["name"] in params:
                self.program.upload(self._buffers[sids[eid]], params[node["name"]])
            else:
                self._inputs[node["name"]] = eid
        names = [i["name"] for i in artifact.metadata.get("inputs", [])]
        self.input_names = [n for n in names if n in self._inputs] + [n for n in self._inputs if n not in names]

        self._calls = []
        for nid, node in enumerate(nodes):
            func = node.get("attrs", {}).get("func_name")
            if node.get("op") != "tvm_op" or func == "__nop":
                continue
            if func not in kernels:
                raise ArtifactError(f"{origin}: kernel '{func}' (node '{node['name']}') has no launch in mod.json")
            try:
                kernel = self.program.kernel(func)
            except AttributeError:
                raise ArtifactError(f"{origin}: kernel '{func}' is missing from mod.cl") from None
            eids = [row_ptr[i[0]] + i[1] for i in node["inputs"]] + [row_ptr[nid]]
            self._calls.append((func, kernel, kernels[func], [self._buffers[sids[e]] for e in eids]))
        self._heads = [row_ptr[h[0]] + h[1] for h in g["heads"]]
        out_names = [o["name"] for o in artifact.metadata.get("outputs", [])]
        self.output_names = out_names if len(out_names) == len(self._heads) else \
            [f"output_{i}" for i in range(len(self._heads))]

    @property
    def num_kernels(self) -> int:
        return len(self._calls)

    @property
    def num_outputs(self) -> int:
        return len(self._heads)

    def input_info(self, name: str) -> tuple:
        _, shape, dtype = self._entries[self._inputs[name]]
        return shape, dtype.name

    def set_input(self, name: str, array) -> None:
        """Copy `array` to the device; InputError on an unknown name, another shape or dtype."""
        if name not in self._inputs:
            raise InputError(f"unknown input '{name}'; the model's inputs are: {', '.join(self.input_names)}")
        sid, shape, dtype = self._entries[self._inputs[name]]
        src = np.asarray(array)
        if tuple(src.shape) != shape or src.dtype != dtype:
            raise InputError(f"input '{name}': expected shape [{','.join(map(str, shape))}] {dtype.name}, "
                             f"got [{','.join(map(str, src.shape))}] {src.dtype.name}")
        self.program.upload(self._buffers[sid], src)

    def _enqueue_all(self) -> list:
        return [self.program.launch(kernel, launch, bufs) for _, kernel, launch, bufs in self._calls]

    def run(self) -> None:
        """Enqueue every kernel in graph order and wait for the last."""
        self._enqueue_all()
        self.program.queue.finish()

    def profile(self) -> list:
        """One run, timed per kernel with OpenCL events: [(kernel name, milliseconds)]."""
        events = self._enqueue_all()
        self.program.queue.finish()
        return [(call[0], KernelProgram.elapsed_ms(ev)) for call, ev in zip(self._calls, events)]

    def get_output(self, index) -> np.ndarray:
        """A host copy of output `index` (position or name)."""
        sid, shape, dtype = self._entries[self._heads[output_position(index, self.output_names)]]
        out = np.empty(shape, dtype)
        self.program.download(self._buffers[sid], out)
        return out

    @staticmethod
    def set_num_threads(n: int) -> None:
        """Accepted for the executor contract; an OpenCL device schedules its own threads."""
        if n < 1:
            raise InputError(f"thread count must be at least 1, got {n}")
