"""make bench TARGET=wasm: tvmc's wasm32 build beside onnxruntime-web, both in one Node process.

For each model (ResNet-18, MobileNetV2, the BERT-style encoder, SqueezeNet, Inception v1, an MLP),
compile it for the wasm target with `--output-format web`, then bench/web/bench.mjs runs it with
tvmc.js and with onnxruntime-web (npm, bench/web: wasm backend, SIMD, one thread, graph
optimization 'all') on the same inputs: 3 warm-up runs each, then `--repeat` timed runs
interleaved, medians. For reference the same model compiled for this host (`native`) runs one
thread in this process. Prints a Markdown table (ratio = tvmc-wasm / onnxruntime-web, geometric
mean of the ratios), whether the outputs agree, the sizes of mod.wasm, tvmc.js and
onnxruntime-web's .wasm, and the load average (other processes share this machine); `--out`
writes it to a file too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import expose_pre_softmax, load_model, model_inputs  # noqa: E402

from tests.e2e.builders import mlp  # noqa: E402

WEB = Path(__file__).resolve().parent / "web"
MODELS = ["resnet18", "mobilenet_v2", "bert", "squeezenet", "inception_v1", "mlp"]
NATIVE_RUNS = 10
RTOL = 1e-3


def _model(name: str):
    if name == "mlp":  # an MNIST-sized MLP, batch 16
        model = mlp(seed=0, batch=16, sizes=(784, 512, 512, 10))
        return model, None
    return load_model(name)


def _native_ms(model, feeds, folder: Path) -> float:
    """Median of NATIVE_RUNS runs, one thread, of the model compiled for this host."""
    import tvmc
    from tvmc.runtime import benchmark, create_executor

    result = tvmc.compile(model, "native", folder / "native.tar")
    ex = create_executor(result.output)
    ex.set_num_threads(1)
    for k, v in feeds.items():
        ex.set_input(k, v)
    return benchmark(ex, NATIVE_RUNS, 1)["median_ms"]


def _agree(a: list, b: list) -> float:
    """Largest difference relative to the reference's largest magnitude."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="wasm", help="wasm target spec (default wasm)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per runtime (default 20)")
    parser.add_argument("--node-flags", default="--experimental-wasm-relaxed-simd",
                        help="flags for node (default: relaxed SIMD on, for targets with +relaxed-simd)")
    parser.add_argument("--out", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    import tvmc

    node = shutil.which("node")
    if node is None or not (WEB / "node_modules" / "onnxruntime-web").is_dir():
        print("error: needs node and the npm packages of bench/web (make install runs npm install there)",
              file=sys.stderr)
        return 1
    rows, manifest, refs = [], {"repeat": args.repeat, "models": []}, {}
    with tempfile.TemporaryDirectory(prefix="tvmc-web-bench-") as tmp:
        for name in args.models.split(","):
            folder = Path(tmp, name)
            folder.mkdir()
            model, feeds = _model(name)
            model, _ = expose_pre_softmax(model)
            feeds = feeds or model_inputs(model)
            onnx.save(model, folder / "model.onnx")
            t0 = time.perf_counter()
            result = tvmc.compile(model, args.target, folder / "site", output_format="web")
            compile_s = time.perf_counter() - t0
            inputs = []
            for k, v in feeds.items():
                (folder / f"{k}.bin").write_bytes(np.ascontiguousarray(v).tobytes())
                inputs.append({"name": k, "dtype": v.dtype.name, "shape": list(v.shape),
                               "file": str(folder / f"{k}.bin")})
            manifest["models"].append({"name": name, "site": str(folder / "site"), "onnx": str(folder / "model.onnx"),
                                       "inputs": inputs})
            refs[name] = {"native_ms": _native_ms(model, feeds, folder), "compile_s": compile_s,
                          "wasm_bytes": (folder / "site" / "mod.wasm").stat().st_size,
                          "target": result.module.metadata["target"]}
            print(f"{name}: compiled in {compile_s:.1f} s", file=sys.stderr)
        Path(tmp, "manifest.json").write_text(json.dumps(manifest))
        load_before = os.getloadavg()
        res = subprocess.run([node, *args.node_flags.split(), str(WEB / "bench.mjs"), str(Path(tmp, "manifest.json"))],
                             capture_output=True, text=True)
        load_after = os.getloadavg()
    if res.returncode != 0:
        print(f"error: bench.mjs failed: {res.stderr.strip()[-2000:]}", file=sys.stderr)
        return 1
    doc = json.loads(res.stdout)
    for r in doc["results"]:
        diff = max(_agree(r["outputs"][k], r["ort_outputs"][k]) for k in r["outputs"] if k in r["ort_outputs"])
        rows.append({**r, **refs[r["name"]], "ratio": r["tvmc_ms"] / r["ort_web_ms"], "max_rel_diff": diff})
    ort_wasm = max((p.stat().st_size
                    for p in (WEB / "node_modules" / "onnxruntime-web" / "dist").glob("ort-wasm-simd-threaded.wasm")),
                   default=0)
    target = rows[0]["target"] if rows else {}
    lines = [f"# tvmc wasm vs onnxruntime-web (Node {doc['node']}, onnxruntime-web {doc['onnxruntime_web']})", "",
             f"target `{args.target}` (features {' '.join(target.get('features', []))}), one thread; "
             f"onnxruntime-web: wasm backend, SIMD, numThreads 1, graphOptimizationLevel all; "
             f"medians of {args.repeat} interleaved runs after 3 warm-up runs; native = this host's build "
             f"(`native`, 1 thread, median of {NATIVE_RUNS}). Load average {load_before[0]:.2f} before, "
             f"{load_after[0]:.2f} after (other processes share this 2-core machine).", "",
             "| model | tvmc wasm ms | onnxruntime-web ms | ratio | tvmc native ms | mod.wasm KiB | outputs agree |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        ok = "yes" if r["max_rel_diff"] <= RTOL else f"NO ({r['max_rel_diff']:.1e})"
        lines.append(f"| {r['name']} | {r['tvmc_ms']:.2f} | {r['ort_web_ms']:.2f} | {r['ratio']:.2f} | "
                     f"{r['native_ms']:.2f} | {r['wasm_bytes'] / 1024:.0f} | {ok} |")
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    lines += ["", f"geometric mean of the ratios: **{geo:.2f}** (goal <= 0.6, no model above 1.0; "
              f"worst {max(r['ratio'] for r in rows):.2f})", "",
              f"sizes: tvmc.js "
              f"{(Path(tvmc.__file__).parent / 'runtime' / 'web' / 'tvmc.js').stat().st_size / 1024:.1f} KiB "
              f"(plus each model's mod.wasm above); onnxruntime-web's ort-wasm-simd-threaded.wasm "
              f"{ort_wasm / 1024 / 1024:.1f} MiB plus its JS"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if all(r["max_rel_diff"] <= RTOL for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
