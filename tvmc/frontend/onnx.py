"""ONNX frontend: an ONNX model (file or ModelProto) -> graph IR, checked and statically shaped."""

from __future__ import annotations

import collections
import os
from typing import Callable

import numpy as np
import onnx
import onnx.checker
import onnx.defs
import onnx.shape_inference
from onnx import numpy_helper

from tvmc.errors import ModelError, UnsupportedOpError
from tvmc.graph import ir
from tvmc.graph.ir import Call, Expr, Graph, TensorType, Var, make_call

# dtypes a non-constant tensor may have (float32 activations; integer/bool shape tensors)
SUPPORTED_DTYPES = ("float32", "int64", "int32", "bool")
_FLOAT32_MIN = float(np.finfo(np.float32).min)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_DEFAULT_DOMAINS = ("", "ai.onnx")


# ---------------------------------------------------------------------------------------------
# Converter table: CONVERTERS[op_type] is a function named after the ONNX op type,
# `fn(ctx, node, inputs, attrs, opset) -> Expr | np.ndarray`; `fn.versions` lists the operator
# versions (ONNX schema `since_version`s) it implements. An np.ndarray result is a value folded
# at import (shape arithmetic) and becomes a Constant named after the node's output tensor.
# ---------------------------------------------------------------------------------------------

CONVERTERS: dict[str, Callable] = {}


def _converter(*versions: int):
    def register(fn):
        fn.versions = frozenset(versions)
        CONVERTERS[fn.__name__] = fn
        return fn
    return register


def supports(op_type: str, opset: int) -> bool:
    """True when `op_type` (default domain) at model opset `opset` has a converter here."""
    fn = CONVERTERS.get(op_type)
    if fn is None:
        return False
    try:
        since = onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:  # onnx.defs.SchemaError: no version of the op at this opset
        return False
    return since in fn.versions


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

def from_onnx(model, input_shapes: dict | None = None) -> Graph:
    """Import an ONNX model into the graph IR.

    model:        path (str / os.PathLike) of a .onnx file, or an `onnx.ModelProto`.
    input_shapes: {graph input name: shape tuple} overriding or fixing input shapes
                  (symbolic / unknown dimensions must be fixed this way).

    Returns a Graph whose inputs are the ONNX graph inputs that are not initializers
    (Var with static shape, dtype float32/int64/int32/bool), whose constants are the
    initializers (Constant named after the initializer), and whose outputs carry the ONNX
    graph output names. Every tensor is statically shaped (ONNX shape inference, checked
    against the op registry's type rules).

    Raises:
      ModelError           unreadable file, onnx.checker failure, bad `input_shapes`,
                           unresolved symbolic dimension, unsupported dtype on a non-constant
                           path, unsupported attribute values, shape inconsistencies.
      UnsupportedOpError   before anything is converted, listing every op type (with opset
                           and node names) that has no converter for the model's opset.

    Source: ONNX IR spec (onnx/docs/IR.md) and operator spec (onnx/docs/Operators.md, each
    converter names the op versions it implements).
    """
    proto, label = _load(model)
    _check(proto, label)
    return _Importer(proto, label).run(input_shapes or {})


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
        raise ModelError(f"{path}: not a readable ONNX model ({_one_line(e)})") from None
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
        raise ModelError(f"{label}: onnx.checker failed: {_one_line(e)}") from None


def _one_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class _Unusable:
    """Placeholder for a secondary node output (Dropout mask, BatchNorm training statistics,
    MaxPool indices): tvmc only supports output 0 of such nodes."""

    def __init__(self, node: str, op_type: str, index: int, what: str):
        self.node, self.op_type, self.index, self.what = node, op_type, index, what


_SECONDARY_OUTPUTS = {
    "Dropout": "mask",
    "BatchNormalization": "training-mode statistics",
    "MaxPool": "Indices",
}


class _Importer:
    """Converts one checked ModelProto; `label` (the file path) prefixes every error."""

    def __init__(self, proto: onnx.ModelProto, label: str):
        self.proto = proto
        self.label = label
        self.graph = proto.graph
        self.opset = _default_opset(proto, label)
        self.env: dict = {}
        self.used_names: set = set()
        self.derived: dict = {}
        self.inferred: dict = {}

    def error(self, msg: str) -> ModelError:
        return ModelError(f"{self.label}: {msg}")

    # -- driver ---------------------------------------------------------------------------
    def run(self, input_shapes: dict) -> Graph:
        g = self.graph
        self._scan_ops()
        init_names = {t.name for t in g.initializer}
        real_inputs = [vi for vi in g.input if vi.name not in init_names]
        self._check_input_shapes(real_inputs, input_shapes)
        self._check_resolved(real_inputs, input_shapes)
        self._infer(real_inputs, input_shapes)

        self.used_names = set(init_names) | {vi.name for vi in g.input}
        for node in g.node:
            self.used_names.update(o for o in node.output if o)

        for t in g.initializer:
            try:
                value = numpy_helper.to_array(t)
            except Exception as e:
                raise self.error(f"initializer '{t.name}' cannot be read: {_one_line(e)}") from None
            self.env[t.name] = ir.Constant(value, name=t.name)

        inputs = [self._make_input(vi, input_shapes.get(vi.name)) for vi in real_inputs]
        for v in inputs:
            self.env[v.name] = v

        for node in g.node:
            self._convert(node)

        outputs = []
        for vi in g.output:
            outputs.append(self._lookup(vi.name, f"graph output '{vi.name}'"))
        return Graph(inputs, outputs, [vi.name for vi in g.output])

    def _scan_ops(self):
        """Every op type without a converter, listed at once (before any conversion)."""
        opsets = {o.domain: o.version for o in self.proto.opset_import}
        missing: dict = {}
        for node in self.graph.node:
            if node.domain in _DEFAULT_DOMAINS:
                ok, key, version = supports(node.op_type, self.opset), node.op_type, self.opset
            else:
                ok, key, version = False, f"{node.domain}.{node.op_type}", opsets.get(node.domain, 0)
            if not ok:
                missing.setdefault((key, version), []).append(_node_label(node))
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
        dtype = _np_dtype_name(tt.elem_type)
        if dtype not in SUPPORTED_DTYPES:
            raise self.error(f"graph input '{vi.name}' has dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        if override is not None:
            shape = tuple(int(d) for d in override)
            if declared is not None and len(declared) != len(shape):
                raise self.error(f"--input-shapes gives '{vi.name}' rank {len(shape)} but the model declares "
                                 f"rank {len(declared)} {_fmt_dims(declared)}")
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
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        except ValueError:  # a protobuf over 2 GiB cannot be serialized for inference: no cross-check
            return
        except Exception as e:
            raise self.error(f"ONNX shape inference failed: {_one_line(e)}") from None
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.elem_type:
                continue
            if not all(d.HasField("dim_value") for d in tt.shape.dim):
                continue
            try:
                self.inferred[vi.name] = TensorType(tuple(d.dim_value for d in tt.shape.dim),
                                                    _np_dtype_name(tt.elem_type))
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

    def _convert(self, node):
        label = _node_label(node)
        user = f"node '{label}' ({node.op_type})"
        inputs = [self._lookup(n, user) if n else None for n in node.input]
        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        ctx = _NodeContext(self, node, label)
        result = CONVERTERS[node.op_type](ctx, node, inputs, attrs, self.opset)
        # a tuple holds one result per node output (Split, TopK, LayerNormalization, ...)
        results = list(result) if isinstance(result, tuple) else [result]
        for i, (out, res) in enumerate(zip(node.output, results)):
            if out:
                self.env[out] = self._checked(ctx, node, out, res)
        for i, out in enumerate(node.output[len(results):], len(results)):
            if out:
                if node.op_type not in _SECONDARY_OUTPUTS:
                    raise ctx.error(f"output {i} ('{out}') is not supported")
                self.env[out] = _Unusable(label, node.op_type, i, _SECONDARY_OUTPUTS[node.op_type])

    def _checked(self, ctx, node, out: str, result):
        if isinstance(result, np.ndarray) or np.isscalar(result):
            result = ir.Constant(np.asarray(result), name=out)
        if not isinstance(result, Expr):
            raise AssertionError(f"converter {node.op_type} returned {type(result).__name__}")
        if not isinstance(result, ir.Constant) and result.dtype not in SUPPORTED_DTYPES:
            raise ctx.error(f"tensor '{out}' has dtype {result.dtype}; "
                            f"supported: {', '.join(SUPPORTED_DTYPES)}")
        expected = self.inferred.get(out)
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


class _NodeContext:
    """What a converter may use: errors naming the file and node, calls, new constants."""

    def __init__(self, importer: _Importer, node, label: str):
        self.importer = importer
        self.node = node
        self.name = label
        self.op_type = node.op_type

    def error(self, msg: str) -> ModelError:
        return self.importer.error(f"node '{self.name}' ({self.op_type}): {msg}")

    def call(self, op: str, inputs, attrs=None) -> Call:
        """make_call with the node's name; dtype and type-rule failures name file and node."""
        for e in inputs:
            if isinstance(e, ir.Constant) and e.dtype not in SUPPORTED_DTYPES:
                raise self.error(f"constant '{e.name}' has dtype {e.dtype}; "
                                 f"supported: {', '.join(SUPPORTED_DTYPES)}")
        try:
            call = make_call(op, list(inputs), attrs or {}, name=self.name)
        except ModelError as e:
            raise self.importer.error(str(e)) from None
        if inputs and all(_is_const(e) and e.value.dtype.kind in "biu" for e in inputs):
            # shape arithmetic on integer constants (Neg of an axis, Equal of shapes, ...) is
            # folded at import, so later shape-determining inputs stay constant
            from tvmc.ops.registry import get_op

            value = np.asarray(get_op(op).reference(*[e.value for e in inputs], **(attrs or {})))
            return self.const(value.astype(call.dtype, copy=False), "folded")
        return call

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


def _node_label(node) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _default_opset(proto, label) -> int:
    for o in proto.opset_import:
        if o.domain in _DEFAULT_DOMAINS:
            return int(o.version)
    if proto.ir_version < 3:
        return 1
    raise ModelError(f"{label}: the model imports no default-domain (ai.onnx) opset")


def _np_dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


def _attr_value(a):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode("utf-8") for s in v]
    return v


