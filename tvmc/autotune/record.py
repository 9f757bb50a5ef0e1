"""Tuning records: one JSON line per measurement, appended and flushed line by line, so a file
stays readable after a kill (a torn last line is skipped when loading).

A line (format version 1):

    {"version": 1, "target": {"name": "x86", "hash": "<Target.hash>", "tuning_key": "<Target.tuning_key>"},
     "task": {"name": "conv2d_nchwc.cpu", "op": "nn.conv2d_nchwc", "workload": [...],
              "in_dtypes": ["float32", ...], "flops": 231211008},
     "config": {"tile_ow": 28, ...}, "costs_s": [0.0012, ...], "error": 0, "error_msg": "",
     "timestamp": 1700000000.0}

A measurement timed under an emulator (a cluster's device started with `tvmc device-worker
--emulate`, tvmc.autotune.cluster) adds "measured": "emulated": its costs are the emulator's on
the host that ran it, not a device's. Such records resume only tunes measured under emulation
(tvmc.autotune.tune), and `tvmc compile --tuning-records` never applies them (it counts them).

Records key on the target's tuning key (Target.tuning_key: the facts that change generated
code, not the toolchain), so records tuned on a device apply when cross-compiling for it. A line
without "tuning_key" was written before it existed: it is of a target when its "hash" is that
target's Target.hash, or the hash of that target with the toolchain of the shipped descriptor of
its name (tvmc.target.shipped_toolchain: how it was tuned before --cross-compiler changed it).
"hash" is still written, so that older tvmc versions read new files. Task names of the CPU
implementations formerly named `*.x86` (they serve every CPU) are read as their `*.cpu` names
(IMPL_ALIASES).

`ApplyHistoryBest` is the `config_lookup` that `tvmc compile --tuning-records` passes down to
lower_fused: the best valid record (lowest mean cost, error 0) per (implementation, workload)
of the target (of_target); records of another target are counted as not applicable, and a
record whose config does not fit the implementation's current config space is counted as stale.
An op whose implementations (e.g. direct and im2col conv2d) both have records runs the one of
lower mean cost. The summary counts both units `tvmc tune` reports: tuning tasks (one per
implementation of a kernel workload) and kernel workloads; a workload counts as "from records"
when any of its implementations was tuned, and its chosen record is "applied". The artifact
identifies the file by the SHA-256 of its bytes, never by its path, so the same records give the
same artifact from any working directory.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time

import jsonschema

from tvmc.autotune.space import ConfigEntity
from tvmc.autotune.task import Task, workload_count, workload_json, workload_key
from tvmc.errors import TuningError
from tvmc.paths import open_regular
from tvmc.target import shipped_toolchain

FORMAT_VERSION = 1

_STR = {"type": "string"}
_NUMBER = {"type": "number", "minimum": 0}
_COST = {"type": "number", "exclusiveMinimum": 0}  # a measured time is never 0 s (GFLOP/s divides by it)
# A records file is read whole: at most this many bytes (about two million measurements).
MAX_RECORDS_BYTES = 1 << 30
# What a record line must hold before any field is used (numbers are finite: parse_line).
RECORD_SCHEMA = {
    "type": "object",
    "required": ["version", "target", "task", "config"],
    "properties": {
        "version": {"const": FORMAT_VERSION},
        "target": {"type": "object", "required": ["hash"],
                   "properties": {"hash": _STR, "name": _STR, "tuning_key": _STR}},
        "task": {"type": "object", "required": ["name", "op", "workload", "in_dtypes", "flops"],
                 "properties": {"name": _STR, "op": _STR, "workload": {"type": "array"},
                                "in_dtypes": {"type": "array", "items": _STR},
                                "flops": {"type": "integer", "minimum": 0}}},
        "config": {"type": "object", "additionalProperties": {"type": ["integer", "number", "string", "boolean"]}},
        "costs_s": {"type": "array", "items": _COST},
        "error": {"type": "integer", "minimum": 0},
        "error_msg": _STR,
        "timestamp": _NUMBER,
        "measured": {"enum": ["native", "emulated"]},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(RECORD_SCHEMA)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def parse_line(line: str) -> "Record":
    """A Record from one line; raises ValueError (with the reason) when the line is not JSON,
    holds a non-finite number (1e400, NaN, Infinity) or does not follow RECORD_SCHEMA."""
    try:
        data = json.loads(line, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if isinstance(data, dict) and data.get("version") not in (None, FORMAT_VERSION):
        raise ValueError(f"format version {str(data.get('version'))[:20]}")
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ValueError(f"at '{where[:80]}': {error.message[:120]}")
    return Record(data)


# Task names of records written before the CPU implementations were named `*.cpu` (they served
# aarch64 and wasm as well as x86) -> the implementation's name now.
IMPL_ALIASES = {f"{name}.x86": f"{name}.cpu" for name in (
    "conv2d_nchw", "conv2d_nchwc", "conv2d_nchwc_im2col", "conv2d_transpose_nchw", "conv2d_winograd_nchwc",
    "dense", "dense_pack", "det", "log_softmax", "lrn", "matmul", "pool", "reduce", "selection", "softmax", "topk",
    "window_reduce")}


def _tupled(x):
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


class Record:
    """One parsed line. `impl` is the implementation's current name (IMPL_ALIASES applied);
    `data` the line as written; `tuning_key` None for a line written before tuning keys."""

    def __init__(self, data: dict):
        self.data = data
        self.target_hash = data["target"]["hash"]
        self.tuning_key = data["target"].get("tuning_key")
        self.target_name = data["target"].get("name", "?")
        t = data["task"]
        self.impl = IMPL_ALIASES.get(t["name"], t["name"])
        self.workload_key = workload_key(t["workload"])
        self.config = dict(data["config"])
        self.costs_s = list(data.get("costs_s") or [])
        self.error = int(data.get("error", 0))
        self.emulated = data.get("measured") == "emulated"

    @property
    def key(self) -> tuple:
        return (self.impl, self.workload_key)

    @property
    def ok(self) -> bool:
        return self.error == 0 and bool(self.costs_s)

    @property
    def mean_s(self) -> float:
        return sum(self.costs_s) / len(self.costs_s) if self.ok else float("inf")

    def task(self) -> Task:
        t = self.data["task"]
        return Task(t["op"], self.impl, _tupled(t["workload"]), tuple(t["in_dtypes"]), int(t["flops"]))

    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True)

    @property
    def target_label(self) -> str:
        """'name (key)': the target a record was tuned for, as the not-applicable line names it."""
        return f"{self.target_name} ({self.tuning_key or self.target_hash})"


def of_target(target):
    """A predicate Record -> bool: whether the record was measured for `target`, by its tuning
    key, or for a record without one by its hash (see the module docstring)."""
    key, hashes = target.tuning_key, {target.hash, shipped_toolchain(target).hash}
    return lambda r: r.tuning_key == key if r.tuning_key is not None else r.target_hash in hashes


def config_key(config: dict) -> str:
    return json.dumps(dict(config), sort_keys=True)


def encode(target, task: Task, config: dict, result) -> str:
    """One record line (no newline) for MeasureResult `result` of `config` on `task`."""
    line = {
        "version": FORMAT_VERSION,
        "target": {"name": target.name, "hash": target.hash, "tuning_key": target.tuning_key},
        "task": {"name": task.impl, "op": task.op, "workload": workload_json(task.workload),
                 "in_dtypes": list(task.in_dtypes), "flops": task.flops},
        "config": dict(config),
        "costs_s": [float(c) for c in result.costs_s],
        "error": int(result.error),
        "error_msg": result.error_msg,
        "timestamp": float(getattr(result, "timestamp", time.time())),
    }
    if getattr(result, "emulated", False):
        line["measured"] = "emulated"
    return json.dumps(line, separators=(",", ":"))


class RecordWriter:
    """Appends record lines to `path`, flushing (and fsync-ing) each one."""

    def __init__(self, path):
        try:
            self.f = open(path, "a", encoding="utf-8")
        except OSError as e:
            raise TuningError(f"{path}: cannot open tuning records for writing: {e.strerror or e}") from None

    def write(self, target, task, config, result):
        self.f.write(encode(target, task, config, result) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_records_file(path) -> bytes:
    """The bytes of the records file `path`: a regular file (a FIFO or a device is refused at
    once) of at most MAX_RECORDS_BYTES. Raises TuningError (one line naming the file)."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        raise TuningError(f"{path}: tuning records file not found")
    try:
        with open_regular(path, TuningError, "a tuning records file") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_RECORDS_BYTES:
                raise TuningError(f"{path}: {size} bytes, more than the limit of {MAX_RECORDS_BYTES} for a tuning "
                                  f"records file")
            data = f.read(MAX_RECORDS_BYTES + 1)
    except OSError as e:
        raise TuningError(f"{path}: cannot read tuning records: {e.strerror or e}") from None
    if len(data) > MAX_RECORDS_BYTES:  # grew while read
        raise TuningError(f"{path}: more than the limit of {MAX_RECORDS_BYTES} bytes for a tuning records file")
    return data


