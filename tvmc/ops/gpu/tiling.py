"""Shared GPU schedule pieces: binding a stage's loops to blocks and threads, cooperative fetches
of shared-memory tiles, the per-thread placement of reductions, the thread-count knobs every
GPU config space starts from, and the tiled GEMM skeleton with its occupancy-aware fallback
(gemm_tile_fallback: enough threads and blocks for every multiprocessor first, then larger
register tiles and blocks), all derived from the target descriptor."""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.injective import inline_injective
from tvmc.te.expr import TensorLoad, walk
from tvmc.te.schedule import thread_axis


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


def thread_counts(target, at_most: int | None = None) -> list:
    """Powers of two from the descriptor's warp size (a block of fewer threads leaves lanes of
    its warps idle) up to max_threads_per_block (and `at_most` when given)."""
    top = min(target.max_threads_per_block, at_most or target.max_threads_per_block)
    out, n = [], max(1, target.thread_warp_size)
    while n <= top:
        out.append(n)
        n *= 2
    return out or [1]


def define_num_threads(space: ConfigSpace, target, work: int) -> None:
    """Knob `num_threads` (threads per block): powers of two up to the descriptor's limit; the
    fallback is the limit itself, or the smallest power of two covering `work` when less."""
    cands = thread_counts(target)
    space.define_knob("num_threads", cands, fallback=min(cands[-1], max(cands[0], pow2_at_least(work))))


def bind_threads(s, t, num_threads: int, vector_lanes: int = 1):
    """Fuse every axis of stage `t`, split it into (blocks, threads[, vector]) and bind: one
    element (or `vector_lanes` consecutive elements of the innermost axis, which must divide it)
    per thread, consecutive threads on consecutive elements (coalesced). Returns the thread
    loop, or None for a rank-0 stage."""
    st = s[t]
    axes = list(st.op.axis)
    if not axes:
        return None
    if vector_lanes > 1:  # split before fusing, so the vector lanes stay contiguous in the index
        axes[-1], lanes = st.split(axes[-1], vector_lanes)
        st.vectorize(lanes)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = st.split(fused, num_threads)
    st.bind(bx, thread_axis("blockIdx.x"))
    st.bind(tx, thread_axis("threadIdx.x"))
    return tx


def readers_after_inlining(s) -> dict:
    """tensor uid -> the stages (not inlined) whose bodies read it, directly or through inlined stages."""
    inlined = {st.tensor.uid: st for st in s.stages if st.attach == "inline"}
    out: dict = {}
    for st in s.stages:
        if st.attach == "inline":
            continue
        todo, seen = [st.op.body], set()
        while todo:
            for x in walk(todo.pop()):
                if isinstance(x, TensorLoad) and x.tensor.uid not in seen:
                    seen.add(x.tensor.uid)
                    if x.tensor.uid in inlined:
                        todo.append(inlined[x.tensor.uid].op.body)
                    else:
                        out.setdefault(x.tensor.uid, []).append(st)
    return out


def attach_reductions_per_thread(s, out, thread_loop, skip=()):
    """Compute every reduction stage (other than `out` and `skip`) in local memory inside the
    loops of the stage that reads it: at `thread_loop` when `out` reads it, else at its reader's
    innermost spatial loop; each thread then computes the region its outputs need."""
    readers = readers_after_inlining(s)
    skip_ids = {t.uid for t in skip} | {out.uid}
    for st in reversed(s.stages):
        if not st.op.reduce_axis or st.tensor.uid in skip_ids or st.attach != "root":
            continue
        users = readers.get(st.tensor.uid, [])
        consumer = s[out] if any(u.tensor.uid == out.uid for u in users) or not users else users[0]
        if consumer is s[out] and thread_loop is not None:
            at = thread_loop
        else:
            spatial = [iv for iv in consumer.leaf if iv.kind == "spatial"]
            at = spatial[-1] if spatial else consumer.leaf[0] if consumer.leaf else None
        st.set_scope("local")
        if at is not None:  # else a rank-0 reader with no loop: the one thread computes it first
            st.compute_at(consumer, at)


