"""ONNX backend node conformance: run the onnx package's node test cases through tvmc on a target.

`python -m tvmc.conformance [--target T]` (`make conformance [TARGET=T]`, default native: this
host's x86 CPU) generates the node cases in memory from the
installed onnx package (onnx.backend.test.case.node.collect_testcases(); nothing is written but
the report), compiles and runs every in-scope case through tvmc.backend (driver -> mod.tar ->
GraphExecutor) in worker processes with a per-case timeout (a crash or hang costs one case,
not the run), compares with the case's expected outputs (the case's rtol/atol for floats,
exact for integer and bool) and writes docs/conformance.md (another target: docs/conformance-T.md,
and its counts into the targets table of docs/conformance.md). Its last line on stdout is
`conformance: N passed, M failed` (M counts wrong outputs and errors).

Scope (issue 3): cases whose op type is in SCOPE_OPS and whose graph tensors are float32,
int32, int64 or bool (other dtypes, such as float16/float64/uint8/string, are skipped). A case that feeds a shape-determining value (Reshape's shape, TopK's
k, reduction axes, ...) as a graph input is retried with that input frozen into an initializer
(its own data) when tvmc refuses the non-constant input; such passes are counted separately.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass

import numpy as np

# Operators of issue 3 ("Core operators"), ONNX op types.
SCOPE_OPS = frozenset("""
Conv ConvTranspose BatchNormalization InstanceNormalization LayerNormalization LRN Relu LeakyRelu PRelu
Elu Selu Sigmoid HardSigmoid HardSwish Tanh Softplus Gelu Erf Clip Add Sub Mul Div Pow Sqrt Exp Log Neg
Abs Reciprocal Floor Ceil Min Max Sum Mean MatMul Gemm MaxPool AveragePool GlobalAveragePool
GlobalMaxPool Flatten Reshape Transpose Concat Split Slice Squeeze Unsqueeze Gather Expand Tile Pad
Resize Upsample DepthToSpace SpaceToDepth Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin
ReduceProd ReduceL2 ArgMax ArgMin Where Equal Less Greater Not And Or Cast Shape Size Range
ConstantOfShape Constant Identity Dropout CumSum Einsum TopK
""".split())

# dtypes an in-scope case may use besides float32 (indices, shapes, masks)
HELPER_DTYPES = frozenset({"int64", "int32", "bool"})

# Inputs that determine output shapes: {op type: input positions}. A graph input feeding one of
# these may be frozen into an initializer (tvmc compiles static shapes).
SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "TopK": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL2": (1,), "ReduceL1": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,), "Slice": (1, 2, 3, 4), "Tile": (1,), "Pad": (1, 2, 3),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
    "CumSum": (1,), "Clip": (1, 2), "Dropout": (1, 2), "OneHot": (1,),
}

CASE_TIMEOUT_S = 120
REPORT_PATH = os.path.join("docs", "conformance.md")
DEFAULT_TARGET = "native"
# the target the workers compile for (set by main before the workers fork)
TARGET = DEFAULT_TARGET
TARGETS_BEGIN, TARGETS_END = "<!-- targets table: begin -->", "<!-- targets table: end -->"


@dataclass
class Result:
    name: str
    op: str
    status: str          # passed | failed | error | skipped
    reason: str = ""
    frozen: bool = False  # passed/failed with shape inputs frozen into initializers


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def collect_cases() -> list:
    """The onnx package's node test cases (TestCase objects with .name, .model, .data_sets,
    .rtol, .atol), generated in memory."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def _schema_names() -> list:
    import onnx.defs

    names = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")}
    return sorted(names, key=len, reverse=True)


_SCHEMAS: list = []


