"""Fuzzing (hypothesis): damaged ONNX models through `tvmc compile`, damaged artifacts through
`tvmc run` and `tvmc inspect`, damaged params blobs through the C API under AddressSanitizer.

Every example must keep the error contract: no crash, no hang, no traceback, no internal
error, only documented exit codes, at most one line on stderr when it fails, and no file
written anywhere but the output path (temporary files included). `make test` runs a fixed,
derandomized sample (about 40 s); `make fuzz` sets TVMC_FUZZ_EXAMPLES for a longer random
run and TVMC_GUARD_PAGES=1, so the runtime's buffers sit between guard pages and a kernel that
ran on a plan it was not compiled for would fault instead of corrupting memory silently.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tvmc.cli import cli

EXAMPLES = int(os.environ.get("TVMC_FUZZ_EXAMPLES", "0"))
LONG = EXAMPLES > 0
COMPILE_EXIT_CODES = {0, 2, 3, 4, 5, 6, 7, 9}
RUN_EXIT_CODES = {0, 7, 8}
EXAMPLE_TIMEOUT_S = 300   # a hang, not a slow machine: a valid example takes seconds

def fuzz_settings(examples: int) -> settings:
    return settings(max_examples=EXAMPLES or examples, deadline=None, derandomize=not LONG, database=None,
                    print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                            HealthCheck.data_too_large])


def base_model() -> onnx.ModelProto:
    """A small network over many converters: Conv, Relu, MaxPool, Reshape, Gemm, Add, Softmax,
    ReduceMean, Concat. x [1,3,8,8] -> y [1,10], z [1,4]."""
    rng = np.random.default_rng(0)

    def init(name, shape, dtype=np.float32):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(dtype), name)

    inits = [init("W", (4, 3, 3, 3)), init("B", (4,)), init("G", (64, 10)), init("C", (10,)),
             numpy_helper.from_array(np.array([1, 64], np.int64), "shape")]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Reshape", ["p", "shape"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "G", "C"], ["g"], name="gemm"),
        helper.make_node("Softmax", ["g"], ["y"], axis=1, name="softmax"),
        helper.make_node("ReduceMean", ["p"], ["m"], axes=[2, 3], keepdims=0, name="mean"),
        helper.make_node("Add", ["m", "m"], ["z"], name="add"),
    ]
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# benign values first: hypothesis leans towards the first entries, and an edit that keeps the
# model valid takes the example through the passes, codegen and packaging
INTERESTING_INTS = [1, 2, 3, 0, 7, 64, -1, -5, 2 ** 31 - 1, 2 ** 31, 2 ** 40, 2 ** 62, -(2 ** 31), -(2 ** 62)]
OP_TYPES = ["Relu", "Sigmoid", "Softmax", "Flatten", "Clip", "ReduceMax", "Add", "Conv", "MaxPool", "Gemm",
            "Reshape", "Concat", "Transpose", "NoSuchOp", ""]


def mutate_proto(data, model: onnx.ModelProto) -> None:
    """Apply one structured edit, drawn with hypothesis, to `model` in place."""
    g = model.graph
    kind = data.draw(st.sampled_from(["attr", "dim", "op_type", "opset", "output_dim", "input", "dtype", "init",
                                      "drop", "domain"]))
    if kind in ("dim", "output_dim"):
        vi = data.draw(st.sampled_from(list(g.input) if kind == "dim" else list(g.output)))
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            d = dims[data.draw(st.integers(0, len(dims) - 1))]
            if data.draw(st.booleans()):
                d.dim_value = data.draw(st.sampled_from(INTERESTING_INTS))
            else:
                d.dim_param = data.draw(st.sampled_from(["N", "", "batch size"]))
    elif kind == "attr":
        node = data.draw(st.sampled_from(list(g.node)))
        if node.attribute:
            a = node.attribute[data.draw(st.integers(0, len(node.attribute) - 1))]
            if a.type == onnx.AttributeProto.INT:
                a.i = data.draw(st.sampled_from(INTERESTING_INTS))
            elif a.type == onnx.AttributeProto.INTS:
                del a.ints[:]
                a.ints.extend(data.draw(st.lists(st.sampled_from(INTERESTING_INTS), max_size=5)))
    elif kind == "op_type":
        data.draw(st.sampled_from(list(g.node))).op_type = data.draw(st.sampled_from(OP_TYPES))
    elif kind == "input":
        node = data.draw(st.sampled_from(list(g.node)))
        if node.input:
            names = ["", "nowhere", "x", "W", "c", "y", "shape"]
            node.input[data.draw(st.integers(0, len(node.input) - 1))] = data.draw(st.sampled_from(names))
    elif kind == "dtype":
        g.input[0].type.tensor_type.elem_type = data.draw(st.integers(0, 17))
    elif kind == "opset":
        model.opset_import[0].version = data.draw(st.sampled_from([13, 11, 18, 21, 7, 6, 1, 25, 99]))
    elif kind == "init":
        t = data.draw(st.sampled_from(list(g.initializer)))
        if data.draw(st.booleans()) and t.raw_data:
            t.raw_data = t.raw_data[:data.draw(st.integers(0, len(t.raw_data)))]
        elif t.dims:
            t.dims[data.draw(st.integers(0, len(t.dims) - 1))] = data.draw(st.sampled_from(INTERESTING_INTS))
    elif kind == "drop":
        del g.node[data.draw(st.integers(0, len(g.node) - 1))]
    else:
        data.draw(st.sampled_from(list(g.node))).domain = data.draw(st.sampled_from(["com.microsoft", "ai.onnx.ml"]))


def flip_bytes(data, blob: bytes) -> bytes:
    """Flip, truncate or extend `blob` as hypothesis draws."""
    out = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        if not out:
            break
        what = data.draw(st.sampled_from(["flip", "truncate", "junk"]))
        pos = data.draw(st.integers(0, len(out) - 1))
        if what == "flip":
            out[pos] ^= data.draw(st.integers(1, 255))
        elif what == "truncate":
            del out[pos:]
        else:
            out[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    return bytes(out)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang(f"an example ran longer than {EXAMPLE_TIMEOUT_S} s")


def run_tvmc(*args):
    """`tvmc ARGS` in this process, bounded in time; returns (exit code, stdout, stderr)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(EXAMPLE_TIMEOUT_S)
    try:
        r = CliRunner().invoke(cli, [str(a) for a in args])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if isinstance(r.exception, _Hang):
        raise AssertionError(f"hang: tvmc {' '.join(map(str, args))}")
    return r.exit_code, r.stdout, r.stderr


