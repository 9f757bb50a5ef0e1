"""CPU schedule for Winograd conv2d (tvmc.ops.nn_conv2d_winograd; TVM's conv2d_nchwc_winograd):
the padded input and the input tile transform V = B^T d B are materialized once (grid positions
unrolled, the channel block as the vector loop); the batched GEMM over input channels, the hot
part, runs like nn.dense_pack: a register tile of tile_oc output channel blocks (weight vectors,
the oc block as lanes) x tile_p tiles (broadcast V elements), reduced over (ic_outer, ic_inner);
the output transform A^T M A runs per output tile (m x m pixels unrolled, the oc block as the
vector loop) with the elementwise epilogue fused into it.

Knobs:
  tile_oc  output channel blocks per GEMM register tile (a divisor of O // ob, up to MAX_TILE_OC).
  tile_p   tiles per GEMM register tile (a divisor of P, or a partial last tile under a guard).
Fallback: conv2d_nchwc's fallback_register_tile with P in the role of OW (the splat operand of
wasm: several channel blocks per broadcast, the tile within the registers and ic_inner kept a
loop, see conv2d_nchwc.rolls_ic_inner; elsewhere one block, tile_p by the accumulator registers).

When to use it (winograd_tile_size, read by AlterOpLayout): 3x3 kernels, stride 1, dilation 1,
groups 1, both channel counts at least MIN_WINOGRAD_CHANNELS; then, on a target with a cost table
(configs/winograd/<target name>.json, measured by bench/winograd_table.py, schema
configs/winograd/schema.json: per workload class C x O x H x W the times of direct, im2col,
F(2x2) and F(4x4)), the form the nearest class (log2 distance in C, O and H*W) measured fastest
(im2col counts as direct here: AlterOpLayout only chooses between the two ops, and im2col is
an implementation of conv2d_nchwc that tuning records select); on a target without a table
(ARM, wasm: not measurable on this x86 host), the register rule: targets with at most
WINOGRAD_MAX_VECTOR_REGISTERS vector registers (wasm simd128, x86 AVX2 and SSE: the direct form's
register tile holds at most 12 to 16 accumulators there, and each broadcast input element feeds
few multiply-adds); F(4x4, 3x3) (WINOGRAD_TILE_SIZE). Measured whole models, one thread,
interleaved in one process (other processes running):
  wasm in Node 20, direct -> F(2x2) (load 5): ResNet-18 275 -> 145 ms, SqueezeNet 51 -> 35,
      Inception v1 379 -> 280; F(2x2) -> F(4x4) (load 1.7): ResNet-18 102 -> 81 ms,
      SqueezeNet 27.7 -> 26.1, Inception v1 112 -> 102;
  x86 AVX2 (Zen 3, load 2.6): ResNet-18 direct 49.8 ms, F(2x2) 33.3, F(4x4) 29.7; (load 5)
      SqueezeNet 12.5 / 10.0 / 9.7, Inception v1 58 / 42 / 40.
F(4x4)'s transforms have constants up to 8 and 1/24: the outputs of those models moved by at most
8e-7 of their largest magnitude against the direct form. Without a table, targets with 32
registers (NEON) keep the direct form: not measurable here, and their register tiles are twice
as large. AVX-512 was measured (configs/winograd/x86.json, 1 thread): F(4x4) wins on the large
images (64 channels at 56x56: 1.30 ms against 1.97 direct), F(2x2) at 14x14 and 7x7 up to 256
channels, direct at 512 channels on 7x7 (2.94 ms; F(2x2) 3.67, F(4x4) 5.48).

The transformed weights are (m+2)^2 / 9 times the direct ones (16/9 for F(2x2), 36/9 for F(4x4)).
By default they are computed when the artifact loads (nn.winograd_weight_transform, a load-time
kernel: mod.params keeps the 3x3 weights), so every conv takes the form it runs fastest in. With
AlterOpLayout's winograd_at_load 0 they are computed at compile time into mod.params, and the
size budget (plan_winograd, AlterOpLayout's size_budget) lets the params grow to 1.25x, the convs
that save the most time per extra byte taking Winograd first. Whole models at 1 thread, load-time
transforms against compile-time ones within the budget, interleaved in one process (2-core Zen 4,
2026-11-27): ResNet-18 0.92 (x86-avx2) and 0.91 (x86), SqueezeNet 0.98 and 0.93, Inception v2
0.97 and 0.95, DenseNet-121 0.99 and 0.94, ResNet-50 0.96 and 0.99.

Tuning does not choose the form: AlterOpLayout rewrites the graph (and the weights) before tasks
exist, so `tvmc tune` measures the direct or the Winograd task of each conv, the
one this rule picked, and its knobs; the form itself is measured per target by the cost table.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.conv2d_nchwc import (MAX_TILE_OC, accumulator_registers, fallback_register_tile,
                                       register_tile_widths, rolls_ic_inner, width_bucket_starts)
from tvmc.ops.cpu.injective import inline_injective, schedule_blocked_loops, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import macs, parallel_min_extent, schedule_tiled_reduction, worth_parallel
from tvmc.te import extent as xt
from tvmc.te.extent import same_shape

# Most vector registers of a target where Winograd is the default, and its output tile (see the
# module docstring).
WINOGRAD_MAX_VECTOR_REGISTERS = 16
WINOGRAD_TILE_SIZE = 4
# Fewest input and output channels for which the transforms (per tile: alpha^2 x C input and
# alpha^2 x O output additions) stay small beside the GEMM (alpha^2 x C x O multiply-adds).
MIN_WINOGRAD_CHANNELS = 16


# Folder of tvmc.configs holding the cost tables, one <target name>.json per measured descriptor.
COST_TABLE_FOLDER = "winograd"
# The forms a cost table times (bench/winograd_table.py) and the Winograd tile each stands for.
FORM_TILE_SIZE = {"direct": 0, "im2col": 0, "winograd2": 2, "winograd4": 4}
WINOGRAD_IMPL_TILES = (2, 4)  # the output tiles m of nn.conv2d_winograd_nchwc: F(2x2, 3x3), F(4x4, 3x3)


@functools.lru_cache(maxsize=None)
def load_cost_table(target_name: str):
    """The cost table configs/winograd/<target_name>.json as a dict (schema
    configs/winograd/schema.json), or None when tvmc ships none for that descriptor."""
    path = resources.files("tvmc.configs").joinpath(COST_TABLE_FOLDER, f"{target_name}.json")
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def nearest_cost_entry(table: dict, c: int, o: int, hw: int) -> dict:
    """The entry of `table` whose (C, O, H*W) is nearest to (c, o, hw) in log2 space (ties: the
    first in the file)."""
    def distance(e):
        return sum((math.log2(a) - math.log2(b)) ** 2 for a, b in ((e["C"], c), (e["O"], o), (e["H"] * e["W"], hw)))
    return min(table["entries"], key=distance)


def estimated_times_ms(data_shape, weight_shape, table: dict) -> dict:
    """{form: estimated ms} of an NCHW 3x3 conv (data [N, C, H, W], OIHW weight) from the nearest
    class of cost `table`, scaled by the ratio of multiply-accumulates (N*C*O*H*W) to the class's."""
    n, c, h, w = data_shape
    o = weight_shape[0]
    entry = nearest_cost_entry(table, c, o, h * w)
    scale = n * c * o * h * w / (entry["C"] * entry["O"] * entry["H"] * entry["W"])
    return {form: t * scale for form, t in entry["times_ms"].items()}