def load_records(path, data: bytes | None = None) -> list:
    """Records of a file (or of `data`, its bytes as read_records_file returned them). A missing,
    non-regular, oversized or unreadable file, or one without a single valid record line
    (parse_line), raises TuningError; single malformed lines (a line torn by a kill) are skipped."""
    path = os.fspath(path)
    if data is None:
        data = read_records_file(path)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise TuningError(f"{path}: cannot read tuning records: not UTF-8 text (byte {e.start})") from None
    records, bad, first = [], 0, ""
    for line in lines:
        if not line.strip():
            continue
        try:
            records.append(parse_line(line))
        except ValueError as e:
            bad += 1
            first = first or str(e)
    if not records and bad:
        raise TuningError(f"{path}: not a tuning records file ({bad} unreadable lines, none a valid record in "
                          f"format version {FORMAT_VERSION}; first: {first})")
    return records


class ApplyHistoryBest:
    """config_lookup(impl_name, workload) -> ConfigEntity | None from the best valid records of
    `target` (see the module docstring). Remembers what compile asked for: `queried` (task keys),
    `applied` ({task key: record})."""

    def __init__(self, records, target, sha256: str = ""):
        self.target, self.sha256 = target, sha256
        self.best: dict = {}
        self.other_targets: dict = {}  # target name (tuning key, or hash) -> record count
        self.emulated = 0               # records of this target timed under an emulator: not applied
        mine = of_target(target)
        for r in records:
            if not mine(r):
                self.other_targets[r.target_label] = self.other_targets.get(r.target_label, 0) + 1
                continue
            if r.emulated:
                self.emulated += 1
                continue
            if r.ok and (r.key not in self.best or r.mean_s < self.best[r.key].mean_s):
                self.best[r.key] = r
        self.queried: dict = {}
        self.applied: dict = {}
        self.stale: dict = {}

    @classmethod
    def from_file(cls, path, target) -> "ApplyHistoryBest":
        """Raises TuningError when the file is missing, unreadable or holds no record."""
        data = read_records_file(path)
        return cls(load_records(path, data), target, hashlib.sha256(data).hexdigest())

    @property
    def not_applicable(self) -> int:
        return sum(self.other_targets.values())

    def cost_s(self, impl_name: str, wl) -> float | None:
        """Mean seconds of the best valid record of (impl_name, workload `wl`), or None; not
        counted as queried or applied (a pass comparing forms it may not build:
        AlterOpLayout's Winograd choice)."""
        r = self.best.get((impl_name, workload_key(wl)))
        return r.mean_s if r is not None and self._fits(r, impl_name, wl) else None

    def _fits(self, r, impl_name: str, wl) -> bool:
        """Whether record `r`'s config is a point of the config space of (impl_name, wl) today
        (else it is stale: the space changed since it was measured)."""
        space = _space_of(impl_name, wl, self.target)
        return space is None or (set(r.config) == set(space.knobs)
                                 and all(v in space.knobs[k] for k, v in r.config.items()))

    def workloads(self, impl_name: str) -> list:
        """The workloads of implementation `impl_name` that the best records hold (nested tuples of
        ints, strings and attribute pairs), without counting them as queried: the sizes a kernel
        with symbolic extents was tuned at (tvmc.ops.fused._tuned_buckets)."""
        return [r.task().workload for (impl, _), r in self.best.items() if impl == impl_name]

    def __call__(self, impl_name: str, wl) -> ConfigEntity | None:
        key = (impl_name, workload_key(wl))
        self.queried[key] = wl
        r = self.best.get(key)
        if r is None:
            return None
        if not self._fits(r, impl_name, wl):
            self.stale[key] = r
            return None
        self.applied[key] = r
        cfg = ConfigEntity(r.config)
        cfg.cost_s = r.mean_s
        return cfg

    def summary(self) -> dict:
        """For metadata.json "tuning_records": the file's SHA-256, counts of tuning tasks and of
        kernel workloads (see the module docstring), and the records used (per workload, the
        implementation of lowest cost, the rule of tvmc.ops.fused._choose_implementation)."""
        by_workload: dict = {}
        for _, wl_key in self.queried:
            by_workload.setdefault(wl_key, [])
        for (_, wl_key), r in self.applied.items():
            by_workload[wl_key].append(r)
        chosen = [min(rs, key=lambda r: r.mean_s) for rs in by_workload.values() if rs]
        return {
            "sha256": self.sha256,
            "tasks": len(self.queried),
            "tasks_with_records": len(self.applied),
            "workloads": workload_count(self.queried),
            "workloads_from_records": len(chosen),
            "workloads_fallback": len(by_workload) - len(chosen),
            "not_applicable_records": self.other_targets,
            "stale_records": len(self.stale),
            "emulated_records": self.emulated,
            "applied": [r.data for r in chosen],
        }