def check_contract(code, stderr, allowed, what):
    assert code in allowed, f"{what}: exit code {code} not documented here ({sorted(allowed)}): {stderr}"
    assert "Traceback" not in stderr and "internal error" not in stderr, f"{what}: {stderr}"
    if code:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) <= 410, f"{what}: {stderr}"


def listing(folder) -> list:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder)
                  for n in dirs + files)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary folder that every tempfile call uses: it must be empty after each example."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@fuzz_settings(20)
@given(data=st.data())
def test_fuzz_onnx_importer(tmp_path, private_tmp, data):
    work = tmp_path / f"w{len(os.listdir(tmp_path))}"
    work.mkdir()
    model = base_model()
    for _ in range(data.draw(st.integers(1, 3))):
        mutate_proto(data, model)
    blob = model.SerializeToString()
    if data.draw(st.integers(0, 7)) == 7:
        blob = flip_bytes(data, blob)
    (work / "m.onnx").write_bytes(blob)
    code, _, err = run_tvmc("compile", work / "m.onnx", "--target", "native", "-o", work / "out" / "m.tar")
    check_contract(code, err, COMPILE_EXIT_CODES, "compile")
    assert set(listing(work)) <= {"m.onnx", "out", os.path.join("out", "m.tar")}
    assert (work / "out" / "m.tar").exists() == (code == 0)
    assert listing(private_tmp) == []


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(mod.tar bytes, {member: bytes}) of the base model, compiled once."""
    folder = tmp_path_factory.mktemp("art")
    onnx.save(base_model(), folder / "m.onnx")
    code, _, err = run_tvmc("compile", folder / "m.onnx", "--target", "native", "-o", folder / "m.tar")
    assert code == 0, err
    blob = (folder / "m.tar").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    return blob, members


def mutate_json(data, value, depth=0):
    """`value` with one node replaced by a drawn value (a number, string, list, object, null)."""
    replacement = st.one_of(st.sampled_from(INTERESTING_INTS), st.sampled_from(["", "float64", "x", "../x", "so"]),
                            st.none(), st.just([]), st.just({}), st.just([[[[[]]]]]), st.floats(allow_nan=False))
    if isinstance(value, dict) and value and depth < 6 and data.draw(st.integers(0, 3)):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: mutate_json(data, value[key], depth + 1)}
    if isinstance(value, list) and value and depth < 6 and data.draw(st.integers(0, 3)):
        i = data.draw(st.integers(0, len(value) - 1))
        return value[:i] + [mutate_json(data, value[i], depth + 1)] + value[i + 1:]
    return data.draw(replacement)


def pack(members: dict, reseal: bool) -> bytes:
    """A tar of `members`; with `reseal`, metadata.json records their new sizes and digests."""
    members = dict(members)
    if reseal:
        try:
            meta = json.loads(members["metadata.json"])
            for name, blob in members.items():
                if name != "metadata.json":
                    meta["member_bytes"][name] = len(blob)
                    meta["member_sha256"][name] = hashlib.sha256(blob).hexdigest()
            members["metadata.json"] = json.dumps(meta).encode()
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return out.getvalue()


@fuzz_settings(60)
@given(data=st.data())
def test_fuzz_artifact_loader(tmp_path, private_tmp, artifact, data):
    """Damaged artifacts: tar bytes, JSON members (with and without sizes and digests updated),
    params bytes; the library's code only without updated digests (an artifact is native code:
    a resealed library with other code is a different program, see the README's security)."""
    blob, members = artifact
    work = tmp_path / f"w{len(os.listdir(tmp_path))}"
    work.mkdir()
    kind = data.draw(st.sampled_from(["tar", "mod.json", "metadata.json", "mod.params", "mod.so"]))
    if kind == "tar":
        damaged = flip_bytes(data, blob)
    else:
        changed = dict(members)
        if kind.endswith(".json"):
            changed[kind] = json.dumps(mutate_json(data, json.loads(members[kind]))).encode()
        else:
            changed[kind] = flip_bytes(data, members[kind])
        damaged = pack(changed, reseal=kind != "mod.so" and data.draw(st.booleans()))
    (work / "a.tar").write_bytes(damaged)
    code, _, err = run_tvmc("inspect", work / "a.tar")
    check_contract(code, err, {0, 7}, "inspect")
    code, _, err = run_tvmc("run", work / "a.tar", "--outputs", work / "out.npz")
    check_contract(code, err, RUN_EXIT_CODES, "run")
    assert set(listing(work)) <= {"a.tar", "out.npz"} and (work / "out.npz").exists() == (code == 0)
    assert listing(private_tmp) == []


