"""Graph entry: one generated function that runs every kernel of the graph in order.

`void tvmc_graph_run(void *const *entries)` takes one pointer per data entry of mod.json
(entry id = node_row_ptr[node] + output index): graph inputs, params and the storage the
plan assigns to each intermediate. It calls the kernels in node order, so a whole inference
is one native call (no per-operator overhead from Python or any other host). A run-time loop
(`tvmc_loop` node, tvmc.graph.executor_json) becomes a loop here: while i < M and cond, store i
and cond into the body's inputs, call the body's kernels, take the body's condition and copy its
carried values back; then copy the final carried values to the loop's outputs. So the C API, the
C runner and the wasm module built on this entry run such graphs with no interpreter of their own.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from tvmc.codegen.llvm import I1, I8, I64, PTR, VOID, CodeGenLLVM
from tvmc.graph.executor_json import graph_attr, run_order

ENTRY_NAME = "tvmc_graph_run"


def add_graph_entry(cg: CodeGenLLVM, graph_json: dict) -> None:
    """Add `tvmc_graph_run` to `cg`'s module; every tvm_op kernel must already be defined."""
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR]), ENTRY_NAME)
    fn.attributes.add("nounwind")
    entries = fn.args[0]
    entries.name = "entries"
    head = fn.append_basic_block("entry")
    pointers = ir.IRBuilder(head)  # every entry pointer is loaded once, in the entry block
    b = ir.IRBuilder(fn.append_basic_block("start"))
    nodes, row_ptr = graph_json["nodes"], graph_json["node_row_ptr"]
    shapes, dtypes = graph_attr(graph_json, "shape"), graph_attr(graph_json, "dltype")
    memcpy = cg.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    loaded = {}

    def pointer(ref):
        eid = row_ptr[ref[0]] + ref[1]
        if eid not in loaded:
            slot = pointers.gep(entries, [I64(eid)], inbounds=True, source_etype=PTR)
            loaded[eid] = pointers.load(slot, typ=PTR, name=f"e{eid}")
        return loaded[eid]

    def copy(dst, src):
        eid = row_ptr[src[0]] + src[1]
        nbytes = math.prod(shapes[eid]) * np.dtype(dtypes[eid]).itemsize
        b.call(memcpy, [pointer(dst), pointer(src), I64(nbytes), I1(0)])

    def run(order):
        for item in order:
            if isinstance(item, tuple):
                loop(nodes[item[0]], item[0], item[1])
                continue
            node = nodes[item]
            args = [pointer(i) for i in node["inputs"]]
            args += [pointer([item, k]) for k in range(int(node["attrs"].get("num_outputs", 1)))]
            b.call(cg.module.get_global(node["attrs"]["func_name"]), args)

    def loop(node, nid, body):
        attrs = node["attrs"]
        n = int(attrs["num_carried"])
        ins, outs = attrs["body_inputs"], attrs["body_outputs"]
        trip = b.load(pointer(node["inputs"][0]), typ=I64)
        first = b.load(pointer(node["inputs"][1]), typ=I8)
        for k in range(n):
            copy(ins[2 + k], node["inputs"][2 + k])
        before = b.block
        header, step, done = (fn.append_basic_block(f"loop{nid}_{s}") for s in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=f"i{nid}")
        cond = b.phi(I8, name=f"cond{nid}")
        i.add_incoming(I64(0), before)
        cond.add_incoming(first, before)
        go = b.and_(b.icmp_signed("<", i, trip), b.icmp_unsigned("!=", cond, I8(0)))
        b.cbranch(go, step, done)
        b.position_at_end(step)
        b.store(i, pointer(ins[0]))
        b.store(cond, pointer(ins[1]))
        run(body)
        nxt = b.load(pointer(outs[0]), typ=I8)
        for k in range(n):
            copy(ins[2 + k], outs[1 + k])
        i.add_incoming(b.add(i, I64(1)), b.block)
        cond.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)
        for j, k in enumerate(attrs["output_index"]):
            copy([nid, j], ins[2 + k])

    run(run_order(graph_json))
    b.ret_void()
    pointers.branch(b.function.basic_blocks[1])
