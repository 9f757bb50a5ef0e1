"""Lowering: a te.Schedule -> loop IR PrimFunc (inlining, bound inference for compute_at,
loop nests from split/fuse relations, reduction init/update, buffer flattening; for GPU
schedules, memory scopes, loops bound to thread axes and cross-thread reductions).
"""

from __future__ import annotations

from tvmc.errors import ScheduleError
from tvmc.te import extent as xt
from tvmc.te.expr import (FLOAT16_DTYPES, BinOp, Cast, IntImm, Load, Reduce, TensorLoad, Var, eq, logical_and,
                          minimum, substitute, transform, walk)
from tvmc.te.schedule import THREAD_AXES, THREAD_TAGS, Schedule, Split, Stage
from tvmc.tir.ir import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Seq, Store
from tvmc.tir.partition import partition_loops
from tvmc.tir.simplify import Linear, expr_bounds, simplify, simplify_stmt, size_only


def lower(sch: Schedule, args, name: str, partition: bool = True, stages=None) -> PrimFunc:
    """Lower `sch` into a kernel whose parameters are the tensors `args` (inputs then output).
    `stages`: the names of the root stages whose loop nests the kernel holds (every stage's when
    None; the others' buffers are allocated all the same): one part of a kernel that
    tvmc.tir.buckets specializes per size bucket.

    Symbolic extents (SizeVars in the tensors' shapes, tvmc.te.extent) make loops of symbolic
    extent; the SizeVars become the kernel's int64 arguments after its buffers (PrimFunc.size_vars,
    in the order they first appear in the arguments' shapes, then those that only the computes read,
    e.g. a value computed from a size), and the guards of splits that may
    not divide are lifted out of the iterations that need none (tvmc.tir.partition), unless
    `partition` is False (GPU kernels: the guards stay where they are, tvmc.tir.gpu).

    A compute_at region is constant, or symbolic in SizeVars alone (one row of a symbolic length:
    its loops run to the run's extent, its local buffer is sized for the upper bound).

    Raises ScheduleError when a compute_at region cannot be bounded that way, or a SizeVar of the
    kernel appears in no argument's shape.
    """
    return _Lowering(sch, args, name, partition, stages).run()


def inlined_bodies(sch: Schedule) -> dict:
    """{stage: its body with every compute_inline'd stage it reads substituted (recursively)}, for
    the stages of `sch` in order (producers first)."""
    bodies, inlined = {}, {}

    def rule(x):
        if isinstance(x, TensorLoad) and x.tensor.uid in inlined:
            st = inlined[x.tensor.uid]
            return substitute(bodies[st], {a.var: i for a, i in zip(st.op.axis, x.indices)})
        return None

    for st in sch.stages:
        bodies[st] = transform(st.op.body, rule)
        if st.attach == "inline":
            inlined[st.tensor.uid] = st
    return bodies


