"""Target descriptors: shipped YAML validates; paths, overrides and errors of resolve_target."""

import json
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
