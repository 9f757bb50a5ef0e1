"""Transposed convolution (ONNX ConvTranspose-1/11/22; TVM's conv2d_transpose_nchw and
conv3d_transpose_ncdhw): NCHW / NCDHW data, IOHW / IODHW weights [C, O/groups, K...], groups,
strides, dilation, output padding; padding (begins..., ends...) as ONNX pads."""

from __future__ import annotations

import itertools

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d import conv2d_nchw_config, schedule_conv2d_nchw
from tvmc.ops.gpu.conv2d import conv2d_direct_config, schedule_conv2d_direct
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.nn_conv2d import conv2d_nchw, grouped, ungrouped
from tvmc.ops.reduce import WINDOW
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op


def conv_transpose_out_size(size, k, stride, pad_begin, pad_end, dilation, output_padding):
    """Output extent of one spatial axis: s * (size - 1) + output_padding + (k - 1) * d + 1 -
    pad_begin - pad_end. Pads may be negative: the output then extends past the full result with
    zeros (ONNX output_shape)."""
    return stride * (size - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end


def _out_spatial(data_shape, weight_shape, strides, padding, dilation, output_padding=None):
    """Output spatial extents (any number of axes); padding is (begins..., ends...)."""
    nd = len(data_shape) - 2
    out_pad = output_padding or (0,) * nd
    return tuple(conv_transpose_out_size(data_shape[2 + i], weight_shape[2 + i], strides[i], padding[i],
                                         padding[nd + i], dilation[i], out_pad[i]) for i in range(nd))


def _type_nd(nd):
    def infer(in_types, attrs):
        d, w = in_types[0], in_types[1]
        if len(d.shape) != nd + 2 or len(w.shape) != nd + 2:
            raise ValueError(f"conv_transpose needs {nd + 2}-D data and weight, got {list(d.shape)} and "
                             f"{list(w.shape)}")
        g = attrs.get("groups", 1)
        if w.shape[0] != d.shape[1] or d.shape[1] % g:
            raise ValueError(f"channels {d.shape[1]} do not match weight {list(w.shape)} with groups={g}")
        out = _out_spatial(d.shape, w.shape, attrs["strides"], attrs["padding"], attrs["dilation"],
                           attrs.get("output_padding"))
        if min(out) <= 0:
            raise ValueError(f"output {'x'.join(map(str, out))} is empty")
        return TensorType((d.shape[0], w.shape[1] * g) + out, d.dtype)
    return infer


def _dilated_padded(data, weight_shape, strides, padding, dilation, out):
    """The input dilated by the strides (s - 1 zeros between elements) and padded by
    (K - 1) * d - pad_begin at the start, extent out + (K - 1) * d per axis, for a stride-1
    convolution to `out`: xp[n, c, u...] = data[n, c, (u + off) / s ...] where every
    u + off (off = pad_begin - (K - 1) * d) is a multiple of its stride inside the input, else 0."""
    ks, sizes = weight_shape[2:], data.shape[2:]
    offsets = [padding[i] - (k - 1) * dilation[i] for i, k in enumerate(ks)]

    def f(nn, cc, *us):
        conds, idx = [], []
        for u, off, s, size in zip(us, offsets, strides, sizes):
            t = u + off
            if off < 0:
                conds.append(t >= 0)
            if s > 1:
                conds.append(te.eq(t % s, 0))
            conds.append(t < size * s)
            idx.append(t // s if s > 1 else t)
        return te.select(te.logical_and(*conds), data[(nn, cc, *idx)], te.const(0.0, data.dtype))

    padded = tuple(o + (k - 1) * d for o, k, d in zip(out, ks, dilation))
    return te.compute(data.shape[:2] + padded, f, name="dilate_pad_data")


def _flipped_weight(weight, groups):
    """weight [C, O/groups, K...] -> [O, C/groups, K...], the kernel flipped on every spatial axis:
    w'[o, ic, k...] = weight[(o // Og) * Cg + ic, o % Og, K - 1 - k ...]."""
    c, og = weight.shape[:2]
    ks = weight.shape[2:]
    cg = c // groups

    def f(o, ic, *k):
        return weight[((o // og) * cg + ic if groups > 1 else ic, o % og if groups > 1 else o,
                       *(e - 1 - v for e, v in zip(ks, k)))]

    return te.compute((og * groups, cg) + tuple(ks), f, name="weight_flipped")


def conv2d_transpose_nchw(data, weight, strides, padding, dilation, output_padding=(0, 0), groups=1):
    """Gather form (no scatter): out = conv2d(stride 1, dilation d) of the input dilated by the
    strides and padded by (K-1)*d - pad on each side (_dilated_padded), with the kernel flipped
    and its in/out axes swapped per group (_flipped_weight)."""
    out = _out_spatial(data.shape, weight.shape, strides, padding, dilation, output_padding)
    xp = _dilated_padded(data, weight.shape, strides, padding, dilation, out)
    return conv2d_nchw(xp, _flipped_weight(weight, groups), (1, 1), (0, 0, 0, 0), dilation, groups)


def conv3d_transpose_ncdhw(data, weight, strides, padding, dilation, output_padding=(0, 0, 0), groups=1):
    """3-D transposed convolution, NCDHW data, weight [C, O/groups, KD, KH, KW], padding
    (d_begin, h_begin, w_begin, d_end, h_end, w_end): the gather form of conv2d_transpose_nchw
    with the stride-1 convolution written as one reduction over (ic, kd, kh, kw)."""
    out = _out_spatial(data.shape, weight.shape, strides, padding, dilation, output_padding)
    xp = _dilated_padded(data, weight.shape, strides, padding, dilation, out)
    wt = _flipped_weight(weight, groups)
    oc, cg = wt.shape[:2]
    og = oc // groups
    rc = te.reduce_axis(cg, "rc")
    rk = [te.reduce_axis(k, f"rk{i}") for i, k in enumerate(weight.shape[2:])]

    def f(nn, o, *z):
        ic = (o // og) * cg + rc.var if groups > 1 else rc.var
        return te.sum(xp[(nn, ic, *(zi + r.var * d for zi, r, d in zip(z, rk, dilation)))] *
                      wt[(o, rc.var, *(r.var for r in rk))], [rc, *rk])

    return te.compute((data.shape[0], oc) + out, f, name="conv3d_transpose")


def _reference(x, w, strides, padding, dilation, output_padding=None, groups=1):
    """Scatter form, any number of spatial axes: every input pixel adds its weighted kernel into
    the full output, then crop (padding (begins..., ends...))."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    og, ks = w.shape[1], w.shape[2:]
    begin = padding[:nd]
    out = _out_spatial(x.shape, w.shape, strides, padding, dilation, output_padding)
    lead = [max(0, -b) for b in begin]
    canvas = [lead[i] + max(strides[i] * (x.shape[2 + i] - 1) + (ks[i] - 1) * dilation[i] + 1, out[i] + begin[i])
              for i in range(nd)]
    full = np.zeros((n, og * groups, *canvas), dtype=np.float64)
    cg = c // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * cg:(g + 1) * cg].astype(np.float64)
        for k in itertools.product(*(range(e) for e in ks)):
            contrib = np.tensordot(xs, ws[(slice(None), slice(None), *k)], axes=([1], [0]))  # [n, sp..., og]
            at = tuple(slice(lead[i] + k[i] * dilation[i], lead[i] + k[i] * dilation[i] + strides[i] * x.shape[2 + i],
                             strides[i]) for i in range(nd))
            full[(slice(None), slice(g * og, (g + 1) * og), *at)] += np.moveaxis(contrib, -1, 1)
    crop = tuple(slice(lead[i] + begin[i], lead[i] + begin[i] + out[i]) for i in range(nd))
    return full[(slice(None), slice(None), *crop)].astype(x.dtype)


def _compute(fn):
    def compute(inputs, attrs, out_type):
        return fn(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"],
                  attrs.get("output_padding", (0,) * (len(out_type.shape) - 2)), attrs.get("groups", 1))
    return compute


# x86: the dilated, padded input is the anchor's first producer (kept, elementwise loops) and the
# flipped weight view is inlined into the accumulator, so the convolution runs with
# conv2d_nchw.cpu's schedule and knobs (register tiles over oc x ow, epilogue on the tile).
register_op(OpDef("nn.conv2d_transpose", _type_nd(2), _reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  _compute(conv2d_transpose_nchw), {
    "cpu": [Implementation("conv2d_transpose_nchw.cpu", schedule_conv2d_nchw, config_space=conv2d_nchw_config)],
    "gpu": [Implementation("conv2d_transpose_nchw.gpu", schedule_conv2d_direct, config_space=conv2d_direct_config,
                           applies=ungrouped),
            Implementation("conv2d_transpose_nchw_grouped.gpu", schedule_generic, config_space=generic_config,
                           applies=grouped)],
}))

# 3-D: no dedicated schedule (not a hot op; the dilated input is inlined into the reduction)
register_op(OpDef("nn.conv3d_transpose", _type_nd(3), _reference, OpPattern.OUT_ELEMWISE_FUSABLE,
                  _compute(conv3d_transpose_ncdhw), WINDOW))
