"""The GEMM-tile fallback rule (tvmc/ops/gpu/tiling.gemm_tile_fallback) against tuned configs:
per task of the SIMT GEMM-like kernels (conv2d direct and im2col, conv2d_transpose, dense,
matmul) of a GPU descriptor, three configs, each with its launch (blocks x threads per block,
warps per multiprocessor, register tile rows x columns, shared-memory steps of the reduction):

    fallback  what the rule gives now (occupancy first: tiling.gemm_tile_fallback)
    before    the same rule without the descriptor's multiprocessor_count, which is the fallback
              tvmc had before the occupancy demand (register tile and block grown to the
              descriptor's limits)
    best      the best config of the tuning records (--records), where they have the task

and the time of each: the records' mean time of that very config where they measured it, or,
with --measure, the three measured now, side by side, on this machine's GPU (tvmc tune's
Measurer: the kernel alone, device time per run; the "before" config's output is the reference
the other two must match). With --models, the models' tasks without records are listed too,
and a last line sums calls x time over the model's kernels: the default implementation's
fallback and before (what `tvmc compile` runs without records), the best record of either
implementation per workload.

`python bench/gemm_fallback.py [--target cuda-sm90] [--records FILE ...] [--models resnet18,bert]
[--batch 1] [--measure]`. Records: the descriptor's shipped file (configs/tuning/<target>.json,
the best config per task) by default; the full searches show more configs timed, e.g. those of
ResNet-18 batch 1 on an H200 in bench/results/cuda_h200/records_*.json (each task's first
record is the fallback of the time, which tvmc tune measures first: column "first"). Records
count when they are of the descriptor or of its name (measured before a fact was added to it,
as multiprocessor_count was).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tvmc.autotune.record import load_records, of_target, shipped_records_path  # noqa: E402
from tvmc.autotune.space import ConfigEntity  # noqa: E402
from tvmc.ops.fused import lower_fused  # noqa: E402
from tvmc.target import resolve_target  # noqa: E402

# the implementations whose config space is tiling.define_gemm_tile's (+ tile_k)
GEMM_TILE_IMPLS = ("conv2d_nchw.gpu", "conv2d_nchw_im2col.gpu", "conv2d_transpose_nchw.gpu", "dense.gpu",
                   "matmul.gpu")
COLUMNS = ("fallback", "before", "best")


def split_extent(task) -> int:
    """Extent of the reduce axis tile_k splits: C (direct conv2d and conv2d_transpose: the data's
    channels), C*KH*KW (im2col), K (dense, matmul)."""
    data, weight = task.workload[:2]
    if task.impl == "conv2d_nchw_im2col.gpu":
        return data[1] * weight[2] * weight[3]
    return data[1] if task.impl.startswith("conv2d") else data[-1]


def launch(task, config: dict, target) -> dict:
    """The launch of `task`'s anchor op alone under `config` (lowered for `target`): blocks,
    threads per block, warps per multiprocessor (a block's threads rounded up to whole warps;
    None without the descriptor's multiprocessor_count), register tile, shared-memory steps of
    the split reduction (its extent / tile_k)."""
    cfg = ConfigEntity(config)
    prim = lower_fused(task.function(), target, config_lookup=lambda name, wl: cfg if name == task.impl else None)
    blocks, threads = math.prod(prim.launch.grid), math.prod(prim.launch.block)
    warps = blocks * -(-threads // max(1, target.thread_warp_size))
    sms = target.multiprocessor_count
    return {"blocks": blocks, "threads": threads, "warps_per_sm": warps / sms if sms else None,
            "reg": f"{config['reg_y']}x{config['reg_x']}", "steps": -(-split_extent(task) // config["tile_k"])}


def cell(config: dict | None, lau: dict | None, time_s: float | None) -> str:
    if config is None:
        return " " * 44
    knobs = f"{config['tile_y']:>4d}x{config['tile_x']:<4d} {lau['reg']:>3s} {config['tile_k']:2d}"
    t = f"{time_s * 1e6:7.1f}" if time_s is not None else "      -"
    w = f"{lau['warps_per_sm']:4.1f}" if lau["warps_per_sm"] is not None else "   -"
    return f"{knobs} {lau['blocks']:5d}x{lau['threads']:<4d} {w} {lau['steps']:4d} {t}"


def collect(target, files, models: str, batch: int) -> tuple:
    """({task key: Task}, {task key: [Record]}, {task key: calls in the models})."""
    mine = of_target(target)
    records: dict = {}
    for path in files:
        for r in load_records(path):
            if r.impl in GEMM_TILE_IMPLS and (mine(r) or r.target_name == target.name):
                records.setdefault(r.key, []).append(r)
    tasks = {key: rs[0].task() for key, rs in records.items()}
    calls: dict = {}
    if models:
        import models as bench_models

        from tvmc.driver import extract_tasks
        for name in models.split(","):
            for t in extract_tasks(getattr(bench_models, name)(batch=batch), target):
                if t.impl in GEMM_TILE_IMPLS:
                    tasks.setdefault(t.key, t)
                    calls[t.key] = calls.get(t.key, 0) + t.calls
    return tasks, records, calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="cuda-sm90", help="a GPU descriptor (default cuda-sm90)")
    p.add_argument("--records", nargs="*", default=None,
                   help="tuning records files (default: the descriptor's shipped records)")
    p.add_argument("--models", default="", help="comma-separated bench/models.py builders whose tasks to list too")
    p.add_argument("--batch", type=int, default=1, help="batch of --models (default 1)")
    p.add_argument("--measure", action="store_true", help="measure the three configs of each task on this GPU")
    p.add_argument("--repeat", type=int, default=5, help="--measure: timing rounds per config (default 5)")
    args = p.parse_args(argv)
    target = resolve_target(args.target)
    before_target = dataclasses.replace(target, multiprocessor_count=0)
    if args.records is not None:
        files = args.records
    else:
        shipped = shipped_records_path(target)
        files = [shipped] if shipped is not None else []
    tasks, records, calls = collect(target, files, args.models, args.batch)

    rows = []
    for key, task in sorted(tasks.items(), key=lambda kv: (kv[1].workload[3], kv[1].impl, -kv[1].flops)):
        ok = [r for r in records.get(key, []) if r.ok]
        configs = {"fallback": dict(task.config_space(target).fallback),
                   "before": dict(task.config_space(before_target).fallback),
                   "best": dict(min(ok, key=lambda r: r.mean_s).config) if ok else None}
        timed: dict = {}
        for r in ok:
            timed.setdefault(r.config_key(), []).append(r.mean_s)
        times = {c: min(timed.get(json.dumps(cfg, sort_keys=True), [None]) or [None])
                 if cfg is not None else None for c, cfg in configs.items()}
        first = min(ok, key=lambda r: r.data.get("timestamp", 0.0)).mean_s if len(ok) > 1 else None
        rows.append({"key": key, "task": task, "configs": configs, "times": times, "first": first})

    if args.measure:
        from tvmc.autotune.measure import MeasureOptions, Measurer
        from tvmc.errors import TuningError

        try:
            with Measurer(target, MeasureOptions(repeat=args.repeat, min_repeat_ms=50.0, timeout_s=60.0)) as m:
                for row in rows:
                    order = [c for c in ("before", "fallback", "best") if row["configs"][c] is not None]
                    results = m.measure(row["task"], [row["configs"][c] for c in order], reference=True)
                    row["times"] = {c: (r.mean_s if r.ok else None) for c, r in zip(order, results)}
                    row["errors"] = {c: r.error_msg or r.error.name for c, r in zip(order, results) if not r.ok}
        except TuningError as e:
            print(f"--measure: {e}")
            return 1

    source = "measured now on this GPU" if args.measure else "the records' mean time of that very config"
    print(f"target {target.name}: {target.multiprocessor_count} multiprocessors, warp {target.thread_warp_size}, "
          f"{target.max_threads_per_block} threads per block; records: {', '.join(map(str, files)) or 'none'}")
    print(f"each config: tile_y x tile_x knobs, register tile (rows x columns), tile_k; launch: blocks x threads, "
          f"warps per multiprocessor, reduction steps; us: {source}")
    head = f"{'knobs':>9s} {'reg':>3s} {'k':>2s} {'launch':>10s} {'w/SM':>4s} {'stp':>4s} {'us':>7s}"
    print(f"\n{'task':48s} {'dtype':7s} {'calls':>5s} | " + " | ".join(f"{c:^44s}" for c in COLUMNS) + " | first us")
    print(f"{'':48s} {'':7s} {'':5s} | " + " | ".join(head for _ in COLUMNS) + " |")
    for row in rows:
        task, cfgs = row["task"], row["configs"]
        wl = task.workload
        shapes = f"{'x'.join(map(str, wl[0])):>13s} * {'x'.join(map(str, wl[1])):>11s}"
        name = f"{task.impl.removesuffix('.gpu'):19s} {shapes}"
        cells = [cell(cfgs[c], launch(task, cfgs[c], target) if cfgs[c] is not None else None, row["times"][c])
                 for c in COLUMNS]
        first = f"{row['first'] * 1e6:8.1f}" if row["first"] is not None else ""
        print(f"{name:48s} {wl[3]:7s} {calls.get(row['key'], ''):>5} | " + " | ".join(cells) + f" | {first}")
        for c, msg in row.get("errors", {}).items():
            print(f"    {c}: {msg}")
    if calls:
        print("\n" + summary(rows, calls, target))
    return 0


def summary(rows, calls, target) -> str:
    """Milliseconds of the models' GEMM-tile kernels, calls x time: fallback and before of the
    op's default implementation (what compile runs without records), best over the
    implementations with a time per workload; a workload without a time in a column leaves it
    incomplete (named)."""
    from tvmc.ops.registry import get_op

    by_workload: dict = {}
    for row in rows:
        if row["key"] not in calls:
            continue
        by_workload.setdefault(row["key"][1], []).append(row)
    total = {c: 0.0 for c in COLUMNS}
    missing = {c: 0 for c in COLUMNS}
    for group in by_workload.values():
        n = calls[group[0]["key"]]
        task = group[0]["task"]
        default = get_op(task.op).implementations(target.family, task.workload, target)[0].name
        for c in ("fallback", "before"):
            t = next((r["times"][c] for r in group if r["task"].impl == default), None)
            total[c] += n * t if t is not None else 0.0
            missing[c] += t is None
        best = [r["times"]["best"] for r in group if r["times"]["best"] is not None]
        total["best"] += n * min(best) if best else 0.0
        missing["best"] += not best
    parts = [f"{c} {total[c] * 1e3:.3f} ms" + (f" ({missing[c]} workloads without a time)" if missing[c] else "")
             for c in COLUMNS]
    return f"models' GEMM-tile kernels, calls x time: {'; '.join(parts)}"


if __name__ == "__main__":
    sys.exit(main())
