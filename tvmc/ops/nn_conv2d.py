"""2-D convolution (ONNX Conv, opset 1-22): NCHW data, OIHW weights, groups and dilation."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d import conv2d_nchw_config, schedule_conv2d_nchw
from tvmc.ops.gpu.conv2d import (conv2d_direct_config, conv2d_im2col_config, schedule_conv2d_direct,
                                 schedule_conv2d_im2col)
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.tensorcore import (schedule_conv2d_tensorcore, tensorcore_applies, tensorcore_config,
                                     tensorcore_supports)
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.ops.transform import pad_compute


def conv2d_out_hw(h, w, kh, kw, strides, padding, dilation):
    """Output (OH, OW) of a conv/pool window: floor((H + pads - ((K-1)*d + 1)) / s) + 1."""
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - ((kh - 1) * dilation[0] + 1)) // strides[0] + 1
    ow = (w + pl + pr - ((kw - 1) * dilation[1] + 1)) // strides[1] + 1
    return oh, ow


def _type(in_types, attrs):
    d, w = in_types[0], in_types[1]
    if len(d.shape) != 4 or len(w.shape) != 4:
        raise ValueError(f"conv2d needs 4-D data and weight, got {list(d.shape)} and {list(w.shape)}")
    n, c, h, wd = d.shape
    o, cg, kh, kw = w.shape
    g = attrs.get("groups", 1)
    if c != cg * g or o % g:
        raise ValueError(f"channels {c} do not match weight {list(w.shape)} with groups={g}")
    oh, ow = conv2d_out_hw(h, wd, kh, kw, attrs["strides"], attrs["padding"], attrs["dilation"])
    if oh <= 0 or ow <= 0:
        raise ValueError(f"kernel {kh}x{kw} does not fit input {h}x{wd}")
    return TensorType((n, o, oh, ow), d.dtype)


def conv2d_nchw(data, weight, strides, padding, dilation, groups=1):
    """out[n, o, y, x] = sum_{ic, kh, kw} pad(data)[n, g(o)*Cg + ic, y*sh + kh*dh, x*sw + kw*dw]
    * weight[o, ic, kh, kw]; data [N, C, H, W], weight [O, C/groups, KH, KW]."""
    n, c, h, w = data.shape
    o, cg, kh, kw = weight.shape
    pt, pl, pb, pr = padding
    oh, ow = conv2d_out_hw(h, w, kh, kw, strides, padding, dilation)
    padded = pad_compute(data, ((0, 0), (0, 0), (pt, pb), (pl, pr)), name="pad_data")
    ric, rkh, rkw = te.reduce_axis(cg, "ic"), te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    og = o // groups
    sh, sw = strides
    dh, dw = dilation

    def f(nn, oc, y, x):
        cin = ric.var if groups == 1 else (oc // og) * cg + ric.var
        return te.sum(padded[nn, cin, y * sh + rkh.var * dh, x * sw + rkw.var * dw] * weight[oc, ric, rkh, rkw],
                      [ric, rkh, rkw])

    return te.compute((n, o, oh, ow), f, name="conv2d", tag="conv2d_nchw")


def conv2d_nchw_im2col(data, weight, strides, padding, dilation):
    """conv2d (groups 1) as im2col + GEMM: with K = C*KH*KW and k = (ic, kh, kw) flattened,
      im2col[n, k, y, x] = pad(data)[n, ic, y*sh + kh*dh, x*sw + kw*dw]   ([N, K, OH, OW])
      weight_2d[o, k]    = weight[o, ic, kh, kw]                           ([O, K])
      out[n, o, y, x]    = sum_k weight_2d[o, k] * im2col[n, k, y, x]
    Same output, dtype and numbers as conv2d_nchw; one reduce axis of extent K, so a GEMM
    schedule tiles it in panels of weight_2d and im2col (the GPU schedule gathers the im2col
    panel while staging it, the stages themselves are inlined)."""
    n, c, h, w = data.shape
    o, _, kh, kw = weight.shape
    pt, pl, pb, pr = padding
    oh, ow = conv2d_out_hw(h, w, kh, kw, strides, padding, dilation)
    padded = pad_compute(data, ((0, 0), (0, 0), (pt, pb), (pl, pr)), name="pad_data")
    taps = kh * kw
    sh, sw = strides
    dh, dw = dilation
    col = te.compute((n, c * taps, oh, ow), lambda nn, k, y, x: padded[
        nn, k // taps, y * sh + ((k // kw) % kh) * dh, x * sw + (k % kw) * dw], name="im2col")
    w2 = te.compute((o, c * taps), lambda oc, k: weight[oc, k // taps, (k // kw) % kh, k % kw], name="weight_2d")
    rk = te.reduce_axis(c * taps, "k")
    return te.compute((n, o, oh, ow), lambda nn, oc, y, x: te.sum(w2[oc, rk] * col[nn, rk, y, x], rk),
                      name="conv2d_im2col", tag="conv2d_nchw")


def _reference(x, w, strides, padding, dilation, groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = conv2d_out_hw(h, wd, kh, kw, strides, padding, dilation)
    out = np.zeros((n, o, oh, ow), dtype=np.float64)
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                y0, x0 = i * dilation[0], j * dilation[1]
                patch = xs[:, :, y0:y0 + strides[0] * oh:strides[0], x0:x0 + strides[1] * ow:strides[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out.astype(x.dtype)


def _compute(inputs, attrs, out_type):
    return conv2d_nchw(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"],
                       attrs.get("groups", 1))


def _im2col_compute(inputs, attrs, out_type):
    return conv2d_nchw_im2col(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"])


def ungrouped(wl) -> bool:
    """The GEMM-tiled GPU forms take groups == 1; grouped and depthwise convolutions run per thread."""
    return dict(wl[-1]).get("groups", 1) == 1


def grouped(wl) -> bool:
    return not ungrouped(wl)


register_op(OpDef("nn.conv2d", _type, _reference, OpPattern.OUT_ELEMWISE_FUSABLE, _compute, {
    "cpu": [Implementation("conv2d_nchw.cpu", schedule_conv2d_nchw, config_space=conv2d_nchw_config)],
    "gpu": [Implementation("conv2d_nchw_tensorcore.gpu", None, config_space=tensorcore_config,
                           applies=tensorcore_applies, template=schedule_conv2d_tensorcore,
                           supports=tensorcore_supports),
            Implementation("conv2d_nchw.gpu", schedule_conv2d_direct, config_space=conv2d_direct_config,
                           applies=ungrouped),
            Implementation("conv2d_nchw_im2col.gpu", schedule_conv2d_im2col, compute=_im2col_compute,
                           config_space=conv2d_im2col_config, applies=ungrouped),
            Implementation("conv2d_nchw_grouped.gpu", schedule_generic, config_space=generic_config,
                           applies=grouped)],
}))
