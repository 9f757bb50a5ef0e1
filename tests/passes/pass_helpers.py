"""Shared helpers for the graph-pass tests: graph builders and interpreter equivalence."""

from __future__ import annotations

import numpy as np

from tvmc.ops.interpreter import run_graph
from tvmc.graph.ir import Call, Constant, Function, Graph, TensorType, Var, print_graph
from tvmc.ops.registry import make_call

RTOL = {"float32": 1e-5}
ATOL = {"float32": 1e-5}


def var(name: str, shape, dtype: str = "float32") -> Var:
    return Var(name, TensorType(tuple(shape), dtype))


def const(shape, name: str, seed: int = 0, low: float = -1.0, high: float = 1.0) -> Constant:
    rng = np.random.default_rng(seed)
    return Constant(rng.uniform(low, high, size=shape).astype("float32"), name)


def call(op: str, *inputs, name: str = "", **attrs) -> Call:
    return make_call(op, list(inputs), attrs, name=name)


def qconst(value, name: str) -> Constant:
    """A Constant of `value` as numpy holds it (a scale, a zero point of its dtype)."""
    return Constant(np.asarray(value), name)


def dequantize(q, scale, zp, name: str):
    """qnn.dequantize(q) to float32 with a constant scale (float32) and zero point (its dtype)."""
    return call("qnn.dequantize", q, qconst(np.float32(scale), f"{name}_s"), qconst(zp, f"{name}_z"),
                out_dtype="float32")


def quantize(x, scale, zp, name: str, dtype: str = "uint8"):
    """qnn.quantize(x) to `dtype` with a constant scale (float32) and zero point."""
    return call("qnn.quantize", x, qconst(np.float32(scale), f"{name}_s"), qconst(zp, f"{name}_z"), out_dtype=dtype)


def conv(x, oc: int, name: str, k: int = 3, pad: int = 1, stride: int = 1, seed: int = 0) -> Call:
    w = const((oc, x.shape[1], k, k), f"{name}_w", seed)
    return call("nn.conv2d", x, w, name=name, strides=(stride, stride), padding=(pad, pad, pad, pad),
                dilation=(1, 1), groups=1)


def batch_norm(x, name: str, seed: int = 0, axis: int = 1) -> Call:
    c = x.shape[axis]
    return call("nn.batch_norm", x, const((c,), f"{name}_gamma", seed, 0.5, 1.5),
                const((c,), f"{name}_beta", seed + 1), const((c,), f"{name}_mean", seed + 2),
                const((c,), f"{name}_var", seed + 3, 0.5, 2.0), name=name, epsilon=1e-5, axis=axis)