def winograd_eligible(data_shape, weight_shape, attrs) -> bool:
    """Whether an NCHW conv2d (data [N, C, H, W], OIHW weight) has a Winograd form: 3x3, stride 1,
    dilation 1, groups 1 (and the channel conditions below)."""
    c, o = data_shape[1], weight_shape[0]
    return (tuple(weight_shape[2:]) == (3, 3) and tuple(attrs["strides"]) == (1, 1)
            and tuple(attrs["dilation"]) == (1, 1) and attrs.get("groups", 1) == 1
            and min(c, o) >= MIN_WINOGRAD_CHANNELS)


def winograd_tile_size(data_shape, weight_shape, attrs, target, override: int = -1) -> int:
    """The Winograd output tile m (2: F(2x2, 3x3), 4: F(4x4, 3x3)) for an NCHW conv2d with data
    [N, C, H, W] and OIHW weight on `target`, or 0 for the direct form: the target's cost table
    where tvmc ships one (load_cost_table), else the register rule (see the module docstring);
    `override` (AlterOpLayout's option winograd_tile_size) >= 0 replaces both: 0 never, 2 or 4
    that tile for every eligible conv."""
    if not winograd_eligible(data_shape, weight_shape, attrs):
        return 0
    if override >= 0:
        return override
    return _preferred_tile_size(data_shape, weight_shape, target)


