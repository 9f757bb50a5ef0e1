"""Tuning through a Ray cluster against tuning on this machine (issue 32), not a test.

1. The same tune (an MLP's 1 MFLOP dense task, grid search over its 16 configs, then the same on
   a conv2d task) locally and through a local two-process cluster: a head with this machine's
   CPUs as builders and a `tvmc device-worker` process: wall time ratio (the issue wants <= 1.15x)
   and whether the best configs agree.
2. Builds per second of 32 conv2d candidates with one builder process (the head, 1 CPU) and with
   two (a second `ray start` node with 1 CPU): the ratio (the issue wants >= 1.6x on a machine with
   two free cores).

Usage: python bench/cluster_bench.py [--out bench/results/cluster_bench.md]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# this driver and every Ray process here authenticate with the user's token (~/.ray/auth_token);
# set before Ray is imported, which reads it once
os.environ.setdefault("RAY_AUTH_MODE", "token")

from tests.e2e.builders import mlp, resnet_style_cnn  # noqa: E402

ENV = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
MEASURE = dict(number=10, repeat=3, min_repeat_ms=2.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, log) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=ENV, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _wait(pred, what, timeout_s=90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def _best(result) -> dict:
    return result.results[0].best_config


def _tune(path, task, records, **cluster):
    from tvmc.api import tune

    t0 = time.perf_counter()
    res = tune(str(path), "x86", str(records), tasks=[task], trials=16, tuner="grid", **MEASURE, **cluster)
    return time.perf_counter() - t0, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = ap.parse_args()
    import ray

    from tvmc.api import list_tasks
    from tvmc.autotune.cluster import ClusterMeasurer
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.cluster import connect, disconnect

    work = Path(tempfile.mkdtemp(prefix="tvmc-cluster-bench-"))
    models = {"mlp": work / "mlp.onnx", "cnn": work / "cnn.onnx"}
    onnx.save(mlp(seed=3, batch=8, sizes=(256, 256, 16, 8)), models["mlp"])
    onnx.save(resnet_style_cnn(size=32), models["cnn"])
    cases = [("mlp", 0), ("cnn", 2)]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    cpus = os.cpu_count() or 1
    rows = []
    local = {}
    for name, task in cases:  # local first, before any Ray process runs on this machine
        local[name] = _tune(models[name], task, work / f"{name}-local.json")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs = [_start([ray_cli, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--num-cpus",
                     str(cpus), "--include-dashboard", "false", "--disable-usage-stats", "--block"], work / "head.log")]
    try:
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "the head")
        procs.append(_start([sys.executable, "-m", "tvmc.cli", "device-worker", "--address", address, "--key", "bench",
                             "--target", "x86"], work / "device.log"))
        connect(address)
        _wait(lambda: any("tvmc-device:bench" in (n.get("Resources") or {}) for n in ray.nodes() if n["Alive"]),
              "the device")
        for name, task in cases:
            cluster_s, res = _tune(models[name], task, work / f"{name}-cluster.json", cluster=address,
                                   device_key="bench")
            local_s, local_res = local[name]
            rows.append((f"tune {name} task {task} (16 configs, grid)", f"{local_s:.2f} s local",
                         f"{cluster_s:.2f} s cluster", f"{cluster_s / local_s:.2f}x",
                         "same best" if _best(res) == _best(local_res) else
                         f"best {_best(local_res)} vs {_best(res)}"))
        disconnect()
        # builds per second: the head alone (1 CPU) against the head plus a second builder node
        _stop(procs.pop(0))
        for p in procs:
            _stop(p)
        procs.clear()
        port = _free_port()
        address = f"127.0.0.1:{port}"
        procs.append(_start([ray_cli, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                             "--num-cpus", "1", "--include-dashboard", "false", "--disable-usage-stats", "--block"],
                            work / "head1.log"))
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "the head")
        procs.append(_start([sys.executable, "-m", "tvmc.cli", "device-worker", "--address", address, "--key", "bench",
                             "--target", "x86"], work / "device1.log"))
        connect(address)
        _wait(lambda: any("tvmc-device:bench" in (n.get("Resources") or {}) for n in ray.nodes() if n["Alive"]),
              "the device")
        tl = list_tasks(str(models["cnn"]), "x86")
        build_task = tl.tasks[2]
        space = build_task.config_space(tl.target)
        configs = [dict(space.get(i)) for i in range(min(32, len(space)))]
        rates = []
        for builders in (1, 2):
            if builders == 2:
                procs.append(_start([ray_cli, "start", "--address", address, "--num-cpus", "1",
                                     "--disable-usage-stats", "--block"], work / "builder2.log"))
                _wait(lambda: sum(1 for n in ray.nodes() if n["Alive"]) >= 3, "the second builder")
            with ClusterMeasurer(tl.target, MeasureOptions(**MEASURE), "bench") as m:
                m.build(build_task, configs[:builders * 2])   # the builders' workers start and import tvmc
                t0 = time.perf_counter()
                out = m.build(build_task, configs)
                seconds = time.perf_counter() - t0
            ok = sum(1 for r in out if r[0] == 0)
            rates.append(len(configs) / seconds)
            rows.append((f"builds, {builders} builder process{'es' * (builders > 1)}", f"{len(configs)} candidates",
                         f"{seconds:.2f} s", f"{rates[-1]:.2f} builds/s", f"{ok} built"))
        rows.append(("builds/s, two builders over one", "", "", f"{rates[1] / rates[0]:.2f}x", ""))
        disconnect()
    finally:
        for p in procs:
            _stop(p)
    lines = [f"cluster bench on {socket.gethostname()} ({cpus} CPUs)", "", "| case | | | ratio / rate | |",
             "| --- | --- | --- | --- | --- |"] + ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps({"work": str(work)}))


if __name__ == "__main__":
    main()
