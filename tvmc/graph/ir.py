"""Graph IR: a dataflow graph of operator calls over shaped tensors (static shapes, or symbolic
ones: expressions of bounded size variables, tvmc/graph/symbolic.py).

Nodes are immutable. A graph is a DAG of `Expr`s:

- `Var`      a graph input (or a parameter of a fused `Function`);
- `Constant` a tensor known at compile time (a numpy array);
- `Call`     `op(inputs, attrs) -> one tensor`, where `op` is an operator name from
             `tvmc.ops.registry` (`nn.conv2d`, `add`, ...) or a fused primitive `Function`.

Every expression has a `TensorType` (shape, numpy dtype name). Passes never mutate
a graph: they build a new one, typically with `rewrite` (a memoized post-order mutator,
the analogue of TVM's ExprMutator).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from tvmc.graph import symbolic

# The largest tensor tvmc compiles: element counts and byte offsets stay far from 64-bit
# overflow, and any buffer of this size is beyond what a host allocates.
MAX_TENSOR_BYTES = 1 << 40
# The largest constant tvmc computes at compile time (import-time folding, FoldConstant; see
# docs/limits.md): a tensor of exactly this many bytes is folded, a larger one is not (the
# FoldConstant pass leaves its call to run time; the importer refuses a constant it would have to
# build, naming the node).
MAX_CONSTANT_BYTES = 1 << 30


def constant_bytes(shape, dtype) -> int:
    """Bytes of a `dtype` tensor of `shape`, computed exactly (no overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


@dataclass(frozen=True)
class TensorType:
    """Static tensor type: `shape` (tuple of ints, row-major) and `dtype` (numpy name, e.g. 'float32').

    `dynamic_axes` (sorted axis numbers, default none) marks a tensor whose extent along those
    axes is known only at run time (NonZero, Unique, Compress, ...): `shape` is then an upper
    bound, the buffer holds the data in its leading corner (row-major over the bound; the rest is
    never read) and an int64[rank] tensor holds the run-time shape (docs/dynamic_shapes.md).

    A dimension may be symbolic: a `tvmc.graph.symbolic.SymExpr` of bounded size variables
    (`seq`, `(seq + 1) // 2`), the shape holding for every value of the variables in their ranges;
    `size` and `nbytes` are then expressions too, and the byte limit applies to the upper bound.

    Checked when made: every dimension is an integer >= 0 (a symbolic one provably so) and the
    tensor holds at most MAX_TENSOR_BYTES bytes (computed exactly, so no 64-bit overflow hides a
    huge shape; for a symbolic shape, at its upper bound). Raises ValueError with the reason
    (make_call and Var turn it into a ModelError naming the node or the input).
    """

    shape: tuple
    dtype: str = "float32"
    dynamic_axes: tuple = ()

    def __post_init__(self):
        if any(not 0 <= a < len(self.shape) for a in self.dynamic_axes):
            raise ValueError(f"dynamic axes {list(self.dynamic_axes)} out of range for rank {len(self.shape)}")
        if any(isinstance(d, symbolic.SymExpr) for d in self.shape):
            self._check_symbolic()
            return
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                raise ValueError(f"shape {list(self.shape)} has a dimension that is not an integer")
            if d < 0:
                raise ValueError(f"shape {fmt_dims(self.shape)} has a negative dimension")
        nbytes = math.prod(int(d) for d in self.shape) * np.dtype(self.dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise ValueError(f"shape {fmt_dims(self.shape)} ({self.dtype}) is {nbytes} bytes, more than the "
                             f"limit of {MAX_TENSOR_BYTES} bytes per tensor")

    def _check_symbolic(self):
        """__post_init__ for a shape with symbolic dimensions (ints stored as Python ints)."""
        if self.dynamic_axes:
            raise ValueError(f"shape {fmt_dims(self.shape)} is symbolic and has run-time (dynamic) axes")
        dims = []
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer, symbolic.SymExpr)):
                raise ValueError(f"shape {list(self.shape)} has a dimension that is not an integer")
            if not symbolic.can_prove(d >= 0):
                raise ValueError(f"shape {fmt_dims(self.shape)}: dimension {d} may be negative "
                                 f"({symbolic.describe_vars(self.shape)})")
            dims.append(d if isinstance(d, symbolic.SymExpr) else int(d))
        object.__setattr__(self, "shape", tuple(dims))
        nbytes = symbolic.upper_bound(symbolic.prod(dims)) * np.dtype(self.dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise ValueError(f"shape {fmt_dims(self.shape)} ({self.dtype}) is up to {nbytes} bytes "
                             f"({symbolic.describe_vars(self.shape)}), more than the limit of "
                             f"{MAX_TENSOR_BYTES} bytes per tensor")

    @property
    def size(self):
        """Number of elements: an int, or a SymExpr for a symbolic shape."""
        if self.is_symbolic:
            return symbolic.prod(self.shape)
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def is_symbolic(self) -> bool:
        """True when some dimension is a symbolic expression (tvmc.graph.symbolic)."""
        return any(isinstance(d, symbolic.SymExpr) for d in self.shape)

    @property
    def is_dynamic(self) -> bool:
        """True when some extent is known only at run time (`shape` is its bound)."""
        return bool(self.dynamic_axes)

    def __str__(self):
        dims = (f"<={d}" if a in self.dynamic_axes else str(d) for a, d in enumerate(self.shape))
        return f"{self.dtype}[{','.join(dims)}]"


def fmt_dims(shape) -> str:
    """'[1,seq,768]': a shape of ints and symbolic dimensions, without spaces."""
    return "[" + ",".join(str(d) if isinstance(d, symbolic.SymExpr) else str(int(d)) for d in shape) + "]"


_ids = itertools.count()


class Expr:
    """Base of graph expressions. Hashing and equality are by identity."""

    type: TensorType

    def __init__(self):
        self._uid = next(_ids)

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype


class Var(Expr):
    """A graph input or a fused function parameter."""

    def __init__(self, name: str, type: TensorType):
        super().__init__()
        self.name = name
        self.type = type

    def __repr__(self):
        return f"Var({self.name}: {self.type})"


class Constant(Expr):
    """A compile-time tensor. `value` is a numpy array that must not be modified."""

    def __init__(self, value: np.ndarray, name: str = ""):
        super().__init__()
        value = np.asarray(value)
        value.setflags(write=False)
        self.value = value
        self.name = name
        self.type = TensorType(tuple(int(d) for d in value.shape), value.dtype.name)

    def __repr__(self):
        return f"Constant({self.name or '?'}: {self.type})"


class Function:
    """A fused primitive function: `params` (Vars) -> `body` (an Expr over them).

    Created by FuseOps; `Call(Function, args)` invokes it. `name` becomes the kernel's
    symbol name (e.g. `fused_nn_conv2d_add_nn_relu`). `load_time`: the executors run it once,
    when they load the artifact, not in every run (its op's OpDef.load_time; FuseOps sets it).
    """

    def __init__(self, params: list, body: Expr, name: str, load_time: bool = False):
        self.params = tuple(params)
        self.body = body
        self.name = name
        self.load_time = load_time

    @property
    def type(self) -> TensorType:
        return self.body.type

    def __repr__(self):
        return f"Function({self.name})"


class LoopBody:
    """The body of a run-time loop (ONNX Loop whose trip count or condition is known only at run
    time), a graph of its own compiled like the main graph and interpreted by the executors.

    graph.inputs:  iteration (int64 scalar), condition (bool scalar), the `num_carried`
                   loop-carried values, then the captured outer-scope tensors (read only)
    graph.outputs: the next condition (bool scalar), then the next loop-carried values (each of
                   its input's type), then the `num_scan` scan outputs (one static-shaped value per
                   iteration, stacked on a new axis 0)
    The `control.loop` calls of the main graph take (trip count int64 scalar, condition bool
    scalar, initial carried values..., captured tensors...) and hold the body in attrs["body"];
    attrs["index"] k says which final carried value a call gives (all of one body are one loop),
    k >= num_carried scan output k - num_carried, whose length attrs["length"] is the trip count
    as an int or a symbolic expression of the graph's size variables (tvmc.graph.symbolic: a
    loop over a symbolic sequence, whose stacked output is planned at the bound). Compared and
    hashed by identity.
    """

    def __init__(self, graph: "Graph", num_carried: int, name: str, num_scan: int = 0):
        self.graph = graph
        self.num_carried = num_carried
        self.num_scan = num_scan
        self.name = name

    def __repr__(self):
        return f"LoopBody({self.name})"


class Call(Expr):
    """`op(*inputs, **attrs)`: `op` is a registered operator name or a fused `Function`.

    `attrs` holds only hashable python values (ints, floats, strings, tuples).
    `name` is the source node's name (from ONNX), used in error messages.
    Use `tvmc.ops.registry.make_call` to build one with its type inferred.
    """

    def __init__(self, op, inputs: Iterable[Expr], attrs: dict, type: TensorType, name: str = ""):
        super().__init__()
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs)
        self.type = type
        self.name = name

    @property
    def op_name(self) -> str:
        return self.op.name if isinstance(self.op, Function) else self.op

    @property
    def is_symbolic(self) -> bool:
        """True when the call's type or one of its attributes holds a symbolic expression
        (tvmc.graph.symbolic): its value depends on the size variables, so it is never folded."""
        return self.type.is_symbolic or bool(symbolic.free_vars(list(self.attrs.values())))

    def __repr__(self):
        return f"Call({self.op_name}, {self.type})"