SHIPPED_FOLDER = "tuning"  # in tvmc.configs (configs/tuning/<descriptor name>.json)


def shipped_records_path(target):
    """configs/tuning/<target name>.json, the records tvmc ships for a descriptor (TVM's TopHub,
    without a download), when it exists; else None."""
    from importlib import resources

    path = resources.files("tvmc.configs").joinpath(SHIPPED_FOLDER, f"{target.name}.json")
    return path if path.is_file() else None


def shipped_records(target) -> "ApplyHistoryBest | None":
    """The shipped records of `target` as a config lookup when the file exists and holds records
    of this target (of_target: a descriptor whose code an option changes does not match, one
    linked by a cross compiler does); else None. Raises TuningError on a damaged file (a
    packaging error)."""
    path = shipped_records_path(target)
    if path is None:
        return None
    data = path.read_bytes()  # shipped with tvmc (configs/tuning), not a user's file
    lookup = ApplyHistoryBest(load_records(path, data), target, hashlib.sha256(data).hexdigest())
    return lookup if lookup.best else None


class LayeredLookup:
    """config_lookup that asks `first` (the user's --tuning-records), then `second` (the shipped
    records) for a task the first has no valid record of."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def cost_s(self, impl_name: str, wl) -> float | None:
        """The first layer's ApplyHistoryBest.cost_s, else the second's."""
        for layer in (self.first, self.second):
            cost = layer.cost_s(impl_name, wl) if layer is not None else None
            if cost is not None:
                return cost
        return None

    def workloads(self, impl_name: str) -> list:
        """Both layers' ApplyHistoryBest.workloads."""
        return [w for layer in (self.first, self.second) if layer is not None for w in layer.workloads(impl_name)]

    def __call__(self, impl_name: str, wl):
        cfg = self.first(impl_name, wl) if self.first is not None else None
        if cfg is None and self.second is not None:
            cfg = self.second(impl_name, wl)
        return cfg


def _space_of(impl_name, wl, target):
    from tvmc.ops.registry import all_ops

    for opdef in all_ops().values():
        for impl in opdef.strategy.get(target.family, ()):
            if impl.name == impl_name and impl.config_space is not None:
                return impl.config_space(wl, target)
    return None
