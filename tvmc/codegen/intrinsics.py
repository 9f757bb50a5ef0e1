"""Math intrinsics as inline LLVM IR: polynomial exp/log/tanh/erf/sigmoid, the trigonometric and
hyperbolic functions and their inverses (vectorizable, no libm in hot loops, usable on wasm32),
plus sqrt/fabs/floor/ceil/round through LLVM intrinsics.

float32 and float64 each have their own constants and polynomial degrees (`_Format`); float16 and
bfloat16 values are float in registers (tvmc/codegen/llvm.py) and take the float32 forms.

Maximum errors (float32, measured against numpy in tests/unit/test_codegen.py; worst cases found by
exhaustive scans of the float32 binades):
exp  relative 2e-7 on [-87, 88.72], +inf above, subnormals down to -103 (Cody-Waite reduction,
     degree-7 Taylor on |r| <= ln2/2);
log  relative 2.5e-7 for normal x > 0 (atanh series in s = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)));
tanh absolute 2e-7 (1 - 2/(exp(2x)+1), odd-symmetric);
erf  absolute 7e-7 (a rational function of x**2 fitted on [0, 3.92], +-1 beyond: 4.2e-7 in a numpy
     float32 scan of [-5, 5], rounding of the compiled form (FMA contraction) within the bound);
sigmoid absolute 1e-7 (1/(1+exp(-x)));
sin  absolute 1e-7 for |x| <= 100 (x = k pi/2 + r with pi/2 in three parts, Taylor series of sin
     and cos on |r| <= pi/4; the reduction loses accuracy as k grows);
cos  absolute 1e-7 for |x| <= 100;
tan  relative 3e-7 on (-1.5, 1.5) (sin r / cos r);
atan relative 2.5e-7 (1/x above 1, (t-1)/(t+1) above tan(pi/8), Taylor series);
asin relative 3e-7 (atan(x / sqrt((1-x)(1+x))));
acos relative 3e-7 (2 atan(sqrt((1-x)/(1+x))));
sinh relative 4e-7 (Taylor series below 1/2, exponentials above, no overflow before the result's);
cosh relative 3e-7;
asinh relative 3e-7 (log1p forms: ln(1+y) = ln(u) y/(u-1), u = 1+y);
acosh relative 3e-7;
atanh relative 4e-7.

Maximum errors (float64, measured the same way on 2**16 points per function against Python's
math module / numpy in float64):
exp64  relative 3e-16 on [-708, 709.78], +inf above, subnormals down to -745 (degree-13 Taylor);
log64  relative 4e-16 for x > 0, subnormals included (atanh series to s**25);
tanh64 absolute 3e-16;
erf64  absolute 7e-16 (Maclaurin series of 32 terms for |x| < 2, the continued fraction of
       erfc at depth 60 for 2 <= |x| < 6, 1 beyond);
sigmoid64 absolute 3e-16;
sin64 absolute 2e-16 for |x| <= 100;
cos64 absolute 2e-16 for |x| <= 100;
tan64 relative 6e-16 on (-1.5, 1.5);
atan64 relative 4e-16;
asin64 relative 6e-16;
acos64 relative 6e-16;
sinh64 relative 8e-16;
cosh64 relative 6e-16;
asinh64 relative 6e-16;
acosh64 relative 6e-16;
atanh64 relative 9e-16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, getcontext

from llvmlite import ir


@dataclass(frozen=True)
class _Format:
    """Per-precision facts of the polynomial forms: IEEE layout (bits, mantissa bits, bias) and
    the constants and degrees that reach that precision's accuracy."""

    bits: int
    mantissa: int
    bias: int
    exp_hi: float        # exp(x) overflows above
    exp_lo: float        # exp(x) is 0 below
    ln2_hi: float        # ln 2 with trailing zero bits (n * ln2_hi exact), ln2_lo the rest
    ln2_lo: float
    exp_degree: int      # Taylor degree of e**r, |r| <= ln2/2
    log_terms: int       # atanh series terms s**1 .. s**(2*log_terms - 1)
    tanh_small: float    # below, tanh x = x
    pio2: tuple          # pi/2 in three parts, the first two with trailing zero bits
    sin_terms: int       # Taylor terms of sin r and cos r, |r| <= pi/4
    atan_terms: int      # Taylor terms of atan t, |t| <= tan(pi/8)
    sinh_terms: int      # Taylor terms of sinh x, |x| < 1/2
    sqrt_eps: float      # 2**(mantissa/2 + 1): above, x**2 + 1 == x**2


