"""Graph pass FoldQuantizedChains: float chains between a dequantize and a quantize become integer ops."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite, users
from tvmc.ops.elemwise import broadcast_shape
from tvmc.ops.qnn import RANGES
from tvmc.ops.registry import make_call
from tvmc.passes.fake_quantization_to_integer import _constant_value
from tvmc.passes.pass_infra import graph_pass

# ops that only move or select values: f(dequantize(q)) quantized with q's own scale and zero point
# is f(q) exactly (max commutes with a monotonic increasing map; the others move values)
_MOVES = ("reshape", "transpose", "squeeze", "expand_dims", "nn.batch_flatten", "nn.max_pool2d",
          "nn.global_max_pool2d", "concatenate", "layout_transform")
_AFFINE = ("multiply", "add", "subtract", "divide")
_CLAMPS = ("nn.relu", "clip")


def _scalar(e: Expr):
    """The value of a constant scalar (size-1) expression, else None."""
    v = _constant_value(e)
    return None if v is None or v.size != 1 else v.reshape(())


def _dequantize_parts(e: Expr):
    """(q, scale float32, zero point int64) of e = qnn.dequantize(q) to float32 of a non-constant
    8-bit q with a constant per-tensor scale and zero point, else None."""
    if not isinstance(e, Call) or e.op != "qnn.dequantize" or e.dtype != "float32":
        return None
    q, s, z = e.inputs
    if q.dtype not in RANGES or isinstance(q, Constant):
        return None
    s, z = _scalar(s), _scalar(z)
    if s is None or z is None:
        return None
    return q, np.float32(s), np.int64(z)


class _Chain:
    """Matcher of the chain under one qnn.quantize; `uses` and `outputs` say which intermediate
    float values something else still needs (those chains stay float)."""

    def __init__(self, uses: dict, outputs: set):
        self.uses, self.outputs = uses, outputs

    def private(self, e: Expr) -> bool:
        return isinstance(e, Call) and len(self.uses[e]) == 1 and e not in self.outputs

    def affine(self, t: Expr):
        """Walk multiply / add / subtract / divide by constants down to a dequantize: (dequantize
        parts, a, b) with t = a * dequantize(q) + b (a and b float64, broadcasting against t), else
        None."""
        steps = []
        while not (isinstance(t, Call) and t.op == "qnn.dequantize"):
            if not (self.private(t) and t.op in _AFFINE and t.dtype == "float32"):
                return None
            values = [_constant_value(i) for i in t.inputs]
            k = 0 if values[1] is not None else 1  # the operand that carries the chain
            c = values[1 - k]
            if c is None or values[k] is not None or (t.op == "divide" and k == 1):
                return None
            if broadcast_shape(t.inputs[k].shape, c.shape) != tuple(t.inputs[k].shape):
                return None
            steps.append((t.op, k, c.astype(np.float64)))
            t = t.inputs[k]
        parts = _dequantize_parts(t)
        if parts is None:
            return None
        a, b = np.float64(1.0), np.float64(0.0)
        for op, k, c in reversed(steps):
            if op == "multiply":
                a, b = a * c, b * c
            elif op == "add":
                b = b + c
            elif op == "subtract":
                a, b = (a, b - c) if k == 0 else (-a, c - b)
            else:
                a, b = a / c, b / c
        return parts, a, b


def _clamp_bounds(clamp: Call, scale: np.float32, zp: np.int64, out_dtype: str):
    """A relu / clip before quantize(., scale, zp) as the integer bounds it leaves on the quantized
    value: round is monotonic, so quantize(clip(v, lo, hi)) = clip(quantize(v), quantize(lo), quantize(hi))."""
    lo, hi = RANGES[out_dtype]
    a_min, a_max = (0.0, np.inf) if clamp.op == "nn.relu" else (clamp.attrs["a_min"], clamp.attrs["a_max"])

    def q(v):
        return float(np.clip(np.rint(np.float32(v) / scale) + zp, lo, hi))

    return q(a_min), q(a_max)


def _fold(e: Call, m: _Chain, new: dict):
    """The integer form of e = qnn.quantize(...), or None when its chain does not match."""
    x, s, z = e.inputs
    out_dtype = e.attrs["out_dtype"]
    s2, z2 = _scalar(s), _scalar(z)
    if out_dtype not in RANGES or x.dtype != "float32" or s2 is None or z2 is None:
        return None
    s2, z2 = np.float32(s2), np.int64(z2)
    clamps, t = [], x
    while m.private(t) and t.op in _CLAMPS:
        clamps.append(t)
        t = t.inputs[0]
    name = e.name or "quantized"
    summands = [_dequantize_parts(i) for i in t.inputs] if m.private(t) and t.op == "add" else [None]
    if all(p is not None for p in summands):
        def term(p, k):
            return [new[p[0]], Constant(np.array(p[2], np.int32), f"{name}.{k}_zero_point"),
                    Constant(np.float32(np.float64(p[1]) / np.float64(s2)), f"{name}.{k}_scale")]

        out = make_call("qnn.add", term(summands[0], "a") + term(summands[1], "b") +
                        [Constant(np.array(z2, np.int32), f"{name}.y_zero_point")], {"out_dtype": out_dtype}, name=name)
    elif m.private(t) and t.op in _MOVES:
        # f(q) when every dequantize into f has the quantize's own scale, zero point and dtype
        ins = [_dequantize_parts(i) for i in t.inputs]
        if any(p is None or p[1] != s2 or p[2] != z2 or p[0].dtype != out_dtype for p in ins):
            return None
        out = make_call(t.op, [new[p[0]] for p in ins], dict(t.attrs), name=t.name)
    else:
        chain = m.affine(t)
        if chain is None:
            return None
        (q, s1, z1), a, b = chain
        if not clamps and q.dtype == out_dtype and s1 == s2 and z1 == z2 and np.all(a == 1) and np.all(b == 0):
            out = new[q]  # quantize(dequantize(q)) with q's own parameters
        else:
            scale = (a * np.float64(s1) / np.float64(s2)).astype(np.float32)
            shift = (b / np.float64(s2)).astype(np.float32)
            out = make_call("qnn.rescale", [new[q], Constant(np.array(z1, np.int32), f"{name}.x_zero_point"),
                                            Constant(scale, f"{name}.rescale_scale"),
                                            Constant(shift, f"{name}.rescale_shift"),
                                            Constant(np.array(z2, np.int32), f"{name}.y_zero_point")],
                            {"out_dtype": out_dtype}, name=name)
    lo, hi = RANGES[out_dtype]
    for clamp in reversed(clamps):
        a_min, a_max = _clamp_bounds(clamp, s2, z2, out_dtype)
        if (a_min, a_max) != (lo, hi):
            out = make_call("clip", [out], {"a_min": a_min, "a_max": a_max}, name=clamp.name)
    return out


@graph_pass("FoldQuantizedChains", opt_level=1)
def fold_quantized_chains(graph: Graph, ctx) -> Graph:
    """Fold the float ops between a qnn.dequantize and a qnn.quantize into integer ones (what
    remains of a QDQ model between its integer convs: an unfolded BatchNorm, a Relu, a MaxPool, a
    Flatten). With q an 8-bit tensor whose dequantize has a constant per-tensor scale s1 and zero
    point z1, and a quantize to an 8-bit type with constant per-tensor s2, z2:

        quantize(clamp(a * dequantize(q) + b))  ->  clip(qnn.rescale(q, z1, a * s1 / s2, b / s2, z2))

    where a * v + b composes multiply / add / subtract / divide by constants (scalars or per
    channel, any sign; float64 here, the folded scale and shift float32), and clamp is nn.relu or
    clip (zero or more, directly under the quantize), which become integer bounds on the result
    (quantize is monotonic: exact). qnn.rescale rounds once in float32 as the float chain does
    after its float32 ops, so the result is the chain's within one unit where a value lies near a
    rounding boundary (onnxruntime runs these chains in float32 as written).

        quantize(f(dequantize(q), ...))  ->  f(q, ...)

    for f a data movement or max (reshape, transpose, squeeze, expand_dims, nn.batch_flatten,
    nn.max_pool2d, nn.global_max_pool2d, concatenate, layout_transform) when every input is a
    dequantize with the quantize's own scale, zero point and dtype: exact.

        quantize(clamp(dequantize(a) + dequantize(b)))  ->  clip(qnn.add(a, za, sa / s2, b, zb, sb / s2, z2))

    (a residual Add; within one unit as qnn.rescale). quantize(dequantize(q))
    with q's own parameters is q. The float ops folded must have no other user (their float value
    is not needed); the dequantize may (it stays for them). Runs after FakeQuantizationToInteger,
    whose requantized outputs start most of these chains, and before FoldConstant.
    """
    m = _Chain(users(graph), set(graph.outputs))
    new = {}  # old expr -> its rewritten form, for the 8-bit inputs of later folds

    def fn(e: Expr, new_inputs: tuple):
        out = _fold(e, m, new) if isinstance(e, Call) and e.op == "qnn.quantize" else None
        if out is None and isinstance(e, Call) and any(a is not b for a, b in zip(new_inputs, e.inputs, strict=True)):
            out = Call(e.op, new_inputs, e.attrs, e.type, e.name)
        new[e] = e if out is None else out
        return out

    return rewrite(graph, fn)
