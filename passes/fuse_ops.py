"""Graph pass FuseOps: group operators into primitive functions, one kernel each."""

from __future__ import annotations

import hashlib

from tvmc.errors import PassError
from tvmc.graph.ir import Call, Constant, Function, Graph, Var, users
from tvmc.ops.registry import OpPattern, get_op, load_time_call, make_call
from tvmc.passes.pass_infra import graph_pass

_EPILOGUE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)
_ANCHORS = (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE)
# Anchors whose data input (input 0) may absorb a producing `pad` into their loop nest.
_PAD_CONSUMERS = ("nn.conv2d",)
_MAX_NAME_CHARS = 80


class _Group:
    """Ops (in topological order) that become one primitive function; the last one is its output."""

    def __init__(self, call: Call, pattern: OpPattern):
        self.calls = [call]
        self.pattern = pattern      # the strongest pattern in the group (its anchor's)

    def add(self, call: Call, pattern: OpPattern):
        self.calls.append(call)
        self.pattern = max(self.pattern, pattern)


def _pattern(call: Call) -> OpPattern:
    if isinstance(call.op, Function):
        return OpPattern.OPAQUE     # already fused: left alone
    return get_op(call.op).pattern


def _pad_for_anchor(call: Call, uses: dict, outputs: set) -> bool:
    """True for a `pad` whose only user is a conv2d reading it as data: it fuses into the conv."""
    us = set(uses[call])
    if call.op != "pad" or len(us) != 1 or call in outputs:
        return False
    (user,) = us
    return isinstance(user.op, str) and user.op in _PAD_CONSUMERS and user.inputs[0] is call \
        and call not in user.inputs[1:]


def _can_join(group: _Group, producer: Call, call: Call, pattern: OpPattern, uses: dict, outputs: set) -> bool:
    """May `call` join `group`, whose output `producer` it reads?"""
    if group.pattern == OpPattern.OPAQUE:
        return False
    if pattern in _EPILOGUE:
        # epilogue of any group; after an anchor only when it keeps the anchor's output shape,
        # so the epilogue runs inside the anchor's loop nest without recomputing it
        return group.pattern not in _ANCHORS or tuple(call.shape) == tuple(producer.shape)
    if pattern == OpPattern.INJECTIVE:
        return group.pattern <= OpPattern.INJECTIVE and not _pad_for_anchor(call, uses, outputs)
    if pattern in _ANCHORS:                             # conv2d absorbs its input-side pad
        return (len(group.calls) == 1 and _pad_for_anchor(producer, uses, outputs))
    return False


def _constant_prologue(call: Call, uses: dict, outputs: set) -> bool:
    """True for an injective op on constants alone that only elementwise ops read (a range
    artifact's Slice of a constant buffer at symbolic bounds: GPT-2's causal mask [seq, seq] of
    its [max_pos, max_pos] `bias`, read by every layer's Where). It joins the group of each
    reader, which computes it from the constant where it reads it: materialized once for all
    readers, it was an activation of [hi, hi] elements that the static artifact at hi does not
    plan (there FoldConstant makes the slice a constant), 64 KiB above the static plan at seq 256.
    Static graphs keep few such ops (FoldConstant folds them)."""
    us = set(uses[call])
    return (isinstance(call.op, str) and call not in outputs and _pattern(call) <= OpPattern.INJECTIVE
            and bool(call.inputs) and all(isinstance(i, Constant) for i in call.inputs) and bool(us)
            and all(isinstance(u, Call) and _pattern(u) in _EPILOGUE for u in us))


def _partition(graph: Graph, max_depth: int) -> dict:
    """Greedy grouping over the topological order: {Call: _Group}. A _constant_prologue op joins
    the group of each of its readers, just before the first of them (group_of maps it to the
    first such group, whose output is never the prologue itself)."""
    uses = users(graph)
    outputs = set(graph.outputs)
    group_of: dict = {}
    prologues = {c for c in graph.calls() if max_depth > 1 and _constant_prologue(c, uses, outputs)}
    for call in graph.calls():
        if call in prologues:
            continue
        pattern = _pattern(call)
        target = None
        if max_depth > 1 and pattern != OpPattern.OPAQUE:
            joinable = [group_of[p] for p in call.inputs
                        if isinstance(p, Call) and p not in prologues and p not in outputs and len(set(uses[p])) == 1
                        and len(group_of[p].calls) < max_depth and _can_join(group_of[p], p, call, pattern, uses,
                                                                             outputs)]
            # an anchored group first (a dense's, not a reshape's): the residual add of a dense
            # whose other operand is a reshape joins the dense as its epilogue, and the reshape,
            # alone, becomes a view (PlanMemory's reshape_views) instead of a copy
            target = next((g for g in joinable if g.pattern in _ANCHORS), joinable[0] if joinable else None)
        if target is None:
            target = group_of[call] = _Group(call, pattern)
        else:
            target.add(call, pattern)
            group_of[call] = target
        for producer in call.inputs:
            if producer in prologues and producer not in target.calls:
                target.calls.insert(len(target.calls) - 1, producer)
                group_of.setdefault(producer, target)
    return group_of


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def _outline(group: _Group):
    """Body of a group as a Function over fresh params: (params, body, external args, structural key)."""
    members = {c: k for k, c in enumerate(group.calls)}
    externals, params, new = [], {}, {}
    key = []
    for call in group.calls:
        refs, inputs = [], []
        for i in call.inputs:
            if i in members:
                refs.append(("n", members[i]))
                inputs.append(new[i])
                continue
            if i not in params:
                params[i] = Var(f"p{len(externals)}", i.type)
                externals.append(i)
            refs.append(("p", externals.index(i)))
            inputs.append(params[i])
        new[call] = Call(call.op, inputs, call.attrs, call.type, call.name)
        key.append((call.op, _freeze(call.attrs), tuple(refs), call.type))
    param_vars = [params[e] for e in externals]
    key = (tuple(p.type for p in param_vars), tuple(key))
    return param_vars, new[group.calls[-1]], externals, key


