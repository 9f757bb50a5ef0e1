"""tvmc: a deep-learning model compiler (ONNX in, a deployable .tar out)."""

# The LLVM codegen emits opaque pointers (`ptr`); llvmlite's IR layer must be told before it
# is first imported.
import os as _os

_os.environ.setdefault("LLVMLITE_ENABLE_IR_LAYER_TYPED_POINTERS", "0")

from tvmc.constants import KERNEL_ABI_VERSION, __version__  # noqa: E402,F401

# The one-call Python API (tvmc/api.py): tvmc.compile, tvmc.run, tvmc.tune, tvmc.list_tasks,
# loaded when first asked for (PEP 562), so that importing any stage does not import them all.
_API = ("compile", "list_tasks", "run", "tune")


def __getattr__(name):
    if name in _API:
        from tvmc import api

        return getattr(api, name)
    raise AttributeError(f"module 'tvmc' has no attribute '{name}'")
