"""Runtime stage (GPU devices): the graph executor that the OpenCL and CUDA runtimes share.

A device runtime supplies a program: the artifact's kernels loaded on one device
(tvmc.runtime.opencl.KernelProgram, tvmc.runtime.cuda.KernelModule), with

    device_name                       the device, as its driver names it
    buffer(nbytes)                    a device buffer
    upload(buffer, array) / download(buffer, array)
    kernel(name)                      a kernel handle (AttributeError when the library lacks it)
    launch(kernel, launch, buffers, timed=False, scalars=())
                                      enqueue one launch ({"grid": [x,y,z], "block": [x,y,z]},
                                      ints) over the buffers, then the int64 `scalars` (a kernel's
                                      size arguments); with `timed`, returns a handle for elapsed_ms
    elapsed_ms(handle)                the launch's device time in milliseconds (waits for it)
    finish()                          wait until every enqueued launch is done
    close()                           (optional) free the device resources now

DeviceExecutor keeps the executor contract of tvmc.runtime over it, from mod.json: one device
buffer per storage id, params uploaded once, kernels launched in graph order with the launch
configurations of mod.json "kernels", a per-kernel profile timed with device events. numpy only
holds tensors on the host side: every operator runs in the device's kernels.

Symbolic shapes (mod.json "size_vars"): each storage buffer holds its tensor at the bound shape;
set_input binds the size variables from the input's shape (tvmc.runtime.executor.SizeBinding, the
C API's rule and messages: a dimension outside its range is an InputError, which `tvmc run` exits
8 on), a run checks that the inputs agree, then launches each kernel with its size arguments
(mod.json "size_args") after its buffers and its grid and block evaluated at them
(tvmc.tir.gpu.launch_dims; a launch with no threads is skipped), and the outputs come back at
their run-time shapes (their tensors are packed at those shapes in the leading bytes).
"""

from __future__ import annotations

import os

import numpy as np

from tvmc.errors import ArtifactError, InputError
from tvmc.mod_json import load_order, loop_entries, run_order, storage_offsets
from tvmc.package import Artifact, graph_attr, library_name, load_artifact
from tvmc.runtime.control import run_loop
from tvmc.runtime.executor import SizeBinding, checked_input, output_position, run_time_heads, sliced_output
from tvmc.tir.gpu import launch_dims


def sized_launch(launch: dict, sizes) -> dict | None:
    """Launch {"grid", "block"} of mod.json's form (symbolic extents as postfix programs over the
    kernel's size arguments, tvmc.tir.gpu.LaunchConfig.to_dict) as ints for the size argument
    values `sizes`; None when an extent is 0 or less: the kernel has nothing to do."""
    if not sizes:
        return launch
    grid, block = launch_dims(launch, list(sizes))
    if min(grid + block) <= 0:
        return None
    return {"grid": list(grid), "block": list(block)}


def run_kernel(program, name: str, launch: dict, arrays, out: np.ndarray, sizes=()) -> np.ndarray:
    """Run kernel `name` of `program` once on numpy `arrays` (inputs) and `out` (output, filled
    in); returns `out`. A kernel with symbolic extents takes `sizes`, its size arguments' values."""
    bufs = []
    for a in list(arrays) + [out]:
        b = program.buffer(a.nbytes)
        program.upload(b, a)
        bufs.append(b)
    launch = sized_launch(launch, sizes)
    if launch is not None:
        program.launch(program.kernel(name), launch, bufs, scalars=sizes)
    program.finish()
    program.download(bufs[-1], out)
    return out


