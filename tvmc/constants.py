"""Facts several stages share, in a leaf module that imports nothing of tvmc: its version, the
kernel C ABI version that metadata.json and every runtime check, and the names of artifact
members that code outside tvmc.package writes or reads."""

__version__ = "0.1.0"

# Version of the kernel C ABI written into metadata.json and checked by `tvmc run`.
KERNEL_ABI_VERSION = 5

# a CUDA artifact's PTX assembled for its GPU (tvmc.codegen.nvptx), where ptxas was found
CUBIN_NAME = "mod.cubin"
