"""Target descriptors: shipped YAML validates; paths, overrides and errors of resolve_target."""

import json
import os
from importlib import resources

import jsonschema
import pytest
import yaml

from tvmc.errors import TargetError
from tvmc.target import Target, known_targets, resolve_target


def _x86_yaml() -> str:
    return resources.files("tvmc.targets").joinpath("x86.yaml").read_text()


def test_known_targets_include_x86():
    assert "x86" in known_targets()


def test_x86_descriptor_validates():
    schema = json.loads(resources.files("tvmc.targets").joinpath("schema.json").read_text())
    jsonschema.validate(yaml.safe_load(_x86_yaml()), schema)
    t = resolve_target("x86")
    assert isinstance(t, Target)
    assert t.name == "x86" and t.kind == "cpu" and t.codegen == "llvm"
    assert t.triple.startswith("x86_64") and t.library_format == "so"
    assert t.vector_lanes("float32") == t.vector_width_bits // 32
    hash(t)


def test_yaml_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(_x86_yaml().replace("name: x86", "name: mine"))
    t = resolve_target(str(path))
    assert t.name == "mine" and t.triple == resolve_target("x86").triple
    assert t.hash != resolve_target("x86").hash


def test_tuning_key_leaves_out_the_toolchain_and_the_name(tmp_path):
    from dataclasses import replace

    from tvmc.target import TOOL_FIELDS, with_cross_compiler

    arm = resolve_target("arm")
    key = arm.tuning_key
    same_code = [with_cross_compiler(arm, "clang", "--target=aarch64-linux-gnu --sysroot=/opt/sysroot"),
                 resolve_target("arm", {"emulator": "qemu-aarch64-static", "emulator_package": "deb:qemu-user-static"}),
                 replace(arm, assembler=("ptxas",), browser=("chromium",), tools=(("wasm-ld", "deb:lld"),)),
                 replace(arm, name="my-board")]
    for t in same_code:
        assert t.hash != arm.hash and t.tuning_key == key, t
    other_code = [resolve_target("arm -mcpu=cortex-a72"), resolve_target("arm", {"l2_bytes": "1048576"}),
                  resolve_target("arm", {"num_cores": "1"}), resolve_target("x86")]
    for t in other_code:
        assert t.tuning_key != key, t
    assert resolve_target("cuda-sm90", {"allow_tf32": "true"}).tuning_key != resolve_target("cuda-sm90").tuning_key
    assert not set(TOOL_FIELDS) & set(arm.code_facts()) and "name" not in arm.code_facts()
    assert set(arm.code_facts()) | set(TOOL_FIELDS) | {"name"} >= set(arm.to_dict())


def test_invalid_field_names_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(_x86_yaml().replace("vector_width_bits: 512", "vector_width_bits: 500"))
    with pytest.raises(TargetError) as e:
        resolve_target(str(path))
    msg = str(e.value)
    assert "vector_width_bits" in msg and str(path) in msg and "\n" not in msg


def test_unknown_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(_x86_yaml() + "colour: red\n")
    with pytest.raises(TargetError, match="colour"):
        resolve_target(str(path))


def test_not_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(TargetError, match="not valid YAML"):
        resolve_target(str(path))


def test_mcpu_override():
    t = resolve_target("x86 -mcpu=skylake-avx512")
    assert t.cpu == "skylake-avx512"
    assert t.triple == resolve_target("x86").triple


def test_mattr_override_and_target_option():
    t = resolve_target("x86 -mattr=+avx2,+fma", {"l2_bytes": "1048576"})
    assert t.features == ("+avx2", "+fma") and t.l2_bytes == 1048576
    assert resolve_target("x86", {"cpu": "znver4"}).cpu == "znver4"
    assert resolve_target("x86-avx2 -mattr=-fma -mattr=+fma").features == ("-fma", "+fma")


@pytest.mark.parametrize("name,width,registers,level", [("x86", 512, 32, "avx512f"), ("x86-avx2", 256, 16, "avx2"),
                                                        ("x86-64", 128, 16, "sse4_2")])
def test_shipped_x86_descriptors(name, width, registers, level):
    """Each x86 descriptor's vector unit, and the CPU flags `tvmc run` demands for it."""
    t = resolve_target(name)
    assert (t.vector_width_bits, t.num_vector_registers) == (width, registers)
    assert level in t.host_features
    wider = {"x86-64": ["avx", "avx2", "fma", "avx512f"], "x86-avx2": ["avx512f"], "x86": []}[name]
    assert not set(wider) & set(t.host_features)


