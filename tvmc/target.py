"""Target descriptors: YAML files checked against targets/schema.json, loaded into a frozen Target.

`--target x86`, `--target path/to/descriptor.yaml`, `--target "x86 -mcpu=skylake-avx512"`,
`--target native` and `--target-option cpu=...` all resolve to one `Target` through
`resolve_target`. What the code may use of the CPU follows from the resolved `cpu` and
`features` through the architecture's ISA table (targets/isa/<arch>.yaml): the CPU flags
`tvmc run` demands (`host_features`) and the vector unit the schedules tile for are derived
there, never written by hand.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import shlex
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from tvmc.errors import TargetError
from tvmc.paths import read_bounded


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
    host_features: tuple = ()  # derived by resolve_target: /proc/cpuinfo flags the code needs
    num_vector_registers: int = 16
    l1d_bytes: int = 32768
    l2_bytes: int = 1048576
    max_threads_per_block: int = 0
    # toolchain (TOOL_FIELDS): the programs that link, assemble and run the code, never the code
    linker: tuple = field(default=("gcc", "-shared"))
    linker_package: str = ""
    emulator: tuple = ()
    emulator_package: str = ""
    # GPU facts (absent from CPU descriptors and from their dicts, so CPU hashes do not move)
    max_shared_memory_per_block: int = 0
    thread_warp_size: int = 0
    # facts added with CUDA (register file, assembler), absent from the dicts of descriptors that
    # leave them out
    max_registers_per_thread: int = 0
    registers_per_block: int = 0
    assembler: tuple = ()       # toolchain (TOOL_FIELDS)
    # facts added with wasm32, likewise absent from the dicts of descriptors that leave them out
    num_cores: int = 0          # 0: every core of the host; 1: parallel loops run serially
    tools: tuple = ()           # toolchain: ((program or file, package), ...) the linker command uses
    browser: tuple = ()         # toolchain
    browser_package: str = ""   # toolchain
    # GPU option: float32 GEMMs on the TF32 tensor cores (absent from dicts unless set)
    allow_tf32: bool = False
    # GPU fact added with the occupancy-aware fallbacks, absent from the dicts of descriptors that
    # leave it out (their hashes do not move)
    multiprocessor_count: int = 0

    @property
    def gpu(self) -> bool:
        """Whether the target is a GPU: every fused function becomes one device kernel with a
        launch (tvmc.tir.gpu.lower_device), whatever its library."""
        return self.kind == "gpu"

    @property
    def threaded(self) -> bool:
        """Whether parallel loops run on threads (libgomp); False: serially (num_cores 1)."""
        return self.num_cores != 1

    def vector_lanes(self, dtype: str = "float32") -> int:
        """Number of `dtype` elements in one vector register."""
        import numpy as np

        return max(1, self.vector_width_bits // (8 * np.dtype(dtype).itemsize))

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in OPTIONAL_FIELDS and not v:
                continue
            if f.name == "tools":
                v = dict(v)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Target":
        """The Target whose to_dict() is `data` (e.g. metadata.json's "target"): lists become
        tuples, keys that are not fields (written by another tvmc version) are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})

    @property
    def hash(self) -> str:
        """16 hex digits of the SHA-256 of every field (to_dict, keys sorted), toolchain included:
        identifies the whole descriptor. Tuning records key on tuning_key instead; records written
        before it carry this hash (tvmc.autotune.record reads them by it)."""
        return _digest(self.to_dict())

    @property
    def tuning_key(self) -> str:
        """16 hex digits of the SHA-256 of the fields that change the generated code (code_facts):
        tuning records, their lookup and metadata.json key on it. It leaves out the toolchain
        (TOOL_FIELDS), so `--cross-compiler`, another emulator or browser keep a target's records
        applying, and the name, so two descriptors that generate the same code share them."""
        return _digest(self.code_facts())

    def code_facts(self) -> dict:
        """to_dict() less the toolchain fields (TOOL_FIELDS) and the name: triple, cpu, features
        and the flags derived from them, vector unit, caches, cores, GPU limits, allow_tf32, kind,
        codegen, library format and runtime, the facts that change generated code and so which
        config of a kernel is fastest (what tuning_key hashes)."""
        return {k: v for k, v in self.to_dict().items() if k not in TOOL_FIELDS and k != "name"}

    @property
    def fma_scalar_operand(self) -> str:
        """Where the vector FMA of the vector unit this target's cpu and features enable takes its
        scalar operand: "memory", "register", "lane" or "splat" (targets/isa/<arch>.yaml; "register"
        for an architecture without an ISA table)."""
        return _fma_scalar_operand(self.arch, self.cpu, self.features)

    @property
    def vector_gather_scatter(self) -> bool:
        """Whether the vector unit this target's cpu and features enable loads and stores the lanes
        of computed addresses with one instruction (AVX-512's vgather/vscatter; targets/isa/<arch>.yaml
        `gather_scatter`): the code generator then emits llvm.masked.gather / scatter for a vector
        access that is neither contiguous nor a short stride, else one scalar access per lane."""
        return bool(_vector_unit_fact(self.arch, self.cpu, self.features, "gather_scatter", False))

    @property
    def reserved_vector_registers(self) -> int:
        """Vector registers of that unit the code cannot count on: the ones a JIT engine keeps for
        itself (targets/isa/<arch>.yaml `reserved_registers`; 0 where the table says nothing)."""
        return _vector_unit_fact(self.arch, self.cpu, self.features, "reserved_registers", 0)

    @property
    def tensor_core_dtypes(self) -> frozenset:
        """Operand dtypes of the tensor-core matrix multiply-accumulate this GPU target's cpu has
        ('float16', 'bfloat16', 'float32' as TF32; targets/isa/<arch>.yaml `mma`): empty for CPU
        targets, OpenCL and GPUs without them."""
        isa = isa_table(self.arch) if self.kind == "gpu" else None
        return isa.mma.get(self.cpu, frozenset()) if isa is not None else frozenset()

    @property
    def dot_u8s8(self) -> tuple | None:
        """(form, width_bits) of the u8 x s8 -> int32 dot-product instructions this target's cpu
        and features enable, the first of targets/isa/<arch>.yaml `dot_u8s8` whose feature is on:
        x86 ("vpdpbusd", 512) with AVX512-VNNI, ("vpdpbusd", 256) with AVX-VNNI, ("pmaddubsw", 512
        or 256) with AVX512-BW or AVX2; aarch64 ("usdot", 128) with +i8mm, ("sdot", 128) with
        +dotprod; wasm32 ("relaxed_dot", 128) with +relaxed-simd, ("dot_i16x8", 128) with
        +simd128; nvptx64 ("dp4a", 32) on every cpu (the GPU int8 kernels, tvmc/ops/gpu/int8.py);
        None: widening multiplies (tvmc.tir.ir.DotU8S8)."""
        return _dot_u8s8(self.arch, self.cpu, self.features)

    @property
    def dot_data_dtype(self) -> str:
        """The data type of the int8 CPU kernels' data operand on this target (targets/isa/<arch>.yaml
        dot_u8s8 `data`): "int8" where the dot product multiplies signed bytes only (AArch64
        +dotprod without i8mm: SDOT), so that AlterOpLayout shifts uint8 activations by -128
        instead of int8 ones by +128; "uint8" elsewhere (u8 x s8 forms, widening multiplies)."""
        return _dot_u8s8_entry(self.arch, self.cpu, self.features).get("data", "uint8")

    @property
    def dot_data_pairs(self) -> bool:
        """Whether the exact int8 kernels of this target's dot-product form take their uint8
        data widened to int16 in pair order (targets/isa/<arch>.yaml dot_u8s8 `data_pairs`: x86
        vpmaddubsw forms, whose exact kernels multiply int16 words by vpmaddwd; the kernels'
        data_pairs, tvmc.ops.cpu.int8)."""
        return bool(_dot_u8s8_entry(self.arch, self.cpu, self.features).get("data_pairs", False))

    @property
    def mmla_u8s8(self) -> str | None:
        """The u8 x s8 -> int32 matrix multiply-accumulate this target's dot-product form comes
        with (targets/isa/<arch>.yaml dot_u8s8 `matrix`): "usmmla" on aarch64 with +i8mm (a 2x8
        by 8x2 product into a 2x2 int32 block, tvmc.tir.ir.MmlaU8S8), which the int8
        convolutions and dense layers take (qnn.conv2d_nchwc_u8s8_mmla, qnn.dense_u8s8_mmla);
        None elsewhere."""
        return _dot_u8s8_entry(self.arch, self.cpu, self.features).get("matrix")

    @property
    def narrow_int8_conv(self) -> str:
        """How a qnn.conv2d whose input channels are not a multiple of 4 (an image stem) runs
        on this CPU target: "dot" (the u8 x s8 kernel over 4 adjacent taps of a kernel row,
        qnn.conv2d_nchw_u8s8) or "float" (a float conv on the integer values), the `narrow` of
        its dot_u8s8 form in targets/isa/<arch>.yaml; "float" where it has none."""
        return _dot_u8s8_entry(self.arch, self.cpu, self.features).get("narrow", "float")

    @property
    def gpu_int8_dot(self) -> bool:
        """Whether this GPU target runs qnn.dense / qnn.conv2d on the int8 kernels of
        tvmc/ops/gpu/int8.py, whose step is a 4 x int8 dot product on one 32-bit word: OpenCL
        always (OpenCL C's uchar4 / char4 arithmetic, cl_khr_integer_dot_product's dot where the
        device has it); an LLVM GPU triple where its ISA table gives a one-word dot_u8s8 form
        (nvptx64: dp4a). False for CPU targets (their own int8 kernels, tvmc/ops/cpu/int8.py)."""
        if self.kind != "gpu":
            return False
        form = self.dot_u8s8
        return self.codegen == "opencl" or (form is not None and form[1] == 32)

    @property
    def async_copy(self) -> bool:
        """Whether this GPU target's cpu copies global to shared memory asynchronously (cp.async;
        targets/isa/<arch>.yaml `async_copy`)."""
        isa = isa_table(self.arch) if self.kind == "gpu" else None
        return bool(isa is not None and isa.async_copy.get(self.cpu, False))

    @property
    def arch(self) -> str:
        """Architecture component of the triple (x86_64, aarch64, wasm32, nvptx64)."""
        return self.triple.split("-")[0]

    def __str__(self):
        return f"{self.name} ({self.triple}, cpu={self.cpu or 'generic'})"


