"""Graph pass GeluFusion: the erf form of GELU, x/2 * (1 + erf(x / sqrt 2)), becomes one nn.gelu."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite
from tvmc.ops.registry import make_call
from tvmc.passes.pass_infra import graph_pass

_RSQRT2 = 1.0 / np.sqrt(2.0)


def _scalar(e: Expr, value: float) -> bool:
    """A Constant holding one element equal to `value` (float32 rounding allowed)."""
    return isinstance(e, Constant) and e.value.size == 1 and np.isclose(float(e.value.reshape(())), value,
                                                                         rtol=1e-6, atol=0)


def _call(e: Expr, op: str) -> bool:
    return isinstance(e, Call) and e.op == op


def _other(call: Call, pred):
    """The operand of a binary `call` that is not matched by `pred`, or None."""
    a, b = call.inputs
    if pred(b):
        return a
    if pred(a):
        return b
    return None


def _erf_arg_of(x: Expr, e: Expr) -> bool:
    """e is x / sqrt(2) or x * (1/sqrt 2)."""
    if _call(e, "divide"):
        return e.inputs[0] is x and _scalar(e.inputs[1], np.sqrt(2.0))
    return _call(e, "multiply") and _other(e, lambda c: _scalar(c, _RSQRT2)) is x


def _match(call: Call):
    """x if `call` is (x * 0.5) * (1 + erf(x / sqrt 2)) in any operand order, else None."""
    if not _call(call, "multiply"):
        return None
    for half, rest in (call.inputs, call.inputs[::-1]):
        if not _call(half, "multiply"):
            continue
        x = _other(half, lambda c: _scalar(c, 0.5))
        if x is None or not _call(rest, "add"):
            continue
        erf = _other(rest, lambda c: _scalar(c, 1.0))
        if _call(erf, "erf") and _erf_arg_of(x, erf.inputs[0]) and call.type == x.type:
            return x
    return None


@graph_pass("GeluFusion", opt_level=2)
def gelu_fusion(graph: Graph, ctx) -> Graph:
    """Replace the exact (erf) GELU subgraph by one elementwise `nn.gelu` (ONNX Runtime's
    GeluFusion). Exporters write GELU as five ops around a diamond on x; as one op it fuses into
    the producing dense/matmul kernel's epilogue, where FuseOps' chains cannot take the diamond.
    The intermediate ops are left for DeadCodeElimination when nothing else uses them."""

    def fn(e: Expr, new_inputs: tuple):
        if not isinstance(e, Call):
            return None
        same = all(a is b for a, b in zip(new_inputs, e.inputs))
        rebuilt = e if same else Call(e.op, new_inputs, e.attrs, e.type, e.name)
        x = _match(rebuilt)
        return make_call("nn.gelu", [x], {}, name=e.name) if x is not None else rebuilt

    return rewrite(graph, fn)
