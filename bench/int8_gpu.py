"""GPU int8 kernels against the kernels they replace, same shapes, on this machine's GPU: per dense
and conv2d shape (BERT-base projections, ResNet-18's 3 x 3 layers), three kernels, each with its
fallback config (no tuning records):

    int8 dot  qnn.dense_u8s8 / qnn.conv2d_nchwc_u8s8 on the packed-weight tiled kernels
              (tvmc/ops/gpu/int8.py: dp4a on CUDA, the packed dot in OpenCL C)
    int8 gen  qnn.dense / qnn.conv2d (zero points 3 and 0) on the generic GPU schedule, what a GPU
              ran before (one output per thread, int32 arithmetic on widened bytes)
    float32   nn.dense / nn.conv2d, the float model's default GPU implementation

Reports device milliseconds per call (the backend's timed launches, tvmc tune's measurement),
GOP/s (2 M N K, 2 N O OH OW C KH KW) and int8 dot / float32 time; the int8 dot kernel's output is
checked against the numpy reference (exactly) before it is timed.

`python bench/int8_gpu.py [--target cuda-sm90] [--repeat 50]`; timing only, no assertions. On a
CPU OpenCL driver (PoCL) it runs, but says nothing about GPU speed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

DENSE = [(64, 768, 768), (128, 768, 3072), (1024, 1024, 1024)]                     # M, K, N
CONV = [(1, 64, 56, 64), (1, 128, 28, 128), (1, 256, 14, 256), (1, 512, 7, 512), (8, 128, 28, 128)]  # N, C, HW, O


def _function(op, arrays, attrs):
    from tvmc.graph.ir import Function, TensorType, Var
    from tvmc.ops.registry import make_call

    params = [Var(f"x{k}", TensorType(tuple(a.shape), a.dtype.name)) for k, a in enumerate(arrays)]
    return Function(params, make_call(op, params, attrs), "fused_" + op.replace(".", "_"))


def _time(op, arrays, attrs, target, repeat, check=False):
    """(ms per call, output) of `op` on `arrays` compiled for `target` with its fallback config."""
    from tvmc.backends import backend_for
    from tvmc.ops.fused import lower_fused
    from tvmc.ops.registry import get_op

    fn = _function(op, arrays, attrs)
    prim = lower_fused(fn, target)
    backend = backend_for(target)
    out = np.zeros(fn.body.shape, fn.body.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.json")
        backend.build_candidate(prim, target, path)
        call, fetch, timed, close = backend.load_candidate(path, prim.name, arrays, out)
        try:
            call()
            fetch()
            if check:
                ref = get_op(op).reference(*arrays, **attrs)
                if not np.array_equal(out, ref):
                    raise SystemExit(f"{op} {[a.shape for a in arrays]}: int8 kernel differs from the reference")
            timed(3)
            ms = timed(repeat) / repeat * 1e3
        finally:
            close()
    return ms


def _row(label, ops, ms):
    return f"  {label:10s} {ms:9.4f} ms {ops / ms / 1e6:9.1f} GOP/s"


def main(argv=None) -> int:
    from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
    from tvmc.ops.layout import blocked_layout, to_layout
    from tvmc.target import resolve_target

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="cuda-sm90", help="a GPU target descriptor (default cuda-sm90)")
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args(argv)
    target = resolve_target(args.target)
    rng = np.random.default_rng(0)
    zp = (np.asarray(3, np.int32), np.asarray(0, np.int32))
    print(f"target {target.name}: fallback configs, device ms per call")
    for m, k, n in DENSE:
        x = rng.integers(0, 256, (m, k), dtype=np.uint8)
        w = rng.integers(-128, 128, (n, k), dtype=np.int8)
        ops = 2 * m * n * k
        dot = _time("qnn.dense_u8s8", [x, pack_dense_u8s8_weight(w)], {"units": n}, target, args.repeat, check=True)
        gen = _time("qnn.dense", [x, w, *zp], {}, target, args.repeat)
        flt = _time("nn.dense", [x.astype(np.float32), w.astype(np.float32)], {}, target, args.repeat)
        print(f"dense M={m} K={k} N={n}  int8 dot / float32 {dot / flt:.2f}")
        for label, ms in (("int8 dot", dot), ("int8 gen", gen), ("float32", flt)):
            print(_row(label, ops, ms))
    for batch, c, hw, o in CONV:
        x = rng.integers(0, 256, (batch, c, hw, hw), dtype=np.uint8)
        w = rng.integers(-128, 128, (o, c, 3, 3), dtype=np.int8)
        conv = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
        xb = np.ascontiguousarray(to_layout(x, "NCHW", blocked_layout(16)))
        ops = 2 * batch * o * hw * hw * c * 9
        dot = _time("qnn.conv2d_nchwc_u8s8", [xb, pack_conv2d_u8s8_weight(w, 16)], dict(conv, pad_value=3), target,
                    args.repeat, check=True)
        gen = _time("qnn.conv2d", [x, w, *zp], conv, target, args.repeat)
        flt = _time("nn.conv2d", [x.astype(np.float32), w.astype(np.float32)], conv, target, args.repeat)
        print(f"conv2d 3x3 N={batch} C={c} HW={hw} O={o}  int8 dot / float32 {dot / flt:.2f}")
        for label, ms in (("int8 dot", dot), ("int8 gen", gen), ("float32", flt)):
            print(_row(label, ops, ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
