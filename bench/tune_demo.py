"""Tuning evidence (`make tune-demo`): what `tvmc tune` buys on this machine.

(a) ResNet-18 (bench/models.py) tuned by `tvmc tune` logic with the xgb tuner and a budget of
    `--trials` measurements (default 1000, about 15 minutes on 2 cores; the issue allows 30):
    latency of the tuned and the untuned (fallback configs) model against onnxruntime, all at
    `--threads` threads (default 2). Both runtimes live in this process and are timed in
    interleaved rounds (one run each per round, 3 warm-up runs first), medians reported.
(b) Three conv2d tasks of ResNet-18 (3x3 convolutions at 56x56, 28x28 and 7x7): best GFLOP/s
    against trial count for the xgb, ga and random tuners with the same budget each
    (`--curve-trials`, default 48), each repeated with `--seeds` seeds (default 3). The tuners of
    one (task, seed) race side by side on one measurer (`race`): the fallback config is measured
    once and is every tuner's trial 1, each round gives every tuner one batch, and a config two
    tuners propose is measured once. Separate runs minutes apart differed by up to 12% on the
    same config here; in a race, drift hits every tuner alike. Saved as
    bench/results/tune_curves.csv and .png. "xgb reaches random's final best" is counted at 97%
    of it: repeated timings of one kernel spread by a few percent here.
(c) Transfer: in the same race, a fourth tuner, xgb with the same seed, starts from (a)'s
    ResNet-18 records of the other tasks (`tvmc tune --tuning-records` does the same): trials
    until it, and xgb from scratch, reach the from-scratch run's final best (97%). Data:
    tune_transfer.csv. Needs (a)'s records (bench/results/resnet18_records.json).

Timings need an idle machine: the script waits while bench/bench.py or bench/layers.py run
or the load average is above 0.7 (before each part; between the runs of a part only for the
former). Writes bench/results/tune_demo_{a,b,c}.md and tune_demo.md (the three together), or into
`--results`; `--tasks` races a subset of the three tasks (e.g. `--tasks 0 --seeds 6`: the 56x56 task
with more seeds). bench/tune_replay.py replays (b) for many seeds on a fully measured space.
"""

from __future__ import annotations

import argparse
import csv
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

from tvmc.autotune.features import config_features  # noqa: E402
from tvmc.autotune.measure import MeasureOptions, Measurer  # noqa: E402
from tvmc.autotune.record import config_key, load_records  # noqa: E402
from tvmc.driver import extract_tasks  # noqa: E402
from tvmc.autotune.tune import TuneOptions, add_transfer, format_summary, measured_flops, tune_tasks  # noqa: E402
from tvmc.autotune.tuner import make_tuner  # noqa: E402
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

    from tvmc.runtime.cpu import GraphExecutor

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
            applied = f"{meta['workloads_from_records']}/{meta['workloads']} kernel workloads from records"
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


RACE_BATCH = 8
# the races time each config once for several tuners: more and longer rounds than (a) for less noise
RACE_MEASURE = MeasureOptions(number=2, repeat=5, min_repeat_ms=30, timeout_s=20, parallel=2)


def race(task, target, tuners: dict, trials: int, measure: MeasureOptions) -> dict:
    """Run `tuners` ({label: Tuner} of `task`'s config space) side by side for `trials` trials each
    and return their best-so-far curves ({label: [FLOP/s after each trial]}).

    One Measurer serves them all: the fallback config is measured once (the results check's
    reference and every tuner's trial 1), then each round gives every tuner one batch of
    RACE_BATCH proposals; a config two tuners propose is measured once and both get the same
    FLOP/s (a trial for each). Timing drift on this machine (a few percent over minutes) thus hits
    every tuner alike, which separate runs cannot promise."""
    space = task.config_space(target)
    fb_index = space.index_of(space.fallback_config())
    with Measurer(target, measure) as measurer:

        def measure_new(indices):
            outs = measurer.measure(task, [space.get(i) for i in indices], reference=fb_index in indices)
            return [measured_flops(task, r) for r in outs]

        return run_race(measure_new, fb_index, tuners, trials)


def run_race(measure_new, fb_index: int, tuners: dict, trials: int) -> dict:
    """The rounds of `race` on any source of throughputs: `measure_new(distinct config numbers
    not measured yet) -> FLOP/s each` (a Measurer in `race`, a table of measured configs in
    tune_replay.py). Each config is measured once; tuners that propose it again share the value."""
    known: dict = {}

    def flops_of(indices):
        new = [i for i in dict.fromkeys(indices) if i not in known]
        if new:
            known.update(zip(new, measure_new(new)))
        return [known[i] for i in indices]

    (fb,) = flops_of([fb_index])
    curves = {label: [fb] for label in tuners}
    for tuner in tuners.values():
        tuner.update([fb_index], [fb])
    live = dict(tuners)
    while live:
        for label, tuner in list(live.items()):
            left = trials - len(curves[label])
            batch = tuner.next_batch(min(RACE_BATCH, left)) if left > 0 and tuner.has_next() else []
            if not batch:
                del live[label]
                continue
            flops = flops_of(batch)
            tuner.update(batch, flops)
            for f in flops:
                curves[label].append(max(curves[label][-1], f))
    return curves


