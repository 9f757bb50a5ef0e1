"""ONNX converters, control-flow group: If, Loop and Scan with their subgraphs converted like the
main graph (outer-scope tensors visible), resolved at compile time.

If with a constant condition imports the taken branch only; with a condition known only at run
time both branches are imported and `where` picks per output (branches have no side effects, so
computing both is the same function; their outputs must agree in shape and dtype). Loop unrolls
a constant trip count, masking the iterations after an exit whose condition is known only at run
time; Scan unrolls over its static scan axes (Scan-8: per element of its batch axis). A Loop
whose trip count is known only at run time (or absent), or whose condition is known only at run
time while it has no scan output, stays a loop: its body becomes a graph of
its own (`control.loop` with a LoopBody, tvmc/ops/control.py), compiled like the main graph into
the same library, and the executors run it (the graph entry on CPUs, tvmc/runtime/control.py in
the Python executors); its carried values must keep static types, and scan outputs, which would
have no bound, are refused (see docs/dynamic_shapes.md).

Unrolling is bounded (docs/limits.md): one model unrolls at most MAX_UNROLLED_NODES nodes of Loop
and Scan bodies (a body's nodes, nested subgraphs included, once per iteration). A Loop with a
constant trip count and no scan output that would unroll more stays a run-time loop; a Loop with
scan outputs, or a Scan, beyond the limit is refused naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx

from tvmc.errors import ModelError
from tvmc.frontend.onnx.common import is_const, norm_axis, reshape
from tvmc.frontend.onnx.registry import converter
from tvmc.graph.ir import Call, Graph, LoopBody, TensorType, Var, post_order, rewrite
from tvmc.ops.registry import make_call

_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)

MAX_UNROLLED_NODES = 1 << 14


def graph_size(graph) -> int:
    """Nodes of an ONNX GraphProto, those of its nested subgraphs (If branches, bodies) included."""
    size = 0
    for node in graph.node:
        size += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                size += graph_size(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                size += sum(graph_size(g) for g in a.graphs)
    return size


def _unroll(ctx, body, iterations: int) -> None:
    """Count `iterations` more copies of `body` against the model's MAX_UNROLLED_NODES; raises
    ModelError naming the node when they would pass it."""
    importer = ctx.importer
    total = getattr(importer, "unrolled_nodes", 0) + max(graph_size(body), 1) * iterations
    if total > MAX_UNROLLED_NODES:
        raise ctx.error(f"unrolling {iterations} more iteration(s) of its body ({graph_size(body)} nodes) would bring "
                        f"the model's unrolled nodes to {total}, more than the limit of {MAX_UNROLLED_NODES} "
                        f"(docs/limits.md)")
    importer.unrolled_nodes = total


_COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
                "logical_or", "logical_xor", "logical_not", "identity", "reshape", "cast")


def _decided(ctx, cond):
    """The value of a run-time If condition when the ranges stated for the graph inputs
    (--value-range) fix it: comparisons and logic over operands whose interval is one value
    (value_range.py); None when the analysis cannot decide it."""
    from tvmc.frontend.onnx.value_range import Unbounded, value_range
    from tvmc.ops.registry import get_op

    def value(e):
        if is_const(e):
            return np.asarray(e.value)
        if isinstance(e, Call) and e.op in _COMPARISONS and e.dtype == "bool":
            args = [value(a) for a in e.inputs]
            return None if any(a is None for a in args) else np.asarray(get_op(e.op).reference(*args, **dict(e.attrs)))
        try:
            lo, hi = value_range(e, ctx.importer.value_ranges, {v: k for k, v in ctx.importer.run_time_shapes.items()})
        except Unbounded:
            return None
        return lo.astype(e.dtype) if np.array_equal(lo, hi) else None

    v = value(cond)
    return None if v is None or v.size != 1 else bool(v.reshape(-1)[0])


@converter(*_VERSIONS)
def If(ctx, node, inputs, attrs, opset):
    """ONNX If(cond; then_branch, else_branch). A condition known at import (a constant, or fixed by
    the --value-range of the graph inputs it is computed from) imports the taken branch only. With
    a run-time condition both branches are imported; one that cannot be imported for these input
    shapes (e.g. a branch for another sample rate reshaping this one's input) is refused naming the
    If and the way to rule it out (--value-range)."""
    cond = inputs[0]
    importer = ctx.importer
    known = bool(np.asarray(cond.value).reshape(-1)[0]) if is_const(cond) else _decided(ctx, cond)
    if known is not None:
        branch = attrs["then_branch"] if known else attrs["else_branch"]
        return tuple(importer.convert_graph(branch, opset, {}, f"If '{ctx.name}'"))
    branches = []
    for key in ("then_branch", "else_branch"):
        try:
            branches.append(importer.convert_graph(attrs[key], opset, {}, f"If '{ctx.name}' {key}"))
        except ModelError as e:
            why = str(e).removeprefix(f"{importer.label}: ")
            raise ctx.error(f"its condition ('{ctx.input_name(0)}') is known only at run time, so both branches are "
                            f"compiled, and its {key} cannot be for these input shapes: {why}; if that branch is "
                            f"never taken, state the inputs' values that rule it out with --value-range NAME=LO:HI") \
                from None
    then, other = branches
    c = reshape(ctx, cond, ())
    outs = []
    for k, (a, b) in enumerate(zip(then, other)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            raise ctx.error(f"output {k}: then_branch gives {a.type}, else_branch {b.type}; a run-time condition "
                            f"needs branches of one type")
        outs.append(ctx.call("where", [c, a, b]))
    return tuple(outs)


def _stack(ctx, slices, axis):
    """Per-iteration values [...] stacked along a new `axis`."""
    parts = [reshape(ctx, s, tuple(s.shape[:axis]) + (1,) + tuple(s.shape[axis:])) for s in slices]
    return parts[0] if len(parts) == 1 else ctx.call("concatenate", parts, {"axis": axis})


@converter(*_VERSIONS)
def Loop(ctx, node, inputs, attrs, opset):
    """ONNX Loop(M, cond, v_initial...; body): unrolled to a constant trip count M; scan outputs
    stacked on axis 0. A constant condition ends the unrolling where it turns false. A condition
    computed at run time (the initial one or the body's) keeps a `running` flag: every iteration
    is computed, the carried values of the iterations after the exit are discarded (`where`), and
    the scan outputs keep the iterations that ran (dyn.head: bounded by M, with a run-time shape;
    docs/dynamic_shapes.md). A trip count computed at run time, or none, and a run-time condition
    with no scan output to stack (a while loop: M often INT64_MAX) stay a loop: _run_time_loop."""
    body = attrs["body"]
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    if not inputs or inputs[0] is None or not is_const(inputs[0]):
        return _run_time_loop(ctx, inputs, body, opset)
    trip = int(np.asarray(ctx.constant(inputs, 0, "M (trip count)")).reshape(-1)[0])
    carried = list(inputs[2:])
    n_carried = len(carried)
    scans: list = [[] for _ in range(len(body.output) - 1 - n_carried)]
    running = True if cond is None else _flag(ctx, cond)
    if not scans and trip > 0 and not isinstance(running, bool):
        return _run_time_loop(ctx, inputs, body, opset)
    if not scans and trip * max(graph_size(body), 1) > MAX_UNROLLED_NODES - getattr(ctx.importer, "unrolled_nodes", 0):
        return _run_time_loop(ctx, inputs, body, opset)  # too long to unroll: a loop at run time
    if scans and cond is None:  # no condition: exactly `trip` iterations, known before unrolling any
        if trip * max(graph_size(body), 1) + getattr(ctx.importer, "unrolled_nodes", 0) > MAX_UNROLLED_NODES:
            _unroll(ctx, body, trip)
    ran = []  # per iteration: a bool flag computed at run time, or True
    names = [i.name for i in body.input]
    for it in range(trip):
        if running is False:
            break
        if not scans and not isinstance(running, bool):  # the body's condition is a run-time value
            return _run_time_loop(ctx, inputs, body, opset)
        _unroll(ctx, body, 1)
        bindings = {names[0]: ctx.const(np.array(it, np.int64), "iteration"),
                    names[1]: ctx.const(np.array(True), "cond")}
        bindings.update(zip(names[2:], carried))
        outs = ctx.importer.convert_graph(body, opset, bindings, f"Loop '{ctx.name}' body")
        new = outs[1:1 + n_carried]
        if running is not True:  # an iteration after the exit keeps the values it was given
            for k, (a, b) in enumerate(zip(new, carried)):
                if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
                    raise ctx.error(f"loop-carried value {k} changes from {b.type} to {a.type}; a run-time "
                                    f"condition needs one type per carried value")
            new = [ctx.call("where", [running, a, b]) for a, b in zip(new, carried)]
        ran.append(running)
        running = _and(ctx, running, _flag(ctx, outs[0]))
        carried = new
        for k, s in enumerate(outs[1 + n_carried:]):
            scans[k].append(s)
    if any(not s for s in scans):
        raise ctx.error("a Loop that runs no iteration has empty scan outputs of unknown shape; not supported")
    stacked = [_stack(ctx, s, 0) for s in scans]
    if any(r is not True for r in ran):  # the scan outputs hold the iterations that ran
        count = None
        for r in ran:
            one = ctx.const(np.array(1, np.int64), "one") if r is True else ctx.call("cast", [r], {"dtype": "int64"})
            count = one if count is None else ctx.call("add", [count, one])
        count = reshape(ctx, count, (1,))
        stacked = [ctx.dynamic_call("dyn.head", [s, count]) for s in stacked]
    return tuple(carried) + tuple(stacked)


def _run_time_loop(ctx, inputs, body, opset):
    """A Loop whose trip count M is computed at run time (or absent): the body becomes a LoopBody
    graph of its own (its inputs bound to fresh Vars; the outer-scope tensors it reads that do not
    depend on them become captured inputs, computed once before the loop) and the Loop one
    `control.loop` call per carried value, interpreted by the executors. Carried values must keep
    one static type; scan outputs (no bound on M) are refused."""
    carried = list(inputs[2:])
    n_carried = len(carried)
    if len(body.output) != 1 + n_carried:
        raise ctx.error(f"trip count M ('{ctx.input_name(0) or 'absent'}') must be a constant when the body has "
                        f"scan outputs ({len(body.output) - 1 - n_carried}): with M known only at run time their "
                        f"length has no bound at compile time")
    if not carried:
        raise ctx.error("a Loop with a run-time trip count and no loop-carried value computes nothing")
    for k, v in enumerate(carried):
        if v.type.is_dynamic:
            raise ctx.error(f"loop-carried value {k} has a run-time shape ({v.type}); a run-time Loop needs "
                            f"static types")
    importer = ctx.importer
    names = [i.name for i in body.input]
    params = [Var(importer.unique_name(f"{ctx.name}:{names[0]}"), TensorType((), "int64")),
              Var(importer.unique_name(f"{ctx.name}:{names[1]}"), TensorType((), "bool"))]
    params += [Var(importer.unique_name(f"{ctx.name}:{n}"), v.type) for n, v in zip(names[2:], carried)]
    outs = importer.convert_graph(body, opset, dict(zip(names, params)), f"Loop '{ctx.name}' body")
    trip = reshape(ctx, inputs[0], ()) if inputs and inputs[0] is not None \
        else ctx.const(np.array(np.iinfo(np.int64).max, np.int64), "M")
    if trip.dtype != "int64":
        raise ctx.error(f"trip count M has dtype {trip.dtype}, expected int64")
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    first = _flag(ctx, cond) if cond is not None else True
    first = ctx.const(np.array(first), "cond") if isinstance(first, bool) else first
    return run_time_loop(ctx, params, outs, trip, first, carried)


def run_time_loop(ctx, params, outs, trip, first, carried, num_scan: int = 0, length=None) -> tuple:
    """`control.loop` calls of a body built by a converter: `params` its Vars (iteration int64,
    condition bool, one per carried value), `outs` its results (condition, next carried values,
    then `num_scan` per-iteration scan values of static shapes), `trip` and `first` the trip count
    (int64 scalar) and initial condition (bool scalar) exprs, `carried` the initial values;
    `length`: the trip count as an int or symbolic expression, the scan outputs' first axis. The
    outer-scope tensors the body reads (those that depend on none of its Vars, constants aside)
    become captured inputs. Returns the final carried values, then the stacked scan outputs."""
    n_carried = len(carried)
    go = _flag(ctx, outs[0])
    outs = [ctx.const(np.array(go), "cond") if isinstance(go, bool) else go] + list(outs[1:])
    for k, (a, b) in enumerate(zip(outs[1:1 + n_carried], carried)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype or a.type.is_dynamic:
            raise ctx.error(f"loop-carried value {k} changes from {b.type} to {a.type}; a run-time trip count "
                            f"needs one static type per carried value")
    for k, s in enumerate(outs[1 + n_carried:]):
        if s.type.is_dynamic or getattr(s.type, "is_symbolic", False):
            raise ctx.error(f"scan output {k} ({s.type}) of a run-time loop needs a static type per iteration")
    importer = ctx.importer
    # what the body reads from outside: tensors that depend on none of its inputs, except constants
    inner = set(params)
    for e in post_order(outs):
        if isinstance(e, Call) and any(i in inner for i in e.inputs):
            inner.add(e)
    captured = []
    for e in post_order(outs):
        if e in inner and isinstance(e, Call):
            captured += [i for i in e.inputs if i not in inner and not is_const(i) and i not in captured]
    captured += [o for o in outs if o not in inner and not is_const(o) and o not in captured]
    for e in captured:
        if e.type.is_dynamic:
            raise ctx.error(f"the body reads '{e.name or e.op_name}' ({e.type}), which has a run-time shape; "
                            f"not supported in a run-time Loop")
    holes = {e: Var(importer.unique_name(f"{ctx.name}:captured"), e.type) for e in captured}
    graph = rewrite(Graph(params, outs), lambda e, _: holes.get(e))
    loop_body = LoopBody(Graph(params + list(holes.values()), graph.outputs), n_carried, ctx.name, num_scan)
    args = [trip, first] + list(carried) + captured
    extra = {} if not num_scan else {"length": length}
    try:
        return tuple(make_call("control.loop", args, {"body": loop_body, "index": k, **extra}, name=ctx.name)
                     for k in range(n_carried + num_scan))
    except ModelError as e:
        raise importer.error(str(e)) from None


def _flag(ctx, cond):
    """A loop condition as True/False when constant, else a bool scalar expression."""
    if is_const(cond):
        return bool(np.asarray(cond.value).reshape(-1)[0])
    c = reshape(ctx, cond, ())
    return c if c.dtype == "bool" else ctx.call("cast", [c], {"dtype": "bool"})


def _and(ctx, a, b):
    if a is False or b is False:
        return False
    if a is True or b is True:
        return b if a is True else a
    return ctx.call("logical_and", [a, b])


def _scan(ctx, body, opset, states, xs, in_axes, in_rev, out_axes, out_rev):
    """The Scan loop unrolled: body(states, slices of xs along in_axes (reversed where in_rev))
    per step -> (final states, scan outputs stacked along out_axes, reversed where out_rev)."""
    n_state = len(states)
    steps = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(steps) != 1:
        raise ctx.error(f"scan inputs have different lengths {sorted(steps)}")
    n_steps = steps.pop()
    n_out = len(body.output) - n_state
    names = [i.name for i in body.input]
    outs_per_step: list = [[] for _ in range(n_out)]
    _unroll(ctx, body, n_steps)
    for t in range(n_steps):
        slices = [_take_slice(ctx, x, a, n_steps - 1 - t if rev else t) for x, a, rev in zip(xs, in_axes, in_rev)]
        outs = ctx.importer.convert_graph(body, opset, dict(zip(names, states + slices)), f"Scan '{ctx.name}' body")
        states = outs[:n_state]
        for k, y in enumerate(outs[n_state:]):
            outs_per_step[k].append(y)
    scanned = []
    for ys, a, rev in zip(outs_per_step, out_axes, out_rev):
        axis = norm_axis(ctx, int(a), len(ys[0].shape) + 1)
        scanned.append(_stack(ctx, ys[::-1] if rev else ys, axis))
    return list(states), scanned


def _take_slice(ctx, x, axis, k):
    """x[..., k, ...] along `axis`, that axis dropped."""
    begin, end = [0] * len(x.shape), list(x.shape)
    begin[axis], end[axis] = k, k + 1
    s = ctx.call("strided_slice", [x], {"begin": tuple(begin), "end": tuple(end), "strides": (1,) * len(x.shape)})
    return reshape(ctx, s, tuple(d for i, d in enumerate(x.shape) if i != axis))


def _scan_8(ctx, inputs, attrs, opset):
    """ONNX Scan-8(sequence_lens?, states..., scan inputs...; body, num_scan_inputs, directions):
    every input and output has a leading batch axis and scan inputs scan their axis 1; each batch
    element is unrolled as Scan-9 would, the results stacked on axis 0. sequence_lens, when
    given, must be a constant equal to the scan length for every batch element (shorter
    sequences leave outputs that depend on run-time lengths)."""
    body = attrs["body"]
    n_scan = int(attrs["num_scan_inputs"])
    lens, rest = inputs[0], list(inputs[1:])
    n_state = len(rest) - n_scan
    states, xs = rest[:n_state], rest[n_state:]
    if lens is not None:
        value = ctx.constant(inputs, 0, "sequence_lens").reshape(-1)
        full = {x.shape[1] for x in xs if len(x.shape) > 1}
        if len(full) != 1 or np.any(value != next(iter(full))):
            raise ctx.error(f"sequence_lens {value.tolist()} must all equal the scan length {sorted(full)}")
    batch = {x.shape[0] if x.shape else None for x in rest}
    if len(batch) != 1 or None in batch:
        raise ctx.error(f"inputs must share a leading batch axis, got {[x.type for x in rest]}")
    in_rev = list(attrs.get("directions", [0] * n_scan))
    out_zeros = [0] * (len(body.output) - n_state)  # scan outputs: axis 0 per batch element, forward
    per_batch = []
    for b in range(batch.pop()):
        st, ys = _scan(ctx, body, opset, [_take_slice(ctx, s, 0, b) for s in states],
                       [_take_slice(ctx, x, 0, b) for x in xs], [0] * n_scan, in_rev, out_zeros, out_zeros)
        per_batch.append(st + ys)
    return tuple(_stack(ctx, list(vals), 0) for vals in zip(*per_batch))


@converter(8, 9, 11, 16, 19, 21, 23, 24, 25)
def Scan(ctx, node, inputs, attrs, opset):
    """ONNX Scan-9+(states..., scan inputs...; body, num_scan_inputs, scan_input_axes/directions,
    scan_output_axes/directions): unrolled over the scan axis; Scan-8 see _scan_8."""
    if opset < 9:
        return _scan_8(ctx, inputs, attrs, opset)
    n_scan = int(attrs["num_scan_inputs"])
    n_state = len(inputs) - n_scan
    states, xs = list(inputs[:n_state]), list(inputs[n_state:])
    in_axes = [norm_axis(ctx, int(a), len(x.shape)) for a, x in zip(attrs.get("scan_input_axes", [0] * n_scan), xs)]
    n_out = len(attrs["body"].output) - n_state
    states, scanned = _scan(ctx, attrs["body"], opset, states, xs, in_axes,
                            list(attrs.get("scan_input_directions", [0] * n_scan)),
                            list(attrs.get("scan_output_axes", [0] * n_out)),
                            list(attrs.get("scan_output_directions", [0] * n_out)))
    return tuple(states) + tuple(scanned)
