"""Operator registry: one `OpDef` per operator name (type rule, fusion pattern, math, strategies).

An operator's math is written once, as a tensor-expression `compute` in `tvmc/ops/<op>.py`;
the same file gives its type rule, its numpy reference (used by FoldConstant at compile time
and by the test-only graph interpreter; never to run a compiled model) and its strategy: the
implementations per target family (`cpu`, `gpu`), each with a schedule and config space.

Pattern kinds follow TVM's `OpPatternKind` (relay/op/op_attr_types.h) and drive FuseOps.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from tvmc.errors import ModelError, ScheduleError


class OpPattern(enum.IntEnum):
    """Fusion pattern of an operator (TVM values)."""

    ELEMWISE = 0            # out[i] = f(in[i])
    BROADCAST = 1           # elementwise with numpy broadcasting
    INJECTIVE = 2           # each output element reads one input element (reshape, transpose, concat)
    COMM_REDUCE = 3         # commutative reduction (softmax, pooling-like reductions)
    OUT_ELEMWISE_FUSABLE = 4  # anchor whose output can take an elementwise epilogue (conv2d, dense)
    OPAQUE = 8              # never fused


@dataclass(frozen=True)
class Implementation:
    """One way to compute and schedule an op on a target family.

    name:         unique, also the tuning task name (e.g. "conv2d_nchw.cpu").
    compute:      (inputs: list[te.Tensor], attrs: dict, out_type: TensorType) -> te.Tensor;
                  None means the OpDef's compute.
    schedule:     (sch: te.Schedule, out: te.Tensor, anchor: te.Tensor, cfg: ConfigEntity,
                  target: Target) -> None. `out` is the fused function's output, `anchor` the
                  tensor this op computes.
    config_space: (workload: tuple, target: Target) -> autotune.ConfigSpace, or None when the
                  schedule has no knobs.
    applies:      (workload: tuple) -> bool, the workloads this implementation can compute
                  (TVM's specialized strategy conditions, e.g. groups == 1); None: every one.
    template:     (ctx: tvmc.ops.fused.TemplateContext, cfg, target) -> PrimFunc: a kernel written
                  in loop IR instead of a schedule (`schedule` is then None; e.g. the tensor-core
                  GEMMs of tvmc/ops/gpu/tensorcore.py, whose steps are warp-level instructions).
    supports:     (target: Target, workload: tuple | None) -> bool, the targets (and, with a
                  workload, the target and workload pairs) it can run on beyond the family: a
                  descriptor fact, e.g. tensor cores for the workload's dtype; None: every target
                  of the family.
    """

    name: str
    schedule: Callable | None
    compute: Callable | None = None
    config_space: Callable | None = None
    applies: Callable | None = None
    template: Callable | None = None
    supports: Callable | None = None


@dataclass(frozen=True)
class OpDef:
    """Definition of one operator.

    infer_type(in_types: list[TensorType], attrs: dict) -> TensorType; raises ValueError
               with a short reason on invalid inputs (make_call adds the node name).
    reference(*arrays, **attrs) -> np.ndarray: numpy semantics, for constant folding and tests.
    compute(inputs: list[te.Tensor], attrs: dict, out_type: TensorType) -> te.Tensor.
    strategy:  {"cpu": [Implementation, ...], "gpu": [...]}: first entry is the default.
    flops(workload) -> int, optional: FLOPs of one call where the compute's reduce axes would
               not count them as the field does (tvmc.autotune.task's module docstring).
    """

    name: str
    infer_type: Callable
    reference: Callable
    pattern: OpPattern
    compute: Callable | None = None
    strategy: dict = field(default_factory=dict)
    flops: Callable | None = None

    def type_of(self, in_types: list, attrs: dict, node_name: str = ""):
        """Output TensorType; a ValueError from the rule becomes ModelError naming the node."""
        try:
            return self.infer_type(in_types, attrs)
        except (ValueError, IndexError, OverflowError) as e:
            raise ModelError(f"node '{node_name or '?'}' ({self.name}): {e}") from None

    def implementations(self, family: str, workload: tuple | None = None, target=None) -> list:
        """Implementations for target `family`, the default first; with `workload`
        (tvmc.ops.fused.workload of a call), only those that apply to it; with `target`, only
        those that support it. Raises ScheduleError when none is left."""
        impls = self.strategy.get(family)
        if impls and workload is not None:
            impls = [i for i in impls if i.applies is None or i.applies(workload)]
        if impls and target is not None:
            impls = [i for i in impls if i.supports is None or i.supports(target, workload)]
        if not impls:
            raise ScheduleError(f"operator {self.name} has no implementation for target family '{family}'")
        return impls


_REGISTRY: dict = {}


def register_op(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name} registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    """Look up an operator by name; raises ModelError listing the known names."""
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ModelError(f"unknown operator '{name}'; known: {', '.join(sorted(_REGISTRY))}") from None


def all_ops() -> dict:
    _load_all()
    return dict(_REGISTRY)


_loaded = False


def _load_all():
    global _loaded
    if not _loaded:
        _loaded = True
        import tvmc.ops  # noqa: F401  (registers every op module)

