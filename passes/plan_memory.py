"""Graph pass PlanMemory: assign storage ids to tensors, reusing dead intermediates' buffers."""

from __future__ import annotations

from collections import Counter

from tvmc.errors import PassError
from tvmc.graph.ir import Call, Graph
from tvmc.passes.pass_infra import graph_pass


def _aligned(nbytes: int, alignment: int) -> int:
    """Bytes rounded up to `alignment`; at least one aligned block so every storage has an address."""
    return max(alignment, -(-nbytes // alignment) * alignment)


class _Storages:
    """Storage table: bytes and dtype per storage id, and the free list used for reuse."""

    def __init__(self):
        self.nbytes, self.dtype, self.free = [], [], []

    def new(self, nbytes: int, dtype: str) -> int:
        self.nbytes.append(nbytes)
        self.dtype.append(dtype)
        return len(self.nbytes) - 1

    def reuse(self, nbytes: int, dtype: str) -> int:
        """Best fit among free storages of `dtype`: the smallest one that is large enough, else
        the largest one, grown to `nbytes`; a new storage when none is free."""
        cands = [s for s in self.free if self.dtype[s] == dtype]
        if not cands:
            return self.new(nbytes, dtype)
        fitting = [s for s in cands if self.nbytes[s] >= nbytes]
        sid = min(fitting, key=lambda s: (self.nbytes[s], s)) if fitting \
            else max(cands, key=lambda s: (self.nbytes[s], -s))
        self.free.remove(sid)
        self.nbytes[sid] = max(self.nbytes[sid], nbytes)
        return sid


@graph_pass("PlanMemory", opt_level=1, required=("FuseOps",), options={"alignment_bytes": 64})
def plan_memory(graph: Graph, ctx) -> Graph:
    """Liveness-based storage planning over the topological order of the fused graph (TVM's
    GraphPlanMemory / StorageAllocator).

    Every graph input, Constant and Call output gets a storage id. Each intermediate Call
    output takes the best-fitting free storage of its dtype (grown if needed) or a new one; a
    storage becomes free once the last user of its tensor has run (the output is allocated
    before the inputs are released: kernels are not in place). Graph inputs, constants and
    graph outputs get storages of their own, never shared. With the pass gated off (opt level
    0 or disabled) every tensor gets its own storage. Sizes are bytes rounded up to
    `alignment_bytes` (64).

    Returns a new Graph (same nodes) with meta:
      storage_id:      {Expr: sid} for every graph input and reachable Var, Constant, Call
      storage_bytes:   [bytes per sid]
      planned_bytes:   bytes of the storages holding intermediate (non-output) Call outputs
      unplanned_bytes: bytes of all intermediate Call outputs, one storage each
    Raises PassError on a bad alignment option.
    """
    alignment = ctx.option("PlanMemory", "alignment_bytes")
    if alignment < 1:
        raise PassError(f"PlanMemory.alignment_bytes must be >= 1, got {alignment}")
    reuse = ctx.is_enabled("PlanMemory")
    order = graph.topo()
    outputs = set(graph.outputs)
    pending = Counter(i for e in order if isinstance(e, Call) for i in e.inputs)

    table = _Storages()
    sid_of: dict = {}
    for e in list(graph.inputs) + order:
        if e in sid_of:
            continue
        size = _aligned(e.type.nbytes, alignment)
        intermediate = isinstance(e, Call) and e not in outputs
        sid_of[e] = table.reuse(size, e.dtype) if (intermediate and reuse) else table.new(size, e.dtype)
        if not isinstance(e, Call):
            continue
        for i in e.inputs:
            pending[i] -= 1
            if pending[i] == 0 and reuse and isinstance(i, Call) and i not in outputs:
                table.free.append(sid_of[i])

    intermediates = [e for e in order if isinstance(e, Call) and e not in outputs]
    meta = dict(graph.meta)
    meta["storage_id"] = sid_of
    meta["storage_bytes"] = list(table.nbytes)
    meta["planned_bytes"] = sum(table.nbytes[s] for s in {sid_of[e] for e in intermediates})
    meta["unplanned_bytes"] = sum(_aligned(e.type.nbytes, alignment) for e in intermediates)
    return Graph(graph.inputs, graph.outputs, graph.output_names, meta)
