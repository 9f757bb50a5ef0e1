"""GPU schedules for dense ([M,K] x [N,K]^T) and batched matmul: the shared-memory tiled GEMM of
tiling.schedule_gemm_tile, a block per (tile_y*reg_y) x (tile_x*reg_x) output tile, a
reg_y x reg_x register tile per thread, K in steps of tile_k staged in shared memory.

Knobs: tile_x, tile_y, reg_x, reg_y (tiling.define_gemm_tile), tile_k (a divisor of K up to 32).
Fallback: 4 x 4 registers per thread where M and N allow, a 16-wide row of threads, as many
rows of threads as max_threads_per_block leaves (256 threads: a 64 x 64 block tile), tile_k =
the largest divisor of K <= 8 (with 64 x 64 tiles: 4 KiB of shared memory per step).
Epilogues that change the shape fall back on the per-thread schedule.
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.gpu.tiling import define_gemm_tile, schedule_gemm_tile, schedule_per_thread

TILE_K_FALLBACK = 8
# register tile per thread the fallback aims for (rows x columns): 16 accumulators, and per k
# step 4 + 4 shared-memory loads for 16 multiply-adds
REGISTER_TILE = (4, 4)


def gemm_config(workload, target) -> ConfigSpace:
    """Config space for nn.dense (data [M,K], weight [N,K]) and nn.matmul ([...,M,K] x [...,K,N])."""
    out = workload[-3]
    k = workload[0][-1]
    space = ConfigSpace()
    define_gemm_tile(space, target, out[-2], out[-1], *REGISTER_TILE)
    space.define_split("tile_k", k, fallback=TILE_K_FALLBACK, max_factor=32)
    return space


def schedule_gemm(s, out, anchor, cfg, target):
    """Fused dense / matmul + epilogue as a tiled GEMM over the last two output axes."""
    if tuple(out.shape) != tuple(anchor.shape):
        schedule_per_thread(s, out, target.max_threads_per_block)
        return
    nd = len(out.shape)
    schedule_gemm_tile(s, out, anchor, cfg, row_axis=nd - 2, col_axis=nd - 1, split_reduce=0)
