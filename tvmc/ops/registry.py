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
from tvmc.graph import symbolic
from tvmc.graph.ir import Call, Function, TensorType, fmt_dims
from tvmc.te.expr import is_float


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
    foldable:  False for an op that expands compact constant storage at run time (4-bit weights
               unpacked by qnn.dequantize_blockwise): FoldConstant and import-time folding leave
               its calls on constants to run time, so the compact constant is what mod.params holds.
    load_time: True for an op whose inputs are params and whose result the executors compute once,
               when they load the artifact (its kernel is in mod.json's load-time nodes, run by the
               graph entry tvmc_graph_init; Winograd weight transforms): not folded at compile time
               either (foldable is then False), so mod.params holds its compact inputs. FuseOps
               keeps such a call alone in its function (OPAQUE) and PlanMemory gives its output
               a storage of its own, never reused (load_time_call).
    """

    name: str
    infer_type: Callable
    reference: Callable
    pattern: OpPattern
    compute: Callable | None = None
    strategy: dict = field(default_factory=dict)
    flops: Callable | None = None
    foldable: bool = True
    load_time: bool = False

    def __post_init__(self):
        if self.load_time and (self.foldable or self.pattern != OpPattern.OPAQUE):
            raise ValueError(f"op {self.name}: a load-time op is OPAQUE and not foldable")

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
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ModelError(f"unknown operator '{name}'; known: {', '.join(sorted(_REGISTRY))}") from None


def all_ops() -> dict:
    """{name: OpDef} of every operator (all registered: importing this module runs its package,
    tvmc/ops/__init__.py, which imports every op module first)."""
    return dict(_REGISTRY)


def load_time_call(e) -> bool:
    """Whether graph node `e` is computed once at load time: a call of a load_time op (OpDef), or a
    call of a fused Function that FuseOps made of one (Function.load_time)."""
    if not isinstance(e, Call):
        return False
    if isinstance(e.op, Function):
        return e.op.load_time
    return e.op in _REGISTRY and _REGISTRY[e.op].load_time


# --- calls of registered operators (the graph IR's nodes, typed by the ops' rules) ------------------

def make_call(op: str, inputs, attrs=None, name: str = "") -> Call:
    """Build a `Call` of a registered operator, inferring its output type.

    Raises tvmc.errors.ModelError (naming `name`) when the op rejects the input types, when its
    output type is not a valid TensorType (a negative dimension, more than MAX_TENSOR_BYTES),
    or when an input holds no element (a dimension of 0, or a symbolic one not provably >= 1)
    and the op is not elementwise, broadcast, injective or a commutative reduction
    (convolutions, pooling, dense, LRN, softmax, ... cannot take an empty tensor).
    """
    # patterns whose kernels compute each output element without a window, a division by an
    # extent or a schedule split over it: they take tensors with a dimension of 0
    empty_ok = (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE, OpPattern.COMM_REDUCE)
    attrs = dict(attrs or {})
    opdef = get_op(op)
    type_ = opdef.type_of([i.type for i in inputs], attrs, name)
    if any(i.type.is_dynamic for i in inputs):
        type_ = _forwarded_dynamic_type(op, opdef.pattern, inputs, attrs, type_, name)
    if opdef.pattern not in empty_ok:
        for k, i in enumerate(inputs):
            if 0 in i.shape:
                raise ModelError(f"node '{name or '?'}' ({op}): input {k} has shape {fmt_dims(i.shape)}, with a "
                                 f"dimension of 0; {op} cannot take an empty tensor")
            maybe_empty = [d for d in i.shape if symbolic.is_symbolic(d) and not symbolic.can_prove(d >= 1)]
            if maybe_empty:
                raise ModelError(f"node '{name or '?'}' ({op}): input {k} has shape {fmt_dims(i.shape)}, whose "
                                 f"dimension {maybe_empty[0]} may be 0 ({symbolic.describe_vars(maybe_empty)}); "
                                 f"{op} cannot take an empty tensor")
    return Call(op, inputs, attrs, type_, name)


# Integer ops that fault on a zero divisor: the zero padding of a run-time-shaped divisor would
# trap, so they take one only as the dividend.
_ZERO_DIVISOR_FAULTS = ("divide", "trunc_mod", "floor_mod")
# Reductions and scans along `axis` (a tuple of axes, or one axis) that may read a run-time-shaped
# tensor along its other axes.
_AXIS_REDUCTIONS = ("sum", "max", "min", "prod", "mean")
_AXIS_SCANS = ("cumsum", "cumprod")


def _forwarded_dynamic_type(op: str, pattern, inputs, attrs: dict, type_: TensorType, name: str) -> TensorType:
    """The type of a call reading tensors with a run-time shape (docs/dynamic_shapes.md): an
    elementwise op, or a broadcast whose other operands have extent 1 along the dynamic axes,
    runs over the bound and its result has the same run-time shape; so does a reduction or scan
    along other axes (its dynamic axes renumbered when reduced axes are dropped); any other op
    would read the padding, and is refused. Raises ModelError naming the node."""
    dyn = [(k, i) for k, i in enumerate(inputs) if i.type.is_dynamic]
    k0, first = dyn[0]
    rank = len(type_.shape)
    axes = tuple(a + rank - len(first.shape) for a in first.type.dynamic_axes)

    def refuse(why):
        return ModelError(f"node '{name or '?'}' ({op}): input {k0} has a run-time shape (axes "
                          f"{list(first.type.dynamic_axes)} of the bound {fmt_dims(first.shape)}); {why}")

    if op in _AXIS_REDUCTIONS + _AXIS_SCANS and len(inputs) == 1:
        reduced = set(attrs["axis"]) if isinstance(attrs["axis"], (tuple, list)) else {attrs["axis"]}
        if reduced & set(first.type.dynamic_axes):
            raise refuse(f"{op} along a dynamic axis would read its padding")
        if op in _AXIS_REDUCTIONS and not attrs.get("keepdims", 1):
            axes = tuple(a - sum(r < a for r in reduced) for a in first.type.dynamic_axes)
        return TensorType(type_.shape, type_.dtype, axes)
    if pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
        raise refuse(f"{op} would read its padding; only elementwise ops, casts and broadcasts with "
                     f"a scalar or constant operand run over such a tensor")
    if len(dyn) > 1:
        raise refuse("two operands with run-time shapes cannot be matched at compile time")
    if tuple(first.shape) != tuple(type_.shape[rank - len(first.shape):]) or len(first.shape) < rank and any(
            type_.shape[a] != 1 for a in range(rank - len(first.shape))):
        raise refuse("a broadcast may not grow it")
    for k, i in enumerate(inputs):
        lead = rank - len(i.shape)
        if k != k0 and any(a >= lead and i.shape[a - lead] != 1 for a in axes):
            raise refuse(f"input {k} is not of extent 1 along those axes")
    if op in _ZERO_DIVISOR_FAULTS and k0 != 0 and not is_float(type_.dtype):
        raise refuse("its zero padding would be an integer divisor")
    return TensorType(type_.shape, type_.dtype, axes)