# The toolchain: programs (and their packages) that link, assemble, emulate or load the code a
# target generates, and change nothing of that code, so neither the tuning key. `assembler` is
# one of them: ptxas turns the very PTX the codegen wrote into a cubin beside it (mod.cubin), and
# tuning measures that PTX as the CUDA driver JIT-compiles it, never the assembler's output. An
# artifact's record of these fields is never used to run a program (artifact_target).
TOOL_FIELDS = ("linker", "linker_package", "emulator", "emulator_package", "assembler", "tools", "browser",
               "browser_package")


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# Fields a descriptor may leave out that the dicts (and so the hashes) leave out when empty
OPTIONAL_FIELDS = ("max_shared_memory_per_block", "thread_warp_size", "max_registers_per_thread",
                   "registers_per_block", "assembler", "num_cores", "tools", "browser", "browser_package",
                   "allow_tf32", "multiprocessor_count")


def _schema() -> dict:
    return json.loads(resources.files("tvmc.targets").joinpath("schema.json").read_text())


def known_targets() -> list:
    """Names of the descriptors shipped in targets/, plus `native` (this host's CPU)."""
    names = [p.name[:-5] for p in resources.files("tvmc.targets").iterdir() if p.name.endswith(".yaml")]
    return sorted(names + [NATIVE])


