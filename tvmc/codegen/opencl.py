"""OpenCL codegen: device kernels (loop IR after tvmc.tir.gpu.lower_device) -> OpenCL C source.

A printer made of spelling tables, like tinygrad's cstyle renderers: thread axes become
get_group_id / get_local_id, scopes __global / __local / private arrays, barriers
barrier(CLK_LOCAL_MEM_FENCE); vectorized loops over contiguous float32 data become vloadN /
vstoreN on floatN values (other vectorized loops are unrolled scalar code). Math intrinsics
are OpenCL built-ins (exp, log, tanh, erf, pow, sqrt, the trigonometric and hyperbolic functions:
within 16 ulp in OpenCL's full profile, far inside the tests' float32 tolerance of 1e-4
relative). Semantics follow the LLVM codegen: floor division and modulo for signed integers
(unsigned ones divide as C does), NaN-propagating min/max as `(b != b || b < a) ? b : a` (a NaN
on either side wins, as the LLVM codegen's selects; numpy's minimum/maximum), narrow integer
arithmetic wrapping to its width, bool tensors stored as uchar. Index arithmetic is 64-bit
(`long`).

float16 needs no cl_khr_fp16 (OpenCL C 1.2 sec. 6.1.1.1: without it `half` may only be the
pointee of a pointer, read and written by vload_half / vstore_half): as in the LLVM codegen,
float16 values are `float` in registers and `half` in memory, loaded with vload_half (exact) and
stored with vstore_half_rte (round to nearest even, once); a Cast to float16 rounds the same way
through a private half. Kernel parameters are `half*`; shared and private float16 arrays
(tvmc.tir.lower holds intermediates in float32, but the loop IR allows them) are ushort arrays
of the bits, accessed through a `half*` of their address space.

bfloat16 (no OpenCL type: cl_intel_bfloat16_conversions is one vendor's) is `float` in registers
and its 16 bits as `ushort` in memory (parameters, shared and private arrays alike): loaded by a
16-bit shift into a float's upper half (exact), stored rounded to nearest even by integer
operations on the float's bits, NaN kept quiet (the LLVM codegen's float_to_bfloat16, spelled in
C); a Cast to bfloat16 converts to float first (as ml_dtypes) and rounds the same way.
"""

from __future__ import annotations

import math

from tvmc.codegen.llvm import is_unsigned
from tvmc.errors import CodegenError
from tvmc.te.expr import (FLOAT16_DTYPES, BinOp, Call, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, PrimExpr, Select,
                          Var, is_float, literal_value, walk)
from tvmc.te.schedule import THREAD_TAGS
from tvmc.te.extent import upper_bound
from tvmc.tir.gpu import narrower, shared_buffers
from tvmc.tir.ir import Allocate, Barrier, DotU8S8, For, IfThenElse, PrimFunc, Seq, Stmt, Store
from tvmc.tir.simplify import Linear

# ---- spelling tables ----------------------------------------------------------------------------

# register types (float16 and bfloat16 compute in float32, as in tvmc/codegen/llvm.py)
TYPES = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double", "int64": "long",
         "int32": "int", "int16": "short", "int8": "char", "uint64": "ulong", "uint32": "uint", "uint16": "ushort",
         "uint8": "uchar", "bool": "bool"}
# element types in memory: bool is not a valid buffer element type in OpenCL C; half is only a
# pointee (parameters), so shared and private arrays of float16 hold its bits; bfloat16 is its bits
MEMORY_TYPES = dict(TYPES, bool="uchar", float16="half", bfloat16="ushort")
ARRAY_TYPES = dict(MEMORY_TYPES, float16="ushort")
UNSIGNED = {"int8": "uint", "int16": "uint", "int32": "uint", "int64": "ulong"}  # a signed type's shift type
THREAD_INDEX = {"blockIdx.x": "get_group_id(0)", "blockIdx.y": "get_group_id(1)", "blockIdx.z": "get_group_id(2)",
                "threadIdx.x": "get_local_id(0)", "threadIdx.y": "get_local_id(1)", "threadIdx.z": "get_local_id(2)"}
HALF_POINTERS = {"shared": "__local half*", "local": "half*"}  # float16 arrays by scope (global: parameters)
BARRIERS = {"shared": "barrier(CLK_LOCAL_MEM_FENCE);", "global": "barrier(CLK_GLOBAL_MEM_FENCE);"}
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&&", "or": "||", "bitwise_and": "&",
             "bitwise_or": "|", "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>",
             "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "fabs": "fabs", "floor": "floor",
        "ceil": "ceil", "pow": "pow", "round": "rint", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
        "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh",
        "atanh": "atanh"}  # round is half to even: rint (OpenCL's round goes away from zero)