def cached_featurize(task, target):
    """config -> config_features(task, target, config), each config featurized once (the
    tuners of a race, and every seed, share it)."""
    feats: dict = {}

    def featurize(cfg):
        key = config_key(cfg)
        if key not in feats:
            feats[key] = config_features(task, target, cfg)
        return feats[key]

    return featurize


def part_bc(chosen, target, parts: str, trials: int, seeds: int, measure: MeasureOptions) -> tuple:
    """The races of (b) (xgb, ga, random) and (c) (xgb from scratch against xgb with transfer from
    (a)'s records of the other ResNet-18 tasks) for each of the three tasks and seeds, as one race
    per (task, seed) when both parts run, for the tasks `chosen` (curve_tasks). Returns
    ({(task, label, seed): curve}, {task: prior records used by the transfer run})."""
    labels = (list(TUNERS) if "b" in parts else ["xgb"]) + (["transfer"] if "c" in parts else [])
    priors = []
    if "c" in parts:
        a_records = RESULTS / "resnet18_records.json"
        if not a_records.exists():
            raise SystemExit(f"(c) needs (a)'s records {a_records}: run part a first (--parts a)")
        priors = load_records(a_records)
    curves, n_prior = {}, {}
    wait_for_idle()
    for task in chosen:
        space = task.config_space(target)
        featurize = cached_featurize(task, target)
        prior_groups = None
        for seed in range(seeds):
            tuners = {label: make_tuner("xgb" if label == "transfer" else label, space, featurize, seed)
                      for label in labels}
            if "transfer" in tuners:
                if prior_groups is None:
                    n_prior[task.describe()] = add_transfer(tuners["transfer"], task, target, priors)
                    prior_groups = tuners["transfer"].prior
                tuners["transfer"].prior = list(prior_groups)
            wait_for_idle(None)
            t0 = time.perf_counter()
            for label, curve in race(task, target, tuners, trials, measure).items():
                curves[(task.describe(), label, seed)] = curve
            print(f"  {task.describe()} seed {seed}: " + ", ".join(
                f"{lb} {curves[(task.describe(), lb, seed)][-1] / 1e9:.1f}" for lb in labels)
                + f" GFLOP/s ({time.perf_counter() - t0:.0f} s)", flush=True)
    return curves, n_prior


