"""Benchmark on an NVIDIA GPU: tvmc's CUDA target against torch eager (and onnxruntime's CUDA
execution provider where it is installed), on the same GPU, side by side in one process
(`make bench TARGET=cuda`, or `python bench/bench_cuda.py [--models a,b] [--batches 1,16]
[--precisions fp32,fp16,bf16] [--repeat N] [--tune-trials N] [--tune VARIANT=N ...]`).

Models: ResNet-18, MobileNetV2 and the BERT-style encoder of bench/models.py at each batch size,
each in float32 (fp32), float32 on the TF32 tensor cores (tf32: tvmc --target-option
allow_tf32=true, against torch's defaults) and mixed precision (fp16: tvmc --mixed-precision
float16, torch `module.half()`; bf16: tvmc --mixed-precision bfloat16, torch `module.bfloat16()`).
Per model, batch and precision, one row:

    fallback_ms  median latency of CUDAExecutor.run() (its CUDA graph replayed, then a wait for
                 the stream), tvmc compiled at opt level 3 for the shipped descriptor of this
                 GPU's architecture (cuda-sm90 on sm_90, cuda-sm80 on sm_80; else
                 `cuda -mcpu=<sm_XY>`) with the fallback rules only (--no-shipped-records: untuned)
    tvmc_ms      the same as tvmc compile builds it by default, with the records tvmc ships for
                 the descriptor (configs/tuning/); empty where none of them applies to the model
    tuned_ms     the same with the best configs of `tvmc tune` on this GPU (--tuner, default xgb;
                 --tune-trials N measurements per variant, or --tune VARIANT=N for some, VARIANT =
                 model:batch:precision, N a number of trials or of seconds: 120s), records in
                 bench/results/cuda_records/; tune_s: the search's seconds
    torch_ms     median latency of the model converted by onnx2torch, on the GPU, in
                 torch.inference_mode, then torch.cuda.synchronize(); fp16 (bf16): the module and
                 its float inputs in half precision (bfloat16); fp32: torch's defaults, under which cuDNN runs
                 float32 convolutions on the TF32 tensor cores (torch.backends.cudnn.allow_tf32)
    torch_f32_ms fp32 rows: the same with TF32 off (cudnn.allow_tf32 and cuda.matmul.allow_tf32
                 False), float32 arithmetic throughout as tvmc's float32 build
    ort_ms       onnxruntime with the CUDAExecutionProvider, I/O bound on the GPU (needs
                 onnxruntime-gpu; where only the CPU build is installed the column stays empty)
    ratios       tvmc (untuned, tuned) / torch, untuned / tuned: below 1, the first is faster
    check        'ok' when tvmc's outputs (untuned and tuned) match onnxruntime's float32 outputs
                 on the CPU: fp32 within rtol 1e-3, atol 1e-3 x the largest magnitude; fp16 and tf32 within
                 atol 2e-2 x the largest magnitude (float16 and TF32 operands both keep 11
                 significant bits, rounded to nearest; errors add up over the layers: a CPU emulation
                 of the tf32 rows, every tensor-core GEMM's operands rounded to TF32, errs by at
                 most 1.0e-2 x the largest magnitude on MobileNetV2 at batch 1 and 16, 6.5e-4 on
                 ResNet-18), bf16 within 16 x 2**-8 (8 significant bits: the bound of
                 tests/e2e/test_mixed_precision.py), else 'MISMATCH' and the runtimes, each with
                 its largest error in units of the largest magnitude

With --profile K, each tvmc build is also profiled (CUDAExecutor.profile over 5 runs, CUDA events
per kernel) and its K most expensive kernels listed below the table: milliseconds per run, share
of the kernels' time, GFLOP/s.

Every runtime sees the same inputs (seeded), has 3 untimed warm-up runs, then `--repeat` rounds
each time one run of every runtime in turn (perf_counter around one call), so that drifts touch all
alike; times are medians. A runtime that is not installed or fails leaves its cells empty with the
reason below the table. Geometric means of the ratios, and tuned fp16 / tuned fp32 per model and
batch, close the report. Without a GPU the script stops at once, saying why.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import count_gflops, model_inputs  # noqa: E402  (bench/ is the script's directory)
from models import BUILT_MODELS  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "bert")
PRECISIONS = {"fp32": "", "tf32": "", "fp16": "float16", "bf16": "bfloat16"}
WARMUP_RUNS = 3
RTOL = 1e-3
FP16_ATOL = 2e-2  # x the reference's largest magnitude
BF16_ATOL = 16 * 2.0**-8  # likewise: 16 unit roundoffs of bfloat16
RECORDS_DIR = Path(__file__).resolve().parent / "results" / "cuda_records"


class Unavailable(Exception):
    """A runtime that cannot run here (not installed, no CUDA in it): its cells stay empty."""


def load(name: str, batch: int) -> tuple:
    """(ModelProto, feeds) of a bench model at `batch`."""
    build, feeds = BUILT_MODELS[name]
    model = build(batch=batch)
    return model, (feeds(batch=batch) if feeds else model_inputs(model))


def compile_options(precision: str, records: str | None = None, shipped: bool = False):
    from tvmc.driver import CompileOptions

    return CompileOptions(opt_level=3, tuning_records=records, mixed_precision=PRECISIONS[precision],
                          shipped_records=shipped)


def gpu_target(arch: str, precision: str = "fp32"):
    """The shipped CUDA descriptor whose cpu is `arch` (sm_XY), else `cuda -mcpu=arch`; for the
    tf32 rows with the target option allow_tf32 (float32 GEMMs and convolutions on the TF32
    tensor cores)."""
    from tvmc.target import known_targets, resolve_target

    options = {"allow_tf32": "true"} if precision == "tf32" else None
    for name in known_targets():
        if name != "native" and name.startswith("cuda") and resolve_target(name).cpu == arch:
            return resolve_target(name, options)
    return resolve_target(f"cuda -mcpu={arch}", options)


def tvmc_runner(model, feeds, arch: str, device: str, folder: str, precision: str, records: str | None = None,
                shipped: bool = False):
    """(run, outputs) of tvmc's CUDAExecutor for `model` compiled for gpu_target(arch); with
    `shipped`, Unavailable when no shipped record applies (the build would be the fallback's)."""
    from tvmc.driver import compile_model
    from tvmc.package import save_artifact
    from tvmc.runtime.cuda import CUDAExecutor

    module = compile_model(model, gpu_target(arch, precision), compile_options(precision, records, shipped))
    if shipped and not (module.metadata.get("shipped_records") or {}).get("workloads_from_records"):
        raise Unavailable("no shipped record applies")
    tag = "_tuned" if records else "_shipped" if shipped else ""
    ex = CUDAExecutor(save_artifact(module, Path(folder, f"{precision}{tag}.tar")), device)
    for k, v in feeds.items():
        ex.set_input(k, v)

    def profile(top: int) -> list:
        from tvmc.api import profile_rows

        return profile_rows(ex.profile(5), module.metadata.get("kernel_flops", {}))[:top]

    def run():
        ex.run()

    run.profile = profile
    return run, lambda: [ex.get_output(i) for i in range(ex.num_outputs)]


def tune(model, variant: str, arch: str, precision: str, budget: str, tuner: str) -> tuple:
    """Tune `model`'s tasks on this GPU with `tuner`, `budget` measurements in all ("300") or
    seconds ("120s"): (records path, tuning seconds)."""
    from tvmc.driver import extract_tasks
    from tvmc.autotune.tune import TuneOptions, tune_tasks

    target = gpu_target(arch, precision)
    RECORDS_DIR.mkdir(parents=True, exist_ok=True)
    path = RECORDS_DIR / f"{variant.replace(':', '_')}_{arch}.json"
    t0 = time.perf_counter()
    import os

    from tvmc.autotune.measure import MeasureOptions

    seconds = float(budget[:-1]) if budget.endswith("s") else None
    options = TuneOptions(trials=100000 if seconds else int(budget), tuner=tuner, time_budget_s=seconds,
                          measure=MeasureOptions(parallel=os.cpu_count() or 1))
    tune_tasks(extract_tasks(model, target, compile_options(precision)), target, str(path), options)
    return str(path), time.perf_counter() - t0


def ort_runner(model, feeds, ordinal: int):
    """(run, outputs) of onnxruntime's CUDA execution provider with I/O bound on the GPU."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise Unavailable("onnxruntime is not installed (pip install onnxruntime-gpu)") from None
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise Unavailable(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (pip install onnxruntime-gpu "
                          "in an environment without the CPU onnxruntime)")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=[("CUDAExecutionProvider", {"device_id": ordinal})])
    if "CUDAExecutionProvider" not in sess.get_providers():
        raise Unavailable("onnxruntime could not start its CUDA execution provider")
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", ordinal))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cuda", ordinal)

    def run():
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()

    return run, binding.copy_outputs_to_cpu


def reference_outputs(model, feeds) -> list:
    """onnxruntime's float32 outputs on the CPU (the check's reference)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def torch_runner(model, feeds, ordinal: int, precision: str, tf32: bool = True):
    """(run, outputs) of torch eager on the model converted by onnx2torch; `tf32` False turns
    torch's TF32 tensor-core use off around each run."""
    try:
        import torch
        from onnx2torch import convert
    except ImportError as e:
        raise Unavailable(f"{e.name} is not installed (pip install torch onnx2torch)") from None
    if not torch.cuda.is_available():
        raise Unavailable(f"torch {torch.__version__} has no CUDA here")
    device = torch.device("cuda", ordinal)
    module = convert(model).eval().to(device)
    names = [i.name for i in model.graph.input if i.name in feeds]
    inputs = [torch.from_numpy(feeds[n]).to(device) for n in names]
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        module = module.to(dtype)
        inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    result = []

    def run():
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        if not tf32:
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.inference_mode():
                out = module(*inputs)
            torch.cuda.synchronize(device)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
        result[:] = list(out) if isinstance(out, (list, tuple)) else [out]

    return run, lambda: [t.float().cpu().numpy() for t in result]


