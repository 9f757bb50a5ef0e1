"""CPU schedules: every implementation with its fallback config and two other configs of its
space on every CPU target that runs here (this host; ARM under qemu-user), and the schedule
decisions that the numeric op tests do not see: which loops run in parallel, and which stages
stay materialized."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_ops import Case, _assert_close, _packed_weight, _winograd_weight, bias_relu, conv, n, pool, qi, zp
from util import build_and_run, op_function, run_op

from tests.targets import TARGETS, require
from tvmc.autotune.task import tasks_of_functions
from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_row_weight, pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
from tvmc.ops.cpu.int8_mmla import pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight
from tvmc.graph.ir import Function, TensorType, Var
from tvmc.ops.cpu.tiling import MIN_PARALLEL_MACS
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import all_ops, make_call
from tvmc.target import resolve_target

# one case per CPU implementation (the implementation name is the id); shapes whose spaces hold
# partial tiles and odd extents
CPU_CASES = [
    Case("injective.cpu", "add", lambda r: [n(r, (2, 6, 5, 19)), n(r, (6, 1, 1))]),
    Case("reduce.cpu", "mean", lambda r: [n(r, (2, 3, 7, 9))], dict(axis=(2, 3), keepdims=1)),
    Case("topk.cpu", "topk_indices", lambda r: [np.round(n(r, (3, 9)))], dict(axis=1, k=4, largest=1)),
    Case("pool.cpu", "nn.max_pool2d", lambda r: [n(r, (1, 5, 14, 14))], pool((3, 3), (2, 2), (1, 1, 1, 1), ceil=1)),
    Case("softmax.cpu", "nn.softmax", lambda r: [n(r, (3, 7, 45), 3.0)], dict(axis=2)),
    Case("log_softmax.cpu", "nn.log_softmax", lambda r: [n(r, (3, 37, 5), 3.0)], dict(axis=1)),
    Case("lrn.cpu", "nn.lrn", lambda r: [n(r, (1, 10, 6, 7), 3.0)], dict(size=5, alpha=1e-2, beta=0.75, bias=1.0)),
    Case("dense.cpu", "nn.dense", lambda r: [n(r, (5, 48)), n(r, (30, 48))], {},
         lambda r: [("add", {}, [n(r, (30,))]), ("nn.relu", {}, [])]),
    Case("dense_pack.cpu", "nn.dense_pack", lambda r: [n(r, (6, 20)), n(r, (6, 20, 4))]),
    Case("matmul.cpu", "nn.matmul", lambda r: [n(r, (2, 12, 20)), n(r, (20, 30))]),
    # issue 30 point 2: a^T [3, K, Ma = 32] (rows past 30 zero) x b [1, 3, K, 37]: register tiles
    # over 32 columns, a tail of 5 GEMVs along M; 30 rows in tiles of a padded 32; bias and relu
    Case("matmul_tn.cpu", "nn.matmul_tn", lambda r: [np.pad(n(r, (3, 13, 30)), ((0, 0), (0, 0), (0, 2))),
                                                     n(r, (1, 3, 13, 37))],
         {"rows": 30, "columns": 32, "padded_rows": 32},
         lambda r: [("add", {}, [n(r, (30, 1))]), ("nn.relu", {}, [])]),
    Case("conv2d_nchw.cpu", "nn.conv2d", lambda r: [n(r, (1, 5, 11, 13)), n(r, (12, 5, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)), bias_relu(12)),
    Case("conv2d_transpose_nchw.cpu", "nn.conv2d_transpose", lambda r: [n(r, (1, 6, 5, 7)), n(r, (6, 4, 3, 3))],
         dict(strides=(2, 2), padding=(1, 0, 1, 2), dilation=(1, 1), output_padding=(1, 1), groups=1)),
    Case("conv2d_nchwc.cpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 2, 7, 30, 4)), n(r, (3, 2, 3, 3, 4, 4))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW4c"),
         lambda r: [("add", {}, [n(r, (3, 1, 1, 4))]), ("nn.relu", {}, [])]),
    # grouped, 2 groups of 8 input and 8 output channels: 2 output blocks per group (tile_oc 1, 2)
    Case("group_conv2d_nchwc.cpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 4, 5, 10, 4)), n(r, (4, 2, 3, 3, 4, 4))],
         dict(conv(padding=(1, 1, 1, 1), groups=2), out_layout="NCHW4c"),
         lambda r: [("add", {}, [n(r, (4, 1, 1, 4))]), ("nn.relu", {}, [])]),
    Case("conv2d_nchwc_im2col.cpu", "nn.conv2d_nchwc", lambda r: [n(r, (1, 2, 9, 9, 4)), n(r, (2, 2, 3, 3, 4, 8))],
         dict(conv(strides=(2, 2), padding=(1, 1, 1, 1)), out_layout="NCHW8c")),
    Case("window_reduce.cpu", "nn.col2im", lambda r: [n(r, (2, 18, 9))],
         dict(image_shape=(7, 8), block_shape=(3, 2), strides=(2, 3), dilation=(2, 1), padding=(1, 0, 2, 2))),
    Case("conv2d_winograd_nchwc.cpu", "nn.conv2d_winograd_nchwc",
         lambda r: [n(r, (1, 2, 5, 9, 4)), _winograd_weight(r, (12, 8, 3, 3), 2, 4, 4)],
         dict(padding=(1, 1, 1, 1), tile_size=2, out_layout="NCHW4c"),
         lambda r: [("add", {}, [n(r, (3, 1, 1, 4))]), ("nn.relu", {}, [])]),
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
    # an image stem on the u8s8 row kernel: 3 channels, 7x7 taps (two quads per row), stride 2,
    # OW 6 (tiles of 1, 2, 3, 6 columns), one output block
    Case("conv2d_nchw_u8s8.cpu", "qnn.conv2d_nchw_u8s8",
         lambda r: [qi(r, (1, 3, 13, 32), "uint8"), pack_conv2d_u8s8_row_weight(qi(r, (16, 3, 7, 7)))],
         {"strides": (2, 2), "out_width": 6, "out_layout": "NCHW16c"}),
    # issue 18, group B (misc ops)
    Case("det.cpu", "det", lambda r: [n(r, (3, 2, 5, 5))]),
    # issue 18 point 5: the data-dependent selections (NonZero, Compress, Unique, TopK, NMS)
    Case("selection.cpu", "nonzero", lambda r: [r.integers(-1, 2, (3, 5)).astype(np.float32)]),
]
BY_IMPL = {c.id: c for c in CPU_CASES}
CPU_TARGETS = [t.name for t in TARGETS if t.spec != "opencl"]


def test_every_cpu_implementation_has_a_case():
    assert {impl.name for op in all_ops().values() for impl in op.strategy.get("cpu", [])} == set(BY_IMPL)


def _configs(case, target, count=2):
    """The fallback config of the case's implementation and `count` others of its space (seeded
    choice); [None] for an implementation without knobs (no tuning task: its one schedule)."""
    arrays, chain = case.build()
    fn, _, _ = op_function(case.op, arrays, case.attrs, chain)
    task = next((t for t in tasks_of_functions([fn], target) if t.impl == case.id), None)
    if task is None:
        return [None]
    space = task.config_space(target)
    fallback = space.fallback_config()
    others = [i for i in range(len(space)) if dict(space.get(i)) != dict(fallback)]
    return [fallback] + [space.get(i) for i in random.Random(case.id).sample(others, min(count, len(others)))]


def _schedule_params():
    """(target, implementation, which configs): the fallback, and the two others for the
    implementations with knobs; on targets other than this host's CPU the others are slow."""
    knobs = {impl.name for op in all_ops().values() for impl in op.strategy.get("cpu", []) if impl.config_space}
    out = []
    for t in CPU_TARGETS:
        for impl in sorted(BY_IMPL):
            for which in ("fallback", "others") if impl in knobs else ("fallback",):
                slow = t != "native" and which == "others"
                marks = pytest.mark.slow if slow else ()
                out.append(pytest.param(t, impl, which, id=f"{t}-{impl}-{which}", marks=marks))
    return out


