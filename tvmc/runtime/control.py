"""Runtime: the control-flow node of mod.json (`tvmc_loop`, tvmc.graph.executor_json) as the
Python executors interpret it; the CPU graph entry (tvmc/codegen/entry.py) compiles the same steps."""

from __future__ import annotations

import numpy as np


def run_loop(node: dict, nid: int, run_body, read, write) -> None:
    """ONNX Loop over a compiled body: while i < M and cond, write i and cond to the body's inputs,
    `run_body()`, take the body's condition and carried values; then write the final carried
    values to the loop's outputs. `read(ref) -> np.ndarray` and `write(ref, array)` access the data
    entry [node, output] of mod.json."""
    attrs = node["attrs"]
    ins, outs, n = attrs["body_inputs"], attrs["body_outputs"], int(attrs["num_carried"])
    trip, go = int(read(node["inputs"][0])), bool(read(node["inputs"][1]))
    for k in range(n):
        write(ins[2 + k], read(node["inputs"][2 + k]))
    i = 0
    while i < trip and go:
        write(ins[0], np.array(i, np.int64))
        write(ins[1], np.array(go))
        run_body()
        go = bool(read(outs[0]))
        for k in range(n):
            write(ins[2 + k], read(outs[1 + k]))
        i += 1
    for j, k in enumerate(attrs["output_index"]):
        write([nid, j], read(ins[2 + k]))
