"""Graph pass PlanMemory: assign storage ids to tensors, reusing dead intermediates' buffers."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from tvmc.errors import PassError
from tvmc.graph import symbolic
from tvmc.graph.ir import Call, Function, Graph
from tvmc.ops.registry import OpPattern, get_op, load_time_call
from tvmc.passes.pass_infra import graph_pass

_ELEMWISE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)


def _nbytes(t) -> int:
    """Bytes of TensorType `t`; a symbolic shape at the upper bound of every dimension (the bound
    shape the executor JSON records for it), so the storage holds the tensor at every size of the
    range and a run allocates nothing."""
    if not t.is_symbolic:
        return t.nbytes
    return math.prod(symbolic.upper_bound(d) for d in t.shape) * np.dtype(t.dtype).itemsize


def _aligned(nbytes: int, alignment: int) -> int:
    """Bytes rounded up to `alignment`; at least one aligned block so every storage has an address."""
    return max(alignment, -(-nbytes // alignment) * alignment)


class _Storages:
    """Storage table: bytes and dtype per storage id, and the free list used for reuse."""

    def __init__(self):
        self.nbytes, self.dtype, self.free = [], [], []

    def new(self, nbytes: int, dtype: str) -> int:
        self.nbytes.append(nbytes)
        self.dtype.append(dtype)
        return len(self.nbytes) - 1

    def reuse(self, nbytes: int, dtype: str) -> int:
        """Best fit among free storages of `dtype`: the smallest one that is large enough, else
        the largest one, grown to `nbytes`; a new storage when none is free."""
        cands = [s for s in self.free if self.dtype[s] == dtype]
        if not cands:
            return self.new(nbytes, dtype)
        fitting = [s for s in cands if self.nbytes[s] >= nbytes]
        sid = min(fitting, key=lambda s: (self.nbytes[s], s)) if fitting \
            else max(cands, key=lambda s: (self.nbytes[s], -s))
        self.free.remove(sid)
        self.nbytes[sid] = max(self.nbytes[sid], nbytes)
        return sid


def _is_elementwise(func: Function) -> bool:
    """True when every op of the fused function is ELEMWISE/BROADCAST: output element i reads
    only element i of each input of the output's shape (TVM's kElemWise/kBroadcast)."""
    calls = Graph(func.params, [func.body]).calls()
    return all(isinstance(c.op, str) and get_op(c.op).pattern in _ELEMWISE for c in calls)


def _inplace_input(call: Call, pending: Counter, outputs: set, elementwise: dict):
    """The input of the elementwise fused intermediate `call` whose storage its output may take:
    an intermediate Call output of the same type (shape and dtype) whose last use is this call;
    else None. `elementwise` caches _is_elementwise per Function."""
    if not isinstance(call, Call) or not isinstance(call.op, Function) or call in outputs:
        return None
    if call.op not in elementwise:
        elementwise[call.op] = _is_elementwise(call.op)
    if not elementwise[call.op]:
        return None
    for i in call.inputs:
        if isinstance(i, Call) and i not in outputs and pending[i] == 1 and i.type == call.type:
            return i
    return None


def _has_storage_views(target) -> bool:
    """Whether the executors of `target`'s backend place entries at offsets (Backend.storage_views)."""
    if target is None:
        return False
    from tvmc.backends import backend_for

    return backend_for(target).storage_views


def _normalized_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _only_op(call, op: str):
    """The body of fused call `call` when its Function is one `op` of its params, each once and in
    order (its kernel only copies them), else None."""
    if not isinstance(call, Call) or not isinstance(call.op, Function):
        return None
    body = call.op.body
    return body if isinstance(body, Call) and body.op == op and list(body.inputs) == list(call.op.params) else None


def _pure_concat_axis(call):
    """The axis of fused call `call` when its Function is one `concatenate` of its params (_only_op);
    else None."""
    body = _only_op(call, "concatenate")
    return None if body is None else _normalized_axis(int(body.attrs["axis"]), len(body.type.shape))


def _pure_reshape(call) -> bool:
    """Whether fused call `call`'s Function is one `reshape` of its param (_only_op): its kernel
    only copies the bytes, in the same row-major order."""
    return _only_op(call, "reshape") is not None


