"""Symbolic shapes on the GPU targets (issue 29): one artifact per model serves every size of its
range on OpenCL (run here through PoCL, pocl-binary-distribution, on this machine's CPU) and is
compiled and checked by ptxas for CUDA (cuda: sm_75, cuda-sm90); the CUDA run is a `cuda`-marked
test for a machine with a GPU.

A GPU kernel with symbolic extents takes its size variables as int64 arguments after its buffers,
its grid (and its block, where a thread axis is bound to a symbolic extent) is a program of them
that the executor evaluates per run (mod.json "kernels", tvmc.tir.gpu.LaunchConfig), and the
guards of the split tails stay in the kernel. The executors bind the variables from the input
shapes by the C API's rule (tvmc.runtime.executor.SizeBinding): a size outside the range is an
InputError naming the input, the dimension, its value and the range, and `tvmc run` exits 8.

Models: the BERT-style encoder layer (sequence 1..512) and the small CNN (batch 1..16) of
tests/e2e/test_symbolic_e2e.py, each matching onnxruntime at five sizes (1, odd sizes, sizes that
are not multiples of the tiles, the upper bound) within that file's tolerance. Op cases (the GPU
schedules of tvmc/ops/gpu with tiles chosen for the upper bound): elementwise, softmax and mean
over a symbolic axis, dense and batched matmul with symbolic rows, against float64 numpy within
rtol 1e-4, atol 1e-4; a schedule that fails on symbolic extents falls back to the generic
per-thread one. Skips name what is missing (PoCL/pyopencl, ptxas, a CUDA GPU)."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from tests.e2e.test_symbolic_e2e import (BATCH_MAX, BATCH_SIZES, ENCODER_SHAPES, SEQ_MAX, SEQ_SIZES,
                                         check_inputs_that_disagree_are_refused,
                                         check_size_outside_the_range_is_refused, check_sizes,
                                         check_tvmc_run_in_and_out_of_range, encoder_feeds, encoder_model, small_cnn)
from tests.frontend.test_symbolic_shapes import cnn_model
from tests.targets import require
from tvmc import te
from tvmc.backends import backend_for
from tvmc.cli import cli
from tvmc.codegen.nvptx import assembler_missing, kernel_resources
from tvmc.codegen.opencl import CodeGenOpenCL
from tvmc.driver import CompileOptions, compile_model
from tvmc.ops import fused
from tvmc.ops.gpu.dense import gemm_config, schedule_gemm
from tvmc.ops.gpu.injective import injective_config, schedule_injective
from tvmc.ops.gpu.reduction import reduce_config, schedule_reduce, schedule_softmax, softmax_config
from tvmc.ops.nn_dense import dense, matmul
from tvmc.ops.nn_misc import softmax
from tvmc.ops.registry import get_op
from tvmc.graph.symbolic import postfix_text
from tvmc.package import load_artifact, save_artifact
from tvmc.target import resolve_target
from tvmc.te.extent import same, same_shape
from tvmc.tir.gpu import launch_dims, lower_device
from tvmc.tir.ir import For, IfThenElse
from tvmc.tir.lower import lower

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")

OP_TOL = dict(rtol=1e-4, atol=1e-4)


def compile_encoder(target: str):
    return compile_model(encoder_model(), resolve_target(target), CompileOptions(input_shapes=ENCODER_SHAPES))


def compile_cnn(target: str):
    return compile_model(small_cnn(), resolve_target(target), CompileOptions(dim_ranges={"N": (1, BATCH_MAX)}))


def cnn_feeds(n: int) -> dict:
    return {"x": np.random.default_rng(n).standard_normal((n, 3, 16, 16)).astype(np.float32)}


# ---- OpenCL: whole models ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def opencl_encoder(tmp_path_factory):
    require("opencl")
    return encoder_model(), save_artifact(compile_encoder("opencl"), tmp_path_factory.mktemp("gsym") / "encoder.tar")


@pytest.fixture(scope="module")
def opencl_cnn(tmp_path_factory):
    require("opencl")
    return small_cnn(), save_artifact(compile_cnn("opencl"), tmp_path_factory.mktemp("gsym") / "cnn.tar")


def _executor(name):
    from tvmc.runtime.opencl import OpenCLExecutor

    return {"opencl": OpenCLExecutor}[name]


def test_opencl_encoder_one_artifact_every_sequence_length(opencl_encoder):
    check_sizes(*opencl_encoder, encoder_feeds, SEQ_SIZES, executor=_executor("opencl"))


def test_opencl_cnn_one_artifact_every_batch(opencl_cnn):
    check_sizes(*opencl_cnn, cnn_feeds, BATCH_SIZES, executor=_executor("opencl"))


def test_opencl_artifact_kernels_take_the_size_variables_and_launch_by_them(opencl_encoder):
    """mod.cl: every kernel that mod.json gives size arguments declares them (`const long seq`)
    after its buffers; its grid is a program of them where it changes over the range; the
    range's upper bound sizes the buffers."""
    art = load_artifact(opencl_encoder[1])
    g, source = art.graph_json, art.library.decode()
    assert g["size_vars"] == [{"name": "seq", "lo": 1, "hi": SEQ_MAX}]
    sized = g["size_args"]
    assert len(sized) >= 10
    for name, args in sized.items():
        assert args == [0]
        head = re.search(rf"__kernel void {name}\(([^)]*)\)", source).group(1)
        assert head.split(", ")[-1] == "const long seq", head
    symbolic_grids = [k for k, v in g["kernels"].items() if any(isinstance(d, list) for d in v["grid"])]
    assert len(symbolic_grids) >= 5 and set(symbolic_grids) <= set(sized)
    for k in symbolic_grids:  # a program only where the grid changes over the range, else a literal:
        # (4 seq + 255) // 256 blocks, say: 1 at seq 1, 8 at 512
        assert launch_dims(g["kernels"][k], [1])[0] != launch_dims(g["kernels"][k], [SEQ_MAX])[0], k
    assert all(isinstance(d, int) for v in g["kernels"].values() for d in v["block"])