class Graph:
    """A whole model: `inputs` (Vars, in order), `outputs` (Exprs) with `output_names`.

    `output_shapes` gives, per output, None or the position among `outputs` of the int64[rank]
    tensor that holds its run-time shape (an output whose type is dynamic, see TensorType);
    those shape outputs come after the model's own outputs and are not shown to users.
    `meta` carries analysis results that later stages read (PlanMemory stores the storage
    plan there); passes that rebuild the graph drop it unless they recompute it.
    """

    def __init__(self, inputs, outputs, output_names=None, meta=None, output_shapes=None):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.output_names = tuple(output_names or [f"output_{i}" for i in range(len(self.outputs))])
        self.meta = dict(meta or {})
        self.output_shapes = tuple(output_shapes or [None] * len(self.outputs))

    def with_outputs(self, outputs, meta=None) -> "Graph":
        """The same inputs, names and run-time shape links over new `outputs` (one per output)."""
        return Graph(self.inputs, outputs, self.output_names, meta, self.output_shapes)

    @property
    def num_model_outputs(self) -> int:
        """The outputs a user sees: all but the run-time shape outputs (which come last)."""
        return len(self.outputs) - sum(s is not None for s in self.output_shapes)

    def topo(self) -> list:
        """All reachable expressions in a deterministic post-order (inputs before users)."""
        return post_order(self.outputs)

    def calls(self) -> list:
        return [e for e in self.topo() if isinstance(e, Call)]

    def size_vars(self) -> list:
        """The symbolic size variables of the input shapes (tvmc.graph.symbolic.SizeVar, sorted by
        name); every symbolic dimension of the graph is an expression of them. Empty when static."""
        return symbolic.free_vars([v.shape for v in self.inputs])

    def __str__(self):
        return print_graph(self)


