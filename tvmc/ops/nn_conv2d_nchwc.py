"""2-D convolution on channel-blocked data (TVM's conv2d_NCHWc, group_conv2d_NCHWc and
depthwise_conv2d_NCHWc): NCHW[x]c data, weights pre-packed at compile time, NCHW[y]c output."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d_nchwc import (
    conv2d_nchwc_config,
    group_conv2d_nchwc_config,
    schedule_conv2d_nchwc,
    schedule_conv2d_nchwc_im2col,
)
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.layout import blocked_layout, channel_block, to_layout
from tvmc.ops.nn_conv2d import _reference as conv2d_nchw_reference
from tvmc.ops.nn_conv2d import conv2d_out_hw
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.ops.transform import pad_compute


def pack_weight(weight: np.ndarray, ic_bn: int, oc_bn: int, depthwise: bool = False) -> np.ndarray:
    """numpy: OIHW conv weight -> the blocked kernel layout of nn.conv2d_nchwc.

    groups == 1:  [O, C, KH, KW] -> OIHW[ic_bn]i[oc_bn]o  [O//oc_bn, C//ic_bn, KH, KW, ic_bn, oc_bn]
    grouped:      [O, C/g, KH, KW] -> [O//oc_bn, (C/g)//ic_bn, KH, KW, ic_bn, oc_bn], the same packing
                  of each output channel's C/g inputs: with oc_bn dividing O/g, the output block
                  oco belongs to group oco // ((O/g)//oc_bn) (TVM's group_conv2d_NCHWc kernel
                  [G, O/g//oc_bn, C/g//ic_bn, KH, KW, ic_bn, oc_bn] with G folded into the first axis)
    depthwise:    [C, 1, KH, KW] -> OIHW1i[oc_bn]o        [C//oc_bn, 1, KH, KW, 1, oc_bn]
    Raises ValueError when a block does not divide its channel count.
    """
    o, c, kh, kw = weight.shape
    if depthwise:
        ic_bn = 1
    if o % oc_bn or c % ic_bn:
        raise ValueError(f"weight {list(weight.shape)} does not divide into blocks ic={ic_bn}, oc={oc_bn}")
    packed = weight.reshape(o // oc_bn, oc_bn, c // ic_bn, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed)


def unpack_weight(packed: np.ndarray) -> np.ndarray:
    """numpy: inverse of `pack_weight` ([O//ob, C//ib, KH, KW, ib, ob] -> OIHW [O, C, KH, KW])."""
    oo, co, kh, kw, ib, ob = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 5, 1, 4, 2, 3).reshape(oo * ob, co * ib, kh, kw))


def _is_depthwise(data_shape, weight_shape, groups: int) -> bool:
    """groups == C == O: one input channel per output channel, in the depthwise kernel layout."""
    channels = data_shape[1] * data_shape[4]
    return groups > 1 and groups == channels == weight_shape[0] * weight_shape[5]


def is_grouped(data_shape, weight_shape, groups: int) -> bool:
    """A grouped, not depthwise, nn.conv2d_nchwc (groups > 1): TVM's group_conv2d_NCHWc."""
    return groups > 1 and not _is_depthwise(data_shape, weight_shape, groups)


def _type(in_types, attrs):
    d, w = in_types[0], in_types[1]
    if len(d.shape) != 5 or len(w.shape) != 6:
        raise ValueError(f"conv2d_nchwc needs 5-D data and 6-D weight, got {list(d.shape)} and {list(w.shape)}")
    n, ico, h, wd, ic_bn = d.shape
    oco, wico, kh, kw, w_ic_bn, oc_bn = w.shape
    groups = attrs.get("groups", 1)
    if _is_depthwise(d.shape, w.shape, groups):
        if (wico, w_ic_bn) != (1, 1) or oc_bn != ic_bn or oco != ico:
            raise ValueError(f"depthwise weight {list(w.shape)} must be [C//{ic_bn}, 1, KH, KW, 1, {ic_bn}] "
                             f"for data {list(d.shape)}")
    elif groups != 1:
        channels, out_channels = ico * ic_bn, oco * oc_bn
        if channels % groups or out_channels % groups or (out_channels // groups) % oc_bn:
            raise ValueError(f"groups={groups}: the output block {oc_bn} must divide O/groups and groups must divide "
                             f"C={channels} and O={out_channels}")
        if w_ic_bn != ic_bn or wico * w_ic_bn != channels // groups:
            raise ValueError(f"grouped weight {list(w.shape)} must be [O//{oc_bn}, C/groups//{ic_bn}, KH, KW, "
                             f"{ic_bn}, {oc_bn}] for data {list(d.shape)} and groups={groups}")
    elif (wico, w_ic_bn) != (ico, ic_bn):
        raise ValueError(f"weight {list(w.shape)} does not match data {list(d.shape)}")
    if channel_block(attrs["out_layout"]) != oc_bn:
        raise ValueError(f"out_layout {attrs['out_layout']} does not match the weight's output block {oc_bn}")
    oh, ow = conv2d_out_hw(h, wd, kh, kw, attrs["strides"], attrs["padding"], attrs["dilation"])
    if oh <= 0 or ow <= 0:
        raise ValueError(f"kernel {kh}x{kw} does not fit input {h}x{wd}")
    return TensorType((n, oco, oh, ow, oc_bn), d.dtype)


def _padded_input(data, weight, strides, padding, dilation):
    """The zero-padded input stage `pad_data` (spatial axes only) of both conv2d_nchwc forms, and
    the sizes (N, C//ib, ib, O//ob, KH, KW, ob, OH, OW)."""
    n, ico, h, w, ic_bn = data.shape
    oco, _, kh, kw, _, oc_bn = weight.shape
    pt, pl, pb, pr = padding
    oh, ow = conv2d_out_hw(h, w, kh, kw, strides, padding, dilation)
    padded = pad_compute(data, ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)), name="pad_data")
    return padded, (n, ico, ic_bn, oco, kh, kw, oc_bn, oh, ow)


def conv2d_nchwc(data, weight, strides, padding, dilation, groups=1):
    """Tensor expression of a blocked conv2d (TVM's topi.nn.conv2d_NCHWc, group_conv2d_NCHWc,
    depthwise_conv2d_NCHWc).

    groups == 1: data [N, C//ib, H, W, ib], weight [O//ob, C//ib, KH, KW, ib, ob] ->
      out[n, oco, y, x, oci] = sum_{ico, kh, kw, ici} pad(data)[n, ico, y*sh + kh*dh, x*sw + kw*dw, ici]
                                                       * weight[oco, ico, kh, kw, ici, oci]
    grouped (1 < groups, not depthwise; ib divides C/g, ob divides O/g): weight
      [O//ob, (C/g)//ib, KH, KW, ib, ob]; output block oco reads its group's input blocks
      gi = oco // ((O/g)//ob) times (C/g)//ib onwards:
      out[n, oco, y, x, oci] = sum_{ico < (C/g)//ib, kh, kw, ici}
                               pad(data)[n, gi * (C/g)//ib + ico, y*sh + kh*dh, x*sw + kw*dw, ici]
                               * weight[oco, ico, kh, kw, ici, oci]
    depthwise (groups == C, ib == ob): weight [C//ob, 1, KH, KW, 1, ob] ->
      out[n, co, y, x, ci] = sum_{kh, kw} pad(data)[n, co, y*sh + kh*dh, x*sw + kw*dw, ci]
                                          * weight[co, 0, kh, kw, 0, ci]
    Output [N, O//ob, OH, OW, ob], the data's dtype. The padding is its own stage `pad_data`
    (zeros, spatial axes only). Reduce axes in order (ic_outer, kh, kw, ic_inner) for groups == 1,
    (kh, kw) for depthwise; the x86 schedule relies on that order. Data and weight float32 or
    float64, one dtype.
    """
    padded, (n, ico, ic_bn, oco, kh, kw, oc_bn, oh, ow) = _padded_input(data, weight, strides, padding, dilation)
    sh, sw = strides
    dh, dw = dilation
    rkh, rkw = te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    if _is_depthwise(data.shape, weight.shape, groups):
        def f(nn, co, y, x, ci):
            return te.sum(padded[nn, co, y * sh + rkh.var * dh, x * sw + rkw.var * dw, ci]
                          * weight[co, 0, rkh, rkw, 0, ci], [rkh, rkw])

        return te.compute((n, oco, oh, ow, oc_bn), f, name="depthwise_conv2d_nchwc", tag="depthwise_conv2d_nchwc")
    if groups != 1:
        return _group_conv2d_nchwc(padded, weight, strides, dilation, groups, (n, oco, oh, ow, oc_bn))
    rico, rici = te.reduce_axis(ico, "ic_outer"), te.reduce_axis(ic_bn, "ic_inner")

    def g(nn, oc, y, x, oci):
        return te.sum(padded[nn, rico, y * sh + rkh.var * dh, x * sw + rkw.var * dw, rici]
                      * weight[oc, rico, rkh, rkw, rici, oci], [rico, rkh, rkw, rici])

    return te.compute((n, oco, oh, ow, oc_bn), g, name="conv2d_nchwc", tag="conv2d_nchwc")


def _group_conv2d_nchwc(padded, weight, strides, dilation, groups, out_shape):
    """The grouped form of conv2d_nchwc (see there): reduce axes (ic_outer, kh, kw, ic_inner) over
    one group's (C/g)//ib input blocks, which start at block (oco // oc_chunks_per_group) * ic_chunks."""
    oco, ic_chunks, kh, kw, ic_bn, _ = weight.shape
    oc_chunks_per_group = oco // groups
    sh, sw = strides
    dh, dw = dilation
    rico, rici = te.reduce_axis(ic_chunks, "ic_outer"), te.reduce_axis(ic_bn, "ic_inner")
    rkh, rkw = te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")

    def g(nn, oc, y, x, oci):
        ic = (oc // oc_chunks_per_group) * ic_chunks + rico.var
        return te.sum(padded[nn, ic, y * sh + rkh.var * dh, x * sw + rkw.var * dw, rici]
                      * weight[oc, rico, rkh, rkw, rici, oci], [rico, rkh, rkw, rici])

    return te.compute(out_shape, g, name="group_conv2d_nchwc", tag="conv2d_nchwc")


def conv2d_nchwc_im2col(data, weight, strides, padding, dilation):
    """Tensor expression of a blocked conv2d as im2col + GEMM (groups == 1 only).

    The input windows are first gathered into a GEMM operand whose panels hold one output row:
      col[n, y, ico, kh, kw, ici, x] = pad(data)[n, ico, y*sh + kh*dh, x*sw + kw*dw, ici]
    ([N, OH, C//ib, KH, KW, ib, OW]: for each reduction index k = (ico, kh, kw, ici) the OW
    columns of a row are contiguous), then
      out[n, oco, y, x, oci] = sum_k col[n, y, k, x] * weight[oco, k, oci]
    a GEMM of the [OH*OW, K] matrix col by the packed weight [O//ob, K, ob], K = C*KH*KW.
    Shapes, dtype and reduce-axis order (ic_outer, kh, kw, ic_inner) are those of
    `conv2d_nchwc`; col is the stage named "im2col" (the padding is inlined into it).
    Costs OH*OW*K extra bytes x itemsize of memory, written once; the register tile then reads
    its broadcast operands from consecutive addresses, where the direct form strides by
    sw * ib elements between output columns.
    """
    padded, (n, ico, ic_bn, oco, kh, kw, oc_bn, oh, ow) = _padded_input(data, weight, strides, padding, dilation)
    sh, sw = strides
    dh, dw = dilation
    col = te.compute((n, oh, ico, kh, kw, ic_bn, ow),
                     lambda nn, y, c, i, j, ci, x: padded[nn, c, y * sh + i * dh, x * sw + j * dw, ci], name="im2col")
    rico, rkh, rkw = te.reduce_axis(ico, "ic_outer"), te.reduce_axis(kh, "kh"), te.reduce_axis(kw, "kw")
    rici = te.reduce_axis(ic_bn, "ic_inner")

    def g(nn, oc, y, x, oci):
        return te.sum(col[nn, y, rico, rkh, rkw, rici, x] * weight[oc, rico, rkh, rkw, rici, oci],
                      [rico, rkh, rkw, rici])

    return te.compute((n, oco, oh, ow, oc_bn), g, name="conv2d_nchwc_im2col", tag="conv2d_nchwc")


def _reference(x, w, strides, padding, dilation, groups=1, out_layout=None):
    """Unblock data and weight, run the NCHW reference, block the result."""
    ic_bn, oc_bn = x.shape[4], w.shape[5]
    nchw = to_layout(x, blocked_layout(ic_bn), "NCHW")
    # a depthwise weight [C//ob, 1, KH, KW, 1, ob] unpacks to OIHW [C, 1, KH, KW] like any other
    out = conv2d_nchw_reference(nchw, unpack_weight(w), strides, padding, dilation, groups)
    return to_layout(out, "NCHW", blocked_layout(oc_bn))


def _compute(inputs, attrs, out_type):
    return conv2d_nchwc(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"],
                        attrs.get("groups", 1))


def _im2col_compute(inputs, attrs, out_type):
    return conv2d_nchwc_im2col(inputs[0], inputs[1], attrs["strides"], attrs["padding"], attrs["dilation"])


def _not_depthwise(wl) -> bool:
    """im2col applies to groups == 1 (a depthwise window has no reduction over channels to GEMM)."""
    return dict(wl[-1]).get("groups", 1) == 1


def _grouped(wl) -> bool:
    """The workload (data, weight, out shapes, dtype, attrs) is a grouped, not depthwise, conv."""
    return is_grouped(wl[0], wl[1], dict(wl[-1]).get("groups", 1))


# The direct form is the default (no records); `tvmc tune` measures both and compile takes the
# faster per workload (tvmc.ops.fused._choose_implementation). Grouped convs have their own task
# (TVM's group_conv2d_NCHWc): the same register tile, its channel-block knob within one group.
register_op(OpDef("nn.conv2d_nchwc", _type, _reference, OpPattern.OUT_ELEMWISE_FUSABLE, _compute, {
    "cpu": [Implementation("conv2d_nchwc.cpu", schedule_conv2d_nchwc, config_space=conv2d_nchwc_config,
                           applies=lambda wl: not _grouped(wl)),
            Implementation("group_conv2d_nchwc.cpu", schedule_conv2d_nchwc, config_space=group_conv2d_nchwc_config,
                           applies=_grouped),
            Implementation("conv2d_nchwc_im2col.cpu", schedule_conv2d_nchwc_im2col, compute=_im2col_compute,
                           config_space=conv2d_nchwc_config, applies=_not_depthwise)],
    "gpu": [Implementation("conv2d_nchwc.gpu", schedule_generic, config_space=generic_config)],
}))