NARROW_INTS = ("int8", "uint8", "int16", "uint16")   # C promotes them to int: results are cast back (wrap)
VECTOR_WIDTHS = (2, 3, 4, 8, 16)            # OpenCL C floatN types
VECTOR_MATH = ("exp", "log", "sqrt", "tanh", "erf", "fabs", "floor", "ceil")
# names a buffer or loop variable must not take (built-in functions and keywords of OpenCL C)
RESERVED = frozenset(MATH.values()) | frozenset(MEMORY_TYPES.values()) | {
    "sigmoid", "min", "max", "fmin", "fmax", "fmod", "select", "abs", "clamp", "mix", "sign", "round", "trunc", "exp2",
    "log2", "kernel", "global", "local", "private", "constant", "barrier", "vload4", "vstore4", "vload_half",
    "vstore_half_rte"}



def _dot_helper(kind: str, data_type: str) -> str:
    """tir.DotU8S8's step on one int32 ({T} is int) as an OpenCL C helper tvmc_dot_<kind>:
    acc + the 4 products of the `data_type` quad a (uchar4 or char4) and the char4 weights b,
    exact (a product fits 16 bits, their sum 18), added with wrapping (uint) arithmetic; the
    dot() of cl_khr_integer_dot_product (OpenCL C 3.0 feature macro) where the device compiler
    has it, else widening multiplies of the lanes."""
    return (f"inline {{T}} tvmc_dot_{kind}_{{T}}({data_type} a, char4 b, {{T}} acc) {{{{\n"
            "#ifdef __opencl_c_integer_dot_product_input_4x8bit\n"
            "  return as_int(as_uint(acc) + as_uint(dot(a, b)));\n"
            "#else\n"
            "  int4 p = convert_int4(a) * convert_int4(b);\n"
            "  return as_int(as_uint(acc) + as_uint(p.x + p.y + p.z + p.w));\n"
            "#endif\n}}")


# helpers emitted on demand: name -> C text (T is the type)
HELPERS = {
    "floordiv": "inline {T} tvmc_floordiv_{T}({T} a, {T} b) {{ {T} q = a / b; {T} r = a % b; "
                "return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q; }}",
    "floormod": "inline {T} tvmc_floormod_{T}({T} a, {T} b) {{ {T} r = a % b; "
                "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}",
    # b when b is NaN or wins, else a (NaN when a is): the LLVM codegen's NaN-propagating min/max
    # (for integers `b != b` is false)
    "min": "inline {T} tvmc_min_{T}({T} a, {T} b) {{ return (b != b || b < a) ? b : a; }}",
    "max": "inline {T} tvmc_max_{T}({T} a, {T} b) {{ return (b != b || b > a) ? b : a; }}",
    # the same on floatN vectors: fmin/fmax return the other operand for a NaN one, so a NaN `a`
    # is put back (b is a literal that is not NaN: _vector_expr_ok); one call, `a` evaluated once
    "vmin": "inline {T} tvmc_vmin_{T}({T} a, {T} b) {{ return select(fmin(a, b), a, isnan(a)); }}",
    "vmax": "inline {T} tvmc_vmax_{T}({T} a, {T} b) {{ return select(fmax(a, b), a, isnan(a)); }}",
    # a {T} rounded to float16 (nearest even) and widened back: the register value of a float16
    "to_half": "inline float tvmc_to_half_{T}({T} x) {{ ushort h; vstore_half_rte(x, 0, (half*)&h); "
               "return vload_half(0, (const half*)&h); }}",
    # the bits of a float16 register value ({T} is float), and back
    "half_bits": "inline ushort tvmc_half_bits_{T}({T} x) {{ ushort h; vstore_half_rte(x, 0, (half*)&h); return h; }}",
    "half_from_bits": "inline {T} tvmc_half_from_bits_{T}(ushort h) {{ return vload_half(0, (const half*)&h); }}",
    # the bits of a float rounded to bfloat16 (nearest even; NaN: its upper half, quiet), and
    # the float of bfloat16 bits ({T} is float)
    "bf16_bits": "inline ushort tvmc_bf16_bits_{T}({T} x) {{ uint b = as_uint(x); "
                 "return (ushort)((b & 0x7fffffffu) > 0x7f800000u ? (b >> 16) | 0x40u "
                 ": (b + 0x7fffu + ((b >> 16) & 1u)) >> 16); }}",
    "bf16_from_bits": "inline {T} tvmc_bf16_from_bits_{T}(ushort h) {{ return as_float((uint)h << 16); }}",
    # tir.DotU8S8's step on uint8 data (u8 x s8 products)
    "dot_u8s8": _dot_helper("u8s8", "uchar4"),
    # the same on int8 data (char4 a: s8 x s8 products)
    "dot_s8s8": _dot_helper("s8s8", "char4"),
}


