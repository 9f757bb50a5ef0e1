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
from tvmc.te.expr import BinOp, Cast, IntImm, Load, Var, substitute, walk
from tvmc.tir.ir import PAIR_ORDER, DotU8S8, MmlaU8S8
from tvmc.tir.simplify import linear_steps, simplify


@dataclass(frozen=True)
class DotU8S8Intrin:
    """Tensorizes `acc[.., n] += int32(a[.., k]) * int32(b[.., n, k])` over an inner spatial
    loop of `lanes` and an inner reduce loop of 4 into tir.DotU8S8 (TVM's
    dot_16x1x16_uint8_int8_int32): along the lane loop the accumulator index steps by 1, the
    data operand's by 0 and the int8 operand's by 4; along the reduce loop by 0, 1 and 1.
    With lanes = 1 (the GPU kernels' step, one int32 += 4 u8 x s8 products: dp4a) there is no
    lane loop: the inner loops are the reduce loop of 4 alone. An int16 data operand (a
    data_pairs stage, tvmc.ops.cpu.int8) holds its quad in pair order: along the reduce loop its
    index takes the offsets (0, 2, 1, 3) instead of stepping by 1.
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
            raise ScheduleError("tensorize dot_u8s8: the update must be int32 += int32(uint8, int8 or int16 load) * "
                                f"int32(int8 load), got {acc.dtype} += {source!r}")
        a, b = loads
        steps = ((1, 0), (0, 1), (4, 1)) if spatial else ((0, 0), (0, 1), (0, 1))
        for what, index, want in zip(("accumulator", "data operand", "int8 operand"), (acc_index, a.index, b.index),
                                     steps):
            if what == "data operand" and a.dtype == "int16":
                _check_pair_order(index, lane, k, ranges)
                continue
            got = linear_steps(simplify(index, ranges), (lane, k))
            if got != want:
                raise ScheduleError(f"tensorize dot_u8s8: the {what}'s index {index!r} steps by {got} along "
                                    f"({lane.name}, {k.name}), not {want}")

        def base(index):
            return simplify(substitute(index, {lane: IntImm(0), k: IntImm(0)}), ranges)

        return DotU8S8(acc, base(acc_index), a.buffer, base(a.index), b.buffer, base(b.index), self.lanes,
                       self.pairs_in_int16)


@dataclass(frozen=True)
class MmlaU8S8Intrin:
    """Tensorizes `acc[.., i, j] += int32(a[.., i, k]) * int32(b[.., j, k])` over inner loops
    (i: spatial 2, j: spatial 2, k: reduce 8) into tir.MmlaU8S8 (a 2 x 8 by 8 x 2 uint8 x int8
    matrix product into a 2 x 2 int32 block, FEAT_I8MM USMMLA): along (i, j, k) the accumulator
    index steps by (2, 1, 0), the uint8 operand's by (any constant s > 0, 0, 1) (its two rows s
    elements apart) and the int8 operand's by (0, 8, 1)."""

    def lower(self, acc, acc_index, source, inner, ranges):
        """The MmlaU8S8 statement computing the update `acc[acc_index] += source` over the loops
        `inner` ([(Var, extent, 'spatial' | 'reduce')], outermost first); `ranges` (Var ->
        extent) bounds every loop variable of the stage. Raises ScheduleError on a mismatch."""
        if [(e, kind) for _, e, kind in inner] != [(2, "spatial"), (2, "spatial"), (8, "reduce")]:
            raise ScheduleError("tensorize mmla_u8s8: the inner loops must be two spatial loops of 2 and one reduce "
                                f"loop of 8, got {[(v.name, e, kind) for v, e, kind in inner]}")
        loads = _u8s8_product(source)
        if loads is None or acc.dtype != "int32" or loads[0].dtype != "uint8":
            raise ScheduleError("tensorize mmla_u8s8: the update must be int32 += int32(uint8 load) * int32(int8 "
                                f"load), got {acc.dtype} += {source!r}")
        a, b = loads
        loop_vars = tuple(v for v, _, _ in inner)
        steps = {}
        for what, index, want in (("accumulator", acc_index, (2, 1, 0)), ("uint8 operand", a.index, None),
                                  ("int8 operand", b.index, (0, 8, 1))):
            got = linear_steps(simplify(index, ranges), loop_vars)
            ok = got is not None and (got == want if want else got[0] > 0 and got[1:] == (0, 1))
            if not ok:
                raise ScheduleError(f"tensorize mmla_u8s8: the {what}'s index {index!r} steps by {got} along "
                                    f"{tuple(v.name for v in loop_vars)}, not {want or '(s > 0, 0, 1)'}")
            steps[what] = got

        def base(index):
            return simplify(substitute(index, {v: IntImm(0) for v in loop_vars}), ranges)

        return MmlaU8S8(acc, base(acc_index), a.buffer, base(a.index), steps["uint8 operand"][0], b.buffer,
                        base(b.index))


def _check_pair_order(index, lane, k, ranges):
    """Raises ScheduleError unless the data index `index` of a DotU8S8 update, at k = 0, 1, 2, 3,
    is its value at k = 0 plus PAIR_ORDER's positions (0, 2, 1, 3), for any lane (it does not
    use the lane variable)."""
    at = [simplify(substitute(index, {lane: IntImm(0), k: IntImm(j)}), ranges) for j in range(4)]
    offsets = [simplify(x - at[0], ranges) for x in at]
    if lane in set(walk(index)) or tuple(getattr(x, "value", None) for x in offsets) != PAIR_ORDER:
        raise ScheduleError(f"tensorize dot_u8s8: the int16 data operand's index {index!r} does not read a quad in "
                            f"pair order along {k.name} (offsets {PAIR_ORDER}, the same for every {lane.name})")


def _u8s8_product(e):
    """(uint8 Load, int8 Load) when `e` is int32(uint8 load) * int32(int8 load) in either order;
    (data, weight) when it is int32(int8 load) * int32(int8 load), the data the left operand (as
    the int8 kernels write it: tvmc.ops.cpu.int8, on targets of int8 data), or int32(int16 load)
    * int32(int8 load) (a data_pairs stage)."""
    if not (isinstance(e, BinOp) and e.op == "mul" and e.dtype == "int32"):
        return None
    ops = []
    for x in (e.a, e.b):
        if not (isinstance(x, Cast) and isinstance(x.value, Load)):
            return None
        ops.append(x.value)
    if [x.dtype for x in ops] == ["int8", "int8"]:
        return ops[0], ops[1]
    by_dtype = {x.dtype: x for x in ops}
    data = by_dtype.get("uint8", by_dtype.get("int16"))
    if len(by_dtype) != 2 or data is None or "int8" not in by_dtype:
        return None
    return data, by_dtype["int8"]
