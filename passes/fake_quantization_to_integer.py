"""Graph pass FakeQuantizationToInteger: QDQ chains around conv2d / matmul become qnn integer ops."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite, users
from tvmc.ops.qnn import RANGES
from tvmc.ops.registry import get_op, make_call
from tvmc.passes.pass_infra import graph_pass

# anchor -> (qnn op, axis of the output indexed by a per-channel weight scale)
_ANCHORS = {"nn.conv2d": "qnn.conv2d", "nn.matmul": "qnn.matmul", "nn.dense": "qnn.dense"}


def _constant_value(e: Expr):
    """The value of `e` when it is a Constant or a call whose leaves are all Constants (evaluated
    with the ops' numpy references, as FoldConstant would), else None. Whether it is constant is
    decided first, on the structure alone and each node once (a run-time scale, as
    DynamicQuantizeLinear computes, reaches back through the whole graph, shared nodes included),
    so nothing is evaluated for a value that is not constant."""
    if not _all_constant(e, {}):
        return None
    return _evaluate(e, {})


def _all_constant(root: Expr, memo: dict) -> bool:
    """Whether every leaf under `root` is a Constant: each node once, without recursion (a deep
    graph reaches below Python's recursion limit)."""
    stack = [root]
    while stack:
        e = stack[-1]
        if e in memo:
            stack.pop()
        elif not isinstance(e, Call):
            memo[e] = isinstance(e, Constant)
            stack.pop()
        elif any(memo.get(i) is False for i in e.inputs):
            memo[e] = False
            stack.pop()
        else:
            pending = [i for i in e.inputs if i not in memo]
            if pending:
                stack.extend(pending)
            else:
                memo[e] = True
                stack.pop()
    return memo[root]


def _evaluate(e: Expr, memo: dict):
    if e not in memo:
        if isinstance(e, Constant):
            memo[e] = e.value
        else:
            values = [_evaluate(i, memo) for i in e.inputs]
            with np.errstate(all="ignore"):
                memo[e] = np.asarray(get_op(e.op).reference(*values, **e.attrs)).astype(e.dtype)
    return memo[e]


def _dequantized(e: Expr, constant_data: bool):
    """(q, scale, zero point) of e = qnn.dequantize(q, scale, zp) to float32 with an 8-bit q
    (a Constant when `constant_data`) and constant scale and zero point, else None."""
    if not isinstance(e, Call) or e.op != "qnn.dequantize" or e.dtype != "float32":
        return None
    q, scale, zp = e.inputs
    if q.dtype not in RANGES or constant_data != isinstance(q, Constant):
        return None
    s, z = _constant_value(scale), _constant_value(zp)
    if s is None or z is None:
        return None
    return q, s.astype(np.float32), z.astype(np.int64)


def _channels(v: np.ndarray, channels: int, axis: int, rank: int):
    """A scale or zero point [] or per channel (shaped to broadcast along `axis` of a rank-`rank`
    tensor) as a scalar or a vector [channels]; None for any other shape."""
    if v.size == 1:
        return v.reshape(())
    shape = (1,) * (rank - v.ndim) + v.shape
    if v.size == channels and shape[axis] == channels:
        return v.reshape(channels)
    return None


def _match(q: Call, uses: dict, outputs: set):
    """The parts of q = qnn.quantize(anchor(dequantize(x), dequantize(W)) [+ bias], y_scale, y_zp),
    or None. The anchor and the add must have no other user (their float value is not needed)."""
    y, ys, yz = q.inputs
    if q.attrs["out_dtype"] not in RANGES or y.dtype != "float32":
        return None
    ys, yz = _constant_value(ys), _constant_value(yz)
    if ys is None or yz is None or ys.size != 1 or yz.size != 1:
        return None
    anchor, bias = y, None
    if isinstance(y, Call) and y.op == "add" and len(uses[y]) == 1 and y not in outputs:
        for k in (0, 1):
            if isinstance(y.inputs[k], Call) and y.inputs[k].op in _ANCHORS:
                anchor, bias = y.inputs[k], y.inputs[1 - k]
                break
    if not isinstance(anchor, Call) or anchor.op not in _ANCHORS or len(uses[anchor]) != 1 or anchor in outputs:
        return None
    x, w = _dequantized(anchor.inputs[0], False), _dequantized(anchor.inputs[1], True)
    if x is None or w is None or x[1].size != 1 or x[2].size != 1:
        return None
    if anchor.op != "nn.conv2d" and len(w[0].shape) != 2 or anchor.op == "nn.dense" and len(x[0].shape) != 2:
        return None
    axis, channels = (1, anchor.shape[1]) if anchor.op == "nn.conv2d" else (len(anchor.shape) - 1, anchor.shape[-1])
    w_axis = 1 if anchor.op == "nn.matmul" else 0  # the weight's output-channel axis: O of OIHW, N of [N, K]
    ws = _channels(w[1], channels, w_axis, len(w[0].shape))
    wz = _channels(w[2], channels, w_axis, len(w[0].shape))
    if ws is None or wz is None:
        return None
    bias_value = None
    if bias is not None:
        b = _constant_value(bias)
        if b is None or b.dtype != np.float32:
            return None
        b = _channels(np.broadcast_to(b, b.shape), channels, axis, len(anchor.shape))
        if b is None:
            return None
        bias_value = b
    return dict(anchor=anchor, x=x, w=(w[0], ws, wz), bias=bias_value, ys=ys.reshape(()), yz=yz.reshape(()),
                axis=axis, channels=channels)


def _int32(v, name: str) -> Constant:
    return Constant(np.array(v, dtype=np.int32), name)  # (ascontiguousarray would make a 0-d array 1-d)


def _dense(xq: Expr, wq: Constant, zero_points: list, shape: tuple, name: str) -> Call:
    """The matmul of x_q [..., K] and the constant 2-D W_q [K, N] as qnn.dense on W_q transposed
    here ([N, K], still 8-bit), x_q's leading axes flattened into rows and restored after (as the
    importer runs MatMulInteger): on CPUs AlterOpLayout then puts it on the dot-product kernels."""
    k, n = wq.shape
    rows = xq if len(xq.shape) == 2 else make_call("reshape", [xq], {"newshape": (int(np.prod(shape[:-1])), k)})
    wt = Constant(np.ascontiguousarray(wq.value.T), f"{wq.name or name}.transposed")
    out = make_call("qnn.dense", [rows, wt, *zero_points], {}, name=name)
    return out if len(shape) == 2 else make_call("reshape", [out], {"newshape": tuple(shape)})


def _integer_chain(q: Call, m: dict) -> Call:
    """requantize(qnn anchor(x_q, W_q) + bias_int32, x_scale * w_scale / y_scale, y_zp)."""
    anchor = m["anchor"]
    xq, xs, xz = m["x"]
    wq, ws, wz = m["w"]
    name = anchor.name or q.name
    zero_points = [_int32(xz.reshape(()), f"{name}.x_zero_point"), _int32(wz, f"{name}.w_zero_point")]
    if anchor.op == "nn.matmul":
        acc = _dense(xq, wq, zero_points, anchor.shape, name)
    else:
        attrs = dict(anchor.attrs) if anchor.op == "nn.conv2d" else {}
        acc = make_call(_ANCHORS[anchor.op], [xq, wq, *zero_points], attrs, name=name)
    in_scale = (xs.reshape(()) * ws).astype(np.float32)  # the scales' product in float32, as onnxruntime's bias scale
    if m["bias"] is not None:
        # the bias in units of the accumulator (onnxruntime's quantizer writes it so: round(b / (x_scale * w_scale)))
        b = np.rint(m["bias"].astype(np.float64) / in_scale.astype(np.float64))
        b = np.broadcast_to(b, (m["channels"],))
        shape = (m["channels"],) + (1,) * (len(anchor.shape) - 1 - m["axis"])
        acc = make_call("add", [acc, _int32(np.clip(b, -2**31, 2**31 - 1).reshape(shape), f"{name}.bias_int32")],
                        name=name)
    scale = Constant((in_scale / m["ys"].astype(np.float32)).astype(np.float32), f"{name}.requantize_scale")
    # in float32, as onnxruntime runs these chains (MLAS's requantize); ~25% faster than float64 on
    # a QDQ CNN, whose outputs then match onnxruntime's exactly
    return make_call("qnn.requantize", [acc, scale, _int32(m["yz"], f"{name}.y_zero_point")],
                     {"out_dtype": q.attrs["out_dtype"], "axis": m["axis"], "compute_dtype": "float32"}, name=q.name)


@graph_pass("FakeQuantizationToInteger", opt_level=1)
def fake_quantization_to_integer(graph: Graph, ctx) -> Graph:
    """Rewrite fake-quantized (QDQ) convolutions and matmuls into integer ones (TVM's
    relay.transform.FakeQuantizationToInteger, for the chains onnxruntime's quantize_static writes):

        qnn.quantize(nn.conv2d(qnn.dequantize(x_q), qnn.dequantize(W_q)) [+ b], y_scale, y_zp)
          -> qnn.requantize(qnn.conv2d(x_q, W_q, x_zp, w_zp) [+ b_int32], x_scale * w_scale / y_scale, y_zp)

    and the same with nn.matmul and a constant 2-D W_q (-> qnn.dense on W_q transposed, x_q's
    leading axes flattened into rows), and with nn.dense (Gemm with transB: a 2-D x_q and a
    constant W_q [N, K], -> qnn.dense). x_q is an 8-bit tensor with
    a per-tensor constant scale and zero point; W_q an 8-bit Constant with a scalar or per-output-
    channel scale and zero point; y_zp 8-bit. The bias b (a float Constant, or a constant chain
    such as DequantizeLinear of quantize_static's int32 bias) becomes round(b / (x_scale * w_scale))
    in int32, which is the quantizer's own integer bias when it wrote one. The anchor and the add
    must have no other user. Requantization rounds half to even in float32 (as onnxruntime's MLAS
    requantize, which runs these chains), so the result can differ from the float chain by one unit
    where a value lies near a rounding boundary. Chains that do not
    match stay float (dequantize, float op, quantize), as before.
    Runs before FoldConstant, which would fold the weights' dequantize into float32 constants.
    """
    uses, outputs = users(graph), set(graph.outputs)
    new = {}  # old expr -> its rewritten form, for the quantized inputs of later matches

    def fn(e: Expr, new_inputs: tuple):
        if not isinstance(e, Call):
            new[e] = e
            return None
        m = _match(e, uses, outputs) if e.op == "qnn.quantize" else None
        if m is not None:
            m["x"] = (new[m["x"][0]],) + m["x"][1:]
            out = _integer_chain(e, m)
        elif all(a is b for a, b in zip(new_inputs, e.inputs, strict=True)):
            out = e
        else:
            out = Call(e.op, new_inputs, e.attrs, e.type, e.name)
        new[e] = out
        return out

    return rewrite(graph, fn)