def matches(ours, ref, precision: str) -> bool:
    for a, b in zip(ours, ref):
        scale = float(np.abs(b).max()) if b.size else 0.0
        if a.shape != b.shape:
            return False
        if precision in ("fp16", "tf32", "bf16"):  # TF32 operands keep 11 significant bits, as float16
            atol = BF16_ATOL if precision == "bf16" else FP16_ATOL
            if not np.all(np.abs(a.astype(np.float32) - b) <= atol * scale):
                return False
        elif not np.allclose(a, b, rtol=RTOL, atol=RTOL * scale):
            return False
    return len(ours) == len(ref)


def worst_error(ours, ref) -> float:
    """The largest |ours - ref| over the outputs, in units of each reference's largest magnitude
    (inf where shapes differ), for the check's MISMATCH note."""
    worst = 0.0
    for a, b in zip(ours, ref):
        if a.shape != b.shape:
            return math.inf
        scale = float(np.abs(b).max()) if b.size else 0.0
        err = float(np.abs(a.astype(np.float32) - b).max()) if b.size else 0.0
        worst = max(worst, err / scale if scale else err)
    return worst


def bench_case(name: str, batch: int, precision: str, arch: str, device: str, repeat: int, budget: str,
               notes: dict, profile: int = 0, tuner: str = "xgb") -> dict:
    """One row: every runtime that runs, timed in alternating rounds (module docstring)."""
    from tvmc.runtime.cuda import cuda_device

    ordinal = cuda_device(device)
    model, feeds = load(name, batch)
    variant = f"{name}:{batch}:{precision}"
    row = {"model": name, "batch": batch, "precision": precision, "gflops": count_gflops(model)}
    runners = {}
    with tempfile.TemporaryDirectory(prefix="tvmc-bench-cuda-") as tmp:
        def tuned():
            records, seconds = tune(model, variant, arch, precision, budget, tuner)
            row["tune_s"] = seconds
            return tvmc_runner(model, feeds, arch, device, tmp, precision, records)

        makers = [("fallback", lambda: tvmc_runner(model, feeds, arch, device, tmp, precision)),
                  ("tvmc", lambda: tvmc_runner(model, feeds, arch, device, tmp, precision, shipped=True))]
        if budget not in ("", "0"):
            makers.append(("tuned", tuned))
        makers += [("ort", lambda: ort_runner(model, feeds, ordinal)),
                   ("torch", lambda: torch_runner(model, feeds, ordinal, precision))]
        if precision == "fp32":
            makers.append(("torch_f32", lambda: torch_runner(model, feeds, ordinal, precision, tf32=False)))
        for key, make in makers:
            try:
                runners[key] = make()
            except Exception as e:  # one runtime failing must not hide the others' numbers
                notes.setdefault(key, set()).add(f"{variant}: {type(e).__name__}: "
                                                 f"{str(e).splitlines()[0] if str(e) else ''}")
    for run, _ in runners.values():
        for _ in range(WARMUP_RUNS):
            run()
    reference = reference_outputs(model, feeds)
    bad = [f"{k} ({worst_error(runners[k][1](), reference):.3g})" for k in ("fallback", "tvmc", "tuned")
           if k in runners and not matches(runners[k][1](), reference, precision)]
    row["check"] = f"MISMATCH {' '.join(bad)}" if bad else "ok"
    times = {k: [] for k in runners}
    for _ in range(repeat):
        for key, (run, _) in runners.items():
            t0 = time.perf_counter()
            run()
            times[key].append((time.perf_counter() - t0) * 1e3)
    for key, ms in times.items():
        row[f"{key}_ms"] = statistics.median(ms)
    for key in ("fallback", "tvmc", "tuned"):
        if profile and key in runners:
            row[f"{key}_profile"] = runners[key][0].profile(profile)
    for ours in ("fallback", "tvmc", "tuned"):
        for theirs in ("ort", "torch", "torch_f32"):
            if f"{ours}_ms" in row and f"{theirs}_ms" in row:
                row[f"{ours}/{theirs}"] = row[f"{ours}_ms"] / row[f"{theirs}_ms"]
    for tuned in ("tvmc", "tuned"):  # the fallback rules against tuned configs (shipped, or tuned here)
        if f"{tuned}_ms" in row and "fallback_ms" in row:
            row[f"fallback/{tuned}"] = row["fallback_ms"] / row[f"{tuned}_ms"]
    return row