@pytest.mark.parametrize("target_name,impl,which", _schedule_params())
def test_cpu_schedule_fallback_and_two_other_configs(target_name, impl, which):
    target = require(target_name).target
    case = BY_IMPL[impl]
    configs = _configs(case, target)
    assert len(configs) in (1, 3) and (len(configs) == 3) == (configs[0] is not None)
    arrays, chain = case.build()
    for cfg in configs[:1] if which == "fallback" else configs[1:]:
        out, ref = run_op(case.op, arrays, case.attrs, chain, impl=impl if cfg else None, target=target, config=cfg)
        try:
            _assert_close(out, ref, case.tol)
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg or {})}: {e}") from None

# The schedule decisions are asserted for the fixed AVX-512 descriptor (16 float32 lanes, 32
# registers); the numbers are checked on this host's CPU (build_and_run's default target).
X86 = resolve_target("x86")


def _dense_pack(m, k, nb, bn=16):
    x = Var("x", TensorType((m, k), "float32"))
    w = Var("w", TensorType((nb, k, bn), "float32"))
    return Function([x, w], make_call("nn.dense_pack", [x, w]), "fused_dense_pack")


@pytest.mark.parametrize("m,k,nb,parallel", [(1, 64, 8, False), (128, 256, 16, True)])
def test_dense_pack_runs_in_parallel_only_above_the_work_threshold(m, k, nb, parallel):
    """A batch-1 [1,64] x [64,128] dense (8K multiply-adds) costs less than a parallel launch."""
    assert (m * k * nb * 16 >= MIN_PARALLEL_MACS) == parallel
    text = str(lower_fused(_dense_pack(m, k, nb), X86))
    assert ("parallel for" in text) == parallel


@pytest.mark.parametrize("target_name,lanes,tile_n", [("x86", 16, 5), ("x86-avx2", 8, 5)])
def test_unpacked_dense_vectorizes_its_reduction_with_the_descriptors_lanes(target_name, lanes, tile_n):
    """nn.dense over K = 480 (a CTC head's N = 6625 has no power-of-two block, so the weight stays
    [N, K]): lane-wise partial sums over k (rfactor, tile_k = the target's lanes), tile_n
    accumulators from num_vector_registers // 2 (16 or 8 -> the largest divisor of 6625: 5)."""
    target = resolve_target(target_name)
    x = Var("x", TensorType((4, 480), "float32"))
    w = Var("w", TensorType((6625, 480), "float32"))
    text = str(lower_fused(Function([x, w], make_call("nn.dense", [x, w]), "fused_dense"), target))
    assert f"vectorize for dense_lane in 0..{lanes}" in text
    assert f"for k_outer in 0..{480 // lanes}" in text and f"unroll for dense_rf1 in 0..{tile_n}" in text


def test_long_rows_that_lanes_do_not_divide_stay_whole_innermost_loops():
    """An elementwise stage over [40, 6625] keeps the 6625 row as the innermost loop (LLVM
    vectorizes it with a scalar tail) under a parallel loop over the rows, instead of one fused
    loop indexed through a division by 6625."""
    x = Var("x", TensorType((40, 6625), "float32"))
    text = str(lower_fused(Function([x], make_call("exp", [x]), "fused_exp"), X86))
    assert "in 0..6625 {" in text and "parallel for" in text and "// 6625" not in text


