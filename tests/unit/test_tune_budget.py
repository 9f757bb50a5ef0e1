"""tvmc tune's time budget (TuneOptions.time_budget_s, --time-budget): each task stops after the
batch that ends past its share of the seconds; a fake clock makes the test independent of the
machine's speed."""

from __future__ import annotations

import itertools

from tvmc.autotune import tune as tune_mod
from tvmc.autotune.measure import MeasureOptions
from tvmc.driver import extract_tasks
from tvmc.autotune.tune import Progress, TuneOptions, tune_tasks
from tvmc.target import resolve_target


def test_each_task_stops_once_its_share_of_the_budget_is_spent(tmp_path, monkeypatch):
    from test_shipped_records import _model

    target = resolve_target("native")
    tasks = extract_tasks(_model(tmp_path / "conv.onnx"), target)[:1]
    clock = itertools.count(0.0, 10.0)  # every reading of the clock: 10 s later
    monkeypatch.setattr(tune_mod.time, "perf_counter", lambda: next(clock))
    options = TuneOptions(trials=10_000, tuner="random", batch_size=2, time_budget_s=25.0,
                          measure=MeasureOptions(number=1, repeat=1, timeout_s=60.0, build_timeout_s=300.0, parallel=2))
    (res,) = tune_tasks(tasks, target, str(tmp_path / "r.json"), options, Progress(live=False))
    assert 1 <= res.trials <= 1 + 2 * 2  # the fallback, then batches of 2 until the clock passes 25 s
    assert len(tasks[0].config_space(target)) > 10 * res.trials


def test_time_shares_follow_flops_and_pass_unspent_time_on(tmp_path, monkeypatch):
    """Each task's share is the seconds still left x its FLOPs x calls over those of the tasks
    still to tune: a task that ends early leaves its time to the later ones."""
    from dataclasses import dataclass

    @dataclass
    class FakeTask:
        flops: float
        calls: int = 1

    @dataclass
    class FakeResult:
        seconds: float
        stopped: str | None = None

    shares, used = [], iter([1.0, 50.0, 10.0])  # task 1 ends early, task 2 overshoots its share

    def fake_tune_one(task, target, budget, options, measuring, writer, records, progress, k, n, seconds,
                      features):
        shares.append(seconds)
        return FakeResult(next(used))

    monkeypatch.setattr(tune_mod, "_tune_one", fake_tune_one)
    tasks = [FakeTask(1e9), FakeTask(2e9), FakeTask(1e9, calls=2)]
    options = TuneOptions(trials=100, tuner="random", time_budget_s=100.0)
    tune_tasks(tasks, resolve_target("native"), str(tmp_path / "r.json"), options, Progress(live=False),
               budgets=[10, 10, 10], measurer=_NullMeasurer)
    assert shares == [100.0 * 1 / 5, 99.0 * 2 / 4, 49.0 * 2 / 2]


class _NullMeasurer:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
