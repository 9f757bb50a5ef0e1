"""Graph pass DeadCodeElimination: drop unused calls and calls that return their input unchanged."""

from __future__ import annotations

from tvmc.graph.ir import Call, Expr, Graph, rewrite
from tvmc.passes.pass_infra import graph_pass

_ALWAYS_IDENTITY = ("nn.dropout", "identity")


def is_identity_call(call: Call) -> bool:
    """True when `call` returns its (single) input unchanged: nn.dropout and identity (inference
    semantics), reshape to the input's shape, transpose with axes (0, 1, ..., n-1), cast to the
    input's dtype."""
    if not isinstance(call.op, str):
        return False
    if call.op in _ALWAYS_IDENTITY:
        return True
    if call.op not in ("reshape", "transpose", "cast"):
        return False
    (x,) = call.inputs
    if call.op == "transpose":
        return tuple(call.attrs["axes"]) == tuple(range(len(x.shape)))
    return call.type == x.type          # reshape keeps the shape / cast keeps the dtype


@graph_pass("DeadCodeElimination", opt_level=1)
def dead_code_elimination(graph: Graph, ctx) -> Graph:
    """Remove what does not contribute to the outputs (TVM's relay.transform.DeadCodeElimination).

    The graph IR is a DAG rooted at the outputs, so calls whose results nobody uses after other
    rewrites (a folded-away branch, a merged duplicate) disappear when the graph is rebuilt from
    its outputs. On top of that, calls that return their input unchanged (see is_identity_call)
    are replaced by their input, except a graph output whose input is a graph input or a
    Constant (the output keeps its own copy; FuseOps would add one anyway). Graph.inputs are
    kept as they are, used or not: they are the model's interface.
    """
    outputs = set(graph.outputs)

    def fn(e: Expr, new_inputs: tuple):
        if isinstance(e, Call) and is_identity_call(e):
            if e in outputs and not isinstance(new_inputs[0], Call):
                return None
            return new_inputs[0]
        return None

    return rewrite(graph, fn)
