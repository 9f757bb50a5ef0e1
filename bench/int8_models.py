"""int8 models end to end on this host: tvmc's int8 build of a model quantized by onnxruntime
against tvmc's float build of the same model and onnxruntime's session of the int8 model (and,
for reference, of the float one), all in this one process (`make bench-int8`, issue 28).

Models: tests/e2e/builders.resnet_style_cnn (3x3 stem, two basic blocks of 16 and 32 channels,
BN + ReLU, a 1x1 stride-2 projection) at the input sizes of `--sizes`, with `--resnet18`
bench/models.resnet18 (224 x 224), all through quantize_static (QDQ, uint8 activations, int8
per-channel weights, calibrated on 4 seeded standard-normal inputs); with `--bert`
bench/models.bert (seq 128, hidden 256, 4 layers) through quantize_dynamic (int8 weights,
DynamicQuantizeLinear + MatMulInteger). Targets: `--targets`, each "name" or "name:key=value"
(default "x86:features=+avx512vnni,x86-avx2": the VNNI and the AVX2 dot-product forms, as
`tvmc compile --target x86 --target-option features=+avx512vnni`), opt level 3, no tuning
records. For each target and each of `--threads` (default 1,2; both runtimes: tvmc's
GraphExecutor.set_num_threads, onnxruntime's intra_op_num_threads with spinning stopped after
each run as bench/bench.py does), each runtime does 3 untimed runs, then `--repeat` rounds time
`--block` runs of each in a row (perf_counter around each single call; default 1: one run of each
in turn, so every run starts after the other runtimes' runs have taken the caches; with 10 the
runs after the first of a block find the model's weights and buffers in the caches, as back-to-back
runs of one model, `tvmc run --repeat`, do); the table holds the medians and
the ratios int8 / tvmc float and int8 / onnxruntime int8 (below 1: tvmc int8 is faster). The last
column is the largest difference of tvmc's int8 output from onnxruntime's int8 one over its
largest magnitude (each requantize may round one unit differently; the differences propagate).
`--out` also writes the table as markdown. Timing only, no assertions.

`python bench/int8_models.py [--sizes 32,64,112] [--resnet18] [--bert] [--threads 1,2] [--repeat 30]
[--targets x86:features=+avx512vnni,x86-avx2] [--out bench/results/int8.md]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from bench import build_ort  # noqa: E402  (bench/ is the script's directory)

DEFAULT_TARGETS = "x86:features=+avx512vnni,x86-avx2"


def parse_target(spec: str):
    """"name" or "name:key=value[;key=value]" -> (name, options): target options, and pass options
    where the key names one ("Pass.option", e.g. x86-avx2:AlterOpLayout.int8_saturate=1)."""
    name, _, opts = spec.partition(":")
    return name, dict(o.split("=", 1) for o in opts.split(";") if o)


def quantize_dynamic(model: onnx.ModelProto, tmp: str) -> onnx.ModelProto:
    """`model` through onnxruntime.quantization.quantize_dynamic (int8 weights)."""
    from onnxruntime import quantization

    src, dst = Path(tmp, f"{model.graph.name}.onnx"), Path(tmp, f"{model.graph.name}_int8.onnx")
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8)
    return onnx.load(dst)


def quantize(model: onnx.ModelProto, shape, tmp: str) -> onnx.ModelProto:
    """`model` through onnxruntime.quantization.quantize_static: QDQ, uint8 activations, int8
    per-channel weights, calibrated on 4 seeded standard-normal inputs of `shape`."""
    from onnxruntime import quantization

    name = model.graph.input[0].name
    rng = np.random.default_rng(0)
    batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    src, dst = Path(tmp, f"{model.graph.name}.onnx"), Path(tmp, f"{model.graph.name}_int8.onnx")
    onnx.save(model, src)
    quantization.quantize_static(str(src), str(dst), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return onnx.load(dst)


def build_tvmc(model, tmp: str, tag: str, target: str, target_options: dict, threads: int):
    import tvmc
    from tvmc.runtime import GraphExecutor

    t0 = time.perf_counter()
    passes = {k: int(v) for k, v in target_options.items() if "." in k}  # Pass.option keys: --pass-config
    result = tvmc.compile(model, target, Path(tmp, f"{tag}.tar"), opt_level=3, pass_config=passes,
                          target_options={k: v for k, v in target_options.items() if "." not in k})
    compile_s = time.perf_counter() - t0
    ex = GraphExecutor(result.output)
    ex.set_num_threads(threads)
    return ex, compile_s


def _median_ms(runs: dict, repeat: int, block: int = 1) -> dict:
    for fn in runs.values():
        for _ in range(3):
            fn()
    samples = {k: [] for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                samples[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench(name: str, model: onnx.ModelProto, feeds, target: str, target_options: dict, threads: int,
          args) -> dict:
    """Medians (ms) of tvmc int8 / float and onnxruntime int8 / float on `feeds` (None: a seeded
    standard-normal input; then the model is quantized statically, else dynamically)."""
    with tempfile.TemporaryDirectory() as tmp:
        if feeds is None:
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            feeds = {model.graph.input[0].name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
            qmodel = quantize(model, shape, tmp)
        else:
            qmodel = quantize_dynamic(model, tmp)
        ex_f, compile_f = build_tvmc(model, tmp, "float", target, target_options, threads)
        ex_q, compile_q = build_tvmc(qmodel, tmp, "int8", target, target_options, threads)
        ort_q, ort_f = build_ort(qmodel, threads), build_ort(model, threads)
        for ex in (ex_f, ex_q):
            for k, v in feeds.items():
                ex.set_input(k, v)
        ref = ort_q.run(None, feeds)[0]
        ex_q.run()
        err = float(np.abs(ex_q.get_output(0) - ref).max())
        times = _median_ms({"tvmc_int8": ex_q.run, "tvmc_float": ex_f.run,
                            "ort_int8": lambda: ort_q.run(None, feeds),
                            "ort_float": lambda: ort_f.run(None, feeds)}, args.repeat, args.block)
    return dict(model=name, **times, compile_int8_s=compile_q, compile_float_s=compile_f, max_err=err,
                ref_scale=float(np.abs(ref).max()))


def main(argv=None) -> int:
    from tests.e2e.builders import resnet_style_cnn

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="32,64,112", help="input sizes of resnet_style_cnn")
    p.add_argument("--resnet18", action="store_true", help="also bench/models.resnet18 (224 x 224)")
    p.add_argument("--bert", action="store_true", help="also bench/models.bert through quantize_dynamic")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--block", type=int, default=1,
                   help="runs of each runtime in a row per round (default 1: one of each in turn)")
    p.add_argument("--targets", default=DEFAULT_TARGETS, help="name[:key=value;...] list, comma separated")
    p.add_argument("--out", default=None, help="also write the table as markdown here")
    args = p.parse_args(argv)
    models = [(f"resnet_style_{s}", resnet_style_cnn(0, int(s)), None) for s in args.sizes.split(",") if s]
    if args.resnet18 or args.bert:
        from models import bert, bert_inputs, resnet18

        if args.resnet18:
            models.append(("resnet18", resnet18(), None))
        if args.bert:
            models.append(("bert (dynamic)", bert(), bert_inputs()))
    head = ("| target | threads | model | tvmc int8 ms | tvmc f32 ms | ort int8 ms | ort f32 ms | int8/f32 | "
            "int8/ort int8 | rel err |")
    lines = [f"Load average {os.getloadavg()[0]:.2f} at the start (a shared machine: compare ratios, not times); "
             f"medians of {args.repeat} interleaved rounds" + (f" of {args.block} runs of each runtime in a row"
                                                             if args.block > 1 else "") + ".",
             "", head, "|" + " --- |" * 10]
    print("\n".join(lines), flush=True)
    for spec in args.targets.split(","):
        target, options = parse_target(spec)
        for threads in (int(t) for t in args.threads.split(",")):
            ratios = []
            for name, model, feeds in models:
                r = bench(name, model, feeds, target, options, threads, args)
                ratios.append((r["tvmc_int8"] / r["tvmc_float"], r["tvmc_int8"] / r["ort_int8"]))
                rel = r["max_err"] / max(r["ref_scale"], 1e-30)
                lines.append(f"| {spec} | {threads} | {name} | {r['tvmc_int8']:.3f} | {r['tvmc_float']:.3f} | "
                             f"{r['ort_int8']:.3f} | {r['ort_float']:.3f} | {ratios[-1][0]:.2f} | "
                             f"{ratios[-1][1]:.2f} | {rel:.4f} |")
                print(lines[-1], flush=True)
            geo = [float(np.exp(np.mean(np.log([r[i] for r in ratios])))) for i in range(2)]
            lines.append(f"| {spec} | {threads} | geomean | | | | | {geo[0]:.2f} | {geo[1]:.2f} | |")
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("# int8 models: tvmc int8 vs tvmc float vs onnxruntime int8\n\n"
                                  "Written by `make bench-int8` (bench/int8_models.py).\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
