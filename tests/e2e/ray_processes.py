"""Processes of a local Ray cluster for tests/e2e/test_cluster.py and bench/cluster_bench.py:
a free port, `ray start` / `tvmc device-worker` processes in sessions of their own, and their stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, log, env: dict) -> subprocess.Popen:
    """`cmd` in a new process session with environment `env`, its output to the file `log`."""
    return subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """Stop a process started by `start`, then what it left in its session. SIGTERM goes to the
    process alone: `ray start` stops its node's processes itself, and a head whose GCS server
    was signalled with it would wait 30 s to drain through the GCS it lost; another signal
    (SIGKILL: a node that dies) goes to the whole session."""
    if proc.poll() is None:
        (os.kill if sig == signal.SIGTERM else os.killpg)(proc.pid, sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
