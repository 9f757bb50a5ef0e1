"""ONNX function operators: an op whose schema defines a function body (RMSNormalization,
GroupNormalization, Attention, RotaryEmbedding, the window functions, ...) and that has no
converter of its own is imported as its body, node by node, through the converter table. Besides
the default domain, the ops of FUNCTION_DOMAINS import this way (FlexAttention of
ai.onnx.preview, whose body inlines its score_mod / prob_mod graphs).

The body is the one the installed onnx defines for the model's opset (context-dependent bodies
are built from the node's attributes and input types), so its math is the primitive operators'
computes in tvmc/ops. Source: ONNX IR spec, "Functions" (onnx/docs/IR.md), and the schemas'
`function_opset_versions` / `context_dependent_function_opset_versions`.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
from onnx import FunctionProto, NodeProto, TypeProto


# Non-default operator domains whose function ops import through their body (the training domain
# stays out: its ops are gradients and optimizers).
FUNCTION_DOMAINS = ("ai.onnx.preview",)


def _schema(op_type: str, opset: int, domain: str = ""):
    if domain not in ("", "ai.onnx", *FUNCTION_DOMAINS):
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
    except Exception:  # onnx.defs.SchemaError: no version of the op at this opset
        return None


def _body_opset(versions, opset: int):
    """The newest function-body opset at or below the model's `opset`, or None."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def expandable(op_type: str, opset: int, domain: str = "") -> bool:
    """True when `op_type` of `domain` at the model's opset `opset` for that domain has a function
    body (False for a domain outside the default one and FUNCTION_DOMAINS)."""
    schema = _schema(op_type, opset, domain)
    if schema is None:
        return False
    return (_body_opset(schema.function_opset_versions, opset) is not None
            or _body_opset(schema.context_dependent_function_opset_versions, opset) is not None)


def function_body(node: NodeProto, opset: int, input_types: list, default_opset: int) -> tuple:
    """(FunctionProto, the body's default-domain opset, the node's attributes with the schema's
    defaults filled in) for `node` at the model's opset `opset` for the node's domain.

    input_types: per node input position, (onnx elem type, shape) or None for a missing optional
    input; context-dependent bodies are built from them. default_opset: the model's default-domain
    opset, the body's when the body imports none of its own (FlexAttention's). Raises ValueError
    when the op has no function body at this opset.
    """
    schema = _schema(node.op_type, opset, node.domain)
    if schema is None:
        raise ValueError(f"{node.op_type} is not defined at opset {opset}")
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attrs and spec.default_value.type:
            attrs[name] = spec.default_value
    full = NodeProto()
    full.CopyFrom(node)
    del full.attribute[:]
    full.attribute.extend(attrs.values())
    fn = FunctionProto()
    plain = _body_opset(schema.function_opset_versions, opset)
    if plain is not None:
        fn.ParseFromString(schema.get_function_with_opset_version(plain))
    else:
        version = _body_opset(schema.context_dependent_function_opset_versions, opset)
        if version is None:
            raise ValueError(f"{node.op_type}-{schema.since_version} has no function body")
        types = [_type_proto(t).SerializeToString() for t in input_types]
        fn.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            version, full.SerializeToString(), types))
    body_opset = next((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")), default_opset)
    return fn, body_opset, attrs


def _type_proto(t) -> TypeProto:
    if t is None:
        return TypeProto()
    elem, shape = t
    return onnx.helper.make_tensor_type_proto(elem, shape)


def tensor_type(dtype: str, shape) -> tuple:
    """(onnx elem type, shape) of a tensor of numpy dtype name `dtype`."""
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape)


def inline(node: NodeProto, fn: FunctionProto, attrs: dict, prefix: str) -> list:
    """The body's nodes with the function's formal inputs and outputs renamed to the node's actual
    ones (a missing optional input becomes ''), every other tensor name prefixed with `prefix` (in
    subgraphs too), and attribute references (`ref_attr_name`) replaced by the caller's attribute,
    or dropped when the caller has none (the inner op's default applies)."""
    names = {formal: (node.input[k] if k < len(node.input) else "") for k, formal in enumerate(fn.input)}
    for k, formal in enumerate(fn.output):
        if k < len(node.output) and node.output[k]:
            names[formal] = node.output[k]

    def rename(name: str) -> str:
        if name in names:
            return names[name]
        return prefix + name if name else ""

    return [_renamed(inner, rename, attrs, prefix) for inner in fn.node]


def _renamed(inner: NodeProto, rename, attrs: dict, prefix: str) -> NodeProto:
    new = NodeProto()
    new.CopyFrom(inner)
    new.name = prefix + (inner.name or inner.output[0])
    del new.input[:], new.output[:], new.attribute[:]
    new.input.extend(rename(n) for n in inner.input)
    new.output.extend(rename(n) for n in inner.output)
    for a in inner.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                ref = onnx.AttributeProto()
                ref.CopyFrom(attrs[a.ref_attr_name])
                ref.name = a.name
                new.attribute.append(ref)
            continue
        if a.type == onnx.AttributeProto.GRAPH:
            sub = onnx.AttributeProto()
            sub.CopyFrom(a)
            for vi in list(sub.g.input) + list(sub.g.output):
                vi.name = rename(vi.name)
            nodes = [_renamed(n, rename, attrs, prefix) for n in a.g.node]
            del sub.g.node[:]
            sub.g.node.extend(nodes)
            new.attribute.append(sub)
            continue
        new.attribute.append(a)
    return new
