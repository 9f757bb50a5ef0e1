"""ONNX converters, data-dependent shapes: NonZero, Compress, Unique, NonMaxSuppression (the ops are
tvmc/ops/dynamic.py, the design docs/dynamic_shapes.md; TopK with a run-time K is in reduce.py).
On constants they fold at import; otherwise the output is padded to a bound and carries a run-time
shape."""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, prod, reshape
from tvmc.frontend.onnx.registry import converter
from tvmc.ops.dynamic import NMS_MAX_BOXES, UNIQUE_OUTPUTS, _unique_exact_all, nms_reference


@converter(9, 13)
def NonZero(ctx, node, inputs, attrs, opset):
    """ONNX NonZero -> nonzero: int64[rank, <=size] (row-major order of the nonzero elements)."""
    (x,) = inputs
    if is_const(x):
        return np.array(np.nonzero(x.value), np.int64)
    if not x.shape:
        raise ctx.error("NonZero of a rank-0 tensor is not supported")
    return ctx.dynamic_call("nonzero", [x])


@converter(9, 11, 28)
def Compress(ctx, node, inputs, attrs, opset):
    """ONNX Compress(x, condition; axis) -> x's slices where condition holds: `take` for a constant
    condition, else compress (the axis bounded by min(extent, len(condition))). Without `axis`,
    x is flattened first."""
    x, cond = inputs
    if "axis" in attrs:
        axis = norm_axis(ctx, int(attrs["axis"]), len(x.shape))
    else:
        x, axis = reshape(ctx, x, (prod(x.shape),)), 0
    if len(cond.shape) != 1:
        raise ctx.error(f"condition must be 1-D, got {cond.type}")
    if cond.shape[0] > x.shape[axis]:
        raise ctx.error(f"condition has {cond.shape[0]} elements, more than the {x.shape[axis]} of axis {axis}")
    if is_const(cond):
        idx = np.nonzero(cond.value)[0].astype(np.int64)
        if is_const(x):
            return np.take(x.value, idx, axis=axis)
        return ctx.call("take", [x, ctx.const(idx, "indices")], {"axis": axis})
    if cond.dtype != "bool":
        cond = ctx.call("cast", [cond], {"dtype": "bool"})
    return ctx.dynamic_call("compress", [x, cond], {"axis": axis})


@converter(11, 28)
def Unique(ctx, node, inputs, attrs, opset):
    """ONNX Unique(x; axis, sorted) -> (values, indices, inverse_indices, counts): values, indices
    and counts bounded by the extent (of x flattened, without `axis`), inverse_indices static."""
    (x,) = inputs
    sort = int(attrs.get("sorted", 1))
    if "axis" in attrs:
        axis = norm_axis(ctx, int(attrs["axis"]), len(x.shape))
    else:
        x, axis = reshape(ctx, x, (prod(x.shape),)), 0
    if is_const(x):
        return tuple(_unique_exact_all(x.value, axis, sort))
    if x.shape[axis] == 0:
        raise ctx.error(f"Unique of an empty axis ({x.type}) is not supported")
    uattrs = {"axis": axis, "sorted": sort}
    return tuple(ctx.call("unique_inverse", [x], {**uattrs, "output": out}) if out == "inverse"
                 else ctx.dynamic_call("unique", [x], {**uattrs, "output": out}) for out in UNIQUE_OUTPUTS)


@converter(10, 11)
def NonMaxSuppression(ctx, node, inputs, attrs, opset):
    """ONNX NonMaxSuppression(boxes, scores[, max_output_boxes_per_class, iou_threshold,
    score_threshold]; center_point_box) -> non_max_suppression: int64[<= B*C*min(N, max), 3]. A
    missing max_output_boxes_per_class selects nothing (ONNX's default 0); at most NMS_MAX_BOXES
    boxes per batch."""
    boxes, scores = inputs[:2]
    extra = list(inputs[2:]) + [None] * (5 - len(inputs))
    max_out, iou_th, score_th = extra[:3]
    if max_out is None or (is_const(max_out) and int(max_out.value.reshape(-1)[0]) <= 0) or 0 in boxes.shape \
            or 0 in scores.shape:
        return np.zeros((0, 3), np.int64)
    if boxes.shape[1] > NMS_MAX_BOXES:
        raise ctx.error(f"{boxes.shape[1]} boxes per batch: tvmc's greedy suppression (one stage per box) "
                        f"compiles at most {NMS_MAX_BOXES}")
    nattrs = {"center_point_box": int(attrs.get("center_point_box", 0)),
              "use_score_threshold": int(score_th is not None),
              "max_boxes": min(int(max_out.value.reshape(-1)[0]), boxes.shape[1]) if is_const(max_out)
              else boxes.shape[1]}
    iou_th = iou_th if iou_th is not None else ctx.const(np.zeros(1, boxes.dtype), "iou_threshold")
    score_th = score_th if score_th is not None else ctx.const(np.zeros(1, boxes.dtype), "score_threshold")
    args = [boxes, scores, max_out, iou_th, score_th]
    for what, e in zip(("max_output_boxes_per_class", "iou_threshold", "score_threshold"), args[2:]):
        if e.type.size != 1:
            raise ctx.error(f"{what} must hold one value, got {e.type}")
    if all(is_const(e) for e in args):
        return nms_reference(*[e.value for e in args], **nattrs)
    return ctx.dynamic_call("non_max_suppression", args, nattrs)