def case_op(case) -> str:
    """The op type a case tests: the node's op type for one-node models; for expanded
    (function-body) models, the op type whose name prefixes the test name."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    if not _SCHEMAS:
        _SCHEMAS.extend(_schema_names())
    key = case.name[len("test_"):].replace("_", "").lower()
    for name in _SCHEMAS:
        if key.startswith(name.lower()):
            return name
    return "(function) " + case.name[len("test_"):].split("_")[0]


def _tensor_dtypes(model) -> set:
    import onnx

    out = set()
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            out.add(vi.type.WhichOneof("value") or "?")
            continue
        out.add(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
                if vi.type.tensor_type.elem_type else "?")
    return out


def skip_reason(case) -> str | None:
    """Why a case is outside the scope of issue 3, or None when it is in scope."""
    op = case_op(case)
    if op not in SCOPE_OPS:
        return "not in scope"
    try:
        dtypes = _tensor_dtypes(case.model)
    except Exception:
        return "non-tensor types"
    other = sorted(dtypes - HELPER_DTYPES - {"float32"})
    if other:
        return f"dtype {', '.join(other)}"
    return None


def freeze_shape_inputs(model, inputs: list):
    """Copy of `model` where graph inputs feeding a SHAPE_INPUTS position become initializers
    holding the case's own data; returns (model, remaining inputs) or None if none qualify."""
    import onnx
    from onnx import numpy_helper

    feeding = set()
    for node in model.graph.node:
        for k in SHAPE_INPUTS.get(node.op_type, ()):
            if k < len(node.input) and node.input[k]:
                feeding.add(node.input[k])
    init_names = {t.name for t in model.graph.initializer}
    real = [vi.name for vi in model.graph.input if vi.name not in init_names]
    frozen = [n for n in real if n in feeding]
    if not frozen:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    values = dict(zip(real, inputs))
    keep = [vi for vi in m.graph.input if vi.name not in frozen]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name in frozen:
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
    return m, [values[n] for n in real if n not in frozen]


# ---------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------

def _one_line(e: BaseException) -> str:
    import re

    text = re.sub(r"^<model [^>]*>: ", "", str(e).strip()).splitlines()
    msg = text[0] if text else ""
    return f"{type(e).__name__}: {msg}"[:300]


