"""Executor JSON export: TVM graph-executor schema, params, determinism."""

import json

import numpy as np
import pytest

from pass_helpers import batch_norm, call, const, conv, var
from tvmc.errors import PassError
from tvmc.graph.executor_json import build_executor_json
from tvmc.graph.ir import Constant, Graph
from tvmc.passes import PassContext, optimize


def model(seed=0):
    x = var("x", (1, 3, 8, 8))
    a = call("nn.relu", batch_norm(conv(x, 4, "conv1", seed=seed), "bn1"))
    b = call("nn.max_pool2d", a, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
             ceil_mode=0)
    flat = call("reshape", b, newshape=(1, 64))
    y = call("add", call("nn.dense", flat, const((10, 64), "fc_w", seed)), const((10,), "fc_b", seed))
    return Graph([x], [y, a], ["logits", "features"])


def test_schema():
    g = optimize(model(), PassContext())
    js, params = build_executor_json(g)
    assert {"nodes", "arg_nodes", "node_row_ptr", "heads", "attrs", "storage_bytes", "input_names",
            "output_names"} <= set(js)
    nodes = js["nodes"]
    n = len(nodes)
    assert js["node_row_ptr"] == list(range(n + 1))
    assert js["arg_nodes"] == [k for k, nd in enumerate(nodes) if nd["op"] == "null"]
    assert nodes[0] == {"op": "null", "name": "x", "inputs": []}
    for k, nd in enumerate(nodes):
        if nd["op"] == "null":
            assert nd["inputs"] == []
            continue
        assert nd["op"] == "tvm_op"
        attrs = nd["attrs"]
        assert attrs == {"func_name": nd["name"], "num_inputs": str(len(nd["inputs"])), "num_outputs": "1",
                         "flatten_data": "0"}
        assert all(len(i) == 3 and 0 <= i[0] < k and i[1:] == [0, 0] for i in nd["inputs"])
    tags = {key: value[0] for key, value in js["attrs"].items()}
    assert tags == {"shape": "list_shape", "dltype": "list_str", "storage_id": "list_int"}
    shapes, dltypes, sids = (js["attrs"][k][1] for k in ("shape", "dltype", "storage_id"))
    assert len(shapes) == len(dltypes) == len(sids) == n
    assert all(0 <= s < len(js["storage_bytes"]) for s in sids)
    for shape, dt, s in zip(shapes, dltypes, sids):
        assert js["storage_bytes"][s] >= int(np.prod(shape)) * np.dtype(dt).itemsize
    assert len(js["heads"]) == 2
    assert all(nodes[h[0]]["op"] == "tvm_op" for h in js["heads"])
    assert shapes[js["heads"][0][0]] == [1, 10] and shapes[js["heads"][1][0]] == [1, 4, 8, 8]
    assert js["input_names"] == ["x"] and js["output_names"] == ["logits", "features"]
    null_names = [nd["name"] for nd in nodes if nd["op"] == "null"]
    assert sorted(params) == sorted(null_names[1:])
    # (FoldScaleAxis folded bn1_scale into the conv weight)
    assert {"conv1_w_scaled", "bn1_shift", "fc_w", "fc_b"} == set(params)
    for name, value in params.items():
        k = nodes.index({"op": "null", "name": name, "inputs": []})
        assert list(value.shape) == shapes[k] and value.dtype.name == dltypes[k]
    json.dumps(js)                                    # plain JSON types only


def test_deterministic():
    a = json.dumps(build_executor_json(optimize(model(), PassContext()))[0])
    b = json.dumps(build_executor_json(optimize(model(), PassContext()))[0])
    assert a == b


def test_param_names_made_unique():
    x = var("x", (4,))
    k1 = Constant(np.ones(4, "float32"), "w")
    k2 = Constant(np.full(4, 2, "float32"), "w")
    k3 = Constant(np.full(4, 3, "float32"), "x")          # clashes with the input's name
    k4 = Constant(np.full(4, 4, "float32"), "")
    y = call("add", call("add", call("add", call("add", x, k1), k2), k3), k4)
    js, params = build_executor_json(optimize(Graph([x], [y]), PassContext(opt_level=0)))
    assert sorted(params) == ["param", "w", "w_1", "x_1"]
    np.testing.assert_array_equal(params["w_1"], k2.value)
    names = [nd["name"] for nd in js["nodes"] if nd["op"] == "null"]
    assert len(names) == len(set(names))


def test_output_that_is_an_input_works():
    x = var("x", (2, 3))
    js, params = build_executor_json(optimize(Graph([x], [x, call("nn.relu", x)]), PassContext()))
    heads = [h[0] for h in js["heads"]]
    assert all(js["nodes"][h]["op"] == "tvm_op" for h in heads)
    sids = js["attrs"]["storage_id"][1]
    assert len({sids[0], sids[heads[0]], sids[heads[1]]}) == 3


@pytest.mark.parametrize("passes", [[], ["FuseOps"]])
def test_unplanned_graph_is_rejected(passes):
    from tvmc.passes import run_passes
    g = run_passes(model(), passes, PassContext())
    with pytest.raises(PassError):
        build_executor_json(g)
