"""Tensor expressions: operator math as `compute` over placeholders, plus schedules (TVM's te)."""

from tvmc.te.expr import (  # noqa: F401,A004
    PrimExpr, Var, SizeVar, size_var, IntImm, FloatImm, const, cast, select, maximum, minimum, eq, ne,
    logical_and, logical_or, exp, log, sqrt, tanh, erf, sigmoid, fabs, power, floor, ceil, min_value, max_value,
    round, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,
    let, Let, fmod, bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift, reinterpret,
)
from tvmc.te.tensor import Tensor, IterVar, placeholder, compute, reduce_axis, sum, max, min, prod  # noqa: F401,A004
from tvmc.te.schedule import Schedule, Stage, ThreadAxis, create_schedule, thread_axis  # noqa: F401
