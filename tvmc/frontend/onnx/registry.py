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


def converter(*versions: int):
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
