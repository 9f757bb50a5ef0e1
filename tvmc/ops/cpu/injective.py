"""CPU schedule for injective/elementwise fused functions: inline everything into the output,
fuse its loops, vectorize the innermost by the target's vector lanes, parallelize the rest."""

from __future__ import annotations

from tvmc.te import extent as xt
from tvmc.te.expr import IntImm, TensorLoad, walk
from tvmc.te.schedule import Schedule
from tvmc.tir.lower import inlined_bodies
from tvmc.tir.simplify import linear_steps, simplify

# Rows of an elementwise stage of symbolic shape that its constant outer axes must hold to be its
# parallel loop alone (a fused symbolic axis costs a division per row)
MIN_PARALLEL_ROWS = 8


def inline_injective(s: Schedule, out, keep=()):
    """compute_inline every non-reduction stage except `out` and the stages in `keep`."""
    keep_ids = {t.uid for t in keep} | {out.uid}
    for st in s.stages:
        if st.tensor.uid not in keep_ids and not st.op.reduce_axis:
            st.compute_inline()


# The parallel loop of an elementwise stage fuses its outer axes until it has this many
# iterations; the axes after them stay nested loops inside it. Fusing them all recovered every
# axis by a division and a remainder per vector and hid from LLVM what is invariant along the
# inner axes (a concatenation's choice of input, a layout transform's channel block):
# ShuffleNet's NCHW <-> NCHW8c kernels with a concatenation or a residual add inside ran 2.5 to
# 3.5x faster, [1,17,28,28,8] fused as (n, c) and nested (h, w) instead of one loop of 13328
# (2-core Sapphire Rapids: ShuffleNet 6.46 -> 5.46 ms at one thread, 3.78 -> 3.06 at two;
# SqueezeNet -4% / -8%, MobileNetV2 -2% / -7%, DenseNet-121 -2%, the rest within noise). With
# 64 or 256 iterations ShuffleNet ran 3-6% slower than with 16, at both thread counts.
PARALLEL_ITERATIONS = 16


def _parallel_prefix(outer: list) -> list:
    """The leading axes of `outer` whose product first reaches PARALLEL_ITERATIONS (all of them
    when it never does): the axes the parallel loop fuses."""
    count, k = 1, 0
    while k < len(outer) and count < PARALLEL_ITERATIONS:
        count *= outer[k].extent
        k += 1
    return outer[:max(k, 1)]


def schedule_elementwise_loops(s: Schedule, out, target, min_parallel_elems: int = 4096, inner_axis=None):
    """Loops of an elementwise output stage: inner axis split by vector lanes (when it divides
    the axis), vectorized, or kept whole as the innermost loop when lanes do not divide a long
    one; the leading outer axes fused (_parallel_prefix) and parallel when the tensor is large
    enough, the others nested inside. On a target without
    threads (num_cores 1) the outer loops stay nested: a fused loop would only recover each
    axis by a division and a remainder per vector (a wasm NCHW4c concatenate of [1,32,55,55,4]
    ran 3 divisions and a branch per 4 floats). `inner_axis` (static shapes): the axis to
    vectorize instead of the last one (vector_axis), moved innermost."""
    if not xt.is_static_shape(out.shape):
        _symbolic_elementwise_loops(s, out, target, min_parallel_elems)
        return
    st = s[out]
    lanes = target.vector_lanes(out.dtype)
    axes = list(st.op.axis)
    if inner_axis is not None and inner_axis is not axes[-1]:
        axes = [a for a in axes if a is not inner_axis] + [inner_axis]
        st.reorder(*axes)
    # trailing unit axes (a block of 1 in NCHW1c, a kept reduced axis) would leave the vector
    # loop with one lane; they go outside, where a unit loop costs nothing
    trailing = len(axes)
    while trailing > 0 and axes[trailing - 1].extent == 1:
        trailing -= 1
    if 0 < trailing < len(axes):
        axes = axes[trailing:] + axes[:trailing]
        st.reorder(*axes)
    if not axes:
        return
    inner = axes[-1]
    if inner.extent % lanes == 0 and inner.extent >= lanes:
        io, ii = st.split(inner, lanes)
        st.vectorize(ii)
        outer = axes[:-1] + [io]
    elif lanes > 16 and inner.extent % 16 == 0 and inner.extent & (inner.extent - 1):
        # a narrow dtype's row of whole vectors of 16 but not of its lanes, and no power of 2
        # (uint8 rows of 48 or 80 on AVX-512's 64 lanes: a quantized, padded image stem, computed
        # in float32 vectors of 16): vectors of 16. Vectorized whole, a row of 48 took masks of 48
        # lanes, which LLVM builds bit by bit (~300 mask instructions per row: 7 us for the 3 x 34
        # rows of a 32 x 32 stem)
        io, ii = st.split(inner, 16)
        st.vectorize(ii)
        outer = axes[:-1] + [io]
    elif inner.extent <= 64 and inner.extent > 1:
        st.vectorize(inner)
        outer = axes[:-1]
    elif len(axes) > 1 and inner.extent >= 4 * lanes:
        # a long contiguous row that lanes do not divide (e.g. 6625 classes) stays a plain
        # innermost loop, which LLVM's loop vectorizer runs in vectors plus a scalar tail;
        # fused with the outer axes it would index through a division and stay scalar
        outer = axes[:-1]
    else:
        outer = axes
    if outer and target.threaded:
        outer = _parallel_prefix(outer)
        fused = st.fuse(*outer) if len(outer) > 1 else outer[0]
        size = 1
        for e in out.shape:
            size *= e
        if size >= min_parallel_elems and fused.extent > 1:
            st.parallel(fused)


