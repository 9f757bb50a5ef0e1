"""`make demo`: PP-OCRv4 text recognition from rapidocr-onnxruntime, compiled by tvmc, reads the
line it draws as onnxruntime does."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tvmc import demo

pytest.importorskip("PIL", reason="Pillow draws the demo's text (make demo installs it: pip install -e .[demo])")
pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


def test_ctc_decode_merges_repeats_and_drops_blanks():
    chars = ["<blank>", "a", "b", " "]
    steps = [1, 1, 0, 1, 2, 2, 0, 0, 3, 2]
    probs = np.eye(4, dtype=np.float32)[steps][None]
    assert demo.ctc_decode(probs, chars) == "aab b"


def test_demo_reads_the_line_it_draws(tmp_path):
    try:
        demo.model_path()
    except Exception as e:
        pytest.skip(f"{e}")
    res = subprocess.run([sys.executable, "-m", "tvmc.demo"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"tvmc read            {demo.TEXT!r}" in res.stdout
    assert f"onnxruntime read     {demo.TEXT!r}" in res.stdout
    assert "latency (median of 10) tvmc" in res.stdout and "execution time" in res.stdout
    assert (tmp_path / "out" / "ocr_rec.tar").is_file() and (tmp_path / "out" / "ocr_input.png").is_file()
