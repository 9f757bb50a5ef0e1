"""Every registered operator compiled for every target that runs here (tests/targets.py: this
host's CPU, OpenCL, ARM under qemu-user; the target family's default implementation, fused with an elementwise
epilogue where listed) against its numpy reference, on seeded inputs with edge values; and every
GPU implementation with its fallback and two other configs."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest
from util import build_and_run, run_op

from tests.targets import TARGETS, require

from tvmc.graph.ir import Constant, Function, TensorType, Var
from tvmc.ops.control import INTERPRETED
from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_row_weight, pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
from tvmc.ops.cpu.int8_mmla import pack_conv2d_u8s8_mmla_weight, pack_dense_u8s8_mmla_weight
from tvmc.ops.registry import all_ops, get_op, make_call
from tvmc.target import resolve_target

# One tolerance per output dtype. Compiled float32 kernels accumulate in float32 in the schedule's
# order; references accumulate in float64 (or are exact), so the bound covers float32 rounding of
# sums of a few hundred terms and the polynomial intrinsics (exp/tanh/erf: <= 7e-7 absolute).
TOLERANCE = {
    "float32": dict(rtol=1e-4, atol=1e-5),
    "float64": dict(rtol=1e-10, atol=1e-12),
    # float16 computes in float32 and rounds once at the store: at most half an ulp of float16
    # (4.9e-4 relative) from the float64 reference rounded to float16, plus that rounding
    "float16": dict(rtol=1e-3, atol=1e-4),
    # bfloat16 likewise, with 8 significant bits: one ulp is at most 2**-7 (7.8e-3) relative
    "bfloat16": dict(rtol=8e-3, atol=1e-4),
    **{d: dict(rtol=0, atol=0) for d in ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8",
                                         "bool")},
}


@dataclass
class Case:
    """`op(*inputs(rng), **attrs)` followed by elementwise `chain` [(op, attrs, extra arrays)]."""

    id: str
    op: str
    inputs: object                 # rng -> list of arrays
    attrs: dict = field(default_factory=dict)
    chain: object = None           # rng -> [(name, attrs, [arrays])]
    tol: dict | None = None        # a looser tolerance; the case says why
    xfail: tuple | None = None     # (reason, exception type): a known compiler bug
    slow: str = ""                 # why the case runs only in make test-all, on every target

    def build(self):
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        arrays = self.inputs(rng)
        chain = self.chain(rng) if self.chain else []
        return arrays, chain


def n(rng, shape, scale=1.0):
    """Standard normal float32 samples with a few edge values: exact 0.0 and -0.0."""
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = a.reshape(-1)
    if flat.size >= 4:
        flat[0], flat[-1] = 0.0, -0.0
    return a


def u(rng, shape, lo, hi, dtype=np.float32):
    return rng.uniform(lo, hi, shape).astype(dtype)


def edges(rng, shape, values, scale=1.0):
    """Normal samples with `values` (e.g. -0.0, +-1e30) written at the front."""
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = a.reshape(-1)
    flat[:len(values)] = values
    return a


BIG = [0.0, -0.0, 1e30, -1e30, 3.0e38, -3.0e38, 1e-30, -1e-30, 1.5, -1.5]


def conv(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    return dict(strides=strides, padding=padding, dilation=dilation, groups=groups)


def pool(k, s, p=(0, 0, 0, 0), ceil=0, dilation=(1, 1), **kw):
    return dict(pool_size=k, strides=s, padding=p, ceil_mode=ceil, dilation=dilation, **kw)


def _winograd_weight(rng, oihw, tile_size, ic_bn, oc_bn):
    """A random 3x3 weight transformed for nn.conv2d_winograd_nchwc (as AlterOpLayout does)."""
    from tvmc.ops.nn_conv2d_winograd import winograd_weight_transform

    return winograd_weight_transform(n(rng, oihw), tile_size, ic_bn, oc_bn)


def _packed_weight(rng, oihw, ic_bn, oc_bn):
    """A random 3x3 weight packed as for nn.conv2d_nchwc (nn.winograd_weight_transform's input)."""
    from tvmc.ops.nn_conv2d_nchwc import pack_weight

    return pack_weight(n(rng, oihw), ic_bn, oc_bn)


def bias_relu(c):
    return lambda rng: [("add", {}, [n(rng, (c, 1, 1))]), ("nn.relu", {}, [])]


def qi(rng, shape, dtype="int8"):
    """Uniform int8/uint8 samples with the type's extremes at the front (the widest products)."""
    info = np.iinfo(dtype)
    a = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    flat = a.reshape(-1)
    flat[:4] = [info.min, info.max, info.min, info.max][:flat.size]
    return a


def zp(value):
    """An int32 zero point (scalar or per channel) as qnn ops take it."""
    return np.asarray(value, np.int32)


def requantize(scale, zero_point, out_dtype, **attrs):
    """A qnn.requantize epilogue: (name, attrs, [scale, zero point])."""
    return ("qnn.requantize", dict(out_dtype=out_dtype, **attrs), [np.asarray(scale), zp(zero_point)])


CASES = [
    # --- nn.conv2d: data [N,C,H,W], weight [O,C/groups,KH,KW]
    Case("conv2d_3x3_pad1_bias_relu", "nn.conv2d", lambda r: [n(r, (1, 8, 15, 15)), n(r, (16, 8, 3, 3))],
         conv(padding=(1, 1, 1, 1)), bias_relu(16)),
    Case("conv2d_stride2_asym_pad", "nn.conv2d", lambda r: [n(r, (1, 8, 13, 13)), n(r, (12, 8, 3, 3))],
         conv(strides=(2, 2), padding=(0, 1, 1, 0))),
    Case("conv2d_stride2_pad_bottom_right", "nn.conv2d", lambda r: [n(r, (2, 3, 14, 14)), n(r, (5, 3, 3, 3))],
         conv(strides=(2, 2), padding=(0, 0, 2, 1))),
    Case("conv2d_dilation2", "nn.conv2d", lambda r: [n(r, (1, 4, 13, 13)), n(r, (8, 4, 3, 3))],
         conv(padding=(2, 2, 2, 2), dilation=(2, 2))),
    Case("conv2d_dilation_2x3_stride2", "nn.conv2d", lambda r: [n(r, (1, 4, 17, 19)), n(r, (6, 4, 3, 3))],
         conv(strides=(2, 2), padding=(1, 2, 1, 2), dilation=(2, 3))),
    Case("conv2d_groups2", "nn.conv2d", lambda r: [n(r, (1, 8, 9, 9)), n(r, (6, 4, 3, 3))],
         conv(padding=(1, 1, 1, 1), groups=2)),
    Case("conv2d_groups4_oc_per_group_3", "nn.conv2d", lambda r: [n(r, (2, 8, 7, 7)), n(r, (12, 2, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1), groups=4)),
    Case("conv2d_depthwise", "nn.conv2d", lambda r: [n(r, (1, 12, 13, 13)), n(r, (12, 1, 3, 3))],
         conv(padding=(1, 1, 1, 1), groups=12), bias_relu(12)),
    Case("conv2d_depthwise_stride2_dilation2", "nn.conv2d", lambda r: [n(r, (1, 7, 15, 15)), n(r, (7, 1, 3, 3))],
         conv(strides=(2, 2), padding=(2, 2, 2, 2), dilation=(2, 2), groups=7)),
    Case("conv2d_depthwise_multiplier2", "nn.conv2d", lambda r: [n(r, (1, 5, 9, 9)), n(r, (10, 1, 5, 5))],
         conv(padding=(2, 2, 2, 2), groups=5)),
    Case("conv2d_1x1", "nn.conv2d", lambda r: [n(r, (2, 16, 7, 7)), n(r, (24, 16, 1, 1))], conv()),
    Case("conv2d_1x1_stride2", "nn.conv2d", lambda r: [n(r, (1, 9, 13, 13)), n(r, (7, 9, 1, 1))],
         conv(strides=(2, 2))),
    Case("conv2d_7x7_stem", "nn.conv2d", lambda r: [n(r, (1, 3, 23, 23)), n(r, (8, 3, 7, 7))],
         conv(strides=(2, 2), padding=(3, 3, 3, 3))),
    Case("conv2d_wide_ow35_oc5", "nn.conv2d", lambda r: [n(r, (1, 3, 5, 37)), n(r, (5, 3, 3, 3))], conv()),
    Case("conv2d_ow17_oc13", "nn.conv2d", lambda r: [n(r, (1, 6, 4, 19)), n(r, (13, 6, 3, 3))], conv()),
    Case("conv2d_ow33_pad", "nn.conv2d", lambda r: [n(r, (1, 2, 3, 33)), n(r, (3, 2, 3, 3))],
         conv(padding=(1, 1, 1, 1))),
    Case("conv2d_1x1_output", "nn.conv2d", lambda r: [n(r, (1, 4, 3, 3)), n(r, (9, 4, 3, 3))], conv()),
    Case("conv2d_residual_add_relu", "nn.conv2d", lambda r: [n(r, (1, 8, 9, 9)), n(r, (8, 8, 3, 3))],
         conv(padding=(1, 1, 1, 1)),
         lambda r: [("add", {}, [n(r, (1, 8, 9, 9))]), ("nn.relu", {}, [])]),
    Case("conv2d_bias_residual_clip", "nn.conv2d", lambda r: [n(r, (2, 6, 7, 7)), n(r, (10, 6, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1)),
         lambda r: [("add", {}, [n(r, (10, 1, 1))]), ("add", {}, [n(r, (2, 10, 4, 4))]),
                    ("clip", dict(a_min=0.0, a_max=6.0), [])]),
    Case("conv2d_sigmoid_multiply_epilogue", "nn.conv2d", lambda r: [n(r, (1, 4, 8, 8)), n(r, (4, 4, 3, 3))],
         conv(padding=(1, 1, 1, 1)),
         lambda r: [("sigmoid", {}, []), ("multiply", {}, [n(r, (1, 4, 1, 1))])]),

    # --- nn.conv2d_nchwc: data [N,C//ib,H,W,ib], weight [O//ob,C//ib,KH,KW,ib,ob] (tests/ops/test_layout_ops.py
    # compares it with the NCHW reference in depth)
    Case("conv2d_nchwc_3x3_pad1_bias_relu", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 2, 9, 9, 8)), n(r, (2, 2, 3, 3, 8, 16))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW16c"),
         lambda r: [("add", {}, [n(r, (2, 1, 1, 16))]), ("nn.relu", {}, [])]),
    Case("conv2d_nchwc_depthwise_stride2", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 2, 11, 11, 8)), n(r, (2, 1, 3, 3, 1, 8))],
         dict(conv(strides=(2, 2), padding=(1, 1, 1, 1), groups=16), out_layout="NCHW8c")),
    # grouped (issue 30): ib divides C/g, ob divides O/g; one output block per group, then two (each
    # reading its group's input blocks: block oco // 2 of the groups' 4-channel inputs)
    Case("conv2d_nchwc_grouped_3x3_stride2_bias_relu", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 4, 9, 11, 4)), n(r, (2, 2, 3, 3, 4, 8))],
         dict(conv(strides=(2, 2), padding=(1, 1, 1, 1), groups=2), out_layout="NCHW8c"),
         lambda r: [("add", {}, [n(r, (2, 1, 1, 8))]), ("nn.relu", {}, [])]),
    Case("conv2d_nchwc_grouped_1x1_two_blocks_per_group", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 4, 6, 7, 4)), n(r, (8, 1, 1, 1, 4, 4))],
         dict(conv(groups=4), out_layout="NCHW4c")),

    # --- nn.dense: data [M,K], weight [N,K]
    Case("dense_n10_bias_relu", "nn.dense", lambda r: [n(r, (3, 40)), n(r, (10, 40))], {},
         lambda r: [("add", {}, [n(r, (10,))]), ("nn.relu", {}, [])]),
    Case("dense_n33_k257", "nn.dense", lambda r: [n(r, (5, 257)), n(r, (33, 257))]),
    Case("dense_m1_n1", "nn.dense", lambda r: [n(r, (1, 17)), n(r, (1, 17))]),
    Case("dense_n7_tanh", "nn.dense", lambda r: [n(r, (4, 9)), n(r, (7, 9))], {},
         lambda r: [("add", {}, [n(r, (1, 7))]), ("tanh", {}, [])]),
    # K a multiple of the lanes: the rfactor form (vector partial sums), with and without epilogue
    Case("dense_k64_n15_vector_partials", "nn.dense", lambda r: [n(r, (3, 64)), n(r, (15, 64))]),
    Case("dense_k48_n25_bias", "nn.dense", lambda r: [n(r, (2, 48)), n(r, (25, 48))], {},
         lambda r: [("add", {}, [n(r, (25,))])]),

    # --- nn.dense_pack: data [M,K], weight packed [N/bn, K, bn]
    Case("dense_pack_bn16_bias_relu", "nn.dense_pack", lambda r: [n(r, (1, 300)), n(r, (16, 300, 16))], {},
         lambda r: [("add", {}, [n(r, (256,))]), ("nn.relu", {}, [])]),
    Case("dense_pack_bn8_m3_125_blocks", "nn.dense_pack", lambda r: [n(r, (3, 50)), n(r, (125, 50, 8))]),
    Case("dense_pack_bn16_k1", "nn.dense_pack", lambda r: [n(r, (2, 1)), n(r, (3, 1, 16))]),
    Case("dense_pack_bn8_units13", "nn.dense_pack", lambda r: [n(r, (3, 20)), n(r, (2, 20, 8))], {"units": 13}),

    # --- nn.matmul: numpy matmul broadcasting
    Case("matmul_2d", "nn.matmul", lambda r: [n(r, (5, 7)), n(r, (7, 33))]),
    Case("matmul_2d_single_tile", "nn.matmul", lambda r: [n(r, (3, 4)), n(r, (4, 3))]),  # no outer tile loop
    Case("matmul_batched", "nn.matmul", lambda r: [n(r, (2, 5, 7)), n(r, (2, 7, 9))]),
    Case("matmul_broadcast_rhs_2d", "nn.matmul", lambda r: [n(r, (2, 5, 7)), n(r, (7, 9))]),
    Case("matmul_broadcast_both", "nn.matmul", lambda r: [n(r, (3, 1, 4, 6)), n(r, (5, 6, 17))]),
    Case("matmul_broadcast_lhs_bias", "nn.matmul", lambda r: [n(r, (6, 16)), n(r, (2, 16, 32))], {},
         lambda r: [("add", {}, [n(r, (32,))])]),
    # padded sums (AlterOpLayout's matmul_padding): ragged M and N, rows clamped, b's columns zero-padded,
    # the edge tiles' stores guarded; with an epilogue, and with a broadcast b
    Case("matmul_padded_m13_n37", "nn.matmul", lambda r: [n(r, (3, 13, 16)), n(r, (3, 16, 37))],
         {"padded": [16, 48]}, lambda r: [("multiply", {}, [n(r, (37,))])]),
    Case("matmul_padded_n_only_bcast", "nn.matmul", lambda r: [n(r, (2, 8, 5)), n(r, (5, 19))], {"padded": [8, 32]}),
    Case("matmul_padded_m_only", "nn.matmul", lambda r: [n(r, (11, 6)), n(r, (6, 16))], {"padded": [12, 16]}),
    # nn.matmul_tn (AlterOpLayout's grouped 1x1 convs with a short tail of columns): register tiles
    # over `columns`, the rest GEMVs along M; a^T wider than the rows it gives (zero-padded, as
    # AlterOpLayout stores it) or narrower than the padded rows (those read its last row)
    Case("matmul_tn_tail_bcast", "nn.matmul_tn", lambda r: [n(r, (2, 9, 20)), n(r, (3, 2, 9, 49))],
         {"rows": 17, "columns": 48, "padded_rows": 20}),
    Case("matmul_tn_rows_past_a", "nn.matmul_tn", lambda r: [n(r, (6, 13)), n(r, (6, 34))],
         {"columns": 32, "padded_rows": 16}),
    Case("matmul_tn_no_tail", "nn.matmul_tn", lambda r: [n(r, (4, 7, 5)), n(r, (4, 7, 16))], {"columns": 16}),

    # --- pooling
    Case("max_pool_3x3_s2_ceil", "nn.max_pool2d", lambda r: [n(r, (1, 5, 14, 14))], pool((3, 3), (2, 2), ceil=1)),
    Case("max_pool_3x3_s2_floor", "nn.max_pool2d", lambda r: [n(r, (1, 5, 14, 14))], pool((3, 3), (2, 2))),
    Case("max_pool_pad1_negative_input", "nn.max_pool2d", lambda r: [-np.abs(n(r, (2, 3, 9, 9))) - 1.0],
         pool((3, 3), (2, 2), (1, 1, 1, 1))),
    Case("max_pool_asym_pad_ceil", "nn.max_pool2d", lambda r: [n(r, (1, 4, 10, 11))],
         pool((3, 2), (2, 3), (0, 1, 1, 0), ceil=1)),
    Case("max_pool_2x2_dilation2", "nn.max_pool2d", lambda r: [n(r, (1, 3, 11, 11))],
         pool((2, 2), (1, 1), dilation=(2, 2))),
    Case("max_pool_ow_wide_relu", "nn.max_pool2d", lambda r: [n(r, (1, 2, 4, 70))], pool((2, 2), (2, 2)),
         lambda r: [("nn.relu", {}, [])]),
    *[Case(f"avg_pool_pad1_incl{inc}_ceil{ceil}", "nn.avg_pool2d", lambda r: [n(r, (1, 5, 10, 10))],
           pool((3, 3), (2, 2), (1, 1, 1, 1), ceil=ceil, count_include_pad=inc))
      for inc in (0, 1) for ceil in (0, 1)],
    *[Case(f"avg_pool_asym_pad_incl{inc}", "nn.avg_pool2d", lambda r: [n(r, (2, 3, 7, 9))],
           pool((3, 3), (2, 2), (0, 1, 2, 1), ceil=1, count_include_pad=inc)) for inc in (0, 1)],
    Case("avg_pool_2x2_s2_even", "nn.avg_pool2d", lambda r: [n(r, (1, 4, 16, 16))], pool((2, 2), (2, 2))),
    Case("global_avg_pool", "nn.global_avg_pool2d", lambda r: [n(r, (2, 5, 7, 9))]),
    Case("global_avg_pool_13x13_bias", "nn.global_avg_pool2d", lambda r: [n(r, (1, 19, 13, 13))], {},
         lambda r: [("add", {}, [n(r, (1, 19, 1, 1))])]),
    Case("global_max_pool", "nn.global_max_pool2d", lambda r: [-np.abs(n(r, (2, 5, 7, 9))) - 5.0]),
    Case("max_pool_nchw8c_3x3_s2_ceil", "nn.max_pool2d", lambda r: [n(r, (1, 2, 14, 14, 8))],
         pool((3, 3), (2, 2), ceil=1, layout="NCHW8c")),
    Case("avg_pool_nchw16c_pad1", "nn.avg_pool2d", lambda r: [n(r, (1, 1, 9, 9, 16))],
         pool((3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=0, layout="NCHW16c")),
    Case("global_avg_pool_nchw16c", "nn.global_avg_pool2d", lambda r: [n(r, (2, 2, 7, 7, 16))],
         dict(layout="NCHW16c")),

    # --- normalizations
    Case("softmax_2x1000_axis1", "nn.softmax", lambda r: [n(r, (2, 1000), 3.0)], dict(axis=1)),
    Case("softmax_rank3_middle_axis", "nn.softmax", lambda r: [n(r, (3, 7, 5), 2.0)], dict(axis=1)),
    Case("softmax_axis0", "nn.softmax", lambda r: [n(r, (4, 6))], dict(axis=0)),
    # rows of 6625 classes (PP-OCRv4's CTC head): lanes do not divide the row
    Case("softmax_1x3x6625_rows", "nn.softmax", lambda r: [n(r, (1, 3, 6625), 3.0)], dict(axis=2)),
    Case("softmax_large_logits", "nn.softmax", lambda r: [u(r, (2, 16), -80.0, 80.0) + 1e4], dict(axis=1)),
    Case("lrn_size5", "nn.lrn", lambda r: [n(r, (1, 10, 6, 7), 3.0)], dict(size=5, alpha=1e-2, beta=0.75, bias=1.0)),
    Case("lrn_size4_even", "nn.lrn", lambda r: [n(r, (2, 6, 5, 17))], dict(size=4, alpha=2e-4, beta=0.5, bias=2.0)),
    Case("batch_norm", "nn.batch_norm",
         lambda r: [n(r, (2, 6, 5, 5)), n(r, (6,)), n(r, (6,)), n(r, (6,)), u(r, (6,), 0.1, 2.0)],
         dict(epsilon=1e-5, axis=1)),

    # --- data movement
    Case("transpose_nchw_to_nhwc", "transpose", lambda r: [n(r, (2, 3, 5, 7))], dict(axes=(0, 2, 3, 1))),
    Case("transpose_3102", "transpose", lambda r: [n(r, (2, 3, 5, 17))], dict(axes=(3, 1, 0, 2))),
    Case("transpose_2d_large", "transpose", lambda r: [n(r, (67, 129))], dict(axes=(1, 0))),
    Case("reshape_flatten", "reshape", lambda r: [n(r, (2, 3, 5, 7))], dict(newshape=(2, 105))),
    Case("reshape_regroup", "reshape", lambda r: [n(r, (2, 3, 5, 7))], dict(newshape=(6, 5, 7, 1))),
    # runs of axes raveled on their own (tvmc.ops.transform.aligned_groups): a split and a merge,
    # two runs that share no boundary, unit axes on both sides
    Case("reshape_split_merge", "reshape", lambda r: [n(r, (2, 12, 5, 7))], dict(newshape=(2, 3, 4, 35))),
    Case("reshape_unaligned", "reshape", lambda r: [n(r, (6, 4, 5))], dict(newshape=(4, 6, 5))),
    Case("reshape_unit_axes", "reshape", lambda r: [n(r, (1, 6, 1, 5))], dict(newshape=(6, 5, 1))),
    Case("concatenate_3_axis1", "concatenate",
         lambda r: [n(r, (1, 3, 5, 5)), n(r, (1, 5, 5, 5)), n(r, (1, 1, 5, 5))], dict(axis=1)),
    Case("concatenate_3_last_axis", "concatenate",
         lambda r: [n(r, (2, 3)), n(r, (2, 16)), n(r, (2, 5))], dict(axis=1)),
    # channel blocks of NCHW8c / NCHW16c tensors (schedule_blocked_loops: rows of one input each)
    Case("concatenate_blocked_channels", "concatenate",
         lambda r: [n(r, (2, 1, 3, 5, 8)), n(r, (2, 3, 3, 5, 8)), n(r, (2, 2, 3, 5, 8))], dict(axis=1)),
    Case("concatenate_blocked_width", "concatenate",
         lambda r: [n(r, (1, 2, 3, 5, 16)), n(r, (1, 2, 3, 2, 16))], dict(axis=3)),
    Case("concatenate_3_axis0", "concatenate",
         lambda r: [n(r, (1, 4, 33)), n(r, (2, 4, 33)), n(r, (3, 4, 33))], dict(axis=0)),
    Case("layout_transform_nchw_to_nchw16c", "layout_transform", lambda r: [n(r, (2, 32, 5, 7))],
         dict(src_layout="NCHW", dst_layout="NCHW16c")),
    Case("layout_transform_nchw8c_to_nchw", "layout_transform", lambda r: [n(r, (1, 3, 5, 7, 8))],
         dict(src_layout="NCHW8c", dst_layout="NCHW")),
    # ShuffleNet's channel shuffle in a blocked layout (issue 30): 12 channels in 3 groups of 4, block 4
    # (each output block gathers from three input blocks), and NCHW with 2 groups
    Case("channel_shuffle_nchw4c_3_groups", "channel_shuffle", lambda r: [n(r, (1, 3, 5, 7, 4))],
         dict(groups=3, layout="NCHW4c")),
    Case("channel_shuffle_nchw_2_groups", "channel_shuffle", lambda r: [n(r, (2, 6, 3, 5))],
         dict(groups=2, layout="NCHW")),
    Case("layout_transform_nchw16c_to_nchw8c", "layout_transform", lambda r: [n(r, (1, 2, 3, 5, 16))],
         dict(src_layout="NCHW16c", dst_layout="NCHW8c")),
    Case("pad_spatial_asym", "pad", lambda r: [n(r, (1, 3, 5, 7))],
         dict(pad_width=((0, 0), (0, 0), (1, 2), (3, 0)), pad_value=0.0)),
    Case("pad_value_all_axes", "pad", lambda r: [n(r, (2, 3, 4))],
         dict(pad_width=((1, 0), (0, 2), (5, 6)), pad_value=-1.5)),

    # --- elementwise, broadcast
    Case("add_bcast_channel", "add", lambda r: [n(r, (1, 6, 1, 1)), n(r, (2, 6, 5, 17))]),
    Case("add_bcast_large_parallel", "add", lambda r: [n(r, (4, 8, 16, 32)), n(r, (1, 8, 1, 1))]),
    Case("add_scalar_0d", "add", lambda r: [n(r, (3, 100)), np.array(2.5, np.float32)]),
    Case("add_large_magnitudes", "add", lambda r: [edges(r, (4, 20), BIG), edges(r, (4, 20), BIG[::-1])]),
    Case("subtract_scalar_lhs", "subtract", lambda r: [np.array([-0.5], np.float32), n(r, (2, 3, 4, 5))]),
    Case("subtract_bcast_rows", "subtract", lambda r: [n(r, (7, 1)), n(r, (1, 9))]),
    Case("multiply_bcast_last", "multiply", lambda r: [edges(r, (3, 4, 19), BIG), n(r, (19,))]),
    Case("divide_float", "divide", lambda r: [edges(r, (5, 31), BIG), u(r, (5, 31), 0.5, 4.0)]),
    Case("divide_int64_trunc", "divide",
         lambda r: [r.integers(-100, 100, (4, 17)).astype(np.int64),
                    np.array([3, -3, 7, -1], np.int64).reshape(4, 1)]),
    Case("maximum_bcast", "maximum", lambda r: [edges(r, (2, 1, 40), BIG), n(r, (3, 1))]),
    Case("minimum_bcast", "minimum", lambda r: [n(r, (5, 1, 1)), edges(r, (2, 13), BIG)]),
    Case("relu", "nn.relu", lambda r: [edges(r, (2, 3, 5, 17), BIG)]),
    Case("leaky_relu", "nn.leaky_relu", lambda r: [edges(r, (4, 33), BIG)], dict(alpha=0.1)),
    Case("clip", "clip", lambda r: [edges(r, (3, 50), BIG, 3.0)], dict(a_min=-1.0, a_max=2.5)),
    Case("sigmoid", "sigmoid", lambda r: [edges(r, (4, 64), [0.0, -0.0, 100.0, -100.0, 88.0, -88.0], 10.0)]),
    Case("tanh", "tanh", lambda r: [edges(r, (4, 64), [0.0, -0.0, 1e4, -1e4, 1e-6, -1e-6, 20.0], 5.0)]),
    Case("exp", "exp", lambda r: [edges(r, (3, 40), [0.0, -0.0, 80.0, -80.0, 88.0, -87.0], 20.0)]),
    Case("sqrt", "sqrt", lambda r: [np.abs(edges(r, (2, 77), [0.0, -0.0, 3e38, 1e-30, 4.0], 100.0))]),
    Case("negative", "negative", lambda r: [edges(r, (5, 18), BIG)]),
    Case("abs", "abs", lambda r: [edges(r, (5, 18), BIG)]),
    Case("identity_then_relu", "identity", lambda r: [n(r, (3, 5))], {}, lambda r: [("nn.relu", {}, [])]),
    Case("dropout_inference", "nn.dropout", lambda r: [n(r, (3, 70))]),
    Case("cast_f32_to_i64", "cast",
         lambda r: [edges(r, (3, 21), [0.0, -0.0, 1.5, -1.5, 2.9999, -2.9999, 1e15, -1e15, 2.0**62, 0.49], 1e3)],
         dict(dtype="int64")),
    Case("cast_i64_to_f32", "cast",
         lambda r: [np.concatenate([np.array([0, -1, 2**24 + 1, -(2**24 + 3), 2**40 + 7, -(2**53), 2**62],
                                             np.int64), r.integers(-10**12, 10**12, 57)]).reshape(4, 16)],
         dict(dtype="float32")),
    Case("cast_i64_to_f32_chain_multiply", "cast", lambda r: [r.integers(-1000, 1000, (2, 3, 20)).astype(np.int64)],
         dict(dtype="float32"), lambda r: [("multiply", {}, [np.array(0.5, np.float32)])]),

    # --- other dtypes
    Case("conv2d_float64", "nn.conv2d", lambda r: [n(r, (1, 3, 9, 9)).astype(np.float64),
                                                   n(r, (4, 3, 3, 3)).astype(np.float64)],
         conv(strides=(2, 2), padding=(1, 1, 1, 1))),
    Case("add_float64_bcast", "add", lambda r: [n(r, (2, 3, 19)).astype(np.float64), n(r, (3, 1)).astype(np.float64)]),
    Case("sqrt_float64", "sqrt", lambda r: [np.abs(n(r, (3, 20))).astype(np.float64)]),
    Case("exp_float64", "exp", lambda r: [n(r, (3, 20)).astype(np.float64)]),
    Case("sigmoid_float64", "sigmoid", lambda r: [n(r, (3, 20)).astype(np.float64)]),
    Case("tanh_erf_float64", "tanh", lambda r: [n(r, (3, 20), 3.0).astype(np.float64)],
         chain=lambda r: [("erf", {}, [])]),
    Case("log_float64", "log", lambda r: [np.abs(n(r, (3, 20), 10.0)).astype(np.float64) + 1e-300]),
    Case("add_int32_bcast", "add", lambda r: [r.integers(-2**30, 2**30, (3, 21)).astype(np.int32),
                                              r.integers(-2**30, 2**30, (21,)).astype(np.int32)]),
    Case("multiply_int8_wraps", "multiply", lambda r: [r.integers(-128, 128, (4, 16)).astype(np.int8),
                                                       r.integers(-128, 128, (4, 16)).astype(np.int8)]),
    Case("add_uint8_wraps", "add", lambda r: [r.integers(0, 256, (2, 40)).astype(np.uint8),
                                              r.integers(0, 256, (2, 40)).astype(np.uint8)]),
    Case("cast_uint8_to_f32", "cast", lambda r: [np.arange(256, dtype=np.uint8).reshape(4, 64)],
         dict(dtype="float32")),
    Case("cast_f32_to_int32", "cast", lambda r: [edges(r, (3, 20), [0.0, -0.0, 2.5, -2.5, 2.0**30], 1e4)],
         dict(dtype="int32")),
    Case("maximum_int64_large", "maximum",
         lambda r: [r.integers(-2**62, 2**62, (3, 17)), r.integers(-2**62, 2**62, (17,))]),
    Case("subtract_int32", "subtract", lambda r: [r.integers(-1000, 1000, (2, 17)).astype(np.int32),
                                                  r.integers(-1000, 1000, (2, 17)).astype(np.int32)]),
    Case("negative_int8", "negative", lambda r: [r.integers(-127, 128, (2, 16)).astype(np.int8)]),
    Case("maximum_uint8", "maximum", lambda r: [np.array([200, 100, 3, 255, 0, 129, 127, 128], np.uint8),
                                                np.array([100, 200, 250, 1, 255, 2, 128, 127], np.uint8)]),
    Case("divide_uint8", "divide", lambda r: [np.array([200, 100, 255, 129, 7, 128, 254, 9], np.uint8),
                                              np.array([100, 3, 1, 2, 7, 200, 127, 130], np.uint8)]),
    Case("add_float16_bcast", "add", lambda r: [n(r, (2, 3, 19)).astype(np.float16), n(r, (3, 1)).astype(np.float16)]),
    Case("exp_tanh_float16", "exp", lambda r: [n(r, (3, 40), 3.0).astype(np.float16)],
         chain=lambda r: [("tanh", {}, [])]),
    Case("multiply_float16_overflows_to_inf", "multiply",
         lambda r: [np.array([300.0, -300.0, 2.0, 65504.0, 1e-4, -0.0, 3.0, 0.1], np.float16),
                    np.array([300.0, 300.0, 0.5, 1.0, 1e-4, 1.0, 1 / 3, 0.1], np.float16)]),
    Case("sum_float16_accumulates_in_float32", "sum", lambda r: [u(r, (2, 3000), 0.5, 1.5, np.float16)],
         dict(axis=(1,), keepdims=0)),
    Case("softmax_float16", "nn.softmax", lambda r: [n(r, (3, 40), 4.0).astype(np.float16)], dict(axis=1)),
    Case("cast_f32_to_f16_rounds", "cast",
         lambda r: [np.array([1 + 2**-11, 1 + 3 * 2**-11, 65520.0, -65519.0, 1e-8, 6e-5, np.inf, np.nan], np.float32)],
         dict(dtype="float16"), tol=dict(rtol=0, atol=0)),  # conversions are exact: ties to even
    Case("cast_f16_to_int8", "cast", lambda r: [np.array([1.5, -1.5, 127.0, -128.0, 0.0, 3.75, -7.25, 100.5],
                                                         np.float16)], dict(dtype="int8")),
    Case("cast_i64_to_f16", "cast", lambda r: [np.array([2049, 2051, -70000, 65519, 7, 0, -1, 4097], np.int64)],
         dict(dtype="float16"), tol=dict(rtol=0, atol=0)),
    Case("cast_f64_to_uint32_above_int32", "cast",
         lambda r: [np.array([0.0, 1.5, 2.0**31, 2.0**32 - 1, 3e9, 7.9, 2.0**31 + 0.5, 12345.0])],
         dict(dtype="uint32")),
    Case("cast_uint64_to_f64", "cast", lambda r: [np.array([0, 1, 2**63, 2**64 - 1, 2**53 + 1, 9, 2**40, 77],
                                                           np.uint64)], dict(dtype="float64")),
    Case("maximum_uint32_above_int32", "maximum",
         lambda r: [np.array([2**31, 5, 2**32 - 1, 0, 2**31 - 1, 7, 8, 9], np.uint32),
                    np.array([2**31 - 1, 2**32 - 1, 3, 2**31, 2**31, 6, 9, 8], np.uint32)]),
    Case("divide_uint64_large", "divide",
         lambda r: [np.array([2**64 - 1, 2**63, 10, 7, 2**63 + 5, 1, 0, 99], np.uint64),
                    np.array([2, 2**62, 3, 7, 2**63, 2, 5, 10], np.uint64)]),
    Case("greater_uint16", "greater", lambda r: [r.integers(0, 2**16, (3, 17)).astype(np.uint16),
                                                 r.integers(0, 2**16, (17,)).astype(np.uint16)]),
    Case("multiply_int16_wraps", "multiply", lambda r: [r.integers(-2**15, 2**15, (4, 16)).astype(np.int16),
                                                        r.integers(-2**15, 2**15, (4, 16)).astype(np.int16)]),
    Case("max_pool2d_uint8", "nn.max_pool2d", lambda r: [r.integers(0, 256, (1, 2, 7, 7)).astype(np.uint8)],
         pool((3, 3), (2, 2), (1, 1, 1, 1))),
    Case("max_pool2d_float64_pad", "nn.max_pool2d", lambda r: [-np.abs(n(r, (1, 2, 7, 7))).astype(np.float64) - 1e300],
         pool((3, 3), (2, 2), (1, 1, 1, 1))),
    Case("relu_int64", "nn.relu", lambda r: [r.integers(-100, 100, (3, 17))]),
    Case("clip_int32", "clip", lambda r: [r.integers(-100, 100, (3, 17)).astype(np.int32)],
         dict(a_min=-5.0, a_max=7.0)),
    Case("abs_int64", "abs", lambda r: [r.integers(-100, 100, (3, 17))]),

    # --- conformance operators (ONNX backend node cases; tvmc/conformance.py)
    Case("log", "log", lambda r: [np.abs(edges(r, (3, 40), [1.0, 1e-30, 3e38], 10.0)) + 1e-3]),
    Case("floor", "floor", lambda r: [edges(r, (2, 33), [0.5, -0.5, -0.0, 2.0], 5.0)]),
    Case("ceil", "ceil", lambda r: [edges(r, (2, 33), [0.5, -0.5, -0.0, 2.0], 5.0)]),
    Case("erf", "erf", lambda r: [edges(r, (3, 40), [0.0, -0.0, 5.0, -5.0], 2.0)]),
    Case("gelu", "nn.gelu", lambda r: [edges(r, (3, 40), [0.0, -0.0, 6.0, -6.0, 1e4, -1e4], 3.0)]),
    Case("elu", "nn.elu", lambda r: [edges(r, (3, 21), BIG)], dict(alpha=0.7)),
    Case("selu", "nn.selu", lambda r: [n(r, (3, 21), 3.0)], dict(alpha=1.6732632, gamma=1.050701)),
    Case("power_float", "power", lambda r: [u(r, (3, 17), 0.1, 4.0), n(r, (17,))]),
    Case("power_int64", "power", lambda r: [r.integers(-5, 6, (2, 9)), r.integers(0, 5, (2, 9))]),
    Case("prelu_channel_slope", "nn.prelu", lambda r: [n(r, (2, 3, 4, 5)), n(r, (3, 1, 1))]),
    *[Case(f"{op}_bcast", op, lambda r: [np.round(n(r, (3, 1, 7))), np.round(n(r, (4, 1)))])
      for op in ("equal", "less", "less_equal", "greater", "greater_equal")],
    *[Case(f"{op}_bool", op, lambda r: [n(r, (3, 17)) > 0, n(r, (17,)) > 0])
      for op in ("logical_and", "logical_or", "logical_xor")],
    Case("logical_not", "logical_not", lambda r: [n(r, (5, 13)) > 0]),
    Case("where_bcast", "where", lambda r: [n(r, (3, 1)) > 0, n(r, (3, 9)), n(r, (9,))]),
    Case("sum_axis1_keepdims", "sum", lambda r: [n(r, (3, 40, 5))], dict(axis=(1,), keepdims=1)),
    Case("sum_all_int64", "sum", lambda r: [r.integers(-100, 100, (4, 9))], dict(axis=(0, 1), keepdims=0)),
    Case("max_axes02", "max", lambda r: [edges(r, (3, 4, 5), BIG)], dict(axis=(0, 2), keepdims=0)),
    Case("min_last_int32", "min", lambda r: [r.integers(-2**31, 2**31 - 1, (3, 8)).astype(np.int32)],
         dict(axis=(1,), keepdims=1)),
    Case("prod_axis0", "prod", lambda r: [u(r, (4, 6), 0.5, 1.5)], dict(axis=(0,), keepdims=0)),
    Case("mean_spatial", "mean", lambda r: [n(r, (2, 3, 7, 9))], dict(axis=(2, 3), keepdims=1)),
    Case("argmax_ties_first", "argmax", lambda r: [np.round(n(r, (3, 6, 4)))], dict(axis=1, keepdims=0)),
    Case("argmin_ties_last", "argmin", lambda r: [np.round(n(r, (3, 6, 4)))],
         dict(axis=2, keepdims=1, select_last_index=1)),
    Case("cumsum_exclusive_reverse", "cumsum", lambda r: [n(r, (3, 9))], dict(axis=1, exclusive=1, reverse=1)),
    Case("cumsum_axis0", "cumsum", lambda r: [n(r, (5, 4))], dict(axis=0)),
    Case("strided_slice_negative_step", "strided_slice", lambda r: [n(r, (5, 8, 3))],
         dict(begin=(1, 7, 0), end=(4, -1, 3), strides=(2, -3, 1))),
    Case("take_negative_indices", "take", lambda r: [n(r, (3, 5, 4)), np.array([[0, -1], [4, 2]], np.int64)],
         dict(axis=1)),
    Case("broadcast_to", "broadcast_to", lambda r: [n(r, (3, 1))], dict(shape=(2, 3, 17))),
    Case("mirror_pad_reflect", "mirror_pad", lambda r: [n(r, (2, 4, 5))],
         dict(pad_width=((0, 0), (3, 1), (2, 4)), mode="reflect")),
    Case("mirror_pad_edge", "mirror_pad", lambda r: [n(r, (2, 3))], dict(pad_width=((2, 1), (0, 5)), mode="edge")),
    Case("log_softmax_axis1", "nn.log_softmax", lambda r: [n(r, (3, 7, 5), 3.0)], dict(axis=1)),
    Case("topk_values_largest_ties", "topk_values", lambda r: [np.round(n(r, (3, 9)))], dict(axis=1, k=4, largest=1)),
    Case("topk_indices_smallest_axis0_ties", "topk_indices", lambda r: [np.round(n(r, (7, 5)))],
         dict(axis=0, k=3, largest=0)),
    Case("conv2d_transpose_s2_pad_outpad_bias_relu", "nn.conv2d_transpose",
         lambda r: [n(r, (1, 6, 5, 7)), n(r, (6, 4, 3, 3))],
         dict(strides=(2, 2), padding=(1, 0, 1, 2), dilation=(1, 1), output_padding=(1, 1), groups=1), bias_relu(4)),
    Case("conv2d_transpose_groups2_dilation2_s3", "nn.conv2d_transpose",
         lambda r: [n(r, (2, 4, 4, 3)), n(r, (4, 3, 2, 3))],
         dict(strides=(3, 2), padding=(0, 0, 0, 0), dilation=(2, 2), output_padding=(0, 0), groups=2)),
    Case("conv2d_transpose_negative_pad", "nn.conv2d_transpose", lambda r: [n(r, (1, 2, 3, 3)), n(r, (2, 5, 3, 3))],
         dict(strides=(2, 2), padding=(0, -1, -2, 1), dilation=(1, 1), output_padding=(0, 0), groups=1)),
    Case("resize2d_nearest_2x", "image.resize2d",
         lambda r: [n(r, (1, 3, 5, 7)), np.repeat(np.arange(5), 2)[:, None], np.repeat(np.arange(7), 2)[:, None]]),
    Case("resize2d_linear_h_cubic_w", "image.resize2d", lambda r: [n(r, (2, 3, 4, 6))] + _resize_tables(r, 4, 6)),

    # --- classification, rounding, trigonometric, bitwise, remainders
    Case("isnan_float16", "isnan",
         lambda r: [np.array([np.nan, 0.0, -np.inf, 1.0, np.nan, -0.0, 65504, 3], np.float16)]),
    Case("isinf_positive_only", "isinf", lambda r: [edges(r, (3, 8), [np.inf, -np.inf, np.nan, 0.0, 3e38])],
         dict(detect_positive=1, detect_negative=0)),
    Case("isinf_float64", "isinf", lambda r: [edges(r, (2, 9), [np.inf, -np.inf, np.nan, 1e308]).astype(np.float64)]),
    Case("sign_with_nan_and_zero", "sign", lambda r: [edges(r, (3, 8), [0.0, -0.0, np.nan, -np.inf, 1e-30])]),
    Case("sign_int32", "sign", lambda r: [r.integers(-5, 5, (3, 16)).astype(np.int32)]),
    Case("round_half_to_even", "round", lambda r: [np.concatenate([np.arange(-8, 8) / 2, r.normal(0, 10, 16)])
                                                     .astype(np.float32)]),
    *[Case(f"{name}_float32", name, lambda r, lo=lo, hi=hi: [u(r, (3, 24), lo, hi)]) for name, lo, hi in (
        ("sin", -20, 20), ("cos", -20, 20), ("tan", -1.5, 1.5), ("asin", -1, 1), ("acos", -1, 1), ("atan", -20, 20),
        ("sinh", -10, 10), ("cosh", -10, 10), ("asinh", -50, 50), ("acosh", 1, 50), ("atanh", -0.99, 0.99))],
    Case("sin_cos_float64", "sin", lambda r: [u(r, (2, 16), -50, 50, np.float64)], chain=lambda r: [("cos", {}, [])]),
    Case("bitwise_and_uint16_bcast", "bitwise_and", lambda r: [r.integers(0, 2**16, (3, 17)).astype(np.uint16),
                                                               r.integers(0, 2**16, (17,)).astype(np.uint16)]),
    Case("bitwise_or_int64", "bitwise_or", lambda r: [r.integers(-2**62, 2**62, (2, 9)),
                                                      r.integers(-2**62, 2**62, (2, 9))]),
    Case("bitwise_xor_int8", "bitwise_xor", lambda r: [r.integers(-128, 128, (2, 16)).astype(np.int8),
                                                       r.integers(-128, 128, (2, 16)).astype(np.int8)]),
    Case("bitwise_not_uint64_int32", "bitwise_not",
         lambda r: [np.array([0, 1, 2**64 - 1, 2**63, 5, 6, 7, 8], np.uint64)]),
    Case("bitwise_not_int32", "bitwise_not", lambda r: [r.integers(-2**31, 2**31, (2, 16)).astype(np.int32)]),
    Case("left_shift_int8_out_of_range", "left_shift",
         lambda r: [np.array([-8, 4, -1, 1, 64, 3, -128, 7], np.int8), np.array([8, 9, 127, 7, 1, -1, 1, 0], np.int8)]),
    Case("right_shift_int32_sign_fill", "right_shift",
         lambda r: [np.array([-8, 4, -1, 1 << 30, -2**31, 3, 7, 9], np.int32),
                    np.array([32, 33, 100, 30, 31, -1, 1, 0], np.int32)]),
    Case("right_shift_uint64", "right_shift", lambda r: [np.array([2**64 - 1, 16, 4, 1, 2**63, 5, 6, 7], np.uint64),
                                                         np.array([63, 1, 2, 3, 64, 0, 1, 2], np.uint64)]),
    Case("trunc_mod_float32", "trunc_mod", lambda r: [u(r, (3, 16), -10, 10), u(r, (16,), 0.5, 3) *
                                                      np.where(np.arange(16) % 2, 1, -1).astype(np.float32)]),
    Case("floor_mod_float16_edges", "floor_mod",
         lambda r: [np.array([5, -5, 5, -5, 0, -0.0, np.inf, 3, 7.5, -7.5, 1, 2], np.float16),
                    np.array([3, 3, -3, -3, 2, 2, 2, np.inf, -np.inf, 2.5, 0, -2], np.float16)]),
    Case("floor_mod_int32_mixed_signs", "floor_mod", lambda r: [np.array([5, -5, 5, -5, 0, 7, -7, 9], np.int32),
                                                                np.array([3, 3, -3, -3, 2, -7, 7, 1], np.int32)]),
    Case("trunc_mod_uint8", "trunc_mod", lambda r: [np.array([5, 255, 128, 0, 7, 9, 3, 200], np.uint8),
                                                    np.array([3, 16, 127, 2, 7, 10, 1, 3], np.uint8)]),
    Case("reinterpret_f32_int32", "reinterpret", lambda r: [edges(r, (3, 8), [0.0, -0.0, np.inf, np.nan, 1e-40])],
         dict(dtype="int32")),
    Case("reinterpret_int16_float16", "reinterpret", lambda r: [r.integers(-2**15, 2**15, (2, 16)).astype(np.int16)],
         dict(dtype="float16"), tol=dict(rtol=0, atol=0)),
    # --- grid_sample (checked against onnxruntime by the GridSample conformance cases)
    Case("grid_sample_linear_zeros", "image.grid_sample", lambda r: [n(r, (2, 3, 5, 6)), u(r, (2, 4, 7, 2), -1.3, 1.3)],
         dict(mode="linear", padding_mode="zeros", align_corners=0)),
    Case("grid_sample_cubic_reflection_aligned", "image.grid_sample",
         lambda r: [n(r, (1, 2, 4, 5)), u(r, (1, 3, 6, 2), -2.5, 2.5)],
         dict(mode="cubic", padding_mode="reflection", align_corners=1)),
    Case("grid_sample_nearest_border_3d", "image.grid_sample",
         lambda r: [n(r, (1, 2, 3, 4, 5)), u(r, (1, 2, 3, 4, 3), -1.5, 1.5)],
         dict(mode="nearest", padding_mode="border", align_corners=0)),
    # --- gathers, scatters, cumulative products
    Case("gather_elements_axis1_negative", "gather_elements",
         lambda r: [n(r, (3, 5, 4)), r.integers(-5, 5, (3, 2, 4))], dict(axis=1)),
    Case("gather_nd_batch_dims1", "gather_nd", lambda r: [n(r, (2, 3, 4, 5)), r.integers(-3, 3, (2, 6, 2))],
         dict(batch_dims=1)),
    Case("gather_nd_full_index_int32", "gather_nd", lambda r: [n(r, (4, 5)), r.integers(0, 4, (3, 2)).astype(np.int32)
                                                               % np.array([4, 5], np.int32)], dict(batch_dims=0)),
    Case("scatter_elements_none_smaller_updates", "scatter_elements",
         lambda r: [n(r, (4, 6)), np.array([[1, 3, 0], [2, -1, 5]], np.int64), n(r, (2, 3))], dict(axis=1)),
    Case("scatter_elements_add_duplicates", "scatter_elements",
         lambda r: [n(r, (5, 3)), np.array([[1, 1, 4], [1, 0, 4]], np.int64), n(r, (2, 3))],
         dict(axis=0, reduction="add")),
    Case("scatter_elements_max_int32", "scatter_elements",
         lambda r: [r.integers(-9, 9, (3, 4)).astype(np.int32), np.array([[0, 0, 3, 3]] * 3, np.int64),
                    r.integers(-9, 9, (3, 4)).astype(np.int32)], dict(axis=1, reduction="max")),
    Case("scatter_nd_rows", "scatter_nd",
         lambda r: [n(r, (5, 3, 2)), np.array([[4], [0], [-2]], np.int64), n(r, (3, 3, 2))], dict(reduction="none")),
    Case("scatter_nd_elements_mul", "scatter_nd",
         lambda r: [n(r, (3, 4)), np.array([[[0, 1], [2, 3]], [[0, 1], [1, 1]]], np.int64), n(r, (2, 2))],
         dict(reduction="mul")),
    Case("tensor_scatter_circular", "tensor_scatter",
         lambda r: [n(r, (2, 3, 6, 4)), n(r, (2, 3, 3, 4)), np.array([1, 5], np.int64)],
         dict(axis=2, mode="circular")),
    Case("tensor_scatter_linear", "tensor_scatter",
         lambda r: [n(r, (2, 5, 3)), n(r, (2, 2, 3)), np.array([0, 3], np.int64)], dict(axis=1, mode="linear")),
    Case("reverse_sequence_time_major", "reverse_sequence",
         lambda r: [n(r, (5, 3, 2)), np.array([5, 0, 2], np.int64)], dict(batch_axis=1, time_axis=0)),
    Case("cumprod_exclusive_reverse", "cumprod", lambda r: [u(r, (3, 7), 0.5, 1.5)],
         dict(axis=1, exclusive=1, reverse=1)),
    Case("cumprod_int64", "cumprod", lambda r: [r.integers(-3, 4, (4, 5))], dict(axis=0)),
    Case("mirror_pad_wrap", "mirror_pad", lambda r: [n(r, (2, 3, 4))],
         dict(pad_width=((0, 0), (2, 5), (1, 3)), mode="wrap")),
    Case("reinterpret_bool_uint8", "reinterpret", lambda r: [r.integers(0, 2, (2, 9)).astype(bool)],
         dict(dtype="uint8")),
    # --- issue 18, nn group: 3-D ConvTranspose, MaxPool Indices, Col2Im (DeformConv and MaxUnpool are made of
    # existing ops: tests/frontend)
    Case("conv3d_transpose_s2_groups2_neg_pad", "nn.conv3d_transpose",
         lambda r: [n(r, (1, 4, 3, 4, 3)), n(r, (4, 3, 2, 3, 2))],
         dict(strides=(2, 1, 2), padding=(1, 0, -1, 0, 2, 1), dilation=(1, 2, 1), output_padding=(1, 0, 0), groups=2),
         lambda r: [("add", {}, [n(r, (6, 1, 1, 1))])]),
    Case("max_pool2d_indices_ties_pad_dilation", "nn.max_pool2d_indices",
         lambda r: [r.integers(-3, 3, (2, 3, 7, 8)).astype(np.float32)],
         pool((3, 2), (2, 3), (1, 0, 2, 1), ceil=1, dilation=(2, 1))),
    Case("max_pool2d_indices_storage_order_col_major", "nn.max_pool2d_indices", lambda r: [n(r, (1, 2, 5, 6))],
         pool((2, 3), (2, 2), (1, 1, 1, 1), storage_order=1)),
    Case("col2im_strides_dilation_pads", "nn.col2im", lambda r: [n(r, (2, 18, 9))],
         dict(image_shape=(7, 8), block_shape=(3, 2), strides=(2, 3), dilation=(2, 1), padding=(1, 0, 2, 2))),
    Case("col2im_3d", "nn.col2im", lambda r: [n(r, (1, 12, 48))],
         dict(image_shape=(4, 5, 6), block_shape=(2, 1, 3), strides=(1, 2, 2), dilation=(1, 1, 2),
              padding=(0, 1, 2, 1, 0, 3)), slow="a second col2im rank: the first case covers the math"),
    # issue 18, group B (misc ops): det
    Case("det_pivots_singular", "det", lambda r: [_det_matrices(r)]),
    Case("det_float64_single", "det", lambda r: [r.standard_normal((3, 3))]),
    # issue 29: ONNX Range and shape values read as data, with static attributes (their symbolic
    # forms take size variables as kernel arguments: tests/ops/test_symbolic_kernels.py); no
    # inputs, so an add gives the kernel one
    Case("arange_int64_negative_start_step3", "arange", lambda r: [],
         dict(start=-4, step=3, length=10, dtype="int64"),
         lambda r: [("add", {}, [r.integers(-5, 5, (10,)).astype(np.int64)])]),
    Case("shape_to_tensor_int64", "shape_to_tensor", lambda r: [], dict(values=(2, 7, 5), shape=(3,), dtype="int64"),
         lambda r: [("add", {}, [r.integers(-5, 5, (3,)).astype(np.int64)])]),
    Case("det_batch_2x3_7x7", "det", lambda r: [n(r, (2, 3, 7, 7))], slow="19 elimination stages per target"),
    # --- issue 15 point 6 (wasm speed): conv2d_nchwc register tiles of several output channel
    # blocks (tile_oc; wasm's fallback picks tile_oc = 4, tile_ow = 4 here)
    Case("conv2d_nchwc_4_oc_blocks_3x3", "nn.conv2d_nchwc",
         lambda r: [n(r, (1, 2, 5, 8, 4)), n(r, (4, 2, 3, 3, 4, 4))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW4c"),
         lambda r: [("add", {}, [n(r, (4, 1, 1, 4))]), ("nn.relu", {}, [])]),
    # --- issue 15 point 6, part 2 (wasm speed): Winograd conv2d F(2x2,3x3) and F(4x4,3x3); OH, OW odd
    # (partial output tiles), the weight transformed as AlterOpLayout does
    Case("conv2d_winograd_nchwc_f2_bias_relu", "nn.conv2d_winograd_nchwc",
         lambda r: [n(r, (1, 2, 7, 9, 4)), _winograd_weight(r, (8, 8, 3, 3), 2, 4, 4)],
         dict(padding=(1, 1, 1, 1), tile_size=2, out_layout="NCHW4c"),
         lambda r: [("add", {}, [n(r, (2, 1, 1, 4))]), ("nn.relu", {}, [])]),
    Case("conv2d_winograd_nchwc_f4_no_pad", "nn.conv2d_winograd_nchwc",
         lambda r: [n(r, (1, 2, 11, 7, 4)), _winograd_weight(r, (4, 8, 3, 3), 4, 4, 4)],
         dict(padding=(0, 0, 0, 0), tile_size=4, out_layout="NCHW4c")),
    # the weight transforms that the executors run at load time (F(2x2) and F(4x4) constants)
    Case("winograd_weight_transform_f2", "nn.winograd_weight_transform",
         lambda r: [_packed_weight(r, (8, 12, 3, 3), 4, 4)], dict(tile_size=2)),
    Case("winograd_weight_transform_f4", "nn.winograd_weight_transform",
         lambda r: [_packed_weight(r, (16, 8, 3, 3), 8, 8)], dict(tile_size=4)),
    # --- data-dependent shapes (issue 18 point 5, dyn-shapes): outputs padded to their bound, and
    # their run-time shapes; a dynamic output followed by shape-preserving elementwise ops
    Case("nonzero_3d_cast_add", "nonzero", lambda r: [r.integers(-1, 2, (2, 3, 4)).astype(np.float32)],
         chain=lambda r: [("cast", dict(dtype="float32"), []), ("add", {}, [np.float32(0.5)])]),
    Case("nonzero_shape_bool", "nonzero_shape", lambda r: [r.integers(0, 2, (3, 5)).astype(bool)]),
    Case("compress_axis1", "compress", lambda r: [n(r, (3, 5, 2)), np.array([1, 0, 1, 1], bool)], dict(axis=1)),
    Case("compress_shape_none", "compress_shape", lambda r: [n(r, (4,)), np.zeros(3, bool)], dict(axis=0)),
    Case("unique_values_sorted_axis0", "unique",
         lambda r: [np.array([[1, 0, 2], [-1, 3, 0], [1, 0, 2], [0, 0, 0], [-1, 3, 0]], np.float32)],
         dict(axis=0, sorted=1, output="values")),
    Case("unique_counts_unsorted_int64", "unique", lambda r: [r.integers(-3, 3, (11,))],
         dict(axis=0, sorted=0, output="counts")),
    Case("unique_shape_indices", "unique_shape", lambda r: [r.integers(-3, 3, (9,)).astype(np.int32)],
         dict(axis=0, sorted=1, output="indices")),
    Case("unique_inverse_axis1_unsorted", "unique_inverse",
         lambda r: [np.array([[2, 1, 2, 0], [5, 4, 5, 0]], np.int64)], dict(axis=1, sorted=0, output="inverse")),
    Case("topk_run_time_k_values_ties", "topk", lambda r: [r.integers(-2, 3, (3, 7)).astype(np.float32),
                                                          np.array([4], np.int64)],
         dict(axis=1, largest=1, output="values")),
    Case("topk_shape_k_beyond_extent", "topk_shape", lambda r: [n(r, (5, 2)), np.array([9], np.int64)],
         dict(axis=0, largest=0, output="indices")),
    Case("non_max_suppression_two_classes", "non_max_suppression",
         lambda r: [np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [1, 1, 0, 0]]],
                             np.float32), u(r, (1, 2, 5), 0, 1), np.array([2], np.int64),
                    np.array([0.5], np.float32), np.array([0.2], np.float32)],
         dict(center_point_box=0, use_score_threshold=1, max_boxes=2)),
    Case("non_max_suppression_shape_center", "non_max_suppression_shape",
         lambda r: [u(r, (2, 4, 4), 0.5, 2), u(r, (2, 1, 4), 0, 1), np.array([3], np.int64),
                    np.array([0.3], np.float32), np.array([0.0], np.float32)],
         dict(center_point_box=1, use_score_threshold=0, max_boxes=4)),
    Case("dyn_reshape_zero_and_minus_one", "dyn.reshape", lambda r: [n(r, (2, 3, 2)), np.array([0, -1], np.int64)],
         dict(allowzero=0), chain=lambda r: [("nn.relu", {}, [])]),
    Case("dyn_reshape_shape_rank3", "dyn.reshape_shape", lambda r: [n(r, (6, 2)), np.array([3, 1, 4], np.int64)],
         dict(allowzero=1)),
    Case("dyn_head_bool", "dyn.head", lambda r: [r.integers(0, 2, (5, 3)).astype(bool), np.array([3], np.int64)]),
    Case("dyn_head_shape_negative_count", "dyn.head_shape", lambda r: [n(r, (4, 2)), np.array([-2], np.int64)]),
    # shapes given by values computed at run time, bounded by the value-range analysis (dyn-bounds)
    Case("dyn_range_float_negative_delta", "dyn.range",
         lambda r: [np.array(5, np.float32), np.array(-1, np.float32), np.array(-1.5, np.float32)], dict(bound=6),
         chain=lambda r: [("multiply", {}, [np.float32(2)])]),
    Case("dyn_range_shape_int32_empty", "dyn.range_shape",
         lambda r: [np.array(3, np.int32), np.array(1, np.int32), np.array(2, np.int32)], dict(bound=4)),
    Case("dyn_expand_rank_grows", "dyn.expand", lambda r: [n(r, (3, 1)), np.array([2, 3, 4], np.int64)],
         dict(bound=(5, 3, 6), dynamic_axes=(0, 2))),
    Case("dyn_expand_shape_x_rank_higher", "dyn.expand_shape", lambda r: [n(r, (2, 1, 3)), np.array([4, 1], np.int64)],
         dict(bound=(2, 5, 3), dynamic_axes=(1,))),
    Case("dyn_constant_of_shape_int32", "dyn.constant_of_shape", lambda r: [np.array([2, 3], np.int64)],
         dict(bound=(4, 3), dynamic_axes=(0,), value=-7, dtype="int32")),
    Case("dyn_constant_of_shape_shape_zero", "dyn.constant_of_shape_shape", lambda r: [np.array([2, 0, 3], np.int64)],
         dict(bound=(2, 4, 3), dynamic_axes=(1,), value=1.5, dtype="float32")),
    # --- qnn ops (tvmc/ops/qnn.py): int8/uint8 operands, int32 zero points, int32 accumulators
    Case("qnn_conv2d_u8s8_pad_requantize", "qnn.conv2d",
         lambda r: [qi(r, (1, 5, 9, 11), "uint8"), qi(r, (6, 5, 3, 3)), zp(131), zp(0)], conv(padding=(1, 1, 1, 1)),
         chain=lambda r: [("add", {}, [r.integers(-900, 900, (6, 1, 1)).astype(np.int32)]),
                          requantize(np.float32(0.0007), -3, "int8")]),
    Case("qnn_conv2d_depthwise_s2_per_channel_zp", "qnn.conv2d",
         lambda r: [qi(r, (2, 4, 8, 8)), qi(r, (4, 1, 3, 3)), zp(-3), zp([1, -2, 0, 5])],
         conv(strides=(2, 2), padding=(1, 0, 1, 2), groups=4)),
    Case("qnn_conv2d_u8u8_1x1_no_pad", "qnn.conv2d",
         lambda r: [qi(r, (1, 3, 7, 7), "uint8"), qi(r, (8, 3, 1, 1), "uint8"), zp(5), zp(7)], conv(),
         chain=lambda r: [requantize((r.random(8) * 1e-3).astype(np.float32), 128, "uint8", axis=1,
                                     compute_dtype="float32")]),
    Case("qnn_dense_u8s8_k64_requantize", "qnn.dense",
         lambda r: [qi(r, (3, 64), "uint8"), qi(r, (10, 64)), zp(120), zp(0)], {},
         chain=lambda r: [requantize((r.random(10) * 1e-4).astype(np.float32), 0, "int8", axis=1)]),
    # the raw u8 x s8 product of a packed weight (AlterOpLayout's qnn.dense on CPUs): N and K not
    # whole blocks, a requantize epilogue; full-range weights (the exact split form on AVX2 /
    # AVX-512BW) and 7-bit ones (one vpmaddubsw per step)
    Case("qnn_dense_u8s8_packed_n37_k30_requantize", "qnn.dense_u8s8",
         lambda r: [qi(r, (5, 30), "uint8"), pack_dense_u8s8_weight(qi(r, (37, 30)))], {"units": 37},
         chain=lambda r: [requantize(np.float32(3e-4), -2, "int8")]),
    Case("qnn_dense_u8s8_packed_n10_7bit", "qnn.dense_u8s8",
         lambda r: [qi(r, (1, 64), "uint8"), pack_dense_u8s8_weight(qi(r, (10, 64)) // 2)],
         {"units": 10, "pairs_in_int16": True}),
    # the raw u8 x s8 product of a blocked conv2d (AlterOpLayout's qnn.conv2d on CPUs): NCHW[ib]c
    # uint8 data padded with `pad_value` (the shifted input zero point), NCHW16c int32 out; an
    # input block of 3 (an image) padded to 4 channels, 7-bit weights, a requantize epilogue
    Case("qnn_conv2d_nchwc_u8s8_packed_3x3_pad_requantize", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (1, 2, 9, 11, 16), "uint8"), pack_conv2d_u8s8_weight(qi(r, (32, 32, 3, 3)), 16)],
         dict(conv(padding=(1, 1, 1, 1)), pad_value=131, out_layout="NCHW16c"),
         chain=lambda r: [("subtract", {}, [r.integers(-9000, 9000, (2, 1, 1, 16)).astype(np.int32)]),
                          requantize((r.random(32) * 4e-5).astype(np.float32), -3, "int8", axis=1,
                                     layout="NCHW16c")]),
    # int8 data (the kernels' operand on targets whose dot product is s8 x s8: AArch64 SDOT)
    Case("qnn_conv2d_nchwc_u8s8_packed_int8_data", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (1, 1, 6, 7, 16)), pack_conv2d_u8s8_weight(qi(r, (16, 16, 3, 3)), 16)],
         dict(conv(padding=(1, 1, 1, 1)), pad_value=-3, out_layout="NCHW16c")),
    Case("qnn_dense_u8s8_packed_int8_data", "qnn.dense_u8s8",
         lambda r: [qi(r, (3, 40)), pack_dense_u8s8_weight(qi(r, (20, 40)))], {"units": 20}),
    Case("qnn_conv2d_nchwc_u8s8_packed_c3_stride2_asym_pad", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (1, 1, 13, 10, 3), "uint8"), pack_conv2d_u8s8_weight(qi(r, (16, 3, 3, 3)), 3)],
         dict(conv(strides=(2, 2), padding=(0, 1, 2, 1)), pad_value=7, out_layout="NCHW16c")),
    Case("qnn_conv2d_nchwc_u8s8_packed_1x1_s2_7bit", "qnn.conv2d_nchwc_u8s8",
         lambda r: [qi(r, (2, 2, 9, 9, 8), "uint8"), pack_conv2d_u8s8_weight(qi(r, (48, 16, 1, 1)) // 2, 8)],
         dict(conv(strides=(2, 2)), pairs_in_int16=True, out_layout="NCHW16c")),
    # the same product in steps of the int8 matrix multiply-accumulate (AArch64 +i8mm USMMLA; the
    # widening form elsewhere): pixel pairs, an odd OW (the last pair's second pixel dropped),
    # input blocks of 16 (two octets) and 8, a requantize epilogue; stride 2 with uneven pads
    Case("qnn_conv2d_nchwc_u8s8_mmla_3x3_pad_requantize", "qnn.conv2d_nchwc_u8s8_mmla",
         lambda r: [qi(r, (1, 2, 9, 11, 16), "uint8"), pack_conv2d_u8s8_mmla_weight(qi(r, (32, 32, 3, 3)), 16)],
         dict(conv(padding=(1, 1, 1, 1)), pad_value=131, out_layout="NCHW16c"),
         chain=lambda r: [("subtract", {}, [r.integers(-9000, 9000, (2, 1, 1, 16)).astype(np.int32)]),
                          requantize((r.random(32) * 4e-5).astype(np.float32), -3, "int8", axis=1,
                                     layout="NCHW16c")]),
    # dense in row pairs: an odd M (the last pair's second row zeros), K and N padded, a requantize
    Case("qnn_dense_u8s8_mmla_m5_k30_n37_requantize", "qnn.dense_u8s8_mmla",
         lambda r: [qi(r, (5, 30), "uint8"), pack_dense_u8s8_mmla_weight(qi(r, (37, 30)))], {"units": 37},
         chain=lambda r: [requantize(np.float32(3e-4), -2, "int8")]),
    Case("qnn_conv2d_nchwc_u8s8_mmla_s2_asym_pad", "qnn.conv2d_nchwc_u8s8_mmla",
         lambda r: [qi(r, (2, 1, 13, 10, 8), "uint8"), pack_conv2d_u8s8_mmla_weight(qi(r, (16, 8, 3, 3)), 8)],
         dict(conv(strides=(2, 2), padding=(0, 1, 2, 1)), pad_value=7, out_layout="NCHW16c")),
    # an image stem's raw u8 x s8 product on planar data padded in the graph (AlterOpLayout's
    # qnn_conv2d_rows): 3 channels, 7x7 taps (two quads per kernel row), stride 2, rows wider
    # than the last quad reads, a requantize epilogue
    Case("qnn_conv2d_nchw_u8s8_stem_7x7_s2_requantize", "qnn.conv2d_nchw_u8s8",
         lambda r: [qi(r, (1, 3, 15, 32), "uint8"), pack_conv2d_u8s8_row_weight(qi(r, (32, 3, 7, 7)))],
         {"strides": (2, 2), "out_width": 12, "out_layout": "NCHW16c"},
         chain=lambda r: [requantize((r.random(32) * 4e-5).astype(np.float32), 5, "uint8", axis=1,
                                     layout="NCHW16c")]),
    Case("qnn_dense_k13_per_channel_zp", "qnn.dense",
         lambda r: [qi(r, (5, 13)), qi(r, (7, 13)), zp(3), zp([0, 1, -1, 2, -2, 3, -3])]),
    Case("qnn_matmul_batched_u8s8", "qnn.matmul",
         lambda r: [qi(r, (2, 5, 7), "uint8"), qi(r, (7, 33)), zp(100), zp(2)]),
    Case("qnn_matmul_per_row_and_column_zp", "qnn.matmul",
         lambda r: [qi(r, (5, 7)), qi(r, (3, 7, 9), "uint8"), zp([0, 1, 2, -1, -2]), zp(np.arange(9) * 20)]),
    # FoldQuantizedChains' integer ops: a per-channel affine map (an unfolded BatchNorm) into another
    # quantization, with halves and saturation; two 8-bit tensors added in a third (a residual Add)
    Case("qnn_rescale_per_channel_u8_to_s8", "qnn.rescale",
         lambda r: [qi(r, (2, 6, 5, 5), "uint8"), zp(128), (r.random((6, 1, 1)) * 2 - 0.5).astype(np.float32),
                    (r.standard_normal((6, 1, 1)) * 20).astype(np.float32), zp(-3)], dict(out_dtype="int8")),
    Case("qnn_add_broadcast_u8", "qnn.add",
         lambda r: [qi(r, (2, 4, 3, 5), "uint8"), zp(120), np.float32(0.7), qi(r, (4, 1, 1), "uint8"), zp(3),
                    np.float32(1.3), zp(128)], dict(out_dtype="uint8"),
         # LLVM contracts (a - a_zp) * a_scale + (b - b_zp) * b_scale into an FMA, which can round a
         # value near .5 the other way than numpy's two roundings: one unit (as onnxruntime's AVX2 kernel)
         tol=dict(rtol=0, atol=1)),
    Case("qnn_requantize_int8_scalar", "qnn.requantize",
         lambda r: [np.concatenate([np.array([2**31 - 1, -2**31, 0, 5, -5, 15, -15], np.int32),
                                    r.integers(-40000, 40000, 93).astype(np.int32)]).reshape(4, 25),
                    np.float32(0.1), zp(3)], dict(out_dtype="int8")),
    Case("qnn_dequantize_int8_per_channel", "qnn.dequantize",
         lambda r: [qi(r, (2, 6, 5, 5)), (r.random((6, 1, 1)) * 0.1).astype(np.float32), qi(r, (6, 1, 1))],
         dict(out_dtype="float32")),
    Case("qnn_quantize_uint8_halves", "qnn.quantize",
         lambda r: [np.concatenate([np.array([0.5, 1.5, 2.5, -0.5, 1e9, -1e9, 127.5, 128.5], np.float32),
                                    n(r, 92) * 50]).reshape(4, 25), np.float32(0.5), np.uint8(3)],
         dict(out_dtype="uint8")),
    Case("qnn_requantize_uint8_per_channel_float32", "qnn.requantize",
         lambda r: [r.integers(-40000, 40000, (2, 6, 5, 5)).astype(np.int32), (r.random(6) * 0.01).astype(np.float32),
                    zp(128)], dict(out_dtype="uint8", axis=1, compute_dtype="float32")),
    # MatMulNBits' weight: K = 40 (a partial last block of 16), codes packed low bits first
    Case("qnn_dequantize_blockwise_4bit_packed_zero_points", "qnn.dequantize_blockwise",
         lambda r: [qi(r, (6, 3, 8), "uint8"), (r.random((6, 3)) * 0.1).astype(np.float32), qi(r, (6, 2), "uint8")],
         dict(k=40, bits=4, block_size=16, zero_points="packed", g_idx=0)),
    Case("qnn_dequantize_blockwise_2bit_float_zero_points_g_idx", "qnn.dequantize_blockwise",
         lambda r: [qi(r, (5, 4, 4), "uint8"), (r.random((5, 4)) * 0.1).astype(np.float32),
                    (r.random((5, 4)) * 4).astype(np.float32), r.permutation(np.arange(64) // 16).astype(np.int32)],
         dict(k=64, bits=2, block_size=16, zero_points="float", g_idx=1)),
    Case("qnn_unpack_bits_4bit", "qnn.unpack_bits", lambda r: [qi(r, (3, 5, 7), "uint8")], dict(bits=4, count=13)),
]


def _det_matrices(rng):
    """[6, 4, 4] float32 with the cases LU pivoting must get right: a zero leading entry (a row
    swap), two equal rows (singular), a zero column (a zero pivot: no elimination), the
    identity with two rows swapped (det -1), and plain normal samples."""
    a = n(rng, (6, 4, 4))
    a[1, 0, 0] = 0.0
    a[2, 3] = a[2, 1]
    a[3, :, 2] = 0.0
    a[4] = np.eye(4, dtype=np.float32)[[0, 2, 1, 3]]
    return a


def _resize_tables(rng, h, w):
    """Tables for an upsample by 1.5 in H (linear, half_pixel) and 2.5 in W (cubic, align_corners)."""
    from tvmc.ops.image import resize_tables

    ih, wh, _ = resize_tables(h, h * 3 // 2, 1.5, "linear", "half_pixel")
    iw, ww, _ = resize_tables(w, w * 5 // 2, 2.5, "cubic", "align_corners")
    return [ih, iw, wh, ww]


def _ids(cases):
    return [c.id for c in cases]


def _assert_close(out, ref, tol=None):
    """Floats within `tol` (default: the dtype's TOLERANCE), NaN and inf where the reference has
    them; integers exact, or within a case's explicit `tol` (a case that says why)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if out.dtype == np.dtype("bfloat16"):  # ml_dtypes' type (numpy kind 'V'): compared as float32
        tol = tol or TOLERANCE["bfloat16"]
        out, ref = out.astype(np.float32), ref.astype(np.float32)
    if out.dtype.kind not in "fc" and tol is not None:
        np.testing.assert_allclose(out.astype(np.int64), ref.astype(np.int64), **tol)
        return
    tol = tol or TOLERANCE[str(out.dtype)]
    if out.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        np.testing.assert_array_equal(np.isinf(out) * np.sign(out), np.isinf(ref) * np.sign(ref))
        finite = np.isfinite(ref)
        np.testing.assert_allclose(out[finite], ref[finite], **tol)
    else:
        np.testing.assert_array_equal(out, ref)


def _op_params():
    """Every case on this host's CPU; on the other targets the first case of each operator in
    make test (where the target takes an op sample), the others slow (make test-all): each one
    is a driver compile there."""
    out, seen = [], set()
    for t in TARGETS:
        for c in CASES:
            sample = not c.slow and (t.name == "native" or (t.op_sample and c.op not in seen))
            if t.name != "native":
                seen.add(c.op)
            out.append(pytest.param(c, t.name, id=f"{t.name}-{c.id}",
                                    marks=t.marks + (() if sample else (pytest.mark.slow,))))
        seen = set()
    return out


@pytest.mark.parametrize("case,target_name", _op_params())
def test_op_vs_numpy(case, target_name, request):
    """A case's xfail (an LLVM codegen limitation) holds on LLVM targets only: marked per target here."""
    target = require(target_name)
    if case.xfail and target.target.codegen == "llvm":
        request.applymarker(pytest.mark.xfail(reason=case.xfail[0], raises=case.xfail[1], strict=True))
    arrays, chain = case.build()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out, ref = run_op(case.op, arrays, case.attrs, chain, target=target.target)
    _assert_close(out, ref, case.tol)


@pytest.mark.parametrize("family", ["cpu", "gpu"])
def test_every_registered_op_has_an_implementation_per_family_and_a_case(family):
    ops = all_ops()
    anchors = {c.op for c in CASES if not c.xfail}
    assert anchors <= set(ops), sorted(anchors - set(ops))
    for name, opdef in ops.items():
        if name not in INTERPRETED:  # control flow: the executors run it (tests/e2e/test_run_time_loop.py)
            assert opdef.implementations(family), name
    untested = sorted(set(ops) - anchors - INTERPRETED)
    assert not untested, f"operators without a case in tests/ops/test_ops.py: {untested}"


def test_case_ids_are_unique():
    ids = _ids(CASES)
    assert len(ids) == len(set(ids))


def test_scalar_constant_operand_is_inlined():
    """A size-1 Constant inside a fused function becomes an immediate (no parameter)."""
    x = Var("x", TensorType((3, 40), "float32"))
    body = make_call("nn.relu", [make_call("multiply", [x, Constant(np.array(-0.5, np.float32))])])
    a = n(np.random.default_rng(5), (3, 40))
    out, prim = build_and_run(Function([x], body, "fused_multiply_relu"), [a])
    assert len(prim.params) == 2  # x and the output
    _assert_close(out, np.maximum(a * np.float32(-0.5), 0))


def test_epilogue_is_fused_into_the_anchor_loops():
    """conv2d + bias + relu lower to one kernel whose output is written once, by the epilogue."""
    from tvmc.ops.fused import lower_fused

    x = Var("x", TensorType((1, 32, 13, 13), "float32"))  # 779K multiply-adds: above MIN_PARALLEL_MACS
    w = Var("w", TensorType((16, 32, 3, 3), "float32"))
    b = Var("b", TensorType((16, 1, 1), "float32"))
    body = make_call("nn.relu", [make_call("add", [make_call("nn.conv2d", [x, w], conv(padding=(1, 1, 1, 1))), b])])
    prim = lower_fused(Function([x, w, b], body, "fused_conv"), resolve_target("native"))
    text, out_name = str(prim), prim.params[-1].name
    stores = [line for line in text.splitlines() if line.strip().startswith(out_name + "[")]
    assert len(stores) == 1 and "max(" in stores[0]  # relu applied where the tile is stored
    assert "parallel for" in text and "vectorize for" in text


@pytest.mark.parametrize("op", ["negative", "tanh"])
def test_sign_of_zero(op):
    x = np.array([0.0, -0.0] * 8, np.float32)
    out, ref = run_op(op, [x])
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


def test_reference_ops_exist_for_chain_names():
    names = {name for c in CASES if c.chain for name, _, _ in c.build()[1]}
    for name in names:
        get_op(name)


# --- every config of a tunable implementation computes the same numbers -------------------------

SWEEPS = [
    Case("conv2d_ow14_oc6", "nn.conv2d", lambda r: [n(r, (1, 4, 6, 14)), n(r, (6, 4, 3, 3))],
         conv(padding=(1, 1, 1, 1))),
    Case("conv2d_ow64_oc4", "nn.conv2d", lambda r: [n(r, (1, 2, 3, 66)), n(r, (4, 2, 3, 3))], conv()),
    Case("conv2d_depthwise_s2", "nn.conv2d", lambda r: [n(r, (1, 6, 9, 9)), n(r, (6, 1, 3, 3))],
         conv(strides=(2, 2), padding=(1, 1, 1, 1), groups=6)),
    Case("conv2d_nchwc_ow14", "nn.conv2d_nchwc", lambda r: [n(r, (1, 2, 6, 14, 4)), n(r, (1, 2, 3, 3, 4, 8))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW8c"),
         slow="320 configs in one library: make test checks a sample (test_a_sample_of_a_large_space_is_correct)"),
    Case("conv2d_nchwc_ow4_oc_blocks4", "nn.conv2d_nchwc", lambda r: [n(r, (1, 1, 2, 4, 4)), n(r, (4, 1, 3, 3, 4, 4))],
         dict(conv(padding=(1, 1, 1, 1)), out_layout="NCHW4c"),
         slow="144 configs in one library: make test checks a sample (test_a_sample_of_a_large_space_is_correct)"),
    Case("dense_n12", "nn.dense", lambda r: [n(r, (3, 20)), n(r, (12, 20))]),
    Case("dense_pack_m6_nb4_bn8", "nn.dense_pack", lambda r: [n(r, (6, 9)), n(r, (4, 9, 8))]),
    Case("matmul_bcast_m6_n20", "nn.matmul", lambda r: [n(r, (2, 6, 5)), n(r, (5, 20))]),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=(pytest.mark.slow,) if c.slow else ())
                                  for c in SWEEPS])
def test_every_config_in_the_space_is_correct(case, tmp_path):
    """Tuning may pick any config of the space: compile them all (one library) and compare each."""
    _check_configs(case, tmp_path, lambda space: list(space.all_configs()))


# Configs of a large space checked in make test: a seeded sample with the fallback.
SWEEP_SAMPLE = 12


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SWEEPS if c.slow])
def test_a_sample_of_a_large_space_is_correct(case, tmp_path):
    """The fallback and SWEEP_SAMPLE - 1 other configs of a space too large to sweep in make test
    (the same seed every run: a failure reproduces)."""
    import random

    def sample(space):
        fallback = space.fallback_config()
        rest = [c for c in space.all_configs() if dict(c) != dict(fallback)]
        return [fallback] + random.Random(case.id).sample(rest, SWEEP_SAMPLE - 1)

    _check_configs(case, tmp_path, sample)


def _check_configs(case, tmp_path, pick):
    """Compile the configs `pick(the case's config space)` into one library and compare each
    one's output with the op's reference."""
    import ctypes

    from tvmc.codegen.build import compile_ir, link_shared
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.ops.fused import lower_fused, workload

    target = resolve_target("native")
    arrays, _ = case.build()
    params = [Var(f"x{k}", TensorType(a.shape, a.dtype.name)) for k, a in enumerate(arrays)]
    body = make_call(case.op, params, case.attrs)
    impl = get_op(case.op).implementations("cpu")[0]
    configs = pick(impl.config_space(workload(body), target))
    assert len(configs) > 1
    cg = CodeGenLLVM(target)
    for k, cfg in enumerate(configs):
        cg.add_function(lower_fused(Function(params, body, f"cfg{k}"), target,
                                    config_lookup=lambda name, wl, cfg=cfg: cfg))
    path = tmp_path / "sweep.so"
    path.write_bytes(link_shared(compile_ir(cg.ir_text(), target), target))
    lib = ctypes.CDLL(str(path))
    ref = get_op(case.op).reference(*arrays, **case.attrs)
    for k, cfg in enumerate(configs):
        out = np.full(ref.shape, np.nan, ref.dtype)
        getattr(lib, f"cfg{k}")(*[ctypes.c_void_p(a.ctypes.data) for a in arrays + [out]])
        try:
            _assert_close(out, ref)
        except AssertionError as e:
            raise AssertionError(f"config {dict(cfg)}: {e}") from None


# --- special values: NaN propagates and infinities survive where onnxruntime (numpy) has them ----
NAN, INF = np.float32(np.nan), np.float32(np.inf)
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1.5, -1.5, 3.0e38]


def special(rng, shape):
    """Normal samples with NaN, +-inf, +-0 and large finite values at the front (long enough
    rows reach the vectorized loop bodies, short ones the scalar tails)."""
    return edges(rng, shape, SPECIAL)


def _pool_nan_ref(x, k):
    """max over k x k windows, stride k, no padding, NaN if any window value is NaN (onnxruntime)."""
    n_, c, h, w = x.shape
    win = x.reshape(n_, c, h // k, k, w // k, k)
    return np.max(win, axis=(3, 5))   # np.max propagates NaN


SPECIAL_CASES = [
    ("relu", "nn.relu", lambda r: [special(r, (3, 37))], {}, None),
    ("maximum_nan_either_side", "maximum",
     lambda r: [special(r, (2, 40)), special(r, (2, 40))[:, ::-1].copy()], {}, None),
    ("minimum_nan_either_side", "minimum",
     lambda r: [special(r, (2, 40))[:, ::-1].copy(), special(r, (2, 40))], {}, None),
    ("clip", "clip", lambda r: [special(r, (3, 33))], dict(a_min=-1.0, a_max=2.5), None),
    ("reduce_max", "max", lambda r: [special(r, (4, 19))], dict(axis=(1,), keepdims=0), None),
    ("reduce_min", "min", lambda r: [special(r, (4, 19))[::-1].copy()], dict(axis=(1,), keepdims=0), None),
    ("reduce_max_all_minus_inf", "max", lambda r: [np.full((3, 17), -INF)], dict(axis=(1,), keepdims=0), None),
    ("reduce_sum_inf_minus_inf", "sum", lambda r: [special(r, (2, 9))], dict(axis=(1,), keepdims=0), None),
    ("max_pool_nan_and_minus_inf_windows", "nn.max_pool2d",
     lambda r: [np.where(np.arange(64).reshape(1, 1, 8, 8) < 16, -INF, special(r, (1, 1, 8, 8)))],
     pool((2, 2), (2, 2)), lambda x: _pool_nan_ref(x, 2)),
    ("global_max_pool_nan_and_minus_inf", "nn.global_max_pool2d",
     lambda r: [np.stack([np.full((5, 5), -INF), special(r, (5, 5)), n(r, (5, 5))])[None]], {}, None),
]


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=[c[0] for c in SPECIAL_CASES])
def test_nan_and_inf(case):
    """Relu(NaN) is NaN, and the same for every op where onnxruntime propagates NaN (Max, Min,
    Clip, pooling, reductions); a max over -inf values is -inf. Exact comparison, NaN == NaN."""
    name, op, inputs, attrs, ref_fn = case
    arrays = inputs(np.random.default_rng(zlib.crc32(name.encode())))
    with np.errstate(invalid="ignore", over="ignore"):
        out, ref = run_op(op, arrays, attrs)
        if ref_fn is not None:
            ref = ref_fn(*arrays)
    assert np.isnan(ref).any() or np.isinf(ref).any(), "the case must exercise special values"
    np.testing.assert_array_equal(out, ref)
