"""qnn.dequantize_blockwise: n-bit weights packed several to a byte, dequantized by block scales at
run time (onnxruntime's com.microsoft MatMulNBits weight format); qnn.unpack_bits: the codes
alone, uint8 (for the integer product of MatMulNBits' accuracy_level 4).

The packed weight stays a uint8 constant in mod.params (4-bit: two weights per byte, 1/8 of
float32), so these operators are not folded at compile time (OpDef.foldable False): the generated
kernel unpacks each weight with a shift and a mask and scales it, writing the float [N, K]
matrix that the following nn.dense reads (a fused stage before the matmul).

Layout (onnxruntime docs/ContribOperators.md, com.microsoft.MatMulNBits): the weight of output
column n and reduction index k is code q(n, k) = (b[n, k // block_size, j // per] >> ((j % per)
* bits)) & (2^bits - 1) with j = k % block_size and per = 8 / bits values per byte, the first value
in the low bits. Its block is g = k // block_size, or g_idx[k] where a g_idx is given (a
reordered, act-order quantization). The value is float32 (q - zp(n, g)) * scale[n, g] (float32
whatever the scales' float type), with zp(n, g):
- "absent": 2^(bits - 1) (8 for 4 bits);
- "packed": uint8 [N, ceil(blocks * bits / 8)], packed like b along the blocks;
- "float": float [N, blocks] (the scales' type), subtracted as is.
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.elemwise import INJECTIVE
from tvmc.te.expr import INDEX
from tvmc.ops.registry import OpDef, OpPattern, register_op

BITS = (2, 4, 8)
ZERO_POINTS = ("absent", "packed", "float")


def _blocks(k: int, block_size: int) -> int:
    return -(-k // block_size)


def _type(in_types, attrs):
    bits, bs, k, kind = int(attrs["bits"]), int(attrs["block_size"]), int(attrs["k"]), attrs["zero_points"]
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    if kind not in ZERO_POINTS:
        raise ValueError(f"zero_points must be one of {ZERO_POINTS}, got {kind}")
    b, scales = in_types[0], in_types[1]
    n, blocks = b.shape[0] if b.shape else 0, _blocks(k, bs)
    if b.dtype != "uint8" or tuple(b.shape) != (n, blocks, bs * bits // 8):
        raise ValueError(f"b must be uint8 [N, {blocks}, {bs * bits // 8}], got {b.dtype} {list(b.shape)}")
    if tuple(scales.shape) != (n, blocks) or scales.dtype not in ("float32", "float16"):
        raise ValueError(f"scales must be float [{n}, {blocks}], got {scales.dtype} {list(scales.shape)}")
    expected = len(in_types) - 2 - (kind != "absent")
    if expected != int(attrs.get("g_idx", 0)):
        raise ValueError(f"{len(in_types)} inputs do not match zero_points={kind}, g_idx={attrs.get('g_idx', 0)}")
    if kind != "absent":
        zp = in_types[2]
        want = ("uint8", (n, _blocks(blocks * bits, 8))) if kind == "packed" else (scales.dtype, (n, blocks))
        if (zp.dtype, tuple(zp.shape)) != want:
            raise ValueError(f"zero points must be {want[0]} {list(want[1])}, got {zp.dtype} {list(zp.shape)}")
    if attrs.get("g_idx", 0) and (in_types[-1].dtype != "int32" or tuple(in_types[-1].shape) != (k,)):
        raise ValueError(f"g_idx must be int32 [{k}], got {in_types[-1].dtype} {list(in_types[-1].shape)}")
    return TensorType((n, k), "float32")


def _compute(inputs, attrs, out_type):
    """out[n, k] = (float(q(n, k)) - zp(n, g)) * scale[n, g], q unpacked by shift and mask."""
    bits, bs, kind = int(attrs["bits"]), int(attrs["block_size"]), attrs["zero_points"]
    b, scales = inputs[0], inputs[1]
    per, mask = 8 // bits, (1 << bits) - 1
    g_idx = inputs[-1] if attrs.get("g_idx", 0) else None

    def code(byte, sub):
        """The `sub`-th value (0 = lowest bits) of a uint8 byte, as int32."""
        shift = te.cast("int32", sub * bits)
        return te.bitwise_and(te.right_shift(te.cast("int32", byte), shift), te.const(mask, "int32"))

    def f(n, k):
        j = k % bs
        q = code(b[n, k // bs, j // per], j % per)
        g = k // bs if g_idx is None else te.cast(INDEX, g_idx[k])
        if kind == "absent":
            zp = te.const(float(1 << (bits - 1)), "float32")
        elif kind == "packed":
            zp = te.cast("float32", code(inputs[2][n, g // per], g % per))
        else:
            zp = te.cast("float32", inputs[2][n, g])
        return (te.cast("float32", q) - zp) * te.cast("float32", scales[n, g])

    return te.compute(tuple(out_type.shape), f, name="dequantize_blockwise")


def unpack_codes(b: np.ndarray, k: int, bits: int) -> np.ndarray:
    """The codes [N, k] (int32) of a packed weight b uint8 [N, blocks, blob] (numpy: references
    and tests)."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    codes = (b[..., None] >> shifts) & ((1 << bits) - 1)  # [N, blocks, blob, per]
    return codes.reshape(b.shape[0], -1)[:, :k].astype(np.int32)


