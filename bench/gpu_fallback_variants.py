"""GPU fallback variants: the starting register tiles of the SIMT conv2d and dense fallbacks
(tvmc.ops.gpu.conv2d.REGISTER_TILE, tvmc.ops.gpu.dense.REGISTER_TILE) and the fallback rule's
AMPLE_PARALLELISM (tvmc.ops.gpu.tiling), each variant set in a process of its own that compiles
the bench models for the GPU (untuned: no records, fallback configs), all in parallel; then every
variant's artifact of one model and batch run in alternating rounds on the GPU (15 rounds, median
ms per run) and checked against the reference outputs (bench_cuda.matches).

`python bench/gpu_fallback_variants.py [sm_90]` on a machine with an NVIDIA GPU (JOBS=16 parallel
compiles; BUILD_ONLY=1 compiles without a GPU); prints one line per model and batch, {variant:
(ms, outputs match)}, and writes $OUT/fallback_variants.json. Edit VARIANTS to try others: each is
(conv tile, AMPLE_PARALLELISM, dense tile). Results: bench/results/cuda_h100.md, sixth run.
"""
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"c41d44": ((4, 1), 2, (4, 4)), "c44d44": ((4, 4), 2, (4, 4)), "c84d44": ((8, 4), 2, (4, 4)),
            "c48d44": ((4, 8), 2, (4, 4)), "c44d84": ((4, 4), 2, (8, 4)), "c44d88": ((4, 4), 2, (8, 8))}
CASES = [("resnet18", 16), ("mobilenet_v2", 16), ("bert", 16), ("resnet18", 1), ("mobilenet_v2", 1), ("bert", 1)]
OUT = os.environ.get("OUT", "/tmp")


def build(job):
    name, batch, variant, folder = job
    import tvmc.ops.gpu.conv2d as C
    import tvmc.ops.gpu.dense as D
    import tvmc.ops.gpu.tiling as T
    C.REGISTER_TILE, T.AMPLE_PARALLELISM, D.REGISTER_TILE = VARIANTS[variant]
    import bench_cuda as B
    from tvmc.driver import compile_model
    from tvmc.package import save_artifact
    model, _ = B.load(name, batch)
    t0 = time.time()
    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    module = compile_model(model, B.gpu_target(arch), B.compile_options("fp32"))
    path = os.path.join(folder, f"{name}_{batch}_{variant}.tar")
    save_artifact(module, path)
    return job, time.time() - t0


def main():
    folder = tempfile.mkdtemp()
    jobs = [(n, b, v, folder) for n, b in CASES for v in VARIANTS]
    with ProcessPoolExecutor(int(os.environ.get("JOBS", 16))) as pool:
        for job, s in pool.map(build, jobs):
            print("built", job[:3], round(s, 1), "s", flush=True)
    if os.environ.get("BUILD_ONLY"):
        return
    import bench_cuda as B
    from tvmc.runtime.cuda import CUDAExecutor
    rows = {}
    for name, batch in CASES:
        model, feeds = B.load(name, batch)
        ref = B.reference_outputs(model, feeds)
        exs = {}
        for v in VARIANTS:
            ex = CUDAExecutor(os.path.join(folder, f"{name}_{batch}_{v}.tar"), "cuda:0")
            for k, x in feeds.items():
                ex.set_input(k, x)
            ex.run()
            ok = B.matches([ex.get_output(i) for i in range(ex.num_outputs)], ref, "fp32")
            exs[v] = (ex, ok)
        times = {v: [] for v in exs}
        for _ in range(15):
            for v, (ex, _) in exs.items():
                t0 = time.perf_counter()
                ex.run()
                times[v].append((time.perf_counter() - t0) * 1e3)
        rows[f"{name}:{batch}"] = {v: (round(statistics.median(t), 3), exs[v][1]) for v, t in times.items()}
        print(name, batch, rows[f"{name}:{batch}"], flush=True)
    with open(os.path.join(OUT, "fallback_variants.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