def _preferred_tile_size(data_shape, weight_shape, target) -> int:
    """winograd_tile_size of an eligible conv without an override."""
    table = load_cost_table(target.name)
    if table is not None:
        times = estimated_times_ms(data_shape, weight_shape, table)
        return FORM_TILE_SIZE[min(times, key=times.get)]
    return WINOGRAD_TILE_SIZE if target.num_vector_registers <= WINOGRAD_MAX_VECTOR_REGISTERS else 0


def _gains_ms(data_shapes, weight_shape, target, override: int, weights=None) -> dict:
    """{m: time saved against the direct form} of the Winograd tiles worth choosing for an
    eligible conv whose data takes each shape of `data_shapes` ([N, C, H, W]; several: samples
    of a symbolic shape's range, the upper bound last): an override's tile alone; else from the
    cost table, the tiles whose mean log ratio to the direct form (the better of direct and im2col)
    over the samples is below 0 and not above the best form's tile (for one shape: the tiles
    faster than direct and not larger than winograd_tile_size's), each with its mean time saved
    (`weights`: one factor per shape, the time saved at each shape scaled by it first); else
    (no table) F(2x2) and F(4x4) where the register rule takes Winograd. Without a table's time,
    a nominal ms per 1e9 multiply-adds saved at the last shape (F(2x2): 20 of 36, F(4x4):
    108 of 144), for the ranking only."""
    n, c, h, w = data_shapes[-1]
    macs_g = n * c * weight_shape[0] * h * w * 9 / 1e9
    nominal = {2: macs_g * (1 - 16 / 36), 4: macs_g * (1 - 36 / 144)}
    if override >= 0:
        return {override: nominal[override]} if override else {}
    table = load_cost_table(target.name)
    if table is None:
        preferred = _preferred_tile_size(data_shapes[-1], weight_shape, target)
        return {m: g for m, g in nominal.items() if m <= preferred}
    per_shape = [estimated_times_ms(d, weight_shape, table) for d in data_shapes]
    direct = [_direct_ms(t) for t in per_shape]
    weights = weights or [1.0] * len(data_shapes)
    score = {0: 0.0}  # mean log(time / direct time) of each form over the shapes
    saved = {}
    for m in WINOGRAD_IMPL_TILES:
        times = [t[f"winograd{m}"] for t in per_shape]
        score[m] = sum(math.log(t / d) for t, d in zip(times, direct)) / len(times)
        saved[m] = sum(f * (d - t) for t, d, f in zip(times, direct, weights)) / len(times)
    preferred = min(score, key=score.get)
    return {m: saved[m] for m in WINOGRAD_IMPL_TILES if m <= preferred and score[m] < 0}


def _direct_ms(times: dict) -> float:
    """The direct form's estimated ms from a cost table's {form: ms}: the better of direct and
    im2col (AlterOpLayout chooses between the ops; tuning records choose im2col)."""
    return min(times["direct"], times.get("im2col", math.inf))


def _sample_weights(convs, samples: dict, target) -> list | None:
    """For plan_winograd with symbolic convs: one factor per sample size k, mean(T) / T_k, where T_k
    is the cost table's direct time of all eligible `convs` at that size (a static conv's at its
    one shape), so that a time saved counts relative to the convolutions' time at each size and
    every size of the range weighs alike (the largest would outweigh the rest in ms). None without
    samples or a cost table."""
    table = load_cost_table(target.name)
    if not samples or table is None:
        return None
    count = max(len(v) for v in samples.values())
    totals = [0.0] * count
    for key, data_shape, weight_shape, attrs, _ in convs:
        if winograd_eligible(data_shape, weight_shape, attrs):
            shapes = samples.get(key, [data_shape] * count)
            for k, d in enumerate(shapes):
                totals[k] += _direct_ms(estimated_times_ms(tuple(d), tuple(weight_shape), table))
    mean = sum(totals) / count
    return [mean / t if t else 1.0 for t in totals]