def _float_literal(value: float, dtype: str) -> str:
    if math.isnan(value):
        return "NAN"
    if dtype in FLOAT16_DTYPES:  # a float16 or bfloat16 literal holds a value of its dtype (te.literal_value)
        value, dtype = literal_value(FloatImm(value, dtype)), "float32"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return f"({text}f)" if dtype == "float32" else f"({text})"


def _int_literal(value: int, dtype: str, ctype: str) -> str:
    if dtype == "uint64":
        return f"{value % 2**64}UL"
    if dtype == "int64":  # -2**63 has no literal: 2**63 does not fit a long
        return f"({value + 1}L - 1L)" if value == -2**63 else f"{value}L"
    return f"(({ctype}){value})"


class CodeGenOpenCL:
    """OpenCL C source for device-kernel PrimFuncs (one `__kernel` each), in one program text."""

    def __init__(self, target):
        self.target = target
        self.kernels: list = []
        self.helpers: dict = {}
        self.fp64 = False

    def add_function(self, prim: PrimFunc):
        """Print `prim` (a kernel after lower_device) as `__kernel void <name>(__global T* restrict ...)`;
        a kernel with symbolic extents takes its SizeVars after the buffers, `const long N` each
        (PrimFunc.size_vars), and sizes its local and shared arrays for their upper bounds."""
        if prim.launch is None:
            raise CodegenError(f"kernel {prim.name}: not lowered for a GPU (no launch configuration)")
        self._lines, self._depth, self._ranges, self._launch = [], 1, {}, prim.launch
        self._names, self._used = {}, set()
        args = [f"__global {self._mem_type(b.dtype)}* restrict {self._var_name(b)}" for b in prim.params]
        args += [f"const long {self._var_name(v)}" for v in prim.size_vars]
        lines = [f"__kernel void {prim.name}({', '.join(args)}) {{"]
        for buf in shared_buffers(prim):
            lines.append(f"  __local {self._array_type(buf.dtype)} {self._var_name(buf)}[{_array_size(buf)}];")
        self._stmt(prim.body)
        self.kernels.append("\n".join(lines + self._lines + ["}"]))

    def source(self) -> str:
        """The program: extension pragmas, helper functions, then every kernel."""
        head = ["// OpenCL C generated by tvmc"]
        if self.fp64:
            head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        head += [self.helpers[k] for k in sorted(self.helpers)]
        return "\n".join(head) + "\n\n" + "\n\n".join(self.kernels) + "\n"

    # --- types ---------------------------------------------------------------------------------
    def _type(self, dtype: str) -> str:
        if dtype == "float64":
            self.fp64 = True
        if dtype not in TYPES:
            raise CodegenError(f"OpenCL codegen: dtype {dtype} is not supported")
        return TYPES[dtype]

    def _mem_type(self, dtype: str) -> str:
        self._type(dtype)
        return MEMORY_TYPES[dtype]

    def _array_type(self, dtype: str) -> str:
        self._type(dtype)
        return ARRAY_TYPES[dtype]

    def _half_pointer(self, buf) -> str | None:
        """The `half*` through which float16 buffer `buf` is read (vload_half) and written
        (vstore_half_rte); None for other dtypes."""
        if buf.dtype != "float16":
            return None
        name = self._var_name(buf)
        return name if buf.scope == "global" else f"(({HALF_POINTERS[buf.scope]}){name})"

    def _helper(self, name: str, dtype: str, c_type: str | None = None) -> str:
        t = c_type or self._type(dtype)
        self.helpers[f"{name}_{t}"] = HELPERS[name].format(T=t)
        return f"tvmc_{name}_{t}"

    # --- statements ----------------------------------------------------------------------------
    def _emit(self, text: str):
        self._lines.append("  " * self._depth + text)

    def _block(self, head: str, body: Stmt):
        self._emit(head + " {")
        self._depth += 1
        self._stmt(body)
        self._depth -= 1
        self._emit("}")

    def _stmt(self, s: Stmt):
        if isinstance(s, Seq):
            for x in s.stmts:
                self._stmt(x)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, Store):
            self._store(s)
        elif isinstance(s, Allocate):
            if s.buffer.scope == "local":
                self._emit(f"{self._array_type(s.buffer.dtype)} {self._var_name(s.buffer)}[{_array_size(s.buffer)}];")
            self._stmt(s.body)  # shared buffers are declared at kernel scope (OpenCL requires it)
        elif isinstance(s, IfThenElse):
            self._block(f"if ({self._expr(s.cond)})", s.then)
            if s.otherwise is not None:
                self._block("else", s.otherwise)
        elif isinstance(s, Barrier):
            self._emit(BARRIERS[s.scope])
        elif isinstance(s, DotU8S8):
            self._dot_u8s8(s)
        else:
            raise CodegenError(f"OpenCL codegen: unsupported statement {type(s).__name__}")

    def _var_name(self, var) -> str:
        """A C identifier for loop variable or buffer `var`, unique in the kernel (IR names may
        hold dots or be the names of built-in functions, such as a buffer named tanh)."""
        if var not in self._names:
            self._names[var] = self._unique(var.name)
        return self._names[var]

    def _unique(self, ir_name: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in ir_name) or "v"
        base = base + "_" if base in RESERVED else base
        name, k = base, 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        return name

    def _for(self, s: For):
        name = self._var_name(s.var)
        self._ranges[s.var] = s.extent
        if s.kind in THREAD_TAGS:
            self._emit("{")
            self._depth += 1
            self._emit(f"const long {name} = (long){THREAD_INDEX[s.kind]};")
            if narrower(s.extent, self._launch.extent(s.kind)):
                self._block(f"if ({name} < {self._extent(s.extent)})", s.body)
            else:
                self._stmt(s.body)
            self._depth -= 1
            self._emit("}")
            return
        if s.kind == "vectorize" and self._vector_store(s):
            return
        if s.kind in ("unroll", "vectorize"):
            self._emit("#pragma unroll")
        self._block(f"for (long {name} = 0; {name} < {self._extent(s.extent)}; ++{name})", s.body)

    def _extent(self, extent) -> str:
        """A loop extent in C: a literal, or its expression of the kernel's size arguments."""
        return str(extent) if isinstance(extent, int) else self._expr(extent)

    def _dot_u8s8(self, s: DotU8S8):
        """tir.DotU8S8: per lane, the uchar4 data quad (char4 for int8 data) and the lane's char4
        weights (vload4: no alignment beyond the element's) into the tvmc_dot_u8s8 (tvmc_dot_s8s8)
        helper (HELPERS)."""
        if s.a.dtype == "int16":
            raise CodegenError("opencl: a DotU8S8 step on int16 data (a data_pairs stage, an x86 vpmaddwd form) has "
                               "no OpenCL form")
        helper = self._helper("dot_s8s8" if s.a.dtype == "int8" else "dot_u8s8", "int32")
        acc, a, b = (self._var_name(x) for x in (s.acc, s.a, s.b))
        quad = f"vload4(0, {a} + {self._expr(s.a_index)})"
        for c in range(s.lanes):
            w = f"vload4(0, {b} + {self._expr(s.b_index)} + {4 * c})"
            slot = f"{acc}[{self._expr(s.acc_index)} + {c}]"
            self._emit(f"{slot} = {helper}({quad}, {w}, {slot});")

    # --- vectorized loops ------------------------------------------------------------------------
    def _vector_store(self, s: For) -> bool:
        """Print `for v: buf[base + v] = f(...)` as one vstoreN of floatN values when every load
        is contiguous in v or does not depend on it, and f has a vector form; False otherwise."""
        if s.extent not in VECTOR_WIDTHS or not isinstance(s.body, Store) or s.body.buffer.dtype != "float32":
            return False
        var, lanes = s.var, s.extent
        base = _contiguous_base(s.body.index, var)
        if base is None or not _vector_expr_ok(s.body.value, var):
            return False
        value = self._vexpr(s.body.value, var, lanes)
        self._emit(f"vstore{lanes}({value}, 0, {self._var_name(s.body.buffer)} + {self._expr(base)});")
        return True

    def _vexpr(self, e, var, lanes):
        if not any(x is var for x in walk(e)):
            return self._expr(e)  # uniform: a scalar, widened by OpenCL C
        if isinstance(e, Load):
            return f"vload{lanes}(0, {self._var_name(e.buffer)} + {self._expr(_contiguous_base(e.index, var))})"
        if isinstance(e, BinOp) and e.op in ("min", "max"):
            # fmin/fmax return the other operand for a NaN one: the helper puts a NaN `a` back
            helper = self._helper(f"v{e.op}", "float32", f"float{lanes}")
            return f"{helper}({self._vexpr(e.a, var, lanes)}, {self._vexpr(e.b, var, lanes)})"
        if isinstance(e, BinOp):
            return f"({self._vexpr(e.a, var, lanes)} {OPERATORS[e.op]} {self._vexpr(e.b, var, lanes)})"
        if isinstance(e, Call) and e.name == "sigmoid":
            return f"((float{lanes})(1.0f) / ((float{lanes})(1.0f) + exp(-{self._vexpr(e.args[0], var, lanes)})))"
        return f"{MATH[e.name]}({', '.join(self._vexpr(a, var, lanes) for a in e.args)})"

    def _store(self, s: Store):
        value, index = self._expr(s.value), self._expr(s.index)
        pointer = self._half_pointer(s.buffer)
        if pointer is not None:
            self._emit(f"vstore_half_rte({value}, {index}, {pointer});")
        else:
            if s.buffer.dtype == "bool":
                value = f"(uchar)({value})"
            elif s.buffer.dtype == "bfloat16":
                value = f"{self._helper('bf16_bits', 'float32')}({value})"
            self._emit(f"{self._var_name(s.buffer)}[{index}] = {value};")

    # --- expressions ---------------------------------------------------------------------------
    def _expr(self, e: PrimExpr) -> str:
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "true" if e.value else "false"
            return _int_literal(e.value, e.dtype, self._type(e.dtype))
        if isinstance(e, FloatImm):
            self._type(e.dtype)
            return _float_literal(e.value, e.dtype)
        if isinstance(e, Var):
            return self._var_name(e)
        if isinstance(e, Load):
            pointer = self._half_pointer(e.buffer)
            if pointer is not None:
                return f"vload_half({self._expr(e.index)}, {pointer})"
            text = f"{self._var_name(e.buffer)}[{self._expr(e.index)}]"
            if e.dtype == "bfloat16":
                return f"{self._helper('bf16_from_bits', 'float32')}({text})"
            return f"({text} != 0)" if e.dtype == "bool" else text
        if isinstance(e, Select):
            return f"({self._expr(e.cond)} ? {self._expr(e.t)} : {self._expr(e.f)})"
        if isinstance(e, Let):
            return self._let(e)
        if isinstance(e, Not):
            return f"(!{self._expr(e.a)})"
        if isinstance(e, Cmp):
            return f"({self._expr(e.a)} {OPERATORS[e.op]} {self._expr(e.b)})"
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, BinOp):
            return self._binop(e)
        if isinstance(e, Call):
            return self._call(e)
        raise CodegenError(f"OpenCL codegen: unsupported expression {type(e).__name__}")

    def _let(self, e: Let) -> str:
        """Declare the bound value before the statement being printed (as TVM's CodeGenC does),
        under a name of its own: one Var may be bound by several Lets (a body inlined twice)."""
        value = self._expr(e.value)
        name = self._unique(e.var.name)
        self._emit(f"const {self._type(e.var.dtype)} {name} = {value};")
        outer = self._names.get(e.var)
        self._names[e.var] = name
        text = self._expr(e.body)
        if outer is None:
            del self._names[e.var]
        else:
            self._names[e.var] = outer
        return text

    def _cast(self, e: Cast) -> str:
        """C's conversions, which are numpy's astype for in-range values; a float16 result is
        rounded to float16 once, as in the LLVM codegen: a double directly (vstore_half_rte has
        a double form under cl_khr_fp64), an integer through float (exact below 2**24 in
        magnitude; above, rounding directly or through float both give float16's infinity); a
        bfloat16 result through float (as ml_dtypes), then rounded."""
        x, src, dst = self._expr(e.value), e.value.dtype, e.dtype
        if dst == "bool":
            return f"({x} != 0)"
        if dst == "bfloat16" and src != "bfloat16":
            bits = f"{self._helper('bf16_bits', 'float32')}((float){x})"
            return f"{self._helper('bf16_from_bits', 'float32')}({bits})"
        if dst == "float16" and src not in ("float16", "bool"):
            if src != "float64":
                src, x = "float32", f"((float){x})"
            return f"{self._helper('to_half', src)}({x})"
        return f"(({self._type(dst)}){x})"

    def _binop(self, e: BinOp) -> str:
        a, b, dtype = self._expr(e.a), self._expr(e.b), e.a.dtype
        if e.op in ("min", "max"):
            return f"{self._helper(e.op, dtype)}({a}, {b})"
        if e.op == "fmod":
            text = f"fmod({a}, {b})" if is_float(dtype) else f"({a} % {b})"
        elif e.op in ("floordiv", "floormod", "div") and not is_float(dtype):
            # div on integers is floor division, as in the LLVM codegen; unsigned ones are C's
            c_op = "%" if e.op == "floormod" else "/"
            if is_unsigned(dtype) or self._nonnegative(e.a) and self._positive(e.b):
                text = f"({a} {c_op} {b})"
            else:
                text = f"{self._helper('floormod' if e.op == 'floormod' else 'floordiv', dtype)}({a}, {b})"
        elif e.op == "left_shift" and dtype in UNSIGNED:  # shifting into the sign bit is undefined in C
            text = f"(({UNSIGNED[dtype]}){a} << {b})"
        else:
            text = f"({a} {OPERATORS[e.op]} {b})"
        if dtype in NARROW_INTS or e.op == "left_shift" and dtype in UNSIGNED:
            return f"(({TYPES[dtype]}){text})"
        return text

    def _nonnegative(self, e) -> bool:
        bounds = Linear.of(e).bounds(self._ranges)
        return bounds is not None and bounds[0] >= 0

    def _positive(self, e) -> bool:
        """Whether integer divisor `e` is at least 1: a positive literal, or an expression of size
        variables bounded by their ranges (C's / and % are then floor division and modulo of a
        non-negative dividend)."""
        if isinstance(e, IntImm):
            return e.value > 0
        bounds = Linear.of(e).bounds(self._ranges)
        return bounds is not None and bounds[0] >= 1

    def _call(self, e: Call) -> str:
        args = [self._expr(a) for a in e.args]
        if e.name == "reinterpret":
            return self._reinterpret(args[0], e.args[0].dtype, e.dtype)
        if not is_float(e.dtype):
            raise CodegenError(f"OpenCL codegen: intrinsic {e.name} needs a float argument, got {e.dtype}")
        if e.name == "sigmoid":
            one = _float_literal(1.0, e.dtype)
            return f"({one} / ({one} + exp(-{args[0]})))"
        return f"{MATH[e.name]}({', '.join(args)})"

    def _reinterpret(self, x: str, src: str, dst: str) -> str:
        """The bits of `x` (dtype `src`) as `dst` of the same size: as_<type>, float16 and
        bfloat16 through their 16 bits."""
        for dtype, to_bits, from_bits in (("float16", "half_bits", "half_from_bits"),
                                          ("bfloat16", "bf16_bits", "bf16_from_bits")):
            if src == dtype:
                return f"(({self._type(dst)}){self._helper(to_bits, 'float32')}({x}))"
            if dst == dtype:
                return f"{self._helper(from_bits, 'float32')}((ushort){x})"
        return f"as_{self._type(dst)}({x})"


