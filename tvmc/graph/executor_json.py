"""Graph export: a fused, memory-planned graph as TVM graph-executor JSON (mod.json) plus params
(tvmc.mod_json reads it)."""

from __future__ import annotations

import numpy as np

from tvmc.errors import PassError
from tvmc.graph import symbolic
from tvmc.graph.ir import Call, Constant, Function, Graph, Var
from tvmc.mod_json import NOP


def _unique(name: str, taken: set) -> str:
    out, n = name, 0
    while out in taken:
        n += 1
        out = f"{name}_{n}"
    taken.add(out)
    return out


def build_executor_json(graph: Graph, bodies: dict | None = None) -> tuple:
    """Serialize a graph after FuseOps + PlanMemory in TVM's graph-executor JSON schema.

    Returns (graph_json, params):
      graph_json["nodes"]:         graph inputs, then in topological order params and kernels.
                                   Inputs/params: {"op": "null", "name", "inputs": []};
                                   kernels: {"op": "tvm_op", "name": func name, "attrs":
                                   {"func_name", "num_inputs": "N", "num_outputs": "1",
                                   "flatten_data": "0"}, "inputs": [[node_id, 0, 0], ...]}
                                   with inputs in the Function's parameter order; a kernel that
                                   the executors run once at load time (Function.load_time: its
                                   inputs are params) also has attrs "load_time": "1"
                                   (mod_json.load_order)
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
      graph_json["attrs"]["storage_offset"]: only where PlanMemory placed a tensor inside another's
                                   storage (a concatenation's inputs, meta "storage_offset"):
                                   ["list_int", [...]], the byte offset of each entry inside its
                                   storage; such a concatenation is a kernel node whose func_name
                                   is "__nop" (TVM's name for a node that runs nothing)
      graph_json["input_names"], graph_json["output_names"]
      graph_json["size_vars"]:     only for symbolic shapes: [{"name", "lo", "hi"}] of the graph's
                                   size variables (Graph.size_vars, by name); the "shape" of an
                                   entry is then its bound, each dimension at its upper bound
      graph_json["symbolic_shapes"]: with "size_vars": per entry null (static) or its shape, each
                                   dimension an int or a postfix program over the variables
                                   (tvmc.graph.symbolic.to_postfix: ["$0", 3, "+", 4, "//"]);
                                   the executors evaluate them once the inputs bind the variables
      graph_json["size_args"]:     added by the compile driver after lowering: {kernel: [index
                                   into size_vars of each int64 argument after its buffers]}
      params:                      {param name: np.ndarray}, names unique (a clash with
                                   an input or another constant gets a `_1`, `_2` suffix)

    Run-time loops (`control.loop` calls, see tvmc.graph.ir.LoopBody) need `bodies`, {LoopBody:
    its body Graph after FuseOps + PlanMemory}. Each loop is one node {"op": "tvmc_loop", "inputs":
    [trip count, cond, initial carried..., captured...], "attrs": {"num_outputs", "num_carried",
    "output_index": [carried value k of each output], "body_nodes": [begin, end), "body_inputs":
    [iteration, cond, carried...], "body_outputs": [cond, carried..., scan outputs...]}} (entries as [node, index,
    0]); its body's nodes come after the main graph's (the body's iteration, condition and carried
    inputs are {"op": "tvmc_loop_var"} nodes; the captured tensors are read where the main graph
    keeps them), their storage ids after the main graph's. The executors run a node range with
    `run_order` and interpret loops (docs/dynamic_shapes.md).

    Deterministic: the same graph gives identical JSON. A head may point at a null node (an
    output that is an input or a param, as in TVM); FuseOps avoids this by copying them.
    Raises PassError when the graph was not fused and planned.
    """
    if "storage_id" not in graph.meta:
        raise PassError("executor JSON needs a memory plan: run FuseOps and PlanMemory first")
    nodes, params, shapes, dltypes, sids, offsets, row_ptr = [], {}, [], [], [], [], [0]
    size_vars = graph.size_vars()
    sym_shapes = []
    storage_bytes = [int(b) for b in graph.meta["storage_bytes"]]
    taken = {v.name for v in graph.inputs}

    placed: dict = {}  # {Expr: byte offset} of every graph and body (their Exprs are distinct)
    views: set = set()

    def add(node, exprs, plan, sid_base):
        for e in exprs:
            shapes.append([symbolic.upper_bound(d) if symbolic.is_symbolic(d) else int(d) for d in e.shape])
            sym_shapes.append([symbolic.to_postfix(d, size_vars) for d in e.shape]
                              if getattr(e.type, "is_symbolic", False) else None)
            dltypes.append(e.dtype)
            sids.append(sid_base + int(plan[e]))
            offsets.append(int(placed.get(e, 0)))
        nodes.append(node)
        row_ptr.append(len(sids))
        return len(nodes) - 1

    def serialize(g, node_id, sid_base):
        """Append the nodes of `g` (node_id: {Expr: (node, output)} already bound), then the
        bodies of its loops, each in a storage region of its own after the storages so far."""
        plan, loops = g.meta["storage_id"], []
        placed.update(g.meta.get("storage_offset", {}))
        views.update(g.meta.get("view_calls", ()))
        ref = lambda e: [node_id[e][0], node_id[e][1], 0]  # noqa: E731
        order = g.topo()
        for v in g.inputs:
            if v not in node_id:
                node_id[v] = (add({"op": "null", "name": v.name, "inputs": []}, [v], plan, sid_base), 0)
        for e in order:
            if e in node_id:
                continue
            if isinstance(e, Var):
                raise PassError(f"Var '{e.name}' is used but is not a graph input")
            if isinstance(e, Constant):
                name = _unique(e.name or "param", taken)
                params[name] = np.asarray(e.value)
                node_id[e] = (add({"op": "null", "name": name, "inputs": []}, [e], plan, sid_base), 0)
            elif e.op == "control.loop":
                body = e.attrs["body"]
                outs = sorted((c for c in order if isinstance(c, Call) and c.op == "control.loop"
                               and c.attrs["body"] is body), key=lambda c: c.attrs["index"])
                nid = add({"op": "tvmc_loop", "name": body.name, "inputs": [ref(i) for i in e.inputs],
                           "attrs": {"num_inputs": str(len(e.inputs)), "num_outputs": str(len(outs)),
                                     "num_carried": str(body.num_carried),
                                     "output_index": [int(c.attrs["index"]) for c in outs]}},
                          outs, plan, sid_base)
                node_id.update((c, (nid, j)) for j, c in enumerate(outs))
                loops.append((nid, e))
            elif isinstance(e.op, Function):
                func = NOP if e in views else e.op.name
                attrs = {"func_name": func, "num_inputs": str(len(e.inputs)), "num_outputs": "1", "flatten_data": "0"}
                if e.op.load_time:
                    if not all(isinstance(i, Constant) for i in e.inputs):
                        raise PassError(f"load-time kernel '{e.op.name}' takes a tensor that is not a param")
                    attrs["load_time"] = "1"
                node_id[e] = (add({"op": "tvm_op", "name": e.op.name, "attrs": attrs,
                                   "inputs": [ref(i) for i in e.inputs]}, [e], plan, sid_base), 0)
            else:
                raise PassError(f"node '{e.name or '?'}' ({e.op}) is not in a fused function: run FuseOps first")
        for nid, call in loops:
            body = bodies[call.attrs["body"]]
            n_own = 2 + call.attrs["body"].num_carried
            base = len(storage_bytes)
            storage_bytes.extend(int(b) for b in body.meta["storage_bytes"])
            begin = len(nodes)
            inner = {v: node_id[a] for v, a in zip(body.inputs[n_own:], call.inputs[n_own:])}  # captured: read in place
            for v in body.inputs[:n_own]:
                inner[v] = (add({"op": "tvmc_loop_var", "name": v.name, "inputs": []}, [v], body.meta["storage_id"],
                                base), 0)
            serialize(body, inner, base)
            nodes[nid]["attrs"].update({
                "body_nodes": [begin, len(nodes)],
                "body_inputs": [[inner[v][0], inner[v][1], 0] for v in body.inputs[:n_own]],
                "body_outputs": [[inner[o][0], inner[o][1], 0] for o in body.outputs]})
        return node_id

    node_id = serialize(graph, {}, 0)

    n_model = graph.num_model_outputs
    graph_json = {
        "nodes": nodes,
        "arg_nodes": [k for k, n in enumerate(nodes) if n["op"] == "null"],
        "node_row_ptr": row_ptr,
        "heads": [[*node_id[o], 0] for o in graph.outputs[:n_model]],
        "attrs": {"shape": ["list_shape", shapes], "dltype": ["list_str", dltypes],
                  "storage_id": ["list_int", sids]},
        "storage_bytes": storage_bytes,
        "input_names": [v.name for v in graph.inputs],
        "output_names": list(graph.output_names[:n_model]),
    }
    if any(offsets):
        graph_json["attrs"]["storage_offset"] = ["list_int", offsets]
    if size_vars:
        graph_json["size_vars"] = [{"name": v.name, "lo": v.lo, "hi": v.hi} for v in size_vars]
        graph_json["symbolic_shapes"] = sym_shapes
    if any(k is not None for k in graph.output_shapes):
        graph_json["output_shapes"] = [None if k is None else [*node_id[graph.outputs[k]], 0]
                                       for k in graph.output_shapes[:n_model]]
    return graph_json, params
