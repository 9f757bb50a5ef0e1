"""Graph entry: one generated function that runs every kernel of the graph in order.

`void tvmc_graph_run(void *const *entries)` takes one pointer per data entry of mod.json
(entry id = node_row_ptr[node] + output index): graph inputs, params and the storage the
plan assigns to each intermediate. It calls the kernels in node order, so a whole inference
is one native call (no per-operator overhead from Python or any other host).
"""

from __future__ import annotations

from llvmlite import ir

from tvmc.codegen.llvm import I64, PTR, VOID, CodeGenLLVM

ENTRY_NAME = "tvmc_graph_run"


def add_graph_entry(cg: CodeGenLLVM, graph_json: dict) -> None:
    """Add `tvmc_graph_run` to `cg`'s module; every tvm_op kernel must already be defined."""
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [PTR]), ENTRY_NAME)
    fn.attributes.add("nounwind")
    entries = fn.args[0]
    entries.name = "entries"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    row_ptr = graph_json["node_row_ptr"]
    loaded = {}

    def pointer(eid):
        if eid not in loaded:
            slot = b.gep(entries, [I64(eid)], inbounds=True, source_etype=PTR)
            loaded[eid] = b.load(slot, typ=PTR, name=f"e{eid}")
        return loaded[eid]

    for nid, node in enumerate(graph_json["nodes"]):
        if node["op"] != "tvm_op":
            continue
        attrs = node["attrs"]
        args = [pointer(row_ptr[i[0]] + i[1]) for i in node["inputs"]]
        args += [pointer(row_ptr[nid] + k) for k in range(int(attrs.get("num_outputs", 1)))]
        kernel = cg.module.get_global(attrs["func_name"])
        b.call(kernel, args)
    b.ret_void()