def test_a_fused_layout_change_vectorizes_the_axis_its_loads_run_along():
    """ShuffleNet's GEMM output [1, 4, 68, 196] + a per-channel bias + relu, channel-shuffled and
    stored NCHW16c [1, 17, 14, 14, 16]: along the channel block both loads would be gathers (one
    scalar load per lane), along the image row w both run contiguous or uniform and only the
    store is strided, so w is the vector loop (vector_axis); the result equals numpy's. A plain
    elementwise add keeps its last axis, and so does a lone NCHW -> NCHW16c layout_transform (one
    gather against one strided store: a tie)."""
    from tvmc.ops.layout import to_layout

    x = Var("x", TensorType((1, 4, 68, 196), "float32"))
    bias = Var("bias", TensorType((272, 1, 1), "float32"))
    y = make_call("nn.relu", [make_call("add", [make_call("reshape", [x], {"newshape": (1, 272, 14, 14)}), bias])])
    y = make_call("reshape", [y], {"newshape": (1, 4, 68, 14, 14)})
    y = make_call("transpose", [y], {"axes": (0, 2, 1, 3, 4)})
    y = make_call("reshape", [y], {"newshape": (1, 272, 14, 14)})
    out = make_call("layout_transform", [y], {"src_layout": "NCHW", "dst_layout": "NCHW16c"})
    fn = Function([x, bias], out, "fused_shuffle")
    text = str(lower_fused(fn, X86))
    assert "vectorize for layout_transform_i3 in 0..14 {" in text, text
    r = np.random.default_rng(0)
    xv, bv = n(r, (1, 4, 68, 196)), n(r, (272, 1, 1))
    got, _ = build_and_run(fn, [xv, bv], X86)
    ref = np.maximum(xv.reshape(1, 272, 14, 14) + bv, 0).reshape(1, 4, 68, 14, 14).transpose(0, 2, 1, 3, 4)
    np.testing.assert_allclose(got, to_layout(ref.reshape(1, 272, 14, 14), "NCHW", "NCHW16c"), rtol=0, atol=0)

    a = Var("a", TensorType((2, 6, 5, 32), "float32"))
    assert "vectorize for add_i3_inner in 0..16 {" in str(lower_fused(Function([a, a], make_call("add", [a, a]),
                                                                                 "fused_add"), X86))
    scalar = Var("s", TensorType((), "float32"))  # a 0-d stage has no axis to choose
    assert "for " not in str(lower_fused(Function([scalar], make_call("exp", [scalar]), "fused_exp0"), X86))
    plain = Var("p", TensorType((1, 32, 14, 14), "float32"))
    lt = make_call("layout_transform", [plain], {"src_layout": "NCHW", "dst_layout": "NCHW16c"})
    lone = str(lower_fused(Function([plain], lt, "fused_lt"), X86))
    assert "vectorize for layout_transform_i4_inner in 0..16 {" in lone


def test_elementwise_parallel_loop_fuses_only_the_leading_axes():
    """ShuffleNet's stride-2 join: GEMM output [1, 4, 28, 784] + bias, to NCHW8c, concatenated
    after the pooled [1, 3, 28, 28, 8] and relu'd: the parallel loop fuses (n, c) up to
    PARALLEL_ITERATIONS (17 channel blocks), (h, w) stay nested loops, so no division recovers
    them per vector and the input choice depends on the outer loop alone; equal to numpy's."""
    from tvmc.ops.cpu.injective import PARALLEL_ITERATIONS
    from tvmc.ops.layout import to_layout

    x = Var("x", TensorType((1, 4, 28, 784), "float32"))
    bias = Var("bias", TensorType((112, 1, 1), "float32"))
    pooled = Var("pooled", TensorType((1, 3, 28, 28, 8), "float32"))
    y = make_call("add", [make_call("reshape", [x], {"newshape": (1, 112, 28, 28)}), bias])
    y = make_call("layout_transform", [y], {"src_layout": "NCHW", "dst_layout": "NCHW8c"})
    out = make_call("nn.relu", [make_call("concatenate", [pooled, y], {"axis": 1})])
    fn = Function([x, bias, pooled], out, "fused_join")
    text = str(lower_fused(fn, X86))
    assert PARALLEL_ITERATIONS <= 17 and "parallel for nn_relu_i0.nn_relu_i1 in 0..17 {" in text, text
    assert "for nn_relu_i2 in 0..28 {" in text and "for nn_relu_i3 in 0..28 {" in text
    r = np.random.default_rng(1)
    xv, bv, pv = n(r, (1, 4, 28, 784)), n(r, (112, 1, 1)), n(r, (1, 3, 28, 28, 8))
    got, _ = build_and_run(fn, [xv, bv, pv], X86)
    joined = np.concatenate([pv, to_layout(xv.reshape(1, 112, 28, 28) + bv, "NCHW", "NCHW8c")], axis=1)
    np.testing.assert_allclose(got, np.maximum(joined, 0), rtol=0, atol=0)


def test_blocked_concatenate_copies_rows_of_one_input_each():
    """A concatenation of two NCHW16c tensors on their channel blocks ([1,4,55,55,16] x 2, a
    SqueezeNet fire module): rows (n, c_outer, h) in parallel, w serial, the block a vector, the
    input chosen once per row (no division or select inside the w loop): 215-245 -> 175 us at 1
    thread on AVX-512 against the fused loop."""
    a, b = (Var(v, TensorType((1, 4, 55, 55, 16), "float32")) for v in "ab")
    text = str(lower_fused(Function([a, b], make_call("concatenate", [a, b], {"axis": 1}), "fused_concatenate"), X86))
    assert "parallel for concatenate_i0.concatenate_i1.concatenate_i2 in 0..440 {" in text
    assert "for concatenate_i3 in 0..55 {" in text and "vectorize for concatenate_i4 in 0..16 {" in text
    assert "i3 //" not in text and "i3 %" not in text


def test_one_channel_stem_keeps_its_kernel_taps_a_loop():
    """A conv over a one-channel input block (a grayscale stem: ic_inner of 1) keeps the kw loop
    rolled: unrolled by LLVM, the taps shared their broadcast inputs across the register tile's
    columns, held ~27 of them beside 25 accumulators and spilled (a CRNN's 32 x 100 stem: 15.2
    -> 10.3 us without the spills). Results match the reference."""
    from tvmc.ops.registry import get_op

    rng = np.random.default_rng(4)
    x = Var("x", TensorType((1, 1, 12, 30, 1), "float32"))
    w = Var("w", TensorType((1, 1, 3, 3, 1, 16), "float32"))
    attrs = dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW16c")
    fn = Function([x, w], make_call("nn.conv2d_nchwc", [x, w], attrs), "fused_stem")
    text = str(lower_fused(fn, X86))
    assert "rolled for kw in 0..3 {" in text
    a = rng.standard_normal((1, 1, 12, 30, 1)).astype(np.float32)
    b = rng.standard_normal((1, 1, 3, 3, 1, 16)).astype(np.float32)
    out, _ = build_and_run(fn, [a, b])
    np.testing.assert_allclose(out, get_op("nn.conv2d_nchwc").reference(a, b, **attrs), rtol=1e-4, atol=1e-5)


