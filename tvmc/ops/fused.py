"""Schedule selection for a fused primitive function: build its tensor expressions from the ops'
computes, pick the anchor's implementation and config (tuning record, else the fallback), apply
the schedule, and lower to loop IR."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvmc import te
from tvmc.errors import ScheduleError, TVMCError
from tvmc.graph.ir import Call, Constant, Function, TensorType, Var, post_order
from tvmc.ops.registry import OpPattern, get_op, make_call
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
    graph_vars = _graph_size_vars(func)
    if not graph_vars:
        return _lower(func, anchor, target, config_lookup)
    from tvmc.te.extent import bind_graph_vars

    kernel_vars = {v.name: te.size_var(v.name, v.lo, v.hi) for v in graph_vars}
    with bind_graph_vars(kernel_vars):
        return _lower(func, anchor, target, config_lookup, symbolic=True)


def _graph_size_vars(func) -> list:
    """The graph's size variables (tvmc.graph.symbolic.SizeVar) in the types and attributes of
    fused Function `func`; empty for a static function."""
    from tvmc.graph import symbolic

    items = [p.shape for p in func.params]
    for e in post_order([func.body]):
        if isinstance(e, Call):
            items += [e.type.shape, list(e.attrs.values())]
    return symbolic.free_vars(items)


def upper_workload(call: Call, limits: dict | None = None) -> tuple:
    """workload(call) with every size variable at its upper bound: what the config space and the
    fallback config of a kernel with symbolic extents are chosen for (its tiles fit the largest
    size of the range). `limits` ({variable name: (lo, hi)}) narrows variables first (a size
    bucket's sub-range)."""
    from tvmc.graph import symbolic

    narrowed = {n: symbolic.size_var(n, lo, hi) for n, (lo, hi) in (limits or {}).items()}

    def up(x):
        if isinstance(x, symbolic.SymExpr):
            return symbolic.upper_bound(symbolic.substitute(x, narrowed) if narrowed else x)
        if isinstance(x, tuple):
            return tuple(up(y) for y in x)
        if isinstance(x, list):
            return [up(y) for y in x]
        return x

    return up(workload(call))


def _lower(func, anchor, target, config_lookup, symbolic: bool = False) -> PrimFunc:
    """lower_fused's body; `symbolic`: the graph's size variables are bound (te.extent.bind_graph_vars);
    on CPU targets the configs are the records of the sizes `tvmc tune --dim-sizes` measured, one
    per size bucket (_tuned_buckets), else (and on GPUs) the fallback at the upper-bound workload."""
    if symbolic and not target.gpu:
        tuned = _tuned_buckets(anchor, target, config_lookup)
        if tuned is not None:
            return _lower_buckets(func, anchor, target, *tuned)
    if symbolic:
        config_lookup = None  # records of one size do not apply to a range
    impl, cfg = _choose_implementation(anchor, target, config_lookup, upper_workload(anchor) if symbolic else None)
    bucket = _size_buckets(anchor, target) if symbolic and impl.template is None else None
    if bucket is not None:
        var, starts = bucket
        return _lower_buckets(func, anchor, target, var, starts,
                              lambda sub: (impl, _bucket_fallback(anchor, impl, target, var, sub)))
    params, out, anchor_t, tensors = _tensors(func, anchor, impl)
    if cfg is None and impl.config_space is not None:
        cfg = impl.config_space(upper_workload(anchor) if symbolic else workload(anchor), target).fallback_config()
    if symbolic and target.gpu:
        try:
            return _lower_scheduled(func, anchor, impl, cfg, target, params, out, anchor_t, tensors)
        except Exception:  # a GPU schedule that does not take these symbolic extents: the generic one
            return _lower_per_thread(func, anchor, impl, target)
    return _lower_scheduled(func, anchor, impl, cfg, target, params, out, anchor_t, tensors)


def _lower_scheduled(func, anchor, impl, cfg, target, params, out, anchor_t, tensors) -> PrimFunc:
    """The kernel of `func` through implementation `impl` with config `cfg` (a device kernel for
    a GPU target: launch configuration, barriers, limits checked)."""
    if impl.template is not None:  # a kernel written in loop IR, its barriers in place
        ctx = TemplateContext(func.name, params, out, anchor_t, [tensors[i] for i in anchor.inputs], dict(anchor.attrs))
        return lower_device(impl.template(ctx, cfg, target), target, insert_barriers=False)
    s = te.create_schedule(out)
    impl.schedule(s, out, anchor_t, cfg, target)
    prim = lower(s, params + [out], func.name, partition=not target.gpu)
    if target.gpu:  # one device kernel: launch configuration, barriers, limits checked
        prim = lower_device(prim, target)
    return prim


def _lower_per_thread(func, anchor, impl, target) -> PrimFunc:
    """`func` as a GPU kernel of the generic per-thread schedule (tvmc.ops.gpu.injective.
    schedule_generic: one output element per thread, reductions per thread, the guards of its
    symbolic tails kept), its thread count chosen for the upper bounds: the fallback of a GPU
    schedule that does not take a function's symbolic extents (it raised, or its kernel broke
    the checks of lower_device), correct for any operator."""
    from tvmc.ops.gpu.injective import generic_config, schedule_generic

    params, out, anchor_t, _ = _tensors(func, anchor, impl)  # impl's compute, its own schedule aside
    cfg = generic_config(upper_workload(anchor), target).fallback_config()
    s = te.create_schedule(out)
    schedule_generic(s, out, anchor_t, cfg, target)
    return lower_device(lower(s, params + [out], func.name, partition=False), target)


def _plain_var(d):
    """The graph SizeVar that dimension `d` is (a SymExpr of one variable alone), else None."""
    from tvmc.graph import symbolic

    if symbolic.is_symbolic(d) and len(d.terms) == 1:
        mono, c = d.terms[0]
        if c == 1 and len(mono) == 1 and isinstance(mono[0], symbolic.SizeVar):
            return mono[0]
    return None


def _single_var(*dims):
    """The graph SizeVar of dimensions `dims` where they are expressions of that one variable (or
    constants), else None."""
    from tvmc.graph import symbolic

    free = symbolic.free_vars(list(dims))
    return free[0] if len(free) == 1 else None


def _size_buckets(anchor, target):
    """(graph SizeVar, bucket starts) where a CPU schedule defines size buckets for the anchor
    (tvmc.tir.buckets): nn.dense_pack and nn.matmul over symbolic rows of one variable
    (dense_pack_buckets, matmul_buckets), nn.softmax over
    a symbolic last axis (softmax_buckets), nn.conv2d_nchwc over a symbolic output width of one
    variable (conv2d_nchwc_buckets), nn.conv2d_winograd_nchwc over a symbolic tile count of one
    variable (conv2d_winograd_buckets) and an injective function over a last axis that an input
    holds elsewhere (_strided_rows_buckets); None elsewhere or where no start falls in the range."""
    from tvmc.ops.cpu.conv2d_nchwc import conv2d_nchwc_buckets
    from tvmc.ops.cpu.conv2d_winograd import conv2d_winograd_buckets, winograd_tiles
    from tvmc.ops.cpu.dense import dense_pack_buckets, matmul_buckets
    from tvmc.ops.cpu.reduction import softmax_buckets

    if target.gpu or not isinstance(anchor, Call) or not isinstance(anchor.op, str):
        return None
    if anchor.op == "nn.dense_pack" and len(anchor.inputs[0].shape) == 2:
        var = _single_var(anchor.inputs[0].shape[0])
        starts = var and dense_pack_buckets(upper_workload(anchor), target, var, anchor.inputs[0].shape[0])
    elif anchor.op == "nn.softmax" and anchor.attrs.get("axis", -1) in (-1, len(anchor.shape) - 1):
        var = _plain_var(anchor.shape[-1])
        starts = var and softmax_buckets(var, target)
    elif anchor.op == "nn.matmul" and not anchor.attrs.get("padded"):
        var = _single_var(anchor.shape[-2])
        starts = var and matmul_buckets(upper_workload(anchor), target, var, anchor.shape[-2])
    elif anchor.op == "nn.conv2d_nchwc":
        var = _single_var(anchor.shape[3])
        starts = var and conv2d_nchwc_buckets(upper_workload(anchor), target, var, anchor.shape[3])
    elif anchor.op == "nn.conv2d_winograd_nchwc":
        var = _single_var(*anchor.shape[:4])
        n, _, oh, ow = anchor.shape[:4]
        starts = var and conv2d_winograd_buckets(upper_workload(anchor), target, var,
                                                 winograd_tiles(n, oh, ow, anchor.attrs["tile_size"]))
    elif get_op(anchor.op).pattern <= OpPattern.INJECTIVE and len(anchor.shape) > 0:
        var = _plain_var(anchor.shape[-1])
        starts = var and _strided_rows_buckets(anchor, var, target)
    else:
        return None
    return (var, starts) if starts else None


def _strided_rows_buckets(anchor, var, target) -> list:
    """The bucket start `lanes` (the vector lanes of the output dtype) where an all-injective
    function's output has graph SizeVar `var` as its last axis, an input holds `var` in another
    axis (attention's K [seq, heads * dim] transposed to [heads, dim, seq]: a vector along seq
    gathers) and var's range has sizes below one vector and from one up: below, the schedule
    copies without vectors (tvmc.ops.cpu.injective._symbolic_elementwise_loops); empty elsewhere."""
    lanes = target.vector_lanes(anchor.type.dtype)
    if not var.lo < lanes <= var.hi:
        return []
    inputs = [e for e in post_order([anchor]) if isinstance(e, Var)]
    strided = any(getattr(_plain_var(d), "name", None) == var.name for x in inputs for d in x.type.shape[:-1])
    return [lanes] if strided else []


def _lower_buckets(func, anchor, target, var, starts, choose) -> PrimFunc:
    """func lowered with one specialization per size bucket of graph variable `var` (tvmc.tir.buckets.
    lower_buckets); `choose(sub)` gives the (Implementation, config or None) of the bucket whose
    kernel SizeVar is `sub` (sub.lo..sub.hi)."""
    from tvmc.te.extent import bind_graph_vars, graph_vars
    from tvmc.tir.buckets import lower_buckets

    bound = graph_vars()

    def build(sub):
        impl, cfg = choose(sub)
        with bind_graph_vars({**bound, var.name: sub}):
            params, out, anchor_t, _ = _tensors(func, anchor, impl)
            s = te.create_schedule(out)
            impl.schedule(s, out, anchor_t, cfg, target)
        return s, params + [out]

    return lower_buckets(func.name, bound[var.name], starts, build, stages=_bucketed_stages(anchor))


def _bucketed_stages(anchor):
    """The stages that a CPU schedule specializes per size bucket where it does not all of them:
    nn.conv2d_winograd_nchwc's batched GEMM (BUCKETED_STAGES; its transforms are shared); None
    (every stage) elsewhere."""
    from tvmc.ops.cpu.conv2d_winograd import BUCKETED_STAGES

    return BUCKETED_STAGES if isinstance(anchor, Call) and anchor.op == "nn.conv2d_winograd_nchwc" else None


def _bucket_fallback(anchor, impl, target, var, sub):
    """The fallback config of `impl` for the size bucket `sub` (a kernel SizeVar) of graph variable
    `var`: the one of the anchor's workload at the bucket's upper bound; None without a space."""
    if impl.config_space is None:
        return None
    return impl.config_space(upper_workload(anchor, {var.name: (sub.lo, sub.hi)}), target).fallback_config()


def _tuned_buckets(anchor, target, config_lookup):
    """(graph SizeVar, bucket starts, choose) for _lower_buckets where `config_lookup` holds records
    of the anchor at sizes of its one size variable (`tvmc tune --dim-sizes`): tuned at sizes
    s1 < s2 < ... < sn, the kernel runs s1's config up to s1, s2's on s1+1..s2, ..., and sn's from
    s(n-1)+1 to the range's upper bound (each bucket's implementation and config as
    _choose_implementation picks them for its size's workload: the lowest cost). None where the
    anchor's workload has no or several size variables, or no record matches it at a size in
    range."""
    from tvmc.graph import symbolic

    if config_lookup is None or not hasattr(config_lookup, "workloads") or not isinstance(anchor, Call) \
            or not isinstance(anchor.op, str):
        return None
    pattern = workload(anchor)
    variables = symbolic.free_vars([pattern])
    if len(variables) != 1:
        return None
    var = variables[0]
    leaves = _leaves(pattern)
    at = next((k for k, x in enumerate(leaves) if (v := _plain_var(x)) is not None and v.name == var.name), None)
    if at is None:  # the variable stands alone nowhere in the workload: no size to read off a record
        return None
    sizes = set()
    for impl in get_op(anchor.op).implementations(target.family, upper_workload(anchor), target):
        if impl.config_space is None or impl.template is not None:
            continue
        for wl in config_lookup.workloads(impl.name):
            values = _leaves(wl)
            s = values[at] if len(values) == len(leaves) and isinstance(values[at], int) else None
            if s is not None and var.lo <= s <= var.hi and s not in sizes and \
                    config_lookup.cost_s(impl.name, upper_workload(anchor, {var.name: (s, s)})) is not None:
                sizes.add(s)
    if not sizes:
        return None
    sizes = sorted(sizes)

    def choose(sub):
        size = next((s for s in sizes if s >= sub.hi), sizes[-1])
        tuned_wl = upper_workload(anchor, {var.name: (size, size)})
        impl, cfg = _choose_implementation(anchor, target, config_lookup, tuned_wl)
        return impl, cfg if cfg is not None else _bucket_fallback(anchor, impl, target, var, sub)

    return var, [s + 1 for s in sizes[:-1]], choose


def _leaves(x) -> list:
    """The leaves of a workload (nested tuples and lists of dims, dtypes and attribute pairs), in order."""
    if isinstance(x, (tuple, list)):
        return [leaf for y in x for leaf in _leaves(y)]
    return [x]


def _tensors(func, anchor, impl) -> tuple:
    """(params, out, anchor tensor, {graph Expr: te.Tensor}) of fused Function `func`: a
    placeholder per parameter, each call through its op's compute (the anchor's through `impl`'s,
    when it has one), a copy stage when the output is a parameter."""
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
    return params, out, tensors[anchor], tensors


def _choose_implementation(anchor, target, config_lookup, wl=None):
    """(Implementation, tuned ConfigEntity or None) for the anchor call (see lower_fused) on
    workload `wl` (default: the anchor's)."""
    wl = workload(anchor) if wl is None else wl
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


def _reduce_flops(op: str, wl: tuple, in_dtypes: tuple) -> tuple:
    """(2 x output elements x reduce extent, output elements) of `op` on workload `wl`; the first
    is None when the compute has no reduce axes."""
    if get_op(op).flops is not None:
        return get_op(op).flops(wl), None
    n_in = len(in_dtypes)
    inputs = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(zip(wl[:n_in], in_dtypes))]
    call = make_call(op, [Var(f"x{k}", TensorType(tuple(s), d)) for k, (s, d) in enumerate(zip(wl[:n_in], in_dtypes))],
                     dict(wl[-1]))
    out = get_op(op).compute(inputs, dict(wl[-1]), call.type)
    elems = math.prod(out.shape)
    if out.op is None or not out.op.reduce_axis:
        return None, elems
    return 2 * elems * math.prod(iv.extent for iv in out.op.reduce_axis), elems


