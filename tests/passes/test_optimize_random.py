"""The full optimize pipeline keeps random graphs' meaning at every opt level (hypothesis)."""

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pass_helpers import assert_equivalent, batch_norm, call, check_plan, const, var
from tvmc.graph.executor_json import build_executor_json
from tvmc.graph.ir import Function, Graph
from tvmc.passes import PassContext, optimize

LAYERS = ["conv", "conv", "pad_conv", "batch_norm", "relu", "sigmoid", "tanh", "bias", "pool", "reshape",
          "join", "concat", "dropout", "softmax",
          # patterns for SimplifyExpr, FoldScaleAxis, EliminateCommonSubexpr, DeadCodeElimination,
          # and an elementwise kernel after an opaque one for PlanMemory's in-place reuse
          "conv_scale", "conv_scale", "conv_bn", "reshape_pair", "transpose_pair", "neutral", "noop", "twin",
          "twin", "softmax_act", "softmax_act"]
PATTERN_LAYERS = ("conv_scale", "conv_bn", "reshape_pair", "transpose_pair", "neutral", "noop", "twin",
                  "softmax_act")
PERMUTATIONS = [(0,) + p for p in itertools.permutations((1, 2, 3))]


def _conv(src, name, seed, ksz, oc):
    """A stride-1 'same' conv2d with a fresh weight Constant drawn from `seed`."""
    pad = ksz // 2
    weight = const((oc, src.shape[1], ksz, ksz), f"{name}_w", seed)
    return call("nn.conv2d", src, weight, name=name, strides=(1, 1), padding=(pad, pad, pad, pad),
                dilation=(1, 1), groups=1)


def _pattern_layer(draw, kind, src, k):
    """Layers that the level-2/3 passes rewrite."""
    n, c, h, w = src.shape
    name = f"l{k}"
    ksz, oc = draw(st.sampled_from([1, 3])), draw(st.integers(1, 4))
    if kind in ("conv_scale", "conv_bn"):
        y = _conv(src, name, k, ksz, oc)
        if kind == "conv_bn":
            if draw(st.booleans()):
                y = call("add", y, const((oc, 1, 1), f"{name}_bias", k + 1))
            return batch_norm(y, f"{name}_bn", k + 2)
        if draw(st.booleans()):
            y = call("add", y, const(draw(st.sampled_from([(oc, 1, 1), (1, oc, 1, 1), ()])), f"{name}_b", k + 1))
        scale = const(draw(st.sampled_from([(oc, 1, 1), (1, oc, 1, 1), (), (1, 1, h, w)])), f"{name}_s", k + 2,
                      -2.0, 2.0)
        return call("multiply", *((scale, y) if draw(st.booleans()) else (y, scale)))
    if kind == "reshape_pair":
        flat = call("reshape", src, newshape=(n, c * h * w))
        return call("reshape", flat, newshape=draw(st.sampled_from([(n, c, h, w), (n, c, w, h), (n, 1, c * h, w)])))
    if kind == "transpose_pair":
        t = call("transpose", src, axes=draw(st.sampled_from(PERMUTATIONS)))
        return call("transpose", t, axes=draw(st.sampled_from(PERMUTATIONS)))
    if kind == "neutral":
        op, value = draw(st.sampled_from([("multiply", 1.0), ("divide", 1.0), ("add", 0.0), ("subtract", 0.0)]))
        neutral = const(draw(st.sampled_from([(c, 1, 1), (1, c, h, w), ()])), f"{name}_n", k, value, value)
        return call(op, src, neutral)
    if kind == "noop":
        op = draw(st.sampled_from(["reshape", "transpose", "cast"]))
        attrs = {"reshape": {"newshape": (n, c, h, w)}, "transpose": {"axes": (0, 1, 2, 3)},
                 "cast": {"dtype": src.dtype}}[op]
        return call(op, src, **attrs)
    if kind == "twin":
        # the same computation twice (equal constants, distinct objects): CSE merges them
        op = draw(st.sampled_from(["conv", "sigmoid", "bias"]))
        if op == "conv":
            a, b = (_conv(src, name, k, ksz, oc) for _ in range(2))
        elif op == "sigmoid":
            a, b = call("sigmoid", src), call("sigmoid", src)
        else:
            a, b = (call("add", src, const((c, 1, 1), f"{name}_b{i}", k)) for i in range(2))
        return call("add", a, b)
    if kind == "softmax_act":
        act = draw(st.sampled_from(["nn.relu", "sigmoid", "tanh"]))
        return call(act, call("nn.softmax", src, axis=1))
    raise AssertionError(kind)


