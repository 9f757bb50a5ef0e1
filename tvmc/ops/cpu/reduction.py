"""x86 schedules for normalizations built from reductions (softmax, LRN) and reductions over axes:
every reduction and the output at root, each with its outer spatial loops fused in parallel and
the innermost axis vectorized where the axis fits a vector; reductions over a contiguous
innermost axis are vectorized through rfactor (see _reduction_at_root). Symbolic extents
(tvmc.te.extent): a symbolic reduction axis is factored by the vector lanes too (its last,
partial vector guarded; loop partitioning keeps the others plain), and a parallel loop of
symbolic extent runs on threads only when a run reads MIN_PARALLEL_ELEMS elements. softmax over
its last axis runs row by row instead, every stage inside the row loop (_row_softmax)."""

from __future__ import annotations

import numpy as np

from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import parallel_min_extent, schedule_window_reduction
from tvmc.te import extent as xt
from tvmc.te.expr import TensorLoad, Var, walk

# The most bytes a softmax row buffer (its exp) may take for the row schedule (_row_softmax): an L1
# data cache's worth, where the row stays between its passes
ROW_BUFFER_BYTES = 32 * 1024

# Elements a symbolic reduction must read for its parallel loop to launch threads (as elementwise
# loops: tvmc.ops.cpu.injective.schedule_elementwise_loops)
MIN_PARALLEL_ELEMS = 4096

# Accumulator vectors of a reduction to one value (no spatial rows: a dynamic quantization's min and
# max over a whole tensor): independent chains, so that the latency of a vector min (a NaN-aware
# one is three dependent instructions) or add is hidden. BERT-style encoder's int8 build on
# x86-avx2, min over [1, 128, 1024]: one chain 19 us per call.
SCALAR_REDUCTION_CHAINS = 4


def _unit(iv) -> bool:
    return xt.is_static(iv.extent) and iv.extent == 1


def _parallel(stage, iv):
    """`iv` parallel; where the stage's extents are symbolic, from a run of MIN_PARALLEL_ELEMS
    elements read on."""
    work = xt.prod([a.extent for a in stage.op.axis] + [r.extent for r in stage.op.reduce_axis])
    if xt.is_static(work):
        stage.parallel(iv)
        return
    stage.parallel(iv, min_extent=parallel_min_extent(work, iv.extent, MIN_PARALLEL_ELEMS))


def _root_reduction(stage):
    axes = list(stage.op.axis)
    outer = [iv for iv in axes if not _unit(iv)]
    if outer:
        stage.reorder(*outer, *stage.op.reduce_axis, *[iv for iv in axes if _unit(iv)])
        _parallel(stage, outer[0])


def _contiguous_reduce_axis(t):
    """The last reduce axis of `t` when every load of its source has it as the last (innermost,
    contiguous) index, else None."""
    if not t.op.reduce_axis:
        return None
    k = t.op.reduce_axis[-1]
    loads = [x for x in walk(t.op.body.source) if isinstance(x, TensorLoad)]
    if not loads or any(not (isinstance(ld.indices[-1], Var) and ld.indices[-1] is k.var) for ld in loads):
        return None
    return k


def _factored_reduce_axis(t, lanes: int):
    """The contiguous last reduce axis of `t` (_contiguous_reduce_axis) where rfactor by `lanes`
    vectorizes it: a static extent of at least two vectors that the lanes divide, or a symbolic
    one whose upper bound reaches two vectors (its last vector guarded); else None."""
    k = _contiguous_reduce_axis(t)
    if k is None:
        return None
    if xt.is_static(k.extent):
        return k if k.extent % lanes == 0 and k.extent >= 2 * lanes else None
    return k if xt.upper_bound(k.extent) >= 2 * lanes else None


def _reduction_at_root(s, t, target):
    """A reduction stage at root. Over a contiguous innermost axis whose extent is a multiple of
    the vector lanes (and at least two vectors), the reduction is vectorized (TVM's rfactor):
    lane-wise partial results accumulate one vector per step, then one short reduction over
    the lanes; e.g. softmax over 128 keys: 8 vector steps and 16 lanes instead of 128 dependent
    scalar steps; a reduction over several axes (a whole tensor to a scalar) factors its
    innermost one, by SCALAR_REDUCTION_CHAINS vectors where they divide it. Otherwise the
    reduction loop stays innermost and scalar."""
    lanes = target.vector_lanes(t.dtype)
    k = _factored_reduce_axis(t, lanes)
    if k is not None:
        chains = SCALAR_REDUCTION_CHAINS
        if all(_unit(iv) for iv in t.op.axis) and xt.is_static(k.extent) and k.extent % (chains * lanes) == 0:
            lanes *= chains
        partial = s.rfactor(t, lanes)
        ps = s[partial]
        *outer, lane = ps.op.axis
        *others, ko = ps.op.reduce_axis
        rows = [iv for iv in outer if not _unit(iv)]
        ps.reorder(*rows, *others, ko, *[iv for iv in outer if _unit(iv)], lane)
        ps.vectorize(lane)
        if rows:
            _parallel(ps, rows[0])
    _root_reduction(s[t])


