"""Benchmark on an NVIDIA GPU: tvmc's CUDA target against onnxruntime's CUDA execution provider
and torch eager, on the same GPU, side by side in one process (`make bench TARGET=cuda`, or
`python bench/bench_cuda.py [--models a,b] [--batches 1,16] [--repeat N] [--tune-trials N]`).

Models: ResNet-18, MobileNetV2 and the BERT-style encoder of bench/models.py at each batch size.
Per model and batch, one row:

    tvmc_ms      median latency of CUDAExecutor.run() (every kernel launched on the stream, then a
                 wait for the stream), tvmc compiled at opt level 3 for `cuda -mcpu=<this GPU's
                 sm_XY>` with its fallback configs (untuned)
    tuned_ms     the same with the best configs of `tvmc tune` on this GPU (`--tune-trials N`
                 measurements per model and batch, records in bench/results/cuda_records/), when
                 N > 0
    ort_ms       median latency of InferenceSession.run_with_iobinding() with the
                 CUDAExecutionProvider, inputs and outputs bound on the GPU (no host copies, as
                 tvmc and torch); needs onnxruntime-gpu
    torch_ms     median latency of the model converted by onnx2torch, on the GPU, in
                 torch.inference_mode, then torch.cuda.synchronize(); needs torch with CUDA
    ratios       tvmc (untuned, tuned) / onnxruntime and / torch: below 1, tvmc is faster
    check        'ok' when tvmc's outputs equal onnxruntime's on the GPU (rtol 1e-3, atol 1e-3 x
                 the largest magnitude), else 'MISMATCH'

Every runtime sees the same inputs (seeded), has 3 untimed warm-up runs, then `--repeat`
rounds each time one run of every runtime in turn (perf_counter around one call), so that drifts
touch all alike; times are medians. A runtime that is not installed or fails on a model leaves
its cells empty with the reason below the table. Geometric means of the ratios close the report.
Without a GPU the script stops at once, saying why.
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
WARMUP_RUNS = 3
RTOL = 1e-3
RECORDS_DIR = Path(__file__).resolve().parent / "results" / "cuda_records"


class Unavailable(Exception):
    """A runtime that cannot run here (not installed, no CUDA in it): its cells stay empty."""


def load(name: str, batch: int) -> tuple:
    """(ModelProto, feeds) of a bench model at `batch`."""
    build, feeds = BUILT_MODELS[name]
    model = build(batch=batch)
    return model, (feeds(batch=batch) if feeds else model_inputs(model))


def tvmc_runner(model, feeds, arch: str, device: str, folder: str, records: str | None = None):
    """(run, outputs) of tvmc's CUDAExecutor for `model` compiled for `cuda -mcpu=arch`."""
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.package import save_artifact
    from tvmc.runtime.cuda import CUDAExecutor
    from tvmc.target import resolve_target

    module = compile_model(model, resolve_target(f"cuda -mcpu={arch}"), CompileOptions(opt_level=3,
                                                                                       tuning_records=records))
    ex = CUDAExecutor(save_artifact(module, Path(folder, "tuned.tar" if records else "mod.tar")), device)
    for k, v in feeds.items():
        ex.set_input(k, v)
    return ex.run, lambda: [ex.get_output(i) for i in range(ex.num_outputs)]


def tune(model, name: str, batch: int, arch: str, trials: int) -> str:
    """Tune `model`'s tasks on this GPU (xgb tuner, `trials` measurements in all); the records path."""
    from tvmc.autotune.task import extract_tasks
    from tvmc.autotune.tune import TuneOptions, tune_tasks
    from tvmc.target import resolve_target

    target = resolve_target(f"cuda -mcpu={arch}")
    RECORDS_DIR.mkdir(parents=True, exist_ok=True)
    path = RECORDS_DIR / f"{name}_b{batch}_{arch}.json"
    tune_tasks(extract_tasks(model, target), target, str(path), TuneOptions(trials=trials))
    return str(path)


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


def torch_runner(model, feeds, ordinal: int):
    """(run, outputs) of torch eager on the model converted by onnx2torch."""
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
    result = []

    def run():
        with torch.inference_mode():
            out = module(*inputs)
        torch.cuda.synchronize(device)
        result[:] = list(out) if isinstance(out, (list, tuple)) else [out]

    return run, lambda: [t.cpu().numpy() for t in result]


def same(ours, theirs) -> bool:
    for a, b in zip(ours, theirs):
        atol = RTOL * float(np.abs(b).max()) if b.size else 0.0
        if a.shape != b.shape or not np.allclose(a, b, rtol=RTOL, atol=atol):
            return False
    return len(ours) == len(theirs)