@pytest.fixture(scope="module")
def asan_harness(artifact, tmp_path_factory):
    """tests/unit/c/fuzz_params.c + tvmc_runtime.c, built with AddressSanitizer and UBSan, with the
    base artifact's embedded description."""
    from tvmc.codegen.build import runtime_source
    from tvmc.codegen.description import read_description
    from tvmc.package import kernel_header

    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: needed to build the C API fuzz harness")
    folder = tmp_path_factory.mktemp("asan")
    _, members = artifact
    desc = read_description(io.BytesIO(members["mod.so"]), len(members["mod.so"]), "so", "mod.so")
    from tvmc.codegen.description import encode

    text = encode(desc) + b"\0"
    (folder / "desc.c").write_text(f"const char tvmc_module_description[{len(text)}] = "
                                   f"{{{', '.join(map(str, text))}}};\n")
    (folder / "tvmc_runtime.c").write_bytes(runtime_source())
    (folder / "tvmc_kernels.h").write_bytes(kernel_header())
    harness = os.path.join(os.path.dirname(__file__), "c", "fuzz_params.c")
    cmd = ["gcc", "-std=c99", "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           "-I", str(folder), "-o", str(folder / "fuzz_params"), harness, str(folder / "tvmc_runtime.c"),
           str(folder / "desc.c")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"gcc cannot build with -fsanitize=address,undefined here: {res.stderr.strip()[:200]}")
    return folder / "fuzz_params"


