"""GPU schedules for dense ([M,K] x [N,K]^T) and batched matmul: the shared-memory tiled GEMM of
tiling.schedule_gemm_tile, a block per (tile_y*reg_y) x (tile_x*reg_x) output tile, a
reg_y x reg_x register tile per thread, K in steps of tile_k staged in shared memory.

Knobs: tile_x, tile_y, reg_x, reg_y (tiling.define_gemm_tile), tile_k (a divisor of K up to 32).
Fallback: the occupancy-aware rule of tiling.gemm_tile_fallback over rows = M, columns = N and
the batch axes as block positions: 4 x 4 registers per thread where M and N allow (halved, rows
first, while the kernel would leave the descriptor's multiprocessors short of threads or
blocks), a row of up to 16 threads, rows of threads added while the grid keeps two blocks per
multiprocessor and max_threads_per_block allows (BERT's [128, 256] x [256, 256] at batch 1 on
132 SMs: 512 blocks of 16 x 4 threads, one output each, where the rule without the
multiprocessor count gave 4 blocks of 16 x 32 threads); tile_k = the largest divisor of K <= 8.
Epilogues that change the shape fall back on the per-thread schedule.

small batch (TVM's dense_small_batch.gpu): dense with at most SMALL_BATCH rows, where a GEMM tile
would leave most of the GPU idle (ResNet-18's classifier [1, 512] x [1000, 512] fell back on 16
blocks of 16 threads, 162 us on an H200; its best tuned GEMM tile, one thread per block on 1000
blocks, 19.7 us): a block per output element, its threads splitting K and combining their partial
sums through shared memory (the cross-thread reduction of tvmc/ops/gpu/reduction.py), the
epilogue applied by one thread. Knob num_threads; fallback: the smallest power of two covering K,
between the warp and SMALL_BATCH_THREADS (each thread then sums K / num_threads products, reading
the weight row coalesced).
"""

from __future__ import annotations

import math

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.gpu.reduction import schedule_reduce
from tvmc.ops.gpu.tiling import define_gemm_tile, pow2_at_least, schedule_gemm_tile, schedule_per_thread, thread_counts
from tvmc.te.extent import same_shape

TILE_K_FALLBACK = 8
SMALL_BATCH = 16           # rows (M) up to which dense runs as one cross-thread reduction per output
SMALL_BATCH_THREADS = 256  # most threads per output the small-batch fallback gives
# register tile per thread the fallback starts from (rows x columns): 16 accumulators, and per k
# step 4 + 4 shared-memory loads for 16 multiply-adds. 8 x 4 ran the BERT-style encoder at batch
# 16 8% faster on an H100 (3.25 against 3.53 ms, bench/results/cuda_h100.md, sixth run) but its
# attention-score kernel over a symbolic sequence gave wrong outputs on PoCL's OpenCL
# (tests/e2e/test_symbolic_gpu.py), where the SIMT interpreter runs the same loop IR right: not
# taken until that is understood.
REGISTER_TILE = (4, 4)


def gemm_config(workload, target) -> ConfigSpace:
    """Config space for nn.dense (data [M,K], weight [N,K]) and nn.matmul ([...,M,K] x [...,K,N])."""
    out = workload[-3]
    k = workload[0][-1]
    space = ConfigSpace()
    define_gemm_tile(space, target, out[-2], out[-1], *REGISTER_TILE, others=math.prod(out[:-2]))
    space.define_split("tile_k", k, fallback=TILE_K_FALLBACK, max_factor=32)
    return space


def schedule_gemm(s, out, anchor, cfg, target):
    """Fused dense / matmul + epilogue as a tiled GEMM over the last two output axes."""
    if not same_shape(out.shape, anchor.shape):
        schedule_per_thread(s, out, target.max_threads_per_block)
        return
    *batch, i, j = anchor.op.axis
    (k,) = anchor.op.reduce_axis
    schedule_gemm_tile(s, out, anchor, cfg, row_axis=i, col_axis=j, split_reduce=k)


def small_batch(workload) -> bool:
    """dense_small_batch.gpu applies: data [M, K] with M <= SMALL_BATCH."""
    return workload[-3][0] <= SMALL_BATCH


def small_batch_config(workload, target) -> ConfigSpace:
    """Config space of dense_small_batch.gpu: num_threads (threads splitting K per output)."""
    k = workload[0][-1]
    space = ConfigSpace()
    counts = thread_counts(target)
    space.define_knob("num_threads", counts,
                      fallback=min(counts[-1], SMALL_BATCH_THREADS, max(counts[0], pow2_at_least(k))))
    return space


def schedule_dense_small_batch(s, out, anchor, cfg, target):
    """dense with few rows: a block per output element, a cross-thread reduction over K (module
    docstring); an epilogue that changes the shape falls back on the per-thread schedule."""
    schedule_reduce(s, out, anchor, {"num_threads": cfg["num_threads"], "cross_thread": True}, target)
