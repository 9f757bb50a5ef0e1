"""Benchmark: every conv2d layer of ResNet-18 (bench/models.resnet18) compiled on its own, tvmc's
achieved GFLOP/s against the machine's fp32 peak and against onnxruntime (this host's CPU: x86-64
or aarch64).

`make bench-layers`, or `python bench/layers.py [--threads 1,2] [--repeat N]`.

Per distinct conv layer (input shape, output channels, kernel, stride; `x N` when ResNet-18 has
N such layers) a one-node model Conv(X, W) with ResNet-18's shapes and seeded random weights
is compiled with tvmc for native (this host) at opt level 3 and run, alternating with onnxruntime, after two
warm-up runs; times are medians. Columns: GFLOP (2 x multiply-accumulates), tvmc ms, ORT ms,
tvmc GFLOP/s, tvmc % of peak, ORT GFLOP/s.

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


def resnet18_conv_layers() -> list:
    """[(name, count, C, H, W, O, K, stride, pad)] of ResNet-18's convolutions, in network order,
    one entry per distinct shape."""
    from models import resnet18

    model = onnx.shape_inference.infer_shapes(resnet18())
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.input) + list(model.graph.value_info)}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    layers, seen = [], {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        _, c, h, w = shapes[node.input[0]]
        o, _, k, _ = weights[node.input[1]]
        key = (c, h, w, o, k, attrs["strides"][0], attrs["pads"][0])
        if key in seen:
            layers[seen[key]][1] += 1
            continue
        seen[key] = len(layers)
        layers.append([f"conv{len(layers) + 1}", 1, *key])
    return [tuple(x) for x in layers]


def conv_model(c, h, w, o, k, stride, pad, seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((o, c, k, k)) * np.sqrt(2 / (c * k * k))
    weight = numpy_helper.from_array(values.astype(np.float32), "W")
    node = helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4)
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
    parser.add_argument("--peak-gflops", type=float, help="per-core fp32 peak (default: measured by an FMA loop)")
    args = parser.parse_args(argv)
    threads_list = [int(t) for t in args.threads.split(",") if t.strip()]

    import onnxruntime as ort

    from tvmc.runtime import GraphExecutor
    from tvmc.target import resolve_target

    ort.set_default_logger_severity(3)
    lanes = resolve_target("native").vector_lanes("float32")
    per_core = args.peak_gflops or measured_peak_gflops(lanes)
    print(f"peak = threads x {per_core:.1f} GFLOP/s per core ({'--peak-gflops' if args.peak_gflops else 'measured'}: "
          f"an FMA loop on {lanes}-lane vectors, 1 thread; load average {os.getloadavg()[0]:.2f})")
    layers = resnet18_conv_layers()
    results = {t: [] for t in threads_list}
    for name, count, c, h, w, o, k, stride, pad in layers:
        model = conv_model(c, h, w, o, k, stride, pad)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        gflop = 2 * o * oh * ow * c * k * k / 1e9
        with tempfile.TemporaryDirectory(prefix="tvmc-layers-") as tmp:
            ex, _ = build_tvmc(model, tmp, "native")
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
            results[threads].append((f"{name} x{count}", f"{c}x{h}x{w}", f"{o} {k}x{k}/{stride}", gflop, tvmc_ms,
                                     ort_ms, gflop / tvmc_ms * 1e3, ort_ms and gflop / ort_ms * 1e3,
                                     "ok" if ok else "MISMATCH"))
        print(f"  {name} done", flush=True)

    headers = ["layer", "input CxHxW", "O KxK/s", "GFLOP", "tvmc ms", "ORT ms", "tvmc GFLOP/s", "% peak",
               "ORT GFLOP/s", "check"]
    for threads, rows in results.items():
        peak = threads * per_core
        print(f"\n{threads} thread{'s' if threads > 1 else ''} (peak {peak:.1f} GFLOP/s):")
        cells = [[r[0], r[1], r[2], f"{r[3]:.3f}", f"{r[4]:.3f}", f"{r[5]:.3f}", f"{r[6]:.1f}",
                  f"{100 * r[6] / peak:.0f}%", f"{r[7]:.1f}", r[8]] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        print("  ".join(h.ljust(wd) if i < 3 else h.rjust(wd) for i, (h, wd) in enumerate(zip(headers, widths))))
        for c in cells:
            print("  ".join(v.ljust(wd) if i < 3 else v.rjust(wd) for i, (v, wd) in enumerate(zip(c, widths))))
        total_tvmc = sum(r[4] * int(r[0].split("x")[-1]) for r in rows)
        total_ort = sum(r[5] * int(r[0].split("x")[-1]) for r in rows)
        total_gflop = sum(r[3] * int(r[0].split("x")[-1]) for r in rows)
        print(f"all conv layers: tvmc {total_tvmc:.2f} ms ({total_gflop / total_tvmc * 1e3:.1f} GFLOP/s, "
              f"{100 * total_gflop / total_tvmc * 1e3 / peak:.0f}% of peak), ORT {total_ort:.2f} ms")
    return 0 if all(r[8] == "ok" for rows in results.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
