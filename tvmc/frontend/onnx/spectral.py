"""ONNX converters, spectral group: DFT and STFT as matmuls with DFT matrices folded at compile time."""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import is_const, norm_axis, reshape
from tvmc.frontend.onnx.nn import MatMul
from tvmc.frontend.onnx.registry import converter


def dft_matrix(n_in: int, c_in: int, n: int, inverse: bool, onesided: bool, window=None) -> np.ndarray:
    """The [n_in * c_in, m * c_out] float64 matrix W with y = x @ W the DFT of length `n` of
    x[n_in, c_in] (c_in = 1: real, 2: real and imaginary parts), as ONNX DFT-17/20 defines it:
    y[f] = sum_k x[k] exp(-+2 pi i f k / n) (times 1 / n when `inverse`); samples k >= n are
    dropped (truncation), missing ones read as zeros (padding); `window`[n_in] scales sample k.

    Forward onesided (RFFT): the first m = n // 2 + 1 bins. Inverse onesided (IRFFT, c_out = 1):
    x holds the bins 0 .. n // 2 of a Hermitian spectrum and y the real signal of length n, each
    bin strictly between 0 and n / 2 counted twice for its mirror (numpy.fft.irfft). Otherwise m = n,
    c_out = 2."""
    k = np.arange(n_in)[:, None]
    scale = np.where(k < n, 1.0, 0.0) * (1.0 if window is None else np.asarray(window, np.float64)[:, None])
    if inverse and onesided:
        t = np.arange(n)[None, :]
        mirrored = np.where((k == 0) | (2 * k == n), 1.0, 2.0) * np.where(k <= n // 2, 1.0, 0.0)
        theta = 2.0 * np.pi * (k * t % n) / n  # k t reduced mod n: exact angles for long transforms
        w = np.stack([np.cos(theta), -np.sin(theta)])[:c_in] * (mirrored * scale / n)
        return w.transpose(1, 0, 2).reshape(n_in * c_in, n)
    m = n // 2 + 1 if onesided else n
    f = np.arange(m)[None, :]
    e = np.exp((1j if inverse else -1j) * 2.0 * np.pi * (k * f % n) / n) * (scale / n if inverse else scale)
    # (a + ib) e: real part a Re e - b Im e, imaginary part a Im e + b Re e
    w = np.array([[e.real, e.imag], [-e.imag, e.real]])[:c_in]  # [c_in, c_out, n_in, m]
    return w.transpose(2, 0, 3, 1).reshape(n_in * c_in, m * 2)


def _dft(ctx, x, axis: int, n: int, inverse: bool, onesided: bool, window=None):
    """DFT of x[..., n_in (at `axis`), ..., c_in] along `axis` as transpose, reshape and one
    MatMul with the constant dft_matrix, then back to x's axis order; `window` is a constant
    [n_in] folded into the matrix."""
    rank, c_in = len(x.shape), x.shape[-1]
    if c_in not in (1, 2):
        raise ctx.error(f"input {x.type} must end in a dimension of 1 (real) or 2 (complex)")
    if n <= 0:
        raise ctx.error(f"dft_length {n} must be positive")
    perm = tuple(d for d in range(rank - 1) if d != axis) + (axis, rank - 1)
    if perm != tuple(range(rank)):
        x = ctx.call("transpose", [x], {"axes": perm})
    lead, n_in = tuple(x.shape[:-2]), x.shape[-2]
    ctx.check_constant((n_in * c_in, 2 * n), "complex128", "its DFT matrix")  # what dft_matrix computes
    w = dft_matrix(n_in, c_in, n, inverse, onesided, window)
    c_out = 1 if inverse and onesided else 2
    y = MatMul(ctx, ctx.node, [reshape(ctx, x, lead + (n_in * c_in,)), ctx.const(w.astype(x.dtype), "dft_matrix")],
               {}, 13)
    y = reshape(ctx, y, lead + (w.shape[1] // c_out, c_out))
    if perm != tuple(range(rank)):
        y = ctx.call("transpose", [y], {"axes": tuple(int(p) for p in np.argsort(perm))})
    return y


@converter(17, 20)
def DFT(ctx, node, inputs, attrs, opset):
    """ONNX DFT-17/20(input[..., n_in, ..., 1 or 2], dft_length?, axis? (input from 20, default -2;
    attribute before, default 1); inverse, onesided) -> transpose + matmul with a constant DFT
    matrix (dft_matrix). dft_length and axis must be constants; dft_length defaults to n_in, or to
    2 (n_in - 1) for IRFFT (inverse and onesided)."""
    x = inputs[0]
    rank = len(x.shape)
    if rank < 2:
        raise ctx.error(f"input {x.type} must have rank >= 2 (signal axes and the complex axis)")
    if opset >= 20:
        axis = int(ctx.constant(inputs, 2, "axis").reshape(())) if len(inputs) > 2 and inputs[2] is not None else -2
    else:
        axis = int(attrs.get("axis", 1))
    axis = norm_axis(ctx, axis, rank)
    if axis == rank - 1:
        raise ctx.error(f"axis {axis} is the complex axis of input {x.type}")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if len(inputs) > 1 and inputs[1] is not None:
        n = int(ctx.constant(inputs, 1, "dft_length").reshape(()))
    else:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    return _dft(ctx, x, axis, n, inverse, onesided)


@converter(17)
def STFT(ctx, node, inputs, attrs, opset):
    """ONNX STFT-17(signal[batch, length, 1 or 2], frame_step, window?[frame_length],
    frame_length?; onesided = 1) -> output[batch, frames, bins, 2], frames = (length -
    frame_length) // frame_step + 1: the frames gathered by `take` with constant indices, times
    the window (folded into the DFT matrix when constant), then the DFT along the frame axis.
    frame_step and frame_length must be constants."""
    x = inputs[0]
    if len(x.shape) != 3:
        raise ctx.error(f"signal {x.type} must be [batch, signal_length, 1 or 2]")
    step = int(ctx.constant(inputs, 1, "frame_step").reshape(()))
    window = inputs[2] if len(inputs) > 2 else None
    if len(inputs) > 3 and inputs[3] is not None:
        length = int(ctx.constant(inputs, 3, "frame_length").reshape(()))
        if window is not None and window.shape != (length,):
            raise ctx.error(f"window {window.type} must be [{length}] (frame_length)")
    elif window is not None and len(window.shape) == 1:
        length = window.shape[0]
    else:
        raise ctx.error("needs a 1-D window or a frame_length")
    if step <= 0 or not 0 < length <= x.shape[1]:
        raise ctx.error(f"frame_step {step} must be positive and frame_length {length} in [1, {x.shape[1]}]")
    frames = (x.shape[1] - length) // step + 1
    starts = np.arange(frames)[:, None] * step
    x = ctx.call("take", [x, ctx.const(starts + np.arange(length)[None, :], "frame_indices")], {"axis": 1})
    if window is not None and not is_const(window):
        x = ctx.call("multiply", [x, reshape(ctx, window, (length, 1))])
    folded = window.value if window is not None and is_const(window) else None
    return _dft(ctx, x, 2, length, False, bool(attrs.get("onesided", 1)), folded)
