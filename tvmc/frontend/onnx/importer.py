"""ONNX import driver: load and check a model, convert its nodes through the converter table."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
from onnx import numpy_helper

from tvmc.errors import ModelError, TVMCError, UnsupportedOpError
from tvmc.frontend.onnx.common import SUPPORTED_DTYPES, fmt_dims, is_const, np_dtype_name
from tvmc.frontend.onnx.functions import function_body, inline, tensor_type
from tvmc.frontend.onnx.registry import CONVERTERS, find_domain_converter, has_converter, supports
from tvmc.frontend.onnx.value_range import Unbounded, value_range
from tvmc.graph import ir
from tvmc.graph.ir import Call, Expr, Graph, TensorType, Var
from tvmc.ops.registry import make_call

_DEFAULT_DOMAINS = ("", "ai.onnx")
# ops whose result is computed from their input's run-time shape, not its data (tensor.py)
_READS_RUN_TIME_SHAPE = ("Shape", "Size")
_FOLD_AT_IMPORT_MAX = 4096  # elements: a float call on constants up to this size is folded at import


def from_onnx(model, input_shapes: dict | None = None, value_ranges: dict | None = None) -> Graph:
    """Import an ONNX model into the graph IR.

    model:        path (str / os.PathLike) of a .onnx file, or an `onnx.ModelProto`.
    input_shapes: {graph input name: shape tuple} overriding or fixing input shapes
                  (symbolic / unknown dimensions must be fixed this way).
    value_ranges: {graph input name: (lo, hi)}: every element of that input lies in [lo, hi] at
                  run time (`--value-range`); bounds the outputs of Range, Expand and
                  ConstantOfShape whose shape inputs are computed from it (docs/dynamic_shapes.md).

    Returns a Graph whose inputs are the ONNX graph inputs that are not initializers
    (Var with static shape, dtype float32/int64/int32/bool), whose constants are the
    initializers (Constant named after the initializer), and whose outputs carry the ONNX
    graph output names. Every tensor is statically shaped (ONNX shape inference, checked
    against the op registry's type rules).

    Raises:
      ModelError           unreadable file, onnx.checker failure, bad `input_shapes` or `value_ranges`,
                           unresolved symbolic dimension, unsupported dtype on a non-constant
                           path, unsupported attribute values, shape inconsistencies.
      UnsupportedOpError   before anything is converted, listing every op type (with opset
                           and node names) that has no converter for the model's opset.

    Source: ONNX IR spec (onnx/docs/IR.md) and operator spec (onnx/docs/Operators.md, each
    converter names the op versions it implements).
    """
    proto, label = _load(model)
    _check(proto, label)
    return _Importer(proto, label, value_ranges or {}).run(input_shapes or {})


def _load(model):
    if isinstance(model, onnx.ModelProto):
        return model, f"<model {model.graph.name or 'ModelProto'}>"
    if not isinstance(model, (str, os.PathLike)):
        raise ModelError(f"expected a path or onnx.ModelProto, got {type(model).__name__}")
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise ModelError(f"{path}: no such file")
    try:
        proto = onnx.load(path)
    except Exception as e:  # DecodeError, external data missing, ...
        raise ModelError(f"{path}: not a readable ONNX model ({one_line(e)})") from None
    if not proto.HasField("graph"):
        raise ModelError(f"{path}: not an ONNX model (no graph)")
    return proto, path


def _check(proto, label):
    try:
        try:
            onnx.checker.check_model(proto)
        except ValueError:  # a protobuf over 2 GiB can only be checked from its file
            if not os.path.isfile(label):
                raise
            onnx.checker.check_model(label)
    except Exception as e:
        raise ModelError(f"{label}: onnx.checker failed: {one_line(e)}") from None


def one_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class _Unusable:
    """Placeholder for a secondary node output (BatchNorm training statistics): tvmc only
    supports output 0 of such nodes."""

    def __init__(self, node: str, op_type: str, index: int, what: str):
        self.node, self.op_type, self.index, self.what = node, op_type, index, what


_SECONDARY_OUTPUTS = {
    "BatchNormalization": "training-mode statistics",
}


class _Importer:
    """Converts one checked ModelProto; `label` (the file path) prefixes every error."""

    def __init__(self, proto: onnx.ModelProto, label: str, value_ranges: dict | None = None):
        self.proto = proto
        self.value_ranges = dict(value_ranges or {})  # graph input name -> (lo, hi), see value_range.py
        self.label = label
        self.graph = proto.graph
        self.opset = _default_opset(proto, label)
        self.domain_opsets = {o.domain: int(o.version) for o in proto.opset_import}
        self.env: dict = {}
        self.used_names: set = set()
        self.derived: dict = {}
        self.inferred: dict = {}
        self.run_time_shapes: dict = {}  # Expr with a dynamic type -> the int64[rank] Expr of its shape

    def error(self, msg: str) -> ModelError:
        return ModelError(f"{self.label}: {msg}")

    # -- driver ---------------------------------------------------------------------------
    def run(self, input_shapes: dict) -> Graph:
        g = self.graph
        self._scan_ops()
        init_names = {t.name for t in g.initializer}
        real_inputs = [vi for vi in g.input if vi.name not in init_names]
        self._check_input_shapes(real_inputs, input_shapes)
        for name, (lo, hi) in self.value_ranges.items():
            if name not in {vi.name for vi in real_inputs}:
                raise self.error(f"--value-range names '{name}', which is not a graph input; graph inputs: "
                                 f"{', '.join(vi.name for vi in real_inputs)}")
            if not lo <= hi:
                raise self.error(f"--value-range for '{name}': {lo}:{hi} is empty (LO must not exceed HI)")
        self._check_resolved(real_inputs, input_shapes)
        self._infer(real_inputs, input_shapes)

        self.used_names = set(init_names) | {vi.name for vi in g.input}
        for node in g.node:
            self.used_names.update(o for o in node.output if o)

        self._bind_initializers(g)

        inputs = [self._make_input(vi, input_shapes.get(vi.name)) for vi in real_inputs]
        for v in inputs:
            self.env[v.name] = v

        for node in g.node:
            self._convert(node, self.opset)

        outputs = [self._lookup(vi.name, f"graph output '{vi.name}'") for vi in g.output]
        names, links = [vi.name for vi in g.output], [None] * len(outputs)
        for k, out in enumerate(list(outputs)):
            if out.type.is_dynamic:  # its run-time shape becomes a hidden output after the model's
                links[k] = len(outputs)
                outputs.append(self.run_time_shapes[out])
                names.append(f"{names[k]}:shape")
                links.append(None)
        return Graph(inputs, outputs, names, output_shapes=links)

    def _scan_ops(self):
        """Every op type without a converter, listed at once (before any conversion)."""
        missing: dict = {}
        for node in self.graph.node:
            if not self._imports(node, self.opset):
                key = node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
                missing.setdefault((key, self._node_opset(node, self.opset)), []).append(node_label(node))
        if missing:
            raise UnsupportedOpError(self.label, [(k, v, names) for (k, v), names in missing.items()])

    def _check_input_shapes(self, real_inputs, input_shapes):
        names = [vi.name for vi in real_inputs]
        for name, shape in input_shapes.items():
            if name not in names:
                raise self.error(f"--input-shapes names '{name}', which is not a graph input; "
                                 f"inputs: {', '.join(names) or '(none)'}")
            try:
                ok = all(int(d) == d and int(d) >= 0 for d in shape)
            except TypeError:
                ok = False
            if not ok:
                raise self.error(f"--input-shapes for '{name}' must be a list of non-negative ints, got {shape!r}")

    def _check_resolved(self, real_inputs, input_shapes):
        """Every symbolic or unknown input dimension not fixed by `input_shapes`, in one error
        line that names them all and shows the --input-shapes value to use (1 where unknown)."""
        problems, hints = [], []
        for vi in real_inputs:
            if vi.name in input_shapes:
                hints.append(f"{vi.name}:[{','.join(str(int(d)) for d in input_shapes[vi.name])}]")
                continue
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            if not tt.HasField("shape"):
                problems.append(f"input '{vi.name}' has no shape")
                hints.append(f"{vi.name}:[1,3,224,224]")
                continue
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
            bad = [(i, d) for i, d in enumerate(dims) if not isinstance(d, int)]
            for i, d in bad:
                problems.append(f"input '{vi.name}' dimension {i} is " + (f"symbolic ('{d}')" if d else "unknown"))
            hints.append(f"{vi.name}:[{','.join(str(d) if isinstance(d, int) else '1' for d in dims)}]")
        if problems:
            raise self.error(f"unresolved input dimensions: {', '.join(problems)}; fix them with "
                             f"--input-shapes \"{' '.join(hints)}\"")

    def _make_input(self, vi, override) -> Var:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise self.error(f"graph input '{vi.name}' is not a tensor")
        dtype = np_dtype_name(tt.elem_type)
        if dtype not in SUPPORTED_DTYPES:
            raise self.error(f"graph input '{vi.name}' has dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        if override is not None:
            shape = tuple(int(d) for d in override)
            if declared is not None and len(declared) != len(shape):
                raise self.error(f"--input-shapes gives '{vi.name}' rank {len(shape)} but the model declares "
                                 f"rank {len(declared)} {fmt_dims(declared)}")
            return Var(vi.name, self._input_type(vi.name, shape, dtype))
        if declared is None:
            raise self.error(f"graph input '{vi.name}' has no shape; fix it with "
                             f"--input-shapes \"{vi.name}:[1,3,224,224]\"")
        for i, d in enumerate(declared):
            if not isinstance(d, int):
                what = f"symbolic ('{d}')" if d else "unknown"
                hint = ",".join(str(x) if isinstance(x, int) else "1" for x in declared)
                raise self.error(f"graph input '{vi.name}' dimension {i} is {what}; fix it with "
                                 f"--input-shapes \"{vi.name}:[{hint}]\"")
        return Var(vi.name, self._input_type(vi.name, tuple(declared), dtype))

    def _input_type(self, name, shape, dtype) -> TensorType:
        try:
            return TensorType(shape, dtype)
        except ValueError as e:  # a negative dimension, a tensor beyond MAX_TENSOR_BYTES
            raise self.error(f"graph input '{name}': {e}") from None

    def _infer(self, real_inputs, input_shapes):
        """ONNX shape inference (with input overrides applied) -> self.inferred[name] = TensorType
        for every tensor whose shape ONNX knows statically; used to cross-check our types."""
        proto = self.proto
        if input_shapes:
            proto = onnx.ModelProto()
            proto.CopyFrom(self.proto)
            del proto.graph.value_info[:]
            for vi in proto.graph.input:
                if vi.name in input_shapes:
                    shape = vi.type.tensor_type.shape
                    del shape.dim[:]
                    for d in input_shapes[vi.name]:
                        shape.dim.add().dim_value = int(d)
            for vi in proto.graph.output:
                vi.type.tensor_type.ClearField("shape")
        defaults = [n for n in proto.graph.node if n.op_type in _INFERENCE_DEFAULTS and
                    not any(a.name == _INFERENCE_DEFAULTS[n.op_type][0] for a in n.attribute)]
        if defaults:  # state the attribute's default, which ONNX's inference reads wrongly when absent
            proto = _with_defaults(proto, {n.name or n.output[0] for n in defaults})
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        except ValueError:  # a protobuf over 2 GiB cannot be serialized for inference: no cross-check
            return
        except Exception as e:
            raise self.error(f"ONNX shape inference failed: {one_line(e)}") from None
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.elem_type:
                continue
            if not all(d.HasField("dim_value") for d in tt.shape.dim):
                continue
            try:
                self.inferred[vi.name] = TensorType(tuple(d.dim_value for d in tt.shape.dim),
                                                    np_dtype_name(tt.elem_type))
            except (ValueError, TypeError):  # an invalid inferred shape: our own type rules report it
                continue

    # -- nodes ----------------------------------------------------------------------------
    def _lookup(self, name: str, user: str):
        try:
            e = self.env[name]
        except KeyError:
            raise self.error(f"{user} reads tensor '{name}', which no node produces") from None
        if isinstance(e, _Unusable):
            raise self.error(f"{user} reads tensor '{name}', output {e.index} ({e.what}) of {e.op_type} "
                             f"node '{e.node}'; tvmc supports only output 0 of {e.op_type} (inference mode)")
        return e

    def _node_opset(self, node, opset: int) -> int:
        """The operator set `node` is read at: `opset` (the default domain's in effect) for a
        default-domain node, the model's import of the node's domain otherwise (0 if none)."""
        return opset if node.domain in _DEFAULT_DOMAINS else self.domain_opsets.get(node.domain, 0)

    def _imports(self, node, opset: int) -> bool:
        """True when `node` imports with the default-domain opset `opset` in effect (registry.supports)."""
        return supports(node.op_type, self._node_opset(node, opset), node.domain)

    def _convert(self, node, opset: int):
        """Convert `node` with the default-domain operator set `opset` in effect: through its
        converter, or through its ONNX function body (functions.py) when it has none for that
        version or belongs to another domain (functions.FUNCTION_DOMAINS)."""
        label = node_label(node)
        user = f"node '{label}' ({node.op_type})"
        inputs = [self._lookup(n, user) if n else None for n in node.input]
        fn = find_domain_converter(node.op_type, self._node_opset(node, opset), node.domain) \
            if node.domain not in _DEFAULT_DOMAINS else CONVERTERS[node.op_type] \
            if has_converter(node.op_type, opset) else None
        if fn is None:
            return self._expand(node, opset, inputs, label)
        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        ctx = _NodeContext(self, node, label)
        try:
            result = fn(ctx, node, inputs, attrs, opset)
        except (TVMCError, RecursionError, KeyboardInterrupt):
            raise
        except MemoryError:
            raise ctx.error("importing it needs more memory than this machine has") from None
        except Exception as e:  # a converter's own bug or an input it did not foresee: name the node
            raise ctx.error(f"cannot import it ({type(e).__name__}: {one_line(e)})") from e
        # a tuple holds one result per node output (Split, TopK, LayerNormalization, ...)
        results = list(result) if isinstance(result, tuple) else [result]
        dynamic = [n for n, e in zip(node.input, inputs) if e is not None and e.type.is_dynamic]
        if dynamic and node.op_type not in _READS_RUN_TIME_SHAPE and \
                not all(isinstance(r, Expr) and r in self.run_time_shapes for r in results):
            raise ctx.error(f"input '{dynamic[0]}' has a shape known only at run time, and {node.op_type} "
                            f"needs it at compile time (docs/dynamic_shapes.md)")
        for out, res in zip(node.output, results):
            if out:
                self.env[out] = self._checked(ctx, node, out, res)
        for i, out in enumerate(node.output[len(results):], len(results)):
            if out:
                if node.op_type not in _SECONDARY_OUTPUTS:
                    raise ctx.error(f"output {i} ('{out}') is not supported")
                self.env[out] = _Unusable(label, node.op_type, i, _SECONDARY_OUTPUTS[node.op_type])

    def _expand(self, node, opset: int, inputs: list, label: str):
        """Import `node` as its ONNX function body, each body node converted in turn (an unsupported
        op inside names the function and the op)."""
        types = [tensor_type(e.dtype, e.shape) if e is not None else None for e in inputs]
        node_opset = self._node_opset(node, opset)
        try:
            fn, body_opset, attrs = function_body(node, node_opset, types, opset)
            nodes = inline(node, fn, attrs, f"{label}/")
        except ValueError as e:
            raise UnsupportedOpError(self.label, [(f"{node.op_type} ({e})", node_opset, [label])]) from None
        missing = {}
        for inner in nodes:
            if not self._imports(inner, body_opset):
                missing.setdefault(inner.op_type, []).append(node_label(inner))
        if missing:
            raise UnsupportedOpError(self.label, [(f"{op} (in the function body of {node.op_type})", body_opset, names)
                                                  for op, names in missing.items()])
        self.used_names.update(o for inner in nodes for o in inner.output if o)
        for inner in nodes:
            self._convert(inner, body_opset)

    def _bind_initializers(self, g) -> None:
        for t in g.initializer:
            try:
                value = numpy_helper.to_array(t)
            except Exception as e:
                raise self.error(f"initializer '{t.name}' cannot be read: {one_line(e)}") from None
            self.env[t.name] = ir.Constant(value, name=t.name)

    def convert_graph(self, graph, opset: int, bindings: dict, user: str) -> list:
        """Convert the nodes of subgraph `graph` (an If branch, a Loop or Scan body) into this graph,
        its initializers and its inputs bound to `bindings` ({name: Expr}), outer-scope names
        visible; returns its outputs in order. The subgraph's names are its own scope: the outer
        values of names it binds or produces are visible again afterwards."""
        scoped = {*bindings, *(t.name for t in graph.initializer), *(o for n in graph.node for o in n.output if o)}
        outer = {name: self.env[name] for name in scoped if name in self.env}
        self._bind_initializers(graph)
        for name, value in bindings.items():
            self.env[name] = value
        self.used_names.update(o for n in graph.node for o in n.output if o)
        for node in graph.node:
            if not self._imports(node, opset):
                raise UnsupportedOpError(self.label, [(node.op_type, opset, [f"{node_label(node)} (in {user})"])])
            self._convert(node, opset)
        outputs = [self._lookup(o.name, user) for o in graph.output]
        for name in scoped:
            self.env.pop(name, None)
        self.env.update(outer)
        return outputs

    def _checked(self, ctx, node, out: str, result):
        if isinstance(result, np.ndarray) or np.isscalar(result):
            result = ir.Constant(np.asarray(result), name=out)
        if not isinstance(result, Expr):
            raise AssertionError(f"converter {node.op_type} returned {type(result).__name__}")
        if not isinstance(result, ir.Constant) and result.dtype not in SUPPORTED_DTYPES:
            raise ctx.error(f"tensor '{out}' has dtype {result.dtype}; "
                            f"supported: {', '.join(SUPPORTED_DTYPES)}")
        expected = self.inferred.get(out)
        if expected is not None and result.type.is_dynamic:  # the model may state one run's extents
            expected = TensorType(tuple(b if a in result.type.dynamic_axes else d for a, (b, d) in
                                        enumerate(zip(result.shape, expected.shape))), expected.dtype,
                                  result.type.dynamic_axes) if len(expected.shape) == len(result.shape) else expected
        if expected is not None and (tuple(result.shape) != expected.shape or result.dtype != expected.dtype):
            raise ctx.error(f"tensor '{out}': tvmc infers {result.type} but the model "
                            f"(value_info / ONNX shape inference) says {expected}")
        return result

    def unique_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.used_names:
            name = f"{base}_{k}"
            k += 1
        self.used_names.add(name)
        return name


# Attributes whose absence ONNX's shape inference (onnx <= 1.23) reads as another value than the
# operator's documented default: STFT without `onesided` is inferred two-sided, while STFT-17's
# default is one-sided (onesided=1). Inference runs on a copy that states the default.
_INFERENCE_DEFAULTS = {"STFT": ("onesided", 1)}


def _with_defaults(proto, nodes: set):
    """A copy of `proto` whose main-graph nodes named in `nodes` (by name, else first output) state
    the default of their _INFERENCE_DEFAULTS attribute."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for n in copy.graph.node:
        if (n.name or n.output[0]) in nodes:
            n.attribute.append(onnx.helper.make_attribute(*_INFERENCE_DEFAULTS[n.op_type]))
    return copy


class _NodeContext:
    """What a converter may use: errors naming the file and node, calls, new constants."""

    def __init__(self, importer: _Importer, node, label: str):
        self.importer = importer
        self.node = node
        self.name = label
        self.op_type = node.op_type

    def error(self, msg: str) -> ModelError:
        return self.importer.error(f"node '{self.name}' ({self.op_type}): {msg}")

    def call(self, op: str, inputs, attrs=None, fold: bool = True) -> Call:
        """make_call with the node's name; dtype and type-rule failures name file and node. With
        `fold` (the default) a call on constants is folded at import as described below; without,
        it stays a call for the passes to see (a DequantizeLinear of a constant int8 weight, which
        FakeQuantizationToInteger turns into an integer op)."""
        for e in inputs:
            if isinstance(e, ir.Constant) and e.dtype not in SUPPORTED_DTYPES:
                raise self.error(f"constant '{e.name}' has dtype {e.dtype}; "
                                 f"supported: {', '.join(SUPPORTED_DTYPES)}")
        try:
            call = make_call(op, list(inputs), attrs or {}, name=self.name)
        except ModelError as e:
            raise self.importer.error(str(e)) from None
        if call.type.is_dynamic:  # a shape-preserving op forwards its operand's run-time shape
            shapes = self.importer.run_time_shapes
            source = next((e for e in inputs if e in shapes), None)
            if source is not None:
                shapes[call] = shapes[source] if call.shape == source.shape else self._reduced_shape(call, source)
        if fold and inputs and all(is_const(e) for e in inputs) and (
                all(e.value.dtype.kind in "biu" for e in inputs) or call.type.size <= _FOLD_AT_IMPORT_MAX) \
                and ir.constant_bytes(call.shape, call.dtype) <= ir.MAX_CONSTANT_BYTES:
            # shape arithmetic on constants (Neg of an axis, Equal of shapes, a window length
            # through Cast and Sub, ...) is folded at import, so later shape-determining inputs
            # stay constant; larger float constants are left to the FoldConstant pass
            from tvmc.ops.registry import get_op

            with np.errstate(all="ignore"):
                value = np.asarray(get_op(op).reference(*[e.value for e in inputs], **(attrs or {})))
            return self.const(value.astype(call.dtype, copy=False), "folded")
        return call

    def _reduced_shape(self, call: Call, source: Expr) -> Call:
        """The run-time shape of `call`, a reduction of `source` along static axes: its own
        static extents, and source's run-time extents along the dynamic axes (in order)."""
        out_axes, src_axes = call.type.dynamic_axes, source.type.dynamic_axes
        picked = self.call("take", [self.importer.run_time_shapes[source],
                                    self.const(np.array([src_axes[out_axes.index(a)] if a in out_axes else 0
                                                         for a in range(len(call.shape))], np.int64), "axes")],
                           {"axis": 0})
        mask = self.const(np.array([a in out_axes for a in range(len(call.shape))]), "dynamic")
        return self.call("where", [mask, picked, self.const(np.array(call.shape, np.int64), "extents")])

    def dynamic_call(self, op: str, inputs, attrs=None) -> Call:
        """A call of a data-dependent operator (tvmc/ops/dynamic.py): `op` gives the output padded to
        its bound and `op`_shape its run-time shape, which the call's users forward."""
        call = self.call(op, inputs, attrs)
        self.importer.run_time_shapes[call] = self.call(f"{op}_shape", inputs, attrs)
        return call

    def bounded(self, inputs, i: int, what: str) -> tuple:
        """(lo, hi): the interval of every value input `i` takes at run time (value_range.py), for an
        input that sizes the output. Raises ModelError naming the input, why no interval is known
        and the --value-range option."""
        try:
            return value_range(inputs[i], self.importer.value_ranges,
                               {v: k for k, v in self.importer.run_time_shapes.items()})
        except Unbounded as why:
            raise self.error(f"input {what} ('{self.input_name(i)}') is computed at run time and sizes the output, "
                             f"and tvmc derives no bound for its values: {why}; state the range of the graph "
                             f"inputs it comes from with --value-range NAME=LO:HI") from None

    def check_constant(self, shape, dtype, what: str = "its output") -> None:
        """Raise ModelError (naming the node) when a `dtype` constant of `shape`, which the
        converter is about to compute at import, would take more than MAX_CONSTANT_BYTES
        (tvmc.graph.ir; a tensor of exactly that size is built). Call it before building it."""
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise self.error(f"{what} would have the negative shape {list(shape)}")
        nbytes = ir.constant_bytes(shape, dtype)
        if nbytes > ir.MAX_CONSTANT_BYTES:
            raise self.error(f"{what}, computed at compile time, would be {list(shape)} {np.dtype(dtype).name} "
                             f"({nbytes} bytes), more than the limit of {ir.MAX_CONSTANT_BYTES} bytes for a constant "
                             f"(docs/limits.md)")

    def const(self, value, suffix: str) -> ir.Constant:
        """A new constant named f"{node}.{suffix}" (made unique in the graph)."""
        return ir.Constant(np.asarray(value), name=self.importer.unique_name(f"{self.name}.{suffix}"))

    def derived(self, src: ir.Constant, suffix: str, fn: Callable) -> ir.Constant:
        """`fn(src.value)` as a new Constant; memoized per (source constant, suffix) so a
        weight shared by several nodes is transformed once."""
        key = (src, suffix)
        hit = self.importer.derived.get(key)
        if hit is None:
            hit = self.const(fn(src.value), suffix)
            self.importer.derived[key] = hit
        return hit

    def input_name(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else f"#{i}"

    def constant(self, inputs, i: int, what: str) -> np.ndarray:
        """The value of input `i`, which must be a Constant (initializer or foldable)."""
        e = inputs[i] if i < len(inputs) else None
        if e is None:
            raise self.error(f"missing input {what}")
        if not isinstance(e, ir.Constant):
            raise self.error(f"input {what} ('{self.input_name(i)}') must be a constant (initializer or "
                             f"computable at import); tvmc needs static shapes")
        return e.value


def node_label(node) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _default_opset(proto, label) -> int:
    for o in proto.opset_import:
        if o.domain in _DEFAULT_DOMAINS:
            return int(o.version)
    if proto.ir_version < 3:
        return 1
    raise ModelError(f"{label}: the model imports no default-domain (ai.onnx) opset")


def _attr_value(a):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode("utf-8") for s in v]
    return v