def bench_case(name: str, batch: int, arch: str, device: str, repeat: int, trials: int, notes: dict) -> dict:
    """One row: every runtime that runs, timed in alternating rounds (module docstring)."""
    from tvmc.runtime.cuda import cuda_device

    ordinal = cuda_device(device)
    model, feeds = load(name, batch)
    row = {"model": name, "batch": batch, "gflops": count_gflops(model)}
    runners = {}
    with tempfile.TemporaryDirectory(prefix="tvmc-bench-cuda-") as tmp:
        makers = [("tvmc", lambda: tvmc_runner(model, feeds, arch, device, tmp))]
        if trials:
            makers.append(("tuned", lambda: tvmc_runner(model, feeds, arch, device, tmp,
                                                        tune(model, name, batch, arch, trials))))
        makers += [("ort", lambda: ort_runner(model, feeds, ordinal)), ("torch", lambda: torch_runner(model, feeds, ordinal))]
        for key, make in makers:
            try:
                runners[key] = make()
            except Exception as e:  # one runtime failing must not hide the others' numbers
                notes.setdefault(key, set()).add(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    for run, _ in runners.values():
        for _ in range(WARMUP_RUNS):
            run()
    if "ort" in runners:
        reference = runners["ort"][1]()
        row["check"] = " ".join(k for k in ("tvmc", "tuned") if k in runners and not same(runners[k][1](), reference))
        row["check"] = f"MISMATCH {row['check']}" if row["check"] else "ok"
    times = {k: [] for k in runners}
    for _ in range(repeat):
        for key, (run, _) in runners.items():
            t0 = time.perf_counter()
            run()
            times[key].append((time.perf_counter() - t0) * 1e3)
    for key, ms in times.items():
        row[f"{key}_ms"] = statistics.median(ms)
    for ours in ("tvmc", "tuned"):
        for theirs in ("ort", "torch"):
            if f"{ours}_ms" in row and f"{theirs}_ms" in row:
                row[f"{ours}/{theirs}"] = row[f"{ours}_ms"] / row[f"{theirs}_ms"]
    return row


COLUMNS = ["model", "batch", "gflops", "tvmc_ms", "tuned_ms", "ort_ms", "torch_ms", "tvmc/ort", "tuned/ort",
           "tvmc/torch", "tuned/torch", "check"]


def report(rows: list, notes: dict, header: str) -> str:
    def cell(row, key):
        v = row.get(key, "")
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r, k) for k in COLUMNS) + " |" for r in rows]
    lines.append("")
    for key in ("tvmc/ort", "tuned/ort", "tvmc/torch", "tuned/torch"):
        ratios = [r[key] for r in rows if key in r]
        if ratios:
            lines.append(f"geometric mean {key} over {len(ratios)} case(s): "
                         f"{math.exp(statistics.fmean(math.log(x) for x in ratios)):.2f}")
    for key, why in sorted(notes.items()):
        lines.append(f"{key}: not timed: {'; '.join(sorted(why))}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    parser.add_argument("--batches", default="1,16", help="comma-separated batch sizes (default 1,16)")
    parser.add_argument("--repeat", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="tvmc tune measurements per model and batch on this GPU (default 0: untuned only)")
    parser.add_argument("--device", default="cuda", help="cuda or cuda:ORDINAL (default cuda)")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in BUILT_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(BUILT_MODELS)}")
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batches {args.batches!r}: expected comma-separated integers")

    import tvmc
    from tvmc.errors import ArtifactError
    from tvmc.runtime.cuda import gpu_info

    try:
        gpu, arch = gpu_info(args.device)
    except ArtifactError as e:
        print(f"error: the CUDA benchmark needs an NVIDIA GPU: {e}", file=sys.stderr)
        return 1
    header = (f"tvmc {tvmc.__version__} (cuda -mcpu={arch}, opt level 3) vs onnxruntime CUDA EP vs torch eager | "
              f"{gpu} ({args.device}) | {WARMUP_RUNS} warm-up + {args.repeat} alternating runs each, medians")
    print(header, flush=True)
    rows, notes = [], {}
    for name in models:
        for batch in batches:
            print(f"  {name} batch {batch} ...", end="", flush=True)
            rows.append(bench_case(name, batch, arch, args.device, args.repeat, args.tune_trials, notes))
            print(" done", flush=True)
    text = report(rows, notes, header)
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if any(r.get("check", "ok").startswith("MISMATCH") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