def _fmt_dims(dims) -> str:
    return "[" + ",".join(str(d) if d is not None else "?" for d in dims) + "]"


# ---------------------------------------------------------------------------------------------
# Helpers shared by converters
# ---------------------------------------------------------------------------------------------

def _is_const(e) -> bool:
    return isinstance(e, ir.Constant)


def _reshape(ctx, x: Expr, newshape) -> Expr:
    newshape = tuple(int(d) for d in newshape)
    if tuple(x.shape) == newshape:
        return x
    if _is_const(x):
        return ctx.derived(x, "reshape" + "x".join(map(str, newshape)), lambda v: v.reshape(newshape))
    return ctx.call("reshape", [x], {"newshape": newshape})


def _norm_axis(ctx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"{what} {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _prod(dims) -> int:
    return int(np.prod(dims, dtype=np.int64))


def _is_int_const(e) -> bool:
    return _is_const(e) and np.issubdtype(e.value.dtype, np.integer)


def _auto_pads(ctx, attrs, in_spatial, kernel, strides, dilations) -> tuple:
    """Pads (x1_begin, x2_begin, ..., x1_end, x2_end, ...) in ONNX order, resolving auto_pad.

    ONNX Conv/MaxPool/AveragePool: SAME_UPPER / SAME_LOWER give output = ceil(in / stride) with
    the odd padding at the end (UPPER) or the beginning (LOWER); VALID means no padding.
    """
    n = len(in_spatial)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = tuple(attrs.get("pads", [0] * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {list(pads)} must have {2 * n} values")
        return pads
    if auto_pad == "VALID":
        return (0,) * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"unknown auto_pad '{auto_pad}'")
    begin, end = [], []
    for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


# ---------------------------------------------------------------------------------------------
# Converters, named after the ONNX op type
# ---------------------------------------------------------------------------------------------

def _conv_operands(ctx, inputs, attrs, op_type: str, what: str):
    """Shared start of Conv and ConvTranspose: (x, w, bias or None, number of spatial axes,
    kernel, strides, dilations, groups), all ints; raises the node's error for a missing
    input, a rank other than 3 (1-D) or 4 (2-D), or a kernel_shape that is not the weight's."""
    if len(inputs) < 2:
        raise ctx.error(f"{op_type} needs inputs X and W")
    x, w = inputs[0], inputs[1]
    rank = len(x.shape)
    if rank not in (3, 4) or len(w.shape) != rank:
        raise ctx.error(f"only 1-D and 2-D {what}s are supported; input '{ctx.input_name(0)}' "
                        f"is {x.type}, weight {w.type}")
    n_sp = rank - 2
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ctx.error(f"kernel_shape {list(kernel)} does not match weight '{ctx.input_name(1)}' {w.type}")
    strides = tuple(int(v) for v in attrs.get("strides", [1] * n_sp))
    dilations = tuple(int(v) for v in attrs.get("dilations", [1] * n_sp))
    b = inputs[2] if len(inputs) > 2 else None
    return x, w, b, n_sp, kernel, strides, dilations, int(attrs.get("group", 1))


def _lift_1d(ctx, x, w):
    """1-D convolution operands as 2-D ones with H = 1: [N, C, W] -> [N, C, 1, W] (weight alike)."""
    return (_reshape(ctx, x, (x.shape[0], x.shape[1], 1, x.shape[2])),
            _reshape(ctx, w, (w.shape[0], w.shape[1], 1, w.shape[2])))


def _conv_epilogue(ctx, out, b, n_sp):
    """Add the bias [C] as [C, 1, 1] (folded when constant) and drop the H = 1 axis of a 1-D conv."""
    if b is not None:
        bias = ctx.derived(b, "bias", lambda v: v.reshape(-1, 1, 1)) if _is_const(b) \
            else _reshape(ctx, b, (b.shape[0], 1, 1))
        out = ctx.call("add", [out, bias])
    if n_sp == 1:
        out = _reshape(ctx, out, (out.shape[0], out.shape[1], out.shape[3]))
    return out


@_converter(1, 11, 22)
def Conv(ctx, node, inputs, attrs, opset):
    """ONNX Conv-1/11/22 -> nn.conv2d (+ add of the bias as [C,1,1]); 1-D convs run as 2-D with H=1."""
    x, w, b, n_sp, kernel, strides, dilations, groups = _conv_operands(ctx, inputs, attrs, "Conv", "convolution")
    pads = _auto_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations)
    if n_sp == 1:
        x, w = _lift_1d(ctx, x, w)
        strides, dilations, padding = (1, strides[0]), (1, dilations[0]), (0, pads[0], 0, pads[1])
    else:
        padding = (pads[0], pads[1], pads[2], pads[3])
    out = ctx.call("nn.conv2d", [x, w], {"strides": strides, "padding": tuple(map(int, padding)),
                                         "dilation": dilations, "groups": groups})
    return _conv_epilogue(ctx, out, b, n_sp)


@_converter(1, 11, 22)
def ConvTranspose(ctx, node, inputs, attrs, opset):
    """ONNX ConvTranspose-1/11/22 -> nn.conv2d_transpose (+ add of the bias as [C,1,1]); 1-D runs
    as 2-D with H=1. output_shape (when given) and auto_pad SAME_* become explicit pads, as the
    ONNX reference does: total = s*(in-1) + output_padding + (k-1)*d + 1 - out, the larger half
    at the end for SAME_UPPER, at the beginning otherwise."""
    x, w, b, n_sp, kernel, strides, dilations, groups = _conv_operands(ctx, inputs, attrs, "ConvTranspose",
                                                                         "transposed convolution")
    out_pad = tuple(int(p) for p in attrs.get("output_padding", [0] * n_sp))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    spatial = x.shape[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, spatial, out_pad, kernel, dilations)]
    if "output_shape" in attrs or (auto_pad in ("SAME_UPPER", "SAME_LOWER") and "pads" not in attrs):
        out_shape = [int(o) for o in attrs["output_shape"]] if "output_shape" in attrs \
            else [i * s for i, s in zip(spatial, strides)]
        out_shape = out_shape[-n_sp:]
        total = [f - o for f, o in zip(full, out_shape)]
        if auto_pad == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
    elif auto_pad in ("NOTSET", "VALID"):
        pads = [int(p) for p in attrs.get("pads", [0] * (2 * n_sp))] if auto_pad == "NOTSET" else [0] * (2 * n_sp)
    else:
        raise ctx.error(f"unknown auto_pad '{auto_pad}'")
    if len(pads) != 2 * n_sp:
        raise ctx.error(f"pads {pads} must have {2 * n_sp} values")
    if n_sp == 1:
        x, w = _lift_1d(ctx, x, w)
        strides, dilations, out_pad = (1,) + strides, (1,) + dilations, (0,) + out_pad
        padding = (0, pads[0], 0, pads[1])
    else:
        padding = (pads[0], pads[1], pads[2], pads[3])
    out = ctx.call("nn.conv2d_transpose", [x, w], {
        "strides": strides, "padding": tuple(padding), "dilation": dilations, "output_padding": out_pad,
        "groups": groups})
    return _conv_epilogue(ctx, out, b, n_sp)


@_converter(1, 6, 7, 9, 14, 15)
def BatchNormalization(ctx, node, inputs, attrs, opset):
    """ONNX BatchNormalization-1..15 (inference mode) -> nn.batch_norm(axis=1)."""
    if attrs.get("training_mode", 0):
        raise ctx.error("training_mode=1 is not supported (inference only)")
    if len(inputs) != 5:
        raise ctx.error("BatchNormalization needs 5 inputs (X, scale, B, mean, var)")
    x = inputs[0]
    if len(x.shape) < 2:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must have rank >= 2")
    c = x.shape[1]
    for i, p in enumerate(inputs[1:], 1):
        if tuple(p.shape) != (c,):
            # spatial=0 (opset < 9) allows per-activation [C,H,W] statistics
            raise ctx.error(f"input '{ctx.input_name(i)}' {p.type} must be [{c}] (per-channel statistics)")
    return ctx.call("nn.batch_norm", inputs, {"epsilon": float(attrs.get("epsilon", 1e-5)), "axis": 1})


def _unary(op_type: str, op: str, *versions: int):
    """Register the converter of a one-input ONNX op that maps 1:1 onto our op `op`."""

    def convert(ctx, node, inputs, attrs, opset):
        return ctx.call(op, [inputs[0]])

    convert.__name__ = op_type
    convert.__doc__ = f"ONNX {op_type} -> {op}."
    _converter(*versions)(convert)


_unary("Relu", "nn.relu", 1, 6, 13, 14)
_unary("Sigmoid", "sigmoid", 1, 6, 13)
_unary("Tanh", "tanh", 1, 6, 13)
_unary("Exp", "exp", 1, 6, 13)
_unary("Sqrt", "sqrt", 1, 6, 13)
_unary("Neg", "negative", 1, 6, 13)
_unary("Abs", "abs", 1, 6, 13)
_unary("Log", "log", 1, 6, 13)
_unary("Floor", "floor", 1, 6, 13)
_unary("Ceil", "ceil", 1, 6, 13)
_unary("Erf", "erf", 9, 13)
_unary("Not", "logical_not", 1)


@_converter(1, 6, 16)
def LeakyRelu(ctx, node, inputs, attrs, opset):
    """ONNX LeakyRelu (alpha default 0.01) -> nn.leaky_relu."""
    return ctx.call("nn.leaky_relu", [inputs[0]], {"alpha": float(attrs.get("alpha", 0.01))})