COLUMNS = ["model", "batch", "precision", "gflops", "fallback_ms", "tvmc_ms", "tuned_ms", "torch_ms", "torch_f32_ms",
           "ort_ms", "fallback/torch", "tvmc/torch", "tuned/torch", "fallback/tvmc", "fallback/tuned", "tune_s",
           "check"]


def report(rows: list, notes: dict, header: str) -> str:
    def cell(row, key):
        v = row.get(key, "")
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r, k) for k in COLUMNS) + " |" for r in rows]
    lines.append("")
    for key in ("fallback/torch", "tvmc/torch", "tuned/torch", "fallback/torch_f32", "tvmc/torch_f32",
                "tuned/torch_f32", "fallback/tvmc", "fallback/tuned", "tvmc/ort", "tuned/ort"):
        for precision in PRECISIONS:
            ratios = [r[key] for r in rows if key in r and r["precision"] == precision]
            if ratios:
                lines.append(f"geometric mean {key} ({precision}) over {len(ratios)} case(s): "
                             f"{math.exp(statistics.fmean(math.log(x) for x in ratios)):.2f}")
    by = {(r["model"], r["batch"], r["precision"]): r for r in rows}
    for (model, batch, precision), r in sorted(by.items()):
        other = by.get((model, batch, "fp32"))
        if precision != "fp32" and other:
            for key in ("fallback_ms", "tvmc_ms", "tuned_ms"):
                if key in r and key in other:
                    lines.append(f"{model} batch {batch}: {precision} / fp32 {key[:-3]} {r[key] / other[key]:.2f}")
    for r in rows:
        for key in ("fallback", "tvmc", "tuned"):
            for k in r.get(f"{key}_profile", []):
                rate = f"{k['gflop_s']:.0f} GFLOP/s" if k.get("gflop_s") else "-"
                lines.append(f"profile {r['model']} b{r['batch']} {r['precision']} {key}: {k['name']} "
                             f"{k['total_ms']:.3f} ms ({k['share'] * 100:.0f}%, {k['calls']} calls) {rate}")
    for key, why in sorted(notes.items()):
        lines.append(f"{key}: not timed: {'; '.join(sorted(why))}")
    return "\n".join(lines) + "\n"


