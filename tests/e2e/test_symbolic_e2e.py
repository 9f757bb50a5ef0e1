"""Symbolic shapes end to end (issue 29) on this host's x86 CPU, on arm (aarch64 under qemu-user,
through the C runner) and on wasm (wasmtime): a model is compiled once for a range of a dimension
and run at five sizes in it (1, an odd size, one that is not a multiple of
16, a multiple of 16, the upper bound), each matching onnxruntime: a BERT-style encoder layer
(sequence 1..512: Gather, Slice of positions, MatMul, Add, Softmax, LayerNormalization, erf GELU,
a pooler) and a small CNN (batch 1..16: Conv + Relu, strided Conv, GlobalAveragePool, Flatten,
Gemm). Float32 outputs match within rtol 1e-4, atol 1e-5 (sums of at most 64 products of unit
normal values; the attention averages over at most 512 positions). Also the range check at
set_input, inputs that disagree on a variable, the metadata and module description of a range
artifact, a fixed-shape artifact's hint, tuning a range at representative sizes, and the clear
stop of an op whose schedule does not take symbolic extents (OpenCL and CUDA:
tests/e2e/test_symbolic_gpu.py). The arm and wasm cases skip naming what is missing (qemu-user
and the cross compiler; wasmtime and clang)."""

from __future__ import annotations

import subprocess
import tarfile

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from tests.frontend.test_symbolic_shapes import bert_model, cnn_model
from tvmc.cli import cli
from tvmc.driver import CompileOptions, compile_model, extract_tasks
from tvmc.errors import InputError, ScheduleError, TuningError
from tests.targets import require
from tvmc.package import load_artifact, save_artifact
from tvmc.runtime import create_executor
from tvmc.runtime.cpu import GraphExecutor
from tvmc.target import resolve_target

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

TOL = dict(rtol=1e-4, atol=1e-5)
SEQ_MAX, BATCH_MAX = 512, 16  # the ranges issue 29 names: sequence 1..512, batch 1..16
SEQ_SIZES = [1, 7, 17, 96, SEQ_MAX]
BATCH_SIZES = [1, 2, 3, 5, BATCH_MAX]
ENCODER_SHAPES = {"input_ids": [1, f"1..{SEQ_MAX}"], "attention_mask": [1, f"1..{SEQ_MAX}"]}


def encoder_model():
    """The BERT-style encoder layer (tests/frontend/test_symbolic_shapes.bert_model) with position
    embeddings for SEQ_MAX tokens."""
    return bert_model(max_pos=SEQ_MAX)