def test_depthwise_pads_per_tile_into_a_local_buffer():
    """Depthwise conv2d_nchwc and blocked pooling pad their input windows per register tile (no
    padded copy of the whole input at root); results match the references at the borders."""
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((1, 2, 9, 11, 16), "float32"))
    w = Var("w", TensorType((2, 1, 3, 3, 1, 16), "float32"))
    attrs = dict(strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=32, out_layout="NCHW16c")
    conv = Function([x, w], make_call("nn.conv2d_nchwc", [x, w], attrs), "fused_dw")
    text = str(lower_fused(conv, X86))
    assert "allocate pad_data" in text and "(local)" in text.split("allocate pad_data")[1].splitlines()[0]
    a = rng.standard_normal((1, 2, 9, 11, 16)).astype(np.float32)
    b = rng.standard_normal((2, 1, 3, 3, 1, 16)).astype(np.float32)
    from tvmc.ops.registry import get_op

    out, _ = build_and_run(conv, [a, b])
    np.testing.assert_allclose(out, get_op("nn.conv2d_nchwc").reference(a, b, **attrs), rtol=1e-4, atol=1e-5)
    pattrs = dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=0,
                  layout="NCHW16c")
    pool = Function([x], make_call("nn.max_pool2d", [x], pattrs), "fused_pool")
    assert "(local)" in str(lower_fused(pool, X86)).split("allocate pad")[1].splitlines()[0]
    out, _ = build_and_run(pool, [a])
    np.testing.assert_allclose(out, get_op("nn.max_pool2d").reference(a, **pattrs), rtol=0, atol=0)


@pytest.mark.parametrize("shape,axis,vectorized", [((2, 4, 64), 2, True), ((2, 40, 20), 1, False),
                                                   ((3, 24), 1, False)])
def test_softmax_over_the_contiguous_axis_is_vectorized(shape, axis, vectorized):
    """max and sum over a contiguous last axis of >= 2 vectors go through rfactor (lane-wise
    partial results in vector registers); other axes keep the scalar reduction loop."""
    from tvmc.ops.registry import get_op

    x = Var("x", TensorType(shape, "float32"))
    fn = Function([x], make_call("nn.softmax", [x], {"axis": axis}), "fused_softmax")
    assert ("softmax_max_rf" in str(lower_fused(fn, X86))) == vectorized
    a = (np.random.default_rng(1).standard_normal(shape) * 4).astype(np.float32)
    out, _ = build_and_run(fn, [a])
    np.testing.assert_allclose(out, get_op("nn.softmax").reference(a, axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["min", "max", "sum"])
def test_a_reduction_to_one_value_accumulates_in_several_vectors(op):
    """A reduction of a whole tensor to a scalar (a dynamic quantization's min and max) is
    factored by SCALAR_REDUCTION_CHAINS vectors of lanes (independent accumulators); a NaN, an
    infinity and the extremes in the last chain's lanes keep numpy's results; a reduction that
    keeps rows stays factored by one vector."""
    from tvmc.ops.cpu.reduction import SCALAR_REDUCTION_CHAINS
    from tvmc.ops.registry import get_op

    lanes = X86.vector_lanes("float32") * SCALAR_REDUCTION_CHAINS
    shape = (3, 4, 2 * lanes)
    x = Var("x", TensorType(shape, "float32"))
    fn = Function([x], make_call(op, [x], {"axis": (0, 1, 2), "keepdims": 0}), "fused_reduce")
    assert f"_rf: float32[{lanes}]" in str(lower_fused(fn, X86))
    rows = Function([x], make_call(op, [x], {"axis": (2,), "keepdims": 0}), "fused_rows")
    assert f"_rf: float32[3,4,{X86.vector_lanes('float32')}]" in str(lower_fused(rows, X86))
    rng = np.random.default_rng(5)
    for special in (None, np.nan, np.inf, -np.inf):
        a = rng.standard_normal(shape).astype(np.float32)
        a[2, 3, -1] = 9.0
        a[1, 0, lanes - 1] = -9.0
        if special is not None:
            a[2, 1, lanes + 3] = special
        out, _ = build_and_run(fn, [a])
        ref = get_op(op).reference(a, axis=(0, 1, 2), keepdims=0)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["nn.softmax", "nn.log_softmax"])
def test_softmax_runs_row_by_row_in_a_row_buffer(op):
    """softmax over a contiguous last axis: every stage inside the parallel loop over rows, the
    exp in a local buffer of one row (nothing of the tensor's size allocated), the output the
    exp times the sum's reciprocal; rows holding -inf, +inf and NaN keep numpy's results."""
    from tvmc.ops.registry import get_op

    shape = (2, 5, 64)
    x = Var("x", TensorType(shape, "float32"))
    fn = Function([x], make_call(op, [x], {"axis": 2}), "fused_softmax")
    text = str(lower_fused(fn, X86))
    assert text.index("parallel for") < text.index("allocate softmax_exp: float32[1,1,64] (local)")
    assert "(global)" not in text
    a = (np.random.default_rng(2).standard_normal(shape) * 4).astype(np.float32)
    a[0, 0, 3] = -np.inf
    a[0, 1, :] = -1e4
    a[0, 1, 7] = 0.0
    a[1, 2, 9] = np.inf
    a[1, 3, 60] = np.nan
    out, _ = build_and_run(fn, [a])
    with np.errstate(invalid="ignore"):
        ref = get_op(op).reference(a, 2)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-7)


