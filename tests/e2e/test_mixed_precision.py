"""Mixed precision as a user meets it (`tvmc compile --mixed-precision float16`): float16 weights
(params about half the float32 build's), outputs within float16 tolerances of onnxruntime's
float32 ones on every target that runs here (CPUs keep float16 in memory and compute in float32;
OpenCL on PoCL; CUDA on a GPU, marked cuda: the tensor-core kernels on sm_80 and later), the CLI's
flags and errors."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

from tests.e2e.builders import bert_encoder, resnet_style_cnn
from tests.e2e.models import onnxruntime_outputs
from tests.e2e.test_cli_e2e import tvmc
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

# float16 keeps 11 significant bits; a deep stack of rounded layers drifts by a few ulps
ATOL = 2e-2  # x the reference's largest magnitude

MODELS = {"cnn": lambda: resnet_style_cnn(seed=5, size=32),
          "bert": lambda: bert_encoder(seed=6, seq=32, hidden=64, heads=2, layers=2, vocab=100)}


def _feeds(model):
    rng = np.random.default_rng(0)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.standard_normal(shape).astype(np.float32) if i.type.tensor_type.elem_type == 1
                       else rng.integers(0, 100, shape).astype(np.int64))
    return out


def _cuda_spec():
    from tvmc.runtime.cuda import gpu_info

    return f"cuda -mcpu={gpu_info()[1]}"


def _check(model_name, target_name, tmp_path):
    import tvmc
    from tvmc.runtime import create_executor

    runs = require(target_name)
    spec = _cuda_spec() if target_name == "cuda" else runs.spec
    model = MODELS[model_name]()
    feeds = _feeds(model)
    tar = tmp_path / "mp.tar"
    tvmc.compile(model, target=spec, output=tar, mixed_precision="float16")
    ex = create_executor(tar, None if target_name == "native" else target_name)
    for k, v in feeds.items():
        ex.set_input(k, v)
    ex.run()
    ref = list(onnxruntime_outputs(model, feeds).values())
    for k, r in enumerate(ref):
        out = ex.get_output(k)
        assert out.dtype == r.dtype and out.shape == r.shape
        err = float(np.abs(out - r).max())
        assert err <= ATOL * float(np.abs(r).max()), f"output {k}: max abs error {err:.3g}"
    return tar


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("target_name", ["native", "opencl"])
def test_mixed_precision_matches_onnxruntime_float32(model_name, target_name, tmp_path):
    _check(model_name, target_name, tmp_path)


@pytest.mark.cuda
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_mixed_precision_on_the_gpu_matches_onnxruntime_float32(model_name, tmp_path):
    tar = _check(model_name, "cuda", tmp_path)
    with tarfile.open(tar) as tf:
        ptx = tf.extractfile("mod.ptx").read().decode()
    from tvmc.target import resolve_target

    if "float16" in resolve_target(_cuda_spec()).tensor_core_dtypes:
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx


def test_params_are_float16_and_about_half_the_size(tmp_path):
    model = tmp_path / "cnn.onnx"
    import onnx

    onnx.save(MODELS["cnn"](), model)
    tvmc("compile", model, "--target", "native", "-o", tmp_path / "f32.tar")
    tvmc("compile", model, "--target", "native", "-o", tmp_path / "f16.tar", "--mixed-precision", "float16")
    sizes = {}
    for name in ("f32", "f16"):
        with tarfile.open(tmp_path / f"{name}.tar") as tf:
            sizes[name] = tf.getmember("mod.params").size
            meta = json.load(tf.extractfile("metadata.json"))
    assert sizes["f16"] <= 0.55 * sizes["f32"], sizes
    assert meta["options"]["mixed_precision"] == "float16"


def test_cli_refuses_bad_mixed_precision_flags(tmp_path):
    model = tmp_path / "cnn.onnx"
    import onnx

    onnx.save(MODELS["cnn"](), model)
    res = tvmc("compile", model, "--target", "native", "-o", tmp_path / "x.tar", "--mixed-precision", "float16",
               "--mixed-precision-ops", "nn.dense,conv", check=False)
    assert res.returncode != 0 and "unknown operator 'conv'" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = tvmc("compile", model, "--target", "native", "-o", tmp_path / "y.tar", "--mixed-precision-ops",
               "nn.dense", check=False)
    assert res.returncode != 0 and "needs mixed_precision" in res.stderr
    assert not (tmp_path / "x.tar").exists() and not (tmp_path / "y.tar").exists()
