"""Benchmark: tvmc's CPU builds against onnxruntime on the onnx package's nine light model-zoo
networks plus a ResNet-18, a MobileNetV2 and a BERT-style encoder that bench/models.py builds.

Each model is compiled for every shipped CPU descriptor of this host's architecture (`--targets`;
default on x86-64: x86, x86-avx2, x86-64, i.e. AVX-512, AVX2 + FMA, baseline SSE4.2; on aarch64:
arm-neoverse-n1, arm-cortex-a72, arm) that this host can run, i.e. whose derived CPU
features (Target.host_features) are all in /proc/cpuinfo; a descriptor the host cannot run is
named in the header with the features it lacks, and its columns say "n/a". What it measures, per
model and thread count (`make bench`, or `python bench/bench.py [--threads 1,2] [--models a,b]
[--targets x86-avx2] [--repeat N]`); each build is timed at every thread count, one table per
thread count, the builds side by side:

    gflops       work of one inference in GFLOP: 2 * multiply-accumulates of every Conv, Gemm
                 and MatMul, counted from the ONNX graph with shapes from onnx.shape_inference
                 (elementwise ops, pooling, normalization are not counted)
    ort_ms       median latency of InferenceSession.run() in milliseconds (CPUExecutionProvider,
                 intra-op threads = --threads, inter-op threads 1, all graph optimizations)
    <target> ms  median latency of GraphExecutor.run() in milliseconds of the build for that
                 descriptor (compiled at opt level 3 through the Python API, saved to a mod.tar
                 and loaded back)
    /ORT         <target> ms / ort_ms (below 1: tvmc is faster)
    GFLOP/s      achieved GFLOP/s of the widest build that ran: gflops / (ms / 1000)
    compile_s    wall seconds of compile_model + save_artifact, summed over the builds
    others       cores that other processes kept busy during the timed rounds (/proc/stat busy
                 time minus this process's CPU time); above 0.1 the model is timed again, up to
                 --retries times, 10 s apart, and the table names it if it stays above
    check        'ok' when every build's final output, and the tensor feeding the final Softmax
                 when there is one, equal onnxruntime's (np.allclose, rtol 1e-3, atol 1e-3 x the
                 tensor's largest magnitude: float32 rounding of values near zero, as in layer
                 norm outputs, scales with the tensor, not with the value); else 'MISMATCH'.
                 The light models hold constant weights, so their Softmax output is uniform
                 whatever the input; the pre-Softmax tensor is the informative one. It is added
                 as an extra graph output to the model both runtimes execute.

How: both runtimes live in this one process and see the same input (numpy default_rng(0),
uniform [0, 1), float32; the BERT encoder: bench/models.bert_inputs). Each does 2 untimed
warm-up runs per thread count; then `--repeat` rounds follow, each timing one run of every tvmc
build and then one onnxruntime run (perf_counter around a single call), so that drifts in
machine load touch all alike. Reported times are medians over the rounds.
tvmc's thread count is set with GraphExecutor.set_num_threads (libgomp), onnxruntime's with its
session options. onnxruntime runs with `session.force_spinning_stop`: its threads still spin
inside a run, but stop when the run returns, so they do not steal the cores of the tvmc run
that follows. Timings need an otherwise idle machine: the header shows the load average.
Each table ends with the geometric mean of each build's ratios over the models that ran.
Per-layer numbers of ResNet-18 against the machine's peak: bench/layers.py (`make bench-layers`).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from models import BUILT_MODELS  # noqa: E402  (bench/ is the script's directory)

LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512"]
ALL_MODELS = LIGHT_MODELS + list(BUILT_MODELS)
WARMUP_RUNS = 2
RTOL = 1e-3
MAX_OTHER_LOAD = 0.1   # cores: above this, another process competed with the timed runs
RETRY_WAIT_S = 10.0
OPT_LEVEL = 3
# shipped CPU descriptors per host architecture, widest first: the GFLOP/s column is the first that ran
TARGETS_BY_ARCH = {"x86_64": ("x86", "x86-avx2", "x86-64"), "aarch64": ("arm-neoverse-n1", "arm-cortex-a72", "arm")}


def light_model_path(name: str) -> Path:
    """Path of light_<name>.onnx inside the installed onnx package."""
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def load_model(name: str) -> tuple:
    """(ModelProto, feeds dict or None for model_inputs' default) of a light or built model."""
    if name in BUILT_MODELS:
        build, feeds = BUILT_MODELS[name]
        return build(), (feeds() if feeds else None)
    return onnx.load(str(light_model_path(name))), None


# ---------------------------------------------------------------------------------------------
# Work count


def _shape(value_info) -> list | None:
    dims = value_info.type.tensor_type.shape.dim
    if not dims or any(not d.HasField("dim_value") for d in dims):
        return None
    return [d.dim_value for d in dims]


def count_gflops(model: onnx.ModelProto) -> float:
    """GFLOP of one inference: 2 * MACs of Conv (ONNX Conv), Gemm and MatMul nodes.

    Conv:   prod(Y shape) * prod(W shape[1:])           (W is [M, C/group, kH, kW])
    Gemm:   M * N * K, K from A's shape and transA
    MatMul: prod(Y shape) * K, K the last dim of A
    Shapes come from onnx.shape_inference; a node whose shapes stay unknown counts 0.
    """
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    shapes = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        s = _shape(v)
        if s is not None:
            shapes[v.name] = s
    for t in g.initializer:
        shapes.setdefault(t.name, list(t.dims))

    macs = 0
    for node in g.node:
        if node.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        a, b, y = (shapes.get(node.input[0]), shapes.get(node.input[1]), shapes.get(node.output[0]))
        if a is None or b is None or y is None:
            continue
        if node.op_type == "Conv":
            macs += math.prod(y) * math.prod(b[1:])
        elif node.op_type == "Gemm":
            trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
            k = a[0] if trans_a else a[1]
            macs += math.prod(y) * k
        else:
            macs += math.prod(y) * a[-1]
    return 2 * macs / 1e9


# ---------------------------------------------------------------------------------------------
# Runtimes


def expose_pre_softmax(model: onnx.ModelProto) -> tuple:
    """Add the tensor feeding the last Softmax as an extra graph output.

    Returns (model, [names of the outputs to compare]): the original outputs, plus that tensor
    when the model has a Softmax.
    """
    names = [o.name for o in model.graph.output]
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if not softmax:
        return model, names
    name = softmax[-1].input[0]
    inferred = onnx.shape_inference.infer_shapes(model)
    info = next(v for v in inferred.graph.value_info if v.name == name)
    model.graph.output.append(info)
    return model, names + [name]


def model_inputs(model: onnx.ModelProto) -> dict:
    """{name: array} for every graph input that is not an initializer: uniform [0, 1), seed 0."""
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        feeds[v.name] = rng.random(shape).astype(dtype)
    return feeds


def runnable(targets) -> dict:
    """{target name: None when this host runs its code, else why not} for shipped descriptors:
    the code's CPU features (Target.host_features, derived from its cpu and features) must all be
    in /proc/cpuinfo, as `tvmc run` demands."""
    from tvmc.runtime.executor import host_cpu_flags
    from tvmc.target import host_arch, resolve_target

    flags = host_cpu_flags() or set()
    out = {}
    for name in targets:
        target = resolve_target(name)
        missing = [f for f in target.host_features if f not in flags]
        if target.arch != host_arch():
            out[name] = f"compiled for {target.arch}, this host is {host_arch()}"
        elif missing:
            out[name] = f"this CPU lacks {', '.join(missing)}"
        else:
            out[name] = None
    return out


def build_tvmc(model: onnx.ModelProto, folder: str, target: str):
    """Compile for `target` at OPT_LEVEL, save mod.tar in `folder`, load it. Returns (executor, compile_s)."""
    import tvmc
    from tvmc.runtime import GraphExecutor

    t0 = time.perf_counter()
    result = tvmc.compile(model, target, Path(folder, f"{target}.tar"), opt_level=OPT_LEVEL)
    compile_s = time.perf_counter() - t0
    return GraphExecutor(result.output), compile_s


def build_ort(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # the light models carry unused initializers; ORT warns about each
    # ORT's pool threads otherwise keep spinning for tens of ms after run() returns, taking the
    # cores from the tvmc run that follows (3x slower on squeezenet with 2 threads on 2 cores).
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


class OtherLoad:
    """CPU used by other processes since construction, from /proc/stat (all CPUs' busy time)
    minus this process's own CPU time (os.times, all its threads); Linux only."""

    def __init__(self):
        self.start = (self._busy_s(), self._own_s(), time.perf_counter())

    @staticmethod
    def _busy_s() -> float:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return float("nan")
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait

    @staticmethod
    def _own_s() -> float:
        t = os.times()
        return t.user + t.system

    def cores(self) -> float:
        """Average number of cores other processes kept busy (0 on an idle machine)."""
        busy0, own0, t0 = self.start
        elapsed = time.perf_counter() - t0
        return max(0.0, (self._busy_s() - busy0) - (self._own_s() - own0)) / elapsed if elapsed > 0 else 0.0


def _timed_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _matches(ex, ort_out: dict, compared) -> bool:
    for out in compared:
        ours = ex.get_output(out)
        want = ort_out[out]
        # atol: outputs near zero (layer norms, logits) carry float32 rounding of their scale
        atol = RTOL * float(np.abs(want).max()) if want.size else 0.0
        if ours.shape != want.shape or not np.allclose(ours, want, rtol=RTOL, atol=atol):
            return False
    return True


def bench_model(name: str, targets: list, threads_list: list, repeat: int, retries: int = 0) -> list:
    """Compile one model for each of `targets` (runnable here), check every build, then time the
    builds and onnxruntime side by side at each thread count; one table row (dict) per thread
    count, in the order of `threads_list`. A timing during which other processes used more than
    MAX_OTHER_LOAD cores is repeated up to `retries` times."""
    from tvmc.runtime import GraphExecutor

    model, feeds = load_model(name)
    gflops = count_gflops(model)
    model, compared = expose_pre_softmax(model)
    feeds = feeds if feeds is not None else model_inputs(model)

    builds, compile_s = {}, 0.0
    with tempfile.TemporaryDirectory(prefix="tvmc-bench-") as tmp:
        for target in targets:
            builds[target], seconds = build_tvmc(model, tmp, target)
            compile_s += seconds
    for ex in builds.values():
        for k, v in feeds.items():
            ex.set_input(k, v)
    rows = []
    for threads in threads_list:
        row = {"model": name, "gflops": gflops, "compile_s": compile_s}
        GraphExecutor.set_num_threads(threads)
        sess = build_ort(model, threads)
        ort_names = [o.name for o in sess.get_outputs()]

        def run_ort(sess=sess, ort_names=ort_names):
            return sess.run(ort_names, feeds)

        for _ in range(WARMUP_RUNS):
            for ex in builds.values():
                ex.run()
            run_ort()

        ort_out = dict(zip(ort_names, run_ort()))
        row["check"] = "ok" if all(_matches(ex, ort_out, compared) for ex in builds.values()) else "MISMATCH"

        for attempt in range(retries + 1):
            busy = OtherLoad()
            tvmc_ms, ort_ms = {t: [] for t in builds}, []
            for _ in range(repeat):
                for target, ex in builds.items():
                    tvmc_ms[target].append(_timed_ms(ex.run))
                ort_ms.append(_timed_ms(run_ort))
            row["others"] = busy.cores()
            if row["others"] <= MAX_OTHER_LOAD or attempt == retries:
                break
            time.sleep(RETRY_WAIT_S)  # another process took a core: wait, then time the model again
        row["ort_ms"] = statistics.median(ort_ms)
        for target, samples in tvmc_ms.items():
            row[f"{target}_ms"] = statistics.median(samples)
            row[f"{target}_ratio"] = row[f"{target}_ms"] / row["ort_ms"]
        widest = next(iter(builds))
        row["tvmc_gflop_s"] = row["gflops"] / (row[f"{widest}_ms"] / 1e3)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# Report

def columns(targets) -> list:
    """(key, header, format) of the table's columns: onnxruntime, then each build and its ratio."""
    per_target = [c for t in targets for c in ((f"{t}_ms", f"{t} ms", "{:.2f}"), (f"{t}_ratio", "/ORT", "{:.2f}"))]
    return [("model", "model", "{}"), ("gflops", "GFLOPs", "{:.2f}"), ("ort_ms", "ORT ms", "{:.2f}"), *per_target,
            ("tvmc_gflop_s", "GFLOP/s", "{:.1f}"), ("compile_s", "compile s", "{:.1f}"), ("others", "others", "{:.2f}"),
            ("check", "check", "{}")]


def _cells(row: dict, cols: list) -> list:
    if "error" in row:
        return [row["model"]] + [""] * (len(cols) - 2) + [row["error"]]
    return [fmt.format(row[key]) if key in row else "n/a" for key, _, fmt in cols]


def print_table(rows: list, targets) -> None:
    cols = columns(targets)
    headers = [h for _, h, _ in cols]
    cells = [_cells(r, cols) for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(values):
        out = []
        for i, (v, w) in enumerate(zip(values, widths)):
            if i == len(values) - 1:
                out.append(v)
            else:
                out.append(v.ljust(w) if i == 0 else v.rjust(w))
        return "  ".join(out).rstrip()

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for c in cells:
        print(line(c))


def host_summary(threads: str, repeat: int) -> str:
    import onnxruntime as ort

    import tvmc

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"tvmc {tvmc.__version__} (opt level {OPT_LEVEL}) vs onnxruntime {ort.__version__} "
            f"(CPUExecutionProvider) | {cpu}, {os.cpu_count()} cpus | threads {threads} | "
            f"{WARMUP_RUNS} warm-up + {repeat} alternating runs each, medians | "
            f"load average {os.getloadavg()[0]:.2f}")


def geomean(values) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated thread counts for both runtimes, one table each (default 1,2)")
    parser.add_argument("--models", default=",".join(ALL_MODELS),
                        help=f"comma-separated model names (default: all: {', '.join(ALL_MODELS)})")
    from tvmc.target import host_arch

    known = TARGETS_BY_ARCH.get(host_arch(), ())
    parser.add_argument("--targets", default=",".join(known),
                        help=f"comma-separated shipped CPU descriptors of this host's architecture to build "
                             f"(default: {','.join(known) or 'none for ' + host_arch()}); those this host cannot "
                             f"run are reported, not built")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per runtime (default 10)")
    parser.add_argument("--retries", type=int, default=3,
                        help=f"re-time a model up to N times when other processes used more than {MAX_OTHER_LOAD} "
                             "cores during its timed runs (default 3)")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ALL_MODELS)}")
    try:
        threads_list = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--threads {args.threads!r}: expected comma-separated integers")
    if not threads_list or min(threads_list) < 1 or args.repeat < 1:
        parser.error("--threads and --repeat must be at least 1")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in known]
    if unknown or not targets:
        parser.error(f"--targets: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")

    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    print(host_summary(args.threads, args.repeat), flush=True)
    why_not = runnable(targets)
    for target, reason in why_not.items():
        if reason:
            print(f"{target}: built code cannot run here ({reason}); its columns say n/a", flush=True)
    built = [t for t in targets if why_not[t] is None]
    if not built:
        print("none of the targets runs on this host", file=sys.stderr)
        return 1
    if os.getloadavg()[0] > 0.5:
        print(f"warning: load average {os.getloadavg()[0]:.2f} > 0.5: other processes share the cores, so the "
              "timings (most of all with as many threads as cores) say little", flush=True)
    tables = {t: [] for t in threads_list}
    for name in models:
        print(f"  {name} ...", end="", flush=True)
        try:
            rows = bench_model(name, built, threads_list, args.repeat, args.retries)
        except Exception as e:  # one failing model must not hide the others' numbers
            error = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rows = [{"model": name, "error": error} for _ in threads_list]
        for t, row in zip(threads_list, rows):
            tables[t].append(row)
        print(" done" if "error" not in rows[0] else " failed", flush=True)

    bad = False
    for threads, rows in tables.items():
        print(f"\n{threads} thread{'s' if threads > 1 else ''}:")
        print_table(rows, targets)
        for target in built:
            ratios = [r[f"{target}_ratio"] for r in rows if f"{target}_ratio" in r]
            if ratios:
                print(f"geometric mean {target}/ORT over {len(ratios)} model(s), {threads} thread(s): "
                      f"{geomean(ratios):.2f}")
        if len(built) > 1:
            for other in built[1:]:
                pairs = [r[f"{other}_ms"] / r[f"{built[0]}_ms"] for r in rows if f"{other}_ms" in r]
                if pairs:
                    print(f"geometric mean {other} ms / {built[0]} ms: {geomean(pairs):.2f}")
        loaded = [r["model"] for r in rows if r.get("others", 0.0) > MAX_OTHER_LOAD]
        if loaded:
            print(f"timed while other processes kept more than {MAX_OTHER_LOAD} cores busy (not meaningful): "
                  f"{', '.join(loaded)}")
        mismatches = [r["model"] for r in rows if r.get("check") == "MISMATCH"]
        if mismatches:
            print(f"outputs differ from onnxruntime: {', '.join(mismatches)}")
        bad = bad or bool(mismatches) or any("error" in r for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
