"""Graph IR reference interpreter (numpy), for tests only. It lives with the operators, whose
numpy references it evaluates (the graph IR itself knows no operator).

It checks that a pass keeps a graph's meaning by evaluating the graph before and after with
each operator's numpy `OpDef.reference`. It never executes compiled models: `tvmc run` uses
the compiled library in mod.tar through tvmc/runtime.
"""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Function, Graph, Var, post_order
from tvmc.ops.registry import get_op


def _check(call: Call, value) -> np.ndarray:
    value = np.asarray(value)
    if tuple(value.shape) != tuple(call.shape) or value.dtype.name != call.dtype:
        raise AssertionError(f"{call.op_name} at node '{call.name or '?'}': reference gave "
                             f"{value.dtype.name}{list(value.shape)}, type rule says {call.type}")
    return value


def _evaluate(outputs, env: dict) -> list:
    for e in post_order(outputs):
        if e in env:
            continue
        if isinstance(e, Constant):
            env[e] = e.value
        elif isinstance(e, Var):
            raise KeyError(f"no value for Var '{e.name}'")
        elif isinstance(e.op, Function):
            env[e] = _check(e, _call_function(e.op, [env[i] for i in e.inputs]))
        else:
            env[e] = _check(e, get_op(e.op).reference(*(env[i] for i in e.inputs), **e.attrs))
    return [env[o] for o in outputs]


def _call_function(func: Function, args: list) -> np.ndarray:
    return _evaluate([func.body], dict(zip(func.params, args)))[0]


def run_graph(graph: Graph, inputs: dict) -> list:
    """Evaluate `graph` on `inputs` ({input name: array of the input's shape and dtype}) with
    the ops' numpy references, recursing into fused Functions. Returns the outputs in order.

    Test-only: it never executes a compiled model. Raises KeyError for a missing input,
    ValueError for a wrongly shaped one, and AssertionError when a reference result
    disagrees with the node's type (shape or dtype).
    """
    env: dict = {}
    for v in graph.inputs:
        if v.name not in inputs:
            raise KeyError(f"missing input '{v.name}'; graph inputs: {[x.name for x in graph.inputs]}")
        value = np.asarray(inputs[v.name]).astype(v.dtype, copy=False)
        if tuple(value.shape) != tuple(v.shape):
            raise ValueError(f"input '{v.name}': shape {list(value.shape)}, graph expects {list(v.shape)}")
        env[v] = value
    return _evaluate(list(graph.outputs), env)
