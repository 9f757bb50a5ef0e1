"""Linear algebra: the determinant of square matrices (ONNX Det-11/22; numpy.linalg.det).

`det` computes [..., N, N] -> [...] by LU factorization with partial pivoting (Golub & Van
Loan, Matrix Computations, algorithm 3.4.1; LAPACK getrf's pivot rule), unrolled over its N - 1
elimination steps, each step three stages over the whole batch:

    pivot_abs_k[b] = max_{m >= k} |A_k[b, m, k]|
    pivot_k[b]     = the first row m >= k where |A_k[b, m, k]| is not below pivot_abs_k[b]
    A_{k+1}[b]     = A_k[b] with rows k and pivot_k swapped, then row k's multiple subtracted
                     from every row below it (no multiple when the pivot is 0: the column is
                     already eliminated, and the determinant is 0)

and det[b] = prod_k A_{N-1}[b, k, k] * (-1)^(number of steps whose pivot row is not k).
The pivot row is read through an index computed from data (a gather), so each stage is
materialized: O(N) stages of N x N per matrix, O(N^3) arithmetic. Float dtypes only.
"""

from __future__ import annotations

import numpy as np

from tvmc import te
from tvmc.graph.ir import TensorType
from tvmc.ops.cpu.linalg import schedule_det
from tvmc.ops.gpu.injective import generic_config
from tvmc.ops.gpu.linalg import schedule_det_per_thread
from tvmc.ops.registry import Implementation, OpDef, OpPattern, register_op

DET = {"cpu": [Implementation("det.cpu", schedule_det)],
       "gpu": [Implementation("det.gpu", schedule_det_per_thread, config_space=generic_config)]}


def _det_type(in_types, attrs):
    t = in_types[0]
    if len(t.shape) < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError(f"det needs [..., N, N] matrices, got {list(t.shape)}")
    if not te.expr.is_float(t.dtype):
        raise ValueError(f"det needs a float dtype, got {t.dtype}")
    return TensorType(tuple(t.shape[:-2]), t.dtype)


def _det_compute(inputs, attrs, out_type):
    """[..., N, N] -> [...]: the elimination stages of the module docstring."""
    a = inputs[0]
    n = a.shape[-1]
    batch = tuple(a.shape[:-2])
    zero, one = te.const(0, a.dtype), te.const(1, a.dtype)
    pivots = []
    for k in range(n - 1):
        rm = te.reduce_axis(n, "m")
        mx = te.compute(batch, lambda *b, a=a, k=k, rm=rm: te.max(
            te.select(rm.var >= k, te.fabs(a[(*b, rm.var, k)]), zero), rm), name=f"det_pivot_abs{k}")
        rp = te.reduce_axis(n, "m")
        # "not below the maximum" rather than "equal to it": with a NaN in the column no row
        # compares equal, and row k is taken
        piv = te.compute(batch, lambda *b, a=a, k=k, rp=rp, mx=mx: te.min(
            te.select(te.logical_or(rp.var < k, te.fabs(a[(*b, rp.var, k)]) < mx[b]), te.const(n, "int64"),
                      rp.var), rp), name=f"det_pivot{k}")

        def step(*idx, a=a, k=k, piv=piv):
            *b, i, j = idx
            p = piv[tuple(b)]
            row = te.select(te.eq(i, k), p, te.select(te.eq(i, p), te.const(k, "int64"), i))
            pivot = a[(*b, p, k)]
            factor = te.select(te.eq(pivot, zero), zero, a[(*b, row, k)] / pivot)
            swapped = a[(*b, row, j)]
            return te.select(i > k, swapped - factor * a[(*b, p, j)], swapped)

        a = te.compute(batch + (n, n), step, name=f"det_lu{k}")
        pivots.append(piv)
    rd = te.reduce_axis(n, "d")
    diag = te.compute(batch, lambda *b: te.prod(a[(*b, rd.var, rd.var)], rd), name="det_diagonal")

    def signed(*b):
        value = diag[b]
        for k, piv in enumerate(pivots):
            value = value * te.select(te.eq(piv[b], te.const(k, "int64")), one, -one)
        return value

    return te.compute(batch, signed, name="det")


def det_reference(x):
    """numpy.linalg.det in float64, cast back to x's dtype."""
    return np.linalg.det(x.astype(np.float64)).astype(x.dtype)


register_op(OpDef("det", _det_type, det_reference, OpPattern.OPAQUE, _det_compute, DET))
