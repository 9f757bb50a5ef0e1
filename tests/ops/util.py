"""Test helper: compile one op (as its own fused function) for a target and run it there
(the target's kernel runner from tests/targets.py: ctypes for CPUs, pyopencl for OpenCL)."""

from __future__ import annotations

import numpy as np

from tests.targets import by_runtime
from tvmc.graph.ir import Function, Var
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import get_op, make_call
from tvmc.target import resolve_target

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "int64": dict(rtol=0, atol=0)}


def build_and_run(fn: Function, arrays, target=None, config=None, impl=None):
    """Compile `fn` for `target` (a resolved Target; this host, `native`, by default), with the
    anchor's `config` (a ConfigEntity; default: the fallback) and implementation `impl` (a name;
    default: the op's first), and run it on numpy `arrays` on that target's runtime.
    Returns (output array, the lowered PrimFunc)."""
    target = target or resolve_target("native")
    lookup = None
    if impl is not None:
        from tvmc.autotune.task import tasks_of_functions

        task = next(t for t in tasks_of_functions([fn], target) if t.impl == impl)
        chosen = config if config is not None else task.config_space(target).fallback_config()

        def lookup(name, wl):
            return chosen if name == impl else None
    elif config is not None:
        def lookup(name, wl):
            return config
    prim = lower_fused(fn, target, config_lookup=lookup)
    out = np.zeros(fn.body.shape, dtype=fn.body.dtype)
    by_runtime(target)(prim, arrays=[np.ascontiguousarray(a) for a in arrays], out=out)
    return out, prim


def op_function(op, arrays, attrs=None, chain=()):
    """`op(arrays...)` followed by elementwise `chain` ops [(name, attrs, extra arrays)] as one
    fused Function, with every array it takes and the numpy reference output:
    (Function, arrays, reference)."""
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
    return Function(params, body, "fused_" + op.replace(".", "_")), all_arrays, ref


def run_op(op, arrays, attrs=None, chain=(), impl=None, target=None, config=None):
    """Build `op(arrays...)` followed by elementwise `chain` ops [(name, attrs, extra arrays)],
    run it compiled for `target` (default native; implementation `impl`, default the op's first,
    with `config`, default its fallback), and return (compiled output, numpy reference output)."""
    fn, all_arrays, ref = op_function(op, arrays, attrs, chain)
    out, _ = build_and_run(fn, all_arrays, target=target, impl=impl, config=config)
    return out, ref


def _ttype(a):
    from tvmc.graph.ir import TensorType

    return TensorType(tuple(a.shape), a.dtype.name)