@_converter(1, 6, 11, 12, 13)
def Clip(ctx, node, inputs, attrs, opset):
    """ONNX Clip -> clip(a_min, a_max): bounds are attributes before opset 11 and optional
    inputs from 11 (non-constant bounds become maximum/minimum); missing bounds are the
    float32 limits."""
    x = inputs[0]
    if opset < 11:
        return ctx.call("clip", [x], {"a_min": float(attrs.get("min", _FLOAT32_MIN)),
                                      "a_max": float(attrs.get("max", _FLOAT32_MAX))})
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    if (lo is None or _is_const(lo)) and (hi is None or _is_const(hi)):
        bounds = []
        for e, default, i in ((lo, _FLOAT32_MIN, 1), (hi, _FLOAT32_MAX, 2)):
            if e is None:
                bounds.append(default)
            elif e.value.size != 1:
                raise ctx.error(f"bound '{ctx.input_name(i)}' must be a scalar, got {e.type}")
            else:
                bounds.append(float(e.value.reshape(())))
        return ctx.call("clip", [x], {"a_min": bounds[0], "a_max": bounds[1]})
    out = x
    if lo is not None:
        out = ctx.call("maximum", [out, lo])
    if hi is not None:
        out = ctx.call("minimum", [out, hi])
    return out


_BINARY = {"Add": ("add", np.add), "Sub": ("subtract", np.subtract),
           "Mul": ("multiply", np.multiply), "Div": ("divide", None)}


def _binary(ctx, node, inputs, attrs, opset):
    """Add/Sub/Mul/Div: numpy broadcasting; before opset 7, `broadcast`/`axis` attributes
    align B with A starting at `axis` (B is reshaped to that rank)."""
    op, fn = _BINARY[ctx.op_type]
    a, b = inputs[0], inputs[1]
    if opset < 7:
        if attrs.get("broadcast", 0) and "axis" in attrs:
            axis = _norm_axis(ctx, int(attrs["axis"]), len(a.shape))
            trailing = len(a.shape) - axis - len(b.shape)
            if trailing < 0:
                raise ctx.error(f"axis {axis} does not fit B {b.type} into A {a.type}")
            b = _reshape(ctx, b, tuple(b.shape) + (1,) * trailing)
        elif not attrs.get("broadcast", 0) and tuple(a.shape) != tuple(b.shape):
            raise ctx.error(f"shapes {a.type} and {b.type} differ and broadcast=0")
    if _is_int_const(a) and _is_int_const(b):  # shape arithmetic
        if ctx.op_type == "Div":  # ONNX integer Div truncates toward zero
            q = np.abs(a.value) // np.abs(b.value)
            return np.where((a.value < 0) != (b.value < 0), -q, q)
        return fn(a.value, b.value)
    return ctx.call(op, [a, b])


@_converter(1, 6, 7, 13, 14)
def Add(ctx, node, inputs, attrs, opset):
    """ONNX Add -> add."""
    return _binary(ctx, node, inputs, attrs, opset)


@_converter(1, 6, 7, 13, 14)
def Sub(ctx, node, inputs, attrs, opset):
    """ONNX Sub -> subtract."""
    return _binary(ctx, node, inputs, attrs, opset)


@_converter(1, 6, 7, 13, 14)
def Mul(ctx, node, inputs, attrs, opset):
    """ONNX Mul -> multiply."""
    return _binary(ctx, node, inputs, attrs, opset)


@_converter(1, 6, 7, 13, 14)
def Div(ctx, node, inputs, attrs, opset):
    """ONNX Div -> divide."""
    return _binary(ctx, node, inputs, attrs, opset)


def _variadic(ctx, inputs, op):
    out = inputs[0]
    if len(inputs) == 1:
        return out if _is_const(out) else ctx.call("identity", [out])
    for e in inputs[1:]:
        out = ctx.call(op, [out, e])
    return out


@_converter(1, 6, 8, 13)
def Sum(ctx, node, inputs, attrs, opset):
    """ONNX Sum -> chain of add (one input -> identity)."""
    return _variadic(ctx, inputs, "add")


@_converter(1, 6, 8, 12, 13)
def Max(ctx, node, inputs, attrs, opset):
    """ONNX Max -> chain of maximum."""
    return _variadic(ctx, inputs, "maximum")


@_converter(1, 6, 8, 12, 13)
def Min(ctx, node, inputs, attrs, opset):
    """ONNX Min -> chain of minimum."""
    return _variadic(ctx, inputs, "minimum")


@_converter(1, 9, 13)
def MatMul(ctx, node, inputs, attrs, opset):
    """ONNX MatMul (numpy matmul semantics).

    Constant 2-D B -> nn.dense(A[M,K], transpose(B)[N,K]) (A of rank > 2 is flattened to 2-D
    and reshaped back); otherwise nn.matmul. 1-D operands are promoted as numpy does.
    """
    a, b = inputs[0], inputs[1]
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise ctx.error(f"MatMul operands must have rank >= 1, got {a.type} and {b.type}")
    a1, b1 = len(a.shape) == 1, len(b.shape) == 1
    if a1 and b1:  # dot product: a scalar result
        return ctx.call("sum", [ctx.call("multiply", [a, b])], {"axis": (0,), "keepdims": 0})
    if a1:
        a = _reshape(ctx, a, (1, a.shape[0]))
    if b1:
        b = _reshape(ctx, b, (b.shape[0], 1))
    if _is_const(b) and len(b.shape) == 2 and a.dtype == "float32":
        k, n = b.shape
        w = ctx.derived(b, "weight_t", lambda v: np.ascontiguousarray(v.T))
        lead = tuple(a.shape[:-1])
        a2 = _reshape(ctx, a, (_prod(lead), k)) if len(lead) != 1 else a
        out = ctx.call("nn.dense", [a2, w])
        out_shape = lead + (n,)
    else:
        out = ctx.call("nn.matmul", [a, b])
        out_shape = tuple(out.shape)
    if a1:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if b1:
        out_shape = out_shape[:-1]
    return _reshape(ctx, out, out_shape)


@_converter(1, 6, 7, 9, 11, 13)
def Gemm(ctx, node, inputs, attrs, opset):
    """ONNX Gemm: Y = alpha * A' @ B' + beta * C -> nn.dense(A', W[N,K]) (+ multiply, add).

    Constant transposes and the alpha/beta scales are folded into new Constants at import;
    a non-constant B that needs transposing goes through the `transpose` op.
    """
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"Gemm operands must be 2-D, got {a.type} and {b.type}")
    if trans_a:
        a = ctx.derived(a, "a_t", lambda v: np.ascontiguousarray(v.T)) if _is_const(a) \
            else ctx.call("transpose", [a], {"axes": (1, 0)})
    scaled = False
    if _is_const(b):
        if not trans_b or alpha != 1.0:
            suffix = "weight_t" if not trans_b else "weight"
            suffix += "" if alpha == 1.0 else "_scaled"

            def weight(v, t=not trans_b, s=alpha):
                w = v.T if t else v
                return np.ascontiguousarray(w * np.asarray(s, dtype=v.dtype) if s != 1.0 else w)
            w = ctx.derived(b, suffix, weight)
            scaled = alpha != 1.0
        else:
            w = b
    else:
        w = b if trans_b else ctx.call("transpose", [b], {"axes": (1, 0)})
    out = ctx.call("nn.dense", [a, w])
    if alpha != 1.0 and not scaled:
        out = ctx.call("multiply", [out, ctx.const(np.float32(alpha), "alpha")])
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ctx.derived(c, "bias_scaled", lambda v: v * np.asarray(beta, dtype=v.dtype)) if _is_const(c) \
                else ctx.call("multiply", [c, ctx.const(np.float32(beta), "beta")])
        out = ctx.call("add", [out, c])
    return out


def _pool_common(ctx, inputs, attrs, opset, dilation_since):
    """Pooling attributes per spatial axis (1-D, 2-D or 3-D): (x, kernel, strides, dilations,
    pads in ONNX order, ceil_mode)."""
    x = inputs[0]
    n_sp = len(x.shape) - 2
    if n_sp not in (1, 2, 3):
        raise ctx.error(f"only 1-D, 2-D and 3-D pooling are supported; input '{ctx.input_name(0)}' is {x.type}")
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", ()))
    if len(kernel) != n_sp:
        raise ctx.error(f"kernel_shape {list(kernel)} must have {n_sp} values")
    strides = tuple(int(s) for s in attrs.get("strides", (1,) * n_sp))
    dilations = tuple(int(d) for d in attrs.get("dilations", (1,) * n_sp)) if opset >= dilation_since \
        else (1,) * n_sp
    pads = tuple(int(p) for p in _auto_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations))
    ceil_mode = int(attrs.get("ceil_mode", 0)) if opset >= 10 else 0
    return x, kernel, strides, dilations, pads, ceil_mode


def _pool(ctx, op, x, kernel, strides, dilations, pads, ceil_mode, extra):
    """1-D pooling runs as 2-D with H=1; 3-D pooling as two 2-D poolings, over (H, W) on
    [N, C*D, H, W] and then over D on [N, C, D, OH*OW]: max and average over a box window are
    separable (the count of valid cells of a box is the product of the per-axis counts)."""
    n_sp = len(kernel)

    def call(y, k, s, d, p):
        attrs = {"pool_size": k, "strides": s, "padding": p, "dilation": d, "ceil_mode": ceil_mode, **extra}
        return ctx.call(op, [y], attrs)

    if n_sp == 2:
        return call(x, kernel, strides, dilations, (pads[0], pads[1], pads[2], pads[3]))
    if n_sp == 1:
        n, c, w = x.shape
        y = call(_reshape(ctx, x, (n, c, 1, w)), (1, kernel[0]), (1, strides[0]), (1, dilations[0]),
                 (0, pads[0], 0, pads[1]))
        return _reshape(ctx, y, (n, c, y.shape[3]))
    n, c, d, h, w = x.shape
    y = call(_reshape(ctx, x, (n, c * d, h, w)), kernel[1:], strides[1:], dilations[1:],
             (pads[1], pads[2], pads[4], pads[5]))
    oh, ow = y.shape[2:]
    y = call(_reshape(ctx, y, (n, c, d, oh * ow)), (kernel[0], 1), (strides[0], 1), (dilations[0], 1),
             (pads[0], 0, pads[3], 0))
    return _reshape(ctx, y, (n, c, y.shape[2], oh, ow))