def softmax_buckets(length, target) -> list:
    """Where the size buckets of a softmax (or a reduction) over a contiguous axis of symbolic
    extent `length` (a SizeVar) start (tvmc.tir.buckets): below two vectors of lanes the
    reduction stays a scalar loop, as a static kernel of that size does (_reduction_at_root),
    from there on it is factored by the lanes."""
    two_vectors = 2 * target.vector_lanes("float32")
    return [two_vectors] if length.lo < two_vectors <= length.hi else []


def schedule_softmax(s, out, anchor, cfg, target):
    """softmax (and log_softmax): one row at a time where _row_softmax applies; otherwise the max
    and sum reductions at root, exp materialized once, the output's multiply by the sum's
    reciprocal (or log_softmax's subtractions) as an elementwise loop nest."""
    keep = [st.tensor for st in s.stages if st.op.reduce_axis or st.tensor.name == "softmax_exp"]
    inline_injective(s, out, keep=keep)
    if _row_softmax(s, out, target):
        return
    for st in list(s.stages):
        if st.op.reduce_axis:
            _reduction_at_root(s, st.tensor, target)
        elif st.attach == "root":
            schedule_elementwise_loops(s, st.tensor, target)


def _row_softmax(s, out, target) -> bool:
    """softmax and log_softmax over their contiguous last axis, one row at a time (as onnxruntime's
    MLAS kernel): the output's rows fused into one parallel loop, and inside each row the max,
    the exp into a row buffer, the sum and the output, the reductions vectorized through rfactor
    (their lane-wise partials then one short reduction over the lanes). The row is read from
    memory once for the max and once for the exp (then from L1) and written once: 8 bytes per
    element against 24 with every stage over the whole tensor, which on a [1, 4, 512, 512]
    attention softmax is memory-bound (1.01 -> 0.71 ms at one thread, with the reciprocal of
    the sum per row instead of a division per element: tvmc.ops.nn_misc.softmax). Applies where
    _reduction_at_root would vectorize the reductions and the exp row fits ROW_BUFFER_BYTES;
    symbolic extents as static ones (the row buffer sized by the upper bound). Returns whether
    it applied."""
    lanes = target.vector_lanes(out.dtype)
    st = s[out]
    *outer, inner = st.op.axis
    outer = [iv for iv in outer if not _unit(iv)]
    if st.attach != "root" or not outer or \
            xt.upper_bound(inner.extent) * max(4, np.dtype(out.dtype).itemsize) > ROW_BUFFER_BYTES:
        return False
    reductions = [x.tensor for x in s.stages if x.op.reduce_axis]
    if any(_factored_reduce_axis(t, lanes) is None for t in reductions):
        return False
    st.reorder(*[iv for iv in st.op.axis if _unit(iv)], *outer, inner)
    row = st.fuse(*outer) if len(outer) > 1 else outer[0]
    _, vec = st.split(inner, lanes)
    st.vectorize(vec)
    _parallel(st, row)
    for t in reductions:
        ps = s[s.rfactor(t, lanes)]
        *spatial, lane = ps.op.axis
        ps.reorder(*spatial, *ps.op.reduce_axis, lane)
        ps.vectorize(lane)
        ps.compute_at(st, row)
        s[t].compute_at(st, row)
    for x in s.stages:
        if x.tensor.name == "softmax_exp":
            _, vec = x.split(x.op.axis[-1], lanes)
            x.vectorize(vec)
            x.compute_at(st, row)
    return True


def schedule_reduce(s, out, anchor, cfg, target):
    """Reductions over axes (sum/mean/max/min/prod, argmax/argmin, cumsum): every reduction stage
    at root with its outer spatial loops parallel; injective inputs inlined; an elementwise
    epilogue (mean's divide, a fused op) runs as the output's vectorized loop nest."""
    keep = [st.tensor for st in s.stages if st.op.reduce_axis]
    inline_injective(s, out, keep=keep)
    for st in list(s.stages):
        if st.op.reduce_axis:
            _reduction_at_root(s, st.tensor, target)
        elif st.attach == "root" and st.tensor.uid == out.uid:
            schedule_elementwise_loops(s, st.tensor, target)


def schedule_lrn(s, out, anchor, cfg, target):
    """LRN: channel-window sums of squares per row tile, then the normalization epilogue."""
    sq = next(st.tensor for st in s.stages if st.op.reduce_axis)
    schedule_window_reduction(s, out, sq, target)
