"""CLI: error lines and exit codes, option parsing, and `run` / `inspect` on a fixture artifact."""

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import click
import jsonschema
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import tvmc
from test_package import build_fixture_library, make_fixture_module
from tvmc.cli import cli, main, parse_dim_ranges, parse_input_shapes, parse_value_ranges
from tvmc.package import save_artifact


@pytest.fixture(scope="module")
def fixture_library(tmp_path_factory):
    return build_fixture_library(str(tmp_path_factory.mktemp("lib")))


@pytest.fixture
def artifact_path(tmp_path, fixture_library):
    return str(save_artifact(make_fixture_module(fixture_library), tmp_path / "mod.tar"))


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def error_line(result) -> str:
    """The one `error: ...` line on stderr; fails if there is more or a traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_unknown_target_lists_known(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    r = invoke("compile", model, "--target", "nosuch", "-o", tmp_path / "o.tar")
    assert r.exit_code == 3
    line = error_line(r)
    assert line.startswith("error: unknown target 'nosuch'") and "x86" in line
    assert not (tmp_path / "o.tar").exists()


def test_unknown_target_option(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    r = invoke("compile", model, "--target", "native", "--target-option", "colour=red", "-o", tmp_path / "o.tar")
    assert r.exit_code == 3 and "colour" in error_line(r)


def test_missing_model_file(tmp_path):
    r = invoke("compile", tmp_path / "missing.onnx", "--target", "native", "-o", tmp_path / "o.tar")
    assert r.exit_code == 2
    assert error_line(r) == f"error: {tmp_path / 'missing.onnx'}: no such file"


def test_compile_bad_dump_stage_is_usage_error(tmp_path):
    r = invoke("compile", tmp_path / "m.onnx", "--target", "native", "-o", tmp_path / "o.tar", "--dump-ir", "graph,xyz")
    assert r.exit_code == 64 and "xyz" in error_line(r) and error_line(r).endswith(" compile --help)")


def test_compile_opt_level_range(tmp_path):
    r = invoke("compile", tmp_path / "m.onnx", "--target", "native", "-o", tmp_path / "o.tar", "--opt-level", "4")
    assert r.exit_code == 64 and error_line(r).startswith("error: Invalid value for '-O' / '--opt-level'")


@pytest.mark.parametrize("args", [["nosuchcommand"], ["run"], ["run", "a.tar", "--nope"], ["compile", "--target"]])
def test_usage_errors_have_their_own_exit_code(args):
    r = invoke(*args)
    assert r.exit_code == 64 and error_line(r).startswith("error: ")


def test_parse_input_shapes():
    assert parse_input_shapes("data_0:[1,3,224,224] mask:[1, 128]") == (("data_0", (1, 3, 224, 224)),
                                                                         ("mask", (1, 128)))
    assert parse_input_shapes("input:0:[2,3]") == (("input:0", (2, 3)),)
    assert parse_input_shapes("scalar:[]") == (("scalar", ()),)
    assert parse_input_shapes(None) == ()
    for bad in ("data", "data:[1,x]", "data:[0,3]", "a:[1] a:[2]", "data:[1,3", "data:[4294967296,4294967296]",
                "data:[99999999999999999999999999]", "data:[-1]"):
        with pytest.raises(click.BadParameter):
            parse_input_shapes(bad)


def test_parse_input_shapes_with_ranges_and_dim_ranges():
    assert parse_input_shapes("ids:[1,1..512] x:[ 2 .. 4 ,3]") == (("ids", (1, (1, 512))), ("x", ((2, 4), 3)))
    for bad in ("ids:[1,0..4]", "ids:[1,5..4]", "ids:[1,1..]", "ids:[1..2..3]", "ids:[1,4294967296..4294967297,"
                "4294967296]"):
        with pytest.raises(click.BadParameter):
            parse_input_shapes(bad)
    assert parse_dim_ranges(("seq=1..512", "batch size=1..16")) == {"seq": (1, 512), "batch size": (1, 16)}
    for bad in (("seq",), ("seq=4",), ("seq=0..4",), ("seq=5..4",), ("=1..2",), ("s=1..2", "s=1..3"), ("s=a..b",)):
        with pytest.raises(click.BadParameter):
            parse_dim_ranges(bad)


def test_parse_value_ranges():
    assert parse_value_ranges(("n=1:64", "a=b=-2.5:0")) == {"n": (1.0, 64.0), "a=b": (-2.5, 0.0)}
    for bad in (("n:1:2",), ("n=1",), ("n=x:2",), ("=1:2",), ("n=3:2",), ("n=1:2", "n=0:1")):
        with pytest.raises(click.BadParameter):
            parse_value_ranges(bad)


def test_run_non_tar(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a tar file" * 100)
    r = invoke("run", bad)
    assert r.exit_code == 7
    line = error_line(r)
    assert line.startswith(f"error: {bad}: not a tvmc artifact")


def test_run_missing_file(tmp_path):
    r = invoke("run", tmp_path / "nope.tar")
    assert r.exit_code == 7 and error_line(r) == f"error: {tmp_path / 'nope.tar'}: no such file"


@pytest.mark.parametrize("mode,expected", [("zeros", 0.0), ("ones", 2.0)])
def test_run_fill_modes(tmp_path, artifact_path, mode, expected):
    out = tmp_path / "out.npz"
    r = invoke("run", artifact_path, "--fill-mode", mode, "--outputs", out)
    assert r.exit_code == 0, r.output
    with np.load(out) as data:
        assert data.files == ["out"]
        np.testing.assert_array_equal(data["out"], expected + np.arange(8, dtype=np.float32))
    assert "out: [8] float32" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mod.tar", "out.npz"]


def test_run_random_is_seeded(tmp_path, artifact_path):
    invoke("run", artifact_path, "--outputs", tmp_path / "a.npz")
    invoke("run", artifact_path, "--fill-mode", "random", "--outputs", tmp_path / "b.npz")
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        np.testing.assert_array_equal(a["out"], b["out"])


def test_run_bad_fill_mode(artifact_path):
    r = invoke("run", artifact_path, "--fill-mode", "twos")
    assert r.exit_code == 64 and "twos" in error_line(r)


def test_run_inputs_npz(tmp_path, artifact_path):
    np.savez(tmp_path / "in.npz", data=np.full(8, 3, np.float32))
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz",
               "--print-time", "--repeat", "3", "--number", "2", "--print-top", "3", "--threads", "1")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "out.npz") as data:
        np.testing.assert_array_equal(data["out"], 6 + np.arange(8, dtype=np.float32))
    assert "median" in r.stdout and "3 repeats x 2 runs" in r.stdout
    assert "1. class     7" in r.stdout


def test_run_inputs_wrong_name(tmp_path, artifact_path):
    np.savez(tmp_path / "in.npz", x=np.zeros(8, np.float32))
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz")
    assert r.exit_code == 8
    assert error_line(r) == f"error: {tmp_path / 'in.npz'}: unknown input x; the model's inputs are: data"


def test_run_fills_inputs_missing_from_the_npz(tmp_path, artifact_path):
    np.savez(tmp_path / "in.npz")  # no arrays: 'data' is made by --fill-mode
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz", "--fill-mode", "ones", "--outputs",
               tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    assert f"inputs not in {tmp_path / 'in.npz'}, filled with ones: data" in r.stdout
    with np.load(tmp_path / "out.npz") as data:
        np.testing.assert_array_equal(data["out"], 2 + np.arange(8, dtype=np.float32))


def test_run_inputs_wrong_shape(tmp_path, artifact_path):
    np.savez(tmp_path / "in.npz", data=np.zeros((2, 8), np.float32))
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert r.exit_code == 8
    assert error_line(r) == "error: input 'data': expected shape [8] float32, got [2,8] float32"
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("kind,message", [
    ("text", "not an .npz file (no zip signature"),
    ("npy", "is a .npy file (one array); inputs must be an .npz keyed by input name, e.g. np.savez(path, name=array)"),
    ("strings", "input 'data' has dtype <U3"),
    ("objects", "holds object arrays"),
    ("damaged", "cannot read inputs as .npz"),
    ("fifo", "not a regular file (a FIFO)"),
])
def test_run_inputs_that_are_not_an_npz_of_numbers(tmp_path, artifact_path, kind, message):
    path = tmp_path / "in.npz"
    if kind == "text":
        path.write_text("hello")
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(8, np.float32))
    elif kind == "strings":
        np.savez(path, data=np.array(["abc"] * 8))
    elif kind == "objects":
        np.savez(path, data=np.array([None] * 8, dtype=object))
    elif kind == "damaged":
        np.savez(path, data=np.zeros(8, np.float32))
        path.write_bytes(path.read_bytes()[:60])
    else:
        os.mkfifo(path)
    r = invoke("run", artifact_path, "--inputs", path)
    assert r.exit_code == 8 and message in error_line(r)


def test_internal_error_is_one_line(monkeypatch, artifact_path):
    from tvmc.runtime.cpu import GraphExecutor

    def boom(self):
        raise RuntimeError("kaboom\nsecond line")

    monkeypatch.setattr(GraphExecutor, "run", boom)
    r = invoke("run", artifact_path)
    assert r.exit_code == 70
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("internal error: RuntimeError: kaboom")


def test_verbose_shows_traceback_and_keeps_exit_code(tmp_path):
    r = invoke("run", tmp_path / "nope.tar", "--verbose")
    assert r.exit_code == 7
    assert "Traceback" in r.stderr and "ArtifactError" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'nope.tar'}: no such file"


def test_error_line_is_bounded_and_escaped(monkeypatch, artifact_path):
    from tvmc.errors import InputError
    from tvmc.runtime.cpu import GraphExecutor

    def boom(self):
        raise InputError("bad \x1b[31mred\x1b[0m \udcff" + "x" * 10000)

    monkeypatch.setattr(GraphExecutor, "run", boom)
    r = invoke("run", artifact_path)
    line = error_line(r)
    assert r.exit_code == 8 and len(line) <= 410 and "\x1b" not in line and "\\x1b[31m" in line and "\\udcff" in line


def test_keyboard_interrupt_is_one_line_and_130(monkeypatch, artifact_path):
    from tvmc.runtime.cpu import GraphExecutor

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(GraphExecutor, "run", interrupted)
    r = invoke("run", artifact_path)
    assert r.exit_code == 130 and error_line(r) == "error: interrupted"


@pytest.mark.parametrize("where", ["artifact", "inputs", "device", "slash"])
def test_run_outputs_path_rules(tmp_path, artifact_path, where):
    np.savez(tmp_path / "in.npz", data=np.zeros(8, np.float32))
    (tmp_path / "folder").mkdir()
    target = {"artifact": artifact_path, "inputs": tmp_path / "in.npz", "folder": tmp_path / "folder",
              "device": "/dev/null", "slash": str(tmp_path / "new") + "/"}[where]
    before = open(artifact_path, "rb").read()
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz", "--outputs", target)
    assert r.exit_code == 7 and error_line(r).startswith(f"error: {target}")
    assert (open(artifact_path, "rb").read() == before and os.path.exists("/dev/null")
            and not (tmp_path / "new").exists())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "in.npz", "mod.tar"]


def test_inspect(artifact_path):
    r = invoke("inspect", artifact_path)
    assert r.exit_code == 0, r.output
    assert "kernels        1 distinct, 1 calls" in r.stdout
    assert "params         1 tensors, 32 bytes" in r.stdout
    assert "3 buffers for 3 tensors, 96 bytes" in r.stdout
    assert f'"kernel_abi_version": {tvmc.KERNEL_ABI_VERSION}' in r.stdout
    assert "mod.so, " in r.stdout and "embedded description matches" in r.stdout


def test_inspect_prints_kernel_calls_and_activation_memory(tmp_path, fixture_library):
    module = make_fixture_module(fixture_library)
    module.metadata.update(num_kernels=1, num_kernel_calls=3, planned_activation_bytes=1024,
                           unplanned_activation_bytes=4096)
    r = invoke("inspect", save_artifact(module, tmp_path / "mod.tar"))
    assert r.exit_code == 0, r.output
    assert "kernels        1 distinct, 3 calls" in r.stdout
    assert "memory         activations 1.0 KB planned, 4.1 KB without reuse (ratio 0.250)" in r.stdout


def test_main_returns_exit_code(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.tar")]) == 7
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["--version"]) == 0


def test_compile_with_stub_driver(tmp_path, monkeypatch, fixture_library):
    """The compile command's wiring (options, save, summary) with compile_model stubbed out."""
    import tvmc.driver

    seen = {}

    def fake_compile(model, target, options, progress=None):
        seen.update(model=model, target=target, options=options, progress=progress)
        return make_fixture_module(fixture_library)

    monkeypatch.setattr(tvmc.driver, "compile_model", fake_compile)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    out = tmp_path / "sub" / "m.tar"
    r = invoke("compile", model, "--target", "x86 -mcpu=skylake-avx512", "--target-option", "l2_bytes=1048576",
               "-o", out, "-O", "2", "--disabled-pass", "FoldConstant", "--pass-config", "FuseOps.max_depth=8",
               "--input-shapes", "data:[8]", "--dump-ir", "ll,asm", "--print-pass-times")
    assert r.exit_code == 0, r.output
    opts = seen["options"]
    assert seen["model"] == str(model) and seen["target"].cpu == "skylake-avx512" and seen["target"].l2_bytes == 1048576
    assert opts.opt_level == 2 and opts.disabled_passes == frozenset({"FoldConstant"})
    assert opts.pass_config == (("FuseOps.max_depth", 8),) and opts.input_shapes == (("data", (8,)),)
    assert opts.dump_ir == ("ll", "asm") and os.path.dirname(opts.dump_dir) == str(out.parent)
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.dumps", "m.tar"]   # the stub wrote no dumps
    assert seen["progress"] is None  # stderr is no terminal here: no progress line
    assert out.is_file()
    assert "kernels    1 distinct, 1 calls" in r.stdout and f"output     {out}" in r.stdout
    assert "params     0.00 MB" in r.stdout and "memory" not in r.stdout   # (the stub records no plan)
    assert invoke("run", out, "--fill-mode", "zeros").exit_code == 0