@pytest.mark.parametrize("seq", [0, SEQ_MAX + 1])
def test_opencl_size_outside_the_range_is_refused_naming_input_dimension_value_and_range(opencl_encoder, seq):
    check_size_outside_the_range_is_refused(_executor("opencl")(opencl_encoder[1]), seq)


def test_opencl_inputs_that_disagree_on_a_variable_are_refused_at_run(opencl_encoder):
    check_inputs_that_disagree_are_refused(_executor("opencl")(opencl_encoder[1]))


def test_opencl_tvmc_run_takes_a_size_of_the_range_and_exits_8_outside(opencl_encoder, tmp_path):
    check_tvmc_run_in_and_out_of_range(*opencl_encoder, tmp_path)


def test_opencl_profile_runs_the_kernels_at_the_bound_sizes(opencl_encoder):
    ex = _executor("opencl")(opencl_encoder[1])
    for name, value in encoder_feeds(5).items():
        ex.set_input(name, value)
    rows = ex.profile(runs=1)
    assert len(rows) == len(load_artifact(opencl_encoder[1]).graph_json["kernels"])
    assert all(r["calls"] >= 1 and r["total_ms"] >= 0 for r in rows)


def test_opencl_image_sizes_one_artifact_every_batch_height_and_width(tmp_path):
    """The CNN of tests/frontend/test_symbolic_shapes.py (strided conv, max pool, a residual block,
    ceil-mode average pool, global pool, Gemm, softmax) for N in 1..4, H and W in 8..32: both
    convolutions keep the tiled shared-memory schedule (their epilogues' shapes, (H + 1) // 2 from
    the graph and (H - 1) // 2 + 1 from the convolution, compared over the range), and five
    shapes, odd and unequal sides among them, match onnxruntime."""
    require("opencl")
    import onnxruntime as ort

    model = cnn_model()
    art = compile_model(model, resolve_target("opencl"), CompileOptions(dim_ranges={"N": (1, 4), "H": (8, 32),
                                                                                    "W": (8, 32)}))
    convs = {k: v for k, v in art.graph_json["kernels"].items() if "conv2d" in k}
    assert len(convs) == 2 and all(v["shared_bytes"] > 0 for v in convs.values())
    ex = _executor("opencl")(save_artifact(art, tmp_path / "cnn_hw.tar"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, h, w in [(1, 8, 8), (2, 9, 13), (3, 17, 31), (1, 24, 11), (4, 32, 32)]:
        x = np.random.default_rng(h * w).standard_normal((n, 3, h, w)).astype(np.float32)
        ex.set_input("x", x)
        ex.run()
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(ex.get_output(0), want, rtol=1e-4, atol=1e-5, err_msg=f"{(n, h, w)}")


def test_tvmc_inspect_shows_launch_extents_as_expressions_of_the_size_variables(opencl_encoder):
    r = CliRunner().invoke(cli, ["inspect", str(opencl_encoder[1])])
    assert r.exit_code == 0, r.output
    rows = r.output.split("device kernels")[1]
    assert re.search(r"fused_nn_softmax\s+1\s+\(seq\*2\)x1x1\s+256x1x1\s+256\s", rows), rows  # block for 512
    assert "((seq + 31) // 32)x1x1" in rows
    assert postfix_text(["$0", 4, "*", 255, "+", 256, "//", "$1", "max"], ["seq", "n"]) == \
        "max((seq*4 + 255) // 256, n)"


def test_extents_equal_over_the_range_compare_equal():
    h, w = te.size_var("H", 8, 32), te.size_var("W", 1, 5000)
    assert same((h - 1) // 2 + 1, (h + 1) // 2) and same_shape((1, h * 2), (1, h + h))
    assert not same((h - 1) // 2, (h + 1) // 2) and not same_shape((h,), (h, 1))
    assert not same((w - 1) // 2 + 1, (w + 1) // 2 + 0 * h)  # too many points to check: not proven


# ---- OpenCL: op cases through the GPU schedules -------------------------------------------------

def _run(prim, target, arrays_of, sizes):
    """Run device kernel `prim` (lowered once) at every size through the OpenCL kernel runner."""
    run = backend_for(target).run_kernel
    for n in sizes:
        inputs, ref = arrays_of(n)
        out = np.zeros(ref.shape, ref.dtype)
        run(prim, target, inputs, out)
        np.testing.assert_allclose(out, ref, err_msg=f"{prim.name} at size {n}", **OP_TOL)


def _device_kernel(s, args, name, target):
    return lower_device(lower(s, args, name, partition=False), target)


def _stmts(s):
    yield s
    for c in (getattr(s, "stmts", None) or [getattr(s, x) for x in ("body", "then", "otherwise")
                                             if getattr(s, x, None) is not None]):
        yield from _stmts(c)


def test_opencl_elementwise_over_symbolic_rows_keeps_the_tail_guard(tmp_path):
    """[S, 3] * 2 + 1 (an element count no block size divides): the grid is ceil(3 S / threads)
    blocks, the last block's threads past 3 S are guarded off."""
    t = require("opencl").target
    s_var = te.size_var("S", 1, 300)
    x = te.placeholder((s_var, 3), name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    s = te.create_schedule(y)
    schedule_injective(s, y, y, injective_config(((300, 3), (300, 3), "float32", ()), t).fallback_config(), t)
    prim = _device_kernel(s, [x, y], "scale_rows", t)
    assert prim.size_vars == [s_var] and prim.launch.symbolic
    assert prim.launch.evaluate({s_var: 1}).grid[0] == 1
    assert prim.launch.evaluate({s_var: 300}).grid[0] == -(-900 // prim.launch.block[0])
    assert any(isinstance(x, IfThenElse) for x in _stmts(prim.body))
    cl = CodeGenOpenCL(t)
    cl.add_function(prim)
    assert "__global float* restrict y, const long S)" in cl.source()
    r = np.random.default_rng(1)

    def arrays(n):
        xs = r.standard_normal((n, 3)).astype(np.float32)
        return [xs], xs * 2 + 1

    _run(prim, t, arrays, [1, 7, 85, 256, 300])
    # a tuning candidate of the kernel (the runner process's form) launches at the sizes it is given
    backend = backend_for(t)
    backend.build_candidate(prim, t, str(tmp_path / "candidate.json"))
    xs = r.standard_normal((85, 3)).astype(np.float32)
    out = np.zeros_like(xs)
    call, fetch, timed, close = backend.load_candidate(str(tmp_path / "candidate.json"), prim.name, [xs], out,
                                                       sizes=prim.size_args([xs.shape, out.shape]))
    call()
    fetch()
    assert timed(2) >= 0
    close()
    np.testing.assert_allclose(out, xs * 2 + 1, **OP_TOL)


def test_opencl_block_of_symbolic_threads_guards_the_narrower_loop():
    """Two loops bound to threadIdx.x, over S and 2 S threads: the block is 2 S threads (an
    expression evaluated per launch), the loop over S runs under `if (i < S)`; at S = 0 nothing
    is launched."""
    from tvmc.te.expr import INDEX, Cast, Load, Var, eq
    from tvmc.tir.ir import Buffer, PrimFunc, Seq, Store

    t = require("opencl").target
    s_var = te.size_var("S", 0, 64)
    x, y = Buffer("x", (s_var,), "float32"), Buffer("y", (s_var, 2), "float32")
    i, j = Var("i", INDEX), Var("j", INDEX)
    # y[2 i] = 2 x[i]; spelled so that a thread i >= S (the guard missing) would overwrite y[2 (i - S)]
    # with 100 more
    value = Load(x, i % s_var) * 2.0 + Cast("float32", i // s_var) * 100.0
    body = Seq([For(i, s_var, "threadIdx.x", Store(y, (i * 2) % (s_var * 2), value)),
                For(j, s_var * 2, "threadIdx.x", IfThenElse(eq(j % 2, 1), Store(y, j, te.const(1.0, "float32"))))])
    prim = lower_device(PrimFunc("two_thread_loops", [x, y], body, size_vars=[s_var]), t)
    assert xt_symbolic(prim.launch.block[0]) and prim.launch.evaluate({s_var: 5}).block == (10, 1, 1)
    assert prim.launch.upper.block == (128, 1, 1) and prim.launch.evaluate({s_var: 0}).block[0] == 0
    cl = CodeGenOpenCL(t)
    cl.add_function(prim)
    assert "if (i < S) {" in cl.source()

    def arrays(n):
        xs = np.arange(n, dtype=np.float32)
        return [xs], np.stack([xs * 2, np.ones(n, np.float32)], axis=1)

    _run(prim, t, arrays, [0, 1, 5, 64])


def test_opencl_softmax_over_a_symbolic_axis():
    """softmax over the last axis of [3, S, S] (attention scores): a block per row, cross-thread
    max and sum over S < the block's threads guarded."""
    t = require("opencl").target
    s_var = te.size_var("S", 1, 128)
    x = te.placeholder((3, s_var, s_var), name="x")
    y = softmax(x, 2)
    s = te.create_schedule(y)
    cfg = softmax_config(((3, 128, 128), (3, 128, 128), "float32", (("axis", 2),)), t).fallback_config()
    schedule_softmax(s, y, y, cfg, t)
    prim = _device_kernel(s, [x, y], "softmax_scores", t)
    assert prim.launch.symbolic and prim.launch.shared_bytes > 0
    r = np.random.default_rng(2)

    def arrays(n):
        xs = (r.standard_normal((3, n, n)) * 3).astype(np.float32)
        z = np.exp(xs.astype(np.float64) - xs.max(-1, keepdims=True))
        return [xs], (z / z.sum(-1, keepdims=True)).astype(np.float32)

    _run(prim, t, arrays, [1, 7, 33, 64, 128])


def test_opencl_mean_over_a_symbolic_axis():
    """mean over the symbolic axis of [S, 40]: a cross-thread reduction, the count S at run time."""
    t = require("opencl").target
    s_var = te.size_var("S", 1, 256)
    x = te.placeholder((s_var, 40), name="x")
    out = get_op("mean").compute([x], {"axis": (0,), "keepdims": 0}, SimpleNamespace(shape=(40,), dtype="float32"))
    s = te.create_schedule(out)
    schedule_reduce(s, out, out, reduce_config(((256, 40), (40,), "float32", (("axis", (0,)),)), t)
                    .fallback_config(), t)
    prim = _device_kernel(s, [x, out], "mean_tokens", t)
    assert prim.size_vars == [s_var]
    r = np.random.default_rng(3)

    def arrays(n):
        xs = r.standard_normal((n, 40)).astype(np.float32)
        return [xs], xs.astype(np.float64).mean(0).astype(np.float32)

    _run(prim, t, arrays, [1, 7, 37, 128, 256])


def test_opencl_dense_over_symbolic_rows_tiles_for_the_upper_bound():
    """dense [M, 64] x [40, 64]^T with M in 1..256: the shared-memory GEMM tile chosen for M = 256,
    the row blocks a program of M, the last tile's rows guarded."""
    t = require("opencl").target
    k, n = 64, 40
    m_var = te.size_var("M", 1, 256)
    x = te.placeholder((m_var, k), name="x")
    w = te.placeholder((n, k), name="w")
    y = dense(x, w)
    cfg = gemm_config(((256, k), (n, k), (256, n), "float32", ()), t).fallback_config()
    s = te.create_schedule(y)
    schedule_gemm(s, y, y, cfg, t)
    prim = _device_kernel(s, [x, w, y], "dense_rows", t)
    assert prim.launch.shared_bytes > 0 and xt_symbolic(prim.launch.grid[1])
    assert not any(xt_symbolic(b) for b in prim.launch.block)
    r = np.random.default_rng(4)
    weight = r.standard_normal((n, k)).astype(np.float32)

    def arrays(m):
        xs = r.standard_normal((m, k)).astype(np.float32)
        return [xs, weight], (xs.astype(np.float64) @ weight.T).astype(np.float32)

    _run(prim, t, arrays, [1, 7, 37, 128, 256])


def test_opencl_batched_matmul_over_a_symbolic_sequence():
    """attention scores [2, S, 8] x [2, 8, S] -> [2, S, S]: rows and columns symbolic."""
    t = require("opencl").target
    s_var = te.size_var("S", 1, 96)
    a = te.placeholder((2, s_var, 8), name="a")
    b = te.placeholder((2, 8, s_var), name="b")
    c = matmul(a, b, (2, s_var, s_var))
    cfg = gemm_config(((2, 96, 8), (2, 8, 96), (2, 96, 96), "float32", ()), t).fallback_config()
    s = te.create_schedule(c)
    schedule_gemm(s, c, c, cfg, t)
    prim = _device_kernel(s, [a, b, c], "scores", t)
    r = np.random.default_rng(5)

    def arrays(n):
        xa, xb = (r.standard_normal((2, n, 8)).astype(np.float32), r.standard_normal((2, 8, n)).astype(np.float32))
        return [xa, xb], (xa.astype(np.float64) @ xb).astype(np.float32)

    _run(prim, t, arrays, [1, 5, 17, 64, 96])


def xt_symbolic(e) -> bool:
    return not isinstance(e, int)


def test_a_schedule_that_fails_on_symbolic_extents_falls_back_to_the_per_thread_one(monkeypatch, tmp_path):
    """dense.gpu made to raise on the symbolic function: the kernel is lowered with the generic
    per-thread schedule (no shared memory) and the model still matches onnxruntime."""
    require("opencl")
    choose = fused._choose_implementation

    def failing(anchor, target, lookup, wl=None):
        impl, cfg = choose(anchor, target, lookup, wl)
        if impl.name in ("dense.gpu", "dense_small_batch.gpu"):
            def schedule(*args):
                raise TypeError("this schedule needs static extents")
            impl = dataclasses.replace(impl, schedule=schedule)
        return impl, cfg

    monkeypatch.setattr(fused, "_choose_implementation", failing)
    art = compile_cnn("opencl")
    dense_kernels = [k for k in art.graph_json["kernels"] if "dense" in k]
    assert dense_kernels and all(art.graph_json["kernels"][k]["shared_bytes"] == 0 for k in dense_kernels)
    path = save_artifact(art, tmp_path / "cnn.tar")
    check_sizes(small_cnn(), path, cnn_feeds, [1, 3, BATCH_MAX], executor=_executor("opencl"))


# ---- CUDA: compiled and checked by ptxas here ---------------------------------------------------

@pytest.mark.parametrize("target_name", ["cuda", "cuda-sm90"])
@pytest.mark.parametrize("model", ["encoder", "cnn"])
def test_cuda_range_artifact_is_accepted_by_ptxas_and_kernels_take_the_sizes(target_name, model):
    target = resolve_target(target_name)
    reason = assembler_missing(target)
    if reason:
        pytest.skip(reason)
    art = compile_encoder(target_name) if model == "encoder" else compile_cnn(target_name)
    assert "mod.cubin" in art.device_binaries  # ptxas assembled every kernel for the architecture
    ptx = art.library.decode()
    resources = kernel_resources(ptx.encode(), target)
    g = art.graph_json
    assert set(resources) == set(g["kernels"]) and g["size_args"]
    for name, launch in g["kernels"].items():
        entry = re.search(rf"\.entry {name}\(([^)]*)\)", ptx).group(1)
        pointers = entry.count(".param .u64 .ptr")
        sizes = len(re.findall(r"\.param \.u64 (?!\.ptr)", entry))
        assert pointers == len(launch["args"]) and sizes == len(g["size_args"].get(name, ()))
        assert resources[name]["registers"] <= target.max_registers_per_thread
        assert ".maxntid " + ", ".join(map(str, launch["block"])) in ptx.split(f".entry {name}(")[1]
    assert any(isinstance(d, list) for v in g["kernels"].values() for d in v["grid"])


def _symbolic_matmul_kernel(target, hi=200, k=64, n=48):
    """The kernel of an ONNX MatMul x[M, k] (float16, M in 1..hi) x w[k, n] (a float16
    initializer) lowered for `target` through the frontend, the graph passes and lower_fused;
    (prim, w)."""
    from onnx import TensorProto, helper, numpy_helper

    from tvmc.driver import pass_pipeline
    from tvmc.frontend.onnx import from_onnx
    from tvmc.graph.ir import Call, Function
    from tvmc.passes import PassContext, optimize

    w = np.random.default_rng(6).standard_normal((k, n)).astype(np.float16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["M", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["M", n])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = CompileOptions(dim_ranges={"M": (1, hi)})
    pipeline, config = pass_pipeline(options)
    graph = optimize(from_onnx(model, {}, {}, dict(options.dim_ranges)),
                     PassContext(opt_level=options.opt_level, config=config, target=target), pipeline)
    (func,) = {e.op for e in graph.topo() if isinstance(e, Call) and isinstance(e.op, Function)}
    return fused.lower_fused(func, target), w


def test_cuda_sm90_tensor_core_matmul_over_symbolic_rows_in_the_simt_interpreter():
    """float16 MatMul with M in 1..200 on cuda-sm90: the tensor-core template (mma, ldmatrix,
    cp.async) takes M as its size argument, its row blocks ceil(M / BM); run by the SIMT
    interpreter (tvmc/tir/simt.py) at five M it matches the float32 product within float16
    rounding of the outputs (one float16 ulp where |ref| < 64: 2^-5), and ptxas accepts its PTX."""
    from tvmc.codegen.build import compile_ir
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.tir import simt

    target = resolve_target("cuda-sm90")
    prim, w = _symbolic_matmul_kernel(target)
    assert "mma" in str(prim) and [v.name for v in prim.size_vars] == ["M"]
    assert prim.launch.symbolic and prim.launch.evaluate({prim.size_vars[0]: 129}).grid[1] >= 2
    r = np.random.default_rng(7)
    for m in [1, 7, 64, 129, 200]:
        x = r.standard_normal((m, w.shape[0])).astype(np.float16)
        out = np.zeros((m, w.shape[1]), np.float16)
        simt.run_kernel(prim, [x, w, out])
        np.testing.assert_allclose(out.astype(np.float32), x.astype(np.float32) @ w.astype(np.float32),
                                   rtol=0, atol=2 ** -5, err_msg=f"M = {m}")
    if assembler_missing(target) is None:
        cg = CodeGenLLVM(target)
        cg.add_function(prim)
        ptx = compile_ir(cg.ir_text(), target, assembly=True)
        assert prim.name in kernel_resources(ptx, target) and b"mma.sync" in ptx


class _SimtModule:
    """tvmc.runtime.cuda.KernelModule with the SIMT interpreter (tvmc/tir/simt.py) for a GPU: host
    byte buffers, each launch run by simt.run_launch on the kernel's loop IR (`prims`, {name:
    device PrimFunc} of the compile) with the grid, block and size arguments the executor gives."""

    def __init__(self, prims):
        self.prims, self.device_name, self.image = prims, "SIMT interpreter", "ptx"

    def buffer(self, nbytes):
        return np.zeros(-(-max(nbytes, 1) // 8) * 8, np.uint8)

    def upload(self, buf, array):
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buf[:data.size] = data

    def download(self, buf, array):
        array.reshape(-1).view(np.uint8)[:] = buf[:array.nbytes]

    def kernel(self, name):
        return self.prims[name]

    def launch(self, prim, launch, buffers, timed=False, scalars=()):
        from tvmc.tir import simt
        from tvmc.tir.gpu import LaunchConfig

        simt.run_launch(prim, [b.view(np.dtype(p.dtype)) for p, b in zip(prim.params, buffers)],
                        dict(zip(prim.size_vars, scalars)),
                        LaunchConfig(tuple(launch["grid"]), tuple(launch["block"]), prim.launch.shared_bytes))
        return 0.0 if timed else None

    @staticmethod
    def elapsed_ms(handle):
        return handle

    def finish(self):
        pass


@pytest.mark.parametrize("model", ["encoder", pytest.param("cnn", marks=pytest.mark.slow)])
def test_cuda_executor_runs_every_size_with_the_simt_interpreter_for_a_gpu(model, monkeypatch, tmp_path):
    """The CUDA executor's binding, size arguments and launch evaluation without a GPU: the range
    artifact for `cuda` (sm_75, the plain GPU schedules) run by tvmc.runtime.cuda.CUDAExecutor
    over a KernelModule whose launches the SIMT interpreter runs on the kernels' loop IR, matching
    onnxruntime at three sizes; no CUDA graph is captured for a range artifact."""
    import tvmc.runtime.cuda as runtime

    prims: dict = {}
    lower_functions = fused.lower_functions

    def recording(*args, **kwargs):
        kernels = lower_functions(*args, **kwargs)
        prims.update({k.prim.name: k.prim for k in kernels})
        return kernels

    monkeypatch.setattr(fused, "lower_functions", recording)
    monkeypatch.setattr(runtime, "KernelModule", lambda *args, **kwargs: _SimtModule(prims))
    monkeypatch.setattr(runtime, "cuda_device", lambda spec=None: 0)
    if model == "encoder":
        path = save_artifact(compile_encoder("cuda"), tmp_path / "encoder.tar")
        check_sizes(encoder_model(), path, encoder_feeds, [1, 9, 20], executor=runtime.CUDAExecutor)
        check_size_outside_the_range_is_refused(runtime.CUDAExecutor(path), SEQ_MAX + 1)  # at set_input
    else:
        path = save_artifact(compile_cnn("cuda"), tmp_path / "cnn.tar")
        check_sizes(small_cnn(), path, cnn_feeds, [1, 3, BATCH_MAX], executor=runtime.CUDAExecutor)
    ex = runtime.CUDAExecutor(path)
    assert not ex.cuda_graph and "symbolic shapes" in ex.launch_mode


@pytest.mark.cuda
@pytest.mark.parametrize("model", ["encoder", "cnn"])
def test_cuda_one_artifact_every_size(model, tmp_path):
    """On a GPU: the range artifacts run at every size of the e2e sizes, matching onnxruntime
    (kernel by kernel: a CUDA graph would keep one run's sizes)."""
    require("cuda")
    from tvmc.runtime.cuda import CUDAExecutor

    if model == "encoder":
        path = save_artifact(compile_encoder("cuda"), tmp_path / "encoder.tar")
        check_sizes(encoder_model(), path, encoder_feeds, SEQ_SIZES, executor=CUDAExecutor)
        check_size_outside_the_range_is_refused(CUDAExecutor(path), SEQ_MAX + 1)
    else:
        path = save_artifact(compile_cnn("cuda"), tmp_path / "cnn.tar")
        check_sizes(small_cnn(), path, cnn_feeds, BATCH_SIZES, executor=CUDAExecutor)
    ex = CUDAExecutor(path)
    assert not ex.cuda_graph and "symbolic shapes" in ex.launch_mode


@pytest.mark.cuda
def test_cuda_tensor_core_matmul_over_symbolic_rows_on_the_gpu():
    """On a GPU with float16 tensor cores: the symbolic-row MatMul kernel of the SIMT test,
    compiled for this GPU's architecture, launched at five M by the CUDA backend's kernel runner
    (its size argument and grid from the arrays' shapes), against the float32 product."""
    from tvmc.ops.gpu.tensorcore import tensorcore_supports
    from tvmc.runtime.cuda import gpu_info

    require("cuda")
    target = resolve_target(f"cuda -mcpu={gpu_info()[1]}")
    if not tensorcore_supports(target, ((), (), (), "float16", ())):
        pytest.skip(f"{target.cpu} has no float16 tensor-core mma that tvmc uses")
    prim, w = _symbolic_matmul_kernel(target)
    assert "mma" in str(prim)
    r = np.random.default_rng(8)
    for m in [1, 7, 64, 129, 200]:
        x = r.standard_normal((m, w.shape[0])).astype(np.float16)
        out = backend_for(target).run_kernel(prim, target, [x, w], np.zeros((m, w.shape[1]), np.float16))
        np.testing.assert_allclose(out.astype(np.float32), x.astype(np.float32) @ w.astype(np.float32),
                                   rtol=0, atol=2 ** -5, err_msg=f"M = {m}")
