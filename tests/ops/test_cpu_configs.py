"""CPU schedules (tvmc/ops/cpu) on every CPU target that runs here (tests/targets.py: this host,
wasm32): each implementation with its fallback config and two other configs of its space (all of
them when the space is smaller), compiled for the target and run on its runtime against numpy.
Tuning may pick any config, and a schedule's fallback heuristic reads the target's descriptor
(lanes, registers), so every target checks its own."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_ops import Case, _assert_close, _packed_weight, _winograd_weight, bias_relu, conv, n, pool, qi, zp
from util import op_function, run_op

from tests.targets import TARGETS, require
from tvmc.autotune.task import tasks_of_functions
from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_row_weight, pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
from tvmc.ops.cpu.int8_mmla import pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight
from tvmc.ops.registry import all_ops

# one case per CPU implementation (the implementation name is the id)
CPU_CASES = [
    Case("injective.cpu", "add", lambda r: [n(r, (2, 6, 5, 19)), n(r, (6, 1, 1))]),
    Case("conv2d_nchw.cpu", "nn.conv2d", lambda r: [n(r, (1, 8, 15, 15)), n(r, (16, 8, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), bias_relu(16)),
    Case("conv2d_nchwc.cpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 2, 9, 14, 4)), n(r, (2, 2, 3, 3, 4, 8))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW8c")),
    # grouped: 3 groups of 4 input channels (block 2) and 8 output channels (2 blocks of 4 each)
    Case("group_conv2d_nchwc.cpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 6, 7, 9, 2)), n(r, (6, 2, 3, 3, 2, 4))],
         dict(conv(strides=(2, 2), padding=(0, 1, 1, 0), groups=3), out_layout="NCHW4c")),
    Case("conv2d_nchwc_im2col.cpu", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 2, 7, 10, 4)), n(r, (2, 2, 1, 1, 4, 8))], dict(conv(), out_layout="NCHW8c")),
    Case("dense.cpu", "nn.dense", lambda r: [n(r, (3, 70)), n(r, (50, 70))], {},
         lambda r: [("add", {}, [n(r, (50,))]), ("nn.relu", {}, [])]),
    Case("matmul.cpu", "nn.matmul", lambda r: [n(r, (2, 13, 20)), n(r, (20, 45))]),
    Case("matmul_tn.cpu", "nn.matmul_tn", lambda r: [n(r, (2, 11, 21)), n(r, (2, 11, 50))],
         {"rows": 19, "columns": 48, "padded_rows": 20}),
    Case("dense_pack.cpu", "nn.dense_pack", lambda r: [n(r, (3, 50)), n(r, (5, 50, 8))]),
    Case("softmax.cpu", "nn.softmax", lambda r: [n(r, (3, 7, 45), 3.0)], dict(axis=2)),
    Case("log_softmax.cpu", "nn.log_softmax", lambda r: [n(r, (3, 37, 5), 3.0)], dict(axis=1)),
    Case("lrn.cpu", "nn.lrn", lambda r: [n(r, (1, 10, 6, 7), 3.0)], dict(size=5, alpha=1e-2, beta=0.75, bias=1.0)),
    Case("pool.cpu", "nn.max_pool2d", lambda r: [n(r, (1, 5, 14, 14))], pool((3, 3), (2, 2), (1, 1, 1, 1), ceil=1)),
    Case("reduce.cpu", "mean", lambda r: [n(r, (2, 3, 7, 9))], dict(axis=(2, 3), keepdims=1)),
    Case("conv2d_transpose_nchw.cpu", "nn.conv2d_transpose", lambda r: [n(r, (1, 6, 5, 7)), n(r, (6, 4, 3, 3))],
         dict(strides=(2, 2), padding=(1, 0, 1, 2), dilation=(1, 1), output_padding=(1, 1), groups=1)),
    Case("topk.cpu", "topk_indices", lambda r: [np.round(n(r, (3, 9)))], dict(axis=1, k=4, largest=1)),
    Case("window_reduce.cpu", "nn.col2im", lambda r: [n(r, (2, 18, 9))],
         dict(image_shape=(7, 8), block_shape=(3, 2), strides=(2, 3), dilation=(2, 1), padding=(1, 0, 2, 2))),
    Case("conv2d_winograd_nchwc.cpu", "nn.conv2d_winograd_nchwc",
         lambda r: [n(r, (1, 2, 7, 6, 4)), _winograd_weight(r, (8, 8, 3, 3), 2, 4, 4)],
         dict(padding=(1, 1, 1, 1), tile_size=2, out_layout="NCHW4c")),
    Case("winograd_weight_transform.cpu", "nn.winograd_weight_transform",
         lambda r: [_packed_weight(r, (12, 8, 3, 3), 4, 4)], dict(tile_size=4)),
    Case("qnn_dense.cpu", "qnn.dense",
         lambda r: [qi(r, (5, 13), "uint8"), qi(r, (12, 13)), zp(3), zp(np.arange(12) - 6)]),
    Case("qnn_matmul.cpu", "qnn.matmul", lambda r: [qi(r, (2, 5, 7), "uint8"), qi(r, (7, 33)), zp(100), zp(2)]),
    Case("qnn_conv2d_nchw.cpu", "qnn.conv2d",
         lambda r: [qi(r, (1, 5, 9, 11), "uint8"), qi(r, (6, 5, 3, 3)), zp(131), zp(0)], conv(padding=(1, 1, 1, 1))),
    Case("dense_u8s8.cpu", "qnn.dense_u8s8",
         lambda r: [qi(r, (5, 30), "uint8"), pack_dense_u8s8_weight(qi(r, (37, 30)))], {"units": 37}),
    # int8 (issue 28): the u8 x s8 product of a blocked conv2d; 4 output channel blocks, OW 9 (tiles
    # of 1, 3, 9 columns and 1, 2, 4 blocks), an input block of 8 (two quads) padded with 200
    Case("conv2d_nchwc_u8s8.cpu", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (1, 2, 6, 9, 8), "uint8"), pack_conv2d_u8s8_weight(qi(r, (64, 16, 3, 3)), 8)],
         dict(conv(padding=(1, 1, 1, 1)), pad_value=200, out_layout="NCHW16c")),
    # the same product on the int8 matrix multiply-accumulate: 2 output channel blocks, OW 11 (6
    # pixel pairs: tiles of 1, 2, 3 pairs, the last pair half stored), input blocks of 16
    # dense in row pairs: M 12 (tiles of 1, 2, 3 pairs), K 40, N 48
    Case("dense_u8s8_mmla.cpu", "qnn.dense_u8s8_mmla",
         lambda r: [qi(r, (12, 40), "uint8"), pack_dense_u8s8_mmla_weight(qi(r, (48, 40)))], {"units": 48}),
    Case("conv2d_nchwc_u8s8_mmla.cpu", "qnn.conv2d_nchwc_u8s8_mmla",
         lambda r: [qi(r, (1, 2, 5, 11, 16), "uint8"), pack_conv2d_u8s8_mmla_weight(qi(r, (32, 32, 3, 3)), 16)],
         dict(conv(padding=(1, 1, 1, 1)), pad_value=200, out_layout="NCHW16c")),
    # an image stem's u8 x s8 product on planar rows (qnn_conv2d_rows): 2 output channel blocks,
    # OW 10 (tiles of 1, 2, 5, 10 columns), 3x5 taps (two quads per row, the second padded)
    Case("conv2d_nchw_u8s8.cpu", "qnn.conv2d_nchw_u8s8",
         lambda r: [qi(r, (1, 3, 7, 20), "uint8"), pack_conv2d_u8s8_row_weight(qi(r, (32, 3, 3, 5)))],
         {"strides": (1, 1), "out_width": 10, "out_layout": "NCHW16c"}),
    # issue 18, group B (misc ops)
    Case("det.cpu", "det", lambda r: [n(r, (3, 2, 5, 5))]),
    # issue 18 point 5: the data-dependent selections (NonZero, Compress, Unique, TopK, NMS)
    Case("selection.cpu", "nonzero", lambda r: [r.integers(-1, 2, (3, 5)).astype(np.float32)]),
]
BY_IMPL = {c.id: c for c in CPU_CASES}
CPU_TARGETS = [t.name for t in TARGETS if t.name != "opencl"]


def test_every_cpu_implementation_has_a_case():
    assert {impl.name for op in all_ops().values() for impl in op.strategy.get("cpu", [])} == set(BY_IMPL)


def _configs(case, target, count=2):
    """The fallback config of the case's implementation on `target` and `count` others of its
    space (seeded choice; fewer when the space is smaller); ([None], 1) for an implementation
    without knobs (no tuning task: its one schedule)."""
    arrays, chain = case.build()
    fn, _, _ = op_function(case.op, arrays, case.attrs, chain)
    task = next((t for t in tasks_of_functions([fn], target) if t.impl == case.id), None)
    if task is None:
        assert all_ops()[case.op].implementations("cpu")[0].name == case.id
        return [None], 1
    space = task.config_space(target)
    fallback = space.fallback_config()
    indices = list(range(len(space)))
    random.Random(case.id).shuffle(indices)
    others = [space.get(i) for i in indices if dict(space.get(i)) != dict(fallback)][:count]
    return [fallback] + others, len(space)


@pytest.mark.parametrize("target_name", CPU_TARGETS)
@pytest.mark.parametrize("impl", sorted(BY_IMPL))
def test_cpu_schedule_fallback_and_two_other_configs(impl, target_name):
    target = require(target_name)
    case = BY_IMPL[impl]
    configs, space_size = _configs(case, target.target)
    assert len(configs) == min(3, space_size)
    arrays, chain = case.build()
    for cfg in configs:
        out, ref = run_op(case.op, arrays, case.attrs, chain, impl=impl if cfg is not None else None,
                          target=target.target, config=cfg)
        try:
            _assert_close(out, ref, case.tol)
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg)}: {e}") from None