def post_order(roots) -> list:
    """Post-order (operands first) of every Expr reachable from `roots`, each once."""
    seen, order = set(), []
    for root in roots:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            if expanded:
                order.append(e)
                continue
            if e in seen:
                continue
            seen.add(e)
            stack.append((e, True))
            if isinstance(e, Call):
                for i in reversed(e.inputs):
                    if i not in seen:
                        stack.append((i, False))
    return order


def rewrite(graph: Graph, fn: Callable[[Expr, tuple], Expr | None]) -> Graph:
    """Rebuild `graph` bottom-up. `fn(old_expr, new_inputs)` returns a replacement Expr or
    None to keep the node (re-created only if its inputs changed). Inputs stay the same Vars.
    """
    memo: dict = {}
    for e in graph.topo():
        if isinstance(e, Call):
            new_inputs = tuple(memo[i] for i in e.inputs)
            out = fn(e, new_inputs)
            if out is None:
                if all(a is b for a, b in zip(new_inputs, e.inputs)):
                    out = e
                else:
                    out = Call(e.op, new_inputs, e.attrs, e.type, e.name)
        else:
            out = fn(e, ())
            if out is None:
                out = e
        memo[e] = out
    return graph.with_outputs([memo[o] for o in graph.outputs])


def users(graph: Graph) -> dict:
    """Map Expr -> list of Calls that use it (graph outputs are not counted)."""
    out = {e: [] for e in graph.topo()}
    for e in graph.topo():
        if isinstance(e, Call):
            for i in e.inputs:
                out[i].append(e)
    return out


def _fmt_attr(v):
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


def print_graph(graph: Graph) -> str:
    """Readable text form, one line per node, e.g. `%3 = nn.conv2d(%0, %w1) strides=[2,2] : float32[1,64,112,112]`."""
    names: dict = {}
    lines, funcs = [], {}

    def ref(e):
        return names[e]

    for v in graph.inputs:
        names[v] = f"%{v.name}"
    lines.append("graph(" + ", ".join(f"{names[v]}: {v.type}" for v in graph.inputs) + ") {")
    size_vars = graph.size_vars()
    if size_vars:
        lines.append("  where " + ", ".join(repr(v) for v in size_vars))
    n = 0
    for e in graph.topo():
        if e in names:
            continue
        if isinstance(e, Constant):
            names[e] = f"@{e.name or 'c' + str(e._uid)}"
            lines.append(f"  {names[e]} = constant : {e.type}")
            continue
        if isinstance(e, Var):
            names[e] = f"%{e.name}"
            continue
        names[e] = f"%{n}"
        n += 1
        if isinstance(e.op, Function):
            funcs[e.op.name] = e.op
        attrs = " ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(e.attrs.items()))
        lines.append(f"  {names[e]} = {e.op_name}({', '.join(ref(i) for i in e.inputs)})"
                     f"{' ' + attrs if attrs else ''} : {e.type}")
    lines.append("  return " + ", ".join(f"{ref(o)} as {nm}" for o, nm in zip(graph.outputs, graph.output_names)))
    lines.append("}")
    for fname, f in funcs.items():
        body = Graph(f.params, [f.body])
        text = print_graph(body).splitlines()
        lines.append(f"fn {fname}" + text[0][len("graph"):])
        lines.extend(text[1:])
    return "\n".join(lines) + "\n"
