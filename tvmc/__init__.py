"""tvmc: a deep-learning model compiler (ONNX in, a deployable .tar out)."""

# The LLVM codegen emits opaque pointers (`ptr`); llvmlite's IR layer must be told before it
# is first imported.
import os as _os

_os.environ.setdefault("LLVMLITE_ENABLE_IR_LAYER_TYPED_POINTERS", "0")

# bfloat16 as a numpy dtype (np.dtype("bfloat16"), arrays, casts that round to nearest even):
# ml_dtypes registers it when imported
import ml_dtypes as _ml_dtypes  # noqa: E402,F401

from tvmc.constants import KERNEL_ABI_VERSION, __version__  # noqa: E402,F401

# The one-call Python API (tvmc/api.py: tvmc.compile, tvmc.run, tvmc.tune, tvmc.list_tasks) and
# its options objects, loaded when first asked for (PEP 562), so that importing any stage does not
# import the compiler and the tuner.
_LAZY = {"compile": "tvmc.api", "list_tasks": "tvmc.api", "run": "tvmc.api", "tune": "tvmc.api",
         "CompileOptions": "tvmc.driver", "TuneOptions": "tvmc.autotune.tune",
         "MeasureOptions": "tvmc.autotune.measure"}


def __getattr__(name):
    """tvmc.compile, tvmc.run, tvmc.tune, tvmc.list_tasks and the options objects (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tvmc' has no attribute '{name}'")
