"""The ONNX converter table: op type -> converter, with the operator versions each implements."""

from __future__ import annotations

from typing import Callable

import onnx.defs


# ---------------------------------------------------------------------------------------------
# Converter table: CONVERTERS[op_type] is a function named after the ONNX op type,
# `fn(ctx, node, inputs, attrs, opset) -> Expr | np.ndarray`; `fn.versions` lists the operator
# versions (ONNX schema `since_version`s) it implements. An np.ndarray result is a value folded
# at import (shape arithmetic) and becomes a Constant named after the node's output tensor.
# ---------------------------------------------------------------------------------------------

CONVERTERS: dict[str, Callable] = {}

# Converters of operators outside the default domain (onnxruntime's `com.microsoft` quantized
# operators, microsoft.py and microsoft_nn.py): DOMAIN_CONVERTERS[(domain, op_type)], same signature; `fn.versions`
# lists the versions of that domain's operator set it implements.
DOMAIN_CONVERTERS: dict[tuple, Callable] = {}


def converter(*versions: int):
    def register(fn):
        fn.versions = frozenset(versions)
        CONVERTERS[fn.__name__] = fn
        return fn
    return register


def domain_converter(domain: str, *versions: int):
    """Register a converter of `domain`'s operator named like the function, for the versions
    `versions` of that domain's operator set."""
    def register(fn):
        fn.versions = frozenset(versions)
        DOMAIN_CONVERTERS[(domain, fn.__name__)] = fn
        return fn
    return register


def find_domain_converter(op_type: str, opset: int, domain: str):
    """The converter of `op_type` in the non-default `domain` at that domain's model opset `opset`,
    or None."""
    fn = DOMAIN_CONVERTERS.get((domain, op_type))
    return fn if fn is not None and opset in fn.versions else None


def supports(op_type: str, opset: int, domain: str = "") -> bool:
    """True when `op_type` of `domain` at the model's opset `opset` for that domain imports: it has
    a converter here (default domain, or DOMAIN_CONVERTERS), or an ONNX function body
    (functions.py; default domain and functions.FUNCTION_DOMAINS) made of operators that import."""
    from tvmc.frontend.onnx.functions import expandable

    return (domain in ("", "ai.onnx") and has_converter(op_type, opset)) \
        or find_domain_converter(op_type, opset, domain) is not None or expandable(op_type, opset, domain)


def has_converter(op_type: str, opset: int) -> bool:
    """True when `op_type` (default domain) at model opset `opset` has a converter here."""
    fn = CONVERTERS.get(op_type)
    if fn is None:
        return False
    try:
        since = onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:  # onnx.defs.SchemaError: no version of the op at this opset
        return False
    return since in fn.versions


def defined_versions(op_type: str, domain: str = "") -> list:
    """The operator versions (schema `since_version`s) the installed onnx defines for `op_type`
    in `domain` (the default one unless given), ascending."""
    return sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                  if s.name == op_type and s.domain == domain)


def operator_table() -> str:
    """The supported-operator table of docs/onnx_operators.md (Markdown), generated from
    CONVERTERS: per ONNX op type its converter group (module of tvmc/frontend/onnx), the operator
    versions converted and the versions the installed onnx defines that are not; then the
    operators imported through their function body, and those of DOMAIN_CONVERTERS."""
    lines = ["# Supported ONNX operators",
             "",
             "Generated from the converter table (tvmc/frontend/onnx/registry.py) by "
             "`python -m tvmc.frontend.onnx`; do not edit by hand. A model imports when every node's "
             f"operator version (the newest one at or below the model's opset) is listed. onnx {onnx.__version__}, "
             f"{len(CONVERTERS)} operators.",
             "",
             "| operator | group | versions | not converted |",
             "| --- | --- | --- | --- |"]
    for op in sorted(CONVERTERS):
        fn = CONVERTERS[op]
        missing = [v for v in defined_versions(op) if v not in fn.versions]
        lines.append(f"| {op} | {fn.__module__.rsplit('.', 1)[-1]} | {', '.join(map(str, sorted(fn.versions)))} | "
                     f"{', '.join(map(str, missing)) or '-'} |")
    from tvmc.frontend.onnx.functions import FUNCTION_DOMAINS, expandable

    lines += ["", "## Imported through their ONNX function body", "",
              "Operators without a converter whose schema defines a function body: each node is imported as "
              "its body (tvmc/frontend/onnx/functions.py), which imports when every operator in it does. "
              "Operators of another domain are named with it.", "",
              "| operator | versions with a function body |", "| --- | --- |"]
    for domain in ("", *FUNCTION_DOMAINS):
        names = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == domain}
        for op in sorted(names - set(CONVERTERS) if domain == "" else names):
            versions = [v for v in defined_versions(op, domain) if expandable(op, v, domain)]
            if versions:
                lines.append(f"| {f'{domain}.' if domain else ''}{op} | {', '.join(map(str, versions))} |")
    lines += ["", "## Operators of other domains", "",
              "Converted by DOMAIN_CONVERTERS (onnxruntime's `com.microsoft` quantized operators: "
              "tvmc/frontend/onnx/microsoft.py, microsoft_nn.py); any other operator of those domains is refused.",
              "",
              "| operator | group | versions of its domain's operator set |", "| --- | --- | --- |"]
    for (domain, op), fn in sorted(DOMAIN_CONVERTERS.items()):
        versions = ", ".join(map(str, sorted(fn.versions)))
        lines.append(f"| {domain}.{op} | {fn.__module__.rsplit('.', 1)[-1]} | {versions} |")
    return "\n".join(lines) + "\n"
