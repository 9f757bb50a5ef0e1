"""Math intrinsics as inline LLVM IR: polynomial exp/log/tanh/erf/sigmoid (vectorizable, no libm
in hot loops, usable on wasm32), plus sqrt/fabs/floor/ceil through LLVM intrinsics.

Maximum errors (float32, measured against numpy in tests/unit/test_codegen.py; worst cases found by
exhaustive scans of the float32 binades):
exp  relative 2e-7 on [-87, 88.72], +inf above, subnormals down to -103 (Cody-Waite reduction,
     degree-7 Taylor on |r| <= ln2/2);
log  relative 2.5e-7 for normal x > 0 (atanh series in s = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)));
tanh absolute 2e-7 (1 - 2/(exp(2x)+1), odd-symmetric);
erf  absolute 7e-7 (Abramowitz & Stegun 7.1.26 with the exp above: the formula's own 1.5e-7 plus
     float32 rounding of 1 - p(t) exp(-x^2), worst near |x| = 0.04);
sigmoid absolute 1e-7 (1/(1+exp(-x))).
"""

from __future__ import annotations

import math

from llvmlite import ir


def _const(ty, value):
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def _int_type_like(ty, width=32):
    it = ir.IntType(width)
    return ir.VectorType(it, ty.count) if isinstance(ty, ir.VectorType) else it


def _llvm_intrinsic(cg, name, ty, args):
    suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
    if isinstance((ty.element if isinstance(ty, ir.VectorType) else ty), ir.DoubleType):
        suffix = suffix.replace("f32", "f64")
    fn = cg.declare(f"llvm.{name}.{suffix}", ty, [ty] * len(args))
    return fn


def _select(b, c, x, y):
    return b.select(c, x, y)


def exp(cg, b, x):
    """e**x: x = n*ln2 + r, |r| <= ln2/2; e**r by degree-7 Taylor; scaled by 2**n as two
    exponent-bit factors 2**(n//2) * 2**(n - n//2), so results reach FLT_MAX and subnormals.
    NaN propagates (the clamps keep unordered inputs)."""
    ty = x.type
    hi, lo = 88.7228, -104.0
    xc = _select(b, b.fcmp_ordered(">", x, _const(ty, hi)), _const(ty, hi), x)
    xc = _select(b, b.fcmp_ordered("<", xc, _const(ty, lo)), _const(ty, lo), xc)
    n = b.fmul(xc, _const(ty, 1.0 / math.log(2.0)))
    n = b.call(_llvm_intrinsic(cg, "rint", ty, [n]), [n])
    r = b.fsub(xc, b.fmul(n, _const(ty, 0.693145751953125)))
    r = b.fsub(r, b.fmul(n, _const(ty, 1.428606765330187e-06)))
    p = _const(ty, 1.0 / 5040)
    for k in (720, 120, 24, 6, 2, 1, 1):
        p = b.fadd(b.fmul(p, r), _const(ty, 1.0 / k))
    it = _int_type_like(ty)
    nan = b.fcmp_unordered("uno", x, x)
    ni = b.fptosi(_select(b, nan, _const(ty, 0.0), n), it)
    n1 = b.ashr(ni, _const(it, 1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, _const(it, 127)), _const(it, 23)), ty)
    s2 = b.bitcast(b.shl(b.add(n2, _const(it, 127)), _const(it, 23)), ty)
    out = b.fmul(b.fmul(p, s1), s2)
    out = _select(b, b.fcmp_ordered(">", x, _const(ty, hi)), _const(ty, float("inf")), out)
    return _select(b, nan, x, out)


def log(cg, b, x):
    """ln x for x > 0 (nan for x < 0, -inf for 0): x = m * 2**e, ln m = 2 atanh((m-1)/(m+1))."""
    ty = x.type
    it = _int_type_like(ty)
    bits = b.bitcast(x, it)
    e = b.sub(b.lshr(bits, _const(it, 23)), _const(it, 127))
    m = b.bitcast(b.or_(b.and_(bits, _const(it, 0x007FFFFF)), _const(it, 0x3F800000)), ty)
    big = b.fcmp_ordered(">", m, _const(ty, math.sqrt(2.0)))
    m = _select(b, big, b.fmul(m, _const(ty, 0.5)), m)
    e = _select(b, big, b.add(e, _const(it, 1)), e)
    s = b.fdiv(b.fsub(m, _const(ty, 1.0)), b.fadd(m, _const(ty, 1.0)))
    s2 = b.fmul(s, s)
    p = _const(ty, 1.0 / 11)
    for k in (9, 7, 5, 3, 1):
        p = b.fadd(b.fmul(p, s2), _const(ty, 1.0 / k))
    out = b.fadd(b.fmul(_const(ty, 2.0), b.fmul(s, p)), b.fmul(b.sitofp(e, ty), _const(ty, math.log(2.0))))
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
    small = b.fcmp_ordered("<", ax, _const(ty, 1e-4))
    t = _select(b, small, ax, t)
    return b.call(_llvm_intrinsic(cg, "copysign", ty, [t, x]), [t, x])


def sigmoid(cg, b, x):
    ty = x.type
    return b.fdiv(_const(ty, 1.0), b.fadd(_const(ty, 1.0), exp(cg, b, b.fneg(x))))


def erf(cg, b, x):
    """Abramowitz & Stegun 7.1.26: 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1/(1 + p|x|)."""
    ty = x.type
    ax = b.call(_llvm_intrinsic(cg, "fabs", ty, [x]), [x])
    t = b.fdiv(_const(ty, 1.0), b.fadd(_const(ty, 1.0), b.fmul(_const(ty, 0.3275911), ax)))
    p = _const(ty, 1.061405429)
    for a in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p = b.fadd(b.fmul(p, t), _const(ty, a))
    p = b.fmul(p, t)
    y = b.fsub(_const(ty, 1.0), b.fmul(p, exp(cg, b, b.fneg(b.fmul(ax, ax)))))
    return _select(b, b.fcmp_ordered("<", x, _const(ty, 0.0)), b.fneg(y), y)


def emit(cg, b, name: str, args, dtype: str):
    """Emit intrinsic `name` on scalar or vector float args; raises CodegenError otherwise."""
    from tvmc.errors import CodegenError

    if not dtype.startswith("float"):
        raise CodegenError(f"codegen: intrinsic {name} needs a float argument, got {dtype}")
    x = args[0]
    if dtype != "float32" and name in ("exp", "log", "tanh", "sigmoid", "erf", "pow"):
        raise CodegenError(f"codegen: intrinsic {name} is implemented for float32 only, got {dtype}")
    if name == "exp":
        return exp(cg, b, x)
    if name == "log":
        return log(cg, b, x)
    if name == "tanh":
        return tanh(cg, b, x)
    if name == "sigmoid":
        return sigmoid(cg, b, x)
    if name == "erf":
        return erf(cg, b, x)
    if name == "pow":
        return exp(cg, b, b.fmul(args[1], log(cg, b, x)))
    llvm_name = {"sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil"}.get(name)
    if llvm_name is None:
        raise CodegenError(f"codegen: unknown intrinsic {name}")
    return b.call(_llvm_intrinsic(cg, llvm_name, x.type, [x]), [x])
