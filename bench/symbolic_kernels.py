"""Symbolic kernels against static ones (issue 29, kernels with symbolic extents): one kernel
compiled once for a range of sizes (tvmc.te.size_var) against the kernel compiled for each
measured size alone (its own fallback config), both run here through ctypes on the same arrays,
interleaved, best of several rounds. Cases: nn.dense_pack with symbolic rows M (BERT-base's
[M, 768] x [768, 768] and [M, 768] x [768, 3072]: M = batch x sequence) and softmax over
symbolic attention scores [12, S, S]. The goal (issue 29): at most 1.15x the static kernel at
each size, geometric mean at most 1.05.

`python bench/symbolic_kernels.py [--target native] [--rounds 7]`; prints a table and writes
bench/results/symbolic_kernels.md (with --write). Timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tvmc import te  # noqa: E402
from tvmc.backends import backend_for  # noqa: E402
from tvmc.backends.llvm import size_arguments  # noqa: E402
from tvmc.ops.cpu.dense import dense_pack_buckets, dense_pack_config, schedule_dense_pack  # noqa: E402
from tvmc.ops.cpu.reduction import schedule_softmax, softmax_buckets  # noqa: E402
from tvmc.ops.nn_dense import dense_pack, pack_dense_weight  # noqa: E402
from tvmc.ops.nn_misc import softmax  # noqa: E402
from tvmc.target import resolve_target  # noqa: E402
from tvmc.tir.buckets import lower_buckets  # noqa: E402
from tvmc.tir.lower import lower  # noqa: E402

_tmp = tempfile.TemporaryDirectory(prefix="tvmc-symbolic-bench-")
_serial = iter(range(1 << 30))


def dense_schedule(m, k: int, n: int, target, config_m: int):
    """(schedule, args) of nn.dense_pack [m, k] x packed [n, k] (block of the vector lanes) with its
    fallback config for `config_m` rows."""
    bn = target.vector_lanes("float32")
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n // bn, k, bn), name="w")
    y = dense_pack(x, w)
    cfg = dense_pack_config(((config_m, k), (n // bn, k, bn), (config_m, n), "float32", ()), target).fallback_config()
    s = te.create_schedule(y)
    schedule_dense_pack(s, y, y, cfg, target)
    return s, [x, w, y]


def dense_kernel(m, k: int, n: int, target, config_m: int, buckets=None):
    """nn.dense_pack (dense_schedule) lowered, with `buckets` (starts of the size buckets of a
    SizeVar m: tvmc.tir.buckets) when given; returns (PrimFunc, make_arrays(rows) -> (inputs,
    out, reference))."""
    bn = target.vector_lanes("float32")
    if buckets:
        prim = lower_buckets("dense_pack", m, buckets, lambda sub: dense_schedule(sub, k, n, target, sub.hi))
    else:
        prim = lower(*dense_schedule(m, k, n, target, config_m), "dense_pack")
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((n, k)).astype("float32")
    packed = pack_dense_weight(weight, bn)

    def arrays(rows):
        data = rng.standard_normal((rows, k)).astype("float32")
        return [data, packed], np.zeros((rows, n), "float32"), data @ weight.T

    return prim, arrays


def softmax_schedule(length, heads: int, target):
    """(schedule, args) of softmax over the last axis of [heads, length, length] attention scores."""
    x = te.placeholder((heads, length, length), name="x")
    y = softmax(x, 2)
    s = te.create_schedule(y)
    schedule_softmax(s, y, y, None, target)
    return s, [x, y]


def softmax_kernel(length, heads: int, target, buckets=None):
    """softmax_schedule lowered (with size `buckets` when given), and its arrays."""
    if buckets:
        prim = lower_buckets("softmax", length, buckets, lambda sub: softmax_schedule(sub, heads, target))
    else:
        prim = lower(*softmax_schedule(length, heads, target), "softmax")
    rng = np.random.default_rng(1)

    def arrays(size):
        data = rng.standard_normal((heads, size, size)).astype("float32")
        z = np.exp(data - data.max(-1, keepdims=True))
        return [data], np.zeros_like(data), z / z.sum(-1, keepdims=True)

    return prim, arrays


def load(prim, target):
    """A callable running `prim`'s compiled kernel on (inputs, out)."""
    path = os.path.join(_tmp.name, f"{prim.name}_{next(_serial)}.so")
    backend_for(target).build_candidate(prim, target, path)
    fn = getattr(ctypes.CDLL(path), prim.name)

    def call(inputs, out, times=1):
        args = [ctypes.c_void_p(a.ctypes.data) for a in list(inputs) + [out]]
        args += size_arguments(prim, list(inputs) + [out])
        for _ in range(times):
            fn(*args)

    return call


