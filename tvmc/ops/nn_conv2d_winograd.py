"""Winograd 3x3 convolution on channel-blocked data (Lavin & Gray 2016, "Fast Algorithms for
Convolutional Neural Networks"; TVM's conv2d_winograd_without_weight_transform): NCHW[x]c data,
the weight transformed before the conv runs, NCHW[y]c output. The weight transform is either done
at compile time (winograd_weight_transform, numpy) or is the op nn.winograd_weight_transform (TVM's
conv2d_winograd_weight_transform), a kernel that the executors run once when they load the
artifact (OpDef.load_time), so that mod.params holds the 3x3 weight and not the (m+2)^2 / 9 times
larger transform.

For an output tile of m x m pixels and a 3x3 kernel, alpha = m + 2 and
    Y = A^T [ (G g G^T) * (B^T d B) ] A
where d is the alpha x alpha input tile, g the 3x3 kernel, * the elementwise product summed over
input channels (a batched GEMM, one per tile position (eps, nu) of the alpha x alpha grid).
F(2x2, 3x3) takes 16 multiplies per 4 outputs and channel pair (direct: 36); F(4x4, 3x3) 36 per
16 (direct: 144), with larger transform constants, so less precision.
"""

from __future__ import annotations

import math

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.conv2d_winograd import conv2d_winograd_config, schedule_conv2d_winograd
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.layout import channel_block
from tvmc.ops.nn_conv2d_nchwc import _reference as conv2d_nchwc_reference
from tvmc.ops.nn_conv2d_nchwc import pack_weight, unpack_weight
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.ops.transform import pad_compute

# (B^T, G, A^T) of F(m x m, 3 x 3) (Lavin & Gray, section 4.1 and 4.2), by output tile size m.
WINOGRAD_MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}


