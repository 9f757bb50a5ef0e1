"""onnxruntime's composite `com.microsoft` quantized operators (tvmc/frontend/onnx/microsoft_nn.py):
MatMulNBits, DynamicQuantizeLSTM, QAttention. A tiny model per case, compiled by tvmc for this
host's CPU and compared with onnxruntime's CPU outputs of the same model; the packed 4-bit weight's
size in mod.params; one-line model errors naming the node for what is refused.

Tolerances (stated per test): MatMulNBits is float32 on both sides at accuracy_level 0, and at
accuracy_level 4 the same int8 blocks and int32 products on both sides: rtol 1e-4 and a small
absolute floor (float32 summation order). DynamicQuantizeLSTM and QAttention quantize float
tensors at run time with onnxruntime's formulas; their integer products are equal, so the float
outputs are compared at 1e-4 (onnxruntime's LSTM with one intra-op thread, see microsoft_nn.py).
Measured errors are printed (pytest -s).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.errors import ModelError
from tvmc.frontend.onnx import from_onnx

pytest.importorskip("onnxruntime")
from tests.e2e.models import onnxruntime_outputs  # noqa: E402
from tests.e2e.test_int8 import _compile, _run, kernel_names  # noqa: E402

MS = "com.microsoft"
U8, I8, I32, F, F16 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.FLOAT, TensorProto.FLOAT16


def _model(nodes, inputs, outputs, inits=None) -> onnx.ModelProto:
    """com.microsoft node(s); inputs / outputs: [(name, elem type, shape)]; inits: {name: array}."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    graph = helper.make_graph(nodes, "ms", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)],
                             ir_version=8)


