"""Runtime stage: load a mod.tar and execute it (CPU targets; other runtimes are planned)."""

from tvmc.runtime.executor import GraphExecutor, benchmark

__all__ = ["GraphExecutor", "benchmark"]
