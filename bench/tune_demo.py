"""Tuning evidence (`make tune-demo`): what `tvmc tune` buys on this machine.

(a) ResNet-18 (bench/models.py) tuned by `tvmc tune` logic with the xgb tuner and a budget of
    `--trials` measurements (default 1000, about 15 minutes on 2 cores; the issue allows 30):
    latency of the tuned and the untuned (fallback configs) model against onnxruntime, all at
    `--threads` threads (default 2). Both runtimes live in this process and are timed in
    interleaved rounds (one run each per round, 3 warm-up runs first), medians reported.
(b) Three conv2d tasks of ResNet-18 (3x3 convolutions at 56x56, 28x28 and 7x7): best GFLOP/s
    against trial count for the xgb, ga and random tuners with the same budget each
    (`--curve-trials`, default 48), each repeated with `--seeds` seeds (default 2); every tuner
    measures for real and starts with the fallback config. Saved as bench/results/tune_curves.csv
    and .png. "xgb reaches random's final best" is counted at 97% of it: repeated timings of one
    kernel spread by a few percent here.
(c) Transfer: each of the three tasks tuned by xgb again, with the seed of each from-scratch
    run in (b), now starting from prior records of other tasks ((a)'s records of the other
    ResNet-18 tasks when (a) has run, and (b)'s records of the other two tasks): trials to reach
    the from-scratch run's final best (97%), for both runs. Data: tune_transfer.csv. With
    `--parts c` alone, the from-scratch xgb runs are made first (priors: (a)'s records).

Timings need an idle machine: the script waits while bench/bench.py or bench/layers.py run
or the load average is above 0.7 (before each part; between the runs of a part only for the
former). Writes bench/results/tune_demo_{a,b,c}.md and tune_demo.md (the three together).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import resnet18  # noqa: E402

from tvmc.autotune.measure import MeasureOptions  # noqa: E402
from tvmc.autotune.record import Record, load_records  # noqa: E402
from tvmc.autotune.task import extract_tasks  # noqa: E402
from tvmc.autotune.tune import Progress, TuneOptions, format_summary, tune_tasks  # noqa: E402
from tvmc.driver import CompileOptions, compile_model  # noqa: E402
from tvmc.target import resolve_target  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CURVE_TASKS = ("[1,4,56,56,16]x[4,4,3,3,16,16]", "[1,8,28,28,16]x[8,8,3,3,16,16]", "[1,32,7,7,16]x[32,32,3,3,16,16]")
TUNERS = ("xgb", "ga", "random")
REACH = 0.97


NO_WAIT = False


def wait_for_idle(max_load: float | None = 0.7):
    """Sleep while another benchmark runs or the 1-minute load average is above `max_load`
    (None: between runs of one part, where the load average is this script's own)."""
    while not NO_WAIT:
        busy = subprocess.run(["pgrep", "-f", "bench/bench.py|bench/layers.py"], capture_output=True).returncode == 0
        load = os.getloadavg()[0]
        if not busy and (max_load is None or load < max_load):
            return
        print(f"  waiting: {'a benchmark is running' if busy else f'load {load:.2f}'}", flush=True)
        time.sleep(60)


def measure_latency(model, libs: dict, threads: int, rounds: int) -> dict:
    """Median ms per run of each tvmc artifact in `libs` ({label: path}) and of onnxruntime."""
    import onnxruntime as ort

    from tvmc.runtime.executor import GraphExecutor

    GraphExecutor.set_num_threads(threads)
    inp = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    runners = {}
    for label, path in libs.items():
        ex = GraphExecutor(path)
        ex.set_input(ex.input_names[0], inp)
        runners[label] = ex.run
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    runners["onnxruntime"] = lambda: sess.run(None, {name: inp})
    times = {k: [] for k in runners}
    for _ in range(3):
        for fn in runners.values():
            fn()
    for _ in range(rounds):
        for k, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def part_a(model, target, trials: int, threads: int, rounds: int, tmp: str, measure: MeasureOptions) -> list:
    print(f"(a) ResNet-18: tune with xgb, {trials} trials", flush=True)
    wait_for_idle()
    tasks = extract_tasks(model, target)
    records = RESULTS / "resnet18_records.json"
    if records.exists():
        records.unlink()
    t0 = time.perf_counter()
    results = tune_tasks(tasks, target, str(records), TuneOptions(trials=trials, tuner="xgb", measure=measure))
    tune_s = time.perf_counter() - t0
    print(format_summary(results))
    libs = {}
    from tvmc.package import save_artifact

    for label, recs in (("untuned", None), ("tuned", str(records))):
        module = compile_model(model, target, CompileOptions(tuning_records=recs))
        path = os.path.join(tmp, f"{label}.tar")
        save_artifact(module, path)
        libs[f"tvmc {label}"] = path
        if recs:
            meta = module.metadata["tuning_records"]
            applied = f"{meta['tasks_from_records']}/{meta['tasks']} tasks from records"
    wait_for_idle()
    ms = measure_latency(model, libs, threads, rounds)
    lines = [f"## (a) ResNet-18, batch 1, {threads} threads",
             "",
             f"Tuned with the xgb tuner, {trials} trials over {len(tasks)} tasks in {tune_s / 60:.1f} min "
             f"({applied}). Median of {rounds} interleaved rounds:",
             "",
             "| runtime | latency ms |",
             "| --- | ---: |"]
    lines += [f"| {k} | {v:.2f} |" for k, v in ms.items()]
    lines += ["", "```", format_summary(results), "```", ""]
    print("\n".join(lines), flush=True)
    return lines


def first_reach(curve, level) -> int | None:
    return next((k + 1 for k, v in enumerate(curve) if v >= level), None)


def part_b(model, target, trials: int, seeds: int, measure: MeasureOptions, tmp: str) -> tuple:
    print(f"(b) three conv2d tasks, {trials} trials per tuner, {seeds} seeds", flush=True)
    chosen = curve_tasks(model, target)
    curves = {}
    record_files = {}
    wait_for_idle()
    for seed in range(seeds):
        for task in chosen:
            for tuner in TUNERS:
                wait_for_idle(None)
                path = os.path.join(tmp, f"{tuner}_{len(record_files)}.json")
                (res,) = tune_tasks([task], target, path, TuneOptions(trials=trials, tuner=tuner, measure=measure,
                                                                      seed=seed),
                                    Progress(live=False), budgets=[trials])
                curves[(task.describe(), tuner, seed)] = res.curve
                record_files[(task.describe(), tuner, seed)] = path
    write_curves(RESULTS / "tune_curves.csv", "tuner", curves)
    _plot(curves, trials, seeds)
    lines = [f"## (b) best GFLOP/s against trials, {trials} trials per tuner, seeds 0-{seeds - 1}", "",
             ("Best GFLOP/s: mean over the seeds. Reach: per seed, the trial at which xgb reached 97% of "
              "random's final best with the same seed."), "",
             "| task | space | xgb best | ga best | random best | xgb reach of random's final best |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for task in chosen:
        wl = task.describe()
        best = {t: statistics.mean(curves[(wl, t, k)][-1] for k in range(seeds)) / 1e9 for t in TUNERS}
        reach = [first_reach(curves[(wl, "xgb", k)], REACH * curves[(wl, "random", k)][-1]) for k in range(seeds)]
        lines.append(f"| {wl} | {len(task.config_space(target))} | {best['xgb']:.1f} | {best['ga']:.1f} | "
                     f"{best['random']:.1f} | {', '.join(str(r or 'not reached') for r in reach)} of {trials} |")
    lines += ["", "Curves (mean over seeds): bench/results/tune_curves.png, data: bench/results/tune_curves.csv.", ""]
    print("\n".join(lines), flush=True)
    return lines, record_files


def curve_tasks(model, target) -> list:
    """The three direct conv2d tasks of CURVE_TASKS."""
    tasks = {t.describe().split("->")[0]: t for t in extract_tasks(model, target) if t.impl == "conv2d_nchwc.x86"}
    return [tasks[k] for k in CURVE_TASKS]


def _plot(curves, trials, seeds):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(wl for wl, _, _ in curves))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4))
    for ax, wl in zip(np.atleast_1d(axes), names):
        for tuner in TUNERS:
            c = np.mean([curves[(wl, tuner, k)] for k in range(seeds)], axis=0) / 1e9
            ax.plot(np.arange(1, len(c) + 1), c, label=tuner)
        ax.set_title(wl, fontsize=8)
        ax.set_xlabel("trials")
        ax.set_ylabel(f"best GFLOP/s (mean of {seeds} seeds)")
        ax.set_xlim(1, trials)
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "tune_curves.png", dpi=110)


