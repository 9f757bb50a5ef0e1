"""Tensor-core GEMM kernels for GPUs with warp-level matrix instructions (NVIDIA sm_80 on:
targets/isa/nvptx64.yaml `mma`): dense, batched matmul and conv2d (implicit GEMM) with float16
or bfloat16 operands (mma m16n8k16), or float32 ones read as TF32 where the target allows it
(`allow_tf32`: mma m16n8k8, each operand rounded to TF32's 10 mantissa bits, to nearest, as it
enters the mma: tir.MMA), accumulated in float32, with the fused epilogue applied to the
accumulators.

The kernel is written directly in loop IR (a template, like TVM's ir_builder kernels and the
tensor-core templates of its meta-schedule), because its inner steps are warp-collective
instructions that no loop transformation of a tensor expression produces:

  C[b, m, n] = sum_k A(b, m, k) * B(b, k, n)      (b < batch, m < M, n < N, k < K)

- a block computes a BM x BN tile of C, BM = warps_m * frag_m * 16, BN = warps_n * frag_n * 8;
  its warps_m x warps_n warps each a (frag_m * 16) x (frag_n * 8) tile as frag_m x frag_n
  mma tiles (tir.MMA) into float32 registers;
- K goes in steps of block_k: per step the block copies the A tile [BM, block_k] and the B tile
  into shared memory (rows padded, so that the rows a warp reads at once lie in distinct banks:
  8 elements; 4 for TF32 rows along K), then every warp loads its fragments (float16 and
  bfloat16: ldmatrix, tir.MatrixLoad, B transposed on the way where it is stored with N
  contiguous; TF32: one shared load per element) and multiplies;
- with stages = 2 the copies of step k+1 (cp.async where the target has it: tir.AsyncCopy, 16
  bytes per thread and copy) go on while step k is multiplied (double buffering); stages = 1
  copies, waits, multiplies;
- an operand that is a parameter read contiguously along its tile rows (K or N a multiple of the
  elements in 16 bytes, as needed) is copied 16 bytes at a time; any other (conv2d's im2col
  gather, an inlined producer) element by element, 16 bytes' worth per thread and step along the
  row, zero outside the matrix;
- the epilogue: each thread evaluates the fused function's output expression (bias, activation,
  residual add, cast...) at the C elements it holds and stores them; out-of-range rows and
  columns are skipped.

Knobs: warps_m, warps_n (1, 2, 4), frag_m (1, 2, 4), frag_n (1, 2, 4, 8), block_k (16, 32, 64),
stages (1, 2; 2 only with async copies). A config with more than MAX_ACCUMULATORS float32
accumulators per thread, or beyond the descriptor's threads or shared memory per block, is
refused (ScheduleError), which the tuner records as invalid.

Fallback (the rule): four warps where the output allows (two along M when M >= 64, two or four
along N), warp tiles of 32 x 32 (frag_m 2 when M >= 32, frag_n 4 when N >= 32; smaller extents
take the smallest tile covering them), block_k 32 (16 when K <= 16), stages 2 when the target
copies asynchronously and K takes more than one step. Against tuned configs on an H200
(configs/tuning/cuda-sm90.json, ResNet-18 batch 1): within 1.05x on the stem and the 56 x 56 and
1 x 1 layers, 1.3x to 1.9x behind on the deeper 3 x 3 layers, whose best tiles are narrower
along N (frag_n 1) and deeper along K (block_k 64): more blocks for their few output pixels.

Applies to float16 (bfloat16) operands on targets whose `tensor_core_dtypes` has float16
(bfloat16), and to float32
ones where it has float32 and the target sets `allow_tf32` (a numerics change the user asks for:
--target-option allow_tf32=true); conv2d with groups 1 (depthwise and grouped convolutions keep
the generic GPU schedules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.gpu.tiling import pow2_at_least
from tvmc.te.expr import Cast, FloatImm, IntImm, Load, Select, Var, logical_and
from tvmc.tir.ir import (MMA, MMA_SHAPES, Allocate, AsyncCopy, AsyncCopyCommit, AsyncCopyWait, Barrier, Buffer, For,
                         IfThenElse, MatrixLoad, PrimFunc, Seq, Store)
from tvmc.tir.lower import inline_value
from tvmc.tir.simplify import simplify, simplify_stmt

MMA_M, MMA_N = 16, 8
COPY_BYTES = 16         # bytes per copy (cp.async, a vector load)
MAX_ACCUMULATORS = 64   # float32 accumulators per thread (frag_m * frag_n * 4)


@dataclass(frozen=True)
class MmaKind:
    """One form of the warp-level matrix multiply the kernels use: operand `dtype` in memory,
    tir.MMA `shape`, its K `k`, and whether fragments come from ldmatrix (16-bit elements) or
    from one shared-memory load per element."""

    dtype: str
    shape: str
    k: int
    ldmatrix: bool

    @property
    def chunk(self) -> int:
        """Elements per 16-byte copy."""
        return COPY_BYTES // np.dtype(self.dtype).itemsize

    def pad(self, k_major: bool) -> int:
        """Elements of padding per shared row: ldmatrix's 8 row addresses (16 bytes each), or a
        TF32 fragment's 8 rows x 4 columns (rows along K: 4 elements) or 4 rows x 8 columns (rows
        along N: 8 elements), in distinct banks."""
        return 4 if not self.ldmatrix and k_major else 8


MMA_KINDS = {"float16": MmaKind("float16", "m16n8k16", 16, True), "bfloat16": MmaKind("bfloat16", "m16n8k16", 16, True),
             "float32": MmaKind("float32", "m16n8k8", 8, False)}


@dataclass
class Operand:
    """One GEMM operand as the kernel reads it.

    value(b, row, col) -> PrimExpr: the element at (row, col) of the operand's tile layout (A:
    (m, k); B stored K-major: (n, k); B stored N-major: (k, n)), only asked for in range;
    rows, cols: the extents of that layout;
    direct: (param Buffer, index(b, row, col) -> flat index) when the element is that buffer's
    element and `cols` consecutive columns are consecutive in memory from a 16-byte aligned
    start (16-byte copies), else None."""

    value: Callable
    rows: int
    cols: int
    direct: tuple | None = None


def tensorcore_config(workload, target) -> ConfigSpace:
    """Config space of the tensor-core GEMM for an nn.dense / nn.matmul / nn.conv2d workload
    (the fallback rule is in the module docstring)."""
    m, n, k = gemm_extents(workload)
    space = ConfigSpace()
    warps_m = 2 if m >= 64 else 1
    warps_n = (4 if n >= 128 and warps_m == 1 else 2) if n >= 64 else 1
    frag_m = 2 if m >= 32 else 1
    frag_n = 4 if n >= 32 else min(4, pow2_at_least(-(-n // MMA_N)))
    block_k = 32 if k > 16 else 16
    stages = [1, 2] if target.async_copy else [1]
    space.define_knob("warps_m", [1, 2, 4], fallback=warps_m)
    space.define_knob("warps_n", [1, 2, 4], fallback=warps_n)
    space.define_knob("frag_m", [1, 2, 4], fallback=frag_m)
    space.define_knob("frag_n", [1, 2, 4, 8], fallback=frag_n)
    space.define_knob("block_k", [16, 32, 64], fallback=block_k)
    space.define_knob("stages", stages, fallback=2 if target.async_copy and k > block_k else 1)
    return space


def gemm_extents(workload) -> tuple:
    """(M, N, K) of the GEMM an nn.dense ([M,K] x [N,K]), nn.matmul ([..,M,K] x [..,K,N]) or NCHW
    nn.conv2d (M = out channels, N = batch x output pixels, K = C x KH x KW) workload computes."""
    a, b, out = workload[0], workload[1], workload[-3]
    if len(out) == 4 and len(b) == 4:  # conv2d: data, weight [O, C, KH, KW], out [N, O, OH, OW]
        return out[1], out[0] * out[2] * out[3], b[1] * b[2] * b[3]
    return out[-2], out[-1], a[-1]


def tensorcore_applies(workload) -> bool:
    """float16, bfloat16 or float32 operands; conv2d only with groups 1."""
    attrs = dict(workload[-1])
    return workload[-2] in MMA_KINDS and attrs.get("groups", 1) == 1


def tensorcore_supports(target, workload=None) -> bool:
    """The target has tensor-core instructions for the workload's dtype (float32 only with
    allow_tf32) and warps of 32; without a workload, for some dtype."""
    dtypes = set(target.tensor_core_dtypes) & set(MMA_KINDS)
    if not target.allow_tf32:
        dtypes.discard("float32")
    if target.thread_warp_size != 32:
        return False
    return bool(dtypes) if workload is None else workload[-2] in dtypes


# --- the GEMM kernel ---------------------------------------------------------------------------

def gemm_kernel(name: str, params: list, batch: int, m_ext: int, n_ext: int, k_ext: int, a: Operand, b: Operand,
                b_k_major: bool, epilogue: Callable, cfg, target, kind: MmaKind) -> PrimFunc:
    """The kernel of the module docstring over buffers `params` (inputs then output), with the
    matrix instruction `kind`. `epilogue(b, m, n, acc) -> Stmt` stores C element (m, n) of batch
    b, acc its float32 value. Raises ScheduleError for configs beyond the register or thread
    budget."""
    wm_n, wn_n, fm_n, fn_n = cfg["warps_m"], cfg["warps_n"], cfg["frag_m"], cfg["frag_n"]
    bk, stages = cfg["block_k"], cfg["stages"]
    if fm_n * fn_n * 4 > MAX_ACCUMULATORS:
        raise ScheduleError(f"kernel {name}: {fm_n * fn_n * 4} accumulators per thread, at most {MAX_ACCUMULATORS}")
    warp = target.thread_warp_size
    threads = warp * wm_n * wn_n
    bm, bn = wm_n * fm_n * MMA_M, wn_n * fn_n * MMA_N
    k_steps = -(-k_ext // bk)
    stages = min(stages, k_steps) if k_steps > 1 else 1

    lane, warp_id = Var("lane"), Var("warp")
    bx, by, bz = Var("n_outer"), Var("m_outer"), Var("batch")
    tid = warp_id * warp + lane
    wm, wn = warp_id // wn_n, warp_id % wn_n
    m0, n0 = by * bm, bx * bn

    dtype, chunk = kind.dtype, kind.chunk
    a_elems, b_elems, _ = MMA_SHAPES[kind.shape]
    a_row = bk + kind.pad(True)
    a_s = Buffer(f"{name}_A_shared", (stages * bm * a_row,), dtype, "shared")
    if b_k_major:
        b_row, b_rows = bk + kind.pad(True), bn
    else:
        b_row, b_rows = bn + kind.pad(False), bk
    b_s = Buffer(f"{name}_B_shared", (stages * b_rows * b_row,), dtype, "shared")
    acc = Buffer(f"{name}_acc", (fm_n * fn_n * 4,), "float32", "local")
    a_frag = Buffer(f"{name}_A_frag", (fm_n * a_elems,), dtype, "local")
    b_frag = Buffer(f"{name}_B_frag", (fn_n * b_elems,), dtype, "local")

    def copy(op: Operand, dst: Buffer, row0, col0, tile_rows, tile_cols, row_len, stage):
        """Stmts copying op's tile [row0 : +tile_rows, col0 : +tile_cols] into stage `stage` of
        `dst` (rows of row_len elements), 16 bytes' worth of elements per thread and iteration."""
        per_row = tile_cols // chunk
        chunks = tile_rows * per_row
        it_v = Var("copy")
        c = it_v * threads + tid
        r, cc = c // per_row, (c % per_row) * chunk
        grow, gcol = row0 + r, col0 + cc
        dst_index = (stage * tile_rows + r) * row_len + cc
        if op.direct is not None:
            buf, index = op.direct
            valid = logical_and(grow < op.rows, gcol < op.cols)
            src_index = index(bz, grow, gcol)
            if target.async_copy:
                body = AsyncCopy(dst, dst_index, buf, src_index, valid)
            else:
                v = Var("v")
                body = For(v, chunk, "vectorize", Store(dst, dst_index + v, Select(
                    valid, Load(buf, src_index + v), _zero(dtype))))
        else:
            v = Var("v")
            valid = logical_and(grow < op.rows, gcol + v < op.cols)
            body = For(v, chunk, "vectorize", Store(dst, dst_index + v, Select(
                valid, op.value(bz, grow, gcol + v), _zero(dtype))))
        iterations = -(-chunks // threads)
        if chunks % threads:
            body = IfThenElse(c < chunks, body)
        return For(it_v, iterations, "serial", body)

    def load_step(ko, stage):
        k0 = ko * bk
        a_copy = copy(a, a_s, m0, k0, bm, bk, a_row, stage)
        if b_k_major:
            b_copy = copy(b, b_s, n0, k0, bn, bk, b_row, stage)
        else:
            b_copy = copy(b, b_s, k0, n0, bk, bn, b_row, stage)
        return Seq([a_copy, b_copy])

    def b_index(stage, k, n):
        return (stage * bn + n) * b_row + k if b_k_major else (stage * bk + k) * b_row + n

    def load_fragments_ldmatrix(stage, kk):
        out = []
        for fm in range(fm_n):  # A fragment: 16 rows x 16 k, row-major (ldmatrix.x4)
            row = wm * (fm_n * MMA_M) + fm * MMA_M + lane % 16
            col = kk * kind.k + (lane // 16) * 8
            out.append(MatrixLoad(a_frag, fm * a_elems, a_s, (stage * bm + row) * a_row + col, 4))
        fn = 0
        while fn < fn_n:  # B fragments: two 8-column tiles per ldmatrix.x4, one per .x2
            pair = 2 if fn + 1 < fn_n else 1
            if b_k_major:  # rows of B^T (n) hold 16 consecutive k
                n = wn * (fn_n * MMA_N) + fn * MMA_N + lane % 8 + (lane // 16) * 8
                k = kk * kind.k + ((lane // 8) % 2) * 8
            else:  # rows of B (k) hold consecutive n: transposed on the way
                k = kk * kind.k + lane % 16
                n = wn * (fn_n * MMA_N) + fn * MMA_N + (lane // 16) * 8
            out.append(MatrixLoad(b_frag, fn * b_elems, b_s, b_index(stage, k, n), 2 * pair, trans=not b_k_major))
            fn += pair
        return out

    def load_fragments_per_element(stage, kk):
        """TF32 (m16n8k8): A element e of a lane at (g + 8 (e % 2), t + 4 (e // 2)), B element e at
        (k = t + 4e, n = g), with g = lane // 4, t = lane % 4 (tir.MMA)."""
        g, t = lane // 4, lane % 4
        out = []
        for fm in range(fm_n):
            for e in range(a_elems):
                row = wm * (fm_n * MMA_M) + fm * MMA_M + g + 8 * (e % 2)
                col = kk * kind.k + t + 4 * (e // 2)
                out.append(Store(a_frag, IntImm(fm * a_elems + e), Load(a_s, (stage * bm + row) * a_row + col)))
        for fn in range(fn_n):
            for e in range(b_elems):
                n = wn * (fn_n * MMA_N) + fn * MMA_N + g
                out.append(Store(b_frag, IntImm(fn * b_elems + e),
                                 Load(b_s, b_index(stage, kk * kind.k + t + 4 * e, n))))
        return out

    def multiply(stage):
        out = []
        for kk in range(bk // kind.k):
            load = load_fragments_ldmatrix if kind.ldmatrix else load_fragments_per_element
            out += load(stage, kk)
            for fm in range(fm_n):
                for fn in range(fn_n):
                    out.append(MMA(kind.shape, acc, (fm * fn_n + fn) * 4, a_frag, fm * a_elems, b_frag, fn * b_elems))
        return Seq(out)

    ko = Var("k_outer")
    init = [Store(acc, IntImm(e), _zero("float32")) for e in range(acc.size)]
    if stages == 1:
        steps = [load_step(ko, 0)]
        if target.async_copy:
            steps.append(AsyncCopyWait(0))
        main = For(ko, k_steps, "serial", Seq(steps + [Barrier(), multiply(0), Barrier()]))
        body = Seq(init + [main])
    else:
        nxt = ko + 1
        prefetch = IfThenElse(nxt < k_steps, load_step(nxt, nxt % 2))
        wait = [AsyncCopyWait(1)] if target.async_copy else []
        main = For(ko, k_steps, "serial", Seq([prefetch] + wait + [Barrier(), multiply(ko % 2), Barrier()]))
        # the first step's copies are a group of their own: the loop's first wait leaves only the
        # second step's group in flight
        commit = [AsyncCopyCommit()] if target.async_copy else []
        body = Seq(init + [load_step(IntImm(0), 0)] + commit + [main])

    stores = []
    for fm in range(fm_n):
        for fn in range(fn_n):
            for h in range(2):
                for j in range(2):
                    m = m0 + wm * (fm_n * MMA_M) + fm * MMA_M + lane // 4 + 8 * h
                    n = n0 + wn * (fn_n * MMA_N) + fn * MMA_N + (lane % 4) * 2 + j
                    value = Load(acc, IntImm((fm * fn_n + fn) * 4 + 2 * h + j))
                    stores.append(IfThenElse(logical_and(m < m_ext, n < n_ext), epilogue(bz, m, n, value)))
    body = Seq([body] + stores)
    for buf in (b_frag, a_frag, acc, b_s, a_s):
        body = Allocate(buf, body)
    body = For(lane, warp, "threadIdx.x", For(warp_id, wm_n * wn_n, "threadIdx.y", body))
    body = For(bz, batch, "blockIdx.z",
               For(by, -(-m_ext // bm), "blockIdx.y", For(bx, -(-n_ext // bn), "blockIdx.x", body)))
    return PrimFunc(name, params, simplify_stmt(body))


def _zero(dtype: str):
    return FloatImm(0.0, dtype)


# --- the operators -------------------------------------------------------------------------------

def _direct(t, buffers, index: Callable, contiguous_extent: int):
    """Operand.direct for te tensor `t` read at index(b, row, col) (its indices) when it is a
    kernel parameter whose rows along `col` hold `contiguous_extent` elements, a multiple of the
    elements in 16 bytes (so every row starts 16-byte aligned); else None."""
    if t.uid not in buffers or contiguous_extent % MMA_KINDS[t.dtype].chunk:
        return None
    buf = buffers[t.uid]
    return buf, lambda b, r, c: buf.flat_index(index(b, r, c))


def _epilogue(ctx, buffers, out_buf, indices_of: Callable):
    """epilogue(b, m, n, acc) of gemm_kernel: the fused output at indices_of(b, m, n), the
    anchor's value there being acc rounded to the anchor's dtype (the fused ops after an anchor
    are elementwise over its shape, tvmc/passes/fuse_ops.py: they read it where they write)."""
    def store(b, m, n, acc):
        idx = indices_of(b, m, n)

        def anchor_value(at):
            if any(extent != 1 and not _same(x, y) for x, y, extent in zip(at, idx, ctx.anchor.shape)):
                raise ScheduleError(f"kernel {ctx.name}: the epilogue reads {ctx.anchor.name} away from the "
                                    "element it writes")
            return _cast_like(ctx.anchor, acc)

        value = inline_value(ctx.out, idx, buffers, {ctx.anchor.uid: anchor_value})
        return Store(out_buf, out_buf.flat_index(idx), value)
    return store


def _same(a, b) -> bool:
    """Whether index expressions a and b are equal: their difference folds to 0, or they print
    alike (the simplifier keeps floordiv and floormod terms as opaque atoms)."""
    d = simplify(a - b)
    return (isinstance(d, IntImm) and d.value == 0) or repr(simplify(a)) == repr(simplify(b))


def _cast_like(t, acc):
    return Cast(t.dtype, acc) if t.dtype != "float32" else acc


def _buffers(ctx) -> tuple:
    """({param uid: Buffer} of the inputs, [Buffers of the inputs and the output])."""
    buffers = {t.uid: Buffer(t.name, t.shape, t.dtype) for t in ctx.params}
    return buffers, list(buffers.values()) + [Buffer(ctx.out.name, ctx.out.shape, ctx.out.dtype)]


def schedule_dense_tensorcore(ctx, cfg, target) -> PrimFunc:
    """nn.dense: data [M, K] (A), weight [N, K] (B stored K-major)."""
    data, weight = ctx.anchor_inputs
    buffers, params = _buffers(ctx)
    (m_ext, k_ext), n_ext = data.shape, weight.shape[0]
    a = Operand(lambda b, m, k: inline_value(data, [m, k], buffers), m_ext, k_ext,
                _direct(data, buffers, lambda b, m, k: [m, k], k_ext))
    bt = Operand(lambda b, n, k: inline_value(weight, [n, k], buffers), n_ext, k_ext,
                 _direct(weight, buffers, lambda b, n, k: [n, k], k_ext))
    return gemm_kernel(ctx.name, params, 1, m_ext, n_ext, k_ext, a, bt, True,
                       _epilogue(ctx, buffers, params[-1], lambda b, m, n: [m, n]), cfg, target,
                       MMA_KINDS[data.dtype])


def schedule_matmul_tensorcore(ctx, cfg, target) -> PrimFunc:
    """nn.matmul: a [..., M, K] (A), b [..., K, N] (B stored N-major), batch axes broadcast."""
    from tvmc.ops.elemwise import broadcast_index

    lhs, rhs = ctx.anchor_inputs
    buffers, params = _buffers(ctx)
    out_shape = ctx.anchor.shape
    batch_shape = out_shape[:-2]
    batch = math.prod(batch_shape)
    m_ext, n_ext, k_ext = out_shape[-2], out_shape[-1], lhs.shape[-1]

    def batch_index(b):
        idx, rest = [], b
        for extent in reversed(batch_shape):
            idx.insert(0, rest % extent)
            rest = rest // extent
        return tuple(idx)

    def a_index(b, m, k):
        return list(broadcast_index(lhs.shape[:-2], batch_index(b))) + [m, k]

    def b_index(b, k, n):
        return list(broadcast_index(rhs.shape[:-2], batch_index(b))) + [k, n]

    a = Operand(lambda b, m, k: inline_value(lhs, a_index(b, m, k), buffers), m_ext, k_ext,
                _direct(lhs, buffers, a_index, k_ext))
    bn = Operand(lambda b, k, n: inline_value(rhs, b_index(b, k, n), buffers), k_ext, n_ext,
                 _direct(rhs, buffers, b_index, n_ext))
    return gemm_kernel(ctx.name, params, batch, m_ext, n_ext, k_ext, a, bn, False,
                       _epilogue(ctx, buffers, params[-1], lambda b, m, n: list(batch_index(b)) + [m, n]),
                       cfg, target, MMA_KINDS[lhs.dtype])


def schedule_conv2d_tensorcore(ctx, cfg, target) -> PrimFunc:
    """nn.conv2d NCHW, groups 1, as an implicit GEMM: A = weight [O, C*KH*KW], B = the im2col
    matrix [C*KH*KW, N*OH*OW] gathered from the (padded) data while it is copied (N-major)."""
    data, weight = ctx.anchor_inputs
    attrs = ctx.attrs
    buffers, params = _buffers(ctx)
    nb, c, h, w = data.shape
    o, _, kh, kw = weight.shape
    _, _, oh, ow = ctx.anchor.shape
    pt, pl = attrs["padding"][0], attrs["padding"][1]
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    taps = kh * kw
    m_ext, n_ext, k_ext = o, nb * oh * ow, c * taps

    def weight_value(b, oc, k):
        return inline_value(weight, [oc, k // taps, (k // kw) % kh, k % kw], buffers)

    def im2col(b, k, n):
        img, y, x = n // (oh * ow), (n // ow) % oh, n % ow
        ic, ky, kx = k // taps, (k // kw) % kh, k % kw
        iy, ix = y * sh - pt + ky * dh, x * sw - pl + kx * dw
        inside = logical_and(iy >= 0, iy < h, ix >= 0, ix < w)
        return Select(inside, inline_value(data, [img, ic, iy, ix], buffers), _zero(data.dtype))

    # weight [O, C, KH, KW] is row-major [O, K]: row oc of A starts at oc * K
    a = Operand(weight_value, m_ext, k_ext, _direct(weight, buffers, lambda b, oc, k: [oc, 0, 0, k], k_ext))
    bn = Operand(im2col, k_ext, n_ext)
    return gemm_kernel(ctx.name, params, 1, m_ext, n_ext, k_ext, a, bn, False,
                       _epilogue(ctx, buffers, params[-1],
                                 lambda b, m, n: [n // (oh * ow), m, (n // ow) % oh, n % ow]), cfg, target,
                       MMA_KINDS[data.dtype])
