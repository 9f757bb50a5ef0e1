"""PlanMemory: liveness-based storage reuse over the fused graph."""

import pytest

from pass_helpers import call, check_plan, const, conv, var
from tvmc.errors import PassError
from tvmc.graph.ir import Constant, Graph, Var
from tvmc.passes import PassContext, run_passes


def plan(graph, **ctx_kwargs):
    return run_passes(graph, ["FuseOps", "PlanMemory"], PassContext(**ctx_kwargs))


def relu_chain(n=6, shape=(1, 4, 8, 8)):
    x = var("x", shape)
    e = conv(x, shape[1], "conv")
    for k in range(n):
        e = call("nn.softmax" if k % 2 else "nn.relu", e, **({"axis": 1} if k % 2 else {}))
    return Graph([x], [e])


def test_chain_reuses_storage():
    g = plan(relu_chain())
    calls = g.calls()
    by_sid = check_plan(g)
    call_sids = {g.meta["storage_id"][c] for c in calls}
    assert len(call_sids) < len(calls)
    assert any(len(es) > 1 for es in by_sid.values())
    assert g.meta["planned_bytes"] < g.meta["unplanned_bytes"]
    # ping-pong: a chain needs two intermediate storages
    inter = {g.meta["storage_id"][c] for c in calls if c not in g.outputs}
    assert len(inter) == 2


@pytest.mark.parametrize("kwargs", [{"opt_level": 0}, {"disabled_passes": {"PlanMemory"}}])
def test_no_reuse_when_gated_off(kwargs):
    g = plan(relu_chain(), **kwargs)
    check_plan(g)
    sids = list(g.meta["storage_id"].values())
    assert len(sids) == len(set(sids))
    assert g.meta["planned_bytes"] == g.meta["unplanned_bytes"]


def test_diamond_keeps_live_tensors_apart():
    x = var("x", (1, 2, 6, 6))
    a = call("nn.softmax", conv(x, 2, "c0"), axis=1)
    b = call("nn.softmax", conv(a, 2, "c1"), axis=1)
    c = call("nn.softmax", conv(a, 2, "c2"), axis=1)          # a is live until here
    d = call("add", call("nn.softmax", b, axis=1), c)
    g = plan(Graph([x], [call("nn.softmax", d, axis=1)]))
    check_plan(g)
    assert g.meta["planned_bytes"] <= g.meta["unplanned_bytes"]


def test_growing_and_best_fit_and_dtypes():
    x = var("x", (1, 2, 4, 4))
    small = call("nn.relu", conv(x, 2, "c0", k=1, pad=0))            # 128 B
    big = call("nn.softmax", conv(small, 16, "c1", k=1, pad=0), axis=1)  # 1 KiB
    cast = call("cast", call("nn.softmax", big, axis=1), dtype="int32")
    back = call("cast", call("nn.softmax", cast, axis=1), dtype="float32")
    g = plan(Graph([x], [call("nn.softmax", back, axis=1)]))
    by_sid = check_plan(g)
    for es in by_sid.values():
        assert len({e.dtype for e in es}) == 1


def test_inputs_params_and_outputs_never_share():
    x = var("x", (1, 2, 6, 6))
    c = conv(x, 2, "c")
    r = call("nn.softmax", c, axis=1)
    g = plan(Graph([x], [call("nn.softmax", r, axis=1), call("nn.relu", r)]))
    by_sid = check_plan(g)
    sid = g.meta["storage_id"]
    fixed = [e for e in sid if isinstance(e, (Var, Constant)) or e in g.outputs]
    for e in fixed:
        assert by_sid[sid[e]] == [e]


def test_input_graph_is_not_modified():
    g = run_passes(relu_chain(), ["FuseOps"], PassContext())
    planned = run_passes(g, ["PlanMemory"], PassContext())
    assert "storage_id" not in g.meta and "storage_id" in planned.meta
    assert planned.outputs == g.outputs


def inplace_candidates():
    """softmax -> (relu, add with a [C,1,1] constant): an elementwise function after an opaque op."""
    x = var("x", (1, 4, 6, 6))
    a = call("nn.softmax", conv(x, 4, "c"), axis=1)
    b = call("add", call("nn.relu", a), const((4, 1, 1), "bias", 1))
    return x, a, b


def _fused_user(g, op_name):
    return next(c for c in g.calls() if c.op.name == op_name)


def test_inplace_is_off_by_default():
    x, a, b = inplace_candidates()
    g = plan(Graph([x], [call("nn.softmax", b, axis=1)]))
    check_plan(g)
    assert g.meta["inplace"] == {}
    relu = _fused_user(g, "fused_nn_relu_add")
    assert g.meta["storage_id"][relu] != g.meta["storage_id"][relu.inputs[0]]