def reshape_views(order, inputs: set, outputs: set, views: dict) -> tuple:
    """(producer views, input views) of the reshapes that copy nothing (TVM's and onnxruntime's
    reshape as a view of the same buffer): a fused call that is only a `reshape` (_pure_reshape)
    whose input is
    - the output of another fused kernel, not a graph output, not a view already and of at most
      the reshape's bytes: {producer: (reshape, 0)}, the producer writes the reshape's storage (as
      a concatenation's inputs do, concat_views);
    - else a graph input (a Var of `inputs`), the reshape not a graph output: {reshape: input},
      the reshape reads the input's storage, which is never freed nor written by a kernel.
    The reshape then runs no kernel. ShuffleNet's grouped 1x1 convs run as GEMMs over
    reshape(x, [N, g, C/g, H*W]) and reshape back: two copies of 213 KB, 10.5 of 86 us, at its
    272-channel 14 x 14 layer (AVX-512, one thread)."""
    producers, readers = {}, {}
    for c in order:
        if not _pure_reshape(c) or c in views or c.type.is_dynamic:
            continue
        m = c.inputs[0]
        if isinstance(m, Call) and isinstance(m.op, Function) and m not in outputs and m not in views \
                and m not in producers and not m.type.is_dynamic and _nbytes(m.type) <= _nbytes(c.type):
            producers[m] = (c, 0)
        elif m in inputs and c not in outputs and not m.type.is_dynamic and _nbytes(c.type) <= _nbytes(m.type):
            readers[c] = m
    return producers, readers


def concat_views(order, outputs: set, alignment: int) -> dict:
    """{producer Call: (concatenation Call, byte offset)} for the concatenations whose inputs can be
    written in place, as slices of the concatenation's own tensor (the in-place concat of
    OpenVINO's and TensorRT's memory planners): the fused call is only a `concatenate`
    (_pure_concat_axis), the dimensions before the axis are all 1 (so each input is one
    contiguous run of the output: NCHW / NCHWc at batch 1 along channels), every shape is static,
    and every input is the output of another fused kernel (not a graph input, a constant, a
    run-time loop or a graph output), appears once, is not a view already, and starts at an offset
    that is a multiple of `alignment` bytes. The concatenation then runs no kernel (mod.json
    `__nop`). An input may have other uses (its storage lives until the last use of any tensor of
    the group) and may be itself such a concatenation (its inputs land at their offsets inside the
    outer one): DenseNet's chain concat(concat(concat(x0, x1), x2), x3) is one storage that each
    layer's output is written into."""
    views = {}
    for c in order:
        axis = _pure_concat_axis(c)
        if axis is None or c.type.is_symbolic or c.type.is_dynamic or math.prod(c.type.shape[:axis]) != 1:
            continue
        offsets, offset = [], 0
        for m in c.inputs:
            if not (isinstance(m, Call) and isinstance(m.op, Function) and m not in outputs and m not in views
                    and c.inputs.count(m) == 1 and not m.type.is_dynamic and offset % alignment == 0):
                break
            offsets.append(offset)
            offset += m.type.nbytes
        else:
            views.update((m, (c, o)) for m, o in zip(c.inputs, offsets))
    return views


@graph_pass("PlanMemory", opt_level=1, required=("FuseOps",),
            options={"alignment_bytes": 64, "inplace": False, "concat_views": True, "reshape_views": True})