def _array_size(buf) -> int:
    """Elements of the C array holding local or shared buffer `buf` (at its upper bound when its
    shape is symbolic)."""
    return buf.size if buf.static else upper_bound(buf.size)


def _contiguous_base(index: PrimExpr, var: Var):
    """`index` - var when `index` is var + (terms free of var), else None."""
    lin = Linear.of(index)
    if lin.coef(var) != 1:
        return None
    rest = lin.add(Linear({("v", id(var)): (var, 1)}), -1).to_expr()
    return None if any(x is var for x in walk(rest)) else rest


def _vector_expr_ok(e, var) -> bool:
    """True when `e` has a floatN form in a loop over `var` (see _vector_store)."""
    if not any(x is var for x in walk(e)):
        return e.dtype == "float32"
    if isinstance(e, Load):
        return e.dtype == "float32" and _contiguous_base(e.index, var) is not None
    if isinstance(e, BinOp) and e.dtype == "float32":
        if e.op in ("min", "max") and not (isinstance(e.b, FloatImm) and not math.isnan(e.b.value)):
            return False  # fmin/fmax drop a NaN b (a NaN `a` is put back by _vexpr)
        return e.op in ("add", "sub", "mul", "div", "min", "max") and all(_vector_expr_ok(x, var) for x in (e.a, e.b))
    if isinstance(e, Call) and e.dtype == "float32" and (e.name in VECTOR_MATH or e.name == "sigmoid"):
        return all(_vector_expr_ok(x, var) for x in e.args)
    return False