def winograd_weight_transform(weight: np.ndarray, tile_size: int, ic_bn: int, oc_bn: int) -> np.ndarray:
    """numpy, at compile time: OIHW 3x3 weight [O, C, 3, 3] -> U = G g G^T per channel pair, blocked
    as [alpha*alpha, O//oc_bn, C//ic_bn, ic_bn, oc_bn] (alpha = tile_size + 2, the grid position
    eps*alpha + nu first), in the weight's dtype (computed in float64).
    Raises ValueError for a kernel other than 3x3 or a block that does not divide its channels."""
    if weight.shape[2:] != (3, 3):
        raise ValueError(f"winograd needs a 3x3 kernel, got weight {list(weight.shape)}")
    g = WINOGRAD_MATRICES[tile_size][1]
    u = np.einsum("ak,ockl,bl->aboc", g, weight.astype(np.float64), g)   # [alpha, alpha, O, C]
    o, c = weight.shape[:2]
    if o % oc_bn or c % ic_bn:
        raise ValueError(f"weight {list(weight.shape)} does not divide into blocks ic={ic_bn}, oc={oc_bn}")
    blocked = u.reshape(-1, o // oc_bn, oc_bn, c // ic_bn, ic_bn).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(blocked.astype(weight.dtype))


def _weight_from_transform(u: np.ndarray, tile_size: int) -> np.ndarray:
    """numpy, for the op's reference (tests, the graph interpreter, FoldConstant): the OIHW 3x3
    weight whose transform is `u` (G has full column rank, so g = G^+ U G^+T recovers it up to
    rounding)."""
    _, oco, ico, ib, ob = u.shape
    alpha = tile_size + 2
    grid = u.astype(np.float64).transpose(0, 1, 4, 2, 3).reshape(alpha, alpha, oco * ob, ico * ib)
    gi = np.linalg.pinv(WINOGRAD_MATRICES[tile_size][1])
    return np.einsum("ka,abOC,lb->OCkl", gi, grid, gi)


def _type(in_types, attrs):
    d, w = in_types[0], in_types[1]
    m = attrs["tile_size"]
    if m not in WINOGRAD_MATRICES:
        raise ValueError(f"winograd tile_size {m}: supported {sorted(WINOGRAD_MATRICES)}")
    if len(d.shape) != 5 or len(w.shape) != 5:
        raise ValueError(f"conv2d_winograd_nchwc needs 5-D data and weight, got {list(d.shape)} and {list(w.shape)}")
    n, ico, h, wd, ic_bn = d.shape
    a2, oco, wico, w_ic_bn, oc_bn = w.shape
    if a2 != (m + 2) ** 2 or (wico, w_ic_bn) != (ico, ic_bn):
        raise ValueError(f"transformed weight {list(w.shape)} does not match data {list(d.shape)} "
                         f"and tile_size {m}")
    if channel_block(attrs["out_layout"]) != oc_bn:
        raise ValueError(f"out_layout {attrs['out_layout']} does not match the weight's output block {oc_bn}")
    pt, pl, pb, pr = attrs["padding"]
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    if oh <= 0 or ow <= 0:
        raise ValueError(f"kernel 3x3 does not fit input {h}x{wd}")
    return TensorType((n, oco, oh, ow, oc_bn), d.dtype)


def _transform_terms(matrix: np.ndarray, row_a: int, row_b: int, load):
    """sum_{i,j} matrix[row_a, i] * matrix[row_b, j] * load(i, j), with only the nonzero
    coefficients and +-1 as additions (the transforms are unrolled per grid position)."""
    expr = None
    for i in range(matrix.shape[1]):
        for j in range(matrix.shape[1]):
            c = float(matrix[row_a, i] * matrix[row_b, j])
            if c == 0.0:
                continue
            term = load(i, j)
            if expr is None:
                expr = term if c == 1.0 else term * te.const(c, term.dtype)
                continue
            if abs(c) != 1.0:
                term = term * te.const(abs(c), term.dtype)
            expr = expr + term if c > 0 else expr - term
    return expr


def _by_position(index, exprs):
    """exprs[index] for an index loop the schedule unrolls (the selects fold to one branch)."""
    out = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        out = te.select(te.eq(index, k), exprs[k], out)
    return out


def conv2d_winograd_nchwc(data, weight, padding, tile_size):
    """Tensor expression of a Winograd F(m x m, 3x3) conv2d (stride 1, dilation 1, groups 1).

    data [N, C//ib, H, W, ib], weight U [alpha^2, O//ob, C//ib, ib, ob] (winograd_weight_transform)
    -> out [N, O//ob, OH, OW, ob], the data's dtype; m = tile_size, alpha = m + 2,
    P = N * ceil(OH/m) * ceil(OW/m) tiles, tile p = (n, th, tw). Stages:
      pad_data   [N, C//ib, m*nH + 2, m*nW + 2, ib]  zeros around (and past the last partial tile)
      input_tile [alpha^2, P, C//ib, ib]   V = B^T d B per tile and channel
      batch_gemm [alpha^2, O//ob, P, ob]   M[e, o, p] = sum_c U[e, o, c] * V[e, p, c] (reduce
                                            axes ic_outer, ic_inner)
      output     A^T M A of the tile holding (y, x) (the op's result, fused with the epilogue)
    """
    n, ico, h, w, ic_bn = data.shape
    a2, oco, _, _, oc_bn = weight.shape
    m = tile_size
    alpha = m + 2
    bt, _, at = WINOGRAD_MATRICES[m]
    pt, pl, pb, pr = padding
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n * nh * nw
    padded = pad_compute(data, ((0, 0), (0, 0), (pt, pb + nh * m - oh), (pl, pr + nw * m - ow), (0, 0)),
                         name="pad_data")

    def input_tile(e, p, c, ci):
        nn, th, tw = p // (nh * nw), (p // nw) % nh, p % nw
        exprs = [_transform_terms(bt, k // alpha, k % alpha,
                                  lambda i, j: padded[nn, c, th * m + i, tw * m + j, ci]) for k in range(a2)]
        return _by_position(e, exprs)

    v = te.compute((a2, tiles, ico, ic_bn), input_tile, name="input_tile")
    rico, rici = te.reduce_axis(ico, "ic_outer"), te.reduce_axis(ic_bn, "ic_inner")
    gemm = te.compute((a2, oco, tiles, oc_bn),
                      lambda e, o, p, oi: te.sum(v[e, p, rico, rici] * weight[e, o, rico, rici, oi], [rico, rici]),
                      name="batch_gemm")

    def output(nn, o, y, x, oi):
        p = (nn * nh + y // m) * nw + x // m
        exprs = [_transform_terms(at, k // m, k % m, lambda i, j: gemm[i * alpha + j, o, p, oi]) for k in range(m * m)]
        return _by_position((y % m) * m + x % m, exprs)

    return te.compute((n, oco, oh, ow, oc_bn), output, name="conv2d_winograd_nchwc", tag="conv2d_winograd_nchwc")


def _reference(x, u, padding, tile_size, out_layout=None):
    """Recover the 3x3 weight from U and run the blocked direct reference."""
    w = _weight_from_transform(u, tile_size)
    packed = pack_weight(w, x.shape[4], u.shape[4])
    return conv2d_nchwc_reference(x, packed, (1, 1), padding, (1, 1))


def _compute(inputs, attrs, out_type):
    return conv2d_winograd_nchwc(inputs[0], inputs[1], attrs["padding"], attrs["tile_size"])


def _flops(workload) -> int:
    """2 x N x O x OH x OW x C x 9 for workload (data [N, C//ib, H, W, ib], U, out [N, O//ob, OH,
    OW, ob], ...): the direct 3x3 conv2d's multiply-adds (TVM's count for its Winograd
    templates), so that tuning and profiles rate both forms on one scale; the transforms and the
    GEMM do fewer."""
    data, _, out = workload[:3]
    return 2 * math.prod(out) * data[1] * data[4] * 9


# AlterOpLayout emits this op for CPU targets only (its rule: tvmc.ops.cpu.conv2d_winograd); the GPU
# family runs it, like nn.conv2d_nchwc, with the generic per-thread schedule.
register_op(OpDef("nn.conv2d_winograd_nchwc", _type, _reference, OpPattern.OUT_ELEMWISE_FUSABLE, _compute, {
    "cpu": [Implementation("conv2d_winograd_nchwc.cpu", schedule_conv2d_winograd,
                           config_space=conv2d_winograd_config)],
    "gpu": [Implementation("conv2d_winograd_nchwc.gpu", schedule_generic, config_space=generic_config)],
}, flops=_flops))


def _transform_type(in_types, attrs):
    w = in_types[0]
    m = attrs["tile_size"]
    if m not in WINOGRAD_MATRICES:
        raise ValueError(f"winograd tile_size {m}: supported {sorted(WINOGRAD_MATRICES)}")
    if len(w.shape) != 6 or tuple(w.shape[2:4]) != (3, 3):
        raise ValueError(f"winograd_weight_transform needs a packed 3x3 weight [O//ob, C//ib, 3, 3, ib, ob], "
                         f"got {list(w.shape)}")
    oco, ico, _, _, ib, ob = w.shape
    return TensorType(((m + 2) ** 2, oco, ico, ib, ob), w.dtype)


def winograd_weight_transform_compute(weight, tile_size):
    """Tensor expression of U = G g G^T per channel pair (Lavin & Gray, section 4.1).

    weight [O//ob, C//ib, 3, 3, ib, ob] (OIHW[ib]i[ob]o, nn.conv2d_nchwc's packing) -> U
    [alpha^2, O//ob, C//ib, ib, ob], alpha = tile_size + 2, the grid position eps * alpha + nu
    first: the layout nn.conv2d_winograd_nchwc takes. Computed in the weight's dtype with the
    nonzero terms of G unrolled per grid position (9 at most); equals winograd_weight_transform
    up to float rounding (it computes in float64)."""
    oco, ico, _, _, ib, ob = weight.shape
    alpha = tile_size + 2
    g = WINOGRAD_MATRICES[tile_size][1]

    def transform(e, o, c, ci, oi):
        exprs = [_transform_terms(g, k // alpha, k % alpha, lambda i, j: weight[o, c, i, j, ci, oi])
                 for k in range(alpha * alpha)]
        return _by_position(e, exprs)

    return te.compute((alpha * alpha, oco, ico, ib, ob), transform, name="winograd_weight_transform",
                      tag="winograd_weight_transform")


def _transform_reference(w, tile_size):
    return winograd_weight_transform(unpack_weight(w), tile_size, w.shape[4], w.shape[5])


def schedule_winograd_weight_transform(s, out, anchor, cfg, target):
    """CPU schedule of nn.winograd_weight_transform (no knobs: it runs once, at load time): the
    (oc_chunk, ic_chunk) pairs in parallel, grid positions unrolled (each selects its G rows at
    compile time), the output channel block vectorized (contiguous loads of the packed weight)."""
    st = s[out]
    e, o, c, ci, oi = st.op.axis
    st.reorder(o, c, ci, e, oi)
    st.unroll(e)
    st.vectorize(oi)
    st.parallel(st.fuse(o, c))


register_op(OpDef("nn.winograd_weight_transform", _transform_type, _transform_reference, OpPattern.OPAQUE,
                  lambda inputs, attrs, out_type: winograd_weight_transform_compute(inputs[0], attrs["tile_size"]),
                  {"cpu": [Implementation("winograd_weight_transform.cpu", schedule_winograd_weight_transform)],
                   "gpu": [Implementation("winograd_weight_transform.gpu", schedule_generic,
                                          config_space=generic_config)]},
                  foldable=False, load_time=True))