# ---- --json, --config, run conveniences, help ---------------------------------------------------

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "tvmc-json.schema.json").read_text())


def json_doc(result, kind: str) -> dict:
    """The one JSON document on stdout, checked against docs/tvmc-json.schema.json."""
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # fails if anything else is on stdout
    jsonschema.validate(doc, SCHEMA)
    assert doc["tvmc_json"] == 1 and doc["kind"] == kind
    return doc


def test_run_json_with_timing_profile_and_top(tmp_path, artifact_path):
    np.savez(tmp_path / "in.npz", data=np.full(8, 3, np.float32))
    r = invoke("run", artifact_path, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz", "--json",
               "--print-time", "--repeat", "3", "--number", "2", "--profile", "--print-top", "2")
    doc = json_doc(r, "run")
    assert doc["inputs"] == [{"name": "data", "shape": [8], "dtype": "float32", "source": "given"}]
    assert doc["outputs"] == [{"name": "out", "shape": [8], "dtype": "float32", "min": 6.0, "max": 13.0, "mean": 9.5}]
    assert doc["outputs_file"] == str(tmp_path / "out.npz") and (tmp_path / "out.npz").is_file()
    assert (doc["timing"]["repeat"], doc["timing"]["number"]) == (3, 2) and doc["timing"]["median_ms"] > 0
    (kernel,) = doc["profile"]["kernels"]
    assert doc["profile"]["runs"] == 6 and kernel["name"] == "k" and kernel["calls"] == 1
    assert kernel["share"] == 1.0 and kernel["flops"] is None and kernel["gflop_s"] is None  # no reduction
    assert doc["top"] == {"out": [{"class": 7, "score": 13.0}, {"class": 6, "score": 12.0}]}


