"""Offline replay of tune-demo's (b) races on a fully measured config space (`make tune-replay`).

Three seeds of a live race (bench/tune_demo.py) cost ~40 minutes and carry the machine's timing
noise, so "xgb reaches random's final best within a third of the trials" rests on few, noisy
samples. This script measures every config of one of tune-demo's conv2d tasks once (`--sweep`,
resumable; the 640 configs of the 56x56 task take ~40 minutes, mostly builds of unrolled
candidates that run into the 20 s timeout), then replays the real tuners (tvmc's xgb, ga and
random, fed by the same features as `tvmc tune`) against that table for many seeds, each
measurement drawn with multiplicative Gaussian noise (`--noise`, default 3%: the spread of
repeated timings of one kernel in one process here). Each run follows tune-demo's race rules:
the fallback is trial 1, then batches of RACE_BATCH.

The goal line is 97% of random's expected final best (fallback plus trials - 1 uniform draws
from the table, Monte Carlo), the same for every run. Reported per tuner: the share of runs that
reach it within a third of the trials, the trial at which the mean curve reaches it, the mean
best after a third of the trials and at the end. Table: bench/results/space_<task>.jsonl
(gitignored); report: bench/results/tune_replay.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_demo import (CURVE_TASKS, RACE_BATCH, RACE_MEASURE, REACH, RESULTS, TUNERS, cached_featurize,  # noqa: E402
                       curve_tasks, first_reach, run_race, wait_for_idle)
from models import resnet18  # noqa: E402

from tvmc.autotune.measure import Measurer  # noqa: E402
from tvmc.autotune.record import config_key  # noqa: E402
from tvmc.autotune.tune import measured_flops  # noqa: E402
from tvmc.autotune.tuner import make_tuner  # noqa: E402
from tvmc.target import resolve_target  # noqa: E402


def table_path(task) -> Path:
    return RESULTS / f"space_{task.describe().split('->')[0].replace('[', '').replace(']', '').replace(',', '_')}.jsonl"


def load_table(task, space) -> dict:
    """{config number: FLOP/s} of the configs measured so far (0.0: failed or timed out)."""
    path = table_path(task)
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        i = space.index_of(json.loads(r["config"]))
        if i is not None:
            out[i] = r["flops"]
    return out


def sweep(task, target) -> None:
    """Measure every config of `task` not in its table yet (fallback first: the results check's
    reference), appending one line per config."""
    space = task.config_space(target)
    done = load_table(task, space)
    fb = space.index_of(space.fallback_config())
    todo = [i for i in dict.fromkeys([fb, *range(len(space))]) if i not in done]
    wait_for_idle()
    t0 = time.perf_counter()
    with Measurer(target, RACE_MEASURE) as measurer, open(table_path(task), "a") as f:
        if fb not in todo:
            measurer.set_reference_from(task, task)
        for k in range(0, len(todo), RACE_BATCH):
            batch = todo[k:k + RACE_BATCH]
            for i, r in zip(batch, measurer.measure(task, [space.get(i) for i in batch], reference=fb in batch)):
                f.write(json.dumps({"config": config_key(space.get(i)), "flops": measured_flops(task, r)}) + "\n")
            f.flush()
            print(f"  swept {len(done) + k + len(batch)}/{len(space)} ({time.perf_counter() - t0:.0f} s)", flush=True)


def replay(task, target, space, table: dict, seeds: int, trials: int, noise: float) -> list:
    """Report lines of the replayed races on `task`'s config `space` (see the module docstring)."""
    fb = space.index_of(space.fallback_config())
    flops = np.array([table[i] for i in range(len(space))])
    rng = np.random.default_rng(0)
    others = np.delete(flops, fb)
    expected = np.mean([max(flops[fb], rng.choice(others, trials - 1, replace=False).max()) for _ in range(20000)])
    level = REACH * expected
    featurize = cached_featurize(task, target)
    curves = {t: [] for t in TUNERS}
    for seed in range(seeds):
        for t in TUNERS:
            draw = np.random.default_rng([seed, TUNERS.index(t)])

            def measure_new(indices, draw=draw):
                return [flops[i] * max(0.0, 1 + noise * draw.standard_normal()) for i in indices]

            curves[t] += run_race(measure_new, fb, {t: make_tuner(t, space, featurize, seed)}, trials).values()
    third = trials // 3
    lines = [f"## Replay on {task.describe()}: {len(space)} configs measured, {seeds} seeds, {trials} trials, "
             f"noise {noise:.0%}", "",
             (f"Table best {flops.max() / 1e9:.1f} GFLOP/s, fallback {flops[fb] / 1e9:.1f}, failed or timed out "
              f"{int((flops == 0).sum())}. Random's expected final best {expected / 1e9:.1f} GFLOP/s; goal line "
              f"{REACH:.0%} of it: {level / 1e9:.1f}."), "",
             f"| tuner | runs reaching the goal within {third} trials | mean curve reaches it at trial | "
             f"mean best at trial {third} | mean final best |", "| --- | ---: | ---: | ---: | ---: |"]
    for t in TUNERS:
        cs = np.array(curves[t])
        ok = sum(1 for c in cs if (first_reach(c, level) or trials + 1) <= third)
        lines.append(f"| {t} | {ok}/{seeds} | {first_reach(cs.mean(axis=0), level) or 'not reached'} | "
                     f"{cs[:, third - 1].mean() / 1e9:.1f} | {cs[:, -1].mean() / 1e9:.1f} |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", type=int, default=0, choices=range(len(CURVE_TASKS)),
                    help="which of tune-demo's tasks: " + ", ".join(f"{k} = {w}" for k, w in enumerate(CURVE_TASKS)))
    ap.add_argument("--sweep", action="store_true", help="measure the configs missing from the table first")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--noise", type=float, default=0.03, help="relative standard deviation of each draw")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = resolve_target("native")
    task = curve_tasks(resnet18(), target)[args.task]
    if args.sweep:
        sweep(task, target)
    space = task.config_space(target)
    table = load_table(task, space)
    missing = len(space) - len(table)
    if missing:
        print(f"error: {table_path(task)} lacks {missing} configs: run with --sweep", file=sys.stderr)
        return 1
    lines = replay(task, target, space, table, args.seeds, args.trials, args.noise)
    print("\n".join(lines))
    (RESULTS / "tune_replay.md").write_text(f"<!-- {time.strftime('%Y-%m-%d %H:%M')} -->\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
