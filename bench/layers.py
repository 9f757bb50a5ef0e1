"""Benchmark: every conv2d layer of ResNet-18 (bench/models.resnet18) and the grouped ones of
ShuffleNet (the onnx package's light_shufflenet) compiled on their own, tvmc's achieved
GFLOP/s against the machine's fp32 peak and against onnxruntime (this host's CPU: x86-64 or
aarch64).

`make bench-layers [TARGET=x86-avx2]`, or `python bench/layers.py [--target T] [--threads 1,2] [--repeat N]`.

Per distinct conv layer (input shape, output channels, kernel, stride, groups; `x N` when the
network has N such layers) a one-node model Conv(X, W) with the network's shapes and seeded random
weights is compiled with tvmc for --target (default native, this host) at opt level 3 and run,
alternating with onnxruntime, after two warm-up runs; times are medians. Columns: GFLOP (2 x
multiply-accumulates), tvmc ms and ORT ms (the whole one-node model), /ORT, conv ms (the
convolution's own kernels in tvmc's profile, without the layout transforms between the model's
NCHW tensors and the NCHW[x]c convolution, which inside a network its neighbours do not need),
conv GFLOP/s and % of peak (of those kernels), ORT GFLOP/s.

Peak (fp32, the threads used): threads x the per-core peak measured here (measured_peak_gflops):
an FMA loop (GCC vector extensions, the target's float32 lanes per vector, FMA_CHAINS independent
accumulators so that every FMA port stays busy through the FMA latency), compiled by gcc with
-O2 -march=native and timed at 1 thread, best of PEAK_RUNS; --peak-gflops sets it instead. (It
replaces the formula clock x 2 FMA units x lanes x 2 = 166 GFLOP/s at the nominal 2.6 GHz, which
fits no host: issue 30's measured ~116; on an Intel Xeon guest the loop gave 214 with 16 lanes,
turbo above the nominal clock, and 114 with 8.)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench import WARMUP_RUNS, build_ort, build_tvmc  # noqa: E402  (bench/ is the script's directory)


def conv_layers(model: onnx.ModelProto, grouped_only: bool = False) -> list:
    """[[count, C, H, W, O, K, stride, pad, groups]] of `model`'s 2-D convolutions (square kernels,
    symmetric pads), in network order, one entry per distinct shape; `grouped_only`: only those
    with 1 < groups < C (grouped, not depthwise)."""
    model = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.input) + list(model.graph.value_info)}
    weights = {**shapes, **{t.name: list(t.dims) for t in model.graph.initializer}}
    layers, seen = [], {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        _, c, h, w = shapes[node.input[0]]
        o, _, k, _ = weights[node.input[1]]
        groups = attrs.get("group", 1)
        if grouped_only and not 1 < groups < c:
            continue
        key = (c, h, w, o, k, attrs.get("strides", [1])[0], attrs.get("pads", [0])[0], groups)
        if key in seen:
            layers[seen[key]][0] += 1
            continue
        seen[key] = len(layers)
        layers.append([1, *key])
    return layers


def bench_layers() -> list:
    """[(name, count, C, H, W, O, K, stride, pad, groups)]: ResNet-18's convolutions (conv1..)
    and then the grouped ones of ShuffleNet (light_shufflenet, gconv1..), each distinct shape
    once."""
    from bench import light_model_path
    from models import resnet18

    layers = [(f"conv{i + 1}", *x) for i, x in enumerate(conv_layers(resnet18()))]
    shufflenet = onnx.load(str(light_model_path("shufflenet")))
    return layers + [(f"gconv{i + 1}", *x) for i, x in enumerate(conv_layers(shufflenet, grouped_only=True))]


def conv_model(c, h, w, o, k, stride, pad, groups=1, seed=0) -> onnx.ModelProto:
    """A one-node model Conv(X [1, C, H, W], W [O, C/groups, K, K]) with seeded He-scaled weights."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((o, c // groups, k, k)) * np.sqrt(2 / (c // groups * k * k))
    weight = numpy_helper.from_array(values.astype(np.float32), "W")
    node = helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4,
                            group=groups)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, o, oh, ow])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# Independent accumulators of the FMA loop (PEAK_SOURCE's CHAINS): at least FMA latency (4 cycles)