def _symbolic_elementwise_loops(s: Schedule, out, target, min_parallel_elems: int):
    """schedule_elementwise_loops for an output of symbolic shape: the innermost axis split by the
    vector lanes and vectorized (a symbolic one with a tail that loop partitioning keeps out of
    the other vectors), or handled as a static one is; the outer axes fused into one parallel
    loop of rows, which runs on threads only when a run has min_parallel_elems elements, or
    where the constant outer axes hold MIN_PARALLEL_ROWS rows, those in parallel and the
    symbolic ones serial inside (no division by a symbolic extent per row); the inner vector
    loops stay per row (a symbolic extent fused into them would cost a division per vector)."""
    st = s[out]
    lanes = target.vector_lanes(out.dtype)
    axes = list(st.op.axis)
    units = [iv for iv in axes if xt.is_static(iv.extent) and iv.extent == 1]
    axes = [iv for iv in axes if iv not in units]
    if units:
        st.reorder(*units, *axes)
    if not axes:
        return
    inner, outer = axes[-1], axes[:-1]
    rows_inner = None  # the loop of the innermost axis left outside its vectors
    if not xt.is_static(inner.extent) and xt.upper_bound(inner.extent) < lanes and \
            _gathers(_loads(s, out), inner.var, {a.var: a.extent for a in st.op.axis}):
        pass  # fewer elements than a vector, read at strided addresses (attention's K transposed to
        # [heads, dim, seq], the size bucket of seq < lanes, tvmc.ops.fused._strided_rows_buckets): scalar copies
        # instead of a gather of a few lanes per row (GPT-2 at seq 1: 2 x 1.1 -> 2 x 0.3 us)
    elif not xt.is_static(inner.extent):
        rows_inner, vec = st.split(inner, lanes)
        st.vectorize(vec)
    elif inner.extent % lanes == 0 and inner.extent >= lanes:
        _, vec = st.split(inner, lanes)
        st.vectorize(vec)
    elif 1 < inner.extent <= 64:
        st.vectorize(inner)
    if not target.threaded:
        return
    if not outer:  # one (symbolic) row: its vectors in parallel
        if rows_inner is not None:
            st.parallel(rows_inner, min_extent=xt.ceildiv(min_parallel_elems, lanes))
        return
    static = [iv for iv in outer if xt.is_static(iv.extent)]
    symbolic = [iv for iv in outer if not xt.is_static(iv.extent)]
    if static and symbolic and xt.prod([iv.extent for iv in static]) >= MIN_PARALLEL_ROWS:
        # rows in parallel over the constant axes, the symbolic ones a serial loop each inside: a
        # fused symbolic extent would cost a division by it per row
        st.reorder(*static, *symbolic)
        outer, inner_rows = static, symbolic
    else:
        inner_rows = []
    fused = st.fuse(*outer) if len(outer) > 1 else outer[0]
    row = xt.prod([iv.extent for iv in inner_rows] + [inner.extent])  # elements of one parallel iteration
    least = -(-min_parallel_elems // max(1, row)) if xt.is_static(row) else xt.as_extent(
        (min_parallel_elems + row - 1) // row)
    if xt.is_static(fused.extent) and xt.is_static(row):
        if xt.mul(fused.extent, row) >= min_parallel_elems and fused.extent > 1:
            st.parallel(fused)
    elif not xt.is_static(fused.extent) or xt.upper_bound(xt.mul(fused.extent, row)) >= min_parallel_elems:
        st.parallel(fused, min_extent=least)


def schedule_blocked_loops(s: Schedule, t, target):
    """Loops of a 5-D NCHW[x]c stage at root (e.g. a padded input): (n, c_outer, h) rows fused in
    parallel, w serial, the channel block x as the vector loop. Blocks of 1 or wider than 4
    vectors take the generic elementwise loops."""
    st = s[t]
    n, co, h, w, ci = st.op.axis
    if ci.extent == 1 or ci.extent > 4 * target.vector_lanes(t.dtype):
        schedule_elementwise_loops(s, t, target)
        return
    st.parallel(st.fuse(n, co, h))
    st.vectorize(ci)


def _gathers(loads, var, ranges) -> int:
    """How many of `loads` ((tensor, indices) of the tensors a stage reads) read other than
    contiguously or uniformly along `var`: each vector of them is a gather (one scalar load per
    lane, or one vgather where the vector unit has it; a stride of 2 to 8 elements: one load of
    their span and a shuffle), counted alike."""
    count = 0
    for tensor, indices in loads:
        stride, flat = 1, 0
        for extent, index in reversed(list(zip(tensor.shape, indices))):
            steps = linear_steps(simplify(index, ranges), (var,))
            if steps is None:
                flat = None
                break
            flat = flat + steps[0] * stride
            stride = stride * extent
        if flat is not None and not isinstance(flat, int):  # symbolic strides: a step only if it folds
            flat = simplify(flat)
            flat = flat.value if isinstance(flat, IntImm) else None
        count += flat not in (0, 1)
    return count


def _loads(s: Schedule, out) -> list:
    """(tensor, indices) of every tensor read of stage `out`, its inlined producers included."""
    return [(x.tensor, x.indices) for x in walk(inlined_bodies(s)[s[out]]) if isinstance(x, TensorLoad)]


def vector_axis(s: Schedule, out, lanes: int):
    """The axis of the static-shape elementwise stage `out` (every other stage inlined into it;
    None for a 0-d `out`) whose vectors cost the fewest accesses at unrelated addresses (one
    scalar access per lane, tvmc/codegen/llvm.py): a load counts where its flat index does not
    step by 0 or 1 along the axis, the store where the axis is not the last. The last axis unless another costs fewer;
    only axes that vectorize whole (at most 64) or split by `lanes`. A layout change fused with
    elementwise ops (ShuffleNet's GEMM output + bias + ReLU + channel shuffle into NCHW16c: its
    data and its per-channel bias both gathered along the channel block, [1,17,14,14,16] 77 us at
    one thread, AVX-512) runs along the image row instead (one scalar store per lane): 43 us."""
    if not out.op.axis:  # a 0-d tensor: no loop
        return None
    loads = _loads(s, out)
    if not all(xt.is_static_shape(t.shape) for t, _ in loads):
        return out.op.axis[-1]
    axes = list(out.op.axis)
    ranges = {a.var: a.extent for a in axes}
    best, best_cost = axes[-1], _gathers(loads, axes[-1].var, ranges)
    for a in axes[:-1]:
        if best_cost == 0:
            break
        if not (a.extent % lanes == 0 or 4 <= a.extent <= 64):
            continue
        cost = 1 + _gathers(loads, a.var, ranges)  # + the store, strided along a
        if cost < best_cost:
            best, best_cost = a, cost
    return best


def schedule_injective(s: Schedule, out, anchor, cfg, target):
    """Implementation schedule for injective/elementwise ops (no knobs): a 5-D concatenate output
    (channel blocks of NCHW[x]c) by schedule_blocked_loops, the others by
    schedule_elementwise_loops."""
    inline_injective(s, out)
    if out.name == "concatenate" and len(out.shape) == 5 and xt.is_static_shape(out.shape):
        # a concatenation of NCHW[x]c tensors (on the channel blocks): the rows (n, c_outer, h) in
        # parallel, each copied from one input, instead of the fused loop, which recovers c_outer
        # by divisions and picks the input by a select per vector. SqueezeNet's fire concatenations
        # at 1 thread (AVX-512): [1,8,55,55,16] 215-245 -> 175 us, [1,32,13,13,16] 27 -> 19 us
        schedule_blocked_loops(s, out, target)
        return
    static = xt.is_static_shape(out.shape)
    inner = vector_axis(s, out, target.vector_lanes(out.dtype)) if static else None
    schedule_elementwise_loops(s, out, target, inner_axis=inner)
