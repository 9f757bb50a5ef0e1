"""Measurement of tuning candidates: build in parallel worker processes, run and time on this
machine in a separate runner process, check results against the fallback config's output.

Build: a ProcessPoolExecutor of `parallel` forked workers lowers the task's anchor op with the
candidate config and compiles it into its own .so (`build_candidate`; for a GPU target, the
kernel's OpenCL C or PTX and its launch in a JSON file, loaded by the device's driver in the
runner). At most `parallel` builds
are in flight, so a build's wait starts when it starts; a build that passes the timeout has its
pool killed and replaced (the other builds in flight are resubmitted).

Run: one runner process (spawned, numpy + ctypes, pyopencl or cuda-python only, so a segfault or a
hang in a candidate kills the runner, never the tuner) loads the library (GPU: the program for
the first OpenCL device or CUDA GPU, and runs the kernel there), feeds seeded random inputs (uniform in
[-1, 1)), runs once as warm-up and compares the output with the fallback config's (rtol 1e-4,
atol 1e-5 x the reference's largest magnitude: float32 sums in another order; a float16 output
rtol 1e-3 and atol 1e-4 x, a bfloat16 one 8e-3 and 8e-4 x: their rounding), then times
`repeat` rounds of `number` runs (a fresh runner first runs its first kernel for 0.2 s: the
first timings of a new process are several times slower); a round shorter than `min_repeat_ms` makes `number` grow until
a round lasts that long (TVM's LocalRunner). On a GPU a round is the device time of its runs,
each launch between two device events (CUDA events, OpenCL profiling events): the kernel's own
time, without the host's launch overhead, which the executor's CUDA graph replay removes too.
Costs are seconds per run, one per round. A runner that dies or passes the candidate's remaining
time (timeout minus build time) is killed and restarted. A GPU target is measured on its device
only: without one, Measurer raises TuningError at once.

Error codes follow AutoTVM's MeasureErrorNo.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import enum
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from tvmc.checks import bool_arg, int_arg, positive_number_arg
from tvmc.te.expr import is_float

# rtol of the check against the fallback's output, by output dtype (default 1e-4): one ulp of the
# 16-bit floats, whose tiles sum in another order and then round
CHECK_RTOL = {"float16": 1e-3, "bfloat16": 8e-3}


class MeasureError(enum.IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the schedule or lowering raised for this config
    COMPILE_HOST = 2         # LLVM or the linker failed, or the build worker died
    RUNTIME_DEVICE = 4       # the kernel crashed the runner (segfault, abort)
    WRONG_ANSWER = 5         # output differs from the fallback config's output
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7


@dataclass(frozen=True)
class MeasureOptions:
    """How tuning candidates are built and timed, the one place of each measurement option (the
    CLI builds it from tvmc.cli.MEASURE_FLAGS).

    number:          runs per timing round (>= 1)
    repeat:          timing rounds per candidate (>= 1), one cost each
    min_repeat_ms:   milliseconds a round lasts at least: `number` grows until it does (>= 0)
    timeout_s:       seconds per candidate, build plus run, or the run alone when build_timeout_s
                     is set (then the build has build_timeout_s, as AutoTVM's separate
                     LocalBuilder and LocalRunner timeouts); > 0
    build_timeout_s: seconds per build (> 0), or None (see timeout_s)
    parallel:        build worker processes (>= 1); None: one per core of this machine
    check:           compare each candidate's output with the fallback config's

    Raises TypeError or ValueError naming the field (tvmc.checks).
    """

    number: int = 4
    repeat: int = 3
    min_repeat_ms: float = 0.0
    timeout_s: float = 10.0
    build_timeout_s: float | None = None
    parallel: int | None = None
    check: bool = True

    def __post_init__(self):
        canonical = {
            "number": int_arg("number", self.number, 1),
            "repeat": int_arg("repeat", self.repeat, 1),
            "min_repeat_ms": positive_number_arg("min_repeat_ms", self.min_repeat_ms, "milliseconds", zero=True),
            "timeout_s": positive_number_arg("timeout_s", self.timeout_s, "seconds"),
            "build_timeout_s": positive_number_arg("build_timeout_s", self.build_timeout_s, "seconds", optional=True),
            "parallel": int_arg("parallel", self.parallel if self.parallel is not None else os.cpu_count() or 1, 1),
            "check": bool_arg("check", self.check),
        }
        for name, value in canonical.items():
            object.__setattr__(self, name, value)


class MeasurementStopped(Exception):
    """A measurer can measure no more (a cluster's device left and did not come back): raised by
    measure() with `results`, one per config asked for: a MeasureResult for each config measured
    (or lost in flight, an error), None for each never started. The tuner records the results,
    stops, and says `reason`."""

    def __init__(self, reason: str, results: list):
        super().__init__(reason)
        self.reason, self.results = reason, results


@dataclass
class MeasureResult:
    costs_s: list
    error: MeasureError = MeasureError.NO_ERROR
    error_msg: str = ""
    build_s: float = 0.0
    timestamp: float = field(default_factory=time.time)
    emulated: bool = False   # timed under an emulator (qemu-user): not the device's times

    @property
    def ok(self) -> bool:
        return self.error == MeasureError.NO_ERROR

    @property
    def mean_s(self) -> float:
        return sum(self.costs_s) / len(self.costs_s) if self.ok and self.costs_s else float("inf")


def build_candidate(task, target, config: dict, path: str, emulated: bool = False):
    """Lower `task`'s anchor op with `config` and write it as a candidate of the target's backend
    to `path` (Backend.build_candidate: a shared library, or the kernel's OpenCL C or PTX and its
    launch in a JSON file); with `emulated`, as a candidate for a device that measures under the
    target's emulator (Backend.build_emulated_candidate: the kernel as a one-kernel graph, which
    EmulatedRunner times with the C runner).

    Returns (MeasureError, message, build seconds); runs in a build worker."""
    t0 = time.perf_counter()
    try:
        from tvmc.autotune.space import ConfigEntity
        from tvmc.backends import backend_for
        from tvmc.errors import CodegenError
        from tvmc.ops.fused import lower_fused

        cfg = ConfigEntity(config)
        try:
            prim = lower_fused(task.function(), target,
                               config_lookup=lambda name, wl: cfg if name == task.impl else None)
        except Exception as e:  # any failure of the schedule for this config (e.g. beyond the GPU's limits)
            return MeasureError.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}", time.perf_counter() - t0
        try:
            if emulated:
                backend_for(target).build_emulated_candidate(prim, target, path, candidate_tensors(task))
            else:
                backend_for(target).build_candidate(prim, target, path)
        except CodegenError as e:
            return MeasureError.COMPILE_HOST, str(e), time.perf_counter() - t0
        return MeasureError.NO_ERROR, "", time.perf_counter() - t0
    except Exception as e:
        return MeasureError.COMPILE_HOST, f"{type(e).__name__}: {e}", time.perf_counter() - t0


def _die_with_parent():
    """Ask Linux to kill this process when the tuner dies (PR_SET_PDEATHSIG = 1, SIGKILL), so a
    killed `tvmc tune` leaves no build workers or runner behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _exit_quietly(signum, frame):
    raise SystemExit(128 + signum)


