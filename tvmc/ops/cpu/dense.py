"""x86 schedules for dense ([M,K] x [N,K]^T) and batched matmul.

dense (the unpacked form: AlterOpLayout packs every constant weight whose N has a power-of-two
block, so what stays here is e.g. a CTC head of N = 6625 classes): both operands are contiguous
in k, so the reduction is vectorized through rfactor (TVM's dense_nopack): each of the
tile_n outputs (of one row) of a register tile accumulates a vector of `tile_k` lane-wise partial
sums over k, reduced across the lanes once at the end; per k step one data vector and tile_n
weight vectors feed tile_n FMAs.
matmul: (i, j) tiles with j vectorized (b is row-major [K, N], contiguous in j).

Fallbacks: dense tile_k = the float32 vector lanes when they divide K (and K spans two
vectors), else 1 (a scalar reduction, tile_n outputs unrolled); tile_n = the largest divisor of
N <= num_vector_registers // 2 (AVX2: 8, AVX-512: 16 accumulators; the other half holds the
operand vectors; N = 6625 -> 5); matmul: see matmul_config.
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.conv2d_nchwc import fallback_tile_ow, width_bucket_starts
from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import schedule_gemm_tiles, schedule_tiled_reduction, worth_parallel
from tvmc.te.extent import same_shape


def dense_config(workload, target) -> ConfigSpace:
    """Knobs of nn.dense (data [M, K], weight [N, K]): tile_n (outputs of one row per register
    tile, a divisor of N) and tile_k (lanes of the rfactor partial sums: 1, or the vector lanes
    when they divide K). Fallback: see the module docstring."""
    (_, k), (n, _) = workload[:2]
    lanes = target.vector_lanes(workload[3])  # workload: data, weight, out shapes, dtype, attrs
    vector_k = k % lanes == 0 and k >= 2 * lanes
    space = ConfigSpace()
    space.define_knob("tile_k", [1, lanes] if vector_k else [1], fallback=lanes if vector_k else 1)
    space.define_split("tile_n", n, fallback=max(1, target.num_vector_registers // 2), max_factor=32)
    return space


def schedule_dense(s, out, anchor, cfg, target):
    """Fused dense + epilogue (see the module docstring): (m, n-tile) pairs in parallel, each
    tile_n vector partial sums over k (tile_k lanes) reduced across the lanes and stored
    through the epilogue; with tile_k = 1 each output is a scalar dot product, tile_n of them
    unrolled."""
    if cfg["tile_k"] == 1 or not same_shape(out.shape, anchor.shape):
        m, n = anchor.op.axis
        schedule_tiled_reduction(s, out, anchor, tiles={n: cfg["tile_n"]}, vector_axis=None, unroll_axes=(n,),
                                 parallel_depth=2, target=target)
        return
    parallel = worth_parallel(anchor)
    inline_injective(s, out, keep=[anchor])
    partial = s.rfactor(anchor, cfg["tile_k"])
    st = s[out]
    m, n = st.op.axis
    n_outer, n_inner = st.split(n, cfg["tile_n"])
    st.reorder(m, n_outer, n_inner)
    st.unroll(n_inner)
    head = st.fuse(m, n_outer)
    if parallel:
        st.parallel(head)
    ps = s[partial]
    if out is anchor:
        ps.compute_at(st, head)
    else:  # the lane sums of the tile, then the epilogue; the partial sums per lane sum's row
        s[anchor].compute_at(st, head)
        m, _ = s[anchor].op.axis
        ps.compute_at(s[anchor], m)
    m, n, lane = ps.op.axis
    (k_outer,) = ps.op.reduce_axis
    ps.reorder(k_outer, m, n, lane)
    ps.unroll(n)
    ps.vectorize(lane)


def matmul_padding(m: int, n: int, target) -> tuple | None:
    """(Mp, Np) for nn.matmul's `padded` attribute on `target` (AlterOpLayout), or None: N up to
    a multiple of the float32 vector lanes when they do not divide it and N spans more than one
    vector; M up to a multiple of 4 when M > 4 and no divisor of M from 4 to 8 makes a register
    tile of rows (M = 197 -> 200; 12 or 64 stay); then, where the fallback tile of those would
    hold fewer than MIN_TILE_ACCUMULATORS vectors, up to 1/8 more sums for a wider one
    (_wider_tile: [68, 196] -> [70, 208] on AVX-512). Without it such a matmul (a ViT's Q.K^T
    [3, 197, 64] x [3, 64, 197]) tiles 1 x 1: ~1.5 GFLOP/s on AVX-512 against ~300 for N = 192."""
    lanes = target.vector_lanes("float32")
    np_ = -(-n // lanes) * lanes if n % lanes and n > lanes else n
    mp = padded_rows(m)
    if np_ % lanes == 0 and np_ > lanes and _tile_accumulators(mp, np_, target) < MIN_TILE_ACCUMULATORS:
        mp, np_ = _wider_tile(mp, np_, target)
    return None if (mp, np_) == (m, n) else (mp, np_)


def padded_rows(m: int) -> int:
    """M up to a multiple of 4 when M > 4 and no divisor of M from 4 to 8 makes a register tile of
    rows (M = 197 -> 200; 12, 64 or 68 stay): the row padding of matmul_padding and of
    nn.matmul_tn's `padded_rows`."""
    return -(-m // 4) * 4 if m > 4 and not any(m % t == 0 for t in range(4, 9)) else m


# matmul_padding pads further (at most 1/8 more sums) where the fallback register tile would hold
# fewer accumulators than this: too few independent multiply-adds to hide their latency
MIN_TILE_ACCUMULATORS = 8


def _tile_accumulators(m: int, n: int, target) -> int:
    """Vector accumulators of matmul_config's fallback register tile for padded sums [m, n]."""
    cfg = matmul_config((None, None, (m, n), "float32", ()), target).fallback
    return cfg["tile_i"] * cfg["tile_j"] // target.vector_lanes("float32")


def _wider_tile(m: int, n: int, target) -> tuple:
    """(Mp, Np) >= (m, n), at most 1/8 more sums, whose fallback tile holds the most accumulators
    up to MIN_TILE_ACCUMULATORS, the fewest sums among those: M up to m + m/8 (a row count with
    a divisor near the register budget), N to whole pairs of vectors (a tile 2 vectors wide).
    ShuffleNet's grouped 1x1 convs as GEMMs, AVX-512: [68, 196] padded to [68, 208] tiled 4 x 1
    vector; [70, 208] tiles 14 x 1 (fused_nn_matmul_4, 15 calls, one thread: 1462 -> 1103 us)."""
    lanes = target.vector_lanes("float32")
    best = (min(_tile_accumulators(m, n, target), MIN_TILE_ACCUMULATORS), -m * n, m, n)
    for nq in sorted({n, -(-n // (2 * lanes)) * 2 * lanes}):
        for mq in range(m, m + m // 8 + 1):
            if 8 * mq * nq <= 9 * m * n:
                best = max(best, (min(_tile_accumulators(mq, nq, target), MIN_TILE_ACCUMULATORS), -mq * nq, mq, nq))
    return best[2], best[3]


def matmul_config(workload, target) -> ConfigSpace:
    """Knobs of nn.matmul ([..., M, K] x [..., K, N]): tile_i rows (unrolled) and tile_j columns
    (vectorized) per register tile. Fallback where the vector lanes divide N: dense_pack's
    register tile over vectors of columns, tile_j = 2 vectors (1 where N is one vector), tile_i =
    (num_vector_registers // 2) // (tile_j / lanes) rows (the largest divisor of M up to that);
    elsewhere tile_j = lanes, tile_i = 4 (the former fallback everywhere: 4 accumulators, too few
    to hide the multiply-add latency). Measured on BERT's attention ([4, 128, 64] x [4, 64, 128],
    [4, 128, 128] x [4, 128, 64]), one thread: Node 20 (wasm, 4 x 4 -> 4 x 8) 0.36 -> 0.26 and
    0.32 -> 0.26 ms; the whole BERT encoder natively (x86-avx2, 4 x 8 -> 4 x 16) 20.9 -> 19.6 ms.
    tile_j is at most the output's N (a padded matmul's tile past it was not split: the register
    tile became one vector of N lanes, [12, 24, 64] x [12, 64, 24] on AVX-512 84 us against 14 for
    N = 32 and onnxruntime's 23; so 2 vectors only where they fit in N, and no larger knob)."""
    out_shape = workload[2]
    m, n = dict(workload[-1]).get("padded") or out_shape[-2:]  # tiles of the padded sums (matmul_padding)
    out_n = out_shape[-1] if isinstance(out_shape[-1], int) else n  # a symbolic N: its padded bound
    lanes = target.vector_lanes("float32")
    tile_i, tile_j = 4, lanes
    if n % lanes == 0:
        vectors = 2 if n % (2 * lanes) == 0 and 2 * lanes <= out_n else 1
        tile_i, tile_j = max(1, target.num_vector_registers // 2 // vectors), vectors * lanes
    space = ConfigSpace()
    space.define_split("tile_j", n, fallback=tile_j, max_factor=min(64, out_n))
    space.define_split("tile_i", m, fallback=tile_i, max_factor=16)
    return space


def matmul_buckets(workload, target, var, rows=None) -> list:
    """Where the size buckets of an nn.matmul with symbolic rows M start (tvmc.tir.buckets), as
    dense_pack_buckets: M = 1, each M from 2 up to the upper bound's tile_i - 1 (a tile of as many
    rows), then tile_i rows per tile (row_bucket_starts; below the bound's tile, every row would
    otherwise compute a whole tile: the LM head of a prefill at one token did 8)."""
    return row_bucket_starts(matmul_config(workload, target).fallback_config()["tile_i"], var, rows)


def row_bucket_starts(tile: int, var, rows=None) -> list:
    """The bucket starts, as values of SizeVar `var`, of a register tile over symbolic rows M
    (`rows`: an expression of graph SizeVar `var` alone, nondecreasing in it; None: M is `var`)
    whose upper bound's tile is `tile` rows: where M reaches each of 2 .. `tile`, inside (var.lo,
    var.hi]. Below the bound's tile each M gets a tile of exactly M rows. A CRNN's LSTM input
    projection ([T, 64] x [64, 128], T = width // 4 - 1) had none, its rows not a variable of
    their own: at T = 3 it ran the bound's 7-row tile."""
    if rows is None:
        return [x for x in range(2, tile + 1) if var.lo < x <= var.hi]
    return width_bucket_starts(var, rows, range(2, tile + 1))


def schedule_matmul(s, out, anchor, cfg, target):
    """Fused matmul + epilogue: (i, j) register tiles of tile_i rows (unrolled) x tile_j columns
    (vectorized); the batch axes and the row tiles fused into the parallel loop. A padded matmul
    (matmul_padding) tiles its padded sums, the output's edge tiles storing what lies inside it,
    and pads b's columns at root first."""
    sums = next((t for t in anchor.op.input_tensors() if t.op is not None and t.op.reduce_axis), None)
    if sums is not None:
        pad_b = [t for t in sums.op.input_tensors() if t.op is not None]
        for t in pad_b:
            schedule_elementwise_loops(s, t, target)
        *batch, i, j = sums.op.axis
        schedule_tiled_reduction(s, out, sums, tiles={i: cfg["tile_i"], j: cfg["tile_j"]}, vector_axis=j,
                                 unroll_axes=(i,), parallel_depth=len(batch) + 1, target=target, keep=pad_b,
                                 corner=True)
        return
    *batch, i, j = anchor.op.axis
    vector_axis = j
    if len(out.shape) < len(anchor.shape):
        # an epilogue of lower rank (a reshape) keeps the anchor at root, vectorized along the
        # anchor's axis at the output's last position (a row axis, not j): what this schedule
        # did when it numbered the axes by the output's rank, kept so its code does not change
        vector_axis = anchor.op.axis[len(out.shape) - 1]
    schedule_tiled_reduction(s, out, anchor, tiles={i: cfg["tile_i"], j: cfg["tile_j"]},
                             vector_axis=vector_axis, unroll_axes=(i,), parallel_depth=len(batch) + 1, target=target)


def matmul_tail_columns(m: int, n: int, target) -> int:
    """The columns of nn.matmul_tn's register tiles for an [M, N] output on `target` (its
    `columns` attribute, set by AlterOpLayout): N rounded down to a multiple of the float32 vector
    lanes, the other N - columns columns running as GEMVs along M, where that takes fewer vector
    multiply-adds per k than padding N to whole vectors (M x ceil(N / lanes) against M x
    columns / lanes + (N - columns) x ceil(M / lanes)); else N (no tail). ShuffleNet at 7 x 7, M =
    68, N = 49 on AVX-512: 48 + 1 (209 against 272); a tail of 15 columns (N = 63, M = 34) would
    cost more than the one padding column (147 against 136)."""
    lanes = target.vector_lanes("float32")
    columns = n - n % lanes
    if n % lanes == 0 or columns == 0:
        return n
    padded = m * -(-n // lanes)
    return columns if m * (columns // lanes) + (n - columns) * -(-m // lanes) < padded else n


def matmul_tn_config(workload, target) -> ConfigSpace:
    """Knobs of nn.matmul_tn (a^T [..., K, M] x b [..., K, N], `columns` C and
    `padded_rows` Mp): tile_i rows (unrolled, a divisor of Mp up to 16) and tile_j columns
    (vectorized, a multiple of the lanes dividing C) per register tile. Fallback: tile_j the
    most vectors up to 3 dividing C / lanes, tile_i the largest divisor of Mp whose tile_i x
    (tile_j / lanes) accumulators fit num_vector_registers - 4 (AVX-512: 28). ShuffleNet's
    grouped 1x1 conv over 7 x 7 (4 groups of [68, 68] x [68, 49]), AVX-512, one thread: (4, 48)
    plus a one-column tail; a hand-written C kernel of that tile ran at 110 GFLOP/s against 84
    for the [68, 64] padded GEMM's (4, 32) tile (Zen 4, peak 117)."""
    attrs = dict(workload[-1])
    m, n = workload[2][-2:]
    columns, rows = attrs.get("columns", n), attrs.get("padded_rows", m)
    lanes = target.vector_lanes("float32")
    vectors = max(1, columns // lanes)
    if columns % lanes:  # no whole vector (columns = N below the lanes): one vector loop over them
        widths, tile_j = [columns], columns
    else:
        widths = [lanes * d for d in range(1, vectors + 1) if vectors % d == 0 and d <= 8]
        tile_j = lanes * max(d for d in (1, 2, 3) if vectors % d == 0)
    regs = max(1, (target.num_vector_registers - 4) // max(1, tile_j // lanes))
    tile_i = max(d for d in range(1, min(rows, 16) + 1) if rows % d == 0 and d <= regs)
    space = ConfigSpace()
    space.define_knob("tile_j", widths, fallback=tile_j)
    space.define_split("tile_i", rows, fallback=tile_i, max_factor=16)
    return space


def schedule_matmul_tn(s, out, anchor, cfg, target):
    """Fused nn.matmul_tn + epilogue: the GEMVs of the tail columns (`matmul_tail`) at
    root, M vectorized, K outermost; then (row tile, column tile) register tiles of
    `matmul_main` as schedule_matmul's (rows unrolled, columns in vectors), the batch axes and
    the row tiles fused into the parallel loop, the column tiles a serial loop inside it: loop
    partitioning (tvmc.tir.partition) splits that loop at the tail, where the output's columns
    read the tail and the main tile's sums are dead code (LLVM deletes them)."""
    stages = {t.name: t for t in anchor.op.input_tensors() if t.op is not None}
    main, tail = stages["matmul_main"], stages.get("matmul_tail")
    lanes = target.vector_lanes("float32")
    inline_injective(s, out, keep=[main] + ([tail] if tail is not None else []))
    if tail is not None:
        ts = s[tail]
        *tb, jt, ti = ts.op.axis
        ti_o, ti_v = ts.split(ti, lanes)
        ts.reorder(*tb, jt, *ts.op.reduce_axis, ti_o, ti_v)
        ts.unroll(ti_o)
        ts.vectorize(ti_v)
    st = s[out]
    *batch, i, j = st.op.axis
    i_o, i_i = st.split(i, cfg["tile_i"])
    j_o, j_i = st.split(j, cfg["tile_j"])
    j_v_o, j_v = st.split(j_i, lanes)
    st.reorder(*batch, i_o, j_o, i_i, j_v_o, j_v)
    st.unroll(i_i)
    st.unroll(j_v_o)
    st.vectorize(j_v)
    head = st.fuse(*batch, i_o) if batch else i_o
    if worth_parallel(main):
        st.parallel(head)
    if tail is not None:
        st.partition(j_o)
    s[main].compute_at(st, j_o)
    ms = s[main]
    *mb, mi, mj = ms.op.axis
    mj_o, mj_v = ms.split(mj, lanes)
    ms.reorder(*mb, *ms.op.reduce_axis, mi, mj_o, mj_v)
    ms.unroll(mi)
    ms.unroll(mj_o)
    ms.vectorize(mj_v)


def dense_pack_config(workload, target) -> ConfigSpace:
    """Knobs of nn.dense_pack (data [M, K], weight [N/bn, K, bn]):

    tile_nb  packed column blocks per register tile (each block one vector of bn outputs);
    tile_m   data rows per register tile: the tile holds tile_m x tile_nb vector accumulators,
             and each k step loads tile_nb weight vectors and broadcasts tile_m data elements
             (a GEMM micro-kernel: tile_m * tile_nb FMAs per tile_m + tile_nb loads).

    Fallback (measured on AVX-512, one thread, BERT's [128, 256] x [256, 1024] and
    [128, 1024] x [1024, 256]: 8 x 2 reaches 146-154 GFLOP/s, 4 x 4 133-147, 16 x 1 120-139,
    16 x 2 (32 accumulators, spills) 102-114, 1 x 4 40):
      M == 1: tile_nb = the largest divisor of N/bn <= 4, tile_m = 1 (batch-1 dense is bound by
              reading the weights; four accumulators hide the FMA latency);
      M > 1:  tile_nb = the largest divisor of N/bn <= 2; for A = (num_vector_registers // 2) //
              tile_nb rows (AVX-512: 16 accumulators, 8 rows: M=128 -> 8 x 2; the other half of
              the registers holds the broadcast data elements and the weight vectors of one k
              step), tile_m = conv2d_nchwc.fallback_tile_ow(M, A): M itself up to A, else the
              largest divisor of M from A/2 up, else the T in [A/2, A] that leaves the fewest rows
              idle in the guarded last tile. A prime M took 1-row tiles before (the BERT-style
              encoder of bench-dynamic at sequence 17, one thread, profile's kernel sum: 0.68 ->
              0.36 ms; its range artifact, tiled by size bucket, 0.42).
    """
    m, nb = workload[0][0], workload[1][0]
    space = ConfigSpace()
    space.define_split("tile_nb", nb, fallback=4 if m == 1 else 2, max_factor=8)
    rows = max(1, max(1, target.num_vector_registers // 2) // space.fallback["tile_nb"])
    space.define_knob("tile_m", [f for f in range(1, min(m, 16) + 1) if m % f == 0], fallback=fallback_tile_ow(m, rows))
    return space


def dense_pack_buckets(workload, target, var, rows=None) -> list:
    """Where the size buckets of a dense_pack with symbolic rows start (tvmc.tir.buckets:
    a specialization each, its tiles chosen for its own upper bound), as values of SizeVar `var`
    (workload at M's upper bound; `rows`: M as an expression of `var`, None where M is `var`):
    M = 1 (the fallback's one-row tile of 4 blocks, bound by reading the weights), each M from 2
    up to the upper bound's tile_m - 1 (a tile of as many rows), then tile_m rows per tile
    (row_bucket_starts)."""
    return row_bucket_starts(dense_pack_config(workload, target).fallback_config()["tile_m"], var, rows)


def schedule_dense_pack(s, out, anchor, cfg, target):
    """Packed dense + epilogue: per (tile of tile_m rows, tile of tile_nb*bn outputs), tile_m x
    tile_nb vector accumulators take tile_m broadcast data elements and tile_nb contiguous weight
    vectors per k; the (row tile, column tile) pairs run in parallel (when worth_parallel); the
    epilogue is applied to the tile as it is stored."""
    padded = next((t for t in anchor.op.input_tensors() if t.op is not None and t.op.reduce_axis), None)
    bn = next(t for t in (padded or anchor).op.input_tensors() if t.ndim == 3).shape[2]  # the packed weight
    if not same_shape(out.shape, anchor.shape):  # an epilogue that reshapes: anchor kept at root
        m, n = anchor.op.axis
        schedule_tiled_reduction(s, out, anchor, tiles={n: bn}, vector_axis=n, parallel_depth=1, target=target)
        return
    parallel = worth_parallel(padded or anchor)  # before cache_write turns `anchor` into a copy
    # N padded to whole blocks: the padded sums are the accumulators
    acc = schedule_gemm_tiles(s, out, anchor, padded, cfg["tile_m"], bn, cfg["tile_nb"], parallel)
    m, n = s[acc].op.axis
    (k,) = s[acc].op.reduce_axis
    n_block, n_lane = s[acc].split(n, bn)
    s[acc].reorder(k, m, n_block, n_lane)
    s[acc].unroll(m)
    s[acc].unroll(n_block)
    s[acc].vectorize(n_lane)
