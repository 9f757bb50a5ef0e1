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

import functools
import itertools
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


def _antialias_coeffs(ratio, scale, method, cubic_a):
    """Linear or cubic taps stretched by 1/scale when downsampling (ONNX Resize-18 antialias=1):
    the kernel evaluated at scale * (i - ratio) for the 2 - 2 * start taps i = start .. 1 - start
    (start = floor(-support / scale) + 1; support 1 linear, 2 cubic; scale 1 when upsampling),
    normalized to sum 1. The frontend applies these wide tables as matmuls (resize_matrix)."""
    scale = min(scale, 1.0)
    support = 1 if method == "linear" else 2
    start = math.floor(-support / scale) + 1
    t = np.abs((np.arange(start, 2 - start) - ratio) * scale)
    if method == "linear":
        c = np.clip(1 - t, 0, 1)
    else:
        a = cubic_a
        c = np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                     np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
    return c / c.sum()


def _coeffs(ratio, scale, method, nearest_mode, cubic_a, antialias=0):
    if antialias and method != "nearest":
        return _antialias_coeffs(ratio, scale, method, cubic_a)
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
                  roi=(0.0, 1.0), antialias: int = 0):
    """Per-axis resampling table (ONNX Resize semantics, one axis); with `antialias` (Resize-18),
    linear and cubic kernels widen by 1/scale when downsampling (more taps).

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
        c = _coeffs(ratio, scale, method, nearest_mode, cubic_a, antialias)
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


def resize_matrix(idx, weights, in_size: int) -> np.ndarray:
    """The per-axis table (idx, weights [out_size, taps] of resize_tables) as a dense float32
    [out_size, in_size] matrix: out = matrix @ in along that axis."""
    m = np.zeros((idx.shape[0], in_size), np.float32)
    np.add.at(m, (np.arange(idx.shape[0])[:, None], idx), weights)
    return m


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


# ---- grid_sample (ONNX GridSample-16/20/22; PyTorch's grid_sampler) ------------------------------

def _grid_sample_type(in_types, attrs):
    """x[N, C, *in_spatial], grid[N, *out_spatial, D] (D = len(in_spatial), coordinates in
    reverse axis order, normalized to [-1, 1]) -> [N, C, *out_spatial]."""
    x, grid = in_types
    d = len(x.shape) - 2
    if d < 1 or len(grid.shape) != d + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != d:
        raise ValueError(f"grid {list(grid.shape)} does not sample x {list(x.shape)}")
    if attrs["mode"] not in ("nearest", "linear", "cubic") or \
            attrs["padding_mode"] not in ("zeros", "border", "reflection"):
        raise ValueError(f"unknown mode '{attrs['mode']}' or padding_mode '{attrs['padding_mode']}'")
    return TensorType((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]), x.dtype)


def _reflect(v, lo: float, hi: float):
    """v reflected at the borders lo and hi until inside (PyTorch's reflect_coordinates); each
    value read more than once is bound once (te.let)."""
    ft = v.dtype
    c = functools.partial(te.const, dtype=ft)

    def reflect(v):
        below, above = v < c(lo), v > c(hi)

        def from_border(dx):  # dx: distance past the nearer border, folded into n spans plus r
            def fold(n):
                def mirror(r):
                    even = te.eq(te.floor(n * c(0.5)) * c(2.0), n)
                    from_lo, from_hi = c(lo) + r, c(hi) - r
                    return te.select(below, te.select(even, from_lo, from_hi),
                                     te.select(above, te.select(even, from_hi, from_lo), v))
                return te.let(dx - n * c(hi - lo), mirror, "r")
            return te.let(te.floor(dx / c(hi - lo)), fold, "n")
        return te.let(te.select(below, c(lo) - v, v - c(hi)), from_border, "dx")
    return te.let(v, reflect, "v")


def _let_all(values, body_fn, name: str):
    """body_fn(vars) with each of `values` bound once (te.let), in order; a None stays None."""
    if not values:
        return body_fn([])
    if values[0] is None:
        return _let_all(values[1:], lambda rest: body_fn([None] + rest), name)
    return te.let(values[0], lambda v: _let_all(values[1:], lambda rest: body_fn([v] + rest), name), name)


def _keys_cubic(t, k: int):
    """Keys' cubic convolution weight (a = -0.75) of tap k in 0..3 at fraction t."""
    a = -0.75
    s = {0: t + 1.0, 1: t, 2: 1.0 - t, 3: 2.0 - t}[k]
    if k in (1, 2):
        return ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0
    return ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a


def _grid_sample_compute(inputs, attrs, out_type):
    """Each output point reads its coordinates from the grid, denormalizes them (align_corners:
    -1 and 1 are the first and last pixel centers; else the image edges), applies the padding
    mode to the coordinate, then interpolates over 1 (nearest), 2 (linear) or 4 (cubic) taps per
    axis; a tap outside the image reads 0 (zeros), the edge (border) or its reflection. Each value
    read more than once (coordinate, floor, fraction, tap index, mask, weight) is bound once
    (te.let): as plain nested expressions, cubic 2-D with reflection was a tree of 730,000 nodes
    that took minutes to lower and compile."""
    x, grid = inputs
    mode, padding, align = attrs["mode"], attrs["padding_mode"], attrs["align_corners"]
    dims = x.shape[2:]
    nd = len(dims)
    ft = grid.dtype
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]

    def coord(o, i):  # denormalized, padded coordinate along spatial axis i
        g = grid[(o[0],) + tuple(o[2:]) + (te.const(nd - 1 - i),)]
        d = float(dims[i])
        v = (g + te.const(1.0, ft)) * te.const(0.5 * (d - 1), ft) if align else \
            ((g + te.const(1.0, ft)) * te.const(d, ft) - te.const(1.0, ft)) * te.const(0.5, ft)
        if mode == "nearest":
            v = te.round(v)
        if padding == "border":
            return te.let(v, lambda v: te.select(te.logical_or(v < te.const(lo[i], ft), v > te.const(hi[i], ft)),
                                                 te.minimum(te.maximum(v, te.const(0.0, ft)), te.const(d - 1, ft)), v))
        if padding == "reflection":
            return _reflect(v, lo[i], hi[i])
        return v

    def tap(k, i):  # (index to load, inside? or None) of integer tap k along axis i
        d = dims[i]
        if padding == "reflection":
            k = te.cast("int64", _reflect(te.cast(ft, k), lo[i], hi[i]))
        clamped = te.minimum(te.maximum(k, te.const(0)), te.const(d - 1))
        if padding == "zeros":
            return clamped, te.logical_and(k >= te.const(0), k < te.const(d))
        return clamped, None

    def linear_taps(fl, t):  # [(integer tap, weight)] around a coordinate of floor fl, fraction t
        base = te.cast("int64", fl)
        if mode == "linear":
            return [(base, te.const(1.0, ft) - t), (base + te.const(1), t)]
        return [(base + te.const(k - 1), _keys_cubic(t, k)) for k in range(4)]

    def interpolate(o, per_axis):  # per_axis: [(index, inside or None, weight or None)] per axis
        total = None
        for combo in itertools.product(*per_axis):
            conds = [inside for _, inside, _ in combo if inside is not None]
            value = te.cast(ft, x[(o[0], o[1]) + tuple(j for j, _, _ in combo)])
            if conds:
                value = te.select(te.logical_and(*conds), value, te.const(0.0, ft))
            for _, _, w in combo:
                if w is not None:
                    value = value * w
            total = value if total is None else total + value
        return te.cast(x.dtype, total)

    def f(*o):
        def bind_axis(i, per_axis):  # binds axis i's coordinate, then its taps' indices, masks and weights
            if i == nd:
                return interpolate(o, per_axis)

            def bind_taps(taps):
                flat = [p for k, w in taps for p in tap(k, i) + (w,)]
                return _let_all(flat, lambda vs: bind_axis(i + 1, per_axis + [list(zip(vs[0::3], vs[1::3], vs[2::3]))]),
                                f"tap{i}")

            def with_coord(v):
                if mode == "nearest":
                    return bind_taps([(te.cast("int64", v), None)])
                return te.let(te.floor(v), lambda fl: te.let(v - fl, lambda t: bind_taps(linear_taps(fl, t)), "t"),
                              "floor")
            return te.let(coord(o, i), with_coord, f"x{i}")
        return bind_axis(0, [])

    return te.compute(out_type.shape, f, name="grid_sample")


