"""`tvmc tune`: extract a model's tasks, search each task's config space with a tuner while
measuring candidates for real, and append every measurement to a records file.

Tasks: one per (implementation, workload), so an op with two implementations (conv2d: direct
and im2col + GEMM) on one workload is two tasks, each tuned on its own share; compile then runs
the implementation whose best record is faster (the summary table marks it with "*").

Budget: `trials` is the total number of measurements for the model; each task gets a share in
proportion to its FLOPs in the model (FLOPs of one call x calls), at least 1, at most its space
size; what a capped task leaves is shared again among the others in the same proportion. A time
budget (time_budget_s) is shared the same way, by FLOPs x calls, task by task over the seconds
still left, so what a task does not spend passes to the tasks after it.

Resume: measurements already in the output file or in `prior_records` for this target and
task count as made (their configs are never measured again, and they count against the task's
share). Records of other tasks train the xgb tuner's model before its first batch (transfer).
Each task starts with its fallback config (the reference for the results check, and the
summary's fallback GFLOP/s); a task of an alternative implementation (im2col) is checked
against the default implementation's fallback output instead, its own fallback included.

Speed-up: after the search, the best config and the fallback are measured again, side by side
in one runner (each `repeat` rounds of `number` runs), and the speed-up is the ratio of those two
mean costs; it is never the ratio of the search's best to one fallback measurement taken minutes
earlier on a machine whose load may have changed. These two checks are not written as records.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from tvmc.autotune.features import config_features
from tvmc.autotune.measure import MeasureOptions, MeasurementStopped, Measurer, build_candidate
from tvmc.autotune.record import RecordWriter, config_key, load_records, of_target
from tvmc.autotune.task import workload_key
from tvmc.autotune.tuner import TUNERS, make_tuner
from tvmc.checks import choice_arg, int_arg, path_arg, positive_number_arg


@dataclass(frozen=True)
class TuneOptions:
    """Everything `tvmc tune` sets about the search, the one place of each tuning option (the
    CLI builds it from tvmc.cli.TUNE_FLAGS and MEASURE_FLAGS; the graph the tasks are taken from
    is a CompileOptions of its own).

    trials:         measurements in all (>= 1), split over the tasks (see split_budget)
    tuner:          xgb, ga, random or grid (tvmc.autotune.tuner.TUNERS)
    early_stopping: stop a task after this many trials without a new best (>= 1), or None
    batch_size:     candidates per tuner step (>= 1)
    measure:        how candidates are built and timed (MeasureOptions)
    prior_records:  path of records whose configs are not measured again (other tasks' train the
                    xgb tuner's model), or None
    seed:           the tuners' seed (>= 0)
    time_budget_s:  seconds for the whole search (> 0); None: no limit. Each task in turn gets a
                    share of the seconds still left in proportion to its FLOPs x calls among the
                    tasks still to tune (so a task that ends early, its space or trials spent,
                    leaves its time to the later ones), and stops at the first batch that ends
                    past its share (its fallback and first batch always run)

    Raises TypeError or ValueError naming the field (tvmc.checks).
    """

    trials: int = 200
    tuner: str = "xgb"
    early_stopping: int | None = None
    batch_size: int = 8
    measure: MeasureOptions = MeasureOptions()
    prior_records: str | None = None
    seed: int = 0
    time_budget_s: float | None = None

    def __post_init__(self):
        if not isinstance(self.measure, MeasureOptions):
            raise TypeError(f"measure must be a MeasureOptions, got {type(self.measure).__name__}")
        canonical = {
            "trials": int_arg("trials", self.trials, 1),
            "tuner": choice_arg("tuner", self.tuner, TUNERS),
            "early_stopping": int_arg("early_stopping", self.early_stopping, 1, optional=True),
            "batch_size": int_arg("batch_size", self.batch_size, 1),
            "prior_records": path_arg("prior_records", self.prior_records, optional=True),
            "seed": int_arg("seed", self.seed, 0),
            "time_budget_s": positive_number_arg("time_budget_s", self.time_budget_s, "seconds", optional=True),
        }
        for name, value in canonical.items():
            object.__setattr__(self, name, value)


class _OutOfTime(Exception):
    """A task's share of TuneOptions.time_budget_s is spent (raised between tuner batches)."""


@dataclass
class TaskResult:
    task: object
    trials: int = 0                  # measurements made now
    resumed: int = 0                 # measurements taken from records
    best_flops: float = 0.0
    best_config: dict | None = None
    fallback_flops: float = 0.0
    errors: dict = field(default_factory=dict)
    seconds: float = 0.0
    curve: list = field(default_factory=list)  # best FLOP/s after each trial made now
    last_flops: float = 0.0                    # the latest measurement's FLOP/s
    speedup: float = float("nan")              # best config over fallback, measured side by side
    stopped: str | None = None                 # why the search stopped early (MeasurementStopped)
    emulated: bool = False                     # measured under an emulator (a cluster's --emulate device)


def split_budget(tasks, trials: int, target) -> list:
    """Trials per task (see the module docstring): 1 each first (the fallback) when the budget
    allows, the rest in proportion to FLOPs x calls, capped at the space size, what a capped
    task leaves shared again; rounding remainders go to the largest tasks."""
    sizes = [len(t.config_space(target)) for t in tasks]
    weights = [t.flops * t.calls for t in tasks]
    share = [1 if trials >= len(tasks) else 0 for _ in tasks]
    left = trials - sum(share)
    while left > 0:
        open_ = [i for i in range(len(tasks)) if share[i] < sizes[i]]
        if not open_:
            break
        total = sum(weights[i] for i in open_) or 1
        grant = {i: min(sizes[i] - share[i], int(left * weights[i] / total)) for i in open_}
        if not any(grant.values()):  # rounding: one more trial to the heaviest open tasks
            for i in sorted(open_, key=lambda i: -weights[i])[:left]:
                grant[i] = 1
        for i, g in grant.items():
            share[i] += g
            left -= g
    return share


class Progress:
    """The one updating line per task: `[Task  3/12]  Current/Best: ... | Progress: (n/N) | t s`."""

    def __init__(self, stream=None, live=None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live

    def line(self, k, n, cur, best, done, total, seconds) -> str:
        return (f"[Task {k:2d}/{n:2d}]  Current/Best: {cur / 1e9:7.2f}/{best / 1e9:7.2f} GFLOPS | "
                f"Progress: ({done}/{total}) | {seconds:.2f} s")

    def update(self, *args):
        if self.live:
            self.stream.write("\r" + self.line(*args))
            self.stream.flush()

    def done(self, *args):
        self.stream.write(("\r" if self.live else "") + self.line(*args) + "\n")
        self.stream.flush()


def tune_tasks(tasks, target, output, options: TuneOptions = TuneOptions(), progress: Progress | None = None,
               build_fn=build_candidate, budgets=None, measurer=None) -> list:
    """Tune `tasks` on this machine, appending records to `output`; returns a TaskResult each.
    `budgets` overrides the trial split (one count per task). `measurer()` makes the measurer
    (a context manager with Measurer's interface: tvmc.autotune.cluster.ClusterMeasurer measures
    on a cluster's device); default: a Measurer of this machine with `build_fn`. When the
    measurer stops (MeasurementStopped), the task it stopped in ends with TaskResult.stopped
    set, and the tasks after it are not tuned (not in the list)."""
    previous = []
    if options.prior_records:
        previous += load_records(options.prior_records)
    if os.path.exists(output) and os.path.getsize(output) > 0:
        previous += load_records(output)
    of_this_target = of_target(target)
    budgets = budgets or split_budget(tasks, options.trials, target)
    progress = progress or Progress()
    results = []
    # forked before the measurer starts its runner, so that no worker holds the runner's pipe
    features = FeaturePool(options.measure.parallel) if options.tuner == "xgb" else None
    try:
        make = measurer or (lambda: Measurer(target, options.measure, build_fn))
        with make() as measuring, RecordWriter(output) as writer:
            # times under an emulator and a device's never mix: each resumes only its own kind
            emulated = bool(getattr(measuring, "emulated", False))
            mine = [r for r in previous if of_this_target(r) and r.emulated == emulated]
            weights = [t.flops * t.calls if b > 0 else 0 for t, b in zip(tasks, budgets)]
            spent = 0.0
            for k, (task, budget) in enumerate(zip(tasks, budgets), 1):
                seconds = None
                if options.time_budget_s is not None:  # this task's share of what is left
                    left_weight = sum(weights[k - 1:]) or 1
                    seconds = max(0.0, options.time_budget_s - spent) * weights[k - 1] / left_weight
                res = _tune_one(task, target, budget, options, measuring, writer, mine, progress, k, len(tasks),
                                seconds, features)
                res.emulated = emulated
                spent += res.seconds
                results.append(res)
                if res.stopped:
                    break
    finally:
        if features is not None:
            features.close()
    return results


def _features_of(args):
    task, target, config = args
    return config_features(task, target, config)


class FeaturePool:
    """The cost model's features of many configs at once, in `workers` forked processes (each
    config's kernel is lowered to read its loops: the xgb tuner's annealing scores hundreds per
    batch); one worker: in this process."""

    def __init__(self, workers: int):
        import concurrent.futures as cf
        import multiprocessing

        self.workers = max(1, int(workers))
        self.pool = (cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
                     if self.workers > 1 else None)

    def featurize_many(self, task, target, configs) -> list:
        if self.pool is None:
            return [config_features(task, target, c) for c in configs]
        chunk = -(-len(configs) // self.workers)
        return list(self.pool.map(_features_of, [(task, target, c) for c in configs], chunksize=chunk))

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def measured_flops(task, result) -> float:
    """Throughput in FLOP/s of a MeasureResult or Record of `task` (task.flops / mean cost in
    seconds); 0.0 for a failed measurement, as the tuners learn it."""
    return task.flops / result.mean_s if result.ok and result.mean_s > 0 else 0.0


def _tune_one(task, target, budget, options, measurer, writer, records, progress, k, n, seconds=None, features=None):
    space = task.config_space(target)
    many = (lambda cfgs: features.featurize_many(task, target, cfgs)) if features is not None else None
    tuner = make_tuner(options.tuner, space, lambda cfg: config_features(task, target, cfg), options.seed + k, many)
    res = TaskResult(task)
    t0 = time.perf_counter()
    done_keys = {r.config_key(): r for r in records if r.key == task.key}
    fallback = space.fallback_config()
    # resumed measurements of this task
    idx, fl = [], []
    for r in done_keys.values():
        i = space.index_of(r.config)
        if i is None:
            continue
        idx.append(i)
        fl.append(measured_flops(task, r))
    if idx:
        tuner.update(idx, fl)
        res.resumed = len(idx)
    if options.tuner == "xgb":
        add_transfer(tuner, task, target, records)

    def measure(configs, reference=False):
        try:
            outs = measurer.measure(task, configs, reference=reference)
        except MeasurementStopped as e:  # record what was measured (or lost in flight), then stop
            for cfg, r in zip(configs, e.results):
                if r is not None:
                    writer.write(target, task, cfg, r)
                    if not r.ok:
                        res.errors[int(r.error)] = res.errors.get(int(r.error), 0) + 1
            res.trials += sum(r is not None for r in e.results)
            raise
        flops = []
        for cfg, r in zip(configs, outs):
            writer.write(target, task, cfg, r)
            f = measured_flops(task, r)
            flops.append(f)
            if not r.ok:
                res.errors[int(r.error)] = res.errors.get(int(r.error), 0) + 1
            res.best_flops = max(res.best_flops, f)
            res.curve.append(res.best_flops)
            res.last_flops = f
        return flops

    total = min(max(budget, res.resumed), len(space))
    res.best_flops = tuner.best_flops
    try:
        _search(task, target, budget, options, measurer, res, tuner, space, done_keys, measure, progress, k, n,
                total, t0, seconds)
    except MeasurementStopped as e:
        res.stopped = e.reason
    res.best_flops = max(res.best_flops, tuner.best_flops)
    if tuner.best_index is not None:
        res.best_config = dict(space.get(tuner.best_index))
    if not res.stopped:
        try:
            res.speedup = side_by_side_speedup(task, fallback, res.best_config, measurer)
        except MeasurementStopped as e:
            res.stopped = e.reason
    res.seconds = time.perf_counter() - t0
    progress.done(k, n, res.last_flops, res.best_flops,
                  res.resumed + res.trials, total, res.seconds)
    return res


def _search(task, target, budget, options, measurer, res, tuner, space, done_keys, measure, progress, k, n, total,
            t0, seconds):
    """_tune_one's fallback measurement and search (MeasurementStopped goes up to it)."""
    # the fallback first: the results check's reference and the summary's baseline; a task of an
    # alternative implementation is checked against the default implementation's fallback
    # (what compile runs without records), its own fallback included
    fallback = space.fallback_config()
    fb_key = config_key(fallback)
    fb_index = space.index_of(fallback)
    default = _default_task(task, target)
    has_ref = default is not None and measurer.set_reference_from(default, task)
    if fb_key in done_keys and done_keys[fb_key].ok:
        res.fallback_flops = task.flops / done_keys[fb_key].mean_s
        if not has_ref:  # the runner needs the reference output: run it again without recording
            measurer.set_reference_from(task, task)
    elif res.resumed < budget:
        f = measure([fallback], reference=not has_ref)[0]
        res.fallback_flops = f
        res.trials += 1
        tuner.update([fb_index], [f])

    def counted_measure(configs):
        out = measure(configs)
        res.trials += len(configs)
        return out

    progress.update(k, n, res.fallback_flops, res.best_flops, res.resumed + res.trials, total, 0.0)
    remaining = budget - res.resumed - res.trials

    def after_batch(tn, batch, flops):
        progress.update(k, n, max(flops) if flops else 0.0, res.best_flops, res.resumed + res.trials, total,
                        time.perf_counter() - t0)
        if seconds is not None and time.perf_counter() - t0 >= seconds:
            raise _OutOfTime

    if remaining > 0:
        tuner.trials = 0
        tuner.best_trial = 0
        try:
            tuner.tune(remaining, counted_measure, options.batch_size, options.early_stopping, callback=after_batch)
        except _OutOfTime:
            pass


def side_by_side_speedup(task, fallback, best_config, measurer) -> float:
    """Mean cost of the `fallback` config over that of `best_config`, the two measured again one
    after the other (see the module docstring); 1.0 when the best is the fallback; NaN when
    there is no best config or either measurement fails."""
    if best_config is None:
        return float("nan")
    if config_key(best_config) == config_key(fallback):
        return 1.0
    fb, best = measurer.measure(task, [dict(fallback), dict(best_config)])
    return fb.mean_s / best.mean_s if fb.ok and best.ok else float("nan")


def _default_task(task, target):
    """The task of the op's default implementation on `task`'s workload, or None when `task` is it."""
    from dataclasses import replace

    from tvmc.ops.registry import get_op

    default = get_op(task.op).implementations(target.family, task.workload, target)[0]
    if default.name == task.impl or default.config_space is None:
        return None
    return replace(task, impl=default.name)


def add_transfer(tuner, task, target, records) -> int:
    """Give an XGBTuner for `task` the measurements in `records` (Record list) of other tasks of
    the same implementation as prior data (XGBTuner.add_prior: one ranking group per task, its
    FLOP/s normalized to the task's best). Returns how many records it used."""
    by_task: dict = {}
    for r in records:
        if r.key != task.key and r.impl == task.impl:
            by_task.setdefault(r.key, []).append(r)
    for rs in by_task.values():
        other = rs[0].task()
        feats, flops = [], []
        for r in rs:
            feats.append(config_features(other, target, r.config))
            flops.append(measured_flops(other, r))
        tuner.add_prior(np.stack(feats), flops)
    return sum(len(rs) for rs in by_task.values())


def summary_rows(results, indices=None) -> list:
    """(task index, name, workload, trials, best GFLOP/s, fallback GFLOP/s, speed-up) per task;
    `indices` are the tasks' positions in the model's task list (`tvmc tune --list-tasks`),
    0, 1, ... by default. The name ends in "*" for the fastest implementation of a workload that
    has several tasks (the one compile applies)."""
    chosen = chosen_results(results)
    rows = []
    for k, r in zip(indices if indices is not None else range(len(results)), results):
        name = r.task.impl + ("*" if id(r) in chosen else "")
        rows.append((k, name, r.task.describe(), r.trials + r.resumed, r.best_flops / 1e9,
                     r.fallback_flops / 1e9, r.speedup))
    return rows


def chosen_results(results) -> set:
    """id() of each result that is the fastest implementation of a workload with several tasks."""
    by_workload: dict = {}
    for r in results:
        by_workload.setdefault((r.task.op, workload_key(r.task.workload)), []).append(r)
    return {id(max(rs, key=lambda r: r.best_flops)) for rs in by_workload.values()
            if len(rs) > 1 and max(r.best_flops for r in rs) > 0}


def format_summary(results, indices=None) -> str:
    """The table `tvmc tune` prints after tuning (columns of summary_rows)."""
    head = f"{'task':>4}  {'implementation':<24} {'workload':<52} {'trials':>6} {'best GFLOP/s':>12} " \
           f"{'fallback':>9} {'speed-up':>8}"
    lines = [head]
    rows = summary_rows(results, indices)
    for k, name, wl, trials, best, fb, sp in rows:
        speedup = f"{sp:>7.2f}x" if sp == sp else f"{'-':>8}"
        lines.append(f"{k:>4}  {name:<24} {wl:<52} {trials:>6} {best:>12.2f} {fb:>9.2f} {speedup}")
    lines.append("speed-up: the best config against the fallback, measured again side by side after the search")
    if any(r.emulated for r in results):
        lines.append("measured under emulation (a device started with tvmc device-worker --emulate): the GFLOP/s are "
                     "the emulator's on its host, not the device's; compile does not apply these records")
    if any(row[1].endswith("*") for row in rows):
        lines.append("* the faster implementation of its workload: tvmc compile --tuning-records applies it")
    return "\n".join(lines)


def task_count_line(num_tasks: int, num_workloads: int) -> str:
    """The words `tvmc tune` and `tvmc compile --tuning-records` both use for what they count."""
    return (f"{num_tasks} tuning task{'s' * (num_tasks != 1)} over {num_workloads} kernel "
            f"workload{'s' * (num_workloads != 1)}")


def records_summary_lines(summary: dict, path) -> list:
    """What `tvmc compile --tuning-records PATH` prints: kernel workloads from records and
    fallback, tuning tasks with records, and the records that did not apply."""
    lines = [f"tuning records {path}: {summary['workloads_from_records']}/{summary['workloads']} kernel "
             f"workloads from records, {summary['workloads_fallback']} fallback "
             f"({summary['tasks_with_records']} of {task_count_line(summary['tasks'], summary['workloads'])} "
             f"had records)"]
    for name, count in summary["not_applicable_records"].items():
        lines.append(f"  {count} records for target {name} not applicable to this target")
    if summary.get("emulated_records"):
        lines.append(f"  {summary['emulated_records']} records measured under emulation not applied (their times are "
                     f"the emulator's, not the device's)")
    if summary["stale_records"]:
        lines.append(f"  {summary['stale_records']} tasks' best records do not fit the current config space "
                     f"(schedule changed); fallback used")
    return lines
