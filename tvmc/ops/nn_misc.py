"""Normalization operators: softmax (ONNX Softmax), LRN, batch_norm (inference form)."""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.ops.cpu.reduction import schedule_lrn, schedule_softmax
from tvmc.ops.elemwise import INJECTIVE
from tvmc.ops.gpu.injective import generic_config, schedule_generic
from tvmc.ops.gpu.reduction import schedule_softmax as schedule_softmax_gpu
from tvmc.ops.gpu.reduction import softmax_config
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op
from tvmc.ops.transform import pad_compute


def _softmax_type(in_types, attrs):
    t = in_types[0]
    if not 0 <= attrs["axis"] < len(t.shape):
        raise ValueError(f"softmax axis {attrs['axis']} out of range for rank {len(t.shape)}")
    return t


def _softmax_stages(x, axis):
    """The stages softmax and log_softmax share: (max over `axis`, exp(x - max), sum of that exp,
    and `at(idx, v)`, the index `idx` with position `axis` replaced by `v`)."""
    red_shape = tuple(1 if k == axis else d for k, d in enumerate(x.shape))
    r1 = te.reduce_axis(x.shape[axis], "k")

    def at(idx, v):
        return tuple(v if k == axis else i for k, i in enumerate(idx))

    mx = te.compute(red_shape, lambda *i: te.max(x[at(i, r1.var)], r1), name="softmax_max")
    e = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[at(i, 0)]), name="softmax_exp")
    r2 = te.reduce_axis(x.shape[axis], "k2")
    sm = te.compute(red_shape, lambda *i: te.sum(e[at(i, r2.var)], r2), name="softmax_sum")
    return mx, e, sm, at


def softmax(x, axis):
    """out = exp(x - max_axis(x)) / sum_axis(exp(x - max_axis(x))) along `axis`, computed as the
    exp times the sum's reciprocal (one division per row, not per element; onnxruntime's MLAS
    kernel does the same, and the result differs from the quotient by at most an ulp)."""
    _, e, sm, at = _softmax_stages(x, axis)
    one = te.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: e[i] * (one / sm[at(i, 0)]), name="softmax")


def _softmax_ref(x, axis):
    z = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
    ez = np.exp(z)
    return (ez / ez.sum(axis=axis, keepdims=True)).astype(x.dtype)


register_op(OpDef("nn.softmax", _softmax_type, _softmax_ref, OpPattern.OPAQUE,
                  lambda inputs, attrs, out_type: softmax(inputs[0], attrs["axis"]),
                  {"cpu": [Implementation("softmax.cpu", schedule_softmax)],
                   "gpu": [Implementation("softmax.gpu", schedule_softmax_gpu, config_space=softmax_config)]}))


def _lrn_type(in_types, attrs):
    t = in_types[0]
    if len(t.shape) != 4:
        raise ValueError(f"LRN needs NCHW data, got {list(t.shape)}")
    return t


def lrn(x, size, alpha, beta, bias):
    """ONNX LRN: y = x / (bias + alpha/size * sum_{c' in window(c)} x[c']^2) ** beta."""
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    padded = pad_compute(x, ((0, 0), (before, after), (0, 0), (0, 0)), name="pad_channels")
    r = te.reduce_axis(size, "r")
    sq = te.compute(x.shape, lambda n, c, h, w: te.sum(padded[n, c + r.var, h, w] * padded[n, c + r.var, h, w], r),
                    name="lrn_sqsum")
    return te.compute(x.shape, lambda *i: x[i] / te.power(te.const(bias, x.dtype) + te.const(alpha / size, x.dtype)
                                                           * sq[i], te.const(beta, x.dtype)), name="lrn")


def _lrn_ref(x, size, alpha, beta, bias):
    c = x.shape[1]
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.zeros_like(x, dtype=np.float64)
    x64 = x.astype(np.float64)
    for k in range(c):
        lo, hi = max(0, k - before), min(c - 1, k + after)
        sq[:, k] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)


register_op(OpDef("nn.lrn", _lrn_type, _lrn_ref, OpPattern.OPAQUE,
                  lambda inputs, attrs, out_type: lrn(inputs[0], attrs["size"], attrs["alpha"], attrs["beta"],
                                                      attrs["bias"]),
                  {"cpu": [Implementation("lrn.cpu", schedule_lrn)],
                   "gpu": [Implementation("lrn.gpu", schedule_generic, config_space=generic_config)]}))


def _bn_type(in_types, attrs):
    t = in_types[0]
    axis = attrs.get("axis", 1)
    for p in in_types[1:]:
        if p.shape != (t.shape[axis],):
            raise ValueError(f"batch_norm parameter shape {list(p.shape)} != [{t.shape[axis]}]")
    return t


def _bn_compute(inputs, attrs, out_type):
    x, gamma, beta, mean, var = inputs
    axis, eps = attrs.get("axis", 1), attrs["epsilon"]
    return te.compute(x.shape, lambda *i: (x[i] - mean[i[axis]]) / te.sqrt(var[i[axis]] + te.const(eps, x.dtype))
                      * gamma[i[axis]] + beta[i[axis]], name="batch_norm")


def _bn_ref(x, gamma, beta, mean, var, epsilon, axis=1):
    shape = [1] * x.ndim
    shape[axis] = -1

    def r(a):
        return a.reshape(shape)

    return ((x - r(mean)) / np.sqrt(r(var) + np.float32(epsilon)) * r(gamma) + r(beta)).astype(x.dtype)


register_op(OpDef("nn.batch_norm", _bn_type, _bn_ref, OpPattern.BROADCAST, _bn_compute, INJECTIVE))


def log_softmax(x, axis):
    """out = (x - max_axis(x)) - log(sum_axis(exp(x - max_axis(x)))) along `axis` (ONNX
    LogSoftmax-13); the same stages as softmax, so it shares its schedule."""
    mx, _, sm, at = _softmax_stages(x, axis)
    return te.compute(x.shape, lambda *i: x[i] - mx[at(i, 0)] - te.log(sm[at(i, 0)]), name="log_softmax")


def _log_softmax_ref(x, axis):
    z = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(x.dtype)


register_op(OpDef("nn.log_softmax", _softmax_type, _log_softmax_ref, OpPattern.OPAQUE,
                  lambda inputs, attrs, out_type: log_softmax(inputs[0], attrs["axis"]),
                  {"cpu": [Implementation("log_softmax.cpu", schedule_softmax)],
                   "gpu": [Implementation("log_softmax.gpu", schedule_softmax_gpu, config_space=softmax_config)]}))
