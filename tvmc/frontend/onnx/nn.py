"""ONNX converters, nn group: convolution, dense/matmul, pooling, normalization, softmax, Einsum, Det."""

from __future__ import annotations

import collections

import numpy as np

from tvmc.frontend.onnx.common import auto_pads, is_const, norm_axis, prod, reshape, scalar
from tvmc.frontend.onnx.registry import converter
from tvmc.frontend.onnx.tensor import one_hot_mask


def _conv_operands(ctx, inputs, attrs, op_type: str, what: str, ranks=(3, 4)):
    """Shared start of Conv and ConvTranspose: (x, w, bias or None, number of spatial axes,
    kernel, strides, dilations, groups), all ints; raises the node's error for a missing
    input, a rank not in `ranks` (3: 1-D, 4: 2-D, 5: 3-D), or a kernel_shape that is not the
    weight's."""
    if len(inputs) < 2:
        raise ctx.error(f"{op_type} needs inputs X and W")
    x, w = inputs[0], inputs[1]
    rank = len(x.shape)
    if rank not in ranks or len(w.shape) != rank:
        dims = " and ".join(f"{r - 2}-D" for r in ranks)
        raise ctx.error(f"only {dims} {what}s are supported; input '{ctx.input_name(0)}' "
                        f"is {x.type}, weight {w.type}")
    n_sp = rank - 2
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ctx.error(f"kernel_shape {list(kernel)} does not match weight '{ctx.input_name(1)}' {w.type}")
    strides = tuple(int(v) for v in attrs.get("strides", [1] * n_sp))
    dilations = tuple(int(v) for v in attrs.get("dilations", [1] * n_sp))
    b = inputs[2] if len(inputs) > 2 else None
    return x, w, b, n_sp, kernel, strides, dilations, int(attrs.get("group", 1))


def _lift_1d(ctx, x, w):
    """1-D convolution operands as 2-D ones with H = 1: [N, C, W] -> [N, C, 1, W] (weight alike)."""
    return (reshape(ctx, x, (x.shape[0], x.shape[1], 1, x.shape[2])),
            reshape(ctx, w, (w.shape[0], w.shape[1], 1, w.shape[2])))


def _conv_epilogue(ctx, out, b, n_sp):
    """Add the bias [C] as [C, 1, ...] (folded when constant) and drop the H = 1 axis of a 1-D conv."""
    if b is not None:
        ones = (1,) * max(n_sp, 2)
        bias = ctx.derived(b, "bias", lambda v: v.reshape(-1, *ones)) if is_const(b) \
            else reshape(ctx, b, (b.shape[0],) + ones)
        out = ctx.call("add", [out, bias])
    if n_sp == 1:
        out = reshape(ctx, out, (out.shape[0], out.shape[1], out.shape[3]))
    return out


def conv2d_call(ctx, inputs, attrs, op: str = "nn.conv2d", op_type: str = "Conv", extra=()):
    """The 2-D convolution call of ONNX Conv's attributes (kernel_shape, strides, pads, auto_pad,
    dilations, group) on inputs [X, W, (B)]: `op`(X, W, *extra) with 1-D convs lifted to 2-D (H = 1).
    Returns (call [N, O, OH, OW], the bias input or None, number of spatial axes); the caller adds
    the bias and drops the H axis of a 1-D conv (_conv_epilogue). Shared by Conv and the quantized
    convolutions (qnn.conv2d, whose zero points are `extra`)."""
    x, w, b, n_sp, kernel, strides, dilations, groups = _conv_operands(ctx, inputs, attrs, op_type, "convolution")
    pads = auto_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations)
    if n_sp == 1:
        x, w = _lift_1d(ctx, x, w)
        strides, dilations, padding = (1, strides[0]), (1, dilations[0]), (0, pads[0], 0, pads[1])
    else:
        padding = (pads[0], pads[1], pads[2], pads[3])
    out = ctx.call(op, [x, w, *extra], {"strides": strides, "padding": tuple(map(int, padding)),
                                        "dilation": dilations, "groups": groups})
    return out, b, n_sp


@converter(1, 11, 22)
def Conv(ctx, node, inputs, attrs, opset):
    """ONNX Conv-1/11/22 -> nn.conv2d (+ add of the bias as [C,1,1]); 1-D convs run as 2-D with H=1."""
    out, b, n_sp = conv2d_call(ctx, inputs, attrs)
    return _conv_epilogue(ctx, out, b, n_sp)