@_converter(1, 8, 10, 11, 12, 22)
def MaxPool(ctx, node, inputs, attrs, opset):
    """ONNX MaxPool (1-D, 2-D, 3-D; kernel_shape, strides, pads, auto_pad, dilations from 10,
    ceil_mode from 10) -> nn.max_pool2d. The optional Indices output may not be used."""
    x, kernel, strides, dilations, pads, ceil_mode = _pool_common(ctx, inputs, attrs, opset, dilation_since=10)
    return _pool(ctx, "nn.max_pool2d", x, kernel, strides, dilations, pads, ceil_mode, {})


@_converter(1, 7, 10, 11, 19, 22)
def AveragePool(ctx, node, inputs, attrs, opset):
    """ONNX AveragePool (1-D, 2-D, 3-D; count_include_pad from 7, ceil_mode from 10, dilations
    from 19) -> nn.avg_pool2d."""
    x, kernel, strides, dilations, pads, ceil_mode = _pool_common(ctx, inputs, attrs, opset, dilation_since=19)
    extra = {"count_include_pad": int(attrs.get("count_include_pad", 0)) if opset >= 7 else 0}
    return _pool(ctx, "nn.avg_pool2d", x, kernel, strides, dilations, pads, ceil_mode, extra)


def _global_pool(ctx, inputs, op):
    """Any rank >= 3: the spatial axes flattened into W of a [N, C, 1, prod(spatial)] tensor."""
    x = inputs[0]
    if len(x.shape) < 3:
        raise ctx.error(f"global pooling needs rank >= 3; input '{ctx.input_name(0)}' is {x.type}")
    if len(x.shape) == 4:
        return ctx.call(op, [x])
    n, c = x.shape[:2]
    y = ctx.call(op, [_reshape(ctx, x, (n, c, 1, _prod(x.shape[2:])))])
    return _reshape(ctx, y, (n, c) + (1,) * (len(x.shape) - 2))


@_converter(1, 22)
def GlobalAveragePool(ctx, node, inputs, attrs, opset):
    """ONNX GlobalAveragePool [N,C,...] -> nn.global_avg_pool2d [N,C,1,...]."""
    return _global_pool(ctx, inputs, "nn.global_avg_pool2d")


@_converter(1, 22)
def GlobalMaxPool(ctx, node, inputs, attrs, opset):
    """ONNX GlobalMaxPool [N,C,...] -> nn.global_max_pool2d [N,C,1,...]."""
    return _global_pool(ctx, inputs, "nn.global_max_pool2d")