def _onnxruntime_one_thread(model, inputs: dict) -> dict:
    """onnxruntime's CPU outputs with one intra-op thread (its quantized LSTM quantizes the hidden
    state per thread's share of the batch, so its result depends on the thread count)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def _compare(model, inputs: dict, atol: float, rtol: float = 1e-4, one_thread: bool = False):
    """Compile and run `model`; every output against onnxruntime's (with one intra-op thread where
    `one_thread`). Returns (max abs error per output, params bytes)."""
    got, params_bytes = _run(_compile(model), inputs)
    ref = (_onnxruntime_one_thread if one_thread else onnxruntime_outputs)(model, inputs)
    errors = {}
    for name, r in ref.items():
        assert got[name].dtype == r.dtype and got[name].shape == r.shape, (name, got[name].dtype, got[name].shape)
        np.testing.assert_allclose(got[name].astype(np.float64), r.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=name)
        errors[name] = float(np.abs(got[name].astype(np.float64) - r).max())
    return errors, params_bytes


# --- MatMulNBits ------------------------------------------------------------------------------

def _nbits_inits(rng, n, k, bits, bs, zero_points):
    blocks = -(-k // bs)
    inits = {"B": rng.integers(0, 256, (n, blocks, bs * bits // 8)).astype(np.uint8),
             "S": (rng.random(n * blocks) * 0.1 + 0.01).astype(np.float32)}
    if zero_points == "packed":
        inits["Z"] = rng.integers(0, 256, n * -(-blocks * bits // 8)).astype(np.uint8)
    elif zero_points == "float":
        inits["Z"] = (rng.random(n * blocks) * (1 << bits)).astype(np.float32)
    return inits


def _nbits_node(n, k, bits, bs, inits, g_idx=False, bias=False, name="mnb"):
    ins = ["A", "B", "S", "Z" if "Z" in inits else "", "G" if g_idx else "", "bias" if bias else ""]
    while not ins[-1]:
        ins.pop()
    return helper.make_node("MatMulNBits", ins, ["Y"], domain=MS, name=name, K=k, N=n, bits=bits, block_size=bs)


@pytest.mark.parametrize("bits,bs,zero_points", [(4, 32, "absent"), (4, 16, "packed"), (4, 64, "float"),
                                                 (2, 16, "packed"), (8, 32, "packed")],
                         ids=["4b-bs32", "4b-bs16-zp", "4b-bs64-floatzp", "2b-zp", "8b-zp"])
def test_matmul_nbits(bits, bs, zero_points):
    """A [2, 3, K] with K = 80 (a partial last block for block_size 32 and 64), N = 24, bias."""
    rng = np.random.default_rng(bits * 100 + bs)
    n, k = 24, 80
    inits = _nbits_inits(rng, n, k, bits, bs, zero_points)
    inits["bias"] = rng.standard_normal(n).astype(np.float32)
    model = _model(_nbits_node(n, k, bits, bs, inits, bias=True), [("A", F, [2, 3, k])], [("Y", F, [2, 3, n])],
                   inits)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    errors, _ = _compare(model, {"A": a}, atol=1e-4 * (1 << bits))
    print("MatMulNBits", bits, bs, zero_points, "max abs error", errors)


def test_matmul_nbits_g_idx():
    """An act-order g_idx (a permutation of the blocks over K), no zero points (2^(bits-1))."""
    rng = np.random.default_rng(7)
    n, k, bs = 16, 64, 16
    inits = _nbits_inits(rng, n, k, 4, bs, "absent")
    inits["G"] = rng.permutation(np.arange(k) // bs).astype(np.int32)
    model = _model(_nbits_node(n, k, 4, bs, inits, g_idx=True), [("A", F, [5, k])], [("Y", F, [5, n])], inits)
    _compare(model, {"A": rng.standard_normal((5, k)).astype(np.float32)}, atol=1e-3)


def test_matmul_nbits_params_stay_packed():
    """K = N = 256, block 32, 4 bits: mod.params holds the packed bytes (N K / 2), the scales and
    packed zero points, about 1/8 of the float32 weight plus the scales; no float weight. The
    weight is unpacked at run time by its own kernel before the dense."""
    rng = np.random.default_rng(3)
    n = k = 256
    inits = _nbits_inits(rng, n, k, 4, 32, "packed")
    model = _model(_nbits_node(n, k, 4, 32, inits), [("A", F, [1, k])], [("Y", F, [1, n])], inits)
    _, params_bytes = _compare(model, {"A": rng.standard_normal((1, k)).astype(np.float32)}, atol=1e-3)
    module = _compile(model)
    assert kernel_names(module) == ["fused_qnn_dequantize_blockwise", "fused_nn_dense"]
    assert module.params["B"].dtype == np.uint8 and module.params["B"].shape == (n, k // 32, 16)
    assert all(v.size < n * k for v in module.params.values())  # no unpacked [N, K] weight
    packed = n * k // 2 + inits["S"].nbytes + inits["Z"].nbytes
    float_weight = n * k * 4
    print(f"MatMulNBits params {params_bytes} B, float32 weight {float_weight} B: ratio "
          f"{params_bytes / float_weight:.3f}")
    assert params_bytes <= packed * 1.05 + 4096, (params_bytes, packed)
    assert params_bytes < float_weight / 8 + inits["S"].nbytes + inits["Z"].nbytes + 4096


def test_matmul_nbits_unpacks_at_run_time():
    """The imported graph keeps B as a uint8 constant feeding qnn.dequantize_blockwise, and
    FoldConstant leaves that call to run time."""
    from tvmc.passes import PassContext, run_passes

    rng = np.random.default_rng(4)
    inits = _nbits_inits(rng, 8, 32, 4, 16, "absent")
    model = _model(_nbits_node(8, 32, 4, 16, inits), [("A", F, [2, 32])], [("Y", F, [2, 8])], inits)
    graph = run_passes(from_onnx(model), ["FoldConstant"], PassContext())
    calls = [e for e in graph.topo() if getattr(e, "op", None) == "qnn.dequantize_blockwise"]
    assert len(calls) == 1 and calls[0].inputs[0].dtype == "uint8"
    assert calls[0].inputs[0].value.nbytes == 8 * 32 // 2


@pytest.mark.parametrize("change,message", [
    ({"bits": 3}, "bits=3 is not supported"),
    ({"block_size": 24}, "block_size=24 must be a power of two"),
])
def test_matmul_nbits_refused_attributes(change, message):
    rng = np.random.default_rng(5)
    inits = _nbits_inits(rng, 8, 32, 4, 16, "absent")
    node = _nbits_node(8, 32, 4, 16, inits, name="w4")
    for key, v in change.items():
        next(a for a in node.attribute if a.name == key).i = v
    model = _model(node, [("A", F, [2, 32])], [("Y", F, [2, 8])], inits)
    with pytest.raises(ModelError, match=f"node 'w4' \\(MatMulNBits\\): {message}") as info:
        from_onnx(model)
    assert "\n" not in str(info.value)


def test_matmul_nbits_refused_inputs():
    """Scales of the wrong length; g_idx with packed zero points (onnxruntime's CPU kernel ignores
    the zero points there)."""
    rng = np.random.default_rng(6)
    inits = _nbits_inits(rng, 8, 32, 4, 16, "packed")
    bad = dict(inits, S=inits["S"][:-1])
    with pytest.raises(ModelError, match=r"node 'w4' \(MatMulNBits\): scales .* must have 16 elements"):
        from_onnx(_model(_nbits_node(8, 32, 4, 16, bad, name="w4"), [("A", F, [2, 32])], [("Y", F, [2, 8])], bad))
    g = dict(inits, G=(np.arange(32) // 16).astype(np.int32))
    with pytest.raises(ModelError, match=r"node 'w4' \(MatMulNBits\): g_idx with uint8 zero_points"):
        from_onnx(_model(_nbits_node(8, 32, 4, 16, g, g_idx=True, name="w4"), [("A", F, [2, 32])],
                         [("Y", F, [2, 8])], g))


# --- DynamicQuantizeLSTM -------------------------------------------------------------------------

def _quantized(rng, shape, elem, per_column: bool, num_dir: int):
    """(8-bit weights, float32 scale, zero point) of a float weight [num_dir, rows, cols] quantized
    per tensor (per direction: [num_dir]) or per column ([num_dir, cols])."""
    w = rng.standard_normal(shape).astype(np.float32) * 0.4
    axes = (1,) if per_column else (1, 2)
    span = np.abs(w).max(axis=axes)
    if elem == I8:
        scale, zp = span / 127, np.zeros_like(span, np.int8)
        q = np.clip(np.rint(w / scale.reshape(num_dir, 1, -1)), -127, 127).astype(np.int8)
    else:
        scale, zp = 2 * span / 255, np.full(span.shape, 128, np.uint8)
        q = np.clip(np.rint(w / scale.reshape(num_dir, 1, -1)) + 128, 0, 255).astype(np.uint8)
    return q, scale.astype(np.float32), zp


@pytest.mark.parametrize("direction,elem,per_column,extras", [
    ("forward", I8, False, False), ("bidirectional", U8, True, True), ("reverse", I8, True, True)],
    ids=["forward-int8-per-tensor", "bidirectional-uint8-per-column-bias-states", "reverse-int8-per-column"])
def test_dynamic_quantize_lstm(direction, elem, per_column, extras):
    """seq 5, batch 3, input 6, hidden 4 against onnxruntime with one thread: Y, Y_h, Y_c. Tolerance
    1e-4 (outputs in (-1, 1)): the same integer products; a hidden state's uint8 code rounded the
    other way (float32 order of the gate sums) would move the next gates by one step of h times a
    weight, ~1e-3, so the tolerance also says no code differs here."""
    rng = np.random.default_rng(11)
    seq, batch, inp, hid = 5, 3, 6, 4
    nd = 2 if direction == "bidirectional" else 1
    w, ws, wz = _quantized(rng, (nd, inp, 4 * hid), elem, per_column, nd)
    r, rs, rz = _quantized(rng, (nd, hid, 4 * hid), elem, per_column, nd)
    inits = {"W": w, "R": r, "ws": ws, "wz": wz, "rs": rs, "rz": rz}
    names = ["X", "W", "R", "", "", "", "", "", "ws", "wz", "rs", "rz"]
    if extras:
        inits.update(B=(rng.standard_normal((nd, 8 * hid)) * 0.3).astype(np.float32),
                     h0=(rng.standard_normal((nd, batch, hid)) * 0.5).astype(np.float32),
                     c0=(rng.standard_normal((nd, batch, hid)) * 0.5).astype(np.float32))
        names[3], names[5], names[6] = "B", "h0", "c0"
    node = helper.make_node("DynamicQuantizeLSTM", names, ["Y", "Y_h", "Y_c"], domain=MS, name="qlstm",
                            hidden_size=hid, direction=direction)
    model = _model(node, [("X", F, [seq, batch, inp])],
                   [("Y", F, [seq, nd, batch, hid]), ("Y_h", F, [nd, batch, hid]), ("Y_c", F, [nd, batch, hid])],
                   inits)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    errors, _ = _compare(model, {"X": x}, atol=1e-4, rtol=0, one_thread=True)
    print("DynamicQuantizeLSTM", direction, "max abs error", errors)


def test_dynamic_quantize_lstm_refuses_bad_scale():
    rng = np.random.default_rng(12)
    w, ws, wz = _quantized(rng, (1, 6, 16), I8, False, 1)
    r, rs, rz = _quantized(rng, (1, 4, 16), I8, False, 1)
    inits = {"W": w, "R": r, "ws": np.ones(3, np.float32), "wz": wz, "rs": rs, "rz": rz}
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["Y"], domain=MS, name="qlstm", hidden_size=4)
    model = _model(node, [("X", F, [2, 1, 6])], [("Y", F, [2, 1, 1, 4])], inits)
    with pytest.raises(ModelError, match=r"node 'qlstm' \(DynamicQuantizeLSTM\): W_scale .* must be \[1\] or"):
        from_onnx(model)


# --- QAttention ----------------------------------------------------------------------------------

def _qattention_model(rng, batch, seq, d, hidden, heads, elem_w=I8, per_column=False, mask_shape=None,
                      name="qatt", **attrs):
    w_dtype = np.int8 if elem_w == I8 else np.uint8
    info = np.iinfo(w_dtype)
    inits = {"w": rng.integers(info.min, info.max + 1, (d, 3 * hidden)).astype(w_dtype),
             "bias": (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32),
             "x_s": np.float32(0.02), "x_z": np.uint8(120)}
    n = 3 * hidden if per_column else 1
    inits["w_s"] = (rng.random(n) * 0.004 + 0.002).astype(np.float32) if per_column else np.float32(0.003)
    inits["w_z"] = np.full(n, 0 if elem_w == I8 else 128, w_dtype) if per_column else w_dtype(
        0 if elem_w == I8 else 128)
    ins = ["x", "w", "bias", "x_s", "w_s", "mask" if mask_shape else "", "x_z", "w_z"]
    node = helper.make_node("QAttention", ins, ["y"], domain=MS, name=name, num_heads=heads, **attrs)
    graph_inputs = [("x", U8, [batch, seq, d])] + ([("mask", I32, list(mask_shape))] if mask_shape else [])
    return _model(node, graph_inputs, [("y", F, [batch, seq, hidden])], inits), inits


@pytest.mark.parametrize("case", ["plain", "per-column-uint8-weight", "mask-1d", "mask-2d", "unidirectional"])
def test_qattention(case):
    """batch 2, seq 5, input hidden 8, hidden 12 in 3 heads against onnxruntime. The integer
    projection is exact on both sides; the float attention differs by float32 rounding (exp, sum
    order): atol 1e-4 of outputs of magnitude ~0.3."""
    rng = np.random.default_rng(21)
    batch, seq, d, hidden, heads = 2, 5, 8, 12, 3
    kw = {"per-column-uint8-weight": dict(elem_w=U8, per_column=True), "mask-1d": dict(mask_shape=(batch,)),
          "mask-2d": dict(mask_shape=(batch, seq)), "unidirectional": dict(unidirectional=1)}.get(case, {})
    model, _ = _qattention_model(rng, batch, seq, d, hidden, heads, **kw)
    inputs = {"x": rng.integers(0, 256, (batch, seq, d)).astype(np.uint8)}
    if case == "mask-1d":
        inputs["mask"] = np.array([3, 5], np.int32)
    elif case == "mask-2d":
        inputs["mask"] = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]], np.int32)
    errors, _ = _compare(model, inputs, atol=1e-4)
    print("QAttention", case, "max abs error", errors)


def test_qattention_refuses_past_and_bad_scale():
    rng = np.random.default_rng(22)
    model, _ = _qattention_model(rng, 1, 4, 8, 12, 3)
    node = model.graph.node[0]
    node.input.append("past")
    model.graph.input.append(helper.make_tensor_value_info("past", F, [2, 1, 3, 0, 4]))
    with pytest.raises(ModelError, match=r"node 'qatt' \(QAttention\): past / present .* not supported") as info:
        from_onnx(model)
    assert "\n" not in str(info.value)
    model, inits = _qattention_model(rng, 1, 4, 8, 12, 3)
    model.graph.initializer[[t.name for t in model.graph.initializer].index("x_s")].CopyFrom(
        numpy_helper.from_array(np.array([0.02, 0.03], np.float32), "x_s"))
    with pytest.raises(ModelError, match=r"node 'qatt' \(QAttention\): input_scale .* must be a scalar"):
        from_onnx(model)


# --- models written by onnxruntime.quantization --------------------------------------------------

def _quantize_dynamic(model, tmp_path, **kw):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(model, tmp_path / "float.onnx")
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8, **kw)
    return onnx.load(tmp_path / "q.onnx")


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_matmul_nbits_quantizer_model(symmetric):
    """A float MatMul [3, 96] x [96, 40] through onnxruntime's MatMulNBitsQuantizer (4 bits, block
    32; asymmetric: packed zero points) against onnxruntime."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(31)
    k, n = 96, 40
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], "mm", [
        helper.make_tensor_value_info("A", F, [3, k])], [helper.make_tensor_value_info("Y", F, [3, n])],
        [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=symmetric)
    quantizer.process()
    qmodel = quantizer.model.model
    assert [nd.op_type for nd in qmodel.graph.node] == ["MatMulNBits"]
    assert any(t.name.endswith("zero_points") for t in qmodel.graph.initializer) != symmetric
    errors, _ = _compare(qmodel, {"A": rng.standard_normal((3, k)).astype(np.float32)}, atol=1e-4)
    print("MatMulNBitsQuantizer", "symmetric" if symmetric else "asymmetric", "max abs error", errors)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_quantize_dynamic_lstm_model(per_channel, tmp_path):
    """A float LSTM (seq 4, batch 2, input 8, hidden 6, bias) through quantize_dynamic ->
    DynamicQuantizeLSTM with int8 weights, against onnxruntime with one thread (1e-4)."""
    rng = np.random.default_rng(32)
    seq, batch, inp, hid = 4, 2, 8, 6
    inits = {"W": (rng.standard_normal((1, 4 * hid, inp)) * 0.3).astype(np.float32),
             "R": (rng.standard_normal((1, 4 * hid, hid)) * 0.3).astype(np.float32),
             "B": (rng.standard_normal((1, 8 * hid)) * 0.1).astype(np.float32)}
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hid)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("X", F, [seq, batch, inp])],
                              [helper.make_tensor_value_info("Y", F, [seq, 1, batch, hid]),
                               helper.make_tensor_value_info("Y_h", F, [1, batch, hid]),
                               helper.make_tensor_value_info("Y_c", F, [1, batch, hid])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    qmodel = _quantize_dynamic(model, tmp_path, op_types_to_quantize=["LSTM"], per_channel=per_channel)
    assert [nd.op_type for nd in qmodel.graph.node] == ["DynamicQuantizeLSTM"]
    errors, _ = _compare(qmodel, {"X": rng.standard_normal((seq, batch, inp)).astype(np.float32)}, atol=1e-4,
                         rtol=0, one_thread=True)
    print("quantize_dynamic LSTM", per_channel, "max abs error", errors)


def test_quantize_dynamic_attention_model(tmp_path):
    """A com.microsoft Attention (batch 2, seq 6, hidden 16, 4 heads, [batch] mask) through
    quantize_dynamic -> DynamicQuantizeLinear + QAttention, against onnxruntime (atol 1e-4)."""
    rng = np.random.default_rng(33)
    batch, seq, hidden, heads = 2, 6, 16, 4
    inits = {"w": (rng.standard_normal((hidden, 3 * hidden)) * 0.3).astype(np.float32),
             "bias": (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)}
    node = helper.make_node("Attention", ["x", "w", "bias", "mask"], ["y"], domain=MS, num_heads=heads)
    model = _model(node, [("x", F, [batch, seq, hidden]), ("mask", I32, [batch])], [("y", F, [batch, seq, hidden])],
                   inits)
    qmodel = _quantize_dynamic(model, tmp_path, op_types_to_quantize=["Attention"])
    assert "QAttention" in [nd.op_type for nd in qmodel.graph.node]
    inputs = {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32), "mask": np.array([4, 6], np.int32)}
    errors, _ = _compare(qmodel, inputs, atol=1e-4)
    print("quantize_dynamic Attention max abs error", errors)