def _reference(b, scales, *rest, k, bits, block_size, zero_points, g_idx=0):
    """numpy semantics of the module docstring."""
    q = unpack_codes(b, k, bits)
    g = np.asarray(rest[-1]).astype(np.int64) if g_idx else np.arange(k) // block_size
    blocks = scales.shape[1]
    if zero_points == "absent":
        zp = np.full((b.shape[0], blocks), float(1 << (bits - 1)), np.float32)
    elif zero_points == "packed":
        zp = unpack_codes(rest[0][:, :, None], blocks, bits).astype(np.float32)
    else:
        zp = rest[0].astype(np.float32)
    v = (q.astype(np.float32) - zp[:, g]) * scales.astype(np.float32)[:, g]
    return v


register_op(OpDef("qnn.dequantize_blockwise", _type, _reference, OpPattern.INJECTIVE, _compute, INJECTIVE,
                  foldable=False))


# --- qnn.unpack_bits: the codes themselves (MatMulNBits with accuracy_level 4) ----------------------

def _unpack_type(in_types, attrs):
    bits, count = int(attrs["bits"]), int(attrs["count"])
    x = in_types[0]
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    if x.dtype != "uint8" or not x.shape or count > x.shape[-1] * (8 // bits):
        raise ValueError(f"x must be uint8 [..., >= {-(-count * bits // 8)}], got {x.dtype} {list(x.shape)}")
    return TensorType(tuple(x.shape[:-1]) + (count,), "uint8")


def _unpack_compute(inputs, attrs, out_type):
    """out[..., j] = (x[..., j // per] >> ((j % per) * bits)) & (2^bits - 1), per = 8 / bits."""
    bits = int(attrs["bits"])
    per, mask = 8 // bits, (1 << bits) - 1
    x = inputs[0]

    def f(*i):
        j = i[-1]
        byte = te.cast("int32", x[tuple(i[:-1]) + (j // per,)])
        code = te.bitwise_and(te.right_shift(byte, te.cast("int32", (j % per) * bits)), te.const(mask, "int32"))
        return te.cast("uint8", code)

    return te.compute(tuple(out_type.shape), f, name="unpack_bits")


def _unpack_reference(x, bits, count):
    shape = x.shape
    return unpack_codes(x.reshape(-1, 1, shape[-1]), count, bits).astype(np.uint8).reshape(shape[:-1] + (count,))


register_op(OpDef("qnn.unpack_bits", _unpack_type, _unpack_reference, OpPattern.INJECTIVE, _unpack_compute, INJECTIVE,
                  foldable=False))
