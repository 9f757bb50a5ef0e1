"""End to end (issue 30): a ShuffleNet-style network (grouped 1x1 convs, channel shuffles,
depthwise 3x3, residual adds and concatenations) compiled for this host's CPU against
onnxruntime, with grouped convs blocked (nn.conv2d_nchwc with groups, channel_shuffle in NCHW[x]c)
and with them kept NCHW (AlterOpLayout.grouped=0)."""

from __future__ import annotations


import numpy as np
import pytest

from tests.e2e.builders import shufflenet_style
from tests.e2e.models import compile_module, onnxruntime_outputs, run_module

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

RANDOM_TOL = dict(rtol=1e-3, atol=1e-4)


def _compile_and_run(model, x, pass_config):
    """(logits, fused function names of mod.json) of `model` compiled for native at opt level 3."""
    module = compile_module(model, pass_config=pass_config)
    funcs = [n["attrs"]["func_name"] for n in module.graph_json["nodes"] if n["op"] == "tvm_op"]
    return run_module(module, {"input": x})["logits"], funcs


@pytest.mark.parametrize("grouped", [1, 0])
def test_shufflenet_style_block_matches_onnxruntime(grouped):
    # 4 groups: bottlenecks of 32 and 64 channels, 8 and 16 per group (blocks 8 and 16), the first
    # unit's last conv 104 = 128 - 24 channels, 26 per group (block 2: a GEMM per group in NCHW,
    # AlterOpLayout.group_conv2d_as_matmul); odd input
    model = shufflenet_style(seed=3, size=35, stages=((128, 2), (256, 2)), groups=4)
    x = np.random.default_rng(0).standard_normal((1, 3, 35, 35)).astype(np.float32)
    got, funcs = _compile_and_run(model, x, {"AlterOpLayout.grouped": grouped})
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["logits"], **RANDOM_TOL)
    nchw_convs = [f for f in funcs if f.startswith("fused_nn_conv2d_") and "nchwc" not in f]
    shuffles = [f for f in funcs if "channel_shuffle" in f]
    if grouped:
        # every conv but that one blocked, the 3 shuffles (the first unit's first conv is not grouped)
        # in NCHW[x]c
        gemms = [f for f in funcs if f.startswith("fused_nn_matmul")]
        assert not nchw_convs and len(gemms) == 1 and len(shuffles) == 3, funcs
        assert not any("transpose" in f for f in funcs), funcs
    else:
        assert len(nchw_convs) == 7 and not shuffles, funcs   # the 7 grouped 1x1 convs
