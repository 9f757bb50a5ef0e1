"""Graph pass SimplifyInference: lower inference-only ops (batch norm, dropout, identity)."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Graph, rewrite
from tvmc.ops.registry import make_call
from tvmc.passes.pass_infra import graph_pass

_REMOVED = ("nn.dropout", "identity")


def _broadcast_shape(channels: int, axis: int, rank: int) -> tuple:
    """Shape that broadcasts a per-channel vector along `axis` of a rank-`rank` tensor: [C,1,1] for NCHW."""
    return (channels,) + (1,) * (rank - axis - 1)


def _lower_batch_norm(call: Call, inputs: tuple):
    data, gamma, beta, mean, var = inputs
    eps = float(call.attrs.get("epsilon", 1e-5))
    axis = int(call.attrs.get("axis", 1))
    rank = len(data.shape)
    axis = axis + rank if axis < 0 else axis
    shape = _broadcast_shape(int(data.shape[axis]), axis, rank)
    base = call.name or "batch_norm"
    dtype = np.dtype(data.dtype)
    if all(isinstance(x, Constant) for x in (gamma, beta, mean, var)):
        g, b, m, v = (x.value.astype(np.float64) for x in (gamma, beta, mean, var))
        scale_v = g / np.sqrt(v + eps)
        shift_v = b - m * scale_v
        scale = Constant(scale_v.astype(dtype).reshape(shape), f"{base}_scale")
        shift = Constant(shift_v.astype(dtype).reshape(shape), f"{base}_shift")
    else:
        # Emitted as ops; FoldConstant evaluates whatever turns out constant.
        std = make_call("sqrt", [make_call("add", [var, Constant(np.array(eps, dtype), f"{base}_eps")])])
        scale = make_call("divide", [gamma, std], name=f"{base}_scale")
        shift = make_call("subtract", [beta, make_call("multiply", [mean, scale])], name=f"{base}_shift")
        if shape != tuple(scale.shape):
            scale = make_call("reshape", [scale], {"newshape": shape}, name=f"{base}_scale")
            shift = make_call("reshape", [shift], {"newshape": shape}, name=f"{base}_shift")
    scaled = make_call("multiply", [data, scale], name=f"{base}_mul")
    return make_call("add", [scaled, shift], name=call.name)


@graph_pass("SimplifyInference", opt_level=0)
def simplify_inference(graph: Graph, ctx) -> Graph:
    """Rewrite inference-time ops into plain arithmetic (TVM's relay.transform.SimplifyInference).

    nn.batch_norm(x, gamma, beta, mean, var; epsilon, axis) -> x * scale + shift with
    scale = gamma / sqrt(var + epsilon), shift = beta - mean * scale, both reshaped to
    [C, 1, ..., 1] so they broadcast along `axis` ([C,1,1] for axis=1 of NCHW). With constant
    statistics scale/shift are computed here (float64, cast to x's dtype) as Constants named
    after the node; otherwise they are emitted as ops for FoldConstant. nn.dropout and identity
    are removed (their input replaces them).
    """

    def fn(e, new_inputs):
        if not isinstance(e, Call) or not isinstance(e.op, str):
            return None
        if e.op in _REMOVED:
            return new_inputs[0]
        if e.op == "nn.batch_norm":
            return _lower_batch_norm(e, new_inputs)
        return None

    return rewrite(graph, fn)
