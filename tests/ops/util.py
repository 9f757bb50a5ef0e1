"""Test helper: compile one op (as its own fused function) and run it through ctypes."""

from __future__ import annotations

import ctypes
import itertools
import tempfile
from pathlib import Path

import numpy as np

from tvmc.codegen.build import compile_ir, link_shared
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.graph.ir import Function, Var, make_call
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import get_op
from tvmc.target import resolve_target

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "int64": dict(rtol=0, atol=0)}

_tmp = tempfile.TemporaryDirectory(prefix="tvmc-optest-")
_serial = itertools.count()


def build_and_run(fn: Function, arrays, target=None, config=None, impl=None):
    """Compile `fn` for `target` (this host, `native`, by default), with the anchor's `config` (a ConfigEntity;
    default: the fallback) and implementation `impl` (a name; default: the op's first), and run
    it on numpy `arrays`."""
    target = target or resolve_target("native")
    lookup = None
    if impl is not None:
        from tvmc.autotune.task import tasks_of_functions

        task = next(t for t in tasks_of_functions([fn], target) if t.impl == impl)
        chosen = config if config is not None else task.config_space(target).fallback_config()
        lookup = lambda name, wl: chosen if name == impl else None
    elif config is not None:
        lookup = lambda name, wl: config
    prim = lower_fused(fn, target, config_lookup=lookup)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    so = link_shared(compile_ir(cg.ir_text(), target), target)
    # a fresh file each time: rewriting a path that is still dlopen()ed corrupts the loaded code,
    # and dlopen() of a known path returns the old library
    path = Path(_tmp.name, f"{fn.name}_{next(_serial)}.so")
    path.write_bytes(so)
    lib = ctypes.CDLL(str(path))
    out = np.zeros(fn.body.shape, dtype=fn.body.dtype)
    args = [np.ascontiguousarray(a) for a in arrays] + [out]
    getattr(lib, fn.name)(*[ctypes.c_void_p(a.ctypes.data) for a in args])
    return out, prim


def run_op(op, arrays, attrs=None, chain=(), impl=None):
    """Build `op(arrays...)` followed by elementwise `chain` ops [(name, attrs, extra arrays)],
    run it compiled (implementation `impl`, default the op's first), and return (compiled
    output, numpy reference output)."""
    params = [Var(f"x{k}", _ttype(a)) for k, a in enumerate(arrays)]
    body = make_call(op, params, attrs or {})
    ref = get_op(op).reference(*arrays, **(attrs or {}))
    all_arrays = list(arrays)
    for name, cattrs, extra in chain:
        extra_vars = [Var(f"x{len(params) + k}", _ttype(a)) for k, a in enumerate(extra)]
        params += extra_vars
        all_arrays += list(extra)
        body = make_call(name, [body] + extra_vars, cattrs)
        ref = get_op(name).reference(ref, *extra, **cattrs)
    fn = Function(params, body, "fused_" + op.replace(".", "_"))
    out, _ = build_and_run(fn, all_arrays, impl=impl)
    return out, ref


def _ttype(a):
    from tvmc.graph.ir import TensorType

    return TensorType(tuple(a.shape), a.dtype.name)
