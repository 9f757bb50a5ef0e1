"""ONNX converters, sequence and recurrent group: RNN, GRU and LSTM unrolled over their static
sequence length onto our own matmul and elementwise kernels, or over a symbolic sequence length
(tvmc.graph.symbolic: a CRNN's width, a sentence's length) run as a loop at run time.

The input projection X W^T + Wb runs as one matmul over all steps; each step adds H R^T + Rb
(a matmul) and applies the gates' elementwise math, which FuseOps fuses into one kernel per step.
With a symbolic sequence length the step is the body of a run-time loop (`control.loop`, trip
count the length, tvmc.frontend.onnx.control_flow.run_time_loop): the states are its carried
values, its step reads row i of the projected input and its output H is a scan output stacked
into Y [seq, batch, hidden], planned at the bound.
Directions forward, reverse and bidirectional; sequence_lens (steps past a sequence's length
keep its state and output 0; reverse runs over each sequence's own length); initial states;
LSTM peepholes and input_forget; clip; every activation the ONNX spec lists, with
activation_alpha/beta; layout 0 and 1. Source: ONNX RNN-22, GRU-22, LSTM-22.
"""

from __future__ import annotations

import numpy as np

from tvmc.frontend.onnx.common import reshape, scalar
from tvmc.frontend.onnx.registry import converter
from tvmc.graph import symbolic
from tvmc.graph.ir import TensorType, Var

# activation -> (our ops builder, default alpha, default beta); builders take (ctx, x, alpha, beta)
_ACTIVATIONS = {
    "Relu": (lambda c, x, a, b: c.call("nn.relu", [x]), None, None),
    "Tanh": (lambda c, x, a, b: c.call("tanh", [x]), None, None),
    "Sigmoid": (lambda c, x, a, b: c.call("sigmoid", [x]), None, None),
    "Affine": (lambda c, x, a, b: _axpb(c, x, a, b), 1.0, 0.0),
    "LeakyRelu": (lambda c, x, a, b: c.call("nn.leaky_relu", [x], {"alpha": a}), 0.01, None),
    "ThresholdedRelu": (lambda c, x, a, b: c.call("where", [c.call("greater", [x, scalar(c, x, a, "alpha")]), x,
                                                           scalar(c, x, 0, "zero")]), 1.0, None),
    "ScaledTanh": (lambda c, x, a, b: c.call("multiply", [c.call("tanh", [_axpb(c, x, b, 0.0)]),
                                                          scalar(c, x, a, "alpha")]), 1.0, 1.0),
    "HardSigmoid": (lambda c, x, a, b: c.call("clip", [_axpb(c, x, a, b)], {"a_min": 0.0, "a_max": 1.0}), 0.2, 0.5),
    "Elu": (lambda c, x, a, b: c.call("nn.elu", [x], {"alpha": a}), 1.0, None),
    "Softsign": (lambda c, x, a, b: c.call("divide", [x, c.call("add", [c.call("abs", [x]), scalar(c, x, 1, "one")])]),
                 None, None),
    "Softplus": (lambda c, x, a, b: c.call("log", [c.call("add", [c.call("exp", [x]), scalar(c, x, 1, "one")])]),
                 None, None),
}


def _axpb(ctx, x, a, b):
    y = x if a == 1.0 else ctx.call("multiply", [x, scalar(ctx, x, a, "alpha")])
    return y if b == 0.0 else ctx.call("add", [y, scalar(ctx, x, b, "beta")])


def _activations(ctx, attrs, defaults, num_dir):
    """Per direction, the list of activation functions x -> y (ONNX names, alpha/beta consumed in
    order by the functions that take them)."""
    names = [n if isinstance(n, str) else n.decode() for n in attrs.get("activations", [])] or defaults * num_dir
    if len(names) != len(defaults) * num_dir:
        raise ctx.error(f"activations {names} must list {len(defaults)} functions per direction")
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    fns = []
    for name in names:
        key = next((k for k in _ACTIVATIONS if k.lower() == name.lower()), None)
        if key is None:
            raise ctx.error(f"unknown activation '{name}'")
        build, da, db = _ACTIVATIONS[key]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        fns.append(lambda x, build=build, a=a, b=b: build(ctx, x, a, b))
    return [fns[d * len(defaults):(d + 1) * len(defaults)] for d in range(num_dir)]


