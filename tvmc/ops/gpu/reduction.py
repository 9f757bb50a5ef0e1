"""GPU schedules for reductions over axes (sum/mean/max/min/prod, global pooling) and for the
normalizations built from them (softmax, log_softmax): a block per output row, its threads
splitting the reduction and combining their partial results through shared memory (a
cross-thread reduction, TVM's allreduce: log2(num_threads) halving steps).

reduce: one reduction stage R whose consumers are elementwise over R's shape (mean's divide,
an epilogue) runs as a block per output element when the reduction is at least a warp long
(`cross_thread` on); otherwise, and for anything else (argmax, cumsum, several reductions
feeding each other), one output element per thread (tiling.schedule_per_thread).
Knobs: num_threads (threads per block: the reduction's lanes), cross_thread.
Fallback: num_threads = the smallest power of two covering the reduction, between 32 and
max_threads_per_block; cross_thread = reduction length >= thread_warp_size.

softmax / log_softmax: a block per row along `axis`; the row's max and sum are cross-thread
reductions into registers every thread holds; each thread then normalizes its share of the
row. Knob num_threads, fallback as above over the row length.
"""

from __future__ import annotations

import math

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.injective import inline_injective
from tvmc.ops.gpu.tiling import define_num_threads, schedule_per_thread
from tvmc.te.expr import TensorLoad, walk
from tvmc.te.schedule import thread_axis
from tvmc.te.extent import same_shape


def _reduce_length(workload) -> int:
    attrs = dict(workload[-1])
    shape = workload[0]
    axes = attrs.get("axis", ())
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    if not axes:  # global pooling: the axes after N and C (scatter_nd's data of any rank, also without
        axes = range(2, len(shape))  # axes, takes the same estimate: it only sizes the knobs' defaults)
    return math.prod(shape[a] for a in axes)


def reduce_config(workload, target) -> ConfigSpace:
    """Config space of reduce.gpu on workload (data shape, out shape, dtype, attrs)."""
    length = _reduce_length(workload)
    space = ConfigSpace()
    define_num_threads(space, target, length)
    space.define_knob("cross_thread", [False, True], fallback=length >= max(1, target.thread_warp_size))
    return space


def _single_reduction(s, out):
    """The one reduction stage of a function whose other stages are elementwise over its shape,
    else None."""
    reds = [st.tensor for st in s.stages if st.op.reduce_axis]
    if len(reds) != 1 or not same_shape(reds[0].shape, out.shape):
        return None
    return reds[0]


def cross_thread_reduce(s, red, num_threads: int):
    """Split every reduce axis of stage `red` (fused) by `num_threads` and bind the inner part to
    threadIdx.x: a cross-thread reduction (tvmc.tir.lower)."""
    st = s[red]
    axes = list(st.op.reduce_axis)
    k = st.fuse(*axes) if len(axes) > 1 else axes[0]
    _, ki = st.split(k, num_threads)
    st.bind(ki, thread_axis("threadIdx.x"))
    return ki


def schedule_reduce(s, out, anchor, cfg, target):
    """Reductions over axes (see the module docstring)."""
    red = _single_reduction(s, out)
    if red is None or not cfg["cross_thread"] or (red is not out and not out.shape):
        schedule_per_thread(s, out, cfg["num_threads"])
        return
    inline_injective(s, out, keep=[red])
    st = s[out]
    axes = list(st.op.axis)
    row = (st.fuse(*axes) if len(axes) > 1 else axes[0]) if axes else None
    if red is not out:  # the epilogue: one thread of the block stores (a guarded thread loop of 1)
        bx, tx = st.split(row, 1)
        st.bind(bx, thread_axis("blockIdx.x"))
        st.bind(tx, thread_axis("threadIdx.x"))
        s[red].set_scope("local")
        s[red].compute_at(st, bx)
    elif row is not None:
        st.bind(row, thread_axis("blockIdx.x"))
    cross_thread_reduce(s, red, cfg["num_threads"])


def _reduced_position(red) -> int:
    """The axis of the tensor that reduction `red` reads along its reduce axis (softmax's axis)."""
    k = red.op.reduce_axis[0].var
    load = next(x for x in walk(red.op.body.source) if isinstance(x, TensorLoad) and k in x.indices)
    return list(load.indices).index(k)


def softmax_config(workload, target) -> ConfigSpace:
    """Config space of softmax.gpu on workload (data shape, out shape, dtype, attrs with axis)."""
    space = ConfigSpace()
    define_num_threads(space, target, workload[0][dict(workload[-1])["axis"]])
    return space


def schedule_softmax(s, out, anchor, cfg, target):
    """softmax / log_softmax: a block per row, cross-thread max and sum (module docstring)."""
    reds = [st.tensor for st in s.stages if st.op.reduce_axis]
    inline_injective(s, out, keep=reds)
    st = s[out]
    axis = _reduced_position(reds[0])
    axes = list(st.op.axis)
    rows = [iv for k, iv in enumerate(axes) if k != axis]
    st.reorder(*rows, axes[axis])
    lanes = axes[axis]
    _, tx = st.split(lanes, cfg["num_threads"])
    if rows:
        row = st.fuse(*rows) if len(rows) > 1 else rows[0]
        st.bind(row, thread_axis("blockIdx.x"))
    st.bind(tx, thread_axis("threadIdx.x"))
    at = st.leaf[0]
    for red in reds:
        s[red].set_scope("local")
        s[red].compute_at(st, at)
        cross_thread_reduce(s, red, cfg["num_threads"])
