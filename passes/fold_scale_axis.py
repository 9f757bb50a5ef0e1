"""Graph pass FoldScaleAxis: fold per-output-channel constant scales into conv2d / dense weights."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite, users
from tvmc.ops.registry import make_call
from tvmc.te.expr import is_float
from tvmc.passes.pass_infra import graph_pass

# anchor op -> axis of its output indexed by the weight's axis 0 (output channels / units)
_CHANNEL_AXIS = {"nn.conv2d": 1, "nn.dense": 1}


def _channel_scale(c: Expr, out: Expr, axis: int):
    """The per-channel vector [C] of a Constant `c` that broadcasts along `axis` of `out` without
    enlarging it ([C,1,1] or [1,C,1,1] for NCHW, [N] or [1,N] for dense, or a scalar); else None."""
    if not isinstance(c, Constant) or c.dtype != out.dtype or len(c.shape) > len(out.shape):
        return None
    shape = (1,) * (len(out.shape) - len(c.shape)) + tuple(c.shape)
    channels = out.shape[axis]
    if any(d != 1 for k, d in enumerate(shape) if k != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(c.value.reshape(shape[axis]), (channels,))


def _scaled(c: Constant, scale: np.ndarray, shape: tuple) -> Constant:
    """Constant c * scale (scale reshaped to `shape`, numpy broadcasting), computed in float64 and
    rounded once to c's dtype, named after c."""
    value = c.value.astype(np.float64) * scale.astype(np.float64).reshape(shape)
    return Constant(np.ascontiguousarray(value.astype(c.dtype)), f"{c.name or 'const'}_scaled")


def _single_use(e: Expr, uses: dict, outputs: set) -> bool:
    return isinstance(e, Call) and e not in outputs and len(uses[e]) == 1


def _match(mul: Call, uses: dict, outputs: set):
    """For mul = multiply(anchor(x, W) [+ b], s) with a foldable s: (index of the producer in
    mul.inputs, index of the anchor in the add's inputs or None, per-channel scale [C], bias
    Constant or None); else None."""
    for k in (0, 1):
        producer, factor = mul.inputs[k], mul.inputs[1 - k]
        if not _single_use(producer, uses, outputs):
            continue
        anchor, k_anchor, bias = producer, None, None
        if producer.op == "add":            # (x W + b) s = x (W s) + b s
            k_anchor = 1 if isinstance(producer.inputs[0], Constant) else 0
            anchor, bias = producer.inputs[k_anchor], producer.inputs[1 - k_anchor]
            if not isinstance(bias, Constant) or not _single_use(anchor, uses, outputs) \
                    or producer.type != anchor.type:
                continue
        if anchor.op not in _CHANNEL_AXIS or mul.type != anchor.type \
                or not isinstance(anchor.inputs[1], Constant) or not is_float(anchor.dtype):
            continue
        scale = _channel_scale(factor, anchor, _CHANNEL_AXIS[anchor.op])
        if scale is not None:
            return k, k_anchor, scale, bias
    return None


def _fold(mul: Call, new_inputs: tuple, match) -> Call:
    """The folded replacement of `mul`, built over its rewritten inputs (the anchor and the add
    keep their structure: this pass replaces multiplies only)."""
    k, k_anchor, scale, bias = match
    producer = new_inputs[k]
    anchor = producer if k_anchor is None else producer.inputs[k_anchor]
    weight = anchor.inputs[1]
    new_weight = _scaled(weight, scale, (-1,) + (1,) * (len(weight.shape) - 1))
    folded = Call(anchor.op, [anchor.inputs[0], new_weight] + list(anchor.inputs[2:]), anchor.attrs,
                  anchor.type, anchor.name)
    if bias is None:
        return folded
    axis = _CHANNEL_AXIS[anchor.op]
    channel_shape = tuple(d if a == axis else 1 for a, d in enumerate(anchor.shape))
    new_bias = _scaled(bias, scale, channel_shape)
    inputs = [folded, new_bias] if k_anchor == 0 else [new_bias, folded]
    return make_call("add", inputs, name=producer.name)


@graph_pass("FoldScaleAxis", opt_level=3)
def fold_scale_axis(graph: Graph, ctx) -> Graph:
    """Fold a constant per-output-channel scale into the weights of the conv2d / dense before it
    (TVM's relay.transform.FoldScaleAxis, forward direction only).

        multiply(nn.conv2d(x, W), s)           -> nn.conv2d(x, W * s[o])        s: [C,1,1], [1,C,1,1], scalar
        multiply(add(nn.conv2d(x, W), b), s)   -> add(nn.conv2d(x, W * s[o]), b * s)
        multiply(nn.dense(x, W), s)            -> nn.dense(x, W * s[n])         s: [N], [1,N], scalar

    (either operand order). W[o] is the weight's output-channel slice (OIHW for conv2d, any
    groups; [N,K] for dense). Applies when W, s (and b) are Constants of the anchor's floating
    dtype, the product keeps the anchor's type, and each intermediate has one user and is not a
    graph output. New weights are computed here in float64 and rounded once, named
    `<weight>_scaled`, so no FoldConstant run is needed afterwards. This makes a batch norm
    after a conv free once SimplifyInference has turned it into multiply + add: the add
    remains as a bias that FuseOps fuses into the conv. Runs until no multiply folds (chains
    of scales fold one per round).
    """
    while True:
        graph, folded = _fold_round(graph)
        if not folded:
            return graph


def _fold_round(graph: Graph) -> tuple[Graph, int]:
    """One round of fold_scale_axis: the graph with every multiply that matches folded, and how many."""
    uses, outputs = users(graph), set(graph.outputs)
    folded = 0

    def fn(e: Expr, new_inputs: tuple):
        nonlocal folded
        if not isinstance(e, Call) or e.op != "multiply":
            return None
        match = _match(e, uses, outputs)
        if match is None:
            return None
        folded += 1
        return _fold(e, new_inputs, match)

    return rewrite(graph, fn), folded