def part_c(model, target, record_files, trials: int, seeds: int, measure: MeasureOptions, tmp: str) -> list:
    """Each of the three tasks tuned again by xgb with the seed of each from-scratch run in (b),
    now with prior records of other tasks: (a)'s ResNet-18 records of every other task when (a)
    has run, plus (b)'s records of the other two tasks. Without (b) in this run
    (`record_files` None), the from-scratch xgb runs are made here first."""
    chosen = curve_tasks(model, target)
    if record_files is None:
        record_files = {}
        wait_for_idle()
        for seed in range(seeds):
            for task in chosen:
                wait_for_idle(None)
                path = os.path.join(tmp, f"scratch_{len(record_files)}.json")
                tune_tasks([task], target, path, TuneOptions(trials=trials, tuner="xgb", measure=measure, seed=seed),
                           Progress(live=False), budgets=[trials])
                record_files[(task.describe(), "xgb", seed)] = path
    print("(c) transfer", flush=True)
    a_records = RESULTS / "resnet18_records.json"
    rows = []
    curves = {}
    for task in chosen:
        prior = os.path.join(tmp, "prior.json")
        with open(prior, "w") as out:
            if a_records.exists():
                for line in a_records.read_text().splitlines():
                    if line.strip() and Record(json.loads(line)).key != task.key:
                        out.write(line + "\n")
            for (wl, _, _), path in record_files.items():
                if wl != task.describe():
                    out.write(Path(path).read_text())
        n_prior = sum(1 for r in load_records(prior) if r.impl == task.impl)
        for seed in range(seeds):
            wait_for_idle(None)
            path = os.path.join(tmp, f"transfer_{len(rows)}.json")
            (res,) = tune_tasks([task], target, path, TuneOptions(trials=trials, tuner="xgb", measure=measure,
                                                                  prior_records=prior, seed=seed),
                                Progress(live=False), budgets=[trials])
            scratch = record_curve(record_files[(task.describe(), "xgb", seed)])
            curves[(task.describe(), "scratch", seed)] = scratch
            curves[(task.describe(), "transfer", seed)] = res.curve
            level = REACH * scratch[-1]
            rows.append((task, seed, n_prior, scratch[-1], res.curve[-1], first_reach(scratch, level),
                         first_reach(res.curve, level)))
    write_curves(RESULTS / "tune_transfer.csv", "run", curves)
    lines = ["## (c) transfer: xgb from scratch vs with prior records of other tasks (same seed)", "",
             f"Same seed, {trials} trials each; reach = trials until 97% of the from-scratch run's final best.",
             "", "| task | seed | prior records | scratch best | transfer best | scratch reach | transfer reach |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for task, seed, n_prior, sb, tb, sr, tr in rows:
        lines.append(f"| {task.describe()} | {seed} | {n_prior} | {sb / 1e9:.1f} | {tb / 1e9:.1f} | {sr} | "
                     f"{tr or 'not reached'} |")
    total = [sum(r[5] for r in rows), sum(r[6] or trials for r in rows)]
    lines += ["", f"Trials to reach, summed over the {len(rows)} runs: scratch {total[0]}, transfer {total[1]}.",
              "", "Data: bench/results/tune_transfer.csv.", ""]
    print("\n".join(lines), flush=True)
    return lines


def write_curves(path, kind: str, curves: dict) -> None:
    """CSV of best-so-far curves {(task, tuner or run, seed): [FLOP/s per trial]}: one row per trial."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", kind, "seed", "trial", "best_gflops"])
        for (wl, label, seed), curve in curves.items():
            for k, v in enumerate(curve, 1):
                w.writerow([wl, label, seed, k, f"{v / 1e9:.3f}"])


def record_curve(path) -> list:
    """Best FLOP/s after each measurement of a one-task records file, in file order."""
    curve, best = [], 0.0
    for r in load_records(path):
        best = max(best, r.task().flops / r.mean_s if r.ok else 0.0)
        curve.append(best)
    return curve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="(a) ResNet-18 budget")
    ap.add_argument("--curve-trials", type=int, default=48, help="(b), (c) budget per tuner and task")
    ap.add_argument("--seeds", type=int, default=2, help="(b), (c) runs per tuner and task, seeds 0..N-1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30, help="(a) timing rounds")
    ap.add_argument("--parts", default="abc")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine (smoke tests)")
    args = ap.parse_args(argv)
    global NO_WAIT
    NO_WAIT = args.no_wait
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = resolve_target("x86")
    model = resnet18()
    measure = MeasureOptions(number=2, repeat=3, min_repeat_ms=20, timeout_s=20, parallel=2)
    stamp = f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)"

    def section(part, lines):  # each part its own file: parts can be rerun one at a time
        (RESULTS / f"tune_demo_{part}.md").write_text("\n".join([f"<!-- {stamp} -->"] + lines) + "\n")

    with tempfile.TemporaryDirectory(prefix="tvmc-tune-demo-") as tmp:
        if "a" in args.parts:
            section("a", part_a(model, target, args.trials, args.threads, args.rounds, tmp, measure))
        record_files = None
        if "b" in args.parts:
            blines, record_files = part_b(model, target, args.curve_trials, args.seeds, measure, tmp)
            section("b", blines)
        if "c" in args.parts:
            section("c", part_c(model, target, record_files, args.curve_trials, args.seeds, measure, tmp))
    parts = [(RESULTS / f"tune_demo_{p}.md").read_text() for p in "abc" if (RESULTS / f"tune_demo_{p}.md").exists()]
    (RESULTS / "tune_demo.md").write_text("# tvmc tune evidence (make tune-demo)\n\n" + "\n".join(parts))
    print(f"wrote {RESULTS / 'tune_demo.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
