"""Schedules: loop transformations on the stages of a tensor-expression graph (TVM's te.Schedule).

Primitives: split, fuse, reorder, vectorize, parallel, unroll, tensorize, compute_inline, compute_at,
rfactor, cache_write, and for GPUs bind (a loop to a `thread_axis`), cache_read and set_scope (memory scopes
global / shared / local). A schedule never changes what is computed, only the loop nest that
computes it; `tvmc.tir.lower` turns it into loop IR (and `tvmc.tir.gpu` into a device kernel).
"""

from __future__ import annotations

from tvmc.errors import ScheduleError
from tvmc.te import extent as xt
from tvmc.te.expr import Reduce, TensorLoad, substitute, transform
from tvmc.te.tensor import ComputeOp, IterVar, Tensor

# GPU thread axes (TVM's names): the grid of blocks, and the threads of one block.
BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
THREAD_TAGS = BLOCK_AXES + THREAD_AXES
# Memory scopes of a stage's buffer: device memory, memory shared by the threads of a block,
# memory private to one thread (registers).
SCOPES = ("global", "shared", "local")


class ThreadAxis:
    """A GPU thread axis `tag` (one of THREAD_TAGS) that a loop can be bound to (TVM's te.thread_axis)."""

    def __init__(self, tag: str):
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"unknown thread axis '{tag}'; known: {', '.join(THREAD_TAGS)}")
        self.tag = tag

    def __repr__(self):
        return f"thread_axis({self.tag})"


def thread_axis(tag: str) -> ThreadAxis:
    """The thread axis `tag` ('blockIdx.x' .. 'threadIdx.z'); raises ScheduleError on another name."""
    return ThreadAxis(tag)


class Split:
    """parent = outer * factor + inner (inner in [0, factor))."""

    def __init__(self, parent, outer, inner, factor):
        self.parent, self.outer, self.inner, self.factor = parent, outer, inner, factor


class Fuse:
    """fused = outer * inner.extent + inner."""

    def __init__(self, outer, inner, fused):
        self.outer, self.inner, self.fused = outer, inner, fused


