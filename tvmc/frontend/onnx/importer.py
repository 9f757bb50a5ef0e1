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
from tvmc.frontend.onnx.common import SUPPORTED_DTYPES, SymbolicValue, fmt_dims, is_const, np_dtype_name
from tvmc.frontend.onnx.functions import function_body, inline, tensor_type
from tvmc.frontend.onnx.symbolic import fold_symbolic
from tvmc.frontend.onnx.registry import CONVERTERS, find_domain_converter, has_converter, supports
from tvmc.frontend.onnx.value_range import Unbounded, value_range
from tvmc.graph import ir, symbolic
from tvmc.graph.ir import Call, Expr, Graph, TensorType, Var
from tvmc.ops.registry import get_op, make_call

_DEFAULT_DOMAINS = ("", "ai.onnx")
# ops whose result is computed from their input's run-time shape, not its data (tensor.py)
_READS_RUN_TIME_SHAPE = ("Shape", "Size")
_FOLD_AT_IMPORT_MAX = 4096  # elements: a float call on constants up to this size is folded at import


def from_onnx(model, input_shapes: dict | None = None, value_ranges: dict | None = None,
              dim_ranges: dict | None = None, dim_sizes: dict | None = None) -> Graph:
    """Import an ONNX model into the graph IR.

    model:        path (str / os.PathLike) of a .onnx file, or an `onnx.ModelProto`.
    input_shapes: {graph input name: shape tuple} overriding or fixing input shapes; a dimension
                  is an int, or a range (lo, hi) of ints 0 <= lo <= hi (`--input-shapes
                  "x:[1,1..512]"`): a symbolic dimension, the size variable of the model's
                  dim_param at that place (else one named `<input>_<axis>`). An int given where
                  the model has a dim_param fixes that dim_param in every input.
    value_ranges: {graph input name: (lo, hi)}: every element of that input lies in [lo, hi] at
                  run time (`--value-range`); bounds the outputs of Range, Expand and
                  ConstantOfShape whose shape inputs are computed from it (docs/dynamic_shapes.md).
    dim_ranges:   {dim_param: (lo, hi)} (`--dim-range seq=1..512`): the model's symbolic dimension
                  of that name, in every input where it appears, is one size variable in lo..hi.
    dim_sizes:    {size variable name: int} (`tvmc tune --dim-sizes seq=32,128`): each of these
                  variables (a dim_param given a range, or `<input>_<axis>`) is fixed at that size,
                  which must lie in its range: the static graph of one representative size, whose
                  kernels tuning measures.

    Returns a Graph whose inputs are the ONNX graph inputs that are not initializers
    (Var with a static or symbolic shape, dtype float32/int64/int32/bool), whose constants are the
    initializers (Constant named after the initializer), and whose outputs carry the ONNX
    graph output names. Every tensor's shape is known: static, or expressions of the input size
    variables (tvmc.graph.symbolic, ONNX's shape arithmetic on them carried out at import); static
    shapes are checked against ONNX shape inference and the op registry's type rules.

    Raises:
      ModelError           unreadable file, onnx.checker failure, bad `input_shapes`, `value_ranges`
                           or `dim_ranges`, a `dim_sizes` name that is no size variable or a
                           size outside its range, unresolved symbolic dimensions (one error naming them
                           all, the inputs where each appears and an example command), unsupported
                           dtype on a non-constant path, unsupported attribute values, shape
                           inconsistencies, a symbolic shape that the bounds do not prove valid.
      UnsupportedOpError   before anything is converted, listing every op type (with opset
                           and node names) that has no converter for the model's opset.

    Source: ONNX IR spec (onnx/docs/IR.md) and operator spec (onnx/docs/Operators.md, each
    converter names the op versions it implements).
    """
    proto, label = _load(model)
    _check(proto, label)
    return _Importer(proto, label, value_ranges or {}, dim_ranges or {}, dim_sizes or {}).run(input_shapes or {})


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

    def __init__(self, proto: onnx.ModelProto, label: str, value_ranges: dict | None = None,
                 dim_ranges: dict | None = None, dim_sizes: dict | None = None):
        self.proto = proto
        self.dim_ranges = dict(dim_ranges or {})  # dim_param -> (lo, hi)
        self.dim_sizes = dict(dim_sizes or {})  # size variable name -> the size it is fixed at
        self.materialized: dict = {}  # SymbolicValue -> its shape_to_tensor call
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
        shapes = self._resolve_shapes(real_inputs, input_shapes)
        self._infer(real_inputs, {vi.name: shapes[vi.name] for vi in real_inputs
                                  if shapes.get(vi.name) is not None and not _as_declared(vi, shapes[vi.name])})

        self.used_names = set(init_names) | {vi.name for vi in g.input}
        for node in g.node:
            self.used_names.update(o for o in node.output if o)

        self._bind_initializers(g)

        inputs = [self._make_input(vi, shapes.get(vi.name)) for vi in real_inputs]
        for v in inputs:
            self.env[v.name] = v

        for node in g.node:
            self._convert(node, self.opset)

        outputs = [self.materialize(self._lookup(vi.name, f"graph output '{vi.name}'"), vi.name) for vi in g.output]
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
                ok = all(_valid_range(d) if _is_range(d) else int(d) == d and int(d) >= 0 for d in shape)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise self.error(f"--input-shapes for '{name}' must be a list of non-negative ints or ranges "
                                 f"lo..hi, got {shape!r}")

    def _resolve_shapes(self, real_inputs, input_shapes) -> dict:
        """{input name: shape (ints and SymExprs)} of every tensor input (None when it has no shape
        and none is given), from --input-shapes, the model's dims and --dim-range. A dim_param is one
        size variable wherever it appears: bounded by --dim-range or by a range that --input-shapes
        gives at one of its places, or fixed by an int given there. Raises one ModelError naming every
        dimension left unresolved (_unresolved_error), or a conflict between two of those sources."""
        declared = {vi.name: _declared_dims(vi) for vi in real_inputs if vi.type.HasField("tensor_type")}
        places: dict = {}  # dim_param -> [(input, axis)]
        for name, dims in declared.items():
            for axis, d in enumerate(dims or ()):
                if isinstance(d, str):
                    places.setdefault(d, []).append((name, axis))
        ranges: dict = {}  # dim_param -> ((lo, hi), where it was given)
        for param, rng in self.dim_ranges.items():
            if not _valid_range(rng):
                raise self.error(f"--dim-range for '{param}' must be a range of ints 0 <= lo <= hi, got {rng!r}")
            lo, hi = rng
            if param not in places:
                known = ", ".join(f"'{p}'" for p in places) or "none"
                raise self.error(f"--dim-range names '{param}', which is not a symbolic dimension (dim_param) of the "
                                 f"model's inputs; those are: {known}")
            ranges[param] = ((int(lo), int(hi)), "--dim-range")
        sizes: dict = {}  # dim_param -> {size: where}
        for name, shape in input_shapes.items():
            dims = declared.get(name)
            if dims is not None and len(dims) != len(shape):
                raise self.error(f"--input-shapes gives '{name}' rank {len(shape)} but the model declares "
                                 f"rank {len(dims)} {fmt_dims(dims)}")
            for axis, d in enumerate(shape):
                param = dims[axis] if dims is not None and isinstance(dims[axis], str) else None
                where = f"--input-shapes {name}[{axis}]"
                if _is_range(d) and dims is not None and isinstance(dims[axis], int):
                    raise self.error(f"--input-shapes gives '{name}' dimension {axis} the range {d[0]}..{d[1]}, but "
                                     f"the model fixes it at {dims[axis]}")
                if param is None:
                    continue
                if _is_range(d):
                    rng = (int(d[0]), int(d[1]))
                    if param in ranges and ranges[param][0] != rng:
                        raise self.error(f"dimension '{param}' is given the range {rng[0]}..{rng[1]} by {where} and "
                                         f"{ranges[param][0][0]}..{ranges[param][0][1]} by {ranges[param][1]}")
                    ranges.setdefault(param, (rng, where))
                else:
                    sizes.setdefault(param, {}).setdefault(int(d), where)
        for param, given in sizes.items():
            if param in ranges:
                size, where = next(iter(given.items()))
                raise self.error(f"dimension '{param}' is given the size {size} by {where} and the range "
                                 f"{ranges[param][0][0]}..{ranges[param][0][1]} by {ranges[param][1]}; give one")
        variables = {param: self._size_var(param, *rng) for param, (rng, _) in ranges.items()}
        unnamed = {f"{name}_{axis}": (name, axis) for name, shape in input_shapes.items()
                   for axis, d in enumerate(shape) if _is_range(d)
                   and not (declared.get(name) is not None and isinstance(declared[name][axis], str))}
        stray = [n for n in self.dim_sizes if n not in variables and n not in unnamed]
        if stray:
            known = ", ".join(f"'{n}'" for n in [*variables, *unnamed]) or "none (the model compiles for one size)"
            raise self.error(f"--dim-sizes names {', '.join(repr(n) for n in stray)}, not a size variable of the "
                             f"compile; its size variables are: {known}")

        shapes, unresolved = {}, []
        for vi in real_inputs:
            if vi.name not in declared:
                continue
            dims = declared[vi.name]
            if vi.name in input_shapes:
                shapes[vi.name] = tuple(
                    (variables[dims[axis]] if dims is not None and isinstance(dims[axis], str)
                     else self._size_var(f"{vi.name}_{axis}", int(d[0]), int(d[1]))) if _is_range(d) else int(d)
                    for axis, d in enumerate(input_shapes[vi.name]))
                continue
            if dims is None:
                unresolved.append((vi.name, None, None))
                continue
            shape = []
            for axis, d in enumerate(dims):
                if isinstance(d, str) and d in variables:
                    shape.append(variables[d])
                elif isinstance(d, str) and len(sizes.get(d, ())) == 1:
                    shape.append(next(iter(sizes[d])))
                elif isinstance(d, str) and d in sizes:
                    raise self.error(f"dimension '{d}' of input '{vi.name}' is given the different sizes "
                                     f"{sorted(sizes[d])} by {', '.join(sizes[d].values())}; give it in "
                                     f"--input-shapes for '{vi.name}' too")
                elif isinstance(d, int):
                    shape.append(d)
                else:
                    unresolved.append((vi.name, axis, d))
                    shape.append(None)
            shapes[vi.name] = tuple(shape)
        if unresolved:
            raise self._unresolved_error(real_inputs, input_shapes, declared, unresolved)
        return shapes

    def _size_var(self, name: str, lo: int, hi: int):
        """The size variable `name` in lo..hi, or the int of dim_sizes that fixes it (checked to lie
        in lo..hi)."""
        if name not in self.dim_sizes:
            return symbolic.size_var(name, lo, hi)
        size = self.dim_sizes[name]
        if not isinstance(size, int) or not lo <= size <= hi:
            raise self.error(f"--dim-sizes gives '{name}' the size {size!r}, outside its range {lo}..{hi}")
        return size

    def _unresolved_error(self, real_inputs, input_shapes, declared, unresolved) -> ModelError:
        """One error naming every unresolved input dimension, grouped by dim_param with the inputs
        where it appears, and the options of two example compiles (each replacing the --dim-range
        and --input-shapes given): ranges for them (--dim-range for dim_params, --input-shapes for
        unnamed dimensions), and one size for each; each checked by importing the model with it,
        from the candidates _EXAMPLE_RANGES and _EXAMPLE_SIZES (the first that imports is shown;
        where none does, the error of the first, which says what the model needs)."""
        named: dict = {}
        parts = []
        for name, axis, param in unresolved:
            if axis is None:
                parts.append(f"input '{name}' has no shape")
            elif param:
                named.setdefault(param, []).append(f"{name}[{axis}]")
            else:
                parts.append(f"input '{name}' dimension {axis} is unknown")
        parts = [f"'{p}' ({', '.join(where)})" for p, where in named.items()] + parts
        what = "symbolic input dimensions without a bound: " if named else "unresolved input dimensions: "
        if any(axis is None for _, axis, _ in unresolved):  # no rank known: nothing to check
            hint = " ".join(f"{vi.name}:[1,3,224,224]" for vi in real_inputs if declared.get(vi.name) is None)
            return self.error(f"{what}{', '.join(parts)}; give their shapes, e.g. --input-shapes \"{hint}\"")

        def example(rng=None, size=None):
            """(the options, None when the model imports with them, else the import's error)"""
            dims, shapes = self._example(real_inputs, input_shapes, declared, unresolved, rng, size)
            flags = "".join(f" --dim-range {p}={lo}..{hi}" for p, (lo, hi) in dims.items())
            if shapes:
                flags += " --input-shapes \"" + " ".join(f"{n}:{_fmt_given(d)}" for n, d in shapes.items()) + "\""
            try:
                _Importer(self.proto, self.label, self.value_ranges, dims).run(shapes)
            except TVMCError as e:
                return flags, str(e).removeprefix(f"{self.label}: ")
            return flags, None

        def first(candidates):
            tried = []
            for flags, failure in candidates:
                if failure is None:
                    return flags, None
                tried.append((flags, failure))
            return tried[0]

        (ranged, range_error), (fixed, size_error) = (first(example(rng=r) for r in _EXAMPLE_RANGES),
                                                      first(example(size=n) for n in _EXAMPLE_SIZES))
        instead = " (without --dim-range)" if self.dim_ranges else ""
        if range_error is None and size_error is None:
            hint = f"bound each, e.g.{ranged}, or fix one size, e.g.{fixed}{instead}"
        elif size_error is None:
            hint = f"fix each, e.g.{fixed}{instead} (with ranges such as{ranged}: {range_error})"
        else:
            hint = f"give each a range or a size, e.g.{ranged}, or{fixed}; with these: {range_error}"
        return self.error(f"{what}{', '.join(parts)}; {hint}")

    def _example(self, real_inputs, input_shapes, declared, unresolved, rng=None, size=None) -> tuple:
        """(dim_ranges, input_shapes) of an example compile: with the range `rng` = (lo, hi), every
        unresolved dim_param bounded by it (beside the --dim-range given) and the inputs with an
        unnamed unresolved dimension given in --input-shapes (beside those given) with `rng` there;
        with the int `size`, no ranges: every input with a dimension that is not an int given in
        --input-shapes, `size` in each such dimension (clamped to the range given for it)."""
        fixed = {}  # dim_param -> the size an --input-shapes int gives it
        for name, shape in input_shapes.items():
            for d, dd in zip(shape, declared.get(name) or ()):
                if isinstance(dd, str) and not _is_range(d):
                    fixed[dd] = int(d)
        if rng is not None:
            dims = {**self.dim_ranges, **{p: rng for _, _, p in unresolved if p}}
            shapes = dict(input_shapes)
            for name in dict.fromkeys(n for n, _, p in unresolved if not p):
                shapes[name] = tuple(d if isinstance(d, int) else fixed.get(d) or dims.get(d, rng)
                                     for d in declared[name])
            return dims, shapes

        def one(d, given=None):
            if isinstance(given, int) or isinstance(d, int) and given is None:
                return given if given is not None else d
            if isinstance(d, str) and d in fixed and given is None:
                return fixed[d]
            lo, hi = given if _is_range(given) else self.dim_ranges.get(d, (size, size)) if isinstance(d, str) \
                else (size, size)
            return min(max(size, lo), hi)

        shapes = {}
        for vi in real_inputs:
            dims = declared.get(vi.name)
            given = input_shapes.get(vi.name)
            if dims is None or (given is None and all(isinstance(d, int) for d in dims)):
                continue
            shapes[vi.name] = tuple(one(d, g) for d, g in zip(dims, given or (None,) * len(dims)))
        return {}, shapes

    def _make_input(self, vi, shape) -> Var:
        """The graph input of ONNX input `vi` with its resolved `shape` (_resolve_shapes)."""
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise self.error(f"graph input '{vi.name}' is not a tensor")
        dtype = np_dtype_name(tt.elem_type)
        if dtype not in SUPPORTED_DTYPES:
            raise self.error(f"graph input '{vi.name}' has dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
        return Var(vi.name, self._input_type(vi.name, tuple(shape), dtype))

    def _input_type(self, name, shape, dtype) -> TensorType:
        try:
            return TensorType(shape, dtype)
        except ValueError as e:  # a negative dimension, a tensor beyond MAX_TENSOR_BYTES
            raise self.error(f"graph input '{name}': {e}") from None

    def _infer(self, real_inputs, input_shapes):
        """ONNX shape inference (with input overrides applied: ints, and a size variable as a
        dim_param of its name) -> self.inferred[name] = TensorType for every tensor whose shape ONNX
        knows statically; used to cross-check our types."""
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
                        if symbolic.is_symbolic(d):
                            shape.dim.add().dim_param = _var_name(d)
                        else:
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
            result = None
            if any(isinstance(e, SymbolicValue) for e in inputs):  # shape arithmetic on symbolic values
                result = fold_symbolic(ctx, node.op_type, inputs, attrs, opset)
            if result is None:
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

    def materialize(self, e, user: str):
        """`e` itself, or for a SymbolicValue the call (made once per value) of shape_to_tensor that
        gives its values as a tensor at run time, named after `user`."""
        if not isinstance(e, SymbolicValue):
            return e
        if e not in self.materialized:
            values = tuple(e.values.reshape(-1).tolist())
            self.materialized[e] = make_call("shape_to_tensor", [], {"values": values, "shape": e.shape,
                                                                     "dtype": e.dtype}, name=f"{user}.shape")
        return self.materialized[e]

    def unique_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.used_names:
            name = f"{base}_{k}"
            k += 1
        self.used_names.add(name)
        return name


# Candidates of the example commands of the unresolved-dimensions error, tried in turn (the first
# with which the model imports is shown): ranges for every symbolic dimension, then one size.
_EXAMPLE_RANGES = ((1, 256), (1, 64), (32, 1024))
_EXAMPLE_SIZES = (64, 224)


def _is_range(d) -> bool:
    """True for a dimension given as a range (lo, hi) (--input-shapes "x:[1,1..512]")."""
    return isinstance(d, tuple) and len(d) == 2


def _valid_range(d) -> bool:
    """True for a pair (lo, hi) of ints with 0 <= lo <= hi."""
    return isinstance(d, tuple) and len(d) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in d) and 0 <= d[0] <= d[1]


