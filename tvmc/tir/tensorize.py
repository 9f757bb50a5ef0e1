"""Tensorization: the innermost loops of a reduction replaced by one loop-IR intrinsic statement
(TVM's te.Stage.tensorize with a TensorIntrin, reduced to matching the lowered update statement).

A schedule marks a leaf loop of a stage (`Stage.tensorize(iv, intrin)`); lowering hands the
stage's update (accumulator buffer and index, the summed expression) and the loops from that leaf
inward to `intrin.lower`, which checks that they compute what the intrinsic computes (operand
dtypes, loop extents, the stride of every index along every inner loop) and returns the
statement, or raises ScheduleError saying what does not match.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvmc.errors import ScheduleError
from tvmc.te.expr import BinOp, Cast, IntImm, Load, Var, substitute
from tvmc.tir.ir import DotU8S8
from tvmc.tir.simplify import linear_steps, simplify


@dataclass(frozen=True)
class DotU8S8Intrin:
    """Tensorizes `acc[.., n] += int32(a[.., k]) * int32(b[.., n, k])` over an inner spatial
    loop of `lanes` and an inner reduce loop of 4 into tir.DotU8S8 (TVM's
    dot_16x1x16_uint8_int8_int32): along the lane loop the accumulator index steps by 1, the
    uint8 operand's by 0 and the int8 operand's by 4; along the reduce loop by 0, 1 and 1.
    With lanes = 1 (the GPU kernels' step, one int32 += 4 u8 x s8 products: dp4a) there is no
    lane loop: the inner loops are the reduce loop of 4 alone.
    `pairs_in_int16`: passed to DotU8S8 (the weights' pairs cannot saturate vpmaddubsw)."""

    lanes: int = 16
    pairs_in_int16: bool = False

    def lower(self, acc, acc_index, source, inner, ranges):
        """The DotU8S8 statement computing the update `acc[acc_index] += source` over the loops
        `inner` ([(Var, extent, 'spatial' | 'reduce')], outermost first); `ranges` (Var ->
        extent) bounds every loop variable of the stage. Raises ScheduleError on a mismatch."""
        spatial = [(v, e) for v, e, kind in inner if kind == "spatial"]
        reduce = [(v, e) for v, e, kind in inner if kind == "reduce"]
        want = [] if self.lanes == 1 else [self.lanes]
        if [e for _, e in spatial] != want or [e for _, e in reduce] != [4]:
            lanes = "" if self.lanes == 1 else f"one spatial loop of {self.lanes} and "
            raise ScheduleError(f"tensorize dot_u8s8: the inner loops must be {lanes}one reduce loop of 4, got "
                                f"{[(v.name, e) for v, e, _ in inner]}")
        # lanes = 1: a stand-in lane variable, absent from every index (its steps are all 0)
        lane, k = (spatial[0][0] if spatial else Var("lane")), reduce[0][0]
        loads = _u8s8_product(source)
        if loads is None or acc.dtype != "int32":
            raise ScheduleError("tensorize dot_u8s8: the update must be int32 += int32(uint8 load) * int32(int8 load), "
                                f"got {acc.dtype} += {source!r}")
        a, b = loads
        steps = ((1, 0), (0, 1), (4, 1)) if spatial else ((0, 0), (0, 1), (0, 1))
        for what, index, want in zip(("accumulator", "uint8 operand", "int8 operand"), (acc_index, a.index, b.index),
                                     steps):
            got = linear_steps(simplify(index, ranges), (lane, k))
            if got != want:
                raise ScheduleError(f"tensorize dot_u8s8: the {what}'s index {index!r} steps by {got} along "
                                    f"({lane.name}, {k.name}), not {want}")

        def base(index):
            return simplify(substitute(index, {lane: IntImm(0), k: IntImm(0)}), ranges)

        return DotU8S8(acc, base(acc_index), a.buffer, base(a.index), b.buffer, base(b.index), self.lanes,
                       self.pairs_in_int16)


def _u8s8_product(e):
    """(uint8 Load, int8 Load) when `e` is int32(uint8 load) * int32(int8 load) in either order."""
    if not (isinstance(e, BinOp) and e.op == "mul" and e.dtype == "int32"):
        return None
    ops = []
    for x in (e.a, e.b):
        if not (isinstance(x, Cast) and isinstance(x.value, Load)):
            return None
        ops.append(x.value)
    by_dtype = {x.dtype: x for x in ops}
    if set(by_dtype) != {"uint8", "int8"}:
        return None
    return by_dtype["uint8"], by_dtype["int8"]
