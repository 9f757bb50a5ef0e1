"""Shared CPU schedule skeleton for an anchor reduction with a fused elementwise epilogue:
output tiles held in a register accumulator (cache_write + compute_at), epilogue applied on the
tile, outer tile loops fused and parallel (TVM's x86 conv2d/dense schedule structure).

Symbolic extents (tvmc.te.extent): tiles are the ones chosen for the range's upper bound; the
last tile of a symbolic axis computes only its rows inside under a guard that loop partitioning
(tvmc.tir.partition) takes out of every other tile, or, where partitioning cannot (a row tile
loop fused after other loops into the parallel one), computes its rows on clamped coordinates
(Stage.clamp_edges: no branch in the reduction) and stores only the rows inside (_clamped_axes);
along the vector axis the accumulator is guarded, every tile but the last a plain vector loop;
the parallel loop runs on threads only when a run has enough work for it (parallel_min_extent)."""

from __future__ import annotations

from tvmc.errors import ScheduleError
from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops
from tvmc.te import extent as xt

# Launching and joining a parallel region through libgomp costs about 5 us (DESIGN.md section 4);
# a reduction with fewer multiply-adds than this (about 5 us of one core at ~100 GFLOP/s) gains
# less from a second thread than the launch costs, so its tiles run serially. E.g. the MLP of
# tests/e2e/builders.py at batch 1 ([1,64] x [64,128] ...): a whole inference is ~2 us.
MIN_PARALLEL_MACS = 1 << 18


def worth_parallel(anchor) -> bool:
    """True when `anchor` (a te reduction) does at least MIN_PARALLEL_MACS multiply-adds: its output
    elements times the product of its reduce extents (with symbolic extents: at their upper
    bound; parallel_min_extent then says from which size a run launches threads)."""
    if not _static_work(anchor):
        return xt.upper_bound(macs(anchor)) >= MIN_PARALLEL_MACS
    work = 1
    for e in anchor.shape:
        work *= e
    for r in anchor.op.reduce_axis:
        work *= r.extent
    return work >= MIN_PARALLEL_MACS


def _static_work(anchor) -> bool:
    return xt.is_static_shape(anchor.shape) and xt.is_static_shape([r.extent for r in anchor.op.reduce_axis])


def macs(anchor):
    """Multiply-adds of a te reduction: output elements times its reduce extents (an extent)."""
    return xt.prod(list(anchor.shape) + [r.extent for r in anchor.op.reduce_axis])