def _measured_gains_ms(times: dict | None, override: int) -> dict | None:
    """{m: ms saved against the direct form} from measured `times` ({m: seconds}, m = 0 direct),
    None where they do not hold the direct form and a Winograd tile, or an override is given."""
    if override >= 0 or not times or 0 not in times or len(times) < 2:
        return None
    return {m: (times[0] - s) * 1e3 for m, s in times.items() if m and s < times[0]}


def plan_winograd(convs: list, target, override: int = -1, extra_bytes_budget: float = math.inf,
                  measured: dict | None = None, samples: dict | None = None) -> dict:
    """{key: m} for every conv of `convs` that takes Winograd tile m (absent: the direct form).

    convs: [(key, data_shape [N, C, H, W], weight_shape OIHW, attrs, weight itemsize in bytes)].
    measured: {key: {m: seconds}} (m = 0 the direct form, 2 and 4 the Winograd tiles): the tuning
    records' costs of a conv's forms (AlterOpLayout with records). Where the direct form and a
    Winograd tile are both measured (and no override is given), the measured savings replace the
    cost table's estimates, the tiles the table would not choose included; a conv whose measured
    Winograd tiles are all slower stays direct.
    samples: {key: [data_shape, ...]}: for a conv of symbolic shape (its data_shape in convs at the
    upper bounds), shapes at sizes across the range, the upper bound last; the cost table's form
    is then the one with the lowest mean log ratio to the direct form over them (_gains_ms), and
    its time saved, for the budget's ranking, the mean over the sizes of
    the time saved relative to the convolutions' time at each size (_sample_weights): one
    artifact for a range takes the forms that serve the whole range, not its upper bound alone (a
    CRNN of widths 16..2048 under the default budget, compiled for one width: F(4x4) for its
    second conv at 2048, F(2x2) at 16, direct at 400). F(4x4) serves a range as F(2x2) does: its
    transforms are one kernel over the whole range and its GEMM alone is specialized per size
    bucket (BUCKETED_STAGES). Before, when every bucket carried its own unrolled transforms, F(4x4)
    was kept for the convs where the table had it fastest at every sample, as it compiled for
    seconds per bucket; admitted everywhere now, the CRNN's range artifact went from 1.12 / 1.10 /
    1.14 to 1.09 / 1.06 / 1.05 of the static ones at widths 16 / 37 / 100 (run alone, one process),
    its compile from 23.5 to 28.1 s.
    Without a budget (inf), each conv takes winograd_tile_size's choice. With one, the transformed
    weights ((m+2)^2 instead of 9 values per C x O pair) may add at most `extra_bytes_budget`
    bytes in all, and the plan (a form per conv) that saves the most time within them is taken
    (_best_within_budget: a multiple-choice knapsack): the convs with large images and few
    channels gain most per byte. A tile larger than winograd_tile_size's is never taken.
    """
    options, sizes = {}, {}
    samples = samples or {}
    weights = _sample_weights(convs, samples, target)
    for key, data_shape, weight_shape, attrs, itemsize in convs:
        if not winograd_eligible(data_shape, weight_shape, attrs):
            continue
        gains = _measured_gains_ms((measured or {}).get(key), override)
        if gains is None:
            shapes = samples.get(key, [data_shape] * (len(weights) if weights else 1))
            gains = _gains_ms([tuple(d) for d in shapes], tuple(weight_shape), target, override, weights)
        if gains:
            options[key] = gains
            sizes[key] = data_shape[1] * weight_shape[0] * itemsize
    if math.isinf(extra_bytes_budget):
        return {key: max(g, key=g.get) for key, g in options.items()}  # the tile that saves most
    return _best_within_budget(options, sizes, extra_bytes_budget)


# Most partial plans _best_within_budget keeps per step (evenly spaced along the front beyond it).
MAX_PLANS = 4096