def test_run_profile_table(artifact_path):
    r = invoke("run", artifact_path, "--profile")
    assert r.exit_code == 0, r.output
    assert "profile (kernel by kernel, 1 run;" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("k "))
    assert row.split()[1] == "1" and "100.0%" in row and row.split()[-1] == "-"  # GFLOP/s unknown
    assert "execution time" not in r.stdout  # profiling alone does not print the latency table


def test_run_repeat_without_print_time_is_honoured(artifact_path):
    r = invoke("run", artifact_path, "--repeat", "3")
    assert r.exit_code == 0, r.output
    assert "3 repeats x 1 runs" in r.stdout
    plain = invoke("run", artifact_path)
    assert "execution time" not in plain.stdout


def test_small_latencies_print_in_microseconds(capsys):
    from tvmc.cli import print_time_table

    stats = {"mean_ms": 0.0021, "median_ms": 0.002, "min_ms": 0.0019, "max_ms": 0.0025, "std_ms": 0.0001,
             "repeat": 5, "number": 10}
    print_time_table(stats)
    out = capsys.readouterr().out
    assert "execution time (µs per run; 5 repeats x 10 runs)" in out and "     2.000" in out
    print_time_table({**stats, "median_ms": 12.5})
    assert "execution time (ms per run;" in capsys.readouterr().out


