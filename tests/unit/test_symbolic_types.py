"""Type inference on symbolic shapes: each op's type rule (tvmc/ops) on tensors whose dimensions
are expressions of size variables, checked against the same rule on static shapes at sizes in the
range (lower bound, upper bound, odd sizes), and the errors for shapes the bounds cannot prove."""

from __future__ import annotations

import numpy as np
import pytest

from tvmc.errors import ModelError
from tvmc.graph import symbolic as sym
from tvmc.graph.ir import MAX_TENSOR_BYTES, Constant, Graph, TensorType, Var, print_graph
from tvmc.ops.registry import make_call

N = sym.size_var("n", 1, 16)
S = sym.size_var("s", 1, 512)
H = sym.size_var("h", 32, 512)
W = sym.size_var("w", 16, 2048)
SIZES = ({"n": 1, "s": 1, "h": 32, "w": 16}, {"n": 16, "s": 512, "h": 512, "w": 2048},
         {"n": 3, "s": 77, "h": 225, "w": 999})


def const(*shape):
    return Constant(np.zeros(shape, np.float32))


# (op, input shapes (None: a float32 constant of the shape after it), attrs)
CASES = {
    "add_broadcast": ("add", [(N, S, 64), (S, 1)], {}),
    "where": ("where", [(N, 1, S), (1, S, 1), (N, S, S)], {}),
    "dense": ("nn.dense", [(N * S, 64), (32, 64)], {}),
    "matmul_batch": ("nn.matmul", [(N, 4, S, 16), (N, 4, 16, S)], {}),
    "matmul_bcast": ("nn.matmul", [(N, 4, S, 16), (16, 8)], {}),
    "conv2d": ("nn.conv2d", [(N, 3, H, W), (8, 3, 3, 3)],
               {"strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}),
    "conv2d_valid": ("nn.conv2d", [(1, 8, H, W), (8, 8, 7, 5)],
                     {"strides": (1, 3), "padding": (0, 0, 0, 0), "dilation": (2, 1), "groups": 1}),
    "max_pool2d": ("nn.max_pool2d", [(N, 8, H, W)],
                   {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": 0}),
    "avg_pool2d_ceil": ("nn.avg_pool2d", [(N, 8, H, W)],
                        {"pool_size": (2, 2), "strides": (2, 2), "padding": (0, 0, 0, 0), "ceil_mode": 1,
                         "count_include_pad": 0}),
    "global_avg_pool2d": ("nn.global_avg_pool2d", [(N, 8, H, W)], {}),
    "reshape_heads": ("reshape", [(N, S, 64)], {"newshape": (N, S, 4, 16)}),
    "reshape_flatten": ("reshape", [(N, 8, H, W)], {"newshape": (N, 8 * H * W)}),
    "transpose": ("transpose", [(N, S, 4, 16)], {"axes": (0, 2, 1, 3)}),
    "concatenate": ("concatenate", [(N, S, 8), (N, 1, 8), (N, S, 8)], {"axis": 1}),
    "softmax": ("nn.softmax", [(N, 4, S, S)], {"axis": 3}),
    "mean": ("mean", [(N, S, 64)], {"axis": (2,), "keepdims": 1}),
    "sum": ("sum", [(N, S, 64)], {"axis": (1,), "keepdims": 0}),
    "argmax": ("argmax", [(W, 1, 12)], {"axis": 2, "keepdims": 0}),
    "cast": ("cast", [(N, S)], {"dtype": "int32"}),
    "strided_slice": ("strided_slice", [(1, 512)], {"begin": (0, 0), "end": (1, S), "strides": (1, 1)}),
    "strided_slice_step": ("strided_slice", [(N, W)], {"begin": (0, 1), "end": (N, W), "strides": (1, 3)}),
    "broadcast_to": ("broadcast_to", [(1, S)], {"shape": (N, S)}),
    "batch_norm": ("nn.batch_norm", [(N, 8, H, W), (8,), (8,), (8,), (8,)], {"epsilon": 1e-5, "axis": 1}),
}


def _call(op, shapes, attrs, values=None):
    args = []
    for k, shape in enumerate(shapes):
        if values is not None:
            shape = tuple(sym.substitute(d, values) for d in shape)
        if op == "take" and k == 1:
            args.append(Var(f"x{k}", TensorType(shape, "int64")))
        elif op == "where" and k == 0:
            args.append(Var(f"x{k}", TensorType(shape, "bool")))
        else:
            args.append(Var(f"x{k}", TensorType(shape, "float32")))
    if values is not None:
        attrs = {k: tuple(sym.substitute(d, values) for d in v) if isinstance(v, tuple) else v
                 for k, v in attrs.items()}
    return make_call(op, args, attrs, name="n0")


@pytest.mark.parametrize("case", sorted(CASES))
def test_symbolic_type_matches_static_types_in_range(case):
    op, shapes, attrs = CASES[case]
    out = _call(op, shapes, attrs)
    assert out.type.is_symbolic or case in ("global_avg_pool2d",) and out.shape[2:] == (1, 1)
    for values in SIZES:
        static = _call(op, shapes, attrs, values)
        assert tuple(sym.substitute(d, values) for d in out.shape) == static.shape, (case, values)
        assert static.dtype == out.dtype


def test_take_with_symbolic_indices():
    emb = Constant(np.zeros((50, 16), np.float32))
    ids = Var("ids", TensorType((N, S), "int64"))
    assert make_call("take", [emb, ids], {"axis": 0}).shape == (N, S, 16)
    x = Var("x", TensorType((N, S, 16), "float32"))
    assert make_call("take", [x, Constant(np.array(0, np.int64))], {"axis": 1}).shape == (N, 16)


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("add", [(S,), (sym.size_var("t", 1, 512),)], {}, r"do not broadcast: s and t are not provably equal"),
    ("add", [(S,), (4,)], {}, r"s and 4 are not provably equal"),
    ("reshape", [(S,)], {"newshape": (S // 4, 4)}, r"cannot reshape \[s\] to \[s // 4, 4\].*not provably equal"),
    ("nn.dense", [(N, S), (8, 64)], {}, r"dense needs data"),
    ("nn.max_pool2d", [(1, 8, sym.size_var("k", 1, 8), 8)],
     {"pool_size": (3, 3), "strides": (1, 1), "padding": (0, 0, 0, 0), "ceil_mode": 0},
     r"cannot prove or disprove .*k in 1..8"),
    ("concatenate", [(N, 8), (S, 8)], {"axis": 1}, r"cannot concatenate"),
    ("nn.softmax", [(sym.size_var("z", 0, 8) // 2, 8)], {"axis": 1},
     r"input 0 has shape \[z // 2,8\], whose dimension z // 2 may be 0 \(z in 0..8\); nn.softmax cannot take an "
     r"empty tensor"),
])
def test_unprovable_shapes_are_errors_naming_the_node(op, shapes, attrs, message):
    with pytest.raises(ModelError, match=rf"node 'n0' \({op}\): .*{message}"):
        _call(op, shapes, attrs)


def test_tensor_type_checks_symbolic_dims():
    t = TensorType((N, S, 64))
    assert t.is_symbolic and t.size == 64 * N * S and t.nbytes == 256 * N * S and str(t) == "float32[n,s,64]"
    assert not TensorType((2, 3)).is_symbolic and TensorType((2, 3)).size == 6
    with pytest.raises(ValueError, match=r"dimension s - 2 may be negative \(s in 1..512\)"):
        TensorType((S - 2,))
    big = sym.size_var("big", 1, MAX_TENSOR_BYTES)
    with pytest.raises(ValueError, match=r"is up to \d+ bytes \(big in 1..\d+\), more than the limit"):
        TensorType((big, 8))
    assert TensorType((N, np.int64(3))).shape == (N, 3) and type(TensorType((N, np.int64(3))).shape[1]) is int


def test_print_graph_states_the_variables():
    x = Var("x", TensorType((N, S), "float32"))
    g = Graph([x], [make_call("nn.relu", [x])])
    text = print_graph(g)
    assert text.splitlines()[:2] == ["graph(%x: float32[n,s]) {", "  where n in 1..16, s in 1..512"]
    assert g.size_vars() == sym.free_vars([N, S])
    static = Graph([Var("y", TensorType((2,)))], [])
    assert "where" not in print_graph(static) and static.size_vars() == []


def test_arange_and_shape_to_tensor_types_and_kernels():
    """The two ops the importer emits for symbolic values: symbolic types; with static attributes
    their kernels run here (the symbolic ones wait for kernels with symbolic extents)."""
    from tests.ops.util import run_op

    assert make_call("arange", [], {"start": 0, "step": 1, "length": S, "dtype": "int64"}).shape == (S,)
    values = make_call("shape_to_tensor", [], {"values": (N, S, 64), "shape": (3,), "dtype": "int64"})
    assert values.type == TensorType((3,), "int64")
    with pytest.raises(ModelError, match="3 values do not fill the shape"):
        make_call("shape_to_tensor", [], {"values": (N, S, 64), "shape": (2,), "dtype": "int64"})
    out, ref = run_op("arange", [], {"start": 3, "step": -2, "length": 5, "dtype": "int32"})
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(ref, [3, 1, -1, -3, -5])
    for shape, vals in (((3,), (4, 7, 9)), ((), (5,))):
        out, ref = run_op("shape_to_tensor", [], {"values": vals, "shape": shape, "dtype": "int64"})
        np.testing.assert_array_equal(out, np.array(vals).reshape(shape))
