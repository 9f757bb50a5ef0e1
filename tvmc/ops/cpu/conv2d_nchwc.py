"""x86 schedule for blocked conv2d (NCHW[x]c data, TVM's topi/x86/conv2d_avx_common.py): an output
tile of `tile_ow` columns x `oc_bn` channels lives in vector registers (one register per column,
the oc_bn axis as its lanes: 16 lanes = one zmm with AVX-512); the reduction runs over
(ic_outer, kh, kw, ic_inner), ic_inner and kw unrolled as the knobs say, each step one weight
vector load and `tile_ow` multiply-adds with the input element broadcast from memory; the
elementwise epilogue runs on the tile; (n, oc_chunk, oh) are fused into the parallel loop. Grouped
convs (group_conv2d_nchwc.cpu, TVM's topi/x86/group_conv2d.py) run the same tile over one
group's input blocks, each output channel block reading the blocks of its group. The
padded input is materialized once (NCHW[x]c rows in parallel, the block vectorized); depthwise
tiles pad their own input windows instead (tiling.pad_per_tile).

Knobs:
  tile_ow    output columns per register tile (a divisor of OW, or the fallback's value; a tile
             that does not divide OW computes its last, partial tile under a guard).
  unroll_ic  unroll the ic_inner reduction loop (oc_bn x tile_ow x ic_bn straight-line FMAs).
  unroll_kw  unroll the kw reduction loop (each copy holds the ic_inner loop).
  tile_oh    output rows per register tile (1 to 4; a partial last tile runs guarded): the tile holds
             tile_oh x tile_ow accumulators, which lets narrow layers (OW = 7 or 14) keep enough
             independent FMAs in flight; 1 keeps the rows in the parallel loop.
  reorder_kernel_first  (not depthwise, kernels larger than 1x1) run the reduction as (kh, kw,
             ic_outer, ic_inner) instead of (ic_outer, kh, kw, ic_inner): the weights of one
             kernel tap for all input channels are read together, the input by channel planes.
  tile_oc    (not depthwise) output channel blocks per register tile (a divisor of O // oc_bn, for
             a grouped conv of (O/g) // oc_bn so that the tile stays within one group, up to
             MAX_TILE_OC, plus the fallback's value, unrolled): each broadcast input element
             multiplies tile_oc weight vectors, the tile holds tile_oc x tile_oh x tile_ow
             accumulators.

Fallback heuristic (from the target descriptor and its ISA's fma_scalar_operand):
  tile_ow   = R accumulators at most (accumulator_registers): num_vector_registers - 4 where the
              FMA takes the input scalar from memory or from a broadcast register loaded just
              ahead of it (x86 AVX-512: 32 registers -> 28, AVX2: 16 -> 12; the 4 left hold the
              weight vector and temporaries); where it takes a lane of a vector register (NEON's
              by-element fmla), each column's input scalar is loaded into a register of its own
              for the whole ic_inner step, which LLVM unrolls with its ic_bn weight vectors, so
              R = (num_vector_registers - 4 - ic_bn) // 2 (NEON, ic_bn = 4: 12; with R = 28 the
              hot loops of 6 of ResNet-18's 11 distinct convolutions spilled). Then: OW itself
              when OW <= R, else the
              largest divisor of OW <= R when it is >= R/2, else the T in [R/2, R] that wastes the
              fewest columns in the guarded last tile (ties: the largest T), e.g. OW=56 -> 28,
              OW=55 -> 28 (one wasted column, instead of the divisor 11), OW=109 (prime) -> 22;
  unroll_ic = False: measured on AVX-512 (Sapphire Rapids, one thread), unrolling ic_inner moves
              single layers by -10%..+10% and whole networks by nothing measurable, but makes the
              kernels 5x slower to compile (16 x 28 FMAs of straight-line code per kernel);
  tile_oh   = on x86 (not depthwise), the most rows (up to 4 and OH) whose tile_oc x tile_oh x
              tile_ow accumulators fit R (fallback_tile_oh); 1 elsewhere, as TVM's one-row
              conv2d_NCHWc tile. On AVX-512 the narrow layers take it: ResNet's 7 x 7 layers (2, 7)
              -> two rows of (2, 7), 28 accumulators, each weight vector loaded for 14 multiply-adds
              instead of 7 (Sapphire Rapids, one thread, kernel alone: 512 channels 3x3 119 -> 131
              GFLOP/s; at 4 x 4 86 -> 107, at 2 x 2 35 -> 48; ResNet-50 68.8 -> 64.9 ms, ResNet-18
              24.5 -> 23.7, Inception v1 -1%; at two threads within noise). Layers of 14 columns
              or more keep one row ((2, 14) is 28 already: two rows of it spilled, 152 -> 72).
              Grouped convs too: ShuffleNet's 544-channel g = 4 conv at 7 x 7 (136 channels per
              group in blocks of 8, an odd 17 blocks: tile_oc 1) (1, 7) -> four rows of (1, 7),
              the last three guarded (Zen 4, one thread, kernel alone: 94 -> 105 GFLOP/s).
  reorder_kernel_first = False (TVM's order);
  tile_oc   = on x86 ("memory" and "register" operands), 2 where the output has an even number of
              channel blocks, the two blocks' tile_ow divides OW (AVX2, OW = 7: (2, 4) with a
              guarded partial tile ran 15% slower than (1, 7)), and two blocks give more
              multiply-adds per loaded operand than one
              (tile_oc x useful columns / (tile_oc + tile_ow)), with tile_ow then chosen as above for
              R // 2 accumulators per block: each broadcast input element feeds two FMAs in a row
              (the accumulator's unrolled loops run (oh, ow, oc_chunk, oc_block), so the broadcast
              register dies right after its two uses; with oc_chunk outermost LLVM loaded all
              tile_ow broadcasts ahead and spilled the accumulators: 83 vs 174 GFLOP/s). Measured
              on Sapphire Rapids, one thread, kernel alone: ResNet-18's 3x3 and strided 1x1 layers
              (1, 28) or (1, 14) -> (2, 14): 146 -> 170, 148 -> 174, 127 -> 158, 128 -> 161 GFLOP/s
              (AVX-512, peak 209); AVX2 (1, 8) -> (2, 4) 84 -> 93, (1, 7) -> (2, 4) 80 -> 97 on the
              1x1 one; (4, 7) was slower than (2, 14) on every layer tried (97 vs 170 at 56x56).
              Elsewhere 1, except where the scalar is a splat (fma_scalar_operand "splat": wasm simd128, no
              FMA, no broadcast memory operand, and every splat's address computed by scalar
              instructions of the engine's code): there tile_oc and tile_ow are chosen together
              by fallback_register_tile, for the most multiply-adds per loaded operand (first
              measured in Node 20 on ResNet-18's 3x3 layers: 56x56x64 one block -> (4, 4) 13.1 ->
              10.1 ms; MobileNetV2 35 -> 28 ms). V8 (TurboFan) schedules the loads of a basic
              block ahead of its arithmetic, so every weight vector and splat of one reduction
              step is live at once beside the accumulators: the tile must fit tile_oc x tile_ow +
              tile_oc + tile_ow <= num_vector_registers - reserved_vector_registers, and the
              ic_inner loop stays a loop (rolls_ic_inner; unrolled by LLVM, its ic_bn steps made
              one block and spilled: SqueezeNet's last 1x1 conv, (1, 13) unrolled, loaded 13
              splats, 4 weight vectors and kept 5 of its 13 accumulators on the stack). Measured
              in Node 20 (one thread, interleaved, load average 3 to 5 from other processes):
              that 1x1 layer (5, 1) rolled 10.8 ms, (1, 13) unrolled 13.6; whole models, old ->
              this rule: MobileNetV2 44.6 -> 35.8 ms, SqueezeNet 54.5 -> 41.4, ResNet-18 172 ->
              126 (with the Winograd GEMM, which shares this tile and rolls its ic_inner too).
              (On x86 AVX2, tile_oc = 2 or 4 was first measured 1.4x-2x slower on 3 of those 4
              layers: then the unrolled loops ran oc_chunk outermost and spilled, see above.)
  unroll_kw = False (as TVM's fallback; measured the same way: +9% on a 3x3 64-channel layer,
              -45% on the 7x7 stem with ic_bn = 1, no change on depthwise). With ic_bn = 1 (a
              one-channel stem) the kw loop is also kept rolled: LLVM unrolled its 3 steps
              and shared each broadcast input across the taps, ~27 live broadcasts beside 25
              accumulators, spilled (a CRNN's 1 -> 16 stem at 32 x 100: 15.2 -> 10.3 us).
"""