def _tune_plan(args, models, batches, precisions) -> dict:
    """{variant: budget ("" untuned, "300" trials, "120s" seconds)}."""
    plan = {f"{m}:{b}:{p}": str(args.tune_trials or "") for m in models for b in batches for p in precisions}
    for item in args.tune or ():
        variant, sep, budget = item.rpartition("=")
        if not sep or variant not in plan or not budget.rstrip("s").isdigit():
            raise SystemExit(f"--tune {item!r}: expected MODEL:BATCH:PRECISION=TRIALS (or =SECONDSs) of the "
                             "benchmarked variants")
        plan[variant] = budget
    return plan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    parser.add_argument("--batches", default="1,16", help="comma-separated batch sizes (default 1,16)")
    parser.add_argument("--precisions", default="fp32,fp16",
                        help="comma-separated of fp32, tf32, fp16, bf16 (default fp32,fp16)")
    parser.add_argument("--repeat", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="tvmc tune measurements per variant on this GPU (default 0: untuned only)")
    parser.add_argument("--tune", action="append", metavar="MODEL:BATCH:PRECISION=BUDGET",
                        help="tune budget of one variant, trials (300) or seconds (120s) (repeatable; overrides "
                             "--tune-trials)")
    parser.add_argument("--tuner", default="xgb", help="tvmc tune's tuner (default xgb)")
    parser.add_argument("--device", default="cuda", help="cuda or cuda:ORDINAL (default cuda)")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="list the K most expensive kernels of each tvmc build (default 0: none)")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in BUILT_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(BUILT_MODELS)}")
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if any(p not in PRECISIONS for p in precisions):
        parser.error(f"--precisions {args.precisions!r}: choose from {', '.join(PRECISIONS)}")
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batches {args.batches!r}: expected comma-separated integers")
    plan = _tune_plan(args, models, batches, precisions)

    import tvmc
    from tvmc.errors import ArtifactError
    from tvmc.runtime.cuda import gpu_info

    try:
        gpu, arch = gpu_info(args.device)
    except ArtifactError as e:
        print(f"error: the CUDA benchmark needs an NVIDIA GPU: {e}", file=sys.stderr)
        return 1
    header = (f"tvmc {tvmc.__version__} (target {gpu_target(arch).name}, {arch}, opt level 3) "
              f"vs torch eager and onnxruntime's CUDA EP | "
              f"{gpu} ({args.device}) | {WARMUP_RUNS} warm-up + {args.repeat} alternating runs each, medians")
    print(header, flush=True)
    rows, notes = [], {}
    for name in models:
        for batch in batches:
            for precision in precisions:
                print(f"  {name} batch {batch} {precision} ...", end="", flush=True)
                rows.append(bench_case(name, batch, precision, arch, args.device, args.repeat,
                                       plan[f"{name}:{batch}:{precision}"], notes, args.profile, args.tuner))
                print(f" done: {', '.join(f'{k} {v:.2f}' for k, v in rows[-1].items() if k.endswith('_ms'))} "
                      f"{rows[-1]['check']}", flush=True)
                if args.out:  # the report so far, so that a run stopped by its time limit leaves one
                    Path(args.out).write_text(report(rows, notes, header))
    text = report(rows, notes, header)
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if any(r.get("check", "ok").startswith("MISMATCH") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