@settings(max_examples=1, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_c_api_params_under_asan(tmp_path, artifact, asan_harness, data):
    """Many damaged params blobs through tvmc_model_create/set_input/run/get_output in one
    sanitized process: the original is accepted, nothing reads or writes out of bounds."""
    _, members = artifact
    params = members["mod.params"]
    n = max(EXAMPLES, 200)
    paths = [tmp_path / "p0"]
    paths[0].write_bytes(params)
    for i in range(1, n):
        p = tmp_path / f"p{i}"
        header_len = int.from_bytes(params[:8], "little")
        if data.draw(st.booleans()):   # edit the JSON header, keep the data
            header = json.loads(params[8:8 + header_len])
            edited = json.dumps(mutate_json(data, header)).encode()
            blob = len(edited).to_bytes(8, "little") + edited + params[8 + header_len:]
        else:
            blob = flip_bytes(data, params)
        p.write_bytes(blob)
        paths.append(p)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    res = subprocess.run([str(asan_harness)] + [str(p) for p in paths], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0 and "Sanitizer" not in res.stderr, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert len(lines) == n and lines[0] == f"{paths[0]}: 0 "


# ---- parsers reached by the second probe (issue 27): --config, metadata.json, records, tvmc.js --------

CONFIG_KEYS = ["opt_level", "target", "input_shapes", "pass_config", "disabled_pass", "target_option", "dump_ir",
               "value_range", "colour", "", "opt-level", 7, None]


def config_values():
    scalars = st.one_of(st.sampled_from(INTERESTING_INTS), st.text(max_size=12), st.booleans(), st.none(),
                        st.floats(allow_nan=True, allow_infinity=True))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                        max_leaves=12)


@fuzz_settings(40)
@given(data=st.data())
def test_fuzz_config_loader(tmp_path, private_tmp, data):
    """--config files: YAML built from drawn keys and values (nested, non-finite, huge), or a
    valid one with its bytes damaged. The model is not an ONNX file, so a config that passes
    stops at the model (exit 2): only the config loader's contract is under test here."""
    import yaml

    work = tmp_path / f"w{len(os.listdir(tmp_path))}"
    work.mkdir()
    doc = data.draw(st.dictionaries(st.sampled_from(CONFIG_KEYS), config_values(), max_size=4))
    try:
        text = yaml.safe_dump(doc).encode()
    except yaml.YAMLError:
        text = b"{}"
    if data.draw(st.booleans()):
        text = flip_bytes(data, b"opt_level: 2\ninput_shapes: {x: [1, 3]}\npass_config: {FuseOps.max_depth: 4}\n"
                          b"anchors: &a [1, 2]\n")
    (work / "c.yaml").write_bytes(text)
    (work / "m.onnx").write_bytes(b"not onnx")
    code, _, err = run_tvmc("compile", work / "m.onnx", "--target", "native", "-o", work / "m.tar", "--config",
                            work / "c.yaml")
    check_contract(code, err, {2, 3, 4, 64}, "compile --config")
    assert set(listing(work)) == {"c.yaml", "m.onnx"}
    assert listing(private_tmp) == []


@fuzz_settings(40)
@given(data=st.data())
def test_fuzz_metadata_json(tmp_path, private_tmp, artifact, data):
    """metadata.json edited field by field (its target above all) and resealed, as a forger would:
    inspect, run and build-runner keep the contract, and no command named in it ever runs (every
    string drawn for it is a command leaving evidence)."""
    blob, members = artifact
    work = tmp_path / f"w{len(os.listdir(tmp_path))}"
    work.mkdir()
    evidence = work / "PWNED"
    meta = json.loads(members["metadata.json"])
    planted = ["/bin/sh", "-c", f"touch {evidence}", "sh"]
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(["target", "target", "kernel_flops", "inputs", "outputs", "top"]))
        if where == "target":
            key = data.draw(st.sampled_from(sorted(meta["target"]) + ["emulator", "assembler", "browser"]))
            meta["target"][key] = data.draw(st.one_of(st.just(planted), st.just(planted[2]),
                                                      st.sampled_from(INTERESTING_INTS), st.just(10 ** 400),
                                                      st.none(), st.just([]), st.just({})))
        elif where == "top":
            key = data.draw(st.sampled_from(sorted(meta)))
            meta[key] = mutate_json(data, meta[key])
        else:
            meta[where] = mutate_json(data, meta.get(where, {}))
    changed = dict(members, **{"metadata.json": json.dumps(meta).encode()})
    (work / "a.tar").write_bytes(pack(changed, reseal=True))
    for args, allowed in ((["inspect", work / "a.tar"], {0, 7}), (["run", work / "a.tar"], RUN_EXIT_CODES),
                          (["build-runner", work / "a.tar", "-o", work / "runner"], {0, 3, 6, 7})):
        code, _, err = run_tvmc(*args)
        check_contract(code, err, allowed, args[0])
    assert not evidence.exists()
    assert set(listing(work)) <= {"a.tar", "runner"}
    assert listing(private_tmp) == []


RECORD = {"version": 1, "target": {"hash": "0123456789abcdef", "name": "x86"},
          "task": {"name": "dense.cpu", "op": "nn.dense", "workload": [[1, 8], "float32", [4, 8], "float32", [1, 4],
                                                                     "float32"],
                   "in_dtypes": ["float32", "float32"], "flops": 64},
          "config": {"tile_k": 4}, "costs_s": [1e-6, 2e-6], "error": 0, "error_msg": "", "timestamp": 1.0}


