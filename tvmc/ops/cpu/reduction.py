"""x86 schedules for normalizations built from reductions (softmax, LRN): every reduction and the
output at root, each with its outer spatial loops fused in parallel and the innermost axis
vectorized where the axis fits a vector."""

from __future__ import annotations

from tvmc.ops.cpu.injective import inline_injective, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import schedule_window_reduction


def _root_reduction(stage):
    axes = list(stage.op.axis)
    outer = [iv for iv in axes if iv.extent > 1]
    if outer:
        stage.reorder(*outer, *stage.op.reduce_axis, *[iv for iv in axes if iv.extent == 1])
        stage.parallel(outer[0])


def schedule_softmax(s, out, anchor, cfg, target):
    """softmax: max and sum reductions at root, exp materialized once, divide as the output."""
    keep = [st.tensor for st in s.stages if st.op.reduce_axis or st.tensor.name == "softmax_exp"]
    inline_injective(s, out, keep=keep)
    for st in s.stages:
        if st.op.reduce_axis:
            _root_reduction(st)
        elif st.attach == "root":
            schedule_elementwise_loops(s, st.tensor, target)


def schedule_reduce(s, out, anchor, cfg, target):
    """Reductions over axes (sum/mean/max/min/prod, argmax/argmin, cumsum): every reduction stage
    at root with its outer spatial loops parallel; injective inputs inlined; an elementwise
    epilogue (mean's divide, a fused op) runs as the output's vectorized loop nest."""
    keep = [st.tensor for st in s.stages if st.op.reduce_axis]
    inline_injective(s, out, keep=keep)
    for st in s.stages:
        if st.op.reduce_axis:
            _root_reduction(st)
        elif st.attach == "root" and st.tensor.uid == out.uid:
            schedule_elementwise_loops(s, st.tensor, target)


def schedule_lrn(s, out, anchor, cfg, target):
    """LRN: channel-window sums of squares per row tile, then the normalization epilogue."""
    sq = next(st.tensor for st in s.stages if st.op.reduce_axis)
    schedule_window_reduction(s, out, sq, target)
