"""ONNX converters, control-flow group: If, Loop and Scan with their subgraphs converted like the
main graph (outer-scope tensors visible), resolved at compile time.

If with a constant condition imports the taken branch only; with a condition known only at run
time both branches are imported and `where` picks per output (branches have no side effects, so
computing both is the same function; their outputs must agree in shape and dtype). Loop unrolls
a constant trip count, masking the iterations after an exit whose condition is known only at run
time; Scan (opset 9 and later) unrolls over its static scan axes. A trip count known only at run
time has no bound and is refused (see docs/dynamic_shapes.md).
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, reshape
from tvmc.frontend.onnx.registry import converter

_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)


@converter(*_VERSIONS)
def If(ctx, node, inputs, attrs, opset):
    """ONNX If(cond; then_branch, else_branch)."""
    cond = inputs[0]
    importer = ctx.importer
    if is_const(cond):
        branch = attrs["then_branch"] if bool(np.asarray(cond.value).reshape(-1)[0]) else attrs["else_branch"]
        return tuple(importer.convert_graph(branch, opset, {}, f"If '{ctx.name}'"))
    then = importer.convert_graph(attrs["then_branch"], opset, {}, f"If '{ctx.name}' then_branch")
    other = importer.convert_graph(attrs["else_branch"], opset, {}, f"If '{ctx.name}' else_branch")
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
    docs/dynamic_shapes.md). A trip count computed at run time has no bound and is refused."""
    body = attrs["body"]
    if inputs and inputs[0] is not None and not is_const(inputs[0]):
        raise ctx.error(f"trip count M ('{ctx.input_name(0)}') must be a constant (initializer or computable at "
                        f"import): tvmc unrolls loops, and a computed M has no bound at compile time")
    trip = ctx.constant(inputs, 0, "M (trip count)") if inputs and inputs[0] is not None else None
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    if trip is None:
        raise ctx.error("a Loop without a trip count runs a data-dependent number of times with no bound; "
                        "not supported")
    carried = list(inputs[2:])
    n_carried = len(carried)
    scans: list = [[] for _ in range(len(body.output) - 1 - n_carried)]
    running = True if cond is None else _flag(ctx, cond)
    ran = []  # per iteration: a bool flag computed at run time, or True
    names = [i.name for i in body.input]
    for it in range(int(np.asarray(trip).reshape(-1)[0])):
        if running is False:
            break
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


@converter(9, 11, 16, 19, 21, 23, 24, 25)
def Scan(ctx, node, inputs, attrs, opset):
    """ONNX Scan-9+(states..., scan inputs...; body, num_scan_inputs, scan_input_axes/directions,
    scan_output_axes/directions): unrolled over the scan axis."""
    body = attrs["body"]
    n_scan = int(attrs["num_scan_inputs"])
    n_state = len(inputs) - n_scan
    states, xs = list(inputs[:n_state]), list(inputs[n_state:])
    in_axes = [norm_axis(ctx, int(a), len(x.shape)) for a, x in zip(attrs.get("scan_input_axes", [0] * n_scan), xs)]
    in_rev = list(attrs.get("scan_input_directions", [0] * n_scan))
    steps = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(steps) != 1:
        raise ctx.error(f"scan inputs have different lengths {sorted(steps)}")
    n_steps = steps.pop()
    n_out = len(body.output) - n_state
    names = [i.name for i in body.input]
    outs_per_step: list = [[] for _ in range(n_out)]
    for t in range(n_steps):
        slices = []
        for x, a, rev in zip(xs, in_axes, in_rev):
            k = n_steps - 1 - t if rev else t
            begin = [0] * len(x.shape)
            end = list(x.shape)
            begin[a], end[a] = k, k + 1
            s = ctx.call("strided_slice", [x], {"begin": tuple(begin), "end": tuple(end), "strides": (1,) * len(x.shape)})
            slices.append(reshape(ctx, s, tuple(d for i, d in enumerate(x.shape) if i != a)))
        outs = ctx.importer.convert_graph(body, opset, dict(zip(names, states + slices)), f"Scan '{ctx.name}' body")
        states = outs[:n_state]
        for k, y in enumerate(outs[n_state:]):
            outs_per_step[k].append(y)
    out_axes = list(attrs.get("scan_output_axes", [0] * n_out))
    out_rev = list(attrs.get("scan_output_directions", [0] * n_out))
    scanned = []
    for ys, a, rev in zip(outs_per_step, out_axes, out_rev):
        axis = norm_axis(ctx, int(a), len(ys[0].shape) + 1)
        scanned.append(_stack(ctx, ys[::-1] if rev else ys, axis))
    return tuple(states) + tuple(scanned)
