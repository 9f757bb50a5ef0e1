"""Runtime stage (CPU artifacts of another architecture): run a mod.tar under user-mode emulation.

An artifact compiled for another CPU architecture than this host's (e.g. `--target arm` on an
x86-64 machine) runs through the shipped C runner (tvmc/runtime/tvmc_run.c, on the C API of
tvmc_kernels.h), built for the artifact's target by its own linker command (the cross C
compiler driver, e.g. aarch64-linux-gnu-gcc) and started under the descriptor's `emulator`
(e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`, QEMU's user mode). Inputs and outputs cross as
.npy files in a private folder; the runner times the runs itself (`timed_runs`), so process
start-up is not measured, but times under emulation are not device times: they measure QEMU's
translation of the code on this host. On a host of the artifact's own architecture the
ordinary ctypes runtime (GraphExecutor) runs it instead (tvmc.runtime.create_executor).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

from tvmc.errors import ArtifactError, InputError, TVMCError
from tvmc.package import Artifact, load_artifact
from tvmc.process import run_tool
from tvmc.runtime.executor import checked_input, checked_symbolic_input, output_position, symbolic_inputs
from tvmc.target import Target, artifact_target, host_arch
from tvmc.toolchain import find_tool

RUNNER = "tvmc_run"
# the runner's exit code for the C API's TVMC_ERR_INPUT (tvmc_run.c EXIT_INPUT, InputError's):
# an input the runner was given does not fit
RUNNER_INPUT_ERROR = InputError.exit_code
# what the runner's message of a refused input starts with: "error: " and the step that failed
# (the input's file, or "run" where the inputs disagree on a size variable), both internal here
_RUNNER_STEP = re.compile(r"^error: (?:\./input_\d+\.npy|run): ")


def emulation_missing(target: Target) -> str | None:
    """None when artifacts of `target` can run here under emulation; else the reason, naming the
    missing tool and its package: the emulator (descriptor `emulator`) and the C compiler driver
    that builds the runner (`linker`). A target without an emulator gives its own reason."""
    if not target.emulator:
        return f"target {target.name} names no emulator to run {target.arch} code on this {host_arch()} host"
    for command, package, what in ((target.emulator, target.emulator_package, "emulator"),
                                   (target.linker, target.linker_package, "C compiler")):
        try:
            find_tool(command, package, what, TVMCError)
        except TVMCError as e:
            return str(e)
    return None


class EmulatedProgram:
    """The C runner and a kernel library (with its params) in a private folder, run under the
    target's emulator. `run` writes inputs as .npy files, starts one emulated process and reads
    the outputs back. The folder is removed by `close()` or when the object is collected.

    `link_runner(library, target) -> bytes` builds the runner (the backend's,
    tvmc.backends.llvm.SharedObjectBackend.link_runner).

    Raises ArtifactError when the emulator is missing (naming its package), CodegenError when the
    target's C compiler is missing or fails to build the runner."""

    def __init__(self, target: Target, library: bytes, params: bytes | None, origin: str, link_runner):
        self.target, self.origin = target, origin
        self.emulator = find_tool(target.emulator, target.emulator_package, f"{origin} ({target.arch}): emulator",
                                  ArtifactError)
        runner = link_runner(library, target)
        self.folder = tempfile.mkdtemp(prefix="tvmc-emulated-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.folder, True)
        for name, data in (("mod.so", library), (RUNNER, runner), ("mod.params", params)):
            if data is not None:
                Path(self.folder, name).write_bytes(data)
        os.chmod(Path(self.folder, RUNNER), 0o755)
        self.has_params = params is not None

    def close(self) -> None:
        self._cleanup()

    def set_library(self, library: bytes) -> None:
        """Replace mod.so with `library` (another library of the same target, e.g. the next tuning
        candidate): the runner, linked against any mod.so of its target, loads it at its next run."""
        Path(self.folder, "mod.so").write_bytes(library)

    def command(self, repeat: int = 0, number: int = 1, min_repeat_ms: float = 0.0) -> list:
        """The command line run() starts, in self.folder."""
        cmd = [self.emulator, *self.target.emulator[1:], f"./{RUNNER}", "-I", ".", "-O", "."]
        if self.has_params:
            cmd += ["-p", "mod.params"]
        if repeat and min_repeat_ms:
            cmd += ["-m", repr(float(min_repeat_ms))]
        return cmd + (["-r", str(repeat), "-n", str(number)] if repeat else [])

    def run(self, inputs: list, num_outputs: int, repeat: int = 0, number: int = 1, threads: int | None = None,
            min_repeat_ms: float = 0.0, timeout_s: float | None = None):
        """Run once (repeat = 0) or `repeat` timed measurements of `number` runs each (after a
        warm-up run; `number` grows until a measurement lasts `min_repeat_ms`) on `inputs` (arrays
        in the C API's input order). Returns (outputs as arrays, the measurements in ms per run).
        Raises InputError when the runner refuses an input, ArtifactError when it fails otherwise
        (its first line of stderr), subprocess.TimeoutExpired after `timeout_s` seconds (the
        emulated process killed)."""
        for k, array in enumerate(inputs):
            np.save(Path(self.folder, f"input_{k}.npy"), np.asarray(array, order="C"), allow_pickle=False)
        outs = [Path(self.folder, f"output_{k}.npy") for k in range(num_outputs)]
        for path in outs:
            path.unlink(missing_ok=True)
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        cmd = self.command(repeat, number, min_repeat_ms)
        res = run_tool(cmd, cwd=self.folder, env=env, timeout_s=timeout_s)
        if res.returncode != 0:
            line = next((ln for ln in res.stderr.splitlines() if ln.strip()), "no message")[:300]
            why = f"signal {-res.returncode}" if res.returncode < 0 else f"exit code {res.returncode}"
            if res.returncode == RUNNER_INPUT_ERROR:
                raise InputError(f"{self.origin}: {_RUNNER_STEP.sub('', line).removeprefix('error: ')}")
            raise ArtifactError(f"{self.origin}: the C runner failed under {Path(self.emulator).name} ({why}): {line}")
        samples = []
        for ln in res.stdout.splitlines():
            if ln.startswith("measurements_ms:"):
                samples = [float(v) for v in ln.split(":", 1)[1].split()]
        if repeat and len(samples) != repeat:
            raise ArtifactError(f"{self.origin}: the C runner printed {len(samples)} measurements, not {repeat}")
        return [_load_npy(path) for path in outs], samples


def _load_npy(path) -> np.ndarray:
    """An output .npy of the C runner; its 2-byte void elements are bfloat16 (tvmc_run.c writes
    bfloat16 as '<V2', as numpy writes ml_dtypes' arrays)."""
    a = np.load(path, allow_pickle=False)
    return a.view("bfloat16") if a.dtype == np.dtype("V2") else a


class EmulatedExecutor:
    """Executes an Artifact (or mod.tar path) of a CPU target of another architecture under the
    target's emulator through the C runner (see the module docstring); the executor contract of
    tvmc.runtime. Inputs and outputs are the module description's (the C API's order).

    Raises ArtifactError when the artifact cannot run under emulation here (no emulator in its
    target, the emulator missing: the message names its package), CodegenError when the target's
    C compiler (needed to build the runner) is missing. The emulator and the compiler are those of
    the known descriptor that matches the artifact's code facts (tvmc.target.artifact_target:
    `target_spec` when given, else a shipped one), never the commands metadata.json names.
    `link_runner` builds the C runner (EmulatedProgram)."""

    def __init__(self, artifact: Artifact | str | os.PathLike, target_spec: str | None, link_runner):
        if not isinstance(artifact, Artifact):
            artifact = load_artifact(artifact)
        self.artifact = artifact
        origin = artifact.path
        # the emulator and the compiler come from a known descriptor, never from metadata.json
        target = artifact_target(artifact.metadata["target"], target_spec, origin, ArtifactError)
        if not target.emulator:
            raise ArtifactError(f"{origin}: compiled for {target.arch} (target '{target.name}'), this host is "
                                f"{host_arch()}, and the target names no emulator")
        if artifact.library is None or artifact.params is None:
            raise ArtifactError(f"{origin}: loaded without its library and params (load_artifact read_data=False)")
        import safetensors.numpy

        params = safetensors.numpy.save(artifact.params) if artifact.params else None
        self._program = EmulatedProgram(target, artifact.library, params, origin, link_runner)
        self.device_name = (f"{target.arch} under emulation ({Path(self._program.emulator).name}); "
                            f"times measured there are not device times")
        description = artifact.description
        self._inputs = {i["name"]: (tuple(i["shape"]), np.dtype(i["dtype"])) for i in description["inputs"]}
        self.input_names = list(self._inputs)
        self.output_names = [o["name"] for o in description["outputs"]]
        self._values = {name: np.zeros(shape, dtype) for name, (shape, dtype) in self._inputs.items()}
        # symbolic shapes: the inputs the C API binds the size variables from, in the runner
        self._symbolic = symbolic_inputs(description)
        self._outputs: list = []
        self._threads = None

    @property
    def num_outputs(self) -> int:
        return len(self.output_names)

    def input_info(self, name: str) -> tuple:
        """(shape tuple, dtype name) of input `name`."""
        shape, dtype = self._inputs[name]
        return shape, dtype.name

    def set_input(self, name: str, array) -> None:
        """Keep a copy of `array` for input `name` (written for the runner at the next run).
        Raises InputError on an unknown name, another shape or dtype (no implicit casts). An input
        of symbolic shape takes any shape of its rank and dtype here; the C API in the runner
        checks its dimensions against the compiled ranges at the next run (InputError there,
        naming the input, the dimension, its value and the range)."""
        if name in self._symbolic:
            self._values[name] = checked_symbolic_input(name, array, *self._inputs[name]).copy()
            return
        self._values[name] = checked_input(name, array, self.input_names, self._inputs).copy()

    def _run(self, repeat: int = 0, number: int = 1) -> list:
        self._outputs, samples = self._program.run([self._values[n] for n in self.input_names], self.num_outputs,
                                                   repeat, number, self._threads)
        return samples

    def run(self) -> None:
        """Run the model once in one emulated process of the C runner."""
        self._run()

    def timed_runs(self, repeat: int, number: int) -> list:
        """`repeat` measurements in ms per run, each the mean of `number` runs, timed by the C
        runner inside the emulated process after one warm-up run (tvmc.runtime.benchmark uses
        them instead of timing run() from Python, which would count the emulator's start-up)."""
        return self._run(repeat, number)

    def profile(self, runs: int = 1) -> list:
        """Not available: the C runner times whole runs only. Raises ArtifactError."""
        raise ArtifactError(f"{self.artifact.path}: per-kernel profiling is not available under emulation "
                            f"(the C runner times whole runs: use --repeat/--number)")

    def get_output(self, index) -> np.ndarray:
        """A copy of output `index` (position, or output name) of the last run."""
        position = output_position(index, self.output_names)
        if not self._outputs:
            raise ArtifactError(f"{self.artifact.path}: no run yet, so no output {index}")
        return self._outputs[position].copy()

    def set_num_threads(self, n: int) -> None:
        """Threads of the kernels' parallel loops in the emulated process (its OMP_NUM_THREADS)."""
        if n < 1:
            raise InputError(f"thread count must be at least 1, got {n}")
        self._threads = int(n)

    def close(self) -> None:
        """Remove the private folder of the runner (also done when the executor is collected)."""
        self._program.close()