def _build_worker_init(parent_fds, tmp=None):
    """Build workers are forked: close the tuner's end of the runner socket they inherited (held
    open here, it would keep the runner from seeing the tuner exit), and make their temporary
    files (the compiler's folders, tvmc.process) inside the Measurer's folder `tmp`, which the
    tuner removes however the workers end."""
    _die_with_parent()
    if tmp is not None:
        tempfile.tempdir = tmp
        os.environ["TMPDIR"] = tmp
    import signal

    # the tuner stops its workers with SIGTERM: a worker ends quietly (SystemExit, no traceback on
    # the tuner's stderr) after the tool it runs is killed (tvmc.process); Ctrl-C is the tuner's
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_quietly)
    for fd in parent_fds:
        try:
            os.close(fd)
        except OSError:
            pass


# ---- runner process -------------------------------------------------------------------------

def _runner_entry(fd: int):
    _die_with_parent()
    _runner_main(Connection(fd))


def _runner_main(conn):
    """Loop of the runner process: messages ('ref', key, array) and ('run', request dict)."""
    import ctypes

    import numpy as np

    from tvmc.backends import backend_named

    # libgomp stays loaded: unloading it with a candidate's library (its last user) while its
    # worker threads idle would crash the next candidate
    ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
    refs, inputs = {}, {}
    fresh = True
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "ref":
            refs[msg[1]] = msg[2]
            continue
        req = msg[1]
        key = req["key"]
        if key not in inputs:
            inputs = {key: candidate_inputs(req)}  # one task at a time
        arrs = inputs[key]
        out = np.zeros(req["out_shape"], req["out_dtype"])
        backend = backend_named(req["backend"])
        if backend.device_kernels:
            try:
                call, fetch, timed, close = backend.load_candidate(req["path"], req["func"], arrs, out)
            except Exception as e:  # the driver rejected or could not run the kernel
                conn.send(("wrong", f"{backend.name}: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0] if str(e) else ''}"))
                continue
        else:  # a library that fails to load takes the runner down: measured as a crash
            call, fetch, timed, close = backend.load_candidate(req["path"], req["func"], arrs, out)
        try:
            call()
            fetch()
            check = None
            if req["want_output"]:
                check = out.copy()
            ref = refs.get(key)
            wrong = output_mismatch(out, ref) if ref is not None and req["check"] else None
            if wrong:
                conn.send(("wrong", wrong))
                continue
            if fresh:  # a new process times its first kernel slow (thread pool start-up): run 0.2 s first
                t_end = time.perf_counter() + 0.2
                while time.perf_counter() < t_end:
                    call()
                fresh = False
            number = req["number"]
            costs = []
            for _ in range(req["repeat"]):
                while True:
                    if timed is not None:
                        dt = timed(number)
                    else:
                        t0 = time.perf_counter()
                        for _ in range(number):
                            call()
                        dt = time.perf_counter() - t0
                    if dt * 1e3 >= req["min_repeat_ms"] or number >= 1 << 20:
                        break
                    number = max(number * 2, int(number * req["min_repeat_ms"] / max(dt * 1e3, 1e-3)) + 1)
                costs.append(dt / number)
            conn.send(("ok", costs, check))
        finally:
            close()  # thousands of candidates: unload each one


