"""Tuning and running on a Ray cluster (issue 32): a head and a device worker (`tvmc device-worker`)
started as `ray start` processes on this machine, shared by the module; the CLI runs in
subprocesses, as a user's driver would."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.e2e.builders import mlp
from tests.e2e.ray_processes import free_port, start, stop
from tests.targets import require

ray = pytest.importorskip("ray", reason="the cluster tests need ray (pip install 'tvmc[cluster]')")

pytestmark = pytest.mark.slow  # each Ray process takes seconds to start: make test-all runs them
KEY = "dev"
# every process of the test cluster authenticates with the user's Ray token (~/.ray/auth_token);
# kernels run on one thread, locally and on the device: other jobs on this machine's cores would
# make two-thread timings too noisy to compare two tunes' rankings
ENV = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
MEASURE = ["--number", "10", "--repeat", "3", "--min-repeat-ms", "2"]


def tvmc(*args, check=True, timeout=300):
    res = subprocess.run([sys.executable, "-m", "tvmc.cli", *map(str, args)], capture_output=True, text=True,
                         env=ENV, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"tvmc {' '.join(map(str, args))} failed ({res.returncode}): {res.stderr}")
    return res


def _start(cmd, log: Path) -> subprocess.Popen:
    return start(cmd, log, ENV)


def _devices(address) -> list:
    res = tvmc("tune", "--cluster", address, "--list-devices", "--json")
    return json.loads(res.stdout)["devices"]


def _wait_for_device(address, key, timeout_s=60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(d["key"] == key for d in _devices(address)):
            return
        time.sleep(1.0)
    raise AssertionError(f"device {key} did not join {address}")


def _device_worker(address, key, log: Path, *args) -> subprocess.Popen:
    return _start([sys.executable, "-m", "tvmc.cli", "device-worker", "--address", address, "--key", key,
                   *(args or ("--target", "x86"))], log)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(head address, folder): a head with 1 CPU (the builder) and device worker KEY (1 CPU)."""
    d = tmp_path_factory.mktemp("cluster")
    port = free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    head = _start([ray_cli, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                   "--num-cpus", "1", "--include-dashboard", "false", "--disable-usage-stats", "--block"],
                  d / "head.log")
    address = f"127.0.0.1:{port}"
    worker = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        worker = _device_worker(address, KEY, d / "worker.log")
        _wait_for_device(address, KEY)
        yield address, d
    finally:
        if worker is not None:
            stop(worker)
        stop(head)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """An MLP whose first task (a 1 MFLOP dense) has 16 configs whose costs differ up to 4x."""
    d = tmp_path_factory.mktemp("model")
    path = d / "mlp.onnx"
    onnx.save(mlp(seed=3, batch=8, sizes=(256, 256, 16, 8)), path)
    return path