def test_inspect_json(artifact_path):
    doc = json_doc(invoke("inspect", artifact_path, "--json"), "inspect")
    assert doc["kernels"] == {"distinct": 1, "calls": 1, "load_calls": 0}
    assert doc["params"] == {"tensors": 1, "bytes": 32}
    assert doc["storage"] == {"buffers": 3, "tensors": 3, "bytes": 96}
    assert doc["metadata"]["kernel_abi_version"] == tvmc.KERNEL_ABI_VERSION and doc["library"]["file"] == "mod.so"


@pytest.fixture
def stub_driver(monkeypatch, fixture_library):
    """compile_model replaced by a stub returning the fixture module; yields the options it got."""
    import tvmc.driver

    seen = {}

    def fake_compile(model, target, options, progress=None):
        seen.update(model=model, target=target, options=options)
        return make_fixture_module(fixture_library)

    monkeypatch.setattr(tvmc.driver, "compile_model", fake_compile)
    return seen


def test_compile_json(tmp_path, stub_driver):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    doc = json_doc(invoke("compile", model, "--target", "native", "-o", tmp_path / "m.tar", "--json"), "compile")
    assert doc["output"] == str(tmp_path / "m.tar") and doc["model"] == str(model)
    assert doc["target"]["name"] == "x86-avx2" or doc["target"]["name"].startswith("x86")
    assert doc["kernels"] == {"distinct": 1, "calls": 1, "load_calls": 0} and doc["params_bytes"] == 32
    assert doc["tuning_records"] is None and doc["timings_s"]["total"] >= doc["timings_s"]["package"]


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_compile_config_file_and_flags_override_it(tmp_path, stub_driver, suffix):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    config = {"target": "x86 -mcpu=skylake-avx512", "opt-level": 2, "input_shapes": {"data": [8]},
              "pass_config": {"FuseOps.max_depth": 8}, "disabled_pass": ["FoldConstant", "FoldScaleAxis"],
              "target_option": {"l2_bytes": 1048576}, "output": str(tmp_path / "from_config.tar")}
    path = tmp_path / f"c.{suffix}"
    path.write_text(json.dumps(config) if suffix == "json" else yaml.safe_dump(config))
    r = invoke("compile", model, "--config", path, "-O", "1")
    assert r.exit_code == 0, r.output
    opts = stub_driver["options"]
    assert opts.opt_level == 1  # the flag overrides the file's 2
    assert opts.input_shapes == (("data", (8,)),) and opts.pass_config == (("FuseOps.max_depth", 8),)
    assert opts.disabled_passes == frozenset({"FoldConstant", "FoldScaleAxis"})
    assert stub_driver["target"].cpu == "skylake-avx512" and stub_driver["target"].l2_bytes == 1048576
    assert (tmp_path / "from_config.tar").is_file()