def test_matmul_nbits_float16():
    """float16 A, scales and bias (computed in float32 here, cast back): within 2 float16 ulps of
    onnxruntime's (rtol 2e-3)."""
    rng = np.random.default_rng(8)
    n, k, bs = 16, 64, 32
    inits = _nbits_inits(rng, n, k, 4, bs, "packed")
    inits["S"] = inits["S"].astype(np.float16)
    inits["bias"] = rng.standard_normal(n).astype(np.float16)
    model = _model(_nbits_node(n, k, 4, bs, inits, bias=True), [("A", F16, [4, k])], [("Y", F16, [4, n])], inits)
    errors, _ = _compare(model, {"A": rng.standard_normal((4, k)).astype(np.float16)}, atol=2e-3, rtol=2e-3)
    print("MatMulNBits float16 max abs error", errors)


def test_matmul_nbits_run_time_scales():
    """The scales a graph input (not a constant): the unpacking kernel reads them at run time,
    so nothing needs them constant; matches onnxruntime."""
    rng = np.random.default_rng(9)
    n, k, bs = 8, 32, 16
    inits = _nbits_inits(rng, n, k, 4, bs, "packed")
    scales = inits.pop("S")
    model = _model(_nbits_node(n, k, 4, bs, dict(inits, S=scales)), [("A", F, [2, k]), ("S", F, [n * 2])],
                   [("Y", F, [2, n])], inits)
    _compare(model, {"A": rng.standard_normal((2, k)).astype(np.float32), "S": scales}, atol=1e-4)


