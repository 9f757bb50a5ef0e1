"""A SIMT interpreter of GPU device kernels, for tests only: it runs the loop IR of a kernel that
tvmc.tir.gpu.lower_device produced on numpy arrays, so that a kernel's index arithmetic, guards,
warp-level matrix instructions (tir.MatrixLoad, tir.MMA, tir.AsyncCopy) and int8 dot-product steps
(tir.DotU8S8) are checked on a machine without a GPU, against a numpy reference. It never runs a
compiled model.

Execution model: the blocks of the grid one after another; the threads of a block in lockstep,
one numpy lane per thread (thread id = x + X (y + Y z), warps of 32 consecutive ids, as CUDA
numbers them). A statement runs for the active threads (a mask narrowed by IfThenElse and guarded
thread loops); loads and stores gather and scatter per thread. Values follow the code generators:
integers in int64, float16 and bfloat16 computed in float32 and rounded where stored or cast
(bfloat16 through ml_dtypes' numpy dtype: to nearest even), comparisons as bool.

Asynchronous copies (tir.AsyncCopy) read their source when issued and land in shared memory as
late as the PTX rules allow: at the AsyncCopyWait that requires their group (AsyncCopyCommit and
every wait close a group), or at the end of the kernel; a kernel that reads the destination earlier
reads what was there before, so a missing commit or wait shows as a wrong result.

What lockstep cannot show: a missing barrier (every thread finishes a statement before any starts
the next, which is one valid schedule).
"""

from __future__ import annotations

import math

import numpy as np

from tvmc.te.expr import (BinOp, Call, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, Select, Var, evaluate_int,
                          literal_value, register_dtype)
from tvmc.te.extent import upper_bound
from tvmc.tir.ir import (MMA, Allocate, AsyncCopy, AsyncCopyCommit, AsyncCopyWait, Barrier, DotU8S8, For,
                         IfThenElse, MatrixLoad, PrimFunc, Seq, Store)

WARP = 32

_UNARY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "fabs": np.abs, "abs": np.abs, "floor": np.floor,
          "ceil": np.ceil, "round": np.rint, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "tan": np.tan,
          "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": np.vectorize(math.erf, otypes=[np.float64])}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
           "floormod": np.mod, "and": np.logical_and, "or": np.logical_or, "bitwise_and": np.bitwise_and,
           "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift,
           "right_shift": np.right_shift, "fmod": np.fmod}
_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}


def _register(dtype: str):
    """numpy dtype of a value of `dtype` in registers (float16 and bfloat16 compute in float32)."""
    return np.dtype(register_dtype(dtype))


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits) as tir.MMA m16n8k8 reads its operands
    (PTX cvt.rna.tf32.f32): to nearest, ties away from zero (half of the 13 dropped bits' weight
    added to the magnitude, then those bits cleared), the largest magnitudes rounding to inf;
    inf and nan unchanged."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), rounded, x)


