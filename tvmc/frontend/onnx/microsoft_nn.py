"""ONNX converters, onnxruntime's `com.microsoft` quantized operators built from several of ours:
MatMulNBits (n-bit block-quantized weights), DynamicQuantizeLSTM and QAttention (operator set
com.microsoft 1; the single-kernel ones are in microsoft.py).

Source: onnxruntime docs/ContribOperators.md (each converter names its section); where that text
leaves a detail open, onnxruntime's CPU execution provider (the tests compare against it) decides,
and the converter's docstring says so.

- MatMulNBits: the packed codes stay uint8 in mod.params (two 4-bit weights a byte) and are
  unpacked and scaled at run time by qnn.dequantize_blockwise (tvmc/ops/qnn_blockwise.py) into the
  float weight of an nn.dense, float32 as onnxruntime's accuracy_level 0 (the default); with
  accuracy_level 4 A is quantized to int8 per block and multiplied in int32 with the codes
  (qnn.unpack_bits, qnn.matmul), as onnxruntime's CPU kernel does.
- DynamicQuantizeLSTM: the LSTM unrolling of recurrent.py with each of its matmuls a
  DynamicQuantizeMatMul (the float operand quantized to uint8 over its whole range at run time:
  X once for all steps, H at each step, as onnxruntime's quantized LSTM does with one thread).
- QAttention: MatMulIntegerToFloat for the Q, K, V projection, then the float attention
  softmax(scale Q K^T + mask) V per head, with onnxruntime's mask value -10000.
"""

from __future__ import annotations

import math

import numpy as np

from tvmc.frontend.onnx.common import is_const, prod, reshape
from tvmc.frontend.onnx.microsoft import DOMAIN, VERSIONS, _f32, _matmul_to_float, _needs, _opt, dynamic_quantize
from tvmc.frontend.onnx.recurrent import _Unroll, lstm
from tvmc.frontend.onnx.registry import domain_converter
from tvmc.ops.qnn_blockwise import BITS

_FLOATS = ("float32", "float16")


def _attr_int(ctx, attrs, name: str, default=None) -> int:
    if name not in attrs:
        if default is None:
            raise ctx.error(f"attribute '{name}' is required")
        return default
    return int(attrs[name])


def _as_shape(ctx, x, shape: tuple, what: str):
    """x reshaped to `shape` (same number of elements), else the node's ModelError."""
    if x.type.size != prod(shape):
        raise ctx.error(f"{what} {x.type} must have {prod(shape)} elements {list(shape)}")
    return x if tuple(x.shape) == tuple(shape) else reshape(ctx, x, shape)