from __future__ import annotations

from tvmc.autotune.space import ConfigSpace
from tvmc.ops.cpu.injective import schedule_blocked_loops, schedule_elementwise_loops
from tvmc.ops.cpu.tiling import pad_per_tile, schedule_tiled_reduction

# Registers kept free of accumulators (weight vector, broadcast input, spills of addresses).
RESERVED_VECTOR_REGISTERS = 4
# Most output channel blocks (weight vectors) of one register tile.
MAX_TILE_OC = 4


def fallback_tile_ow(ow: int, regs: int) -> int:
    """The fallback tile_ow for OW output columns and `regs` accumulator registers (see above)."""
    if ow <= regs:
        return ow
    divisor = max(f for f in range(1, regs + 1) if ow % f == 0)
    if 2 * divisor >= regs:
        return divisor
    return min(range(max(1, regs // 2), regs + 1), key=lambda t: (-(-ow // t) * t - ow, -t))


def accumulator_registers(target, ic_bn: int) -> int:
    """R, the most accumulators of the fallback register tile for a target and an input channel
    block of `ic_bn` (see the module docstring): by the target's fma_scalar_operand."""
    free = target.num_vector_registers - RESERVED_VECTOR_REGISTERS
    if target.fma_scalar_operand == "lane":
        free = (free - ic_bn) // 2
    return max(1, free)


def rolls_ic_inner(target) -> bool:
    """Whether the ic_inner reduction loop of a register tile stays a loop (Stage.rolled, LLVM
    does not unroll it): where the ISA's fma_scalar_operand is "splat" (see the module docstring)."""
    return target.fma_scalar_operand == "splat"


def fallback_register_tile(ow: int, oc_blocks: int, target, ic_bn: int, vectors_per_block: int = 1) -> tuple:
    """(tile_oc, tile_ow), the fallback register tile for OW output columns, `oc_blocks` output
    channel blocks (O // oc_bn) and an input channel block of `ic_bn` (see the module docstring).
    Where the ISA's fma_scalar_operand is "splat", among tile_oc in the divisors of oc_blocks and
    tile_ow in the divisors of OW whose accumulators, weight vectors and splats fit the registers
    (tile_oc x tile_ow + tile_oc + tile_ow <= num_vector_registers - reserved_vector_registers),
    the tile with the most multiply-adds per loaded operand, tile_oc x tile_ow / (tile_oc +
    tile_ow) (ties: the first, fewest blocks), and for one block (1, fallback_tile_ow(OW,
    num_vector_registers)); where it is "memory" or "register" (x86), of (1, fallback_tile_ow(OW,
    R)) and, for an even oc_blocks, (2, fallback_tile_ow(OW, R // 2)) where that tile divides OW,
    the one with more multiply-adds per loaded operand; elsewhere (1, fallback_tile_ow(OW, R)).
    `vectors_per_block`: the vector registers one accumulator (oc_bn lanes) takes, oc_bn / the
    target's lanes where the block is wider than a register (the float stem of an int8 model,
    AlterOpLayout's qnn_conv2d_float, writes NCHW16c on AVX2: 16 accumulators of (1, 8) took
    all 16 ymm and spilled, 101 us against 70 us for (1, 4) at 64 x 64); R is divided by it
    on x86 and in the last case."""
    if target.fma_scalar_operand in ("memory", "register"):
        regs = max(1, accumulator_registers(target, ic_bn) // vectors_per_block)

        def score(tile):  # multiply-adds per loaded operand, counting the guarded tile's useful columns
            tile_oc, tile_ow = tile
            useful = ow / -(-ow // tile_ow)
            return tile_oc * useful / (tile_oc + tile_ow)

        tiles = [(t, fallback_tile_ow(ow, regs // t)) for t in (1, 2) if oc_blocks % t == 0]
        # two blocks only over whole tiles: with a guarded partial tile (AVX2, OW = 7: (2, 4)) the
        # pair ran 15% slower than one block's (1, 7)
        return max((tile for tile in tiles if tile[0] == 1 or ow % tile[1] == 0), key=score)
    if target.fma_scalar_operand != "splat":
        return 1, fallback_tile_ow(ow, max(1, accumulator_registers(target, ic_bn) // vectors_per_block))
    if oc_blocks == 1:  # (depthwise: its input is a vector load, not a splat) the accumulators alone
        return 1, fallback_tile_ow(ow, target.num_vector_registers)
    budget = target.num_vector_registers - target.reserved_vector_registers
    best, best_score = (1, 1), 0.5
    for tile_oc in (v for v in range(1, oc_blocks + 1) if oc_blocks % v == 0 and 2 * v + 1 <= budget):
        tile_ow = max(f for f in range(1, ow + 1) if ow % f == 0 and tile_oc * f + tile_oc + f <= budget)
        score = tile_oc * tile_ow / (tile_oc + tile_ow)
        if score > best_score:
            best, best_score = (tile_oc, tile_ow), score
    return best


def conv2d_nchwc_buckets(workload, target, var, ow) -> list:
    """Where the size buckets (tvmc.tir.buckets) of a conv2d_nchwc whose output width `ow` (an
    expression of graph SizeVar `var` alone, nondecreasing in it) is symbolic start, as values of
    `var`: where OW reaches each width from 2 to 8 and the fallback tile_ow of the upper-bound
    `workload`. Below the bound's tile every column would fall in the guarded partial tile; each
    bucket takes the fallback of its own upper bound instead (OW itself up to R columns), so the
    narrow widths of a CRNN's last layers run a tile of exactly their width (conv stack at width
    16, one thread: no buckets 97 us, buckets at 8 and the tile 58, these 48; static 38 with
    Winograd). The starts that fall inside var's range."""
    grouped = dict(workload[-1]).get("groups", 1) != 1
    tile_ow = conv2d_nchwc_config(workload, target).fallback_config()["tile_ow"] if not grouped else \
        group_conv2d_nchwc_config(workload, target).fallback_config()["tile_ow"]
    _, weight = workload[:2]
    return width_bucket_starts(var, ow, register_tile_widths(tile_ow, accumulator_registers(target, weight[4])))


def register_tile_widths(tile: int, regs: int) -> set:
    """The widths at which size buckets of a register-tiled axis start (conv2d_nchwc_buckets,
    conv2d_winograd_buckets): every width from 2 to 9, then 13, 17, ... up to R + 1 (R = `regs`, the
    accumulators of a register tile), and `tile`, the fallback tile of the range's upper bound.
    Each bucket takes the tile of its own upper bound (the axis itself up to R): buckets [9, 12],
    [13, 16], ..., [R - 3, R] compute at most 3 columns under the guard, none at a multiple of 4.
    With buckets only up to the bound's tile (16 at 1024 tiles), 20 tiles ran as two of 16 (a CRNN
    at width 37: range / static 1.33, now 1.04)."""
    return {*range(2, 10), *range(13, regs + 2, 4), tile}


def width_bucket_starts(var, extent, widths) -> list:
    """The values of graph SizeVar `var` at which `extent` (an expression of `var` alone,
    nondecreasing in it) first reaches each of `widths`, sorted, those inside (var.lo, var.hi]:
    the bucket starts of a register-tiled axis whose tile is chosen per bucket."""
    from tvmc.graph import symbolic

    starts = set()
    for width in sorted(widths):
        first = next((v for v in range(var.lo, var.hi + 1) if symbolic.substitute(extent, {var.name: v}) >= width),
                     None)
        if first is not None and var.lo < first <= var.hi:
            starts.add(first)
    return sorted(starts)


def conv2d_nchwc_config(workload, target) -> ConfigSpace:
    """Config space of nn.conv2d_nchwc for workload (data shape, weight shape, out shape, dtype, attrs):
    tile_ow among the divisors of OW up to num_vector_registers and every width in [R/2, R]
    below OW (partial last tile; R = accumulator_registers), unroll_ic, unroll_kw, tile_oh in
    1..4, and without groups tile_oc (divisors of O // oc_bn up to MAX_TILE_OC) and, for kernels
    larger than 1x1, `reorder_kernel_first`; fallbacks by fallback_register_tile."""
    _, weight, out = workload[:3]
    _, oc_chunk, oh, ow, _ = out
    _, _, kh, kw, ic_bn, oc_bn = weight
    grouped = dict(workload[-1]).get("groups", 1) != 1
    vectors = max(1, oc_bn // target.vector_lanes(workload[3]))
    tile_oc, tile_ow = fallback_register_tile(ow, 1 if grouped else oc_chunk, target, ic_bn, vectors)
    tile_oh = 1 if grouped else fallback_tile_oh(oh, tile_oc * tile_ow * vectors, target, ic_bn)
    space = _register_tile_knobs(ow, oh, tile_ow, target, ic_bn, tile_oh)
    if not grouped:
        space.define_knob("tile_oc", [f for f in range(1, MAX_TILE_OC + 1) if oc_chunk % f == 0], fallback=tile_oc)
        if kh * kw > 1:
            space.define_knob("reorder_kernel_first", [False, True], fallback=False)
    return space


def group_conv2d_nchwc_config(workload, target) -> ConfigSpace:
    """Config space of a grouped (not depthwise) nn.conv2d_nchwc (TVM's group_conv2d_NCHWc): the
    knobs of conv2d_nchwc_config, with tile_oc among the divisors (up to MAX_TILE_OC) of the output
    channel blocks of one group ((O/g) // oc_bn), so that one register tile reads one group's
    input; fallbacks by fallback_register_tile on those blocks (1 block except where the scalar
    operand is a splat) and fallback_tile_oh for their rows."""
    _, weight, out = workload[:3]
    _, oc_chunk, oh, ow, _ = out
    _, _, kh, kw, ic_bn, _ = weight
    per_group = oc_chunk // dict(workload[-1])["groups"]
    tile_oc, tile_ow = fallback_register_tile(ow, per_group, target, ic_bn)
    space = _register_tile_knobs(ow, oh, tile_ow, target, ic_bn, fallback_tile_oh(oh, tile_oc * tile_ow, target, ic_bn))
    space.define_knob("tile_oc", [f for f in range(1, MAX_TILE_OC + 1) if per_group % f == 0], fallback=tile_oc)
    if kh * kw > 1:
        space.define_knob("reorder_kernel_first", [False, True], fallback=False)
    return space


def fallback_tile_oh(oh: int, row_accumulators: int, target, ic_bn: int) -> int:
    """The fallback tile_oh (see the module docstring): on x86 (fma_scalar_operand "memory" or
    "register"), the most output rows, up to 4 and OH, whose tile of `row_accumulators` (tile_oc x
    tile_ow registers per row) fits the R accumulators; elsewhere 1."""
    if target.fma_scalar_operand not in ("memory", "register"):
        return 1
    regs = accumulator_registers(target, ic_bn)
    return max(t for t in range(1, min(oh, 4) + 1) if t == 1 or t * row_accumulators <= regs)


def _register_tile_knobs(ow, oh, tile_ow, target, ic_bn, tile_oh=1) -> ConfigSpace:
    """tile_ow (fallback `tile_ow`), unroll_ic, unroll_kw and tile_oh (fallback `tile_oh`) of a
    conv2d_nchwc config space."""
    regs = accumulator_registers(target, ic_bn)
    space = ConfigSpace()
    divisors = [f for f in range(1, min(ow, target.num_vector_registers) + 1) if ow % f == 0]
    partial = [t for t in range(max(1, regs // 2), min(regs, ow - 1) + 1) if ow % t]
    space.define_knob("tile_ow", sorted(divisors + partial), fallback=tile_ow)
    space.define_knob("unroll_ic", [False, True], fallback=False)
    space.define_knob("unroll_kw", [False, True], fallback=False)
    space.define_knob("tile_oh", list(range(1, min(oh, 4) + 1)), fallback=tile_oh)
    return space


def schedule_conv2d_nchwc(s, out, anchor, cfg, target):
    """Schedule a fused nn.conv2d_nchwc (anchor, [N, O//ob, OH, OW, ob]) + elementwise epilogue (out)."""
    pad = next((t for t in anchor.op.input_tensors() if t.op is not None), None)
    depthwise = len(anchor.op.reduce_axis) == 2
    if pad is not None and not depthwise:
        schedule_blocked_loops(s, pad, target)
    _schedule_register_tile(s, out, anchor, cfg, target, pad)
    if pad is not None and depthwise:
        # with only KH x KW multiply-adds per loaded vector, a padded copy of the whole input
        # cost more than the convolution (MobileNetV2's 112x112 stride-2 layer: 0.59 -> 0.30 ms
        # on one thread)
        pad_per_tile(s, pad)


def schedule_conv2d_nchwc_im2col(s, out, anchor, cfg, target):
    """Schedule the im2col + GEMM form (nn_conv2d_nchwc.conv2d_nchwc_im2col): the im2col stage
    [N, OH, C//ib, KH, KW, ib, OW] materialized once (padding inlined into it, rows in parallel,
    OW as the vector loop), then the same register tile and knobs as the direct form."""
    col = next(t for t in anchor.op.input_tensors() if t.op is not None)
    schedule_elementwise_loops(s, col, target)
    _schedule_register_tile(s, out, anchor, cfg, target, col)


def _schedule_register_tile(s, out, anchor, cfg, target, keep):
    """The tile_oh x tile_ow x oc_bn register tile shared by both forms (see the module docstring);
    `keep` is the materialized input stage (padded data or im2col), or None."""
    n, oc_chunk, oh, ow, oc_block = anchor.op.axis
    # reduce axes as conv2d_nchwc declares them: (ic_outer, kh, kw, ic_inner), depthwise (kh, kw)
    if len(anchor.op.reduce_axis) == 4:
        ic_outer, kh, kw, ic_inner = anchor.op.reduce_axis
        unroll = [ic_inner] if cfg["unroll_ic"] else []
        rolled = [ic_inner] if not cfg["unroll_ic"] and rolls_ic_inner(target) else []
        if ic_inner.extent == 1 and not cfg["unroll_kw"]:  # a one-channel stem: see the module docstring
            rolled.append(kw)
    else:
        kh, kw = anchor.op.reduce_axis
        unroll, rolled = [], []
    unroll += [kw] if cfg["unroll_kw"] else []
    tiles = {ow: cfg["tile_ow"], oc_block: oc_block.extent}
    if cfg.get("tile_oh", 1) > 1:  # a one-row tile leaves OH whole in the outer loops
        tiles[oh] = cfg["tile_oh"]
    unroll_axes = (oh, ow)
    if cfg.get("tile_oc", 1) > 1:  # one channel block leaves O//ob whole in the outer loops
        tiles[oc_chunk] = cfg["tile_oc"]
        unroll_axes = (oh, ow, oc_chunk)
    order = (kh, kw, ic_outer, ic_inner) if cfg.get("reorder_kernel_first", False) else None
    schedule_tiled_reduction(s, out, anchor, tiles=tiles, vector_axis=oc_block, unroll_axes=unroll_axes,
                             unroll_reduce=unroll, reduce_order=order, parallel_depth=3, target=target,
                             keep=[keep] if keep is not None else (), rolled_reduce=rolled)


