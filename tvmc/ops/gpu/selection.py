"""GPU schedule for the selection operators (tvmc/ops/dynamic.py: NonZero, Compress, Unique,
NonMaxSuppression, TopK with a run-time k): every thread computes the whole chain of reductions
once, in order, then its output element.

Their stages are chains of reductions over the whole input (prefix counts, ranks, a greedy
suppression), each read in full by the next: the per-thread schedule, which computes a reduction
where it is read, would recompute the chain for every element of every reader (or cannot place
it at all). Here each reduction stage is computed whole, in local memory, at the output's thread
loop, producers first: the work is redundant across threads but each thread does it once, which
suits the small inputs (index sets, detection heads) these operators see. Knob: num_threads
(generic_config).
"""

from __future__ import annotations

from tvmc.ops.cpu.injective import inline_injective
from tvmc.ops.gpu.tiling import bind_threads


def schedule_sequential(s, out, anchor, cfg, target):
    """One output element per thread; before it, every reduction stage whole, in topological order."""
    reductions = [st.tensor for st in s.stages if st.op.reduce_axis and st.tensor.uid != out.uid]
    inline_injective(s, out, keep=reductions)
    tx = bind_threads(s, out, cfg["num_threads"])
    for t in reductions:
        s[t].set_scope("local")
        if tx is not None:  # else a rank-0 output with no loop: the one thread computes them first
            s[t].compute_at(s[out], tx)