def _best_within_budget(options: dict, sizes: dict, budget: float) -> dict:
    """{key: m} maximizing the summed time saved (options: {key: {m: ms saved}}) with the extra
    bytes ((m+2)^2 - 9) x sizes[key] summed within `budget`: the multiple-choice knapsack solved
    over its Pareto front (the plans after each conv, kept where no plan of fewer or as many bytes
    saves as much; thinned to MAX_PLANS). Exact where the front stays that small. Choosing by time
    saved per byte alone (greedy) spent a CRNN's budget on F(4x4) for one small conv and left a
    larger one direct, where F(2x2) for both saved more."""
    front = [(0, 0.0, {})]  # (extra bytes, ms saved, plan), bytes ascending, saved strictly ascending
    for key, gains in options.items():
        grown = list(front)
        for used, saved, plan in front:
            for m, g in gains.items():
                extra = ((m + 2) ** 2 - 9) * sizes[key]
                if used + extra <= budget:
                    grown.append((used + extra, saved + g, {**plan, key: m}))
        grown.sort(key=lambda p: (p[0], -p[1]))
        front = []
        for p in grown:
            if not front or p[1] > front[-1][1]:
                front.append(p)
        if len(front) > MAX_PLANS:
            step = len(front) / MAX_PLANS
            front = [front[int(k * step)] for k in range(MAX_PLANS - 1)] + [front[-1]]
    return front[-1][2]