class DeviceExecutor:
    """Executes an Artifact (or mod.tar path) compiled for a GPU target whose runtime is
    `runtime` ('opencl', 'cuda') with the program `make_program(artifact)` returns (see the
    module docstring); the executor contract of tvmc.runtime.

    Raises ArtifactError when the artifact is not one for `runtime`, mod.json lacks a kernel's
    launch, or the library lacks a kernel mod.json calls (and whatever make_program raises)."""

    profile_clock = "each kernel timed on the device with its driver's events"  # how `profile` times

    def __init__(self, artifact: Artifact | str | os.PathLike, runtime: str, make_program):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        target_runtime = (artifact.metadata.get("target") or {}).get("runtime")
        if target_runtime != runtime:
            raise ArtifactError(f"{origin}: target runtime '{target_runtime}' is not {runtime}")
        g = artifact.graph_json
        kernels = g.get("kernels")
        if not isinstance(kernels, dict):
            raise ArtifactError(f"{origin}: mod.json has no kernel launch configurations ('kernels')")
        self.program = make_program(artifact)
        self.device_name = self.program.device_name

        nodes, row_ptr = g["nodes"], g["node_row_ptr"]
        shapes = graph_attr(g, "shape")
        dtypes = [np.dtype(d) for d in graph_attr(g, "dltype")]
        sids = [int(s) for s in graph_attr(g, "storage_id")]
        if any(int(o) for o in storage_offsets(g)):
            # one device buffer per storage id: PlanMemory places no views for GPU backends
            raise ArtifactError(f"{origin}: mod.json places entries at storage offsets, which this executor "
                                f"does not support (a library for a CPU target?)")
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
        self._sizes = SizeBinding(g, self._inputs)
        self._values: list = []  # the size variables' values of the current run
        self._launches: dict = {}  # (kernel, its size arguments...) -> its launch at them (None: none)
        size_args = g.get("size_args") or {}

        def calls(order):
            """One (func, kernel, launch, buffers, size argument indices) per kernel; (loop_entries,
            calls of its body) per run-time loop."""
            out = []
            for item in order:
                if isinstance(item, tuple):
                    out.append((loop_entries(g, item[0]), calls(item[1])))
                    continue
                node = nodes[item]
                func = node["attrs"]["func_name"]
                if func not in kernels:
                    raise ArtifactError(f"{origin}: kernel '{func}' (node '{node['name']}') has no launch in mod.json")
                try:
                    kernel = self.program.kernel(func)
                except AttributeError:
                    raise ArtifactError(f"{origin}: kernel '{func}' is missing from {library}") from None
                eids = [row_ptr[i[0]] + i[1] for i in node["inputs"]] + [row_ptr[item]]
                out.append((func, kernel, kernels[func], [self._buffers[sids[e]] for e in eids],
                            size_args.get(func, ())))
            return out

        library = library_name(artifact.metadata)
        self._calls = calls(run_order(g))
        load = calls(load_order(g))
        if load:  # the load-time kernels, once, after the params: their outputs keep their buffers
            self._launch_all(calls=load)
        self._heads = [row_ptr[h[0]] + h[1] for h in g["heads"]]
        self._head_shapes = run_time_heads(g)
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
        """Copy `array` to the device; InputError on an unknown name, another shape or dtype (an
        input of symbolic shape: another rank or dtype, or a dimension outside its range)."""
        if name in self._sizes.inputs:
            sid, bound, dtype = self._entries[self._inputs[name]]
            self.program.upload(self._buffers[sid], self._sizes.set_input(name, array, bound, dtype))
            return
        src = checked_input(name, array, self.input_names,
                            {n: self._entries[e][1:] for n, e in self._inputs.items()})
        self.program.upload(self._buffers[self._entries[self._inputs[name]][0]], src)

    def _launch_all(self, timed: bool = False, calls=None, handles=None) -> list:
        """Launch `calls` (default: the graph's) in order; a run-time loop is interpreted here
        (tvmc.runtime.control), its condition and carried values copied through the host, its
        body's kernels launched once per iteration. With `timed`, returns (kernel name, handle for
        program.elapsed_ms) per launch, loop bodies' launches included, in launch order."""
        handles = [] if handles is None else handles
        if calls is None and self._sizes:
            self._values = self._sizes.bind({n: self._entries[e][1] for n, e in self._sizes.inputs.items()})
        for call in self._calls if calls is None else calls:
            if len(call) == 2:
                loop, body = call
                run_loop(loop, lambda body=body: self._launch_all(timed, body, handles), self._download,
                         self._write_entry)
                continue
            name, kernel, launch, bufs, size_args = call
            sizes = [self._values[k] for k in size_args]
            if sizes:  # the grid at these sizes, evaluated once per kernel and sizes
                key = (name, *sizes)
                if key not in self._launches:
                    self._launches[key] = sized_launch(launch, sizes)
                launch = self._launches[key]
            if launch is None:  # no threads at these sizes
                continue
            handle = self.program.launch(kernel, launch, bufs, timed, **({"scalars": sizes} if sizes else {}))
            if timed:
                handles.append((name, handle))
        return handles

    def _write_entry(self, entry: int, array) -> None:
        self.program.upload(self._buffers[self._entries[entry][0]], np.ascontiguousarray(array))

    def run(self) -> None:
        """Launch every kernel in graph order and wait for the last."""
        self._launch_all()
        self.program.finish()

    def profile(self, runs: int = 1) -> list:
        """Run the graph `runs` times kernel by kernel after one untimed warm-up run, timing every
        kernel launch on the device with the program's events (OpenCL profiling events, CUDA
        events): the time the kernel ran on the device, without the host's launch overhead. A
        run-time loop runs as in `run`; its body's kernels count once per iteration.

        Returns one dict per distinct kernel, in order of first launch: {"name": func_name,
        "calls": launches per run, "total_ms": milliseconds per run (mean over `runs`)}, as the
        CPU executors' profile. The outputs afterwards are those of a plain run. Raises
        InputError when runs < 1, ArtifactError when the device fails."""
        if runs < 1:
            raise InputError(f"profile runs must be at least 1, got {runs}")
        self._launch_all()
        self.program.finish()
        totals: dict = {}
        calls: dict = {}
        for _ in range(runs):
            launched = self._launch_all(timed=True)
            self.program.finish()
            for name, handle in launched:
                totals[name] = totals.get(name, 0.0) + self.program.elapsed_ms(handle)
                calls[name] = calls.get(name, 0) + 1
        if self._sizes:
            self.profile_sizes = list(self._sizes.values)
        # every run launches the same kernels: a run starts its loops from their initial values
        return [{"name": name, "calls": calls[name] // runs, "total_ms": ms / runs} for name, ms in totals.items()]

    def get_output(self, index) -> np.ndarray:
        """A host copy of output `index` (position or name)."""
        k = output_position(index, self.output_names)
        out = self._download(self._heads[k])
        if self._head_shapes[k] is None:
            return out
        return sliced_output(out, self._download(self._head_shapes[k]), self.artifact.path, self.output_names[k])

    def _download(self, entry: int) -> np.ndarray:
        sid, shape, dtype = self._entries[entry]
        if self._sizes:  # its tensor at the run-time shape, packed at the buffer's start
            shape = self._sizes.shape(entry, shape)
        out = np.empty(shape, dtype)
        self.program.download(self._buffers[sid], out)
        return out

    @staticmethod
    def set_num_threads(n: int) -> None:
        """Accepted for the executor contract; a GPU schedules its own threads."""
        if n < 1:
            raise InputError(f"thread count must be at least 1, got {n}")

    def close(self) -> None:
        """Free the device resources now (the program's close, where it has one); the executor
        cannot run afterwards. Idempotent."""
        close = getattr(self.program, "close", None)
        if close is not None:
            close()
