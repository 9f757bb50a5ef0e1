"""col2im (ONNX Col2Im-18; PyTorch's fold): column blocks [N, C * prod(B), L] summed back into
an image [N, C, *image_shape], any number of spatial axes.

Gather form (no scatter): each image element sums, over the kernel taps k, the column entry of
the block position whose tap k lands on it. Along an axis with image extent I, pads p0/p1,
stride s, dilation d and block extent B, the blocks sit on a grid of
L_i = (I + p0 + p1 - (d * (B - 1) + 1)) // s + 1 positions (L = prod L_i, row-major), and
image position x receives tap k from grid position l = (x + p0 - k * d) / s when that is an
integer in [0, L_i).
"""

from __future__ import annotations

import itertools

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.reduce import WINDOW
from tvmc.ops.registry import OpDef, OpPattern, register_op


def col2im_grid(image_shape, block_shape, strides, dilation, padding) -> tuple:
    """Block positions per spatial axis (L_i); padding is (begins..., ends...)."""
    nd = len(image_shape)
    return tuple((image_shape[i] + padding[i] + padding[nd + i] - (dilation[i] * (block_shape[i] - 1) + 1))
                 // strides[i] + 1 for i in range(nd))


def _type(in_types, attrs):
    """data [N, C * prod(block_shape), prod(L_i)] -> [N, C, *image_shape]."""
    t = in_types[0]
    image, block = attrs["image_shape"], attrs["block_shape"]
    taps = int(np.prod(block))
    if len(t.shape) != 3 or len(image) != len(block) or t.shape[1] % taps:
        raise ValueError(f"input {list(t.shape)} is not [N, C * {taps}, L] columns of blocks {list(block)}")
    grid = col2im_grid(image, block, attrs["strides"], attrs["dilation"], attrs["padding"])
    if min(grid) <= 0 or int(np.prod(grid)) != t.shape[2]:
        raise ValueError(f"input {list(t.shape)} has {t.shape[2]} blocks; image {list(image)} with blocks "
                         f"{list(block)} holds {'x'.join(map(str, grid))}")
    return TensorType((t.shape[0], t.shape[1] // taps) + tuple(image), t.dtype)


def _compute(inputs, attrs, out_type):
    data = inputs[0]
    image, block = attrs["image_shape"], attrs["block_shape"]
    strides, dilation, padding = attrs["strides"], attrs["dilation"], attrs["padding"]
    grid = col2im_grid(image, block, strides, dilation, padding)
    taps = int(np.prod(block))
    rk = [te.reduce_axis(b, f"rk{i}") for i, b in enumerate(block)]

    def f(n, c, *xs):
        conds, tap, pos = [], te.const(0), te.const(0)
        for i, (x, r) in enumerate(zip(xs, rk)):
            t = x + padding[i] - r.var * dilation[i]
            conds.append(t >= 0)
            if strides[i] > 1:
                conds.append(te.eq(t % strides[i], 0))
            q = t // strides[i] if strides[i] > 1 else t
            conds.append(q < grid[i])
            tap = tap * block[i] + r.var
            pos = pos * grid[i] + te.minimum(te.maximum(q, te.const(0)), te.const(grid[i] - 1))
        value = data[n, c * taps + tap, pos]
        return te.sum(te.select(te.logical_and(*conds), value, te.const(0.0, data.dtype)), rk)

    return te.compute(out_type.shape, f, name="col2im")


def _reference(x, image_shape, block_shape, strides, dilation, padding):
    """Scatter form: every column entry added into the padded image, then cropped."""
    nd = len(image_shape)
    grid = col2im_grid(image_shape, block_shape, strides, dilation, padding)
    n, ck, _ = x.shape
    taps = int(np.prod(block_shape))
    cols = x.astype(np.float64).reshape((n, ck // taps) + tuple(block_shape) + grid)
    canvas = np.zeros((n, ck // taps) + tuple(image_shape[i] + padding[i] + padding[nd + i] for i in range(nd)))
    for k in itertools.product(*(range(b) for b in block_shape)):
        at = tuple(slice(k[i] * dilation[i], k[i] * dilation[i] + strides[i] * (grid[i] - 1) + 1, strides[i])
                   for i in range(nd))
        canvas[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + k]
    crop = tuple(slice(padding[i], padding[i] + image_shape[i]) for i in range(nd))
    return canvas[(slice(None), slice(None)) + crop].astype(x.dtype)


register_op(OpDef("nn.col2im", _type, _reference, OpPattern.OUT_ELEMWISE_FUSABLE, _compute, WINDOW))