def _layer(draw, kind, src, live, k):
    if kind in PATTERN_LAYERS:
        return _pattern_layer(draw, kind, src, k)
    n, c, h, w = src.shape
    name = f"l{k}"
    if kind in ("conv", "pad_conv"):
        ksz = draw(st.sampled_from([1, 3]))
        pad = draw(st.sampled_from([0, 1]))
        stride = draw(st.sampled_from([1, 2]))
        if kind == "pad_conv":
            src = call("pad", src, pad_width=((0, 0), (0, 0), (pad, pad), (pad, pad)), pad_value=0.0)
            h, w, pad = h + 2 * pad, w + 2 * pad, 0
        if h + 2 * pad < ksz or w + 2 * pad < ksz:
            return None
        oc = draw(st.integers(1, 4))
        weight = const((oc, c, ksz, ksz), f"{name}_w", k)
        return call("nn.conv2d", src, weight, name=name, strides=(stride, stride),
                    padding=(pad, pad, pad, pad), dilation=(1, 1), groups=1)
    if kind == "batch_norm":
        return batch_norm(src, name, k)
    if kind in ("relu", "sigmoid", "tanh"):
        return call({"relu": "nn.relu"}.get(kind, kind), src, name=name)
    if kind == "bias":
        op = draw(st.sampled_from(["add", "multiply"]))
        return call(op, src, const((c, 1, 1), f"{name}_b", k), name=name)
    if kind == "pool":
        if h < 2 or w < 2:
            return None
        op = draw(st.sampled_from(["nn.max_pool2d", "nn.avg_pool2d"]))
        stride = draw(st.sampled_from([1, 2]))
        attrs = dict(pool_size=(2, 2), strides=(stride, stride), padding=(0, 0, 0, 0), dilation=(1, 1),
                     ceil_mode=0)
        if op == "nn.avg_pool2d":
            attrs["count_include_pad"] = 0
        return call(op, src, name=name, **attrs)
    if kind == "reshape":
        return call("reshape", src, name=name, newshape=(n, c * h, w, 1) if draw(st.booleans()) else (n, 1, c * h, w))
    if kind == "join":
        same = [t for t in live if t.shape == src.shape and t is not src]
        if not same:
            return None
        op = draw(st.sampled_from(["add", "multiply", "maximum"]))
        return call(op, src, draw(st.sampled_from(same)), name=name)
    if kind == "concat":
        other = [t for t in live if (t.shape[0], t.shape[2:]) == (n, (h, w))]
        return call("concatenate", src, draw(st.sampled_from(other)), name=name, axis=1)
    if kind == "dropout":
        return call(draw(st.sampled_from(["nn.dropout", "identity"])), src, name=name)
    if kind == "softmax":
        return call("nn.softmax", src, name=name, axis=1)
    raise AssertionError(kind)


@st.composite
def random_graphs(draw):
    """Chains and diamonds of conv2d, batch norm, pooling, elementwise, reshape, concat, the
    patterns the level-2/3 passes rewrite (conv + scale, reshape/transpose pairs, neutral
    arithmetic, no-op casts, duplicated computations), and an optional dense head; outputs are
    the last tensor plus sometimes an earlier one."""
    x = var("x", (1, draw(st.integers(1, 3)), draw(st.integers(3, 7)), draw(st.integers(3, 7))))
    live = [x]
    for k in range(draw(st.integers(1, 9))):
        # mostly extend the newest tensor (chains); sometimes branch from an older one (diamonds)
        src = live[-1] if draw(st.integers(0, 3)) else draw(st.sampled_from(live))
        out = _layer(draw, draw(st.sampled_from(LAYERS)), src, live, k)
        if out is not None:
            live.append(out)
    last = live[-1]
    if draw(st.booleans()):
        flat = call("reshape", last, newshape=(1, last.type.size))
        units = draw(st.integers(1, 5))
        dense = call("nn.dense", flat, const((units, last.type.size), "fc_w", 99))
        if draw(st.booleans()):                         # a scale FoldScaleAxis moves into fc_w
            dense = call("multiply", dense, const(draw(st.sampled_from([(units,), (1, units)])), "fc_s", 97))
        last = call("nn.relu", call("add", dense, const((units,), "fc_b", 98)))
    outputs = [last]
    if draw(st.booleans()):
        outputs.append(draw(st.sampled_from(live)))
    return Graph([x], outputs)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_optimize_preserves_outputs_at_every_opt_level(graph):
    contexts = [PassContext(opt_level=level) for level in range(4)]
    contexts.append(PassContext(opt_level=3, config={"PlanMemory.inplace": True}))
    for level, ctx in enumerate(contexts):
        out = optimize(graph, ctx)
        assert all(isinstance(c.op, Function) for c in out.calls())
        check_plan(out)
        assert out.meta["planned_bytes"] <= out.meta["unplanned_bytes"]
        build_executor_json(out)
        assert_equivalent(graph, out, seed=level, edge_values=False)