def task_flops(op: str, wl: tuple, in_dtypes: tuple) -> int:
    """FLOPs of one call of `op` on workload `wl`: 2 x (output elements) x (product of the compute's
    reduce axis extents), one multiply-add = 2 FLOPs, padding taps counted as real work (TVM's
    `compute_flop`); an op without reduce axes counts one FLOP per output element; an op whose
    definition has its own `flops` (OpDef.flops: Winograd conv2d counts the direct conv2d's
    multiply-adds, as TVM does) counts by it."""
    flops, elems = _reduce_flops(op, wl, in_dtypes)
    return elems if flops is None else flops


def function_flops(fn: Function) -> int | None:
    """FLOPs of one call of a fused Function, counted on its anchor op (task_flops; at the upper
    bounds of its size variables), or None when the anchor has no reduce axes (elementwise,
    layout and other injective kernels, whose FLOP rate says little)."""
    anchor = anchor_call(fn)
    if not isinstance(anchor, Call) or isinstance(anchor.op, Function):
        return None
    return _reduce_flops(anchor.op, upper_workload(anchor), tuple(i.dtype for i in anchor.inputs))[0]


def function_flops_program(fn: Function, order: list) -> int | list | None:
    """FLOPs of one call of a fused Function with symbolic extents as a postfix program over the
    graph's size variables `order` (tvmc.graph.symbolic.SizeVar, metadata "size_vars" order;
    tvmc.te.extent.to_program, evaluated by tvmc.graph.symbolic.eval_postfix at a run's sizes),
    counted as function_flops counts them (the compute's reduce axes, or the op's own `flops`
    rule on the graph's shapes); None for a static function, an anchor without reduce axes, or a
    count that is no such expression."""
    from tvmc.graph import symbolic
    from tvmc.te.extent import bind_graph_vars, to_program

    anchor = anchor_call(fn)
    if not _graph_size_vars(fn) or not isinstance(anchor, Call) or isinstance(anchor.op, Function):
        return None
    kernel_vars = {v.name: te.size_var(v.name, v.lo, v.hi) for v in order}
    try:
        with bind_graph_vars(kernel_vars):
            flops = _reduce_flops(anchor.op, workload(anchor), tuple(i.dtype for i in anchor.inputs))[0]
            if isinstance(flops, symbolic.SymExpr):  # an op's own rule counts on the graph's shapes
                return symbolic.to_postfix(flops, order)
            return None if flops is None else to_program(flops, list(kernel_vars.values()))
    except (TypeError, ValueError, ArithmeticError):
        return None