def _descriptor_dict(target: Target) -> dict:
    """The YAML form of `target` (what the schema checks): cache sizes nested, derived fields left out."""
    data = target.to_dict()
    data.pop("host_features")
    data["cache"] = {"l1d_bytes": data.pop("l1d_bytes"), "l2_bytes": data.pop("l2_bytes")}
    for key in ("max_threads_per_block", "linker_package", "emulator", "emulator_package", *OPTIONAL_FIELDS):
        if not data.get(key):  # optional fields a descriptor leaves out
            data.pop(key, None)
    return data


def schema_message(e: jsonschema.ValidationError, limit: int = 200) -> str:
    """A jsonschema error in one short line: its message, or, when that is too long because the
    offending value is (a 4000-digit number, a huge string), the rule it breaks, the value elided."""
    text = " ".join(e.message.split())
    shown = repr(e.instance)
    if len(text) > limit and len(shown) > 60:
        rule = "" if isinstance(e.validator_value, (dict, list)) else f" {e.validator_value}"
        text = f"a {type(e.instance).__name__} of {len(shown)} characters fails '{e.validator}{rule}'"
        if e.validator in ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"):
            text = f"{shown[:20]}... ({len(shown)} characters) is {'greater' if 'ax' in e.validator else 'less'} " \
                   f"than the {e.validator} of {e.validator_value}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _validate(data, origin: str) -> None:
    try:
        jsonschema.validate(data, _schema())
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path)[:80] or "(top level)"
        raise TargetError(f"{origin}: invalid target descriptor at '{where}': {schema_message(e)}") from None


