"""x86 schedules for pooling: windows reduced per output row.

NCHW: the padded input materialized once, the output width vectorized (when it fits a vector),
(n, c) rows in parallel.
NCHW[x]c: the channel block x is the vector (one register per output column), a tile of
`tile_ow` columns unrolled, (n, c_outer, oh) rows in parallel; each tile pads its own input
window into a local buffer (a padded copy of the whole input was an extra pass over memory
that cost as much as the pooling: 64x112x112 3x3/2 max pool 0.41 -> 0.20 ms on one thread). Fallback (no knobs yet):
tile_ow = the largest divisor of OW <= num_vector_registers // 4 (8 with AVX-512's 32 registers:
each column holds an accumulator and a loaded window value); a symbolic OW takes that cap, its
last tile partial (tvmc.tir.partition splits the main loop from the tail).
"""

from __future__ import annotations

from tvmc.ops.cpu.tiling import pad_per_tile, schedule_tiled_reduction, schedule_window_reduction


def schedule_pool(s, out, anchor, cfg, target):
    """Schedule a fused pool (the reduction stage under `anchor`) + elementwise epilogue."""
    red = anchor if anchor.op.reduce_axis else next(t for t in anchor.op.input_tensors()
                                                     if t.op is not None and t.op.reduce_axis)
    if len(red.shape) == 4:
        schedule_window_reduction(s, out, red, target)
        return
    pad = next((t for t in red.op.input_tensors() if t.op is not None), None)
    n, c_chunk, oh, ow, c_block = red.op.axis
    cap = max(1, target.num_vector_registers // 4)
    if isinstance(ow.extent, int):
        tile_ow = max(f for f in range(1, min(ow.extent, cap) + 1) if ow.extent % f == 0)
    else:  # a symbolic width (tvmc.te.extent): full tiles of `cap` columns and a guarded tail
        tile_ow = cap
    schedule_tiled_reduction(s, out, red, tiles={ow: tile_ow, c_block: c_block.extent}, vector_axis=c_block,
                             unroll_axes=(ow,), parallel_depth=3, target=target, keep=[pad] if pad is not None else ())
    if pad is not None:  # each tile pads its own window: no padded copy of the whole input
        pad_per_tile(s, pad)
