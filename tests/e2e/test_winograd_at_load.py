"""Winograd weights transformed when the artifact loads (issue 30, point 3: "Winograd weights are
then transformed at load time"): AlterOpLayout gives each Winograd conv a
nn.winograd_weight_transform of its packed 3x3 weight, a kernel that the executors run once after
copying the params in (mod.json load-time nodes, the graph entry tvmc_graph_init), so mod.params
holds the model's weights, not the (m+2)^2 / 9 times larger transforms, and every run reads the
transforms from a storage no other tensor shares.

Checked on every CPU target that runs here (this host's CPU through the C API, wasm in wasmtime,
ARM under qemu-user: the same C API inside each library) against onnxruntime's float32 outputs;
the GPU targets never take Winograd (AlterOpLayout rewrites convs for CPUs only)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.e2e.models import compile_module, onnxruntime_outputs
from tests.targets import require
from tvmc.backends.base import described

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

RNG = np.random.default_rng(7)
W1 = (RNG.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
W2 = (RNG.standard_normal((32, 32, 3, 3)) * 0.2).astype(np.float32)
B1 = RNG.standard_normal(32).astype(np.float32)


def two_convs():
    """y = conv3x3(relu(conv3x3(x) + b1)), x [1, 16, 14, 13] (a width no output tile divides)."""
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])],
        "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 13])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2"), numpy_helper.from_array(B1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _executor(module, tmp_path):
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor

    return create_executor(save_artifact(module, tmp_path / "mod.tar"))


@pytest.mark.parametrize("name", ["native", "wasm", pytest.param("arm", marks=pytest.mark.slow)])
@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_weights_transformed_at_load_match_onnxruntime(name, tile, tmp_path):
    """Both convs run F(tile x tile, 3x3) on transforms computed at load time: mod.params holds the
    packed 3x3 weights (the model's bytes), the description lists one load-time call per conv and
    none among the run's calls, and two runs on two inputs match onnxruntime (float32; the
    transform computed in float32 at load time instead of float64 at compile time moves the
    outputs by less than 1e-5 of their largest magnitude)."""
    target = require(name).target
    model = two_convs()
    module = compile_module(model, target, pass_config={"AlterOpLayout.winograd_tile_size": tile})
    desc = described(module.graph_json, module.params)
    assert len(desc["load_calls"]) == 2
    assert all("winograd_weight_transform" in c["func"] for c in desc["load_calls"])
    assert not any("winograd_weight_transform" in c["func"] for c in desc["calls"])
    assert sum(int(np.asarray(v).nbytes) for v in module.params.values()) == W1.nbytes + W2.nbytes + B1.nbytes
    ex = _executor(module, tmp_path)
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((1, 16, 14, 13)).astype(np.float32)
        ex.set_input("x", x)
        ex.run()
        want = onnxruntime_outputs(model, {"x": x})["y"]
        np.testing.assert_allclose(ex.get_output(0), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_load_time_transforms_keep_their_storage_and_stay_out_of_the_profile(tmp_path):
    """The transforms' outputs get storages of their own (PlanMemory never hands them to another
    tensor, or the second run would read clobbered weights); the kernel-by-kernel profile times the
    run's kernels only; the compile metadata counts calls per run without them."""
    from tvmc.api import kernel_counts
    from tvmc.mod_json import graph_attr, load_order

    module = compile_module(two_convs(), require("native").target,
                            pass_config={"AlterOpLayout.winograd_tile_size": 4})
    g = module.graph_json
    sids = graph_attr(g, "storage_id")
    loaded = [g["node_row_ptr"][nid] for nid in load_order(g)]
    assert len(loaded) == 2
    for e in loaded:
        assert sids.count(sids[e]) == 1
    distinct, calls, load = kernel_counts(module.metadata, g)
    assert load == 2 and calls == len(described(module.graph_json, module.params)["calls"])
    ex = _executor(module, tmp_path)
    ex.set_input("x", np.ones((1, 16, 14, 13), np.float32))
    names = [k["name"] for k in ex.profile(2)]
    assert names and not any("winograd_weight_transform" in n for n in names)


def test_weights_transformed_at_compile_time_on_request():
    """winograd_at_load 0 (with no size budget) puts the transforms themselves in mod.params, 4x
    the 3x3 weights for F(4x4), and leaves no load-time call."""
    module = compile_module(two_convs(), require("native").target,
                            pass_config={"AlterOpLayout.winograd_tile_size": 4, "AlterOpLayout.winograd_at_load": 0,
                                         "AlterOpLayout.size_budget": 0})
    assert "load_calls" not in described(module.graph_json, module.params)
    assert sum(int(np.asarray(v).nbytes) for v in module.params.values()) > 3.5 * (W1.nbytes + W2.nbytes)
