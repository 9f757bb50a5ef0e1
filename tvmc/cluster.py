"""Clusters: devices and builders on Ray (DESIGN.md sections 8 and 9; issue 32).

A cluster is a Ray cluster (PyPI `ray`, the `cluster` extra). Any node with CPUs builds tuning
candidates (Ray tasks, as many at a time as the cluster has CPUs outside its device nodes); a
device node is one started by `tvmc device-worker --key KEY` (a wrapper of `ray start`) and
advertises the custom resource `tvmc-device:KEY` (one unit: one measurement or run at a time
there) and node labels naming its key, its target and whether it measures natively or under an
emulator (qemu-user). Ray carries every message: no socket or RPC of tvmc's own.

`--cluster ADDRESS` is `ray://HOST:10001` (Ray client), `HOST:6379` (a head's GCS port) or
`local`: a Ray instance started in this process whose one node is both builder and device KEY.

Here: connecting (connect, cluster_session), the device labels (list_devices), the device
worker (device_worker_command, start_device_worker; --emulate: check_device_host), the device's
thread count in its tasks (device_threads) and `tvmc run --cluster` (run_on_device).
Tuning's measurer on a cluster is tvmc.autotune.cluster.ClusterMeasurer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from tvmc.errors import ClusterError, TVMCError

RESOURCE_PREFIX = "tvmc-device:"
LABEL_KEY = "tvmc-device-key"
LABEL_TARGET = "tvmc-target"
LABEL_MODE = "tvmc-measure"          # "native" or "emulated"
LOCAL = "local"
PROBE_TIMEOUT_S = 5.0
# Ray's label values (and so device keys): letters, digits, '-', '_', '.', at most 63
_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")


def ray_module():
    """The `ray` module. Raises ClusterError (one line, the install command) when it is missing."""
    try:
        import ray
    except ImportError:
        raise ClusterError("--cluster needs Ray, which is not installed: pip install 'tvmc[cluster]' "
                           "(or pip install 'ray>=2.9')") from None
    return ray


def device_resource(key: str) -> str:
    """The custom resource of device `key` ("tvmc-device:KEY"). Raises ClusterError on a key that
    is not a Ray label value (letters, digits, '-', '_', '.'; at most 63)."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise ClusterError(f"device key {key!r}: use letters, digits, '-', '_' and '.' (at most 63 characters, "
                           f"starting and ending with a letter or digit)")
    return RESOURCE_PREFIX + key


def parse_address(address: str) -> tuple:
    """(host, port) of a --cluster ADDRESS (`ray://host:port` or `host:port`), or None for `local`.
    Raises ClusterError on anything else."""
    if address == LOCAL:
        return None
    m = re.match(r"^(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$", str(address))
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ClusterError(f"cluster address {address!r}: expected ray://HOST:PORT (Ray client, port 10001), "
                           f"HOST:PORT (a head's GCS, port 6379) or 'local'")
    return m.group(1).strip("[]"), int(m.group(2))


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise ClusterError (one line naming `address`) when nothing accepts a TCP connection at
    the address's host and port within `timeout_s` seconds: a quick answer where ray.init would
    retry for a minute. Ray's own handshake then follows."""
    host_port = parse_address(address)
    if host_port is None:
        return
    try:
        with socket.create_connection(host_port, timeout=timeout_s):
            pass
    except OSError as e:
        why = e.strerror or str(e) or type(e).__name__
        if isinstance(e, socket.timeout):
            why = f"no answer within {timeout_s:g} s"
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {why}") from None


def _quiet_ray_logging() -> None:
    """Ray's INFO and WARNING lines (start-up, token authentication) stay off tvmc's output."""
    for name in ("ray", "ray._private", "ray.util"):
        logging.getLogger(name).setLevel(logging.ERROR)


