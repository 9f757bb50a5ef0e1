"""Graph pass EliminateCommonSubexpr: merge calls and small constants that compute the same value."""

from __future__ import annotations

import hashlib

from tvmc.graph.ir import Call, Constant, Function, Graph, rewrite
from tvmc.passes.pass_infra import graph_pass

# Constants up to this size are compared by value; larger ones (weights) only by identity,
# so the pass never hashes megabytes of parameters.
_MAX_CONSTANT_BYTES = 1 << 20


def _freeze(v):
    """Hashable, type-exact form of an attribute value (1, 1.0 and True stay distinct)."""
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return (type(v).__name__, v)


def _call_key(call: Call, inputs: tuple):
    op = ("fn", id(call.op)) if isinstance(call.op, Function) else ("op", call.op)
    attrs = tuple(sorted((k, _freeze(v)) for k, v in call.attrs.items()))
    return op, attrs, tuple(id(i) for i in inputs), call.type


def _constant_key(c: Constant):
    value = c.value
    digest = hashlib.sha256(value.tobytes()).hexdigest()
    return value.dtype.str, tuple(value.shape), digest


@graph_pass("EliminateCommonSubexpr", opt_level=2)
def eliminate_common_subexpr(graph: Graph, ctx) -> Graph:
    """Merge expressions that compute the same value (TVM's relay.transform.EliminateCommonSubexpr;
    opt level 3 in TVM, 2 here).

    Two Calls merge when they have the same op (operator name, or the same fused Function
    object), equal attrs (compared with their python types) and the same input objects, after
    their inputs have been merged; the first in topological order is kept. Constants of at most
    1 MiB merge when dtype, shape and bytes are equal (so -0.0 and 0.0, or NaNs with different
    payloads, stay apart); larger constants are left alone. Graph inputs are never merged.
    Graph outputs may end up as the same Call; FuseOps copies such duplicates.
    """
    seen: dict = {}     # key -> first Expr; input ids in keys stay valid: rewrite's memo holds them

    def fn(e, new_inputs):
        if isinstance(e, Constant):
            if e.value.nbytes > _MAX_CONSTANT_BYTES:
                return None
            key = ("const",) + _constant_key(e)
        elif isinstance(e, Call):
            key = ("call",) + _call_key(e, new_inputs)
        else:
            return None
        first = seen.get(key)
        if first is not None:
            return first
        if isinstance(e, Call) and any(a is not b for a, b in zip(new_inputs, e.inputs)):
            e = Call(e.op, new_inputs, e.attrs, e.type, e.name)
        seen[key] = e
        return e

    return rewrite(graph, fn)
