"""Scalar expression AST shared by tensor expressions and the loop IR.

Index arithmetic is int64; tensor values carry their numpy dtype name ('float32', 'int64',
'bool', ...). Python operators build nodes (`a + b`, `a * 2`, `a < b`); equality nodes come
from `eq`/`ne` so that expressions stay hashable by identity.
"""

from __future__ import annotations

import itertools

INDEX = "int64"

_names = itertools.count()


def const(value, dtype: str | None = None) -> "PrimExpr":
    """A literal of `dtype` (IntImm for integer and bool dtypes, FloatImm for float ones); without
    `dtype`: int -> int64, float -> float32, bool -> bool. A PrimExpr is returned unchanged."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool) and dtype is None:
        return IntImm(int(value), "bool")
    if dtype is not None:
        return FloatImm(float(value), dtype) if is_float(dtype) else IntImm(int(value), dtype)
    if isinstance(value, int):
        return IntImm(value, INDEX)
    return FloatImm(float(value), "float32")


# The converter of graph shape expressions (tvmc.graph.symbolic.SymExpr) to te expressions over
# bound SizeVars: tvmc.te.extent.from_graph, registered by that module when it is imported (it
# imports this one, so this one does not import it back).
_graph_extent = None


def register_graph_extent(convert) -> None:
    """Set the converter _wrap applies to graph shape expressions (tvmc.te.extent registers
    from_graph)."""
    global _graph_extent
    _graph_extent = convert


def _wrap(x, like: "PrimExpr | None" = None) -> "PrimExpr":
    if isinstance(x, PrimExpr):
        if like is not None and x.dtype == INDEX and is_float(like.dtype) and not isinstance(x, IntImm):
            return Cast(like.dtype, x)  # a symbolic element count in float arithmetic (a mean's divisor)
        return x
    if hasattr(x, "var") and isinstance(x.var, PrimExpr):  # an IterVar stands for its variable
        return x.var
    if type(x).__name__ == "SymExpr":  # a graph shape expression, inside extent.bind_graph_vars
        if _graph_extent is None:
            raise TypeError(f"symbolic extent {x} outside a binding of its size variables (bind_graph_vars)")
        x = _graph_extent(x)
        x = x if isinstance(x, PrimExpr) else IntImm(int(x), INDEX)
        # an element count in float arithmetic (a mean's divisor): the value as the other operand's type
        return Cast(like.dtype, x) if like is not None and is_float(like.dtype) else x
    if like is not None and isinstance(x, (int, float)) and not isinstance(x, bool):
        if is_float(like.dtype):
            return FloatImm(float(x), like.dtype)
        if isinstance(x, int):
            return IntImm(x, like.dtype)
    return const(x)


# 16-bit floats (IEEE binary16, and bfloat16: float32's sign and 8 exponent bits with 7 mantissa
# bits, Google Brain's format): 16 bits in memory, float32 in registers; every value they hold is
# rounded to the 16-bit type (to nearest, ties to even) where it is stored or cast
FLOAT16_DTYPES = ("float16", "bfloat16")


def is_float(dtype: str) -> bool:
    """float16, bfloat16, float32, float64."""
    return dtype.startswith("float") or dtype == "bfloat16"


def register_dtype(dtype: str) -> str:
    """The dtype a value of `dtype` is computed in: float32 for the 16-bit floats
    (FLOAT16_DTYPES), else `dtype` itself."""
    return "float32" if dtype in FLOAT16_DTYPES else dtype


class PrimExpr:
    """Base class of scalar expressions."""

    dtype: str

    def __add__(self, o):
        return BinOp("add", self, _wrap(o, self))

    def __radd__(self, o):
        return BinOp("add", _wrap(o, self), self)

    def __sub__(self, o):
        return BinOp("sub", self, _wrap(o, self))

    def __rsub__(self, o):
        return BinOp("sub", _wrap(o, self), self)

    def __mul__(self, o):
        return BinOp("mul", self, _wrap(o, self))

    def __rmul__(self, o):
        return BinOp("mul", _wrap(o, self), self)

    def __truediv__(self, o):
        return BinOp("div", self, _wrap(o, self))

    def __rtruediv__(self, o):
        return BinOp("div", _wrap(o, self), self)

    def __floordiv__(self, o):
        return BinOp("floordiv", self, _wrap(o, self))

    def __mod__(self, o):
        return BinOp("floormod", self, _wrap(o, self))

    def __neg__(self):
        if is_float(self.dtype):  # x * -1 keeps the sign of zero, 0 - x would not
            return BinOp("mul", self, FloatImm(-1.0, self.dtype))
        return BinOp("sub", _wrap(0, self), self)

    def __lt__(self, o):
        return Cmp("lt", self, _wrap(o, self))

    def __le__(self, o):
        return Cmp("le", self, _wrap(o, self))

    def __gt__(self, o):
        return Cmp("gt", self, _wrap(o, self))

    def __ge__(self, o):
        return Cmp("ge", self, _wrap(o, self))

    __hash__ = object.__hash__


class IntImm(PrimExpr):
    def __init__(self, value: int, dtype: str = INDEX):
        self.value = int(value)
        self.dtype = dtype

    def __repr__(self):
        return str(self.value)


def literal_value(e: "FloatImm") -> float:
    """The value float literal `e` holds: `e.value` rounded to float16 or bfloat16 for those
    dtypes (a float32 register then holds it exactly; bfloat16 through float32, as ml_dtypes
    rounds a Python float and as a float64 -> bfloat16 cast does)."""
    import numpy as np

    if e.dtype == "float16":
        return float(np.float16(e.value))
    if e.dtype == "bfloat16":
        return float(np.float32(e.value).astype("bfloat16"))
    return e.value


class FloatImm(PrimExpr):
    def __init__(self, value: float, dtype: str = "float32"):
        self.value = float(value)
        self.dtype = dtype

    def __repr__(self):
        return repr(self.value)


class Var(PrimExpr):
    """A scalar variable (loop index, iteration axis). Identity-compared."""

    def __init__(self, name: str = "v", dtype: str = INDEX):
        self.name = name
        self.dtype = dtype

    def __repr__(self):
        return self.name


class SizeVar(Var):
    """A symbolic tensor extent: an int64 variable known to lie in [lo, hi] (TVM's tir.SizeVar, the
    bounded shape variables of TVM Relax). It may appear in tensor shapes, loop extents and index
    arithmetic; a kernel that uses one takes its value as an int64 argument after its buffers
    (tvmc.tir.ir.PrimFunc.size_vars), and the simplifier bounds it by [lo, hi]. Identity-compared
    like every Var: two SizeVars of one name are two variables."""

    def __init__(self, name: str, lo: int, hi: int):
        if isinstance(lo, bool) or isinstance(hi, bool) or int(lo) != lo or int(hi) != hi or not 0 <= lo <= hi:
            raise ValueError(f"size variable {name}: bounds {lo}..{hi} must be integers with 0 <= lo <= hi")
        super().__init__(name, INDEX)
        self.lo, self.hi = int(lo), int(hi)


def size_var(name: str, lo: int, hi: int) -> SizeVar:
    """A SizeVar `name` in [lo, hi] (e.g. size_var("seq", 1, 512)); ValueError on bad bounds."""
    return SizeVar(name, lo, hi)


_INT_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max}


def evaluate_int(e, values: dict) -> int:
    """The value of an int64 expression of literals and Vars (an extent of SizeVars) with the Vars
    set by `values` (Var -> int), floor division as in the loop IR. Raises ValueError for a Var
    without a value or another kind of node."""
    if isinstance(e, int):
        return e
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        if e not in values:
            raise ValueError(f"no value for {e.name} in {e!r}")
        return int(values[e])
    if isinstance(e, BinOp) and e.op in _INT_OPS:
        a, b = evaluate_int(e.a, values), evaluate_int(e.b, values)
        if e.op in ("floordiv", "floormod") and b == 0:
            raise ValueError(f"division by zero in {e!r}")
        return _INT_OPS[e.op](a, b)
    raise ValueError(f"{e!r} is not an integer expression of size variables")


BINOPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max", "and", "or", "fmod", "bitwise_and",
          "bitwise_or", "bitwise_xor", "left_shift", "right_shift")


class BinOp(PrimExpr):
    """Binary arithmetic: add, sub, mul, div (true division), floordiv, floormod, min, max, fmod
    (remainder with the dividend's sign, C's fmod / %), logical and, or (bool), and on integers
    bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift (logical for unsigned dtypes,
    arithmetic for signed ones)."""

    def __init__(self, op: str, a: PrimExpr, b: PrimExpr):
        assert op in BINOPS, op
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool" if op in ("and", "or") else a.dtype

    def __repr__(self):
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
               "and": "&&", "or": "||"}.get(self.op)
        return f"({self.a!r} {sym} {self.b!r})" if sym else f"{self.op}({self.a!r}, {self.b!r})"


class Cmp(PrimExpr):
    """Comparison lt, le, gt, ge, eq, ne -> bool."""

    def __init__(self, op: str, a: PrimExpr, b: PrimExpr):
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool"

    def __repr__(self):
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[self.op]
        return f"({self.a!r} {sym} {self.b!r})"


class Not(PrimExpr):
    def __init__(self, a: PrimExpr):
        self.a = a
        self.dtype = "bool"

    def __repr__(self):
        return f"!{self.a!r}"


class Select(PrimExpr):
    """`cond ? t : f` (both sides evaluated; loads must be in bounds on both)."""

    def __init__(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr):
        self.cond, self.t, self.f = cond, t, f
        self.dtype = t.dtype

    def __repr__(self):
        return f"select({self.cond!r}, {self.t!r}, {self.f!r})"


class Cast(PrimExpr):
    def __init__(self, dtype: str, value: PrimExpr):
        self.dtype, self.value = dtype, value

    def __repr__(self):
        return f"{self.dtype}({self.value!r})"


INTRINSICS = ("exp", "log", "sqrt", "tanh", "erf", "sigmoid", "fabs", "pow", "floor", "ceil", "round", "sin", "cos",
              "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "reinterpret")


class Call(PrimExpr):
    """Math intrinsic call (one of INTRINSICS; `round` rounds half to even; `reinterpret` reads
    its argument's bits as `dtype`)."""

    def __init__(self, name: str, args, dtype: str):
        assert name in INTRINSICS, name
        self.name, self.args, self.dtype = name, tuple(args), dtype

    def __repr__(self):
        return f"{self.name}({', '.join(map(repr, self.args))})"


class Let(PrimExpr):
    """`let var = value in body` (TVM's tir.Let): `value` is computed once and `body` reads it
    through `var` as often as it likes, so a sub-expression used many times stays one node when
    the expression is lowered, simplified and code-generated (without it the tree each use
    copies grows exponentially with nesting). Codegens may compute `value` before the whole
    statement holding the Let (the OpenCL printer declares it there, as TVM's CodeGenC does), so
    it must be safe to compute unconditionally: no load that a Select guards."""

    def __init__(self, var: Var, value: PrimExpr, body: PrimExpr):
        assert var.dtype == value.dtype, (var.dtype, value.dtype)
        self.var, self.value, self.body = var, value, body
        self.dtype = body.dtype

    def __repr__(self):
        return f"(let {self.var!r} = {self.value!r} in {self.body!r})"


class TensorLoad(PrimExpr):
    """`tensor[indices]` at the tensor-expression level (multi-dimensional)."""

    def __init__(self, tensor, indices):
        self.tensor = tensor
        self.indices = tuple(_wrap(i) for i in indices)
        self.dtype = tensor.dtype

    def __repr__(self):
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


class Reduce(PrimExpr):
    """Commutative reduction `combiner` ('sum', 'prod', 'max', 'min') of `source` over `axes`
    (IterVars); with `condition` (a bool expression, TVM's `where`) only the points where it holds
    are combined (Schedule.rfactor's tail of an extent its factor does not divide)."""

    def __init__(self, combiner: str, source: PrimExpr, axes, condition: PrimExpr | None = None):
        self.combiner, self.source, self.axes = combiner, source, tuple(axes)
        self.condition = condition
        self.dtype = source.dtype

    def identity(self) -> PrimExpr:
        if self.combiner == "sum":
            return _wrap(0.0 if is_float(self.dtype) else 0, self)
        if self.combiner == "prod":
            return _wrap(1.0 if is_float(self.dtype) else 1, self)
        if is_float(self.dtype):  # -inf / inf: a max over -inf values is -inf, not the lowest finite value
            return FloatImm(float("-inf") if self.combiner == "max" else float("inf"), self.dtype)
        return min_value(self.dtype) if self.combiner == "max" else max_value(self.dtype)

    def __repr__(self):
        where = "" if self.condition is None else f", where={self.condition!r}"
        return f"{self.combiner}({self.source!r}, axes={[a.var for a in self.axes]}{where})"


class Load(PrimExpr):
    """Loop-IR load `buffer[index]` with a flat element index."""

    def __init__(self, buffer, index: PrimExpr):
        self.buffer, self.index = buffer, index
        self.dtype = buffer.dtype

    def __repr__(self):
        return f"{self.buffer.name}[{self.index!r}]"


def _limits(dtype: str) -> tuple:
    """(lowest, highest) finite value of `dtype`'s register type: float16 and bfloat16 run in
    float32 registers, so their limits are float32's (stored, they round to -inf/+inf: float32's
    largest value is above bfloat16's largest by more than half its ulp)."""
    import numpy as np

    if is_float(dtype):
        big = float(np.finfo("float64" if dtype == "float64" else "float32").max)
        return -big, big
    info = np.iinfo("uint8" if dtype == "bool" else dtype)
    return int(info.min), int(info.max)


def min_value(dtype: str) -> PrimExpr:
    """The lowest finite value of `dtype` as a literal (TVM's te.min_value): the identity of max."""
    lo = _limits(dtype)[0]
    return FloatImm(lo, dtype) if is_float(dtype) else IntImm(lo, dtype)


def max_value(dtype: str) -> PrimExpr:
    """The highest finite value of `dtype` as a literal (TVM's te.max_value): the identity of min."""
    hi = _limits(dtype)[1]
    return FloatImm(hi, dtype) if is_float(dtype) else IntImm(hi, dtype)


# ---- constructors used by operator computes ------------------------------------------------

def eq(a, b):
    a = _wrap(a)
    return Cmp("eq", a, _wrap(b, a))


def ne(a, b):
    a = _wrap(a)
    return Cmp("ne", a, _wrap(b, a))


def logical_and(*conds):
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("and", out, c)
    return out


def logical_or(*conds):
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("or", out, c)
    return out


def _binop(op):
    def f(a, b):
        a = _wrap(a)
        return BinOp(op, a, _wrap(b, a))

    f.__name__ = op
    f.__doc__ = f"BinOp '{op}' of two expressions of one dtype (a Python number takes the other's dtype)."
    return f


fmod = _binop("fmod")
bitwise_and, bitwise_or, bitwise_xor = _binop("bitwise_and"), _binop("bitwise_or"), _binop("bitwise_xor")
left_shift, right_shift = _binop("left_shift"), _binop("right_shift")


def reinterpret(dtype: str, x) -> "Call":
    """The bits of `x` read as `dtype`, which has the same size (TVM's tir.reinterpret; ONNX BitCast)."""
    x = _wrap(x)
    return Call("reinterpret", [x], dtype)


def let(value, body_fn, name: str = "v") -> PrimExpr:
    """`body_fn(v)` with v a fresh Var bound to `value` once (a Let); a literal or a Var is passed
    as it is, having nothing to compute twice."""
    value = _wrap(value)
    if isinstance(value, (IntImm, FloatImm, Var)):
        return body_fn(value)
    var = Var(name, value.dtype)
    return Let(var, value, body_fn(var))


def select(cond, t, f):
    t = _wrap(t)
    return Select(cond, t, _wrap(f, t))


def maximum(a, b):
    """Elementwise max; on floats NaN-propagating (numpy's `maximum`: NaN if either is NaN)."""
    a = _wrap(a)
    return BinOp("max", a, _wrap(b, a))


def minimum(a, b):
    """Elementwise min; on floats NaN-propagating (numpy's `minimum`)."""
    a = _wrap(a)
    return BinOp("min", a, _wrap(b, a))


def cast(dtype: str, x) -> PrimExpr:
    x = _wrap(x)
    return x if x.dtype == dtype else Cast(dtype, x)


def _intrin(name):
    def f(*args):
        args = [_wrap(a) for a in args]
        return Call(name, args, args[0].dtype)

    f.__name__ = name
    f.__doc__ = f"Math intrinsic {name} (lowered by codegen; polynomial forms where vectorized)."
    return f


exp = _intrin("exp")
log = _intrin("log")
sqrt = _intrin("sqrt")
tanh = _intrin("tanh")
erf = _intrin("erf")
sigmoid = _intrin("sigmoid")
fabs = _intrin("fabs")
power = _intrin("pow")
floor = _intrin("floor")
ceil = _intrin("ceil")
round = _intrin("round")  # noqa: A001  (TVM's name; half to even)
sin, cos, tan = _intrin("sin"), _intrin("cos"), _intrin("tan")
asin, acos, atan = _intrin("asin"), _intrin("acos"), _intrin("atan")
sinh, cosh = _intrin("sinh"), _intrin("cosh")
asinh, acosh, atanh = _intrin("asinh"), _intrin("acosh"), _intrin("atanh")


def children(e: PrimExpr):
    """Direct sub-expressions of `e`."""
    if isinstance(e, (BinOp, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, TensorLoad):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,) if e.condition is None else (e.source, e.condition)
    if isinstance(e, Load):
        return (e.index,)
    if isinstance(e, Let):
        return (e.value, e.body)
    return ()


def transform(e: PrimExpr, fn, pre=None) -> PrimExpr:
    """Bottom-up rebuild: `fn(node_with_new_children)` returns a replacement or None (keep).
    `pre(node, visit)`, if given, is asked first, top-down: a replacement (built with `visit`, e.g.
    one side of a Select whose condition is known) or None to rebuild the node as usual."""
    memo = {}

    def visit(x):
        if x in memo:
            return memo[x]
        if pre is not None:
            r = pre(x, visit)
            if r is not None:
                memo[x] = r
                return r
        if isinstance(x, BinOp):
            n = BinOp(x.op, visit(x.a), visit(x.b))
        elif isinstance(x, Cmp):
            n = Cmp(x.op, visit(x.a), visit(x.b))
        elif isinstance(x, Not):
            n = Not(visit(x.a))
        elif isinstance(x, Select):
            n = Select(visit(x.cond), visit(x.t), visit(x.f))
        elif isinstance(x, Cast):
            n = Cast(x.dtype, visit(x.value))
        elif isinstance(x, Call):
            n = Call(x.name, [visit(a) for a in x.args], x.dtype)
        elif isinstance(x, TensorLoad):
            n = TensorLoad(x.tensor, [visit(i) for i in x.indices])
        elif isinstance(x, Reduce):
            n = Reduce(x.combiner, visit(x.source), x.axes, None if x.condition is None else visit(x.condition))
        elif isinstance(x, Load):
            n = Load(x.buffer, visit(x.index))
        elif isinstance(x, Let):
            n = Let(x.var, visit(x.value), visit(x.body))
        else:
            n = x
        r = fn(n)
        memo[x] = n if r is None else r
        return memo[x]

    return visit(e)


def substitute(e: PrimExpr, mapping: dict, pre=None) -> PrimExpr:
    """Replace Vars by expressions (`mapping`: Var -> PrimExpr); `pre` as for transform."""
    if not mapping:
        return e
    return transform(e, lambda x: mapping.get(x) if isinstance(x, Var) else None, pre)


def walk(e: PrimExpr):
    """Pre-order iterator over all nodes of `e`."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))