def connect(address: str, device_key: str | None = None, target=None, num_cpus: int | None = None) -> None:
    """Connect this process to the Ray cluster at `address` (see the module docstring), unless it
    is connected already. `local` starts a Ray instance here, without its dashboard, with
    `num_cpus` CPUs (default: all) whose node is device `device_key` for `target` too.

    Raises ClusterError (one line naming the address) when Ray is missing, the address is
    malformed or unreachable, or Ray refuses the connection (e.g. a wrong auth token)."""
    ray = ray_module()
    if ray.is_initialized():
        return
    _quiet_ray_logging()
    common = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": False}
    if address == LOCAL:
        resources, labels = {}, {}
        if device_key:
            resources[device_resource(device_key)] = 1
            labels = device_labels(device_key, target, emulated=False)
        try:
            # address "local": a new instance, never one that RAY_ADDRESS or the last `ray start` names
            ray.init(address="local", num_cpus=num_cpus, resources=resources, labels=labels, include_dashboard=False,
                     **common)
        except Exception as e:
            raise ClusterError(f"cannot start a local Ray instance: {_first_line(e)}") from None
        return
    probe(address)
    try:
        ray.init(address=address, **common)
    except Exception as e:
        raise ClusterError(f"cannot connect to the Ray cluster at {address}: {_first_line(e)}") from None


def disconnect() -> None:
    """Leave the cluster (a `local` instance stops)."""
    ray = ray_module()
    if ray.is_initialized():
        ray.shutdown()


@contextlib.contextmanager
def cluster_session(address: str, device_key: str | None = None, target=None, num_cpus: int | None = None):
    """connect() for the duration of a with block, then disconnect() when this call connected."""
    ray = ray_module()
    ours = not ray.is_initialized()
    connect(address, device_key, target, num_cpus)
    try:
        yield ray
    finally:
        if ours:
            disconnect()


def device_labels(key: str, target, emulated: bool) -> dict:
    """The node labels of device `key`: its key, its target's name ("-" when not given), how it
    measures ("native" or "emulated")."""
    name = getattr(target, "name", None) or "-"
    return {LABEL_KEY: key, LABEL_TARGET: name if _KEY.match(name) else "-",
            LABEL_MODE: "emulated" if emulated else "native"}


def list_devices() -> list:
    """The devices of the connected cluster, one dict per live device node, sorted by key:
    key, target (the name the device worker checked, "-" when unknown), measure ("native" or
    "emulated"), node (its address), cpus. A node that advertises `tvmc-device:KEY` without the
    labels (started by a plain `ray start`) is listed with target "-"."""
    ray = ray_module()
    out = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        labels = node.get("Labels") or {}
        resources = node.get("Resources") or {}
        keys = [r[len(RESOURCE_PREFIX):] for r in resources if r.startswith(RESOURCE_PREFIX)]
        for key in keys:
            own = labels.get(LABEL_KEY) == key
            out.append({"key": key, "target": labels.get(LABEL_TARGET, "-") if own else "-",
                        "measure": labels.get(LABEL_MODE, "native") if own else "native",
                        "node": node.get("NodeManagerAddress", "?"), "cpus": int(resources.get("CPU", 0))})
    return sorted(out, key=lambda d: (d["key"], d["node"]))


def device_nodes(key: str) -> list:
    """Live nodes (ray.nodes() entries) that offer device `key`."""
    ray = ray_module()
    resource = device_resource(key)
    return [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get(resource, 0) > 0]


def format_devices(devices: list, address: str) -> str:
    """The table of `tvmc tune --cluster ADDRESS --list-devices`."""
    if not devices:
        return f"no devices in the Ray cluster at {address} (start one with tvmc device-worker --address ... --key KEY)"
    lines = [f"{len(devices)} device{'s' * (len(devices) != 1)} in the Ray cluster at {address}",
             f"{'key':<20} {'target':<20} {'measures':<9} {'node':<16} {'cpus':>4}"]
    for d in devices:
        lines.append(f"{d['key']:<20} {d['target']:<20} {d['measure']:<9} {d['node']:<16} {d['cpus']:>4}")
    return "\n".join(lines)


