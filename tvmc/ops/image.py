"""Image resampling: resize2d over the two trailing axes of NCHW data (ONNX Resize-10..19,
Upsample-7/9; TVM's topi.image.resize2d).

Resize is separable and linear in the data, so each resized axis is described by a table built
at compile time (shapes are static): for output position o, `taps` source indices idx[o, t] and
weights w[o, t] (`resize_tables`, which follows the ONNX reference coordinate and coefficient
rules exactly, in float64). The op then computes
    out[n, c, y, x] = sum_{i, j} w_h[y, i] * w_w[x, j] * data[n, c, idx_h[y, i], idx_w[x, j]]
with the taps unrolled (an injective compute: no reduction loop); nearest mode has one tap and
no weights, a pure gather.
"""

from __future__ import annotations

import math

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.elemwise import INJECTIVE
from tvmc.ops.registry import OpDef, OpPattern, register_op

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def _source_coordinate(x, in_size, out_size, scale, mode, roi):
    """Input coordinate of output position x (ONNX Resize coordinate_transformation_mode)."""
    out_width = scale * in_size
    if mode == "align_corners":
        return 0.0 if out_width == 1 else x * (in_size - 1) / (out_width - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        ori = (end - start) * (in_size - 1) / 2 if out_width == 1 else \
            x * (end - start) * (in_size - 1) / (out_width - 1)
        return ori + start * (in_size - 1)
    if mode == "pytorch_half_pixel":
        return -0.5 if out_width == 1 else (x + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_width)
        return offset + (x + 0.5) / scale - 0.5
    raise ValueError(f"unknown coordinate_transformation_mode '{mode}'")


def _coeffs(ratio, scale, method, nearest_mode, cubic_a):
    if method == "nearest":
        if nearest_mode == "simple":  # Resize-10 / Upsample: floor when upsampling, ceil when downsampling
            nearest_mode = "ceil" if scale < 1 else "floor"
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
              "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    if method == "linear":
        return np.array([1 - ratio, ratio])
    a = cubic_a
    r1, r2 = ratio + 1, 1 - ratio
    return np.array([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                     ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                     ((a + 2) * r2 - (a + 3)) * r2 * r2 + 1,
                     ((a * (r2 + 1) - 5 * a) * (r2 + 1) + 8 * a) * (r2 + 1) - 4 * a])


def _neighbors(x, n, in_size):
    """The n indexes nearest to x among the input padded by ceil(n/2) edge cells (ties: the
    smaller index), in unpadded coordinates (so possibly < 0 or >= in_size)."""
    pad = -(-n // 2)
    xp, limit = x + pad, in_size + 2 * pad
    lo = max(0, int(math.floor(xp)) - n - 1)
    cands = range(lo, min(limit, int(math.floor(xp)) + n + 2))
    picked = sorted(sorted(cands, key=lambda i: (abs(xp - i), i))[:n])
    return np.array(picked) - pad


def resize_tables(in_size: int, out_size: int, scale: float, method: str, coordinate_mode: str,
                  nearest_mode: str = "round_prefer_floor", cubic_a: float = -0.75, exclude_outside: int = 0,
                  roi=(0.0, 1.0)):
    """Per-axis resampling table (ONNX Resize semantics, one axis).

    Returns (idx int64 [out_size, taps], weights float32 [out_size, taps], outside bool [out_size]):
    source indexes (clamped into the input: the edge padding of the reference), their weights,
    and the positions that tf_crop_and_resize maps outside the input (extrapolation_value there).
    Nearest mode returns a single tap of weight 1.
    """
    idx_rows, w_rows, outside = [], [], []
    for x in range(out_size):
        ori = _source_coordinate(x, in_size, out_size, scale, coordinate_mode, roi)
        outside.append(coordinate_mode == "tf_crop_and_resize" and (ori < 0 or ori > in_size - 1))
        ratio = 1.0 if float(ori).is_integer() else ori - math.floor(ori)
        c = _coeffs(ratio, scale, method, nearest_mode, cubic_a)
        idx = _neighbors(ori, len(c), in_size)
        if exclude_outside:
            c = np.where((idx < 0) | (idx >= in_size), 0.0, c)
            c = c / c.sum()
        if method == "nearest":
            idx, c = idx[c != 0][:1], np.ones(1)
        idx_rows.append(np.clip(idx, 0, in_size - 1))
        w_rows.append(c)
    return (np.array(idx_rows, dtype=np.int64).reshape(out_size, -1),
            np.array(w_rows, dtype=np.float32).reshape(out_size, -1), np.array(outside, dtype=bool))


def _type(in_types, attrs):
    d = in_types[0]
    if len(d.shape) != 4:
        raise ValueError(f"resize2d needs 4-D data, got {list(d.shape)}")
    if len(in_types) not in (3, 5):
        raise ValueError("resize2d takes data, idx_h, idx_w and optionally w_h, w_w")
    idx_h, idx_w = in_types[1], in_types[2]
    for t in (idx_h, idx_w):
        if len(t.shape) != 2 or t.dtype != "int64":
            raise ValueError(f"index tables must be int64 [out, taps], got {t}")
    if len(in_types) == 5 and (in_types[3].shape != idx_h.shape or in_types[4].shape != idx_w.shape):
        raise ValueError("weight tables must match the index tables")
    return TensorType(d.shape[:2] + (idx_h.shape[0], idx_w.shape[0]), d.dtype)


def _compute(inputs, attrs, out_type):
    data, idx_h, idx_w = inputs[:3]
    w_h, w_w = inputs[3:5] if len(inputs) == 5 else (None, None)
    th, tw = idx_h.shape[1], idx_w.shape[1]

    def f(n, c, y, x):
        total = None
        for i in range(th):
            row = None
            for j in range(tw):
                v = data[n, c, idx_h[y, i], idx_w[x, j]]
                v = v if w_w is None else v * w_w[x, j]
                row = v if row is None else row + v
            row = row if w_h is None else row * w_h[y, i]
            total = row if total is None else total + row
        return total

    return te.compute(out_type.shape, f, name="resize2d")


def _reference(data, idx_h, idx_w, w_h=None, w_w=None):
    g = data[:, :, idx_h][:, :, :, :, idx_w].astype(np.float64)  # [N, C, OH, Th, OW, Tw]
    if w_h is not None:
        g = g * w_h[:, :, None, None] * w_w[None, None, :, :]
    return g.sum(axis=(3, 5)).astype(data.dtype)


register_op(OpDef("image.resize2d", _type, _reference, OpPattern.INJECTIVE, _compute, INJECTIVE))
