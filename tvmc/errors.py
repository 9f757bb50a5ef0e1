"""Typed errors of every stage; the CLI maps each class to an exit code and one line of text."""


class TVMCError(Exception):
    """Base class. `str(err)` is the one-line message shown to the user."""

    exit_code = 1


class ModelError(TVMCError):
    """The ONNX file cannot be read, fails onnx.checker, or has inconsistent shapes."""

    exit_code = 2


class UnsupportedOpError(ModelError):
    """The model uses operators (or opset versions) that tvmc does not implement.

    `missing` lists (op_type, opset, [node names]) for every unsupported op type, so a
    user sees all of them at once, before any compilation starts.
    """

    def __init__(self, path, missing):
        self.missing = missing
        parts = []
        for op_type, opset, names in missing:
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} nodes)" if len(names) > 3 else "")
            parts.append(f"{op_type} (opset {opset}) at {shown}")
        super().__init__(f"{path}: unsupported operators: " + "; ".join(parts))


class TargetError(TVMCError):
    """Unknown target name, invalid descriptor, or a target that cannot run on this host."""

    exit_code = 3


class PassError(TVMCError):
    """Unknown pass name, bad pass option, or a pass that failed on a graph."""

    exit_code = 4


class ScheduleError(TVMCError):
    """An operator has no implementation for the target, or a schedule primitive was misused."""

    exit_code = 5


class CodegenError(TVMCError):
    """LLVM verification, compilation or linking failed. Carries the failing command."""

    exit_code = 6


class ArtifactError(TVMCError):
    """A mod.tar is missing files, has a wrong ABI version, or does not match the inputs."""

    exit_code = 7


class InputError(ArtifactError):
    """Inputs given to `tvmc run` have wrong names, shapes or dtypes."""

    exit_code = 8


class TuningError(TVMCError):
    """Tuning records are missing, unreadable, or a tuning run failed."""

    exit_code = 9


class ClusterError(TVMCError):
    """A Ray cluster (--cluster) that cannot be reached, a device key it does not offer, a device
    that cannot run the target, Ray not installed (tvmc.cluster)."""

    exit_code = 10


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM or SIGHUP (installed by
    `tvmc`'s entry point), so cleanup runs as for Ctrl-C. A BaseException, like KeyboardInterrupt,
    so no `except Exception` converts it into another error. `signum` is the signal."""

    def __init__(self, signum: int = 15):
        super().__init__(signum)
        self.signum = signum