class _Block:
    """One block's run: thread indices, the memories, the active mask."""

    def __init__(self, prim: PrimFunc, memory: dict, block_index: tuple, launch=None, sizes=None):
        launch = launch or prim.launch
        self.threads = launch.threads_per_block
        ids = np.arange(self.threads)
        bx, by, _ = launch.block
        self.thread_index = {"threadIdx.x": ids % bx, "threadIdx.y": (ids // bx) % by, "threadIdx.z": ids // (bx * by)}
        self.block_index = dict(zip(("blockIdx.x", "blockIdx.y", "blockIdx.z"), block_index))
        self.launch = launch
        self.memory = dict(memory)  # Buffer -> storage: 1-D (global, shared) or [threads, size] (local)
        self.env: dict = {v: np.int64(n) for v, n in (sizes or {}).items()}  # the size arguments
        self.uncommitted: list = []  # asynchronous copies issued since the last commit: (buffer, start, data)
        self.groups: list = []       # committed groups not yet waited for, oldest first

    # --- expressions ---------------------------------------------------------------------------
    def value(self, e, mask):
        """Per-thread values of expression `e` (an array of `threads`, or a numpy scalar)."""
        if isinstance(e, IntImm):
            return np.bool_(e.value) if e.dtype == "bool" else np.dtype(e.dtype).type(e.value)
        if isinstance(e, FloatImm):
            return _register(e.dtype).type(literal_value(e))
        if isinstance(e, Var):
            return self.env[e]
        if isinstance(e, Load):
            return self.load(e.buffer, self.value(e.index, mask), mask)
        if isinstance(e, Select):
            cond = np.broadcast_to(self.value(e.cond, mask), (self.threads,))
            t = self.value(e.t, mask & cond)
            f = self.value(e.f, mask & ~cond)
            return np.where(cond, t, f).astype(_register(e.dtype))
        if isinstance(e, Let):
            outer = self.env.get(e.var)
            self.env[e.var] = self.value(e.value, mask)
            out = self.value(e.body, mask)
            if outer is None:
                del self.env[e.var]
            else:
                self.env[e.var] = outer
            return out
        if isinstance(e, Cast):
            v = np.asarray(self.value(e.value, mask))
            if e.dtype == "float16":
                return v.astype(np.float16).astype(np.float32)
            if e.dtype == "bfloat16":  # through float32, as the code generators
                return v.astype(np.float32).astype(e.dtype).astype(np.float32)
            if np.dtype(e.dtype).kind in "iu" and v.dtype.kind == "f":
                v = np.trunc(np.nan_to_num(v))
            return v.astype(_register(e.dtype))
        if isinstance(e, Not):
            return np.logical_not(self.value(e.a, mask))
        if isinstance(e, Cmp):
            return _CMP[e.op](self.value(e.a, mask), self.value(e.b, mask))
        if isinstance(e, BinOp):
            a, b = self.value(e.a, mask), self.value(e.b, mask)
            with np.errstate(all="ignore"):
                if e.op in ("div", "floordiv"):
                    if np.dtype(_register(e.dtype)).kind == "f" and e.op == "div":
                        return (np.asarray(a) / b).astype(_register(e.dtype))
                    b = np.where(np.asarray(b) == 0, 1, b)  # inactive threads may divide by zero
                    return np.floor_divide(a, b)
                if e.op == "floormod":
                    b = np.where(np.asarray(b) == 0, 1, b)
                return _BINARY[e.op](a, b).astype(_register(e.dtype))
        if isinstance(e, Call) and e.name in _UNARY:
            with np.errstate(all="ignore"):
                return np.asarray(_UNARY[e.name](self.value(e.args[0], mask))).astype(_register(e.dtype))
        raise NotImplementedError(f"simt: expression {type(e).__name__} {getattr(e, 'name', '')}")

    # --- memory --------------------------------------------------------------------------------
    def load(self, buf, index, mask):
        mem = self.memory[buf]
        idx = np.clip(np.broadcast_to(np.asarray(index, np.int64), (self.threads,)), 0, mem.shape[-1] - 1)
        out = mem[np.arange(self.threads), idx] if buf.scope == "local" else mem[idx]
        return out.astype(_register(buf.dtype))

    def store(self, buf, index, value, mask):
        mem = self.memory[buf]
        idx = np.broadcast_to(np.asarray(index, np.int64), (self.threads,))[mask]
        val = np.broadcast_to(np.asarray(value), (self.threads,))[mask]
        if idx.size and (idx.min() < 0 or idx.max() >= mem.shape[-1]):  # the elements it holds at this run
            raise IndexError(f"simt: store to {buf.name}[{int(idx.min())}..{int(idx.max())}] outside its "
                             f"{mem.shape[-1]} elements")
        if buf.scope == "local":
            mem[np.nonzero(mask)[0], idx] = val
        else:
            mem[idx] = val

    # --- statements ----------------------------------------------------------------------------
    def run(self, s, mask):
        if not mask.any():
            return
        if isinstance(s, Seq):
            for x in s.stmts:
                self.run(x, mask)
        elif isinstance(s, For):
            extent = s.extent if isinstance(s.extent, int) else int(self.value(s.extent, mask))
            if s.kind in self.thread_index:
                idx = self.thread_index[s.kind]
                self.env[s.var] = idx
                self.run(s.body, mask & (idx < extent))
            elif s.kind in self.block_index:
                if self.block_index[s.kind] < extent:
                    self.env[s.var] = np.int64(self.block_index[s.kind])
                    self.run(s.body, mask)
            else:
                for k in range(extent):
                    self.env[s.var] = np.int64(k)
                    self.run(s.body, mask)
        elif isinstance(s, Store):
            self.store(s.buffer, self.value(s.index, mask), self.value(s.value, mask), mask)
        elif isinstance(s, Allocate):
            buf = s.buffer
            size = buf.size if buf.static else upper_bound(buf.size)  # symbolic: its upper bound, as codegen
            shape = (self.threads, size) if buf.scope == "local" else (size,)
            self.memory[buf] = np.zeros(shape, np.dtype(buf.dtype))
            self.run(s.body, mask)
            del self.memory[buf]
        elif isinstance(s, IfThenElse):
            cond = np.broadcast_to(self.value(s.cond, mask), (self.threads,)).astype(bool)
            self.run(s.then, mask & cond)
            if s.otherwise is not None:
                self.run(s.otherwise, mask & ~cond)
        elif isinstance(s, Barrier):
            pass  # lockstep: every earlier statement is done for every thread (module docstring)
        elif isinstance(s, AsyncCopyCommit):
            self.commit()
        elif isinstance(s, AsyncCopyWait):
            self.commit()
            self.land(len(self.groups) - s.pending)
        elif isinstance(s, AsyncCopy):
            self.async_copy(s, mask)
        elif isinstance(s, MatrixLoad):
            self.matrix_load(s, self.warps(mask, s))
        elif isinstance(s, MMA):
            self.mma(s, self.warps(mask, s))
        elif isinstance(s, DotU8S8):
            self.dot_u8s8(s, mask)
        else:
            raise NotImplementedError(f"simt: statement {type(s).__name__}")

    def dot_u8s8(self, s: DotU8S8, mask):
        """tir.DotU8S8 per active thread: each lane's int32 += the sum of the 4 uint8 (or int8)
        x int8 products (exact in int64), wrapped to int32 as the instruction (dp4a) adds. int16
        data (a data_pairs stage: x86 only) has no GPU form."""
        if s.a.dtype == "int16":
            raise NotImplementedError("simt: a DotU8S8 step on int16 data (a data_pairs stage) has no GPU form")
        a_index, b_index, acc_index = (self.value(x, mask) for x in (s.a_index, s.b_index, s.acc_index))
        quad = [np.asarray(self.load(s.a, a_index + j, mask), np.int64) for j in range(4)]
        for c in range(s.lanes):
            total = np.asarray(self.load(s.acc, acc_index + c, mask), np.int64)
            for j in range(4):
                total = total + quad[j] * np.asarray(self.load(s.b, b_index + 4 * c + j, mask), np.int64)
            wrapped = ((np.asarray(total, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)
            self.store(s.acc, acc_index + c, wrapped, mask)

    def commit(self):
        self.groups.append(self.uncommitted)
        self.uncommitted = []

    def land(self, count: int):
        """Write the oldest `count` groups of asynchronous copies into their destinations."""
        for group in self.groups[:max(count, 0)]:
            for buf, start, data in group:
                self.memory[buf][start:start + len(data)] = data
        self.groups = self.groups[max(count, 0):]

    def finish(self):
        """The kernel's end: every copy lands."""
        self.commit()
        self.land(len(self.groups))

    def warps(self, mask, s) -> np.ndarray:
        """Thread ids [warps, 32] of the warps that run warp-collective `s` (all their lanes active)."""
        if self.threads % WARP:
            raise ValueError(f"simt: {type(s).__name__} in a block of {self.threads} threads (not whole warps)")
        by_warp = mask.reshape(-1, WARP)
        if (by_warp.any(axis=1) != by_warp.all(axis=1)).any():
            raise ValueError(f"simt: {type(s).__name__} reached by only some lanes of a warp")
        return np.arange(self.threads).reshape(-1, WARP)[by_warp.all(axis=1)]

    def async_copy(self, s: AsyncCopy, mask):
        n = s.nbytes // np.dtype(s.dst.dtype).itemsize
        dst = np.broadcast_to(np.asarray(self.value(s.dst_index, mask), np.int64), (self.threads,))
        src = np.broadcast_to(np.asarray(self.value(s.src_index, mask), np.int64), (self.threads,))
        cond = np.broadcast_to(self.value(s.cond, mask), (self.threads,)).astype(bool)
        for t in np.nonzero(mask)[0]:
            if dst[t] % n or (cond[t] and src[t] % n):
                raise ValueError(f"simt: cp.async of {s.nbytes} bytes at unaligned elements {dst[t]}, {src[t]}")
            data = self.memory[s.src][src[t]:src[t] + n].copy() if cond[t] else np.zeros(n, s.dst.dtype)
            if len(data) != n:
                raise IndexError(f"simt: cp.async reads past the end of {s.src.name}")
            self.uncommitted.append((s.dst, dst[t], data))

    def matrix_load(self, s: MatrixLoad, warps):
        src = np.broadcast_to(np.asarray(self.value(s.src_index, np.ones(self.threads, bool)), np.int64),
                              (self.threads,))
        mem = self.memory[s.src]
        lane = np.arange(WARP)
        dst = self.memory[s.dst]
        for w in warps:
            for j in range(s.count):
                rows = np.stack([mem[src[w[8 * j + r]]:src[w[8 * j + r]] + 8] for r in range(8)])  # [8, 8]
                if s.trans:
                    rows = rows.T
                dst[w, s.dst_offset + 2 * j] = rows[lane // 4, 2 * (lane % 4)]
                dst[w, s.dst_offset + 2 * j + 1] = rows[lane // 4, 2 * (lane % 4) + 1]

    def mma(self, s: MMA, warps):
        lane = np.arange(WARP)
        g, t = lane // 4, lane % 4
        a_mem, b_mem, c_mem = self.memory[s.a], self.memory[s.b], self.memory[s.acc]
        if s.shape == "m16n8k16":
            a_at = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                    (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
            b_at = [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
            k = 16
        else:  # m16n8k8, TF32
            a_at = [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
            b_at = [(t, g), (t + 4, g)]
            k = 8
        c_at = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
        for w in warps:
            a = np.zeros((16, k), np.float32)
            b = np.zeros((k, 8), np.float32)
            c = np.zeros((16, 8), np.float32)
            for e, (r, col) in enumerate(a_at):
                a[r, col] = a_mem[w, s.a_offset + e]
            for e, (r, col) in enumerate(b_at):
                b[r, col] = b_mem[w, s.b_offset + e]
            for e, (r, col) in enumerate(c_at):
                c[r, col] = c_mem[w, s.acc_offset + e]
            if s.shape == "m16n8k8":
                a, b = _tf32(a), _tf32(b)
            d = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
            for e, (r, col) in enumerate(c_at):
                c_mem[w, s.acc_offset + e] = d[r, col]


def run_kernel(prim: PrimFunc, arrays) -> None:
    """Run device kernel `prim` (with `launch`) once on numpy `arrays`, one per parameter in order,
    C-contiguous and of the parameters' dtypes; the kernel's stores land in them. A kernel with
    symbolic extents takes its size arguments from the arrays' shapes (PrimFunc.size_args) and
    launches with its grid and block at them (none where an extent is 0). Raises ValueError on a
    launch-less kernel, mismatched arrays or a warp-collective instruction reached by part of a
    warp; IndexError on a store outside a buffer."""
    if prim.launch is None:
        raise ValueError(f"simt: {prim.name} is not a device kernel (no launch configuration)")
    if len(arrays) != len(prim.params):
        raise ValueError(f"simt: {prim.name} takes {len(prim.params)} arrays, got {len(arrays)}")
    sizes = dict(zip(prim.size_vars, prim.size_args([a.shape for a in arrays]))) if prim.size_vars else {}
    for buf, a in zip(prim.params, arrays):
        size = buf.size if buf.static else evaluate_int(buf.size, sizes)
        if a.dtype != np.dtype(buf.dtype) or a.size != size or not a.flags.c_contiguous:
            raise ValueError(f"simt: array for {buf.name} must be C-contiguous {buf.dtype}[{size}], got "
                             f"{a.dtype}{list(a.shape)}")
    run_launch(prim, [a.reshape(-1) for a in arrays], sizes, prim.launch.evaluate(sizes))


def run_launch(prim: PrimFunc, buffers, sizes: dict, launch) -> None:
    """One launch of device kernel `prim` as an executor makes it: `buffers` 1-D numpy arrays of
    the parameters' dtypes (at least the elements the launch touches; a run-time shape's tensor
    packed at the start of its bound buffer), `sizes` the values of its size variables (SizeVar
    -> int), `launch` the LaunchConfig evaluated at them (nothing runs where an extent is 0 or
    less). Raises as run_kernel."""
    if min(*launch.grid, *launch.block) <= 0:
        return
    memory = dict(zip(prim.params, buffers))
    gx, gy, gz = launch.grid
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                block = _Block(prim, memory, (x, y, z), launch, sizes)
                block.run(prim.body, np.ones(block.threads, bool))
                block.finish()
