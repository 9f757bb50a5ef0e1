"""Pooling (ONNX MaxPool with its Indices output, AveragePool, GlobalAveragePool, GlobalMaxPool) on
NCHW or NCHW[x]c data.

Every pooling op takes an optional `layout` attribute: "NCHW" (the default, [N, C, H, W]) or
"NCHW[x]c" ([N, C//x, H, W, x], set by AlterOpLayout; TVM's pool2d `layout`); the window
runs over H and W either way and the output keeps the input's layout.
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.pool import schedule_pool
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.reduction import reduce_config, schedule_reduce
from tvmc.ops.layout import channel_block, logical_shape, to_layout
from tvmc.ops.reduce import WINDOW
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.ops.transform import pad_compute
from tvmc.te.expr import is_float

POOL = {"cpu": [Implementation("pool.cpu", schedule_pool)],
        "gpu": [Implementation("pool.gpu", schedule_generic, config_space=generic_config)]}
# global pooling on GPUs: a block per (n, c), its threads reducing H x W (cross-thread reduction)
GLOBAL_POOL = {"cpu": POOL["cpu"],
               "gpu": [Implementation("global_pool.gpu", schedule_reduce, config_space=reduce_config)]}


def pool_out_hw(h, w, attrs):
    """(OH, OW) with ONNX semantics: floor or ceil of (H + pads - dilated kernel) / stride + 1;
    with ceil_mode the last window must start inside the input or left padding."""
    kh, kw = attrs["pool_size"]
    sh, sw = attrs["strides"]
    dh, dw = attrs.get("dilation", (1, 1))
    pt, pl, pb, pr = attrs["padding"]
    out = []
    for size, k, s, d, p0, p1 in ((h, kh, sh, dh, pt, pb), (w, kw, sw, dw, pl, pr)):
        span = size + p0 + p1 - ((k - 1) * d + 1)
        o = (-(-span // s) if attrs.get("ceil_mode", 0) else span // s) + 1
        if attrs.get("ceil_mode", 0) and (o - 1) * s >= size + p0:
            o -= 1
        out.append(o)
    return tuple(out)


def _check_layout(t, attrs):
    layout = attrs.get("layout", "NCHW")
    try:
        logical_shape(t.shape, layout)
    except ValueError:
        raise ValueError(f"2-D pooling needs {layout} data, got {list(t.shape)}") from None


def _pool_type(in_types, attrs):
    t = in_types[0]
    _check_layout(t, attrs)
    oh, ow = pool_out_hw(t.shape[2], t.shape[3], attrs)
    if oh <= 0 or ow <= 0:
        raise ValueError("pooling window larger than the padded input")
    return TensorType(t.shape[:2] + (oh, ow) + t.shape[4:], t.dtype)


def _blocked(ref):
    """Run an NCHW numpy reference on NCHW[x]c data (`layout` attribute) and block the result."""
    def run(x, *args, layout="NCHW", **kwargs):
        if channel_block(layout) is None:
            return ref(x, *args, **kwargs)
        return to_layout(ref(to_layout(x, layout, "NCHW"), *args, **kwargs), "NCHW", layout)

    return run


def _window_overhang(x):
    """Cells the last window reaches past the input and its explicit pads: max(0, x), and 0 where
    x provably is at most 0 for every size of a symbolic extent (a floor-mode 2x2 / 2 pool over
    a symbolic width: 2 * (W // 2) - W), so such a pool reads its input directly instead of
    through a guarded copy of each window, as its static form does."""
    from tvmc.te import extent as xt

    if xt.is_static(x):
        return max(0, int(x))
    return 0 if xt.provably_le(x, 0) else max(0, x)


def _pool_compute(kind):
    def compute(inputs, attrs, out_type):
        x = inputs[0]
        h, w = x.shape[2:4]
        block = ((0, 0),) * (len(x.shape) - 4)  # the NCHW[x]c channel block: not padded
        kh, kw = attrs["pool_size"]
        sh, sw = attrs["strides"]
        dh, dw = attrs.get("dilation", (1, 1))
        pt, pl, pb, pr = attrs["padding"]
        oh, ow = out_type.shape[2:4]
        # pad far enough for ceil_mode windows too; padded cells never win a max / count
        eb = _window_overhang((oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt))
        er = _window_overhang((ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl))
        padded = pad_compute(x, ((0, 0), (0, 0), (pt, eb), (pl, er)) + block,
                             (float("-inf") if is_float(x.dtype) else te.min_value(x.dtype))
                             if kind == "max" else 0.0, name="pad_data")
        rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
        if kind == "max":
            return te.compute(out_type.shape, lambda a, b, y, z, *c: te.max(
                padded[(a, b, y * sh + rh.var * dh, z * sw + rw.var * dw) + c], [rh, rw]), name="max_pool2d")
        total = te.compute(out_type.shape, lambda a, b, y, z, *c: te.sum(
            padded[(a, b, y * sh + rh.var * dh, z * sw + rw.var * dw) + c], [rh, rw]), name="avg_pool_sum")
        include_pad = attrs.get("count_include_pad", 0)

        def count(y, z):
            # window cells inside [lo, hi): the input, or the input plus explicit pads
            lo_h, hi_h = (-pt, h + pb) if include_pad else (0, h)
            lo_w, hi_w = (-pl, w + pr) if include_pad else (0, w)
            y0, x0 = y * sh - pt, z * sw - pl
            ch = te.minimum(y0 + (kh - 1) * dh + 1, hi_h) - te.maximum(y0, lo_h)
            cw = te.minimum(x0 + (kw - 1) * dw + 1, hi_w) - te.maximum(x0, lo_w)
            if dh != 1 or dw != 1:
                ch, cw = (ch + dh - 1) // dh, (cw + dw - 1) // dw
            return te.cast(x.dtype, ch * cw)

        return te.compute(out_type.shape, lambda a, b, y, z, *c: total[(a, b, y, z) + c] / count(y, z),
                          name="avg_pool2d")

    return compute


def _pool_reference(kind):
    def ref(x, pool_size, strides, padding, dilation=(1, 1), ceil_mode=0, count_include_pad=0):
        attrs = dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
        n, c, h, w = x.shape
        oh, ow = pool_out_hw(h, w, attrs)
        pt, pl, pb, pr = padding
        big = max(oh * strides[0] + pool_size[0] * dilation[0], h + pt + pb) + 1
        bigw = max(ow * strides[1] + pool_size[1] * dilation[1], w + pl + pr) + 1
        xp = np.full((n, c, big, bigw), np.nan, dtype=np.float64)
        xp[:, :, pt:pt + h, pl:pl + w] = x
        inside = np.zeros((big, bigw), dtype=bool)
        inside[:h + pt + pb, :w + pl + pr] = True
        out = np.zeros((n, c, oh, ow), dtype=np.float64)
        for i in range(oh):
            for j in range(ow):
                ys = i * strides[0] + np.arange(pool_size[0]) * dilation[0]
                xs = j * strides[1] + np.arange(pool_size[1]) * dilation[1]
                win = xp[:, :, ys][:, :, :, xs]
                if kind == "max":
                    out[:, :, i, j] = np.nanmax(win.reshape(n, c, -1), axis=2)
                else:
                    s = np.nansum(win.reshape(n, c, -1), axis=2)
                    cnt = inside[ys][:, xs].sum() if count_include_pad else (~np.isnan(win[0, 0])).sum()
                    out[:, :, i, j] = s / cnt
        return out.astype(x.dtype)

    return _blocked(ref)


register_op(OpDef("nn.max_pool2d", _pool_type, _pool_reference("max"), OpPattern.OUT_ELEMWISE_FUSABLE,
                  _pool_compute("max"), POOL))
register_op(OpDef("nn.avg_pool2d", _pool_type, _pool_reference("avg"), OpPattern.OUT_ELEMWISE_FUSABLE,
                  _pool_compute("avg"), POOL))


# ---- max_pool2d_indices: MaxPool's second output (ONNX MaxPool-8.., Indices) ----------------------

def _indices_type(in_types, attrs):
    t = in_types[0]
    if len(t.shape) != 4 or attrs.get("layout", "NCHW") != "NCHW":
        raise ValueError(f"max_pool2d_indices needs NCHW data, got {list(t.shape)}")
    oh, ow = pool_out_hw(t.shape[2], t.shape[3], attrs)
    if oh <= 0 or ow <= 0:
        raise ValueError("pooling window larger than the padded input")
    return TensorType(t.shape[:2] + (oh, ow), "int64")


def _indices_compute(inputs, attrs, out_type):
    """The flat index into data [N, C, H, W] of each window's maximum: (n * C + c) * H * W +
    h * W + w (storage_order 0, row-major) or + h + w * H (storage_order 1); the first maximum in
    the window's row-major scan wins, as in the ONNX reference (a window holding NaN has no
    maximum equal to itself: its index is undefined)."""
    x = inputs[0]
    c, h, w = x.shape[1:]
    kh, kw = attrs["pool_size"]
    sh, sw = attrs["strides"]
    dh, dw = attrs.get("dilation", (1, 1))
    pt, pl = attrs["padding"][:2]
    peak = _pool_compute("max")(inputs, attrs, TensorType(out_type.shape, x.dtype))
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def first(a, b, y, z):
        hh, ww = y * sh - pt + rh.var * dh, z * sw - pl + rw.var * dw
        inside = te.logical_and(hh >= 0, hh < h, ww >= 0, ww < w)
        value = x[a, b, te.minimum(te.maximum(hh, te.const(0)), te.const(h - 1)),
                  te.minimum(te.maximum(ww, te.const(0)), te.const(w - 1))]
        hit = te.logical_and(inside, te.eq(value, peak[a, b, y, z]))
        return te.min(te.select(hit, hh * w + ww, te.const(h * w)), [rh, rw])

    pos = te.compute(out_type.shape, first, name="max_pool2d_argmax")

    def flat(a, b, y, z):
        p = pos[a, b, y, z]
        within = p if not attrs.get("storage_order", 0) else p // w + (p % w) * h
        return te.cast("int64", (a * c + b) * (h * w) + within)

    return te.compute(out_type.shape, flat, name="max_pool2d_indices")


def _indices_ref(x, pool_size, strides, padding, dilation=(1, 1), ceil_mode=0, storage_order=0):
    n, c, h, w = x.shape
    oh, ow = pool_out_hw(h, w, dict(pool_size=pool_size, strides=strides, padding=padding, dilation=dilation,
                                    ceil_mode=ceil_mode))
    out = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            ys = [y for y in i * strides[0] - padding[0] + np.arange(pool_size[0]) * dilation[0] if 0 <= y < h]
            xs = [v for v in j * strides[1] - padding[1] + np.arange(pool_size[1]) * dilation[1] if 0 <= v < w]
            win = x[:, :, ys][:, :, :, xs].reshape(n, c, -1)
            k = np.argmax(win, axis=2)  # the first maximum in row-major order
            yy, xx = np.asarray(ys)[k // len(xs)], np.asarray(xs)[k % len(xs)]
            out[:, :, i, j] = yy + xx * h if storage_order else yy * w + xx
    return out + (np.arange(n * c).reshape(n, c, 1, 1) * h * w)


# not an anchor for epilogues (an int64 result)
register_op(OpDef("nn.max_pool2d_indices", _indices_type, _indices_ref, OpPattern.OPAQUE, _indices_compute, WINDOW))


def _global_type(in_types, attrs):
    t = in_types[0]
    _check_layout(t, attrs)
    return TensorType(t.shape[:2] + (1, 1) + t.shape[4:], t.dtype)


def _global_compute(kind):
    def compute(inputs, attrs, out_type):
        x = inputs[0]
        h, w = x.shape[2:4]
        rh, rw = te.reduce_axis(h, "rh"), te.reduce_axis(w, "rw")
        if kind == "max":
            return te.compute(out_type.shape, lambda a, b, y, z, *c: te.max(x[(a, b, rh, rw) + c], [rh, rw]),
                              name="global_max_pool2d")
        total = te.compute(out_type.shape, lambda a, b, y, z, *c: te.sum(x[(a, b, rh, rw) + c], [rh, rw]),
                           name="global_sum")
        count = h * w
        # symbolic H or W: the reciprocal of the run-time element count
        scale = te.const(1.0 / count, x.dtype) if isinstance(count, int) else 1.0 / te.cast(x.dtype, count)
        return te.compute(out_type.shape, lambda a, b, y, z, *c: total[(a, b, y, z) + c] * scale,
                          name="global_avg_pool2d")

    return compute


# (global pooling reduces H and W, axes 2 and 3, in NCHW and NCHW[x]c alike)
register_op(OpDef("nn.global_avg_pool2d", _global_type,
                  lambda x, layout="NCHW": x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(x.dtype),
                  OpPattern.OUT_ELEMWISE_FUSABLE, _global_compute("avg"), GLOBAL_POOL))
register_op(OpDef("nn.global_max_pool2d", _global_type, lambda x, layout="NCHW": x.max(axis=(2, 3), keepdims=True),
                  OpPattern.OUT_ELEMWISE_FUSABLE, _global_compute("max"), GLOBAL_POOL))