def _split(value: Decimal, keep_bits: tuple) -> tuple:
    """`value` as a sum of floats: one per entry of `keep_bits` with that many significant bits
    (so its products with small integers are exact), then the rest rounded."""
    parts, rest = [], value
    for bits in keep_bits:
        lead = math.floor(math.log2(abs(float(rest))))
        scale = 2.0 ** (bits - 1 - lead)
        part = math.floor(float(rest) * scale) / scale
        parts.append(part)
        rest -= Decimal(part)
    return tuple(parts) + (float(rest),)


_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")
getcontext().prec = 60
F32 = _Format(32, 23, 127, 88.7228, -104.0, 0.693145751953125, 1.428606765330187e-06, 7, 6, 1e-4,
              _split(_PI / 2, (8, 8)), 6, 10, 6, 2.0 ** 13)
F64 = _Format(64, 52, 1023, 709.782712893384, -746.0, *_split(Decimal(2).ln(), (32,)), 13, 13, 1e-8,
              _split(_PI / 2, (26, 26)), 11, 22, 10, 2.0 ** 27)


def _format(ty) -> _Format:
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    return F64 if isinstance(el, ir.DoubleType) else F32


def _const(ty, value):
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def _int_type_like(ty, width=32):
    it = ir.IntType(width)
    return ir.VectorType(it, ty.count) if isinstance(ty, ir.VectorType) else it


def _llvm_intrinsic(cg, name, ty, args):
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    suffix = "f64" if isinstance(el, ir.DoubleType) else "f32"
    if isinstance(ty, ir.VectorType):
        suffix = f"v{ty.count}{suffix}"
    return cg.declare(f"llvm.{name}.{suffix}", ty, [ty] * len(args))


def _select(b, c, x, y):
    return b.select(c, x, y)


# LLVM's `contract` flag: a multiply and the add that consumes it may become one FMA (one rounding
# instead of two), on targets that have one
_CONTRACT = ("contract",)


def _horner(b, ty, coeffs, x):
    """coeffs[0] + coeffs[1] x + ... + coeffs[-1] x**(n-1), by Horner's rule."""
    p = _const(ty, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = b.fadd(b.fmul(p, x, flags=_CONTRACT), _const(ty, c), flags=_CONTRACT)
    return p


def exp(cg, b, x):
    """e**x: x = n*ln2 + r, |r| <= ln2/2; e**r by Taylor's polynomial (degree 7 for float32, 13
    for float64); scaled by 2**n as two exponent-bit factors 2**(n//2) * 2**(n - n//2), so results
    reach the largest finite value and the subnormals. NaN propagates (the clamps keep
    unordered inputs)."""
    ty = x.type
    f = _format(ty)
    xc = _select(b, b.fcmp_ordered(">", x, _const(ty, f.exp_hi)), _const(ty, f.exp_hi), x)
    xc = _select(b, b.fcmp_ordered("<", xc, _const(ty, f.exp_lo)), _const(ty, f.exp_lo), xc)
    n = b.fmul(xc, _const(ty, 1.0 / math.log(2.0)))
    n = b.call(_llvm_intrinsic(cg, "rint", ty, [n]), [n])
    r = b.fsub(xc, b.fmul(n, _const(ty, f.ln2_hi), flags=_CONTRACT), flags=_CONTRACT)
    r = b.fsub(r, b.fmul(n, _const(ty, f.ln2_lo), flags=_CONTRACT), flags=_CONTRACT)
    p = _horner(b, ty, [1.0 / math.factorial(k) for k in range(f.exp_degree + 1)], r)
    it = _int_type_like(ty, f.bits)
    nan = b.fcmp_unordered("uno", x, x)
    ni = b.fptosi(_select(b, nan, _const(ty, 0.0), n), it)
    n1 = b.ashr(ni, _const(it, 1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, _const(it, f.bias)), _const(it, f.mantissa)), ty)
    s2 = b.bitcast(b.shl(b.add(n2, _const(it, f.bias)), _const(it, f.mantissa)), ty)
    # below exp_lo the result is 0: scaling by an exact 0 there instead of by 2**n2 keeps the
    # product from underflowing, which x86 handles in a microcode assist (~100 cycles a lane,
    # without FTZ): a softmax over attention scores masked with -1e4 ran 5x slower
    s2 = _select(b, b.fcmp_ordered("<=", x, _const(ty, f.exp_lo)), _const(ty, 0.0), s2)
    out = b.fmul(b.fmul(p, s1), s2)
    out = _select(b, b.fcmp_ordered(">", x, _const(ty, f.exp_hi)), _const(ty, float("inf")), out)
    return _select(b, nan, x, out)