def _fmt_given(shape) -> str:
    """'[1,1..512]': a shape of ints and (lo, hi) ranges as --input-shapes writes it."""
    return "[" + ",".join(f"{d[0]}..{d[1]}" if _is_range(d) else str(int(d)) for d in shape) + "]"


def _declared_dims(vi):
    """The dims an ONNX tensor input declares: None without a shape, else a list of ints
    (dim_value), strs (dim_param) and None (neither)."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def _as_declared(vi, shape) -> bool:
    """True when the resolved `shape` says no more than input `vi` declares: its ints, and the
    size variable of each dim_param (so ONNX shape inference needs no override)."""
    dims = _declared_dims(vi)
    if dims is None or len(dims) != len(shape):
        return False
    for d, r in zip(dims, shape):
        if isinstance(d, str):
            if _var_name(r) != d:
                return False
        elif d != r:
            return False
    return True


def _var_name(d):
    """The name of the size variable that dimension `d` is, or None (an int, an expression)."""
    if not symbolic.is_symbolic(d) or len(d.terms) != 1:
        return None
    (mono, coeff), = d.terms
    return mono[0].name if coeff == 1 and len(mono) == 1 and isinstance(mono[0], symbolic.SizeVar) else None


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
        FakeQuantizationToInteger turns into an integer op). A SymbolicValue input becomes its
        shape_to_tensor call; a call with a symbolic type or attribute is never folded."""
        inputs = [self.importer.materialize(e, self.name) for e in inputs]
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
        if fold and inputs and all(is_const(e) for e in inputs) and not call.is_symbolic \
                and get_op(op).foldable and (
                all(e.value.dtype.kind in "biu" for e in inputs) or call.type.size <= _FOLD_AT_IMPORT_MAX) \
                and ir.constant_bytes(call.shape, call.dtype) <= ir.MAX_CONSTANT_BYTES:
            # shape arithmetic on constants (Neg of an axis, Equal of shapes, a window length
            # through Cast and Sub, ...) is folded at import, so later shape-determining inputs
            # stay constant; larger float constants are left to the FoldConstant pass
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

    def shape_operand(self, inputs, i: int):
        """The value of input `i` when it is known at import: a Constant's array, or a
        SymbolicValue's object array (ints and SymExprs); None when it is computed at run time or
        absent."""
        e = inputs[i] if i < len(inputs) else None
        if isinstance(e, SymbolicValue):
            return e.values
        if isinstance(e, ir.Constant):
            return e.value
        return None

    def input_name(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else f"#{i}"

    def constant(self, inputs, i: int, what: str) -> np.ndarray:
        """The value of input `i`, which must be a Constant (initializer or foldable)."""
        e = inputs[i] if i < len(inputs) else None
        if e is None:
            raise self.error(f"missing input {what}")
        if isinstance(e, SymbolicValue):
            raise self.error(f"input {what} ('{self.input_name(i)}') is {_fmt_values(e)}, computed from symbolic "
                             f"dimensions ({symbolic.describe_vars(e.values.reshape(-1).tolist())}); {self.op_type} "
                             f"needs it constant")
        if not isinstance(e, ir.Constant):
            raise self.error(f"input {what} ('{self.input_name(i)}') must be a constant (initializer or "
                             f"computable at import); tvmc needs static shapes")
        return e.value


def _fmt_values(e: SymbolicValue) -> str:
    return "[" + ", ".join(str(v) for v in e.values.reshape(-1).tolist()) + "]"


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
