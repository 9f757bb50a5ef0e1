"""GPU lowering of a loop-IR PrimFunc into a device kernel (TVM's host/device split,
storage-sync and VerifyGPUCode passes, for one kernel per fused function).

A GPU schedule binds loops to thread axes (`For.kind` 'blockIdx.x' .. 'threadIdx.z'), keeps
per-thread values in `local` buffers and block-wide tiles in `shared` buffers. `lower_device`
turns such a PrimFunc into a kernel that one launch runs:

- launch configuration: the grid (blockIdx extents) and the block (threadIdx extents) from the
  loop extents; a loop bound to a tag with a smaller extent than the launch's runs under a
  guard. A kernel with symbolic extents (PrimFunc.size_vars, its int64 arguments after the
  buffers) has a launch whose extents may be int64 expressions of those variables, evaluated
  when the executor launches it (LaunchConfig.evaluate); the limits below are checked at the
  variables' upper bounds, the guards of split tails stay in the kernel (no loop partitioning
  on GPUs: a partition point could differ between the threads of a block);
- barriers: inserted where a shared buffer written by some threads is then read by others
  (read after write), or rewritten while others may still read it (write after read, also
  across iterations of a loop);
- checks, as ScheduleErrors at compile time: threads per block and shared memory per block
  within the target descriptor's limits; every store to global or shared memory inside loops
  bound to every launch axis wider than 1 (no thread writes what another also writes); no
  global buffer inside a kernel (a stage left at root needs compute_at or inline); no barrier
  that only some threads of a block reach.

The result keeps thread tags as IR (no OpenCL or CUDA spelling): tvmc/codegen/opencl.py prints
it as OpenCL C; an NVPTX codegen reads the same kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvmc.errors import ScheduleError
from tvmc.te import extent as xt
from tvmc.te.expr import IntImm, Load, Var, maximum, walk
from tvmc.te.schedule import BLOCK_AXES, THREAD_AXES, THREAD_TAGS
from tvmc.tir.ir import Allocate, Barrier, For, IfThenElse, Intrinsic, PrimFunc, Seq, Stmt, Store, stmt_children


@dataclass(frozen=True)
class LaunchConfig:
    """How a device kernel is launched: grid (blocks along x, y, z), block (threads along x, y,
    z), shared_bytes (shared memory per block, bytes). For a kernel with symbolic extents an entry
    of grid or block may be an int64 expression of its SizeVars (tvmc.te.extent), evaluated per
    launch (`evaluate`); `upper` is the launch at the variables' upper bounds."""

    grid: tuple
    block: tuple
    shared_bytes: int = 0

    @property
    def symbolic(self) -> bool:
        """Whether an extent of the grid or the block depends on size variables."""
        return not all(xt.is_static(e) for e in (*self.grid, *self.block))

    @property
    def upper(self) -> "LaunchConfig":
        """This launch with every extent at its upper bound (itself when static): what the limits
        of the target and the launch bounds of the kernel are checked against."""
        if not self.symbolic:
            return self
        return LaunchConfig(tuple(xt.upper_bound(e) for e in self.grid), tuple(xt.upper_bound(e) for e in self.block),
                            self.shared_bytes)

    @property
    def threads_per_block(self) -> int:
        """Threads per block (at the upper bounds for a symbolic block)."""
        b = self.upper.block
        return b[0] * b[1] * b[2]

    def extent(self, tag: str):
        """Launch extent of thread tag `tag` (an int, or an int64 expression of SizeVars)."""
        axes = BLOCK_AXES if tag in BLOCK_AXES else THREAD_AXES
        return (self.grid if tag in BLOCK_AXES else self.block)[axes.index(tag)]

    def evaluate(self, values: dict) -> "LaunchConfig":
        """The launch for SizeVar values `values` (SizeVar -> int): every extent an int (0 or less
        where the kernel has nothing to do: the executors do not launch it). Raises ValueError
        when a variable has no value."""
        if not self.symbolic:
            return self
        return LaunchConfig(tuple(xt.evaluate(e, values) for e in self.grid),
                            tuple(xt.evaluate(e, values) for e in self.block), self.shared_bytes)

    def to_dict(self, size_vars=()) -> dict:
        """mod.json's form: {"grid": [x, y, z], "block": [x, y, z], "shared_bytes"}; a symbolic
        extent is a postfix program over the kernel's size arguments `size_vars` (its
        PrimFunc.size_vars: "$k" is the k-th; tvmc.graph.symbolic.to_postfix's tokens, evaluated
        by launch_dims)."""
        return {"grid": [_postfix(e, size_vars) for e in self.grid],
                "block": [_postfix(e, size_vars) for e in self.block], "shared_bytes": self.shared_bytes}

    def __str__(self):
        return f"grid={self.grid} block={self.block} shared={self.shared_bytes}B"


