"""Target descriptors: YAML files checked against targets/schema.json, loaded into a frozen Target.

`--target x86`, `--target path/to/descriptor.yaml`, `--target "x86 -mcpu=skylake-avx512"` and
`--target-option cpu=...` all resolve to one `Target` through `resolve_target`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from tvmc.errors import TargetError


@dataclass(frozen=True)
class Target:
    """A resolved, hashable target descriptor (see targets/schema.json for each field)."""

    name: str
    kind: str
    family: str
    codegen: str
    triple: str
    vector_width_bits: int
    library_format: str
    runtime: str
    cpu: str = ""
    features: tuple = ()
    host_features: tuple = ()
    num_vector_registers: int = 16
    l1d_bytes: int = 32768
    l2_bytes: int = 1048576
    max_threads_per_block: int = 0
    linker: tuple = field(default=("gcc", "-shared"))

    def vector_lanes(self, dtype: str = "float32") -> int:
        """Number of `dtype` elements in one vector register."""
        import numpy as np

        return max(1, self.vector_width_bits // (8 * np.dtype(dtype).itemsize))

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @property
    def hash(self) -> str:
        """Stable short hash of every field (tuning records key on it)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def __str__(self):
        return f"{self.name} ({self.triple}, cpu={self.cpu or 'generic'})"


def _schema() -> dict:
    return json.loads(resources.files("tvmc.targets").joinpath("schema.json").read_text())


def known_targets() -> list:
    """Names of the descriptors shipped in targets/."""
    return sorted(p.name[:-5] for p in resources.files("tvmc.targets").iterdir() if p.name.endswith(".yaml"))


def load_descriptor(text: str, origin: str) -> Target:
    """Parse and validate a YAML descriptor; raises TargetError naming `origin` and the bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TargetError(f"{origin}: not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        jsonschema.validate(data, _schema())
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise TargetError(f"{origin}: invalid target descriptor at '{where}': {e.message}") from None
    cache = data.pop("cache", {}) or {}
    data.update(cache)
    for key in ("features", "host_features", "linker"):
        if key in data:
            data[key] = tuple(data[key])
    return Target(**data)


_OPTION_FLAGS = {"-mcpu": "cpu", "-mtriple": "triple", "-mattr": "features"}


def resolve_target(spec: str, options: dict | None = None) -> Target:
    """Resolve `--target SPEC` plus `--target-option key=value` pairs into a Target.

    SPEC is a shipped name (`x86`), a path to a YAML file, optionally followed by LLVM-style
    overrides (`-mcpu=NAME`, `-mattr=+a,+b`). Raises TargetError on an unknown name (listing
    the known ones), an unreadable file, an invalid descriptor or an unknown option.
    """
    words = shlex.split(spec or "")
    if not words:
        raise TargetError(f"no target given; known targets: {', '.join(known_targets())}")
    head, flags = words[0], words[1:]
    path = Path(head)
    if head.endswith((".yaml", ".yml")) or path.is_file():
        try:
            text = path.read_text()
        except OSError as e:
            raise TargetError(f"{head}: cannot read target descriptor: {e.strerror}") from None
        target = load_descriptor(text, head)
    else:
        if head not in known_targets():
            raise TargetError(f"unknown target '{head}'; known targets: {', '.join(known_targets())}")
        text = resources.files("tvmc.targets").joinpath(head + ".yaml").read_text()
        target = load_descriptor(text, f"targets/{head}.yaml")
    overrides = dict(options or {})
    for flag in flags:
        key, _, value = flag.partition("=")
        if key not in _OPTION_FLAGS or not value:
            raise TargetError(f"target '{spec}': unknown option '{flag}' (known: {', '.join(_OPTION_FLAGS)}=VALUE)")
        overrides[_OPTION_FLAGS[key]] = value
    names = {f.name: f for f in fields(Target)}
    for key, value in overrides.items():
        if key not in names:
            raise TargetError(f"unknown target option '{key}'; known: {', '.join(sorted(names))}")
        cur = getattr(target, key)
        if isinstance(cur, tuple):
            value = tuple(v for v in str(value).split(",") if v)
        elif isinstance(cur, int):
            try:
                value = int(value)
            except ValueError:
                raise TargetError(f"target option '{key}' needs an integer, got '{value}'") from None
        target = replace(target, **{key: value})
    return target
