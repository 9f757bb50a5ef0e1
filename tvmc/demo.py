"""Demo (`python -m tvmc.demo`, `make demo`): read a line of text with a real pretrained model.

The model is PP-OCRv4's text recognizer (PaddleOCR, exported to ONNX), as shipped inside the
PyPI package rapidocr-onnxruntime (`make demo` installs it without its dependencies: only the
.onnx file is used). The demo draws a line of text with Pillow, then runs the commands a user
would type:

    tvmc compile <rapidocr_onnxruntime>/models/ch_PP-OCRv4_rec_infer.onnx --target native \
        --input-shapes "x:[1,3,48,320]" -o out/ocr_rec.tar
    tvmc run out/ocr_rec.tar --inputs out/ocr_input.npz --outputs out/ocr_output.npz \
        --print-time --repeat 10

and decodes the output (CTC greedy decoding over the character list stored in the model's
metadata) into the text it read. Then it runs the model in onnxruntime on the same input and
prints both texts, the largest difference between the two outputs, and both latencies.
Exit code 0 when tvmc reads what onnxruntime reads, 1 when not, 2 when the model is missing.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from tvmc.cli import main as tvmc_main
from tvmc.errors import ModelError

MODEL_PACKAGE = "rapidocr_onnxruntime"     # PyPI: rapidocr-onnxruntime
MODEL_FILE = ("models", "ch_PP-OCRv4_rec_infer.onnx")
INPUT_NAME = "x"
HEIGHT, WIDTH = 48, 320                    # the recognizer's input: NCHW, RGB, height 48
TEXT = "Compiled by tvmc in 2024"
FONT_SIZE = 30                             # the largest size tried; smaller until the line fits
REPEAT = 10
OUT_DIR = Path("out")


def model_path() -> Path:
    """The recognizer's .onnx inside the installed rapidocr-onnxruntime package (located without
    importing it: its __init__ needs OpenCV, which the demo does not install). Raises ModelError
    naming the package to install."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    path = Path(spec.submodule_search_locations[0], *MODEL_FILE) if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ModelError(f"{'/'.join(MODEL_FILE)}: not found; install the model's package with "
                         f"`pip install --no-deps rapidocr-onnxruntime` (make demo does)")
    return path


def character_list(model: Path) -> list:
    """The class labels of the recognizer's output: index 0 is the CTC blank, then the
    characters of the model's "character" metadata (one a line), then a space (PaddleOCR's
    use_space_char)."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    if "character" not in meta:
        raise ModelError(f"{model}: no 'character' metadata: not a PaddleOCR recognition model")
    return ["<blank>"] + meta["character"].splitlines() + [" "]


def ctc_decode(probs: np.ndarray, chars: list) -> str:
    """Greedy CTC decoding of one [1, T, C] output: the best class per step, repeats merged,
    blanks (class 0) dropped."""
    best = probs[0].argmax(axis=-1)
    out, prev = [], 0
    for c in best:
        if c != prev and c != 0:
            out.append(chars[c])
        prev = c
    return "".join(out)


def draw_text(text: str):
    """A white HEIGHT x WIDTH RGB image with `text` in black (Pillow's built-in font, at most
    FONT_SIZE, smaller until it fits with a margin of 8 pixels), and the model's input for it:
    [1, 3, HEIGHT, WIDTH] float32, (pixel / 255 - 0.5) / 0.5."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    for size in range(FONT_SIZE, 7, -1):
        font = ImageFont.load_default(size=size)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        if right - left <= WIDTH - 16 and bottom - top <= HEIGHT - 8:
            break
    draw.text((8 - left, (HEIGHT - (bottom - top)) // 2 - top), text, fill="black", font=font)
    x = (np.asarray(image, np.float32) / 255.0 - 0.5) / 0.5
    return image, np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def _step(argv: list) -> int:
    print(f"\n$ tvmc {' '.join(argv)}", flush=True)
    code = tvmc_main(argv)
    if code:
        print(f"tvmc {argv[0]} failed with exit code {code}", file=sys.stderr)
    return code


def _onnxruntime(model: Path, x: np.ndarray):
    """(output, median latency in ms over REPEAT runs after one warm-up) in onnxruntime, or None
    when it is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    out = sess.run(None, {INPUT_NAME: x})[0]
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        sess.run(None, {INPUT_NAME: x})
        times.append((time.perf_counter() - t0) * 1e3)
    return out, statistics.median(times)


def main() -> int:
    """Run the demo (module docstring); returns its exit code."""
    import tvmc

    try:
        model = model_path()
        chars = character_list(model)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    OUT_DIR.mkdir(exist_ok=True)
    artifact, inputs, outputs = OUT_DIR / "ocr_rec.tar", OUT_DIR / "ocr_input.npz", OUT_DIR / "ocr_output.npz"
    image, x = draw_text(TEXT)
    image.save(OUT_DIR / "ocr_input.png")
    np.savez(inputs, **{INPUT_NAME: x})
    print(f"PP-OCRv4 text recognition ({model.name}, from the PyPI package rapidocr-onnxruntime) reads the line "
          f"drawn in {OUT_DIR / 'ocr_input.png'}: {TEXT!r}")

    code = _step(["compile", str(model), "--target", "native", "--input-shapes",
                  f"{INPUT_NAME}:[1,3,{HEIGHT},{WIDTH}]", "-o", str(artifact)])
    code = code or _step(["run", str(artifact), "--inputs", str(inputs), "--outputs", str(outputs),
                          "--print-time", "--repeat", str(REPEAT)])
    if code:
        return code
    with np.load(outputs) as data:
        ours = data[data.files[0]]
    read = ctc_decode(ours, chars)
    tvmc_ms = tvmc.run(artifact, {INPUT_NAME: x}, repeat=REPEAT).timing["median_ms"]
    print(f"\ntext drawn           {TEXT!r}")
    print(f"tvmc read            {read!r}")
    ref = _onnxruntime(model, x)
    if ref is None:
        print(f"tvmc latency         {tvmc_ms:.2f} ms (median of {REPEAT}); onnxruntime not installed: no comparison")
        return 0
    want, ort_ms = ref
    ort_read = ctc_decode(want, chars)
    print(f"onnxruntime read     {ort_read!r}")
    print(f"max abs difference   {float(np.max(np.abs(ours - want))):.3g} (output probabilities)")
    print(f"latency (median of {REPEAT}) tvmc {tvmc_ms:.2f} ms, onnxruntime {ort_ms:.2f} ms "
          f"(tvmc/onnxruntime {tvmc_ms / ort_ms:.2f})")
    if read != ort_read:
        print("tvmc and onnxruntime read different texts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