@dataclass(frozen=True)
class LoweredKernel:
    """A fused function lowered for a target: `prim` (its loop IR; for a GPU target a device
    kernel with its launch), `flops` (one call of its anchor op, task_flops)
    and `node` (the anchor's graph node name, for messages)."""

    prim: PrimFunc
    flops: int
    node: str


def _stop_symbolic(f, anchor, e):
    """Raise the ScheduleError of fused Function `f` (anchor call `anchor`) whose compute or schedule
    failed with `e` on its symbolic extents: the kernel, the op, the node and the variables."""
    from tvmc.graph import symbolic

    node = (anchor.name if anchor is not None else "") or "?"
    raise ScheduleError(f"kernel {f.name} ({anchor.op_name if anchor is not None else '?'} of node "
                        f"'{node}') does not compile with symbolic extents "
                        f"({symbolic.describe_vars(_graph_size_vars(f))}) yet: {type(e).__name__}: "
                        f"{str(e).strip()[:200]}; compile one size per artifact") from e


def lower_functions(functions, target, config_lookup=None, progress=None) -> list:
    """The compile pipeline's lower stage: every fused Function through lower_fused, in order
    ([LoweredKernel]). `progress(stage, done, total)` is called after each ("lower"). Raises
    ScheduleError: the target's limits, or a schedule's own failure named with its kernel and
    node."""
    progress = progress or (lambda stage, done, total: None)
    out = []
    for f in functions:
        anchor = None
        try:
            anchor = anchor_call(f)
            prim = lower_fused(f, target, config_lookup)
        except (TVMCError, RecursionError) as e:
            # a schedule step's own ScheduleError (compute_at's unbounded region) names no kernel
            if not isinstance(e, ScheduleError) or f.name in str(e) or not _graph_size_vars(f):
                raise
            _stop_symbolic(f, anchor, e)
        except Exception as e:  # a schedule's own bug or a workload it did not foresee: name the kernel
            node = (anchor.name if anchor is not None else "") or "?"
            if _graph_size_vars(f):  # an op whose compute or schedule does not take symbolic extents yet
                _stop_symbolic(f, anchor, e)
            raise ScheduleError(f"kernel {f.name} (node '{node}'): lowering failed: "
                                f"{type(e).__name__}: {str(e).strip()[:200]}") from e
        flops = task_flops(anchor.op, upper_workload(anchor), tuple(i.dtype for i in anchor.inputs))
        out.append(LoweredKernel(prim, flops, anchor.name or "?"))
        progress("lower", len(out), len(functions))
    return out