def schedule_per_thread(s, out, num_threads: int, keep=()):
    """Generic GPU schedule: injective stages inlined, one output element per thread, every
    reduction computed per thread where it is read (attach_reductions_per_thread)."""
    reductions = [st.tensor for st in s.stages if st.op.reduce_axis]
    inline_injective(s, out, keep=[*reductions, *keep])
    tx = bind_threads(s, out, num_threads)
    attach_reductions_per_thread(s, out, tx)


def cooperative_fetch(s, cache, threads_x: int, threads_y: int = 1, vector_lanes: int = 1):
    """Loops of a shared-memory tile stage `cache` (attached into a block): its elements fused,
    spread over the block's threadIdx.x (consecutive threads on consecutive elements) and
    threadIdx.y, the rest a serial loop; with `vector_lanes` > 1 (dividing the innermost axis)
    each thread copies that many consecutive elements as one vector (int8 quads: one word)."""
    st = s[cache]
    axes = list(st.op.axis)
    if vector_lanes > 1:
        axes[-1], lanes = st.split(axes[-1], vector_lanes)
        st.vectorize(lanes)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    rest, tx = st.split(fused, threads_x)
    st.bind(tx, thread_axis("threadIdx.x"))
    if threads_y > 1:
        rest, ty = st.split(rest, threads_y)
        st.bind(ty, thread_axis("threadIdx.y"))


# What the GEMM-tile fallback (gemm_tile_fallback) asks of a kernel per multiprocessor (SM):
# two blocks, so one computes while the other waits on the global loads and the barriers of its
# shared-memory step; and eight warps in all, two for each of the four warp schedulers an SM has
# (NVIDIA since Maxwell; an AMD compute unit has four SIMDs), so a scheduler has a second warp to
# issue while one waits. The fastest configs of the ResNet-18 batch 1 searches on an H200 (132
# SMs; bench/results/cuda_h200/gemm_fallback.txt) mostly run 25,000 to 50,000 threads (6 to 12
# warps per SM): the 14 x 14 and 7 x 7 layers on 224 to 896 blocks of 1 or 2 outputs per thread,
# the 56 x 56 and 28 x 28 ones on fewer, larger blocks of 2 to 8 outputs per thread.
BLOCKS_PER_MULTIPROCESSOR = 2
WARPS_PER_MULTIPROCESSOR = 8
# A kernel whose full register tile already gives this many times the threads asked for has work
# for every multiprocessor however its blocks grow: the grid asks nothing more of tile_y, which grows
# to the descriptor's limit as before the rule (larger blocks share each staged operand among more
# outputs). Measured on an H100 (bench/results/cuda_h100.md, runs 1 and 3): with the grid's demand
# on such kernels ResNet-18 at batch 16 in float32 took 19.14 ms instead of 13.37 (its 7x7x512
# convolutions 1.94 ms instead of 0.79: 448 blocks of 32 x 8 threads instead of 112 of 128 x 8) and
# MobileNetV2 at batch 16 3.64 instead of 3.12, while the batch-1 kernels, short of threads, gained.
AMPLE_PARALLELISM = 2


