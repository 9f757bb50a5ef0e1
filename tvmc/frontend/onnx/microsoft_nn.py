"""ONNX converters, onnxruntime's `com.microsoft` quantized operators built from several of ours:
MatMulNBits (n-bit block-quantized weights), DynamicQuantizeLSTM and QAttention (operator set
com.microsoft 1; the single-kernel ones are in microsoft.py).

Source: onnxruntime docs/ContribOperators.md (each converter names its section); where that text
leaves a detail open, onnxruntime's CPU execution provider (the tests compare against it) decides,
and the converter's docstring says so.

- MatMulNBits: the packed codes stay uint8 in mod.params (two 4-bit weights a byte) and are
  unpacked and scaled at run time by qnn.dequantize_blockwise (tvmc/ops/qnn_blockwise.py) into the
  float weight of an nn.dense; float32 throughout, as onnxruntime's accuracy_level 0 (the
  default): a model asking for accuracy_level 4 (activations quantized to int8 blocks by
  onnxruntime) gets the float32 result, within that quantization of onnxruntime's.
- DynamicQuantizeLSTM: the LSTM unrolling of recurrent.py with each of its matmuls a
  DynamicQuantizeMatMul (the float operand quantized to uint8 over its whole range at run time:
  X once for all steps, H at each step, as onnxruntime's quantized LSTM does).
- QAttention: MatMulIntegerToFloat for the Q, K, V projection, then the float attention
  softmax(scale Q K^T + mask) V per head, with onnxruntime's mask value -10000.
"""

from __future__ import annotations



from tvmc.frontend.onnx.common import is_const, prod, reshape
from tvmc.frontend.onnx.microsoft import DOMAIN, VERSIONS, _f32, _needs, _opt
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
    The lowering is qnn.dequantize_blockwise (B stays packed in mod.params) then nn.dense.
    ContribOperators.md, com.microsoft.MatMulNBits."""
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
    w = ctx.call("qnn.dequantize_blockwise", ops, {"k": k, "bits": bits, "block_size": bs, "zero_points": kind,
                                                   "g_idx": int(g_idx is not None)}, fold=False)
    rows = reshape(ctx, _f32(ctx, a), (prod(a.shape[:-1]), k))
    y = ctx.call("nn.dense", [rows, w])
    if bias is not None:
        if bias.dtype not in _FLOATS or tuple(bias.shape) != (n,):
            raise ctx.error(f"bias {bias.type} must be float [{n}]")
        y = ctx.call("add", [y, _f32(ctx, bias)])
    y = reshape(ctx, y, tuple(a.shape[:-1]) + (n,))
    return y if a.dtype == "float32" else ctx.call("cast", [y], {"dtype": a.dtype})