@converter(1, 11, 22)
def ConvTranspose(ctx, node, inputs, attrs, opset):
    """ONNX ConvTranspose-1/11/22 -> nn.conv2d_transpose, 3-D -> nn.conv3d_transpose (+ add of the
    bias as [C,1,...]); 1-D runs as 2-D with H=1. output_shape (when given) and auto_pad SAME_*
    become explicit pads, as the ONNX reference does: total = s*(in-1) + output_padding +
    (k-1)*d + 1 - out, the larger half at the end for SAME_UPPER, at the beginning otherwise."""
    x, w, b, n_sp, kernel, strides, dilations, groups = _conv_operands(ctx, inputs, attrs, "ConvTranspose",
                                                                         "transposed convolution", (3, 4, 5))
    out_pad = tuple(int(p) for p in attrs.get("output_padding", [0] * n_sp))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    spatial = x.shape[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, spatial, out_pad, kernel, dilations)]
    if "output_shape" in attrs or (auto_pad in ("SAME_UPPER", "SAME_LOWER") and "pads" not in attrs):
        out_shape = [int(o) for o in attrs["output_shape"]] if "output_shape" in attrs \
            else [i * s for i, s in zip(spatial, strides)]
        out_shape = out_shape[-n_sp:]
        total = [f - o for f, o in zip(full, out_shape)]
        if auto_pad == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
    elif auto_pad in ("NOTSET", "VALID"):
        pads = [int(p) for p in attrs.get("pads", [0] * (2 * n_sp))] if auto_pad == "NOTSET" else [0] * (2 * n_sp)
    else:
        raise ctx.error(f"unknown auto_pad '{auto_pad}'")
    if len(pads) != 2 * n_sp:
        raise ctx.error(f"pads {pads} must have {2 * n_sp} values")
    if n_sp == 1:
        x, w = _lift_1d(ctx, x, w)
        strides, dilations, out_pad = (1,) + strides, (1,) + dilations, (0,) + out_pad
        padding = (0, pads[0], 0, pads[1])
    else:
        padding = tuple(pads)
    out = ctx.call("nn.conv3d_transpose" if n_sp == 3 else "nn.conv2d_transpose", [x, w], {
        "strides": strides, "padding": tuple(padding), "dilation": dilations, "output_padding": out_pad,
        "groups": groups})
    return _conv_epilogue(ctx, out, b, n_sp)


