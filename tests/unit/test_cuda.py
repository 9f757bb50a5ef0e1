"""The CUDA target's parts that need no GPU: descriptors and the nvptx64 ISA table, the NVPTX
spellings of CodeGenLLVM's device kernels (LLVM IR and PTX), ptxas and its errors, the
artifact's cubin member, and the runtime's choices and errors without a driver."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from tests.e2e.builders import mlp
from tests.unit.test_gpu_lower import _elementwise, _tiled_matmul
from tvmc.codegen.build import compile_ir
from tvmc.codegen.llvm import CodeGenLLVM
from tvmc.codegen.nvptx import assembler_missing, ptx_version, run_ptxas
from tvmc.errors import ArtifactError, CodegenError, TargetError
from tvmc.target import resolve_target
from tvmc.te.expr import FloatImm, Var
from tvmc.tir.gpu import lower_device
from tvmc.tir.ir import Buffer, For, PrimFunc, Seq, Store
from tvmc.tir.lower import lower

CUDA = resolve_target("cuda")


def _ptx(prim, target=CUDA) -> str:
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    return compile_ir(cg.ir_text(), target, assembly=True).decode()


def _need_ptxas():
    reason = assembler_missing(CUDA)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("name,cpu,ptx", [("cuda", "sm_75", 63), ("cuda-sm80", "sm_80", 70),
                                          ("cuda-sm90", "sm_90", 78)])
def test_shipped_cuda_descriptors(name, cpu, ptx):
    t = resolve_target(name)
    assert (t.kind, t.family, t.codegen, t.triple, t.cpu) == ("gpu", "gpu", "llvm", "nvptx64-nvidia-cuda", cpu)
    assert (t.max_threads_per_block, t.thread_warp_size, t.max_registers_per_thread) == (1024, 32, 255)
    assert t.max_shared_memory_per_block == 48 * 1024  # static shared memory, every compute capability
    assert (t.library_format, t.runtime, t.linker, t.assembler) == ("ptx", "cuda", (), ("ptxas",))
    assert t.host_features == () and ptx_version(t) == ptx


def test_gpu_facts_stay_out_of_cpu_descriptors():
    assert not {"max_registers_per_thread", "assembler"} & set(resolve_target("x86").to_dict())


@pytest.mark.parametrize("spec,cpu,version", [("cuda -mcpu=sm_86", "sm_86", "7.1"),
                                              ("cuda-sm90 -mcpu=sm_89", "sm_89", "7.8"),
                                              ("cuda -mattr=+ptx80", "sm_75", "8.0"),
                                              ("cuda-sm90 -mattr=+ptx70", "sm_90", "7.8")])
def test_mcpu_and_mattr_set_the_architecture_and_the_ptx_version(spec, cpu, version):
    s, a, b = _elementwise()
    target = resolve_target(spec)
    ptx = _ptx(lower_device(lower(s, [a, b], "add_one"), target), target)
    assert f".target {cpu}" in ptx and f".version {version}" in ptx


@pytest.mark.parametrize("spec,message", [
    ("cuda -mcpu=sm_61", "unknown cpu 'sm_61' for nvptx64; known: sm_100"),
    ("cuda -mattr=+ptx99", "unknown feature '+ptx99'"),
])
def test_unknown_architectures_and_ptx_versions_are_target_errors(spec, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        resolve_target(spec)


def test_removing_the_ptx_version_the_architecture_needs_is_a_target_error_before_llvm():
    target = resolve_target("cuda-sm90 -mattr=-ptx78")  # LLVM would abort the process on it
    s, a, b = _elementwise()
    with pytest.raises(TargetError, match=r"sm_90 needs PTX ISA 7\.8 \(\+ptx78\)"):
        _ptx(lower_device(lower(s, [a, b], "add_one"), target), target)


def test_device_kernel_in_nvvm_ir_and_ptx():
    """Thread indices from the special registers, tiles in shared memory (address space 3)
    between bar.sync barriers, a kernel entry with its block as launch bound."""
    s, A, B, C = _tiled_matmul()
    prim = lower_device(lower(s, [A, B, C], "matmul"), CUDA)
    cg = CodeGenLLVM(CUDA)
    cg.add_function(prim)
    ir = cg.ir_text()
    text = ir.replace('"', "")  # llvmlite quotes every name
    assert "define ptx_kernel void @matmul(" in text
    assert "call i32 @llvm.nvvm.read.ptx.sreg.tid.x()" in text and "call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()" in text
    assert text.count("addrspace(3) global [32 x float]") == 2 and text.count("call void @llvm.nvvm.barrier0()") == 2
    assert "ptr @matmul, !maxntidx, i32 8 }" in text and "ptr @matmul, !maxntidy, i32 8 }" in text
    ptx = compile_ir(ir, CUDA, assembly=True).decode()
    assert ".maxntid 8, 8, 1" in ptx and ".maxnreg 255" in ptx
    assert "%tid.x" in ptx and "%ctaid.y" in ptx and len(re.findall(r"bar\.sync\s+0;", ptx)) >= 2
    assert ("ld.shared" in ptx and "st.shared" in ptx
            and len(re.findall(r"\.shared \.align 16 \.b8 \S+\[128\]", ptx)) == 2)


def test_a_thread_loop_narrower_than_the_launch_runs_guarded():
    out = Buffer("out", (64,), "float32")
    tx, ty = Var("tx"), Var("ty")
    body = Seq([For(tx, 64, "threadIdx.x", Store(out, tx, FloatImm(1.0))),
                For(ty, 32, "threadIdx.x", Store(out, ty, FloatImm(2.0)))])
    prim = lower_device(PrimFunc("two_widths", [out], body), CUDA)
    cg = CodeGenLLVM(CUDA)
    cg.add_function(prim)
    ir = cg.ir_text()
    assert re.search(r'icmp slt i64 %"?ty"?, 32', ir) and not re.search(r'icmp slt i64 %"?tx"?, 64', ir)


def test_ptxas_rejection_is_one_line_with_the_command():
    _need_ptxas()
    with pytest.raises(CodegenError) as err:
        run_ptxas(b".version 7.0\n.target sm_80\n.address_size 64\nthis is not ptx\n", resolve_target("cuda-sm80"))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("ptxas rejected the PTX: ") and "(command: ptxas -arch=sm_80" in msg


def test_kernels_and_triples_must_match():
    s, a, b = _elementwise()
    cpu_prim = lower(s, [a, b], "add_one")
    with pytest.raises(CodegenError, match="not lowered for the GPU target cuda"):
        CodeGenLLVM(CUDA).add_function(cpu_prim)
    with pytest.raises(CodegenError, match="has no GPU codegen"):
        CodeGenLLVM(resolve_target("x86")).add_function(lower_device(cpu_prim, CUDA))


# ---- artifact and runtime ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_module():
    from tvmc.driver import compile_model

    return compile_model(mlp(seed=5, batch=2, sizes=(16, 24, 4)), resolve_target("cuda"))


def test_a_listed_device_binary_must_be_in_the_tar(cuda_module, tmp_path):
    from dataclasses import replace

    from tvmc.package import load_artifact, save_artifact

    _need_ptxas()
    assert load_artifact(save_artifact(cuda_module, tmp_path / "ok.tar")).device_binaries.keys() == {"mod.cubin"}
    broken = replace(cuda_module, device_binaries={})  # metadata still lists mod.cubin
    with pytest.raises(ArtifactError, match="missing member mod.cubin"):
        load_artifact(save_artifact(broken, tmp_path / "broken.tar"))


def test_without_cuda_python_the_error_names_it(cuda_module, tmp_path, monkeypatch):
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor

    path = save_artifact(cuda_module, tmp_path / "m.tar")
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(ArtifactError, match=r"needs cuda-python: pip install 'cuda-python>=12\.6'"):
        create_executor(path)


def test_without_a_driver_the_error_says_so(cuda_module, tmp_path):
    from tvmc.package import save_artifact
    from tvmc.runtime import create_executor
    from tvmc.runtime.cuda import cuda_available

    if cuda_available() is None:
        pytest.skip("a CUDA GPU runs here")
    with pytest.raises(ArtifactError) as err:
        create_executor(save_artifact(cuda_module, tmp_path / "m.tar"), "cuda")
    assert "\n" not in str(err.value) and "CUDA" in str(err.value)
    with pytest.raises(ArtifactError, match="expected cuda or cuda:ORDINAL"):
        create_executor(tmp_path / "m.tar", "cuda:first")


@pytest.mark.parametrize("arch,capability,cubin,ptx", [
    ("sm_80", (8, 0), True, True), ("sm_80", (8, 6), True, True), ("sm_86", (8, 0), False, False),
    ("sm_80", (9, 0), False, True), ("sm_90a", (9, 0), True, True), ("sm_90a", (10, 0), False, False),
    ("sm_75", (12, 0), False, True), ("sm_100", (10, 3), True, True),
])
def test_which_image_runs_on_which_gpu(arch, capability, cubin, ptx):
    from tvmc.runtime.cuda import cubin_runs_on, ptx_runs_on

    assert cubin_runs_on(arch, capability) == cubin and ptx_runs_on(arch, capability) == ptx


@pytest.mark.cuda
def test_device_data_round_trip_through_the_program_interface():
    """run_kernel drives any program of tvmc.runtime.device; on a GPU, a CUDA KernelModule."""
    from tests.targets import require

    target = require("cuda")
    s, a, b = _elementwise()
    prim = lower_device(lower(s, [a, b], "add_one"), target.target)
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(target.run_kernel(prim, [x], np.zeros(1000, np.float32)), x + 1)


def test_a_block_beyond_the_register_file_is_refused_at_compile_time():
    """ptxas fits each block into the register file of a real GPU; a descriptor with a smaller one
    (here 512 registers per block) gets a one-line CodegenError naming the kernel."""
    from tvmc.driver import compile_model

    _need_ptxas()
    small = resolve_target("cuda", {"registers_per_block": "512"})
    with pytest.raises(CodegenError, match=r"kernel fused_\w+: ptxas gave each of its \d+ threads \d+ registers, "
                                           r"beyond target cuda's 512 per block") as err:
        compile_model(mlp(seed=5, batch=32, sizes=(16, 24, 4)), small)  # GEMM tiles (batch 2: small-batch dense)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("offset,wide", [(0, True), (2, False)])
def test_aligned_vector_accesses_become_one_wide_load_and_store(offset, wide):
    """out[4 tx + v + offset] = a[4 tx + v + offset] + 1 over v in 0..4, vectorized: 16-byte
    aligned when offset is 0 (ld.global.nc.v4 / st.global.v4), element-aligned otherwise."""
    from tvmc.te.expr import IntImm, Load

    a, out = Buffer("a", (68,), "float32"), Buffer("out", (68,), "float32")
    tx, v = Var("tx"), Var("v")
    index = tx * IntImm(4) + v + IntImm(offset)
    body = For(tx, 16, "threadIdx.x", For(v, 4, "vectorize", Store(out, index, Load(a, index) + FloatImm(1.0))))
    ptx = _ptx(lower_device(PrimFunc("shifted", [a, out], body), CUDA))
    assert (re.search(r"ld\.global\.nc\.v4\.\w+", ptx) is not None) == wide
    assert (re.search(r"st\.global\.v4\.\w+", ptx) is not None) == wide


# ---- CUDA graphs: what can be checked without a driver ---------------------------------------

def test_which_graphs_a_cuda_graph_can_hold(cuda_module):
    """A graph of kernels can be captured; a run-time loop (its trip count and condition read on
    the host between launches) or a graph without kernels cannot, and the reason names it."""
    from tests.e2e.test_run_time_loop import running_sum_model
    from tvmc.driver import compile_model
    from tvmc.runtime.cuda import cuda_graph_blocker

    assert cuda_graph_blocker(cuda_module.graph_json) is None
    looped = compile_model(running_sum_model(), CUDA)
    assert cuda_graph_blocker(looped.graph_json) == "run-time loop 'the_loop' is driven from the host"
    identity = {"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], "node_row_ptr": [0, 1],
                "heads": [[0, 0, 0]], "attrs": {"shape": ["list_shape", [[4]]], "dltype": ["list_str", ["float32"]],
                                                "storage_id": ["list_int", [0]]}}
    assert cuda_graph_blocker(identity) == "no kernels to launch"


class _FakeDriver:
    """The calls of cuda.bindings.driver that capture_graph makes, recorded in `calls`; the call
    named `fail` returns an error, and cuGraphGetNodes reports `nodes` (default: the launches)."""

    import enum

    CUresult = enum.IntEnum("CUresult", {"CUDA_SUCCESS": 0, "CUDA_ERROR_UNKNOWN": 999})

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    def __init__(self, fail=None, nodes=None):
        self.calls, self.fail, self.nodes = [], fail, nodes

    def _result(self, name, *values):
        self.calls.append(name)
        return (self.CUresult(999 if name == self.fail else 0), *values)

    def launch(self):
        self.calls.append("launch")

    def cuStreamBeginCapture(self, stream, mode):
        assert mode == self.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        return self._result("cuStreamBeginCapture")

    def cuStreamEndCapture(self, stream):
        return self._result("cuStreamEndCapture", 7)

    def cuGraphGetNodes(self, graph, num_nodes=0):
        assert graph == 7 and num_nodes == 0
        return self._result("cuGraphGetNodes", [], self.calls.count("launch") if self.nodes is None else self.nodes)

    def cuGraphInstantiate(self, graph, flags):
        assert graph == 7 and flags == 0
        return self._result("cuGraphInstantiate", 8)

    def cuGraphDestroy(self, graph):
        assert graph == 7
        return self._result("cuGraphDestroy")


def test_capture_graph_records_the_launches_then_instantiates():
    from tvmc.runtime.cuda import capture_graph

    cu = _FakeDriver()
    assert capture_graph(cu, "stream", lambda: (cu.launch(), cu.launch()), 2) == (7, 8)
    assert cu.calls == ["cuStreamBeginCapture", "launch", "launch", "cuStreamEndCapture", "cuGraphGetNodes",
                        "cuGraphInstantiate"]


@pytest.mark.parametrize("fail,nodes,message,calls", [
    ("cuStreamBeginCapture", None, "CUDA cuStreamBeginCapture failed: CUDA_ERROR_UNKNOWN", ["cuStreamBeginCapture"]),
    ("launch", None, "kernel launch refused", ["cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphDestroy"]),
    (None, 1, "the captured CUDA graph holds 1 nodes, not the 2 kernel launches",
     ["cuStreamBeginCapture", "launch", "launch", "cuStreamEndCapture", "cuGraphGetNodes", "cuGraphDestroy"]),
    ("cuGraphInstantiate", None, "CUDA cuGraphInstantiate failed: CUDA_ERROR_UNKNOWN",
     ["cuStreamBeginCapture", "launch", "launch", "cuStreamEndCapture", "cuGraphGetNodes", "cuGraphInstantiate",
      "cuGraphDestroy"]),
])
def test_a_failed_capture_ends_capture_mode_and_frees_the_graph(fail, nodes, message, calls):
    """Whatever fails, the stream leaves capture mode and no graph is left allocated; the error
    is the driver's, in one ArtifactError line."""
    from tvmc.runtime.cuda import capture_graph

    cu = _FakeDriver(fail, nodes)

    def launch_all():
        if fail == "launch":
            raise ArtifactError("kernel launch refused")
        cu.launch()
        cu.launch()

    with pytest.raises(ArtifactError, match=re.escape(message)):
        capture_graph(cu, "stream", launch_all, 2)
    assert cu.calls == calls


