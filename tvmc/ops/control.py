"""Operators: control flow kept as a graph node, `control.loop` (a run-time Loop, see LoopBody).

`control.loop(M, cond, v_initial..., captured...; body, index)`: ONNX Loop semantics, with the
carried values of static types: while i < M and cond, run the body on (i, cond, v..., captured...)
and take its (cond, v...) as the next ones; the call gives final carried value `index`, or for
an index past the carried values the body's scan output stacked over the iterations (its first
axis attrs["length"], the trip count: a symbolic one bounds a loop over a sequence). It has no
compute: the executors interpret it (mod.json node `tvmc_loop`, docs/dynamic_shapes.md), running
the body's own kernels per iteration. The reference below runs the body with the test-only graph
interpreter (constant folding and pass tests).
"""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import TensorType
from tvmc.ops.registry import OpDef, OpPattern, register_op


def _loop_type(in_types, attrs):
    """A final carried value (index < num_carried): its input's type; a scan output: the body's
    per-iteration type with the axis attrs["length"] (the trip count) in front."""
    body = attrs["body"]
    k = int(attrs["index"])
    n = body.num_carried
    if not 0 <= k < n + body.num_scan:
        raise ValueError(f"index {k} out of the {n} carried values and {body.num_scan} scan outputs")
    if k < n:
        return body.graph.inputs[2 + k].type
    if "length" not in attrs:
        raise ValueError("a scan output needs attrs['length'], the trip count")
    per = body.graph.outputs[1 + k].type
    return TensorType((attrs["length"],) + tuple(per.shape), per.dtype)


def _loop_reference(trip, cond, *rest, body, index, length=None):
    from tvmc.ops.interpreter import run_graph

    n = body.num_carried
    carried, captured = list(rest[:n]), list(rest[n:])
    names = [v.name for v in body.graph.inputs]
    i, go, scans = 0, bool(cond), []
    while i < int(trip) and go:
        outs = run_graph(body.graph, dict(zip(names, [np.array(i, np.int64), np.array(go)] + carried + captured)))
        go, carried = bool(outs[0]), outs[1:1 + n]
        scans.append(outs[1 + n:])
        i += 1
    if index < n:
        return np.asarray(carried[index])
    return np.stack([np.asarray(s[index - n]) for s in scans])


register_op(OpDef("control.loop", _loop_type, _loop_reference, OpPattern.OPAQUE))

# Operators that no kernel computes: FuseOps leaves them alone and the executors interpret them.
INTERPRETED = frozenset({"control.loop"})
