"""Schedule selection for a fused primitive function: build its tensor expressions from the ops'
computes, pick the anchor's implementation and config (tuning record, else the fallback), apply
the schedule, and lower to loop IR."""

from __future__ import annotations

from dataclasses import dataclass

from tvmc import te
from tvmc.errors import ScheduleError
from tvmc.graph.ir import Call, Constant, Var, post_order
from tvmc.ops.registry import OpPattern, get_op
from tvmc.tir.gpu import lower_device
from tvmc.tir.ir import PrimFunc
from tvmc.tir.lower import lower


def anchor_call(func) -> Call:
    """The call whose implementation schedules the function: the highest-pattern op, first wins
    (TVM's anchor op); an all-injective function is anchored at its output."""
    calls = [e for e in post_order([func.body]) if isinstance(e, Call)]
    if not calls:
        raise ScheduleError(f"{func.name}: a fused function must contain at least one call")
    best = max(get_op(c.op).pattern for c in calls)
    if best <= OpPattern.INJECTIVE:
        return func.body
    return next(c for c in calls if get_op(c.op).pattern == best)


@dataclass
class TemplateContext:
    """What an Implementation.template writes its kernel from: `name` (the kernel's), `params`
    (te placeholders of the function's parameters, in order; the kernel's arguments are they and
    then `out`), `out` (the function's output tensor, every stage but the anchor inlinable),
    `anchor` (the tensor the anchor op computes), `anchor_inputs` (its input tensors: parameters
    or inlinable stages), `attrs` (the anchor call's attributes)."""

    name: str
    params: list
    out: object
    anchor: object
    anchor_inputs: list
    attrs: dict


def workload(call: Call) -> tuple:
    """Hashable workload key: input shapes, output shape, dtype and attributes."""
    return tuple(tuple(i.shape) for i in call.inputs) + (tuple(call.shape), call.dtype,
                                                          tuple(sorted(call.attrs.items())))


def lower_fused(func, target, config_lookup=None) -> PrimFunc:
    """Lower fused Function `func` for `target` into a PrimFunc named `func.name`.

    `config_lookup(impl_name, workload) -> ConfigEntity | None` supplies tuned configs; it is
    asked for each implementation of the anchor op, and the one whose config has the lowest
    `cost_s` wins (a config without cost counts as best), so the choice between implementations
    follows the tuning records. Without a lookup, or when every implementation misses, the first
    implementation runs with its fallback config.
    For a GPU target the result is a device kernel (tvmc.tir.gpu.lower_device: `launch` set).
    Raises ScheduleError when an op has no implementation for the target family, or a GPU
    kernel exceeds the target's limits.
    """
    anchor = anchor_call(func)
    impl, cfg = _choose_implementation(anchor, target, config_lookup)
    tensors = {}
    params = []
    for k, p in enumerate(func.params):
        t = te.placeholder(p.shape, p.dtype, name=f"arg{k}")
        tensors[p] = t
        params.append(t)
    for e in post_order([func.body]):
        if isinstance(e, Var):
            if e not in tensors:
                raise ScheduleError(f"{func.name}: free variable {e.name}")
            continue
        if isinstance(e, Constant):
            if e.value.size != 1:
                raise ScheduleError(f"{func.name}: constant {e.name} must be a parameter of the function")
            val = e.value.reshape(()).item()
            tensors[e] = te.compute(e.shape, lambda *i, v=val, d=e.dtype: te.const(v, d), name="const")
            continue
        opdef = get_op(e.op)
        compute = opdef.compute
        if e is anchor:
            compute = impl.compute or compute
        tensors[e] = compute([tensors[i] for i in e.inputs], e.attrs, e.type)
    out = tensors[func.body]
    if out.op is None:
        out = te.compute(out.shape, lambda *i: tensors[func.body][i], name="copy")
    anchor_t = tensors[anchor]
    if cfg is None and impl.config_space is not None:
        cfg = impl.config_space(workload(anchor), target).fallback_config()
    if impl.template is not None:  # a kernel written in loop IR, its barriers in place
        ctx = TemplateContext(func.name, params, out, anchor_t, [tensors[i] for i in anchor.inputs], dict(anchor.attrs))
        return lower_device(impl.template(ctx, cfg, target), target, insert_barriers=False)
    s = te.create_schedule(out)
    impl.schedule(s, out, anchor_t, cfg, target)
    prim = lower(s, params + [out], func.name)
    if target.kind == "gpu":  # one device kernel: launch configuration, barriers, limits checked
        prim = lower_device(prim, target)
    return prim


def _choose_implementation(anchor, target, config_lookup):
    """(Implementation, tuned ConfigEntity or None) for the anchor call (see lower_fused)."""
    wl = workload(anchor)
    impls = get_op(anchor.op).implementations(target.family, wl, target)
    if config_lookup is None:
        return impls[0], None
    best = (impls[0], None)
    for impl in impls:
        if impl.config_space is None:
            continue
        cfg = config_lookup(impl.name, wl)
        if cfg is not None and (best[1] is None or getattr(cfg, "cost_s", 0.0) < getattr(best[1], "cost_s", 0.0)):
            best = (impl, cfg)
    return best