class _FakeModule:
    """tvmc.runtime.cuda.KernelModule without a GPU: host buffers, and launches recorded instead of
    run (`log` for launches and graph replays, `graph` for what capture() recorded)."""

    fail_capture = False

    def __init__(self, ptx, cubin=None, arch="", device=None, origin=""):
        self.device_name, self.image = "fake GPU", "ptx"
        self.log, self.graph, self.capturing, self.closed = [], None, False, False

    def buffer(self, nbytes):
        return np.zeros(max(nbytes, 1), np.uint8)

    def upload(self, buf, array):
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buf[:data.size] = data

    def download(self, buf, array):
        array.reshape(-1).view(np.uint8)[:] = buf[:array.nbytes]

    def kernel(self, name):
        return name

    def launch(self, kernel, launch, buffers, timed=False):
        (self.graph if self.capturing else self.log).append((kernel, buffers))
        return 0.25 if timed else None

    @staticmethod
    def elapsed_ms(handle):
        return handle

    def finish(self):
        pass

    def capture(self, launch_all, kernels):
        if self.fail_capture:
            raise ArtifactError("CUDA cuStreamBeginCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
        self.capturing, self.graph = True, []
        launch_all()
        self.capturing = False
        assert len(self.graph) == kernels

    def launch_graph(self):
        self.log.append("graph")

    def close(self):
        self.closed = True


@pytest.fixture
def fake_gpu(monkeypatch, cuda_module, tmp_path):
    """The path of the MLP's CUDA artifact, with tvmc.runtime.cuda's KernelModule a _FakeModule."""
    import tvmc.runtime.cuda as runtime
    from tvmc.package import save_artifact

    monkeypatch.setattr(runtime, "KernelModule", _FakeModule)
    monkeypatch.setattr(runtime, "cuda_device", lambda spec=None: 0)
    return save_artifact(cuda_module, tmp_path / "m.tar")


def test_the_cuda_graph_is_captured_once_and_replayed_on_each_run(fake_gpu):
    from tvmc.runtime.cuda import CUDAExecutor

    ex = CUDAExecutor(fake_gpu)
    names = [call[0] for call in ex._calls]
    assert (ex.cuda_graph, ex.cuda_graph_off, ex.launch_mode) == (True, None, "CUDA graph")
    assert [k for k, _ in ex.program.graph] == names and ex.program.log == []
    ex.run()
    ex.run()
    assert ex.program.log == ["graph", "graph"]
    # set_input copies into the buffer the captured kernels read: replays see the new values
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    ex.set_input("x", x)
    x_buffer = ex._buffers[ex._entries[ex._inputs["x"]][0]]
    assert any(b is x_buffer for _, bufs in ex.program.graph for b in bufs)
    assert np.array_equal(x_buffer[:x.nbytes].view(np.float32).reshape(x.shape), x)
    # profiling launches kernel by kernel (a warm-up run, then timed runs), never the graph
    ex.program.log.clear()
    rows = ex.profile(2)
    assert [k for k, _ in ex.program.log] == names * 3
    assert rows == [{"name": n, "calls": 1, "total_ms": 0.25} for n in names]
    ex.close()
    assert ex.program.closed


def test_without_the_cuda_graph_each_run_launches_every_kernel(fake_gpu):
    from tvmc.runtime.cuda import CUDAExecutor

    ex = CUDAExecutor(fake_gpu, cuda_graph=False)
    assert (ex.cuda_graph, ex.cuda_graph_off) == (False, "turned off") and ex.program.graph is None
    assert ex.launch_mode == "kernel by kernel, no CUDA graph: turned off"
    ex.run()
    assert [k for k, _ in ex.program.log] == [call[0] for call in ex._calls]


def test_a_run_time_loop_is_never_captured(monkeypatch, tmp_path):
    import tvmc.runtime.cuda as runtime
    from tests.e2e.test_run_time_loop import running_sum_model
    from tvmc.driver import compile_model
    from tvmc.package import save_artifact

    monkeypatch.setattr(runtime, "KernelModule", _FakeModule)
    monkeypatch.setattr(runtime, "cuda_device", lambda spec=None: 0)
    ex = runtime.CUDAExecutor(save_artifact(compile_model(running_sum_model(), CUDA), tmp_path / "loop.tar"))
    assert ex.cuda_graph is False and ex.program.graph is None
    assert ex.cuda_graph_off.startswith("run-time loop 'the_loop'")
    ex.run()  # M = 0 in the zeroed buffers: the loop runs no iteration, and nothing is replayed
    assert "graph" not in ex.program.log


def test_a_refused_capture_is_one_error_naming_the_way_out(fake_gpu, monkeypatch):
    """No silent switch to kernel-by-kernel launches: the error says how to ask for them."""
    from tvmc.runtime.cuda import CUDAExecutor

    monkeypatch.setattr(_FakeModule, "fail_capture", True)
    with pytest.raises(ArtifactError) as err:
        CUDAExecutor(fake_gpu)
    msg = str(err.value)
    assert "\n" not in msg and "capturing the CUDA graph failed: CUDA cuStreamBeginCapture failed" in msg
    assert "--no-cuda-graph" in msg
    assert CUDAExecutor(fake_gpu, cuda_graph=False).cuda_graph is False


def test_tvmc_run_says_which_launch_mode_ran(fake_gpu):
    """api.run and `tvmc run` (text and --json) report the launch mode, and close the executor."""
    import json

    from click.testing import CliRunner

    import tvmc
    from tvmc.cli import cli

    said = []
    result = tvmc.run(fake_gpu, on_device=said.append)
    assert said == ["fake GPU (CUDA graph)"]
    assert result.device == {"name": "fake GPU", "cuda_graph": True, "cuda_graph_off": None}
    result = tvmc.run(fake_gpu, cuda_graph=False)
    assert result.device == {"name": "fake GPU", "cuda_graph": False, "cuda_graph_off": "turned off"}
    assert result.to_json()["device"] == result.device

    out = CliRunner().invoke(cli, ["run", str(fake_gpu), "--no-cuda-graph"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[0] == "device: fake GPU (kernel by kernel, no CUDA graph: turned off)"
    out = CliRunner().invoke(cli, ["run", str(fake_gpu), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["device"] == {"name": "fake GPU", "cuda_graph": True, "cuda_graph_off": None}