def measure(calls, inputs, out, rounds: int, budget_s: float = 0.02) -> list:
    """Seconds per call of each callable: the best of `rounds` rounds of about `budget_s` each,
    the callables interleaved (the best round is the one least disturbed by other processes on a
    shared machine)."""
    for c in calls:
        c(inputs, out, 3)
    t0 = time.perf_counter()
    calls[0](inputs, out, 3)
    per = max((time.perf_counter() - t0) / 3, 1e-7)
    n = max(3, int(budget_s / per))
    samples = [[] for _ in calls]
    for _ in range(rounds):
        for k, c in enumerate(calls):
            t0 = time.perf_counter()
            c(inputs, out, n)
            samples[k].append((time.perf_counter() - t0) / n)
    return [float(min(s)) for s in samples]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="native")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--write", action="store_true", help="write bench/results/symbolic_kernels.md")
    args = p.parse_args(argv)
    target = resolve_target(args.target)
    hi = 512
    cases = []
    for k, n in ((768, 768), (768, 3072)):
        rows = te.size_var("M", 1, hi)
        sym, arrays = dense_kernel(rows, k, n, target, hi)
        bn = target.vector_lanes("float32")
        upper = ((hi, k), (n // bn, k, bn), (hi, n), "float32", ())
        bucketed, _ = dense_kernel(rows, k, n, target, hi, dense_pack_buckets(upper, target, rows))
        cases.append((f"dense_pack [M,{k}]x[{n},{k}]", sym, bucketed, arrays,
                      lambda size, k=k, n=n: dense_kernel(size, k, n, target, size)[0], (1, 7, 16, 100, 384)))
    length = te.size_var("S", 1, hi)
    sym, arrays = softmax_kernel(length, 12, target)
    bucketed, _ = softmax_kernel(length, 12, target, softmax_buckets(length, target))
    cases.append(("softmax [12,S,S] axis 2", sym, bucketed, arrays, lambda size: softmax_kernel(size, 12, target)[0],
                  (7, 16, 100, 384)))
    lines = [f"# Symbolic vs static kernels, target {target.name} ({target.cpu}), range 1..{hi}", "",
             f"threads: {os.environ.get('OMP_NUM_THREADS', 'all')} of {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.1f} at the start, best of {args.rounds} rounds; symbolic: one kernel for the "
             "range; bucketed: one kernel with a specialization per size bucket (tvmc.tir.buckets)", "",
             "| kernel | size | static us | symbolic us | ratio | bucketed us | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios, bucket_ratios = [], []
    for name, sym, bucketed, arrays, static_of, sizes in cases:
        sym_call, bucket_call = load(sym, target), load(bucketed, target)
        for size in sizes:
            static_call = load(static_of(size), target)
            inputs, out, ref = arrays(size)
            for call in (static_call, sym_call, bucket_call):
                out[...] = 0
                call(inputs, out)
                np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
            t_static, t_sym, t_bucket = measure([static_call, sym_call, bucket_call], inputs, out, args.rounds)
            ratios.append(t_sym / t_static)
            bucket_ratios.append(t_bucket / t_static)
            lines.append(f"| {name} | {size} | {t_static * 1e6:.1f} | {t_sym * 1e6:.1f} | {t_sym / t_static:.3f} | "
                         f"{t_bucket * 1e6:.1f} | {t_bucket / t_static:.3f} |")
            print(lines[-1], flush=True)
    def geomean(xs):
        return math.exp(sum(math.log(r) for r in xs) / len(xs))

    lines += ["", f"geometric mean of the ratios: symbolic {geomean(ratios):.3f}, "
              f"bucketed {geomean(bucket_ratios):.3f} (goal: each <= 1.15, geomean <= 1.05)"]
    print(lines[-1])
    if args.write:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "symbolic_kernels.md")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