class _Lowering:
    def __init__(self, sch, args, name, partition=True, stages=None):
        self.sch, self.args, self.name, self.partition = sch, list(args), name, partition
        self.stages = None if stages is None else set(stages)
        self.buffers = {}      # tensor uid -> (Buffer, [base exprs] or None)
        self.bodies = {}       # stage -> body expr with inline stages substituted
        self.children = {}     # (id(stage), id(iv)) -> [Stage]
        self.names = set()
        self.thread_ranges = {}  # Var of a loop bound to threadIdx.* -> extent (shared regions relax them)

    def _buffer(self, t, shape, scope="global", name=None, intermediate=True):
        """A buffer for tensor `t` (named `name`, default the tensor's, made unique); an
        intermediate float16 or bfloat16 tensor is held as float32 (they compute in float32,
        tvmc/codegen/llvm.py), so a reduction accumulates without 16-bit rounding."""
        base = name or t.name
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return Buffer(name, shape, "float32" if intermediate and t.dtype in FLOAT16_DTYPES else t.dtype, scope)

    def run(self) -> PrimFunc:
        params = []
        for t in self.args:
            buf = self._buffer(t, t.shape, intermediate=False)
            self.buffers[t.uid] = (buf, None)
            params.append(buf)
        self._inline_bodies()
        for st in self.sch.stages:
            if isinstance(st.attach, tuple):
                parent, iv = st.attach
                self.children.setdefault((id(parent), id(iv)), []).append(st)
        roots = [st for st in self.sch.stages if st.attach == "root"]
        allocs = []
        nests = []
        for st in roots:
            if st.tensor.uid not in self.buffers:
                buf = self._buffer(st.tensor, st.tensor.shape, st.scope or "global")
                self.buffers[st.tensor.uid] = (buf, None)
                allocs.append(buf)
            if self.stages is None or st.tensor.name in self.stages:
                nests.append(self._stage_nest(st, [(IntImm(0), e) for e in st.tensor.shape]))
        body = Seq(nests)
        for buf in reversed(allocs):
            body = Allocate(buf, body)
        size_vars = xt.size_vars([t.shape for t in self.args])
        used = xt.size_vars([(st.tensor.shape, [r.extent for r in st.op.reduce_axis]) for st in self.sch.stages])
        unknown = [v.name for v in used if v not in size_vars]
        if unknown:
            raise ScheduleError(f"{self.name}: size variable(s) {', '.join(unknown)} appear in no argument's shape")
        # a value computed from a size variable (shape_to_tensor, arange's start) reads it in a body only
        values = xt.size_vars([getattr(st.op, "body", None) for st in self.sch.stages])
        size_vars += [v for v in values if v not in size_vars]
        body = simplify_stmt(body)
        # with size variables every loop is partitioned; in a kernel of constant shapes the loops
        # its schedule marks (Stage.partition), if any
        only = None if size_vars else {iv.var for st in self.sch.stages for iv in st.partitioned}
        if self.partition and (only is None or only):
            body = partition_loops(body, only=only)
        return PrimFunc(self.name, params, body, size_vars=size_vars)

    # --- inlining ---------------------------------------------------------------------------
    def _inline_bodies(self):
        self.bodies = inlined_bodies(self.sch)
        inlined = {st.tensor.uid for st in self.sch.stages if st.attach == "inline"}
        for t in self.args:
            if t.uid in inlined:
                raise ScheduleError(f"{t.name} is a kernel argument and cannot be inlined")

    # --- loop nest of one stage --------------------------------------------------------------
    def _extents(self, st: Stage, region):
        ext = {}
        for iv, (_, e) in zip(st.op.axis, region):
            ext[iv] = e
        for iv in st.op.reduce_axis:
            ext[iv] = iv.extent
        guards = []
        for rel in st.relations:
            if isinstance(rel, Split):
                pe = ext[rel.parent]
                if xt.is_static(pe):
                    f = max(1, min(rel.factor, pe))  # (an empty tensor's axis has extent 0)
                    ext[rel.inner] = f
                    ext[rel.outer] = -(-pe // f)
                    if pe % f:
                        guards.append(rel.parent)
                else:
                    ext[rel.inner] = rel.factor
                    ext[rel.outer] = xt.ceildiv(pe, rel.factor)
                    if not xt.divides(rel.factor, pe):
                        guards.append(rel.parent)
            else:
                ext[rel.fused] = xt.mul(ext[rel.outer], ext[rel.inner])
        return ext, guards

    @staticmethod
    def _root_exprs(st: Stage, ext):
        expr = {iv: iv.var for iv in st.leaf}
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                factor = min(rel.factor, ext[rel.parent]) if xt.is_static(ext[rel.parent]) else rel.factor
                expr[rel.parent] = expr[rel.outer] * factor + expr[rel.inner]
            else:
                f = expr[rel.fused]
                expr[rel.outer] = f // ext[rel.inner]
                expr[rel.inner] = f % ext[rel.inner]
        return expr

    def _stage_nest(self, st: Stage, region, outer_ranges=None):
        """Loop nest computing stage `st` over `region` [(base, extent)] of its spatial axes;
        `outer_ranges` (Var -> extent) bound the loops of the stage it is attached to."""
        outer_ranges = outer_ranges or {}
        ext, guard_ivs = self._extents(st, region)
        for iv in st.leaf:
            if st.annotations.get(iv) in THREAD_AXES:
                self.thread_ranges[iv.var] = ext[iv]
        local = self._root_exprs(st, ext)
        ranges = {iv.var: ext[iv] for iv in st.leaf}
        coord = {}
        for iv, (base, _) in zip(st.op.axis, region):
            coord[iv.var] = simplify(base + local[iv], ranges)
        for iv in st.op.reduce_axis:
            coord[iv.var] = simplify(local[iv], ranges)
        guards = [(rel_parent.kind, local[rel_parent] < ext[rel_parent]) for rel_parent in guard_ivs]
        # An attached stage's region may run past the tensor's edge on the last tile: guarded,
        # or along clamped axes (Stage.clamp_edges) computed at the last index
        value_coord = coord
        for iv, (base, e), size in zip(st.op.axis, region, st.tensor.shape):
            if isinstance(base, IntImm) and base.value == 0 and xt.provably_le(e, size):
                continue
            if iv in st.clamped:
                past = expr_bounds(base + (e - 1) - (size - 1), outer_ranges)
                if past is not None and past[1] <= 0:  # inside the tensor wherever the parent's loops are
                    continue
                value_coord = dict(value_coord)
                value_coord[iv.var] = minimum(coord[iv.var], size - 1)
            else:
                guards.append(("spatial", coord[iv.var] < size))

        # Children attached to our loops: bound inference, local buffers.
        attached = {}
        for iv in st.leaf:
            kids = self.children.get((id(st), id(iv)), [])
            regions = {}
            for child in reversed(kids):  # consumers first: a child may be read only by a later sibling
                siblings = [(k, regions[k.tensor.uid]) for k in kids if k.tensor.uid in regions]
                regions[child.tensor.uid] = self._infer_region(st, iv, child, ext, coord, siblings)
            for child in kids:
                creg = regions[child.tensor.uid]
                buf = self._buffer(child.tensor, [e for _, e in creg], child.scope or "local")
                self.buffers[child.tensor.uid] = (buf, [b for b, _ in creg])
                attached.setdefault(iv, []).append((child, creg, buf))

        buf, bases = self.buffers[st.tensor.uid]
        out_idx = [local[iv] if bases is not None else coord[iv.var] for iv in st.op.axis]
        store_index = buf.flat_index(out_idx)
        body = self.bodies[st]
        value = self._to_loads(substitute(body, value_coord))

        def guarded(stmt, kinds):
            conds = [c for k, c in guards if k in kinds]
            return IfThenElse(logical_and(*conds), stmt) if conds else stmt

        def nest(leaves, inner):
            for iv in reversed(leaves):
                kids = attached.get(iv, [])
                if kids:
                    parts = [self._stage_nest(c, creg, {**outer_ranges, **ranges}) for c, creg, _ in kids]
                    inner = Seq(parts + [inner])
                    for _, _, kbuf in kids:
                        inner = Allocate(kbuf, inner)
                kind = st.annotations.get(iv, "serial")
                inner = For(iv.var, ext[iv], kind, inner, st.min_parallel.get(iv, 0))
            return inner

        if not isinstance(value, Reduce):
            return nest(st.leaf, guarded(Store(buf, store_index, value), ("spatial", "reduce")))

        first = next(k for k, iv in enumerate(st.leaf) if iv.kind == "reduce")
        common, tail = st.leaf[:first], st.leaf[first:]
        bound = [iv for iv in tail if iv.kind == "reduce" and st.annotations.get(iv) in THREAD_TAGS]
        if bound:
            return nest(common, self._cross_thread_reduce(st, tail, bound, value, buf, store_index, ext,
                                                          guarded, nest))
        init_loops = [iv for iv in tail if iv.kind == "spatial"]
        # a float16 or bfloat16 output accumulates in a float32 register-sized local, stored
        # (rounded) once
        acc = self._buffer(st.tensor, [1], "local") if buf.dtype in FLOAT16_DTYPES and not init_loops else None
        acc_buf, acc_index = (acc, IntImm(0)) if acc is not None else (buf, store_index)
        init = Store(acc_buf, acc_index, value.identity())
        combined = _combine(value.combiner, Load(acc_buf, acc_index), value.source)
        update = Store(acc_buf, acc_index, combined)
        if value.condition is not None:  # a Reduce's `where`
            if st.tensorized is not None:
                raise ScheduleError(f"tensorize: {st.tensor.name} is a reduction with a condition")
            update = IfThenElse(simplify(value.condition, ranges), update)
        update = guarded(update, ("spatial", "reduce"))
        init_nest = self._plain_nest(st, init_loops, ext, guarded(init, ("spatial",)))
        if st.tensorized is not None:
            update_nest = self._tensorized(st, tail, ext, ranges, guard_ivs, guards, acc_buf, acc_index, value, nest)
        else:
            update_nest = nest(tail, update)
        if acc is None:
            return nest(common, Seq([init_nest, update_nest]))
        final = guarded(Store(buf, store_index, Load(acc, IntImm(0))), ("spatial",))
        return nest(common, Allocate(acc, Seq([init_nest, update_nest, final])))

    def _tensorized(self, st, tail, ext, ranges, guard_ivs, guards, acc_buf, acc_index, value, nest):
        """The update nest of a stage with Stage.tensorize: the loops outside the tensorized leaf,
        then the intrinsic's statement. A tile edge guard (a region that could pass the tensor's
        end) holds for the whole statement when it holds at the inner loops' last iteration."""
        iv, intrin = st.tensorized
        if iv not in tail:
            raise ScheduleError(f"tensorize: {iv.name} of {st.tensor.name} is outside its reduction loops")
        pos = tail.index(iv)
        inner = tail[pos:]
        if guard_ivs:
            raise ScheduleError(f"tensorize: {st.tensor.name} splits {', '.join(g.name for g in guard_ivs)} by a "
                                "factor that does not divide it")
        if any((id(st), id(x)) in self.children for x in inner):
            raise ScheduleError(f"tensorize: a stage is attached inside the tensorized loops of {st.tensor.name}")
        stmt = intrin.lower(acc_buf, acc_index, value.source, [(x.var, ext[x], x.kind) for x in inner], ranges)
        last = {x.var: IntImm(ext[x] - 1) for x in inner}
        conds = [simplify(substitute(c, last), ranges) for _, c in guards]
        conds = [c for c in conds if not (isinstance(c, IntImm) and c.value)]
        return nest(tail[:pos], IfThenElse(logical_and(*conds), stmt) if conds else stmt)

    def _cross_thread_reduce(self, st, tail, bound, value, buf, store_index, ext, guarded, nest):
        """A reduction whose reduce loop `bound[0]` is bound to a thread axis (TVM's
        lower_thread_allreduce): each thread folds its share of the reduce loops into a local
        accumulator, the block combines the T partial results in a shared buffer by halving
        steps (log2 T barriers), and the result is stored by every thread into a local buffer,
        by thread 0 into shared or global memory."""
        if len(bound) != 1 or any(iv.kind == "spatial" for iv in tail):
            raise ScheduleError(f"{st.tensor.name}: a cross-thread reduction binds exactly one reduce loop "
                                "and has no spatial loop inside its reduce loops")
        tiv = bound[0]
        if (id(st), id(tiv)) in self.children:
            raise ScheduleError(f"{st.tensor.name}: no stage can be attached to the thread-bound loop {tiv.name}")
        threads, tid = ext[tiv], tiv.var
        acc = self._buffer(st.tensor, (1,), "local", name=f"{buf.name}_acc")
        red = self._buffer(st.tensor, (threads,), "shared", name=f"{buf.name}_red")
        zero = IntImm(0)
        update = guarded(Store(acc, zero, _combine(value.combiner, Load(acc, zero), value.source)),
                         ("spatial", "reduce"))
        steps = [Store(acc, zero, value.identity()), nest([iv for iv in tail if iv is not tiv], update),
                 Store(red, tid, Load(acc, zero)), Barrier()]
        half = 1
        while 2 * half < threads:
            half *= 2
        while half >= 1:
            cond = tid < half if 2 * half <= threads else logical_and(tid < half, tid + half < threads)
            steps += [IfThenElse(cond, Store(red, tid, _combine(value.combiner, Load(red, tid),
                                                                Load(red, tid + half)))),
                      Barrier()]
            half //= 2
        result = guarded(Store(buf, store_index, Load(red, zero)), ("spatial",))
        if buf.scope != "local":
            result = IfThenElse(eq(tid, 0), result)
        body = Allocate(acc, Allocate(red, Seq(steps + [result, Barrier()])))
        return For(tid, threads, st.annotations[tiv], body)

    @staticmethod
    def _plain_nest(st, leaves, ext, inner):
        for iv in reversed(leaves):
            kind = st.annotations.get(iv, "serial")
            inner = For(iv.var, ext[iv], kind, inner, st.min_parallel.get(iv, 0))
        return inner

    def _to_loads(self, e):
        def load(x, indices, rounded=True):
            if x.tensor.uid not in self.buffers:
                raise ScheduleError(f"{self.name}: tensor {x.tensor.name} has no buffer "
                                    "(a stage was attached to a loop that does not enclose its use)")
            buf, bases = self.buffers[x.tensor.uid]
            idx = list(indices)
            if bases is not None:
                idx = [i - b for i, b in zip(idx, bases)]
            value = Load(buf, buf.flat_index(idx))
            # a float16 or bfloat16 reduction held in float32 is rounded where it is read
            return Cast(x.tensor.dtype, value) if rounded and x.tensor.dtype != buf.dtype else value

        def pre(x, visit):
            # the partial results of an rfactor stage (a reduction whose source is a load of another
            # reduction, held in float32) are combined unrounded: rounding each lane's partial sum
            # to float16 or bfloat16 first would leave float32 accumulation within a lane only
            if isinstance(x, Reduce) and isinstance(x.source, TensorLoad):
                return Reduce(x.combiner, load(x.source, [visit(i) for i in x.source.indices], rounded=False),
                              x.axes, None if x.condition is None else visit(x.condition))
            return None

        return transform(e, lambda x: load(x, x.indices) if isinstance(x, TensorLoad) else None, pre)

    # --- bound inference -----------------------------------------------------------------
    def _infer_region(self, st, at_iv, child, ext, coord, siblings=()):
        """Region of `child` read by one iteration of `st`'s loop `at_iv`: [(base, extent)].

        When `st` itself does not read `child`, the region is the union of what the `siblings`
        (stages attached at the same loop, with their regions) read of it: a chain of stages
        computed one after another per iteration (e.g. the elimination steps of det). An index
        computed from tensor data (a pivot row, a gather) covers the child's whole axis; a child
        that nothing attached there reads is computed whole."""
        pos = st.leaf.index(at_iv)
        ranges = {}
        for iv in st.leaf[pos + 1:]:
            ranges[iv.var] = (IntImm(0), _last(ext[iv]))
        if child.scope == "shared":  # one buffer for the block: relaxed over the threads of every enclosing stage
            for var, extent in self.thread_ranges.items():
                ranges.setdefault(var, (IntImm(0), IntImm(extent - 1)))
        readers = [(self.bodies[st], coord, ranges)]
        if not any(isinstance(x, TensorLoad) and x.tensor is child.tensor for x in walk(self.bodies[st])):
            readers = []
            for sib, sreg in siblings:
                sranges = {iv.var: (b, simplify(b + (e - 1))) for iv, (b, e) in zip(sib.op.axis, sreg)}
                sranges.update({iv.var: (IntImm(0), _last(iv.extent)) for iv in sib.op.reduce_axis})
                readers.append((self.bodies[sib], {}, sranges))
        region = None
        for body, subst, rng in readers:
            for ld in (x for x in walk(body) if isinstance(x, TensorLoad) and x.tensor is child.tensor):
                dims = []
                for idx, size in zip(ld.indices, child.tensor.shape):
                    try:
                        lo, hi = _interval(substitute(idx, subst), rng)
                    except ScheduleError:  # an index read from data (a gather, a pivot row): the whole axis
                        lo, hi = IntImm(0), _last(size)
                    lo, hi = simplify(lo), simplify(hi)
                    d = simplify(hi - lo)
                    if not (isinstance(d, IntImm) or size_only(d)):
                        raise ScheduleError(f"compute_at: cannot bound the region of {child.tensor.name} "
                                            f"inside {st.tensor.name} (extent {d!r} is not constant)")
                    dims.append((lo, d.value + 1 if isinstance(d, IntImm) else xt.as_extent(d + 1)))
                region = dims if region is None else [_union(a, b, size) for a, b, size in
                                                      zip(region, dims, child.tensor.shape)]
        if region is None:  # read by nothing attached there: computed whole, once per iteration
            return [(IntImm(0), e) for e in child.tensor.shape]
        return region


def _last(extent):
    """extent - 1 as an expression (an IntImm when static)."""
    return IntImm(extent - 1) if xt.is_static(extent) else simplify(extent - 1)


def _combine(combiner: str, a, b):
    """a (the running value) combined with b by a Reduce's combiner."""
    if combiner == "sum":
        return a + b
    if combiner == "prod":
        return a * b
    return BinOp(combiner, a, b)  # max, min


def _same(a, b) -> bool:
    d = Linear.of(simplify(a - b))
    return not d.terms and d.const == 0


def _interval(e, ranges):
    """Interval (lo, hi) of int64 expression `e`; Vars not in `ranges` are fixed points."""
    if isinstance(e, Var):
        return ranges.get(e, (e, e))
    if isinstance(e, IntImm):
        return e, e
    if isinstance(e, BinOp):
        if e.op in ("add", "sub"):
            la, ha = _interval(e.a, ranges)
            lb, hb = _interval(e.b, ranges)
            return (la + lb, ha + hb) if e.op == "add" else (la - hb, ha - lb)
        if e.op == "mul":
            a, b = (e.a, e.b) if isinstance(e.b, IntImm) else (e.b, e.a)
            if isinstance(b, IntImm):
                lo, hi = _interval(a, ranges)
                return (lo * b, hi * b) if b.value >= 0 else (hi * b, lo * b)
        if e.op in ("floordiv", "floormod") and size_only(e.b) and \
                not any(isinstance(x, Var) and x in ranges for x in walk(e.a)):
            return e, e  # a division by a symbolic extent of variables fixed here (a fused outer loop)
        if e.op == "floordiv" and isinstance(e.b, IntImm) and e.b.value > 0:
            lo, hi = _interval(e.a, ranges)
            return lo // e.b, hi // e.b
        if e.op == "floormod" and isinstance(e.b, IntImm) and e.b.value > 0:
            lo, hi = _interval(e.a, ranges)
            if _same(lo, hi):
                return lo % e.b, hi % e.b
            return IntImm(0), IntImm(e.b.value - 1)
        if e.op in ("min", "max"):
            la, ha = _interval(e.a, ranges)
            lb, hb = _interval(e.b, ranges)
            return BinOp(e.op, la, lb), BinOp(e.op, ha, hb)
    raise ScheduleError(f"compute_at: cannot bound index expression {e!r}")


def _union(a, b, size):
    """The smallest (base, extent) covering regions a and b of an axis of `size`; the whole axis
    when their bases differ by a non-constant (readers at different thread or loop coordinates)."""
    (la, ea), (lb, eb) = a, b
    d = simplify(lb - la)
    if not isinstance(d, IntImm):
        return IntImm(0), size
    if not (xt.is_static(ea) and xt.is_static(eb)):  # symbolic extents (SizeVars): equal ones only
        return (la, ea) if d.value == 0 and xt.same(ea, eb) else (IntImm(0), size)
    lo = la if d.value >= 0 else lb
    start = min(0, d.value)
    end = max(ea, d.value + eb)
    return lo, end - start


def inline_value(t, indices, buffers: dict, replace: dict | None = None):
    """The value of te tensor `t` at `indices` as a loop-IR expression, every producing stage
    inlined (a template kernel's operand or epilogue, tvmc/ops/gpu/tensorcore.py): a tensor whose
    uid is in `buffers` (a kernel parameter) is a Load of that Buffer; one in `replace` (uid ->
    callable(indices) -> PrimExpr) is what the callable gives; any other is its compute body at
    those indices. Raises ScheduleError for a reduction or a tensor that is neither."""
    replace = replace or {}

    def value(x, idx):
        if x.uid in replace:
            return replace[x.uid](idx)
        if x.uid in buffers:
            buf = buffers[x.uid]
            return Load(buf, buf.flat_index(idx))
        if x.op is None or x.op.reduce_axis:
            raise ScheduleError(f"tensor {x.name} is neither a kernel parameter nor an inlinable stage")
        body = substitute(x.op.body, {a.var: i for a, i in zip(x.op.axis, idx)})
        return transform(body, lambda n: value(n.tensor, list(n.indices)) if isinstance(n, TensorLoad) else None)

    return value(t, list(indices))