class Stage:
    """The loop nest of one compute tensor.

    `leaf` is the current loop order (outermost first); `annotations` maps a leaf IterVar to
    'parallel', 'vectorize', 'unroll' or a thread tag ('blockIdx.x', ...: bound by `bind`);
    `attach` is 'root', 'inline' or (stage, IterVar); `scope` is the memory scope of the
    stage's buffer ('global', 'shared', 'local'), or None for the default (global at root,
    local when attached); `min_parallel` maps a parallel leaf of symbolic extent to the fewest
    iterations that run on threads (fewer run serially); `clamped` holds the root axes whose
    overhang past the tensor's end is clamped (clamp_edges).
    """

    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.op: ComputeOp = tensor.op
        self.root = list(self.op.axis) + list(self.op.reduce_axis)
        self.leaf = list(self.root)
        self.relations: list = []
        self.annotations: dict = {}
        self.partitioned: list = []  # leaf IterVars split at their guards (partition)
        self.attach = "root"
        self.scope = None
        self.tensorized = None  # (leaf IterVar, intrinsic) set by tensorize
        self.min_parallel: dict = {}
        self.clamped: set = set()

    # --- loop transformations -----------------------------------------------------------
    def _check_leaf(self, iv, what):
        if iv not in self.leaf:
            raise ScheduleError(f"{what}: {iv} is not a current loop of stage {self.tensor.name}")

    def split(self, iv: IterVar, factor: int):
        """Split `iv` into (outer, inner) with inner extent `factor`; returns (outer, inner).
        A factor that does not divide the extent adds a bounds guard. A symbolic extent E
        (tvmc.te.extent) gives an outer loop of ceil(E / factor) and the guard, which lowering's
        loop partitioning (tvmc.tir.partition) lifts out of the iterations that need none; the
        factor is capped at E's upper bound."""
        self._check_leaf(iv, "split")
        factor = max(1, min(int(factor), xt.upper_bound(iv.extent)))
        outer = IterVar(xt.ceildiv(iv.extent, factor), iv.name + "_outer", iv.kind)
        inner = IterVar(factor, iv.name + "_inner", iv.kind)
        k = self.leaf.index(iv)
        self.leaf[k:k + 1] = [outer, inner]
        self.relations.append(Split(iv, outer, inner, factor))
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent loops (outermost first) into one; returns the fused IterVar."""
        out = ivs[0]
        for iv in ivs[1:]:
            self._check_leaf(out, "fuse")
            self._check_leaf(iv, "fuse")
            if self.leaf.index(iv) != self.leaf.index(out) + 1:
                raise ScheduleError(f"fuse: {out.name} and {iv.name} are not adjacent in {self.tensor.name}")
            if out.kind != iv.kind:
                raise ScheduleError("fuse: cannot fuse a reduce axis with a spatial axis")
            fused = IterVar(xt.mul(out.extent, iv.extent), f"{out.name}.{iv.name}", out.kind)
            k = self.leaf.index(out)
            self.leaf[k:k + 2] = [fused]
            self.relations.append(Fuse(out, iv, fused))
            out = fused
        return out

    def reorder(self, *ivs: IterVar):
        """Put `ivs` in this order, in the positions they occupied."""
        for iv in ivs:
            self._check_leaf(iv, "reorder")
        pos = sorted(self.leaf.index(iv) for iv in ivs)
        for p, iv in zip(pos, ivs):
            self.leaf[p] = iv

    def vectorize(self, iv: IterVar):
        self._check_leaf(iv, "vectorize")
        self.annotations[iv] = "vectorize"

    def parallel(self, iv: IterVar, min_extent=0):
        """Run loop `iv`'s iterations on the library's threads. `min_extent` (an int, or an
        expression of SizeVars): where the work is symbolic, the fewest iterations worth a
        parallel launch; a run with fewer runs them on the calling thread (a launch costs
        microseconds, DESIGN.md section 4)."""
        self._check_leaf(iv, "parallel")
        self.annotations[iv] = "parallel"
        if not xt.is_static(min_extent) or (min_extent > 1 and not xt.is_static(iv.extent)):
            self.min_parallel[iv] = min_extent

    def unroll(self, iv: IterVar):
        self._check_leaf(iv, "unroll")
        self.annotations[iv] = "unroll"

    def rolled(self, iv: IterVar):
        """Keep loop `iv` a loop in the generated code: the LLVM code generator marks it
        llvm.loop.unroll.disable, where LLVM would otherwise unroll a short constant loop."""
        self._check_leaf(iv, "rolled")
        self.annotations[iv] = "rolled"

    def partition(self, iv: IterVar):
        """Split loop `iv` at its first guarded iteration (tvmc.tir.partition) in a kernel of
        constant shapes too (kernels with size variables partition every loop): the iterations
        before run the body simplified under that bound, without the guard, and the rest apart
        (a GEMM's last column tile, where the output reads another stage: nn.matmul_tn)."""
        self._check_leaf(iv, "partition")
        self.partitioned.append(iv)

    def tensorize(self, iv: IterVar, intrin):
        """Compute the loops from `iv` inward (a reduction's update) by one intrinsic statement
        (TVM's tensorize): `intrin.lower(acc, acc_index, source, inner, ranges)` (e.g.
        tvmc.tir.tensorize.DotU8S8Intrin) checks at lowering that those loops compute what it
        does and returns the statement. The loops must tile their axes exactly (splits that
        divide); the reduction's init keeps the loops and their annotations."""
        self._check_leaf(iv, "tensorize")
        if not self.op.reduce_axis:
            raise ScheduleError(f"tensorize: {self.tensor.name} is not a reduction")
        self.tensorized = (iv, intrin)

    def bind(self, iv: IterVar, axis: ThreadAxis):
        """Run loop `iv` on GPU thread axis `axis` (TVM's bind): one block or thread per
        iteration instead of a loop. A bound reduce axis becomes a cross-thread reduction."""
        self._check_leaf(iv, "bind")
        if not isinstance(axis, ThreadAxis):
            raise ScheduleError(f"bind: {axis!r} is not a thread_axis")
        if axis.tag in self.annotations.values():
            raise ScheduleError(f"bind: stage {self.tensor.name} already binds {axis.tag}")
        self.annotations[iv] = axis.tag

    def set_scope(self, scope: str):
        """Keep this stage's buffer in memory `scope` ('global', 'shared' or 'local')."""
        if scope not in SCOPES:
            raise ScheduleError(f"set_scope: unknown scope '{scope}'; known: {', '.join(SCOPES)}")
        self.scope = scope

    def clamp_edges(self, *axes: IterVar):
        """For a stage computed at a parent's loop (compute_at) whose region can pass the tensor's
        end along `axes` (root spatial axes; a tile of rows over a symbolic M): compute the part
        past the end at the last valid coordinate instead of skipping it under a guard, so its
        loops hold no branch. Those values are never read: the consumer's own iterations past the
        end are guarded. For accumulators of register tiles (tvmc/ops/cpu/tiling.py)."""
        for iv in axes:
            if iv not in self.op.axis:
                raise ScheduleError(f"clamp_edges: {iv} is not a spatial axis of stage {self.tensor.name}")
            self.clamped.add(iv)

    # --- placement ------------------------------------------------------------------------
    def compute_inline(self):
        """Substitute this stage's body into its consumers (no buffer, no loops)."""
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: {self.tensor.name} is a reduction")
        self.attach = "inline"

    def compute_at(self, parent: "Stage", iv: IterVar):
        """Compute this stage inside `parent`'s loop `iv`, over the region that one iteration
        of `iv` reads (bound inference), into a local buffer."""
        parent._check_leaf(iv, "compute_at")
        self.attach = (parent, iv)

    def __repr__(self):
        return f"Stage({self.tensor.name}, leaf={[iv.name for iv in self.leaf]})"


class Schedule:
    """All compute stages reachable from `outputs`, in topological order (producers first)."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.stages: list = []
        self._by_tensor: dict = {}
        for t in _topo(self.outputs):
            self._add(t)

    def _add(self, t):
        st = Stage(t)
        self.stages.append(st)
        self._by_tensor[t.uid] = st
        return st

    def __getitem__(self, t: Tensor) -> Stage:
        try:
            return self._by_tensor[t.uid]
        except KeyError:
            raise ScheduleError(f"{t.name} is not a compute stage of this schedule") from None

    def cache_write(self, t: Tensor, scope: str | None = None) -> Tensor:
        """Compute `t` into a new stage (returned, in memory `scope`, default local when
        attached); `t` becomes a copy of it. Used for register accumulators: schedule the cache
        stage with compute_at into `t`'s loops."""
        st = self[t]
        if st.leaf != st.root or st.relations:
            raise ScheduleError("cache_write must come before other primitives on the stage")
        cache = Tensor(t.shape, t.dtype, t.name + "_local", t.op)
        axis = [IterVar(e, f"{t.name}_c{k}") for k, e in enumerate(t.shape)]
        t.op = ComputeOp(axis, TensorLoad(cache, [a.var for a in axis]), t.op.tag)
        self._insert_producer(st, cache)
        if scope is not None:
            self[cache].set_scope(scope)
        return cache

    def cache_read(self, t: Tensor, scope: str, readers) -> Tensor:
        """A copy of `t` (returned) in memory `scope` that the stages of `readers` read instead
        of `t` (TVM's cache_read): e.g. a tile of a GEMM operand staged in shared memory, with
        compute_at into the readers' block loop and its own loops bound to the block's threads."""
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read: unknown scope '{scope}'; known: {', '.join(SCOPES)}")
        reader_stages = [self[r] for r in readers]
        cache = Tensor(t.shape, t.dtype, f"{t.name}_{scope}")
        axis = [IterVar(e, f"{cache.name}_i{k}") for k, e in enumerate(t.shape)]
        cache.op = ComputeOp(axis, TensorLoad(t, [a.var for a in axis]), "cache_read")

        def reread(x):
            return TensorLoad(cache, x.indices) if isinstance(x, TensorLoad) and x.tensor.uid == t.uid else None

        for st in reader_stages:
            op = st.op
            if not any(i.uid == t.uid for i in op.input_tensors()):
                raise ScheduleError(f"cache_read: {st.tensor.name} does not read {t.name}")
            # same axis and reduce-axis objects: the stage's leaves and relations still apply
            st.op = st.tensor.op = ComputeOp(op.axis, transform(op.body, reread), op.tag, op.attrs)
        first = min(self.stages.index(st) for st in reader_stages)
        stage = Stage(cache)
        stage.scope = scope
        self.stages.insert(first, stage)
        self._by_tensor[cache.uid] = stage
        return cache

    def rfactor(self, t: Tensor, factor: int) -> Tensor:
        """Factor `t`'s reduction over its last reduce axis k (extent divisible by `factor`)
        through a new stage (returned) of shape t.shape + (factor,) that reduces over the other
        reduce axes and k_outer with k = k_outer * factor + lane, a spatial last axis
        (vectorizable when k is the innermost, contiguous index of the source); `t` becomes the
        reduction of that stage over its last axis. TVM's rfactor, on one axis (a reduction over
        every axis of a tensor, e.g. DynamicQuantizeLinear's min and max, factors its innermost
        one). A symbolic extent K (tvmc.te.extent) needs no divisibility: k_outer runs to
        ceil(K / factor) and the partial reduction combines only k < K (a Reduce condition), which
        loop partitioning lifts out of every k_outer step but the last. Raises ScheduleError
        otherwise."""
        st = self[t]
        body = t.op.body
        if not isinstance(body, Reduce) or not body.axes:
            raise ScheduleError(f"rfactor: {t.name} is not a reduction")
        if st.leaf != st.root or st.relations:
            raise ScheduleError("rfactor must come before other primitives on the stage")
        *others, k = body.axes
        symbolic = not xt.is_static(k.extent)
        if factor < 1 or (not symbolic and k.extent % factor):
            raise ScheduleError(f"rfactor: factor {factor} does not divide {t.name}'s reduction of {k.extent}")
        if body.condition is not None:
            raise ScheduleError(f"rfactor: {t.name} is a reduction with a condition")
        axis = [IterVar(e, f"{t.name}_rf{n}") for n, e in enumerate(t.shape)] + [IterVar(factor, f"{t.name}_lane")]
        ko = IterVar(xt.ceildiv(k.extent, factor) if symbolic else k.extent // factor, k.name + "_outer", "reduce")
        mapping = {old.var: new.var for old, new in zip(t.op.axis, axis)}
        mapping[k.var] = ko.var * factor + axis[-1].var
        condition = None
        if symbolic and not xt.divides(factor, k.extent):
            condition = mapping[k.var] < k.extent
        partial = Tensor(t.shape + (factor,), t.dtype, t.name + "_rf",
                         ComputeOp(axis, Reduce(body.combiner, substitute(body.source, mapping), [*others, ko],
                                                condition), t.op.tag))
        lane = IterVar(factor, k.name + "_lane", "reduce")
        t.op = ComputeOp(t.op.axis, Reduce(body.combiner, TensorLoad(partial, [a.var for a in t.op.axis] + [lane.var]),
                                           [lane]), t.op.tag)
        self._insert_producer(st, partial)
        return partial

    def _insert_producer(self, st: "Stage", producer: Tensor) -> None:
        """Give `producer` (a new tensor that `st`'s tensor now reads) a stage right before `st`,
        and replace `st` with a fresh stage of its rewritten op (cache_write, rfactor)."""
        k = self.stages.index(st)
        new_stage = Stage(producer)
        self.stages.insert(k, new_stage)
        self._by_tensor[producer.uid] = new_stage
        self.stages[k + 1] = Stage(st.tensor)
        self._by_tensor[st.tensor.uid] = self.stages[k + 1]


def _topo(outputs) -> list:
    order, seen = [], set()

    def visit(t):
        if t.uid in seen or t.op is None:
            return
        seen.add(t.uid)
        for i in t.op.input_tensors():
            visit(i)
        order.append(t)

    for o in outputs:
        visit(o)
    return order


def create_schedule(outputs) -> Schedule:
    """A default schedule (every stage at root, loops in axis order) for output tensor(s)."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    return Schedule(outputs)


__all__ = ["Schedule", "Stage", "ThreadAxis", "create_schedule", "thread_axis"]
