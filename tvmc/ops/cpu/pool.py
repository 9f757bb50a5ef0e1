"""x86 schedule for pooling: padded input materialized once, windows reduced per output row with
the output width vectorized (when it fits a vector), (n, c) rows in parallel."""

from __future__ import annotations

from tvmc.ops.cpu.injective import schedule_elementwise_loops
from tvmc.ops.cpu.tiling import schedule_tiled_reduction


def schedule_pool(s, out, anchor, cfg, target):
    """Schedule a fused pool (the reduction stage under `anchor`) + elementwise epilogue."""
    red = anchor if anchor.op.reduce_axis else next(t for t in anchor.op.input_tensors()
                                                     if t.op is not None and t.op.reduce_axis)
    pad = next((t for t in red.op.input_tensors() if t.op is not None), None)
    if pad is not None:
        schedule_elementwise_loops(s, pad, target)
    ow = out.shape[3]
    lanes = target.vector_lanes(out.dtype)
    tile_w = max(f for f in range(1, min(ow, lanes) + 1) if ow % f == 0)
    schedule_tiled_reduction(s, out, red, tiles={3: tile_w}, vector_axis=3, parallel_depth=2, target=target,
                             keep=[pad] if pad is not None else ())
