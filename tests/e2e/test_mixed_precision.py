"""Mixed precision as a user meets it (`tvmc compile --mixed-precision float16|bfloat16`): float16
or bfloat16 weights (params about half the float32 build's), outputs within that dtype's tolerance
of onnxruntime's float32 ones on every target that runs here (CPUs keep the 16-bit floats in
memory and compute in float32; OpenCL on PoCL; CUDA on a GPU, marked cuda: the tensor-core kernels
on sm_80 and later), the CLI's flags and errors."""

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

# x the reference's largest magnitude. float16 keeps 11 significant bits; a deep stack of rounded
# layers drifts by a few ulps. bfloat16 keeps 8 (unit roundoff u = 2**-8, 8x float16's 2**-11):
# 16 u, one u per bfloat16 rounding along the BERT encoder's deepest path (about 16: the casts of
# activations and weights, the matmul, bias and GELU outputs of two layers), the bound if no two
# errors cancel. Measured on native and PoCL: CNN 1.3 u and BERT 3.6 u (float16: 1.3 and 3.2 of
# its u, so the error scales with the unit roundoff).
ATOL = {"float16": 2e-2, "bfloat16": 16 * 2.0**-8}
DTYPES = sorted(ATOL)
# the PTX of the tensor-core mma for each operand dtype (f32 accumulators)
MMA_PTX = {"float16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
           "bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}

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


def _check(model_name, target_name, tmp_path, dtype="float16"):
    import tvmc
    from tvmc.runtime import create_executor

    runs = require(target_name)
    spec = _cuda_spec() if target_name == "cuda" else runs.spec
    model = MODELS[model_name]()
    feeds = _feeds(model)
    tar = tmp_path / "mp.tar"
    tvmc.compile(model, target=spec, output=tar, mixed_precision=dtype)
    ex = create_executor(tar, None if target_name == "native" else target_name)
    for k, v in feeds.items():
        ex.set_input(k, v)
    ex.run()
    ref = list(onnxruntime_outputs(model, feeds).values())
    for k, r in enumerate(ref):
        out = ex.get_output(k)
        assert out.dtype == r.dtype and out.shape == r.shape
        err = float(np.abs(out - r).max())
        assert err <= ATOL[dtype] * float(np.abs(r).max()), f"output {k}: max abs error {err:.3g}"
    return tar


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("target_name", ["native", "opencl"])
def test_mixed_precision_matches_onnxruntime_float32(model_name, target_name, dtype, tmp_path):
    _check(model_name, target_name, tmp_path, dtype)


def _bfloat16_onnx_model():
    """x float32 [2, 24] -> Cast BFLOAT16 -> MatMul w [24, 16] (bfloat16 initializer) -> Add b
    (a bfloat16 graph input) -> Relu -> y bfloat16: a model of bfloat16 tensors, not mixed precision."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(3).standard_normal((24, 16)).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["xb", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 24]),
                                              helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [16])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 16])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


@pytest.mark.parametrize("target_name", ["native", "opencl", "wasm"])
def test_a_bfloat16_onnx_model_runs(target_name, tmp_path):
    """bfloat16 graph inputs, params and outputs through the artifact and the runtime: against
    ml_dtypes (the product in float64, rounded once to bfloat16, then the bias add rounded)
    within one bfloat16 ulp (2**-7 relative)."""
    import ml_dtypes

    import tvmc
    from tvmc.runtime import create_executor

    runs = require(target_name)
    model, w = _bfloat16_onnx_model()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 24)).astype(np.float32)
    b = rng.standard_normal(16).astype(ml_dtypes.bfloat16)
    tar = tmp_path / "bf16.tar"
    tvmc.compile(model, target=runs.spec, output=tar)
    ex = create_executor(tar, None if target_name == "native" else target_name)
    ex.set_input("x", x)
    ex.set_input("b", b)
    ex.run()
    out = ex.get_output(0)
    assert out.dtype == np.dtype("bfloat16") and out.shape == (2, 16)
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    m = (xb @ w.astype(np.float64)).astype(np.float32).astype(ml_dtypes.bfloat16)
    ref = np.maximum(m.astype(np.float32) + b.astype(np.float32), 0).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2.0**-7, atol=1e-6)


def test_a_bfloat16_onnx_model_through_the_cli(tmp_path):
    """tvmc compile and tvmc run with bfloat16 inputs and outputs in .npz files (numpy writes
    ml_dtypes' bfloat16 as 2-byte void elements: --inputs reads them as bfloat16)."""
    import ml_dtypes
    import onnx

    from tvmc.runtime import create_executor

    model, _ = _bfloat16_onnx_model()
    onnx.save(model, tmp_path / "bf16.onnx")
    tvmc("compile", tmp_path / "bf16.onnx", "--target", "native", "-o", tmp_path / "bf16.tar")
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 24)).astype(np.float32),
             "b": rng.standard_normal(16).astype(ml_dtypes.bfloat16)}
    np.savez(tmp_path / "in.npz", **feeds)
    res = tvmc("run", tmp_path / "bf16.tar", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert "bfloat16" in res.stdout
    out = np.load(tmp_path / "out.npz")["y"].view(ml_dtypes.bfloat16)
    ex = create_executor(tmp_path / "bf16.tar", None)
    for k, v in feeds.items():
        ex.set_input(k, v)
    ex.run()
    np.testing.assert_array_equal(out.view(np.uint16), ex.get_output(0).view(np.uint16))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_mixed_precision_on_the_gpu_matches_onnxruntime_float32(model_name, dtype, tmp_path):
    tar = _check(model_name, "cuda", tmp_path, dtype)
    with tarfile.open(tar) as tf:
        ptx = tf.extractfile("mod.ptx").read().decode()
    from tvmc.target import resolve_target

    if dtype in resolve_target(_cuda_spec()).tensor_core_dtypes:
        assert MMA_PTX[dtype] in ptx


@pytest.mark.parametrize("dtype", [pytest.param(d, marks=pytest.mark.slow) if d == "bfloat16" else d
                                   for d in DTYPES])  # the same path; bfloat16's in make test-all
def test_params_are_16_bit_and_about_half_the_size(dtype, tmp_path):
    model = tmp_path / "cnn.onnx"
    import onnx

    from tvmc.package import load_artifact

    onnx.save(MODELS["cnn"](), model)
    tvmc("compile", model, "--target", "native", "-o", tmp_path / "f32.tar")
    tvmc("compile", model, "--target", "native", "-o", tmp_path / "low.tar", "--mixed-precision", dtype)
    sizes = {}
    for name in ("f32", "low"):
        with tarfile.open(tmp_path / f"{name}.tar") as tf:
            sizes[name] = tf.getmember("mod.params").size
            meta = json.load(tf.extractfile("metadata.json"))
    assert sizes["low"] <= 0.55 * sizes["f32"], sizes
    assert meta["options"]["mixed_precision"] == dtype
    params = load_artifact(tmp_path / "low.tar").params
    assert {a.dtype for a in params.values() if a.size > 16} == {np.dtype(dtype)}


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
