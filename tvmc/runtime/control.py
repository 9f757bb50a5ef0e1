"""Runtime: the control-flow node of mod.json (`tvmc_loop`, tvmc.graph.executor_json) as the
Python executors interpret it; the CPU graph entry (tvmc/codegen/entry.py) compiles the same steps."""

from __future__ import annotations

import numpy as np


def run_loop(loop: dict, run_body, read, write) -> None:
    """ONNX Loop over a compiled body (`loop`: tvmc.mod_json.loop_entries): while
    i < M and cond, write i and cond to the body's inputs, `run_body()`, take the body's condition
    and carried values (and each scan output to row i of its loop output); then write the final
    carried values to the loop's outputs. `read(entry)
    -> np.ndarray` and `write(entry, array)` access the data entries."""
    ins, outs = loop["body_inputs"], loop["body_outputs"]
    trip, go = int(read(loop["trip_count"])), bool(read(loop["cond"]))
    for dst, src in zip(ins[2:], loop["init"]):
        write(dst, read(src))
    i = 0
    n = loop.get("num_carried", len(ins) - 2)
    scans = [(dst, outs[1 + k]) for dst, k in zip(loop["outputs"], loop["output_index"]) if k >= n]
    stacked = {dst: read(dst).copy() for dst, _ in scans}
    while i < trip and go:
        write(ins[0], np.array(i, np.int64))
        write(ins[1], np.array(go))
        run_body()
        go = bool(read(outs[0]))
        for dst, src in zip(ins[2:], outs[1:1 + n]):
            write(dst, read(src))
        for dst, src in scans:  # iteration i's value to row i of the stacked output
            stacked[dst][i] = read(src)
        i += 1
    for dst, k in zip(loop["outputs"], loop["output_index"]):
        write(dst, stacked[dst] if k >= n else read(ins[2 + k]))
