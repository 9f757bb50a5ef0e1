"""Graph pass SubpixelConvTranspose: a strided 2-D transposed convolution as ordinary convolutions
over the input, one output channel group per output phase of the stride's s_h x s_w (one
convolution where the stride divides the kernel), then a pixel shuffle (the sub-pixel
convolution of Shi et al., "Is the deconvolution layer the same as a convolutional layer?",
2016; PyTorch's PixelShuffle, ONNX DepthToSpace in CRD order).

nn.conv2d_transpose computes its gather form (tvmc/ops/nn_conv2d_transpose.py): a stride-1
convolution of the input dilated by the strides, where all but 1 / (s_h s_w) of the taps meet an
inserted zero. An OCR text detector's or a U-Net's stride-2 upsampling then spends 3/4 of its
multiply-adds on zeros, on a generic NCHW kernel: 2.7-3.7x onnxruntime's time at one thread
(Zen 4; 64 -> 32 channels, kernel 4, 28 x 28 -> 56 x 56: 2.17 ms against 0.75).

Measured the same way after this pass (the one-node models' layout transforms and pixel shuffle
included): that layer 0.58 ms against onnxruntime's 0.70, 128 -> 64 channels, kernel 2 at 14 x 14
0.152 against 0.148, 64 -> 32, kernel 3, output_padding 1 at 32 x 32 0.60 against 0.50 (its
four phase convolutions 0.41 ms, their concatenation fused into the shuffle 0.22); PP-OCRv4's
text detector (rapidocr-onnxruntime, two kernel-2 ConvTransposes) at 640 x 640: 73.3 -> 60.5 ms,
onnxruntime 95.5.
"""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite
from tvmc.ops.registry import make_call
from tvmc.passes.pass_infra import graph_pass


