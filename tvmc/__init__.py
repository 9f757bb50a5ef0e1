"""tvmc: a deep-learning model compiler (ONNX in, a deployable .tar out)."""

__version__ = "0.1.0"

# Version of the kernel C ABI written into metadata.json and checked by `tvmc run`.
KERNEL_ABI_VERSION = 1
