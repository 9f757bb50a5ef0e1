"""tvmc: a deep-learning model compiler (ONNX in, a deployable .tar out)."""

__version__ = "0.1.0"

# Version of the kernel C ABI written into metadata.json and checked by `tvmc run`.
KERNEL_ABI_VERSION = 4

# The LLVM codegen emits opaque pointers (`ptr`); llvmlite's IR layer must be told before it
# is first imported.
import os as _os

_os.environ.setdefault("LLVMLITE_ENABLE_IR_LAYER_TYPED_POINTERS", "0")

# The one-call Python API (tvmc/api.py): tvmc.compile, tvmc.run, tvmc.tune, tvmc.list_tasks.
from tvmc.api import compile, list_tasks, run, tune  # noqa: E402,F401,A004