def test_softmax_rows_longer_than_the_row_buffer_keep_the_whole_tensor_stages():
    """A row of more than ROW_BUFFER_BYTES (32 KB of float32: 8192 elements) keeps the stages over
    the whole tensor, the exp in a global buffer (no 64 KB stack row)."""
    from tvmc.ops.cpu.reduction import ROW_BUFFER_BYTES
    from tvmc.ops.registry import get_op

    shape = (2, ROW_BUFFER_BYTES // 4 + 16)
    x = Var("x", TensorType(shape, "float32"))
    fn = Function([x], make_call("nn.softmax", [x], {"axis": 1}), "fused_softmax")
    text = str(lower_fused(fn, X86))
    assert f"allocate softmax_exp: float32[{shape[0]},{shape[1]}] (global)" in text
    a = (np.random.default_rng(3).standard_normal(shape) * 4).astype(np.float32)
    out, _ = build_and_run(fn, [a])
    np.testing.assert_allclose(out, get_op("nn.softmax").reference(a, 1), rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("target_name,operand,ow_tiles", [
    ("x86", "memory", {56: (2, 14), 28: (2, 14), 14: (2, 14), 7: (2, 7), 112: (2, 14)}),
    ("x86-avx2", "register", {56: (2, 4), 28: (2, 4), 14: (1, 7), 7: (1, 7), 112: (2, 4)}),
    ("arm", "lane", {56: (1, 8), 28: (1, 7), 14: (1, 7), 7: (1, 7), 112: (1, 8)}),
])
def test_conv2d_nchwc_register_tile_fits_the_fma_operand_form(target_name, operand, ow_tiles):
    """The fallback (tile_oc, tile_ow) of ResNet-18's layers (two output channel blocks) from the
    descriptor: R = registers - 4 where the FMA's scalar comes from memory or a rotating broadcast
    register (x86: 28, AVX2: 12), shared by two channel blocks there (each broadcast feeds two
    FMAs: R // 2 columns); (registers - 4 - ic_bn) // 2 = 12 where it is a lane of a vector
    register (NEON: each column keeps its input scalar in a register for the unrolled ic_inner
    step), one block."""
    from tvmc.ops.cpu.conv2d_nchwc import accumulator_registers, conv2d_nchwc_config

    target = resolve_target(target_name)
    assert target.fma_scalar_operand == operand
    lanes = target.vector_lanes()
    assert accumulator_registers(target, lanes) == {"memory": 28, "register": 12, "lane": 12}[operand]
    for ow, tile in ow_tiles.items():
        workload = ((1, 2, ow, ow, lanes), (2, 2, 3, 3, lanes, lanes), (1, 2, ow, ow, lanes), "float32",
                    (("groups", 1),))
        fallback = conv2d_nchwc_config(workload, target).fallback
        assert (fallback["tile_oc"], fallback["tile_ow"]) == tile, ow


@pytest.mark.parametrize("ow,oc_blocks,tile", [(56, 16, (2, 4)), (28, 32, (2, 4)), (14, 64, (4, 2)), (7, 128, (1, 7)),
                                               (13, 250, (5, 1)), (14, 1, (1, 14))])
def test_conv2d_nchwc_splat_operand_tiles_several_channel_blocks(ow, oc_blocks, tile):
    """wasm simd128 (fma_scalar_operand "splat"): the fallback register tile (tile_oc, tile_ow) of
    ResNet-18's 3x3 layers and SqueezeNet's last 1x1 one, the most multiply-adds per loaded
    operand with accumulators, weight vectors and splats in 15 registers (one block, as a
    depthwise conv: 16 accumulators); x86 AVX2 takes at most two channel blocks."""
    from tvmc.ops.cpu.conv2d_nchwc import conv2d_nchwc_config

    def fallback(target):
        lanes = target.vector_lanes()
        workload = ((1, 2, ow, ow, lanes), (oc_blocks, 2, 3, 3, lanes, lanes), (1, oc_blocks, ow, ow, lanes),
                    "float32", (("groups", 1),))
        space = conv2d_nchwc_config(workload, target).fallback
        return space["tile_oc"], space["tile_ow"]

    wasm = resolve_target("wasm")
    assert wasm.fma_scalar_operand == "splat"
    assert fallback(wasm) == tile
    assert fallback(resolve_target("x86-avx2"))[0] <= 2


@pytest.mark.parametrize("target_name,out_shape,tile", [
    ("wasm", (4, 128, 128), (4, 8)), ("wasm", (4, 128, 4), (8, 4)), ("wasm", (2, 12, 30), (4, 3)),
    ("x86-avx2", (4, 128, 64), (4, 16)), ("x86", (4, 128, 64), (8, 32)), ("arm", (2, 12, 32), (6, 8)),
    ("x86", (3, 197, 197), (10, 16)),  # padded to [200, 208] by AlterOpLayout: tiles of the padded sums
])
def test_matmul_fallback_is_dense_packs_register_tile_over_vectors_of_columns(target_name, out_shape, tile):
    """nn.matmul's fallback (tile_i, tile_j): where the lanes divide N, 2 vectors of columns (1 when
    N is one vector) and (num_vector_registers // 2) // vectors rows, as dense_pack's tile (BERT's
    attention on wasm: 4 x 8); elsewhere 4 rows x the largest divisor of N <= lanes. A padded
    matmul (its `padded` attribute) tiles its padded sums."""
    from tvmc.ops.cpu.dense import matmul_config, matmul_padding

    target = resolve_target(target_name)
    padded = matmul_padding(out_shape[-2], out_shape[-1], target) if out_shape[-1] == 197 else None
    attrs = (("padded", padded),) if padded else ()
    space = matmul_config((None, None, out_shape, "float32", attrs), target).fallback
    assert (space["tile_i"], space["tile_j"]) == tile


@pytest.mark.parametrize("cols", [20, 24, 31])
def test_padded_matmul_tiles_stay_within_the_outputs_columns(cols):
    """Attention at 17 to 31 tokens on AVX-512: N padded to 32, but a tile of 2 vectors would be
    wider than the output, which then is not split: the register tile became one vector of N
    lanes (N = 24: 84 us against 14 at N = 32). The fallback takes 1 vector, no tile_j knob passes
    N, and the kernel equals numpy."""
    from tvmc.ops.cpu.dense import matmul_config, matmul_padding

    target = resolve_target("x86")
    padded = matmul_padding(cols, cols, target)
    assert padded[1] == 32
    space = matmul_config((None, None, (12, cols, cols), "float32", (("padded", padded),)), target)
    assert space.fallback["tile_j"] == 16 and max(space.knobs["tile_j"]) <= cols
    r = np.random.default_rng(cols)
    a, b = Var("a", TensorType((12, cols, 64), "float32")), Var("b", TensorType((12, 64, cols), "float32"))
    fn = Function([a, b], make_call("nn.matmul", [a, b], {"padded": list(padded)}), "fused_matmul")
    av, bv = n(r, (12, cols, 64)), n(r, (12, 64, cols))
    got, _ = build_and_run(fn, [av, bv], target)
    np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target_name", ["x86", "x86-avx2", "wasm"])
def test_matmul_padding_widens_a_tile_of_too_few_accumulators(target_name):
    """ShuffleNet's grouped 1x1 conv as a GEMM, [4, 68, 68] x [4, 68, 196]: the lanes' padding
    alone leaves a fallback tile of 4 rows x 1 vector on AVX-512 (68's divisors); matmul_padding
    pads further, at most 1/8 more sums, to a tile of at least MIN_TILE_ACCUMULATORS vectors; a
    matmul whose tile is wide already (BERT's [4, 128, 64]) is not padded. The padded kernel
    equals numpy."""
    from tvmc.ops.cpu.dense import MIN_TILE_ACCUMULATORS, _tile_accumulators, matmul_padding

    target = resolve_target(target_name)
    lanes = target.vector_lanes("float32")
    mp, np_ = matmul_padding(68, 196, target)
    assert mp >= 68 and np_ >= 196 and 8 * mp * np_ <= 9 * 68 * (-(-196 // lanes) * lanes)
    assert _tile_accumulators(mp, np_, target) >= MIN_TILE_ACCUMULATORS
    assert matmul_padding(128, 64, target) is None
    if target_name != "x86":
        return
    assert _tile_accumulators(68, 208, target) < MIN_TILE_ACCUMULATORS
    r = np.random.default_rng(1)
    a, b = Var("a", TensorType((4, 68, 68), "float32")), Var("b", TensorType((1, 4, 68, 196), "float32"))
    fn = Function([a, b], make_call("nn.matmul", [a, b], {"padded": [mp, np_]}), "fused_matmul")
    av, bv = n(r, (4, 68, 68)), n(r, (1, 4, 68, 196))
    got, _ = build_and_run(fn, [av, bv], target)
    np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4)


# --- Winograd conv2d (issue 15 point 6, part 2)
@pytest.mark.parametrize("target_name,shapes,attrs,tile", [
    ("wasm", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(padding=(1, 1, 1, 1)), 4),
    ("wasm", ((1, 16, 13, 13), (64, 16, 3, 3)), conv(padding=(1, 1, 1, 1)), 4),
    ("wasm", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(strides=(2, 2), padding=(1, 1, 1, 1)), 0),
    ("wasm", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(dilation=(2, 2), padding=(2, 2, 2, 2)), 0),
    ("wasm", ((1, 64, 56, 56), (64, 64, 1, 1)), conv(), 0),
    ("wasm", ((1, 8, 56, 56), (64, 8, 3, 3)), conv(padding=(1, 1, 1, 1)), 0),
    ("wasm", ((1, 64, 56, 56), (64, 1, 3, 3)), conv(padding=(1, 1, 1, 1), groups=64), 0),
    ("x86", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(padding=(1, 1, 1, 1)), 0),
    ("x86-avx2", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(padding=(1, 1, 1, 1)), 4),
    ("arm", ((1, 64, 56, 56), (64, 64, 3, 3)), conv(padding=(1, 1, 1, 1)), 0),
])
def test_winograd_rule_takes_3x3_stride_1_convs_on_targets_with_16_vector_registers(target_name, shapes, attrs, tile,
                                                                                   monkeypatch):
    """AlterOpLayout's rule for targets without a cost table (winograd_tile_size): F(4x4, 3x3) for
    3x3 stride-1 dilation-1 groups-1 convs with >= 16 channels on wasm simd128 and x86 AVX2 (16
    registers); the direct form on AVX-512 and NEON (32 registers) and for every other workload."""
    from tvmc.ops.cpu import conv2d_winograd
    from tvmc.ops.cpu.conv2d_winograd import winograd_tile_size

    monkeypatch.setattr(conv2d_winograd, "load_cost_table", lambda name: None)
    target = resolve_target(target_name)
    assert winograd_tile_size(*shapes, attrs, target) == tile
    if tile:  # the pass option overrides the target rule, never the workload's conditions
        assert winograd_tile_size(*shapes, attrs, target, override=0) == 0
        assert winograd_tile_size(*shapes, attrs, target, override=2) == 2
    else:
        eligible = shapes[0][1] >= 16 and attrs["strides"] == (1, 1) and attrs["dilation"] == (1, 1) \
            and attrs["groups"] == 1 and shapes[1][2:] == (3, 3)
        assert winograd_tile_size(*shapes, attrs, target, override=4) == (4 if eligible else 0)


def _cost_table(*entries):
    """A synthetic cost table: entries (C, O, H, direct, im2col, winograd2, winograd4) in ms."""
    forms = ("direct", "im2col", "winograd2", "winograd4")
    return {"target": "synthetic", "threads": 1, "generated_by": "test", "entries": [
        {"C": c, "O": o, "H": h, "W": h, "times_ms": dict(zip(forms, times))} for c, o, h, *times in entries]}


SYNTHETIC_TABLE = _cost_table((64, 64, 56, 2.0, 3.0, 1.5, 1.0),     # F(4x4) fastest
                              (256, 256, 14, 2.0, 3.0, 1.2, 1.6),   # F(2x2) fastest
                              (512, 512, 7, 1.0, 2.0, 1.5, 1.8),    # direct fastest
                              (128, 128, 28, 2.0, 0.5, 1.5, 1.2))   # im2col fastest: no Winograd


@pytest.mark.parametrize("target_name", ["x86", "arm", "wasm"])
@pytest.mark.parametrize("shape,tile", [
    ((1, 64, 56, 56), 4), ((1, 64, 48, 48), 4), ((1, 256, 14, 14), 2), ((1, 192, 16, 16), 2),
    ((1, 512, 7, 7), 0), ((1, 512, 8, 8), 0), ((1, 128, 28, 28), 0)])
def test_winograd_tile_size_takes_the_fastest_form_of_the_nearest_class_of_the_cost_table(target_name, shape, tile,
                                                                                         monkeypatch):
    """With a cost table for the target, winograd_tile_size returns the tile of the form the
    nearest class (log2 distance in C, O, H*W) measured fastest, whatever the register count;
    the override and the workload conditions still come first."""
    from tvmc.ops.cpu import conv2d_winograd
    from tvmc.ops.cpu.conv2d_winograd import winograd_tile_size

    target = resolve_target(target_name)
    monkeypatch.setattr(conv2d_winograd, "load_cost_table",
                        lambda name: SYNTHETIC_TABLE if name == target.name else None)
    c = shape[1]
    assert winograd_tile_size(shape, (c, c, 3, 3), conv(padding=(1, 1, 1, 1)), target) == tile
    assert winograd_tile_size(shape, (c, c, 3, 3), conv(padding=(1, 1, 1, 1)), target, override=2) == 2
    assert winograd_tile_size(shape, (c, c, 3, 3), conv(strides=(2, 2), padding=(1, 1, 1, 1)), target) == 0


def test_plan_winograd_under_a_budget_takes_the_plan_that_saves_most_not_the_densest_step():
    """The budget is a multiple-choice knapsack (_best_within_budget): a small conv saving most per
    byte must not crowd out a larger one that saves more in all (greedy by density took x alone)."""
    from tvmc.ops.cpu.conv2d_winograd import _best_within_budget

    options = {"x": {2: 1.0}, "y": {2: 1.9}}      # F(2x2) adds 7 x size bytes: x 7, y 14
    assert _best_within_budget(options, {"x": 1, "y": 2}, 14) == {"y": 2}
    assert _best_within_budget(options, {"x": 1, "y": 2}, 21) == {"x": 2, "y": 2}
    assert _best_within_budget(options, {"x": 1, "y": 2}, 6) == {}
    both = {"a": {2: 1.0, 4: 3.0}, "b": {2: 2.6}}    # a: 7 or 27 bytes, b: 14
    assert _best_within_budget(both, {"a": 1, "b": 2}, 30) == {"a": 2, "b": 2}
    assert _best_within_budget(both, {"a": 1, "b": 2}, 41) == {"a": 4, "b": 2}


def test_plan_winograd_weighs_the_sizes_of_a_symbolic_range(monkeypatch):
    """A conv of symbolic shape (samples: its shapes across the range, the upper bound last) takes
    the form with the lowest mean log ratio to the direct form over the samples, not the one of its
    upper bound alone (F(4x4) at 56 x 56, F(2x2) at the 7 x 7 most of the range runs), or an
    override's."""
    from tvmc.ops.cpu import conv2d_winograd
    from tvmc.ops.cpu.conv2d_winograd import plan_winograd

    monkeypatch.setattr(conv2d_winograd, "load_cost_table", lambda name: SYNTHETIC_TABLE)
    target = resolve_target("x86")
    convs = [("k", (1, 64, 56, 56), (64, 64, 3, 3), conv(padding=(1, 1, 1, 1)), 4)]
    assert plan_winograd(convs, target) == {"k": 4}
    samples = {"k": [(1, 64, 7, 7)] * 5 + [(1, 64, 56, 56)]}
    assert plan_winograd(convs, target, samples=samples) == {"k": 2}
    big = {"k": [(1, 64, 56, 56)] * 6}
    assert plan_winograd(convs, target, samples=big) == {"k": 4}       # F(4x4) the fastest at every size
    mostly_big = {"k": [(1, 64, 7, 7)] + [(1, 64, 56, 56)] * 5}
    assert plan_winograd(convs, target, samples=mostly_big) == {"k": 4}  # best on the mean, not at 7 x 7
    assert plan_winograd(convs, target, override=2, samples=mostly_big) == {"k": 2}
    direct = {"k": [(1, 512, 7, 7)] * 6}                              # the direct class: no Winograd
    assert plan_winograd([("k", (1, 512, 7, 7), (512, 512, 3, 3), conv(padding=(1, 1, 1, 1)), 4)], target,
                         samples=direct) == {}


def test_shipped_cost_tables_validate_against_their_schema_and_are_read_for_their_target():
    """configs/winograd/*.json (bench/winograd_table.py) validate against configs/winograd/schema.json,
    are named after a shipped CPU descriptor, and winograd_tile_size follows each one."""
    import json
    from importlib import resources

    import jsonschema

    from tvmc.ops.cpu.conv2d_winograd import FORM_TILE_SIZE, estimated_times_ms, load_cost_table, winograd_tile_size

    folder = resources.files("tvmc.configs").joinpath("winograd")
    schema = json.loads(folder.joinpath("schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    tables = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json") and p.name != "schema.json")
    assert tables, "no cost table shipped"
    for name in tables:
        table = json.loads(folder.joinpath(name).read_text())
        jsonschema.validate(table, schema)
        target = resolve_target(name[:-len(".json")])
        assert target.family == "cpu" and table["target"] == target.name and load_cost_table(target.name) == table
        for e in table["entries"]:
            data, weight = (1, e["C"], e["H"], e["W"]), (e["O"], e["C"], 3, 3)
            times = estimated_times_ms(data, weight, table)
            assert times == pytest.approx(e["times_ms"])
            expected = FORM_TILE_SIZE[min(times, key=times.get)] if min(e["C"], e["O"]) >= 16 else 0
            assert winograd_tile_size(data, weight, conv(padding=(1, 1, 1, 1)), target) == expected
    broken = dict(SYNTHETIC_TABLE, entries=[{"C": 64, "O": 64, "H": 56, "W": 56, "times_ms": {"direct": 1.0}}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_plan_winograd_spends_the_byte_budget_where_it_saves_most_per_byte(monkeypatch):
    """plan_winograd without a budget takes each conv's winograd_tile_size; with one, the extra
    bytes of the transformed weights stay within it, the convs saving most time per extra byte
    (large images, few channels) come first, and F(2x2) is taken where F(4x4) does not fit."""
    from tvmc.ops.cpu import conv2d_winograd
    from tvmc.ops.cpu.conv2d_winograd import plan_winograd

    monkeypatch.setattr(conv2d_winograd, "load_cost_table", lambda name: SYNTHETIC_TABLE)
    target = resolve_target("x86")
    attrs = conv(padding=(1, 1, 1, 1))
    convs = [("a", (1, 64, 56, 56), (64, 64, 3, 3), attrs, 4), ("b", (1, 256, 14, 14), (256, 256, 3, 3), attrs, 4),
             ("c", (1, 512, 7, 7), (512, 512, 3, 3), attrs, 4), ("d", (1, 64, 56, 56), (64, 64, 1, 1), conv(), 4)]
    assert plan_winograd(convs, target) == {"a": 4, "b": 2}
    a4, a2, b2 = (36 - 9) * 64 * 64 * 4, (16 - 9) * 64 * 64 * 4, (16 - 9) * 256 * 256 * 4
    assert plan_winograd(convs, target, extra_bytes_budget=0) == {}
    assert plan_winograd(convs, target, extra_bytes_budget=a2) == {"a": 2}   # F(4x4) does not fit
    assert plan_winograd(convs, target, extra_bytes_budget=a4) == {"a": 4}
    assert plan_winograd(convs, target, extra_bytes_budget=a4 + b2) == {"a": 4, "b": 2}
    assert plan_winograd(convs, target, override=2, extra_bytes_budget=a4) == {"a": 2}
    assert plan_winograd(convs, target, override=4) == {"a": 4, "b": 4, "c": 4}   # forced: the table aside
    assert plan_winograd(convs, target, override=0) == {}


def test_winograd_batched_gemm_is_a_register_tile_of_the_descriptors_fallback():
    """The fused Winograd kernel keeps the padded input, the input tiles and the batched GEMM
    materialized once; the GEMM accumulates a tile_oc x tile_p x ob register tile (wasm's splat
    fallback for 16 channel blocks and 49 tiles: 1 x 7) over (ic_outer, ic_inner), ic_inner kept
    a loop (rolled: see conv2d_nchwc.rolls_ic_inner), the tiles' loop outside the channel blocks'
    (each splat feeds the tile_oc FMAs in a row); the output
    transform writes m x m pixels per tile, unrolled, fused with the bias and relu; the result
    matches the reference."""
    from tvmc.ops.nn_conv2d_winograd import winograd_weight_transform

    rng = np.random.default_rng(3)
    x = Var("x", TensorType((1, 16, 14, 14, 4), "float32"))
    weight = rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.1
    u = winograd_weight_transform(weight, 2, 4, 4)
    w = Var("w", TensorType(u.shape, "float32"))
    b = Var("b", TensorType((16, 1, 1, 4), "float32"))
    attrs = dict(padding=(1, 1, 1, 1), tile_size=2, out_layout="NCHW4c")
    conv_call = make_call("nn.conv2d_winograd_nchwc", [x, w], attrs)
    fn = Function([x, w, b], make_call("nn.relu", [make_call("add", [conv_call, b])]), "fused_winograd")
    text = str(lower_fused(fn, resolve_target("wasm")))
    for stage, shape in (("pad_data", "[1,16,16,16,4]"), ("input_tile", "[16,49,16,4]"),
                         ("batch_gemm", "[16,16,49,4]")):
        assert f"allocate {stage}: float32{shape} (global)" in text
    assert "allocate batch_gemm_local: float32[1,1,7,4] (local)" in text
    assert ("for ic_outer in 0..16 {\n        rolled for ic_inner in 0..4 {\n"
            "          unroll for batch_gemm_i2 in 0..7 {\n            unroll for batch_gemm_i1 in 0..1") in text
    output = text.split("parallel for")[-1]  # the output transform with the epilogue: one loop nest
    assert "unroll for nn_relu_i2_inner in 0..2" in output and "unroll for nn_relu_i3_inner in 0..2" in output
    assert "max(" in output and "batch_gemm[" in output
    a = rng.standard_normal((1, 16, 14, 14, 4)).astype(np.float32)
    bias = rng.standard_normal((16, 1, 1, 4)).astype(np.float32)
    out, _ = build_and_run(fn, [a, u, bias])
    from tvmc.ops.registry import get_op

    ref = np.maximum(get_op("nn.conv2d_winograd_nchwc").reference(a, u, **attrs) + bias, 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_concatenate_of_hundreds_of_inputs_is_a_shallow_select_tree():
    """A concatenation of 600 inputs (a static CRNN at width 2048 concatenates its LSTM's 511 steps)
    compiles and matches numpy: its compute is a balanced tree of selects on the concatenated
    index, about 10 deep, where a chain of one select per input overflowed the recursion of the
    passes and the code generator."""
    r = np.random.default_rng(5)
    arrays = [r.standard_normal((1, 3)).astype(np.float32) for _ in range(600)]
    out, ref = run_op("concatenate", arrays, dict(axis=0))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("m,tile_m", [(1, 1), (5, 5), (17, 6), (128, 8), (77, 7), (37, 8)])
def test_dense_pack_fallback_rows_leave_few_idle_rows(m, tile_m):
    """dense_pack's fallback tile_m on AVX-512 (8 rows of 2 blocks): M itself up to 8, else a
    divisor from 4 up, else the width in 4..8 that leaves the fewest rows idle in the guarded last
    tile (a prime M took 1-row tiles: 17 -> 6, 3 tiles); a guarded tile matches numpy."""
    from tvmc.ops.cpu.dense import dense_pack_config

    target = resolve_target("x86")
    workload = ((m, 64), (4, 64, 16), (m, 64), "float32", ())
    assert dense_pack_config(workload, target).fallback_config()["tile_m"] == tile_m
    if m == 17:
        r = np.random.default_rng(7)
        out, ref = run_op("nn.dense_pack", [r.standard_normal((m, 64)).astype(np.float32),
                                            r.standard_normal((4, 64, 16)).astype(np.float32)])
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_width_buckets_end_at_every_fourth_width_up_to_the_accumulators():
    """The size buckets of a register-tiled width (conv2d_nchwc_buckets, conv2d_winograd_buckets)
    start at every width from 2 to 9 and every fourth from 13 up to R + 1 (R = 28 accumulators on
    AVX-512): buckets [9, 12], ..., [25, 28] whose tiles are their upper bounds, so a CRNN's 20
    Winograd tiles at width 37 run one tile of 20 rather than two of 16."""
    from tvmc.graph import symbolic
    from tvmc.ops.cpu.conv2d_nchwc import register_tile_widths
    from tvmc.ops.cpu.conv2d_winograd import conv2d_winograd_buckets, winograd_tiles

    assert register_tile_widths(16, 28) == {2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 21, 25, 29, 16}
    assert register_tile_widths(8, 12) == {2, 3, 4, 5, 6, 7, 8, 9, 13}
    target = resolve_target("x86")
    ow = symbolic.size_var("width", 16, 2048) // 4
    (width,) = symbolic.free_vars([ow])
    attrs = (("out_layout", "NCHW16c"), ("padding", (1, 1, 1, 1)), ("tile_size", 2))
    upper = ((1, 2, 8, 512, 16), (16, 3, 2, 16, 16), (1, 3, 8, 512, 16), "float32", attrs)
    tiles = winograd_tiles(1, 8, ow, 2)
    starts = conv2d_winograd_buckets(upper, target, width, tiles)
    reached = [symbolic.substitute(tiles, {"width": v}) for v in starts]
    assert {16, 20, 24, 28} <= set(reached)  # P moves by 4 here: the first P of each bucket