def report_b(chosen, target, curves: dict, trials: int, seeds: int) -> list:
    """(b)'s table, tune_curves.csv and tune_curves.png from the race curves of the tasks `chosen`."""
    b_curves = {k: v for k, v in curves.items() if k[1] in TUNERS}
    write_curves(RESULTS / "tune_curves.csv", "tuner", b_curves)
    _plot(b_curves, trials, seeds)
    lines = [f"## (b) best GFLOP/s against trials, {trials} trials per tuner, seeds 0-{seeds - 1}", "",
             ("The three tuners of one seed race side by side on one measurer (one batch of "
              f"{RACE_BATCH} each per round, the fallback measured once as everyone's trial 1, a config "
              "proposed twice measured once), so timing drift hits them alike. Best GFLOP/s: mean over "
              "the seeds. Reach: per seed, the trial at which xgb reached 97% of random's final best."), "",
             "| task | space | xgb best | ga best | random best | xgb reach of random's final best |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    reached = 0
    for task in chosen:
        wl = task.describe()
        best = {t: statistics.mean(curves[(wl, t, k)][-1] for k in range(seeds)) / 1e9 for t in TUNERS}
        reach = [first_reach(curves[(wl, "xgb", k)], REACH * curves[(wl, "random", k)][-1]) for k in range(seeds)]
        reached += sum(1 for r in reach if r is not None and r <= trials // 3)
        lines.append(f"| {wl} | {len(task.config_space(target))} | {best['xgb']:.1f} | {best['ga']:.1f} | "
                     f"{best['random']:.1f} | {', '.join(str(r or 'not reached') for r in reach)} of {trials} |")
    lines += ["", (f"xgb reached random's final best within a third of the trials ({trials // 3}) in {reached} "
                   f"of {len(chosen) * seeds} runs."), "",
              "Curves (mean over seeds): tune_curves.png, data: tune_curves.csv (next to this file).", ""]
    print("\n".join(lines), flush=True)
    return lines


def curve_tasks(model, target) -> list:
    """The three direct conv2d tasks of CURVE_TASKS."""
    tasks = {t.describe().split("->")[0]: t for t in extract_tasks(model, target) if t.impl == "conv2d_nchwc.cpu"}
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


def report_c(chosen, curves: dict, n_prior: dict, trials: int, seeds: int) -> list:
    """(c)'s table and tune_transfer.csv: trials until xgb with transfer, and xgb from scratch,
    reach 97% of the from-scratch run's final best."""
    rows = []
    c_curves = {}
    for task in chosen:
        wl = task.describe()
        for seed in range(seeds):
            scratch, transfer = curves[(wl, "xgb", seed)], curves[(wl, "transfer", seed)]
            c_curves[(wl, "scratch", seed)], c_curves[(wl, "transfer", seed)] = scratch, transfer
            level = REACH * scratch[-1]
            rows.append((wl, seed, n_prior[wl], scratch[-1], transfer[-1], first_reach(scratch, level),
                         first_reach(transfer, level)))
    write_curves(RESULTS / "tune_transfer.csv", "run", c_curves)
    lines = ["## (c) transfer: xgb from scratch vs with prior records of other tasks (same seed)", "",
             (f"Same seed, {trials} trials each, raced side by side on one measurer as in (b); the transfer "
              "run starts from (a)'s ResNet-18 records of the other tasks. Reach = trials until 97% of "
              "the from-scratch run's final best."),
             "", "| task | seed | prior records | scratch best | transfer best | scratch reach | transfer reach |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for wl, seed, n, sb, tb, sr, tr in rows:
        lines.append(f"| {wl} | {seed} | {n} | {sb / 1e9:.1f} | {tb / 1e9:.1f} | {sr} | {tr or 'not reached'} |")
    total = [sum(r[5] for r in rows), sum(r[6] or trials for r in rows)]
    faster = sum(1 for r in rows if (r[6] or trials + 1) < r[5])
    slower = sum(1 for r in rows if (r[6] or trials + 1) > r[5])
    lines += ["", (f"Trials to reach, summed over the {len(rows)} runs: scratch {total[0]}, transfer {total[1]} "
                   f"(transfer faster in {faster}, slower in {slower}, tied in {len(rows) - faster - slower})."),
              "", "Data: tune_transfer.csv (next to this file).", ""]
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


def main(argv=None) -> int:
    global NO_WAIT, RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="(a) ResNet-18 budget")
    ap.add_argument("--curve-trials", type=int, default=48, help="(b), (c) budget per tuner and task")
    ap.add_argument("--seeds", type=int, default=3, help="(b), (c) runs per tuner and task, seeds 0..N-1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30, help="(a) timing rounds")
    ap.add_argument("--parts", default="abc")
    ap.add_argument("--tasks", default="012", help="(b), (c) tasks by position in CURVE_TASKS, e.g. 0 for 56x56 alone")
    ap.add_argument("--results", type=Path, default=None,
                    help="folder of the outputs (default bench/results; (c) reads (a)'s records there)")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine (smoke tests)")
    args = ap.parse_args(argv)
    if not args.tasks or any(k not in "012" for k in args.tasks):
        ap.error(f"--tasks takes digits 0-2 (positions in CURVE_TASKS), not '{args.tasks}'")
    NO_WAIT, RESULTS = args.no_wait, args.results or RESULTS
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = resolve_target("native")
    model = resnet18()
    measure = MeasureOptions(number=2, repeat=3, min_repeat_ms=20, timeout_s=20, parallel=2)
    stamp = f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)"

    def section(part, lines):  # each part its own file: parts can be rerun one at a time
        (RESULTS / f"tune_demo_{part}.md").write_text("\n".join([f"<!-- {stamp} -->"] + lines) + "\n")

    with tempfile.TemporaryDirectory(prefix="tvmc-tune-demo-") as tmp:
        if "a" in args.parts:
            section("a", part_a(model, target, args.trials, args.threads, args.rounds, tmp, measure))
    if "b" in args.parts or "c" in args.parts:
        chosen = [curve_tasks(model, target)[int(k)] for k in args.tasks]
        curves, n_prior = part_bc(chosen, target, args.parts, args.curve_trials, args.seeds, RACE_MEASURE)
        if "b" in args.parts:
            section("b", report_b(chosen, target, curves, args.curve_trials, args.seeds))
        if "c" in args.parts:
            section("c", report_c(chosen, curves, n_prior, args.curve_trials, args.seeds))
    parts = [(RESULTS / f"tune_demo_{p}.md").read_text() for p in "abc" if (RESULTS / f"tune_demo_{p}.md").exists()]
    (RESULTS / "tune_demo.md").write_text("# tvmc tune evidence (make tune-demo)\n\n" + "\n".join(parts))
    print(f"wrote {RESULTS / 'tune_demo.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