@pytest.mark.parametrize("op", ["MatMulNBits", "QAttention"])
@pytest.mark.parametrize("spec", ["arm-neoverse-n1", "wasm"])
def test_on_other_targets(spec, op):
    """MatMulNBits (4 bits, packed zero points) and QAttention ([batch] mask) compiled for AArch64
    and wasm32, run under qemu-user / wasmtime, against onnxruntime (host CPU): as on x86."""
    from tvmc.runtime import device_missing
    from tvmc.target import resolve_target

    target = resolve_target(spec)
    reason = device_missing(target)
    if reason:
        pytest.skip(f"target {target.name}: {reason}")
    rng = np.random.default_rng(41)
    if op == "MatMulNBits":
        inits = _nbits_inits(rng, 16, 48, 4, 16, "packed")
        model = _model(_nbits_node(16, 48, 4, 16, inits), [("A", F, [3, 48])], [("Y", F, [3, 16])], inits)
        inputs = {"A": rng.standard_normal((3, 48)).astype(np.float32)}
    else:
        model, _ = _qattention_model(rng, 2, 4, 8, 12, 3, mask_shape=(2,))
        inputs = {"x": rng.integers(0, 256, (2, 4, 8)).astype(np.uint8), "mask": np.array([2, 4], np.int32)}
    got, _ = _run(_compile(model, target), inputs)
    for name, r in onnxruntime_outputs(model, inputs).items():
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4, err_msg=f"{spec} {name}")