def test_compile_flags_and_config_file_give_symbolic_ranges(tmp_path, stub_driver):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    r = invoke("compile", model, "--target", "x86", "-o", tmp_path / "a.tar", "--input-shapes", "ids:[1,1..512]",
               "--dim-range", "batch=1..16", "--dim-range", "seq=1..512")
    assert r.exit_code == 0, r.output
    opts = stub_driver["options"]
    assert opts.input_shapes == (("ids", (1, (1, 512))),)
    assert opts.dim_ranges == (("batch", (1, 16)), ("seq", (1, 512)))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"input_shapes": {"ids": [1, "1..512"]}, "dim_range": {"seq": "1..512"}}))
    r = invoke("compile", model, "--target", "x86", "-o", tmp_path / "b.tar", "--config", path)
    assert r.exit_code == 0, r.output
    opts = stub_driver["options"]
    assert opts.input_shapes == (("ids", (1, (1, 512))),) and opts.dim_ranges == (("seq", (1, 512)),)
    path.write_text(yaml.safe_dump({"input_shapes": {"ids": [1, "1..x"]}}))
    r = invoke("compile", model, "--target", "x86", "-o", tmp_path / "c.tar", "--config", path)
    assert r.exit_code != 0 and "malformed at 'input_shapes/ids/1'" in r.output