def candidate_inputs(req: dict) -> list:
    """The inputs of a candidate request (candidate_request): arrays of its shapes and dtypes from
    a generator seeded with req["seed"], floats uniform in [-1, 1), integers in [0, 10)."""
    import numpy as np

    rng = np.random.default_rng(req["seed"])
    arrs = []
    for shape, dtype in req["inputs"]:
        dt = np.dtype(dtype)
        a = rng.uniform(-1, 1, shape).astype(dt) if is_float(dt.name) else rng.integers(0, 10, shape).astype(dt)
        arrs.append(np.ascontiguousarray(a))
    return arrs


def output_mismatch(out, ref) -> str | None:
    """None when a candidate's output `out` matches the fallback config's `ref` (rtol 1e-4, atol
    1e-5 x ref's largest magnitude; float16 and bfloat16: rtol CHECK_RTOL, atol rtol / 10 x);
    else the message of a WRONG_ANSWER."""
    import numpy as np

    if out.shape != ref.shape:
        return f"output shape {out.shape}, the fallback config's {ref.shape}"
    # float16 / bfloat16 outputs: tiles sum in another order, then round to their ulp (2**-10,
    # 2**-7 relative)
    rtol = CHECK_RTOL.get(out.dtype.name, 1e-4)
    got, want = out.astype(np.float64), ref.astype(np.float64)
    atol = rtol / 10 * float(np.max(np.abs(want))) if ref.size else 0.0
    if np.allclose(got, want, rtol=rtol, atol=atol):
        return None
    return f"max abs error {float(np.max(np.abs(got - want))):.3g} against the fallback config's output"


def candidate_tensors(task) -> list:
    """(shape, dtype name) of `task`'s kernel inputs, then of its output (from its workload)."""
    import numpy as np

    n_in = len(task.in_dtypes)
    return [(tuple(s), np.dtype(d).name) for s, d in zip(task.workload[:n_in], task.in_dtypes)] + \
        [(tuple(task.workload[n_in]), np.dtype(task.workload[n_in + 1]).name)]


