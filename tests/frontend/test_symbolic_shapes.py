"""Symbolic shapes through the ONNX frontend (issue 29, points 1 and 2): --input-shapes ranges and
--dim-range name size variables; type inference and ONNX's shape arithmetic stay symbolic for a
BERT-style encoder, a CNN with symbolic batch and image size and a CRNN-style recognizer; the
types match those of static imports at sizes in the range; what the bounds cannot prove is an
error naming the node; a symbolic compile stops before lowering with one error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.errors import ModelError, ScheduleError
from tvmc.frontend.onnx import from_onnx
from tvmc.graph import symbolic as sym

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make(nodes, inputs, outputs, inits=(), opset=17):
    """A checked model; inputs/outputs [(name, elem type, dims: ints and dim_param names)]."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    g = helper.make_graph(nodes, "sym", vi, outs, initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)  # outputs given as None: ONNX's types
    for out, out_inferred in zip(m.graph.output, inferred.graph.output):
        if not out.type.tensor_type.HasField("shape"):
            out.CopyFrom(out_inferred)
    onnx.checker.check_model(m)
    return m


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def c(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def bert_model(hidden=16, heads=2, vocab=50, max_pos=64):
    """One BERT encoder layer as Hugging Face exports it: [batch, seq] ids and mask; positions
    sliced to seq from Shape, heads split and merged by Reshapes whose shapes are computed from
    Shape, the extended attention mask, LayerNormalization, erf GELU, a pooler."""
    n = helper.make_node
    hd = hidden // heads
    nodes = [
        n("Gather", ["word_emb", "input_ids"], ["we"]),
        n("Shape", ["input_ids"], ["ids_shape"]),
        c("one", np.array(1, np.int64)), c("zero", np.array(0, np.int64)),
        c("zero1", np.array([0], np.int64)), c("one1", np.array([1], np.int64)),
        n("Gather", ["ids_shape", "one"], ["seq_len"]),
        n("Gather", ["ids_shape", "zero"], ["batch"]),
        n("Unsqueeze", ["seq_len", "zero1"], ["seq_len1"]),
        n("Slice", ["pos_ids", "zero1", "seq_len1", "one1"], ["pos"]),
        n("Gather", ["pos_emb", "pos"], ["pe"]),
        n("Add", ["we", "pe"], ["emb"]),
        n("LayerNormalization", ["emb", "ln_g", "ln_b"], ["x0"], axis=-1, epsilon=1e-12),
        # extended attention mask [b, 1, 1, s]
        c("axes12", np.array([1, 2], np.int64)),
        n("Unsqueeze", ["attention_mask", "axes12"], ["m4"]),
        n("Cast", ["m4"], ["mf"], to=F),
        c("onef", np.array(1.0, np.float32)), c("neg", np.array(-10000.0, np.float32)),
        n("Sub", ["onef", "mf"], ["inv"]),
        n("Mul", ["inv", "neg"], ["mask_add"]),
        # heads shape [b, s, heads, hd] from Shape arithmetic
        n("Unsqueeze", ["batch", "zero1"], ["batch1"]),
        c("heads_hd", np.array([heads, hd], np.int64)),
        n("Concat", ["batch1", "seq_len1", "heads_hd"], ["split_shape"], axis=0),
        c("hidden1", np.array([hidden], np.int64)),
        n("Concat", ["batch1", "seq_len1", "hidden1"], ["merge_shape"], axis=0),
    ]
    for p in "qkv":
        nodes += [n("MatMul", ["x0", f"w{p}"], [f"{p}0"]), n("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
                  n("Reshape", [f"{p}1", "split_shape"], [f"{p}2"]),
                  n("Transpose", [f"{p}2"], [f"{p}h"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        n("MatMul", ["qh", "kh"], ["scores0"]),
        c("scale", np.array(np.sqrt(hd), np.float32)),
        n("Div", ["scores0", "scale"], ["scores1"]),
        n("Add", ["scores1", "mask_add"], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "vh"], ["ctx0"]),
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "merge_shape"], ["ctx2"]),
        n("MatMul", ["ctx2", "wo"], ["att"]),
        n("Add", ["att", "x0"], ["res1"]),
        n("LayerNormalization", ["res1", "ln1_g", "ln1_b"], ["x1"], axis=-1, epsilon=1e-12),
        n("MatMul", ["x1", "wi"], ["h0"]),
        c("sqrt2", np.array(np.sqrt(2.0), np.float32)), c("half", np.array(0.5, np.float32)),
        n("Div", ["h0", "sqrt2"], ["h1"]), n("Erf", ["h1"], ["h2"]), n("Add", ["h2", "onef"], ["h3"]),
        n("Mul", ["h0", "h3"], ["h4"]), n("Mul", ["h4", "half"], ["h5"]),
        n("MatMul", ["h5", "wf"], ["ffn"]),
        n("Add", ["ffn", "x1"], ["res2"]),
        n("LayerNormalization", ["res2", "ln2_g", "ln2_b"], ["last_hidden"], axis=-1, epsilon=1e-12),
        n("Gather", ["last_hidden", "zero"], ["cls"], axis=1),
        n("Gemm", ["cls", "wp", "bp"], ["p0"], transB=1),
        n("Tanh", ["p0"], ["pooled"]),
    ]
    inits = {"word_emb": rand(vocab, hidden, seed=1), "pos_emb": rand(max_pos, hidden, seed=2),
             "pos_ids": np.arange(max_pos, dtype=np.int64)[None], "wp": rand(hidden, hidden, seed=3),
             "bp": rand(hidden, seed=4), "wi": rand(hidden, 4 * hidden, seed=5), "wf": rand(4 * hidden, hidden, seed=6),
             "wo": rand(hidden, hidden, seed=7)}
    for k, p in enumerate("qkv"):
        inits[f"w{p}"], inits[f"b{p}"] = rand(hidden, hidden, seed=10 + k), rand(hidden, seed=20 + k)
    for ln in ("ln", "ln1", "ln2"):
        inits[f"{ln}_g"], inits[f"{ln}_b"] = np.ones(hidden, np.float32), np.zeros(hidden, np.float32)
    return make(nodes, [("input_ids", I64, ["batch", "seq"]), ("attention_mask", I64, ["batch", "seq"])],
                [("last_hidden", F, ["batch", "seq", hidden]), ("pooled", F, ["batch", hidden])], inits)


def cnn_model(classes=10):
    """[N, 3, H, W]: strided conv, max pool, a residual block with batch norm, a ceil-mode average
    pool, global pooling, flatten, Gemm, softmax."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             n("Relu", ["c1"], ["r1"]),
             n("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             n("BatchNormalization", ["c2", "g", "bb", "mu", "var"], ["bn"]),
             n("Relu", ["bn"], ["r2"]),
             n("Add", ["r2", "p1"], ["res"]),
             n("AveragePool", ["res"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             n("GlobalAveragePool", ["ap"], ["gp"]),
             n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
             n("Softmax", ["logits"], ["probs"], axis=-1)]
    inits = {"w1": rand(8, 3, 3, 3, seed=1), "b1": rand(8, seed=2), "w2": rand(8, 8, 3, 3, seed=3),
             "g": np.ones(8, np.float32), "bb": np.zeros(8, np.float32), "mu": np.zeros(8, np.float32),
             "var": np.ones(8, np.float32), "wf": rand(classes, 8, seed=4), "bf": rand(classes, seed=5)}
    return make(nodes, [("x", F, ["N", 3, "H", "W"])], [("probs", F, ["N", classes])], inits, opset=13)


def crnn_model(classes=12):
    """[1, 1, 32, W] -> conv/pool to [1, C, 1, W/4] -> [T, 1, C] -> dense -> log-softmax, with the
    sequence reshape computed from Shape."""
    n = helper.make_node
    nodes = [n("Conv", ["img", "w1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["r2"]),
             n("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p2", "w3"], ["c3"], pads=[0, 1, 0, 1], kernel_shape=[8, 3]),
             n("Shape", ["c3"], ["s3"]),
             c("idx_bc", np.array([0, 1], np.int64)), n("Gather", ["s3", "idx_bc"], ["bc"]),
             c("idx_w", np.array([3], np.int64)), n("Gather", ["s3", "idx_w"], ["t"]),
             n("Concat", ["bc", "t"], ["seq_shape"], axis=0),
             n("Reshape", ["c3", "seq_shape"], ["seq"]),
             n("Transpose", ["seq"], ["tbc"], perm=[2, 0, 1]),
             n("MatMul", ["tbc", "wl"], ["logit"]),
             n("LogSoftmax", ["logit"], ["logp"], axis=-1),
             n("ArgMax", ["logp"], ["best"], axis=-1, keepdims=0)]
    inits = {"w1": rand(4, 1, 3, 3, seed=1), "w2": rand(8, 4, 3, 3, seed=2), "w3": rand(16, 8, 8, 3, seed=3),
             "wl": rand(16, classes, seed=4)}
    return make(nodes, [("img", F, [1, 1, 32, "width"])], [("logp", F, ["T", 1, classes]), ("best", I64, ["T", 1])],
                inits, opset=13)



def call_types(graph, values=None):
    """[(op, shape)] of the graph's calls (shapes with the size variables set to `values`)."""
    return [(c.op_name, tuple(sym.substitute(d, values or {}) for d in c.shape)) for c in graph.calls()]


def is_subsequence(small, big) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def assert_matches_static(model, symbolic_graph, sizes: dict, static_shapes: dict):
    """The symbolic graph at `sizes` has the static import's output types, and every call of the
    static import (which folds more to constants) appears, in order, with the same type."""
    static = from_onnx(model, static_shapes)
    for o_sym, o_static in zip(symbolic_graph.outputs, static.outputs):
        assert tuple(sym.substitute(d, sizes) for d in o_sym.shape) == o_static.shape
        assert o_sym.dtype == o_static.dtype
    assert is_subsequence(call_types(static), call_types(symbolic_graph, sizes)), sizes


BERT_SIZES = ({"batch": 1, "seq": 1}, {"batch": 8, "seq": 64}, {"batch": 3, "seq": 17})


def test_bert_encoder_stays_symbolic():
    model = bert_model()
    g = from_onnx(model, dim_ranges={"batch": (1, 8), "seq": (1, 64)})
    b, s = (sym.size_var(n, 1, hi) for n, hi in (("batch", 8), ("seq", 64)))
    assert [v.shape for v in g.inputs] == [(b, s), (b, s)]
    assert [o.shape for o in g.outputs] == [(b, s, 16), (b, 16)]
    # the shape arithmetic (Shape, Gather, Unsqueeze, Concat, Slice) was carried out at import
    assert not [c for c in g.calls() if c.op_name == "shape_to_tensor"]
    heads = [c for c in g.calls() if c.op_name == "reshape" and c.attrs["newshape"] == (b, s, 2, 8)]
    assert len(heads) == 3
    assert [c for c in g.calls() if c.op_name == "nn.softmax"][0].shape == (b, 2, s, s)
    for sizes in BERT_SIZES:
        shape = (sizes["batch"], sizes["seq"])
        assert_matches_static(model, g, sizes, {"input_ids": shape, "attention_mask": shape})


def test_input_shapes_range_on_a_dim_param_names_its_variable():
    g = from_onnx(bert_model(), {"input_ids": (1, (1, 64)), "attention_mask": (1, (1, 64))})
    s = sym.size_var("seq", 1, 64)
    assert [v.shape for v in g.inputs] == [(1, s), (1, s)] and g.outputs[0].shape == (1, s, 16)
    # one input's range bounds the dim_param in every input; an int fixes it everywhere
    g = from_onnx(bert_model(), {"input_ids": (2, (1, 64))})
    assert g.inputs[1].shape == (2, s)
    g = from_onnx(bert_model(), {"input_ids": (2, 7)})
    assert g.inputs[1].shape == (2, 7) and g.outputs[0].shape == (2, 7, 16)


def test_cnn_with_symbolic_batch_and_image_size():
    model = cnn_model()
    g = from_onnx(model, dim_ranges={"N": (1, 16), "H": (32, 512), "W": (32, 512)})
    n, h, w = sym.size_var("N", 1, 16), sym.size_var("H", 32, 512), sym.size_var("W", 32, 512)
    assert g.outputs[0].shape == (n, 10)
    pool = [c for c in g.calls() if c.op_name == "nn.avg_pool2d"][0]
    assert pool.shape == (n, 8, (h + 7) // 8, (w + 7) // 8)
    for sizes in ({"N": 1, "H": 32, "W": 32}, {"N": 16, "H": 512, "W": 512}, {"N": 3, "H": 67, "W": 101}):
        assert_matches_static(model, g, sizes, {"x": (sizes["N"], 3, sizes["H"], sizes["W"])})


def test_crnn_sequence_follows_the_width():
    model = crnn_model()
    g = from_onnx(model, {"img": (1, 1, 32, (16, 2048))})
    width = sym.size_var("width", 16, 2048)
    assert [o.shape for o in g.outputs] == [(width // 4, 1, 12), (width // 4, 1)]
    assert g.outputs[1].dtype == "int64"
    for w in (16, 2048, 333):
        assert_matches_static(model, g, {"width": w}, {"img": (1, 1, 32, w)})


def _shape_arith_model():
    """x [b, s, 8], y [b, s]: Reshape to [b, -1] through Shape/Slice; Size; Range(0, s);
    ConstantOfShape(Shape(y)); Expand of a [1, 1] constant to Shape(y); Div/Mul/Sub/Equal/Where
    on shape values; a shape value used as data (Cast to float) and one as a graph output."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["sx"]),
             c("z1", np.array([0], np.int64)), c("o1", np.array([1], np.int64)), c("m1", np.array([-1], np.int64)),
             n("Slice", ["sx", "z1", "o1"], ["b1"]),
             n("Concat", ["b1", "m1"], ["flat_shape"], axis=0),
             n("Reshape", ["x", "flat_shape"], ["flat"]),
             n("Shape", ["y"], ["sy"]),
             c("one", np.array(1, np.int64)), c("two", np.array(2, np.int64)),
             n("Gather", ["sy", "one"], ["s"]),
             n("Range", ["zero", "s", "one"], ["positions"]),
             n("ConstantOfShape", ["sy"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
             n("Expand", ["k", "sy"], ["expanded"]),
             n("Mul", ["s", "two"], ["s2"]), n("Div", ["s2", "two"], ["s_again"]),
             n("Sub", ["s_again", "s"], ["zero_d"]),
             n("Equal", ["zero_d", "zero"], ["is_zero"]),
             n("Where", ["is_zero", "s", "two"], ["picked"]),
             n("Size", ["x"], ["count"]),
             n("Cast", ["count"], ["count_f"], to=F), n("Sqrt", ["count_f"], ["root"]),
             n("Identity", ["sx"], ["shape_out"])]
    return make(nodes, [("x", F, ["b", "s", 8]), ("y", F, ["b", "s"])],
                [("flat", F, None), ("positions", I64, None), ("ones", F, None), ("expanded", F, None),
                 ("picked", I64, []), ("root", F, []), ("shape_out", I64, [3])],
                {"zero": np.array(0, np.int64), "k": np.ones((1, 1), np.float32)})


def test_shape_arithmetic_stays_symbolic():
    g = from_onnx(_shape_arith_model(), dim_ranges={"b": (1, 4), "s": (2, 100)})
    b, s = sym.size_var("b", 1, 4), sym.size_var("s", 2, 100)
    out = dict(zip(g.output_names, g.outputs))
    assert out["flat"].shape == (b, 8 * s) and out["flat"].op_name == "reshape"
    assert out["positions"].op_name == "arange" and out["positions"].shape == (s,)
    assert out["positions"].attrs == {"start": 0, "step": 1, "length": s, "dtype": "int64"}
    assert out["ones"].op_name == "broadcast_to" and out["ones"].shape == (b, s)
    assert out["expanded"].shape == (b, s)
    # s * 2 / 2 - s == 0 is decided at import: Where picks s
    assert out["picked"].op_name == "shape_to_tensor" and out["picked"].attrs["values"] == (s,)
    # a shape value read as data, and one returned: shape_to_tensor
    size = [c for c in g.calls() if c.op_name == "shape_to_tensor" and c.attrs["values"] == (8 * b * s,)]
    assert size and size[0].shape == ()
    assert out["shape_out"].op_name == "shape_to_tensor" and out["shape_out"].attrs["values"] == (b, s, 8)


def test_shape_arithmetic_folds_to_constants_where_static():
    """With the symbolic dimensions out of the values read, the result is a Constant as for a
    static model: Shape(x)[2] of x [b, s, 8] is 8."""
    n = helper.make_node
    model = make([n("Shape", ["x"], ["sx"]), c("i", np.array(2, np.int64)), n("Gather", ["sx", "i"], ["k"]),
                  c("axes", np.array([0], np.int64)), n("Unsqueeze", ["k", "axes"], ["k1"]),
                  c("m1", np.array([-1], np.int64)), n("Concat", ["m1", "k1"], ["shape"], axis=0),
                  n("Reshape", ["x", "shape"], ["y"])],
                 [("x", F, ["b", "s", 8])], [("y", F, None)])
    g = from_onnx(model, dim_ranges={"b": (1, 4), "s": (1, 9)})
    b, s = sym.size_var("b", 1, 4), sym.size_var("s", 1, 9)
    assert g.outputs[0].shape == (b * s, 8)
    assert not [c for c in g.calls() if c.op_name == "shape_to_tensor"]


@pytest.mark.parametrize("nodes, inputs, kwargs, message", [
    ([helper.make_node("Reshape", ["x", "shape"], ["y"], name="split4")], [("x", F, ["s"])],
     {"dim_ranges": {"s": (1, 64)}}, r"node 'split4' \(Reshape\): cannot reshape \[s\] to \[-1, 4\]: 4 does not "
                                     r"provably divide the element count s \(s in 1..64\)"),
    ([helper.make_node("Add", ["x", "z"], ["y"], name="mix")], [("x", F, ["s"]), ("z", F, ["t"])],
     {"dim_ranges": {"s": (1, 64), "t": (1, 64)}}, r"node 'mix' \(add\): shapes \[s\] and \[t\] do not broadcast: "
                                                   r"s and t are not provably equal"),
    ([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["s"])], {"dim_ranges": {"q": (1, 4)}},
     r"--dim-range names 'q', which is not a symbolic dimension \(dim_param\) of the model's inputs; those are: 's'"),
    ([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["s"])],
     {"dim_ranges": {"s": (1, 4)}, "input_shapes": {"x": ((1, 8),)}},
     r"dimension 's' is given the range 1..8 by --input-shapes x\[0\] and 1..4 by --dim-range"),
    ([helper.make_node("Add", ["x", "z"], ["y"])], [("x", F, ["s"]), ("z", F, ["s"])],
     {"input_shapes": {"x": ((1, 8),), "z": (4,)}},
     r"dimension 's' is given the size 4 by --input-shapes z\[0\] and the range 1..8 by --input-shapes x\[0\]"),
    ([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])], {"input_shapes": {"x": ((1, 8),)}},
     r"--input-shapes gives 'x' dimension 0 the range 1..8, but the model fixes it at 3"),
    ([helper.make_node("Add", ["x", "z"], ["y"])], [("x", F, ["s"]), ("z", F, ["s"]), ("v", F, ["s"])],
     {"input_shapes": {"x": (2,), "z": (3,)}}, r"dimension 's' of input 'v' is given the different sizes \[2, 3\]"),
])
def test_errors_name_the_node_or_the_option(nodes, inputs, kwargs, message):
    model = make(nodes, inputs, [("y", F, None)], {"shape": np.array([-1, 4], np.int64)} if "shape" in
                 nodes[0].input else {})
    with pytest.raises(ModelError, match=message):
        from_onnx(model, **kwargs)


def test_unresolved_error_says_why_the_examples_do_not_import():
    """A model fixed inside to one size: no range imports (the error of one says why); a model that
    needs s divisible by 4: the size imports, the ranges do not."""
    n = helper.make_node
    fixed = make([n("Add", ["x", "k"], ["y"], name="plus_k")], [("x", F, ["s"])], [("y", F, None)],
                 {"k": np.ones(4, np.float32)})
    with pytest.raises(ModelError, match=r"'s' \(x\[0\]\); give each a range or a size, e.g. --dim-range s=1..256, or "
                                         r"--input-shapes \"x:\[64\]\"; with these: node 'plus_k' \(add\): .* "
                                         r"s and 4 are not provably equal"):
        from_onnx(fixed)
    split = make([n("Reshape", ["x", "shape"], ["y"], name="split4")], [("x", F, ["s"])], [("y", F, None)],
                 {"shape": np.array([-1, 4], np.int64)})
    with pytest.raises(ModelError, match=r"'s' \(x\[0\]\); fix each, e.g. --input-shapes \"x:\[64\]\" \(with ranges "
                                         r"such as --dim-range s=1..256: node 'split4' \(Reshape\): cannot reshape"):
        from_onnx(split)


def test_bad_ranges_through_the_api_are_model_errors():
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["s"])], [("y", F, None)])
    for kwargs in ({"input_shapes": {"x": ((4, 2),)}}, {"input_shapes": {"x": ("1..4",)}},
                   {"dim_ranges": {"s": (4, 2)}}, {"dim_ranges": {"s": "1..4"}}):
        with pytest.raises(ModelError, match="must be"):
            from_onnx(model, **kwargs)


def test_unnamed_dimension_takes_a_range_from_input_shapes():
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1, None])], [("y", F, None)])
    with pytest.raises(ModelError, match=r"unresolved input dimensions: input 'x' dimension 1 is unknown; bound each, "
                                         r"e.g. --input-shapes \"x:\[1,1..256\]\", or fix one size, e.g. "
                                         r"--input-shapes \"x:\[1,64\]\""):
        from_onnx(model)
    g = from_onnx(model, {"x": (1, (1, 256))})
    assert g.outputs[0].shape == (1, sym.size_var("x_1", 1, 256))


def test_a_backend_without_symbolic_shapes_stops_before_lowering(monkeypatch):
    """Every shipped backend compiles symbolic shapes (OpenCL and CUDA too:
    tests/e2e/test_symbolic_gpu.py); one whose `symbolic_shapes` is False stops here, naming the
    first symbolic kernel, the target and the --input-shapes of one size."""
    from tvmc.backends import backend_for
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.target import resolve_target

    target = resolve_target("opencl")
    monkeypatch.setattr(type(backend_for(target)), "symbolic_shapes", False)
    options = CompileOptions(opt_level=3, dim_ranges={"batch": (1, 8), "seq": "1..64"})
    with pytest.raises(ScheduleError, match=r"^kernel fused_\w+ \(\w+ of node '\w+', \w+\[.*seq.*\]\) has extents that "
                                           r"depend on .*seq in 1..64.*: symbolic compilation reaches the graph IR but "
                                           r"not code generation for target 'opencl' yet; compile one size per "
                                           r"artifact instead, e.g. --input-shapes \"input_ids:\[8,64\] "
                                           r"attention_mask:\[8,64\]\" \(without --dim-range\)$"):
        compile_model(bert_model(), target, options)