# ---- the device worker --------------------------------------------------------------------

def check_device_host(target, emulate: bool = False) -> bool:
    """Whether this host measures `target` under an emulator (True) or natively (False), after
    the backend's checks (tvmc.backends: Backend.device_missing: architecture, CPU features, GPU
    driver, emulator). A target this host runs only under its emulator (another CPU
    architecture, qemu-user) needs `emulate`, the explicit opt-in of `tvmc device-worker
    --emulate` (the device's times are then the emulator's: for trying the routing of a cluster,
    not for tuning); `emulate` on a target this host runs natively is refused.

    Raises ClusterError with the reason when it cannot run the target, or `emulate` does not fit."""
    from tvmc.backends import backend_for
    from tvmc.target import host_arch

    why, emulated = backend_for(target).device_missing(target)
    if why:
        raise ClusterError(f"this host cannot be a device for target {target.name}: {why}")
    if emulated and not emulate:
        raise ClusterError(f"this {host_arch()} host runs target {target.name}'s {target.arch} code only under "
                           f"emulation ({target.emulator[0]}): --emulate makes it a device whose times are the "
                           f"emulator's (to try a cluster, not to tune)")
    if emulate and not emulated:
        raise ClusterError(f"--emulate: this host runs target {target.name} natively ({host_arch()}), no emulator "
                           f"needed")
    return emulated


def device_worker_command(address: str, key: str, target, emulated: bool, num_cpus: int = 1,
                          block: bool = True) -> list:
    """The `ray start` command line that makes this host device `key` of the cluster whose head is
    at `address` (HOST:PORT, the head's GCS port): the resource `tvmc-device:KEY` (1), the
    labels of device_labels, `num_cpus` CPUs (1: builds land elsewhere, see
    tvmc.autotune.cluster), no dashboard agent's UI, and with `block` the command stays in the
    foreground until interrupted."""
    cmd = [str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray",
           "start", "--address", address, "--num-cpus", str(int(num_cpus)),
           "--resources", json.dumps({device_resource(key): 1}),
           "--labels", ",".join(f"{k}={v}" for k, v in device_labels(key, target, emulated).items()),
           "--disable-usage-stats"]
    return cmd + (["--block"] if block else [])


def start_device_worker(address: str, key: str, target, num_cpus: int = 1, say=print, emulate: bool = False) -> int:
    """`tvmc device-worker`: check this host runs `target` (check_device_host; `emulate`: under
    its emulator, the opt-in of --emulate), check the head at
    `address` answers (probe), then run the device_worker_command in the foreground until it ends
    (Ctrl-C or SIGTERM stop it, and Ray's node with it). Returns `ray start`'s exit code.

    Raises ClusterError when the host cannot run the target (the reason, once), the address is
    malformed or unreachable, or the `ray` command is missing."""
    import signal
    import subprocess

    from tvmc.process import kill_group

    emulated = check_device_host(target, emulate)
    ray_module()
    if address.startswith("ray://"):
        raise ClusterError(f"cluster address {address}: a device joins through the head's GCS port "
                           f"(HOST:6379), not the Ray client's ray:// address")
    probe(address)
    cmd = device_worker_command(address, key, target, emulated, num_cpus)
    if not (os.path.exists(cmd[0]) or shutil.which(cmd[0])):
        raise ClusterError(f"the `ray` command is not installed beside {sys.executable}: pip install 'tvmc[cluster]'")
    how = f"under emulation ({target.emulator[0]}: its times are not the device's)" if emulated else "natively"
    say(f"device {key}: target {target.name}, measured {how}; joining the Ray cluster at {address}")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    # a session of its own: Ctrl-C and SIGTERM reach tvmc, which stops `ray start` (and so the
    # node's processes) with SIGTERM and waits for it
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        kill_group(proc)
        raise


