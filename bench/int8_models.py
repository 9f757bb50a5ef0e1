"""int8 CNNs end to end on this host: tvmc's int8 build of a model quantized by onnxruntime
(quantize_static, QDQ, uint8 activations, int8 per-channel weights, calibrated on 4 seeded
standard-normal inputs) against tvmc's float build of the same model and onnxruntime's session
of the int8 model (and, for reference, of the float one), all in this one process.

Models: tests/e2e/builders.resnet_style_cnn (3x3 stem, two basic blocks of 16 and 32 channels,
BN + ReLU, a 1x1 stride-2 projection) at the input sizes of `--sizes`, and with `--resnet18`
bench/models.resnet18 (224 x 224). Target: `--target` (default "x86" with the target option
features=+avx512vnni, as `tvmc compile --target x86 --target-option features=+avx512vnni`), opt
level 3, no tuning records. Each runtime does 3 untimed runs, then `--repeat` rounds time one run
of each (perf_counter around a single call, interleaved); the table holds the medians and the
ratios int8 / tvmc float and int8 / onnxruntime int8. Threads: `--threads` for both runtimes
(tvmc: GraphExecutor.set_num_threads; onnxruntime: intra_op_num_threads, spinning stopped after
each run as bench/bench.py does). The last column is the largest difference of tvmc's int8 logits
from onnxruntime's int8 ones over their largest magnitude (each requantize may round one unit
differently: float64 here, float32 in MLAS; the differences propagate). Timing only, no assertions.

`python bench/int8_models.py [--sizes 32,64,112] [--resnet18] [--threads 1] [--repeat 30]`
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

DEFAULT_TARGET = "x86"
DEFAULT_TARGET_OPTIONS = {"features": "+avx512vnni"}


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
    result = tvmc.compile(model, target, Path(tmp, f"{tag}.tar"), target_options=target_options, opt_level=3)
    compile_s = time.perf_counter() - t0
    ex = GraphExecutor(result.output)
    ex.set_num_threads(threads)
    return ex, compile_s


def _median_ms(runs: dict, repeat: int) -> dict:
    for fn in runs.values():
        for _ in range(3):
            fn()
    samples = {k: [] for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            samples[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench(name: str, model: onnx.ModelProto, args) -> dict:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    in_name = model.graph.input[0].name
    with tempfile.TemporaryDirectory() as tmp:
        qmodel = quantize(model, shape, tmp)
        ex_f, compile_f = build_tvmc(model, tmp, "float", args.target, args.target_options, args.threads)
        ex_q, compile_q = build_tvmc(qmodel, tmp, "int8", args.target, args.target_options, args.threads)
        ort_q, ort_f = build_ort(qmodel, args.threads), build_ort(model, args.threads)
        for ex in (ex_f, ex_q):
            ex.set_input(in_name, x)
        ref = ort_q.run(None, {in_name: x})[0]
        ex_q.run()
        err = float(np.abs(ex_q.get_output(0) - ref).max())
        times = _median_ms({"tvmc_int8": ex_q.run, "tvmc_float": ex_f.run,
                            "ort_int8": lambda: ort_q.run(None, {in_name: x}),
                            "ort_float": lambda: ort_f.run(None, {in_name: x})}, args.repeat)
    return dict(model=name, **times, compile_int8_s=compile_q, compile_float_s=compile_f, max_err=err,
                ref_scale=float(np.abs(ref).max()))


def main(argv=None) -> int:
    from tests.e2e.builders import resnet_style_cnn

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="32,64,112", help="input sizes of resnet_style_cnn")
    p.add_argument("--resnet18", action="store_true", help="also bench/models.resnet18 (224 x 224)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--target", default=DEFAULT_TARGET)
    p.add_argument("--target-option", action="append", default=None, help="key=value (default features=+avx512vnni)")
    args = p.parse_args(argv)
    args.target_options = (dict(o.split("=", 1) for o in args.target_option) if args.target_option
                           else dict(DEFAULT_TARGET_OPTIONS))
    models = [(f"resnet_style_{s}", resnet_style_cnn(0, int(s))) for s in args.sizes.split(",") if s]
    if args.resnet18:
        from models import resnet18

        models.append(("resnet18", resnet18()))
    print(f"target {args.target} {args.target_options}, {args.threads} thread(s), load average "
          f"{os.getloadavg()[0]:.2f}, medians of {args.repeat} interleaved rounds (ms)")
    head = (f"{'model':<18} {'tvmc int8':>10} {'tvmc f32':>10} {'ort int8':>10} {'ort f32':>10} "
            f"{'int8/f32':>9} {'int8/ort8':>9} {'rel err':>8}")
    print(head)
    ratios = []
    for name, model in models:
        r = bench(name, model, args)
        ratios.append((r["tvmc_int8"] / r["tvmc_float"], r["tvmc_int8"] / r["ort_int8"]))
        rel = r["max_err"] / max(r["ref_scale"], 1e-30)
        print(f"{name:<18} {r['tvmc_int8']:>10.3f} {r['tvmc_float']:>10.3f} {r['ort_int8']:>10.3f} "
              f"{r['ort_float']:>10.3f} {ratios[-1][0]:>9.2f} {ratios[-1][1]:>9.2f} {rel:>8.4f}", flush=True)
    geo = [float(np.exp(np.mean(np.log([r[i] for r in ratios])))) for i in range(2)]
    print(f"{'geomean':<18} {'':>10} {'':>10} {'':>10} {'':>10} {geo[0]:>9.2f} {geo[1]:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