def test_inplace_elementwise_takes_its_dead_inputs_storage():
    x, a, b = inplace_candidates()
    g = plan(Graph([x], [call("nn.softmax", b, axis=1)]), config={"PlanMemory.inplace": True})
    check_plan(g)
    relu = _fused_user(g, "fused_nn_relu_add")
    src = relu.inputs[0]
    assert g.meta["inplace"] == {relu: src}
    assert g.meta["storage_id"][relu] == g.meta["storage_id"][src]
    off = plan(Graph([x], [call("nn.softmax", b, axis=1)]))
    assert g.meta["planned_bytes"] <= off.meta["planned_bytes"]


@pytest.mark.parametrize("case", ["input_used_later", "graph_input", "graph_output", "input_is_output",
                                  "not_elementwise", "broadcast_grows", "dtype_changes", "gated_off"])
def test_inplace_not_applied(case):
    x, a, b = inplace_candidates()
    config = {"PlanMemory.inplace": True}
    kwargs = {}
    if case == "input_used_later":
        graph = Graph([x], [call("add", call("nn.softmax", b, axis=1), call("nn.softmax", a, axis=1))])
    elif case == "graph_input":
        graph = Graph([x], [call("nn.softmax", call("nn.relu", x), axis=1)])
    elif case == "graph_output":
        graph = Graph([x], [b])
    elif case == "input_is_output":
        graph = Graph([x], [call("nn.softmax", b, axis=1), a])
    elif case == "not_elementwise":
        graph = Graph([x], [call("nn.softmax", call("transpose", a, axes=(0, 1, 3, 2)), axis=1)])
    elif case == "broadcast_grows":
        pooled = call("nn.global_avg_pool2d", a)
        graph = Graph([x], [call("nn.softmax", call("add", pooled, const((1, 4, 6, 6), "grow")), axis=1)])
    elif case == "dtype_changes":
        graph = Graph([x], [call("nn.softmax", call("cast", a, dtype="float64"), axis=1)])
    else:
        kwargs = {"opt_level": 0}
    g = plan(graph if case != "gated_off" else Graph([x], [call("nn.softmax", b, axis=1)]),
             config=config, **kwargs)
    check_plan(g)
    assert g.meta["inplace"] == {}


def test_inplace_option_is_typed():
    with pytest.raises(PassError):
        PassContext(config={"PlanMemory.inplace": 1})


def test_outputs_of_one_run_time_loop_are_allocated_when_it_runs():
    """The control.loop calls of one LoopBody are one node that writes all of them when the first
    runs: a later one must not take a storage freed in between (t's, still live at the loop)."""
    from tvmc.graph.ir import LoopBody, TensorType
    from tvmc.ops.registry import make_call

    shape = (4,)
    i, c = Var("i", TensorType((), "int64")), Var("c", TensorType((), "bool"))
    a, b = var("a", shape), var("b", shape)
    body = LoopBody(Graph([i, c, a, b], [c, call("nn.relu", a), call("nn.relu", b)]), 2, "loop")
    m, go, x = Var("M", TensorType((), "int64")), Var("go", TensorType((), "bool")), var("x", shape)
    t = call("nn.softmax", x, axis=0)  # opaque: its own kernel
    out0, out1 = (make_call("control.loop", [m, go, x, x], {"body": body, "index": k}) for k in (0, 1))
    g = plan(Graph([m, go, x], [call("add", out0, t), call("nn.relu", out1)]))
    sid = g.meta["storage_id"]
    loops = [e for e in g.calls() if e.op == "control.loop"]
    fused_t = next(e for e in g.calls() if e not in loops and e.inputs == (x,))
    assert len(loops) == 2 and sid[fused_t] not in {sid[e] for e in loops}
    assert sid[loops[0]] != sid[loops[1]]


def test_symbolic_shapes_are_planned_for_the_upper_bound():
    """A tensor of symbolic shape gets a storage for every dimension at its upper bound (a run
    allocates nothing); the plan equals the static plan at the upper bound."""
    from tvmc.graph import symbolic

    n = symbolic.size_var("N", 1, 8)
    g = plan(relu_chain(shape=(n, 4, 8, 8)))
    check_plan(g)
    static = plan(relu_chain(shape=(8, 4, 8, 8)))
    assert g.meta["storage_bytes"] == static.meta["storage_bytes"]
    assert g.meta["planned_bytes"] == static.meta["planned_bytes"] == 2 * 8 * 4 * 8 * 8 * 4


def _concat_graph(batch=1, channels=(8, 8)):
    """Two convs of x concatenated on channels, then a conv of the concatenation."""
    x = var("x", (batch, 4, 8, 8))
    branches = [conv(x, c, f"b{k}", seed=k) for k, c in enumerate(channels)]
    cat = call("concatenate", *branches, axis=1)
    return Graph([x], [conv(cat, 4, "head")])


def _x86_plan(graph, **config):
    from tvmc.target import resolve_target

    return plan(graph, target=resolve_target("x86"), config=config)


