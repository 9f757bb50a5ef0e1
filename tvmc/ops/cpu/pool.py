"""x86 schedule for pooling: padded input materialized once, windows reduced per output row with
the output width vectorized (when it fits a vector), (n, c) rows in parallel."""

from __future__ import annotations

from tvmc.ops.cpu.tiling import schedule_window_reduction


def schedule_pool(s, out, anchor, cfg, target):
    """Schedule a fused pool (the reduction stage under `anchor`) + elementwise epilogue."""
    red = anchor if anchor.op.reduce_axis else next(t for t in anchor.op.input_tensors()
                                                     if t.op is not None and t.op.reduce_axis)
    schedule_window_reduction(s, out, red, target)