def log(cg, b, x):
    """ln x for x > 0 (nan for x < 0, -inf for 0): x = m * 2**e, ln m = 2 atanh((m-1)/(m+1)).
    float64 subnormals are scaled by 2**54 first."""
    ty = x.type
    f = _format(ty)
    it = _int_type_like(ty, f.bits)
    tiny = b.fcmp_ordered("<", x, _const(ty, 2.0 ** -1022)) if f is F64 else None
    bits = b.bitcast(_select(b, tiny, b.fmul(x, _const(ty, 2.0 ** 54)), x) if tiny is not None else x, it)
    e = b.sub(b.lshr(bits, _const(it, f.mantissa)), _const(it, f.bias))
    if tiny is not None:
        e = b.sub(e, _select(b, tiny, _const(it, 54), _const(it, 0)))
    mant_mask = (1 << f.mantissa) - 1
    one_bits = f.bias << f.mantissa
    m = b.bitcast(b.or_(b.and_(bits, _const(it, mant_mask)), _const(it, one_bits)), ty)
    big = b.fcmp_ordered(">", m, _const(ty, math.sqrt(2.0)))
    m = _select(b, big, b.fmul(m, _const(ty, 0.5)), m)
    e = _select(b, big, b.add(e, _const(it, 1)), e)
    s = b.fdiv(b.fsub(m, _const(ty, 1.0)), b.fadd(m, _const(ty, 1.0)))
    s2 = b.fmul(s, s)
    p = _horner(b, ty, [1.0 / (2 * k + 1) for k in range(f.log_terms)], s2)
    ln_m = b.fmul(_const(ty, 2.0), b.fmul(s, p))
    ef = b.sitofp(e, ty)
    if f is F64:  # e * ln2 in two parts keeps the products of large exponents exact
        out = b.fadd(b.fadd(ln_m, b.fmul(ef, _const(ty, f.ln2_lo))), b.fmul(ef, _const(ty, f.ln2_hi)))
    else:
        out = b.fadd(ln_m, b.fmul(ef, _const(ty, math.log(2.0))))
    out = _select(b, b.fcmp_ordered("==", x, _const(ty, 0.0)), _const(ty, float("-inf")), out)
    out = _select(b, b.fcmp_unordered("<", x, _const(ty, 0.0)), _const(ty, float("nan")), out)
    inf = b.fcmp_ordered("==", x, _const(ty, float("inf")))
    return _select(b, inf, x, out)


def tanh(cg, b, x):
    """tanh x = copysign(1 - 2 / (exp(2|x|) + 1), x); keeps -0.0 and NaN."""
    ty = x.type
    ax = b.call(_llvm_intrinsic(cg, "fabs", ty, [x]), [x])
    e = exp(cg, b, b.fmul(ax, _const(ty, 2.0)))
    t = b.fsub(_const(ty, 1.0), b.fdiv(_const(ty, 2.0), b.fadd(e, _const(ty, 1.0))))
    small = b.fcmp_ordered("<", ax, _const(ty, _format(ty).tanh_small))
    t = _select(b, small, ax, t)
    return b.call(_llvm_intrinsic(cg, "copysign", ty, [t, x]), [t, x])


def sigmoid(cg, b, x):
    ty = x.type
    return b.fdiv(_const(ty, 1.0), b.fadd(_const(ty, 1.0), exp(cg, b, b.fneg(x))))


