"""Data layouts NCHW and NCHW[x]c (channel-blocked): the `layout_transform` operator and the
numpy conversions AlterOpLayout uses on constants (TVM's relay `layout_transform`)."""

from __future__ import annotations

import re

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.elemwise import INJECTIVE
from tvmc.ops.registry import OpDef, OpPattern, register_op

_BLOCKED = re.compile(r"^NCHW([1-9][0-9]*)c$")


def channel_block(layout: str) -> int | None:
    """The channel block `x` of "NCHW[x]c", or None for "NCHW".

    Raises ValueError for any other layout string (only NCHW and NCHW[x]c exist here).
    """
    if layout == "NCHW":
        return None
    m = _BLOCKED.match(layout)
    if m is None:
        raise ValueError(f"unknown layout '{layout}' (known: NCHW, NCHW<x>c such as NCHW16c)")
    return int(m.group(1))


def blocked_layout(block: int) -> str:
    """"NCHW{block}c"."""
    return f"NCHW{int(block)}c"


def logical_shape(shape, layout: str) -> tuple:
    """NCHW shape of a tensor stored as `layout`: [N, C//x, H, W, x] -> [N, C, H, W].

    Raises ValueError when the rank does not match the layout.
    """
    b = channel_block(layout)
    want = 4 if b is None else 5
    if len(shape) != want:
        raise ValueError(f"layout {layout} needs a rank-{want} tensor, got {list(shape)}")
    if b is None:
        return tuple(shape)
    if shape[4] != b:
        raise ValueError(f"layout {layout}: innermost axis of {list(shape)} must be {b}")
    n, co, h, w, _ = shape
    return (n, co * b, h, w)


def physical_shape(nchw_shape, layout: str) -> tuple:
    """Shape of an NCHW tensor stored as `layout`: [N, C, H, W] -> [N, C//x, H, W, x].

    Raises ValueError when C is not a multiple of the block x.
    """
    b = channel_block(layout)
    if b is None:
        return tuple(nchw_shape)
    n, c, h, w = nchw_shape
    if c % b:
        raise ValueError(f"{c} channels are not a multiple of the block of {layout}")
    return (n, c // b, h, w, b)


def to_layout(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """numpy: a tensor stored as `src` re-stored as `dst` (both NCHW or NCHW[x]c), contiguous."""
    nchw = x
    b = channel_block(src)
    if b is not None:
        n, co, h, w, _ = x.shape
        nchw = x.transpose(0, 1, 4, 2, 3).reshape(n, co * b, h, w)
    b = channel_block(dst)
    if b is None:
        return np.ascontiguousarray(nchw)
    n, c, h, w = nchw.shape
    if c % b:
        raise ValueError(f"{c} channels are not a multiple of the block of {dst}")
    return np.ascontiguousarray(nchw.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _type(in_types, attrs):
    t = in_types[0]
    src, dst = attrs["src_layout"], attrs["dst_layout"]
    return TensorType(physical_shape(logical_shape(t.shape, src), dst), t.dtype)


def _compute(inputs, attrs, out_type):
    x = inputs[0]
    src, dst = channel_block(attrs["src_layout"]), channel_block(attrs["dst_layout"])

    def f(*i):
        if dst is None:
            n, c, h, w = i
        else:
            n, co, h, w, ci = i
            c = co * dst + ci
        if src is None:
            return x[n, c, h, w]
        return x[n, c // src, h, w, c % src]

    return te.compute(out_type.shape, f, name="layout_transform")


register_op(OpDef("layout_transform", _type,
                  lambda x, src_layout, dst_layout: to_layout(x, src_layout, dst_layout),
                  OpPattern.INJECTIVE, _compute, INJECTIVE))


def channel_shuffle_reference(x: np.ndarray, groups: int, layout: str = "NCHW") -> np.ndarray:
    """numpy: ShuffleNet's channel shuffle of a tensor stored as `layout` (NCHW or NCHW[x]c),
    the result in the same layout: output channel c' = r * groups + gi takes input channel
    gi * (C/groups) + r, i.e. reshape [N, g, C/g, H, W] -> transpose (0, 2, 1, 3, 4) -> reshape
    [N, C, H, W] of the NCHW tensor. Raises ValueError when `groups` does not divide C."""
    nchw = to_layout(x, layout, "NCHW")
    n, c, h, w = nchw.shape
    if c % groups:
        raise ValueError(f"{groups} groups do not divide {c} channels")
    shuffled = nchw.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    return to_layout(shuffled, "NCHW", layout)


def _shuffle_type(in_types, attrs):
    t = in_types[0]
    c = logical_shape(t.shape, attrs["layout"])[1]
    if c % attrs["groups"]:
        raise ValueError(f"{attrs['groups']} groups do not divide {c} channels")
    return t


def _shuffle_compute(inputs, attrs, out_type):
    x = inputs[0]
    groups, block = attrs["groups"], channel_block(attrs["layout"])
    per_group = logical_shape(x.shape, attrs["layout"])[1] // groups

    def f(*i):
        c = i[1] if block is None else i[1] * block + i[4]
        src = (c % groups) * per_group + c // groups
        if block is None:
            return x[i[0], src, i[2], i[3]]
        return x[i[0], src // block, i[2], i[3], src % block]

    return te.compute(out_type.shape, f, name="channel_shuffle")


# ShuffleNet's channel shuffle as one gather in the tensor's own layout (PyTorch's
# nn.ChannelShuffle): AlterOpLayout emits it for the ONNX Reshape-Transpose-Reshape pattern on a
# blocked tensor, which would otherwise leave NCHW[x]c for the three NCHW copies and back.
register_op(OpDef("channel_shuffle", _shuffle_type, channel_shuffle_reference, OpPattern.INJECTIVE, _shuffle_compute,
                  INJECTIVE))
