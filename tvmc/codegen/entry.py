"""Graph entry: one generated function that runs every kernel of the graph in order, and one that
runs the load-time kernels (`tvmc_graph_init`, once, after the params are copied in).

`void tvmc_graph_run(void *const *entries)` takes one pointer per data entry of mod.json
(entry id = node_row_ptr[node] + output index): graph inputs, params and the storage the
plan assigns to each intermediate. It calls the kernels in node order, so a whole inference
is one native call (no per-operator overhead from Python or any other host). A run-time loop
(`tvmc_loop` node, tvmc.graph.executor_json) becomes a loop here: while i < M and cond, store i
and cond into the body's inputs, call the body's kernels, take the body's condition and copy its
carried values back (a scan output's value to row i of its loop output); then copy the final
carried values to the loop's outputs. So the C API, the
C runner and the wasm module built on this entry run such graphs with no interpreter of their own.

A graph with symbolic shapes (mod.json "size_vars") takes one more pointer after the data
entries: entries[num_entries] points at the int64 values of the size variables, which the C API
binds from the inputs' shapes (tvmc_runtime.c); each kernel with symbolic extents gets the values
its call lists ("sizes") as int64 arguments after its buffers (tvmc.tir.ir.PrimFunc.size_vars).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from tvmc.codegen.llvm import I1, I8, I64, PTR, VOID, CodeGenLLVM
from tvmc.mod_json import graph_attr, load_order, program

ENTRY_NAME = "tvmc_graph_run"
LOAD_ENTRY_NAME = "tvmc_graph_init"


def add_graph_entry(cg: CodeGenLLVM, graph_json: dict) -> None:
    """Add `tvmc_graph_run` and `tvmc_graph_init` (the load-time kernels, tvmc.mod_json.load_order;
    an empty function when there are none) to `cg`'s module; every tvm_op kernel must already be
    defined."""
    _add_entry(cg, graph_json, ENTRY_NAME, program(graph_json))
    _add_entry(cg, graph_json, LOAD_ENTRY_NAME, program(graph_json, load_order(graph_json)))


def _add_entry(cg: CodeGenLLVM, graph_json: dict, name: str, calls: list) -> None:
    """Add `void name(void *const *entries)` running `calls` (tvmc.mod_json.program) in order."""
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR]), name)
    fn.attributes.add("nounwind")
    entries = fn.args[0]
    entries.name = "entries"
    head = fn.append_basic_block("entry")
    pointers = ir.IRBuilder(head)  # every entry pointer is loaded once, in the entry block
    b = ir.IRBuilder(fn.append_basic_block("start"))
    shapes, dtypes = graph_attr(graph_json, "shape"), graph_attr(graph_json, "dltype")
    memcpy = cg.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    loaded = {}
    size_values = []
    if graph_json.get("size_vars"):  # the variables' values, loaded once in the entry block
        sizes = pointers.load(pointers.gep(entries, [I64(len(shapes))], inbounds=True, source_etype=PTR),
                              typ=PTR, name="sizes")
        size_values = [pointers.load(pointers.gep(sizes, [I64(k)], inbounds=True, source_etype=I64), typ=I64,
                                     name=f"size_{v['name']}") for k, v in enumerate(graph_json["size_vars"])]

    def pointer(eid):
        if eid not in loaded:
            slot = pointers.gep(entries, [I64(eid)], inbounds=True, source_etype=PTR)
            loaded[eid] = pointers.load(slot, typ=PTR, name=f"e{eid}")
        return loaded[eid]

    def copy(dst, src):
        nbytes = math.prod(shapes[src]) * np.dtype(dtypes[src]).itemsize
        b.call(memcpy, [pointer(dst), pointer(src), I64(nbytes), I1(0)])

    def run(calls):
        for call in calls:
            if "loop" in call:
                loop(call)
            else:
                b.call(cg.module.get_global(call["func"]), [pointer(e) for e in call["args"]] +
                       [size_values[k] for k in call.get("sizes", ())])

    def loop(lp):
        ins, outs = lp["body_inputs"], lp["body_outputs"]
        trip = b.load(pointer(lp["trip_count"]), typ=I64)
        first = b.load(pointer(lp["cond"]), typ=I8)
        for dst, src in zip(ins[2:], lp["init"]):
            copy(dst, src)
        before = b.block
        header, step, done = (fn.append_basic_block(f"loop_{s}") for s in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name="i")
        cond = b.phi(I8, name="cond")
        i.add_incoming(I64(0), before)
        cond.add_incoming(first, before)
        b.cbranch(b.and_(b.icmp_signed("<", i, trip), b.icmp_unsigned("!=", cond, I8(0))), step, done)
        b.position_at_end(step)
        b.store(i, pointer(ins[0]))
        b.store(cond, pointer(ins[1]))
        run(lp["calls"])
        nxt = b.load(pointer(outs[0]), typ=I8)
        n = lp.get("num_carried", len(ins) - 2)
        for dst, src in zip(ins[2:], outs[1:1 + n]):
            copy(dst, src)
        for dst, k in zip(lp["outputs"], lp["output_index"]):
            if k >= n:  # a scan output: this iteration's value to row i of the loop output
                src = outs[1 + k]
                nbytes = math.prod(shapes[src]) * np.dtype(dtypes[src]).itemsize
                row = b.gep(pointer(dst), [b.mul(i, I64(nbytes))], inbounds=True, source_etype=I8)
                b.call(memcpy, [row, pointer(src), I64(nbytes), I1(0)])
        i.add_incoming(b.add(i, I64(1)), b.block)
        cond.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)
        for dst, k in zip(lp["outputs"], lp["output_index"]):
            if k < n:
                copy(dst, ins[2 + k])

    run(calls)
    b.ret_void()
    pointers.branch(fn.basic_blocks[1])
