"""Tuning tasks: one per distinct (implementation, workload) among a model's fused kernels.

A task is extracted after the graph passes (AlterOpLayout at opt level 3 decides NCHWc, so the
tasks are the blocked convolutions the compiled model will run) from each fused function's
anchor op (`tvmc.ops.fused.anchor_call`). Identical layers share one task; `calls` counts them.
A task is measured on its anchor op alone (AutoTVM's task = the anchor's workload): the
elementwise epilogue costs the same whatever the config.

FLOPs of one call of a task: 2 x (output elements) x (product of the anchor compute's reduce
axis extents) -- one multiply-add = 2 FLOPs, padding taps counted as real work (as TVM's
`compute_flop`); an anchor without reduce axes counts one FLOP per output element. An op whose
definition has its own `flops` (OpDef.flops) counts by it: Winograd conv2d counts the direct
conv2d's multiply-adds, as TVM does, so its GFLOP/s compare with the direct form's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tvmc.graph.ir import Call, Function, TensorType, Var
from tvmc.ops.fused import anchor_call, function_flops, task_flops, workload  # noqa: F401 (re-exported)
from tvmc.ops.registry import get_op, make_call


@dataclass(frozen=True)
class Task:
    """One tuning task.

    op:        operator name of the anchor (e.g. "nn.conv2d_nchwc")
    impl:      implementation name = the task name (e.g. "conv2d_nchwc.cpu")
    workload:  tvmc.ops.fused.workload of the anchor call (input shapes, output shape, dtype, attrs)
    in_dtypes: dtypes of the anchor's inputs
    flops:     FLOPs of one call (see the module docstring)
    calls:     how many kernel calls of the model run this workload
    """

    op: str
    impl: str
    workload: tuple
    in_dtypes: tuple
    flops: int
    calls: int = 1

    @property
    def key(self) -> tuple:
        return (self.impl, workload_key(self.workload))

    def implementation(self, target):
        return next(i for i in get_op(self.op).implementations(target.family, self.workload, target)
                    if i.name == self.impl)

    def config_space(self, target):
        return self.implementation(target).config_space(self.workload, target)

    def function(self) -> Function:
        """The anchor op alone as a fused Function (parameters x0, x1, ...), named `tvmc_task`."""
        shapes = self.workload[:len(self.in_dtypes)]
        params = [Var(f"x{k}", TensorType(tuple(s), d)) for k, (s, d) in enumerate(zip(shapes, self.in_dtypes))]
        return Function(params, make_call(self.op, params, dict(self.workload[-1])), "tvmc_task")

    def describe(self) -> str:
        """Short text of the workload: input shapes -> output shape, then strides/groups if set."""
        n_in = len(self.in_dtypes)
        shapes = "x".join(_fmt(s) for s in self.workload[:n_in]) + "->" + _fmt(self.workload[n_in])
        attrs = dict(self.workload[-1])
        words = [shapes]
        if "strides" in attrs and max(attrs["strides"]) != 1:
            words.append("stride " + "x".join(map(str, attrs["strides"])))
        if attrs.get("groups", 1) != 1:
            words.append(f"groups {attrs['groups']}")
        return " ".join(words)


def _fmt(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _plain(x):
    """JSON-able form of a workload: tuples and lists become lists, numpy scalars Python numbers."""
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "tolist"):
        return _plain(x.tolist())
    return str(x)


def workload_json(wl) -> list:
    return _plain(wl)


def workload_key(wl) -> str:
    """Canonical text of a workload (tuples and lists alike), the key records match on."""
    return json.dumps(_plain(wl), separators=(",", ":"))


def workload_count(task_keys) -> int:
    """Distinct kernel workloads among task keys ((implementation, workload key) pairs): the
    number `tvmc tune` and `tvmc compile --tuning-records` both report beside their task counts."""
    return len({wl_key for _, wl_key in task_keys})


def tasks_of_functions(functions, target) -> list:
    """Tasks of fused graph Functions: one per distinct (implementation, workload) whose
    implementation has a config space, in first-seen order, `calls` counting repeats."""
    found: dict = {}
    for fn in functions:
        anchor = anchor_call(fn)
        if not isinstance(anchor, Call) or isinstance(anchor.op, Function):
            continue
        opdef = get_op(anchor.op)
        wl = workload(anchor)
        for impl in opdef.implementations(target.family, wl, target):
            if impl.config_space is None:
                continue
            key = (impl.name, workload_key(wl))
            if key in found:
                t = found[key]
                found[key] = Task(t.op, t.impl, t.workload, t.in_dtypes, t.flops, t.calls + 1)
                continue
            in_dtypes = tuple(i.dtype for i in anchor.inputs)
            found[key] = Task(anchor.op, impl.name, wl, in_dtypes, task_flops(anchor.op, wl, in_dtypes))
    return list(found.values())