def small_cnn():
    """[N, 3, 16, 16] -> Conv 8 + bias + Relu -> Conv 16 stride 2 + Relu -> GlobalAveragePool ->
    Flatten -> Gemm 10."""
    r = np.random.default_rng(29)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Relu", ["c2"], ["r2"]),
             n("GlobalAveragePool", ["r2"], ["gp"]), n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = {"w1": (8, 3, 3, 3), "b1": (8,), "w2": (16, 8, 3, 3), "wf": (10, 16), "bf": (10,)}
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          [numpy_helper.from_array(r.standard_normal(s).astype(np.float32), k)
                           for k, s in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    model = encoder_model()
    options = CompileOptions(input_shapes=ENCODER_SHAPES)
    path = save_artifact(compile_model(model, resolve_target("native"), options),
                         tmp_path_factory.mktemp("sym") / "encoder.tar")
    return model, path


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    model = small_cnn()
    options = CompileOptions(dim_ranges={"N": (1, BATCH_MAX)})
    path = save_artifact(compile_model(model, resolve_target("native"), options),
                         tmp_path_factory.mktemp("sym") / "cnn.tar")
    return model, path


def encoder_feeds(seq: int) -> dict:
    r = np.random.default_rng(seq)
    mask = np.ones((1, seq), np.int64)
    mask[0, seq // 2 + 1:] = 0  # padding at the end: the extended mask reaches the softmax
    return {"input_ids": r.integers(0, 50, (1, seq)).astype(np.int64), "attention_mask": mask}


def check_sizes(model, path, feeds_of, sizes, executor=GraphExecutor, tol=TOL):
    """One executor of the range artifact `path` runs every size; its outputs match
    onnxruntime's in shape and values (within `tol`)."""
    ex = executor(path)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for size in sizes:
        feeds = feeds_of(size)
        for name, value in feeds.items():
            ex.set_input(name, value)
        ex.run()
        for k, ref in enumerate(session.run(None, feeds)):
            got = ex.get_output(k)
            assert got.shape == ref.shape, (size, k)
            np.testing.assert_allclose(got, ref, err_msg=f"output {k} at size {size}", **tol)


def test_encoder_one_artifact_every_sequence_length(encoder):
    check_sizes(*encoder, encoder_feeds, SEQ_SIZES)


def test_cnn_one_artifact_every_batch(cnn):
    r = np.random.default_rng(3)
    check_sizes(*cnn, lambda n: {"x": r.standard_normal((n, 3, 16, 16)).astype(np.float32)}, BATCH_SIZES)


def check_size_outside_the_range_is_refused(ex, seq: int):
    """The encoder's executor `ex` refuses input_ids of sequence length `seq` (outside 1..512) at
    set_input, naming the input, the dimension, its value and the range."""
    with pytest.raises(InputError, match=rf"^input 'input_ids': dimension 1 is {seq}, outside the range of "
                                         r"seq in 1\.\.512 the model was compiled for$"):
        ex.set_input("input_ids", np.zeros((1, seq), np.int64))


@pytest.mark.parametrize("seq", [0, SEQ_MAX + 1])
def test_a_size_outside_the_range_is_refused_naming_input_dimension_value_and_range(encoder, seq):
    check_size_outside_the_range_is_refused(GraphExecutor(encoder[1]), seq)


def check_inputs_that_disagree_are_refused(ex, anchor: str = "^"):
    """The encoder's executor `ex` given input_ids of seq 7 and an attention_mask of seq 5: run()
    refuses naming both (the message starts the error where `anchor` is "^"); an input of the
    wrong rank is refused at set_input."""
    ex.set_input("input_ids", np.zeros((1, 7), np.int64))
    ex.set_input("attention_mask", np.ones((1, 5), np.int64))
    with pytest.raises(InputError, match=anchor + r"input 'input_ids': dimension 1 is 7, but seq is 5 \(from input "
                                                  r"'attention_mask'\)$"):
        ex.run()
    with pytest.raises(InputError, match=r"expected int64 of 2 dimensions, got int64 of shape \[7\]"):
        ex.set_input("input_ids", np.zeros(7, np.int64))


def check_tvmc_run_in_and_out_of_range(model, path, tmp_path):
    """`tvmc run` of the encoder's range artifact `path`: a size in range runs and its outputs
    match onnxruntime at that size; one past the bound exits 8 naming the input, the dimension,
    its value and the range."""
    feeds = encoder_feeds(9)
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(cli, ["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                                 str(tmp_path / "out.npz")])
    assert r.exit_code == 0, r.output
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["last_hidden"], want[0], **TOL)
    np.savez(tmp_path / "in.npz", input_ids=np.zeros((1, 513), np.int64), attention_mask=np.ones((1, 513), np.int64))
    r = CliRunner().invoke(cli, ["run", str(path), "--inputs", str(tmp_path / "in.npz")])
    assert r.exit_code == 8, r.output
    assert "input 'input_ids': dimension 1 is 513, outside the range of seq in 1..512 the model was compiled for" \
        in r.output


def test_inputs_that_disagree_on_a_variable_are_refused_at_run(encoder):
    check_inputs_that_disagree_are_refused(GraphExecutor(encoder[1]))


def test_metadata_and_description_show_the_ranges(encoder, cnn):
    art = load_artifact(encoder[1])
    assert art.metadata["size_vars"] == [{"name": "seq", "range": "1..512"}]
    ids = art.metadata["inputs"][0]
    assert ids["symbolic_shape"] == [1, "seq"] and ids["shape"] == [1, 512]
    assert art.metadata["outputs"][0]["symbolic_shape"] == [1, "seq", 16]
    assert "symbolic_shape" not in art.metadata["outputs"][1]  # the pooled output is static
    assert art.description["size_vars"] == [{"name": "seq", "lo": 1, "hi": SEQ_MAX}]
    assert all(c.get("sizes") in (None, [0]) for c in art.description["calls"])
    assert any(c.get("sizes") == [0] for c in art.description["calls"])
    static = compile_model(encoder[0], resolve_target("native"),
                           CompileOptions(input_shapes={"input_ids": [1, SEQ_MAX], "attention_mask": [1, SEQ_MAX]}))
    assert 0 < art.metadata["planned_activation_bytes"] <= static.metadata["planned_activation_bytes"]
    art = load_artifact(cnn[1])
    assert art.metadata["size_vars"] == [{"name": "N", "range": f"1..{BATCH_MAX}"}]
    # storage planned for the upper bound: no more than the static plan at N = BATCH_MAX
    static = compile_model(small_cnn(), resolve_target("native"),
                           CompileOptions(input_shapes={"x": [BATCH_MAX, 3, 16, 16]}))
    assert 0 < art.metadata["planned_activation_bytes"] <= static.metadata["planned_activation_bytes"]


def test_the_c_runner_runs_a_size_of_the_range_and_refuses_one_outside(encoder, tmp_path):
    model, path = encoder
    r = CliRunner().invoke(cli, ["build-runner", str(path), "-o", str(tmp_path / "tvmc_run")])
    assert r.exit_code == 0, r.output
    with tarfile.open(path) as tf:
        tf.extractall(tmp_path, members=[tf.getmember("mod.so"), tf.getmember("mod.params")])
    feeds = encoder_feeds(9)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    run = [str(tmp_path / "tvmc_run"), "-p", "mod.params", "-i", "input_ids=input_ids.npy",
           "-i", "attention_mask=attention_mask.npy"]
    subprocess.run(run + ["-o", "last_hidden=out.npy"], cwd=tmp_path, check=True, capture_output=True)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, **TOL)
    np.save(tmp_path / "input_ids.npy", np.zeros((1, 513), np.int64))
    res = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 8  # as tvmc run's InputError
    assert "input 'input_ids': dimension 1 is 513, outside the range of seq in 1..512" in res.stderr


def test_profile_runs_the_kernels_at_the_bound_sizes(encoder):
    """profile calls the kernels one by one with the size arguments of the inputs set."""
    model, path = encoder
    ex, feeds = GraphExecutor(path), encoder_feeds(11)
    for name, value in feeds.items():
        ex.set_input(name, value)
    assert len(ex.profile(2)) > 5
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ex.get_output(0), want, **TOL)


def test_inspect_shows_the_size_variables(encoder):
    r = CliRunner().invoke(cli, ["inspect", str(encoder[1])])
    assert r.exit_code == 0, r.output
    assert "size variables seq in 1..512; inputs input_ids:[1,seq] attention_mask:[1,seq]" in r.output


def test_compile_and_inspect_json_show_the_size_variables(tmp_path):
    """`tvmc compile --json` and `tvmc inspect --json` of a range artifact: each input's and
    output's symbolic_shape beside its upper-bound shape, and size_vars with the ranges; both
    documents valid under docs/tvmc-json.schema.json (docs/json.md)."""
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).parents[2] / "docs" / "tvmc-json.schema.json").read_text())
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    out = tmp_path / "cnn.tar"
    r = CliRunner().invoke(cli, ["compile", str(model), "--target", "native", "--dim-range", "N=1..8", "-o", str(out),
                                 "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, schema)
    assert doc["size_vars"] == [{"name": "N", "range": "1..8"}]
    assert doc["inputs"] == [{"name": "x", "shape": [8, 3, 16, 16], "dtype": "float32",
                              "symbolic_shape": ["N", 3, 16, 16]}]
    assert doc["outputs"][0]["shape"] == [8, 10] and doc["outputs"][0]["symbolic_shape"] == ["N", 10]
    r = CliRunner().invoke(cli, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, schema)
    assert doc["metadata"]["size_vars"] == [{"name": "N", "range": "1..8"}]
    assert doc["metadata"]["inputs"][0]["symbolic_shape"] == ["N", 3, 16, 16]


def test_tuning_a_range_asks_for_sizes_to_tune_at():
    with pytest.raises(TuningError, match=r"tuning times kernels of one size: give representative sizes, e\.g\. "
                                          r"--dim-sizes N=1,4,8"):
        extract_tasks(small_cnn(), resolve_target("native"), CompileOptions(dim_ranges={"N": (1, 8)}))
    tasks = extract_tasks(small_cnn(), resolve_target("native"), CompileOptions(dim_ranges={"N": (1, 8)}), {"N": [2]})
    assert tasks and all(t.workload[0][0] == 2 for t in tasks)


def test_a_fixed_shape_artifact_says_so_and_how_to_compile_a_range(tmp_path):
    model = small_cnn()
    options = CompileOptions(input_shapes={"x": [2, 3, 16, 16]})
    path = save_artifact(compile_model(model, resolve_target("native"), options), tmp_path / "fixed.tar")
    ex = GraphExecutor(path)
    with pytest.raises(InputError, match=r"expected shape \[2,3,16,16\] float32, got \[5,3,16,16\] float32; the "
                                         r"artifact is fixed-shape: compile it for a range of sizes to run others, "
                                         r"e\.g\. --input-shapes \"x:\[1\.\.5,3,16,16\]\""):
        ex.set_input("x", np.zeros((5, 3, 16, 16), np.float32))


def test_an_op_without_a_symbolic_schedule_stops_naming_the_op(monkeypatch):
    """Every op of the models here now compiles over its ranges (max pooling over H and W too): a
    schedule that fails on symbolic extents is stood in for by one that raises, and the error names
    the kernel, its op and node, the variables, and what to do."""
    import tvmc.ops.fused as fused

    real = fused._lower

    def failing(func, anchor, target, config_lookup, symbolic=False):
        if symbolic and getattr(anchor, "op", None) == "nn.max_pool2d":
            raise IndexError("no symbolic form")
        return real(func, anchor, target, config_lookup, symbolic)

    monkeypatch.setattr(fused, "_lower", failing)
    with pytest.raises(ScheduleError, match=r"^kernel fused_nn_max_pool2d\w* \(nn\.max_pool2d of node 'p1'\) does not "
                                           r"compile with symbolic extents \(.*H in 8\.\.32.*\) yet: IndexError: no "
                                           r"symbolic form; compile one size per artifact$"):
        compile_model(cnn_model(), resolve_target("native"), CompileOptions(dim_ranges={"N": (1, 4), "H": (8, 32),
                                                                                        "W": (8, 32)}))


# --- arm (aarch64 under qemu-user, the C runner) and wasm (wasmtime) -----------------------------

@pytest.fixture(scope="module", params=["arm", "wasm"])
def ported(request, tmp_path_factory):
    """(target name, encoder (model, path), cnn (model, path)) compiled for arm or wasm; skips
    naming the missing emulator, compiler or engine."""
    target = require(request.param).target
    folder = tmp_path_factory.mktemp(f"sym-{request.param}")
    enc = encoder_model()
    options = CompileOptions(input_shapes=ENCODER_SHAPES)
    enc_path = save_artifact(compile_model(enc, target, options), folder / "encoder.tar")
    cnn = small_cnn()
    cnn_path = save_artifact(compile_model(cnn, target, CompileOptions(dim_ranges={"N": (1, BATCH_MAX)})),
                             folder / "cnn.tar")
    return request.param, (enc, enc_path), (cnn, cnn_path)


def test_ported_encoder_one_artifact_every_sequence_length(ported):
    check_sizes(*ported[1], encoder_feeds, SEQ_SIZES, create_executor)


def test_ported_cnn_one_artifact_every_batch(ported):
    r = np.random.default_rng(3)
    check_sizes(*ported[2], lambda n: {"x": r.standard_normal((n, 3, 16, 16)).astype(np.float32)}, BATCH_SIZES,
                create_executor)


@pytest.mark.parametrize("seq", [0, SEQ_MAX + 1])
def test_ported_size_outside_the_range_is_refused_naming_input_dimension_value_and_range(ported, seq):
    """wasm refuses at set_input (the C API in the module); arm at run, where the C runner's
    set_input refuses it (exit 3, an InputError)."""
    ex = create_executor(ported[1][1])
    with pytest.raises(InputError, match=rf"input 'input_ids': dimension 1 is {seq}, outside the range of seq in "
                                         r"1\.\.512 the model was compiled for$"):
        ex.set_input("input_ids", np.zeros((1, seq), np.int64))
        ex.set_input("attention_mask", np.ones((1, 1), np.int64))
        ex.run()
    # a size in range still runs on the same executor afterwards
    feeds = encoder_feeds(5)
    for name, value in feeds.items():
        ex.set_input(name, value)
    ex.run()
    assert ex.get_output(0).shape == (1, 5, 16)


def test_ported_inputs_that_disagree_on_a_variable_are_refused_at_run(ported):
    check_inputs_that_disagree_are_refused(create_executor(ported[1][1]), anchor="")


def test_wasm_profile_passes_the_kernels_their_size_arguments(tmp_path):
    """profile calls the module's kernels one by one with the size arguments of the inputs set
    (the C runner under emulation times whole runs only)."""
    target = require("wasm").target
    model = encoder_model()
    options = CompileOptions(input_shapes=ENCODER_SHAPES)
    ex = create_executor(save_artifact(compile_model(model, target, options), tmp_path / "encoder.tar"))
    feeds = encoder_feeds(11)
    for name, value in feeds.items():
        ex.set_input(name, value)
    assert len(ex.profile(1)) > 5
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ex.get_output(0), want, **TOL)


def test_ported_tvmc_run_takes_a_size_of_the_range_and_exits_8_outside(ported, tmp_path):
    check_tvmc_run_in_and_out_of_range(*ported[1], tmp_path)


def test_node_runs_one_web_output_at_every_sequence_length(tmp_path):
    """tvmc.js in Node: the web output of a range artifact takes each size with setInput(name,
    array, shape), its outputs come at the run-time shape and match onnxruntime; a size past the
    bound throws the C API's range error."""
    import tvmc
    from tests.e2e.test_web import run_node_module

    target = require("wasm").target
    model = encoder_model()
    tvmc.compile(model, target=target, output=tmp_path / "site", output_format="web",
                 input_shapes=ENCODER_SHAPES)
    feeds = {seq: encoder_feeds(seq) for seq in SEQ_SIZES}
    script = ['import { loadModel } from "./site/tvmc.js";',
              'const m = await loadModel(new URL("./site/", import.meta.url));',
              "const got = {};"]
    for seq, f in feeds.items():
        for name, value in f.items():
            script.append(f'm.setInput("{name}", BigInt64Array.from({value.ravel().tolist()}, BigInt), [1, {seq}]);')
        script.append(f"m.run(); got[{seq}] = m.outputs.map((t, i) => "
                      "({ shape: m.outputShape(i), data: Array.from(m.getOutput(i), Number) }));")
    script += ["let error = null;",
               'try { m.setInput("input_ids", new BigInt64Array(513), [1, 513]); } catch (e) { error = e.message; }',
               "const info = { sizeVars: m.sizeVars, symbolicShape: m.inputs[0].symbolicShape, "
               "bound: m.inputs[0].shape };",
               "m.destroy();",
               "console.log(JSON.stringify({ got, error, info }));"]
    out = run_node_module(tmp_path, "\n".join(script) + "\n")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seq, f in feeds.items():
        for k, ref in enumerate(session.run(None, f)):
            got = out["got"][str(seq)][k]
            assert tuple(got["shape"]) == ref.shape, (seq, k)
            np.testing.assert_allclose(np.array(got["data"], np.float32).reshape(ref.shape), ref,
                                       err_msg=f"output {k} at size {seq}", **TOL)
    assert out["error"] == ("tvmc: input 'input_ids': dimension 1 is 513, outside the range of seq in 1..512 the model "
                            "was compiled for (code 3)")
    assert out["info"] == {"sizeVars": [{"name": "seq", "range": "1..512"}], "symbolicShape": [1, "seq"],
                           "bound": [1, 512]}
