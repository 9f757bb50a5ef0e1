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

# The API's options objects, imported on first use (they bring the compiler and the tuner in).
_OPTIONS = {"CompileOptions": "tvmc.driver", "TuneOptions": "tvmc.autotune.tune", "MeasureOptions": "tvmc.autotune.measure"}


def __getattr__(name):
    """tvmc.CompileOptions, tvmc.TuneOptions, tvmc.MeasureOptions (PEP 562)."""
    if name in _OPTIONS:
        import importlib

        return getattr(importlib.import_module(_OPTIONS[name]), name)
    raise AttributeError(f"module 'tvmc' has no attribute '{name}'")