# float64 erf: the Maclaurin coefficients of erf(x) / x in powers of x**2, and the depth of the
# continued fraction of erfc used from |x| = 2
_ERF_SERIES = [2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(32)]
_ERFC_DEPTH = 60
# float32 erf: a (5, 5) rational approximation of erf(x) / x in s = x**2 on [0, _ERF_ONE], fitted
# here (Loeb's linearised least squares with Lawson's minimax weights, numpy, float64): 4e-8 in
# float64, 4.2e-7 evaluated in float32; from _ERF_ONE float32's erf is 1 (erf(3.92) = 1 - 5e-9).
_ERF_ONE = 3.92
_ERF_P = [1.1283791628413722, 0.18454058767793385, 0.052036585505125126, 0.00353438945799003,
          0.0002831784342704445, 2.138974697141194e-06]
_ERF_Q = [1.0, 0.49687803134334335, 0.11174312367611842, 0.014499562645324185, 0.0011132238838791175,
          3.892828041281854e-05]


def erf(cg, b, x):
    """float32: x P(x^2) / Q(x^2) below |x| = 3.92 (_ERF_ONE), exactly +-1 from there (so 1 + erf(x) is 0
    for large negative x, as GELU needs; odd, keeps -0.0 and NaN): no exp and one division, half
    the instructions of a formula through exp (BERT's GELU epilogue in wasm);
    float64: erf's Maclaurin series for |x| < 2; 1 - erfc(|x|) by the continued fraction
    erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) up to |x| = 6;
    sign restored by copysign (keeps -0.0)."""
    ty = x.type
    ax = b.call(_llvm_intrinsic(cg, "fabs", ty, [x]), [x])
    if _format(ty) is F64:
        near = b.fmul(_horner(b, ty, _ERF_SERIES, b.fmul(ax, ax)), ax)
        z = _select(b, b.fcmp_ordered("<", ax, _const(ty, 2.0)), _const(ty, 2.0), ax)
        z = _select(b, b.fcmp_ordered(">", z, _const(ty, 6.0)), _const(ty, 6.0), z)
        t = z
        for k in range(_ERFC_DEPTH, 0, -1):
            t = b.fadd(z, b.fdiv(_const(ty, k / 2), t))
        erfc = b.fdiv(b.fmul(exp(cg, b, b.fneg(b.fmul(z, z))), _const(ty, 1 / math.sqrt(math.pi))), t)
        far = _select(b, b.fcmp_ordered(">=", ax, _const(ty, 6.0)), _const(ty, 1.0), b.fsub(_const(ty, 1.0), erfc))
        y = _select(b, b.fcmp_unordered("<", ax, _const(ty, 2.0)), near, far)
        return b.call(_llvm_intrinsic(cg, "copysign", ty, [y, x]), [y, x])
    s = b.fmul(x, x)
    y = b.fmul(x, b.fdiv(_horner(b, ty, _ERF_P, s), _horner(b, ty, _ERF_Q, s)))
    one = b.call(_llvm_intrinsic(cg, "copysign", ty, [x, x]), [_const(ty, 1.0), x])  # +-1 with the sign of x
    return _select(b, b.fcmp_unordered("<", ax, _const(ty, _ERF_ONE)), y, one)


def _fabs(cg, b, x):
    return b.call(_llvm_intrinsic(cg, "fabs", x.type, [x]), [x])


def _copysign(cg, b, mag, sign):
    return b.call(_llvm_intrinsic(cg, "copysign", mag.type, [mag, sign]), [mag, sign])


def _series(b, ty, first_power, step, coeffs, x):
    """sum_k coeffs[k] * x**(first_power + step*k) by Horner's rule in x**step."""
    xs = x
    for _ in range(step - 1):
        xs = b.fmul(xs, x)
    p = _horner(b, ty, coeffs, xs)
    for _ in range(first_power):
        p = b.fmul(p, x)
    return p


def _sin_cos_reduced(cg, b, x):
    """(sin r, cos r, quadrant k mod 4 as an integer) with x = k*pi/2 + r, |r| <= pi/4: Cody-Waite
    reduction by pi/2 in three parts, Taylor polynomials of sin and cos on r."""
    ty = x.type
    f = _format(ty)
    finite = b.fcmp_ordered("<", _fabs(cg, b, x), _const(ty, float("inf")))
    k = b.call(_llvm_intrinsic(cg, "rint", ty, [x]), [b.fmul(x, _const(ty, 2 / math.pi))])
    k = _select(b, finite, k, _const(ty, 0.0))
    r = x
    for part in f.pio2:
        r = b.fsub(r, b.fmul(k, _const(ty, part)))
    s = _series(b, ty, 1, 2, [(-1) ** n / math.factorial(2 * n + 1) for n in range(f.sin_terms)], r)
    c = _series(b, ty, 0, 2, [(-1) ** n / math.factorial(2 * n) for n in range(f.sin_terms + 1)], r)
    it = _int_type_like(ty, f.bits)
    q = b.and_(b.fptosi(k, it), _const(it, 3))
    return s, c, q, it