MAX_DESCRIPTOR_BYTES = 64 << 10
MAX_DESCRIPTOR_DEPTH = 16


def parse_yaml_limited(text: str, origin: str, error_cls=TargetError, what: str = "a descriptor"):
    """yaml.safe_load of a small, plain YAML document (a target descriptor, a --config file):
    at most MAX_DESCRIPTOR_BYTES characters, nesting at most MAX_DESCRIPTOR_DEPTH deep, and no
    aliases (`*name`, which let a few hundred bytes stand for an exponentially large document).
    Checked on the event stream before any object is built. Raises `error_cls` naming `origin`,
    also for a value YAML cannot build (an integer of more digits than Python converts)."""
    if len(text) > MAX_DESCRIPTOR_BYTES:
        raise error_cls(f"{origin}: {len(text)} characters, more than the limit of {MAX_DESCRIPTOR_BYTES} "
                        f"for {what}")
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise error_cls(f"{origin}: YAML aliases (*{str(event.anchor)[:40]}) are not allowed in {what}")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DESCRIPTOR_DEPTH:
                    raise error_cls(f"{origin}: nested more than {MAX_DESCRIPTOR_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise error_cls(f"{origin}: not valid YAML: {str(e).splitlines()[0][:200]}") from None
    except ValueError as e:  # int("9" * 5000): beyond Python's integer string conversion limit
        raise error_cls(f"{origin}: a value YAML cannot build: {str(e).splitlines()[0][:120]}") from None


def load_descriptor(text: str, origin: str) -> Target:
    """Parse and validate a YAML descriptor; raises TargetError naming `origin` and the bad field.

    The text is parsed with limits (parse_yaml_limited). The result is not resolved yet (no CPU
    check, no derived fields): use resolve_target.
    """
    data = parse_yaml_limited(text, origin)
    _validate(data, origin)
    cache = data.pop("cache", {}) or {}
    data.update(cache)
    for key in ("features", "linker", "emulator", "browser", "assembler"):
        if key in data:
            data[key] = tuple(data[key])
    if "tools" in data:
        data["tools"] = tuple(sorted(data["tools"].items()))
    return Target(**data)


# ---------------------------------------------------------------------------------------------
# ISA tables: what a cpu name and a feature list let the generated code use


class IsaTable:
    """targets/isa/<arch>.yaml: CPU names and the features they imply, feature implications,
    /proc/cpuinfo spellings, vector units. See the file's header for each section."""

    def __init__(self, arch: str, data: dict):
        self.arch = arch
        levels = data.get("levels") or {}
        self.cpus = {}
        self.mma = {}          # cpu -> operand dtypes of its tensor-core mma (GPU tables)
        self.async_copy = {}   # cpu -> whether it has asynchronous global-to-shared copies
        for cpu, spec in (data.get("cpus") or {}).items():
            self.cpus[cpu] = frozenset(levels.get(spec.get("level"), [])) | frozenset(spec.get("add", []))
            self.mma[cpu] = frozenset(spec.get("mma", ()))
            self.async_copy[cpu] = bool(spec.get("async_copy", False))
        self.requires = {k: tuple(v) for k, v in (data.get("requires") or {}).items()}
        self.host_flags = dict(data.get("host_flags") or {})
        self.vector_units = list(data.get("vector_units") or [])
        self.tuning = frozenset(data.get("tuning") or [])
        self.dot_u8s8 = list(data.get("dot_u8s8") or [])
        known = set(self.requires) | set(self.host_flags)
        for feats in self.cpus.values():
            known |= feats
        for deps in self.requires.values():
            known |= set(deps)
        self.features = frozenset(known)

    def _closure_up(self, feature: str) -> set:
        out, todo = set(), [feature]
        while todo:
            f = todo.pop()
            if f not in out:
                out.add(f)
                todo.extend(self.requires.get(f, ()))
        return out

    def _closure_down(self, feature: str, enabled: set) -> set:
        out = {feature}
        changed = True
        while changed:
            changed = False
            for f in enabled - out:
                if any(d in out for d in self.requires.get(f, ())):
                    out.add(f)
                    changed = True
        return out

    def enabled_features(self, cpu: str, features, origin: str) -> frozenset:
        """ISA features the code for (`cpu`, `features`) may use: the cpu's, then each '+f'
        with what it requires and each '-f' with what requires it, in order (LLVM's -mattr).
        Raises TargetError naming `origin` on an unknown cpu or feature."""
        if cpu and cpu not in self.cpus:
            raise TargetError(f"{origin}: unknown cpu '{cpu}' for {self.arch}; known: {', '.join(sorted(self.cpus))}")
        enabled = set(self.cpus.get(cpu, ()))
        for item in features:
            sign, name = item[:1], item[1:]
            if name in self.tuning:
                continue
            if sign not in "+-" or name not in self.features:
                raise TargetError(f"{origin}: unknown feature '{item}' for {self.arch}; known: "
                                  f"{', '.join('+' + f for f in sorted(self.features | self.tuning))}")
            if sign == "+":
                enabled |= self._closure_up(name)
            else:
                enabled -= self._closure_down(name, enabled)
        return frozenset(enabled)

    def host_flag(self, feature: str) -> str:
        return self.host_flags.get(feature, feature)

    def vector_unit(self, enabled) -> dict | None:
        """The first vector unit whose feature is enabled; a unit without a feature (scalar code)
        is always available."""
        return next((u for u in self.vector_units if u.get("feature") in enabled or "feature" not in u), None)


@functools.lru_cache(maxsize=None)
def isa_table(arch: str) -> IsaTable | None:
    """The ISA table of `arch` (targets/isa/<arch>.yaml), or None when tvmc ships none."""
    path = resources.files("tvmc.targets").joinpath("isa", f"{arch}.yaml")
    if not path.is_file():
        return None
    return IsaTable(arch, yaml.safe_load(path.read_text()))


def _derive(target: Target, origin: str) -> Target:
    """Check `cpu`/`features` against the ISA table and fill the derived fields: host_features
    (cpuinfo flags of every enabled feature) and the vector unit (vector_width_bits and
    num_vector_registers capped by the widest unit the enabled features provide)."""
    isa = isa_table(target.arch)
    if isa is None:
        return target
    enabled = isa.enabled_features(target.cpu, target.features, origin)
    if target.kind == "gpu":  # device code demands nothing of the host CPU
        return target
    changes = {"host_features": tuple(sorted({isa.host_flag(f) for f in enabled}))}
    unit = isa.vector_unit(enabled)
    if unit is not None:
        changes["vector_width_bits"] = min(target.vector_width_bits, unit["width_bits"])
        changes["num_vector_registers"] = min(target.num_vector_registers, unit["registers"])
    return replace(target, **changes)


def _fma_scalar_operand(arch: str, cpu: str, features: tuple) -> str:
    return _vector_unit_fact(arch, cpu, features, "fma_scalar_operand", "register")


@functools.lru_cache(maxsize=64)
def _dot_u8s8_entry(arch: str, cpu: str, features: tuple) -> dict:
    """The first entry of the ISA table's dot_u8s8 whose feature the cpu and features enable,
    or {}."""
    isa = isa_table(arch)
    if isa is None:
        return {}
    enabled = isa.enabled_features(cpu, features, arch)
    enabled = set().union(*(isa._closure_up(f) for f in enabled))  # with what they imply (ptx80: ptx63)
    return next((e for e in isa.dot_u8s8 if e["feature"] in enabled), {})


def _dot_u8s8(arch: str, cpu: str, features: tuple) -> tuple | None:
    entry = _dot_u8s8_entry(arch, cpu, features)
    return (entry["form"], int(entry["width_bits"])) if entry else None


@functools.lru_cache(maxsize=64)
def _vector_unit_fact(arch: str, cpu: str, features: tuple, key: str, default):
    """`key` of the vector unit the cpu and features enable in the ISA table of arch, or default."""
    isa = isa_table(arch)
    unit = isa.vector_unit(isa.enabled_features(cpu, features, arch)) if isa is not None else None
    return (unit or {}).get(key, default)


# ---------------------------------------------------------------------------------------------
# Resolution

NATIVE = "native"

# Architecture component of an LLVM triple -> the values platform.machine() reports for it.
ARCH_ALIASES = {
    "x86_64": {"x86_64", "amd64"},
    "aarch64": {"aarch64", "arm64"},
}


def host_arch() -> str:
    """This host's architecture as an LLVM triple component (x86_64, aarch64, ...)."""
    machine = platform.machine().lower()
    return next((arch for arch, names in ARCH_ALIASES.items() if machine in names), machine)


def _shipped(name: str) -> Target:
    text = resources.files("tvmc.targets").joinpath(name + ".yaml").read_text()
    return load_descriptor(text, f"targets/{name}.yaml")


def native_target() -> Target:
    """The shipped descriptor that fits this host best, with the host's CPU and features.

    Among the shipped CPU descriptors for this host's architecture whose derived feature set
    the host has (llvmlite's host CPU name and feature map), the one with the widest vector unit
    wins (then the most features); its `cpu` becomes the host's CPU name (when the ISA table
    knows it) and `features` the host's ISA features. Raises TargetError when no shipped
    descriptor runs on this host.
    """
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    arch = host_arch()
    isa = isa_table(arch)
    host_cpu = llvm.get_host_cpu_name()
    host_on = {k for k, v in llvm.get_host_cpu_features().items() if v}
    best = None
    for name in known_targets():
        if name == NATIVE:
            continue
        t = _shipped(name)
        if t.kind != "cpu" or t.arch != arch:
            continue
        need = isa.enabled_features(t.cpu, t.features, f"targets/{name}.yaml") if isa else frozenset()
        if not need <= host_on:
            continue
        key = (_derive(t, name).vector_width_bits, len(need))
        if best is None or key > best[0]:
            best = (key, t)
    if best is None:
        raise TargetError(f"target 'native': no shipped CPU descriptor runs on this host ({arch}, cpu {host_cpu}); "
                          f"known targets: {', '.join(known_targets())}")
    target = best[1]
    if isa is not None:
        cpu = host_cpu if host_cpu in isa.cpus else target.cpu
        target = replace(target, cpu=cpu, features=tuple(f"+{f}" for f in sorted(host_on & isa.features)))
    return target


_OPTION_FLAGS = {"-mcpu": "cpu", "-mtriple": "triple", "-mattr": "features"}
_DERIVED = ("host_features",)


def resolve_target(spec: str, options: dict | None = None) -> Target:
    """Resolve `--target SPEC` plus `--target-option key=value` pairs into a Target.

    SPEC is a shipped name (`x86`, `x86-avx2`, `x86-64`), `native` (this host, see
    native_target), or a path to a YAML file, optionally followed by LLVM-style overrides:
    `-mcpu=NAME`, `-mtriple=TRIPLE`, `-mattr=+a,-b` (added to the descriptor's features, later
    entries win, as LLVM's -mattr). `options` set descriptor fields (`features=...` replaces the
    list). The result is checked against the schema again, its cpu and features against the
    ISA table, and its derived fields filled (see _derive). Raises TargetError on an unknown
    name (listing the known ones), an unreadable file, an invalid descriptor, an unknown
    option, cpu or feature.
    """
    try:
        words = shlex.split(spec or "")
    except ValueError as e:
        raise TargetError(f"target '{spec}': {e}") from None
    if not words:
        raise TargetError(f"no target given; known targets: {', '.join(known_targets())}")
    head, flags = words[0], words[1:]
    path = Path(head)
    if head == NATIVE:
        target = native_target()
    elif head.endswith((".yaml", ".yml")) or path.is_file():
        data = read_bounded(path, MAX_DESCRIPTOR_BYTES, TargetError, "a target descriptor")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TargetError(f"{head}: not UTF-8 text (byte {e.start}); a target descriptor is UTF-8 YAML") from None
        target = load_descriptor(text, head)
    else:
        if head not in known_targets():
            raise TargetError(f"unknown target '{head}'; known targets: {', '.join(known_targets())}")
        target = _shipped(head)
    overrides = dict(options or {})
    for flag in flags:
        key, _, value = flag.partition("=")
        if key not in _OPTION_FLAGS or not value:
            raise TargetError(f"target '{spec}': unknown option '{flag}' (known: {', '.join(_OPTION_FLAGS)}=VALUE)")
        if key == "-mattr":
            value = ",".join([overrides.get("features", ",".join(target.features)), value]).strip(",")
        overrides[_OPTION_FLAGS[key]] = value
    names = {f.name: f for f in fields(Target)}
    for key, value in overrides.items():
        if key not in names:
            raise TargetError(f"unknown target option '{key}'; known: "
                              f"{', '.join(sorted(n for n in names if n not in _DERIVED))}")
        if key in _DERIVED:
            raise TargetError(f"target option '{key}' is derived from cpu and features; set those instead")
        cur = getattr(target, key)
        if isinstance(cur, bool):
            if str(value).lower() not in ("true", "false", "1", "0"):
                raise TargetError(f"target option '{key}' needs true or false, got '{value}'")
            value = str(value).lower() in ("true", "1")
        elif isinstance(cur, tuple):
            value = tuple(v for v in str(value).split(",") if v)
        elif isinstance(cur, int):
            try:
                value = int(value)
            except ValueError:
                raise TargetError(f"target option '{key}' needs an integer, got '{value}'") from None
        target = replace(target, **{key: value})
    origin = f"target '{spec}'"
    if overrides:
        _validate(_descriptor_dict(target), origin)
    return _derive(target, origin)


def with_cross_compiler(target: Target, compiler: str | None = None, options: str | None = None) -> Target:
    """`target` linked by another compiler driver (TVM's --cross-compiler): `compiler` replaces
    the descriptor's linker command (its first word), `options` (a shell-quoted string, TVM's
    --cross-compiler-options) are appended to the linker's arguments. Raises TargetError on
    unbalanced quotes or an empty compiler name."""
    linker = list(target.linker)
    if not linker and (compiler or options):
        raise TargetError(f"target {target.name} links no library ({target.library_format}); "
                          f"--cross-compiler does not apply")
    if compiler is not None:
        if not compiler.strip():
            raise TargetError("--cross-compiler: empty compiler name")
        linker[0] = compiler
        target = replace(target, linker_package="")  # the user's own tool: no package to name
    if options:
        try:
            linker += shlex.split(options)
        except ValueError as e:
            raise TargetError(f"--cross-compiler-options '{options}': {e}") from None
    return replace(target, linker=tuple(linker))



# ---------------------------------------------------------------------------------------------
# The target of an artifact: its facts from metadata.json, its commands from a known descriptor

# What a descriptor says about the code (an artifact records them); what it says about the
# programs tvmc runs for it is TOOL_FIELDS (an artifact's record of them is never used:
# metadata.json is covered by no digest, so a tar from elsewhere could name any program there).
CODEGEN_FACTS = ("kind", "codegen", "triple", "library_format", "runtime")


def shipped_toolchain(target: Target) -> Target:
    """`target` with the toolchain fields (TOOL_FIELDS) of the shipped descriptor of its name, as
    it was before `--cross-compiler` or a toolchain option changed them; `target` itself when tvmc
    ships no descriptor of that name."""
    if target.name == NATIVE or target.name not in known_targets():
        return target
    shipped = _shipped(target.name)
    return replace(target, **{k: getattr(shipped, k) for k in TOOL_FIELDS})


def artifact_target(recorded: dict, spec: str | None = None, origin: str = "artifact", error_cls=TargetError) -> Target:
    """The Target to build and run an artifact's programs with (`tvmc build-runner`, `tvmc run`
    under emulation): the code facts, cpu and features of `recorded` (metadata.json "target",
    already checked against its schema), and every command field (TOOL_FIELDS) from a known
    descriptor: `spec` when given (a shipped name or a descriptor file, as for --target), else the
    shipped descriptor of the recorded name, else the first shipped one (by name) with the same
    CODEGEN_FACTS. Raises `error_cls` naming `origin` when `spec`'s code facts differ from the
    artifact's, or when no shipped descriptor produces code like it (then --target names one)."""
    facts = {k: recorded.get(k) for k in CODEGEN_FACTS}

    def same(t: Target) -> bool:
        return all(getattr(t, k) == v for k, v in facts.items())

    def describe(d: dict) -> str:
        return ", ".join(f"{k} {d[k]}" for k in CODEGEN_FACTS)

    if spec is not None:
        known = resolve_target(spec)
        if not same(known):
            raise error_cls(f"{origin}: compiled for {describe(facts)}; --target {spec} has "
                            f"{describe({k: getattr(known, k) for k in CODEGEN_FACTS})}")
    else:
        names = [n for n in known_targets() if n != NATIVE]
        name = recorded.get("name")
        candidates = ([name] if name in names else []) + [n for n in names if n != name]
        known = next((t for t in map(_shipped, candidates) if same(t)), None)
        if known is None:
            raise error_cls(f"{origin}: no shipped target descriptor produces code like this artifact's "
                            f"({describe(facts)}); name the descriptor it was compiled with: --target FILE")
    own = Target.from_dict({k: v for k, v in recorded.items() if k not in TOOL_FIELDS and k != "host_features"})
    return replace(own, **{k: getattr(known, k) for k in TOOL_FIELDS},
                   host_features=tuple(recorded.get("host_features") or ()))
