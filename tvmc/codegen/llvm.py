"""LLVM codegen: loop IR PrimFuncs -> LLVM IR (llvmlite IRBuilder, opaque pointers).

Vectorized loops become LLVM vector operations (contiguous loads/stores, broadcasts, gathers,
masked accesses under vector conditions); parallel loops are outlined and launched with
libgomp's `GOMP_parallel`, or run serially on a target without threads (`num_cores: 1`, wasm32);
unrolled loops are emitted once per iteration. What differs per architecture is in small tables
keyed by the triple's architecture (SIZE_T_BITS).

GPU device kernels (PrimFuncs lowered by tvmc.tir.gpu.lower_device) go through the same code
for a GPU triple; what that triple spells differently (thread indices, shared memory, barriers,
kernel annotations) is its DeviceTable.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import llvmlite
import numpy as np
from llvmlite import ir

from tvmc.codegen import intrinsics
from tvmc.errors import CodegenError
from tvmc.te.expr import (BinOp, Call, Cast, Cmp, FloatImm, IntImm, Let, Load, Not, PrimExpr, Select, Var,
                          is_float, literal_value, substitute, walk)
from tvmc.te.extent import as_extent, upper_bound
from tvmc.te.schedule import THREAD_TAGS
from tvmc.tir.gpu import narrower
from tvmc.tir.ir import (MMA, MMA_SHAPES, PAIR_ORDER, Allocate, AsyncCopy, AsyncCopyCommit, AsyncCopyWait, Barrier,
                         Buffer, DotU8S8, For, IfThenElse, Intrinsic, MatrixLoad, MmlaU8S8, PrimFunc, Seq, Stmt, Store,
                         stmt_children)
from tvmc.tir.simplify import Linear, rounded_then_shifted, simplify, structural_key

if llvmlite.ir_layer_typed_pointers_enabled:
    raise ImportError("llvmlite was imported before tvmc with typed pointers enabled; import tvmc first "
                      "or set LLVMLITE_ENABLE_IR_LAYER_TYPED_POINTERS=0")

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
MAX_VECTOR_LANES = 64
# a vector load whose elements are this many or fewer apart: one load of their span and a shuffle
MAX_SHUFFLED_STRIDE = 8
# Width of C's size_t (malloc's argument) where it is not 64 bits
SIZE_T_BITS = {"wasm32": 32}
# Architectures whose float16 -> float32 conversions are spelled with integer operations
# (half_to_float) instead of `fpext`: LLVM's optimizer turns a compare of two widened halves into
# a compare of <N x half> vectors, on which the wasm32 backend of llvmlite's LLVM never returns
# (instruction selection loops), and the vector `llvm.convert.from.fp16` fails an assertion there.
HALF_BY_BITS = ("wasm32",)
# Architectures whose vector uint8 / uint16 -> float conversions are spelled by the mantissa trick
# (uint_to_float_by_bits) instead of `uitofp`: LLVM folds uitofp(zext x) into a uitofp of the
# narrow vector, which llvmlite's LLVM 22 scalarizes on wasm32 (an extract_lane and an
# f32.convert_i32_u per lane: the requantize epilogues of the int8 kernels).
UINT_TO_FLOAT_BY_BITS = ("wasm32",)
# Architectures where `llvm.lrint` (round to nearest even in the default rounding mode, then
# convert) of a float vector is one instruction (cvtps2dq), so that an int(round(x)) and the
# requantize clamps around it (tvmc.tir.simplify.rounded_then_shifted) are emitted that way: one
# instruction fewer than vrndscaleps + vcvttps2dq per vector of a fused int8 epilogue. Elsewhere
# LLVM splits it (AArch64: frintx + fcvtzs) or calls lrintf per lane (wasm32).
ROUND_CONVERT = ("x86_64",)
MAX_UNROLL = 64
# Largest stack array for a local buffer of symbolic size (sized for its upper bound)
MAX_SYMBOLIC_STACK_BYTES = 1 << 16
FP_CONTRACT = ("contract",)


@dataclass(frozen=True)
class DeviceTable:
    """What a GPU triple spells differently in LLVM IR (TVM's codegen_nvptx, as a table).

    thread_index:     thread tag ('blockIdx.x' .. 'threadIdx.z') -> the intrinsic returning it (i32)
    shared_addrspace: LLVM address space of memory shared by a block's threads
    barrier:          intrinsic every thread of a block waits at (CUDA __syncthreads)
    kernel_cc:        calling convention of a kernel entry point
    annotations:      named metadata holding (kernel, key, i32) annotations
    block_keys:       annotation keys of the most threads per block along x, y, z (launch bounds)
    registers_key:    annotation key of the most registers per thread
    register_unit:    registers per thread allocated together (a warp's registers come in blocks)
    buffer_align:     bytes every kernel buffer's start is aligned to (device allocations, shared
                      arrays): the most a vector access may claim
    global_addrspace: LLVM address space of device (global) memory
    matrix_load:      intrinsic of tir.MatrixLoad, formatted with count and trans ('' or '.trans')
    mma:              (shape, operand dtype) -> intrinsic of tir.MMA (four float32 results)
    tf32_round:       intrinsic rounding a float to TF32 (i32 bits, 13 low mantissa bits zero):
                      what a float32 operand of tir.MMA m16n8k8 goes through
    async_copy:       intrinsic of tir.AsyncCopy (shared dst, global src, source bytes: 0 fills zeros)
    async_commit, async_wait: intrinsics of tir.AsyncCopyCommit and AsyncCopyWait
    dot_u8s8:         form (Target.dot_u8s8) -> intrinsic of a one-lane tir.DotU8S8 step,
                      (a i32, b i32, acc i32) -> acc + the 4 u8 x s8 byte products of a and b
    dot_s8s8:         the same for a step on int8 data (s8 x s8 byte products)
    """

    thread_index: dict
    shared_addrspace: int
    barrier: str
    kernel_cc: str
    annotations: str
    block_keys: tuple
    registers_key: str
    register_unit: int
    buffer_align: int
    global_addrspace: int = 0
    matrix_load: str = ""
    mma: dict = None
    tf32_round: str = ""
    async_copy: str = ""
    async_commit: str = ""
    async_wait: str = ""
    dot_u8s8: dict = None
    dot_s8s8: dict = None


# NVVM IR (LLVM's NVPTX backend; NVIDIA's NVVM IR specification): special registers %ctaid/%tid,
# shared memory in address space 3, bar.sync 0; the launch bounds become PTX .maxntid/.maxnreg.
NVPTX = DeviceTable(
    thread_index={"blockIdx.x": "llvm.nvvm.read.ptx.sreg.ctaid.x", "blockIdx.y": "llvm.nvvm.read.ptx.sreg.ctaid.y",
                  "blockIdx.z": "llvm.nvvm.read.ptx.sreg.ctaid.z", "threadIdx.x": "llvm.nvvm.read.ptx.sreg.tid.x",
                  "threadIdx.y": "llvm.nvvm.read.ptx.sreg.tid.y", "threadIdx.z": "llvm.nvvm.read.ptx.sreg.tid.z"},
    shared_addrspace=3,
    barrier="llvm.nvvm.barrier0",
    kernel_cc="ptx_kernel",
    annotations="nvvm.annotations",
    block_keys=("maxntidx", "maxntidy", "maxntidz"),
    registers_key="maxnreg",
    register_unit=8,  # 256 registers per warp of 32 (CUDA occupancy calculator)
    buffer_align=16,  # cuMemAlloc gives 256 (one allocation per storage id and argument); shared arrays 16
    # warp-level matrix instructions (sm_75 on for ldmatrix, sm_80 on for the rest): LLVM's names
    # follow the PTX spelling; an f16 mma is named after its D and C types (f32.f32)
    global_addrspace=1,
    matrix_load="llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{trans}.b16.p3",
    mma={("m16n8k16", "float16"): "llvm.nvvm.mma.m16n8k16.row.col.f32.f32",
         ("m16n8k16", "bfloat16"): "llvm.nvvm.mma.m16n8k16.row.col.bf16",
         ("m16n8k8", "float32"): "llvm.nvvm.mma.m16n8k8.row.col.tf32"},
    # cvt.rna.tf32.f32 (sm_80 on, PTX 7.0): round to nearest, ties away from zero, as cuBLAS and
    # cuDNN convert float32 for their TF32 kernels; the mma itself would read a float32 register's
    # bits as they are, its 13 low mantissa bits dropped (truncation: every operand biased toward 0)
    tf32_round="llvm.nvvm.f2tf32.rna",
    async_copy="llvm.nvvm.cp.async.cg.shared.global.16.s",
    async_commit="llvm.nvvm.cp.async.commit.group",
    async_wait="llvm.nvvm.cp.async.wait.group",
    # dp4a.u32.s32 (sm_61 on): a's bytes unsigned, b's signed, the int32 sum exact, added to acc
    dot_u8s8={"dp4a": "llvm.nvvm.idp4a.u.s"},
    dot_s8s8={"dp4a": "llvm.nvvm.idp4a.s.s"},  # dp4a.s32.s32
)
DEVICE_TABLES = {"nvptx64": NVPTX}  # architecture component of the triple -> its table

# LLVM intrinsics of tir.DotU8S8's instruction forms (Target.dot_u8s8: form, width_bits) on uint8
# data, keyed by what emits them (CodeGenLLVM._dot_u8s8; a 128-bit form's key names its
# `_dot_<key>` method); DOT_S8S8_INTRINSICS: the same on int8 data, where a form has them.
# x86: in the int32-vector spelling LLVM has accepted since the AVX512-VNNI intrinsics came (newer
# LLVMs upgrade it to their byte-vector one); AVX-VNNI has no intrinsics of its own: LLVM selects
# the VEX-encoded vpdpbusd for the .256 one when the target has avxvnni and not avx512vnni +
# avx512vl. AArch64: the NEON SDOT, UDOT and USDOT intrinsics (ACLE's vdotq_s32, vdotq_u32,
# vusdotq_s32; the sdot form: SDOT on int8 data, UDOT on uint8 data). wasm32:
# the SIMD proposal's i32x4.dot_i16x8_s, the relaxed-SIMD proposal's
# i32x4.relaxed_dot_i8x16_i7x16_add_s.
DOT_U8S8_INTRINSICS = {
    ("vpdpbusd", 512): {"dot": "llvm.x86.avx512.vpdpbusd.512"},
    ("vpdpbusd", 256): {"dot": "llvm.x86.avx512.vpdpbusd.256"},
    ("pmaddubsw", 512): {"pairs": "llvm.x86.avx512.pmaddubs.w.512", "widen": "llvm.x86.avx512.pmaddw.d.512"},
    ("pmaddubsw", 256): {"pairs": "llvm.x86.avx2.pmadd.ub.sw", "widen": "llvm.x86.avx2.pmadd.wd"},
    ("usdot", 128): {"usdot": "llvm.aarch64.neon.usdot.v4i32.v16i8"},
    ("sdot", 128): {"udot": "llvm.aarch64.neon.udot.v4i32.v16i8"},
    ("dot_i16x8", 128): {"dot_i16x8": "llvm.wasm.dot"},
    ("relaxed_dot", 128): {"relaxed_dot": "llvm.wasm.relaxed.dot.i8x16.i7x16.add.signed"},
}
# int8 data (Target.dot_data_dtype): the forms that take it; on the others, widening multiplies.
DOT_S8S8_INTRINSICS = {("sdot", 128): {"sdot": "llvm.aarch64.neon.sdot.v4i32.v16i8"}}
# LLVM intrinsics of tir.MmlaU8S8's instruction (Target.mmla_u8s8): the NEON USMMLA intrinsic
# (ACLE's vusmmlaq_s32).
MMLA_U8S8_INTRINSICS = {"usmmla": "llvm.aarch64.neon.usmmla.v4i32.v16i8"}


def llvm_type(dtype: str) -> ir.Type:
    """Register type of a dtype. bool is i1 in registers (i8 in memory); float16 and bfloat16 are
    float in registers (half and i16 in memory): their math runs in float32, converted at loads
    and stores, since x86 and most CPUs have no 16-bit float arithmetic (only conversions: F16C,
    AVX512-BF16)."""
    return _REGISTER_TYPES[dtype]


_REGISTER_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "float16": ir.FloatType(),
                   "bfloat16": ir.FloatType(), "int64": I64, "int32": I32, "int16": ir.IntType(16), "int8": I8,
                   "uint64": I64, "uint32": I32, "uint16": ir.IntType(16), "uint8": I8, "bool": I1}


def mem_type(dtype: str) -> ir.Type:
    """Memory (buffer element) type of a dtype: bfloat16 is its 16 bits as i16 (llvmlite's IR
    layer has no `bfloat` type, and see float_to_bfloat16 for why no LLVM conversion is used)."""
    return {"bool": I8, "float16": ir.HalfType(), "bfloat16": I16}.get(dtype) or llvm_type(dtype)


def is_unsigned(dtype: str) -> bool:
    """bool and uint* compare, divide, extend and convert as unsigned integers."""
    return dtype == "bool" or dtype.startswith("uint")


def _int_constant(dtype: str, value: int):
    """An integer literal in its register type; unsigned values above the signed range wrap to
    their two's-complement bit pattern (LLVM integers carry no sign)."""
    ty = llvm_type(dtype)
    return ty(value - (1 << ty.width) if value >= 1 << (ty.width - 1) and ty.width > 1 else value)


def for_range(builder: ir.IRBuilder, start, stop, name="i", loop_id=None):
    """Context manager emitting `for (i = start; i < stop; ++i)` (i64); yields the index value.
    `loop_id` (LLVM loop metadata, see CodeGenLLVM._loop_id) is attached to the back edge."""

    @contextlib.contextmanager
    def cm():
        pre = builder.block
        header = builder.append_basic_block(name + ".header")
        body = builder.append_basic_block(name + ".body")
        end = builder.append_basic_block(name + ".end")
        builder.branch(header)
        builder.position_at_end(header)
        phi = builder.phi(I64, name=name)
        phi.add_incoming(start, pre)
        builder.cbranch(builder.icmp_signed("<", phi, stop), body, end)
        builder.position_at_end(body)
        yield phi
        nxt = builder.add(phi, I64(1), name=name + ".next")
        phi.add_incoming(nxt, builder.block)
        latch = builder.branch(header)
        if loop_id is not None:
            latch.set_metadata("llvm.loop", loop_id)
        builder.position_at_end(end)

    return cm()


def _alloca(builder: ir.IRBuilder, ty: ir.Type, name: str):
    """alloca whose result is an opaque `ptr` (llvmlite types alloca results as `T*`)."""
    slot = builder.alloca(ty, name=name)
    slot.type = PTR
    return slot


class _Vec:
    """A vector value in a vectorized loop body."""

    def __init__(self, value, lanes):
        self.value, self.lanes = value, lanes


class _FnState:
    def __init__(self, fn: ir.Function):
        self.fn = fn
        entry = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = fn.append_basic_block("body")
        self.alloca_builder.branch(body)
        self.alloca_builder.position_at_start(entry)
        self.builder = ir.IRBuilder(body)
        self.env: dict = {}      # Var -> llvm value
        self.buffers: dict = {}  # Buffer -> llvm pointer
        self.launch = None       # LaunchConfig of a device kernel
        self.shared: dict = {}   # id(Buffer) -> generic pointer to its shared-memory global
        self.dot_rows = 1        # data rows that the enclosing unrolled loops run a DotU8S8 weight block for
        self.addresses = (None, {})  # (basic block, {(buffer pointer, index key): address}) of _addr_of


class CodeGenLLVM:
    """Builds one LLVM module from PrimFuncs for `target` (triple from the descriptor; a GPU
    triple's device kernels through its DeviceTable)."""

    def __init__(self, target, module_name="tvmc_module"):
        self.target = target
        self.module = ir.Module(name=module_name)
        self.module.triple = target.triple
        self.size_t = ir.IntType(SIZE_T_BITS.get(target.arch, 64))
        self.half_by_bits = target.arch in HALF_BY_BITS
        self.uint_to_float_by_bits = target.arch in UINT_TO_FLOAT_BY_BITS
        self.round_convert = target.arch in ROUND_CONVERT
        self.device = DEVICE_TABLES.get(target.arch)
        self._outlined = 0
        self._loop_ids = 0
        self._ws = None  # (push, pop) of the module's workspace stack (_workspace), once needed
        self._decls: dict = {}

    # --- declarations --------------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args) -> ir.Function:
        if name not in self._decls:
            existing = self.module.globals.get(name)
            self._decls[name] = existing or ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
        return self._decls[name]

    # --- functions ------------------------------------------------------------------------
    def add_function(self, f: PrimFunc):
        """Emit `void name(ptr arg0, ..., ptr argN)` for a PrimFunc (for a GPU triple, a kernel
        entry point with its launch bounds); a kernel with symbolic extents takes its SizeVars
        after the buffers, `void name(ptr arg0, ..., ptr argN, i64 size0, ...)`. Raises
        CodegenError when a device kernel meets a triple without a DeviceTable or the reverse."""
        if f.launch is not None and self.device is None:
            raise CodegenError(f"kernel {f.name}: a GPU device kernel, but target {self.target.name} "
                               f"({self.target.triple}) has no GPU codegen")
        if f.launch is None and self.device is not None:
            raise CodegenError(f"kernel {f.name}: not lowered for the GPU target {self.target.name} "
                               "(no launch configuration)")
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR] * len(f.params) + [I64] * len(f.size_vars)), f.name)
        for arg, buf in zip(fn.args, f.params):
            arg.name = buf.name
            arg.add_attribute("noalias")
        fn.attributes.add("nounwind")
        self._align_stack(fn)
        st = _FnState(fn)
        if f.launch is not None:
            st.launch = f.launch
            self._annotate_kernel(fn, f.launch)
        for arg, buf in zip(fn.args, f.params):
            st.buffers[buf] = arg
        for arg, v in zip(fn.args[len(f.params):], f.size_vars):
            arg.name = v.name
            st.env[v] = arg
        self._stmt(st, f.body)
        st.builder.ret_void()

    def _annotate_kernel(self, fn: ir.Function, launch):
        """Mark `fn` a kernel entry point bounded by its launch's block, so that the assembler
        fits the block's registers into the target's registers per block; and by the target's
        registers per thread where that is the tighter bound (an explicit register bound
        overrides the block's in ptxas, so it is given only then)."""
        d = self.device
        fn.calling_convention = d.kernel_cc
        md = self.module.add_named_metadata(d.annotations)
        bounds = list(zip(d.block_keys, launch.upper.block))  # a symbolic block: bounded by its upper bound
        limit = self.target.max_registers_per_thread
        if limit and limit < block_register_bound(self.target, launch.threads_per_block, d.register_unit):
            bounds.append((d.registers_key, limit))
        for key, value in bounds:
            md.add(self.module.add_metadata([fn, ir.MetaDataString(self.module, key), I32(value)]))

    def ir_text(self) -> str:
        return str(self.module)

    # --- statements -----------------------------------------------------------------------
    def _stmt(self, st: _FnState, s: Stmt, vec=None):
        b = st.builder
        if isinstance(s, Seq):
            for x in s.stmts:
                self._stmt(st, x, vec)
        elif isinstance(s, For):
            self._for(st, s, vec)
        elif isinstance(s, Store):
            self._store(st, s, vec, None)
        elif isinstance(s, Allocate):
            self._allocate(st, s, vec)
        elif isinstance(s, Barrier) and self.device is not None:
            b.call(self.declare(self.device.barrier, VOID, []), [])
        elif isinstance(s, DotU8S8):
            self._dot_u8s8(st, s, vec)
        elif isinstance(s, MmlaU8S8):
            self._mmla_u8s8(st, s, vec)
        elif isinstance(s, Intrinsic):
            if self.device is None or not self.device.mma or vec is not None:
                raise CodegenError(f"codegen: {type(s).__name__} needs a GPU triple with warp-level matrix "
                                   f"instructions outside vector loops; target {self.target.name} has none")
            self._warp_intrinsic(st, s)
        elif isinstance(s, IfThenElse):
            cond = self._expr(st, s.cond, vec)
            if isinstance(cond, _Vec):
                self._masked(st, s.then, vec, cond.value)
                if s.otherwise is not None:
                    self._masked(st, s.otherwise, vec, b.not_(cond.value))
                return
            if s.otherwise is None:
                with b.if_then(cond):
                    self._stmt(st, s.then, vec)
            else:
                with b.if_else(cond) as (then, otherwise):
                    with then:
                        self._stmt(st, s.then, vec)
                    with otherwise:
                        self._stmt(st, s.otherwise, vec)
        else:
            raise CodegenError(f"codegen: unsupported statement {type(s).__name__}")

    def _masked(self, st, s, vec, mask):
        if isinstance(s, Store):
            self._store(st, s, vec, mask)
        elif isinstance(s, Seq):
            for x in s.stmts:
                self._masked(st, x, vec, mask)
        elif isinstance(s, IfThenElse):
            c = self._expr(st, s.cond, vec)
            cv = c.value if isinstance(c, _Vec) else self._splat(st, c, vec[1])
            self._masked(st, s.then, vec, st.builder.and_(mask, cv))
            if s.otherwise is not None:
                self._masked(st, s.otherwise, vec, st.builder.and_(mask, st.builder.not_(cv)))
        else:
            raise CodegenError("codegen: only stores may sit under a vector condition")

    def _allocate(self, st, s: Allocate, vec):
        buf = s.buffer
        if not buf.static and buf.scope != "global":  # a symbolic local or shared buffer: its upper bound
            most = upper_bound(as_extent(buf.size))
            if most * np.dtype(buf.dtype).itemsize > MAX_SYMBOLIC_STACK_BYTES:
                raise CodegenError(f"codegen: local buffer {buf.name} of {buf.size!r} elements may need "
                                   f"{most} elements, beyond the stack's {MAX_SYMBOLIC_STACK_BYTES} bytes")
            buf = Buffer(buf.name, (most,), buf.dtype, buf.scope)
        ty = ir.ArrayType(mem_type(buf.dtype), buf.size)
        if not buf.static:  # global, for the run's extents
            nbytes = self._expr(st, simplify(buf.nbytes + 64), None)
            if self.size_t.width < 64:
                nbytes = st.builder.trunc(nbytes, self.size_t)
            self._global_buffer(st, s, buf, nbytes, vec)
            return
        if buf is not s.buffer:
            ptr = _alloca(st.alloca_builder, ty, buf.name)
            ptr.align = 64
            st.buffers[s.buffer] = ptr
            self._stmt(st, s.body, vec)
            return
        if buf.scope == "local":
            ptr = _alloca(st.alloca_builder, ty, buf.name)
            ptr.align = 64
            st.buffers[buf] = ptr
            self._stmt(st, s.body, vec)
            return
        if buf.scope == "shared" and self.device is not None:
            st.buffers[buf] = self._shared(st, buf)
            self._stmt(st, s.body, vec)
            return
        self._global_buffer(st, s, buf, self.size_t(buf.nbytes + 64), vec)

    def _global_buffer(self, st, s: Allocate, buf: Buffer, nbytes, vec):
        """`buf` (global) over s.body: `nbytes` (a size_t value) from the thread's workspace on a
        CPU (_workspace), given back after the body; malloc'd and freed in device code."""
        if self.device is None:
            take, give = self._workspace()
            ptr = st.builder.call(take, [nbytes], name=buf.name)
            release = (give, [ptr, nbytes])
        else:
            ptr = st.builder.call(self.declare("malloc", PTR, [self.size_t]), [nbytes], name=buf.name)
            release = (self.declare("free", VOID, [PTR]), [ptr])
        st.buffers[buf] = ptr
        self._stmt(st, s.body, vec)
        st.builder.call(*release)

    def _align_stack(self, fn):
        """A CPU kernel function `fn` aligns its stack frame to the vector width where vectors
        are wider than the ABI's 16-byte stack alignment (LLVM's alignstack(n)): its vector
        spill slots are then aligned. At 16 bytes a spilled zmm straddled two cache lines in 3
        of 4 stack placements (ASLR moves the stack by 16 bytes): a CRNN's stem conv ran 57 or
        10 us from one process to the next, the whole static CRNN at width 100 183 or 240 us."""
        if self.device is None and self.target.vector_width_bits > 128:
            fn.attributes.alignstack = self.target.vector_width_bits // 8

    def _workspace(self):
        """(push, pop): the module's workspace for the global buffers a kernel allocates inside
        (a padded input, Winograd's transformed tiles), TVM's workspace pool as a stack per
        thread. `ptr push(size_t n)` takes n bytes (rounded up to 64) from the calling thread's
        arena, 64-byte aligned; where they do not fit it remembers how many would have and
        returns malloc(n). `void pop(ptr p, size_t n)` gives them back (or frees p), and when the
        arena is empty again and some run needed more, replaces it by one of that size. So
        kernels allocate only in the first runs at the largest sizes seen; the runs after allocate
        nothing (issue 29: a range artifact's scratch is sized by the run's extents). The arenas
        are thread_local (GOMP's threads allocate inside parallel loops); each lives as long as
        its thread (wasm32 without threads: one)."""
        if self._ws is not None:
            return self._ws
        size_t, m = self.size_t, self.module

        def tls(name, ty, init):
            g = ir.GlobalVariable(m, ty, m.get_unique_name(name))
            g.linkage, g.storage_class, g.initializer = "internal", "thread_local", init
            return g

        null = ir.Constant(PTR, None)
        raw, base = tls("tvmc.ws.raw", PTR, null), tls("tvmc.ws.base", PTR, null)
        cap, top, need = (tls(f"tvmc.ws.{k}", size_t, size_t(0)) for k in ("cap", "top", "need"))
        malloc, free = self.declare("malloc", PTR, [size_t]), self.declare("free", VOID, [PTR])

        def rounded(b, n):
            return b.and_(b.add(n, size_t(63)), size_t(~63 & ((1 << size_t.width) - 1)))

        push = ir.Function(m, ir.FunctionType(PTR, [size_t]), m.get_unique_name("tvmc.ws.push"))
        push.linkage = "internal"
        push.attributes.add("nounwind")
        b = ir.IRBuilder(push.append_basic_block("entry"))
        n = rounded(b, push.args[0])
        t = b.load(top, typ=size_t)
        end = b.add(t, n)
        with b.if_else(b.icmp_unsigned("<=", end, b.load(cap, typ=size_t))) as (fits, spills):
            with fits:
                b.store(end, top)
                inside = b.gep(b.load(base, typ=PTR), [t], source_etype=I8)
                fits_blk = b.block
            with spills:
                most = b.load(need, typ=size_t)
                b.store(b.select(b.icmp_unsigned(">", end, most), end, most), need)
                outside = b.call(malloc, [b.add(n, size_t(64))])
                spills_blk = b.block
        out = b.phi(PTR)
        out.add_incoming(inside, fits_blk)
        out.add_incoming(outside, spills_blk)
        b.ret(out)

        pop = ir.Function(m, ir.FunctionType(VOID, [PTR, size_t]), m.get_unique_name("tvmc.ws.pop"))
        pop.linkage = "internal"
        pop.attributes.add("nounwind")
        b = ir.IRBuilder(pop.append_basic_block("entry"))
        ptr, n = pop.args[0], rounded(b, pop.args[1])
        t = b.load(top, typ=size_t)
        below = b.sub(t, n)
        ours = b.and_(b.icmp_unsigned(">=", t, n),
                      b.icmp_unsigned("==", ptr, b.gep(b.load(base, typ=PTR), [below], source_etype=I8)))
        with b.if_else(ours) as (taken, spilled):
            with taken:
                b.store(below, top)
            with spilled:
                b.call(free, [ptr])
        empty = b.icmp_unsigned("==", b.load(top, typ=size_t), size_t(0))
        grow = b.and_(empty, b.icmp_unsigned(">", b.load(need, typ=size_t), b.load(cap, typ=size_t)))
        with b.if_then(grow):
            b.call(free, [b.load(raw, typ=PTR)])
            size = b.load(need, typ=size_t)
            fresh = b.call(malloc, [b.add(size, size_t(64))])
            b.store(fresh, raw)
            b.store(b.inttoptr(rounded(b, b.ptrtoint(fresh, size_t)), PTR), base)
            b.store(size, cap)
        b.ret_void()
        self._ws = (push, pop)
        return self._ws

    def _shared(self, st, buf: Buffer):
        """A generic pointer to `buf`'s block-shared global, one per buffer and kernel (LLVM
        infers the shared address space back for every access through it)."""
        if id(buf) not in st.shared:
            ty = ir.ArrayType(mem_type(buf.dtype), buf.size)
            g = ir.GlobalVariable(self.module, ty, self.module.get_unique_name(f"{st.fn.name}.{buf.name}"),
                                  addrspace=self.device.shared_addrspace)
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, ir.Undefined)
            g.align = self.device.buffer_align
            st.shared[id(buf)] = st.alloca_builder.addrspacecast(g, PTR, name=buf.name)
        return st.shared[id(buf)]

    # --- warp-level matrix instructions (tensor cores) -------------------------------------
    def _space_ptr(self, st, buf: Buffer, index: PrimExpr, addrspace: int):
        """Pointer in LLVM address space `addrspace` to buf[index] (the intrinsics take typed
        address spaces; the buffers are generic pointers)."""
        generic = self._addr_of(st, buf, index)
        return st.builder.addrspacecast(generic, ir.PointerType(addrspace=addrspace))

    def _local_ptr(self, st, buf: Buffer, offset: int, dtype: str | None = None):
        return st.builder.gep(st.buffers[buf], [I64(offset)], inbounds=True, source_etype=mem_type(dtype or buf.dtype))

    def _warp_intrinsic(self, st, s: Intrinsic):
        """tir.MatrixLoad / MMA / AsyncCopy / AsyncCopyWait as the device table's intrinsics."""
        b, d = st.builder, self.device
        if isinstance(s, MatrixLoad):
            regs = ir.LiteralStructType([I32] * s.count)
            f = self.declare(d.matrix_load.format(count=s.count, trans=".trans" if s.trans else ""), regs,
                             [ir.PointerType(addrspace=d.shared_addrspace)])
            out = b.call(f, [self._space_ptr(st, s.src, s.src_index, d.shared_addrspace)])
            for j in range(s.count):  # two 16-bit elements per register, in element order
                ptr = self._local_ptr(st, s.dst, s.dst_offset + 2 * j)
                b.store(b.extract_value(out, j), ptr, align=4)
        elif isinstance(s, MMA):
            n_a, n_b, n_c = MMA_SHAPES[s.shape]
            dtype = s.a.dtype
            name = d.mma.get((s.shape, dtype))
            if name is None:
                raise CodegenError(f"codegen: no {s.shape} mma for {dtype} operands")
            # f16 operands travel as <2 x half> registers, bf16 and tf32 as i32 (PTX .b32); a
            # float32 operand is rounded to TF32 on the way (tir.MMA)
            reg = ir.VectorType(ir.HalfType(), 2) if dtype == "float16" else I32
            per_reg = 1 if dtype == "float32" else 2

            def operand(buf, offset):
                if dtype != "float32":
                    return b.load(self._local_ptr(st, buf, offset), typ=reg, align=4)
                if not d.tf32_round:
                    raise CodegenError("codegen: no float32 -> TF32 conversion for this device")
                value = b.load(self._local_ptr(st, buf, offset), typ=ir.FloatType(), align=4)
                return b.call(self.declare(d.tf32_round, I32, [ir.FloatType()]), [value])

            a = [operand(s.a, s.a_offset + per_reg * k) for k in range(n_a // per_reg)]
            bb = [operand(s.b, s.b_offset + per_reg * k) for k in range(n_b // per_reg)]
            c = [b.load(self._local_ptr(st, s.acc, s.acc_offset + k), typ=ir.FloatType()) for k in range(n_c)]
            f = self.declare(name, ir.LiteralStructType([ir.FloatType()] * n_c),
                             [reg] * len(a + bb) + [ir.FloatType()] * n_c)
            out = b.call(f, a + bb + c)
            for k in range(n_c):
                b.store(b.extract_value(out, k), self._local_ptr(st, s.acc, s.acc_offset + k))
        elif isinstance(s, AsyncCopy):
            f = self.declare(d.async_copy, VOID, [ir.PointerType(addrspace=d.shared_addrspace),
                                                   ir.PointerType(addrspace=d.global_addrspace), I32])
            cond = self._expr(st, s.cond, None)
            # a false condition reads nothing (source size 0) but the address must still be one:
            # the buffer's first element
            src_index = Select(s.cond, s.src_index, IntImm(0))
            b.call(f, [self._space_ptr(st, s.dst, s.dst_index, d.shared_addrspace),
                       self._space_ptr(st, s.src, src_index, d.global_addrspace),
                       b.select(cond, I32(s.nbytes), I32(0))])
        elif isinstance(s, AsyncCopyCommit):
            b.call(self.declare(d.async_commit, VOID, []), [])
        elif isinstance(s, AsyncCopyWait):
            b.call(self.declare(d.async_commit, VOID, []), [])
            b.call(self.declare(d.async_wait, VOID, [I32]), [I32(s.pending)])
        else:
            raise CodegenError(f"codegen: unsupported intrinsic {type(s).__name__}")

    # --- int8 dot products (CPU) -------------------------------------------------------------
    def _dot_u8s8(self, st, s: DotU8S8, vec):
        """tir.DotU8S8 in the instructions of the target's form (DOT_U8S8_INTRINSICS, on int8 data
        DOT_S8S8_INTRINSICS), one instruction group per vector of int32 lanes; without one (no
        form, or lanes that the form's vector does not divide) in widening multiplies that LLVM
        vectorizes."""
        if vec is not None:
            raise CodegenError("codegen: a DotU8S8 step cannot sit inside a vectorized loop")
        b = st.builder
        form = self.target.dot_u8s8
        signed_data, pair_data = s.a.dtype == "int8", s.a.dtype == "int16"
        if pair_data and self.device is not None:
            raise CodegenError("codegen: a DotU8S8 step on int16 data (a data_pairs stage) runs on CPU triples only")
        if self.device is not None and form is not None:
            table = (self.device.dot_s8s8 if signed_data else self.device.dot_u8s8) or {}
            if table.get(form[0]):
                self._dot_u8s8_device(st, s, table[form[0]])
                return
        form = form if self.device is None else None
        names = (DOT_S8S8_INTRINSICS if signed_data else DOT_U8S8_INTRINSICS).get(form)
        if pair_data and names is not None and "widen" not in names:
            names = None  # int16 words take vpmaddwd (the pmaddubsw forms) or widening multiplies
        per = form[1] // 32 if names else s.lanes
        if s.lanes % per:
            names, per = None, s.lanes
        acc_ptr, w_ptr = self._addr_of(st, s.acc, s.acc_index), self._addr_of(st, s.b, s.b_index)
        vt, bytes_t = ir.VectorType(I32, per), ir.VectorType(I8, 4 * per)
        step = quad = None
        if pair_data:
            step = self._dot_int16_data(st, s, names, per)
        else:
            quad = b.load(self._addr_of(st, s.a, s.a_index), typ=I32, align=1)
        if names is not None and not {"dot", "pairs"} & set(names):  # an AArch64 or wasm32 form
            (kind, intrinsic), = names.items()
            step = getattr(self, f"_dot_{kind}")(st, intrinsic, quad)
        for c in range(s.lanes // per):
            acc_c = b.gep(acc_ptr, [I64(c * per)], inbounds=True, source_etype=I32)
            w_c = b.gep(w_ptr, [I64(4 * per * c)], inbounds=True, source_etype=I8)
            acc = b.load(acc_c, typ=vt, align=4)
            if step is not None:
                out = step(acc, b.load(w_c, typ=bytes_t, align=1))
            elif names is not None and "dot" in names:
                w = b.load(w_c, typ=vt, align=1)
                out = b.call(self.declare(names["dot"], vt, [vt, vt, vt]), [acc, self._splat(st, quad, per), w])
            else:
                w = b.load(w_c, typ=bytes_t, align=1)
                if names is not None:
                    out = b.add(acc, self._dot_pairs(st, names, quad, w, per, s.pairs_in_int16, st.dot_rows > 1))
                else:
                    out = b.add(acc, self._dot_widen(st, quad, w, per, signed_data))
            b.store(out, acc_c, align=4)

    def _mmla_u8s8(self, st, s: MmlaU8S8, vec):
        """tir.MmlaU8S8: the two 8-byte rows of A as one <16 x i8> (one load where they are
        adjacent, a_row_stride 8; else two 8-byte loads joined), B's 16 bytes, the 2 x 2 int32
        block as <4 x i32>; USMMLA where the target has it (MMLA_U8S8_INTRINSICS), else the four
        8-element dot products in widening multiplies (zext A, sext B, multiply, add across)."""
        if vec is not None or self.device is not None:
            raise CodegenError("codegen: an MmlaU8S8 step runs on CPU triples, outside vectorized loops")
        b = st.builder
        v16, v8, v4 = ir.VectorType(I8, 16), ir.VectorType(I8, 8), ir.VectorType(I32, 4)
        a_ptr = self._addr_of(st, s.a, s.a_index)
        if s.a_row_stride == 8:
            a = b.load(a_ptr, typ=v16, align=1)
        else:
            row1 = b.gep(a_ptr, [I64(s.a_row_stride)], inbounds=True, source_etype=I8)
            a = b.shuffle_vector(b.load(a_ptr, typ=v8, align=1), b.load(row1, typ=v8, align=1),
                                 ir.Constant(ir.VectorType(I32, 16), list(range(16))))
        w = b.load(self._addr_of(st, s.b, s.b_index), typ=v16, align=1)
        acc_ptr = self._addr_of(st, s.acc, s.acc_index)
        acc = b.load(acc_ptr, typ=v4, align=4)
        name = MMLA_U8S8_INTRINSICS.get(self.target.mmla_u8s8)
        if name is not None:
            out = b.call(self.declare(name, v4, [v4, v16, v16]), [acc, a, w])
        else:
            v16i32, v8i32 = ir.VectorType(I32, 16), ir.VectorType(I32, 8)
            wide_a, wide_w = b.zext(a, v16i32), b.sext(w, v16i32)
            add = self.declare("llvm.vector.reduce.add.v8i32", I32, [v8i32])
            out = acc
            for i in range(2):
                for j in range(2):
                    rows = [ir.Constant(ir.VectorType(I32, 8), list(range(8 * r, 8 * r + 8))) for r in (i, j)]
                    prod = b.mul(b.shuffle_vector(wide_a, ir.Constant(v16i32, ir.Undefined), rows[0]),
                                 b.shuffle_vector(wide_w, ir.Constant(v16i32, ir.Undefined), rows[1]))
                    out = b.insert_element(out, b.add(b.extract_element(out, I32(2 * i + j)), b.call(add, [prod])),
                                           I32(2 * i + j))
        b.store(out, acc_ptr, align=4)

    def _dot_u8s8_device(self, st, s: DotU8S8, intrinsic: str):
        """tir.DotU8S8 on a GPU with a one-word dot product (the device table's dot_u8s8: PTX
        dp4a.u32.s32): per lane, the data quad and the lane's 4 weights each loaded as one 32-bit
        word (aligned as far as their indices prove: a word at a multiple of 4 bytes is one
        ld.b32; else LLVM splits it into byte loads), one instruction adds their 4 products."""
        b = st.builder
        fn = self.declare(intrinsic, I32, [I32, I32, I32])

        def word(buf, index):
            ptr = self._addr_of(st, buf, index)
            return b.load(ptr, typ=I32, align=min(4, self._vector_align(simplify(index), "int8")))

        quad = word(s.a, s.a_index)
        for c in range(s.lanes):
            w = word(s.b, s.b_index + IntImm(4 * c) if c else s.b_index)
            acc_c = self._addr_of(st, s.acc, s.acc_index + IntImm(c) if c else s.acc_index)
            b.store(b.call(fn, [quad, w, b.load(acc_c, typ=I32, align=4)]), acc_c, align=4)

    # The AArch64 and wasm32 forms: `_dot_<kind>(st, intrinsic, quad)` emits what a step computes once from
    # its data quad (i32: 4 uint8) and returns `(acc <4 x i32>, w <16 x i8>) -> acc + the 4 lanes'
    # sums`, w holding 4 lanes' 4 weights each (lane l: bytes 4l..4l+3).

    def _quad_bytes(self, st, quad):
        """The data quad broadcast to every 4-byte group of a <16 x i8> (byte 4l + j = a[j])."""
        return st.builder.bitcast(self._splat(st, quad, 4), ir.VectorType(I8, 16))

    def _dot_direct(self, st, name, quad):
        """AArch64 USDOT (FEAT_I8MM, Arm ARM: "Dot Product with unsigned and signed integers
        (vector)", u8 x s8) or SDOT (FEAT_DotProd, "Dot Product signed arithmetic (vector)", s8 x
        s8 on int8 data: Target.dot_data_dtype, AlterOpLayout shifting uint8 activations by -128
        and folding the shift into the zero-point term): each int32 lane += the sum of 4 byte
        products, exact. One instruction per 4 lanes."""
        b, v4, v16 = st.builder, ir.VectorType(I32, 4), ir.VectorType(I8, 16)
        dot, data = self.declare(name, v4, [v4, v16, v16]), self._quad_bytes(st, quad)
        return lambda acc, w: b.call(dot, [acc, data, w])

    _dot_usdot = _dot_sdot = _dot_direct

    def _dot_udot(self, st, name, quad):
        """AArch64 UDOT (vector), FEAT_DotProd (Arm ARM: "Dot Product unsigned arithmetic
        (vector)"): each int32 lane += the sum of 4 u8 x u8 byte products. u8 x s8 is USDOT's
        (FEAT_I8MM); with dot products alone the weights are made unsigned, exactly: w ^ 0x80 is
        w + 128 as a uint8, so UDOT(a, w ^ 0x80) = sum a w + 128 sum a, and the step subtracts
        128 sum a (the same in every lane: the data quad is broadcast), which one more UDOT of
        the quad with bytes of 128 gives once per step. Sums of 4 products of at most 255 x 255
        do not leave int32; the accumulation wraps as the reference's int32 does. Per 4 lanes:
        one EOR, one UDOT, one SUB (the EOR of a weight block is shared by the rows of a register
        tile, which load the same block)."""
        b, v4, v16 = st.builder, ir.VectorType(I32, 4), ir.VectorType(I8, 16)
        udot, data = self.declare(name, v4, [v4, v16, v16]), self._quad_bytes(st, quad)
        sign = ir.Constant(v16, [0x80] * 16)
        correction = b.call(udot, [ir.Constant(v4, [0] * 4), data, sign])  # 128 (a0 + a1 + a2 + a3)
        return lambda acc, w: b.sub(b.call(udot, [acc, data, b.xor(w, sign)]), correction)

    def _dot_dot_i16x8(self, st, name, quad):
        """WebAssembly SIMD i32x4.dot_i16x8_s (the SIMD proposal: lane i = a[2i] b[2i] +
        a[2i+1] b[2i+1], i16 x i16 -> i32), with no byte shuffle: the 16 weight bytes read as 8
        int16 words (word 2l + i = w[l][2i] + 256 w[l][2i + 1]) give, by shifts, the weights
        sign-extended to int16 in place: (words << 8) >> 8 is (w[l][0], w[l][2]) in lane l, words
        >> 8 (arithmetic) is (w[l][1], w[l][3]); the data quad as the words (a0, a2) (quad &
        0x00FF00FF) and (a1, a3) ((quad >> 8) & 0x00FF00FF), splat once per quad; two dots give
        each lane its 4 products. Exact: the products and pair sums are computed in int32. Per 4
        lanes: three shifts, two dots, two adds (the x86 form's `shared` widening, _dot_pairs).
        V8 spells a general i8x16.shuffle as pshufb with a mask it builds each time; the earlier
        spelling (two such shuffles and two extends per 4 lanes) ran the BERT-style encoder's int8
        dense kernels 1.6x slower in Node 20 (bench/results/web_bench_int8.md)."""
        b = st.builder
        v4, w8 = ir.VectorType(I32, 4), ir.VectorType(ir.IntType(16), 8)
        dot = self.declare(name, v4, [w8, w8])
        a02, a13 = (b.bitcast(self._splat(st, b.and_(q, I32(0x00FF00FF)), 4), w8)
                    for q in (quad, b.lshr(quad, I32(8))))
        eight = ir.Constant(w8, [8] * 8)

        def step(acc, w):
            words = b.bitcast(w, w8)
            w02, w13 = b.ashr(b.shl(words, eight), eight), b.ashr(words, eight)
            return b.add(acc, b.add(b.call(dot, [a02, w02]), b.call(dot, [a13, w13])))

        return step

    def _dot_relaxed_dot(self, st, name, quad):
        """WebAssembly relaxed SIMD i32x4.relaxed_dot_i8x16_i7x16_add_s(a, b, c) (the relaxed-SIMD
        proposal: lane i = c[i] + the sum of a[4i + j] b[4i + j] over j < 4, a signed int8, b
        "7-bit": where b's top bit is set the engine may read it as signed or unsigned, and the
        int16 sums of adjacent products may saturate). Used exactly: a is the int8 weights, b the
        data bytes split into their low 7 bits (d & 127) and their top bit (d >> 7), both in
        [0, 127], so every product and pair sum (at most 2 x 128 x 127 = 32512) is the same on
        every engine; the lane gets dot(w, lo) + 128 dot(w, hi). Per 4 lanes: two relaxed dots,
        a shift, an add."""
        b, v4, v16 = st.builder, ir.VectorType(I32, 4), ir.VectorType(I8, 16)
        dot = self.declare(name, v4, [v16, v16, v4])
        lo = self._quad_bytes(st, b.and_(quad, I32(0x7F7F7F7F)))
        hi = self._quad_bytes(st, b.and_(b.lshr(quad, I32(7)), I32(0x01010101)))
        zero, seven = ir.Constant(v4, [0] * 4), ir.Constant(v4, [7] * 4)
        # acc only meets the final add: its chain across steps stays one add, not two dots long
        return lambda acc, w: b.add(acc, b.call(dot, [w, lo, b.shl(b.call(dot, [w, hi, zero]), seven)]))

    def _dot_pairs(self, st, names, quad, w, per, pairs_in_int16, shared):
        """<per x i32> sums of 4 products through vpmaddubsw (u8 x s8 pairs -> saturating i16)
        and vpmaddwd (i16 x i16 pairs -> i32, exact for these ranges). With pairs_in_int16 (the
        caller's promise: no pair sum leaves int16) one vpmaddubsw and one vpmaddwd (by ones).
        Else, where the weight block is `shared` by several data rows (an unrolled register tile,
        CodeGenLLVM._for), the weights are widened to int16 in place, by shifts: as words, w[l][0]
        and w[l][2] sign-extended (w << 8 >> 8) and w[l][1], w[l][3] (w >> 8), once per block for
        all the rows; per row two vpmaddwd, of the data bytes (a0, a2) and (a1, a3) zero-extended
        to words (the quad broadcast, then its words & 0xFF and >> 8 in the vector: vpbroadcastd
        from memory, vpand, vpsrlw; the scalar and / shift / vmovd / vpbroadcastd of each half
        before cost 5 more instructions per row and step: resnet_style_cnn's 16-channel 3x3 convs
        at 32 x 32 on x86-avx2, one thread, 63 -> 54 and 74 -> 64 us), sum them:
        |a w + a' w'| <= 2 x 255 x 128. Measured on AVX2 and AVX-512 (bench/int8_kernels.py,
        M >= 64) 1.05-1.3x the split below; with one data row it has no rows to share the shifts
        and is slower. Else the data bytes d = lo + 128 hi are split (lo = d & 127, hi = d >> 7)
        so that neither vpmaddubsw can saturate (|lo w0 + lo w1| <= 127 * 256), and their pair
        sums are widened with weights 1 and 128."""
        b = st.builder
        bytes_t, out_t = ir.VectorType(I8, 4 * per), ir.VectorType(I32, per)
        words_t = ir.VectorType(ir.IntType(16), 2 * per)
        pairs = self.declare(names["pairs"], words_t, [bytes_t, bytes_t])
        widen = self.declare(names["widen"], out_t, [words_t, words_t])

        def products(q):
            return b.call(pairs, [b.bitcast(self._splat(st, q, per), bytes_t), w])

        ones = ir.Constant(words_t, [1] * (2 * per))
        if pairs_in_int16:
            return b.call(widen, [products(quad), ones])
        if shared:
            # the data quad broadcast, then split in the vector (vpbroadcastd from memory, vpand,
            # vpsrlw): (a0, a2) and (a1, a3) zero-extended to words in every lane
            words_a = b.bitcast(self._splat(st, quad, per), words_t)
            a_even = b.and_(words_a, ir.Constant(words_t, [0xFF] * (2 * per)))
            a_odd = b.lshr(words_a, ir.Constant(words_t, [8] * (2 * per)))
            return self._dot_word_pairs(st, names, a_even, a_odd, w, per)
        lo = b.and_(quad, I32(0x7F7F7F7F))
        hi = b.and_(b.lshr(quad, I32(7)), I32(0x01010101))
        return b.add(b.call(widen, [products(lo), ones]),
                     b.call(widen, [products(hi), ir.Constant(words_t, [128] * (2 * per))]))

    def _dot_word_pairs(self, st, names, a_even, a_odd, w, per):
        """<per x i32> sums of 4 products by two vpmaddwd: the data words (a0, a2) and (a1, a3)
        in every lane (`a_even`, `a_odd`, <2 per x i16>) times the lane's weights widened to
        int16 in place, by shifts: as words, w[l][0] and w[l][2] sign-extended (w << 8 >> 8) and
        w[l][1], w[l][3] (w >> 8), in the one register that holds the block's bytes (`w`)."""
        b = st.builder
        out_t, words_t = ir.VectorType(I32, per), ir.VectorType(ir.IntType(16), 2 * per)
        widen = self.declare(names["widen"], out_t, [words_t, words_t])
        words = b.bitcast(w, words_t)  # word 2l + i: w[l][2i] (low byte) + 256 w[l][2i + 1]
        eight = ir.Constant(words_t, [8] * (2 * per))
        w_even = b.ashr(b.shl(words, eight), eight)  # w[l][0], w[l][2] sign-extended
        w_odd = b.ashr(words, eight)  # w[l][1], w[l][3]
        return b.add(b.call(widen, [a_even, w_even]), b.call(widen, [a_odd, w_odd]))

    def _dot_int16_data(self, st, s: DotU8S8, names, per):
        """step(acc, w) of tir.DotU8S8 on int16 data in pair order (a data_pairs stage), `per`
        lanes a vector: on the x86 pmaddubsw forms (`names` has their vpmaddwd) the words (a0, a2)
        and (a1, a3) broadcast straight from memory (two vpbroadcastd, no split) into
        _dot_word_pairs; without a form (`names` None) the quad's four words, put back in
        element order, in widening multiplies."""
        b = st.builder
        a_ptr = self._addr_of(st, s.a, s.a_index)
        if names is not None:
            words_t = ir.VectorType(ir.IntType(16), 2 * per)
            a_even, a_odd = (b.bitcast(self._splat(st, b.load(p, typ=I32, align=2), per), words_t) for p in
                             (a_ptr, b.gep(a_ptr, [I64(2)], inbounds=True, source_etype=ir.IntType(16))))
            return lambda acc, w: b.add(acc, self._dot_word_pairs(st, names, a_even, a_odd, w, per))
        words = b.load(a_ptr, typ=ir.VectorType(ir.IntType(16), 4), align=2)
        order = ir.Constant(ir.VectorType(I32, 4 * per), [PAIR_ORDER[j] for _ in range(per) for j in range(4)])
        a = b.sext(b.shuffle_vector(words, ir.Constant(words.type, None), order), ir.VectorType(I32, 4 * per))
        return lambda acc, w: b.add(acc, self._sum_quads(st, a, w, per))

    def _dot_widen(self, st, quad, w, per, signed_data=False):
        """<per x i32> sums of 4 products, each operand widened to i32 (any LLVM triple): the
        data zero-extended (uint8) or sign-extended (int8 data), the weights sign-extended."""
        b = st.builder
        wide = ir.VectorType(I32, 4 * per)
        quad_bytes = b.bitcast(self._splat(st, quad, per), ir.VectorType(I8, 4 * per))
        return self._sum_quads(st, b.sext(quad_bytes, wide) if signed_data else b.zext(quad_bytes, wide), w, per)

    def _sum_quads(self, st, a, w, per):
        """<per x i32>: lane l = sum_j a[4 l + j] w[4 l + j], `a` <4 per x i32> (the data quad in
        every lane), `w` the <4 per x i8> weights sign-extended."""
        b = st.builder
        wide = ir.VectorType(I32, 4 * per)
        prod = b.mul(a, b.sext(w, wide))
        lanes = [b.shuffle_vector(prod, ir.Constant(wide, None),
                                  ir.Constant(ir.VectorType(I32, per), [4 * lane + j for lane in range(per)]))
                 for j in range(4)]
        return b.add(b.add(lanes[0], lanes[1]), b.add(lanes[2], lanes[3]))

    def _thread_loop(self, st, s: For, vec):
        """A loop bound to a thread tag: its variable is that block or thread index (one
        iteration per block or thread); a loop narrower than the launch (for some values of the
        size variables, where extents are symbolic) runs under a guard."""
        b = st.builder
        index = b.call(self.declare(self.device.thread_index[s.kind], I32, []), [])
        st.env[s.var] = b.zext(index, I64, name=s.var.name)
        if narrower(s.extent, st.launch.extent(s.kind)):
            with b.if_then(b.icmp_signed("<", st.env[s.var], self._extent(st, s.extent))):
                self._stmt(st, s.body, vec)
        else:
            self._stmt(st, s.body, vec)

    def _for(self, st, s: For, vec):
        if s.kind in THREAD_TAGS:
            if st.launch is None:
                raise CodegenError(f"codegen: loop {s.var.name} is bound to {s.kind} outside a GPU kernel")
            return self._thread_loop(st, s, vec)
        if s.kind == "parallel" and vec is None and st.launch is not None:
            raise CodegenError(f"codegen: parallel loop {s.var.name} in GPU kernel {st.fn.name}; bind it to "
                               "blockIdx/threadIdx instead")
        if s.kind == "parallel" and vec is None and self.target.threaded:
            return self._parallel(st, s)
        static = isinstance(s.extent, int)
        if s.kind == "vectorize" and vec is None and static and 1 < s.extent <= MAX_VECTOR_LANES and \
                _vectorizable(s.body):
            self._stmt(st, s.body, (s.var, s.extent))
            return
        if s.kind == "unroll" and static and s.extent <= MAX_UNROLL:
            rows = st.dot_rows
            st.dot_rows *= s.extent if _shares_dot_weights(s) else 1
            for k in range(s.extent):
                self._stmt(st, _subst_stmt(s.body, {s.var: IntImm(k)}), vec)
            st.dot_rows = rows
            return
        # LLVM's loop vectorizer second-guesses only the loops a schedule left scalar; of symbolic
        # extent those are a kernel's small-size bucket (fewer iterations than a vector) or strided
        # rows, where it emits masked gathers: a [1, seq, 384] -> [1, 4, 32, seq] transpose of GPT-2
        # at sequence 1 took 0.9 us in 256 of them instead of 0.1 in scalar copies
        keep_scalar = not isinstance(s.extent, int) and vec is None
        loop_id = self._loop_id(s.var.name, s.kind == "rolled", keep_scalar) if s.kind == "rolled" or keep_scalar \
            else None
        with for_range(st.builder, I64(0), self._extent(st, s.extent), s.var.name, loop_id) as i:
            st.env[s.var] = i
            self._stmt(st, s.body, vec)

    def _extent(self, st, extent):
        """A loop extent as an i64 value: a constant, or its symbolic expression computed here."""
        if isinstance(extent, int):
            return I64(extent)
        return self._expr(st, extent, None)

    def _loop_id(self, name: str, no_unroll: bool, no_vectorize: bool):
        """A loop ID `!N = !{!N, !{"llvm.loop.unroll.disable"}, !{"llvm.loop.vectorize.enable", i1 0}}`
        with the hints asked for (LLVM LangRef, 'llvm.loop'): LLVM keeps a `rolled` loop (te
        Stage.rolled) a loop instead of unrolling it, and a scalar loop scalar."""
        hints = []
        if no_unroll:
            hints.append(self.module.add_metadata([ir.MetaDataString(self.module, "llvm.loop.unroll.disable")]))
        if no_vectorize:
            hints.append(self.module.add_metadata([ir.MetaDataString(self.module, "llvm.loop.vectorize.enable"),
                                                   ir.Constant(ir.IntType(1), 0)]))
        self._loop_ids += 1  # a distinct placeholder per loop: add_metadata shares equal operand lists
        loop_id = self.module.add_metadata([ir.MetaDataString(self.module, f"tvmc.loop.{name}.{self._loop_ids}")])
        loop_id.operands = (loop_id, *hints)
        return loop_id

    def _parallel(self, st: _FnState, s: For):
        """Outline the loop into `body(ptr noalias buf..., i64 var..., i64 begin, i64 end)`, which
        runs iterations [begin, end), and `fn(ptr closure)`, run by GOMP_parallel on every thread,
        which takes one contiguous chunk of the iteration space and calls `body` on it. A run with
        one thread (omp_get_max_threads), or where the launch depends on the run's sizes (a
        symbolic extent or min_parallel) with too few iterations, calls `body` on all of them
        directly (a tiny elementwise kernel of GPT-2 at sequence 1: no omp_get_num_threads /
        omp_get_thread_num / division for its chunk). LLVM inlines `body` where it is small; its
        noalias parameters tell LLVM what the kernel's noalias arguments tell it outside parallel
        loops, inlined or not: no two buffers overlap. Loaded from the closure without
        that fact, every store of an unrolled tile made LLVM load its inputs again: a symbolic
        F(4x4) Winograd conv at 16 x 8 ran 9.5 us against 6.7 us compiled for that size (now
        7.0), and whole static models ran 0-10% faster with it (SqueezeNet x86-avx2 0.90-0.96)."""
        free_vars = [v for v in _free_vars(s) if v in st.env]
        bufs = [buf for buf in _buffers_used(s) if buf in st.buffers]
        fields = [PTR] * len(bufs) + [I64] * len(free_vars)
        closure_ty = ir.LiteralStructType(fields or [I64])
        self._outlined += 1
        name = f"{st.fn.name}.par{self._outlined}"
        body = ir.Function(self.module, ir.FunctionType(VOID, fields + [I64, I64]), name + ".body")
        body.linkage = "internal"
        body.attributes.add("nounwind")
        self._align_stack(body)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        # caller side
        b = st.builder
        values = [st.buffers[x] for x in bufs] + [st.env[v] for v in free_vars]
        closure = _alloca(st.alloca_builder, closure_ty, "closure")
        gomp = self.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        # one thread (omp_get_max_threads, the ICV that GOMP_parallel would read) runs `body` here,
        # without the team start and the futex wake that GOMP_parallel costs even for one thread
        # (10 per run of a small int8 CNN, about 3 us of its 26)
        ext = self._extent(st, s.extent)
        launch = b.icmp_signed(">", b.call(self.declare("omp_get_max_threads", I32, []), []), I32(1))
        if not (isinstance(s.extent, int) and isinstance(s.min_parallel, int) and s.min_parallel == 0):
            # a symbolic extent: no launch without iterations, and (min_parallel) too few run here
            least = I64(max(1, s.min_parallel)) if isinstance(s.min_parallel, int) else \
                self._expr(st, s.min_parallel, None)
            launch = b.and_(launch, b.icmp_signed(">=", ext, least))
        with b.if_else(launch) as (then, otherwise):
            with then:
                for k, val in enumerate(values):
                    b.store(val, b.gep(closure, [I32(0), I32(k)], source_etype=closure_ty))
                b.call(gomp, [fn, closure, I32(0), I32(0)])
            with otherwise:
                b.call(body, values + [I64(0), ext])
        # the threads' side: the closure's fields, this thread's chunk
        threads = _FnState(fn)
        fb = threads.builder
        data = fn.args[0]
        loaded = [fb.load(fb.gep(data, [I32(0), I32(k)], source_etype=closure_ty), typ=t) for k, t in enumerate(fields)]
        threads.env.update(zip(free_vars, loaded[len(bufs):]))
        nthr = fb.sext(fb.call(self.declare("omp_get_num_threads", I32, []), []), I64)
        tid = fb.sext(fb.call(self.declare("omp_get_thread_num", I32, []), []), I64)
        inner = _FnState(body)
        for arg, x in zip(body.args, bufs):
            arg.add_attribute("noalias")
            inner.buffers[x] = arg
        for arg, v in zip(body.args[len(bufs):], free_vars):
            inner.env[v] = arg
        ext = self._extent(threads, s.extent)
        chunk = fb.sdiv(fb.add(ext, fb.sub(nthr, I64(1))), nthr)
        begin = fb.mul(tid, chunk)
        end = fb.add(begin, chunk)
        end = fb.select(fb.icmp_signed("<", end, ext), end, ext)
        fb.call(body, loaded + [begin, end])
        fb.ret_void()
        ib = inner.builder
        with for_range(ib, body.args[-2], body.args[-1], s.var.name) as i:
            inner.env[s.var] = i
            self._stmt(inner, s.body, None)
        ib.ret_void()

    # --- memory access --------------------------------------------------------------------
    def _addr(self, st, buf: Buffer, index):
        return st.builder.gep(st.buffers[buf], [index], inbounds=True, source_etype=mem_type(buf.dtype))

    def _addr_of(self, st, buf: Buffer, index: PrimExpr):
        """Address of buf[index] as base + variable part, then the constant part as a second GEP.

        Unrolled tiles access buf[x + k] for many constants k: kept apart, each k stays an
        addressing-mode displacement instead of becoming its own loop-invariant pointer (LLVM's
        reassociation would otherwise pair k with the invariant terms and LICM would hoist one
        pointer per k, spilling them all)."""
        lin = Linear.of(index)
        if not lin.terms or lin.const == 0:
            return self._cached_addr(st, buf, ("index", structural_key(index)), lambda: index)
        ptr = self._cached_addr(st, buf, ("terms", frozenset((k, c) for k, (_, c) in lin.terms.items())),
                                lambda: Linear(lin.terms).to_expr())
        return st.builder.gep(ptr, [I64(lin.const)], inbounds=True, source_etype=mem_type(buf.dtype))

    def _cached_addr(self, st, buf: Buffer, key, index):
        """The address of buf[index()], emitted once per basic block and access `key`: an
        unrolled Winograd transform reads 36 elements at one computed base plus constants, and
        computing the base for each of them took most of its codegen time (a CRNN's range
        artifact under a profiler: _addr_of 13 of 31 s). Within one block an earlier instruction
        dominates the later ones and a Var keeps its value (a loop's body, a branch or the code
        after them is a block of its own; a Let's body has a cache of its own), so the pointer is
        reused only there."""
        block, cache = st.addresses
        if block is not st.builder.block:
            block, cache = st.builder.block, {}
            st.addresses = (block, cache)
        # keyed by the buffer's pointer, not the Buffer: an Allocate inside an unrolled loop binds
        # the same Buffer to a new slot in each iteration, within one block
        slot = (st.buffers[buf], key)
        hit = cache.get(slot)
        if hit is None:
            expr = index()
            # the expression stays referenced beside its pointer: `key` holds the ids of its Vars
            # and opaque atoms, which must not be reused by other nodes while the entry lives
            hit = cache[slot] = (self._addr(st, buf, self._expr(st, expr, None)), expr)
        return hit[0]

    def _gather_scatter(self) -> bool:
        """Whether a vector access of computed addresses is one llvm.masked.gather / scatter (CPU
        targets whose vector unit has them, Target.vector_gather_scatter) rather than a scalar
        access per lane."""
        return self.device is None and self.target.vector_gather_scatter

    def _index_vector(self, st, index: PrimExpr, vec):
        """<lanes x i64>: `index` in each lane of the vector loop `vec` (splat where it does not
        depend on the loop's variable)."""
        ivec = self._expr(st, index, vec)
        return ivec.value if isinstance(ivec, _Vec) else self._splat(st, ivec, vec[1])

    def _lane_pointers(self, st, buf: Buffer, index: PrimExpr, vec):
        """<lanes x ptr>: the address of buf[index] in each lane of the vector loop `vec`."""
        ptrs = st.builder.gep(st.buffers[buf], [self._index_vector(st, index, vec)], inbounds=True,
                              source_etype=mem_type(buf.dtype))
        ptrs.type = ir.VectorType(PTR, vec[1])  # llvmlite types a GEP over a vector index as one pointer
        return ptrs

    def _access_kind(self, index: PrimExpr, vec):
        """('scalar', idx) | ('contiguous', base) | ('strided', (base, stride)) (a constant
        stride of 2 to MAX_SHUFFLED_STRIDE elements) | ('gather', None) for an index in a vector
        loop."""
        if vec is None:
            return "scalar", index
        var, _ = vec
        if not any(x is var for x in walk(index)):
            return "scalar", index

        def split(e):  # (coefficient of var, the rest) of e's linear form
            lin = Linear.of(e)
            c = lin.coef(var)
            return c, lin.add(Linear({("v", id(var)): (var, c)}), -1).to_expr()

        c, rest = split(index)
        if any(x is var for x in walk(rest)):  # var inside a division: simplified, it may come out
            c, rest = split(simplify(index))
        if any(x is var for x in walk(rest)) or not 1 <= c <= MAX_SHUFFLED_STRIDE:
            return "gather", None
        return ("contiguous", rest) if c == 1 else ("strided", (rest, c))

    @staticmethod
    def _lane_permutation(index: PrimExpr, vec):
        """(base, order) when the lanes of a vector loop (var = 0 .. lanes - 1) read the elements
        base + order[k], `order` a permutation of 0 .. lanes - 1 (each lane's offset from the first
        element a constant); else None."""
        var, lanes = vec
        at = [simplify(substitute(index, {var: IntImm(k)})) for k in range(lanes)]
        offsets = [simplify(x - at[0]) for x in at]
        if not all(isinstance(x, IntImm) for x in offsets):
            return None
        low = min(x.value for x in offsets)
        order = [x.value - low for x in offsets]
        if sorted(order) != list(range(lanes)):
            return None
        return simplify(at[0] + low), order

    def _vector_align(self, index: PrimExpr, dtype: str) -> int:
        """The alignment (bytes) claimed for a contiguous vector access starting at element
        `index`: 4 for CPU triples (unaligned vector moves cost little there); for a GPU triple,
        the largest power of two, up to the device table's buffer alignment, dividing the byte
        offset of every value `index` takes (its coefficients and constant), so that an aligned
        access becomes one wide load or store (PTX ld.v4) instead of one per lane."""
        if self.device is None:
            return 4
        lin = Linear.of(index)
        g = functools.reduce(math.gcd, [c for _, c in lin.terms.values()] + [lin.const]) * np.dtype(dtype).itemsize
        return min(self.device.buffer_align, g & -g) if g else self.device.buffer_align

    def _store(self, st, s: Store, vec, mask):
        b = st.builder
        val = self._expr(st, s.value, vec, mask)
        kind, idx = self._access_kind(s.index, vec)
        ety = mem_type(s.buffer.dtype)
        if kind == "scalar" and not isinstance(val, _Vec) and mask is None:
            b.store(self._to_mem(st, val, s.buffer.dtype), self._addr_of(st, s.buffer, idx))
            return
        lanes = vec[1]
        v = val.value if isinstance(val, _Vec) else self._splat(st, val, lanes)
        v = self._to_mem(st, v, s.buffer.dtype)
        if kind == "contiguous":
            ptr = self._addr_of(st, s.buffer, idx)
            align = self._vector_align(idx, s.buffer.dtype)
            if mask is None:
                b.store(v, ptr, align=align)
            else:
                vt = ir.VectorType(ety, lanes)
                f = self.declare(f"llvm.masked.store.{_vname(vt)}.p0", VOID, [vt, PTR, I32, ir.VectorType(I1, lanes)])
                b.call(f, [v, ptr, I32(align), mask])
            return
        if mask is None and kind != "scalar" and self._gather_scatter():  # lanes in order: the last wins
            vt = ir.VectorType(ety, lanes)
            f = self.declare(f"llvm.masked.scatter.{_vname(vt)}.v{lanes}p0", VOID,
                             [vt, ir.VectorType(PTR, lanes), I32, ir.VectorType(I1, lanes)])
            b.call(f, [v, self._lane_pointers(st, s.buffer, s.index, vec), I32(np.dtype(s.buffer.dtype).itemsize),
                       _all_lanes(lanes)])
            return
        # scatter (or scalar index under a mask): one lane at a time, last lane wins
        ivec = self._index_vector(st, s.index, vec)
        for k in range(lanes):
            lane_val = b.extract_element(v, I32(k))
            ptr = self._addr(st, s.buffer, b.extract_element(ivec, I32(k)))
            if mask is None:
                b.store(lane_val, ptr)
            else:
                with b.if_then(b.extract_element(mask, I32(k))):
                    b.store(lane_val, ptr)

    def _load(self, st, e: Load, vec, mask):
        b = st.builder
        kind, idx = self._access_kind(e.index, vec)
        ety = mem_type(e.buffer.dtype)
        if kind == "scalar":
            val = b.load(self._addr_of(st, e.buffer, idx), typ=ety)
            return self._from_mem(st, val, e.buffer.dtype)
        lanes = vec[1]
        vt = ir.VectorType(ety, lanes)
        if kind == "contiguous":
            ptr = self._addr_of(st, e.buffer, idx)
            align = self._vector_align(idx, e.buffer.dtype)
            if mask is None:
                val = b.load(ptr, typ=vt, align=align)
            else:
                f = self.declare(f"llvm.masked.load.{_vname(vt)}.p0", vt, [PTR, I32, ir.VectorType(I1, lanes), vt])
                val = b.call(f, [ptr, I32(align), mask, ir.Constant(vt, None)])
        elif kind == "strided" and mask is None and self.device is None and self.target.arch != "wasm32":
            # one contiguous load of the span the lanes cover, every stride-th element kept (a
            # shufflevector: permutes on x86, ld2-ld4 on AArch64): a stride-8 load of 16 floats
            # (ShuffleNet's NCHW8c -> NCHW copies, [1,17,28,28,8], AVX-512, one thread) takes 8
            # vector loads and a few permutes instead of 16 scalar loads and inserts: 70 -> 31 us
            # per copy, the model 7.13 -> 6.79 ms. Not on wasm32, where it is not yet measured.
            base, stride = idx
            span = ir.VectorType(ety, (lanes - 1) * stride + 1)
            wide = b.load(self._addr_of(st, e.buffer, base), typ=span, align=self._vector_align(base, e.buffer.dtype))
            val = b.shuffle_vector(wide, ir.Constant(span, ir.Undefined),
                                   ir.Constant(ir.VectorType(I32, lanes), [k * stride for k in range(lanes)]))
        elif (permuted := kind == "gather" and mask is None and self.device is None and
              self._lane_permutation(e.index, vec)):
            # the lanes read a permutation of one contiguous span (a data_pairs stage's quads in
            # pair order, tvmc.ops.cpu.int8): one load of the span and a shufflevector, not a
            # load per lane (resnet_style_cnn's int8 convs on x86-avx2: 16 vpinsrb per vector)
            base, order = permuted
            span = b.load(self._addr_of(st, e.buffer, base), typ=vt, align=self._vector_align(base, e.buffer.dtype))
            val = b.shuffle_vector(span, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), order))
        elif mask is None and self._gather_scatter():
            f = self.declare(f"llvm.masked.gather.{_vname(vt)}.v{lanes}p0", vt,
                             [ir.VectorType(PTR, lanes), I32, ir.VectorType(I1, lanes), vt])
            val = b.call(f, [self._lane_pointers(st, e.buffer, e.index, vec), I32(np.dtype(e.buffer.dtype).itemsize),
                             _all_lanes(lanes), ir.Constant(vt, ir.Undefined)])
        else:
            ivec = self._index_vector(st, e.index, vec)
            if mask is not None:  # masked-off lanes read element 0, which always exists
                ivec = b.select(mask, ivec, ir.Constant(ir.VectorType(I64, lanes), None))
            val = ir.Constant(vt, None)
            for k in range(lanes):
                x = b.load(self._addr(st, e.buffer, b.extract_element(ivec, I32(k))), typ=ety)
                val = b.insert_element(val, x, I32(k))
        return _Vec(self._from_mem(st, val, e.buffer.dtype), lanes)

    def _to_mem(self, st, val, dtype):
        """Register value (scalar or vector) -> memory type: bool i1 -> i8, float16 float -> half,
        bfloat16 float -> its i16 bits (rounded)."""
        if dtype == "bool":
            return st.builder.zext(val, _like(val.type, I8))
        if dtype == "float16":
            return st.builder.fptrunc(val, _like(val.type, ir.HalfType()))
        if dtype == "bfloat16":
            return float_to_bfloat16(st.builder, val)
        return val

    def _from_mem(self, st, val, dtype):
        """Memory value (scalar or vector) -> register type: i8 -> bool i1, half -> float,
        bfloat16 bits -> float."""
        if dtype == "bool":
            return st.builder.icmp_unsigned("!=", val, ir.Constant(val.type, None))
        if dtype == "float16":
            return half_to_float(st.builder, val, self.half_by_bits)
        if dtype == "bfloat16":
            return bfloat16_to_float(st.builder, val)
        return val

    def _splat(self, st, val, lanes):
        b = st.builder
        vt = ir.VectorType(val.type, lanes)
        v = b.insert_element(ir.Constant(vt, ir.Undefined), val, I32(0))
        return b.shuffle_vector(v, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    # --- expressions ----------------------------------------------------------------------
    def _expr(self, st, e: PrimExpr, vec, mask=None):
        """Scalar llvm value, or _Vec inside a vectorized loop when `e` depends on its var."""
        if isinstance(e, IntImm):
            return _int_constant(e.dtype, e.value)
        if isinstance(e, FloatImm):  # a float16 or bfloat16 literal holds a value of its dtype
            return llvm_type(e.dtype)(literal_value(e))
        if isinstance(e, Var):
            if vec is not None and e is vec[0]:
                lanes = vec[1]
                return _Vec(ir.Constant(ir.VectorType(I64, lanes), list(range(lanes))), lanes)
            if e not in st.env:
                raise CodegenError(f"codegen: unbound variable {e.name}")
            return st.env[e]
        if isinstance(e, Load):
            return self._load(st, e, vec, mask)
        if isinstance(e, Select):
            return self._select(st, e, vec, mask)
        if isinstance(e, Let):  # value once, here; the body sees it through the var (an outer binding of the
            outer = st.env.get(e.var)  # same var, from a body inlined into its own index, comes back after)
            st.env[e.var] = self._expr(st, e.value, vec, mask)
            addresses, st.addresses = st.addresses, (None, {})  # the var's pointers hold inside only
            out = self._expr(st, e.body, vec, mask)
            st.addresses = addresses
            if outer is None:
                del st.env[e.var]
            else:
                st.env[e.var] = outer
            return out
        if isinstance(e, Cast) and self.round_convert:
            rewritten = rounded_then_shifted(e)
            if rewritten is not None:
                return self._expr(st, rewritten, vec, mask)
        args = [self._expr(st, c, vec, mask) for c in _operands(e)]
        lanes = next((a.lanes for a in args if isinstance(a, _Vec)), None)
        if lanes is not None:
            args = [a.value if isinstance(a, _Vec) else self._splat(st, a, lanes) for a in args]
        out = self._op(st, e, args)
        return _Vec(out, lanes) if lanes is not None else out

    def _select(self, st, e: Select, vec, mask):
        b = st.builder
        known = simplify(e.cond)
        if isinstance(known, IntImm):  # e.g. a select on an unrolled loop's index: one side only
            return self._expr(st, e.t if known.value else e.f, vec, mask)
        cond = self._expr(st, e.cond, vec, mask)
        has_load = any(isinstance(x, Load) for x in walk(e.t)) or any(isinstance(x, Load) for x in walk(e.f))
        if not isinstance(cond, _Vec) and vec is not None and any(x is vec[0] for x in walk(e)):
            if has_load:  # a uniform condition, vector sides: only the taken side's loads run
                return self._branch_select(st, cond, e, vec, mask)
            cond = _Vec(self._splat(st, cond, vec[1]), vec[1])
        if isinstance(cond, _Vec):
            lanes = cond.lanes
            m_t = cond.value if mask is None else b.and_(mask, cond.value)
            m_f = b.not_(cond.value) if mask is None else b.and_(mask, b.not_(cond.value))
            t = self._expr(st, e.t, vec, m_t if has_load else mask)
            f = self._expr(st, e.f, vec, m_f if has_load else mask)
            t = t.value if isinstance(t, _Vec) else self._splat(st, t, lanes)
            f = f.value if isinstance(f, _Vec) else self._splat(st, f, lanes)
            return _Vec(b.select(cond.value, t, f), lanes)
        if not has_load:
            t, f = self._expr(st, e.t, vec, mask), self._expr(st, e.f, vec, mask)
            if isinstance(t, _Vec) or isinstance(f, _Vec):
                lanes = (t if isinstance(t, _Vec) else f).lanes
                t = t.value if isinstance(t, _Vec) else self._splat(st, t, lanes)
                f = f.value if isinstance(f, _Vec) else self._splat(st, f, lanes)
                return _Vec(b.select(cond, t, f), lanes)
            return b.select(cond, t, f)
        # if_then_else semantics: only the taken side's loads run
        with b.if_else(cond) as (then, otherwise):
            with then:
                t = self._expr(st, e.t, vec, mask)
                t_blk = b.block
            with otherwise:
                f = self._expr(st, e.f, vec, mask)
                f_blk = b.block
        if isinstance(t, _Vec) or isinstance(f, _Vec):
            raise CodegenError("codegen: vector values under a scalar branch select are unsupported")
        phi = b.phi(t.type)
        phi.add_incoming(t, t_blk)
        phi.add_incoming(f, f_blk)
        return phi

    def _branch_select(self, st, cond, e: Select, vec, mask):
        """select(cond, t, f) with a scalar `cond` and vector sides `t`, `f` (vec's lanes) as a
        branch and a vector phi: a concatenation's balanced select tree (tvmc.ops.transform)
        whose condition is the same for every lane of a vector loads one input per vector, not
        every input under a mask (a CRNN's [99, 64] output of 198 inputs at width 400, where
        tvmc.tir.simplify turns the lane's (16 o + i) // 32 into o // 2: 390 us -> about 1; the
        static artifact 1.24-1.54 -> 0.75-0.89 ms)."""
        b, lanes = st.builder, vec[1]

        def side(x):
            v = self._expr(st, x, vec, mask)
            return v.value if isinstance(v, _Vec) else self._splat(st, v, lanes)

        with b.if_else(cond) as (then, otherwise):
            with then:
                t, t_blk = side(e.t), b.block
            with otherwise:
                f, f_blk = side(e.f), b.block
        phi = b.phi(t.type)
        phi.add_incoming(t, t_blk)
        phi.add_incoming(f, f_blk)
        return _Vec(phi, lanes)

    def _op(self, st, e, args):
        b = st.builder
        if isinstance(e, BinOp):
            x, y = args
            fl = is_float(e.a.dtype)
            if e.op == "and":
                return b.and_(x, y)
            if e.op == "or":
                return b.or_(x, y)
            if fl:
                if e.op in ("min", "max"):
                    # NaN-propagating, as numpy's minimum/maximum and ONNX Min/Max/Relu/Clip/MaxPool/
                    # ReduceMax in onnxruntime: y when y wins (an ordered compare: x when x is NaN),
                    # y when y is NaN. The inner select is x86's maxps/minps(y, x); with y a constant
                    # (relu's 0) the NaN test folds away and one instruction is left.
                    first = b.select(b.fcmp_ordered("<" if e.op == "min" else ">", y, x), y, x)
                    return b.select(b.fcmp_unordered("uno", y, y), y, first)
                if e.op == "fmod":
                    return b.frem(x, y)
                # `contract` lets LLVM fuse a multiply and the add that consumes it into one FMA
                # (one rounding instead of two, like C's -ffp-contract=on)
                return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[e.op](x, y, flags=FP_CONTRACT)
            unsigned = is_unsigned(e.a.dtype)
            if e.op in ("min", "max"):
                cmp = b.icmp_unsigned if unsigned else b.icmp_signed
                return b.select(cmp("<" if e.op == "min" else ">", x, y), x, y)
            if e.op in _INT_BINOPS:
                return getattr(b, _INT_BINOPS[e.op])(x, y)
            if e.op == "right_shift":
                return (b.lshr if unsigned else b.ashr)(x, y)
            if e.op == "fmod":
                return _lanewise(b, b.urem if unsigned else b.srem)(x, y)
            sdiv, srem = _lanewise(b, b.sdiv), _lanewise(b, b.srem)
            if unsigned and e.op in ("floordiv", "div"):
                return _lanewise(b, b.udiv)(x, y)
            if unsigned and e.op == "floormod":
                return _lanewise(b, b.urem)(x, y)
            if e.op in ("floordiv", "div"):
                q, r = sdiv(x, y), srem(x, y)
                adjust = b.and_(b.icmp_signed("!=", r, _zero(r.type)),
                                b.icmp_signed("!=", b.icmp_signed("<", r, _zero(r.type)),
                                              b.icmp_signed("<", y, _zero(y.type))))
                return b.sub(q, b.zext(adjust, q.type))
            if e.op == "floormod":
                r = srem(x, y)
                fix = b.and_(b.icmp_signed("!=", r, _zero(r.type)),
                             b.icmp_signed("!=", b.icmp_signed("<", r, _zero(r.type)),
                                           b.icmp_signed("<", y, _zero(y.type))))
                return b.select(fix, b.add(r, y), r)
        if isinstance(e, Cmp):
            x, y = args
            sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[e.op]
            if is_float(e.a.dtype):
                return b.fcmp_unordered(sym, x, y) if e.op == "ne" else b.fcmp_ordered(sym, x, y)
            if is_unsigned(e.a.dtype):
                return b.icmp_unsigned(sym, x, y)
            return b.icmp_signed(sym, x, y)
        if isinstance(e, Not):
            return b.not_(args[0])
        if isinstance(e, Cast):
            if self.uint_to_float_by_bits and e.value.dtype in ("uint8", "uint16") and \
                    e.dtype in ("float32", "float64") and isinstance(args[0].type, ir.VectorType):
                return _cast(b, uint_to_float_by_bits(b, args[0]), "float32", e.dtype)
            if self.round_convert and e.dtype == "int32" and isinstance(e.value, Call) and e.value.name == "round" \
                    and e.value.dtype == "float32" and isinstance(args[0], ir.CallInstr):
                x = args[0].args[0]  # int32(round(x)): one lrint of x (the rint call goes unused)
                n = f"v{x.type.count}" if isinstance(x.type, ir.VectorType) else ""
                return b.call(self.declare(f"llvm.lrint.{n}i32.{n}f32", _like(x.type, I32), [x.type]), [x])
            return _cast(b, args[0], e.value.dtype, e.dtype, self.half_by_bits)
        if isinstance(e, Call) and e.name == "reinterpret":
            return _reinterpret(b, args[0], e.args[0].dtype, e.dtype, self.half_by_bits)
        if isinstance(e, Call):
            return intrinsics.emit(self, b, e.name, args, e.dtype)
        raise CodegenError(f"codegen: unsupported expression {type(e).__name__}")


_INT_BINOPS = {"add": "add", "sub": "sub", "mul": "mul", "bitwise_and": "and_", "bitwise_or": "or_",
               "bitwise_xor": "xor", "left_shift": "shl"}


def half_to_float(b, h, by_bits: bool = False):
    """float16 value(s) `h` (LLVM half, scalar or vector) widened to float, exactly. With
    `by_bits` (the architectures of HALF_BY_BITS) in integer operations: the magnitude bits
    shifted into a float's mantissa and exponent (h & 0x7fff) << 13, scaled by 2**112 (which also
    normalizes subnormals), the exponent forced to 255 for inf and nan, the sign bit moved to
    bit 31."""
    ft = _like(h.type, ir.FloatType())
    if not by_bits:
        return b.fpext(h, ft)
    it = _like(h.type, I32)
    c = functools.partial(intrinsics._const, it)
    bits = b.zext(b.bitcast(h, _like(h.type, ir.IntType(16))), it)
    magnitude = b.shl(b.and_(bits, c(0x7FFF)), c(13))
    finite = b.fmul(b.bitcast(magnitude, ft), intrinsics._const(ft, 2.0 ** 112))
    special = b.bitcast(b.or_(magnitude, c(0x7F800000)), ft)
    is_special = b.icmp_unsigned(">=", b.and_(bits, c(0x7C00)), c(0x7C00))
    value = b.bitcast(b.select(is_special, special, finite), it)
    return b.bitcast(b.or_(value, b.shl(b.and_(bits, c(0x8000)), c(16))), ft)


def bfloat16_to_float(b, bits):
    """bfloat16 value(s) `bits` (i16, scalar or vector) widened to float, exactly: bfloat16 is
    the upper half of a float32 (sign, 8 exponent bits, 7 mantissa bits), so the bits shifted
    left by 16. Every finite value, subnormal, infinity and NaN (payload included) is kept."""
    it = _like(bits.type, I32)
    return b.bitcast(b.shl(b.zext(bits, it), intrinsics._const(it, 16)), _like(bits.type, ir.FloatType()))


def float_to_bfloat16(b, v):
    """float value(s) `v` (scalar or vector) rounded to bfloat16, as its i16 bits: to nearest,
    ties to even (the float's bits plus 0x7fff plus the lowest bit kept, then the upper half: a
    carry out of the mantissa gives the next binade, or infinity above bfloat16's largest
    finite value), subnormals rounded like normal numbers; a NaN stays a NaN, quiet: its upper
    half with the quiet bit (0x0040) set, since dropping a payload that lies in the low half
    would leave infinity's bits. ml_dtypes and onnxruntime round every other value the same
    way (their NaNs are canonical: ml_dtypes' 0x7fc0 with the sign).

    Integer operations on every architecture, not LLVM's `bfloat` fptrunc: with llvmlite 0.50's
    LLVM 22 that is a call to __truncsfbf2 on x86-64 without AVX512-BF16 (a libgcc 13 /
    compiler-rt symbol), vcvtneps2bf16 with it (which flushes subnormals to zero), and no
    instruction selection at all on wasm32 (LLVM aborts)."""
    it = _like(v.type, I32)
    c = functools.partial(intrinsics._const, it)
    bits = b.bitcast(v, it)
    upper = b.lshr(bits, c(16))
    rounded = b.lshr(b.add(bits, b.add(b.and_(upper, c(1)), c(0x7FFF))), c(16))
    is_nan = b.icmp_unsigned(">", b.and_(bits, c(0x7FFFFFFF)), c(0x7F800000))
    return b.trunc(b.select(is_nan, b.or_(upper, c(0x0040)), rounded), _like(v.type, I16))


def round_to_bfloat16(b, v):
    """float value(s) `v` rounded to bfloat16 (float_to_bfloat16) and kept as float."""
    return bfloat16_to_float(b, float_to_bfloat16(b, v))


def _reinterpret(b, v, src: str, dst: str, half_by_bits: bool = False):
    """The bits of register value `v` (dtype `src`) as `dst` of the same size; float16 and
    bfloat16 go through their memory forms."""
    if src == "float16":
        v = b.fptrunc(v, _like(v.type, ir.HalfType()))
    elif src == "bfloat16":
        v = float_to_bfloat16(b, v)
    out = b.bitcast(v, _like(v.type, mem_type(dst)))
    if dst == "float16":
        return half_to_float(b, out, half_by_bits)
    return bfloat16_to_float(b, out) if dst == "bfloat16" else out


def block_register_bound(target, threads: int, unit: int) -> int:
    """Most registers per thread that let a block of `threads` fit the target's registers per
    block: whole warps, each thread's registers allocated `unit` at a time (CUDA's occupancy
    rule; unbounded without the descriptor's registers_per_block)."""
    if not target.registers_per_block:
        return 1 << 30
    warp = max(1, target.thread_warp_size)
    lanes = -(-threads // warp) * warp
    return target.registers_per_block // (lanes * unit) * unit


def _zero(t):
    return ir.Constant(t, None)


def _lanewise(b, op):
    """`op` (an integer division or remainder builder method) on vectors with zero divisor lanes
    replaced by 1.

    Loads under a select branch become masked loads whose inactive lanes read 0 (see
    `_load`), so a division in such a branch divides by 0 in lanes whose result the select
    discards, and x86 traps (SIGFPE). Those lanes' results are never used; a lane that really
    divides by zero is undefined behaviour in C and ONNX alike."""
    def apply(x, y):
        if not isinstance(x.type, ir.VectorType):
            return op(x, y)
        zero, one = ir.Constant(y.type, None), ir.Constant(y.type, [1] * y.type.count)
        return op(x, b.select(b.icmp_unsigned("==", y, zero), one, y))
    return apply


def _all_lanes(lanes: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, lanes), [1] * lanes)


def _vname(vt: ir.VectorType) -> str:
    el = vt.element
    name = {ir.FloatType: "f32", ir.DoubleType: "f64", ir.HalfType: "f16"}.get(type(el))
    if name is None:
        name = f"i{el.width}"
    return f"v{vt.count}{name}"


def _operands(e):
    if isinstance(e, (BinOp, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    raise CodegenError(f"codegen: unsupported expression {type(e).__name__}")


def _like(ty, element):
    """`element`, or a vector of it with as many lanes as `ty` when `ty` is a vector type."""
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def uint_to_float_by_bits(b, v):
    """<N x i8> or <N x i16> `v` (unsigned) -> <N x float>, exactly, in integer operations: x
    zero-extended to int32 and or-ed into the mantissa of 2^23 (the bits 0x4B000000 | x are the
    float 2^23 + x for x < 2^23), minus 2^23 (UINT_TO_FLOAT_BY_BITS)."""
    i32v, f32v = ir.VectorType(I32, v.type.count), ir.VectorType(ir.FloatType(), v.type.count)
    bits = b.or_(b.zext(v, i32v), ir.Constant(i32v, [0x4B000000] * v.type.count))
    return b.fsub(b.bitcast(bits, f32v), ir.Constant(f32v, [float(1 << 23)] * v.type.count))


def _cast(b, v, src: str, dst: str, half_by_bits: bool = False):
    """Convert register value `v` (scalar or vector) from dtype `src` to `dst` as numpy's astype
    does for in-range values; a float16 result is rounded to float16 once (through half) and
    kept as float; a bfloat16 result is converted to float32 first (rounding float64 and wide
    integers there, as ml_dtypes and onnxruntime do), then rounded to bfloat16 and kept as
    float."""
    if src == dst:
        return v
    dt = _like(v.type, llvm_type(dst))
    sf, df = is_float(src), is_float(dst)
    if dst == "bool":
        return b.fcmp_unordered("!=", v, _zero(v.type)) if sf else b.icmp_unsigned("!=", v, _zero(v.type))
    if dst == "bfloat16":
        return round_to_bfloat16(b, _cast(b, v, src, "float32", half_by_bits))
    if dst == "float16":
        half = _like(v.type, ir.HalfType())
        if sf:
            h = b.fptrunc(v, half)
        else:
            h = b.uitofp(v, half) if is_unsigned(src) else b.sitofp(v, half)
        return half_to_float(b, h, half_by_bits)
    if sf and df:
        src_bits, dst_bits = (64 if d == "float64" else 32 for d in (src, dst))  # register widths
        if src_bits == dst_bits:
            return v
        return b.fpext(v, dt) if dst_bits > src_bits else b.fptrunc(v, dt)
    if sf:
        return b.fptoui(v, dt) if is_unsigned(dst) else b.fptosi(v, dt)
    if df:
        return b.uitofp(v, dt) if is_unsigned(src) else b.sitofp(v, dt)
    sw, dw = llvm_type(src).width, llvm_type(dst).width
    if sw == dw:
        return v
    if sw > dw:
        return b.trunc(v, dt)
    return b.zext(v, dt) if is_unsigned(src) else b.sext(v, dt)


def _vectorizable(s: Stmt) -> bool:
    """A loop body of stores without inner loops or allocations, and without Lets (their vars
    would hide from _access_kind and _select whether an index or condition varies per lane)."""
    return _loop_free(s) and not any(isinstance(x, Let) for e in _stmt_exprs(s) for x in walk(e))


def _shares_dot_weights(s: For) -> bool:
    """Whether the loop runs a DotU8S8 step of its body on the same weight block for each of its
    data quads (a register tile's rows: the weight index does not use the loop's variable)."""
    def visit(x):
        if isinstance(x, DotU8S8):
            return s.var not in set(walk(x.b_index)) and s.var in set(walk(x.a_index))
        return any(visit(c) for c in stmt_children(x))

    return visit(s.body)


def _loop_free(s: Stmt) -> bool:
    if isinstance(s, (For, Allocate)):
        return False
    return all(_loop_free(c) for c in stmt_children(s))


def _stmt_exprs(s: Stmt):
    if isinstance(s, Store):
        yield s.index
        yield s.value
    elif isinstance(s, IfThenElse):
        yield s.cond
    elif isinstance(s, Intrinsic):
        yield from s.exprs
    for c in stmt_children(s):
        yield from _stmt_exprs(c)


def _free_vars(s: For) -> list:
    bound, out, seen = set(), [], set()

    def visit(x):
        if isinstance(x, For):
            bound.add(x.var)
        for c in stmt_children(x):
            visit(c)

    visit(s)
    for e in list(_stmt_exprs(s)) + _symbolic_extents(s):
        for x in walk(e):
            if isinstance(x, Var) and x not in bound and x not in seen:
                seen.add(x)
                out.append(x)
    return out


def _symbolic_extents(s: Stmt) -> list:
    """The extents (and min_parallel) of the loops in `s` (itself included) that are expressions."""
    out = [x for x in (s.extent, s.min_parallel) if isinstance(x, PrimExpr)] if isinstance(s, For) else []
    for c in stmt_children(s):
        out += _symbolic_extents(c)
    return out


def _buffers_used(s: Stmt) -> list:
    out, seen = [], set()

    def add(buf):
        if id(buf) not in seen:
            seen.add(id(buf))
            out.append(buf)

    def visit(x):
        if isinstance(x, Store):
            add(x.buffer)
        if isinstance(x, Intrinsic):
            for buf, _ in x.reads() + x.writes():
                add(buf)
        for e in ([x.index, x.value] if isinstance(x, Store) else [x.cond] if isinstance(x, IfThenElse) else
                  x.exprs if isinstance(x, Intrinsic) else []):
            for n in walk(e):
                if isinstance(n, Load):
                    add(n.buffer)
        for c in stmt_children(x):
            visit(c)

    visit(s)
    return out


def _known_side(x, visit):
    """For substitute: the side a Select takes once its substituted condition folds to a constant
    (an unrolled loop's index picking a Winograd transform row), without rebuilding the other."""
    if isinstance(x, Select):
        known = simplify(visit(x.cond))
        if isinstance(known, IntImm):
            return visit(x.t if known.value else x.f)
    return None


def _subst_stmt(s: Stmt, m: dict) -> Stmt:
    """`s` with the vars of `m` replaced (an unrolled iteration's body); selects whose condition
    becomes constant keep only their live side."""
    if isinstance(s, For):
        extent = simplify(substitute(s.extent, m)) if isinstance(s.extent, PrimExpr) else s.extent
        return For(s.var, extent, s.kind, _subst_stmt(s.body, m), s.min_parallel)
    if isinstance(s, Store):
        return Store(s.buffer, simplify(substitute(s.index, m)), substitute(s.value, m, _known_side))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _subst_stmt(s.body, m))
    if isinstance(s, Seq):
        return Seq([_subst_stmt(x, m) for x in s.stmts])
    if isinstance(s, IfThenElse):
        return IfThenElse(simplify(substitute(s.cond, m)), _subst_stmt(s.then, m),
                          _subst_stmt(s.otherwise, m) if s.otherwise is not None else None)
    if isinstance(s, Intrinsic):
        return s.with_exprs([simplify(substitute(e, m)) for e in s.exprs])
    if isinstance(s, Barrier):
        return s
    raise TypeError(s)