def test_config_file_errors(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    bad = tmp_path / "c.yaml"
    bad.write_text("target: native\ncolour: red\n")
    r = invoke("compile", model, "--config", bad, "-o", tmp_path / "o.tar")
    assert r.exit_code == 64 and "unknown option 'colour' for tvmc compile" in r.output and "opt_level" in r.output
    bad.write_text("- a list\n")
    r = invoke("compile", model, "--config", bad, "-o", tmp_path / "o.tar")
    assert r.exit_code == 64 and "expected a mapping" in r.output
    assert not (tmp_path / "o.tar").exists()


def _all_commands():
    return [(name, cmd) for name, cmd in cli.commands.items()]


def test_every_flag_has_help_and_tvmc_help_shows_whole_summaries():
    for name, cmd in _all_commands():
        for p in cmd.params:
            if isinstance(p, click.Option):
                assert p.help and p.help.strip(), f"tvmc {name} {p.opts[0]} has no help text"
    text = invoke("--help").stdout
    flat = "".join(text.split())  # click wraps lines (and breaks after hyphens)
    for name, cmd in _all_commands():
        assert cmd.short_help and "..." not in cmd.short_help
        assert "".join(cmd.short_help.split()) in flat, f"tvmc --help cuts the summary of {name}"
    assert "Exit codes:" in text


def test_exit_codes_table_in_readme_matches_the_cli():
    from tvmc.cli import EXIT_CODES

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|$", readme, re.M)
    assert [(int(code), text.strip()) for code, text in rows] == [(c, t) for c, t in EXIT_CODES]


def test_codegen_progress_only_on_a_terminal(monkeypatch):
    import io

    from tvmc.cli import codegen_progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert codegen_progress() is None
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    progress = codegen_progress()
    progress("lower", 3, 10)
    progress("llvm", 0, 1)
    progress.close()
    assert "codegen: lowering kernels" in term.getvalue() and "3/10" in term.getvalue()
    assert "codegen: llvm" in term.getvalue()


def test_readme_lists_every_graph_pass():
    from tvmc.passes import list_passes

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    table = readme[readme.index("| pass | opt level | what it does |"):]
    table = table[:table.index("\n\n")]
    listed = re.findall(r"^\| (\w+) \|", table, re.M)[1:]
    assert sorted(listed) == sorted(list_passes())


def test_json_errors_leave_stdout_empty(tmp_path):
    r = invoke("run", tmp_path / "nope.tar", "--json")
    assert r.exit_code == 7 and r.stdout == ""
    assert error_line(r) == f"error: {tmp_path / 'nope.tar'}: no such file"


# ---- options objects from one table of flags ----------------------------------------------------

def test_each_option_field_has_one_flag_declaration():
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.autotune.tune import TuneOptions
    from tvmc.cli import COMPILE_FLAGS, GRAPH_FLAGS, MEASURE_FLAGS, TUNE_FLAGS
    from tvmc.driver import CompileOptions

    def dests(table):
        return [f.dest for f in table.flags]

    for table, cls, not_flags in [(COMPILE_FLAGS, CompileOptions, {"dump_dir"}),
                                  (TUNE_FLAGS, TuneOptions, {"measure", "batch_size", "seed"}),
                                  (MEASURE_FLAGS, MeasureOptions, {"build_timeout_s", "check"})]:
        assert table.options_class() is cls
        fields = {f.name for f in dataclasses.fields(cls)}
        assert len(set(dests(table))) == len(dests(table)) and set(dests(table)) == fields - not_flags, cls
    assert set(dests(GRAPH_FLAGS)) < set(dests(COMPILE_FLAGS))
    # compile and tune declare the graph flags once: the same click option in both commands
    compile_params = {p.name: p for p in cli.commands["compile"].params}
    tune_params = {p.name: p for p in cli.commands["tune"].params}
    for dest in dests(GRAPH_FLAGS):
        a, b = compile_params[dest], tune_params[dest]
        assert (a.opts, a.help, a.multiple, a.type.name) == (b.opts, b.help, b.multiple, b.type.name), dest


@pytest.fixture
def stub_tune(monkeypatch):
    """api.list_tasks and api.tune replaced by stubs; yields what they were given."""
    import tvmc.api
    from tvmc.api import TaskList, TuneResult

    seen = {}

    def fake_list_tasks(model, target, options=None, **fields):
        seen.update(compile_options=options, target=target)
        return TaskList(str(model), target, [], [], options)

    def fake_tune(model, target, records, options=None, *, task_list=None, tasks=None, progress=None, **kw):
        seen.update(tune_options=options, tasks=tasks)
        return TuneResult(task_list, (), [], records)

    monkeypatch.setattr(tvmc.api, "list_tasks", fake_list_tasks)
    monkeypatch.setattr(tvmc.api, "tune", fake_tune)
    return seen


def test_tune_builds_its_options_from_the_flags(tmp_path, stub_tune, stub_driver):
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.autotune.tune import TuneOptions
    from tvmc.driver import CompileOptions

    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    graph = ["-O", "2", "--input-shapes", "x:[1,8]", "--value-range", "n=1:4", "--disabled-pass", "FoldScaleAxis",
             "--pass-config", "FuseOps.max_depth=8", "--mixed-precision", "float16", "--mixed-precision-ops",
             "nn.dense"]
    r = invoke("tune", model, "--target", "x86", "-o", tmp_path / "r.json", "--trials", "9", "--tuner", "ga",
               "--time-budget", "30", "--number", "2", "--timeout", "5", "--parallel", "1", "--tasks", "0-1", "--json",
               *graph)
    assert r.exit_code == 0, r.output
    want = CompileOptions(opt_level=2, input_shapes={"x": [1, 8]}, value_ranges={"n": (1, 4)},
                          disabled_passes={"FoldScaleAxis"}, pass_config={"FuseOps.max_depth": 8},
                          mixed_precision="float16", mixed_precision_ops=("nn.dense",))
    assert stub_tune["compile_options"] == want and stub_tune["tasks"] == (0, 1)
    assert stub_tune["tune_options"] == TuneOptions(trials=9, tuner="ga", time_budget_s=30.0,
                                                    measure=MeasureOptions(number=2, timeout_s=5.0, parallel=1))
    # compile takes the same flags into the same fields
    r = invoke("compile", model, "--target", "x86", "-o", tmp_path / "m.tar", *graph)
    assert r.exit_code == 0, r.output
    assert stub_driver["options"] == want
    # flags left out keep the dataclasses' defaults
    assert invoke("tune", model, "--target", "x86", "--list-tasks", "--json").exit_code == 0
    assert stub_tune["compile_options"] == CompileOptions()


def test_an_option_the_dataclass_refuses_is_a_usage_error(tmp_path, stub_tune):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    r = invoke("tune", model, "--target", "x86", "--list-tasks", "--mixed-precision-ops", "nn.dense")
    # CliRunner names it cli
    assert (r.exit_code == 64
            and error_line(r) == "error: mixed_precision_ops needs mixed_precision (see cli tune --help)")
    config = tmp_path / "c.yaml"
    config.write_text("trials: 5\ndisabled_pass: [FoldScaleAxis]\ntuning_records: prior.json\n")
    (tmp_path / "prior.json").write_text("")
    r = invoke("tune", model, "--target", "x86", "-o", tmp_path / "r.json", "--config", config)
    assert r.exit_code == 0, r.output
    assert stub_tune["tune_options"].trials == 5 and stub_tune["tune_options"].prior_records == "prior.json"
    assert stub_tune["compile_options"].disabled_passes == frozenset({"FoldScaleAxis"})


@pytest.mark.parametrize("text,shipped", [("no_shipped_records: true\n", False), ("no_shipped_records: false\n", True),
                                          ("", True)])
def test_an_on_off_flag_in_a_config_file_means_the_flag(tmp_path, stub_driver, text, shipped):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    (tmp_path / "c.yaml").write_text(text + "target: x86\n")
    r = invoke("compile", model, "--config", tmp_path / "c.yaml", "-o", tmp_path / "m.tar")
    assert r.exit_code == 0, r.output
    assert stub_driver["options"].shipped_records is shipped


def _two_conv_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32), "w2")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["a"], ["b"]),
                           helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 12, 12])], [w1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.parametrize("budget,bound,at_load", [("0", None, "0"), ("1.25", 1.25, "0"), (None, 1.25, "0"),
                                                  ("0", 1.0, None)])
def test_compile_summary_reports_the_growth_of_the_params_within_the_size_budget(tmp_path, budget, bound, at_load):
    """The summary's params line gives the params' size against the model's weights; F(4x4)
    forced on both convs with the weights transformed at compile time (winograd_at_load 0) grows
    them about 4x without a budget (size_budget=0), and the default budget (1.25) keeps them within
    1.25x, the convs left on the direct form; transformed at load time (the default) they stay 1x."""
    model = tmp_path / "m.onnx"
    _two_conv_model(model)
    args = ["--pass-config", "AlterOpLayout.winograd_tile_size=4"]
    if at_load is not None:
        args += ["--pass-config", f"AlterOpLayout.winograd_at_load={at_load}"]
    if budget is not None:
        args += ["--pass-config", f"AlterOpLayout.size_budget={budget}"]
    r = invoke("compile", model, "--target", "x86-avx2", "-o", tmp_path / "m.tar", *args)
    assert r.exit_code == 0, r.output
    found = re.search(r"params\s+[\d.]+ (?:MB|KB), ([\d.]+)x the model's ([\d.]+) KB of weights", r.stdout)
    assert found, r.stdout
    ratio, weights_kb = float(found.group(1)), float(found.group(2))
    assert weights_kb == pytest.approx((32 * 16 + 32 * 32) * 9 * 4 / 1e3, abs=0.05)
    if bound is None:
        assert ratio > 3.5
    else:
        assert ratio <= bound
