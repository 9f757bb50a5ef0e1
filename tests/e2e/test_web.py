"""End to end on the wasm target beyond Python: `tvmc run` and `tvmc inspect` of a wasm mod.tar,
the web output format (`--output-format web`) run by Node with the ES-module runtime tvmc.js and
by a real headless browser (Debian's chromium driven by playwright-core from bench/web), each
compared with onnxruntime on tvmc.js's example input. Each test skips naming what is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.builders import mlp, resnet_style_cnn
from tests.e2e.models import onnxruntime_outputs
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

REPO = Path(__file__).resolve().parents[2]
WEB_TOOLS = REPO / "bench" / "web"
TOL = dict(rtol=1e-4, atol=1e-5)


def example_input(dtype: str, shape) -> np.ndarray:
    """tvmc.js's exampleInput: element i is ((i * 7919) % 1000) / 500 - 1 for floats, i % 2 else."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    values = ((i * 7919) % 1000) / 500 - 1 if dtype.startswith("float") else i % 2
    return values.astype(dtype).reshape(shape)


def _compile_web(model, folder):
    import tvmc

    return tvmc.compile(model, target=require("wasm").target, output=folder, output_format="web")


def _reference(model, result) -> dict:
    feeds = {i["name"]: example_input(i["dtype"], i["shape"]) for i in result.module.metadata["inputs"]}
    return onnxruntime_outputs(model, feeds)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found; install the Debian package nodejs (apt-get install nodejs)")
    return node


def run_node_module(folder, source: str):
    """Run `source`, an ES module written into `folder` beside the web output (as run.mjs), in
    Node; its stdout parsed as JSON. Skips naming nodejs when node is absent."""
    node = _node()
    script = folder / "run.mjs"
    script.write_text(source)
    res = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_node_runs_the_web_output_as_onnxruntime(tmp_path):
    _node()
    model = resnet_style_cnn(seed=3, size=20)
    result = _compile_web(model, tmp_path / "site")
    got = run_node_module(tmp_path,
        'import { exampleInput, loadModel } from "./site/tvmc.js";\n'
        'const m = await loadModel(new URL("./site/", import.meta.url));\n'
        "for (const t of m.inputs) m.setInput(t.name, exampleInput(t.dtype, t.shape.reduce((a, b) => a * b, 1)));\n"
        "m.run();\n"
        "const outputs = Object.fromEntries(m.outputs.map((t, i) => [t.name, Array.from(m.getOutput(i), Number)]));\n"
        "let error = null;\n"
        'try { m.setInput(m.inputs[0].name, new Float32Array(3)); } catch (e) { error = e.message; }\n'
        "m.destroy();\n"
        "console.log(JSON.stringify({ outputs, error }));\n")
    for name, ref in _reference(model, result).items():
        np.testing.assert_allclose(np.array(got["outputs"][name], np.float32).reshape(ref.shape), ref, **TOL)
    assert "input 'input': expected a Float32Array of 4800 bytes" in got["error"]


def _playwright_missing() -> str | None:
    if not (WEB_TOOLS / "node_modules" / "playwright-core").is_dir():
        return "the npm package playwright-core is not installed in bench/web (make install runs npm install there)"
    return None


def test_browser_page_shows_the_outputs_of_onnxruntime(tmp_path):
    """The page of the web output, in headless Chromium: the outputs it computes (and shows) are
    onnxruntime's; a screenshot of it is written beside the site."""
    from tvmc.toolchain import describe_package, locate

    node = _node()
    target = require("wasm").target
    if locate(target.browser[0]) is None:
        pytest.skip(f"browser '{target.browser[0]}' not found; install {describe_package(target.browser_package)}")
    if _playwright_missing():
        pytest.skip(_playwright_missing())
    model = mlp(seed=5, batch=2, sizes=(30, 64, 10))
    result = _compile_web(model, tmp_path / "site")
    res = subprocess.run([node, str(WEB_TOOLS / "browser.mjs"), str(tmp_path / "site"), json.dumps(target.browser),
                          str(tmp_path / "page.png")], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    assert "error" not in got, got["error"]
    assert "HeadlessChrome" in got["userAgent"] and got["timing"]["runs"] == 20
    for name, ref in _reference(model, result).items():
        np.testing.assert_allclose(np.array(got["outputs"][name], np.float32).reshape(ref.shape), ref, **TOL)
    assert (tmp_path / "page.png").stat().st_size > 1000


def test_run_profile_and_inspect_a_wasm_artifact(tmp_path):
    """`tvmc run` (wasmtime) with profile and top-k, `tvmc inspect` (the description read from the
    module's custom section, no instantiation) of a wasm mod.tar."""
    import onnx
    from click.testing import CliRunner

    from tvmc.cli import cli

    require("wasm")
    model = mlp(seed=6, batch=1, sizes=(20, 40, 7))
    onnx.save(model, tmp_path / "m.onnx")
    runner = CliRunner()
    res = runner.invoke(cli, ["compile", str(tmp_path / "m.onnx"), "--target", "wasm", "-o", str(tmp_path / "m.tar")])
    assert res.exit_code == 0, res.output
    x = np.random.default_rng(0).standard_normal((1, 20)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    res = runner.invoke(cli, ["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                              str(tmp_path / "out.npz"), "--profile", "--print-top", "3", "--repeat", "2"])
    assert res.exit_code == 0, res.output
    assert "fused_nn_dense" in res.output and "top-3 of y" in res.output
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], onnxruntime_outputs(model, {"x": x})["y"], **TOL)
    res = runner.invoke(cli, ["inspect", str(tmp_path / "m.tar"), "--json"])
    assert res.exit_code == 0, res.output
    assert "mod.wasm" in res.output and "wasm32-unknown-wasi" in res.output


def test_web_output_needs_a_wasm_target_and_a_folder_of_its_own(tmp_path):
    import tvmc
    from tvmc.errors import ArtifactError

    require("wasm")
    model = mlp(seed=7, batch=1, sizes=(8, 4))
    with pytest.raises(ArtifactError, match="needs a wasm target"):
        tvmc.compile(model, target="native", output=tmp_path / "site", output_format="web")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match=r"holds other files \(notes.txt\)"):
        _compile_web(model, tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    _compile_web(model, tmp_path / "site")
    _compile_web(model, tmp_path / "site")  # an earlier web output is replaced
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == [
        "index.html", "metadata.json", "mod.json", "mod.params", "mod.wasm", "tvmc.js", "tvmc_kernels.h"]