def parallel_min_extent(work, loop_extent, min_work: int = MIN_PARALLEL_MACS):
    """The fewest iterations of a parallel loop over `work` (an extent: multiply-adds, or elements
    for elementwise loops) that are worth a launch of the threads: min_work over the work of one
    iteration. A loop of constant extent over symbolic work: an expression of the SizeVars (the
    work of one iteration is work / loop_extent); a loop of symbolic extent: counted at the upper
    bounds (its iterations are the symbolic part)."""
    if xt.is_static(loop_extent) and not xt.is_static(work):
        per_iteration = xt.as_extent(work // max(1, loop_extent))
        if not xt.is_static(per_iteration):
            return xt.as_extent((min_work + per_iteration - 1) // per_iteration)
        return max(1, -(-min_work // max(1, per_iteration)))
    per_iteration = max(1, xt.upper_bound(work) // max(1, xt.upper_bound(loop_extent)))
    return max(1, -(-min_work // per_iteration))


def schedule_tiled_reduction(s, out, anchor, tiles: dict, vector_axis, unroll_axes=(),
                             reduce_order=None, parallel_depth: int = 2, target=None, keep=(),
                             unroll_reduce=(), rolled_reduce=(), corner: bool = False):
    """Tile `out`'s loops, compute `anchor` per tile in a local accumulator, run the epilogue.

    Axes are the anchor's own IterVars, named by the caller (`n, oc_chunk, oh, ow, oc_block =
    anchor.op.axis`; `ic_outer, kh, kw, ic_inner = anchor.op.reduce_axis`); the epilogue `out`
    has the anchor's shape, so its loops are tiled as the anchor's axes say.

    tiles:        {anchor axis: tile size} (axes without a tile are kept whole in the outer
                  loops);
    vector_axis:  axis whose tile is the vector loop (innermost), or None for none (then the
                  tiles are unrolled; where the epilogue changes the shape, the anchor at root
                  vectorizes its innermost axis when it fits);
    unroll_axes:  axes whose tile loops are unrolled (register blocking);
    reduce_order: the anchor's reduce axes in loop order (default: as declared);
    parallel_depth: how many outer tile loops are fused into the parallel loop;
    keep:         producer stages that stay materialized (e.g. a padded input);
    unroll_reduce: reduce axes to unroll inside the accumulator (e.g. conv2d_nchwc's ic_inner);
    rolled_reduce: reduce axes kept loops (Stage.rolled: LLVM does not unroll them);
    corner:       `out` (its epilogue included) is the leading corner of a padded anchor, of the
                  same rank: out[idx] reads anchor[idx]. Its tiles may overhang its edge (the
                  stores there are guarded) as long as they stay inside the anchor, which then
                  computes whole tiles without a guard (tvmc.ops.nn_dense.matmul's padded sums).

    Raises ScheduleError when an axis is not one of the anchor's.
    """
    _check_anchor_axes(anchor, tiles, vector_axis, unroll_axes, reduce_order, unroll_reduce, rolled_reduce)
    parallel = worth_parallel(anchor)  # before cache_write turns `anchor` into a copy
    symbolic = not _static_work(anchor)
    work = macs(anchor) if symbolic else None
    inline_injective(s, out, keep=[anchor, *keep])
    if not xt.same_shape(out.shape, anchor.shape) and not corner:
        # the epilogue changes the shape: keep the anchor at root, the rest elementwise
        _schedule_root_reduction(s, anchor, vector_axis, reduce_order)
        schedule_elementwise_loops(s, out, target)
        return
    # cache_write gives `out` new axes and the accumulator the anchor's: pair them up first
    anchor_axes = list(anchor.op.axis)
    acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    outers, inners, outer_of = [], [], {}
    for axis, iv in zip(anchor_axes, st.op.axis):
        if axis in tiles and (not xt.is_static(iv.extent) or tiles[axis] < iv.extent):
            o, i = st.split(iv, tiles[axis])
            outers.append(o)
            outer_of[axis] = o
            inners.append((axis, i))
        elif axis in tiles:
            inners.append((axis, iv))
        else:
            outers.append(iv)
    inner_order = sorted(inners, key=lambda ai: ai[0] is vector_axis)  # stable: the rest in axis order
    st.reorder(*outers, *[i for _, i in inner_order])
    for axis, i in inner_order:
        if axis is vector_axis:
            st.vectorize(i)
        elif axis in unroll_axes:
            st.unroll(i)
    if not outers:  # one tile covers the whole output: the accumulator is computed at root
        _order_accumulator(s[acc], vector_axis, unroll_axes, reduce_order)
        return
    depth = max(1, min(parallel_depth, len(outers)))
    head = st.fuse(*outers[:depth]) if depth > 1 else outers[0]
    if parallel and (not xt.is_static(head.extent) or head.extent > 1):
        # over symbolic work, threads only from a run with enough of it (a pool's rows at width 16)
        st.parallel(head, min_extent=parallel_min_extent(work, head.extent) if symbolic else 0)
    attach = outers[-1] if len(outers) > depth else head
    s[acc].compute_at(st, attach)
    if symbolic:  # the rows of a tile past a symbolic end: guarded or clamped (_clamped_axes)
        clamped = _clamped_axes(anchor_axes, outer_of, outers[:depth], vector_axis)
        s[acc].clamp_edges(*[iv for axis, iv in zip(anchor_axes, s[acc].op.axis) if axis in clamped])
    _order_accumulator(s[acc], vector_axis, unroll_axes, reduce_order)
    for k in unroll_reduce:
        s[acc].unroll(k)
    for k in rolled_reduce:
        s[acc].rolled(k)


def _clamped_axes(axes, outer_of: dict, fused: list, vector_axis) -> set:
    """The symbolic anchor axes (other than the vector axis) whose last tile computes its rows
    past the end clamped (Stage.clamp_edges: no branch in the reduction) rather than guarded.
    A guard costs nothing in the whole tiles where loop partitioning (tvmc.tir.partition) can
    take it out: where the axis's tile loop is a loop of its own, or leads the fused parallel loop
    with only loops of constant extent after it (its index v // c). Elsewhere (a row tile loop
    fused after the heads of an attention matmul: (v // c) % n) the guard would stay in every
    tile, so the rows are clamped. The guarded last tile computes only its rows: GPT-2's
    [33, 128] x [128, 512] at seq 1..256 computed 40 rows in clamped tiles of 8; constant axes
    keep their guard as in a static kernel."""
    loops = [o for o in fused if not (xt.is_static(o.extent) and o.extent == 1)]  # unit loops fold away
    clamped = set()
    for axis in axes:
        if axis is vector_axis or xt.is_static(axis.extent):
            continue
        o = outer_of.get(axis)
        if o is None or o not in fused:
            continue
        if o not in loops or (loops.index(o) == 0 and all(xt.is_static(x.extent) for x in loops[1:])):
            continue
        clamped.add(axis)
    return clamped


def schedule_gemm_tiles(s, out, anchor, padded, tile_m: int, block: int, tile_blocks: int, parallel: bool,
                        keep=()):
    """The output side of a packed GEMM micro-kernel (dense_pack, dense_u8s8): `out` [M, N] in tiles
    of tile_m rows (unrolled) x tile_blocks blocks of `block` columns (blocks unrolled, columns
    vectorized), the (row tile, column tile) pairs fused (and parallel with `parallel`), the
    epilogue inlined into the store. The accumulators are `padded` (sums of whole blocks whose
    leading columns are the output) or else `anchor`'s, cache_write'n when `out` is `anchor`;
    they are computed at the tile and returned for the caller to order. `keep`: producer stages
    that stay materialized (a padded input)."""
    work = macs(padded if padded is not None else anchor)
    if padded is not None:
        inline_injective(s, out, keep=list(keep))
        acc = padded
    else:
        inline_injective(s, out, keep=[anchor, *keep])
        acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    m, n = st.op.axis
    m_outer, m_inner = st.split(m, tile_m)
    n_outer, n_inner = st.split(n, block * tile_blocks)
    n_block, n_lane = st.split(n_inner, block)
    st.reorder(m_outer, n_outer, m_inner, n_block, n_lane)
    st.unroll(m_inner)
    st.unroll(n_block)
    st.vectorize(n_lane)
    head = st.fuse(m_outer, n_outer)
    if parallel:
        st.parallel(head, min_extent=parallel_min_extent(work, head.extent) if not xt.is_static(head.extent) else 0)
    # the rows of the last tile past a symbolic M stay guarded (not clamped): loop partitioning
    # leaves the whole tiles without a guard, and the last tile computes only its own rows (GPT-2's
    # [33, 128] x [128, 512] at seq 1..256: 40 rows in clamped tiles of 8 took 1.15x the static kernel)
    s[acc].compute_at(st, head)
    return acc


def _check_anchor_axes(anchor, tiles, vector_axis, unroll_axes, reduce_order, unroll_reduce, rolled_reduce):
    """Every axis given to schedule_tiled_reduction is one of the anchor's (an axis of another
    stage, e.g. of the epilogue, would silently match nothing)."""
    spatial, red = list(anchor.op.axis), list(anchor.op.reduce_axis)
    named = [("tiles", a, spatial) for a in tiles] + [("unroll_axes", a, spatial) for a in unroll_axes]
    named += [("vector_axis", vector_axis, spatial)] if vector_axis is not None else []
    named += [("reduce_order", a, red) for a in reduce_order or ()]
    named += [("unroll_reduce", a, red) for a in unroll_reduce] + [("rolled_reduce", a, red) for a in rolled_reduce]
    for what, axis, axes in named:
        if not any(axis is a for a in axes):
            raise ScheduleError(f"schedule_tiled_reduction: {what} names {axis!r}, not an axis of {anchor.name}")


def schedule_window_reduction(s, out, red, target):
    """NCHW window reductions (pooling, LRN): the padded input materialized once, output rows
    tiled along W by the largest divisor of OW that fits a vector (a symbolic OW: a vector's
    lanes, the last tile partial), (n, c) rows in parallel."""
    from tvmc.ops.cpu.injective import schedule_elementwise_loops

    pad = next((t for t in red.op.input_tensors() if t.op is not None), None)
    if pad is not None:
        schedule_elementwise_loops(s, pad, target)
    n, c, oh, ow = red.op.axis
    lanes = target.vector_lanes(out.dtype)
    if isinstance(ow.extent, int):
        tile_ow = max(f for f in range(1, min(ow.extent, lanes) + 1) if ow.extent % f == 0)
    else:  # a symbolic width (tvmc.te.extent): vectors of `lanes` columns and a guarded tail
        tile_ow = lanes
    schedule_tiled_reduction(s, out, red, tiles={ow: tile_ow}, vector_axis=ow, parallel_depth=2, target=target,
                             keep=[pad] if pad is not None else ())


def pad_per_tile(s, pad):
    """Each register tile of a blocked window reduction (depthwise conv2d_nchwc, NCHW[x]c
    pooling) pads its own input window (the tile's rows and columns of one channel block) into a
    local buffer, instead of a padded copy of the whole input: computed at the accumulator's
    outermost loop (n), the channel block c_block vectorized."""
    acc = next(st for st in s.stages if st.op.reduce_axis)
    n, *_ = acc.op.axis
    s[pad].compute_at(acc, n)
    _, _, _, _, c_block = s[pad].op.axis
    s[pad].vectorize(c_block)


def _order_accumulator(ast, vector_axis, unroll_axes, reduce_order):
    """The accumulator's loops (the anchor's axes): the untiled axes, the reduction, then the tile
    axes in the order of `unroll_axes`, unrolled, and the vector axis innermost."""
    red = list(reduce_order) if reduce_order else list(ast.op.reduce_axis)
    tile_axes = [iv for iv in ast.op.axis if iv is vector_axis or iv in unroll_axes]
    others = [iv for iv in ast.op.axis if iv not in tile_axes]
    tile_axes.sort(key=lambda iv: (iv is vector_axis, unroll_axes.index(iv) if iv in unroll_axes else 0))
    ast.reorder(*others, *red, *tile_axes)
    for iv in tile_axes:
        if iv is vector_axis:
            ast.vectorize(iv)
        else:
            ast.unroll(iv)


def _schedule_root_reduction(s, anchor, vector_axis, reduce_order):
    """The anchor at root: its other axes, the reduction, then `vector_axis` (default: the
    innermost axis), vectorized when its extent is at most 64; the outermost axis parallel."""
    st = s[anchor]
    inner = vector_axis if vector_axis is not None else anchor.op.axis[-1]
    outer = [iv for iv in st.op.axis if iv is not inner]
    red = list(reduce_order) if reduce_order else list(st.op.reduce_axis)
    st.reorder(*outer, *red, inner)
    if xt.is_static(inner.extent) and inner.extent <= 64:
        st.vectorize(inner)
    if outer:
        st.parallel(outer[0])
