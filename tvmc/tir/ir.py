"""Loop IR: buffers, statements (For, Store, Allocate, Seq, IfThenElse, Barrier) and PrimFunc, with a printer."""

from __future__ import annotations

import numpy as np

from tvmc.te.expr import PrimExpr, Var


class Buffer:
    """A flat memory region of `shape` (row-major) and `dtype`; scope 'global', 'shared' (the
    threads of a GPU block) or 'local' (one thread's registers or stack)."""

    def __init__(self, name: str, shape, dtype: str, scope: str = "global"):
        self.name, self.shape, self.dtype, self.scope = name, tuple(int(s) for s in shape), dtype, scope

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def flat_index(self, indices) -> PrimExpr:
        """Row-major flat index of multi-dimensional `indices`."""
        out = None
        stride = 1
        for idx, extent in zip(reversed(indices), reversed(self.shape)):
            term = idx if stride == 1 else idx * stride
            out = term if out is None else term + out
            stride *= extent
        from tvmc.te.expr import IntImm

        return out if out is not None else IntImm(0)

    def __repr__(self):
        return f"{self.name}: {self.dtype}[{','.join(map(str, self.shape))}]"


class Stmt:
    pass


class For(Stmt):
    """`for var in [0, extent)`; kind is 'serial', 'parallel', 'vectorize', 'unroll', or a GPU
    thread tag ('blockIdx.x' .. 'threadIdx.z'): then `var` is that block or thread index, one
    iteration per block or thread (tvmc.tir.gpu)."""

    def __init__(self, var: Var, extent: int, kind: str, body: Stmt):
        self.var, self.extent, self.kind, self.body = var, int(extent), kind, body


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


class PrimFunc:
    """A kernel: `params` (Buffers, inputs then output) and a loop-IR `body`. A GPU device kernel
    also has `launch` (tvmc.tir.gpu.LaunchConfig: grid and block sizes, shared memory bytes)."""

    def __init__(self, name: str, params, body: Stmt, launch=None):
        self.name, self.params, self.body, self.launch = name, list(params), body, launch

    def __str__(self):
        lines = [f"primfn {self.name}(" + ", ".join(map(repr, self.params)) + ") {"]
        if self.launch is not None:
            lines.append(f"  // launch {self.launch}")
        _print(self.body, 1, lines)
        lines.append("}")
        return "\n".join(lines) + "\n"


def _print(s: Stmt, depth: int, lines: list):
    pad = "  " * depth
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else s.kind + " "
        lines.append(f"{pad}{kind}for {s.var!r} in 0..{s.extent} {{")
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