def random_inputs(graph: Graph, seed: int = 0, edge_values: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        value = rng.uniform(-2, 2, size=v.shape)
        # edge values the references must keep: -0.0 and a large magnitude
        flat = value.reshape(-1)
        if edge_values and flat.size > 2:
            flat[0], flat[1] = -0.0, 1e4
        out[v.name] = value.astype(v.dtype)
    return out


def assert_equivalent(before: Graph, after: Graph, seed: int = 0, edge_values: bool = True):
    """The interpreter gives the same outputs for both graphs (per-dtype tolerance)."""
    inputs = random_inputs(before, seed, edge_values)
    ref, got = run_graph(before, inputs), run_graph(after, inputs)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape and r.dtype == g.dtype
        scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
        np.testing.assert_allclose(g, r, rtol=RTOL[r.dtype.name], atol=ATOL[r.dtype.name] * scale)


def assert_same_graph(got: Graph, expected: Graph):
    """Structural equality: the same printed text (ops, attrs, types, wiring, constant names) and
    equal constant values, in topological order."""
    assert print_graph(got) == print_graph(expected)
    got_c = [e for e in got.topo() if isinstance(e, Constant)]
    exp_c = [e for e in expected.topo() if isinstance(e, Constant)]
    assert len(got_c) == len(exp_c)
    for g, e in zip(got_c, exp_c):
        assert g.type == e.type, (g, e)
        np.testing.assert_allclose(g.value, e.value, rtol=1e-6, atol=0, err_msg=g.name)


def op_names(graph: Graph) -> list:
    """Top-level op names in topological order (fused calls give their function name)."""
    return [c.op_name for c in graph.calls()]


def fused_calls(graph: Graph) -> list:
    return [c for c in graph.calls() if isinstance(c.op, Function)]


def body_ops(func: Function) -> list:
    return [c.op for c in Graph(func.params, [func.body]).calls()]


def snapshot(graph: Graph) -> str:
    """Text plus node identities, to check a pass did not mutate its input."""
    return print_graph(graph) + repr([(id(e), getattr(e, "inputs", ())) for e in graph.topo()])


def check_plan(graph):
    """Check a plan against liveness computed here; returns {sid: [exprs]}. A tensor and the
    output of the call that uses it last may share a storage only where PlanMemory recorded that
    call as in place (meta["inplace"]: {call: input}); tensors of one storage at disjoint byte
    ranges (meta["storage_offset"]) may live together, and a concatenation that runs no kernel
    or a reshape (meta["view_calls"]) shares its storage with its inputs, each at its own offset."""
    sid = graph.meta["storage_id"]
    nbytes = graph.meta["storage_bytes"]
    offset = graph.meta.get("storage_offset", {})
    order = graph.topo()
    assert set(order) | set(graph.inputs) == set(sid)
    assert sorted(set(sid.values())) == list(range(len(nbytes)))
    for e, s in sid.items():
        assert nbytes[s] % 64 == 0 and nbytes[s] >= offset.get(e, 0) + e.type.nbytes
    group = {}  # union of each view concatenation with its inputs
    for c in graph.meta.get("view_calls", ()):
        members = [c, *c.inputs]
        merged = set().union(*(group.get(m, {m}) for m in members))
        for m in merged:
            group[m] = merged
        at = offset.get(c, 0)
        for m in c.inputs:  # each input at its place inside the concatenation
            assert sid[m] == sid[c] and offset.get(m, 0) == at
            at += m.type.nbytes
    # live interval of a Call output: [its step, step of its last user]; inputs, constants and
    # outputs live for the whole run
    step = {e: k for k, e in enumerate(order)}
    last = dict(step)
    for e in order:
        if isinstance(e, Call):
            for i in e.inputs:
                last[i] = max(last[i], step[e])
    forever = set(graph.inputs) | set(graph.outputs) | {e for e in order if not isinstance(e, Call)}
    end = len(order)
    span = {e: ((-1, end) if e in forever else (step[e], last[e])) for e in sid}
    inplace = graph.meta.get("inplace", {})
    for out, src in inplace.items():
        assert sid[out] == sid[src] and last[src] == step[out] and src in out.inputs
        assert out.type == src.type and out not in forever and src not in forever
    by_sid = {}
    for e, s in sid.items():
        by_sid.setdefault(s, []).append(e)
    for s, es in by_sid.items():
        if any(e in forever for e in es):
            assert len(es) == 1 or all(e in group.get(es[0], ()) for e in es), \
                f"storage {s} of an input/param/output is shared: {es}"
        assert len({e.dtype for e in es}) == 1
        for a in es:
            for b in es:
                if a is not b:
                    (a0, a1), (b0, b1) = span[a], span[b]
                    if inplace.get(b) is a or inplace.get(a) is b or b in group.get(a, ()):
                        continue
                    ra, rb = offset.get(a, 0), offset.get(b, 0)
                    if ra + a.type.nbytes <= rb or rb + b.type.nbytes <= ra:
                        continue  # disjoint bytes
                    assert a1 < b0 or b1 < a0, f"storage {s}: {a} and {b} both live"
    return by_sid
