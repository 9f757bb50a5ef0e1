"""The GPU backends: OpenCL C source (mod.cl, run by pyopencl) and PTX (mod.ptx with a cubin
beside it where the descriptor's assembler is found, run by cuda-python).

Both hold one device kernel per fused function; mod.json "kernels" records each kernel's launch
(grid, block, shared bytes), argument order, FLOPs and global memory traffic, and the module
description is the text's first line. A tuning candidate is its kernel's text and launch in a
JSON file that the runner process loads on the first OpenCL device or CUDA GPU, timing each
launch between device events.
"""

from __future__ import annotations

import json

import numpy as np

from tvmc.backends.base import Backend, described, write_dumps


def kernel_info(kernel) -> dict:
    """What mod.json records of a device kernel (a LoweredKernel): its launch (grid, block, shared
    bytes), its arguments in call order (inputs, then the output; name, shape, dtype), its FLOPs
    (the anchor op's, tvmc.autotune.task.task_flops) and the global memory bytes it loads and
    stores (tvmc.tir.gpu.global_traffic_bytes). A kernel with symbolic extents: its grid and block
    entries may be postfix programs over its size arguments (LaunchConfig.to_dict), its arguments'
    shapes and traffic at the upper bounds."""
    from tvmc.te.extent import upper_shape
    from tvmc.tir.gpu import global_traffic_bytes

    prim = kernel.prim
    return dict(prim.launch.to_dict(prim.size_vars),
                args=[{"name": b.name, "shape": list(upper_shape(b.shape)), "dtype": b.dtype} for b in prim.params],
                flops=kernel.flops, global_bytes=global_traffic_bytes(prim))


class DeviceBackend(Backend):
    """What the OpenCL and CUDA backends share: device kernels, their launches in mod.json, the
    candidates' JSON form and their timing."""

    device_kernels = True
    symbolic_shapes = True  # kernels take their size arguments; tvmc.runtime.device binds them

    def source(self, prims, target, dumps: dict, device_binaries) -> str:
        """The library text of `prims` (and device binaries assembled from it)."""
        raise NotImplementedError

    def program(self, library: str, arch: str = ""):
        """The library loaded on the default device (tvmc.runtime.device's program interface)."""
        raise NotImplementedError

    def build(self, kernels, target, graph_json=None, params=None, dump_ir=(), dump_dir=None, progress=None,
              device_binaries=None) -> bytes:
        from tvmc.codegen import description

        progress = progress or (lambda stage, done, total: None)
        prims = [k.prim for k in kernels]
        if graph_json is not None:
            graph_json["kernels"] = {k.prim.name: kernel_info(k) for k in kernels}
        progress("llvm", 0, 1)
        dumps = {"_want": tuple(dump_ir)}
        text = self.source(prims, target, dumps, device_binaries)
        write_dumps(dump_dir, dump_ir, prims, dumps)
        info = described(graph_json, params)
        return (text if info is None else description.embed_in_source(text, info)).encode()

    def build_candidate(self, prim, target, path: str) -> None:
        text = self.source([prim], target, {}, None)
        with open(path, "w") as f:
            json.dump({"library": text, "launch": prim.launch.to_dict(prim.size_vars)}, f)

    def load_candidate(self, path: str, func: str, arrays, out, sizes=()):
        from tvmc.runtime.device import sized_launch

        with open(path) as f:
            built = json.load(f)
        sizes = [int(v) for v in sizes]
        launch = sized_launch(built["launch"], sizes)
        program = self.program(built["library"])
        kernel = program.kernel(func)
        bufs = []
        for a in list(arrays) + [out]:
            bufs.append(program.buffer(a.nbytes))
            program.upload(bufs[-1], a)

        def call():
            if launch is not None:
                program.launch(kernel, launch, bufs, scalars=sizes)
            program.finish()

        def timed(n):
            if launch is None:
                return 0.0
            handles = [program.launch(kernel, launch, bufs, timed=True, scalars=sizes) for _ in range(n)]
            return sum(program.elapsed_ms(h) for h in handles) / 1e3

        close = getattr(program, "close", lambda: None)
        return call, lambda: program.download(bufs[-1], out), timed, close

    def run_kernel(self, prim, target, arrays, out):
        from tvmc.runtime.device import run_kernel

        program = self.program(self.source([prim], target, {}, None), target.cpu)
        arrays = [np.ascontiguousarray(a) for a in arrays]
        sizes = prim.size_args([a.shape for a in [*arrays, out]]) if prim.size_vars else []
        return run_kernel(program, prim.name, prim.launch.to_dict(prim.size_vars), arrays, out, sizes)


class OpenCLBackend(DeviceBackend):
    """mod.cl: OpenCL C printed from the loop IR (tvmc.codegen.opencl), run through pyopencl."""

    name = "opencl"
    library_format = "cl"

    def source(self, prims, target, dumps, device_binaries) -> str:
        from tvmc.codegen.opencl import CodeGenOpenCL

        cl = CodeGenOpenCL(target)
        for p in prims:
            cl.add_function(p)
        return cl.source()

    def program(self, library: str, arch: str = ""):
        from tvmc.runtime.opencl import KernelProgram

        return KernelProgram(library, origin="candidate")

    def create_executor(self, artifact, device=None, target=None, **options):
        from tvmc.runtime.opencl import OpenCLExecutor

        return OpenCLExecutor(artifact, device)

    def missing(self, target) -> str | None:
        from tvmc.runtime.opencl import opencl_available

        return opencl_available()


class CUDABackend(DeviceBackend):
    """mod.ptx: LLVM's NVPTX backend (tvmc.codegen.llvm through its nvptx64 table), a cubin from
    the descriptor's assembler (ptxas) where found (tvmc.codegen.nvptx), run by cuda-python."""

    name = "cuda"
    library_format = "ptx"

    def source(self, prims, target, dumps, device_binaries) -> str:
        from tvmc.codegen.build import compile_ir
        from tvmc.codegen.llvm import CodeGenLLVM
        from tvmc.codegen.nvptx import assemble

        cg = CodeGenLLVM(target)
        for p in prims:
            cg.add_function(p)
        ptx = compile_ir(cg.ir_text(), target, dumps, assembly=True)
        if device_binaries is not None:
            device_binaries.update(assemble(ptx, target, {p.name: p.launch.threads_per_block for p in prims}))
        return ptx.decode()

    def program(self, library: str, arch: str = ""):
        from tvmc.runtime.cuda import KernelModule

        return KernelModule(library.encode(), arch=arch, origin="candidate")

    def create_executor(self, artifact, device=None, target=None, **options):
        from tvmc.runtime.cuda import CUDAExecutor

        return CUDAExecutor(artifact, device, **options)

    def missing(self, target) -> str | None:
        from tvmc.runtime.cuda import cuda_available

        return cuda_available()
