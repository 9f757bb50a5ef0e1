"""x86 schedule for NCHW conv2d: an (oc x ow) output tile accumulates in vector registers over
(ic, kh, kw); the padded input is materialized once; epilogue on the tile; tiles run in parallel.

Knobs: tile_oc (output channels per tile, unrolled), tile_ow (output columns per tile, vector
lanes). Fallback: tile_ow = largest divisor of OW <= vector lanes; tile_oc = largest divisor of
OC <= num_vector_registers / 4 (accumulators plus room for inputs and broadcast weights).
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.injective import schedule_elementwise_loops
from tvmc.ops.cpu.tiling import schedule_tiled_reduction


def conv2d_nchw_config(workload, target) -> ConfigSpace:
    """Config space for workload (data shape, weight shape, out shape [N, O, OH, OW], attrs...);
    only the output shape is read, so nn.conv2d_transpose (IOHW weights) shares it."""
    _, oc, _, ow = workload[2]
    lanes = target.vector_lanes("float32")
    space = ConfigSpace()
    space.define_split("tile_ow", ow, fallback=lanes, max_factor=4 * lanes)
    space.define_split("tile_oc", oc, fallback=max(1, target.num_vector_registers // 4), max_factor=32)
    return space


def schedule_conv2d_nchw(s, out, anchor, cfg, target):
    """Schedule a fused conv2d (anchor) + elementwise epilogue (out)."""
    # the padded input by name (conv2d_transpose: dilate_pad_data): qnn.conv2d's anchor also
    # reads its zero points, 0-d stages that are inlined
    pad = next((t for t in anchor.op.input_tensors() if t.op is not None and t.name.endswith("pad_data")), None)
    if pad is not None:
        schedule_elementwise_loops(s, pad, target)
    n, oc, oh, ow = anchor.op.axis
    schedule_tiled_reduction(s, out, anchor, tiles={oc: cfg["tile_oc"], ow: cfg["tile_ow"]},
                             vector_axis=ow, unroll_axes=(oc,), parallel_depth=3, target=target,
                             keep=[pad] if pad is not None else ())