def candidate_request(task, path: str, options: MeasureOptions, backend_name: str, want_output: bool) -> dict:
    """The runner's request to run candidate `path` of `task` (the message the runner loop reads):
    seeded inputs of the task's shapes, the output's shape and dtype, and the timing protocol of
    `options` (number, repeat, min_repeat_ms, check). The same request serves the local runner
    and a device node's (tvmc.autotune.cluster)."""
    *inputs, (out_shape, out_dtype) = candidate_tensors(task)
    return {"key": task.key, "seed": 0, "path": path, "func": "tvmc_task",
            "inputs": inputs, "out_shape": out_shape, "out_dtype": out_dtype,
            "number": options.number, "repeat": options.repeat,
            "min_repeat_ms": options.min_repeat_ms, "check": options.check,
            "want_output": want_output, "backend": backend_name}


class Runner:
    """The runner process of the module docstring, started on first use and again after a
    candidate killed it or passed its time: one per Measurer, and one per device node of a
    cluster (tvmc.autotune.cluster), so a candidate is run the same way on both."""

    def __init__(self):
        self._proc = None
        self._conn = None
        self._refs_sent = set()

    def fds(self) -> list:
        """File descriptors of the tuner's end of the runner socket (closed in forked build workers)."""
        return [self._conn.fileno()] if self._conn is not None and not self._conn.closed else []

    def _start(self):
        # a fresh interpreter (not multiprocessing's spawn, which re-runs the parent's __main__)
        # talking over a socket pair wrapped as multiprocessing Connections
        parent, child = socket.socketpair()
        code = f"from tvmc.autotune.measure import _runner_entry; _runner_entry({child.fileno()})"
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(child.fileno(),))
        child.close()
        self._conn = Connection(parent.detach())
        self._refs_sent = set()
        if not self._conn.poll(120) or self._conn.recv() != ("ready",):
            raise RuntimeError("the measurement runner process did not start")

    def start(self):
        """Start the runner process now unless it runs (else the first run starts it)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def stop(self):
        """Kill the runner process (the next run starts a fresh one)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._conn.close()
            self._proc = None

    def run(self, req: dict, ref, limit_s: float):
        """Run candidate request `req` (candidate_request) within `limit_s` seconds, its output
        checked against `ref` (the reference output of req["key"], or None); returns
        (MeasureError, msg, costs_s, output or None). A runner that dies or passes the limit is
        killed: RUNTIME_DEVICE or RUN_TIMEOUT."""
        self.start()
        key = req["key"]
        if ref is not None and key not in self._refs_sent:
            self._conn.send(("ref", key, ref))
            self._refs_sent.add(key)
        self._conn.send(("run", req))
        if not self._conn.poll(max(limit_s, 0.0)):
            self.stop()
            return MeasureError.RUN_TIMEOUT, f"run took longer than {limit_s:.3g} s", [], None
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            try:
                code = self._proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            self.stop()
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            return MeasureError.RUNTIME_DEVICE, f"the kernel crashed the runner ({how})", [], None
        if reply[0] == "wrong":
            return MeasureError.WRONG_ANSWER, reply[1], [], None
        return MeasureError.NO_ERROR, "", reply[1], reply[2]


