"""Symbolic shapes end to end (issue 29, point 5) for the two models beside the encoder and the CNN
of test_symbolic_e2e.py: a GPT-2-style decoder prefill (sequence 1..256: Range positions, a causal
mask sliced from a constant lower-triangular buffer or built by Trilu, multi-head attention, tanh
GELU, tied LM head; tests/e2e/builders.gpt2_prefill) and a CRNN text recognizer (image [1, 1, 32,
W], W 16..2048: conv/BN/ReLU/max-pool stack that collapses the height, two bidirectional LSTMs
over the W / 4 - 1 time steps, a per-step classifier; tests/e2e/builders.crnn). Each model is
compiled once for its range and run at five or more sizes (the lower bound, the upper bound, 1
where the range has it, sizes that are not multiples of the vector width), each matching
onnxruntime. The LSTM over a symbolic number of steps runs as a loop at run time
(tvmc/frontend/onnx/recurrent.py); the recurrent cases below also cover GRU, RNN, reverse
directions, sequence_lens and initial states there. Float32 outputs match within rtol 1e-4, atol
1e-5 (1e-4 absolute for the logits of 256 positions). The arm (qemu-user) and wasm (wasmtime)
cases and the full sweeps are slow."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.e2e.builders import crnn, gpt2_prefill
from tests.e2e.test_symbolic_e2e import check_sizes
from tests.targets import require
from tvmc.driver import CompileOptions, compile_model
from tvmc.errors import InputError
from tvmc.package import load_artifact, save_artifact
from tvmc.runtime import create_executor
from tvmc.runtime.control import run_loop
from tvmc.runtime.cpu import GraphExecutor
from tvmc.target import resolve_target

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

TOL = dict(rtol=1e-4, atol=1e-5)
GPT_RANGE, CRNN_RANGE = {"seq": (1, 256)}, {"width": (16, 2048)}
SEQS = [1, 7, 17, 100, 256]
WIDTHS = [16, 17, 37, 100, 2048]


def gpt_feeds(seq: int, vocab: int = 256) -> dict:
    return {"input_ids": np.random.default_rng(seq).integers(0, vocab, (1, seq)).astype(np.int64)}


def crnn_feeds(width: int) -> dict:
    return {"image": np.random.default_rng(width).uniform(0, 1, (1, 1, 32, width)).astype(np.float32)}


def compiled(model, target, tmp_path_factory, name, **options):
    return save_artifact(compile_model(model, target, CompileOptions(**options)),
                         tmp_path_factory.mktemp("symmodels") / f"{name}.tar")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    model = gpt2_prefill()
    return model, compiled(model, resolve_target("native"), tmp_path_factory, "gpt2", dim_ranges=GPT_RANGE)


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory):
    model = crnn()
    return model, compiled(model, resolve_target("native"), tmp_path_factory, "crnn", dim_ranges=CRNN_RANGE)


def test_gpt2_prefill_one_artifact_every_sequence_length(gpt2):
    check_sizes(*gpt2, gpt_feeds, SEQS, tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.slow  # the causal mask built by Trilu; the sliced constant mask (the default) runs in make test
def test_gpt2_prefill_with_a_trilu_causal_mask(tmp_path_factory):
    """Trilu(upper=0) of ConstantOfShape([seq, seq]): the mask from aranges of the symbolic extent."""
    model = gpt2_prefill(layers=1, hidden=32, heads=2, mask="trilu")
    path = compiled(model, resolve_target("native"), tmp_path_factory, "gpt2_trilu", dim_ranges=GPT_RANGE)
    check_sizes(model, path, gpt_feeds, [1, 19, 256], tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.slow  # 11 s compile; the symbolic encoder, CNN and GPT-2 prefill run in make test
def test_crnn_one_artifact_every_width(recognizer):
    check_sizes(*recognizer, crnn_feeds, WIDTHS)


@pytest.mark.slow  # shares the CRNN artifact above
def test_crnn_metadata_and_range_errors(recognizer):
    """The steps axis of the logits is W // 4 - 1 of the width variable; a width outside
    16..2048 is refused naming input, dimension, value and range."""
    art = load_artifact(recognizer[1])
    assert art.metadata["size_vars"] == [{"name": "width", "range": "16..2048"}]
    assert art.metadata["outputs"][0]["symbolic_shape"] == ["width // 4 - 1", 1, 37]
    assert art.metadata["outputs"][0]["shape"] == [511, 1, 37]
    ex = GraphExecutor(recognizer[1])
    for width in (15, 2049):
        with pytest.raises(InputError, match=rf"^input 'image': dimension 3 is {width}, outside the range of width "
                                             r"in 16\.\.2048 the model was compiled for$"):
            ex.set_input("image", np.zeros((1, 1, 32, width), np.float32))


def test_gpt2_memory_plan_at_the_bound(gpt2):
    """The range plan at seq 256 is at most the static plan at 256 (issue 29). The causal mask,
    a Slice of the constant [256, 256] buffer at [seq, seq], is computed inside each layer's
    kernel that reads it (FuseOps._constant_prologue): materialized for both layers, it was a
    [256, 256] bool activation (64 KiB) that the static plan, where the slice folds into a
    constant, does not have."""
    static = compile_model(gpt2[0], resolve_target("native"), CompileOptions(input_shapes={"input_ids": [1, 256]}))
    planned = load_artifact(gpt2[1]).metadata["planned_activation_bytes"]
    assert 0 < planned <= static.metadata["planned_activation_bytes"]


def test_pooling_over_symbolic_height_and_width(tmp_path_factory):
    """tests/frontend/test_symbolic_shapes.cnn_model with batch, height and width symbolic: a padded
    3x3/2 max pool and a ceil-mode 2x2 average pool over symbolic extents, at sizes that are not
    multiples of the vector width."""
    from tests.frontend.test_symbolic_shapes import cnn_model

    model = cnn_model()
    path = compiled(model, resolve_target("native"), tmp_path_factory, "cnn_hw",
                    dim_ranges={"N": (1, 4), "H": (8, 40), "W": (8, 40)})
    r = np.random.default_rng(11)
    shapes = {1: (1, 8, 8), 2: (2, 37, 19), 3: (4, 40, 40), 4: (3, 21, 33)}
    check_sizes(model, path, lambda k: {"x": r.standard_normal((shapes[k][0], 3) + shapes[k][1:]).astype(np.float32)},
                list(shapes))


# --- recurrent ops over a symbolic number of steps -----------------------------------------------

def recurrent_model(op: str, direction: str, hidden: int = 8, inputs: int = 5, batch: int = 3,
                    lens: bool = False, initial: bool = False) -> onnx.ModelProto:
    """X [T, batch, inputs] (dim_param T) -> `op` (RNN, GRU, LSTM) -> Y, Y_h (and Y_c); with
    `lens` a graph input sequence_lens int32 [batch], with `initial` initial states as
    initializers."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    d = 2 if direction == "bidirectional" else 1
    r = np.random.default_rng(5)
    inits = {"W": r.uniform(-0.5, 0.5, (d, gates * hidden, inputs)), "R": r.uniform(-0.5, 0.5, (d, gates * hidden,
                                                                                                 hidden)),
             "B": r.uniform(-0.5, 0.5, (d, 2 * gates * hidden))}
    names = ["X", "W", "R", "B", "lens" if lens else ""]
    if initial:
        inits["h0"] = r.uniform(-1, 1, (d, batch, hidden))
        names.append("h0")
        if op == "LSTM":
            inits["c0"] = r.uniform(-1, 1, (d, batch, hidden))
            names.append("c0")
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction)
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", batch, inputs])]
    if lens:
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
    g = helper.make_graph([node], "rec", graph_inputs,
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", d, batch, hidden])] +
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [d, batch, hidden]) for o in outs[1:]],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("op,direction,lens,initial", [("LSTM", "bidirectional", False, True),
                                                       ("GRU", "reverse", False, False),
                                                       ("RNN", "forward", True, True),
                                                       ("LSTM", "reverse", True, False)])
