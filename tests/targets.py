"""Targets the tests run on: one registry, so op and model tests are parametrized over targets
instead of being copied per target (DESIGN.md section 7).

Each entry names the target spec tvmc resolves, why it cannot run here (None when it can: the
reason names the missing tool and how to install it, and becomes the test's skip message), the
pytest marks of its tests (`-m cuda` selects the GPU ones) and how one compiled kernel runs on it
(`run_kernel(prim, arrays, out)`: ctypes on this host's CPU, pyopencl for OpenCL, cuda-python for
CUDA, the C runner under qemu-user for ARM, wasmtime for wasm). Adding a target is one entry here
and, where its runtime is new, one kernel runner.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from tvmc.target import resolve_target

_tmp = tempfile.TemporaryDirectory(prefix="tvmc-test-kernels-")
_serial = itertools.count()


def run_cpu_kernel(prim, target, arrays, out):
    """Compile `prim` with the LLVM codegen into a shared library and call it through ctypes."""
    from tvmc.codegen.build import compile_ir, link_shared
    from tvmc.codegen.llvm import CodeGenLLVM

    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    so = link_shared(compile_ir(cg.ir_text(), target), target)
    # a fresh file each time: rewriting a path that is still dlopen()ed corrupts the loaded code,
    # and dlopen() of a known path returns the old library
    path = Path(_tmp.name, f"{prim.name}_{next(_serial)}.so")
    path.write_bytes(so)
    lib = ctypes.CDLL(str(path))
    args = [np.ascontiguousarray(a) for a in arrays] + [out]
    getattr(lib, prim.name)(*[ctypes.c_void_p(a.ctypes.data) for a in args])
    return out


def run_opencl_kernel(prim, target, arrays, out):
    """Print `prim` as OpenCL C, build it for the first OpenCL device and run it once."""
    from tvmc.codegen.opencl import CodeGenOpenCL
    from tvmc.runtime.device import run_kernel
    from tvmc.runtime.opencl import KernelProgram

    cg = CodeGenOpenCL(target)
    cg.add_function(prim)
    return run_kernel(KernelProgram(cg.source()), prim.name, prim.launch.to_dict(),
                      [np.ascontiguousarray(a) for a in arrays], out)


def one_kernel_graph(name: str, args) -> dict:
    """Graph-executor JSON of one kernel `name` over `args` (arrays: its inputs, then its output),
    each a graph input or output with a storage of its own."""
    n = len(args)
    nodes = [{"op": "null", "name": f"arg{k}", "inputs": []} for k in range(n - 1)]
    nodes.append({"op": "tvm_op", "name": name, "inputs": [[k, 0, 0] for k in range(n - 1)],
                  "attrs": {"func_name": name, "num_inputs": n - 1, "num_outputs": 1}})
    return {"nodes": nodes, "arg_nodes": list(range(n - 1)), "node_row_ptr": list(range(n + 1)),
            "heads": [[n - 1, 0, 0]],
            "attrs": {"shape": ["list_shape", [list(a.shape) for a in args]],
                      "dltype": ["list_str", [a.dtype.name for a in args]],
                      "storage_id": ["list_int", list(range(n))]}}


def run_emulated_kernel(prim, target, arrays, out):
    """Compile `prim` as the one kernel of a graph (graph entry, module description and C API in
    the library, as `tvmc compile` builds them), and run it under the target's emulator through
    the shipped C runner (tvmc.runtime.emulated)."""
    from tvmc.codegen import description
    from tvmc.codegen.build import compile_ir, compile_runtime, link_shared
    from tvmc.codegen.entry import add_graph_entry
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.runtime.emulated import EmulatedProgram

    args = [np.ascontiguousarray(a) for a in arrays] + [out]
    graph = one_kernel_graph(prim.name, args)
    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    add_graph_entry(cg, graph)
    description.embed(cg.module, description.module_description(graph, {}))
    library = link_shared(compile_ir(cg.ir_text(), target), target, [compile_runtime(target)])
    program = EmulatedProgram(target, library, None, prim.name)
    try:
        (result,), _ = program.run(args[:-1], 1)
    finally:
        program.close()
    np.copyto(out, result)
    return out


def run_wasm_kernel(prim, target, arrays, out):
    """Compile `prim` with the LLVM codegen for wasm32, link it into a module and run it once in
    wasmtime."""
    from tvmc.codegen.build import compile_ir, link_shared
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.runtime.wasm import run_kernel

    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    module = link_shared(compile_ir(cg.ir_text(), target), target)
    return run_kernel(module, prim.name, [np.ascontiguousarray(a) for a in arrays], out, prim.name)


def run_cuda_kernel(prim, target, arrays, out):
    """Compile `prim` to PTX with the LLVM codegen (nvptx64), load it on the first CUDA GPU and
    run it once."""
    from tvmc.codegen.build import compile_ir
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.runtime.cuda import KernelModule
    from tvmc.runtime.device import run_kernel

    cg = CodeGenLLVM(target)
    cg.add_function(prim)
    module = KernelModule(compile_ir(cg.ir_text(), target, assembly=True), arch=target.cpu)
    return run_kernel(module, prim.name, prim.launch.to_dict(), [np.ascontiguousarray(a) for a in arrays], out)


def _always() -> None:
    return None


def _opencl_missing() -> str | None:
    from tvmc.runtime.opencl import opencl_available

    return opencl_available()


def _emulation_missing(spec: str) -> Callable:
    def missing() -> str | None:
        from tvmc.runtime.emulated import emulation_missing

        return emulation_missing(resolve_target(spec))

    return missing


def kernel_runner(target) -> Callable:
    """How one compiled kernel of the resolved tvmc Target runs here: by its runtime, and for a CPU
    of another architecture under emulation."""
    from tvmc.target import host_arch

    if target.runtime == "cpu" and target.arch != host_arch():
        return run_emulated_kernel
    return KERNEL_RUNNERS[target.runtime]


def _wasm_missing() -> str | None:
    """Why wasm modules cannot be built or run here: the engine (wasmtime), the linker or one
    of its tools (each named with its package), else None."""
    from tvmc.errors import CodegenError
    from tvmc.runtime.wasm import wasm_available
    from tvmc.toolchain import find_linker_tools, find_tool

    target = resolve_target("wasm")
    try:
        find_tool(target.linker, target.linker_package, "linker", CodegenError)
        find_linker_tools(target, CodegenError)
    except CodegenError as e:
        return str(e)
    return wasm_available()


def _cuda_missing() -> str | None:
    from tvmc.runtime.cuda import cuda_available

    return cuda_available()


KERNEL_RUNNERS = {"cpu": run_cpu_kernel, "opencl": run_opencl_kernel, "cuda": run_cuda_kernel,
                  "wasm": run_wasm_kernel}


@dataclass(frozen=True)
class TargetUnderTest:
    """name: the pytest id; spec: what `--target` takes; missing: () -> None when the target runs
    here, else the skip reason naming the missing tool; marks: pytest marks of its tests;
    op_sample: make test runs the first case of each operator there (False: every op case is a
    slow test, and make test's sample is one case per schedule, tests/ops/test_cpu_schedules.py)."""

    name: str
    spec: str
    missing: Callable = _always
    marks: tuple = ()
    op_sample: bool = True

    @functools.cached_property
    def target(self):
        return resolve_target(self.spec)

    def run_kernel(self, prim, arrays, out):
        return kernel_runner(self.target)(prim, self.target, arrays, out)


TARGETS = [
    TargetUnderTest("native", "native"),
    TargetUnderTest("opencl", "opencl", _opencl_missing),
    TargetUnderTest("arm", "arm", _emulation_missing("arm"), op_sample=False),
    TargetUnderTest("wasm", "wasm", _wasm_missing),
    TargetUnderTest("cuda", "cuda", _cuda_missing, (pytest.mark.cuda,)),
]
BY_NAME = {t.name: t for t in TARGETS}


def require(name: str) -> TargetUnderTest:
    """The target `name` when it runs here; otherwise the calling test is skipped with the reason."""
    t = BY_NAME[name]
    reason = t.missing()
    if reason:
        pytest.skip(f"target {name}: {reason}")
    return t


def by_runtime(target) -> Callable:
    """The kernel runner of a resolved tvmc Target (see kernel_runner)."""
    return functools.partial(kernel_runner(target), target=target)
