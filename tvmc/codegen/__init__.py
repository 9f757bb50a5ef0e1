"""Code generation: loop IR -> LLVM IR -> object -> shared library."""
