"""Operators: control flow kept as a graph node, `control.loop` (a run-time Loop, see LoopBody).

`control.loop(M, cond, v_initial..., captured...; body, index)`: ONNX Loop semantics, with the
carried values of static types: while i < M and cond, run the body on (i, cond, v..., captured...)
and take its (cond, v...) as the next ones; the call gives final carried value `index`. It has no
compute: the executors interpret it (mod.json node `tvmc_loop`, docs/dynamic_shapes.md), running
the body's own kernels per iteration. The reference below runs the body with the test-only graph
interpreter (constant folding and pass tests).
"""

from __future__ import annotations

import numpy as np

from tvmc.ops.registry import OpDef, OpPattern, register_op


def _loop_type(in_types, attrs):
    body = attrs["body"]
    k = int(attrs["index"])
    if not 0 <= k < body.num_carried:
        raise ValueError(f"index {k} out of the {body.num_carried} carried values")
    return body.graph.inputs[2 + k].type


def _loop_reference(trip, cond, *rest, body, index):
    from tvmc.ops.interpreter import run_graph

    carried, captured = list(rest[:body.num_carried]), list(rest[body.num_carried:])
    names = [v.name for v in body.graph.inputs]
    i, go = 0, bool(cond)
    while i < int(trip) and go:
        outs = run_graph(body.graph, dict(zip(names, [np.array(i, np.int64), np.array(go)] + carried + captured)))
        go, carried = bool(outs[0]), outs[1:]
        i += 1
    return np.asarray(carried[index])


register_op(OpDef("control.loop", _loop_type, _loop_reference, OpPattern.OPAQUE))

# Operators that no kernel computes: FuseOps leaves them alone and the executors interpret them.
INTERPRETED = frozenset({"control.loop"})