def _views(g):
    return g.meta["view_calls"], g.meta["storage_offset"]


def test_concat_inputs_are_written_in_place():
    g = _x86_plan(_concat_graph())
    views, offsets = _views(g)
    check_plan(g)
    (cat,) = views
    a, b = cat.inputs
    sid = g.meta["storage_id"]
    assert sid[a] == sid[b] == sid[cat] and offsets == {b: 8 * 8 * 8 * 4}
    assert g.meta["storage_bytes"][sid[cat]] == cat.type.nbytes


def test_concat_chain_is_one_storage():
    """DenseNet's chain: each concatenation is the first input of the next and is also read by
    the layer after it; all of them and every layer's output live in one storage until the last
    read of any of them."""
    x = var("x", (1, 16, 4, 4))
    e = call("nn.relu", x)
    for k in range(3):
        e = call("concatenate", e, conv(call("nn.relu", e), 16, f"layer{k}", seed=k), axis=1)
    g = _x86_plan(Graph([x], [conv(e, 4, "head")]))
    views, offsets = _views(g)
    check_plan(g)
    assert len(views) == 3
    sid = g.meta["storage_id"]
    assert len({sid[c] for c in views} | {sid[i] for c in views for i in c.inputs}) == 1
    assert sorted(offsets.values()) == [16 * 16 * 4 * k for k in (1, 2, 3)]


@pytest.mark.parametrize("case", ["no target", "opencl", "option off", "batch 2", "graph input", "graph output",
                                  "unaligned"])
def test_concat_views_not_applied(case):
    from tvmc.target import resolve_target

    graph, kwargs = _concat_graph(), {"target": resolve_target("x86")}
    if case == "no target":
        kwargs = {}
    elif case == "opencl":  # one device buffer per storage id
        kwargs = {"target": resolve_target("opencl")}
    elif case == "option off":
        kwargs["config"] = {"PlanMemory.concat_views": False}
    elif case == "batch 2":  # a channel slice is two runs of memory
        graph = _concat_graph(batch=2)
    elif case == "graph input":
        x = var("x", (1, 4, 8, 8))
        graph = Graph([x], [conv(call("concatenate", x, conv(x, 4, "c"), axis=1), 4, "head")])
    elif case == "graph output":
        x = var("x", (1, 4, 8, 8))
        a = conv(x, 4, "a")
        graph = Graph([x], [conv(call("concatenate", a, conv(x, 4, "b"), axis=1), 4, "head"), a])
    elif case == "unaligned":  # the second input would start 3 * 3 * 3 * 4 = 108 bytes in
        x = var("x", (1, 4, 3, 3))
        graph = Graph([x], [conv(call("concatenate", conv(x, 3, "a"), conv(x, 3, "b"), axis=1), 4, "head")])
    g = plan(graph, **kwargs)
    check_plan(g)
    assert not g.meta["view_calls"] and not g.meta["storage_offset"]


def test_three_concat_inputs_land_at_their_offsets():
    g = _x86_plan(_concat_graph(channels=(16, 8, 8)))
    views, offsets = _views(g)
    check_plan(g)
    (cat,) = views
    assert [offsets.get(i, 0) for i in cat.inputs] == [0, 16 * 64 * 4, 24 * 64 * 4]


def _reshape_graph():
    """x -> reshape (a graph input's view) -> softmax -> reshape (the graph output: softmax writes it)."""
    x = var("x", (1, 8, 4, 4))
    a = call("reshape", x, newshape=(1, 8, 16))
    b = call("reshape", call("nn.softmax", a, axis=2), newshape=(1, 8, 4, 4))
    return Graph([x], [b]), x


def test_reshapes_are_views_of_a_graph_input_and_of_their_producer():
    """A fused call that is only a reshape runs no kernel (reshape_views): on a graph input it
    reads the input's storage, after a kernel that kernel writes the reshape's storage; the plan
    stays valid (check_plan)."""
    graph, x = _reshape_graph()
    g = _x86_plan(graph)
    check_plan(g)
    views, offsets = _views(g)
    assert len(views) == 2 and not offsets
    sid = g.meta["storage_id"]
    first = next(c for c in views if c.inputs[0] is g.inputs[0])
    last = next(c for c in views if c is not first)
    assert sid[first] == sid[g.inputs[0]] and sid[last] == sid[last.inputs[0]] != sid[first]


@pytest.mark.parametrize("case", ["opencl", "option off"])
def test_reshape_views_not_applied(case):
    from tvmc.target import resolve_target

    graph, _ = _reshape_graph()
    if case == "opencl":
        g = plan(graph, target=resolve_target("opencl"))
    else:
        g = _x86_plan(graph, **{"PlanMemory.reshape_views": False})
    check_plan(g)
    assert not g.meta["view_calls"]