# x FMA ports (2).
FMA_CHAINS = 12
PEAK_RUNS = 5
PEAK_SOURCE = r"""
typedef float vf __attribute__((vector_size(LANES * 4)));
#define CHAINS 12
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECLARE(j) vf a##j = b * (float)j;
#define STEP(j) a##j = a##j * b + c;
#define SUM(j) s += a##j;
double fma_loop(long iters) {
    vf b = {0}, c = {0}, s = {0};
    b += 0.999f; c += 0.001f;
    EACH(DECLARE)
    for (long i = 0; i < iters; i++) { EACH(STEP) }
    EACH(SUM)
    double sum = 0;
    for (int k = 0; k < LANES; k++) sum += s[k];
    return sum;
}
"""


def measured_peak_gflops(lanes: int, iters: int = 20_000_000) -> float:
    """fp32 GFLOP/s of one core running FMAs on `lanes`-wide vectors (PEAK_SOURCE, compiled with
    gcc -O2 -march=native -ffp-contract=fast into a temporary library, loaded with ctypes): the
    best of PEAK_RUNS runs of `iters` x FMA_CHAINS FMAs (2 FLOP per lane each). Raises
    subprocess.CalledProcessError when gcc fails."""
    import ctypes
    import subprocess

    with tempfile.TemporaryDirectory(prefix="tvmc-peak-") as tmp:
        src, lib = os.path.join(tmp, "fma.c"), os.path.join(tmp, "fma.so")
        with open(src, "w") as f:
            f.write(PEAK_SOURCE)
        subprocess.run(["gcc", "-O2", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC",
                        f"-DLANES={lanes}", src, "-o", lib], check=True)
        fn = ctypes.CDLL(lib).fma_loop
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_long]
        fn(iters // 10)  # warm-up: clocks up, pages in
        best = math.inf
        for _ in range(PEAK_RUNS):
            t0 = time.perf_counter()
            fn(iters)
            best = min(best, time.perf_counter() - t0)
    return iters * FMA_CHAINS * lanes * 2 / best / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per runtime (default 20)")
    parser.add_argument("--target", default="native",
                        help="CPU target this host runs (default native; x86-avx2: peak measured on its lanes)")
    parser.add_argument("--peak-gflops", type=float, help="per-core fp32 peak (default: measured by an FMA loop)")
    args = parser.parse_args(argv)
    threads_list = [int(t) for t in args.threads.split(",") if t.strip()]

    import onnxruntime as ort

    from tvmc.runtime import GraphExecutor
    from tvmc.target import resolve_target

    ort.set_default_logger_severity(3)
    lanes = resolve_target(args.target).vector_lanes("float32")
    per_core = args.peak_gflops or measured_peak_gflops(lanes)
    print(f"peak = threads x {per_core:.1f} GFLOP/s per core ({'--peak-gflops' if args.peak_gflops else 'measured'}: "
          f"an FMA loop on {lanes}-lane vectors, 1 thread; load average {os.getloadavg()[0]:.2f})")
    layers = bench_layers()
    results = {t: [] for t in threads_list}
    for name, count, c, h, w, o, k, stride, pad, groups in layers:
        model = conv_model(c, h, w, o, k, stride, pad, groups)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        gflop = 2 * o * oh * ow * c // groups * k * k / 1e9
        with tempfile.TemporaryDirectory(prefix="tvmc-layers-") as tmp:
            ex, _ = build_tvmc(model, tmp, args.target)
        x = np.random.default_rng(1).random((1, c, h, w), dtype=np.float32)
        ex.set_input("X", x)
        for threads in threads_list:
            GraphExecutor.set_num_threads(threads)
            sess = build_ort(model, threads)
            for _ in range(WARMUP_RUNS):
                ex.run()
                sess.run(["Y"], {"X": x})
            ok = np.allclose(ex.get_output(0), sess.run(["Y"], {"X": x})[0], rtol=1e-3, atol=1e-4)
            ours, theirs = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                ex.run()
                t1 = time.perf_counter()
                sess.run(["Y"], {"X": x})
                t2 = time.perf_counter()
                ours.append(t1 - t0)
                theirs.append(t2 - t1)
            tvmc_ms, ort_ms = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
            kernel_ms = conv_kernel_ms(ex, args.repeat)
            results[threads].append((f"{name} x{count}", f"{c}x{h}x{w}", f"{o} {k}x{k}/{stride}" +
                                     (f" g{groups}" if groups > 1 else ""), gflop, tvmc_ms, ort_ms, kernel_ms,
                                     "ok" if ok else "MISMATCH", count))
        print(f"  {name} done", flush=True)

    headers = ["layer", "input CxHxW", "O KxK/s", "GFLOP", "tvmc ms", "ORT ms", "/ORT", "conv ms", "conv GFLOP/s",
               "% peak", "ORT GFLOP/s", "check"]
    for threads, rows in results.items():
        peak = threads * per_core
        print(f"\n{threads} thread{'s' if threads > 1 else ''} (peak {peak:.1f} GFLOP/s):")
        cells = [[r[0], r[1], r[2], f"{r[3]:.3f}", f"{r[4]:.3f}", f"{r[5]:.3f}", f"{r[4] / r[5]:.2f}", f"{r[6]:.3f}",
                  f"{r[3] / r[6] * 1e3:.1f}", f"{100 * r[3] / r[6] * 1e3 / peak:.0f}%", f"{r[3] / r[5] * 1e3:.1f}",
                  r[7]] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        print("  ".join(h.ljust(wd) if i < 3 else h.rjust(wd) for i, (h, wd) in enumerate(zip(headers, widths))))
        for c in cells:
            print("  ".join(v.ljust(wd) if i < 3 else v.rjust(wd) for i, (v, wd) in enumerate(zip(c, widths))))
        for label, subset in (("ResNet-18's", [r for r in rows if r[0].startswith("conv")]),
                              ("grouped", [r for r in rows if r[0].startswith("gconv")])):
            if not subset:
                continue
            total_gflop, total_tvmc, total_ort, total_kernel = (sum(r[k] * r[8] for r in subset) for k in (3, 4, 5, 6))
            rate = total_gflop / total_kernel * 1e3
            print(f"{label} conv layers: tvmc {total_tvmc:.2f} ms (conv kernels {total_kernel:.2f} ms, "
                  f"{rate:.1f} GFLOP/s, {100 * rate / peak:.0f}% of peak), ORT {total_ort:.2f} ms")
    return 0 if all(r[7] == "ok" for rows in results.values() for r in rows) else 1


def conv_kernel_ms(ex, runs: int, profiles: int = 5) -> float:
    """ms per run of the convolution's own kernels in GraphExecutor `ex`: the median of `profiles`
    profiles of `runs` runs each (one profile's mean moved by 15% between runs on the ~20 us
    kernels of ShuffleNet's 14 x 14 and 7 x 7 layers: one interrupt in 20 runs), over every
    kernel but the layout transforms that the one-node model's NCHW input and output need around
    the NCHW[x]c convolution (`fused_layout_transform*`; inside a network the convolutions pass
    NCHW[x]c tensors to each other, as ResNet-18's do)."""
    def one_profile():
        return sum(r["total_ms"] for r in ex.profile(runs) if not r["name"].startswith("fused_layout_transform"))

    return statistics.median(one_profile() for _ in range(profiles))


if __name__ == "__main__":
    sys.exit(main())
