"""Graph pass SimplifyExpr: algebraic rewrites of reshapes, transposes, casts and no-op arithmetic,
and elementwise ops moved below reshapes."""

from __future__ import annotations

import numpy as np

from tvmc.graph.ir import Call, Constant, Expr, Graph, rewrite
from tvmc.ops.registry import make_call
from tvmc.passes.dead_code_elimination import is_identity_call
from tvmc.passes.pass_infra import graph_pass

# op -> (neutral element, may the constant be the left operand?)
_NEUTRAL = {"add": (0, True), "subtract": (0, False), "multiply": (1, True), "divide": (1, False)}


def _is_op(e: Expr, op: str) -> bool:
    return isinstance(e, Call) and e.op == op


def _neutral_operand(call: Call, inputs: tuple):
    """For x (+ - * /) c with c a Constant of neutral elements that does not broadcast x to a
    larger shape, return x; else None."""
    neutral, commutes = _NEUTRAL[call.op]
    a, b = inputs
    for x, c in ((a, b), (b, a)) if commutes else ((a, b),):
        if isinstance(c, Constant) and x.type == call.type and np.all(c.value == neutral):
            return x
    return None


def _collapse(call: Call, inputs: tuple):
    """reshape(reshape(x)) / transpose(transpose(x)) as one call on x, or None."""
    if call.op == "reshape" and _is_op(inputs[0], "reshape"):
        return Call("reshape", [inputs[0].inputs[0]], call.attrs, call.type, call.name)
    if call.op == "transpose" and _is_op(inputs[0], "transpose"):
        inner_axes, outer_axes = inputs[0].attrs["axes"], call.attrs["axes"]
        axes = tuple(int(inner_axes[a]) for a in outer_axes)
        return make_call("transpose", [inputs[0].inputs[0]], {"axes": axes}, name=call.name)
    return None


def _passthrough(call: Call, inputs: tuple):
    """The operand that `call` returns unchanged (no-op reshape/transpose/cast, arithmetic with
    a neutral constant), or None."""
    if call.op in ("reshape", "transpose", "cast") and is_identity_call(call):
        return inputs[0]
    if call.op in _NEUTRAL:
        return _neutral_operand(call, inputs)
    return None


def _unreshaped_constant(c: Constant, shape: tuple, inner_shape: tuple):
    """`c` (broadcast against `shape`) as a Constant that broadcasts the same way against
    `inner_shape`, the shape before a reshape to `shape`; None unless `c` is a scalar or varies
    along the last axis only, which both shapes share."""
    v = c.value
    if v.size == 1:
        return Constant(v.reshape(()), c.name)
    if v.ndim == 0 or v.ndim > len(shape) or shape[-1] != inner_shape[-1] or v.shape[-1] != shape[-1]:
        return None
    if any(d != 1 for d in v.shape[:-1]):
        return None
    return Constant(np.ascontiguousarray(v.reshape(-1)), c.name)


def _sink_reshape(call: Call, inputs: tuple):
    """f(reshape(x)) -> reshape(f(x)) for elementwise f, so that f fuses into x's producer (e.g.
    the bias add and GELU after a dense that a rank-3 MatMul reshapes back); None when no rule
    applies. Rules: unary elementwise f (a cast included: the int32 product of a quantized dense
    then takes its dequantize and what follows as its epilogue); binary broadcast f whose other
    operand is a scalar (a Constant, or computed: a dynamic quantization's scale), a Constant
    that varies along the last axis only (kept by the reshape), a reshape of a tensor of x's
    shape, or any tensor of the output's shape (reshaped to x's shape)."""
    from tvmc.ops.registry import OpPattern, get_op

    if not any(_is_op(i, "reshape") for i in inputs):
        return None
    pattern = get_op(call.op).pattern
    if pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
        return None
    shape = tuple(call.shape)
    r = next(i for i in inputs if _is_op(i, "reshape"))
    x = r.inputs[0]
    if not isinstance(x, Call) or tuple(r.shape) != shape:
        return None  # (an input or constant has no producer kernel to take f as its epilogue)
    inner = tuple(x.shape)
    new_inputs = []
    for i in inputs:
        if i is r:
            new_inputs.append(x)
        elif _is_op(i, "reshape") and tuple(i.shape) == shape and tuple(i.inputs[0].shape) == inner:
            new_inputs.append(i.inputs[0])
        elif tuple(i.shape) == ():
            new_inputs.append(i)  # a scalar broadcasts alike on either side of the reshape
        elif isinstance(i, Constant):
            c = _unreshaped_constant(i, shape, inner)
            if c is None:
                return None
            new_inputs.append(c)
        elif tuple(i.shape) == shape:
            new_inputs.append(make_call("reshape", [i], {"newshape": inner}))
        else:
            return None
    if not (pattern == OpPattern.ELEMWISE or len(inputs) == 2):
        return None
    inner_call = make_call(call.op, new_inputs, call.attrs, name=call.name)
    if tuple(inner_call.shape) != inner:
        return None
    return make_call("reshape", [inner_call], {"newshape": shape})


@graph_pass("SimplifyExpr", opt_level=2)
def simplify_expr(graph: Graph, ctx) -> Graph:
    """Algebraic simplification (TVM's relay.transform.SimplifyExpr: SimplifyReshape,
    SimplifyTranspose, SimplifyNoOpTranspose, SimplifyCast, EliminateIdentity).

    - reshape(reshape(x, s1), s2) -> reshape(x, s2), or x when s2 is x's shape;
    - transpose(transpose(x, a1), a2) -> transpose(x, a) with a[k] = a1[a2[k]], or x when a is
      the identity permutation;
    - reshape to the same shape, transpose with axes (0, ..., n-1), cast to the same dtype -> x;
    - x * 1, 1 * x, x / 1, x + 0, 0 + x, x - 0 -> x, where the Constant is all ones / zeros
      and the result has x's type (the constant does not broadcast x to a larger shape).
      Like TVM, x + 0 -> x keeps -0.0 where IEEE addition would give +0.0.

    - f(reshape(x)) -> reshape(f(x)) for elementwise f when x is computed by a call (see
      _sink_reshape): the ops after a dense that a rank-3 MatMul reshapes back (bias, GELU,
      residual add) then fuse into the dense as its epilogue.

    Rewrites are bottom-up, so chains (three reshapes, transpose pairs that cancel) collapse
    in one run. A graph output is not replaced by a graph input or a Constant (a chain there
    still collapses to one call).
    """
    outputs = set(graph.outputs)

    def fn(e: Expr, new_inputs: tuple):
        if not isinstance(e, Call) or not isinstance(e.op, str):
            return None
        collapsed = _collapse(e, new_inputs)
        x = _passthrough(e, new_inputs) if collapsed is None else _passthrough(collapsed, collapsed.inputs)
        if x is not None and (isinstance(x, Call) or e not in outputs):
            return x
        if collapsed is None:
            return _sink_reshape(e, new_inputs)
        return collapsed

    return rewrite(graph, fn)
