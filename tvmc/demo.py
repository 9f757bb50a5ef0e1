"""Demo (`python -m tvmc.demo`, `make demo`): compile onnx's light ResNet-50 for x86 and run it.

Runs the same commands a user would type:

    tvmc compile <onnx>/backend/test/data/light/light_resnet50.onnx --target x86 -O 3 -o out/resnet50.tar
    tvmc run out/resnet50.tar --inputs out/resnet50_inputs.npz --outputs out/resnet50_outputs.npz \
        --print-time --repeat 5 --print-top 5

then, when onnxruntime is installed, runs the model there on the same input and prints the
largest difference between the two outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tvmc.cli import main as tvmc_main
from tvmc.errors import ModelError

MODEL = "light_resnet50.onnx"
OUT_DIR = Path("out")


def model_path() -> Path:
    """Path of light_resnet50.onnx inside the installed onnx package; ModelError if absent."""
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / MODEL
    if not path.is_file():
        raise ModelError(f"{path}: not found in the installed onnx package (onnx {onnx.__version__})")
    return path


def _input_spec(model: Path):
    """(name, shape, dtype) of the model's real inputs (graph inputs that are not initializers)."""
    import onnx
    from onnx import helper

    g = onnx.load(str(model)).graph
    inits = {i.name for i in g.initializer}
    for v in g.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        yield v.name, tuple(d.dim_value for d in t.shape.dim), np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))


def _step(title: str, argv: list) -> int:
    print(f"\n$ tvmc {' '.join(argv)}", flush=True)
    code = tvmc_main(argv)
    if code:
        print(f"{title} failed with exit code {code}", file=sys.stderr)
    return code


def _compare_with_onnxruntime(model: Path, inputs: dict, outputs_path: Path) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        print("\n(onnxruntime not installed: skipping the comparison)")
        return
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the light models carry unused initializers; ORT warns about each
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = sess.run(names, inputs)
    print("\ncompared with onnxruntime on the same input")
    with np.load(outputs_path) as ours:
        for name, want in zip(names, ref):
            if name not in ours.files:
                print(f"  {name}: missing from tvmc's outputs ({', '.join(ours.files)})")
                continue
            diff = float(np.max(np.abs(ours[name].astype(np.float64) - want)))
            same_top1 = int(np.argmax(ours[name])) == int(np.argmax(want))
            print(f"  {name}: max abs diff {diff:.3g}, same top-1 class: {'yes' if same_top1 else 'no'}")


def main() -> int:
    """Compile and run the demo model; returns the exit code of the first failing step, else 0."""
    try:
        model = model_path()
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    OUT_DIR.mkdir(exist_ok=True)
    artifact = OUT_DIR / "resnet50.tar"
    inputs_path = OUT_DIR / "resnet50_inputs.npz"
    outputs_path = OUT_DIR / "resnet50_outputs.npz"

    code = _step("compile", ["compile", str(model), "--target", "native", "--opt-level", "3", "-o", str(artifact)])
    if code:
        return code

    rng = np.random.default_rng(0)
    inputs = {name: rng.random(shape).astype(dtype) for name, shape, dtype in _input_spec(model)}
    np.savez(inputs_path, **inputs)
    code = _step("run", ["run", str(artifact), "--inputs", str(inputs_path), "--outputs", str(outputs_path),
                         "--print-time", "--repeat", "5", "--print-top", "5"])
    if code:
        return code
    _compare_with_onnxruntime(model, inputs, outputs_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