def compare(expected, actual, rtol: float, atol: float) -> str | None:
    """None when `actual` matches `expected` (float: rtol/atol, NaN == NaN; otherwise exact),
    else a one-line reason."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    if expected.dtype.kind == "f":
        if actual.dtype.kind != "f":
            return f"dtype {actual.dtype}, expected {expected.dtype}"
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        with np.errstate(all="ignore"):
            bad = ~(np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            err = np.abs(a - e)[bad]
            return (f"{int(bad.sum())}/{bad.size} values differ (max abs err {np.nanmax(err):.3g}; "
                    f"first at {k}: {a.reshape(-1)[k]:.6g} vs {e.reshape(-1)[k]:.6g})")
        return None
    if actual.dtype != expected.dtype and not (expected.dtype.kind == actual.dtype.kind):
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if not np.array_equal(actual, expected):
        bad = int((actual != expected).sum())
        return f"{bad}/{expected.size} values differ (exact comparison)"
    return None


def run_case(case) -> Result:
    """Compile and run one node case through tvmc.backend; classify the outcome."""
    from tvmc.backend import TvmcBackend
    from tvmc.errors import ModelError

    op = case_op(case)
    reason = skip_reason(case)
    if reason is not None:
        return Result(case.name, op, "skipped", reason)
    model, frozen = case.model, False
    inputs, expected = case.data_sets[0]
    inputs = list(inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                rep = TvmcBackend.prepare(model, target=TARGET)
            except ModelError as e:
                thawed = freeze_shape_inputs(model, inputs) if "must be a constant" in str(e) else None
                if thawed is None:
                    raise
                model, inputs = thawed
                frozen = True
                rep = TvmcBackend.prepare(model, target=TARGET)
            outputs = rep.run(inputs)
    except Exception as e:  # every failure is one case's result
        return Result(case.name, op, "error", _one_line(e), frozen)
    for k, (exp, act) in enumerate(zip(expected, outputs)):
        why = compare(exp, act, case.rtol, case.atol)
        if why:
            return Result(case.name, op, "failed", f"output {k}: {why}", frozen)
    if len(outputs) != len(expected):
        return Result(case.name, op, "failed", f"{len(outputs)} outputs, expected {len(expected)}", frozen)
    return Result(case.name, op, "passed", "", frozen)


# ---------------------------------------------------------------------------------------------
# Workers: one process per slot, restarted after a crash or timeout
# ---------------------------------------------------------------------------------------------

def _worker(conn, cases):
    while True:
        try:
            k = conn.recv()
        except EOFError:
            return
        if k is None:
            return
        try:
            res = run_case(cases[k])
        except BaseException as e:  # noqa: BLE001  (report, keep serving)
            res = Result(cases[k].name, "?", "error", _one_line(e) + " " + traceback.format_exc(limit=1)[-100:])
        conn.send(res)


class _Slot:
    def __init__(self, ctx, cases):
        self.ctx, self.cases = ctx, cases
        self.proc = self.conn = None

    def start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.cases), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def stop(self):
        if self.proc is not None:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()

    def run(self, k: int, timeout_s: float) -> Result:
        if self.proc is None or not self.proc.is_alive():
            self.start()
        case = self.cases[k]
        self.conn.send(k)
        try:
            ready = self.conn.poll(timeout_s)
            if ready:
                return self.conn.recv()
            why = f"timed out after {timeout_s:.0f} s"
        except (EOFError, OSError):
            why = "worker crashed"
        code = self.proc.exitcode
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        if code is not None and why == "worker crashed":
            why = f"worker crashed (exit code {code})"
        self.proc = None
        return Result(case.name, case_op(case), "error", why)


def run_all(cases, jobs: int = 2, timeout_s: float = CASE_TIMEOUT_S, progress=True) -> list:
    """Results for every case (skipped ones without running), in case order."""
    results: list = [None] * len(cases)
    todo = queue.Queue()
    for k, c in enumerate(cases):
        reason = skip_reason(c)
        if reason is not None:
            results[k] = Result(c.name, case_op(c), "skipped", reason)
        else:
            todo.put(k)
    total = todo.qsize()
    done = [0]
    lock = threading.Lock()
    ctx = multiprocessing.get_context("fork")
    t0 = time.perf_counter()

    def serve():
        slot = _Slot(ctx, cases)
        try:
            while True:
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                res = slot.run(k, timeout_s)
                results[k] = res
                with lock:
                    done[0] += 1
                    if progress and (done[0] % 50 == 0 or done[0] == total):
                        print(f"  [{done[0]:4d}/{total}] {time.perf_counter() - t0:6.0f} s", file=sys.stderr)
        finally:
            slot.stop()

    threads = [threading.Thread(target=serve) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def summarize(results) -> dict:
    c = collections.Counter(r.status for r in results)
    in_scope = [r for r in results if r.status != "skipped"]
    return {"passed": c["passed"], "failed": c["failed"], "error": c["error"], "skipped": c["skipped"],
            "in_scope": len(in_scope), "frozen_passed": sum(r.frozen for r in results if r.status == "passed"),
            "out_of_scope": sum(r.reason == "not in scope" for r in results)}


def report_path(target: str) -> str:
    """docs/conformance.md for the default target, docs/conformance-<target>.md for another."""
    return REPORT_PATH if target == DEFAULT_TARGET else os.path.join("docs", f"conformance-{target}.md")


def update_targets_table(path: str, target: str, results, report: str) -> None:
    """Set `target`'s row (passed / in scope, against the default target's) in the targets table
    at the end of the report `path` (between TARGETS_BEGIN and TARGETS_END), keeping other rows."""
    text = open(path).read() if os.path.exists(path) else ""
    head, _, rest = text.partition(TARGETS_BEGIN)
    table, _, tail = rest.partition(TARGETS_END)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| `")}
    s = summarize(results)
    pct = 100.0 * s["passed"] / s["in_scope"] if s["in_scope"] else 0.0
    rows[f"`{target}`"] = (f"| `{target}` | {s['passed']} | {s['failed']} | {s['error']} | {s['in_scope']} | "
                           f"{pct:.1f}% | [{os.path.basename(report)}]({os.path.basename(report)}) |")
    lines = [TARGETS_BEGIN, "## Targets", "", "Each row: `make conformance TARGET=<target>` over the same cases.", "",
             "| target | passed | failed | error | in scope | pass rate | report |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |", *[rows[k] for k in sorted(rows)], TARGETS_END]
    with open(path, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n" + tail.lstrip("\n"))


def write_report(results, path: str = REPORT_PATH, elapsed_s: float | None = None, target: str = DEFAULT_TARGET) -> str:
    import onnx

    s = summarize(results)
    pct = 100.0 * s["passed"] / s["in_scope"] if s["in_scope"] else 0.0
    per_op: dict = collections.defaultdict(collections.Counter)
    for r in results:
        per_op[r.op][r.status] += 1
        if r.status == "passed" and r.frozen:
            per_op[r.op]["frozen"] += 1
    lines = [
        f"# ONNX backend node conformance ({'x86' if target == DEFAULT_TARGET else target})",
        "",
        f"Generated by `make conformance{'' if target == DEFAULT_TARGET else ' TARGET=' + target}` "
        f"(`python -m tvmc.conformance --target {target}`); do not edit by hand.",
        f"onnx {onnx.__version__}: {len(results)} node cases. In scope (issue 3): the op is in the "
        "issue's operator list and the graph's tensors are float32, int32, int64 or bool "
        "(float16/float64/bfloat16/int8/uint8/string cases are skipped). Expected outputs compared with the case's rtol/atol (exact for integer "
        "and bool). 'frozen' counts passes where a shape-determining graph input (Reshape shape, "
        "TopK k, reduction axes, ...) was frozen into an initializer holding the case's data.",
        "",
        "| | cases |",
        "| --- | ---: |",
        f"| passed | {s['passed']} (of which frozen: {s['frozen_passed']}) |",
        f"| failed (wrong output) | {s['failed']} |",
        f"| error (compile or run) | {s['error']} |",
        f"| in scope | {s['in_scope']} |",
        f"| **pass rate (in scope)** | **{pct:.1f}%** |",
        f"| skipped | {s['skipped']} ({s['out_of_scope']} not in scope, "
        f"{s['skipped'] - s['out_of_scope']} other dtypes) |",
        "",
        "## Per operator (in scope)",
        "",
        "| op | passed | frozen | failed | error | skipped |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op in sorted(per_op):
        if op not in SCOPE_OPS:
            continue
        c = per_op[op]
        lines.append(f"| {op} | {c['passed']} | {c['frozen']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    missing = sorted(SCOPE_OPS - set(per_op))
    if missing:
        lines += ["", f"Scope ops with no node case in this onnx version: {', '.join(missing)}."]
    lines += ["", "## Failures and errors", ""]
    bad = [r for r in results if r.status in ("failed", "error")]
    for r in sorted(bad, key=lambda r: (r.op, r.name)):
        lines.append(f"- `{r.name}` ({r.op}, {r.status}{', frozen' if r.frozen else ''}): "
                     f"{r.reason.replace('|', '/')}")
    if not bad:
        lines.append("(none)")
    skipped_dtype = collections.Counter(r.reason for r in results if r.status == "skipped"
                                        and r.reason != "not in scope")
    lines += ["", "## Skipped", "", "In-scope op types, other dtypes: " +
              (", ".join(f"{why} ({n})" for why, n in sorted(skipped_dtype.items())) or "none") + ".", "",
              "Op types not in scope (cases): " +
              ", ".join(f"{op} ({sum(per_op[op].values())})" for op in sorted(per_op) if op not in SCOPE_OPS) + "."]
    if elapsed_s is not None:
        lines += ["", f"Run time: {elapsed_s:.0f} s."]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if os.path.exists(path) and TARGETS_BEGIN in open(path).read():  # keep the targets table
        text += "\n" + TARGETS_BEGIN + open(path).read().partition(TARGETS_BEGIN)[2]
    with open(path, "w") as f:
        f.write(text)
    return text


def _device_missing(target: str) -> str | None:
    """Why the device of `target` (a GPU runtime) cannot run here, or None. Asked in a fresh
    interpreter: the workers fork from this one, and a CUDA driver initialized before a fork is
    unusable in the children."""
    from tvmc.target import resolve_target

    runtime = resolve_target(target).runtime
    if runtime == "cpu":
        return None
    code = "import sys; from tvmc.runtime import device_missing; print(device_missing(sys.argv[1]) or '')"
    res = subprocess.run([sys.executable, "-c", code, runtime], capture_output=True, text=True)
    lines = res.stdout.strip().splitlines() or ([] if res.returncode == 0 else [f"exit code {res.returncode}"])
    return lines[-1] if lines else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvmc.conformance", description=__doc__.splitlines()[0])
    p.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("-k", "--filter", default="", help="only cases whose name contains this text")
    p.add_argument("-t", "--target", default=DEFAULT_TARGET, help=f"target to compile for (default {DEFAULT_TARGET})")
    p.add_argument("-o", "--output", help=f"report path (default {REPORT_PATH}, docs/conformance-T.md for target T)")
    p.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the workers run side by side
    missing = _device_missing(args.target)
    if missing:
        print(f"error: target {args.target} runs on its device, and none runs here: {missing}", file=sys.stderr)
        return 7
    cases = [c for c in collect_cases() if args.filter in c.name]
    t0 = time.perf_counter()
    global TARGET
    TARGET = args.target
    output = args.output or report_path(args.target)
    results = run_all(cases, args.jobs, args.timeout)
    elapsed = time.perf_counter() - t0
    write_report(results, output, elapsed, args.target)
    update_targets_table(REPORT_PATH if args.output is None else output, args.target, results, output)
    s = summarize(results)
    pct = 100.0 * s["passed"] / s["in_scope"] if s["in_scope"] else 0.0
    print(f"report: {output} ({s['in_scope']} in scope, {pct:.1f}% passed; {s['failed']} wrong outputs, "
          f"{s['error']} errors, {s['skipped']} skipped; {s['frozen_passed']} passes with frozen shape inputs)")
    print(f"conformance: {s['passed']} passed, {s['failed'] + s['error']} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