@converter(19, 22)
def DeformConv(ctx, node, inputs, attrs, opset):
    """ONNX DeformConv-19/22, 2-D (X [N,C,H,W], W [O,C/group,KH,KW], offset [N,G*KH*KW*2,OH,OW],
    optional B [O] and mask [N,G*KH*KW,OH,OW]; G = offset_group) as a bilinear gather and a
    grouped matmul, as the ONNX reference builds it on GridSample:
    1. the sampling point of tap (kh, kw) of output (oh, ow) is (oh*sh - pad_top + kh*dh + dy,
       ow*sw - pad_left + kw*dw + dx); normalized for image.grid_sample (linear, zeros,
       align_corners=0: g = (2p + 1) / size - 1) it is offset * (2 / size) + a constant table;
    2. image.grid_sample of X as [N*G, C/G, H, W] at those points (a corner outside reads 0),
       times the mask: the columns [N, C*KH*KW, OH*OW] of an im2col;
    3. nn.matmul of W as [group, O/group, C/group*KH*KW] with the columns as
       [N, group, C/group*KH*KW, OH*OW], reshaped to [N, O, OH, OW], plus the bias."""
    if len(inputs) < 3:
        raise ctx.error("DeformConv needs inputs X, W and offset")
    x, w, offset = inputs[0], inputs[1], inputs[2]
    if len(x.shape) != 4 or len(w.shape) != 4 or len(offset.shape) != 4:
        raise ctx.error(f"only 2-D deformable convolutions are supported; input '{ctx.input_name(0)}' is {x.type}, "
                        f"weight {w.type}, offset {offset.type}")
    n, c, h, wd = x.shape
    o, cpg, kh, kw = w.shape
    groups, og = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    if tuple(int(k) for k in attrs.get("kernel_shape", (kh, kw))) != (kh, kw):
        raise ctx.error(f"kernel_shape {list(attrs['kernel_shape'])} does not match weight {w.type}")
    sh, sw = (int(v) for v in attrs.get("strides", (1, 1)))
    dh, dw = (int(v) for v in attrs.get("dilations", (1, 1)))
    pt, pl, pb, pr = (int(v) for v in attrs.get("pads", (0, 0, 0, 0)))
    oh, ow = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if cpg * groups != c or o % groups or c % og:
        raise ctx.error(f"channels {c} do not match weight {w.type} with group={groups}, offset_group={og}")
    if tuple(offset.shape) != (n, og * kh * kw * 2, oh, ow):
        raise ctx.error(f"offset '{ctx.input_name(2)}' {offset.type} must be [{n},{og * kh * kw * 2},{oh},{ow}]")
    mask = inputs[4] if len(inputs) > 4 else None
    if mask is not None and tuple(mask.shape) != (n, og * kh * kw, oh, ow):
        raise ctx.error(f"mask '{ctx.input_name(4)}' {mask.type} must be [{n},{og * kh * kw},{oh},{ow}]")
    dt = np.dtype(x.dtype)
    ys = np.arange(oh)[None, :] * sh - pt + np.arange(kh)[:, None] * dh  # [KH, OH]
    xs = np.arange(ow)[None, :] * sw - pl + np.arange(kw)[:, None] * dw  # [KW, OW]
    base = np.empty((kh, kw, 2, oh, ow), np.float64)
    base[:, :, 0] = ys[:, None, :, None]
    base[:, :, 1] = xs[None, :, None, :]
    size = np.array([h, wd], np.float64).reshape(2, 1, 1)
    grid = reshape(ctx, offset, (n, og, kh, kw, 2, oh, ow))
    grid = ctx.call("add", [ctx.call("multiply", [grid, ctx.const((2.0 / size).astype(dt), "grid_scale")]),
                            ctx.const(((2.0 * base + 1.0) / size - 1.0).astype(dt), "grid_base")])
    grid = ctx.call("transpose", [grid], {"axes": (0, 1, 2, 3, 5, 6, 4)})
    grid = ctx.call("take", [grid, ctx.const(np.array([1, 0], np.int64), "xy")], {"axis": 6})  # (x, y) order
    grid = reshape(ctx, grid, (n * og, kh * kw * oh, ow, 2))
    cols = ctx.call("image.grid_sample", [reshape(ctx, x, (n * og, c // og, h, wd)), grid],
                    {"mode": "linear", "padding_mode": "zeros", "align_corners": 0})
    if mask is not None:
        cols = ctx.call("multiply", [cols, reshape(ctx, mask, (n * og, 1, kh * kw * oh, ow))])
    cols = reshape(ctx, cols, (n, groups, cpg * kh * kw, oh * ow))
    out = ctx.call("nn.matmul", [reshape(ctx, w, (groups, o // groups, cpg * kh * kw)), cols])
    out = reshape(ctx, out, (n, o, oh, ow))
    return _conv_epilogue(ctx, out, inputs[3] if len(inputs) > 3 else None, 2)


@converter(1, 6, 7, 9, 14, 15)
def BatchNormalization(ctx, node, inputs, attrs, opset):
    """ONNX BatchNormalization-1..15 (inference mode) -> nn.batch_norm(axis=1)."""
    if attrs.get("training_mode", 0):
        raise ctx.error("training_mode=1 is not supported (inference only)")
    if len(inputs) != 5:
        raise ctx.error("BatchNormalization needs 5 inputs (X, scale, B, mean, var)")
    x = inputs[0]
    if len(x.shape) < 2:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must have rank >= 2")
    c = x.shape[1]
    for i, p in enumerate(inputs[1:], 1):
        if tuple(p.shape) != (c,):
            # spatial=0 (opset < 9) allows per-activation [C,H,W] statistics
            raise ctx.error(f"input '{ctx.input_name(i)}' {p.type} must be [{c}] (per-channel statistics)")
    return ctx.call("nn.batch_norm", inputs, {"epsilon": float(attrs.get("epsilon", 1e-5)), "axis": 1})


@converter(1, 9, 13)
def MatMul(ctx, node, inputs, attrs, opset):
    """ONNX MatMul (numpy matmul semantics).

    Constant 2-D B -> nn.dense(A[M,K], transpose(B)[N,K]) (A of rank > 2 is flattened to 2-D
    and reshaped back); otherwise nn.matmul. 1-D operands are promoted as numpy does.
    """
    a, b = inputs[0], inputs[1]
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise ctx.error(f"MatMul operands must have rank >= 1, got {a.type} and {b.type}")
    a1, b1 = len(a.shape) == 1, len(b.shape) == 1
    if a1 and b1:  # dot product: a scalar result
        return ctx.call("sum", [ctx.call("multiply", [a, b])], {"axis": (0,), "keepdims": 0})
    if a1:
        a = reshape(ctx, a, (1, a.shape[0]))
    if b1:
        b = reshape(ctx, b, (b.shape[0], 1))
    if is_const(b) and len(b.shape) == 2 and a.dtype == "float32":
        k, n = b.shape
        w = ctx.derived(b, "weight_t", lambda v: np.ascontiguousarray(v.T))
        lead = tuple(a.shape[:-1])
        a2 = reshape(ctx, a, (prod(lead), k)) if len(lead) != 1 else a
        out = ctx.call("nn.dense", [a2, w])
        out_shape = lead + (n,)
    else:
        out = ctx.call("nn.matmul", [a, b])
        out_shape = tuple(out.shape)
    if a1:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if b1:
        out_shape = out_shape[:-1]
    return reshape(ctx, out, out_shape)


@converter(1, 6, 7, 9, 11, 13)
def Gemm(ctx, node, inputs, attrs, opset):
    """ONNX Gemm: Y = alpha * A' @ B' + beta * C -> nn.dense(A', W[N,K]) (+ multiply, add).

    Constant transposes and the alpha/beta scales are folded into new Constants at import;
    a non-constant B that needs transposing goes through the `transpose` op.
    """
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"Gemm operands must be 2-D, got {a.type} and {b.type}")
    if trans_a:
        a = ctx.derived(a, "a_t", lambda v: np.ascontiguousarray(v.T)) if is_const(a) \
            else ctx.call("transpose", [a], {"axes": (1, 0)})
    scaled = False
    if is_const(b):
        if not trans_b or alpha != 1.0:
            suffix = "weight_t" if not trans_b else "weight"
            suffix += "" if alpha == 1.0 else "_scaled"

            def weight(v, t=not trans_b, s=alpha):
                w = v.T if t else v
                return np.ascontiguousarray(w * np.asarray(s, dtype=v.dtype) if s != 1.0 else w)
            w = ctx.derived(b, suffix, weight)
            scaled = alpha != 1.0
        else:
            w = b
    else:
        w = b if trans_b else ctx.call("transpose", [b], {"axes": (1, 0)})
    out = ctx.call("nn.dense", [a, w])
    if alpha != 1.0 and not scaled:
        out = ctx.call("multiply", [out, ctx.const(np.float32(alpha), "alpha")])
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ctx.derived(c, "bias_scaled", lambda v: v * np.asarray(beta, dtype=v.dtype)) if is_const(c) \
                else ctx.call("multiply", [c, ctx.const(np.float32(beta), "beta")])
        out = ctx.call("add", [out, c])
    return out


def _pool_common(ctx, inputs, attrs, opset, dilation_since):
    """Pooling attributes per spatial axis (1-D, 2-D or 3-D): (x, kernel, strides, dilations,
    pads in ONNX order, ceil_mode)."""
    x = inputs[0]
    n_sp = len(x.shape) - 2
    if n_sp not in (1, 2, 3):
        raise ctx.error(f"only 1-D, 2-D and 3-D pooling are supported; input '{ctx.input_name(0)}' is {x.type}")
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", ()))
    if len(kernel) != n_sp:
        raise ctx.error(f"kernel_shape {list(kernel)} must have {n_sp} values")
    strides = tuple(int(s) for s in attrs.get("strides", (1,) * n_sp))
    dilations = tuple(int(d) for d in attrs.get("dilations", (1,) * n_sp)) if opset >= dilation_since \
        else (1,) * n_sp
    pads = tuple(int(p) for p in auto_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations))
    ceil_mode = int(attrs.get("ceil_mode", 0)) if opset >= 10 else 0
    return x, kernel, strides, dilations, pads, ceil_mode


def _pool(ctx, op, x, kernel, strides, dilations, pads, ceil_mode, extra):
    """1-D pooling runs as 2-D with H=1; 3-D pooling as two 2-D poolings, over (H, W) on
    [N, C*D, H, W] and then over D on [N, C, D, OH*OW]: max and average over a box window are
    separable (the count of valid cells of a box is the product of the per-axis counts)."""
    n_sp = len(kernel)

    def call(y, k, s, d, p):
        attrs = {"pool_size": k, "strides": s, "padding": p, "dilation": d, "ceil_mode": ceil_mode, **extra}
        return ctx.call(op, [y], attrs)

    if n_sp == 2:
        return call(x, kernel, strides, dilations, (pads[0], pads[1], pads[2], pads[3]))
    if n_sp == 1:
        n, c, w = x.shape
        y = call(reshape(ctx, x, (n, c, 1, w)), (1, kernel[0]), (1, strides[0]), (1, dilations[0]),
                 (0, pads[0], 0, pads[1]))
        return reshape(ctx, y, (n, c, y.shape[3]))
    n, c, d, h, w = x.shape
    y = call(reshape(ctx, x, (n, c * d, h, w)), kernel[1:], strides[1:], dilations[1:],
             (pads[1], pads[2], pads[4], pads[5]))
    oh, ow = y.shape[2:]
    y = call(reshape(ctx, y, (n, c, d, oh * ow)), (kernel[0], 1), (strides[0], 1), (dilations[0], 1),
             (pads[0], 0, pads[3], 0))
    return reshape(ctx, y, (n, c, y.shape[2], oh, ow))


@converter(18)
def Col2Im(ctx, node, inputs, attrs, opset):
    """ONNX Col2Im-18 (input [N, C * prod(block_shape), L], constant image_shape and block_shape;
    dilations, pads, strides) -> nn.col2im [N, C, *image_shape]."""
    image = tuple(int(v) for v in ctx.constant(inputs, 1, "image_shape").reshape(-1))
    block = tuple(int(v) for v in ctx.constant(inputs, 2, "block_shape").reshape(-1))
    nd = len(image)
    if nd < 1 or len(block) != nd:
        raise ctx.error(f"image_shape {list(image)} and block_shape {list(block)} must have the same length >= 1")
    return ctx.call("nn.col2im", [inputs[0]], {
        "image_shape": image, "block_shape": block,
        "strides": tuple(int(v) for v in attrs.get("strides", [1] * nd)),
        "dilation": tuple(int(v) for v in attrs.get("dilations", [1] * nd)),
        "padding": tuple(int(v) for v in attrs.get("pads", [0] * (2 * nd)))})


@converter(1, 8, 10, 11, 12, 22)
def MaxPool(ctx, node, inputs, attrs, opset):
    """ONNX MaxPool (1-D, 2-D, 3-D; kernel_shape, strides, pads, auto_pad, dilations from 10,
    ceil_mode from 10) -> nn.max_pool2d; the Indices output (1-D and 2-D; storage_order) ->
    nn.max_pool2d_indices, the flat index of each maximum in X."""
    x, kernel, strides, dilations, pads, ceil_mode = _pool_common(ctx, inputs, attrs, opset, dilation_since=10)
    values = _pool(ctx, "nn.max_pool2d", x, kernel, strides, dilations, pads, ceil_mode, {})
    if len(node.output) < 2 or not node.output[1]:
        return values
    if len(kernel) == 3:
        raise ctx.error("the Indices output of a 3-D MaxPool is not supported")
    extra = {"storage_order": int(attrs.get("storage_order", 0))}
    return values, _pool(ctx, "nn.max_pool2d_indices", x, kernel, strides, dilations, pads, ceil_mode, extra)


@converter(9, 11, 22)
def MaxUnpool(ctx, node, inputs, attrs, opset):
    """ONNX MaxUnpool-9/11/22 (X, I, optional constant output_shape; kernel_shape, strides, pads):
    a zero tensor of the inferred shape (per axis (in - 1) * stride + kernel - pads) with X's
    values written at their flat (row-major, whole-tensor) indices I -> broadcast_to(0),
    scatter_elements along that one axis, reshape; a larger output_shape pads the result with
    zeros at the end of each axis, as the ONNX reference and node cases do (the indices stay
    relative to the inferred shape). scatter_elements compares every output element with every
    index (outputs x inputs work): exact for any I, sized for small tensors, not large decoders."""
    x, idx = inputs[0], inputs[1]
    n_sp = len(x.shape) - 2
    kernel = [int(k) for k in attrs.get("kernel_shape", ())]
    if n_sp < 1 or len(kernel) != n_sp:
        raise ctx.error(f"kernel_shape {kernel} must have one value per spatial axis of input "
                        f"'{ctx.input_name(0)}' {x.type}")
    if tuple(idx.shape) != tuple(x.shape) or idx.dtype != "int64":
        raise ctx.error(f"indices '{ctx.input_name(1)}' {idx.type} must be int64 of X's shape {x.type}")
    strides = [int(v) for v in attrs.get("strides", [1] * n_sp)]
    pads = [int(v) for v in attrs.get("pads", [0] * (2 * n_sp))]
    inferred = tuple(x.shape[:2]) + tuple((i - 1) * s + k - p0 - p1 for i, s, k, p0, p1 in zip(
        x.shape[2:], strides, kernel, pads[:n_sp], pads[n_sp:]))
    zeros = ctx.call("broadcast_to", [scalar(ctx, x, 0, "zero")], {"shape": (prod(inferred),)})
    flat = ctx.call("scatter_elements", [zeros, reshape(ctx, idx, (prod(idx.shape),)),
                                         reshape(ctx, x, (prod(x.shape),))], {"axis": 0, "reduction": "none"})
    out = reshape(ctx, flat, inferred)
    if len(inputs) > 2 and inputs[2] is not None:
        shape = tuple(int(d) for d in ctx.constant(inputs, 2, "output_shape").reshape(-1))
        if len(shape) != len(inferred) or any(o < i for o, i in zip(shape, inferred)):
            raise ctx.error(f"output_shape {list(shape)} must have rank {len(inferred)} and hold the inferred "
                            f"shape {list(inferred)}")
        if shape != inferred:
            out = ctx.call("pad", [out], {"pad_width": tuple((0, o - i) for o, i in zip(shape, inferred)),
                                          "pad_value": 0.0})
    return out


@converter(1, 7, 10, 11, 19, 22)
def AveragePool(ctx, node, inputs, attrs, opset):
    """ONNX AveragePool (1-D, 2-D, 3-D; count_include_pad from 7, ceil_mode from 10, dilations
    from 19) -> nn.avg_pool2d."""
    x, kernel, strides, dilations, pads, ceil_mode = _pool_common(ctx, inputs, attrs, opset, dilation_since=19)
    extra = {"count_include_pad": int(attrs.get("count_include_pad", 0)) if opset >= 7 else 0}
    return _pool(ctx, "nn.avg_pool2d", x, kernel, strides, dilations, pads, ceil_mode, extra)


def _global_pool(ctx, inputs, op):
    """Any rank >= 3: the spatial axes flattened into W of a [N, C, 1, prod(spatial)] tensor."""
    x = inputs[0]
    if len(x.shape) < 3:
        raise ctx.error(f"global pooling needs rank >= 3; input '{ctx.input_name(0)}' is {x.type}")
    if len(x.shape) == 4:
        return ctx.call(op, [x])
    n, c = x.shape[:2]
    y = ctx.call(op, [reshape(ctx, x, (n, c, 1, prod(x.shape[2:])))])
    return reshape(ctx, y, (n, c) + (1,) * (len(x.shape) - 2))


@converter(1, 22)
def GlobalAveragePool(ctx, node, inputs, attrs, opset):
    """ONNX GlobalAveragePool [N,C,...] -> nn.global_avg_pool2d [N,C,1,...]."""
    return _global_pool(ctx, inputs, "nn.global_avg_pool2d")


@converter(1, 22)
def GlobalMaxPool(ctx, node, inputs, attrs, opset):
    """ONNX GlobalMaxPool [N,C,...] -> nn.global_max_pool2d [N,C,1,...]."""
    return _global_pool(ctx, inputs, "nn.global_max_pool2d")


@converter(1, 13)
def LRN(ctx, node, inputs, attrs, opset):
    """ONNX LRN (size; alpha 1e-4, beta 0.75, bias 1.0 by default) -> nn.lrn."""
    if "size" not in attrs:
        raise ctx.error("attribute 'size' is required")
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must be 4-D (NCHW)")
    return ctx.call("nn.lrn", [x], {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                                    "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))})


@converter(1, 11, 13)
def Softmax(ctx, node, inputs, attrs, opset):
    """ONNX Softmax.

    opset < 13: input coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])] (axis default 1),
    softmax over the second dim -> reshape, nn.softmax(axis=1), reshape (a single
    nn.softmax when axis is the last dim). opset >= 13: nn.softmax along `axis` (default -1).
    """
    x = inputs[0]
    rank = len(x.shape)
    if opset >= 13:
        return ctx.call("nn.softmax", [x], {"axis": norm_axis(ctx, int(attrs.get("axis", -1)), rank)})
    axis = norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if axis == rank - 1:  # the coerced 2-D softmax is a softmax along the last dim
        return ctx.call("nn.softmax", [x], {"axis": axis})
    flat = reshape(ctx, x, (prod(x.shape[:axis]), prod(x.shape[axis:])))
    return reshape(ctx, ctx.call("nn.softmax", [flat], {"axis": 1}), x.shape)


@converter(1, 6, 7, 10, 12, 13, 22)
def Dropout(ctx, node, inputs, attrs, opset):
    """ONNX Dropout (inference) -> nn.dropout, and the mask output (opset >= 10: bool) as a constant
    of ones: inference keeps every element. training_mode (opset >= 12 input) must be absent or
    constant; when it is true, the ratio input (default 0.5) must be constant 0, where the spec's
    random mask keeps every element too (uniform draws in [0, 1) are all >= 0) and the scale
    1 / (1 - ratio) is 1. A nonzero training ratio draws random numbers: refused (ModelError)."""
    if opset >= 12 and len(inputs) > 2 and inputs[2] is not None:
        mode = ctx.constant(inputs, 2, "training_mode")
        if bool(np.asarray(mode).reshape(-1)[0]):
            has_ratio = len(inputs) > 1 and inputs[1] is not None
            ratio = float(np.asarray(ctx.constant(inputs, 1, "ratio")).reshape(-1)[0]) if has_ratio else 0.5
            if ratio != 0.0:
                raise ctx.error(f"training_mode=true with ratio {ratio:g} drops elements at random: not "
                                "supported (inference only; ratio 0 keeps every element)")
    x = inputs[0]
    out = ctx.call("nn.dropout", [x])
    if len(node.output) < 2 or not node.output[1]:
        return out
    ctx.check_constant(x.shape, bool if opset >= 10 else x.dtype, "its mask output")
    return out, np.ones(x.shape, bool if opset >= 10 else x.dtype)


@converter(1, 11, 13)
def LogSoftmax(ctx, node, inputs, attrs, opset):
    """ONNX LogSoftmax: as Softmax (2-D coercion before 13) -> nn.log_softmax."""
    x = inputs[0]
    rank = len(x.shape)
    if opset >= 13:
        return ctx.call("nn.log_softmax", [x], {"axis": norm_axis(ctx, int(attrs.get("axis", -1)), rank)})
    axis = norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if axis == rank - 1:
        return ctx.call("nn.log_softmax", [x], {"axis": axis})
    flat = reshape(ctx, x, (prod(x.shape[:axis]), prod(x.shape[axis:])))
    return reshape(ctx, ctx.call("nn.log_softmax", [flat], {"axis": 1}), x.shape)


# ---------------------------------------------------------------------------------------------
# Normalizations composed of reductions
# ---------------------------------------------------------------------------------------------

def _normalize(ctx, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over `axes` (keepdims); returns (normalized, mean, inv_std)."""
    mean = ctx.call("mean", [x], {"axis": axes, "keepdims": 1})
    d = ctx.call("subtract", [x, mean])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], {"axis": axes, "keepdims": 1})
    inv_std = ctx.call("divide", [scalar(ctx, x, 1, "one"),
                                  ctx.call("sqrt", [ctx.call("add", [var, scalar(ctx, x, eps, "eps")])])])
    return ctx.call("multiply", [d, inv_std]), mean, inv_std


@converter(1, 6, 22)
def InstanceNormalization(ctx, node, inputs, attrs, opset):
    """ONNX InstanceNormalization: per (n, c) over the spatial axes, then scale[C], B[C]."""
    x, scale, bias = inputs
    if len(x.shape) < 3:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must have rank >= 3")
    y, _, _ = _normalize(ctx, x, tuple(range(2, len(x.shape))), float(attrs.get("epsilon", 1e-5)))
    per_c = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    return ctx.call("add", [ctx.call("multiply", [y, reshape(ctx, scale, per_c)]), reshape(ctx, bias, per_c)])


@converter(17)
def LayerNormalization(ctx, node, inputs, attrs, opset):
    """ONNX LayerNormalization(X, Scale, B; axis -1, epsilon 1e-5): over axes [axis, rank);
    outputs Y, Mean, InvStdDev (the statistics keep the reduced axes as 1). stash_type must be 1
    (float32)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if int(attrs.get("stash_type", 1)) != 1:
        raise ctx.error("only stash_type=1 (float32 statistics) is supported")
    axis = norm_axis(ctx, int(attrs.get("axis", -1)), len(x.shape))
    y, mean, inv_std = _normalize(ctx, x, tuple(range(axis, len(x.shape))), float(attrs.get("epsilon", 1e-5)))
    y = ctx.call("multiply", [y, scale])
    if bias is not None:
        y = ctx.call("add", [y, bias])
    return y, mean, inv_std


def _einsum_terms(ctx, equation, ranks):
    """Parse an einsum equation into ([letters per operand], output letters); '...' becomes
    upper-case letters (broadcast dims must have equal sizes), implicit output = the letters
    seen once, sorted. A term may repeat a letter (a diagonal) and may be empty (a rank-0 operand)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(chr(ord("Z") - k) for k in range(n_ell))[::-1]
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            t = t.replace("...", ell[n_ell - (r - len(t.replace("...", ""))):])
        if len(t) != r or (t and not t.isalpha()):
            raise ctx.error(f"equation '{equation}': term '{t}' does not match an operand of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = collections.Counter("".join(out_terms))
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    return out_terms, out


def _einsum_pair(ctx, a, ta, b, tb, keep):
    """Contract a (letters ta) with b (letters tb) into letters batch + free_a + free_b, keeping
    the letters in `keep`: transpose/reshape to [B, M, K] x [B, K, N], nn.matmul, reshape."""
    dims = {**dict(zip(ta, a.shape)), **dict(zip(tb, b.shape))}
    for c in set(ta) & set(tb):
        if dict(zip(ta, a.shape))[c] != dict(zip(tb, b.shape))[c]:
            raise ctx.error(f"einsum index '{c}' has sizes {dict(zip(ta, a.shape))[c]} and "
                            f"{dict(zip(tb, b.shape))[c]}; broadcasting is not supported")
    batch = [c for c in ta if c in tb and c in keep]
    contract = [c for c in ta if c in tb and c not in keep]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    a = _einsum_permute(ctx, a, ta, batch + free_a + contract)
    b = _einsum_permute(ctx, b, tb, batch + contract + free_b)
    nb, m, k, n = (prod([dims[c] for c in cs]) for cs in (batch, free_a, contract, free_b))
    y = ctx.call("nn.matmul", [reshape(ctx, a, (nb, m, k)), reshape(ctx, b, (nb, k, n))])
    letters = batch + free_a + free_b
    return reshape(ctx, y, tuple(dims[c] for c in letters)), "".join(letters)


def _einsum_diagonal(ctx, x, t):
    """Operand x (letters t) with every repeated letter taken once: its diagonal. The axes of a
    letter c (size n, m times in t) move last, are flattened to n**m and `take` picks the
    elements i * (1 + n + ... + n**(m-1)), i < n; c ends the returned letters."""
    for c in dict.fromkeys(t):
        if t.count(c) < 2:
            continue
        rest = "".join(d for d in t if d != c)
        x = _einsum_permute(ctx, x, t, list(rest) + [c] * t.count(c))
        sizes = [x.shape[k] for k in range(len(rest), len(t))]
        if len(set(sizes)) != 1:
            raise ctx.error(f"einsum index '{c}' has sizes {sizes} in one operand")
        n, m = sizes[0], len(sizes)
        x = reshape(ctx, x, tuple(x.shape[:len(rest)]) + (n ** m,))
        step = sum(n ** k for k in range(m))
        x = ctx.call("take", [x, ctx.const(np.arange(n, dtype=np.int64) * step, f"diagonal_{c}")],
                     {"axis": len(rest)})
        t = rest + c
    return x, t


def _einsum_permute(ctx, x, have, want):
    # a letter repeated in `have` (a diagonal still to take) maps its j-th use in `want` to its
    # j-th axis in `have`
    perm = tuple(have.index(c) if have.count(c) == 1 else
                 [k for k, d in enumerate(have) if d == c][want[:j].count(c)] for j, c in enumerate(want))
    return x if perm == tuple(range(len(perm))) else ctx.call("transpose", [x], {"axes": perm})


@converter(12, 28)
def Einsum(ctx, node, inputs, attrs, opset):
    """ONNX Einsum-12/28 (28 adds dtypes): a letter repeated in one operand takes its diagonal
    (take on the flattened axes); letters used by one operand only and not in the output
    are summed first; operands are contracted pairwise as batched matmuls (transpose + reshape +
    nn.matmul); the result is transposed to the output order. E.g. "bij,bjk->bik",
    "bhid,bhjd->bhij", "ij->ji", "ij->i"."""
    terms, out = _einsum_terms(ctx, attrs["equation"], [len(x.shape) for x in inputs])
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
        raise ctx.error(f"equation '{attrs['equation']}': bad output indices '{out}'")
    operands = []
    for k, (x, t) in enumerate(zip(inputs, terms)):
        x, t = _einsum_diagonal(ctx, x, t)
        terms[k] = t
        elsewhere = set(out) | {c for j, u in enumerate(terms) if j != k for c in u}
        axes = tuple(i for i, c in enumerate(t) if c not in elsewhere)
        if axes:
            x = ctx.call("sum", [x], {"axis": axes, "keepdims": 0})
            t = "".join(c for c in t if c in elsewhere)
        operands.append((x, t))
    x, t = operands[0]
    for j, (y, u) in enumerate(operands[1:], 1):
        keep = set(out) | {c for _, v in operands[j + 1:] for c in v}
        x, t = _einsum_pair(ctx, x, t, y, u, keep)
    y = _einsum_permute(ctx, x, t, list(out)) if t != out else x
    return ctx.call("identity", [y]) if any(y is e for e in inputs) else y


@converter(11, 22)
def Det(ctx, node, inputs, attrs, opset):
    """ONNX Det-11/22 (22 adds bfloat16, refused as a dtype): X [..., M, M] float -> det [...]
    (tvmc.ops.linalg: LU with partial pivoting)."""
    x = inputs[0]
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must be [..., M, M]")
    return ctx.call("det", [x])


# ---------------------------------------------------------------------------------------------
# Hardmax and Lp norms composed of reductions
# ---------------------------------------------------------------------------------------------

@converter(1, 11, 13)
def Hardmax(ctx, node, inputs, attrs, opset):
    """ONNX Hardmax: 1 at the first maximum along `axis`, 0 elsewhere -> argmax(keepdims) ==
    positions, cast; before 13 over the 2-D coercion [prod(shape[:axis]), prod(shape[axis:])]."""
    x = inputs[0]
    rank = len(x.shape)
    axis = norm_axis(ctx, int(attrs.get("axis", -1 if opset >= 13 else 1)), rank)
    y = x if opset >= 13 else reshape(ctx, x, (prod(x.shape[:axis]), prod(x.shape[axis:])))
    ax = axis if opset >= 13 else 1
    arg = ctx.call("argmax", [y], {"axis": ax, "keepdims": 0, "select_last_index": 0})
    out = ctx.call("cast", [one_hot_mask(ctx, arg, y.shape[ax], ax)], {"dtype": x.dtype})
    return reshape(ctx, out, x.shape)


@converter(1, 22)
def LpNormalization(ctx, node, inputs, attrs, opset):
    """ONNX LpNormalization(axis = -1, p = 2 or 1): x / ||x||_p along axis, 0 where the norm is 0."""
    x = inputs[0]
    axis = norm_axis(ctx, int(attrs.get("axis", -1)), len(x.shape))
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, got {p}")
    attrs_r = {"axis": (axis,), "keepdims": 1}
    if p == 2:
        norm = ctx.call("sqrt", [ctx.call("sum", [ctx.call("multiply", [x, x])], attrs_r)])
    else:
        norm = ctx.call("sum", [ctx.call("abs", [x])], attrs_r)
    zero = scalar(ctx, x, 0, "zero")
    return ctx.call("where", [ctx.call("equal", [norm, zero]), zero, ctx.call("divide", [x, norm])])


@converter(1, 2, 11, 18, 22)
def LpPool(ctx, node, inputs, attrs, opset):
    """ONNX LpPool(p = 2; kernel_shape, strides, pads, auto_pad, dilations from 18, ceil_mode from
    18) -> (sum over the window of |x|**p)**(1/p), the window sum as an average pool that counts
    the padding times the window size; p = 1, 2 without power calls."""
    x = inputs[0]
    p = float(attrs.get("p", 2))
    if opset < 2:
        raise ctx.error("LpPool-1 (p as a float attribute of the global form) is not supported")
    x, kernel, strides, dilations, pads, ceil_mode = _pool_common(ctx, [x], attrs, opset, dilation_since=18)
    if ceil_mode:
        raise ctx.error("ceil_mode=1 is not supported for LpPool")
    a = ctx.call("abs", [x])
    powered = a if p == 1 else ctx.call("multiply", [a, a]) if p == 2 else \
        ctx.call("power", [a, scalar(ctx, x, p, "p")])
    mean = _pool(ctx, "nn.avg_pool2d", powered, kernel, strides, dilations, pads, 0, {"count_include_pad": 1})
    total = ctx.call("multiply", [mean, scalar(ctx, x, prod(kernel), "window")])
    if p == 1:
        return total
    if p == 2:
        return ctx.call("sqrt", [total])
    return ctx.call("power", [total, scalar(ctx, x, 1.0 / p, "inv_p")])