def test_recurrent_ops_over_a_symbolic_sequence(op, direction, lens, initial, tmp_path_factory):
    """One artifact for T in 1..40 at T = 1, 7, 40: Y and the final states match onnxruntime;
    with sequence_lens the steps past a sequence's length keep its state and give 0."""
    model = recurrent_model(op, direction, lens=lens, initial=initial)
    path = compiled(model, resolve_target("native"), tmp_path_factory, f"{op}_{direction}", dim_ranges={"T": (1, 40)})

    def feeds(t):
        r = np.random.default_rng(t)
        f = {"X": r.standard_normal((t, 3, 5)).astype(np.float32)}
        if lens:
            f["lens"] = np.array([t, max(1, t // 2), 1], np.int32)
        return f

    check_sizes(model, path, feeds, [1, 7, 40])


def test_the_python_loop_interpreter_stacks_scan_outputs():
    """tvmc.runtime.control.run_loop (the OpenCL and CUDA executors' loop): scan output values go
    to row i of their loop output, carried values to their outputs after the last iteration."""
    mem = {0: np.array(3, np.int64), 1: np.array(True), 2: np.zeros(2, np.float32), 3: np.zeros((5, 2), np.float32),
           10: None, 11: None, 12: None, 20: None, 21: None, 30: None, 31: None}

    def body():  # carried x -> x + i; scan output x * 10
        mem[21] = mem[12] + mem[10]
        mem[20] = np.array(True)
        mem[22] = mem[21] * 10

    loop = {"trip_count": 0, "cond": 1, "init": [2], "body_inputs": [10, 11, 12], "body_outputs": [20, 21, 22],
            "outputs": [30, 31], "output_index": [0, 1], "num_carried": 1}
    mem[31] = np.zeros((5, 2), np.float32)
    run_loop(loop, body, lambda e: mem[e], lambda e, v: mem.__setitem__(e, np.array(v)))
    np.testing.assert_array_equal(mem[30], [3, 3])
    np.testing.assert_array_equal(mem[31][:3, 0], [0, 10, 30])


# --- full sweeps, arm (qemu-user) and wasm (wasmtime) ---------------------------------------------

@pytest.mark.slow
def test_gpt2_prefill_sweep(gpt2):
    check_sizes(*gpt2, gpt_feeds, [2, 15, 16, 31, 64, 129, 200, 255], tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.slow
def test_crnn_sweep(recognizer):
    check_sizes(*recognizer, crnn_feeds, [18, 19, 20, 64, 65, 333, 1000, 2047])


@pytest.mark.slow
def test_crnn_memory_plan_at_most_the_static_plan_at_the_bound(tmp_path_factory):
    """Width 16..256 against the static artifact at 256 (63 steps): the static form unrolls the
    LSTMs, 511 steps each at the full range's bound (its concatenation of the steps' outputs, a
    chain of 511 selects, overflowed the recursion until concatenate became a tree of selects; the
    unrolled steps still make that compile long for a test)."""
    model = crnn()
    path = compiled(model, resolve_target("native"), tmp_path_factory, "crnn256", dim_ranges={"width": (16, 256)})
    static = compile_model(model, resolve_target("native"), CompileOptions(input_shapes={"image": [1, 1, 32, 256]}))
    assert 0 < load_artifact(path).metadata["planned_activation_bytes"] <= static.metadata["planned_activation_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["arm", "wasm", "opencl", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_ported_models_one_artifact_every_size(target, tmp_path_factory):
    """GPT-2 prefill (seq 1, 17, 33, 100, 256) and CRNN (width 16, 17, 37, 301, 2048) on arm under qemu-user (the C
    runner), on wasm (wasmtime), on OpenCL (PoCL) and on CUDA (where an NVIDIA GPU is lent), one
    artifact per model."""
    t = require(target).target
    model = gpt2_prefill(layers=1)
    check_sizes(model, compiled(model, t, tmp_path_factory, "gpt2", dim_ranges=GPT_RANGE), gpt_feeds,
                [1, 17, 33, 100, 256], create_executor, tol=dict(rtol=1e-4, atol=1e-4))
    model = crnn(lstm_layers=1)
    check_sizes(model, compiled(model, t, tmp_path_factory, "crnn", dim_ranges=CRNN_RANGE), crnn_feeds,
                [16, 17, 37, 301, 2048], create_executor)


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["cuda", "cuda-sm90"])
def test_ported_models_compile_for_cuda_and_ptxas_accepts_them(target_name):
    """GPT-2 prefill and CRNN (one layer each) compiled over their ranges for CUDA: ptxas
    assembles every kernel (mod.cubin) and the kernels that need the sizes take them."""
    from tvmc.codegen.nvptx import assembler_missing

    target = resolve_target(target_name)
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    for model, ranges in ((gpt2_prefill(layers=1), GPT_RANGE), (crnn(lstm_layers=1), CRNN_RANGE)):
        art = compile_model(model, target, CompileOptions(dim_ranges=ranges))
        assert "mod.cubin" in art.device_binaries and art.graph_json["size_args"]