@domain_converter(DOMAIN, *VERSIONS)
def MatMulNBits(ctx, node, inputs, attrs, opset):
    """com.microsoft MatMulNBits(A, B, scales, zero_points, g_idx, bias; K, N, bits = 4, block_size,
    accuracy_level): Y [..., N] = A [..., K] @ W^T + bias, float32 (float16 A: computed in
    float32 and cast back), with W [N, K] block-dequantized from B uint8 [N, ceil(K / block_size),
    block_size * bits / 8] (codes packed low bits first) by scales [N * blocks] and zero_points
    (absent: 2^(bits - 1); uint8 packed [N * ceil(blocks * bits / 8)]; or float [N * blocks]),
    each block g = k // block_size or g_idx[k]. bits 2, 4 or 8 (onnxruntime's CPU kernels);
    block_size a power of two >= 16. g_idx with uint8 zero points is refused: onnxruntime's CPU
    kernel then ignores the zero points (uses 2^(bits - 1)), against its documented semantics.
    The lowering is qnn.dequantize_blockwise (B stays packed in mod.params) then nn.dense, or with
    accuracy_level 4 (and no float zero points, no g_idx, where onnxruntime's CPU kernel stays
    float32 too) the int8 product of _nbits_int8. ContribOperators.md, com.microsoft.MatMulNBits."""
    _needs(ctx, inputs, ["A", "B", "scales"])
    k, n = _attr_int(ctx, attrs, "K"), _attr_int(ctx, attrs, "N")
    bits, bs = _attr_int(ctx, attrs, "bits", 4), _attr_int(ctx, attrs, "block_size")
    if bits not in BITS:
        raise ctx.error(f"bits={bits} is not supported (onnxruntime's CPU kernels: {', '.join(map(str, BITS))})")
    if bs < 16 or bs & (bs - 1):
        raise ctx.error(f"block_size={bs} must be a power of two >= 16")
    a, b, scales = inputs[0], inputs[1], inputs[2]
    if a.dtype not in _FLOATS or not a.shape or a.shape[-1] != k:
        raise ctx.error(f"A {a.type} must be float32 or float16 [..., {k}]")
    if b.dtype != "uint8":
        raise ctx.error(f"B {b.type} must be uint8")
    if scales.dtype not in _FLOATS:
        raise ctx.error(f"scales {scales.type} must be float32 or float16")
    blocks = -(-k // bs)
    b = _as_shape(ctx, b, (n, blocks, bs * bits // 8), "B")
    ops = [b, _as_shape(ctx, scales, (n, blocks), "scales")]
    zp, g_idx, bias = _opt(inputs, 3), _opt(inputs, 4), _opt(inputs, 5)
    kind = "absent"
    if zp is not None:
        if zp.dtype == "uint8":
            kind = "packed"
            ops.append(_as_shape(ctx, zp, (n, -(-blocks * bits // 8)), "zero_points"))
        elif zp.dtype == scales.dtype:
            kind = "float"
            ops.append(_as_shape(ctx, zp, (n, blocks), "zero_points"))
        else:
            raise ctx.error(f"zero_points {zp.type} must be uint8 or {scales.dtype} (the scales' type)")
    if g_idx is not None:
        if kind == "packed":
            raise ctx.error("g_idx with uint8 zero_points is not supported (onnxruntime's CPU kernel ignores the "
                            "zero points there)")
        if g_idx.dtype != "int32" or tuple(g_idx.shape) != (k,):
            raise ctx.error(f"g_idx {g_idx.type} must be int32 [{k}]")
        if is_const(g_idx) and g_idx.value.size and not (0 <= g_idx.value.min() and g_idx.value.max() < blocks):
            raise ctx.error(f"g_idx values must lie in [0, {blocks})")
        ops.append(g_idx)
    rows = reshape(ctx, _f32(ctx, a), (prod(a.shape[:-1]), k))
    if int(attrs.get("accuracy_level", 0)) == 4 and kind != "float" and g_idx is None:
        y = _nbits_int8(ctx, rows, ops, bits, bs, kind)
    else:
        w = ctx.call("qnn.dequantize_blockwise", ops, {"k": k, "bits": bits, "block_size": bs, "zero_points": kind,
                                                       "g_idx": int(g_idx is not None)}, fold=False)
        y = ctx.call("nn.dense", [rows, w])
    if bias is not None:
        if bias.dtype not in _FLOATS or tuple(bias.shape) != (n,):
            raise ctx.error(f"bias {bias.type} must be float [{n}]")
        y = ctx.call("add", [y, _f32(ctx, bias)])
    y = reshape(ctx, y, tuple(a.shape[:-1]) + (n,))
    return y if a.dtype == "float32" else ctx.call("cast", [y], {"dtype": a.dtype})


def _nbits_int8(ctx, rows, ops, bits: int, bs: int, kind: str):
    """MatMulNBits at accuracy_level 4 as onnxruntime's CPU kernel computes it (MLAS CompInt8):
    each block of bs values of a row of A quantized symmetrically to int8, qa = round half to even
    of a * (127 / amax) with a_scale = amax / 127 (amax the block's largest magnitude; 0 for an
    all-zero block); per block the int32 product qa . (q - zp) (the codes unpacked at run time by
    qnn.unpack_bits, the zero point's term subtracted as zp * sum(qa)), times a_scale * scale in
    float32, summed over the blocks. rows [M, K] float32 -> [M, N] float32."""
    b, scales = ops[0], ops[1]
    n, blocks = scales.shape
    m, k = rows.shape
    padded = blocks * bs
    if padded != k:  # a partial last block: zeros add nothing to amax or the products
        rows = ctx.call("pad", [rows], {"pad_width": ((0, 0), (0, padded - k)), "pad_value": 0.0})
    a3 = reshape(ctx, rows, (m, blocks, bs))
    amax = ctx.call("max", [ctx.call("abs", [a3])], {"axis": (2,), "keepdims": 1})  # [M, blocks, 1]
    zero = ctx.const(np.float32(0.0), "zero")
    inverse = ctx.call("where", [ctx.call("equal", [amax, zero]), zero,
                                 ctx.call("divide", [ctx.const(np.float32(127.0), "int8_max"), amax])])
    qa = ctx.call("qnn.quantize", [ctx.call("multiply", [a3, inverse]), ctx.const(np.float32(1.0), "one"),
                                   ctx.const(np.int32(0), "zero_point")], {"out_dtype": "int8"})
    qa = ctx.call("transpose", [qa], {"axes": (1, 0, 2)})  # [blocks, M, bs]
    codes = ctx.call("qnn.unpack_bits", [reshape(ctx, b, (n, b.type.size // n))], {"bits": bits, "count": padded},
                     fold=False)
    codes = ctx.call("transpose", [reshape(ctx, codes, (n, blocks, bs))], {"axes": (1, 2, 0)})  # [blocks, bs, N]
    none = ctx.const(np.zeros((), np.int32), "zero_point")
    acc = ctx.call("qnn.matmul", [qa, codes, none, none])  # [blocks, M, N]
    if kind == "packed":
        zp = ctx.call("qnn.unpack_bits", [ops[2]], {"bits": bits, "count": blocks}, fold=False)
        zp = ctx.call("transpose", [ctx.call("cast", [zp], {"dtype": "int32"})], {"axes": (1, 0)})
        zp = reshape(ctx, zp, (blocks, 1, n))
    else:
        zp = ctx.const(np.int32(1 << (bits - 1)), "default_zero_point")
    row_sums = ctx.call("sum", [ctx.call("cast", [qa], {"dtype": "int32"})], {"axis": (2,), "keepdims": 1})
    acc = ctx.call("subtract", [acc, ctx.call("multiply", [row_sums, zp])])
    a_scale = ctx.call("transpose", [ctx.call("divide", [amax, ctx.const(np.float32(127.0), "int8_max")])],
                       {"axes": (1, 0, 2)})  # [blocks, M, 1]
    w_scale = reshape(ctx, ctx.call("transpose", [_f32(ctx, scales)], {"axes": (1, 0)}), (blocks, 1, n))
    parts = ctx.call("multiply", [ctx.call("cast", [acc], {"dtype": "float32"}),
                                  ctx.call("multiply", [a_scale, w_scale])])
    return ctx.call("sum", [parts], {"axis": (0,), "keepdims": 0})


class _QuantizedUnroll(_Unroll):
    """DynamicQuantizeLSTM's operands on the LSTM unrolling: W [num_dir, input, 4 hidden] and R
    [num_dir, hidden, 4 hidden] 8-bit (already transposed, as onnxruntime stores them), each
    product a DynamicQuantizeMatMul with the direction's scale and zero point (per tensor [] or
    per column [4 hidden])."""

    def __init__(self, ctx, inputs, attrs):
        self.scales = {"W": (inputs[8], _opt(inputs, 9)), "R": (inputs[10], _opt(inputs, 11))}
        super().__init__(ctx, inputs, attrs, 4, ["Sigmoid", "Tanh", "Tanh"])

    def check_weights(self, w, r):
        num_dir, n = self.num_dir, self.gates * self.hidden
        for name, t, rows in (("W", w, self.input), ("R", r, self.hidden)):
            if t.dtype not in ("int8", "uint8") or tuple(t.shape) != (num_dir, rows, n):
                raise self.ctx.error(f"{name} {t.type} must be int8 or uint8 [{num_dir}, {rows}, {n}]")
            scale, zp = self.scales[name]
            for what, p in ((f"{name}_scale", scale), (f"{name}_zero_point", zp)):
                if p is not None and tuple(p.shape) not in ((num_dir,), (num_dir, n)):
                    raise self.ctx.error(f"{what} {p.type} must be [{num_dir}] or [{num_dir}, {n}]")
            if zp is not None and zp.dtype != t.dtype:
                raise self.ctx.error(f"{name}_zero_point {zp.type} must have {name}'s type {t.dtype}")
            if scale.dtype != "float32":
                raise self.ctx.error(f"{name}_scale {scale.type} must be float32")

    def project(self, a, which: str, d):
        """DynamicQuantizeMatMul(a, W[d] or R[d]): a quantized to uint8 over its whole range (for W
        the inputs of every step at once, for R this step's hidden state), the int32 product
        scaled by a_scale * w_scale (float32)."""
        scale, zp = self.scales[which]
        qa, a_scale, a_zp = dynamic_quantize(self.ctx, a)
        w = self.of_direction(self.w if which == "W" else self.r, d)
        return _matmul_to_float(self.ctx, qa, w, a_zp, None if zp is None else self.of_direction(zp, d), a_scale,
                                self.of_direction(scale, d), None)


@domain_converter(DOMAIN, *VERSIONS)
def DynamicQuantizeLSTM(ctx, node, inputs, attrs, opset):
    """com.microsoft DynamicQuantizeLSTM(X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale,
    W_zero_point, R_scale, R_zero_point; the attributes of ONNX LSTM-7 but layout): ONNX LSTM with
    W [num_dir, input, 4 hidden] and R [num_dir, hidden, 4 hidden] int8 or uint8 (the transposes
    of LSTM's), scales float32 and zero points [num_dir] (per tensor) or [num_dir, 4 hidden] (per
    column). Each gate product is onnxruntime's: the float operand dynamically quantized to uint8
    (microsoft.dynamic_quantize; X once over all steps, H at every step), an int32 product, scaled
    by a_scale * w_scale in float32; the gates' float math is LSTM's (recurrent.lstm). Outputs
    float32 Y, Y_h, Y_c. Where onnxruntime's CPU kernel parts from this: it quantizes H per
    thread's share of the batch (equal to this with one intra-op thread, which the tests use),
    and it reads only the first of per-column zero points (equal where they are one value, as
    onnxruntime.quantization writes them). With sequence_lens, a finished sequence's kept H still
    enters the next step's quantization range here (onnxruntime: zeros). ContribOperators.md,
    com.microsoft.DynamicQuantizeLSTM."""
    _needs(ctx, inputs, ["X", "W", "R", "", "", "", "", "", "W_scale", "", "R_scale"])
    if inputs[0].dtype != "float32":
        raise ctx.error(f"X {inputs[0].type} must be float32")
    if "layout" in attrs:
        raise ctx.error("attribute 'layout' is not defined for DynamicQuantizeLSTM")
    r = inputs[2]
    if len(r.shape) != 3:
        raise ctx.error(f"R {r.type} must be [num_directions, hidden_size, 4 hidden_size]")
    attrs = {"hidden_size": r.shape[1], **attrs}
    return lstm(ctx, node, _QuantizedUnroll(ctx, inputs, attrs), attrs)


def _slice(ctx, x, axis: int, begin: int, end: int):
    rank = len(x.shape)
    return ctx.call("strided_slice", [x], {"begin": tuple(begin if a == axis else 0 for a in range(rank)),
                                           "end": tuple(end if a == axis else x.shape[a] for a in range(rank)),
                                           "strides": (1,) * rank})


def _attention_mask(ctx, mask, batch: int, seq: int, fill: float):
    """The additive mask [batch, 1, seq or 1, seq] of mask_index (onnxruntime's Attention
    formats): [batch] end positions (keys j >= end masked), [2 batch] end then start positions
    (j >= end or j < start), [batch, seq] or [batch, seq, seq] 1 = attend, 0 = masked; a masked
    score gets `fill` added (mask_filter_value), the others 0."""
    if mask.dtype != "int32":
        raise ctx.error(f"mask_index {mask.type} must be int32")
    shape = tuple(mask.shape)
    keys = ctx.const(np.arange(seq, dtype=np.int32).reshape(1, seq), "key_positions")
    if shape in ((batch,), (2 * batch,)):
        end = reshape(ctx, _slice(ctx, mask, 0, 0, batch), (batch, 1))
        masked = ctx.call("greater_equal", [keys, end])
        if shape == (2 * batch,):
            start = reshape(ctx, _slice(ctx, mask, 0, batch, 2 * batch), (batch, 1))
            masked = ctx.call("logical_or", [masked, ctx.call("less", [keys, start])])
        masked = reshape(ctx, masked, (batch, 1, 1, seq))
    elif shape in ((batch, seq), (batch, seq, seq)):
        masked = ctx.call("equal", [mask, ctx.const(np.int32(0), "zero")])
        masked = reshape(ctx, masked, (batch, 1, 1 if len(shape) == 2 else seq, seq))
    else:
        raise ctx.error(f"mask_index {mask.type} must be [{batch}], [{2 * batch}], [{batch}, {seq}] or "
                        f"[{batch}, {seq}, {seq}]")
    zero = ctx.const(np.float32(0.0), "zero_f")
    return ctx.call("where", [masked, ctx.const(np.float32(fill), "mask_filter_value"), zero])


@domain_converter(DOMAIN, *VERSIONS)
def QAttention(ctx, node, inputs, attrs, opset):
    """com.microsoft QAttention(input, weight, bias, input_scale, weight_scale, mask_index,
    input_zero_point, weight_zero_point, past; num_heads, unidirectional = 0, scale,
    mask_filter_value = -10000, do_rotary = 0): multi-head self-attention of an 8-bit input
    [batch, seq, input_hidden] with an 8-bit weight [input_hidden, 3 hidden]: QKV =
    (input - zp) (weight - w_zp) * input_scale weight_scale + bias (MatMulIntegerToFloat; weight
    scale and zero point per tensor or per column), split into Q, K, V [batch, num_heads, seq,
    hidden / num_heads], then softmax(scale Q K^T + mask) V (scale default 1 / sqrt(head size);
    mask: mask_index as _attention_mask reads it, and with unidirectional keys after the query
    masked; each masked score gets mask_filter_value added, as onnxruntime's CPU kernel does),
    heads merged: float32 [batch, seq, hidden]. `past` / `present` (incremental decoding) and
    do_rotary are refused. ContribOperators.md, com.microsoft.QAttention."""
    _needs(ctx, inputs, ["input", "weight", "bias", "input_scale", "weight_scale"])
    if _opt(inputs, 8) is not None or len(node.output) > 1 and node.output[1]:
        raise ctx.error("past / present (incremental decoding) are not supported")
    if int(attrs.get("do_rotary", 0)):
        raise ctx.error("do_rotary=1 is not supported")
    heads = _attr_int(ctx, attrs, "num_heads")
    x, w, bias = inputs[0], inputs[1], inputs[2]
    if len(x.shape) != 3 or len(w.shape) != 2 or w.shape[0] != x.shape[2] or w.shape[1] % 3:
        raise ctx.error(f"input {x.type} and weight {w.type} must be [batch, seq, D] and [D, 3 hidden]")
    batch, seq, _ = x.shape
    hidden = w.shape[1] // 3
    if hidden % heads:
        raise ctx.error(f"hidden size {hidden} is not a multiple of num_heads={heads}")
    size = hidden // heads
    if x.dtype not in ("int8", "uint8"):
        raise ctx.error(f"input {x.type} must be uint8 or int8")
    if inputs[3].type.size != 1:
        raise ctx.error(f"input_scale {inputs[3].type} must be a scalar")
    if inputs[4].type.size not in (1, 3 * hidden):
        raise ctx.error(f"weight_scale {inputs[4].type} must be a scalar or [{3 * hidden}] (per column)")
    qkv = _matmul_to_float(ctx, x, w, _opt(inputs, 6), _opt(inputs, 7), inputs[3], inputs[4], bias)

    def heads_of(k):  # [batch, heads, seq, size]
        part = reshape(ctx, _slice(ctx, qkv, 2, k * hidden, (k + 1) * hidden), (batch, seq, heads, size))
        return ctx.call("transpose", [part], {"axes": (0, 2, 1, 3)})

    q, k, v = heads_of(0), heads_of(1), heads_of(2)
    alpha = float(attrs["scale"]) if float(attrs.get("scale", 0.0)) else 1.0 / math.sqrt(size)
    scores = ctx.call("nn.matmul", [q, ctx.call("transpose", [k], {"axes": (0, 1, 3, 2)})])
    scores = ctx.call("multiply", [scores, ctx.const(np.float32(alpha), "scale")])
    fill = float(attrs.get("mask_filter_value", -10000.0))
    mask = _opt(inputs, 5)
    if mask is not None:
        scores = ctx.call("add", [scores, _attention_mask(ctx, mask, batch, seq, fill)])
    if int(attrs.get("unidirectional", 0)):
        future = np.triu(np.full((seq, seq), fill, np.float32), 1).reshape(1, 1, seq, seq)
        scores = ctx.call("add", [scores, ctx.const(future, "causal_mask")])
    probs = ctx.call("nn.softmax", [scores], {"axis": 3})
    out = ctx.call("transpose", [ctx.call("nn.matmul", [probs, v])], {"axes": (0, 2, 1, 3)})
    return reshape(ctx, out, (batch, seq, hidden))