class EmulatedRunner:
    """Runner's interface (run) for a device that measures a CPU target of another architecture
    under the target's emulator (`tvmc device-worker --emulate`, e.g. aarch64 code under
    qemu-aarch64 on an x86-64 host; tvmc.runtime.emulated): each candidate (a one-kernel graph
    library, build_candidate with emulated) runs in one emulated process of the C runner
    (tvmc_run.c), linked once for the target and kept with each candidate's library beside it.

    The protocol is the runner's: the same seeded inputs (candidate_inputs), one warm-up run,
    `repeat` rounds of `number` runs that grow until a round lasts `min_repeat_ms` (the C
    runner's -m), timed inside the emulated process (its start-up is not measured), the output
    compared with the fallback's (output_mismatch) after the timed runs. The costs are seconds
    per run under the emulator: they rank configs by the emulator's speed on this host, not the
    device's (the records say so: MeasureResult.emulated).

    Raises CodegenError (the target's C compiler is missing or fails to link the runner) and
    ArtifactError (the emulator is missing) at the first run."""

    def __init__(self, target):
        from tvmc.backends import backend_for

        self.target, self._backend = target, backend_for(target)
        self._program = None

    def stop(self):
        """Remove the runner's folder (the next run links the runner again)."""
        if self._program is not None:
            self._program.close()
            self._program = None

    def run(self, req: dict, ref, limit_s: float):
        """Run candidate request `req` (candidate_request; req["path"] the library) within
        `limit_s` seconds; returns (MeasureError, msg, costs_s, output or None) as Runner.run:
        RUN_TIMEOUT when the emulated process passes the limit, RUNTIME_DEVICE when it fails
        (a crash, an error of the C API), WRONG_ANSWER when the output differs from `ref`."""
        from tvmc.errors import ArtifactError, InputError
        from tvmc.runtime.emulated import EmulatedProgram

        with open(req["path"], "rb") as f:
            library = f.read()
        if self._program is None:
            self._program = EmulatedProgram(self.target, library, None, "tuning candidate",
                                            self._backend.link_runner)
        else:
            self._program.set_library(library)
        try:
            (out,), samples_ms = self._program.run(candidate_inputs(req), 1, req["repeat"], req["number"],
                                                   min_repeat_ms=req["min_repeat_ms"], timeout_s=max(limit_s, 0.0))
        except subprocess.TimeoutExpired:
            return MeasureError.RUN_TIMEOUT, f"run took longer than {limit_s:.3g} s under emulation", [], None
        except (ArtifactError, InputError) as e:
            return MeasureError.RUNTIME_DEVICE, str(e), [], None
        if ref is not None and req["check"]:
            wrong = output_mismatch(out, ref)
            if wrong:
                return MeasureError.WRONG_ANSWER, wrong, [], None
        return MeasureError.NO_ERROR, "", [ms / 1e3 for ms in samples_ms], out if req["want_output"] else None


