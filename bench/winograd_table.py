"""Benchmark that writes the conv2d cost tables configs/winograd/<target>.json: per CPU target and
workload class of 3x3 stride-1 convolutions, the measured time of each implementation, which
tvmc.ops.cpu.conv2d_winograd.winograd_tile_size reads to pick the form (and AlterOpLayout's size
budget to rank the convs by time saved per extra weight byte).

`make winograd-table`, or `python bench/winograd_table.py [--targets x86,x86-avx2,x86-64]
[--repeat N] [--classes 64x64x56,...]`.

Per target and class CxOxH (C input channels, O output channels, an H x H image, batch 1,
padding 1) a one-node model Conv(X, W) (bench/layers.conv_model) is compiled four times at opt
level 3, without tuning records:
    direct     nn.conv2d_nchwc, its fallback config (AlterOpLayout.winograd_tile_size=0)
    im2col     nn.conv2d_nchwc with the conv2d_nchwc_im2col.cpu implementation and its fallback
               config (the implementation that tuning records can select; here forced by
               preferring it in tvmc.ops.fused._choose_implementation inside this process only)
    winograd2  nn.conv2d_winograd_nchwc F(2x2, 3x3) (AlterOpLayout.winograd_tile_size=2)
    winograd4  nn.conv2d_winograd_nchwc F(4x4, 3x3) (AlterOpLayout.winograd_tile_size=4)
Each build is loaded and run with 1 thread: 2 warm-up runs, then --repeat rounds each timing one
run of every build in turn (so load drifts touch all alike); the table keeps the minimum in ms.
A target this host cannot run (Target.host_features missing from /proc/cpuinfo) is skipped with
a message; ARM descriptors cannot be measured on x86 and have no table (winograd_tile_size keeps
its register-count rule for them).

The JSON (schema: configs/winograd/schema.json) holds the target name, the host's CPU model, the
thread count, the generator and one entry per class: {"C", "O", "H", "W", "times_ms": {form: ms}}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from layers import conv_model  # noqa: E402  (bench/ is the script's directory)

# ResNet/VGG-style classes (C = O) plus channel-changing and small-image ones: the lookup takes the
# nearest class in log2 space (tvmc.ops.cpu.conv2d_winograd.nearest_cost_entry).
DEFAULT_CLASSES = ("32x32x112", "64x64x56", "64x64x28", "128x128x28", "128x128x14", "256x256x14",
                   "256x256x7", "512x512x7", "64x128x56", "256x512x14")
FORMS = ("direct", "im2col", "winograd2", "winograd4")
DEFAULT_TARGETS = ("x86", "x86-avx2", "x86-64")


@contextlib.contextmanager
def prefer_im2col():
    """Inside the block, lower_functions takes conv2d_nchwc_im2col.cpu (fallback config) for
    nn.conv2d_nchwc when the op offers it; restored on exit."""
    from tvmc.ops import fused

    original = fused._choose_implementation

    def choose(anchor, target, config_lookup):
        impl, cfg = original(anchor, target, config_lookup)
        if anchor.op == "nn.conv2d_nchwc":
            from tvmc.ops.fused import workload
            from tvmc.ops.registry import get_op

            impls = get_op(anchor.op).implementations(target.family, workload(anchor), target)
            impl = next((i for i in impls if i.name == "conv2d_nchwc_im2col.cpu"), impl)
            cfg = None
        return impl, cfg

    fused._choose_implementation = choose
    try:
        yield
    finally:
        fused._choose_implementation = original


def build(model, target: str, form: str, folder: str):
    """GraphExecutor of `model` compiled for `target` in `form` (one of FORMS)."""
    import tvmc
    from tvmc.runtime import GraphExecutor

    m = {"direct": 0, "im2col": 0, "winograd2": 2, "winograd4": 4}[form]
    config = {"AlterOpLayout.winograd_tile_size": m, "AlterOpLayout.size_budget": 0}
    out = Path(folder, f"{target}-{form}.tar")
    with prefer_im2col() if form == "im2col" else contextlib.nullcontext():
        result = tvmc.compile(model, target, out, opt_level=3, pass_config=config)
    return GraphExecutor(result.output)


def measure_class(c: int, o: int, h: int, target: str, repeat: int) -> dict:
    """{form: minimum ms of one run at 1 thread} of the 3x3 stride-1 conv C -> O on H x H."""
    from tvmc.runtime import GraphExecutor

    model = conv_model(c, h, h, o, 3, 1, 1)
    x = np.random.default_rng(1).random((1, c, h, h), dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="tvmc-wino-") as tmp:
        executors = {f: build(model, target, f, tmp) for f in FORMS}
    GraphExecutor.set_num_threads(1)
    for ex in executors.values():
        ex.set_input("X", x)
        ex.run()
        ex.run()
    ref = executors["direct"].get_output(0)
    for form, ex in executors.items():
        if not np.allclose(ex.get_output(0), ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max())):
            raise RuntimeError(f"{target} {c}x{o}x{h}: {form} output differs from direct")
    best = {f: float("inf") for f in FORMS}
    for _ in range(repeat):
        for form, ex in executors.items():
            t0 = time.perf_counter()
            ex.run()
            best[form] = min(best[form], (time.perf_counter() - t0) * 1e3)
    return {f: round(best[f], 4) for f in FORMS}


def cpu_model() -> str:
    """'model name' of /proc/cpuinfo, else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def format_table(table: dict) -> str:
    """The JSON text of a cost table: one line per key, one line per entry (diffs stay readable)."""
    head = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in table.items() if k != "entries"]
    entries = ",\n".join(f"  {json.dumps(e)}" for e in table["entries"])
    return "{\n" + ",\n".join(head) + ',\n "entries": [\n' + entries + "\n ]\n}\n"


def main(argv=None) -> int:
    """Measure the classes for each target and write configs/winograd/<target>.json; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    parser.add_argument("--classes", default=",".join(DEFAULT_CLASSES), help="CxOxH, comma-separated")
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--out-dir", default=str(ROOT / "configs" / "winograd"))
    args = parser.parse_args(argv)
    from tvmc.target import resolve_target

    classes = [tuple(int(v) for v in s.split("x")) for s in args.classes.split(",") if s.strip()]
    host = set(open("/proc/cpuinfo").read().split())
    for name in [t for t in args.targets.split(",") if t.strip()]:
        target = resolve_target(name)
        missing = sorted(set(target.host_features) - host)
        if missing:
            print(f"{name}: skipped, this host lacks {missing}")
            continue
        entries = []
        for c, o, h in classes:
            times = measure_class(c, o, h, name, args.repeat)
            entries.append({"C": c, "O": o, "H": h, "W": h, "times_ms": times})
            best = min(times, key=times.get)
            print(f"{name} {c}x{o}x{h}: " + ", ".join(f"{f} {t:.3f}" for f, t in times.items()) + f" -> {best}",
                  flush=True)
        table = {"target": name, "host_cpu": cpu_model(), "threads": 1, "kernel": "3x3 stride 1 padding 1, batch 1",
                 "generated_by": "bench/winograd_table.py", "entries": entries}
        path = Path(args.out_dir, f"{name}.json")
        path.write_text(format_table(table))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