@pytest.mark.parametrize("bits,zero_points", [(4, "packed"), (4, "absent"), (2, "packed"), (8, "absent")],
                         ids=["4b-zp", "4b", "2b-zp", "8b"])
def test_matmul_nbits_accuracy_level_4(bits, zero_points):
    """accuracy_level 4: A quantized to int8 per block, int32 products (as onnxruntime's CPU
    kernel): K = 80 (a partial last block of 32), A [2, 3, 80]; rtol 1e-4 (the float32 sum over
    blocks in another order). The float32 path would be ~0.5% away (checked: not within it)."""
    rng = np.random.default_rng(50 + bits)
    n, k, bs = 24, 80, 32
    inits = _nbits_inits(rng, n, k, bits, bs, zero_points)
    node = _nbits_node(n, k, bits, bs, inits)
    node.attribute.append(helper.make_attribute("accuracy_level", 4))
    model = _model(node, [("A", F, [2, 3, k])], [("Y", F, [2, 3, n])], inits)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    scale = float(np.abs(onnxruntime_outputs(model, {"A": a})["Y"]).max())
    errors, _ = _compare(model, {"A": a}, atol=1e-5 * scale)
    print("MatMulNBits accuracy_level 4", bits, zero_points, "max abs error", errors, "output scale", scale)
    float_model = _model(_nbits_node(n, k, bits, bs, inits), [("A", F, [2, 3, k])], [("Y", F, [2, 3, n])], inits)
    gap = np.abs(onnxruntime_outputs(float_model, {"A": a})["Y"] - onnxruntime_outputs(model, {"A": a})["Y"]).max()
    assert gap > 100 * max(errors["Y"], 1e-6 * scale)


