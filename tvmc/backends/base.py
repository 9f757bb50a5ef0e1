"""The Backend protocol: what differs by the kind of library a target builds (DESIGN.md section 9;
Triton's BaseBackend, tinygrad's renderer and device as models).

A backend turns lowered kernels (tvmc.ops.fused.LoweredKernel: loop IR, one per fused function)
into the target's library, runs what it built (the executor of `tvmc run`, one kernel for tuning
measurements and for the tests) and says what this machine lacks to run it. The driver, the
tuner, the runtime's `create_executor` and the tests ask `tvmc.backends.backend_for(target)`; no
other module branches on a target's kind, codegen, library format or runtime.
"""

from __future__ import annotations

import os
from pathlib import Path

from tvmc.errors import CodegenError
from tvmc.paths import write_new_text


class Backend:
    """One kind of library. Subclasses set the class attributes and implement the methods.

    name:           the backend's name (records of candidates name it for the runner process)
    library_format: the library's file suffix and metadata `library_format` (so, wasm, cl, ptx)
    device_kernels: the library holds GPU device kernels, each launched with the grid and block
                    that mod.json "kernels" records (tvmc.tir.gpu.lower_device ran in lowering)
    symbolic_shapes: models with symbolic shapes (issue 29) compile for it: its library's C API
                    binds the size variables and its graph entry passes them to the kernels (GPU
                    backends: tvmc.runtime.device binds them and passes them at each launch)
    """

    name = ""
    library_format = ""
    device_kernels = False
    symbolic_shapes = False
    storage_views = False

    # --- building ---------------------------------------------------------------------------
    def build(self, kernels, target, graph_json=None, params=None, dump_ir=(), dump_dir=None, progress=None,
              device_binaries: dict | None = None) -> bytes:
        """The library (bytes) of lowered `kernels` for `target`. With `graph_json` (the graph's
        mod.json) and its `params` ({name: array}), the library describes the graph it was
        compiled for (tvmc.codegen.description) and, for CPU libraries, runs it (graph entry, C
        API); for device kernels their launches are added to graph_json["kernels"].
        `device_binaries` receives {member name: bytes} of code assembled beside the library.
        `dump_ir` stages ('tir', 'll', 'asm') go into `dump_dir` as mod.tir, mod.ll, mod.s.
        `progress(stage, done, total)` is called before LLVM runs ("llvm") and before linking
        ("link"). Raises CodegenError (or ScheduleError for a kernel beyond the target)."""
        raise NotImplementedError

    def build_candidate(self, prim, target, path: str) -> None:
        """Write one kernel (a lowered PrimFunc) as a tuning candidate to `path`, in the form
        load_candidate reads. Raises CodegenError."""
        raise CodegenError(f"target {target.name}: {self.name} libraries are not tuned on this machine")

    def build_emulated_candidate(self, prim, target, path: str, tensors) -> None:
        """Write one kernel as a tuning candidate for a device that measures under the target's
        emulator (`tvmc device-worker --emulate`); `tensors`: (shape, dtype) of the kernel's
        inputs, then of its output. Raises CodegenError for a backend without an emulator."""
        raise CodegenError(f"target {target.name}: {self.name} candidates are not measured under an emulator")

    # --- running ----------------------------------------------------------------------------
    def load_candidate(self, path: str, func: str, arrays, out, sizes=()):
        """In the tuner's runner process: (call, fetch, timed, close) for candidate `path`'s kernel
        `func` over numpy `arrays` (inputs) and `out` (and `sizes`, the values of a kernel's
        SizeVars: PrimFunc.size_args): call() runs it once and waits, fetch() copies the output
        into `out`, timed(n) is None or runs it n times and returns the device's seconds, close()
        releases what was loaded."""
        raise NotImplementedError

    def run_kernel(self, prim, target, arrays, out):
        """Compile one lowered kernel and run it once on numpy `arrays` here (tests); returns `out`."""
        raise NotImplementedError

    def create_executor(self, artifact, device: str | None = None, target: str | None = None, **options):
        """The executor of `tvmc run` for a loaded Artifact of this backend (tvmc.runtime)."""
        raise NotImplementedError

    def missing(self, target) -> str | None:
        """None when libraries of `target` can be built and run on this machine; else the reason
        as one line naming what is missing (a device, a driver, an engine, an emulator)."""
        return None

    def measure_missing(self, target) -> str | None:
        """None when tuning candidates of `target` can be measured on this machine; else why, as
        the one line `tvmc tune` says (the device it measures on is missing here)."""
        missing = self.missing(target)
        return None if missing is None else \
            f"target {target.name} is tuned by measuring on its device, and none runs here: {missing}"

    def device_missing(self, target) -> tuple:
        """For a device node of a cluster (`tvmc device-worker`, tvmc.cluster): (None, emulated)
        when this host runs `target`'s artifacts and measures its candidates, `emulated` True
        when it does so under an emulator (its times are the emulator's, not the device's);
        else (the reason as one line, False)."""
        return self.missing(target), False

    def device_requirements(self, library: bytes) -> dict | None:
        """What a device needs to load `library` (metadata.json `device_requirements`), or None."""
        return None

    def check_device(self, device: str | None, origin: str) -> None:
        """Raise ArtifactError when `device` (tvmc run --device) is not one this backend runs on."""


def write_dumps(dump_dir, dump_ir, prims, dumps: dict) -> None:
    """Write the stages listed in `dump_ir` into `dump_dir` (files created exclusively,
    tvmc.paths.write_new_text): mod.tir (the loop IR of `prims`), mod.ll and mod.s (from
    `dumps`, where the target's codegen produced them)."""
    if not dump_dir or not dump_ir:
        return
    os.makedirs(dump_dir, exist_ok=True)
    if "tir" in dump_ir:
        write_new_text(Path(dump_dir, "mod.tir"), "".join(str(p) for p in prims))
    for stage, name in (("ll", "mod.ll"), ("asm", "mod.s")):
        if stage in dump_ir and stage in dumps:
            write_new_text(Path(dump_dir, name), dumps[stage])


def described(graph_json, params):
    """The module description of the graph a library is built for (None without a graph)."""
    from tvmc.codegen import description

    return None if graph_json is None else description.module_description(graph_json,
                                                                           description.param_info(params or {}))
