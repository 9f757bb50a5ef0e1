"""2-D transposed convolution (ONNX ConvTranspose-1/11/22; TVM's conv2d_transpose_nchw):
NCHW data, IOHW weights [C, O/groups, KH, KW], groups, strides, dilation, output padding."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d import conv2d_nchw_config, schedule_conv2d_nchw
from tvmc.ops.gpu.conv2d import conv2d_direct_config, schedule_conv2d_direct
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.nn_conv2d import conv2d_nchw, grouped, ungrouped
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op


def conv2d_transpose_out_hw(h, w, kh, kw, strides, padding, dilation, output_padding):
    """OH = sh * (H - 1) + oph + (KH - 1) * dh + 1 - pad_top - pad_bottom (OW alike). Pads may be
    negative: the output then extends past the full result with zeros (ONNX output_shape)."""
    pt, pl, pb, pr = padding
    oh = strides[0] * (h - 1) + output_padding[0] + (kh - 1) * dilation[0] + 1 - pt - pb
    ow = strides[1] * (w - 1) + output_padding[1] + (kw - 1) * dilation[1] + 1 - pl - pr
    return oh, ow


def _type(in_types, attrs):
    d, w = in_types[0], in_types[1]
    if len(d.shape) != 4 or len(w.shape) != 4:
        raise ValueError(f"conv2d_transpose needs 4-D data and weight, got {list(d.shape)} and {list(w.shape)}")
    n, c, h, wd = d.shape
    g = attrs.get("groups", 1)
    if w.shape[0] != c or c % g:
        raise ValueError(f"channels {c} do not match weight {list(w.shape)} with groups={g}")
    oh, ow = conv2d_transpose_out_hw(h, wd, w.shape[2], w.shape[3], attrs["strides"], attrs["padding"],
                                     attrs["dilation"], attrs.get("output_padding", (0, 0)))
    if oh <= 0 or ow <= 0:
        raise ValueError(f"output {oh}x{ow} is empty")
    return TensorType((n, w.shape[1] * g, oh, ow), d.dtype)


def conv2d_transpose_nchw(data, weight, strides, padding, dilation, output_padding=(0, 0), groups=1):
    """Gather form (no scatter): out = conv2d(stride 1, dilation d) of the input dilated by the
    strides (s-1 zeros between elements) and padded by (K-1)*d - pad on each side, with the
    kernel flipped and its in/out axes swapped per group:
      xp[n, c, u, v] = data[n, c, (u + off_h) / sh, (v + off_w) / sw] where divisible and inside,
      off = pad_begin - (K-1)*d; weight' [O, C/groups, KH, KW] = weight[g*Cg + ic, o % Og, KH-1-kh, KW-1-kw].
    """
    n, c, h, w = data.shape
    _, og, kh, kw = weight.shape
    oh, ow = conv2d_transpose_out_hw(h, w, kh, kw, strides, padding, dilation, output_padding)
    sh, sw = strides
    dh, dw = dilation
    off_h, off_w = padding[0] - (kh - 1) * dh, padding[1] - (kw - 1) * dw
    ph, pw = oh + (kh - 1) * dh, ow + (kw - 1) * dw

    def axis_ok(u, off, s, size):
        t = u + off
        conds = [] if off >= 0 else [t >= 0]
        if s > 1:
            conds.append(te.eq(t % s, 0))
        conds.append(t < size * s)
        return conds, (t // s if s > 1 else t)

    def dilated(nn, cc, u, v):
        ch, ih = axis_ok(u, off_h, sh, h)
        cw, iw = axis_ok(v, off_w, sw, w)
        return te.select(te.logical_and(*ch, *cw), data[nn, cc, ih, iw], te.const(0.0, data.dtype))

    xp = te.compute((n, c, ph, pw), dilated, name="dilate_pad_data")
    cg = c // groups
    wt = te.compute((og * groups, cg, kh, kw), lambda o, ic, y, x: weight[
        (o // og) * cg + ic if groups > 1 else ic, o % og if groups > 1 else o, kh - 1 - y, kw - 1 - x],
        name="weight_flipped")
    return conv2d_nchw(xp, wt, (1, 1), (0, 0, 0, 0), dilation, groups)


def _reference(x, w, strides, padding, dilation, output_padding=(0, 0), groups=1):
    """Scatter form: every input pixel adds its weighted kernel into the full output, then crop."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh, ow = conv2d_transpose_out_hw(h, wd, kh, kw, strides, padding, dilation, output_padding)
    full_h = max(sh * (h - 1) + (kh - 1) * dh + 1, oh + pt) + max(0, -pt)
    full_w = max(sw * (wd - 1) + (kw - 1) * dw + 1, ow + pl) + max(0, -pl)
    full = np.zeros((n, og * groups, full_h, full_w), dtype=np.float64)
    bh, bw = max(0, -pt), max(0, -pl)
    cg = c // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * cg:(g + 1) * cg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
                y0, x0 = bh + i * dh, bw + j * dw
                full[:, g * og:(g + 1) * og, y0:y0 + sh * h:sh, x0:x0 + sw * wd:sw] += contrib
    y0, x0 = bh + pt, bw + pl
    return full[:, :, y0:y0 + oh, x0:x0 + ow].astype(x.dtype)


def _compute(inputs, attrs, out_type):
    return conv2d_transpose_nchw(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"],
                                 attrs.get("output_padding", (0, 0)), attrs.get("groups", 1))


# x86: the dilated, padded input is the anchor's first producer (kept, elementwise loops) and the
# flipped weight view is inlined into the accumulator, so the convolution runs with
# conv2d_nchw.x86's schedule and knobs (register tiles over oc x ow, epilogue on the tile).
register_op(OpDef("nn.conv2d_transpose", _type, _reference, OpPattern.OUT_ELEMWISE_FUSABLE, _compute, {
    "cpu": [Implementation("conv2d_transpose_nchw.x86", schedule_conv2d_nchw, config_space=conv2d_nchw_config)],
    "gpu": [Implementation("conv2d_transpose_nchw.gpu", schedule_conv2d_direct, config_space=conv2d_direct_config,
                           applies=ungrouped),
            Implementation("conv2d_transpose_nchw_grouped.gpu", schedule_generic, config_space=generic_config,
                           applies=grouped)],
}))
