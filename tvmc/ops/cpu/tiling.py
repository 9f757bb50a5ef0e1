"""Shared CPU schedule skeleton for an anchor reduction with a fused elementwise epilogue:
output tiles held in a register accumulator (cache_write + compute_at), epilogue applied on the
tile, outer tile loops fused and parallel (TVM's x86 conv2d/dense schedule structure)."""

from __future__ import annotations

from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops

# Launching and joining a parallel region through libgomp costs about 5 us (DESIGN.md section 4);
# a reduction with fewer multiply-adds than this (about 5 us of one core at ~100 GFLOP/s) gains
# less from a second thread than the launch costs, so its tiles run serially. E.g. the MLP of
# tests/e2e/builders.py at batch 1 ([1,64] x [64,128] ...): a whole inference is ~2 us.
MIN_PARALLEL_MACS = 1 << 18


def worth_parallel(anchor) -> bool:
    """True when `anchor` (a te reduction) does at least MIN_PARALLEL_MACS multiply-adds: its output
    elements times the product of its reduce extents."""
    work = 1
    for e in anchor.shape:
        work *= e
    for r in anchor.op.reduce_axis:
        work *= r.extent
    return work >= MIN_PARALLEL_MACS


def schedule_tiled_reduction(s, out, anchor, tiles: dict, vector_axis: int, unroll_axes=(),
                             reduce_order=None, parallel_depth: int = 2, target=None, keep=(),
                             unroll_reduce=(), rolled_reduce=()):
    """Tile `out`'s loops, compute `anchor` per tile in a local accumulator, run the epilogue.

    tiles:        {axis index: tile size} on the output axes (axes without a tile are kept whole
                  in the outer loops);
    vector_axis:  output axis whose tile is the vector loop (innermost);
    unroll_axes:  axes whose tile loops are unrolled (register blocking);
    reduce_order: order of the anchor's reduce axes (default: as declared);
    parallel_depth: how many outer tile loops are fused into the parallel loop;
    keep:         producer stages that stay materialized (e.g. a padded input);
    unroll_reduce: indices (in the anchor's declared order) of reduce axes to unroll inside
                  the accumulator (e.g. conv2d_nchwc's ic_inner);
    rolled_reduce: indices of reduce axes kept loops (Stage.rolled: LLVM does not unroll them).
    """
    parallel = worth_parallel(anchor)  # before cache_write turns `anchor` into a copy
    inline_injective(s, out, keep=[anchor, *keep])
    if tuple(out.shape) != tuple(anchor.shape):
        # the epilogue changes the shape: keep the anchor at root, the rest elementwise
        _schedule_root_reduction(s, anchor, tiles, vector_axis, unroll_axes, reduce_order)
        schedule_elementwise_loops(s, out, target)
        return
    acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    axes = list(st.op.axis)
    outers, inners = [], []
    for k, iv in enumerate(axes):
        if k in tiles and tiles[k] < iv.extent:
            o, i = st.split(iv, tiles[k])
            outers.append(o)
            inners.append((k, i))
        elif k in tiles:
            inners.append((k, iv))
        else:
            outers.append(iv)
    inner_order = sorted(inners, key=lambda ki: (ki[0] == vector_axis, ki[0]))
    st.reorder(*outers, *[i for _, i in inner_order])
    for k, i in inner_order:
        if k == vector_axis:
            st.vectorize(i)
        elif k in unroll_axes:
            st.unroll(i)
    if not outers:  # one tile covers the whole output: the accumulator is computed at root
        _order_accumulator(s[acc], vector_axis, unroll_axes, reduce_order)
        return
    depth = max(1, min(parallel_depth, len(outers)))
    head = st.fuse(*outers[:depth]) if depth > 1 else outers[0]
    if head.extent > 1 and parallel:
        st.parallel(head)
    attach = outers[-1] if len(outers) > depth else head
    s[acc].compute_at(st, attach)
    _order_accumulator(s[acc], vector_axis, unroll_axes, reduce_order)
    for k in unroll_reduce:
        s[acc].unroll(s[acc].op.reduce_axis[k])
    for k in rolled_reduce:
        s[acc].rolled(s[acc].op.reduce_axis[k])


def schedule_window_reduction(s, out, red, target):
    """NCHW window reductions (pooling, LRN): the padded input materialized once, output rows
    tiled along W by the largest divisor of OW that fits a vector, (n, c) rows in parallel."""
    from tvmc.ops.cpu.injective import schedule_elementwise_loops

    pad = next((t for t in red.op.input_tensors() if t.op is not None), None)
    if pad is not None:
        schedule_elementwise_loops(s, pad, target)
    ow = out.shape[3]
    lanes = target.vector_lanes(out.dtype)
    tile_w = max(f for f in range(1, min(ow, lanes) + 1) if ow % f == 0)
    schedule_tiled_reduction(s, out, red, tiles={3: tile_w}, vector_axis=3, parallel_depth=2, target=target,
                             keep=[pad] if pad is not None else ())


def _order_accumulator(ast, vector_axis, unroll_axes, reduce_order):
    spatial = list(ast.op.axis)
    red = [ast.op.reduce_axis[k] for k in reduce_order] if reduce_order else list(ast.op.reduce_axis)
    tile_axes = [iv for k, iv in enumerate(spatial) if k == vector_axis or k in unroll_axes]
    others = [iv for iv in spatial if iv not in tile_axes]
    tile_axes.sort(key=lambda iv: spatial.index(iv) == vector_axis)
    ast.reorder(*others, *red, *tile_axes)
    for iv in tile_axes:
        if spatial.index(iv) == vector_axis:
            ast.vectorize(iv)
        else:
            ast.unroll(iv)


def _schedule_root_reduction(s, anchor, tiles, vector_axis, unroll_axes, reduce_order):
    st = s[anchor]
    axes = list(st.op.axis)
    outer = [iv for k, iv in enumerate(axes) if k != vector_axis]
    red = [st.op.reduce_axis[k] for k in reduce_order] if reduce_order else list(st.op.reduce_axis)
    st.reorder(*outer, *red, axes[vector_axis])
    if axes[vector_axis].extent <= 64:
        st.vectorize(axes[vector_axis])
    if outer:
        st.parallel(outer[0])