def plan_memory(graph: Graph, ctx) -> Graph:
    """Liveness-based storage planning over the topological order of the fused graph (TVM's
    GraphPlanMemory / StorageAllocator).

    Every graph input, Constant and Call output gets a storage id. Each intermediate Call
    output takes the best-fitting free storage of its dtype (grown if needed) or a new one; a
    storage becomes free once the last user of its tensor has run (the output is allocated
    before the inputs are released, so kernels are not in place unless `inplace`). Graph inputs, constants,
    graph outputs and the outputs of load-time kernels (OpDef.load_time: run once when the artifact
    loads) get storages of their own, never shared. With the pass gated off (opt level
    0 or disabled) every tensor gets its own storage. Sizes are bytes rounded up to
    `alignment_bytes` (64); a tensor of symbolic shape is sized for the upper bound of each
    dimension's expression upper bound (tvmc.graph.symbolic.upper_bound), and reuse compares those sizes.

    Option `inplace` (default False): an intermediate output of a fused function made only of
    ELEMWISE/BROADCAST ops takes the storage of an input of its own type (shape and dtype) that
    is an intermediate Call output used last by this call (TVM's in-place reuse for
    elementwise kernels). Off by default: the kernels declare every pointer argument
    `noalias` (tvmc/codegen/llvm.py), and an input that is also the output breaks that
    promise, so LLVM may reorder loads and stores across it. Turn it on only with a codegen
    that drops `noalias` for aliased arguments.

    Option `concat_views` (default True; only where the target's backend has storage_views, so
    not on GPUs): a concatenation's inputs are written by their producers straight into its
    output's storage, each at its byte offset (concat_views); the storage is allocated when the
    first of them runs and lives until the last use of any tensor inside it, and the
    concatenation runs no kernel. SqueezeNet's fire modules, Inception's branches and DenseNet's
    blocks copy nothing (a concatenation fused with the ops after it, ShuffleNet's concat + relu,
    still runs its kernel).

    Option `reshape_views` (default True; where concat_views may apply): a fused call that is only
    a reshape runs no kernel, its producer writing the reshape's storage or, on a graph input, the
    reshape reading the input's (reshape_views).

    Returns a new Graph (same nodes) with meta:
      storage_id:      {Expr: sid} for every graph input and reachable Var, Constant, Call
      storage_offset:  {Expr: byte offset inside its storage} of the concatenations' inputs (the
                       others start at 0)
      view_calls:      the Calls that run no kernel: concatenations whose inputs are views, and
                       reshapes that are views of their input or whose input is a view of them
      storage_bytes:   [bytes per sid]
      planned_bytes:   bytes of the storages holding intermediate (non-output) Call outputs
      unplanned_bytes: bytes of all intermediate Call outputs, one storage each
      inplace:         {Call: input Call whose storage it writes} (empty unless `inplace`)
    Raises PassError on a bad alignment option.
    """
    alignment = ctx.option("PlanMemory", "alignment_bytes")
    if alignment < 1:
        raise PassError(f"PlanMemory.alignment_bytes must be >= 1, got {alignment}")
    reuse = ctx.is_enabled("PlanMemory")
    inplace_on = reuse and ctx.option("PlanMemory", "inplace")
    order = graph.topo()
    # tensors whose storage is never freed nor shared: the graph outputs and what the executors
    # compute once at load time (load_time_call), which lives as long as the params
    kept = set(graph.outputs) | {e for e in order if load_time_call(e)}
    pending = Counter(i for e in order if isinstance(e, Call) for i in e.inputs)
    storage_views = reuse and _has_storage_views(ctx.target)
    views = concat_views(order, kept, alignment) if storage_views and ctx.option("PlanMemory", "concat_views") else {}
    input_views: dict = {}  # {reshape: the graph input whose storage it reads}
    if storage_views and ctx.option("PlanMemory", "reshape_views"):
        producers, input_views = reshape_views(order, set(graph.inputs), kept, views)
        views.update(producers)

    def root(e):
        """(the outermost concatenation holding view `e`, e's byte offset inside it)."""
        offset = 0
        while e in views:
            e, o = views[e]
            offset += o
        return e, offset

    group: dict = {}  # {outermost concatenation: every tensor inside its storage, itself included}
    for e in list(views) + [c for c, _ in views.values()]:
        group.setdefault(root(e)[0], set()).add(e)
    grouped = set().union(*group.values())
    not_inplace = kept | grouped | set(input_views)  # tensors whose storage no in-place kernel may take

    table = _Storages()
    sid_of: dict = {}
    inplace: dict = {}
    elementwise: dict = {}
    # the calls of one run-time loop (one per carried value) are one node: all written when the first runs
    loops: dict = {}
    for e in order:
        if isinstance(e, Call) and e.op == "control.loop":
            loops.setdefault(e.attrs["body"], []).append(e)

    def allocate(e, src=None):
        size = _aligned(_nbytes(e.type), alignment)
        intermediate = isinstance(e, Call) and e not in kept
        if src is not None:
            sid_of[e] = sid_of[src]
            inplace[e] = src
        elif intermediate and reuse:
            sid_of[e] = table.reuse(size, e.dtype)
        else:
            sid_of[e] = table.new(size, e.dtype)

    offset_of: dict = {}
    for e in list(graph.inputs) + order:
        loop_call = isinstance(e, Call) and e.op == "control.loop"
        if e in sid_of and not loop_call and e not in grouped:
            continue
        src = None
        if e in input_views:
            sid_of[e] = sid_of[input_views[e]]
        elif e in grouped:
            if e not in sid_of:  # the first of a concatenation's inputs: the whole output's storage
                top, offset = root(e)
                if top not in sid_of:
                    allocate(top)
                sid_of[e] = sid_of[top]
                if offset:
                    offset_of[e] = offset
        elif e not in sid_of:
            src = _inplace_input(e, pending, not_inplace, elementwise) if inplace_on else None
            allocate(e, src)
            for sibling in loops[e.attrs["body"]] if loop_call else ():
                if sibling not in sid_of:
                    allocate(sibling)
        if not isinstance(e, Call):
            continue
        for i in e.inputs:
            pending[i] -= 1
            if pending[i] != 0 or not reuse or not isinstance(i, Call) or i in kept or i is src or i in input_views:
                continue
            if i not in grouped:
                table.free.append(sid_of[i])
            elif root(i)[0] not in kept and all(pending[m] == 0 for m in group[root(i)[0]]):
                table.free.append(sid_of[i])  # the last use of the group's last live tensor

    intermediates = [e for e in order if isinstance(e, Call) and e not in kept]
    meta = dict(graph.meta)
    meta["storage_id"] = sid_of
    meta["storage_bytes"] = list(table.nbytes)
    meta["planned_bytes"] = sum(table.nbytes[s] for s in {sid_of[e] for e in intermediates})
    meta["unplanned_bytes"] = sum(_aligned(_nbytes(e.type), alignment) for e in intermediates)
    meta["inplace"] = inplace
    meta["storage_offset"] = offset_of
    meta["view_calls"] = {c for c, _ in views.values()} | set(input_views)
    return graph.with_outputs(graph.outputs, meta)
