"""Schedules: loop transformations on the stages of a tensor-expression graph (TVM's te.Schedule).

Primitives: split, fuse, reorder, vectorize, parallel, unroll, compute_inline, compute_at, rfactor,
cache_write. A schedule never changes what is computed, only the loop nest that computes it;
`tvmc.tir.lower` turns it into loop IR.
"""

from __future__ import annotations

from tvmc.errors import ScheduleError
from tvmc.te.expr import Reduce, TensorLoad, substitute
from tvmc.te.tensor import ComputeOp, IterVar, Tensor


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
    'parallel', 'vectorize' or 'unroll'; `attach` is 'root', 'inline' or (stage, IterVar).
    """

    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.op: ComputeOp = tensor.op
        self.root = list(self.op.axis) + list(self.op.reduce_axis)
        self.leaf = list(self.root)
        self.relations: list = []
        self.annotations: dict = {}
        self.attach = "root"

    # --- loop transformations -----------------------------------------------------------
    def _check_leaf(self, iv, what):
        if iv not in self.leaf:
            raise ScheduleError(f"{what}: {iv} is not a current loop of stage {self.tensor.name}")

    def split(self, iv: IterVar, factor: int):
        """Split `iv` into (outer, inner) with inner extent `factor`; returns (outer, inner).
        A factor that does not divide the extent adds a bounds guard."""
        self._check_leaf(iv, "split")
        factor = max(1, min(int(factor), iv.extent))
        outer = IterVar(-(-iv.extent // factor), iv.name + "_outer", iv.kind)
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
            fused = IterVar(out.extent * iv.extent, f"{out.name}.{iv.name}", out.kind)
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

    def parallel(self, iv: IterVar):
        self._check_leaf(iv, "parallel")
        self.annotations[iv] = "parallel"

    def unroll(self, iv: IterVar):
        self._check_leaf(iv, "unroll")
        self.annotations[iv] = "unroll"

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

    def cache_write(self, t: Tensor) -> Tensor:
        """Compute `t` into a new stage (returned); `t` becomes a copy of it. Used for register
        accumulators: schedule the cache stage with compute_at into `t`'s loops."""
        st = self[t]
        if st.leaf != st.root or st.relations:
            raise ScheduleError("cache_write must come before other primitives on the stage")
        cache = Tensor(t.shape, t.dtype, t.name + "_local", t.op)
        axis = [IterVar(e, f"{t.name}_c{k}") for k, e in enumerate(t.shape)]
        t.op = ComputeOp(axis, TensorLoad(cache, [a.var for a in axis]), t.op.tag)
        self._insert_producer(st, cache)
        return cache

    def rfactor(self, t: Tensor, factor: int) -> Tensor:
        """Factor `t`'s reduction (one reduce axis k, extent divisible by `factor`) through a new
        stage (returned) of shape t.shape + (factor,) that reduces over k_outer with
        k = k_outer * factor + lane, a spatial last axis (vectorizable when k is the innermost,
        contiguous index of the source); `t` becomes the reduction of that stage over its
        last axis. TVM's rfactor, for one axis. Raises ScheduleError otherwise."""
        st = self[t]
        body = t.op.body
        if not isinstance(body, Reduce) or len(body.axes) != 1:
            raise ScheduleError(f"rfactor: {t.name} must reduce over exactly one axis")
        if st.leaf != st.root or st.relations:
            raise ScheduleError("rfactor must come before other primitives on the stage")
        (k,) = body.axes
        if factor < 1 or k.extent % factor:
            raise ScheduleError(f"rfactor: factor {factor} does not divide {t.name}'s reduction of {k.extent}")
        axis = [IterVar(e, f"{t.name}_rf{n}") for n, e in enumerate(t.shape)] + [IterVar(factor, f"{t.name}_lane")]
        ko = IterVar(k.extent // factor, k.name + "_outer", "reduce")
        mapping = {old.var: new.var for old, new in zip(t.op.axis, axis)}
        mapping[k.var] = ko.var * factor + axis[-1].var
        partial = Tensor(t.shape + (factor,), t.dtype, t.name + "_rf",
                         ComputeOp(axis, Reduce(body.combiner, substitute(body.source, mapping), [ko]), t.op.tag))
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


__all__ = ["Schedule", "Stage", "create_schedule"]