def _quadrant(b, it, q, bit):
    return b.icmp_unsigned("!=", b.and_(q, _const(it, bit)), _const(it, 0))


def sin(cg, b, x):
    """sin x: quadrant q of x = k pi/2 + r picks +-sin r or +-cos r."""
    s, c, q, it = _sin_cos_reduced(cg, b, x)
    y = _select(b, _quadrant(b, it, q, 1), c, s)
    return _select(b, _quadrant(b, it, q, 2), b.fneg(y), y)


def cos(cg, b, x):
    """cos x = sin(x + pi/2): the quadrant shifted by one."""
    s, c, q, it = _sin_cos_reduced(cg, b, x)
    y = _select(b, _quadrant(b, it, q, 1), s, c)
    q1 = b.add(q, _const(it, 1))
    return _select(b, _quadrant(b, it, q1, 2), b.fneg(y), y)


def tan(cg, b, x):
    """tan x = sin r / cos r, or -cos r / sin r in odd quadrants."""
    s, c, q, it = _sin_cos_reduced(cg, b, x)
    odd = _quadrant(b, it, q, 1)
    return _select(b, odd, b.fdiv(b.fneg(c), s), b.fdiv(s, c))


def atan(cg, b, x):
    """atan x: |x| > 1 as pi/2 - atan(1/|x|), then t > tan(pi/8) as pi/4 + atan((t-1)/(t+1)), Taylor
    series on |t| <= tan(pi/8); sign restored by copysign."""
    ty = x.type
    f = _format(ty)
    ax = _fabs(cg, b, x)
    big = b.fcmp_ordered(">", ax, _const(ty, 1.0))
    t = _select(b, big, b.fdiv(_const(ty, 1.0), ax), ax)
    mid = b.fcmp_ordered(">", t, _const(ty, math.tan(math.pi / 8)))
    t = _select(b, mid, b.fdiv(b.fsub(t, _const(ty, 1.0)), b.fadd(t, _const(ty, 1.0))), t)
    p = _series(b, ty, 1, 2, [(-1) ** n / (2 * n + 1) for n in range(f.atan_terms)], t)
    p = _select(b, mid, b.fadd(p, _const(ty, math.pi / 4)), p)
    p = _select(b, big, b.fsub(_const(ty, math.pi / 2), p), p)
    return _copysign(cg, b, p, x)


def asin(cg, b, x):
    """asin x = atan(x / sqrt((1 - x)(1 + x))) (nan for |x| > 1)."""
    ty = x.type
    d = b.fmul(b.fsub(_const(ty, 1.0), x), b.fadd(_const(ty, 1.0), x))
    return atan(cg, b, b.fdiv(x, b.call(_llvm_intrinsic(cg, "sqrt", ty, [d]), [d])))


def acos(cg, b, x):
    """acos x = 2 atan(sqrt((1 - x) / (1 + x))) (nan for |x| > 1)."""
    ty = x.type
    q = b.fdiv(b.fsub(_const(ty, 1.0), x), b.fadd(_const(ty, 1.0), x))
    return b.fmul(_const(ty, 2.0), atan(cg, b, b.call(_llvm_intrinsic(cg, "sqrt", ty, [q]), [q])))


def _log1p(cg, b, y):
    """ln(1 + y) without the rounding of 1 + y: u = 1 + y, ln u * y / (u - 1) (y when u == 1)."""
    ty = y.type
    u = b.fadd(_const(ty, 1.0), y)
    exact = b.fcmp_ordered("==", u, _const(ty, 1.0))
    scaled = b.fdiv(b.fmul(log(cg, b, u), y), b.fsub(u, _const(ty, 1.0)))
    inf = b.fcmp_ordered("==", y, _const(ty, float("inf")))
    return _select(b, exact, y, _select(b, inf, y, scaled))


