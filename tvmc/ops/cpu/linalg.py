"""x86 (CPU family) schedule for det (tvmc/ops/linalg.py): every elimination stage materialized at
root, each over the whole batch, the batch axes fused in parallel when the stage is large enough."""

from __future__ import annotations

import math


def schedule_det(s, out, anchor, cfg, target, min_parallel_elems: int = 4096):
    """Stages at root in order (pivot search, row swap and elimination, per step; then the
    diagonal product and the sign); the leading batch axes of each stage fused, parallel when
    the stage holds at least `min_parallel_elems` elements (as injective loops do)."""
    n_batch = len(out.shape)
    for st in s.stages:
        batch = list(st.op.axis[:n_batch])
        if batch and math.prod(st.tensor.shape) >= min_parallel_elems:
            st.parallel(st.fuse(*batch) if len(batch) > 1 else batch[0])
