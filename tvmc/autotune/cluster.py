"""Measurement of tuning candidates on a Ray cluster (tvmc.cluster; issue 32): the Measurer's
interface (tvmc.autotune.measure), served by builder nodes and a device.

Build: each candidate is a Ray task (one CPU) on a node with CPUs, outside the device nodes when
the cluster has any others; as many at a time as those nodes have CPUs. It runs the same build
function as local tuning (build_candidate) into a private folder and returns the library's
bytes, which Ray hands to the measurement without passing through the tuner. BUILD_QUEUE_DEPTH
builds per builder CPU are in flight, so a builder that ends one starts the next without waiting
for the tuner to hear of it and submit another (one in flight per CPU left the two builders of
bench/cluster_bench.py idle a third of the time); a build's timeout counts from when it is among
the oldest `slots` in flight (queued behind none). A build that passes its timeout is cancelled
(its worker killed); a builder that dies is retried once by Ray elsewhere (max_retries=1), then
recorded as COMPILE_HOST.

Measure: each candidate is a Ray task that requires the resource `tvmc-device:KEY` (one unit per
device node, so one measurement at a time there) and the node's CPU. On the device it hands the
candidate to a runner process (tvmc.autotune.measure.Runner, kept between tasks, started when
the device is checked) with the request local tuning makes (candidate_request): the same
inputs, warm-up, number, repeat, min_repeat_ms, run timeout and check against the fallback's
output (sent once to the object store). A batch's measurements are queued on the device at once
(it runs them one after the other, no round trip to the tuner between two): when the batch is
built, as locally, so builds never run beside a measurement on a host they share; when no
builder shares a host with the device, each as soon as its build ends, so the device measures
while the others build (overlap).

Emulation: a device started with `tvmc device-worker --emulate` (its label tvmc-measure is
"emulated") measures a CPU target of another architecture under its emulator: builds are
one-kernel graph libraries (build_candidate with emulated) that its EmulatedRunner times in the
C runner under qemu-user. Its times are the emulator's: every MeasureResult says so (emulated),
and so do the records and the summary. A device of another architecture without the opt-in is
refused for tuning.

Faults: before the first candidate, one task checks the device can run the target (the reason is
reported once: ClusterError). A device that dies during a measurement costs that candidate
(RUNTIME_DEVICE, recorded); it is measured again once, with those queued after it, on a node
with the key if one is there (or comes back within `device_wait_s`), else the measurer raises
MeasurementStopped and the tune ends with what it recorded (resumable).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time

from tvmc.autotune.measure import (EmulatedRunner, MeasureError, MeasurementStopped, MeasureOptions, Measurer,
                                   MeasureResult, Runner, build_candidate, candidate_request)
from tvmc.cluster import (LABEL_KEY, LABEL_MODE, device_nodes, device_resource, device_threads, ray_module,
                          unwrap_task_error)
from tvmc.errors import ClusterError

# seconds a measurement may take beyond its run timeout before the tuner gives up on the device:
# the object transfer, scheduling, and a fresh runner's start (the runner's own 120 s bound)
GRACE_S = 150.0
# builds in flight per builder CPU (the module docstring)
BUILD_QUEUE_DEPTH = 2
_DEVICE_RUNNER = None


def _build_on_node(build_fn, task, target, config: dict, emulated: bool = False):
    """On a builder node: build one candidate with `build_fn` (build_candidate; with `emulated`,
    in the form of a device that measures under the target's emulator) in a private folder;
    returns ((MeasureError, msg, build_s), library bytes or b"")."""
    folder = tempfile.mkdtemp(prefix="tvmc-build-")
    try:
        path = os.path.join(folder, "cand.so")
        err, msg, build_s = build_fn(task, target, config, path, **({"emulated": True} if emulated else {}))
        data = b""
        if err == MeasureError.NO_ERROR:
            with open(path, "rb") as f:
                data = f.read()
        return (int(err), msg, build_s), data
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _device_runner(target=None):
    """This device worker's runner (started once, kept between tasks): a Runner, or for `target`
    (a target measured under its emulator) an EmulatedRunner."""
    global _DEVICE_RUNNER
    want = ("emulated", target.name) if target is not None else ("native",)
    if _DEVICE_RUNNER is None or _DEVICE_RUNNER[0] != want:
        if _DEVICE_RUNNER is not None:
            _DEVICE_RUNNER[1].stop()
        _DEVICE_RUNNER = (want, EmulatedRunner(target) if target is not None else Runner())
    return _DEVICE_RUNNER[1]


def _measure_on_device(req: dict, library: bytes, ref, limit_s: float, emulated_target=None):
    """On the device node: run candidate `library` (bytes) for request `req` in this worker's
    runner (_device_runner; `emulated_target`: the target measured under its emulator, or None);
    returns Runner.run's tuple."""
    runner = _device_runner(emulated_target)
    fd, path = tempfile.mkstemp(prefix="tvmc-cand-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(library)
        with device_threads():  # the runner (re)started here uses the device's threads
            err, msg, costs, output = runner.run(dict(req, path=path), ref, limit_s)
        return int(err), msg, costs, output
    finally:
        os.unlink(path)


def _check_on_device(target, version: str):
    """On the device node: (None or why it cannot measure `target`, emulated, tvmc's version, host).
    A target of another architecture is measured under its emulator only on a node started with
    `tvmc device-worker --emulate` (its label LABEL_MODE is "emulated"). When it can measure, the
    worker's runner starts now (_device_runner), while the first candidates build."""
    import socket

    import ray

    from tvmc.backends import backend_for
    from tvmc.constants import __version__
    from tvmc.target import host_arch

    backend = backend_for(target)
    why, emulated = backend.device_missing(target)
    if why is None and emulated:
        labels = ray.get_runtime_context().get_node_labels() or {}
        if labels.get(LABEL_MODE) != "emulated":
            why = (f"this {host_arch()} host runs {target.arch} code only under emulation, and tuning measures "
                   f"device times (a device started with tvmc device-worker --emulate measures there anyway, its "
                   f"times marked emulated)")
    elif why is None:
        why = backend.measure_missing(target)
    if why is None and version != __version__:
        why = f"it runs tvmc {__version__}, this tuner tvmc {version}"
    if why is None and not emulated:
        with device_threads():
            _device_runner().start()
    return why, emulated, __version__, socket.gethostname()


def _warm(n: int):
    """A builder's worker imports tvmc's lowering and codegen once, before the first candidate."""
    import tvmc.autotune.measure  # noqa: F401
    import tvmc.ops.fused  # noqa: F401

    return n


class ClusterMeasurer(Measurer):
    """Builds candidates on the connected Ray cluster's builder nodes and measures them on device
    `device_key` (see the module docstring): the Measurer interface (measure, set_reference_from,
    set_reference, build, run, close; a context manager).

    device_wait_s: seconds to wait for a device with the key to be back after the last one left,
                   before MeasurementStopped
    overlap:       queue each candidate's measurement as soon as it is built, while the others
                   build (True), or once the whole batch is built (False); None: overlap when no
                   builder shares a host with a device of the key (node addresses)
    Raises ClusterError when no live node offers the key, or the device cannot measure the target
    (the reason, once)."""

    def __init__(self, target, options: MeasureOptions | None = None, device_key: str = "",
                 build_fn=build_candidate, device_wait_s: float = 60.0, overlap: bool | None = None):
        from tvmc.backends import backend_for
        from tvmc.constants import __version__

        self.ray = ray = ray_module()
        self._backend = backend_for(target)
        self.target, self.options, self.build_fn = target, options or MeasureOptions(), build_fn
        self.key, self.device_wait_s = device_key, float(device_wait_s)
        self._resource = device_resource(device_key)
        self._refs, self._ref_objects = {}, {}
        self.lost = 0       # candidates lost in flight with a device
        if not device_nodes(device_key):
            raise ClusterError(f"no device with key {device_key} in the cluster (tvmc tune --cluster ADDRESS "
                               f"--list-devices lists them)")
        builders = self._builder_cpus()
        self.slots = builders or int(ray.cluster_resources().get("CPU", 1)) or 1
        build_opts = {"num_cpus": 1, "max_retries": 1, "num_returns": 2, "name": "tvmc-build"}
        if builders:  # builds stay off the device nodes when other nodes have CPUs
            build_opts["label_selector"] = {LABEL_KEY: f"!in({','.join(self._device_keys())})"}
        self._build_task = ray.remote(_build_on_node).options(**build_opts)
        # the builders' workers start and import tvmc while the device is checked
        warm = ray.remote(_warm).options(**{k: v for k, v in build_opts.items() if k != "num_returns"})
        self._warming = [warm.remote(k) for k in range(self.slots)]
        check = ray.remote(_check_on_device).options(resources={self._resource: 1}, num_cpus=0, max_retries=1,
                                                     name=f"tvmc-check:{device_key}")
        try:
            why, self.emulated, _, self.device_host = ray.get(check.remote(target, __version__), timeout=GRACE_S)
        except Exception as e:
            self.close()
            raise unwrap_task_error(e, f"checking device {device_key}") from None
        if why:
            self.close()
            raise ClusterError(f"device {device_key} ({self.device_host}) cannot measure target {target.name}: {why}")
        self._measure_task = ray.remote(_measure_on_device).options(
            resources={self._resource: 1}, num_cpus=1, max_retries=0, name=f"tvmc-measure:{device_key}")
        self.overlap = not self._builds_share_a_device_host() if overlap is None else bool(overlap)

    def _builds_share_a_device_host(self) -> bool:
        """Whether a node that builds (CPUs, no device label; or the device itself when no other
        node has CPUs) is on the host of a device with the key (the same node address): then a
        build beside a measurement would slow the measured kernel down."""
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        devices = {n.get("NodeManagerAddress") for n in device_nodes(self.key)}
        builders = [n for n in nodes if (n.get("Resources") or {}).get("CPU", 0) > 0
                    and not (n.get("Labels") or {}).get(LABEL_KEY)]
        return not builders or any(n.get("NodeManagerAddress") in devices for n in builders)

    def _device_keys(self) -> list:
        keys = set()
        for node in self.ray.nodes():
            key = (node.get("Labels") or {}).get(LABEL_KEY)
            if node.get("Alive") and key:
                keys.add(key)
        return sorted(keys)

    def _builder_cpus(self) -> int:
        """CPUs of live nodes that are no device (no tvmc device label)."""
        return int(sum((n.get("Resources") or {}).get("CPU", 0) for n in self.ray.nodes()
                       if n.get("Alive") and not (n.get("Labels") or {}).get(LABEL_KEY)))

    def close(self):
        for ref in getattr(self, "_warming", []):
            self.ray.cancel(ref, force=True)
        self._warming = []

    # -- builds
    def build(self, task, configs, on_built=None) -> list:
        """Build every config of `configs` on the builders; returns [(MeasureError, msg, build_s,
        ObjectRef of the library or None)]. `on_built(i, result)` is called as each build ends
        (in the order they end)."""
        ray = self.ray
        results = [None] * len(configs)
        queue = list(range(len(configs)))
        pending = {}   # status ref -> [index, library ref, start of its timeout clock or None], in submit order
        limit = self.options.build_timeout_s or self.options.timeout_s

        def done(i, result):
            results[i] = result
            if on_built is not None:
                on_built(i, result)

        while queue or pending:
            while queue and len(pending) < self.slots * BUILD_QUEUE_DEPTH:
                i = queue.pop(0)
                status, library = self._build_task.remote(self.build_fn, task, self.target, dict(configs[i]),
                                                          self.emulated)
                pending[status] = [i, library, None]
            now = time.perf_counter()
            for entry in list(pending.values())[:self.slots]:   # queued behind none: their clocks run
                entry[2] = now if entry[2] is None else entry[2]
            first = min(t0 for _, _, t0 in pending.values() if t0 is not None)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, first + limit - now))
            for ref in ready:
                i, library, _ = pending.pop(ref)
                try:
                    err, msg, build_s = ray.get(ref)
                except Exception as e:  # the builder died twice (Ray retried it once elsewhere)
                    err, msg, build_s = MeasureError.COMPILE_HOST, f"the builder died: {type(e).__name__}", 0.0
                ok = err == MeasureError.NO_ERROR
                done(i, (MeasureError(err), msg, build_s, library if ok else None))
            now = time.perf_counter()
            for ref in [r for r, (_, _, t0) in pending.items() if t0 is not None and now - t0 >= limit]:
                i, _, t0 = pending.pop(ref)
                ray.cancel(ref, force=True)
                done(i, (MeasureError.BUILD_TIMEOUT, f"build took longer than {limit:g} s", now - t0, None))
        return results

    # -- measurements
    def set_reference(self, task, output):
        self._refs[task.key] = output
        self._ref_objects[task.key] = self.ray.put(output)

    def discard(self, path) -> None:
        """A built library is an object of the cluster's store: dropping the reference frees it."""

    def _wait_for_device(self) -> bool:
        """Whether a node with the key is (or comes back) within device_wait_s seconds."""
        deadline = time.monotonic() + self.device_wait_s
        while True:
            if device_nodes(self.key):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)

    def _submit(self, task, library, limit_s: float, want_output=False):
        """Queue the measurement of one built candidate (`library`: the ObjectRef build returned)
        on the device; returns its ObjectRef. The device runs one at a time, in the order queued."""
        req = candidate_request(task, "", self.options, self._backend.name, want_output)
        return self._measure_task.remote(req, library, self._ref_objects.get(task.key), limit_s,
                                         self.target if self.emulated else None)

    def _await(self, fut, limit_s: float):
        """Wait for a queued measurement, from now (the one before it ended): returns (Runner.run's
        tuple, None), or (None, how the device was lost). A device that has not answered
        `limit_s` + GRACE_S seconds from now is a RUN_TIMEOUT."""
        ray = self.ray
        deadline = time.monotonic() + max(limit_s, 0.0) + GRACE_S
        while True:
            ready, _ = ray.wait([fut], timeout=1.0)
            if ready:
                break
            # a task for a resource no live node has would wait for ever: the device left
            if not device_nodes(self.key):
                ray.cancel(fut, force=True)
                return None, f"device {self.key} left the cluster during the measurement"
            if time.monotonic() >= deadline:
                ray.cancel(fut, force=True)
                return (MeasureError.RUN_TIMEOUT, f"no answer from device {self.key} within "
                                                  f"{limit_s + GRACE_S:.3g} s", [], None), None
        try:
            err, msg, costs, output = ray.get(fut)
            return (MeasureError(err), msg, costs, output), None
        except ray.exceptions.RayTaskError as e:  # the device task itself raised
            return (MeasureError.RUNTIME_DEVICE, f"device {self.key}: {str(e.cause)[:300]}", [], None), None
        except ray.exceptions.RayError as e:      # the device (or its worker) died
            return None, f"device {self.key} was lost during the measurement ({type(e).__name__})"

    def _collect(self, task, queued: list, results: list, lost_before: set) -> None:
        """Collect the measurements `queued` ([(k, library, build_s, ObjectRef)], in the order
        queued) into results[k] (MeasureResult). When the device is lost, the candidate it was
        measuring (the first one not answered) is measured again once, with those queued after
        it, on a node with the key that is there or comes back within device_wait_s; else
        MeasurementStopped (the candidate lost as a RUNTIME_DEVICE result, those after it None).
        `lost_before`: the k already measured again once."""
        while queued:
            for pos, (k, library, build_s, fut) in enumerate(queued):
                outcome, lost = self._await(fut, self._run_limit(build_s))
                if lost is None:
                    err, msg, costs, _ = outcome
                    results[k] = MeasureResult(costs, err, msg[:500], build_s, emulated=self.emulated)
                    continue
                self.lost += 1
                rest = queued[pos + 1:]
                for _, _, _, later in rest:
                    self.ray.cancel(later, force=True)
                if k in lost_before or not self._wait_for_device():
                    results[k] = MeasureResult([], MeasureError.RUNTIME_DEVICE, lost, build_s, emulated=self.emulated)
                    raise MeasurementStopped(f"{lost}; no device with key {self.key} came back within "
                                             f"{self.device_wait_s:g} s", results)
                lost_before.add(k)
                queued = [(j, lib, b, self._submit(task, lib, self._run_limit(b)))
                          for j, lib, b, _ in [(k, library, build_s, None)] + rest]
                break
            else:
                queued = []

    def run(self, task, path, limit_s: float, want_output=False):
        """Measure one built candidate (`path`: the ObjectRef build returned) on the device;
        returns (MeasureError, msg, costs_s, output or None). Raises MeasurementStopped when the
        device left and no node with its key is back within device_wait_s."""
        lost_before = set()
        for _ in range(2):
            outcome, lost = self._await(self._submit(task, path, limit_s, want_output), limit_s)
            if lost is None:
                return outcome
            self.lost += 1
            if lost_before or not self._wait_for_device():
                break
            lost_before.add(0)
        raise MeasurementStopped(f"{lost}; no device with key {self.key} came back within {self.device_wait_s:g} s",
                                 [MeasureResult([], MeasureError.RUNTIME_DEVICE, lost, emulated=self.emulated)])

    def measure(self, task, configs, reference=False) -> list:
        """Build then measure `configs` of `task` (as Measurer.measure). The measurements are
        queued on the device as a whole: once the batch is built (its builds never run beside a
        measurement on a host they share), or, when the builders and the device are other
        hosts (overlap), each as soon as its build ends. With `reference`, the first config is
        measured first, alone: its output is the reference of the others. Raises
        MeasurementStopped with the results so far (the candidate lost with the device as an
        error, those never measured as None)."""
        results = [None] * len(configs)
        queued, lost_before = [], set()

        def built(k, result):
            err, msg, build_s, library = result
            if err != MeasureError.NO_ERROR:
                results[k] = MeasureResult([], err, msg[:500], build_s, emulated=self.emulated)
            elif not (reference and k == 0):
                queued.append((k, library, build_s, self._submit(task, library, self._run_limit(build_s))
                               if self.overlap and not reference else None))

        builds = self.build(task, configs, on_built=built)
        if reference and builds and builds[0][0] == MeasureError.NO_ERROR:
            _, _, build_s, library = builds[0]
            try:
                err, msg, costs, output = self.run(task, library, self._run_limit(build_s), want_output=True)
            except MeasurementStopped as e:
                results[0] = dataclasses.replace(e.results[0], build_s=build_s)
                raise MeasurementStopped(e.reason, results) from None
            if err == MeasureError.NO_ERROR:
                self.set_reference(task, output)
            results[0] = MeasureResult(costs, err, msg[:500], build_s, emulated=self.emulated)
        if not any(fut is not None for *_, fut in queued):  # the batch built: queue it in its order
            queued = [(k, lib, b, self._submit(task, lib, self._run_limit(b))) for k, lib, b, _ in sorted(queued)]
        self._collect(task, queued, results, lost_before)
        return results