def _base_name(group: _Group) -> str:
    name = "fused_" + "_".join(c.op.replace(".", "_") for c in group.calls)
    if len(name) > _MAX_NAME_CHARS:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = name[:_MAX_NAME_CHARS] + "_" + digest
    return name


def _copy_outputs(graph: Graph) -> Graph:
    """Make every graph output a distinct Call: an output that is an input, a constant or an
    earlier output gets an `identity` copy, so each output owns its storage."""
    seen, outs = set(), []
    for out, name in zip(graph.outputs, graph.output_names):
        if not isinstance(out, Call) or out in seen:
            out = make_call("identity", [out], name=f"{name}_copy")
        seen.add(out)
        outs.append(out)
    return graph.with_outputs(outs)


@graph_pass("FuseOps", opt_level=1, options={"max_depth": 256})
def fuse_ops(graph: Graph, ctx) -> Graph:
    """Group ops into primitive functions (TVM's relay.transform.FuseOps, simplified).

    A group is an anchor (OUT_ELEMWISE_FUSABLE, COMM_REDUCE, INJECTIVE, or ELEMWISE/BROADCAST
    starting a group on its own) followed by the chain of ELEMWISE/BROADCAST ops reading it,
    where each intermediate has exactly one user and is not a graph output (after an
    OUT_ELEMWISE_FUSABLE/COMM_REDUCE anchor, only ops keeping its output shape; an op that could
    join the groups of several operands joins an anchored one first); INJECTIVE ops
    join only groups without an anchor (reshape -> relu, relu -> transpose); a `pad` feeding
    a conv2d's data fuses into it as its producer; an injective op on constants alone that only
    elementwise ops read joins each reader's group (_constant_prologue); OPAQUE ops (and existing
    fused calls) stay alone. At most `max_depth` ops per group. With the pass gated off (opt level 0 or
    disabled) every op becomes its own function.

    Each group becomes `Call(Function(params, body, name), args)`: params are fresh Vars for
    every external input, constants included (they stay outside as args, i.e. artifact
    params). name = "fused_" + op names ('.' -> '_'), truncated to 80 chars plus a hash;
    structurally identical groups (ops, attrs, wiring, input types) share one Function;
    different ones with the same name get a suffix `_1`, `_2`, ... Graph outputs that are not
    distinct Calls are first copied by an `identity` op.
    """
    max_depth = ctx.option("FuseOps", "max_depth") if ctx.is_enabled("FuseOps") else 1
    if max_depth < 1:
        raise PassError(f"FuseOps.max_depth must be >= 1, got {max_depth}")
    graph = _copy_outputs(graph)
    group_of = _partition(graph, max_depth)

    functions: dict = {}        # structural key -> Function
    taken = {c.op.name for c in graph.calls() if isinstance(c.op, Function)}
    memo: dict = {}
    for e in graph.topo():
        if not isinstance(e, Call):
            memo[e] = e
            continue
        group = group_of[e]
        if isinstance(e.op, Function):
            inputs = [memo[i] for i in e.inputs]
            same = all(a is b for a, b in zip(inputs, e.inputs))
            memo[e] = e if same else Call(e.op, inputs, e.attrs, e.type, e.name)
            continue
        if e.op == "control.loop":  # interpreted by the executors; its body is compiled on its own
            memo[e] = Call(e.op, [memo[i] for i in e.inputs], e.attrs, e.type, e.name)
            continue
        if group.calls[-1] is not e:
            continue
        params, body, externals, key = _outline(group)
        func = functions.get(key)
        if func is None:
            name, n = _base_name(group), 0
            while name in taken:
                n += 1
                name = f"{_base_name(group)}_{n}"
            taken.add(name)
            func = Function(params, body, name, load_time_call(body))
            functions[key] = func
        memo[e] = Call(func, [memo[x] for x in externals], {}, e.type, e.name)
    return graph.with_outputs([memo[o] for o in graph.outputs])