def _postfix(e, size_vars) -> int | list:
    """Launch extent `e` as an int or a postfix program over the kernel's size arguments
    `size_vars` (tvmc.te.extent.to_program). Raises ScheduleError for a node a launch extent
    cannot hold."""
    try:
        return xt.to_program(e, size_vars)
    except ValueError as err:
        raise ScheduleError(f"launch extent {e!r}: {err}") from None


def launch_dims(launch: dict, sizes) -> tuple:
    """(grid, block) as int tuples of a launch in mod.json's form (LaunchConfig.to_dict) for the
    kernel's size argument values `sizes` (in its PrimFunc.size_vars order); an extent of 0 or
    less means nothing to launch. Raises ValueError on a malformed program."""
    from tvmc.graph.symbolic import eval_postfix

    return (tuple(eval_postfix(e, sizes) for e in launch["grid"]),
            tuple(eval_postfix(e, sizes) for e in launch["block"]))


def narrower(extent, launch_extent) -> bool:
    """Whether a loop of `extent` bound to a tag runs fewer iterations than the launch's extent
    for that tag for some value of the SizeVars (it then runs under a guard)."""
    if xt.is_static(extent) and xt.is_static(launch_extent):
        return int(extent) < int(launch_extent)
    return not xt.same(extent, launch_extent)


def _max_extent(extents: list):
    """The largest of `extents` (ints or int64 expressions): an int when all are static, else the
    simplified max expression over the distinct ones (static ones folded)."""
    static = [int(e) for e in extents if xt.is_static(e)]
    dynamic = []
    for e in extents:
        if not xt.is_static(e) and not any(xt.same(e, d) for d in dynamic):
            dynamic.append(e)
    if not dynamic:
        return max(static, default=1)
    top = max(static, default=0)
    dynamic = [d for d in dynamic if xt.upper_bound(d) > top]  # ones never above a static extent drop out
    if not dynamic:
        return top
    out = dynamic[0]
    for d in dynamic[1:]:
        out = maximum(out, d)
    if top > 1 or (top == 1 and any(xt.lower_bound(d) < 1 for d in dynamic)):
        out = maximum(out, IntImm(top))
    return xt.as_extent(out)


def _stmts(s: Stmt):
    yield s
    for c in stmt_children(s):
        yield from _stmts(c)


def launch_config(prim: PrimFunc) -> LaunchConfig:
    """The launch of `prim`: per tag, the largest extent of a loop bound to it (1 if none; an
    expression of SizeVars where extents are symbolic), and the bytes of its distinct shared
    buffers (a shared buffer of symbolic size at its upper bound)."""
    extents = {t: [] for t in THREAD_TAGS}
    shared = {}
    for s in _stmts(prim.body):
        if isinstance(s, For) and s.kind in THREAD_TAGS:
            extents[s.kind].append(s.extent)
        elif isinstance(s, Allocate) and s.buffer.scope == "shared":
            shared[id(s.buffer)] = s.buffer.nbytes if s.buffer.static else xt.upper_bound(s.buffer.nbytes)
    return LaunchConfig(tuple(_max_extent(extents[t]) for t in BLOCK_AXES),
                        tuple(_max_extent(extents[t]) for t in THREAD_AXES), sum(shared.values()))


def lower_device(prim: PrimFunc, target, insert_barriers: bool = True) -> PrimFunc:
    """`prim` as a device kernel for GPU `target`: barriers inserted, `launch` set, checked
    (see the module docstring). A kernel written with its barriers in place (a template whose
    asynchronous copies the analysis cannot follow, tvmc/ops/gpu/tensorcore.py) passes
    `insert_barriers=False`: its barriers are still checked. Raises ScheduleError naming the
    kernel and what is wrong. A kernel with symbolic extents keeps its size_vars (a template that
    names none gets the SizeVars of its buffers' shapes, in the order lower gives them); its launch
    may depend on them (the limits are checked at their upper bounds)."""
    where = f"kernel {prim.name}"
    size_vars = prim.size_vars or xt.size_vars([b.shape for b in prim.params])
    launch = launch_config(prim)
    unknown = [v.name for v in xt.size_vars([*launch.grid, *launch.block]) if v not in size_vars]
    if unknown:
        raise ScheduleError(f"{where}: the launch depends on {', '.join(unknown)}, which no buffer's shape gives")
    if target.max_threads_per_block and launch.threads_per_block > target.max_threads_per_block:
        raise ScheduleError(f"{where}: {launch.threads_per_block} threads per block {launch.block}, target "
                            f"{target.name} allows {target.max_threads_per_block}")
    limit = target.max_shared_memory_per_block
    if launch.shared_bytes > limit:
        raise ScheduleError(f"{where}: {launch.shared_bytes} bytes of shared memory per block, target "
                            f"{target.name} allows {limit}")
    for s in _stmts(prim.body):
        if isinstance(s, Allocate) and s.buffer.scope == "global":
            raise ScheduleError(f"{where}: stage {s.buffer.name} needs a global buffer inside the kernel; "
                                "compute it inline or with compute_at into the kernel's loops")
    _check_coverage(prim, launch, where)
    body = _sync(prim.body) if insert_barriers else prim.body
    if size_vars:
        body = hoist_guards(body)
    _check_barriers(body, launch, where, _thread_vars(body), divergent=False)
    return PrimFunc(prim.name, prim.params, body, launch, size_vars=size_vars)


def hoist_guards(s: Stmt) -> Stmt:
    """`s` with each guard that is the whole body of a serial, unrolled or vectorized loop and does
    not depend on the loop's variable taken out of the loop: `for v: if c: B` becomes
    `if c: for v: B` (TVM's HoistIfThenElse). A split tail's guard then sits outside the vector
    loop of the elements a thread stores, which stays a vector store (OpenCL vstoreN, LLVM
    vectors) for symbolic extents as for static ones."""
    if isinstance(s, For):
        body = hoist_guards(s.body)
        if (s.kind in ("serial", "unroll", "vectorize") and isinstance(body, IfThenElse) and body.otherwise is None
                and not any(x is s.var for x in walk(body.cond))):
            return IfThenElse(body.cond, hoist_guards(For(s.var, s.extent, s.kind, body.then, s.min_parallel)))
        return For(s.var, s.extent, s.kind, body, s.min_parallel)
    if isinstance(s, Seq):
        return Seq([hoist_guards(x) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, hoist_guards(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, hoist_guards(s.then), hoist_guards(s.otherwise) if s.otherwise is not None else None)
    return s


# ---- checks -----------------------------------------------------------------------------------

def _check_coverage(prim, launch, where):
    """Every store to global or shared memory lies inside loops bound to each launch axis wider
    than 1 (thread axes only, for shared memory: one block owns it)."""
    wide = [t for t in THREAD_TAGS if xt.upper_bound(launch.extent(t)) > 1]
    if not wide and prim.params and xt.upper_bound(prim.params[-1].size) > 1:
        raise ScheduleError(f"{where}: no loop is bound to blockIdx/threadIdx, one thread would compute "
                            f"{prim.params[-1].size} outputs (bind the output's loops)")

    def visit(s, tags):
        if isinstance(s, For) and s.kind in THREAD_TAGS:
            tags = tags | {s.kind}
        if isinstance(s, Store) and s.buffer.scope != "local":
            need = [t for t in wide if s.buffer.scope == "global" or t in THREAD_AXES]
            missing = [t for t in need if t not in tags]
            if missing:
                raise ScheduleError(f"{where}: the store to {s.buffer.name} is not inside loops bound to "
                                    f"{', '.join(missing)}: every thread of that axis would write it")
        for c in stmt_children(s):
            visit(c, tags)

    visit(prim.body, frozenset())


def _thread_vars(s) -> set:
    return {x.var for x in _stmts(s) if isinstance(x, For) and x.kind in THREAD_TAGS}


def _check_barriers(s, launch, where, tvars, divergent):
    """No Barrier under a condition that depends on a thread index or inside a thread loop that
    runs guarded (extent below the launch's): some threads would never arrive."""
    if isinstance(s, Barrier) and divergent:
        raise ScheduleError(f"{where}: a barrier is reached by only some threads of the block (it sits under "
                            "a thread-dependent condition); give every thread-bound loop the launch's extent")
    if isinstance(s, For) and s.kind in THREAD_TAGS and narrower(s.extent, launch.extent(s.kind)):
        divergent = True
    if isinstance(s, IfThenElse) and any(isinstance(x, Var) and x in tvars for x in walk(s.cond)):
        divergent = True
    for c in stmt_children(s):
        _check_barriers(c, launch, where, tvars, divergent)


# ---- barrier insertion ------------------------------------------------------------------------

def _accesses(s: Stmt):
    """(buffer, is_store) of every load and store statement `s` itself makes (not its children)."""
    exprs = []
    if isinstance(s, Store):
        yield s.buffer, True
        exprs = [s.index, s.value]
    elif isinstance(s, IfThenElse):
        exprs = [s.cond]
    elif isinstance(s, Intrinsic):
        yield from ((buf, False) for buf, _ in s.reads())
        yield from ((buf, True) for buf, _ in s.writes())
        exprs = s.exprs
    for e in exprs:
        for n in walk(e):
            if isinstance(n, Load):
                yield n.buffer, False


def _shared_access(s) -> tuple:
    """(read, written): ids of the shared buffers `s` loads and stores, anywhere inside."""
    read, written = set(), set()
    for x in _stmts(s):
        for buf, is_store in _accesses(x):
            if buf.scope == "shared":
                (written if is_store else read).add(id(buf))
    return read, written


def _sync(s: Stmt) -> Stmt:
    """Insert Barriers (see the module docstring): between statements of a sequence where one
    reads a shared buffer that an earlier one wrote since the last barrier (or writes one that an
    earlier one read), and at the end of a loop body that reads a shared buffer after its last
    barrier and writes it (the next iteration's writes)."""
    if isinstance(s, Seq):
        out, read, written = [], set(), set()
        for x in s.stmts:
            if isinstance(x, Barrier):
                read, written = set(), set()
                out.append(x)
                continue
            r, w = _shared_access(x)
            if (r & written) or (w & read):
                out.append(Barrier())
                read, written = set(), set()
            read |= r
            written |= w
            out.append(_sync(x))
        return Seq(out)
    if isinstance(s, For):
        body = _sync(s.body)
        _, written = _shared_access(body)
        if s.kind not in THREAD_TAGS and (_tail_reads(body)[0] & written):
            body = Seq([body, Barrier()])
        return For(s.var, s.extent, s.kind, body)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _sync(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _sync(s.then), _sync(s.otherwise) if s.otherwise is not None else None)
    return s


def _tail_reads(s: Stmt) -> tuple:
    """(shared buffers read after the last barrier every thread passes in `s`, whether `s`
    passes one): what the next iteration of a loop around `s` may overwrite too early."""
    if isinstance(s, Barrier):
        return set(), True
    if isinstance(s, Seq):
        reads = set()
        for x in reversed(s.stmts):
            r, found = _tail_reads(x)
            reads |= r
            if found:
                return reads, True
        return reads, False
    if isinstance(s, (For, Allocate)):
        return _tail_reads(s.body)
    return _shared_access(s)[0], False


def global_traffic_bytes(prim: PrimFunc) -> int:
    """Bytes of global memory a launch of device kernel `prim` loads and stores: every load and
    store of a global buffer counted once per execution (loop trip counts times the threads of
    every block and the blocks of the grid; guards taken as true, no cache). The traffic the
    kernel asks of the memory system, an upper bound of what DRAM sees behind caches. Symbolic
    extents count at their upper bounds."""
    total = 0

    def visit(s, trips, active):
        nonlocal total
        extent = xt.upper_bound(s.extent) if isinstance(s, For) else 1
        if isinstance(s, For) and s.kind in THREAD_TAGS and s.kind in active:
            # the same threads again (a nested loop bound to the same axis): only its extent of them
            trips = trips // max(1, active[s.kind]) * extent
            active = dict(active, **{s.kind: extent})
        elif isinstance(s, For):
            trips *= extent
            if s.kind in THREAD_TAGS:
                active = dict(active, **{s.kind: extent})
        for buf, _ in _accesses(s):
            if buf.scope == "global":
                total += trips * np.dtype(buf.dtype).itemsize
        for c in stmt_children(s):
            visit(c, trips, active)

    visit(prim.body, 1, {})
    return total


def shared_buffers(prim: PrimFunc) -> list:
    """The distinct shared Buffers a kernel allocates, in first-seen order."""
    out, seen = [], set()
    for s in _stmts(prim.body):
        if isinstance(s, Allocate) and s.buffer.scope == "shared" and id(s.buffer) not in seen:
            seen.add(id(s.buffer))
            out.append(s.buffer)
    return out


__all__ = ["LaunchConfig", "global_traffic_bytes", "launch_config", "launch_dims", "lower_device", "narrower",
           "shared_buffers"]
