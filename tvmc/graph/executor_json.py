"""Graph export: a fused, memory-planned graph as TVM graph-executor JSON (mod.json) plus params."""

from __future__ import annotations

import numpy as np

from tvmc.errors import PassError
from tvmc.graph.ir import Constant, Function, Graph, Var


def _unique(name: str, taken: set) -> str:
    out, n = name, 0
    while out in taken:
        n += 1
        out = f"{name}_{n}"
    taken.add(out)
    return out


def graph_attr(graph_json: dict, name: str) -> list:
    """Per-entry attribute list `name` ('shape', 'dltype', 'storage_id') of a graph-executor JSON.

    Accepts TVM's tagged form (`["list_shape", [...]]`) and a plain list. Raises KeyError when absent.
    """
    value = graph_json["attrs"][name]
    if len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], list):
        return value[1]
    return value


def build_executor_json(graph: Graph) -> tuple:
    """Serialize a graph after FuseOps + PlanMemory in TVM's graph-executor JSON schema.

    Returns (graph_json, params):
      graph_json["nodes"]:         graph inputs, then in topological order params and kernels.
                                   Inputs/params: {"op": "null", "name", "inputs": []};
                                   kernels: {"op": "tvm_op", "name": func name, "attrs":
                                   {"func_name", "num_inputs": "N", "num_outputs": "1",
                                   "flatten_data": "0"}, "inputs": [[node_id, 0, 0], ...]}
                                   with inputs in the Function's parameter order.
      graph_json["arg_nodes"]:     ids of the null nodes (inputs and params)
      graph_json["node_row_ptr"]:  [0, 1, ..., len(nodes)] (one output per node)
      graph_json["heads"]:         [[node_id, 0, 0]] per graph output (the model's, not the
                                   run-time shape outputs)
      graph_json["output_shapes"]: only when an output's shape is known at run time: per head,
                                   null or the [node_id, 0, 0] of its int64[rank] shape tensor
                                   (the head's "shape" is then the bound; docs/dynamic_shapes.md)
      graph_json["attrs"]:         {"shape": ["list_shape", [...]], "dltype": ["list_str", [...]],
                                   "storage_id": ["list_int", [...]]}, one entry per node
      graph_json["storage_bytes"]: bytes per storage id (from PlanMemory)
      graph_json["input_names"], graph_json["output_names"]
      params:                      {param name: np.ndarray}, names unique (a clash with
                                   an input or another constant gets a `_1`, `_2` suffix)

    Deterministic: the same graph gives identical JSON. A head may point at a null node (an
    output that is an input or a param, as in TVM); FuseOps avoids this by copying them.
    Raises PassError when the graph was not fused and planned.
    """
    if "storage_id" not in graph.meta:
        raise PassError("executor JSON needs a memory plan: run FuseOps and PlanMemory first")
    plan = graph.meta["storage_id"]
    nodes, node_id, params, shapes, dltypes, sids = [], {}, {}, [], [], []
    taken = {v.name for v in graph.inputs}

    def add(e, node):
        node_id[e] = len(nodes)
        nodes.append(node)
        shapes.append([int(d) for d in e.shape])
        dltypes.append(e.dtype)
        sids.append(int(plan[e]))

    for v in graph.inputs:
        add(v, {"op": "null", "name": v.name, "inputs": []})
    for e in graph.topo():
        if e in node_id:
            continue
        if isinstance(e, Var):
            raise PassError(f"Var '{e.name}' is used but is not a graph input")
        if isinstance(e, Constant):
            name = _unique(e.name or "param", taken)
            params[name] = np.asarray(e.value)
            add(e, {"op": "null", "name": name, "inputs": []})
            continue
        if not isinstance(e.op, Function):
            raise PassError(f"node '{e.name or '?'}' ({e.op}) is not in a fused function: run FuseOps first")
        func = e.op.name
        add(e, {"op": "tvm_op", "name": func,
                "attrs": {"func_name": func, "num_inputs": str(len(e.inputs)), "num_outputs": "1",
                          "flatten_data": "0"},
                "inputs": [[node_id[i], 0, 0] for i in e.inputs]})

    n_model = graph.num_model_outputs
    graph_json = {
        "nodes": nodes,
        "arg_nodes": [k for k, n in enumerate(nodes) if n["op"] == "null"],
        "node_row_ptr": list(range(len(nodes) + 1)),
        "heads": [[node_id[o], 0, 0] for o in graph.outputs[:n_model]],
        "attrs": {"shape": ["list_shape", shapes], "dltype": ["list_str", dltypes],
                  "storage_id": ["list_int", sids]},
        "storage_bytes": [int(b) for b in graph.meta["storage_bytes"]],
        "input_names": [v.name for v in graph.inputs],
        "output_names": list(graph.output_names[:n_model]),
    }
    if any(k is not None for k in graph.output_shapes):
        graph_json["output_shapes"] = [None if k is None else [node_id[graph.outputs[k]], 0, 0]
                                       for k in graph.output_shapes[:n_model]]
    return graph_json, params
