"""Symbolic-shape artifacts against static ones, whole models (issue 29): each model is compiled once
for a range of a dimension and once for each measured size alone (untuned: fallback configs both),
then both run here through the target's executor (`--target`, default native: GraphExecutor, the C
API in mod.so; wasm: WasmExecutor in wasmtime) on the same inputs, interleaved, one thread, best of
several rounds of the median of a few runs. Models: a BERT-style encoder layer
(tests/frontend/test_symbolic_shapes.bert_model, hidden 256, 4 heads, sequence 1..128) and a CNN
(3x3 convolutions of 32 and 64 channels on 32x32 images, global pooling, a dense head; batch 1..8).
The goal (issue 29): at most 1.15x the static artifact at each size, geometric mean at most 1.05.

`python bench/symbolic_e2e.py [--target wasm] [--rounds 7] [--write]`; prints a Markdown table
(--write: also to bench/results/symbolic_e2e.md, or symbolic_e2e_<target>.md for another target).
Timings depend on the machine and its load; a target of another architecture (arm) would run under
qemu-user, whose times are the emulator's, not the device's.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.frontend.test_symbolic_shapes import bert_model  # noqa: E402
from tvmc.driver import CompileOptions, compile_model  # noqa: E402
from tvmc.package import save_artifact  # noqa: E402
from tvmc.runtime import create_executor  # noqa: E402
from tvmc.target import resolve_target  # noqa: E402


def cnn(channels=(32, 64), size: int = 32, classes: int = 10) -> onnx.ModelProto:
    """[N, 3, size, size] -> Conv c0 + Relu -> Conv c1 stride 2 + Relu -> Conv c1 + Relu ->
    GlobalAveragePool -> Flatten -> Gemm `classes`."""
    r = np.random.default_rng(0)
    n = helper.make_node
    c0, c1 = channels
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]), n("Relu", ["c3"], ["r3"]),
             n("GlobalAveragePool", ["r3"], ["gp"]), n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    shapes = {"w1": (c0, 3, 3, 3), "b1": (c0,), "w2": (c1, c0, 3, 3), "b2": (c1,), "w3": (c1, c1, 3, 3),
              "b3": (c1,), "wf": (classes, c1), "bf": (classes,)}
    inits = [numpy_helper.from_array((r.standard_normal(s) * 0.2).astype(np.float32), k) for k, s in shapes.items()]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def encoder_feeds(seq: int) -> dict:
    r = np.random.default_rng(seq)
    return {"input_ids": r.integers(0, 1000, (1, seq)).astype(np.int64), "attention_mask": np.ones((1, seq), np.int64)}


CASES = [  # name, model, range options, options for one size, feeds, sizes
    ("encoder (seq 1..128)", lambda: bert_model(hidden=256, heads=4, vocab=1000, max_pos=128),
     {"input_shapes": {"input_ids": [1, "1..128"], "attention_mask": [1, "1..128"]}},
     lambda s: {"input_shapes": {"input_ids": [1, s], "attention_mask": [1, s]}}, encoder_feeds, [16, 77, 128]),
    ("cnn (batch 1..8)", cnn, {"dim_ranges": {"N": (1, 8)}}, lambda s: {"input_shapes": {"x": [s, 3, 32, 32]}},
     lambda s: {"x": np.random.default_rng(s).standard_normal((s, 3, 32, 32)).astype(np.float32)}, [1, 3, 8]),
]


def timed(ex, runs: int) -> float:
    """Median seconds of `runs` runs."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ex.run()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="native", help="a --target spec whose artifacts run here (native, wasm)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--write", action="store_true", help="write bench/results/symbolic_e2e.md")
    args = parser.parse_args()
    target = resolve_target(args.target)
    tmp = tempfile.mkdtemp(prefix="tvmc-symbolic-e2e-")
    rows, ratios = [], []
    for name, build, range_opts, size_opts, feeds_of, sizes in CASES:
        model = build()
        ranged = create_executor(save_artifact(compile_model(model, target, CompileOptions(**range_opts)),
                                               os.path.join(tmp, "range.tar")))
        ranged.set_num_threads(1)
        for size in sizes:
            static = create_executor(save_artifact(compile_model(model, target, CompileOptions(**size_opts(size))),
                                                   os.path.join(tmp, f"static_{size}.tar")))
            static.set_num_threads(1)
            feeds = feeds_of(size)
            for ex in (ranged, static):
                for k, v in feeds.items():
                    ex.set_input(k, v)
                ex.run()
            np.testing.assert_allclose(ranged.get_output(0), static.get_output(0), rtol=1e-4, atol=1e-5)
            best = {"range": math.inf, "static": math.inf}
            for _ in range(args.rounds):  # interleaved: the machine's load falls on both
                best["range"] = min(best["range"], timed(ranged, args.runs))
                best["static"] = min(best["static"], timed(static, args.runs))
            ratio = best["range"] / best["static"]
            ratios.append(ratio)
            rows.append(f"| {name} | {size} | {best['range'] * 1e3:.3f} | {best['static'] * 1e3:.3f} | {ratio:.2f} |")
    text = "\n".join(["| model | size | range artifact (ms) | static artifact (ms) | range / static |",
                      "|---|---|---|---|---|", *rows, "",
                      f"geometric mean range / static: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} "
                      f"(max {max(ratios):.2f}); one thread, best of {args.rounds} rounds of the median of "
                      f"{args.runs} runs, target {args.target} ({target.cpu or 'host'})"])
    print(text)
    if args.write:
        name = "symbolic_e2e.md" if args.target == "native" else f"symbolic_e2e_{args.target}.md"
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
        with open(out, "w") as f:
            f.write("# Symbolic-shape artifacts against one artifact per size (bench/symbolic_e2e.py)\n\n"
                    "Untuned (fallback configs), this machine, interleaved runs; timings vary with load.\n\n"
                    + text + "\n")


if __name__ == "__main__":
    main()
