"""GPU schedules for injective/elementwise fused functions, and the generic per-thread schedule
that every operator can fall back on.

injective: everything inlined into the output, whose elements are spread one (or one vector of
`vector_lanes`) per thread, consecutive threads on consecutive elements (coalesced accesses).
Knobs: num_threads (threads per block), vector_lanes (1, or the descriptor's 32-bit lanes:
float4 loads and stores where the data is contiguous). Fallback: num_threads =
max_threads_per_block (or the smallest power of two covering the output), vector_lanes = the
descriptor's lanes when the innermost axis is a multiple of them and the output fills every
thread of a block with a vector, else 1.

generic (per thread): one output element per thread, every reduction computed by the thread
that needs it, in registers (tiling.schedule_per_thread). Correct for any operator; the
fallback for the ops without a dedicated GPU schedule (window reductions, selection, scans).
Knob: num_threads, fallback as above.
"""

from __future__ import annotations

import math

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.injective import inline_injective
from tvmc.ops.gpu.tiling import bind_threads, define_num_threads, schedule_per_thread


def injective_config(workload, target) -> ConfigSpace:
    """Config space of an injective function on workload (input shapes, out shape, dtype, attrs)."""
    shape = workload[-3]  # (input shapes..., output shape, dtype, attrs)
    size = math.prod(shape)
    lanes = target.vector_lanes("float32")
    space = ConfigSpace()
    define_num_threads(space, target, size)
    vector_ok = bool(shape) and shape[-1] % lanes == 0 and size >= lanes * space.fallback["num_threads"]
    space.define_knob("vector_lanes", [1, lanes], fallback=lanes if vector_ok else 1)
    return space


def schedule_injective(s, out, anchor, cfg, target):
    """Implementation schedule for injective/elementwise ops on GPUs."""
    inline_injective(s, out)
    lanes = cfg["vector_lanes"] if out.shape and out.shape[-1] % cfg["vector_lanes"] == 0 else 1
    bind_threads(s, out, cfg["num_threads"], lanes)


def generic_config(workload, target) -> ConfigSpace:
    """Config space of the per-thread schedule: num_threads over the output's elements."""
    space = ConfigSpace()
    define_num_threads(space, target, math.prod(workload[-3]))
    return space


def schedule_generic(s, out, anchor, cfg, target):
    """One output element per thread, reductions per thread (see the module docstring)."""
    schedule_per_thread(s, out, cfg["num_threads"])