class _Unroll:
    """The parts shared by RNN, GRU and LSTM: operands per direction, the step loop, outputs."""

    def __init__(self, ctx, inputs, attrs, gates, defaults):
        self.ctx, self.attrs, self.gates = ctx, attrs, gates
        x, w, r = inputs[0], inputs[1], inputs[2]
        self.layout = int(attrs.get("layout", 0))
        if self.layout:
            x = ctx.call("transpose", [x], {"axes": (1, 0, 2)})
        self.x = x
        self.seq, self.batch, self.input = x.shape
        self.hidden = int(attrs.get("hidden_size", w.shape[1] // gates))
        direction = attrs.get("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(f"unknown direction '{direction}'")
        self.num_dir = 2 if direction == "bidirectional" else 1
        self.reverse = [direction == "reverse" or d == 1 for d in range(self.num_dir)]
        self.check_weights(w, r)
        self.w, self.r = w, r
        opt = [inputs[k] if len(inputs) > k and inputs[k] is not None else None for k in range(8)]
        self.b, self.lens, self.init_h = opt[3], opt[4], opt[5]
        self.opt = opt  # LSTM reads initial_c (6) and P (7)
        self.clip = float(attrs["clip"]) if "clip" in attrs else None
        self.fns = _activations(ctx, attrs, defaults, self.num_dir)

    def check_weights(self, w, r):
        """Raise the node's ModelError unless W is [num_dir, gates*hidden, input]."""
        if tuple(w.shape) != (self.num_dir, self.gates * self.hidden, self.input):
            raise self.ctx.error(f"W {w.type} must be [{self.num_dir}, {self.gates * self.hidden}, {self.input}]")

    def project(self, a, which: str, d):
        """a [m, input] @ W[d]^T (which "W") or a [m, hidden] @ R[d]^T (which "R"): [m, gates*hidden]
        float (a subclass computes it otherwise: com.microsoft.DynamicQuantizeLSTM's integer matmuls)."""
        return self.matmul_t(a, self.of_direction(self.w if which == "W" else self.r, d))

    def of_direction(self, t, d):
        """t[d] of a [num_dir, ...] tensor (W, R, B, initial states), shaped t.shape[1:]."""
        rank = len(t.shape)
        s = self.ctx.call("strided_slice", [t], {"begin": (d,) + (0,) * (rank - 1),
                                                 "end": (d + 1,) + tuple(t.shape[1:]), "strides": (1,) * rank})
        return reshape(self.ctx, s, tuple(t.shape[1:]))

    def cols(self, t, k, n=1):
        """Gate columns k .. k+n-1 (hidden each) of a [rows, gates*hidden] tensor."""
        h = self.hidden
        return self.ctx.call("strided_slice", [t], {"begin": (0, k * h), "end": (t.shape[0], (k + n) * h),
                                                    "strides": (1, 1)})

    def matmul_t(self, a, w):
        """a[m, k] @ w[n, k]^T."""
        return self.ctx.call("nn.matmul", [a, self.ctx.call("transpose", [w], {"axes": (1, 0)})])

    def bias(self, d, part):
        """Wb (part 0) or Rb (part 1) of direction d as [gates*hidden], or None without B."""
        if self.b is None:
            return None
        n = self.gates * self.hidden
        s = self.ctx.call("strided_slice", [self.of_direction(self.b, d)], {"begin": (part * n,),
                                                                            "end": ((part + 1) * n,), "strides": (1,)})
        return s

    def clipped(self, x):
        return x if self.clip is None else self.ctx.call("clip", [x], {"a_min": -self.clip, "a_max": self.clip})

    def state0(self, init, d):
        """The initial state of direction d: init[d] [batch, hidden], or zeros."""
        if init is None:
            return self.ctx.const(np.zeros((self.batch, self.hidden), self.x.dtype), "zero_state")
        return self.of_direction(init, d)

    def run(self, step, extra_states=()):
        """step(d, xw_t [batch, gates*hidden], states) -> new states (h first); returns
        (Y [seq, num_dir, batch, hidden], final states per kind [num_dir, batch, hidden])."""
        ctx = self.ctx
        ys, finals = [], [[] for _ in range(1 + len(extra_states))]
        for d in range(self.num_dir):
            x = self.x
            if self.reverse[d]:
                x = self._reverse(x)
            xw = self.project(reshape(ctx, x, (self.seq * self.batch, self.input)), "W", d)
            wb = self.bias(d, 0)
            if wb is not None:
                xw = ctx.call("add", [xw, wb])
            states = [self.state0(self.init_h, d)] + [self.state0(s, d) for s in extra_states]
            if symbolic.is_symbolic(self.seq):
                y, states = self._loop(step, d, xw, states)
                if self.reverse[d]:
                    y = self._reverse(y)
                ys.append(reshape(ctx, y, (self.seq, 1, self.batch, self.hidden)))
                for k, s in enumerate(states):
                    finals[k].append(reshape(ctx, s, (1, self.batch, self.hidden)))
                continue
            outs = []
            for t in range(self.seq):
                xw_t = ctx.call("strided_slice", [xw], {"begin": (t * self.batch, 0),
                                                        "end": ((t + 1) * self.batch, xw.shape[1]), "strides": (1, 1)})
                new = step(d, xw_t, states)
                if self.lens is not None:
                    live = reshape(ctx, ctx.call("less", [ctx.const(np.array(t, np.int64), "step"),
                                                          ctx.call("cast", [self.lens], {"dtype": "int64"})]),
                                   (self.batch, 1))
                    zero = scalar(ctx, new[0], 0, "zero")
                    outs.append(ctx.call("where", [live, new[0], zero]))
                    states = [ctx.call("where", [live, n, s]) for n, s in zip(new, states)]
                else:
                    outs.append(new[0])
                    states = new
            y = ctx.call("concatenate", [reshape(ctx, o, (1, self.batch, self.hidden)) for o in outs], {"axis": 0}) \
                if len(outs) > 1 else reshape(ctx, outs[0], (1, self.batch, self.hidden))
            if self.reverse[d]:
                y = self._reverse(y)
            ys.append(reshape(ctx, y, (self.seq, 1, self.batch, self.hidden)))
            for k, s in enumerate(states):
                finals[k].append(reshape(ctx, s, (1, self.batch, self.hidden)))
        y = ys[0] if len(ys) == 1 else ctx.call("concatenate", ys, {"axis": 1})
        finals = [f[0] if len(f) == 1 else ctx.call("concatenate", f, {"axis": 0}) for f in finals]
        if self.layout:
            y = ctx.call("transpose", [y], {"axes": (2, 0, 1, 3)})
            finals = [ctx.call("transpose", [f], {"axes": (1, 0, 2)}) for f in finals]
        return y, finals

    def _loop(self, step, d, xw, states):
        """Direction d over a symbolic sequence: a run-time loop of seq iterations whose body reads
        row i of the projected input xw [seq * batch, gates * hidden], runs `step` on the carried
        states and gives H (0 past a sequence's length) as its scan output. Returns (Y [seq, batch,
        hidden], final states)."""
        ctx = self.ctx
        from tvmc.frontend.onnx.control_flow import run_time_loop

        name = ctx.importer.unique_name
        i = Var(name(f"{ctx.name}:step"), TensorType((), "int64"))
        cond = Var(name(f"{ctx.name}:cond"), TensorType((), "bool"))
        carried = [Var(name(f"{ctx.name}:state"), s.type) for s in states]
        rows = reshape(ctx, xw, (self.seq, self.batch, xw.shape[1]))
        new = step(d, ctx.call("take", [rows, i], {"axis": 0}), carried)
        out = new[0]
        if self.lens is not None:
            live = reshape(ctx, ctx.call("less", [i, ctx.call("cast", [self.lens], {"dtype": "int64"})]),
                           (self.batch, 1))
            out = ctx.call("where", [live, new[0], scalar(ctx, new[0], 0, "zero")])
            new = [ctx.call("where", [live, n, s]) for n, s in zip(new, carried)]
        trip = ctx.call("shape_to_tensor", [], {"values": (self.seq,), "shape": (), "dtype": "int64"})
        results = run_time_loop(ctx, [i, cond] + carried, [cond] + list(new) + [out], trip,
                                ctx.const(np.array(True), "cond"), states, num_scan=1, length=self.seq)
        return results[-1], list(results[:-1])

    def _reverse(self, x):
        """x [seq, batch, ...] reversed in time (each sequence within its own length when given)."""
        if self.lens is not None:
            return self.ctx.call("reverse_sequence", [x, self.lens], {"batch_axis": 1, "time_axis": 0})
        rank = len(x.shape)
        return self.ctx.call("strided_slice", [x], {"begin": (x.shape[0] - 1,) + (0,) * (rank - 1),
                                                    "end": (-1,) + tuple(x.shape[1:]),
                                                    "strides": (-1,) + (1,) * (rank - 1)})


def _outputs(node, y, finals):
    """The node's outputs (Y, Y_h[, Y_c]) as many as it names."""
    return (y, *finals)[:max(len(node.output), 1)]


@converter(1, 7, 14, 22)
def RNN(ctx, node, inputs, attrs, opset):
    """ONNX RNN: H_t = f(X_t W^T + Wb + H_{t-1} R^T + Rb), f = Tanh by default."""
    u = _Unroll(ctx, inputs, attrs, 1, ["Tanh"])

    def step(d, xw_t, states):
        r, rb = u.of_direction(u.r, d), u.bias(d, 1)
        g = ctx.call("add", [xw_t, u.matmul_t(states[0], r)])
        if rb is not None:
            g = ctx.call("add", [g, rb])
        return [u.fns[d][0](u.clipped(g))]

    return _outputs(node, *u.run(step))


@converter(1, 3, 7, 14, 22)
def GRU(ctx, node, inputs, attrs, opset):
    """ONNX GRU (gates z, r, h; f = Sigmoid, g = Tanh): z, r = f(X W^T + H R^T + biases);
    h~ = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh), or with linear_before_reset g(X Wh^T + r * (H Rh^T
    + Rbh) + Wbh); H = (1 - z) * h~ + z * H."""
    u = _Unroll(ctx, inputs, attrs, 3, ["Sigmoid", "Tanh"])
    lbr = int(attrs.get("linear_before_reset", 0))

    def step(d, xw_t, states):
        h = states[0]
        r_w, rb = u.of_direction(u.r, d), u.bias(d, 1)
        f, g = u.fns[d]
        hr = u.matmul_t(h, r_w)  # [batch, 3*hidden]: z, r, h parts
        if rb is not None:
            hr = ctx.call("add", [hr, rb])
        zr = f(u.clipped(ctx.call("add", [u.cols(xw_t, 0, 2), u.cols(hr, 0, 2)])))
        z, r = u.cols(zr, 0), u.cols(zr, 1)
        if lbr:
            rec = ctx.call("multiply", [r, u.cols(hr, 2)])
        else:
            rh_w = ctx.call("strided_slice", [r_w], {"begin": (2 * u.hidden, 0), "end": (3 * u.hidden, u.hidden),
                                                     "strides": (1, 1)})
            rec = u.matmul_t(ctx.call("multiply", [r, h]), rh_w)
            if rb is not None:
                rec = ctx.call("add", [rec, ctx.call("strided_slice", [rb], {
                    "begin": (2 * u.hidden,), "end": (3 * u.hidden,), "strides": (1,)})])
        hh = g(u.clipped(ctx.call("add", [u.cols(xw_t, 2), rec])))
        one = scalar(ctx, h, 1, "one")
        return [ctx.call("add", [ctx.call("multiply", [ctx.call("subtract", [one, z]), hh]),
                                 ctx.call("multiply", [z, h])])]

    return _outputs(node, *u.run(step))


@converter(1, 7, 14, 22)
def LSTM(ctx, node, inputs, attrs, opset):
    """ONNX LSTM (gates i, o, f, c; f = Sigmoid, g = h = Tanh; peepholes P = [Pi, Po, Pf]):
    i = f(G_i + Pi * C), f = f(G_f + Pf * C) (1 - i with input_forget), C' = f * C + i * g(G_c),
    o = f(G_o + Po * C'), H = o * h(C'), where G = X W^T + H R^T + biases."""
    return lstm(ctx, node, _Unroll(ctx, inputs, attrs, 4, ["Sigmoid", "Tanh", "Tanh"]), attrs)


def lstm(ctx, node, u: _Unroll, attrs):
    """The LSTM recurrence of LSTM's docstring over `u` (an _Unroll with 4 gates, whose `project`
    gives the X and H products): the node's outputs (Y, Y_h, Y_c)."""
    init_c, peep = u.opt[6], u.opt[7]
    coupled = int(attrs.get("input_forget", 0))

    def peephole(d, k, c):
        p = ctx.call("strided_slice", [u.of_direction(peep, d)], {"begin": (k * u.hidden,),
                                                                  "end": ((k + 1) * u.hidden,), "strides": (1,)})
        return ctx.call("multiply", [p, c])

    def step(d, xw_t, states):
        h, c = states
        f, g, hf = u.fns[d]
        gates = ctx.call("add", [xw_t, u.project(h, "R", d)])
        rb = u.bias(d, 1)
        if rb is not None:
            gates = ctx.call("add", [gates, rb])
        gi, go, gf, gc = (u.cols(gates, k) for k in range(4))
        if peep is not None:
            gi, gf = ctx.call("add", [gi, peephole(d, 0, c)]), ctx.call("add", [gf, peephole(d, 2, c)])
        i = f(u.clipped(gi))
        forget = ctx.call("subtract", [scalar(ctx, c, 1, "one"), i]) if coupled else f(u.clipped(gf))
        c_new = ctx.call("add", [ctx.call("multiply", [forget, c]), ctx.call("multiply", [i, g(u.clipped(gc))])])
        if peep is not None:
            go = ctx.call("add", [go, peephole(d, 1, c_new)])
        o = f(u.clipped(go))
        return [ctx.call("multiply", [o, hf(c_new)]), c_new]

    return _outputs(node, *u.run(step, extra_states=(init_c,)))
