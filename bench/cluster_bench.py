"""Tuning through a Ray cluster against tuning on this machine (issue 32), not a test.

1. The same `tvmc tune` command (grid search, so both measure the same configs) run as a user
   runs it, a fresh process each time, locally and with `--cluster ADDRESS --device-key bench`
   through a local two-process cluster: a head whose CPUs build (this machine's count) and a
   `tvmc device-worker` process that measures. Two tunes: a small one (an MLP's dense task, its
   16 configs: a few seconds, where Ray's start-up per tune shows) and one of tvmc tune's default
   budget (three conv2d tasks of a small CNN, 200 trials). The runs
   alternate local / cluster `--rounds` times; the table gives the median wall times, their ratio
   (the issue wants <= 1.15x), whether the best configs agree, and how far the cluster's best of
   each task is from the local best by the local records (1.00x: the same config). Kernels run
   on --threads threads (OMP_NUM_THREADS, local and on the device; default 1).
2. Builds per second of 40 conv2d candidates with one builder process (the head, 1 CPU) and with
   two (a second `ray start` node with 1 CPU), the device worker apart: the ratio (the issue
   wants >= 1.6x on a machine with two free cores).

The machine's load (`uptime`'s 1-minute average) is printed beside each number: other jobs on
the cores slow tuning and builds down. Every Ray process is stopped with SIGTERM to its `ray
start` alone, the device worker and builders before the head (a node signalled after its head's
GCS is gone waits 30 s to drain), and a watchdog ends the bench after --limit seconds.

Usage: python bench/cluster_bench.py [--rounds 2] [--builds-only] [--out bench/results/cluster.md]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import socket
import statistics
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
from tests.e2e.ray_processes import free_port, start, stop  # noqa: E402

ENV = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")  # OMP_NUM_THREADS: main()
MEASURE = ["--number", "10", "--repeat", "3", "--min-repeat-ms", "2"]
RAY = str(Path(sys.executable).with_name("ray"))


def load() -> float:
    """The 1-minute load average (uptime's first number)."""
    return os.getloadavg()[0]


def cpu_seconds() -> dict:
    """{pid: (process name, CPU seconds so far)} of the processes here (/proc/PID/stat's comm;
    utime, stime and the cutime, cstime of its waited-for children: a builder's linker runs
    count as the builder's): where the cores went during a phase."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        out[int(pid)] = (name.split("-")[0] if name.startswith("kworker") else name,
                         sum(int(v) for v in rest[11:15]) / tick)
    return out


def cpu_use(before: dict, after: dict, seconds: float) -> str:
    """The process names that used the most CPU between two cpu_seconds() snapshots (a process
    started between them counts whole), in cores (CPU seconds per wall second), largest first."""
    used = {}
    for pid, (name, cpu) in after.items():
        used[name] = used.get(name, 0.0) + cpu - before.get(pid, (name, 0.0))[1]
    top = sorted(((v, k) for k, v in used.items()), reverse=True)
    return ", ".join(f"{k} {v / seconds:.2f}" for v, k in top[:5] if v > 0.01 * seconds)


def _start(cmd, log) -> subprocess.Popen:
    return start(cmd, log, ENV)


def _wait(pred, what, timeout_s=90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def _port_open(port) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Cluster:
    """A head (`cpus` CPUs) and a `tvmc device-worker --key bench` process on this machine;
    `add_builder()` adds a `ray start` node with 1 CPU. stop() stops them, the head last."""

    def __init__(self, work: Path, cpus: int, name: str):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.work, self.name = work, name
        self.procs = [_start([RAY, "start", "--head", "--port", str(self.port), "--node-ip-address", "127.0.0.1",
                              "--num-cpus", str(cpus), "--include-dashboard", "false", "--disable-usage-stats",
                              "--block"], work / f"{name}-head.log")]
        _wait(lambda: _port_open(self.port), "the head")
        self.procs.append(_start([sys.executable, "-m", "tvmc.cli", "device-worker", "--address", self.address,
                                  "--key", "bench", "--target", "x86"], work / f"{name}-device.log"))

    def wait_for_device(self, nodes) -> None:
        _wait(lambda: any("tvmc-device:bench" in (n.get("Resources") or {}) for n in nodes() if n["Alive"]),
              "the device")

    def add_builder(self) -> None:
        self.procs.append(_start([RAY, "start", "--address", self.address, "--num-cpus", "1", "--disable-usage-stats",
                                  "--block"], self.work / f"{self.name}-builder2.log"))

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop(p)
        self.procs.clear()


def _costs(records) -> dict:
    """{(task name, workload, config): fastest round, s} of a records file's successful measurements."""
    out = {}
    for line in Path(records).read_text().splitlines():
        r = json.loads(line)
        if r["error"] == 0:
            key = (r["task"]["name"], json.dumps(r["task"]["workload"]), json.dumps(r["config"], sort_keys=True))
            out[key] = min(r["costs_s"])
    return out


def best_quality(local_records, cluster_records) -> float:
    """The worst, over the tasks, of (the cluster's best config timed by the local tune) / (the
    local tune's best): 1.00 when the cluster found each task's local best, 1.05 when one of its
    bests is 5% slower by the local records (both tunes measured the same configs: grid)."""
    local, remote = _costs(local_records), _costs(cluster_records)
    worst = 1.0
    for task in {k[:2] for k in local}:
        mine = {k: v for k, v in local.items() if k[:2] == task}
        theirs = {k: v for k, v in remote.items() if k[:2] == task}
        if theirs:
            worst = max(worst, mine.get(min(theirs, key=theirs.get), float("inf")) / min(mine.values()))
    return worst


def tvmc_tune(model, records, args, cluster=None) -> tuple:
    """(wall seconds, {task index: best config}) of one `tvmc tune ... --json` process."""
    cmd = [sys.executable, "-m", "tvmc.cli", "tune", str(model), "--target", "x86", "-o", str(records), "--tuner",
           "grid", *MEASURE, *args, "--json"]
    if cluster:
        cmd += ["--cluster", cluster, "--device-key", "bench"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
    doc = json.loads(res.stdout)
    return seconds, {t["index"]: t["best_config"] for t in doc["tasks"]}


def tune_phase(work: Path, rounds: int, rows: list) -> None:
    models = {"mlp": work / "mlp.onnx", "cnn": work / "cnn.onnx"}
    onnx.save(mlp(seed=3, batch=8, sizes=(256, 256, 16, 8)), models["mlp"])
    onnx.save(resnet_style_cnn(size=32), models["cnn"])
    cases = [("mlp dense task 0, its 16 configs", "mlp", ["--tasks", "0", "--trials", "16"]),
             ("cnn conv2d tasks 0,3,5, 200 trials (tvmc tune's default budget)", "cnn", ["--tasks", "0,3,5"])]
    cluster = Cluster(work, os.cpu_count() or 1, "tune")
    try:
        import ray

        from tvmc.cluster import cluster_session

        with cluster_session(cluster.address):
            cluster.wait_for_device(ray.nodes)
        for title, name, args in cases:
            walls = {"local": [], "cluster": []}
            bests = {"local": [], "cluster": []}
            loads = [load()]
            for k in range(rounds):
                for how in ("local", "cluster"):
                    seconds, best = tvmc_tune(models[name], work / f"{name}-{how}-{k}.json", args,
                                              cluster.address if how == "cluster" else None)
                    walls[how].append(seconds)
                    bests[how].append(best)
                    loads.append(load())
                    print(f"  {title}: {how} {seconds:.2f} s (load {loads[-1]:.2f})", file=sys.stderr, flush=True)
            local, remote = statistics.median(walls["local"]), statistics.median(walls["cluster"])
            same = sum(b == bests["local"][k] for k, b in enumerate(bests["cluster"]))
            quality = max(best_quality(work / f"{name}-local-{k}.json", work / f"{name}-cluster-{k}.json")
                          for k in range(rounds))
            # the baseline: how far two local tunes of the same configs are from each other
            pairs = [(k, (k + 1) % rounds) for k in range(rounds)] if rounds > 1 else []
            alike = sum(bests["local"][a] == bests["local"][b] for a, b in pairs)
            apart = max((best_quality(work / f"{name}-local-{a}.json", work / f"{name}-local-{b}.json")
                         for a, b in pairs), default=1.0)
            rows.append((f"tune {title} (grid)", f"{local:.2f} s local", f"{remote:.2f} s cluster",
                         f"{remote / local:.2f}x", f"same best configs in {same}/{rounds} rounds; the cluster's "
                         f"bests within {quality:.2f}x of the local bests (two local tunes: the same in "
                         f"{alike}/{len(pairs)} pairs, within {apart:.2f}x)", f"{min(loads):.2f}-{max(loads):.2f}"))
    finally:
        cluster.stop()


def build_phase(work: Path, rows: list) -> None:
    import ray

    from tvmc.api import list_tasks
    from tvmc.autotune.cluster import ClusterMeasurer
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.cluster import cluster_session

    tl = list_tasks(str(work / "cnn.onnx"), "x86")
    build_task = tl.tasks[0]
    space = build_task.config_space(tl.target)
    configs = [dict(space.get(i)) for i in range(40)]
    cluster = Cluster(work, 1, "builds")
    rates = []
    try:
        with cluster_session(cluster.address):
            cluster.wait_for_device(ray.nodes)
            for builders in (1, 2):
                if builders == 2:
                    cluster.add_builder()
                    _wait(lambda: sum(1 for n in ray.nodes() if n["Alive"]) >= 3, "the second builder")
                with ClusterMeasurer(tl.target, MeasureOptions(), "bench") as m:
                    assert m.slots == builders, m.slots
                    m.build(build_task, configs[:builders * 2])   # the builders' workers start and import tvmc
                    before, cpu = load(), cpu_seconds()
                    t0 = time.perf_counter()
                    out = m.build(build_task, configs)
                    seconds = time.perf_counter() - t0
                    cores = cpu_use(cpu, cpu_seconds(), seconds)
                ok = sum(1 for r in out if r[0] == 0)
                rates.append(len(configs) / seconds)
                inside = statistics.mean(r[2] for r in out) * 1e3
                rows.append((f"builds, {builders} builder process{'es' * (builders > 1)}",
                             f"{len(configs)} candidates", f"{seconds:.2f} s", f"{rates[-1]:.2f} builds/s",
                             f"{ok} built, {inside:.0f} ms a build in the builder; cores used: {cores}",
                             f"{before:.2f}-{load():.2f}"))
                print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        rows.append(("builds/s, two builders over one", "", "", f"{rates[1] / rates[0]:.2f}x", "", ""))
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="local / cluster runs of each tune (default 2)")
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    ap.add_argument("--limit", type=float, default=1800, help="seconds before the watchdog ends the bench")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS of the kernels, local and on the device (default 1: two-thread kernels "
                         "on cores other jobs share are timed mostly by those jobs)")
    ap.add_argument("--builds-only", action="store_true", help="only part 2 (builds per second)")
    args = ap.parse_args()
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    faulthandler.dump_traceback_later(args.limit, exit=True)  # a stuck bench prints where, then ends
    work = Path(tempfile.mkdtemp(prefix="tvmc-cluster-bench-"))
    cpus = os.cpu_count() or 1
    rows = []
    if args.builds_only:
        onnx.save(resnet_style_cnn(size=32), work / "cnn.onnx")
    else:
        tune_phase(work, args.rounds, rows)
    build_phase(work, rows)
    lines = [f"cluster bench on {socket.gethostname()} ({cpus} CPUs), {time.strftime('%Y-%m-%d %H:%M')}, kernels on "
             f"{args.threads} thread{'s' * (args.threads > 1)}", "",
             "| case | | | ratio / rate | | load (1 min) |", "| --- | --- | --- | --- | --- | --- |"] + \
        ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps({"work": str(work)}))


if __name__ == "__main__":
    main()