@_converter(1, 13)
def LRN(ctx, node, inputs, attrs, opset):
    """ONNX LRN (size; alpha 1e-4, beta 0.75, bias 1.0 by default) -> nn.lrn."""
    if "size" not in attrs:
        raise ctx.error("attribute 'size' is required")
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must be 4-D (NCHW)")
    return ctx.call("nn.lrn", [x], {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                                    "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))})


@_converter(1, 9, 11, 13, 21, 23, 24, 25)
def Flatten(ctx, node, inputs, attrs, opset):
    """ONNX Flatten(axis=1) -> reshape to [prod(shape[:axis]), prod(shape[axis:])]."""
    x = inputs[0]
    rank = len(x.shape)
    axis = int(attrs.get("axis", 1))
    if not -rank <= axis <= rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    newshape = (_prod(x.shape[:axis]), _prod(x.shape[axis:]))
    if _is_const(x):
        return x.value.reshape(newshape)
    return _reshape(ctx, x, newshape)


def _resolve_reshape(ctx, in_shape, shape, allowzero) -> tuple:
    """ONNX Reshape target: 0 copies the input dim (unless allowzero), -1 is inferred."""
    out = []
    for i, d in enumerate(int(s) for s in shape):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.error(f"shape {list(shape)}: 0 at index {i} has no input dimension to copy")
            out.append(int(in_shape[i]))
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ctx.error(f"shape {list(shape)} has more than one -1")
    total = _prod(in_shape)
    if -1 in out:
        known = _prod([d for d in out if d != -1])
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape {_fmt_dims(in_shape)} to {list(shape)}")
        out[out.index(-1)] = total // known
    if any(d < 0 for d in out) or _prod(out) != total:
        raise ctx.error(f"cannot reshape {_fmt_dims(in_shape)} to {list(shape)}")
    return tuple(out)


@_converter(1, 5, 13, 14, 19, 21, 23, 24, 25)
def Reshape(ctx, node, inputs, attrs, opset):
    """ONNX Reshape: target shape from the `shape` attribute (opset < 5) or a constant input
    (opset >= 5), 0 and -1 resolved statically -> reshape(newshape)."""
    x = inputs[0]
    if opset < 5:
        if "shape" not in attrs:
            raise ctx.error("attribute 'shape' is required")
        shape = attrs["shape"]
    else:
        shape = ctx.constant(inputs, 1, "shape").reshape(-1).tolist()
    newshape = _resolve_reshape(ctx, x.shape, shape, int(attrs.get("allowzero", 0)))
    if _is_const(x):
        return x.value.reshape(newshape)
    return _reshape(ctx, x, newshape)


@_converter(1, 13, 21, 23, 24, 25)
def Transpose(ctx, node, inputs, attrs, opset):
    """ONNX Transpose(perm, default reversed) -> transpose(axes)."""
    x = inputs[0]
    rank = len(x.shape)
    perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {list(perm)} is not a permutation of {rank} axes")
    if perm == tuple(range(rank)):
        return x
    if _is_int_const(x):
        return np.transpose(x.value, perm)
    return ctx.call("transpose", [x], {"axes": perm})


@_converter(1, 4, 11, 13)
def Concat(ctx, node, inputs, attrs, opset):
    """ONNX Concat(axis; default 1 in opset 1, negative from 11) -> concatenate."""
    inputs = [e for e in inputs if e is not None]
    if "axis" not in attrs and opset >= 4:
        raise ctx.error("attribute 'axis' is required")
    rank = len(inputs[0].shape)
    axis = _norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if all(_is_int_const(e) for e in inputs):  # shape arithmetic
        return np.concatenate([e.value for e in inputs], axis=axis)
    return ctx.call("concatenate", inputs, {"axis": axis})


@_converter(1, 11, 13)
def Softmax(ctx, node, inputs, attrs, opset):
    """ONNX Softmax.

    opset < 13: input coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])] (axis default 1),
    softmax over the second dim -> reshape, nn.softmax(axis=1), reshape (a single
    nn.softmax when axis is the last dim). opset >= 13: nn.softmax along `axis` (default -1).
    """
    x = inputs[0]
    rank = len(x.shape)
    if opset >= 13:
        return ctx.call("nn.softmax", [x], {"axis": _norm_axis(ctx, int(attrs.get("axis", -1)), rank)})
    axis = _norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if axis == rank - 1:  # the coerced 2-D softmax is a softmax along the last dim
        return ctx.call("nn.softmax", [x], {"axis": axis})
    flat = _reshape(ctx, x, (_prod(x.shape[:axis]), _prod(x.shape[axis:])))
    return _reshape(ctx, ctx.call("nn.softmax", [flat], {"axis": 1}), x.shape)


@_converter(1, 6, 7, 10, 12, 13, 22)
def Dropout(ctx, node, inputs, attrs, opset):
    """ONNX Dropout (inference) -> nn.dropout; the mask output may not be used, and
    training_mode (opset >= 12 input) must be absent or constant false."""
    if opset >= 12 and len(inputs) > 2 and inputs[2] is not None:
        mode = ctx.constant(inputs, 2, "training_mode")
        if bool(np.asarray(mode).reshape(-1)[0]):
            raise ctx.error("training_mode=true is not supported (inference only)")
    return ctx.call("nn.dropout", [inputs[0]])


@_converter(1, 13, 14, 16, 19, 21, 23, 24, 25)
def Identity(ctx, node, inputs, attrs, opset):
    """ONNX Identity -> identity (a constant passes through unchanged)."""
    x = inputs[0]
    return x if _is_const(x) else ctx.call("identity", [x])


@_converter(1, 9, 11, 12, 13, 19, 21, 23, 24, 25)
def Constant(ctx, node, inputs, attrs, opset):
    """ONNX Constant (value / value_float(s) / value_int(s)) -> a Constant named after its output."""
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64)
    raise ctx.error(f"unsupported constant attribute(s) {sorted(attrs)}; "
                    f"supported: value, value_float(s), value_int(s)")


@_converter(9, 20, 21, 23, 24, 25)
def ConstantOfShape(ctx, node, inputs, attrs, opset):
    """ONNX ConstantOfShape: constant shape input -> np.full with `value` (default float32 0)."""
    shape = ctx.constant(inputs, 0, "shape").reshape(-1)
    if "value" in attrs:
        fill = numpy_helper.to_array(attrs["value"]).reshape(-1)
        if fill.size != 1:
            raise ctx.error(f"attribute 'value' must hold one element, got {fill.size}")
        value, dtype = fill[0], fill.dtype
    else:
        value, dtype = 0, np.float32
    return np.full(tuple(int(d) for d in shape), value, dtype=dtype)


@_converter(1, 13, 15, 19, 21, 23, 24, 25)
def Shape(ctx, node, inputs, attrs, opset):
    """ONNX Shape (start/end from opset 15) -> int64 Constant (shapes are static)."""
    shape = np.asarray(inputs[0].shape, dtype=np.int64)
    rank = len(shape)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    end = rank if end is None else int(end)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return shape[start:end]


def _axes(ctx, inputs, attrs, opset, since_input=13):
    if opset < since_input:
        return attrs.get("axes")
    if len(inputs) > 1 and inputs[1] is not None:
        return ctx.constant(inputs, 1, "axes").reshape(-1).tolist()
    return None


@_converter(1, 11, 13, 21, 23, 24, 25)
def Unsqueeze(ctx, node, inputs, attrs, opset):
    """ONNX Unsqueeze (axes attribute before 13, input from 13; axes index the output)
    -> reshape with a static newshape."""
    x = inputs[0]
    axes = _axes(ctx, inputs, attrs, opset)
    if axes is None:
        raise ctx.error("axes are required")
    out_rank = len(x.shape) + len(axes)
    axes = sorted(_norm_axis(ctx, int(a), out_rank, "axes") for a in axes)
    if len(set(axes)) != len(axes):
        raise ctx.error(f"duplicate axes {axes}")
    dims = iter(x.shape)
    newshape = tuple(1 if i in axes else next(dims) for i in range(out_rank))
    if _is_const(x):
        return x.value.reshape(newshape)
    return _reshape(ctx, x, newshape)


@_converter(1, 11, 13, 21, 23, 24, 25)
def Squeeze(ctx, node, inputs, attrs, opset):
    """ONNX Squeeze (axes attribute before 13, input from 13; none = every 1-dim)
    -> reshape with a static newshape."""
    x = inputs[0]
    rank = len(x.shape)
    axes = _axes(ctx, inputs, attrs, opset)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {_norm_axis(ctx, int(a), rank, "axes") for a in axes}
    for a in sorted(axes):
        if x.shape[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of {x.type}: size is not 1")
    newshape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if _is_const(x):
        return x.value.reshape(newshape)
    return _reshape(ctx, x, newshape)


@_converter(1, 6, 9, 13, 19, 21, 23, 24, 25, 28)
def Cast(ctx, node, inputs, attrs, opset):
    """ONNX Cast(to) -> cast(dtype); nothing when the dtype is unchanged; folded for constants."""
    x = inputs[0]
    to = attrs.get("to")
    if isinstance(to, str):  # Cast-1 names the type as a string
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ctx.error(f"unknown type '{to}'") from None
    dtype = _np_dtype_name(int(to))
    if dtype == x.dtype:
        return x
    if _is_const(x):
        try:
            return x.value.astype(dtype)
        except TypeError:
            raise ctx.error(f"cannot cast constant to {dtype}") from None
    if dtype not in SUPPORTED_DTYPES:
        raise ctx.error(f"tensor '{node.output[0]}' would have dtype {dtype}; "
                        f"supported: {', '.join(SUPPORTED_DTYPES)}")
    return ctx.call("cast", [x], {"dtype": dtype})


@_converter(1, 11, 13)
def Gather(ctx, node, inputs, attrs, opset):
    """ONNX Gather -> take(axis); folded with np.take when data and indices are constants."""
    data, indices = inputs[0], inputs[1]
    axis = _norm_axis(ctx, int(attrs.get("axis", 0)), len(data.shape))
    if _is_const(data) and _is_const(indices):
        n = data.shape[axis]
        idx = indices.value.astype(np.int64)
        return np.take(data.value, np.where(idx < 0, idx + n, idx), axis=axis)
    if indices.dtype not in ("int64", "int32"):
        raise ctx.error(f"indices '{ctx.input_name(1)}' must be int32/int64, got {indices.dtype}")
    return ctx.call("take", [data, indices], {"axis": axis})


@_converter(1, 2, 11, 13, 18, 19, 21, 23, 24, 25)
def Pad(ctx, node, inputs, attrs, opset):
    """ONNX Pad (pads as attribute before 11, constant inputs from 11; axes input from 18):
    mode 'constant' -> pad(pad_width, pad_value); 'reflect' / 'edge' -> mirror_pad(pad_width, mode)."""
    x = inputs[0]
    rank = len(x.shape)
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise ctx.error(f"mode '{mode}' is not supported (constant, reflect, edge)")
    if opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        value = float(attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ctx.constant(inputs, 1, "pads").reshape(-1).tolist()
        value = 0.0
        if len(inputs) > 2 and inputs[2] is not None:
            value = float(ctx.constant(inputs, 2, "constant_value").reshape(-1)[0])
        axes = list(range(rank))
        if opset >= 18 and len(inputs) > 3 and inputs[3] is not None:
            axes = [_norm_axis(ctx, int(a), rank, "axes") for a in ctx.constant(inputs, 3, "axes").reshape(-1)]
    if pads is None or len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have {2 * len(axes)} values")
    width = [[0, 0] for _ in range(rank)]
    for j, a in enumerate(axes):
        width[a] = [int(pads[j]), int(pads[j + len(axes)])]
    if any(b < 0 or e < 0 for b, e in width):
        raise ctx.error(f"negative pads {pads} are not supported")
    if not any(b or e for b, e in width):
        return x
    if mode != "constant":
        return ctx.call("mirror_pad", [x], {"pad_width": tuple(tuple(w) for w in width), "mode": mode})
    return ctx.call("pad", [x], {"pad_width": tuple(tuple(w) for w in width), "pad_value": value})


# ---------------------------------------------------------------------------------------------
# Activations composed of elementwise ops
# ---------------------------------------------------------------------------------------------

def _scalar(ctx, like: Expr, value, suffix: str) -> ir.Constant:
    """A 0-d constant of `like`'s dtype."""
    return ctx.const(np.asarray(value, dtype=like.dtype), suffix)


@_converter(1, 6, 13)
def Reciprocal(ctx, node, inputs, attrs, opset):
    """ONNX Reciprocal -> divide(1, x)."""
    x = inputs[0]
    return ctx.call("divide", [_scalar(ctx, x, 1, "one"), x])


@_converter(1, 22)
def Softplus(ctx, node, inputs, attrs, opset):
    """ONNX Softplus: log(exp(x) + 1) -> exp, add, log."""
    x = inputs[0]
    return ctx.call("log", [ctx.call("add", [ctx.call("exp", [x]), _scalar(ctx, x, 1, "one")])])


@_converter(1, 6, 22)
def Elu(ctx, node, inputs, attrs, opset):
    """ONNX Elu (alpha 1.0) -> nn.elu."""
    return ctx.call("nn.elu", [inputs[0]], {"alpha": float(attrs.get("alpha", 1.0))})


@_converter(1, 6, 22)
def Selu(ctx, node, inputs, attrs, opset):
    """ONNX Selu (alpha 1.67326..., gamma 1.0507...) -> nn.selu."""
    return ctx.call("nn.selu", [inputs[0]], {"alpha": float(attrs.get("alpha", 1.67326319217681884765625)),
                                             "gamma": float(attrs.get("gamma", 1.05070102214813232421875))})


def _hard_sigmoid(ctx, x, alpha, beta):
    y = ctx.call("multiply", [x, _scalar(ctx, x, alpha, "alpha")])
    return ctx.call("clip", [ctx.call("add", [y, _scalar(ctx, x, beta, "beta")])], {"a_min": 0.0, "a_max": 1.0})


@_converter(1, 6, 22)
def HardSigmoid(ctx, node, inputs, attrs, opset):
    """ONNX HardSigmoid: clip(alpha * x + beta, 0, 1) (alpha 0.2, beta 0.5)."""
    return _hard_sigmoid(ctx, inputs[0], float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))


@_converter(14, 22)
def HardSwish(ctx, node, inputs, attrs, opset):
    """ONNX HardSwish: x * clip(x / 6 + 1/2, 0, 1)."""
    x = inputs[0]
    return ctx.call("multiply", [x, _hard_sigmoid(ctx, x, 1.0 / 6.0, 0.5)])


@_converter(20)
def Gelu(ctx, node, inputs, attrs, opset):
    """ONNX Gelu: approximate='none': x/2 * (1 + erf(x / sqrt 2)); 'tanh':
    x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
    x = inputs[0]
    approx = attrs.get("approximate", "none")
    if approx == "none":
        inner = ctx.call("erf", [ctx.call("multiply", [x, _scalar(ctx, x, 1 / np.sqrt(2.0), "rsqrt2")])])
    elif approx == "tanh":
        cube = ctx.call("multiply", [ctx.call("multiply", [x, x]), x])
        poly = ctx.call("add", [x, ctx.call("multiply", [cube, _scalar(ctx, x, 0.044715, "c")])])
        inner = ctx.call("tanh", [ctx.call("multiply", [poly, _scalar(ctx, x, np.sqrt(2 / np.pi), "k")])])
    else:
        raise ctx.error(f"unknown approximate '{approx}' (none, tanh)")
    half = ctx.call("multiply", [x, _scalar(ctx, x, 0.5, "half")])
    return ctx.call("multiply", [half, ctx.call("add", [inner, _scalar(ctx, x, 1, "one")])])


@_converter(1, 6, 7, 9, 16)
def PRelu(ctx, node, inputs, attrs, opset):
    """ONNX PRelu: x < 0 ? slope * x : x, slope broadcast onto x (unidirectionally) -> nn.prelu."""
    x, slope = inputs[0], inputs[1]
    if opset < 7 and len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1]:
        slope = _reshape(ctx, slope, (slope.shape[0],) + (1,) * (len(x.shape) - 2))
    return ctx.call("nn.prelu", [x, slope])


@_converter(1, 6, 8, 13)
def Mean(ctx, node, inputs, attrs, opset):
    """ONNX Mean -> chain of add, then divide by the input count."""
    out = _variadic(ctx, inputs, "add")
    if len(inputs) == 1:
        return out
    return ctx.call("divide", [out, _scalar(ctx, out, len(inputs), "count")])


@_converter(1, 7, 12, 13, 15)
def Pow(ctx, node, inputs, attrs, opset):
    """ONNX Pow -> power (an exponent of another dtype is cast to the base's); x**2 -> multiply."""
    x, y = inputs[0], inputs[1]
    if y.dtype != x.dtype:
        y = ctx.derived(y, "as_" + x.dtype, lambda v: v.astype(x.dtype)) if _is_const(y) \
            else ctx.call("cast", [y], {"dtype": x.dtype})
    if _is_const(y) and y.value.size == 1 and np.broadcast_shapes(x.shape, y.shape) == tuple(x.shape):
        e = float(y.value.reshape(()))
        if e in (1.0, 2.0, 3.0, 4.0):  # small integer exponents as products: exact, and defined for x < 0
            out = x
            for _ in range(int(e) - 1):
                out = ctx.call("multiply", [out, x])
            return out if e != 1.0 else ctx.call("identity", [x])
    return ctx.call("power", [x, y])


def _compare(op: str, op_type: str, *versions: int):
    def convert(ctx, node, inputs, attrs, opset):
        a, b = inputs[0], inputs[1]
        if _is_const(a) and _is_const(b):
            return ir_ref(op, a.value, b.value)
        return ctx.call(op, [a, b])

    convert.__name__ = op_type
    convert.__doc__ = f"ONNX {op_type} -> {op} (bool result; folded for constants)."
    _converter(*versions)(convert)


def ir_ref(op: str, *arrays, **attrs):
    """The registered op's numpy reference (constant folding at import)."""
    from tvmc.ops.registry import get_op

    return np.asarray(get_op(op).reference(*arrays, **attrs))


_compare("equal", "Equal", 1, 7, 11, 13, 19)
_compare("less", "Less", 1, 7, 9, 13)
_compare("greater", "Greater", 1, 7, 9, 13)
_compare("less_equal", "LessOrEqual", 12, 16)
_compare("greater_equal", "GreaterOrEqual", 12, 16)
_compare("logical_and", "And", 1, 7)
_compare("logical_or", "Or", 1, 7)
_compare("logical_xor", "Xor", 1, 7)


@_converter(9, 16)
def Where(ctx, node, inputs, attrs, opset):
    """ONNX Where(cond, x, y) -> where (numpy broadcasting of all three)."""
    c, a, b = inputs
    if all(_is_const(e) for e in inputs):
        return np.where(c.value, a.value, b.value)
    return ctx.call("where", [c, a, b])


@_converter(15, 19, 21, 23, 24, 25)
def CastLike(ctx, node, inputs, attrs, opset):
    """ONNX CastLike(x, like) -> cast to like's dtype (nothing when equal)."""
    x, like = inputs[0], inputs[1]
    if x.dtype == like.dtype:
        return x
    if _is_const(x):
        return x.value.astype(like.dtype)
    return ctx.call("cast", [x], {"dtype": like.dtype})


@_converter(1, 13, 19, 21, 23, 24, 25)
def Size(ctx, node, inputs, attrs, opset):
    """ONNX Size -> int64 scalar Constant (shapes are static)."""
    return np.asarray(_prod(inputs[0].shape), dtype=np.int64)


@_converter(11, 27)
def Range(ctx, node, inputs, attrs, opset):
    """ONNX Range(start, limit, delta) on constant scalars -> a Constant (np.arange semantics:
    ceil((limit - start) / delta) elements)."""
    start, limit, delta = (ctx.constant(inputs, k, w).reshape(()) for k, w in
                           enumerate(("start", "limit", "delta")))
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

def _reduce_axes(ctx, inputs, attrs, opset, since_input):
    """Normalized reduction axes, or None for 'all axes'; () when noop_with_empty_axes applies."""
    x = inputs[0]
    if opset >= since_input:
        axes = ctx.constant(inputs, 1, "axes").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None \
            else None
    else:
        axes = attrs.get("axes")
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None:
        if attrs.get("noop_with_empty_axes", 0) and opset >= since_input:
            return ()
        return tuple(range(len(x.shape)))
    return tuple(sorted({_norm_axis(ctx, int(a), len(x.shape), "axes") for a in axes}))


# value of a reduction over an empty set (ONNX Reduce* on a zero-size axis)
_EMPTY_REDUCTION = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf, "mean": np.nan}


def _reduce(ctx, inputs, attrs, opset, op, since_input=18, pre=None, post=None):
    x = inputs[0]
    axes = _reduce_axes(ctx, inputs, attrs, opset, since_input)
    keep = int(attrs.get("keepdims", 1))
    if axes and any(x.shape[a] == 0 for a in axes):
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep \
            else tuple(d for k, d in enumerate(x.shape) if k not in axes)
        fill = (op == "min") if x.dtype == "bool" else _EMPTY_REDUCTION[op]  # all() / any() of nothing
        value = np.full(shape, fill, dtype=np.float64)
        return _empty_reduction(ctx, value, x.dtype, post)
    if x.dtype == "bool" and op in ("max", "min"):  # any / all
        y = _reduce(ctx, [ctx.call("cast", [x], {"dtype": "int32"})] + list(inputs[1:]), attrs, opset, op,
                    since_input, pre, post)
        return ctx.call("cast", [y], {"dtype": "bool"})
    if pre is not None:
        x = pre(x)
    if axes == ():
        out = x if pre is not None else ctx.call("identity", [x])
    elif len(x.shape) == 0:
        out = ctx.call("identity", [x])
    else:
        out = ctx.call(op, [x], {"axis": axes, "keepdims": keep})
    return post(out) if post is not None else out


def _empty_reduction(ctx, value, dtype, post):
    out = ctx.const(value.astype(dtype), "empty_reduction")
    return post(out) if post is not None else out


@_converter(1, 11, 13, 18)
def ReduceMean(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMean (axes attribute; input from 18; keepdims) -> mean."""
    return _reduce(ctx, inputs, attrs, opset, "mean")


@_converter(1, 11, 13)
def ReduceSum(ctx, node, inputs, attrs, opset):
    """ONNX ReduceSum (axes attribute; input from 13; noop_with_empty_axes) -> sum."""
    return _reduce(ctx, inputs, attrs, opset, "sum", since_input=13)


@_converter(1, 11, 12, 13, 18, 20)
def ReduceMax(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMax -> max."""
    return _reduce(ctx, inputs, attrs, opset, "max")


@_converter(1, 11, 12, 13, 18, 20)
def ReduceMin(ctx, node, inputs, attrs, opset):
    """ONNX ReduceMin -> min."""
    return _reduce(ctx, inputs, attrs, opset, "min")


@_converter(1, 11, 13, 18)
def ReduceProd(ctx, node, inputs, attrs, opset):
    """ONNX ReduceProd -> prod."""
    return _reduce(ctx, inputs, attrs, opset, "prod")


@_converter(1, 11, 13, 18)
def ReduceL2(ctx, node, inputs, attrs, opset):
    """ONNX ReduceL2: sqrt(sum(x * x))."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("multiply", [x, x]),
                   post=lambda y: ctx.call("sqrt", [y]))


@_converter(1, 11, 13, 18)
def ReduceL1(ctx, node, inputs, attrs, opset):
    """ONNX ReduceL1: sum(|x|)."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("abs", [x]))


@_converter(1, 11, 13, 18)
def ReduceSumSquare(ctx, node, inputs, attrs, opset):
    """ONNX ReduceSumSquare: sum(x * x)."""
    return _reduce(ctx, inputs, attrs, opset, "sum", pre=lambda x: ctx.call("multiply", [x, x]))


def _arg(ctx, inputs, attrs, opset, op):
    x = inputs[0]
    axis = _norm_axis(ctx, int(attrs.get("axis", 0)), len(x.shape))
    last = int(attrs.get("select_last_index", 0)) if opset >= 12 else 0
    return ctx.call(op, [x], {"axis": axis, "keepdims": int(attrs.get("keepdims", 1)), "select_last_index": last})


@_converter(1, 11, 12, 13)
def ArgMax(ctx, node, inputs, attrs, opset):
    """ONNX ArgMax (axis, keepdims, select_last_index from 12) -> argmax (int64)."""
    return _arg(ctx, inputs, attrs, opset, "argmax")


@_converter(1, 11, 12, 13)
def ArgMin(ctx, node, inputs, attrs, opset):
    """ONNX ArgMin -> argmin (int64)."""
    return _arg(ctx, inputs, attrs, opset, "argmin")


@_converter(1, 10, 11, 24)
def TopK(ctx, node, inputs, attrs, opset):
    """ONNX TopK (k attribute before 10, constant input from 10; largest and sorted from 11)
    -> (topk_values, topk_indices), both sorted (ties: lower index first)."""
    x = inputs[0]
    axis = _norm_axis(ctx, int(attrs.get("axis", -1)), len(x.shape))
    if opset < 10:
        if "k" not in attrs:
            raise ctx.error("attribute 'k' is required")
        k = int(attrs["k"])
    else:
        k = int(ctx.constant(inputs, 1, "K").reshape(-1)[0])
    if not 0 <= k <= x.shape[axis]:
        raise ctx.error(f"k={k} out of range for axis {axis} of {x.type}")
    tattrs = {"axis": axis, "k": k, "largest": int(attrs.get("largest", 1)) if opset >= 11 else 1}
    return ctx.call("topk_values", [x], tattrs), ctx.call("topk_indices", [x], tattrs)


@_converter(11, 14)
def CumSum(ctx, node, inputs, attrs, opset):
    """ONNX CumSum(x, axis input; exclusive, reverse) -> cumsum."""
    x = inputs[0]
    axis = _norm_axis(ctx, int(ctx.constant(inputs, 1, "axis").reshape(-1)[0]), len(x.shape))
    return ctx.call("cumsum", [x], {"axis": axis, "exclusive": int(attrs.get("exclusive", 0)),
                                    "reverse": int(attrs.get("reverse", 0))})


@_converter(1, 11, 13)
def LogSoftmax(ctx, node, inputs, attrs, opset):
    """ONNX LogSoftmax: as Softmax (2-D coercion before 13) -> nn.log_softmax."""
    x = inputs[0]
    rank = len(x.shape)
    if opset >= 13:
        return ctx.call("nn.log_softmax", [x], {"axis": _norm_axis(ctx, int(attrs.get("axis", -1)), rank)})
    axis = _norm_axis(ctx, int(attrs.get("axis", 1)), rank)
    if axis == rank - 1:
        return ctx.call("nn.log_softmax", [x], {"axis": axis})
    flat = _reshape(ctx, x, (_prod(x.shape[:axis]), _prod(x.shape[axis:])))
    return _reshape(ctx, ctx.call("nn.log_softmax", [flat], {"axis": 1}), x.shape)


# ---------------------------------------------------------------------------------------------
# Normalizations composed of reductions
# ---------------------------------------------------------------------------------------------

def _normalize(ctx, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over `axes` (keepdims); returns (normalized, mean, inv_std)."""
    mean = ctx.call("mean", [x], {"axis": axes, "keepdims": 1})
    d = ctx.call("subtract", [x, mean])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], {"axis": axes, "keepdims": 1})
    inv_std = ctx.call("divide", [_scalar(ctx, x, 1, "one"),
                                  ctx.call("sqrt", [ctx.call("add", [var, _scalar(ctx, x, eps, "eps")])])])
    return ctx.call("multiply", [d, inv_std]), mean, inv_std


@_converter(1, 6, 22)
def InstanceNormalization(ctx, node, inputs, attrs, opset):
    """ONNX InstanceNormalization: per (n, c) over the spatial axes, then scale[C], B[C]."""
    x, scale, bias = inputs
    if len(x.shape) < 3:
        raise ctx.error(f"input '{ctx.input_name(0)}' {x.type} must have rank >= 3")
    y, _, _ = _normalize(ctx, x, tuple(range(2, len(x.shape))), float(attrs.get("epsilon", 1e-5)))
    per_c = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    return ctx.call("add", [ctx.call("multiply", [y, _reshape(ctx, scale, per_c)]), _reshape(ctx, bias, per_c)])


@_converter(17)
def LayerNormalization(ctx, node, inputs, attrs, opset):
    """ONNX LayerNormalization(X, Scale, B; axis -1, epsilon 1e-5): over axes [axis, rank);
    outputs Y, Mean, InvStdDev (the statistics keep the reduced axes as 1). stash_type must be 1
    (float32)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if int(attrs.get("stash_type", 1)) != 1:
        raise ctx.error("only stash_type=1 (float32 statistics) is supported")
    axis = _norm_axis(ctx, int(attrs.get("axis", -1)), len(x.shape))
    y, mean, inv_std = _normalize(ctx, x, tuple(range(axis, len(x.shape))), float(attrs.get("epsilon", 1e-5)))
    y = ctx.call("multiply", [y, scale])
    if bias is not None:
        y = ctx.call("add", [y, bias])
    return y, mean, inv_std


# ---------------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------------

def _slice_attrs(shape, starts, ends, axes, steps):
    """ONNX Slice semantics resolved into per-axis begin/end/strides (clamped, numpy-like)."""
    rank = len(shape)
    begin, end, strides = [0] * rank, list(shape), [1] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = shape[a]
        s, e, st = int(s), int(e), int(st)
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, -1), d - 1), min(max(e, -1), d - 1)
        begin[a], end[a], strides[a] = s, e, st
    return tuple(begin), tuple(end), tuple(strides)


def _strided_slice(ctx, x, begin, end, strides):
    if _is_const(x):
        return x.value[tuple(slice(b, e if e >= 0 else None, s) for b, e, s in zip(begin, end, strides))]
    if tuple(begin) == (0,) * len(begin) and tuple(end) == tuple(x.shape) and set(strides) <= {1}:
        return ctx.call("identity", [x])
    return ctx.call("strided_slice", [x], {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides)})


@_converter(1, 10, 11, 13)
def Slice(ctx, node, inputs, attrs, opset):
    """ONNX Slice (starts/ends/axes attributes before 10; constant inputs starts, ends, axes,
    steps from 10) -> strided_slice with clamped begin/end."""
    x = inputs[0]
    rank = len(x.shape)
    if opset < 10:
        starts, ends = attrs.get("starts"), attrs.get("ends")
        axes, steps = attrs.get("axes"), None
    else:
        starts = ctx.constant(inputs, 1, "starts").reshape(-1).tolist()
        ends = ctx.constant(inputs, 2, "ends").reshape(-1).tolist()
        axes = ctx.constant(inputs, 3, "axes").reshape(-1).tolist() if len(inputs) > 3 and inputs[3] is not None \
            else None
        steps = ctx.constant(inputs, 4, "steps").reshape(-1).tolist() if len(inputs) > 4 and inputs[4] is not None \
            else None
    if starts is None or ends is None or len(starts) != len(ends):
        raise ctx.error("starts and ends are required and must have the same length")
    axes = list(range(len(starts))) if axes is None else [_norm_axis(ctx, int(a), rank, "axes") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if any(int(s) == 0 for s in steps):
        raise ctx.error("steps must be non-zero")
    return _strided_slice(ctx, x, *_slice_attrs(x.shape, starts, ends, axes, steps))


@_converter(1, 2, 11, 13, 18)
def Split(ctx, node, inputs, attrs, opset):
    """ONNX Split (split sizes as attribute before 13, constant input from 13; num_outputs from
    18; equal parts otherwise, the last one smaller) -> one strided_slice per output."""
    x = inputs[0]
    axis = _norm_axis(ctx, int(attrs.get("axis", 0)), len(x.shape))
    n_out = len(node.output)
    if opset >= 13:
        split = ctx.constant(inputs, 1, "split").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None \
            else None
    elif opset == 1 and len(inputs) > 1 and inputs[1] is not None:
        split = ctx.constant(inputs, 1, "split").reshape(-1).tolist()
    else:
        split = attrs.get("split")
    d = x.shape[axis]
    if split is None:
        n = int(attrs.get("num_outputs", n_out)) if opset >= 18 else n_out
        part = -(-d // n)
        split = [min(part, d - k * part) for k in range(n)]
    if len(split) != n_out or sum(int(s) for s in split) != d:
        raise ctx.error(f"split {list(split)} does not divide dimension {d} into {n_out} outputs")
    outs, start = [], 0
    for size in split:
        begin = [0] * len(x.shape)
        end = list(x.shape)
        begin[axis], end[axis] = start, start + int(size)
        outs.append(_strided_slice(ctx, x, begin, end, [1] * len(x.shape)))
        start += int(size)
    return tuple(outs)


@_converter(8, 13)
def Expand(ctx, node, inputs, attrs, opset):
    """ONNX Expand(x, shape): bidirectional broadcast of x with the constant shape -> broadcast_to."""
    x = inputs[0]
    shape = ctx.constant(inputs, 1, "shape").reshape(-1).tolist()
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(tuple(x.shape), tuple(int(s) for s in shape)))
    except ValueError:
        raise ctx.error(f"cannot expand {x.type} to {shape}") from None
    if _is_const(x):
        return np.broadcast_to(x.value, out).copy()
    if out == tuple(x.shape):
        return ctx.call("identity", [x])
    return ctx.call("broadcast_to", [x], {"shape": out})


@_converter(1, 6, 13)
def Tile(ctx, node, inputs, attrs, opset):
    """ONNX Tile(x, repeats) -> reshape to [1, d0, 1, d1, ...], broadcast_to [r0, d0, r1, d1, ...],
    reshape to [r0 * d0, ...]."""
    x = inputs[0]
    if opset < 6:
        raise ctx.error("Tile-1 (tiles/axis inputs) is not supported")
    reps = [int(r) for r in ctx.constant(inputs, 1, "repeats").reshape(-1)]
    if len(reps) != len(x.shape):
        raise ctx.error(f"repeats {reps} must have {len(x.shape)} values")
    if _is_const(x):
        return np.tile(x.value, reps)
    inter = tuple(v for d in x.shape for v in (1, d))
    wide = tuple(v for r, d in zip(reps, x.shape) for v in (r, d))
    y = ctx.call("broadcast_to", [_reshape(ctx, x, inter)], {"shape": wide})
    return _reshape(ctx, y, tuple(r * d for r, d in zip(reps, x.shape)))


def _resize(ctx, x, scales, sizes, method, coord_mode, nearest_mode="round_prefer_floor", cubic_a=-0.75,
            exclude_outside=0, extrapolation=0.0, roi=None, axes=None, policy="stretch"):
    """Resize/Upsample -> image.resize2d over the two trailing axes (a rank != 4 input runs as
    [prod(leading), 1, H, W]); scales or sizes per resized axis (`axes`, default all), ONNX
    Resize-18 keep_aspect_ratio_policy; tf_crop_and_resize positions outside the input take
    `extrapolation` through a where over a constant mask."""
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [_norm_axis(ctx, int(a), rank, "axes") for a in axes]
    scale_of = {a: 1.0 for a in range(rank)}
    out_of = {a: int(d) for a, d in enumerate(x.shape)}
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ctx.error(f"sizes {list(sizes)} must have {len(axes)} values")
        for a, n in zip(axes, sizes):
            scale_of[a], out_of[a] = int(n) / x.shape[a], int(n)
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise ctx.error(f"unknown keep_aspect_ratio_policy '{policy}'")
            s = pick(scale_of[a] for a in axes)
            for a in axes:
                scale_of[a], out_of[a] = s, int(s * x.shape[a] + 0.5)
    else:
        if len(scales) != len(axes):
            raise ctx.error(f"scales {list(scales)} must have {len(axes)} values")
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ctx.error(f"scales {list(scales)} must be positive")
            scale_of[a], out_of[a] = float(s), int(float(s) * x.shape[a])
    roi_of = {a: (0.0, 1.0) for a in range(rank)}
    if roi is not None and len(roi) == 2 * len(axes):
        for k, a in enumerate(axes):
            roi_of[a] = (float(roi[k]), float(roi[k + len(axes)]))
    resized = [a for a in range(rank) if out_of[a] != x.shape[a] or scale_of[a] != 1.0
               or (coord_mode == "tf_crop_and_resize" and roi_of[a] != (0.0, 1.0))]
    if not resized:
        return ctx.call("identity", [x])
    if rank < 2 or any(a < rank - 2 for a in resized):
        raise ctx.error(f"only the two trailing axes can be resized; {x.type} to "
                        f"{_fmt_dims([out_of[a] for a in range(rank)])}")
    from tvmc.ops.image import resize_tables

    tables = [resize_tables(int(x.shape[a]), out_of[a], scale_of[a], method, coord_mode, nearest_mode, cubic_a,
                            exclude_outside, roi_of[a]) for a in (rank - 2, rank - 1)]
    (ih, wh, oh), (iw, ww, ow) = tables
    h, w = x.shape[-2:]
    y = _reshape(ctx, x, (_prod(x.shape[:-2]), 1, h, w)) if rank != 4 else x
    args = [y, ctx.const(ih, "idx_h"), ctx.const(iw, "idx_w")]
    if method != "nearest":
        args += [ctx.const(wh, "w_h"), ctx.const(ww, "w_w")]
    y = ctx.call("image.resize2d", args)
    if oh.any() or ow.any():
        mask = ctx.const(oh[:, None] | ow[None, :], "outside")
        y = ctx.call("where", [mask, _scalar(ctx, y, extrapolation, "extrapolation"), y])
    return _reshape(ctx, y, tuple(out_of[a] for a in range(rank)))


_RESIZE_METHODS = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}


@_converter(10, 11, 13, 18, 19)
def Resize(ctx, node, inputs, attrs, opset):
    """ONNX Resize: 10 (X, scales; asymmetric coordinates, nearest rounds as Upsample does),
    11/13 (roi, scales or sizes; coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
    exclude_outside, extrapolation_value), 18/19 (axes, keep_aspect_ratio_policy, antialias,
    half_pixel_symmetric) -> image.resize2d. Scales/sizes must be constant; antialias is not
    supported."""
    x = inputs[0]
    method = _RESIZE_METHODS.get(attrs.get("mode", "nearest"))
    if method is None or (opset < 11 and method == "cubic"):
        raise ctx.error(f"unknown mode '{attrs.get('mode')}'")
    if opset < 11:
        scales = ctx.constant(inputs, 1, "scales").reshape(-1).tolist()
        return _resize(ctx, x, scales, None, method, "asymmetric", "simple")
    if int(attrs.get("antialias", 0)):
        raise UnsupportedOpError(ctx.importer.label, [("Resize with antialias=1", opset, [ctx.name])])
    roi = ctx.constant(inputs, 1, "roi").reshape(-1).tolist() if len(inputs) > 1 and inputs[1] is not None else None
    scales = ctx.constant(inputs, 2, "scales").reshape(-1).tolist() \
        if len(inputs) > 2 and inputs[2] is not None else None
    sizes = ctx.constant(inputs, 3, "sizes").reshape(-1).tolist() if len(inputs) > 3 and inputs[3] is not None else None
    if not scales:
        scales = None
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of scales and sizes must be given")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    from tvmc.ops.image import COORDINATE_MODES, NEAREST_MODES

    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    if coord not in COORDINATE_MODES or nearest_mode not in NEAREST_MODES[:4]:
        raise ctx.error(f"unknown coordinate_transformation_mode '{coord}' or nearest_mode '{nearest_mode}'")
    return _resize(ctx, x, scales, sizes, method, coord, nearest_mode, float(attrs.get("cubic_coeff_a", -0.75)),
                   int(attrs.get("exclude_outside", 0)), float(attrs.get("extrapolation_value", 0.0)), roi,
                   attrs.get("axes") if opset >= 18 else None, attrs.get("keep_aspect_ratio_policy", "stretch"))


@_converter(7, 9, 10)
def Upsample(ctx, node, inputs, attrs, opset):
    """ONNX Upsample-7 (scales attribute) / -9 and -10 (deprecated; scales input): nearest or (bi)linear with
    asymmetric coordinates -> image.resize2d."""
    method = _RESIZE_METHODS.get(attrs.get("mode", "nearest"))
    if method not in ("nearest", "linear"):
        raise ctx.error(f"unknown mode '{attrs.get('mode')}'")
    scales = attrs.get("scales") if opset < 9 else ctx.constant(inputs, 1, "scales").reshape(-1).tolist()
    if scales is None:
        raise ctx.error("scales are required")
    return _resize(ctx, inputs[0], scales, None, method, "asymmetric", "simple")


def _einsum_terms(ctx, equation, ranks):
    """Parse an einsum equation into ([letters per operand], output letters); '...' becomes
    upper-case letters (broadcast dims must have equal sizes), implicit output = the letters
    seen once, sorted."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(chr(ord("Z") - k) for k in range(n_ell))[::-1]
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            t = t.replace("...", ell[n_ell - (r - len(t.replace("...", ""))):])
        if len(t) != r or not t.isalpha():
            raise ctx.error(f"equation '{equation}': term '{t}' does not match an operand of rank {r}")
        if len(set(t)) != len(t):
            raise ctx.error(f"equation '{equation}': repeated indices in one operand (diagonals) are not supported")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = collections.Counter("".join(out_terms))
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    return out_terms, out


def _einsum_pair(ctx, a, ta, b, tb, keep):
    """Contract a (letters ta) with b (letters tb) into letters batch + free_a + free_b, keeping
    the letters in `keep`: transpose/reshape to [B, M, K] x [B, K, N], nn.matmul, reshape."""
    dims = {**dict(zip(ta, a.shape)), **dict(zip(tb, b.shape))}
    for c in set(ta) & set(tb):
        if dict(zip(ta, a.shape))[c] != dict(zip(tb, b.shape))[c]:
            raise ctx.error(f"einsum index '{c}' has sizes {dict(zip(ta, a.shape))[c]} and "
                            f"{dict(zip(tb, b.shape))[c]}; broadcasting is not supported")
    batch = [c for c in ta if c in tb and c in keep]
    contract = [c for c in ta if c in tb and c not in keep]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    a = _einsum_permute(ctx, a, ta, batch + free_a + contract)
    b = _einsum_permute(ctx, b, tb, batch + contract + free_b)
    nb, m, k, n = (_prod([dims[c] for c in cs]) for cs in (batch, free_a, contract, free_b))
    y = ctx.call("nn.matmul", [_reshape(ctx, a, (nb, m, k)), _reshape(ctx, b, (nb, k, n))])
    letters = batch + free_a + free_b
    return _reshape(ctx, y, tuple(dims[c] for c in letters)), "".join(letters)


def _einsum_permute(ctx, x, have, want):
    perm = tuple(have.index(c) for c in want)
    return x if perm == tuple(range(len(perm))) else ctx.call("transpose", [x], {"axes": perm})


@_converter(12, 28)
def Einsum(ctx, node, inputs, attrs, opset):
    """ONNX Einsum-12/28 (28 adds dtypes) without diagonals: letters used by one operand only and not in the output
    are summed first; operands are contracted pairwise as batched matmuls (transpose + reshape +
    nn.matmul); the result is transposed to the output order. E.g. "bij,bjk->bik",
    "bhid,bhjd->bhij", "ij->ji", "ij->i"."""
    terms, out = _einsum_terms(ctx, attrs["equation"], [len(x.shape) for x in inputs])
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
        raise ctx.error(f"equation '{attrs['equation']}': bad output indices '{out}'")
    operands = []
    for k, (x, t) in enumerate(zip(inputs, terms)):
        elsewhere = set(out) | {c for j, u in enumerate(terms) if j != k for c in u}
        axes = tuple(i for i, c in enumerate(t) if c not in elsewhere)
        if axes:
            x = ctx.call("sum", [x], {"axis": axes, "keepdims": 0})
            t = "".join(c for c in t if c in elsewhere)
        operands.append((x, t))
    x, t = operands[0]
    for j, (y, u) in enumerate(operands[1:], 1):
        keep = set(out) | {c for _, v in operands[j + 1:] for c in v}
        x, t = _einsum_pair(ctx, x, t, y, u, keep)
    return _einsum_permute(ctx, x, t, list(out)) if t != out else x


@_converter(1, 11, 13, 28)
def DepthToSpace(ctx, node, inputs, attrs, opset):
    """ONNX DepthToSpace (blocksize; mode DCR or CRD from 11) -> reshape, transpose, reshape."""
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input {x.type} must be NCHW")
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if c % (b * b):
        raise ctx.error(f"channels {c} not divisible by blocksize^2 = {b * b}")
    if attrs.get("mode", "DCR") == "DCR":
        y = _reshape(ctx, x, (n, b, b, c // (b * b), h, w))
        perm = (0, 3, 4, 1, 5, 2)
    else:
        y = _reshape(ctx, x, (n, c // (b * b), b, b, h, w))
        perm = (0, 1, 4, 2, 5, 3)
    y = ctx.call("transpose", [y], {"axes": perm})
    return _reshape(ctx, y, (n, c // (b * b), h * b, w * b))


@_converter(1, 13, 28)
def SpaceToDepth(ctx, node, inputs, attrs, opset):
    """ONNX SpaceToDepth (blocksize; mode DCR or CRD from 28) -> reshape, transpose, reshape."""
    x = inputs[0]
    if len(x.shape) != 4:
        raise ctx.error(f"input {x.type} must be NCHW")
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ctx.error(f"spatial size {h}x{w} not divisible by blocksize {b}")
    y = _reshape(ctx, x, (n, c, h // b, b, w // b, b))
    crd = opset >= 28 and attrs.get("mode", "DCR") == "CRD"
    y = ctx.call("transpose", [y], {"axes": (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)})
    return _reshape(ctx, y, (n, c * b * b, h // b, w // b))