def conv2d_winograd_config(workload, target) -> ConfigSpace:
    """Config space of nn.conv2d_winograd_nchwc for workload (data, weight U [alpha^2, O//ob,
    C//ib, ib, ob], out shapes, dtype, attrs): tile_oc (divisors of O//ob up to MAX_TILE_OC) and
    tile_p (divisors of P up to num_vector_registers, and the partial widths in [R/2, R])."""
    _, weight, out = workload[:3]
    _, oc_chunk, _, ic_bn, _ = weight
    n, _, oh, ow, _ = out
    p = winograd_tiles(n, oh, ow, dict(workload[-1])["tile_size"])  # output tiles: the GEMM's P
    tile_oc, tile_p = fallback_register_tile(p, oc_chunk, target, ic_bn)
    regs = accumulator_registers(target, ic_bn)
    divisors = [f for f in range(1, min(p, target.num_vector_registers) + 1) if p % f == 0]
    partial = [t for t in range(max(1, regs // 2), min(regs, p - 1) + 1) if p % t]
    space = ConfigSpace()
    space.define_knob("tile_p", sorted(set(divisors + partial + [tile_p])), fallback=tile_p)
    space.define_knob("tile_oc", [f for f in range(1, MAX_TILE_OC + 1) if oc_chunk % f == 0], fallback=tile_oc)
    return space


def winograd_tiles(n, oh, ow, m):
    """P = N * ceil(OH/m) * ceil(OW/m), the output tiles of F(m x m, 3x3) (ints, or graph SymExprs
    with tvmc.graph.symbolic's floor division)."""
    return n * ((oh + m - 1) // m) * ((ow + m - 1) // m)


# The stages of nn.conv2d_winograd_nchwc that its size buckets specialize (tvmc.tir.buckets.
# lower_buckets): the batched GEMM, whose register tile runs over the tile count P. The transforms
# and the padding do not depend on the config and are lowered once for the whole range.
BUCKETED_STAGES = ("batch_gemm",)


def conv2d_winograd_buckets(workload, target, var, tiles) -> list:
    """Where the size buckets (tvmc.tir.buckets) of a conv2d_winograd_nchwc whose tile count P
    (`tiles`, an expression of graph SizeVar `var` alone: winograd_tiles of the symbolic output) is
    symbolic start, as values of `var`: where P reaches each of conv2d_nchwc.register_tile_widths
    (2 to 9, then 13, 17, ... up to one past the accumulators R, and the fallback tile_p of the
    upper-bound `workload`), as conv2d_nchwc_buckets does for the output width (the GEMM's
    register tile runs over P, each bucket takes a tile for its own upper P; with the bound's tile alone a
    CRNN's few tiles at small widths all fell in the guarded partial tile: 48 channels at 8 x 4,
    F(2x2), P = 8: 11.0 us with the bound's tile, 8.4 with these buckets, 8.3 compiled for that
    size). P grows by N * ceil(OH/m) per step of the width, so the starts are few."""
    tile_p = conv2d_winograd_config(workload, target).fallback_config()["tile_p"]
    return width_bucket_starts(var, tiles, register_tile_widths(tile_p, accumulator_registers(target, workload[1][3])))


def schedule_conv2d_winograd(s, out, anchor, cfg, target):
    """Schedule a fused nn.conv2d_winograd_nchwc (anchor, [N, O//ob, OH, OW, ob]) + elementwise
    epilogue (out); see the module docstring."""
    gemm = next(t for t in anchor.op.input_tensors() if t.op is not None)
    tile = next(t for t in gemm.op.input_tensors() if t.op is not None)
    pad = next((t for t in tile.op.input_tensors() if t.op is not None), None)
    parallel = worth_parallel(gemm)  # the transforms too: each is a pass over a GEMM operand
    # symbolic work: the transforms launch threads only at the sizes where the GEMM would
    # (parallel_min_extent of its multiply-adds), as the static kernel of that size decides
    work = macs(gemm)
    work = None if xt.is_static(work) else work
    keep = [gemm, tile] + ([pad] if pad is not None else [])
    reshaped = not same_shape(out.shape, anchor.shape)
    inline_injective(s, out, keep=keep + ([anchor] if reshaped else []))
    if pad is not None:
        schedule_blocked_loops(s, pad, target)
    _schedule_input_tile(s, tile, parallel, work)
    eps, oc_chunk, p, oc_block = gemm.op.axis  # eps: the position in the alpha x alpha grid
    ic_outer, ic_inner = gemm.op.reduce_axis
    tiles = {oc_chunk: cfg["tile_oc"], p: cfg["tile_p"], oc_block: oc_block.extent}
    schedule_tiled_reduction(s, gemm, gemm, tiles=tiles, vector_axis=oc_block, unroll_axes=(p, oc_chunk),
                             parallel_depth=3, target=target, keep=keep + [out, anchor],
                             rolled_reduce=[ic_inner] if rolls_ic_inner(target) else ())
    _schedule_output_tile(s, anchor if reshaped else out, _tile_size(gemm), parallel, work)
    if reshaped:
        schedule_elementwise_loops(s, out, target)


def _tile_size(gemm) -> int:
    """m, from alpha^2 (the GEMM's first extent): alpha = m + 2."""
    return int(round(gemm.shape[0] ** 0.5)) - 2


def _parallel(st, head, parallel: bool, work) -> None:
    """`head` in parallel when `parallel`; with symbolic `work` (the GEMM's multiply-adds) only
    from the sizes where it is worth a launch (parallel_min_extent)."""
    if parallel:
        st.parallel(head, min_extent=0 if work is None else parallel_min_extent(work, head.extent))


def _schedule_input_tile(s, tile, parallel: bool, work=None):
    """V [alpha^2, P, C//ib, ib]: (tile p, ic_chunk) pairs outer, grid positions eps unrolled, the
    channel block ic_block vectorized."""
    st = s[tile]
    eps, p, ic_chunk, ic_block = st.op.axis
    st.reorder(p, ic_chunk, eps, ic_block)
    st.unroll(eps)
    st.vectorize(ic_block)
    _parallel(st, st.fuse(p, ic_chunk), parallel, work)


def _schedule_output_tile(s, t, m, parallel: bool, work=None):
    """[N, O//ob, OH, OW, ob]: rows and columns split by the tile size m and unrolled (the
    position in the tile selects its A^T rows at compile time), oc_block vectorized, (n,
    oc_chunk, oh_outer) in parallel."""
    st = s[t]
    n, oc_chunk, oh, ow, oc_block = st.op.axis
    oh_outer, oh_inner = st.split(oh, m)
    ow_outer, ow_inner = st.split(ow, m)
    st.reorder(n, oc_chunk, oh_outer, ow_outer, oh_inner, ow_inner, oc_block)
    st.unroll(oh_inner)
    st.unroll(ow_inner)
    st.vectorize(oc_block)
    _parallel(st, st.fuse(n, oc_chunk, oh_outer), parallel, work)
