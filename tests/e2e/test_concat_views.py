"""End to end (issue 30): concatenations whose inputs are written in place (PlanMemory's
concat_views: each producer writes its slice of the concatenation's storage, the concatenation
runs no kernel) on every runtime that places entries at storage offsets (the C API inside mod.so
through ctypes, the C runner under qemu for ARM, mod.wasm under wasmtime), against onnxruntime;
GPU libraries keep the concatenation kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.builders import concat_net
from tests.e2e.models import compile_module, onnxruntime_outputs, run_module
from tests.targets import require

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

RANDOM_TOL = dict(rtol=1e-4, atol=1e-4)


def _compile_and_run(model, x, target, concat_views=True):
    """(logits, mod.json) of `model` compiled for `target` at opt level 3 and run once."""
    from tvmc.target import resolve_target

    module = compile_module(model, resolve_target(target), pass_config={"PlanMemory.concat_views": concat_views})
    return run_module(module, {"input": x})["logits"], module.graph_json


def _nops(graph_json) -> list:
    return [n["name"] for n in graph_json["nodes"] if n["op"] == "tvm_op" and n["attrs"]["func_name"] == "__nop"]


@pytest.mark.parametrize("name", ["native", "wasm", pytest.param("arm", marks=pytest.mark.slow)])
def test_concatenations_in_place_match_onnxruntime(name):
    target = require(name).target.name if name != "native" else "native"
    model = concat_net(seed=1, size=12)
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    got, graph_json = _compile_and_run(model, x, target)
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["logits"], **RANDOM_TOL)
    # six concatenations, five in place: the fire module's, the Inception block's, the dense
    # block's first two and the last one (NCHW: the 3-channel conv is not blocked); the dense
    # block's third is fused with the layout_transform to NCHW that its readers need, so it copies
    nops = _nops(graph_json)  # and the reshape before the classifier, a view of its input (reshape_views)
    assert len([n for n in nops if "concatenate" in n]) == 5 and all("concatenate" in n or n.startswith("fused_reshape")
                                                                      for n in nops), nops
    offsets = graph_json["attrs"]["storage_offset"][1]
    assert any(offsets) and all(o % 64 == 0 for o in offsets)
    copied, _ = _compile_and_run(model, x, target, concat_views=False)
    np.testing.assert_array_equal(got, copied)


def test_batch_above_one_copies():
    """At batch 2 a channel slice of the concatenation is two runs of memory, not one: the
    concatenation runs its kernel."""
    model = concat_net(seed=2, size=8, batch=2)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got, graph_json = _compile_and_run(model, x, "native")
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["logits"], **RANDOM_TOL)
    assert not [n for n in _nops(graph_json) if "concatenate" in n] and "storage_offset" not in graph_json["attrs"]


def test_gpu_libraries_keep_the_concatenation_kernels():
    """The GPU executors allocate one device buffer per storage id: no views there (OpenCL, PoCL)."""
    require("opencl")
    model = concat_net(seed=3, size=8)
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got, graph_json = _compile_and_run(model, x, "opencl")
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"input": x})["logits"], rtol=1e-3, atol=1e-3)
    assert not _nops(graph_json) and "storage_offset" not in graph_json["attrs"]