class Measurer:
    """Builds and runs candidates of tasks (see the module docstring). Use as a context manager.

    `build_fn(task, target, config, path) -> (MeasureError, msg, build_s)` replaces the build
    (tests inject faults through it; it must be a module-level function).

    The interface the tuner uses (tvmc.autotune.tune), which a cluster of builders and devices
    also serves (tvmc.autotune.cluster.ClusterMeasurer): measure, set_reference_from,
    set_reference, close; build and run below them; `emulated` (whether the times are an
    emulator's: never here)."""

    emulated = False

    def __init__(self, target, options: MeasureOptions = MeasureOptions(), build_fn=build_candidate):
        from tvmc.backends import backend_for
        from tvmc.errors import TuningError

        self._backend = backend_for(target)
        missing = self._backend.measure_missing(target)
        if missing:
            raise TuningError(missing)
        self.target, self.options, self.build_fn = target, options, build_fn
        self.tmp = tempfile.mkdtemp(prefix="tvmc-tune-")
        self._pool = None
        self._runner = Runner()
        self._refs = {}
        self._serial = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._kill_pool()
        self._runner.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- build pool
    def _new_pool(self):
        ctx = multiprocessing.get_context("fork")
        self._pool = cf.ProcessPoolExecutor(max_workers=max(1, self.options.parallel), mp_context=ctx,
                                            initializer=_build_worker_init, initargs=(self._runner.fds(), self.tmp))

    def _kill_pool(self):
        if self._pool is None:
            return
        workers = list((self._pool._processes or {}).values())
        for p in workers:  # SIGTERM first: a worker kills the tool it runs (tvmc.process) and exits
            with contextlib.suppress(Exception):
                p.terminate()
        for p in workers:
            with contextlib.suppress(Exception):
                p.join(2)
                p.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def build(self, task, configs) -> list:
        """Build every config of `configs` (dicts); returns [(MeasureError, msg, build_s, path)]."""
        results = [None] * len(configs)
        queue = list(range(len(configs)))
        pending = {}
        limit = self.options.build_timeout_s or self.options.timeout_s
        while queue or pending:
            if self._pool is None:
                self._new_pool()
            while queue and len(pending) < max(1, self.options.parallel):
                i = queue.pop(0)
                self._serial += 1
                path = os.path.join(self.tmp, f"cand_{self._serial}.so")
                try:
                    fut = self._pool.submit(self.build_fn, task, self.target, dict(configs[i]), path)
                except cf.process.BrokenProcessPool:
                    self._kill_pool()
                    queue.insert(0, i)
                    break
                pending[fut] = (i, path, time.perf_counter())
            if not pending:
                continue
            first = min(t0 for _, _, t0 in pending.values())
            done, _ = cf.wait(pending, timeout=max(0.0, first + limit - time.perf_counter()),
                              return_when=cf.FIRST_COMPLETED)
            broken = False
            for fut in done:
                i, path, t0 = pending.pop(fut)
                try:
                    err, msg, build_s = fut.result()
                except cf.process.BrokenProcessPool:
                    err, msg, build_s, broken = MeasureError.COMPILE_HOST, "the build worker died", 0.0, True
                except Exception as e:
                    err, msg, build_s = MeasureError.COMPILE_HOST, f"{type(e).__name__}: {e}", 0.0
                results[i] = (MeasureError(err), msg, build_s, path)
            now = time.perf_counter()
            late = [f for f, (_, _, t0) in pending.items() if now - t0 >= limit]
            if late or broken:
                for f in late:
                    i, path, t0 = pending.pop(f)
                    results[i] = (MeasureError.BUILD_TIMEOUT, f"build took longer than {limit:g} s", now - t0, path)
                for i, _, _ in pending.values():  # lost with the pool: build them again
                    queue.insert(0, i)
                pending.clear()
                self._kill_pool()
        return results

    # -- runner
    def run(self, task, path: str, limit_s: float, want_output=False):
        """Run one built candidate; returns (MeasureError, msg, costs_s, output or None)."""
        req = candidate_request(task, path, self.options, self._backend.name, want_output)
        return self._runner.run(req, self._refs.get(task.key), limit_s)

    def discard(self, path) -> None:
        """Forget a built candidate once it ran (its library is removed)."""
        _unlink(path)

    def set_reference(self, task, output):
        """The output every later candidate of `task` is compared with (the fallback config's)."""
        self._refs[task.key] = output

    def _run_limit(self, build_s: float) -> float:
        """Seconds a candidate may run: what its build left of timeout_s, or all of timeout_s
        when builds have their own build_timeout_s."""
        return self.options.timeout_s if self.options.build_timeout_s else self.options.timeout_s - build_s

    def set_reference_from(self, source, task) -> bool:
        """Build and run `source`'s fallback config once, unrecorded (e.g. the default
        implementation of `task`'s workload, or `task` itself when its fallback's record is
        resumed); its output becomes `task`'s reference. False when it did not build or run."""
        fallback = source.config_space(self.target).fallback_config()
        err, _, build_s, path = self.build(source, [fallback])[0]
        if err != MeasureError.NO_ERROR:
            return False
        err, _, _, output = self.run(source, path, self._run_limit(build_s), want_output=True)
        self.discard(path)
        if err != MeasureError.NO_ERROR:
            return False
        self.set_reference(task, output)
        return True

    def measure(self, task, configs, reference=False) -> list:
        """Build then run `configs` of `task`; returns one MeasureResult each. With `reference`,
        the first config's output becomes the task's reference (see set_reference)."""
        results = []
        for k, (err, msg, build_s, path) in enumerate(self.build(task, configs)):
            costs = []
            if err == MeasureError.NO_ERROR:
                want = reference and k == 0
                err, msg, costs, output = self.run(task, path, self._run_limit(build_s), want_output=want)
                if want and err == MeasureError.NO_ERROR:
                    self.set_reference(task, output)
            self.discard(path)
            results.append(MeasureResult(costs, err, msg[:500], build_s))
        return results


def _unlink(path) -> None:
    """Remove a candidate's library; one that was never written is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass
