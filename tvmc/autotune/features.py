"""Cost-model features of a lowered kernel (loop IR), CPU and GPU, for the learned tuner.

The ideas are AutoTVM's: per-loop "itervar" features, per-access "touch" features and an
arithmetic-intensity "curve" (Chen et al., "Learning to Optimize Tensor Programs", NeurIPS 2018,
section 5.2; TVM's autotvm/feature.py), with the GPU facts of TVM's per-store features (thread
bindings, launch extents, memory scopes, coalescing, vector widths, barriers).

Terms. An *access* is one Load or Store of a buffer. Its *executions per thread* count the
iterations of the loops around it that are not bound to blockIdx/threadIdx (on a CPU every loop
counts, parallel ones too: the kernel is taken as one thread); *per block* multiplies in, per
thread axis, the extent of the innermost loop around the access bound to it, else the launch's
block extent (every thread runs it); the grid's blocks likewise. The *stride* of an access
w.r.t. a loop (or a thread axis: the loops bound to it step together) is how far its flat
element index moves when the loop variable steps from 0 to 1, other variables at 0 (exact for
affine indices; floordiv/floormod indices are evaluated; an index that loads from memory falls
back on its affine part). A loop *moves* an access when the index differs at the loop
variable's value 1 or at its last value. The bytes an access *touches* inside some loops: its
element size times the extents of those loops that move it (AutoTVM's touch count; bytes moved
over bytes touched is the reuse). Inside a `vectorize` loop of L lanes (the innermost one) an
access with stride 1 is one L-lane vector (its *vector bytes*: L * element size), a broadcast
(stride 0) one element, other strides L single-element accesses. An access is *coalesced* when
|stride w.r.t. threadIdx.x| * element size <= its vector bytes: consecutive threads of a warp
touch consecutive (or the same) addresses. *Ops* are arithmetic on data values (binary
operators, intrinsic calls and selects of a non-index, non-boolean type; the index arithmetic of
loads is not counted).

The *dominant statement* is the Store executed most often over the whole launch (ties: the
deepest). Its loops, outermost first (the innermost MAX_LOOPS when there are more), and its
first MAX_ACCESSES accesses (the store, then the loads of its value and index in the order of
tvmc.te.expr.walk) are described slot by slot; missing loops and accesses leave zeros. The
kernel-wide features cover every statement.

"log2" below is log2(1 + x). Every slot has exactly one name (NAMES, SLOT: name -> slot):

Per loop d = 0 .. 11 of the dominant statement: slot d * PER_LOOP + offset (PER_LOOP = 23)
       0  loop{d}.log2_extent                  the loop's extent
       1  loop{d}.kind=serial                  one-hot kind: serial,
       2  loop{d}.kind=parallel                  parallel (CPU threads),
       3  loop{d}.kind=vectorize                 vector lanes,
       4  loop{d}.kind=unroll                    unrolled,
       5  loop{d}.kind=blockIdx.x                bound to a block axis,
       6  loop{d}.kind=blockIdx.y
       7  loop{d}.kind=blockIdx.z
       8  loop{d}.kind=threadIdx.x               bound to a thread axis,
       9  loop{d}.kind=threadIdx.y
      10  loop{d}.kind=threadIdx.z
      11  loop{d}.kind=other                     any other kind
      12  loop{d}.log2_inner_iterations        iterations of this loop and the path inside it
      13  loop{d}.log2_ops_per_touched_byte    the statement's ops inside this loop / bytes its
                                               accesses touch inside it (the intensity curve)
      14  loop{d}.access0.log2_stride          |stride| of access 0 w.r.t. this loop
      15  loop{d}.access0.log2_touched_bytes   bytes access 0 touches inside this loop
      16  loop{d}.access1.log2_stride
      17  loop{d}.access1.log2_touched_bytes
      18  loop{d}.access2.log2_stride
      19  loop{d}.access2.log2_touched_bytes
      20  loop{d}.access3.log2_stride
      21  loop{d}.access3.log2_touched_bytes
      22  loop{d}.present                      1 for a loop, 0 for padding

Per access a = 0 .. 3 of the dominant statement: slot 276 + a * PER_ACCESS + offset (PER_ACCESS = 7)
       0  access{a}.scope=global               one-hot memory scope of its buffer: global,
       1  access{a}.scope=shared                 shared (a GPU block's),
       2  access{a}.scope=local                  local (a thread's registers or stack),
       3  access{a}.scope=other                  any other scope
       4  access{a}.log2_vector_bytes          bytes one execution moves
       5  access{a}.log2_stride_threadIdx.x    |stride| w.r.t. threadIdx.x (GPU)
       6  access{a}.coalesced                  1 when coalesced (GPU)

Kernel-wide, at slot:
     304  kernel.is_gpu                        1 for a device kernel (launch grid and block)
     305  kernel.loops.kind=serial             number of loops of each kind in the kernel
     306  kernel.loops.kind=parallel
     307  kernel.loops.kind=vectorize
     308  kernel.loops.kind=unroll
     309  kernel.loops.kind=blockIdx.x
     310  kernel.loops.kind=blockIdx.y
     311  kernel.loops.kind=blockIdx.z
     312  kernel.loops.kind=threadIdx.x
     313  kernel.loops.kind=threadIdx.y
     314  kernel.loops.kind=threadIdx.z
     315  kernel.loops.kind=other
     316  kernel.stores                        number of Store statements
     317  kernel.guarded_store_fraction        share of store executions under an IfThenElse
     318  kernel.log2_dominant_executions      executions of the dominant statement, whole launch
     319  kernel.log2_dominant_unrolled        product of the unrolled extents around it (code size)
     320  kernel.dominant_stores_local         1 when it stores to a local buffer (an accumulator
                                               in registers)
     321  launch.log2_threads_per_block        threads per block
     322  launch.log2_blocks                   blocks in the grid
     323  launch.log2_block_x                  block extent along x, y, z
     324  launch.log2_block_y
     325  launch.log2_block_z
     326  launch.log2_grid_x                   grid extent along x, y, z
     327  launch.log2_grid_y
     328  launch.log2_grid_z
     329  memory.log2_shared_bytes_per_block   shared memory a block allocates
     330  memory.log2_local_bytes_per_thread   local buffers a thread allocates
     331  sync.barriers                        Barrier statements in the kernel
     332  sync.log2_barriers_per_thread        barriers a thread passes
     333  compute.log2_ops_per_thread          ops a thread executes
     334  compute.log2_ops_per_global_byte     ops per byte of global memory moved
     335  compute.log2_ops_per_shared_byte     ops per byte of shared memory moved

Per memory scope and direction, at slot start + offset: global.load at 336, global.store at 344,
shared.load at 352, shared.store at 360, local.load at 368, local.store at 374 (local: offsets
0 .. 5 only, a thread's own memory has no stride across threads)
       0  <scope>.<dir>.log2_accesses_per_thread      executions per thread (a vector counts once)
       1  <scope>.<dir>.log2_bytes_per_thread         bytes a thread moves
       2  <scope>.<dir>.log2_bytes_per_block          bytes a block moves
       3  <scope>.<dir>.log2_touched_bytes_per_thread bytes a thread touches (per buffer, summed)
       4  <scope>.<dir>.log2_touched_bytes_per_block  bytes a block touches
       5  <scope>.<dir>.log2_vector_bytes             vector bytes, mean weighted by bytes moved
       6  <scope>.<dir>.log2_stride_threadIdx.x       |stride| w.r.t. threadIdx.x, mean as above
       7  <scope>.<dir>.coalesced_fraction            share of the bytes moved coalesced

LENGTH = 380.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tvmc.te.expr import (INDEX, BinOp, Call, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, Select, Var, children,
                          is_float, walk)
from tvmc.te.schedule import BLOCK_AXES, THREAD_AXES, THREAD_TAGS
from tvmc.tir.ir import Allocate, Barrier, For, IfThenElse, Seq, Store, stmt_children
from tvmc.tir.simplify import Linear, fold_int

MAX_LOOPS = 12
MAX_ACCESSES = 4
KINDS = ("serial", "parallel", "vectorize", "unroll") + THREAD_TAGS + ("other",)
SCOPES = ("global", "shared", "local")

LOOP_FEATURES = (("log2_extent",) + tuple(f"kind={k}" for k in KINDS)
                 + ("log2_inner_iterations", "log2_ops_per_touched_byte")
                 + tuple(f"access{a}.{f}" for a in range(MAX_ACCESSES) for f in ("log2_stride", "log2_touched_bytes"))
                 + ("present",))
ACCESS_FEATURES = (tuple(f"scope={s}" for s in SCOPES + ("other",))
                   + ("log2_vector_bytes", "log2_stride_threadIdx.x", "coalesced"))
KERNEL_FEATURES = (("kernel.is_gpu",) + tuple(f"kernel.loops.kind={k}" for k in KINDS)
                   + ("kernel.stores", "kernel.guarded_store_fraction", "kernel.log2_dominant_executions",
                      "kernel.log2_dominant_unrolled", "kernel.dominant_stores_local",
                      "launch.log2_threads_per_block", "launch.log2_blocks",
                      "launch.log2_block_x", "launch.log2_block_y", "launch.log2_block_z",
                      "launch.log2_grid_x", "launch.log2_grid_y", "launch.log2_grid_z",
                      "memory.log2_shared_bytes_per_block", "memory.log2_local_bytes_per_thread",
                      "sync.barriers", "sync.log2_barriers_per_thread",
                      "compute.log2_ops_per_thread", "compute.log2_ops_per_global_byte",
                      "compute.log2_ops_per_shared_byte"))
TRAFFIC_FEATURES = ("log2_accesses_per_thread", "log2_bytes_per_thread", "log2_bytes_per_block",
                    "log2_touched_bytes_per_thread", "log2_touched_bytes_per_block", "log2_vector_bytes",
                    "log2_stride_threadIdx.x", "coalesced_fraction")
LOCAL_TRAFFIC_FEATURES = TRAFFIC_FEATURES[:6]
TRAFFIC_GROUPS = tuple(f"{s}.{d}" for s in SCOPES for d in ("load", "store"))

PER_LOOP = len(LOOP_FEATURES)
PER_ACCESS = len(ACCESS_FEATURES)
NAMES = (tuple(f"loop{d}.{f}" for d in range(MAX_LOOPS) for f in LOOP_FEATURES)
         + tuple(f"access{a}.{f}" for a in range(MAX_ACCESSES) for f in ACCESS_FEATURES)
         + KERNEL_FEATURES
         + tuple(f"{g}.{f}" for g in TRAFFIC_GROUPS
                 for f in (LOCAL_TRAFFIC_FEATURES if g.startswith("local.") else TRAFFIC_FEATURES)))
SLOT = {name: k for k, name in enumerate(NAMES)}
LENGTH = len(NAMES)
assert len(SLOT) == LENGTH, "feature names must be unique"


def _log2(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # a dtype numpy does not know: the bit width in the name
        bits = "".join(ch for ch in dtype if ch.isdigit())
        return max(1, int(bits) // 8) if bits else 4


# ---- index arithmetic -------------------------------------------------------------------------

class _Opaque(Exception):
    """The index depends on memory (a Load) or an operation without an integer value."""


def _evaluate(e, env: dict):
    """Value of integer expression `e` with Vars from `env` (absent Vars are 0)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, FloatImm):
        return e.value
    if isinstance(e, Var):
        return env.get(e, 0)
    if isinstance(e, BinOp):
        a, b = _evaluate(e.a, env), _evaluate(e.b, env)
        op = e.op
        if op in ("floordiv", "floormod", "div", "fmod") and b == 0:
            raise _Opaque
        if op in ("add", "sub", "mul", "floordiv", "floormod", "min", "max"):
            return fold_int(op, a, b)  # the simplifier's folding (also right for floats here)
        if op == "div":
            return a / b if isinstance(a, float) or isinstance(b, float) else int(a / b)
        if op == "fmod":
            return math.fmod(a, b) if isinstance(a, float) or isinstance(b, float) else a - b * int(a / b)
        if op in ("and", "or"):
            return int(bool(a) and bool(b)) if op == "and" else int(bool(a) or bool(b))
        if isinstance(a, int) and isinstance(b, int):
            if op == "bitwise_and":
                return a & b
            if op == "bitwise_or":
                return a | b
            if op == "bitwise_xor":
                return a ^ b
            if op == "left_shift" and 0 <= b < 64:
                return a << b
            if op == "right_shift" and 0 <= b < 64:
                return a >> b
        raise _Opaque
    if isinstance(e, Cmp):
        a, b = _evaluate(e.a, env), _evaluate(e.b, env)
        return int({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[e.op])
    if isinstance(e, Not):
        return int(not _evaluate(e.a, env))
    if isinstance(e, Select):
        return _evaluate(e.t if _evaluate(e.cond, env) else e.f, env)
    if isinstance(e, Cast):
        v = _evaluate(e.value, env)
        return v if is_float(e.dtype) else int(v)
    if isinstance(e, Let):
        return _evaluate(e.body, {**env, e.var: _evaluate(e.value, env)})
    raise _Opaque


class _Index:
    """A flat element index, for steps of its loop variables (see the module docstring)."""

    def __init__(self, index, loop_vars: set):
        self.index = index
        self.linear = Linear.of(index)
        nonlinear = [atom for atom, _ in self.linear.terms.values() if not isinstance(atom, Var)]
        self.affine = not any(isinstance(x, Var) and x in loop_vars for atom in nonlinear for x in walk(atom))
        self._origin = None

    def step(self, variables, to: int = 1) -> float:
        """Index at `variables` = `to` (all of them; others 0) minus the index at the origin."""
        if not variables:
            return 0
        if self.affine:
            return to * sum(self.linear.coef(v) for v in variables)
        try:
            if self._origin is None:
                self._origin = _evaluate(self.index, {})
            return _evaluate(self.index, dict.fromkeys(variables, to)) - self._origin
        except (_Opaque, ArithmeticError, ValueError, OverflowError):
            self.affine = True  # what the affine part says is the best guess left
            return self.step(variables, to)

    def moves(self, variables, extent: int) -> bool:
        return extent > 1 and (self.step(variables) != 0 or self.step(variables, extent - 1) != 0)


# ---- the statements of a kernel ---------------------------------------------------------------

@dataclass
class _Access:
    buffer: object
    index: _Index
    is_store: bool
    path: tuple          # the enclosing For loops, outermost first


@dataclass
class _StoreSite:
    store: Store
    path: tuple
    guarded: bool
    accesses: list       # the store, then the loads of its value and index, in order


class _Kernel:
    """The statements of a PrimFunc body, each with its enclosing loops."""

    def __init__(self, body):
        self.stores: list = []
        self.accesses: list = []
        self.barrier_paths: list = []
        self.allocations: dict = {}   # id(buffer) -> Buffer
        self.kinds: dict = {}
        self.loop_vars: set = set()
        self._loop_vars(body)
        self._visit(body, (), False)

    def _loop_vars(self, s):
        if isinstance(s, For):
            self.loop_vars.add(s.var)
        for c in stmt_children(s):
            self._loop_vars(c)

    def _loads(self, exprs, path) -> list:
        return [_Access(e.buffer, _Index(e.index, self.loop_vars), False, path)
                for x in exprs for e in walk(x) if isinstance(e, Load)]

    def _visit(self, s, path, guarded):
        if isinstance(s, For):
            kind = s.kind if s.kind in KINDS else "other"
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            self._visit(s.body, path + (s,), guarded)
        elif isinstance(s, Store):
            accesses = [_Access(s.buffer, _Index(s.index, self.loop_vars), True, path)]
            accesses += self._loads([s.value, s.index], path)
            self.stores.append(_StoreSite(s, path, guarded, accesses))
            self.accesses += accesses
        elif isinstance(s, IfThenElse):
            self.accesses += self._loads([s.cond], path)
            self._visit(s.then, path, True)
            if s.otherwise is not None:
                self._visit(s.otherwise, path, True)
        elif isinstance(s, Allocate):
            self.allocations[id(s.buffer)] = s.buffer
            self._visit(s.body, path, guarded)
        elif isinstance(s, Barrier):
            self.barrier_paths.append(path)
        else:  # Seq, or a statement kind this module does not know: its children
            for c in (s.stmts if isinstance(s, Seq) else stmt_children(s)):
                self._visit(c, path, guarded)


def _per_thread(path) -> int:
    """Iterations of the loops in `path` not bound to a block or thread axis."""
    return math.prod(f.extent for f in path if f.kind not in THREAD_TAGS)


def _axis_extents(path, axes, launch_extents) -> dict:
    """axis -> extent: of the innermost loop in `path` bound to it, else the launch's."""
    out = dict(zip(axes, launch_extents))
    for f in path:
        if f.kind in out:
            out[f.kind] = f.extent
    return out


def _axis_vars(path, axis) -> list:
    return [f.var for f in path if f.kind == axis]


def _path_factors(path) -> list:
    """Per loop of `path`, the factor it multiplies the executions by: its extent, or for a loop
    bound to an axis that an outer loop of the path is bound to too (the same threads again),
    its extent over the outer one's."""
    active, out = {}, []
    for f in path:
        if f.kind in THREAD_TAGS and f.kind in active:
            out.append(f.extent / active[f.kind])
        else:
            out.append(float(f.extent))
        if f.kind in THREAD_TAGS:
            active[f.kind] = f.extent
    return out


def _ops(e) -> int:
    """Ops on data values in `e` (see the module docstring): loads' index arithmetic excluded."""
    n, stack = 0, [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load):
            continue
        if isinstance(x, (BinOp, Call, Select)) and x.dtype not in (INDEX, "bool"):
            n += 1
        stack.extend(children(x))
    return n


@dataclass
class _Traffic:
    """What one access moves and touches (see the module docstring)."""

    executions: float      # per thread, a vector counted once
    vector_bytes: int
    threads: int           # threads per block that run it
    touched_thread: float
    touched_block: float
    stride_x: float        # w.r.t. threadIdx.x; 0 on a CPU
    coalesced: bool

    @property
    def bytes_per_thread(self) -> float:
        return self.executions * self.vector_bytes

    @property
    def bytes_per_block(self) -> float:
        return self.bytes_per_thread * self.threads


def _traffic(acc: _Access, launch) -> _Traffic:
    itemsize = _itemsize(acc.buffer.dtype)
    path = acc.path
    executions = float(_per_thread(path))
    vector_bytes = itemsize
    vloops = [f for f in path if f.kind == "vectorize"]
    if vloops:
        lanes = vloops[-1].extent
        s = acc.index.step([vloops[-1].var])
        if s in (0, 1):
            executions /= lanes
            vector_bytes = itemsize * lanes if s == 1 else itemsize
    touched = itemsize * math.prod(f.extent for f in path
                                   if f.kind not in THREAD_TAGS and acc.index.moves([f.var], f.extent))
    threads = _axis_extents(path, THREAD_AXES, launch.block if launch else (1, 1, 1))
    touched_block = touched * math.prod(ext for axis, ext in threads.items()
                                        if acc.index.moves(_axis_vars(path, axis), ext))
    stride_x = abs(acc.index.step(_axis_vars(path, "threadIdx.x"))) if launch else 0
    return _Traffic(executions, vector_bytes, math.prod(threads.values()), touched, touched_block, stride_x,
                    launch is not None and stride_x * itemsize <= vector_bytes)


def _executions(site: _StoreSite, launch) -> float:
    """Executions of a store over the whole launch."""
    if launch is None:
        return math.prod(_path_factors(site.path))
    threads = _axis_extents(site.path, THREAD_AXES, launch.block)
    blocks = _axis_extents(site.path, BLOCK_AXES, launch.grid)
    return _per_thread(site.path) * math.prod(threads.values()) * math.prod(blocks.values())


def loop_features(prim) -> np.ndarray:
    """Feature vector (float32, LENGTH slots named by NAMES) of PrimFunc `prim`, a CPU kernel or
    a device kernel with `launch` (tvmc.tir.gpu.LaunchConfig); see the module docstring. Any loop
    kind, buffer scope or statement shape is accepted; a kernel without stores has zeros where
    the dominant statement would be described."""
    from tvmc.tir.gpu import launch_config

    kernel = _Kernel(prim.body)
    launch = prim.launch
    if launch is None and any(kernel.kinds.get(t) for t in THREAD_TAGS):
        launch = launch_config(prim)
    vec = np.zeros(LENGTH, np.float32)

    def put(name: str, value: float):
        vec[SLOT[name]] = value

    traffic = [_traffic(acc, launch) for acc in kernel.accesses]
    _put_kernel(put, kernel, launch, traffic)
    _put_traffic(put, kernel, traffic)
    if kernel.stores:
        execs = [_executions(site, launch) for site in kernel.stores]
        best = max(range(len(execs)), key=lambda k: (execs[k], len(kernel.stores[k].path)))
        _put_dominant(put, kernel.stores[best], execs[best], launch)
        guarded = sum(e for e, site in zip(execs, kernel.stores) if site.guarded)
        put("kernel.guarded_store_fraction", guarded / sum(execs) if sum(execs) > 0 else 0.0)
    return vec


def _put_dominant(put, site: _StoreSite, executions: float, launch):
    path = site.path
    accesses = site.accesses[:MAX_ACCESSES]
    traffic = {id(acc): _traffic(acc, launch) for acc in accesses}
    ops = _ops(site.store.value)
    factors = _path_factors(path)
    first = max(0, len(path) - MAX_LOOPS)
    for d, f in enumerate(path[first:]):
        at = first + d
        p = f"loop{d}."
        put(p + "log2_extent", _log2(f.extent))
        put(p + "kind=" + (f.kind if f.kind in KINDS else "other"), 1.0)
        inner = math.prod(factors[at:])
        put(p + "log2_inner_iterations", _log2(inner))
        touched_all = 0.0
        for a, acc in enumerate(accesses):
            itemsize = _itemsize(acc.buffer.dtype)
            put(p + f"access{a}.log2_stride", _log2(abs(acc.index.step([f.var]))))
            touched = itemsize * math.prod(g.extent for g in path[at:] if acc.index.moves([g.var], g.extent))
            put(p + f"access{a}.log2_touched_bytes", _log2(touched))
            touched_all += touched
        put(p + "log2_ops_per_touched_byte", _log2(ops * inner / touched_all) if touched_all else 0.0)
        put(p + "present", 1.0)
    for a, acc in enumerate(accesses):
        t = traffic[id(acc)]
        scope = acc.buffer.scope if acc.buffer.scope in SCOPES else "other"
        put(f"access{a}.scope={scope}", 1.0)
        put(f"access{a}.log2_vector_bytes", _log2(t.vector_bytes))
        put(f"access{a}.log2_stride_threadIdx.x", _log2(t.stride_x))
        put(f"access{a}.coalesced", float(t.coalesced))
    put("kernel.log2_dominant_executions", _log2(executions))
    put("kernel.log2_dominant_unrolled", _log2(math.prod(f.extent for f in path if f.kind == "unroll")))
    put("kernel.dominant_stores_local", float(site.store.buffer.scope == "local"))


def _put_kernel(put, kernel: _Kernel, launch, traffic):
    put("kernel.is_gpu", float(launch is not None))
    for kind in KINDS:
        put(f"kernel.loops.kind={kind}", kernel.kinds.get(kind, 0))
    put("kernel.stores", len(kernel.stores))
    if launch is not None:
        put("launch.log2_threads_per_block", _log2(math.prod(launch.block)))
        put("launch.log2_blocks", _log2(math.prod(launch.grid)))
        for axis, n in zip("xyz", launch.block):
            put(f"launch.log2_block_{axis}", _log2(n))
        for axis, n in zip("xyz", launch.grid):
            put(f"launch.log2_grid_{axis}", _log2(n))
    buffers = kernel.allocations.values()
    shared = launch.shared_bytes if launch is not None else sum(b.nbytes for b in buffers if b.scope == "shared")
    put("memory.log2_shared_bytes_per_block", _log2(shared))
    put("memory.log2_local_bytes_per_thread", _log2(sum(b.nbytes for b in buffers if b.scope == "local")))
    put("sync.barriers", len(kernel.barrier_paths))
    put("sync.log2_barriers_per_thread", _log2(sum(_per_thread(p) for p in kernel.barrier_paths)))
    ops = sum(_ops(site.store.value) * _per_thread(site.path) for site in kernel.stores)
    put("compute.log2_ops_per_thread", _log2(ops))
    for scope in ("global", "shared"):
        moved = sum(t.bytes_per_thread for acc, t in zip(kernel.accesses, traffic) if acc.buffer.scope == scope)
        put(f"compute.log2_ops_per_{scope}_byte", _log2(ops / moved) if moved else 0.0)


def _put_traffic(put, kernel: _Kernel, traffic):
    for group in TRAFFIC_GROUPS:
        scope, direction = group.split(".")
        mine = [(acc, t) for acc, t in zip(kernel.accesses, traffic)
                if acc.buffer.scope == scope and acc.is_store == (direction == "store")]
        if not mine:
            continue
        moved = sum(t.bytes_per_block for _, t in mine)
        touched_thread, touched_block = {}, {}
        for acc, t in mine:  # a buffer's footprint is the largest of its accesses'
            key = id(acc.buffer)
            touched_thread[key] = max(touched_thread.get(key, 0.0), t.touched_thread)
            touched_block[key] = max(touched_block.get(key, 0.0), t.touched_block)
        put(f"{group}.log2_accesses_per_thread", _log2(sum(t.executions for _, t in mine)))
        put(f"{group}.log2_bytes_per_thread", _log2(sum(t.bytes_per_thread for _, t in mine)))
        put(f"{group}.log2_bytes_per_block", _log2(moved))
        put(f"{group}.log2_touched_bytes_per_thread", _log2(sum(touched_thread.values())))
        put(f"{group}.log2_touched_bytes_per_block", _log2(sum(touched_block.values())))
        put(f"{group}.log2_vector_bytes", _byte_weighted_mean([_log2(t.vector_bytes) for _, t in mine], mine, moved))
        if scope != "local":
            put(f"{group}.log2_stride_threadIdx.x",
                _byte_weighted_mean([_log2(t.stride_x) for _, t in mine], mine, moved))
            put(f"{group}.coalesced_fraction", _byte_weighted_mean([float(t.coalesced) for _, t in mine], mine, moved))


def _byte_weighted_mean(values, mine, moved):
    """The mean of one value per access of `mine` weighted by the access's bytes per block (`moved`
    their sum; 0.0 when nothing moves)."""
    return sum(v * t.bytes_per_block for v, (_, t) in zip(values, mine)) / moved if moved else 0.0


def config_features(task, target, config) -> np.ndarray:
    """loop_features of `task`'s anchor op lowered for `target` with `config` (for a GPU target
    the device kernel of tvmc.ops.fused.lower_fused); zeros if the schedule or lowering raises
    (a config beyond the target's limits, say)."""
    from tvmc.ops.fused import lower_fused

    try:
        prim = lower_fused(task.function(), target, lambda name, wl: config if name == task.impl else None)
    except Exception:
        return np.zeros(LENGTH, np.float32)
    return loop_features(prim)
