"""Loop IR: buffers, statements (For, Store, Allocate, Seq, IfThenElse, Barrier, the warp-level
intrinsics of GPU tensor-core kernels: MatrixLoad, MMA, AsyncCopy, AsyncCopyCommit, AsyncCopyWait, and the
CPU int8 dot-product step DotU8S8 and matrix step MmlaU8S8) and PrimFunc, with a printer."""

from __future__ import annotations

import copy

import numpy as np

from tvmc.te.expr import IntImm, PrimExpr, Var, evaluate_int


def _extent(x):
    """An extent as the loop IR keeps it: an int, or an int64 expression of SizeVars (and, for a
    loop, of enclosing loops' variables); tvmc.te.extent computes with both."""
    if isinstance(x, IntImm):
        return x.value
    return x if isinstance(x, PrimExpr) else int(x)


def _mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return (IntImm(a) if isinstance(a, int) else a) * b


class Buffer:
    """A flat memory region of `shape` (row-major) and `dtype`; scope 'global', 'shared' (the
    threads of a GPU block) or 'local' (one thread's registers or stack). A dimension may be an
    int64 expression of SizeVars (tvmc.te.extent): its size and strides are then expressions too
    (left for the simplifier)."""

    def __init__(self, name: str, shape, dtype: str, scope: str = "global"):
        self.name, self.shape, self.dtype, self.scope = name, tuple(_extent(s) for s in shape), dtype, scope

    @property
    def static(self) -> bool:
        """Whether every dimension is a constant."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self):
        """Elements: an int, or an expression of SizeVars for a symbolic shape."""
        if not self.static:
            out = 1
            for d in self.shape:
                out = _mul(out, d)
            return out
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        """Bytes: an int, or an expression of SizeVars for a symbolic shape."""
        return _mul(self.size, np.dtype(self.dtype).itemsize)

    def flat_index(self, indices) -> PrimExpr:
        """Row-major flat index of multi-dimensional `indices`."""
        out = None
        stride = 1
        for idx, extent in zip(reversed(indices), reversed(self.shape)):
            term = idx if isinstance(stride, int) and stride == 1 else idx * stride
            out = term if out is None else term + out
            stride = _mul(stride, extent)
        return out if out is not None else IntImm(0)

    def __repr__(self):
        return f"{self.name}: {self.dtype}[{','.join(map(str, self.shape))}]"


class Stmt:
    pass


class For(Stmt):
    """`for var in [0, extent)`; kind is 'serial', 'parallel', 'vectorize', 'unroll', or a GPU
    thread tag ('blockIdx.x' .. 'threadIdx.z'): then `var` is that block or thread index, one
    iteration per block or thread (tvmc.tir.gpu). `extent` is an int, or an int64 expression of
    SizeVars and enclosing loops' variables (computed when the loop starts); `min_parallel` (an
    int or such an expression, 0 for none): a parallel loop with fewer iterations than this at
    run time runs them on the calling thread."""

    def __init__(self, var: Var, extent, kind: str, body: Stmt, min_parallel=0):
        self.var, self.extent, self.kind, self.body = var, _extent(extent), kind, body
        self.min_parallel = _extent(min_parallel)


class Store(Stmt):
    def __init__(self, buffer: Buffer, index: PrimExpr, value: PrimExpr):
        self.buffer, self.index, self.value = buffer, index, value


class Allocate(Stmt):
    """`buffer` exists while `body` runs."""

    def __init__(self, buffer: Buffer, body: Stmt):
        self.buffer, self.body = buffer, body


class Seq(Stmt):
    def __init__(self, stmts):
        flat = []
        for s in stmts:
            flat.extend(s.stmts if isinstance(s, Seq) else [s])
        self.stmts = flat


class IfThenElse(Stmt):
    def __init__(self, cond: PrimExpr, then: Stmt, otherwise: Stmt | None = None):
        self.cond, self.then, self.otherwise = cond, then, otherwise


class Barrier(Stmt):
    """Every thread of a GPU block waits here until all have arrived, and their writes to
    `scope` memory ('shared') are visible to each other (CUDA __syncthreads, OpenCL barrier)."""

    def __init__(self, scope: str = "shared"):
        self.scope = scope


class Intrinsic(Stmt):
    """A statement that one GPU instruction (or a short fixed sequence) carries out, with its
    operands as fields. `exprs` names the fields holding PrimExprs (rewritten by simplification
    and substitution through `with_exprs`); `reads` and `writes` give the (buffer, index) pairs it
    touches (index: the first element; barrier insertion and analyses read them)."""

    expr_fields: tuple = ()

    @property
    def exprs(self) -> list:
        return [getattr(self, f) for f in self.expr_fields]

    def with_exprs(self, exprs) -> "Intrinsic":
        out = copy.copy(self)
        for f, e in zip(self.expr_fields, exprs):
            setattr(out, f, e)
        return out

    def reads(self) -> list:
        return []

    def writes(self) -> list:
        return []


class MatrixLoad(Intrinsic):
    """Warp-collective load of `count` (1, 2 or 4) 8 x 8 matrices of 16-bit elements from shared
    memory: PTX `ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16` (PTX ISA 9.7.14.5.15).

    Lane L of the warp gives the address `src[src_index]` (its own value of the expression, 16-byte
    aligned) of row L % 8 of matrix L // 8 (lanes from 8*count on give none); each row is 8
    consecutive elements. Every lane then receives two elements of each matrix j into
    `dst[dst_offset + 2j]` and `dst[dst_offset + 2j + 1]` (a local buffer; dst_offset constant
    and even): row L // 4, columns 2 (L % 4) and 2 (L % 4) + 1; with `trans`, of the transposed
    matrix (column L // 4, rows 2 (L % 4) and 2 (L % 4) + 1 of the rows as addressed)."""

    expr_fields = ("src_index",)

    def __init__(self, dst: Buffer, dst_offset: int, src: Buffer, src_index: PrimExpr, count: int = 4,
                 trans: bool = False):
        self.dst, self.dst_offset, self.src, self.src_index = dst, int(dst_offset), src, src_index
        self.count, self.trans = int(count), bool(trans)

    def reads(self):
        return [(self.src, self.src_index)]

    def writes(self):
        return [(self.dst, IntImm(self.dst_offset))]

    def __repr__(self):
        return (f"{self.dst.name}[{self.dst_offset}:{self.dst_offset + 2 * self.count}] = ldmatrix.x{self.count}"
                f"{'.trans' if self.trans else ''}({self.src.name}[{self.src_index!r}])")


# fragment elements per lane of each warp-level matrix multiply shape: (A, B, C/D)
MMA_SHAPES = {"m16n8k16": (8, 4, 4), "m16n8k8": (4, 2, 4)}


class MMA(Intrinsic):
    """Warp-collective matrix multiply-accumulate D = A x B + C, in place on C: PTX
    `mma.sync.aligned.{shape}.row.col.f32.{ab}.{ab}.f32` (PTX ISA 9.7.14.5.14), shape m16n8k16
    for float16 / bfloat16 operands, m16n8k8 for tfloat32: float32 buffers, each element rounded
    to TF32 on its way to the mma (to nearest, ties away from zero: PTX cvt.rna.tf32.f32, as
    cuBLAS and cuDNN convert; the mma alone would drop the 13 low mantissa bits, a bias toward 0).

    Each lane holds its fragment elements in local buffers, from the given offsets (constants):
    `a` A [16 x K] row-major (m16n8k16: 8 elements: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
    (g+8, 2t+8..) with g = lane // 4, t = lane % 4; m16n8k8: (g, t), (g+8, t), (g, t+4), (g+8, t+4)),
    `b` B [K x 8] (m16n8k16: (2t..2t+1, g), (2t+8.., g); m16n8k8: (t, g), (t+4, g)), `acc`
    float32 C and D [16 x 8]: (g, 2t..2t+1), (g+8, 2t..2t+1). Products are exact, sums in float32."""

    def __init__(self, shape: str, acc: Buffer, acc_offset: int, a: Buffer, a_offset: int, b: Buffer,
                 b_offset: int):
        if shape not in MMA_SHAPES:
            raise ValueError(f"unknown mma shape {shape}; known: {', '.join(MMA_SHAPES)}")
        self.shape = shape
        self.acc, self.acc_offset = acc, int(acc_offset)
        self.a, self.a_offset, self.b, self.b_offset = a, int(a_offset), b, int(b_offset)

    def reads(self):
        return [(self.a, IntImm(self.a_offset)), (self.b, IntImm(self.b_offset)), (self.acc, IntImm(self.acc_offset))]

    def writes(self):
        return [(self.acc, IntImm(self.acc_offset))]

    def __repr__(self):
        return (f"{self.acc.name}[{self.acc_offset}:+4] += mma.{self.shape}({self.a.name}[{self.a_offset}:], "
                f"{self.b.name}[{self.b_offset}:])")


class AsyncCopy(Intrinsic):
    """Copy of `nbytes` (16) bytes from global `src[src_index]` to shared `dst[dst_index]`
    (both 16-byte aligned) that completes asynchronously: PTX `cp.async.cg.shared.global` with a
    source size (PTX ISA 9.7.9.25.3). Where `cond` is false the destination is filled with zeros
    and nothing is read. The data is there only after an AsyncCopyWait that covers it."""

    expr_fields = ("dst_index", "src_index", "cond")

    def __init__(self, dst: Buffer, dst_index: PrimExpr, src: Buffer, src_index: PrimExpr, cond: PrimExpr,
                 nbytes: int = 16):
        self.dst, self.dst_index, self.src, self.src_index, self.cond = dst, dst_index, src, src_index, cond
        self.nbytes = int(nbytes)

    def reads(self):
        return [(self.src, self.src_index)]

    def writes(self):
        return [(self.dst, self.dst_index)]

    def __repr__(self):
        return (f"{self.dst.name}[{self.dst_index!r}:+{self.nbytes}B] = cp.async({self.src.name}[{self.src_index!r}] "
                f"if {self.cond!r} else 0)")


class AsyncCopyCommit(Intrinsic):
    """The AsyncCopies this thread issued since the last commit become one group (PTX
    `cp.async.commit_group`), which a later AsyncCopyWait can wait for."""

    def __repr__(self):
        return "cp.async.commit()"


class AsyncCopyWait(Intrinsic):
    """The AsyncCopies this thread issued since the last wait become one group (PTX
    `cp.async.commit_group`), then the thread waits until at most `pending` groups are still in
    flight (`cp.async.wait_group pending`). Other threads' copies need a Barrier after it."""

    def __init__(self, pending: int = 0):
        self.pending = int(pending)

    def __repr__(self):
        return f"cp.async.wait(pending={self.pending})"


# where an int16 DotU8S8 data quad holds its elements: element j at a_index + PAIR_ORDER[j], so the
# quad's words are (a0, a2), then (a1, a3) (a data_pairs stage of tvmc/ops/cpu/int8.py)
PAIR_ORDER = (0, 2, 1, 3)


class DotU8S8(Intrinsic):
    """The int8 dot-product step of the CPU int8 kernels (tvmc/ops/cpu/int8.py): for each lane
    l < `lanes`,

        acc[acc_index + l] += sum_{j < 4} int32(a[a_index + j]) * int32(b[b_index + 4 l + j])

    with `acc` int32 (wrapping addition), `a` uint8 (the same 4 bytes for every lane: a broadcast
    data element quad; int8 on targets whose dot product is s8 x s8, Target.dot_data_dtype) and
    `b` int8 (`lanes` x 4 contiguous bytes: a block of packed weights). An int16 `a` (a
    data_pairs stage of tvmc/ops/cpu/int8.py: data widened once for vpmaddwd) holds its quad in
    pair order, a[a_index + PAIR_ORDER[j]] for element j: the words (a0, a2), then (a1, a3).
    TVM's `dot_16x1x16_uint8_int8_int32` tensor intrinsic (topi/x86/tensor_intrin.py), which its
    dense_vnni and conv2d_NCHWc_int8 schedules tensorize with.

    The code generator picks the instructions from the target (Target.dot_u8s8, from
    targets/isa/<arch>.yaml): AVX512-VNNI / AVX-VNNI `vpdpbusd` (Intel SDM: "Multiply and Add
    Unsigned and Signed Bytes", each int32 lane += 4 u8 x s8 products), AVX512-BW / AVX2
    `vpmaddubsw` + `vpmaddwd`; AArch64 `usdot` (+i8mm: 4 u8 x s8 products per int32 lane) or
    `sdot` (+dotprod: s8 x s8 on int8 data; on uint8 data `udot` on the weights plus 128 less
    128 x the data quad's sum); int8 data on the other forms: widening multiplies; wasm32
    `i32x4.relaxed_dot_i8x16_i7x16_add_s` (relaxed SIMD, on the data's low 7 bits and top bit)
    or `i32x4.dot_i16x8_s` (SIMD, on bytes widened to int16); else widening multiplies
    (tvmc/codegen/llvm.py says how each is exact). Every form computes the exact sum:
    `vpmaddubsw` adds two u8 x s8 products in saturating int16, which overflows where both
    weights of a pair (b[4l + 2i], b[4l + 2i + 1]) are large; with `pairs_in_int16` the caller
    promises that no pair can (see tvmc.ops.cpu.int8.pairs_in_int16) and gets one vpmaddubsw
    per step, else the weights are widened to int16 for vpmaddwd where an unrolled register tile
    shares the weight block among several data rows, and otherwise each data byte is split into
    its low 7 bits and its top bit, two vpmaddubsw that cannot saturate."""

    expr_fields = ("acc_index", "a_index", "b_index")

    def __init__(self, acc: Buffer, acc_index: PrimExpr, a: Buffer, a_index: PrimExpr, b: Buffer, b_index: PrimExpr,
                 lanes: int = 16, pairs_in_int16: bool = False):
        if acc.dtype != "int32" or a.dtype not in ("uint8", "int8", "int16") or b.dtype != "int8":
            raise ValueError(f"DotU8S8 needs int32 += uint8 (int8, int16) x int8 buffers, got {acc.dtype} += "
                             f"{a.dtype} x {b.dtype}")
        self.acc, self.acc_index, self.a, self.a_index, self.b, self.b_index = acc, acc_index, a, a_index, b, b_index
        self.lanes, self.pairs_in_int16 = int(lanes), bool(pairs_in_int16)

    def reads(self):
        return [(self.a, self.a_index), (self.b, self.b_index), (self.acc, self.acc_index)]

    def writes(self):
        return [(self.acc, self.acc_index)]

    def __repr__(self):
        flag = ", pairs_in_int16" if self.pairs_in_int16 else ""
        return (f"{self.acc.name}[{self.acc_index!r}:+{self.lanes}] += dot_u8s8({self.a.name}[{self.a_index!r}:+4], "
                f"{self.b.name}[{self.b_index!r}:+{4 * self.lanes}]{flag})")


class MmlaU8S8(Intrinsic):
    """The int8 matrix multiply-accumulate step of the CPU int8 convolutions on +i8mm targets
    (tvmc/ops/cpu/int8_mmla.py): a 2 x 8 uint8 block A times the transpose of a 2 x 8 int8 block
    B, added to a 2 x 2 int32 block,

        acc[acc_index + 2 i + j] += sum_{k < 8} int32(a[a_index + i a_row_stride + k]) * int32(b[b_index + 8 j + k])

    for i, j in {0, 1} (row-major C), `acc` int32 (wrapping addition), `a` uint8 (two rows of 8
    bytes, `a_row_stride` elements apart, a constant: two output pixels' input channels), `b`
    int8 (16 contiguous bytes: two output channels' weights). Arm ARM, FEAT_I8MM USMMLA ("Unsigned
    and signed 8-bit integer matrix multiply-accumulate (vector)"), ACLE's vusmmlaq_s32; the code
    generator emits it where the target has it (Target.mmla_u8s8), else the same sums in widening
    multiplies. Exact."""

    expr_fields = ("acc_index", "a_index", "b_index")

    def __init__(self, acc: Buffer, acc_index: PrimExpr, a: Buffer, a_index: PrimExpr, a_row_stride: int, b: Buffer,
                 b_index: PrimExpr):
        if (acc.dtype, a.dtype, b.dtype) != ("int32", "uint8", "int8"):
            raise ValueError(f"MmlaU8S8 needs int32 += uint8 x int8 buffers, got {acc.dtype} += {a.dtype} x {b.dtype}")
        self.acc, self.acc_index, self.a, self.a_index, self.b, self.b_index = acc, acc_index, a, a_index, b, b_index
        self.a_row_stride = int(a_row_stride)

    def reads(self):
        return [(self.a, self.a_index), (self.b, self.b_index), (self.acc, self.acc_index)]

    def writes(self):
        return [(self.acc, self.acc_index)]

    def __repr__(self):
        return (f"{self.acc.name}[{self.acc_index!r}:+4] += mmla_u8s8({self.a.name}[{self.a_index!r}:+8, "
                f"+{self.a_row_stride}:+8], {self.b.name}[{self.b_index!r}:+16])")


class PrimFunc:
    """A kernel: `params` (Buffers, inputs then output) and a loop-IR `body`. A GPU device kernel
    also has `launch` (tvmc.tir.gpu.LaunchConfig: grid and block sizes, shared memory bytes).
    `size_vars`: the SizeVars of a kernel with symbolic extents, its int64 arguments after the
    buffers (TVM's shape variables as PrimFunc parameters); `size_args` derives their values from
    the shapes of the arrays passed."""

    def __init__(self, name: str, params, body: Stmt, launch=None, size_vars=()):
        self.name, self.params, self.body, self.launch = name, list(params), body, launch
        self.size_vars = list(size_vars)

    def size_args(self, shapes) -> list:
        """The values of `size_vars` for buffers of `shapes` (one per param, in order): each read
        from a dimension that is the bare SizeVar, then every dimension checked against its
        expression and every value against its SizeVar's [lo, hi]. Raises ValueError naming the
        kernel, the buffer, the dimension and the values."""
        if len(shapes) != len(self.params):
            raise ValueError(f"kernel {self.name}: {len(shapes)} arrays for {len(self.params)} buffers")
        values = {}
        for buf, shape in zip(self.params, shapes):
            if len(shape) != len(buf.shape):
                raise ValueError(f"kernel {self.name}: buffer {buf.name} has rank {len(buf.shape)}, got shape "
                                 f"{list(shape)}")
            for dim, n in zip(buf.shape, shape):
                if dim in self.size_vars and dim not in values:
                    if not dim.lo <= int(n) <= dim.hi:
                        raise ValueError(f"kernel {self.name}: buffer {buf.name}: {dim.name} = {int(n)} is outside "
                                         f"its range {dim.lo}..{dim.hi}")
                    values[dim] = int(n)
        missing = [v.name for v in self.size_vars if v not in values]
        if missing:
            raise ValueError(f"kernel {self.name}: no buffer dimension gives {', '.join(missing)}")
        for buf, shape in zip(self.params, shapes):
            for k, (dim, n) in enumerate(zip(buf.shape, shape)):
                if evaluate_int(dim, values) != int(n):
                    raise ValueError(f"kernel {self.name}: buffer {buf.name} dimension {k} is {dim!r} = "
                                     f"{evaluate_int(dim, values)}, got {int(n)}")
        return [values[v] for v in self.size_vars]

    def __str__(self):
        args = list(map(repr, self.params)) + [f"{v.name}: int64 in {v.lo}..{v.hi}" for v in self.size_vars]
        lines = [f"primfn {self.name}(" + ", ".join(args) + ") {"]
        if self.launch is not None:
            lines.append(f"  // launch {self.launch}")
        _print(self.body, 1, lines)
        lines.append("}")
        return "\n".join(lines) + "\n"


def _print(s: Stmt, depth: int, lines: list):
    pad = "  " * depth
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else s.kind + " "
        if not (isinstance(s.min_parallel, int) and s.min_parallel == 0):
            kind = f"{s.kind}(>= {s.min_parallel!r}) "
        lines.append(f"{pad}{kind}for {s.var!r} in 0..{s.extent!r} {{")
        _print(s.body, depth + 1, lines)
        lines.append(pad + "}")
    elif isinstance(s, Store):
        lines.append(f"{pad}{s.buffer.name}[{s.index!r}] = {s.value!r}")
    elif isinstance(s, Allocate):
        lines.append(f"{pad}allocate {s.buffer!r} ({s.buffer.scope})")
        _print(s.body, depth, lines)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _print(x, depth, lines)
    elif isinstance(s, IfThenElse):
        lines.append(f"{pad}if {s.cond!r} {{")
        _print(s.then, depth + 1, lines)
        if s.otherwise is not None:
            lines.append(pad + "} else {")
            _print(s.otherwise, depth + 1, lines)
        lines.append(pad + "}")
    elif isinstance(s, Barrier):
        lines.append(f"{pad}barrier({s.scope})")
    elif isinstance(s, Intrinsic):
        lines.append(f"{pad}{s!r}")
    else:
        raise TypeError(s)


def stmt_children(s: Stmt):
    if isinstance(s, (For, Allocate)):
        return [s.body]
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, IfThenElse):
        return [s.then] + ([s.otherwise] if s.otherwise is not None else [])
    return []