def _taps(k: int, s: int) -> int:
    """Taps of each phase's kernel along an axis of kernel size k and stride s: ceil(k / s)."""
    return -(-k // s)


def phase_weight(weight: np.ndarray, strides, phase, taps) -> np.ndarray:
    """ConvTranspose weight [C, O, KH, KW] (groups 1, dilation 1) -> the kernel [O, C, AH, AW] of
    output phase (rh, rw) as an ordinary convolution (cross-correlation), `taps` (AH, AW):

        w'[o, c, th, tw] = weight[c, o, rh + SH (AH - 1 - th), rw + SW (AW - 1 - tw)]

    zero where that tap is past the kernel. Output phase (rh, rw) is the output pixels (Y, X)
    with (Y + pad_top) % SH = rh and (X + pad_left) % SW = rw. Run once at compile time on the
    constant."""
    c, o, kh, kw = weight.shape
    (sh, sw), (rh, rw), (ah, aw) = strides, phase, taps
    out = np.zeros((o, c, ah, aw), weight.dtype)
    for th in range(ah):
        for tw in range(aw):
            y, x = rh + sh * (ah - 1 - th), rw + sw * (aw - 1 - tw)
            if y < kh and x < kw:
                out[:, :, th, tw] = weight[:, :, y, x].T
    return out


def subpixel_conv_transpose(e: Call) -> Expr | None:
    """The rewrite of one nn.conv2d_transpose (see the module docstring), or None where it does
    not apply: groups 1, dilation 1, non-negative padding, a Constant weight, static shapes.

    With A = ceil(K / S) taps per phase, U = Y + pad_begin (the output pixel in the uncropped
    result, U = i S + k for input pixel i and tap k), phase r = U % S and Q = U // S:

        y[o, Y] = sum_{c, a} x[c, Q - a] w[c, o, r + S a]

    a cross-correlation over Q of x padded by A - 1 in front with the phase kernel w'_r (taps
    reversed): conv2d(x, w', padding (A-1, A-1, bottom, right)) gives z[r * O + o, Q] for Q from 0
    to (pad_begin + OH - 1) // S; then reshape [N, SH, SW, O, QH, QW], transpose to
    [N, O, QH, SH, QW, SW], reshape [N, O, QH SH, QW SW] (index U) and strided_slice from
    pad_begin. Where S divides K the phases are one convolution of their kernels stacked along
    the output channels; elsewhere each phase r has its own ceil((K - r) / S) taps and its own
    convolution, concatenated along the channels (PlanMemory's concat views: each writes its part
    of z): K = 3, S = 2 does the 9 multiply-adds per input pixel and output channel that count,
    against 16 for stacked kernels padded to 2 x 2 and 36 in the dilated form."""
    data, weight = e.inputs
    attrs = e.attrs
    if not (isinstance(weight, Constant) and len(e.shape) == 4 and attrs.get("groups", 1) == 1
            and tuple(attrs["dilation"]) == (1, 1) and min(attrs["padding"]) >= 0
            and not data.type.is_symbolic and e.dtype.startswith("float")):
        return None
    n, c, h, w = data.shape
    _, o, oh, ow = e.shape
    kh, kw = weight.shape[2:]
    sh, sw = attrs["strides"]
    pt, pl = attrs["padding"][:2]
    ah, aw = _taps(kh, sh), _taps(kw, sw)
    qh, qw = (pt + oh - 1) // sh + 1, (pl + ow - 1) // sw + 1  # the rows of z the output reads
    # the convolution's output has h + bottom rows: at least qh
    bottom, right = max(0, qh - h), max(0, qw - w)
    name, wname = e.name or "conv_transpose", weight.name or "weight"

    def conv(kernel, taps, suffix):
        return make_call("nn.conv2d", [data, Constant(kernel, f"{wname}_{suffix}")],
                         {"strides": (1, 1), "padding": (taps[0] - 1, taps[1] - 1, bottom, right), "dilation": (1, 1),
                          "groups": 1}, name=f"{name}_{suffix}")

    phases = [(rh, rw) for rh in range(sh) for rw in range(sw)]
    # each phase's own taps, ceil((K - r) / S): where S does not divide K they differ, and one
    # convolution of the phases stacked would multiply the shorter kernels' zero taps
    own = {p: (_taps(kh - p[0], sh), _taps(kw - p[1], sw)) for p in phases}
    if len(set(own.values())) == 1 or min(min(t) for t in own.values()) < 1:
        z = conv(np.concatenate([phase_weight(weight.value, (sh, sw), p, (ah, aw)) for p in phases]), (ah, aw),
                 "phases")
    else:
        z = make_call("concatenate", [conv(phase_weight(weight.value, (sh, sw), p, own[p]), own[p],
                                           f"phase{p[0]}{p[1]}") for p in phases], {"axis": 1}, name=f"{name}_phases")
    zh, zw = z.shape[2:]
    y = make_call("reshape", [z], {"newshape": (n, sh, sw, o, zh, zw)}, name=f"{name}_phases_split")
    y = make_call("transpose", [y], {"axes": (0, 3, 4, 1, 5, 2)}, name=f"{name}_pixel_shuffle")
    y = make_call("reshape", [y], {"newshape": (n, o, zh * sh, zw * sw)}, name=f"{name}_pixels")
    if (zh * sh, zw * sw) == (oh, ow) and pt == pl == 0:
        return y
    return make_call("strided_slice", [y], {"begin": (0, 0, pt, pl), "end": (n, o, pt + oh, pl + ow),
                                            "strides": (1, 1, 1, 1)}, name=name)


@graph_pass("SubpixelConvTranspose", opt_level=3)
def subpixel_conv_transpose_pass(graph: Graph, ctx) -> Graph:
    """Every nn.conv2d_transpose that subpixel_conv_transpose takes becomes an nn.conv2d of the
    stacked phase kernels and a pixel shuffle, on CPU targets (before AlterOpLayout, which then
    blocks the convolution as any other: NCHWc register tiles, its tuning task and fallback).
    No target (a target-independent run) or a GPU: the graph unchanged (not measured there)."""
    target = getattr(ctx, "target", None)
    if target is None or target.gpu:
        return graph

    def fn(e: Expr, new_inputs: tuple):
        if isinstance(e, Call) and e.op == "nn.conv2d_transpose":  # None: rewrite keeps it
            return subpixel_conv_transpose(Call(e.op, new_inputs, e.attrs, e.type, e.name))
        return None

    return rewrite(graph, fn)
