"""tvmc.cluster.device_threads: a device's runner uses the threads the device worker was started
with, not the OMP_NUM_THREADS=1 that Ray sets in a one-CPU task (issue 32). Ray itself is not
needed: a child process plays the Ray worker, setting the variable after it started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = """
import os
from tvmc.cluster import device_threads
os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")  # what Ray does when unset
with device_threads():
    inside = os.environ.get("OMP_NUM_THREADS")
print(inside, os.environ.get("OMP_NUM_THREADS"))
"""


@pytest.mark.parametrize("started_with,inside", [(None, "None"), ("3", "3")])
def test_a_thread_count_ray_set_is_lifted_while_the_device_measures(started_with, inside):
    if not os.path.exists("/proc/self/environ"):
        pytest.skip("reads /proc/self/environ (Linux)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if started_with is not None:
        env["OMP_NUM_THREADS"] = started_with
    res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # inside: unset (the OpenMP default: all cores) or the worker's own value; after: as before
    assert res.stdout.split() == [inside, started_with or "1"]