@fuzz_settings(200)
@given(data=st.data())
def test_fuzz_tuning_records(tmp_path, data):
    """Record files: lines of drawn edits of a valid record (numbers 0, huge, NaN; wrong types;
    nesting), damaged bytes, blank and torn lines. Loading them and applying the best ones either
    works or raises TuningError: never another exception."""
    from tvmc.autotune.record import ApplyHistoryBest, load_records
    from tvmc.errors import TuningError
    from tvmc.target import resolve_target

    lines = []
    for _ in range(data.draw(st.integers(1, 5))):
        kind = data.draw(st.sampled_from(["edit", "edit", "bytes", "blank", "constant"]))
        if kind == "edit":
            lines.append(json.dumps(mutate_json(data, RECORD)).encode())
        elif kind == "bytes":
            lines.append(flip_bytes(data, json.dumps(RECORD).encode()))
        elif kind == "constant":
            lines.append(json.dumps(RECORD).replace("1e-06", data.draw(st.sampled_from(
                ["NaN", "Infinity", "-1", "0", "1e400", "0.0"]))).encode())
        else:
            lines.append(b"")
    path = tmp_path / f"r{len(os.listdir(tmp_path))}.json"
    path.write_bytes(b"\n".join(lines))
    try:
        records = load_records(path)
        lookup = ApplyHistoryBest(records, resolve_target("x86"))
        lookup("dense.cpu", tuple(RECORD["task"]["workload"]))
        lookup.summary()
    except TuningError as e:
        assert "\n" not in str(e) and str(e).startswith(str(path))


@pytest.fixture(scope="module")
def web_folder(tmp_path_factory):
    """The web output of the base model (wasm), or a skip naming what is missing."""
    if shutil.which("node") is None:
        pytest.skip("node not found; install the Debian package nodejs (apt-get install nodejs)")
    if shutil.which("clang-19") is None or shutil.which("wasm-ld-19") is None:
        pytest.skip("clang-19 and wasm-ld-19 not found: apt-get install clang-19 lld-19 (make install)")
    folder = tmp_path_factory.mktemp("web")
    onnx.save(base_model(), folder / "m.onnx")
    code, _, err = run_tvmc("compile", folder / "m.onnx", "--target", "wasm", "--output-format", "web", "-o",
                            folder / "site")
    assert code == 0, err
    return folder / "site"


WEB_HARNESS = """
import { loadModel } from "%s";
for (const folder of process.argv.slice(2)) {
  try {
    const model = await loadModel(folder);
    model.destroy();
    console.log("ok");
  } catch (e) {
    console.log(e instanceof Error && e.message.startsWith("tvmc: ") ? "refused" : `crash: ${e && e.stack}`);
  }
}
"""


@settings(max_examples=1, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_web_runtime_loader(tmp_path, web_folder, data):
    """Damaged web folders (metadata.json edited or resealed, mod.params and mod.wasm bytes flipped,
    truncated or grown, a FIFO in place of a member) through tvmc.js's loadModel in one Node
    process: each loads or is refused with a "tvmc: " error, never another exception or a hang."""
    import stat as stat_module

    names = ("metadata.json", "mod.params", "mod.wasm")
    original = {n: (web_folder / n).read_bytes() for n in names}
    folders = []
    for i in range(max(EXAMPLES, 40)):
        folder = tmp_path / f"f{i}"
        shutil.copytree(web_folder, folder)
        members = dict(original)
        kind = data.draw(st.sampled_from(["metadata.json", "mod.params", "mod.wasm", "reseal", "fifo"]))
        if kind == "metadata.json":
            members[kind] = json.dumps(mutate_json(data, json.loads(original[kind]))).encode()
        elif kind == "reseal":
            name = data.draw(st.sampled_from(["mod.params", "mod.wasm"]))
            members[name] = flip_bytes(data, original[name])
            meta = json.loads(original["metadata.json"])
            meta["member_bytes"][name] = len(members[name])
            meta["member_sha256"][name] = hashlib.sha256(members[name]).hexdigest()
            members["metadata.json"] = json.dumps(meta).encode()
        elif kind != "fifo":
            members[kind] = flip_bytes(data, original[kind])
        for name, blob in members.items():
            (folder / name).write_bytes(blob)
        if kind == "fifo":
            victim = folder / data.draw(st.sampled_from(names))
            victim.unlink()
            os.mkfifo(victim)
            assert stat_module.S_ISFIFO(os.stat(victim).st_mode)
        folders.append(folder)
    script = tmp_path / "harness.mjs"
    script.write_text(WEB_HARNESS % (web_folder / "tvmc.js").as_uri())
    res = subprocess.run([shutil.which("node"), str(script), *map(str, folders)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert len(lines) == len(folders) and all(ln in ("ok", "refused") for ln in lines), res.stdout[-3000:]