def gemm_tile_fallback(target, rows: int, cols: int, reg_rows: int, reg_cols: int, others: int = 1) -> dict:
    """Fallback knobs (tile_x, tile_y, reg_x, reg_y) of a GEMM-like output tile of `rows` x `cols`
    per kernel, repeated over `others` block positions (the other output axes, fused into
    blockIdx.z), from the descriptor's threads per block, warp size and multiprocessor count.

    The rule, occupancy first: every multiprocessor gets work, then each thread and block grows.
    1. Register tile: `reg_rows` x `reg_cols` outputs per thread (operand reuse: per reduction
       step a thread loads reg_y + reg_x values for reg_y * reg_x multiply-adds) where the extent
       holds at least 4 such tiles, else 1 along that axis.
    2. While the kernel has fewer threads (outputs / register tile) than WARPS_PER_MULTIPROCESSOR
       warps per multiprocessor, or its smallest blocks (3.) number fewer than
       BLOCKS_PER_MULTIPROCESSOR per multiprocessor, halve the register tile (its larger side,
       rows first; down to 1 x 1): with fewer threads, latency is hidden by nothing (a kernel of
       fewer blocks than multiprocessors leaves the others idle).
    3. The smallest block: tile_x the smallest power of two covering the columns left, at most
       half the warp (consecutive threads on consecutive columns: coalesced accesses; the other
       half-warp takes the next rows); tile_y the smallest power of two that fills a warp (a
       smaller block leaves lanes idle), no more than the rows left need.
    4. Double tile_y while the rows left need it, the block stays within max_threads_per_block
       and the grid keeps BLOCKS_PER_MULTIPROCESSOR blocks per multiprocessor: a larger block
       shares each operand tile it stages in shared memory among more outputs. Where the full
       register tile gave AMPLE_PARALLELISM times the threads asked for (large batches), the
       grid asks nothing: tile_y grows to the descriptor's limit.
    Without the multiprocessor count (OpenCL descriptors) nothing is demanded of the grid: the
    register tile stays and tile_y grows to the descriptor's limit. Where even 1 x 1 register
    tiles on the smallest blocks fall short (ResNet-18's 7 x 7 x 512 convolutions at batch 1:
    25088 outputs), the kernel stays latency-bound: each thread runs the whole reduction."""
    warp, top = max(1, target.thread_warp_size), max(1, target.max_threads_per_block)
    want_blocks = BLOCKS_PER_MULTIPROCESSOR * target.multiprocessor_count
    want_threads = WARPS_PER_MULTIPROCESSOR * warp * target.multiprocessor_count
    reg_x = reg_cols if cols >= 4 * reg_cols else 1
    reg_y = reg_rows if rows >= 4 * reg_rows else 1

    def smallest_block(reg_y, reg_x):
        tile_x = min(max(1, warp // 2), pow2_at_least(-(-cols // reg_x)), top)
        tile_y = min(pow2_at_least(-(-warp // tile_x)), pow2_at_least(-(-rows // reg_y)), top // tile_x)
        return tile_x, max(1, tile_y)

    def blocks(tile_x, tile_y, reg_y, reg_x):
        return others * -(-rows // (tile_y * reg_y)) * -(-cols // (tile_x * reg_x))

    def short(reg_y, reg_x):
        threads = others * -(-rows // reg_y) * -(-cols // reg_x)
        return threads < want_threads or blocks(*smallest_block(reg_y, reg_x), reg_y, reg_x) < want_blocks

    if others * -(-rows // reg_y) * -(-cols // reg_x) >= AMPLE_PARALLELISM * want_threads:
        want_blocks = 0  # work for every multiprocessor whatever the blocks (AMPLE_PARALLELISM)
    while reg_y * reg_x > 1 and short(reg_y, reg_x):
        if reg_y >= reg_x:
            reg_y //= 2
        else:
            reg_x //= 2
    tile_x, tile_y = smallest_block(reg_y, reg_x)
    while (2 * tile_y <= pow2_at_least(-(-rows // reg_y)) and 2 * tile_y * tile_x <= top
           and blocks(tile_x, 2 * tile_y, reg_y, reg_x) >= want_blocks):
        tile_y *= 2
    return {"tile_x": tile_x, "tile_y": tile_y, "reg_x": reg_x, "reg_y": reg_y}


def define_gemm_tile(space: ConfigSpace, target, rows: int, cols: int, reg_rows: int, reg_cols: int,
                     others: int = 1) -> None:
    """Knobs of a GEMM-like output tile of `rows` x `cols` per kernel, over `others` block
    positions (schedule_gemm_tile): tile_x / tile_y threads along columns / rows (powers of two),
    reg_x / reg_y outputs per thread along them (1, 2, 4, 8). Fallback: gemm_tile_fallback (the
    occupancy-aware rule)."""
    regs = [1, 2, 4, 8]
    counts = [1] + [c for c in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if c <= target.max_threads_per_block]
    fb = gemm_tile_fallback(target, rows, cols, reg_rows, reg_cols, others)
    space.define_knob("tile_x", counts, fallback=fb["tile_x"])
    space.define_knob("tile_y", counts, fallback=fb["tile_y"])
    space.define_knob("reg_x", regs, fallback=fb["reg_x"])
    space.define_knob("reg_y", regs, fallback=fb["reg_y"])


def tile_gemm_output(s, out, anchor, cfg, row_axis, col_axis, vector_x: bool = True) -> tuple:
    """The output side of the tiled GEMM skeleton (schedule_gemm_tile): injective stages inlined
    into `out` (the anchor kept), the anchor's accumulator in registers ("local"), `out`'s
    `row_axis` / `col_axis` (the anchor's IterVars) split into blocks of (tile_y * reg_y) x
    (tile_x * reg_x) outputs, reg_y x reg_x per thread (the columns vectorized when `vector_x`,
    else unrolled), every other output axis fused into blockIdx.z; the accumulator computed at
    the thread's loop. Returns (accumulator, threadIdx.x loop, threadIdx.y loop, the anchor's
    operands: its input tensors once the injective stages are inlined, before cache_write)."""
    spatial = list(anchor.op.axis)
    ty, tx, vy, vx = cfg["tile_y"], cfg["tile_x"], cfg["reg_y"], cfg["reg_x"]
    inline_injective(s, out, keep=[anchor])
    operands = anchor.op.input_tensors()
    # cache_write gives `out` new axes and the accumulator the anchor's: pair them up first
    if out is anchor:
        acc = s.cache_write(out, "local")
    else:
        acc = anchor
        s[acc].set_scope("local")
    st = s[out]
    out_axis = dict(zip(spatial, st.op.axis))
    others = [out_axis[a] for a in spatial if a is not row_axis and a is not col_axis]
    yo, yi = st.split(out_axis[row_axis], ty * vy)
    yt, yv = st.split(yi, vy)
    xo, xi = st.split(out_axis[col_axis], tx * vx)
    xt, xv = st.split(xi, vx)
    st.reorder(*others, yo, xo, yt, xt, yv, xv)
    if others:
        st.bind(st.fuse(*others) if len(others) > 1 else others[0], thread_axis("blockIdx.z"))
    st.bind(yo, thread_axis("blockIdx.y"))
    st.bind(xo, thread_axis("blockIdx.x"))
    st.bind(yt, thread_axis("threadIdx.y"))
    st.bind(xt, thread_axis("threadIdx.x"))
    st.unroll(yv)
    if vector_x:
        st.vectorize(xv)
    else:
        st.unroll(xv)
    s[acc].compute_at(st, xt)
    return acc, xt, yt, operands


def schedule_gemm_tile(s, out, anchor, cfg, row_axis, col_axis, split_reduce, order=None):
    """The shared-memory tiled GEMM skeleton (TVM's CUDA dense/conv2d schedules) for a reduction
    `anchor` with an elementwise epilogue `out` of the same shape; axes are the anchor's own
    IterVars, named by the caller (`n, oc, oh, ow = anchor.op.axis`).

    The anchor's axes `row_axis` and `col_axis` are tiled: a block computes (tile_y * reg_y) x
    (tile_x * reg_x) outputs, each thread a reg_y x reg_x register tile (contiguous, so the
    epilogue stores reg_x consecutive values: one vector store); every other output axis is a
    block axis (blockIdx.z, fused). The accumulator lives in registers; the anchor's reduce axis
    `split_reduce` is split by cfg["tile_k"] and, per step of its outer loop, every operand the
    reduction reads is copied into a shared-memory tile by the whole block (cooperative_fetch),
    then read from there (barriers inserted by tvmc.tir.gpu). `order` gives the remaining reduce
    axes in their order inside a step (default: as declared). Returns the accumulator tensor.
    Raises ScheduleError when an axis is not one of the anchor's."""
    spatial, red = list(anchor.op.axis), list(anchor.op.reduce_axis)
    for what, axis, axes in (("row_axis", row_axis, spatial), ("col_axis", col_axis, spatial),
                             ("split_reduce", split_reduce, red), *(("order", k, red) for k in order or ())):
        if not any(axis is a for a in axes):
            raise ScheduleError(f"schedule_gemm_tile: {what} names {axis!r}, not an axis of {anchor.name}")
    acc, xt, yt, operands = tile_gemm_output(s, out, anchor, cfg, row_axis, col_axis)
    ast = s[acc]
    k_outer, k_inner = ast.split(split_reduce, cfg["tile_k"])
    rest = [k for k in (order or red) if k is not split_reduce]
    ast.reorder(k_outer, *rest, k_inner, *ast.op.axis)
    for iv in ast.op.axis:
        ast.unroll(iv)
    for t in operands:  # the block's threads as the output binds them (small extents clamp the knobs)
        cache = s.cache_read(t, "shared", [acc])
        s[cache].compute_at(ast, k_outer)
        cooperative_fetch(s, cache, xt.extent, yt.extent)
    return acc
