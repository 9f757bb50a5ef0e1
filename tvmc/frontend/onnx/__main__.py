"""`python -m tvmc.frontend.onnx [path]`: write the supported-operator table (docs/onnx_operators.md)."""

import sys

from tvmc.frontend.onnx.registry import operator_table

path = sys.argv[1] if len(sys.argv) > 1 else "docs/onnx_operators.md"
with open(path, "w") as f:
    f.write(operator_table())
print(f"wrote {path}")
