"""Graph pass FoldConstant: evaluate calls on constants at compile time."""

from __future__ import annotations

import numpy as np

from tvmc.errors import PassError
from tvmc.graph import ir
from tvmc.graph.ir import Call, Constant, Graph, constant_bytes, rewrite
from tvmc.ops.registry import get_op
from tvmc.passes.pass_infra import graph_pass


def _evaluate(call: Call, inputs: tuple) -> Constant:
    value = get_op(call.op).reference(*(c.value for c in inputs), **call.attrs)
    value = np.asarray(value)
    if tuple(value.shape) != tuple(call.shape):
        raise PassError(f"FoldConstant: reference of {call.op} at node '{call.name or '?'}' returned shape "
                        f"{list(value.shape)}, its type says {list(call.shape)}")
    name = call.name or call.op.replace(".", "_")
    return Constant(np.require(value.astype(call.dtype, copy=False), requirements="C"), name)  # keeps 0-d shapes


@graph_pass("FoldConstant", opt_level=1)
def fold_constant(graph: Graph, ctx) -> Graph:
    """Replace every operator Call whose inputs are all Constants by a Constant holding its
    value, computed with the op's numpy reference (TVM's relay.transform.FoldConstant).

    Folding is bottom-up, so whole constant subgraphs (e.g. the scale/shift arithmetic that
    SimplifyInference emits for a batch norm with non-literal statistics, or a reshape of a
    weight) collapse to one Constant, named after the node it replaces. The value is cast to
    the call's declared dtype. A call whose value would take more than MAX_CONSTANT_BYTES
    (tvmc.graph.ir; exactly that many bytes are folded) is left to run time, so compile time
    never materializes more; so is a call with a symbolic type or attribute (its value depends on
    the size variables), and a call of an op that is not `foldable` (OpDef: it unpacks compact
    constant storage at run time). Raises PassError when a reference disagrees with the call's shape.
    """

    def fn(e, new_inputs):
        if isinstance(e, Call) and isinstance(e.op, str) and all(isinstance(i, Constant) for i in new_inputs) \
                and get_op(e.op).foldable and not e.is_symbolic \
                and constant_bytes(e.shape, e.dtype) <= ir.MAX_CONSTANT_BYTES:
            return _evaluate(e, new_inputs)
        return None

    return rewrite(graph, fn)
