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
            for r in readers:
                r.start()
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
