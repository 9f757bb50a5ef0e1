"""int8 matrix kernels against float32 ones, same shapes, on this host: dense_u8s8
(tvmc/ops/cpu/int8.py, fallback config) against the float32 dense schedules a float model gets
(dense_pack.cpu: the constant weight packed by AlterOpLayout; dense.cpu: unpacked), per target
(x86 with and without AVX512-VNNI, x86-avx2 with and without AVX-VNNI; a VNNI target is skipped
when this host lacks it). Reports GOP/s (2 M N K operations per call) and int8 / float32 time;
int8 with random 8-bit weights (on vpmaddubsw targets: the exact forms, weights widened to int16 for
vpmaddwd in a tile of several rows on data widened to int16 pairs once (data_pairs), the data bytes
split for one row)
and with 7-bit weights (onnxruntime's reduce_range: pairs_in_int16, one vpmaddubsw per step).

`python bench/int8_kernels.py [--threads 1] [--targets x86,...]`; timing only, no assertions.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

SHAPES = [(1, 768, 768), (1, 768, 3072), (64, 768, 768), (64, 768, 3072), (196, 768, 768), (196, 768, 3072)]
TARGETS = ["x86 -mattr=+avx512vnni", "x86", "x86-avx2 -mattr=+avxvnni", "x86-avx2"]


def _kernel(prim, target, tmp: str):
    from tvmc.backends.llvm import _module
    from tvmc.codegen.build import compile_ir, link_shared

    path = Path(tmp, f"{prim.name}_{abs(hash(target))}_{time.monotonic_ns()}.so")
    path.write_bytes(link_shared(compile_ir(_module([prim], target).ir_text(), target), target))
    return getattr(ctypes.CDLL(str(path)), prim.name)


def time_ms(fn, arrays, min_seconds: float = 0.3) -> float:
    """Median milliseconds of one call of the ctypes kernel `fn` over `arrays` (batches of calls
    that last at least 20 ms, for at least min_seconds)."""
    args = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    fn(*args)
    n, t0 = 1, time.perf_counter()
    fn(*args)
    once = max(time.perf_counter() - t0, 1e-6)
    n = max(1, int(0.02 / once))
    samples, start = [], time.perf_counter()
    while time.perf_counter() - start < min_seconds or len(samples) < 5:
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        samples.append((time.perf_counter() - t0) / n)
    return float(np.median(samples)) * 1e3


def int8_dense(m, k, n, target, tmp, weight_bits: int = 8):
    from tvmc import te
    from tvmc.ops.cpu.int8 import (dense_u8s8, dense_u8s8_config, pack_dense_u8s8_weight, pairs_in_int16,
                                   schedule_dense_u8s8)
    from tvmc.tir.lower import lower

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    half = 1 << (weight_bits - 1)
    w = rng.integers(-half, half, (n, k)).astype(np.int8)
    p = pack_dense_u8s8_weight(w)
    d, wt = te.placeholder((m, k), "uint8", "data"), te.placeholder(p.shape, "int8", "weight")
    pairs = pairs_in_int16(p)  # data_pairs as AlterOpLayout sets it
    out = dense_u8s8(d, wt, n, pairs, target.dot_data_pairs and not pairs and m > 1)
    s = te.create_schedule(out)
    cfg = dense_u8s8_config(((m, k), p.shape, (m, n), "uint8", {}), target).fallback_config()
    schedule_dense_u8s8(s, out, out, cfg, target)
    o = np.zeros((m, n), np.int32)
    fn = _kernel(lower(s, [d, wt, out], "dense_u8s8"), target, tmp)
    ms = time_ms(fn, [a, p, o])
    ref = (a.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)
    assert np.array_equal(o, ref), "dense_u8s8 result differs from numpy"
    return ms


def float_dense(m, k, n, target, tmp, packed: bool):
    from tvmc import te
    from tvmc.ops.cpu.dense import dense_config, dense_pack_config, schedule_dense, schedule_dense_pack
    from tvmc.ops.nn_dense import dense, dense_pack, pack_dense_weight
    from tvmc.tir.lower import lower

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    lanes = target.vector_lanes("float32")
    wp = pack_dense_weight(w, lanes) if packed else w
    d, wt = te.placeholder((m, k), "float32", "data"), te.placeholder(wp.shape, "float32", "weight")
    out = dense_pack(d, wt) if packed else dense(d, wt)
    s = te.create_schedule(out)
    workload = ((m, k), wp.shape, (m, n), "float32", {})
    space = dense_pack_config(workload, target) if packed else dense_config(workload, target)
    (schedule_dense_pack if packed else schedule_dense)(s, out, out, space.fallback_config(), target)
    o = np.zeros((m, n), np.float32)
    fn = _kernel(lower(s, [d, wt, out], "dense_f32"), target, tmp)
    return time_ms(fn, [a, wp, o])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="OpenMP threads (default 1)")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated target specs")
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before libgomp is loaded by the first kernel

    from tvmc.runtime.executor import host_cpu_flags
    from tvmc.target import resolve_target

    flags = set(host_cpu_flags())
    print(f"threads {args.threads}; GOP/s = 2 M N K / time; ratios = int8 time / float32 time (dense_pack, dense)")
    print(f"{'target':24s} {'M':>4s} {'K':>5s} {'N':>5s} {'int8':>7s} {'int8 w7':>7s} {'f32 pack':>8s} "
          f"{'f32 dense':>9s} {'int8/pack':>9s} {'w7/pack':>7s} {'int8/dense':>10s}")
    with tempfile.TemporaryDirectory(prefix="tvmc-bench-int8-") as tmp:
        for spec in args.targets.split(","):
            target = resolve_target(spec)
            missing = sorted(set(target.host_features) - flags)
            if missing:
                print(f"{spec:24s} skipped: this host lacks {', '.join(missing)}")
                continue
            for m, k, n in SHAPES:
                gop = 2 * m * n * k / 1e9
                t8 = int8_dense(m, k, n, target, tmp)
                t7 = int8_dense(m, k, n, target, tmp, weight_bits=7)
                tp = float_dense(m, k, n, target, tmp, packed=True)
                td = float_dense(m, k, n, target, tmp, packed=False)
                print(f"{spec:24s} {m:4d} {k:5d} {n:5d} {gop / t8 * 1e3:7.1f} {gop / t7 * 1e3:7.1f} "
                      f"{gop / tp * 1e3:8.1f} {gop / td * 1e3:9.1f} {t8 / tp:9.2f} {t7 / tp:7.2f} {t8 / td:10.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
