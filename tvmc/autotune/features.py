"""Loop-structure features of a lowered kernel for the cost model, in the spirit of AutoTVM's
itervar features (Chen et al., NeurIPS 2018, section 5.2; autotvm/feature.py).

The statement that dominates the kernel is the Store executed most often (ties: the deepest);
its enclosing loops, outermost first, are described one by one, and the vector is padded to
MAX_LOOPS loops:

    per loop:    log2(extent), one-hot kind (serial, parallel, vectorize, unroll), nesting depth,
                 log2 of the iterations of the loop and every loop inside it on the path,
                 and for each of up to MAX_ACCESSES buffer accesses of the statement (the store
                 first, then loads in order): log2(1 + |stride|) of the flat index with respect to
                 the loop's variable (0: the loop does not move the access; 1: contiguous), and
                 log2 of the bytes the access touches inside the loop (product of the extents of
                 the loops from this one inwards that move it, times the element size);
    whole kernel: number of loops of each kind, log2 of the product of unrolled extents inside
                 the dominant statement (code size), number of stores, log2 of the dominant
                 statement's executions, and whether the dominant statement's accumulator is
                 a local (register) buffer.
"""

from __future__ import annotations

import math

import numpy as np

from tvmc.te.expr import Load, walk
from tvmc.tir.ir import Allocate, For, IfThenElse, Seq, Store
from tvmc.tir.simplify import Linear

MAX_LOOPS = 12
MAX_ACCESSES = 3
KINDS = ("serial", "parallel", "vectorize", "unroll", "rolled")
PER_LOOP = 1 + len(KINDS) + 2 + 2 * MAX_ACCESSES
LENGTH = MAX_LOOPS * PER_LOOP + len(KINDS) + 4


def _stores(s, loops, out, kinds):
    if isinstance(s, For):
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
        _stores(s.body, loops + [s], out, kinds)
    elif isinstance(s, Store):
        out.append((loops, s))
    elif isinstance(s, Seq):
        for x in s.stmts:
            _stores(x, loops, out, kinds)
    elif isinstance(s, Allocate):
        _stores(s.body, loops, out, kinds)
    elif isinstance(s, IfThenElse):
        _stores(s.then, loops, out, kinds)
        if s.otherwise is not None:
            _stores(s.otherwise, loops, out, kinds)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def loop_features(prim) -> np.ndarray:
    """Feature vector (float32, LENGTH) of PrimFunc `prim` (see the module docstring)."""
    stores, kinds = [], {}
    _stores(prim.body, [], stores, kinds)
    vec = np.zeros(LENGTH, np.float32)
    if not stores:
        return vec
    loops, st = max(stores, key=lambda ls: (math.prod(f.extent for f in ls[0]), len(ls[0])))
    accesses = [(st.buffer, st.index)] + [(e.buffer, e.index) for e in walk(st.value) if isinstance(e, Load)]
    accesses = accesses[:MAX_ACCESSES]
    lins = [Linear.of(idx) for _, idx in accesses]
    strides = [[lin.coef(f.var) for f in loops] for lin in lins]
    loops = loops[-MAX_LOOPS:]
    strides = [s[-len(loops):] if loops else [] for s in strides]
    for d, f in enumerate(loops):
        base = d * PER_LOOP
        vec[base] = _log2(f.extent)
        vec[base + 1 + KINDS.index(f.kind)] = 1.0
        vec[base + 5] = d
        vec[base + 6] = _log2(math.prod(g.extent for g in loops[d:]))
        for a, (buf, _) in enumerate(accesses):
            itemsize = np.dtype(buf.dtype).itemsize
            vec[base + 7 + 2 * a] = _log2(1 + abs(strides[a][d]))
            touched = math.prod(g.extent for g, s in zip(loops[d:], strides[a][d:]) if s != 0)
            vec[base + 8 + 2 * a] = _log2(touched * itemsize)
    tail = MAX_LOOPS * PER_LOOP
    for k, kind in enumerate(KINDS):
        vec[tail + k] = kinds.get(kind, 0)
    vec[tail + 4] = _log2(math.prod(f.extent for f in loops if f.kind == "unroll"))
    vec[tail + 5] = len(stores)
    vec[tail + 6] = _log2(math.prod(f.extent for f in loops))
    vec[tail + 7] = float(st.buffer.scope == "local")
    return vec


def config_features(task, target, config) -> np.ndarray:
    """loop_features of `task`'s anchor op lowered with `config` (zeros if the schedule raises)."""
    from tvmc.ops.fused import lower_fused

    try:
        prim = lower_fused(task.function(), target, lambda name, wl: config if name == task.impl else None)
    except Exception:
        return np.zeros(LENGTH, np.float32)
    return loop_features(prim)