@pytest.mark.parametrize("case", ["float-zero-points", "g_idx", "float16"])
def test_matmul_nbits_accuracy_level_4_other_forms(case):
    """accuracy_level 4 with float zero points or a g_idx: onnxruntime's CPU kernel stays float32
    (so does tvmc); with float16 A it takes the int8 path through float32 (so does tvmc)."""
    rng = np.random.default_rng(60)
    n, k, bs = 24, 96, 32
    inits = _nbits_inits(rng, n, k, 4, bs, "float" if case == "float-zero-points" else "packed")
    if case == "g_idx":
        inits.pop("Z")
        inits["G"] = rng.permutation(np.arange(k) // bs).astype(np.int32)
    elem, dtype = (F16, np.float16) if case == "float16" else (F, np.float32)
    if case == "float16":
        inits["S"] = inits["S"].astype(np.float16)
    node = _nbits_node(n, k, 4, bs, inits, g_idx=case == "g_idx")
    node.attribute.append(helper.make_attribute("accuracy_level", 4))
    model = _model(node, [("A", elem, [5, k])], [("Y", elem, [5, n])], inits)
    atol, rtol = (2e-3, 2e-3) if case == "float16" else (1e-4, 1e-4)
    _compare(model, {"A": rng.standard_normal((5, k)).astype(dtype)}, atol=atol, rtol=rtol)