def _records(path) -> dict:
    """{config as JSON: its fastest round, s} of a records file's successful measurements (the
    minimum: other jobs on this machine slow some rounds down, never speed one up)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        if r["error"] == 0:
            out[json.dumps(r["config"], sort_keys=True)] = min(r["costs_s"])
    return out


def test_an_unreachable_cluster_is_one_line_naming_the_address(model, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    res = tvmc("tune", model, "--target", "x86", "-o", tmp_path / "r.json", "--cluster", address, "--device-key", KEY,
               check=False)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 10 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: cannot reach the Ray cluster at " + address) and "Traceback" not in res.stderr
    assert not (tmp_path / "r.json").exists() or (tmp_path / "r.json").read_text() == ""
    res = tvmc("run", tmp_path / "none.tar", "--cluster", "ray://127.0.0.1:1", "--device-key", KEY, check=False)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1


def test_list_devices_names_the_key_and_its_target(cluster):
    address, _ = cluster
    devices = _devices(address)
    assert [(d["key"], d["target"], d["measure"], d["cpus"]) for d in devices] == [(KEY, "x86", "native", 1)]
    text = tvmc("tune", "--cluster", address, "--list-devices").stdout
    assert KEY in text and "x86" in text


def test_a_tune_through_the_cluster_ranks_configs_as_local_tuning_does(cluster, model, tmp_path):
    """Grid search over all 16 configs of the dense task, locally and through the cluster: the same
    configs are measured, the best configs agree within noise, and every pair of configs that
    local tuning separates by more than 2x is ordered the same way by the cluster's records. Each
    config's cost is its fastest of 10 rounds: other jobs on the machine's two cores slow some
    rounds down, never one up."""
    address, _ = cluster
    common = ["--target", "x86", "--tasks", "0", "--trials", "16", "--tuner", "grid", "--number", "10", "--repeat",
              "10", "--min-repeat-ms", "1"]
    tvmc("tune", model, "-o", tmp_path / "local.json", *common)
    res = tvmc("tune", model, "-o", tmp_path / "cluster.json", *common, "--cluster", address, "--device-key", KEY)
    assert f"device {KEY}" in res.stdout and "speed-up" in res.stdout
    local, remote = _records(tmp_path / "local.json"), _records(tmp_path / "cluster.json")
    assert len(local) == 16 and set(remote) == set(local)
    best_local, best_remote = min(local, key=local.get), min(remote, key=remote.get)
    assert local[best_remote] <= 1.3 * local[best_local], (best_local, best_remote)
    for a in local:
        for b in local:
            if local[a] * 2 < local[b]:
                assert remote[a] < remote[b], (a, b, local[a], local[b], remote[a], remote[b])
    # resumable: the same command again measures nothing new
    again = tvmc("tune", model, "-o", tmp_path / "cluster.json", *common, "--cluster", address, "--device-key", KEY)
    assert len((tmp_path / "cluster.json").read_text().splitlines()) == 16, again.stdout


def test_run_on_the_cluster_gives_the_local_outputs(cluster, model, tmp_path):
    address, _ = cluster
    tvmc("compile", model, "--target", "x86", "-o", tmp_path / "m.tar")
    tvmc("run", tmp_path / "m.tar", "--outputs", tmp_path / "local.npz")
    res = tvmc("run", tmp_path / "m.tar", "--outputs", tmp_path / "remote.npz", "--cluster", address,
               "--device-key", KEY, "--repeat", "2", "--number", "3")
    assert f"device: {KEY}" in res.stdout and "execution time" in res.stdout and "outputs" in res.stdout
    local, remote = np.load(tmp_path / "local.npz"), np.load(tmp_path / "remote.npz")
    assert set(local) == set(remote) == {"y"}
    np.testing.assert_array_equal(local["y"], remote["y"])
    doc = json.loads(tvmc("run", tmp_path / "m.tar", "--cluster", address, "--device-key", KEY, "--json").stdout)
    assert doc["artifact"] == str(tmp_path / "m.tar") and doc["outputs"][0]["name"] == "y"


def test_a_key_no_device_offers_is_one_line(cluster, model, tmp_path):
    address, _ = cluster
    res = tvmc("tune", model, "--target", "x86", "-o", tmp_path / "r.json", "--cluster", address,
               "--device-key", "nosuch", check=False)
    assert res.returncode == 10 and res.stderr.strip() == \
        "error: no device with key nosuch in the cluster (tvmc tune --cluster ADDRESS --list-devices lists them)"


def test_a_device_that_cannot_run_the_target_is_refused_once(cluster, model, tmp_path):
    address, _ = cluster
    res = tvmc("device-worker", "--address", address, "--key", "gpu", "--target", "cuda", check=False)
    assert res.returncode == 10 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "cannot be a device for target cuda" in res.stderr
    # the x86 device asked to measure arm code: one line, before any candidate
    res = tvmc("tune", model, "--target", "arm", "-o", tmp_path / "r.json", "--cluster", address, "--device-key", KEY,
               "--tasks", "0", "--trials", "4", check=False)
    assert res.returncode == 10 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"device {KEY}" in res.stderr and "cannot measure target arm" in res.stderr
    assert not (tmp_path / "r.json").exists() or (tmp_path / "r.json").read_text() == ""


def _ray_start_child(proc: subprocess.Popen) -> int | None:
    """The pid of the `ray start` process that `tvmc device-worker` (proc) started."""
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        children = (task / "children").read_text().split()
        if children:
            return int(children[0])
    return None


def test_a_builder_killed_mid_tune_costs_the_run_nothing(cluster, model, tmp_path):
    """A second builder node (1 CPU) is killed (SIGKILL to its node's processes) once the tune has
    recorded its first measurements: builds in flight there are built again on the head (Ray's
    one retry), and the tune ends (exit 0) with all 16 configs recorded, once each."""
    address, _ = cluster
    builder = _start([str(Path(sys.executable).with_name("ray")), "start", "--address", address, "--num-cpus", "1",
                      "--disable-usage-stats", "--block"], tmp_path / "builder.log")
    try:
        deadline = time.monotonic() + 60
        while "Ray runtime started" not in (tmp_path / "builder.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        records = tmp_path / "r.json"
        tune = subprocess.Popen([sys.executable, "-m", "tvmc.cli", "tune", model, "--target", "x86", "-o", records,
                                 "--tasks", "0", "--trials", "16", "--tuner", "grid", *MEASURE,
                                 "--cluster", address, "--device-key", KEY],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and tune.poll() is None:
            if records.exists() and len(records.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        stop(builder, signal.SIGKILL)
        out, err = tune.communicate(timeout=300)
    finally:
        stop(builder, signal.SIGKILL)
    assert tune.returncode == 0, err
    assert "task  implementation" in out and f"records: {records}" in out
    configs = [json.dumps(json.loads(line)["config"], sort_keys=True) for line in records.read_text().splitlines()]
    assert len(configs) == len(set(configs)) == 16


def test_killing_the_device_mid_tune_leaves_usable_records_and_a_summary(cluster, model, tmp_path):
    """A second device (key doomed) is killed (SIGKILL to its node's processes) after some
    measurements: the tune stops with its summary and one error line (exit 9), the records
    file parses, and the same tune on the first device resumes from it."""
    address, d = cluster
    doomed = _device_worker(address, "doomed", tmp_path / "doomed.log")
    try:
        _wait_for_device(address, "doomed")
        records = tmp_path / "r.json"
        tune = subprocess.Popen([sys.executable, "-m", "tvmc.cli", "tune", model, "--target", "x86", "-o", records,
                                 "--tasks", "0", "--trials", "16", "--tuner", "grid", "--number", "200", "--repeat",
                                 "10", "--min-repeat-ms", "20", "--cluster", address,
                                 "--device-key", "doomed", "--device-wait", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and tune.poll() is None:
            if records.exists() and len(records.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        assert tune.poll() is None, tune.communicate()
        pid = _ray_start_child(doomed)
        os.killpg(pid, signal.SIGKILL)
        out, err = tune.communicate(timeout=180)
    finally:
        stop(doomed, signal.SIGKILL)
    assert tune.returncode == 9, err
    assert "task  implementation" in out and f"records: {records}" in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: tuning stopped in task 0") and "doomed" in last and str(records) in last
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert 3 <= len(lines) < 16 and all(r["task"] for r in lines)
    # resumed on the surviving device: the configs recorded are not measured again
    tvmc("tune", model, "--target", "x86", "-o", records, "--tasks", "0", "--trials", "16", "--tuner", "grid",
         *MEASURE, "--cluster", address, "--device-key", KEY)
    configs = [json.dumps(json.loads(line)["config"], sort_keys=True) for line in records.read_text().splitlines()]
    assert len(configs) == len(set(configs)) == 16


def test_an_emulated_arm_device_measures_arm_code_and_says_so(cluster, model, tmp_path):
    """A device started with --emulate --target arm on this x86-64 host (qemu-aarch64) is where an
    arm tune's measurements go (the x86 device refuses them, above): the tune ends, every record
    and the summary say the times are emulated, compile applies none of them, and tvmc run
    --cluster gives the outputs of a local run under emulation."""
    require("arm")
    address, _ = cluster
    worker = _device_worker(address, "armq", tmp_path / "armq.log", "--target", "arm", "--emulate")
    try:
        _wait_for_device(address, "armq")
        listed = {d["key"]: d for d in _devices(address)}
        assert (listed["armq"]["target"], listed["armq"]["measure"]) == ("arm", "emulated")
        records = tmp_path / "arm.json"
        res = tvmc("tune", model, "--target", "arm", "-o", records, "--tasks", "0", "--trials", "4", "--tuner", "grid",
                   *MEASURE, "--cluster", address, "--device-key", "armq")
        assert "measured under emulation" in res.stdout and "not the device's" in res.stdout
        lines = [json.loads(line) for line in records.read_text().splitlines()]
        assert len(lines) == 4 and all(r["error"] == 0 and r["measured"] == "emulated" for r in lines), lines
        assert {r["target"]["name"] for r in lines} == {"arm"}
        res = tvmc("compile", model, "--target", "arm", "-o", tmp_path / "arm.tar", "--tuning-records", records)
        assert "4 records measured under emulation not applied" in res.stdout
        tvmc("run", tmp_path / "arm.tar", "--outputs", tmp_path / "local.npz")
        res = tvmc("run", tmp_path / "arm.tar", "--outputs", tmp_path / "remote.npz", "--cluster", address,
                   "--device-key", "armq")
        assert "device: armq" in res.stdout and "under emulation" in res.stdout
        np.testing.assert_array_equal(np.load(tmp_path / "local.npz")["y"], np.load(tmp_path / "remote.npz")["y"])
    finally:
        stop(worker)


OVERLAP = """
import sys
from tvmc.api import list_tasks
from tvmc.autotune.cluster import ClusterMeasurer
from tvmc.autotune.measure import MeasureOptions
from tvmc.autotune.tune import Progress, TuneOptions, tune_tasks
from tvmc.cluster import cluster_session

address, key, model, records = sys.argv[1:]
tl = list_tasks(model, "x86")
options = TuneOptions(trials=16, tuner="grid", measure=MeasureOptions(number=2, repeat=2))
made = []
with cluster_session(address):
    (res,) = tune_tasks([tl.tasks[0]], tl.target, records, options, Progress(live=False),
                        measurer=lambda: made.append(ClusterMeasurer(tl.target, options.measure, key, overlap=True))
                        or made[-1])
print(made[0].overlap, made[0].emulated, res.trials, res.errors)
"""


def test_measurements_overlapping_builds_record_every_config(cluster, model, tmp_path):
    """With overlap (the default when no builder shares the device's host; forced here, where they
    share one) each candidate's measurement is queued as its build ends: the grid search records
    all 16 configs, each measured and checked against the fallback's output. A driver of its
    own, as tvmc tune's."""
    address, _ = cluster
    res = subprocess.run([sys.executable, "-c", OVERLAP, address, KEY, str(model), str(tmp_path / "r.json")],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-4:] == ["True", "False", "16", "{}"], res.stdout
    lines = [json.loads(line) for line in (tmp_path / "r.json").read_text().splitlines()]
    assert len({json.dumps(r["config"], sort_keys=True) for r in lines}) == 16
    assert all(r["error"] == 0 and len(r["costs_s"]) == 2 for r in lines)


BUILD_TIMEOUT = """
import sys, time
from tvmc.api import list_tasks
from tvmc.autotune.cluster import ClusterMeasurer
from tvmc.autotune.measure import MeasureOptions, build_candidate
from tvmc.cluster import cluster_session

address, key, model = sys.argv[1:]
tl = list_tasks(model, "x86")
space = tl.tasks[0].config_space(tl.target)
configs = [dict(space.get(i)) for i in range(4)]
hang = configs[1]


def hanging_build(task, target, config, path, **kw):
    if config == hang:
        time.sleep(600)
    return build_candidate(task, target, config, path, **kw)


with cluster_session(address):
    with ClusterMeasurer(tl.target, MeasureOptions(build_timeout_s=20.0), key, build_fn=hanging_build) as m:
        results = m.build(tl.tasks[0], configs)
print(m.slots, [int(r[0]) for r in results])
"""


def test_a_build_queued_behind_a_hanging_one_is_not_timed_while_it_waits(cluster, model, tmp_path):
    """Two builds per builder CPU are in flight (BUILD_QUEUE_DEPTH): with the one builder of the
    test cluster, the build queued behind a hanging one starts when that one is cancelled at its
    20 s timeout, and builds: the timeout counts from when a build is queued behind none."""
    from tvmc.autotune.measure import MeasureError

    address, _ = cluster
    res = subprocess.run([sys.executable, "-c", BUILD_TIMEOUT, address, KEY, str(model)],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    ok, late = int(MeasureError.NO_ERROR), int(MeasureError.BUILD_TIMEOUT)
    assert res.stdout.split("\n")[-2] == f"1 {[ok, late, ok, ok]}", res.stdout