# ---- tvmc run --cluster -------------------------------------------------------------------

def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _in_initial_environment(name: str) -> bool:
    """Whether `name` was in this process's environment when it started (/proc/self/environ, on
    Linux; elsewhere: True), not set since."""
    try:
        with open("/proc/self/environ", "rb") as f:
            return any(entry.startswith(name.encode() + b"=") for entry in f.read().split(b"\0"))
    except OSError:
        return True


@contextlib.contextmanager
def device_threads():
    """In a Ray task on a device: OMP_NUM_THREADS as the device worker was started with, while
    the with block runs. Ray sets OMP_NUM_THREADS to a task's CPUs (1 on a device node) when the
    node's environment has none (ray._private.utils.set_omp_num_threads_if_unset); kernels run
    under it would use one thread where tvmc run and local tuning use all the device's cores (an
    OpenMP program's default). So a value Ray set is removed here, and put back after."""
    value = os.environ.get("OMP_NUM_THREADS")
    injected = value is not None and not _in_initial_environment("OMP_NUM_THREADS")
    if injected:
        del os.environ["OMP_NUM_THREADS"]
    try:
        yield
    finally:
        if injected:
            os.environ["OMP_NUM_THREADS"] = value


def _run_on_node(run, tar: bytes, name: str, inputs: dict, kwargs: dict):
    """On the device: write the artifact to a private folder and run it with `run` (tvmc.api.run,
    passed by the caller: this module does not import the API); returns (RunResult, this node's
    description)."""
    from tvmc.target import host_arch

    folder = tempfile.mkdtemp(prefix="tvmc-device-run-")
    try:
        path = os.path.join(folder, os.path.basename(name) or "mod.tar")
        with open(path, "wb") as f:
            f.write(tar)
        names = []
        with device_threads():
            result = run(path, inputs, on_device=names.append, **kwargs)
        return result, {"host": socket.gethostname(), "arch": host_arch(), "device": names[0] if names else None}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def unwrap_task_error(e: Exception, what: str) -> Exception:
    """The error to raise for a Ray task's failure `e`: the tvmc error the task raised (its
    TVMCError, unwrapped from Ray's RayTaskError), else a ClusterError naming `what`."""
    ray = ray_module()
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = getattr(e, "cause", None)
        if isinstance(cause, (TVMCError, TypeError, ValueError)):
            return cause
    return ClusterError(f"{what}: {type(e).__name__}: {_first_line(e)}")


def run_on_device(run, artifact: str, key: str, inputs=None, on_device=None, **kwargs):
    """Run the mod.tar at `artifact` on device `key` of the connected cluster with `run`
    (tvmc.api.run, as on this machine; `kwargs`: its fill_mode, seed, repeat, number, threads,
    profile, device, cuda_graph, target); returns its RunResult (artifact: this path). `inputs` is a dict of
    arrays (read on this machine). `on_device(line)` is told where it runs.

    Raises ClusterError when no device has `key` (or it left during the run); the run's own
    errors (ArtifactError, InputError) as tvmc.api.run raises them on the device."""
    ray = ray_module()
    resource = device_resource(key)
    if not device_nodes(key):
        raise ClusterError(f"no device with key {key} in the cluster (tvmc tune --cluster ADDRESS --list-devices "
                           f"lists them)")
    tar = Path(artifact).read_bytes()
    task = ray.remote(_run_on_node).options(resources={resource: 1}, num_cpus=1, max_retries=0,
                                            name=f"tvmc-run:{key}")
    try:
        result, where = ray.get(task.remote(run, tar, os.path.basename(artifact), dict(inputs or {}), kwargs))
    except Exception as e:
        raise unwrap_task_error(e, f"running {artifact} on device {key}") from None
    if on_device is not None:
        on_device(f"{key} ({where['host']}, {where['arch']})" + (f": {where['device']}" if where["device"] else ""))
    result.artifact = artifact
    return result