def _reflect_np(v, lo, hi):
    span = hi - lo
    below, above = v < lo, v > hi
    dx = np.where(below, lo - v, v - hi)
    n = np.floor(dx / span)
    r = dx - n * span
    even = n % 2 == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), v))


def _grid_sample_ref(x, grid, mode, padding_mode, align_corners):
    """numpy form of _grid_sample_compute (the same steps on whole arrays)."""
    dims = x.shape[2:]
    nd = len(dims)
    per_axis = []
    for i, d in enumerate(dims):
        lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
        g = grid[..., nd - 1 - i].astype(np.float32)
        v = (g + 1) * np.float32(0.5 * (d - 1)) if align_corners else ((g + 1) * np.float32(d) - 1) * np.float32(0.5)
        if mode == "nearest":
            v = np.rint(v)
        if padding_mode == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, d - 1), v)
        elif padding_mode == "reflection":
            v = _reflect_np(v, lo, hi)
        base, t = np.floor(v), v - np.floor(v)
        taps = [(v, None)] if mode == "nearest" else [(base, 1 - t), (base + 1, t)] if mode == "linear" else \
            [(base + k - 1, _keys_cubic(t, k)) for k in range(4)]
        axis_taps = []
        for k, w in taps:
            k = k.astype(np.int64)
            if padding_mode == "reflection":
                k = _reflect_np(k.astype(np.float32), lo, hi).astype(np.int64)
            inside = (k >= 0) & (k < d)
            axis_taps.append((np.clip(k, 0, d - 1), inside if padding_mode == "zeros" else None, w))
        per_axis.append(axis_taps)
    out = np.zeros(x.shape[:2] + grid.shape[1:-1], np.float32)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (len(grid.shape) - 2))
    for combo in itertools.product(*per_axis):
        channels_last = x.transpose((0,) + tuple(range(2, 2 + nd)) + (1,))
        vals = np.moveaxis(channels_last[(batch,) + tuple(j for j, _, _ in combo)], -1, 1).astype(np.float32)
        for _, inside, w in combo:
            if inside is not None:
                vals = vals * inside[:, None]
            if w is not None:
                vals = vals * w[:, None]
        out += vals
    return out.astype(x.dtype)


register_op(OpDef("image.grid_sample", _grid_sample_type, _grid_sample_ref, OpPattern.INJECTIVE, _grid_sample_compute,
                  INJECTIVE))
