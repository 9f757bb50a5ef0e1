"""Reading mod.json, the graph-executor JSON of an artifact (TVM's schema; written by
tvmc.graph.executor_json.build_executor_json): its per-entry attributes, the order its kernels and
run-time loops run in, and a run as data entries. A leaf module: the graph entry and the module
description (tvmc.codegen) are generated from it, the runtimes execute it."""

from __future__ import annotations


def graph_attr(graph_json: dict, name: str) -> list:
    """Per-entry attribute list `name` ('shape', 'dltype', 'storage_id') of a graph-executor JSON.

    Accepts TVM's tagged form (`["list_shape", [...]]`) and a plain list. Raises KeyError when absent.
    """
    value = graph_json["attrs"][name]
    if len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], list):
        return value[1]
    return value


# func_name of a kernel node that runs nothing (TVM's name): a concatenation whose inputs were
# written in place (PlanMemory's concat_views)
NOP = "__nop"


def runs_kernel(node: dict) -> bool:
    """Whether mod.json node `node` calls a kernel: a `tvm_op` other than a NOP."""
    return node["op"] == "tvm_op" and node["attrs"].get("func_name") != NOP


def storage_offsets(graph_json: dict) -> list:
    """The byte offset of each data entry inside its storage: attrs "storage_offset" (written only
    where PlanMemory placed an entry at a non-zero offset), else 0 for every entry."""
    if "storage_offset" in graph_json["attrs"]:
        return graph_attr(graph_json, "storage_offset")
    return [0] * len(graph_attr(graph_json, "storage_id"))


def load_time(node: dict) -> bool:
    """Whether mod.json node `node` is a kernel that runs once, when the artifact is loaded
    (attrs "load_time"), not in every run."""
    return node["op"] == "tvm_op" and str(node["attrs"].get("load_time", "0")) == "1"


def runs_each_run(node: dict) -> bool:
    """Whether mod.json node `node` calls a kernel in every run: runs_kernel, and not load_time."""
    return runs_kernel(node) and not load_time(node)


def load_order(graph_json: dict) -> list:
    """The node ids of the load-time kernels (load_time), in node order, loop bodies' included:
    what an executor runs once after copying the params in, before any run. Their inputs are
    params, so any order of them works."""
    return [nid for nid, node in enumerate(graph_json["nodes"]) if load_time(node)]


def run_order(graph_json: dict, begin: int = 0, end: int | None = None) -> list:
    """What running the nodes [begin, end) of a graph-executor JSON does, in order: the node id of
    each kernel (`tvm_op`, `__nop` views and load-time kernels left out) and, per run-time loop,
    (its node id, run_order of its body). The bodies' own nodes (after the loop, see
    build_executor_json) are left out of the range that holds them."""
    nodes = graph_json["nodes"]
    end = len(nodes) if end is None else end
    inner = set()
    for nid in range(begin, end):
        if nodes[nid]["op"] == "tvmc_loop":
            inner.update(range(*nodes[nid]["attrs"]["body_nodes"]))
    order = []
    for nid in range(begin, end):
        node = nodes[nid]
        if nid in inner:
            continue
        if runs_each_run(node):
            order.append(nid)
        elif node["op"] == "tvmc_loop":
            order.append((nid, run_order(graph_json, *node["attrs"]["body_nodes"])))
    return order


def loop_entries(graph_json: dict, nid: int) -> dict:
    """The `tvmc_loop` node `nid` as data entries (entry = node_row_ptr[node] + output index):
    {"loop": name, "trip_count": e, "cond": e, "init": [initial carried...], "body_inputs":
    [iteration, cond, carried...], "body_outputs": [cond, carried..., scan outputs...], "outputs": [e per
    loop output], "output_index": [carried value k of each output, or num_carried + j for scan
    output j], "num_carried"}; what tvmc.runtime.control.run_loop and the graph entry read. A scan
    output's iteration i lands at row i of its loop output (the leading axis, so the bound's
    layout holds the run-time one)."""
    row_ptr, node = graph_json["node_row_ptr"], graph_json["nodes"][nid]
    attrs, n = node["attrs"], int(node["attrs"]["num_carried"])
    entry = lambda ref: int(row_ptr[int(ref[0])]) + int(ref[1])  # noqa: E731
    return {"loop": str(node["name"]), "trip_count": entry(node["inputs"][0]), "cond": entry(node["inputs"][1]),
            "init": [entry(r) for r in node["inputs"][2:2 + n]],
            "body_inputs": [entry(r) for r in attrs["body_inputs"]],
            "body_outputs": [entry(r) for r in attrs["body_outputs"]],
            "outputs": [int(row_ptr[nid]) + j for j in range(len(attrs["output_index"]))],
            "output_index": [int(k) for k in attrs["output_index"]], "num_carried": n}


def program(graph_json: dict, order: list | None = None) -> list:
    """A run of the graph as data entries, in order: {"func", "args": [input entries..., output
    entries...]} per kernel and loop_entries(...) plus "calls" (the body's program) per run-time
    loop. The module description embeds it and the graph entry is compiled from it. A kernel with
    int64 size arguments (graph_json "size_args") also has "sizes": the index into "size_vars" of
    each of them, in order."""
    nodes, row_ptr = graph_json["nodes"], graph_json["node_row_ptr"]
    size_args = graph_json.get("size_args") or {}
    out = []
    for item in run_order(graph_json) if order is None else order:
        if isinstance(item, tuple):
            out.append({**loop_entries(graph_json, item[0]), "calls": program(graph_json, item[1])})
            continue
        node = nodes[item]
        outs = [int(row_ptr[item]) + k for k in range(int(node["attrs"].get("num_outputs", 1)))]
        func = str(node["attrs"]["func_name"])
        out.append({"func": func, "args": [int(row_ptr[int(i[0])]) + int(i[1]) for i in node["inputs"]] + outs})
        if size_args.get(func):
            out[-1]["sizes"] = [int(k) for k in size_args[func]]
    return out