def test_run_time_check_follows_the_generated_code():
    """An override that drops AVX-512 drops it (and what needs it) from what tvmc run demands,
    and caps the vector unit the schedules tile for; one that adds a feature adds it with what
    it requires."""
    dropped = resolve_target("x86 -mattr=-avx512f")
    assert not any(f.startswith("avx512") for f in dropped.host_features) and "avx2" in dropped.host_features
    assert (dropped.vector_width_bits, dropped.num_vector_registers) == (256, 16)
    assert resolve_target("x86 -mcpu=znver3").host_features == resolve_target("x86-avx2").host_features
    added = resolve_target("x86-64 -mattr=+avx512f")
    assert {"avx512f", "avx2", "avx", "fma"} <= set(added.host_features)
    assert added.vector_width_bits == 128  # the descriptor's choice; the feature only allows wider
    assert "avx512_vnni" in resolve_target("x86 -mcpu=cascadelake").host_features  # cpuinfo spelling
    no_avx = resolve_target("x86-avx2 -mattr=-avx")
    assert not {"avx", "avx2", "fma", "f16c"} & set(no_avx.host_features) and no_avx.vector_width_bits == 128


def test_unknown_cpu_or_feature_is_a_target_error_before_llvm():
    with pytest.raises(TargetError) as e:
        resolve_target("x86 -mcpu=pentium-9000")
    assert "unknown cpu 'pentium-9000'" in str(e.value) and "znver4" in str(e.value)
    with pytest.raises(TargetError, match="unknown feature '\\+avx1024'"):
        resolve_target("x86", {"features": "+avx1024"})
    assert resolve_target("x86 -mattr=+prefer-256-bit").vector_width_bits == 512  # tuning flags pass


def test_native_fits_this_host():
    """`native` is a shipped descriptor whose derived CPU flags this host has, with the host's
    CPU name (when the ISA table knows it) and features."""
    import llvmlite.binding as llvm

    from tvmc.runtime.executor import host_cpu_flags

    t = resolve_target("native")
    assert t.name in known_targets() and t.name != "native"
    flags = host_cpu_flags()
    if flags is not None:
        assert set(t.host_features) <= flags
    if llvm.get_host_cpu_name() in ("znver3", "znver4", "skylake-avx512", "haswell"):
        assert t.cpu == llvm.get_host_cpu_name()
    assert all(f.startswith("+") for f in t.features)
    assert resolve_target("native -mattr=-avx2").host_features != t.host_features or "avx2" not in t.host_features


def test_derived_and_unsafe_options_are_refused():
    with pytest.raises(TargetError, match="derived from cpu and features"):
        resolve_target("x86", {"host_features": "sse2"})
    with pytest.raises(TargetError, match="library_format"):
        resolve_target("x86", {"library_format": "so/../../x"})
    with pytest.raises(TargetError, match="No closing quotation"):
        resolve_target('x86 -mcpu="znver3')


def test_unknown_option():
    with pytest.raises(TargetError, match="unknown option '-mfoo=1'"):
        resolve_target("x86 -mfoo=1")
    with pytest.raises(TargetError, match="unknown target option 'colour'"):
        resolve_target("x86", {"colour": "red"})
    with pytest.raises(TargetError, match="needs an integer"):
        resolve_target("x86", {"l2_bytes": "big"})


def test_unknown_target_lists_known():
    with pytest.raises(TargetError) as e:
        resolve_target("sparc")
    assert "unknown target 'sparc'" in str(e.value) and "x86" in str(e.value)


def test_empty_spec():
    with pytest.raises(TargetError, match="no target given"):
        resolve_target("")


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [{', '.join(['*' + p] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi")) + "features: *i\n"


@pytest.mark.parametrize("text,message", [
    (BOMB, r"YAML aliases \(\*a\) are not allowed"),
    ("name: x\n" + "features: " + "[" * 40 + "]" * 40 + "\n", "nested more than 16 levels deep"),
    ("name: x\n# " + "y" * (70 << 10) + "\n", "larger than 65536 bytes, the limit for a target descriptor"),
])
def test_descriptor_yaml_is_parsed_with_limits(tmp_path, text, message):
    """An alias bomb of a few hundred bytes, deep nesting and huge files are refused at once,
    before any object is built (an alias bomb used to run for a minute and fill memory)."""
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TargetError, match=message) as e:
        resolve_target(str(path))
    assert len(str(e.value)) < 300


def test_descriptor_that_is_not_utf8_or_not_a_file(tmp_path):
    (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(TargetError, match="not UTF-8 text"):
        resolve_target(str(tmp_path / "latin.yaml"))
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(TargetError, match="not a regular file"):
        resolve_target(str(tmp_path / "fifo.yaml"))
