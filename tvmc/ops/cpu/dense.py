"""x86 schedules for dense ([M,K] x [N,K]^T) and batched matmul.

dense: per (m, n-tile) the K reduction runs over a vector of `tile_k` partial sums... kept
simple here: n tiles of `tile_n` outputs accumulate in registers, unrolled; the reduction is
innermost-contiguous in both operands so LLVM's SLP/loop vectorizer forms the dot products.
matmul: (i, j) tiles with j vectorized (b is row-major [K, N], contiguous in j).

Fallbacks: tile_n = largest divisor of N <= 8; matmul tile_j = largest divisor of N <= lanes,
tile_i = largest divisor of M <= 4.
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.injective import inline_injective
from tvmc.ops.cpu.tiling import schedule_tiled_reduction


def dense_config(workload, target) -> ConfigSpace:
    (_, _), (n, _) = workload[:2]
    space = ConfigSpace()
    space.define_split("tile_n", n, fallback=8, max_factor=32)
    return space


def schedule_dense(s, out, anchor, cfg, target):
    """Fused dense + epilogue: n tiles unrolled; each output is a K-long dot product."""
    schedule_tiled_reduction(s, out, anchor, tiles={1: cfg["tile_n"]}, vector_axis=-1, unroll_axes=(1,),
                             parallel_depth=2, target=target)


def matmul_config(workload, target) -> ConfigSpace:
    out_shape = workload[2]
    m, n = out_shape[-2], out_shape[-1]
    space = ConfigSpace()
    space.define_split("tile_j", n, fallback=target.vector_lanes("float32"), max_factor=64)
    space.define_split("tile_i", m, fallback=4, max_factor=16)
    return space


def schedule_matmul(s, out, anchor, cfg, target):
    nd = len(out.shape)
    schedule_tiled_reduction(s, out, anchor, tiles={nd - 2: cfg["tile_i"], nd - 1: cfg["tile_j"]},
                             vector_axis=nd - 1, unroll_axes=(nd - 2,), parallel_depth=max(1, nd - 1),
                             target=target)


def dense_pack_config(workload, target) -> ConfigSpace:
    """tile_nb: packed column blocks per register tile (each block one vector accumulator).
    Fallback: the largest divisor of N/bn that is <= 4 (four accumulators hide the FMA latency;
    batch-1 dense is bound by reading the weights, so more registers buy nothing)."""
    nb = workload[1][0]
    space = ConfigSpace()
    space.define_split("tile_nb", nb, fallback=4, max_factor=8)
    return space


def schedule_dense_pack(s, out, anchor, cfg, target):
    """Packed dense + epilogue: per (m, tile of tile_nb*bn outputs), tile_nb vector accumulators
    take one broadcast data element and tile_nb contiguous weight vectors per k; (m, tile) pairs
    run in parallel; the epilogue is applied to the tile as it is stored."""
    bn = next(t for t in anchor.op.input_tensors() if t.ndim == 3).shape[2]  # the packed weight
    inline_injective(s, out, keep=[anchor])
    acc = s.cache_write(out) if out is anchor else anchor
    st = s[out]
    m, n = st.op.axis
    no, ni = st.split(n, bn * cfg["tile_nb"])
    nib, nil = st.split(ni, bn)
    st.unroll(nib)
    st.vectorize(nil)
    head = st.fuse(m, no)
    st.parallel(head)
    s[acc].compute_at(st, head)
    am, an = s[acc].op.axis
    (rk,) = s[acc].op.reduce_axis
    ano, anl = s[acc].split(an, bn)
    s[acc].reorder(am, rk, ano, anl)
    s[acc].unroll(ano)
    s[acc].vectorize(anl)
