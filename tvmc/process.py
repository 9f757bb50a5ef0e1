"""Child processes of every stage (the linker, the C compiler, ptxas, the C runner under qemu):
bounded output, no temporary file or process left behind.

`run_tool` starts the command in a process group of its own with a private temporary folder
(TMPDIR, where gcc writes its cc*.s and cc*.o), keeps at most `max_output_bytes` of its stdout
and of its stderr (the rest is read and dropped, so a chatty tool neither blocks nor fills
memory), and on any exit of the caller's wait (an error, Ctrl-C, SIGTERM, SIGHUP, a timeout)
kills the whole group (the driver, cc1, as, ld, qemu) and removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass

MAX_TOOL_OUTPUT_BYTES = 1 << 20


@dataclass(frozen=True)
class ToolResult:
    """What a finished tool left: its exit status (negative: the signal that ended it), and the
    first `max_output_bytes` of its stdout and stderr (decoded, undecodable bytes replaced)."""

    returncode: int
    stdout: str
    stderr: str


def _drain(stream, keep: int, out: list) -> None:
    """Read `stream` to its end, keeping its first `keep` bytes in out[0]."""
    kept = bytearray()
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        if len(kept) < keep:
            kept += chunk[:keep - len(kept)]
    out.append(bytes(kept))


# The signals tvmc turns into exceptions in the main thread (KeyboardInterrupt, tvmc.errors.Terminated).
HANDLED_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _start_without_signals(threads) -> None:
    """Start `threads` with HANDLED_SIGNALS blocked in them. POSIX delivers a signal sent to the
    process to any thread that does not block it; one taken by a thread blocked in read() would
    leave the main thread waiting for the tool (Python runs handlers in the main thread only, when
    its wait returns): blocked in the readers, every such signal interrupts the main thread's wait.
    The threads inherit the mask in force when they start; a signal arriving meanwhile is pending
    until the caller's mask is restored, and then goes to a thread that takes it."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    try:
        for t in threads:
            t.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of `proc` (started with start_new_session) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait()


def run_tool(cmd: list, *, cwd=None, env: dict | None = None, timeout_s: float | None = None,
             max_output_bytes: int = MAX_TOOL_OUTPUT_BYTES) -> ToolResult:
    """Run `cmd` (a list) to its end as the module docstring says; returns a ToolResult.

    Raises OSError when it cannot start (FileNotFoundError for a missing program),
    subprocess.TimeoutExpired after `timeout_s` seconds (the group killed), and lets
    KeyboardInterrupt and tvmc.errors.Terminated through after killing the group."""
    tmp = tempfile.mkdtemp(prefix="tvmc-tool-")
    try:
        child_env = dict(os.environ if env is None else env, TMPDIR=tmp)
        proc = subprocess.Popen(cmd, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        outputs: dict = {"out": [], "err": []}
        readers = [threading.Thread(target=_drain, args=(stream, max_output_bytes, outputs[key]), daemon=True)
                   for stream, key in ((proc.stdout, "out"), (proc.stderr, "err"))]
        try:
            _start_without_signals(readers)
            returncode = proc.wait(timeout_s)
        except BaseException:
            kill_group(proc)
            raise
        finally:
            kill_group(proc)   # what the tool left running in its group (a daemon, a stuck cc1)
            for r in readers:
                r.join(timeout=10)  # a grandchild that left the group may hold a pipe: do not wait for it
            proc.stdout.close()
            proc.stderr.close()
        text = [(outputs[k] or [b""])[0].decode("utf-8", errors="replace") for k in ("out", "err")]
        return ToolResult(returncode, *text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