def _exp_pair(cg, b, ax):
    """(e**|x| / 2, e**-|x| / 2) without overflow below the largest finite result: h = e**(|x|/2)."""
    ty = ax.type
    h = exp(cg, b, b.fmul(ax, _const(ty, 0.5)))
    return b.fmul(b.fmul(h, _const(ty, 0.5)), h), b.fdiv(_const(ty, 0.5), b.fmul(h, h))


def sinh(cg, b, x):
    """sinh x: Taylor series for |x| < 1/2, else (e**|x| - e**-|x|) / 2; odd."""
    ty = x.type
    f = _format(ty)
    ax = _fabs(cg, b, x)
    small = _series(b, ty, 1, 2, [1 / math.factorial(2 * n + 1) for n in range(f.sinh_terms)], ax)
    up, down = _exp_pair(cg, b, ax)
    y = _select(b, b.fcmp_ordered("<", ax, _const(ty, 0.5)), small, b.fsub(up, down))
    return _copysign(cg, b, y, x)


def cosh(cg, b, x):
    """cosh x = (e**|x| + e**-|x|) / 2."""
    up, down = _exp_pair(cg, b, _fabs(cg, b, x))
    return b.fadd(up, down)


def asinh(cg, b, x):
    """asinh x = log1p(|x| + x**2 / (1 + sqrt(1 + x**2))), ln|x| + ln 2 where 1 + x**2 == x**2; odd."""
    ty = x.type
    ax = _fabs(cg, b, x)
    x2 = b.fmul(ax, ax)
    s = b.fadd(_const(ty, 1.0), b.call(_llvm_intrinsic(cg, "sqrt", ty, [x2]), [b.fadd(_const(ty, 1.0), x2)]))
    near = _log1p(cg, b, b.fadd(ax, b.fdiv(x2, s)))
    far = b.fadd(log(cg, b, ax), _const(ty, math.log(2.0)))
    y = _select(b, b.fcmp_ordered(">", ax, _const(ty, _format(ty).sqrt_eps)), far, near)
    return _copysign(cg, b, y, x)


def acosh(cg, b, x):
    """acosh x = log1p(t + sqrt(2t + t**2)) with t = x - 1; ln x + ln 2 where x**2 - 1 == x**2;
    nan below 1."""
    ty = x.type
    t = b.fsub(x, _const(ty, 1.0))
    r = b.fmul(t, b.fadd(t, _const(ty, 2.0)))
    near = _log1p(cg, b, b.fadd(t, b.call(_llvm_intrinsic(cg, "sqrt", ty, [r]), [r])))
    far = b.fadd(log(cg, b, x), _const(ty, math.log(2.0)))
    return _select(b, b.fcmp_ordered(">", x, _const(ty, _format(ty).sqrt_eps)), far, near)


def atanh(cg, b, x):
    """atanh x = log1p(2|x| / (1 - |x|)) / 2; odd (inf at 1, nan beyond)."""
    ty = x.type
    ax = _fabs(cg, b, x)
    y = _log1p(cg, b, b.fdiv(b.fmul(_const(ty, 2.0), ax), b.fsub(_const(ty, 1.0), ax)))
    return _copysign(cg, b, b.fmul(y, _const(ty, 0.5)), x)


_POLYNOMIAL = {"exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "erf": erf, "sin": sin, "cos": cos,
               "tan": tan, "asin": asin, "acos": acos, "atan": atan, "sinh": sinh, "cosh": cosh, "asinh": asinh,
               "acosh": acosh, "atanh": atanh}


def emit(cg, b, name: str, args, dtype: str):
    """Emit intrinsic `name` on scalar or vector float args (float16, bfloat16, float32 or
    float64; the 16-bit floats in float32 registers); raises CodegenError otherwise."""
    from tvmc.errors import CodegenError
    from tvmc.te.expr import is_float

    if not is_float(dtype):
        raise CodegenError(f"codegen: intrinsic {name} needs a float argument, got {dtype}")
    x = args[0]
    if name in _POLYNOMIAL:
        return _POLYNOMIAL[name](cg, b, x)
    if name == "pow":
        return exp(cg, b, b.fmul(args[1], log(cg, b, x)))
    llvm_name = {"sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil", "round": "rint"}.get(name)
    if llvm_name is None:
        raise CodegenError(f"codegen: unknown intrinsic {name}")
    return b.call(_llvm_intrinsic(cg, llvm_name, x.type, [x]), [x])
