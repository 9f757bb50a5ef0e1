"""GPU schedule for det (tvmc/ops/linalg.py): one matrix per thread."""

from __future__ import annotations

from tvmc.ops.gpu.tiling import bind_threads


def schedule_det_per_thread(s, out, anchor, cfg, target):
    """One output element (one matrix) per thread, `num_threads` per block: every elimination
    stage computed by that thread in local memory, in order, at its thread loop (the stages
    form a chain, bounded per matrix by the lowering's sibling bound inference). A rank-0
    output (one matrix) is computed by the kernel's one thread."""
    tx = bind_threads(s, out, cfg["num_threads"])
    for st in s.stages:
        if st.tensor.uid != out.uid:
            st.set_scope("local")
            if tx is not None:
                st.compute_at(s[out], tx)
