"""x86 schedule for NCHW conv2d_transpose: the stride-dilated, padded input is materialized once,
then the convolution with the flipped kernel runs as conv2d_nchw.x86 does (register tiles over
oc x ow, epilogue on the tile). Knobs and fallback as conv2d_nchw (tile_oc, tile_ow)."""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.conv2d import schedule_conv2d_nchw


def conv2d_transpose_nchw_config(workload, target) -> ConfigSpace:
    """Config space for workload (data shape, weight [C, O/groups, KH, KW], out shape, ...)."""
    (_, oc, _, ow) = workload[2]
    lanes = target.vector_lanes("float32")
    space = ConfigSpace()
    space.define_split("tile_ow", ow, fallback=lanes, max_factor=4 * lanes)
    space.define_split("tile_oc", oc, fallback=max(1, target.num_vector_registers // 4), max_factor=32)
    return space


def schedule_conv2d_transpose_nchw(s, out, anchor, cfg, target):
    """The anchor's first producer is the dilated input (kept, elementwise loops); the flipped
    weight view is inlined into the accumulator."""
    schedule_conv2d_nchw(s, out, anchor, cfg, target)
