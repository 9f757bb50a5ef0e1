"""GPU int8 kernels (tvmc/ops/gpu/int8.py) without a GPU: dense_u8s8.gpu and conv2d_nchwc_u8s8.gpu,
each with its fallback config and two others of its space (seeded choice), lowered for cuda-sm90
and run by the SIMT interpreter (tvmc/tir/simt.py), and compiled for OpenCL and run on PoCL, both
against the numpy int32 references, exactly; their PTX holds dp4a.u32.s32 on 32-bit word loads
and is accepted by ptxas for every shipped CUDA descriptor (sm_75, sm_80, sm_90); the descriptor
fact that enables them and the graph rewrite onto them; a quantize_static CNN compiled for OpenCL
against onnxruntime's int8 outputs. The `cuda` tests run the same on a GPU (make test-cuda)."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import numpy as np
import pytest
from util import op_function

from tests.targets import by_runtime, require
from tvmc.autotune.task import tasks_of_functions
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.codegen.nvptx import assembler_missing, kernel_resources
from tvmc.errors import ScheduleError
from tvmc.ops.cpu.int8 import pack_conv2d_u8s8_weight, pack_dense_u8s8_weight
from tvmc.ops.fused import lower_fused
from tvmc.ops.layout import blocked_layout, to_layout
from tvmc.target import known_targets, resolve_target
from tvmc.tir.simt import run_kernel

SM90 = resolve_target("cuda-sm90")
CUDA_TARGETS = [n for n in known_targets() if n != "native" and resolve_target(n).runtime == "cuda"]


def _requantize(out_dtype="int8"):
    """A requantize epilogue (scale 1/64, zero point 3): what the int8 models fuse after the product."""
    return [("qnn.requantize", {"out_dtype": out_dtype}, [np.asarray(1 / 64, np.float32), np.asarray(3, np.int32)])]


def _dense(m, k, n, chain=False, seed=0, dtype="uint8"):
    rng = np.random.default_rng(seed)
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (m, k)).astype(dtype)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    return ("dense_u8s8.gpu", "qnn.dense_u8s8", [x, pack_dense_u8s8_weight(w)], {"units": n},
            _requantize() if chain else [])


def _conv(n, c, hw, o, k, ib, stride, pad, chain=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, c, hw, hw), dtype=np.uint8)
    w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    xb = np.ascontiguousarray(to_layout(x, "NCHW", blocked_layout(ib)))
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), pad_value=5)
    return ("conv2d_nchwc_u8s8.gpu", "qnn.conv2d_nchwc_u8s8", [xb, pack_conv2d_u8s8_weight(w, ib)], attrs,
            _requantize("uint8") if chain else [])


CASES = {
    # N = 40: a padded last block of 16 columns, weights read from global memory; requantized
    "dense_padded_requantize": _dense(9, 36, 40, chain=True),
    # N = 64, K = 20 (5 quads): weights staged in shared memory where a tile holds whole blocks
    "dense_blocks": _dense(5, 20, 64),
    # K = 30: the data padded with zeros to 32 (data_pad, inlined into the shared-memory copy); M = 1
    "dense_k_ragged": _dense(1, 30, 32, seed=1),
    # int8 data (the CPU kernels' operand where the dot product is s8 x s8): dp4a.s32.s32, char4
    "dense_int8_data": _dense(3, 24, 32, seed=2, dtype="int8"),
    # 8 input channels in one block of 8, 3 x 3, padding 1, 32 output channels, requantized
    "conv_3x3_pad": _conv(1, 8, 4, 32, 3, 8, 1, 1, chain=True),
    # a 3-channel image (its block padded to 4 in the kernel with pad_value), stride 2, batch 2
    "conv_rgb_stride2": _conv(2, 3, 7, 16, 3, 3, 2, 1),
}


def _function(case):
    impl, op, arrays, attrs, chain = case
    return op_function(op, arrays, attrs, chain)


def _configs(name, target, count=2):
    """The fallback config of the case's implementation and `count` others of its space that
    lower (seeded choice)."""
    impl = CASES[name][0]
    fn, _, _ = _function(CASES[name])
    task = next(t for t in tasks_of_functions([fn], target) if t.impl == impl)
    space = task.config_space(target)
    indices = list(range(len(space)))
    random.Random(name).shuffle(indices)
    chosen = [space.fallback_config()]
    for i in indices:
        cfg = space.get(i)
        if dict(cfg) == dict(chosen[0]) or cfg["tile_x"] * cfg["tile_y"] > 256:
            continue
        try:
            lower_fused(fn, target, config_lookup=lambda n, wl, cfg=cfg: cfg if n == impl else None)
        except ScheduleError:
            continue
        chosen.append(cfg)
        if len(chosen) == count + 1:
            break
    return chosen


def _lower(name, target, cfg):
    impl = CASES[name][0]
    fn, arrays, ref = _function(CASES[name])
    prim = lower_fused(fn, target, config_lookup=lambda n, wl: cfg if n == impl else None)
    return fn, arrays, ref, prim


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_reference_in_the_simt_interpreter(name):
    configs = _configs(name, SM90)
    assert len(configs) == 3
    for cfg in configs:
        fn, arrays, ref, prim = _lower(name, SM90, cfg)
        assert "dot_u8s8" in str(prim), "the quad reduction was not tensorized"
        out = np.zeros(fn.body.shape, fn.body.dtype)
        run_kernel(prim, [np.ascontiguousarray(a) for a in arrays] + [out])
        np.testing.assert_array_equal(out, ref, err_msg=f"config {dict(cfg)}")


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_reference_on_opencl(name):
    require("opencl")
    target = resolve_target("opencl")
    for cfg in _configs(name, target):
        fn, arrays, ref, prim = _lower(name, target, cfg)
        out = np.zeros(fn.body.shape, fn.body.dtype)
        by_runtime(target)(prim, arrays=[np.ascontiguousarray(a) for a in arrays], out=out)
        np.testing.assert_array_equal(out, ref, err_msg=f"config {dict(cfg)}")


def test_opencl_source_spells_the_packed_dot():
    """uchar4 / char4 loads into tvmc_dot_u8s8, which takes cl_khr_integer_dot_product's dot()
    where the device compiler defines its feature macro, else widening multiply-adds."""
    from tvmc.codegen.opencl import CodeGenOpenCL

    target = resolve_target("opencl")
    *_, prim = _lower("dense_blocks", target, None)
    cg = CodeGenOpenCL(target)
    cg.add_function(prim)
    src = cg.source()
    assert "#ifdef __opencl_c_integer_dot_product_input_4x8bit" in src and "dot(a, b)" in src
    assert re.search(r"tvmc_dot_u8s8_int\(vload4\(0, \w+ \+ .*\), vload4\(0, \w+ \+ ", src)


@pytest.mark.parametrize("target_name", CUDA_TARGETS)
def test_ptx_uses_dp4a_and_is_accepted_by_ptxas(target_name):
    """sm_61 (where dp4a starts) is not in the table: CUDA 13's ptxas assembles sm_75 on."""
    target = resolve_target(target_name)
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    for name in ("dense_blocks", "conv_3x3_pad", "dense_padded_requantize", "dense_int8_data"):
        *_, prim = _lower(name, target, None)
        cg = CodeGenLLVM(target)
        cg.add_function(prim)
        ptx = compile_ir(cg.ir_text(), target, assembly=True)
        text = ptx.decode()
        signed = name == "dense_int8_data"
        dots = text.count("dp4a.s32.s32" if signed else "dp4a.u32.s32")
        assert dots > 0 and not text.count("dp4a.u32.s32" if signed else "dp4a.s32.s32")
        # every operand a 32-bit word (aligned quads), never 4 byte loads: both from shared memory
        # where the weights are staged, the data from shared and the weights from global otherwise
        words = len(re.findall(r"ld\.shared\.b32", text))
        assert words >= (dots if name != "dense_padded_requantize" else dots // 2)
        assert words + len(re.findall(r"ld\.global(?:\.nc)?\.b32", text)) >= 2 * dots
        assert not re.search(r"ld\.(?:shared|global)(?:\.nc)?\.[us]8", text), "a quad loaded byte by byte"
        assert kernel_resources(ptx, target)[prim.name]["spill_bytes"] == 0


def test_the_descriptor_fact_selects_the_kernels():
    """dp4a on every shipped CUDA descriptor (targets/isa/nvptx64.yaml dot_u8s8), OpenCL always,
    CPU targets never (their own kernels); a GPU descriptor without the fact keeps qnn.dense on
    the generic kernel (AlterOpLayout leaves it)."""
    for name in CUDA_TARGETS:
        assert resolve_target(name).dot_u8s8 == ("dp4a", 32)
        assert resolve_target(name).gpu_int8_dot
    assert resolve_target("opencl").gpu_int8_dot and resolve_target("mali-g76").gpu_int8_dot
    assert not resolve_target("x86").gpu_int8_dot
    no_dot = replace(resolve_target("opencl"), codegen="llvm")  # a GPU triple without an ISA table
    assert not no_dot.gpu_int8_dot
    for target, op in ((resolve_target("cuda"), "qnn.dense_u8s8"), (no_dot, "qnn.dense")):
        assert op in _altered_ops(target), target.name


def _altered_ops(target) -> set:
    """The ops of a qnn.dense (uint8 data, constant int8 weight) after AlterOpLayout for `target`."""
    from tvmc.graph.ir import Call, Constant, Graph, TensorType, Var
    from tvmc.ops.registry import make_call
    from tvmc.passes import PassContext, run_passes

    x = Var("x", TensorType((4, 32), "uint8"))
    w = Constant(np.random.default_rng(0).integers(-128, 128, (16, 32), dtype=np.int8), "w")
    y = make_call("qnn.dense", [x, w, Constant(np.array(128, np.int32), "x_zp"),
                                Constant(np.array(0, np.int32), "w_zp")])
    out = run_passes(Graph([x], [y]), ["AlterOpLayout"], PassContext(target=target))
    return {e.op for e in out.topo() if isinstance(e, Call)}


def _int8_cnn(fmt, per_channel):
    from tests.e2e import test_int8 as t8

    model = t8._cnn(seed=3)
    qmodel = t8.expose_quantized(t8._quantize_static(model, fmt, per_channel))
    x = np.random.default_rng(7).standard_normal(t8.CNN_INPUT).astype(np.float32)
    return t8, model, qmodel, {"input": x}


@pytest.mark.parametrize("fmt,per_channel", [("QOperator", False), ("QDQ", True)])
def test_quantize_static_cnn_on_opencl_matches_onnxruntime(fmt, per_channel):
    """Both convs on conv2d_nchwc_u8s8.gpu and the MatMul on dense_u8s8.gpu (the packed dot
    kernels), outputs within 1 unit of onnxruntime's int8 ones (tests/e2e/test_int8.py's rule)."""
    require("opencl")
    pytest.importorskip("onnxruntime.quantization")
    t8, model, qmodel, inputs = _int8_cnn(fmt, per_channel)
    module = t8._check_int8_model(qmodel, model, inputs, ("qnn_conv2d_nchwc_u8s8", "qnn_dense_u8s8"),
                                  target=resolve_target("opencl"))
    convs = [k for k in t8.kernel_names(module) if "qnn_conv2d" in k]
    assert len(convs) == 2 and all("qnn_conv2d_nchwc_u8s8" in k for k in convs), convs


def test_quantize_static_cnn_compiles_for_cuda_with_dp4a():
    """Without a GPU: the QDQ CNN compiled for cuda-sm90, its three int8 kernels (two convs, the
    MatMul) in the PTX with dp4a, assembled by ptxas into the cubin where ptxas is found."""
    pytest.importorskip("onnxruntime.quantization")
    t8, model, qmodel, _ = _int8_cnn("QDQ", True)
    module = t8._compile(qmodel, SM90)
    ptx = module.library.decode()
    int8 = [k for k in t8.kernel_names(module) if "u8s8" in k]
    assert len(int8) == 3
    for name in int8:
        body = ptx[ptx.index(f".entry {name}("):]
        body = body[:body.index("\n}\n")]
        assert "dp4a.u32.s32" in body, name
    assert ("mod.cubin" in module.device_binaries) == (assembler_missing(SM90) is None)


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_reference_on_cuda(name):
    """On a GPU: each case's three configs, compiled to PTX (dp4a) and run, exactly."""
    cuda = require("cuda")
    target = cuda.target
    for cfg in _configs(name, target):
        fn, arrays, ref, prim = _lower(name, target, cfg)
        out = np.zeros(fn.body.shape, fn.body.dtype)
        cuda.run_kernel(prim, [np.ascontiguousarray(a) for a in arrays], out)
        np.testing.assert_array_equal(out, ref, err_msg=f"config {dict(cfg)}")


@pytest.mark.cuda
@pytest.mark.parametrize("fmt,per_channel", [("QOperator", False), ("QDQ", True)])
def test_quantize_static_cnn_on_cuda_matches_onnxruntime(fmt, per_channel):
    cuda = require("cuda")
    pytest.importorskip("onnxruntime.quantization")
    t8, model, qmodel, inputs = _int8_cnn(fmt, per_channel)
    t8._check_int8_model(qmodel, model, inputs, ("qnn_conv2d_nchwc_u8s8", "qnn_dense_u8s8"), target=cuda.target)
