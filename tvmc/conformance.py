"""ONNX backend node conformance: run the onnx package's node test cases through tvmc on a target,
and through onnxruntime.

`python -m tvmc.conformance [--target T]` (`make conformance [TARGET=T]`, default native: this
host's x86 CPU) generates the node cases in memory from the
installed onnx package (onnx.backend.test.case.node.collect_testcases(); nothing is written but
the report), compiles and runs every in-scope case through tvmc.backend (driver -> mod.tar ->
GraphExecutor) and through onnxruntime, in worker processes with a per-case timeout (a crash or
hang costs one case, not the run), compares both with the case's expected outputs (the case's
rtol/atol for floats, exact for integer and bool) and writes docs/conformance.md (another target:
docs/conformance-T.md, and its counts into the targets table of docs/conformance.md). Its last line
on stdout is `conformance: N passed, M failed` (M counts tvmc's wrong outputs and errors).

Scope (issue 18, "ONNX breadth"): every node case whose graph inputs and outputs are tensors of
the plain numpy dtypes (PLAIN_DTYPES), except the string operators, the `ai.onnx.ml` and training
domains, the loss functions, training-mode BatchNormalization and training-mode Dropout with a
nonzero ratio (random; ratio 0 keeps every element, as at inference). The core operators of
issue 3 (CORE_OPS) are counted apart as well. A case that feeds a shape-determining value
(Reshape's shape, TopK's k, reduction axes, ...) as a graph input is retried with that input
frozen into an initializer (its own data) when tvmc refuses the non-constant input; such passes
are counted separately. A wrong output is re-judged against a float64 evaluation of the same model
by onnx's reference evaluator (float64_reference): where the case's expected data disagree with it
and the output agrees with it, the case is 'inexact' (the expected data carry rounding error beyond
the case's tolerance), counted apart from both passes and wrong outputs.

`--compile-only` (for a GPU target on a machine without its device) compiles each case for the
target and writes its mod.tar without running it: a GPU module holds its PTX or OpenCL C, and for
CUDA the cubin that ptxas assembles where it is found (ptxas checks each kernel's registers, shared
memory and launch bounds as the driver would, and the build refuses a kernel it rejects). Such a
case is 'compiled', neither passed nor failed: the report counts what the target builds, not what
it computes.
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

# Operators of issue 3 ("Core operators"), ONNX op types: counted apart in the report.
CORE_OPS = frozenset("""
Conv ConvTranspose BatchNormalization InstanceNormalization LayerNormalization LRN Relu LeakyRelu PRelu
Elu Selu Sigmoid HardSigmoid HardSwish Tanh Softplus Gelu Erf Clip Add Sub Mul Div Pow Sqrt Exp Log Neg
Abs Reciprocal Floor Ceil Min Max Sum Mean MatMul Gemm MaxPool AveragePool GlobalAveragePool
GlobalMaxPool Flatten Reshape Transpose Concat Split Slice Squeeze Unsqueeze Gather Expand Tile Pad
Resize Upsample DepthToSpace SpaceToDepth Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin
ReduceProd ReduceL2 ArgMax ArgMin Where Equal Less Greater Not And Or Cast Shape Size Range
ConstantOfShape Constant Identity Dropout CumSum Einsum TopK
""".split())

# Outside the scope of issue 18 by op type: string operators and loss functions.
EXCLUDED_OPS = {
    **dict.fromkeys(("StringSplit", "StringConcat", "StringNormalizer", "RegexFullMatch", "TfIdfVectorizer",
                     "LabelEncoder"), "string operator"),
    **dict.fromkeys(("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"), "loss function"),
}
EXCLUDED_DOMAINS = {"ai.onnx.ml": "ai.onnx.ml domain", "ai.onnx.preview.training": "training domain"}

# tensor dtypes of the scope: numpy's own (no bfloat16, float8, int4, string)
PLAIN_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                          "uint32", "uint64", "bool"})

# Expanded (function-body) cases whose test name does not start with their op type's name.
CASE_PREFIXES = {"sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
                 "mvn": "MeanVarianceNormalization", "flexattention": "FlexAttention"}

# Inputs that determine output shapes: {op type: input positions}. A graph input feeding one of
# these may be frozen into an initializer where tvmc finds no bound for the output (TopK's K, a
# Loop's condition and Reshape's shape on a non-empty tensor are run-time values with a bound; a
# Loop's trip count is frozen only when the Loop has scan outputs, which have no bound with M
# known at run time; docs/dynamic_shapes.md).
SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL2": (1,), "ReduceL1": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,), "Slice": (1, 2, 3, 4), "Tile": (1,), "Pad": (1, 2, 3),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
    "CumSum": (1,), "Clip": (1, 2), "Dropout": (1, 2), "OneHot": (1,),
    "CumProd": (1,), "Trilu": (1,), "CenterCropPad": (1,), "HannWindow": (0,), "HammingWindow": (0,),
    "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4), "DFT": (1, 2), "STFT": (1, 3), "Col2Im": (1, 2),
    "AffineGrid": (1,), "MaxUnpool": (2,), "Loop": (0,),
}

CASE_TIMEOUT_S = 120
REPORT_PATH = os.path.join("docs", "conformance.md")
DEFAULT_TARGET = "native"
# the target the workers compile for (set by main before the workers fork)
TARGET = DEFAULT_TARGET
# compile each case without running it (main's --compile-only)
COMPILE_ONLY = False
TARGETS_BEGIN, TARGETS_END = "<!-- targets table: begin -->", "<!-- targets table: end -->"


@dataclass
class Result:
    name: str
    op: str
    status: str          # tvmc: passed | failed | inexact | error | skipped | compiled (--compile-only)
    reason: str = ""
    frozen: bool = False  # passed/failed with shape inputs frozen into initializers
    ort: str = ""        # onnxruntime on the same case: passed | failed | inexact | error ("" when not run)
    ort_reason: str = ""


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
    (function-body) models, the op type whose name prefixes the test name (CASE_PREFIXES first)."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    if not _SCHEMAS:
        _SCHEMAS.extend(_schema_names())
    key = case.name[len("test_"):].replace("_", "").lower()
    for prefix, name in CASE_PREFIXES.items():
        if key.startswith(prefix):
            return name
    for name in _SCHEMAS:
        if key.startswith(name.lower()):
            return name
    return "(function) " + case.name[len("test_"):].split("_")[0]


def _tensor_dtypes(model) -> set:
    """dtype names of the graph's inputs and outputs; a non-tensor one adds its kind
    ('sequence_type', 'optional_type', ...)."""
    import onnx

    out = set()
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            out.add(vi.type.WhichOneof("value") or "?")
            continue
        elem = vi.type.tensor_type.elem_type
        try:
            out.add(onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "?")
        except Exception:  # a dtype without a numpy equivalent
            out.add(onnx.TensorProto.DataType.Name(elem).lower())
    return out


def _training_mode(case) -> bool:
    """BatchNormalization with training_mode=1, or Dropout whose training_mode input is true and
    whose ratio (default 0.5) is not 0: it drops elements at random. A training-mode Dropout with
    ratio 0 keeps every element (output = input, mask all true), as at inference: in scope."""
    from onnx import helper, numpy_helper

    init_names = {t.name for t in case.model.graph.initializer}
    real = [vi.name for vi in case.model.graph.input if vi.name not in init_names]
    values = dict(zip(real, case.data_sets[0][0]))
    values.update({t.name: numpy_helper.to_array(t) for t in case.model.graph.initializer})

    def first(name, default):  # the first element of a graph input or initializer; None: computed
        if not name:
            return default
        value = values.get(name)
        return None if value is None else np.asarray(value).reshape(-1)[0]

    for node in case.model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "BatchNormalization" and attrs.get("training_mode", 0):
            return True
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            mode = first(node.input[2], False)
            ratio = first(node.input[1] if len(node.input) > 1 else "", 0.5)
            if mode is None or (bool(mode) and (ratio is None or float(ratio) != 0.0)):
                return True
    return False


def skip_reason(case) -> str | None:
    """Why a case is outside the scope of issue 18, or None when it is in scope."""
    op = case_op(case)
    if op in EXCLUDED_OPS:
        return EXCLUDED_OPS[op]
    for node in case.model.graph.node:
        if node.domain in EXCLUDED_DOMAINS:
            return EXCLUDED_DOMAINS[node.domain]
    other = sorted(_tensor_dtypes(case.model) - PLAIN_DTYPES)
    if other:
        return f"dtype {', '.join(other)}"
    if _training_mode(case):
        return "training mode"
    return None


def _node_reads(node) -> list:
    """The tensor names a node reads: its inputs and, for If/Loop/Scan, what its subgraphs read."""
    import onnx

    names = [i for i in node.input if i]
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            for inner in a.g.node:
                names.extend(_node_reads(inner))
    return names


def freeze_shape_inputs(model, inputs: list):
    """Copy of `model` where graph inputs that determine a SHAPE_INPUTS position (directly or
    through other nodes, not through Shape/Size, which read only a shape) become initializers
    holding the case's own data; returns (model, remaining inputs) or None if none qualify."""
    import onnx
    from onnx import numpy_helper

    producer = {o: n for n in model.graph.node for o in n.output if o}
    feeding, todo = set(), []
    for node in model.graph.node:
        for k in SHAPE_INPUTS.get(node.op_type, ()):
            if k < len(node.input) and node.input[k]:
                todo.append(node.input[k])
    while todo:
        name = todo.pop()
        if name in feeding:
            continue
        feeding.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in ("Shape", "Size"):
            todo.extend(_node_reads(node))
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
    from tvmc.te.expr import is_float

    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    if is_float(expected.dtype.name):
        if not is_float(actual.dtype.name):
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


def _arrays(values) -> list:
    """A data set's inputs or outputs as numpy arrays (some cases store TensorProtos)."""
    from onnx import TensorProto, numpy_helper

    return [numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v) for v in values]


def _check_outputs(expected, outputs, case) -> str | None:
    for k, (exp, act) in enumerate(zip(expected, outputs)):
        why = compare(exp, act, case.rtol, case.atol)
        if why:
            return f"output {k}: {why}"
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    return None


# attributes that name an element type, and ops that carry one in a tensor: a model with one of them
# holds float32 beyond its graph's types, so retyping those alone would not make it float64
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype", "stash_type"})
_TENSOR_OPS = frozenset({"Constant", "ConstantOfShape", "CastLike"})


def promote_to_float64(model):
    """Copy of `model` with float32 retyped to float64 (graph inputs, outputs, value_info and
    initializers), or None where float32 may also be named elsewhere: an element-type attribute
    (Cast's `to`, `dtype`, ...), a tensor-valued attribute or op (Constant, CastLike), a subgraph,
    or model-local functions."""
    import onnx
    from onnx import AttributeProto, TensorProto, numpy_helper

    if model.functions:
        return None
    for node in model.graph.node:
        if node.op_type in _TENSOR_OPS:
            return None
        for a in node.attribute:
            if a.name in _DTYPE_ATTRS or a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS,
                                                    AttributeProto.TENSOR, AttributeProto.TENSORS):
                return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in (*m.graph.input, *m.graph.output, *m.graph.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for k, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64),
                                                                    t.name))
    return m


def float64_reference(case, inputs) -> list | None:
    """The outputs of `case`'s model evaluated in float64 by onnx's reference evaluator
    (onnx.reference.ReferenceEvaluator): float32 inputs widened, the model promoted by
    promote_to_float64. None where the model cannot be promoted or the evaluator fails."""
    from onnx.reference import ReferenceEvaluator

    model = promote_to_float64(case.model)
    if model is None:
        return None
    init_names = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in init_names]
    wide = [np.asarray(x, np.float64) if np.asarray(x).dtype == np.float32 else x for x in inputs]
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return list(ReferenceEvaluator(model).run(None, dict(zip(names, wide))))
    except Exception:  # noqa: BLE001  (no float64 evaluation: the case stays as judged)
        return None


def _judge(case, inputs, expected, outputs) -> tuple:
    """(status, reason) of `outputs` against the case's expected data: passed, failed, or inexact
    where the expected data disagree with the float64 evaluation (float64_reference) beyond the
    case's tolerance and `outputs` agree with it within that tolerance."""
    why = _check_outputs(expected, outputs, case)
    if why is None:
        return "passed", ""
    if not any(np.asarray(e).dtype == np.float32 for e in expected):
        return "failed", why
    exact = float64_reference(case, inputs)
    if exact is None or _check_outputs(exact, outputs, case) or not _check_outputs(expected, exact, case):
        return "failed", why
    return "inexact", (f"expected data against the float64 evaluation: {_check_outputs(exact, expected, case)}; "
                       "the output agrees with the float64 evaluation")


def _compile_only(model):
    """A stand-in for TvmcBackend.prepare under COMPILE_ONLY: compile `model` for TARGET and write
    its mod.tar (to a temporary folder), without an executor; returns None."""
    import tempfile
    from pathlib import Path

    from tvmc.backend import TvmcBackend
    from tvmc.package import save_artifact

    module = TvmcBackend.compile(model, target=TARGET)
    with tempfile.TemporaryDirectory(prefix="tvmc-conformance-") as tmp:
        save_artifact(module, Path(tmp, "mod.tar"))


def run_tvmc(case, inputs, expected) -> tuple:
    """(status, reason, frozen) of one node case compiled and run through tvmc.backend; its outputs
    are judged against the case's own model and inputs (_judge), frozen or not. Under COMPILE_ONLY
    the case is compiled and packaged, not run: ("compiled", "", frozen)."""
    from tvmc.backend import TvmcBackend
    from tvmc.errors import ModelError

    def prepare(model):
        return _compile_only(model) if COMPILE_ONLY else TvmcBackend.prepare(model, target=TARGET)

    model, fed, frozen = case.model, inputs, False  # fed: what the (frozen) model takes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                rep = prepare(model)
            except ModelError as e:
                # a shape input tvmc needs constant, or one that needs a --value-range it is not given
                refused = "must be a constant" in str(e) or "--value-range" in str(e)
                thawed = freeze_shape_inputs(model, inputs) if refused else None
                if thawed is None:
                    raise
                model, fed = thawed
                frozen = True
                rep = prepare(model)
            if COMPILE_ONLY:
                return "compiled", "", frozen
            outputs = rep.run(fed)
    except Exception as e:  # every failure is one case's result
        return "error", _one_line(e), frozen
    return (*_judge(case, inputs, expected, outputs), frozen)


def run_ort(case, inputs, expected) -> tuple:
    """(status, reason) of the same case run by onnxruntime (CPU, one thread)."""
    import onnxruntime as ort

    init_names = {t.name for t in case.model.graph.initializer}
    names = [vi.name for vi in case.model.graph.input if vi.name not in init_names]
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outputs = sess.run(None, dict(zip(names, inputs)))
    except Exception as e:
        return "error", _one_line(e)
    return _judge(case, inputs, expected, outputs)


def run_case(case, ort: bool = True) -> Result:
    """Compile and run one node case through tvmc.backend (and onnxruntime unless `ort` is
    False); classify the outcomes."""
    op = case_op(case)
    reason = skip_reason(case)
    if reason is not None:
        return Result(case.name, op, "skipped", reason)
    inputs, expected = (_arrays(v) for v in case.data_sets[0])
    status, why, frozen = run_tvmc(case, inputs, expected)
    ort_status, ort_why = run_ort(case, inputs, expected) if ort else ("", "")
    return Result(case.name, op, status, why, frozen, ort_status, ort_why)


# ---------------------------------------------------------------------------------------------
# Workers: one process per slot, restarted after a crash or timeout
# ---------------------------------------------------------------------------------------------

def _worker(conn, cases, ort):
    while True:
        try:
            k = conn.recv()
        except EOFError:
            return
        if k is None:
            return
        try:
            res = run_case(cases[k], ort)
        except BaseException as e:  # noqa: BLE001  (report, keep serving)
            res = Result(cases[k].name, "?", "error", _one_line(e) + " " + traceback.format_exc(limit=1)[-100:])
        conn.send(res)


class _Slot:
    def __init__(self, ctx, cases, ort):
        self.ctx, self.cases, self.ort = ctx, cases, ort
        self.proc = self.conn = None

    def start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.cases, self.ort), daemon=True)
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


def run_all(cases, jobs: int = 2, timeout_s: float = CASE_TIMEOUT_S, progress=True, ort=True) -> list:
    """Results for every case (skipped ones without running), in case order; with `ort`, each
    in-scope case is run by onnxruntime too (in this process for a case whose worker died)."""
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
        slot = _Slot(ctx, cases, ort)
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
    for k, res in enumerate(results):
        if ort and res.status != "skipped" and not res.ort:
            inputs, expected = (_arrays(v) for v in cases[k].data_sets[0])
            res.ort, res.ort_reason = run_ort(cases[k], inputs, expected)
    return results


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def summarize(results, ok: str = "passed") -> dict:
    """Counts over `results`: tvmc's passed/failed/inexact/error/skipped/compiled, onnxruntime's
    (ort_*), the in-scope cases onnxruntime passes and tvmc does not (ort_only), and the CORE_OPS
    subset; frozen_passed counts the passed or compiled cases with frozen shape inputs. `ok`: the
    status that counts as tvmc's success in ort_only and core_passed ("compiled" for --compile-only)."""
    c = collections.Counter(r.status for r in results)
    o = collections.Counter(r.ort for r in results if r.status != "skipped")
    in_scope = [r for r in results if r.status != "skipped"]
    core = [r for r in in_scope if r.op in CORE_OPS]
    return {"passed": c["passed"], "failed": c["failed"], "inexact": c["inexact"], "error": c["error"],
            "skipped": c["skipped"], "compiled": c["compiled"], "in_scope": len(in_scope),
            "frozen_passed": sum(r.frozen for r in results if r.status in ("passed", "compiled")),
            "ort_passed": o["passed"], "ort_failed": o["failed"], "ort_inexact": o["inexact"], "ort_error": o["error"],
            "ort_only": sum(r.ort == "passed" and r.status != ok for r in in_scope),
            "core_passed": sum(r.status == ok for r in core), "core_in_scope": len(core)}


def op_group(op: str) -> str:
    """The frontend converter group (module of tvmc/frontend/onnx) of an ONNX op type, 'function
    body' for an op imported through its ONNX function body, or 'unsupported'."""
    from tvmc.frontend.onnx import CONVERTERS

    from tvmc.frontend.onnx.functions import FUNCTION_DOMAINS, expandable

    fn = CONVERTERS.get(op)
    if fn is not None:
        return fn.__module__.rsplit(".", 1)[-1]
    return "function body" if any(expandable(op, v, d) for d in ("", *FUNCTION_DOMAINS) for v in range(1, 29)) \
        else "unsupported"


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def _ort_version() -> str:
    """The installed onnxruntime's version (its pass counts move between releases)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnxruntime")
    except PackageNotFoundError:
        return "(not installed)"


def report_path(target: str) -> str:
    """docs/conformance.md for the default target, docs/conformance-<target>.md for another."""
    return REPORT_PATH if target == DEFAULT_TARGET else os.path.join("docs", f"conformance-{target}.md")


def update_targets_table(path: str, target: str, results, report: str, compile_only: bool = False) -> None:
    """Set `target`'s row (passed / in scope, against the default target's) in the targets table
    at the end of the report `path` (between TARGETS_BEGIN and TARGETS_END), keeping other rows;
    a compile-only run's row gives its compiled count in place of a pass count."""
    text = open(path).read() if os.path.exists(path) else ""
    head, _, rest = text.partition(TARGETS_BEGIN)
    table, _, tail = rest.partition(TARGETS_END)
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| `")}
    s = summarize(results)
    link = f"[{os.path.basename(report)}]({os.path.basename(report)})"
    if compile_only:
        rows[f"`{target}`"] = (f"| `{target}` | not run: {s['compiled']} compiled | - | - | {s['error']} | "
                               f"{s['in_scope']} | - | {link} (compile only) |")
    else:
        rows[f"`{target}`"] = (f"| `{target}` | {s['passed']} | {s['failed']} | {s['inexact']} | {s['error']} | "
                               f"{s['in_scope']} | {_pct(s['passed'], s['in_scope'])} | {link} |")
    lines = [TARGETS_BEGIN, "## Targets", "", "Each row: `make conformance TARGET=<target>` over the same cases.", "",
             "| target | passed | failed | inexact | error | in scope | pass rate | report |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |", *[rows[k] for k in sorted(rows)], TARGETS_END]
    with open(path, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n" + tail.lstrip("\n"))


def _assembler_note(target: str) -> str:
    """One sentence on what checked a compile-only run's device code beyond LLVM: the target's
    assembler with its version (`ptxas --version`), or why none did."""
    from tvmc.codegen.nvptx import assembler_missing
    from tvmc.target import resolve_target

    t = resolve_target(target)
    if not t.assembler:
        return f"Target {target} names no assembler: its device code is checked by LLVM's backend only."
    missing = assembler_missing(t)
    if missing:
        return f"No assembler checked the device code: {missing}."
    res = subprocess.run([t.assembler[0], "--version"], capture_output=True, text=True)
    lines = res.stdout.strip().splitlines()
    version = next((ln for ln in lines if "release" in ln), lines[-1] if lines else "version unknown")
    return (f"Every kernel was assembled by {t.assembler[0]} ({version}) for {t.cpu}, which checks "
            "registers, shared memory and launch bounds as the driver would; the build refuses a kernel it rejects.")


def _summary(s: dict, target: str, compile_only: bool) -> list:
    """The report's opening lines after the scope paragraph: how each case runs and the counts table."""
    ort = f"onnxruntime {_ort_version()}"
    if compile_only:
        return [
            f"Compile only: each case is compiled for `{target}` and packaged (mod.tar) but not run, for want "
            "of the target's device on the machine that wrote this report; onnxruntime runs it on the CPU. "
            f"{_assembler_note(target)} A GPU run (`make conformance TARGET={target}` where the device is) "
            "replaces this report with pass counts.",
            "",
            f"| in scope | tvmc ({target}, not run) | {ort} |",
            "| --- | ---: | ---: |",
            f"| compiled | {s['compiled']} (frozen: {s['frozen_passed']}) | - |",
            f"| passed | - | {s['ort_passed']} |",
            f"| error (compile; onnxruntime: compile or run) | {s['error']} | {s['ort_error']} |",
            f"| **compiled** ({s['in_scope']} cases) | **{_pct(s['compiled'], s['in_scope'])}** | - |",
        ]
    return [
        "Each case runs through tvmc (compile, mod.tar, "
        "GraphExecutor) and through onnxruntime, both compared with the case's expected outputs (its "
        "rtol/atol for floats, exact for integer and bool). 'frozen' counts tvmc passes where a "
        "shape-determining graph input (Reshape shape, TopK k, reduction axes, ...) was frozen into an "
        "initializer holding the case's data. 'inexact' counts wrong outputs re-judged against a float64 "
        "evaluation of the same model by onnx's reference evaluator: the expected data disagree with it "
        "beyond the case's tolerance and the output agrees with it (neither a pass nor a wrong output).",
        "",
        f"| in scope | tvmc | {ort} |",
        "| --- | ---: | ---: |",
        f"| passed | {s['passed']} (frozen: {s['frozen_passed']}) | {s['ort_passed']} |",
        f"| failed (wrong output) | {s['failed']} | {s['ort_failed']} |",
        f"| inexact expected data (output agrees with the float64 evaluation) | {s['inexact']} | "
        f"{s['ort_inexact']} |",
        f"| error (compile or run) | {s['error']} | {s['ort_error']} |",
        f"| **pass rate** ({s['in_scope']} cases) | **{_pct(s['passed'], s['in_scope'])}** | "
        f"**{_pct(s['ort_passed'], s['in_scope'])}** |",
    ]


def write_report(results, path: str = REPORT_PATH, elapsed_s: float | None = None, target: str = DEFAULT_TARGET,
                 compile_only: bool = False) -> str:
    """Write the markdown report of `results` to `path` (keeping its targets table) and return its
    text; `compile_only`: the results of a --compile-only run (counts of compiled cases)."""
    import onnx

    ok = "compiled" if compile_only else "passed"
    s = summarize(results, ok)
    per_op: dict = collections.defaultdict(collections.Counter)
    per_group: dict = collections.defaultdict(collections.Counter)
    for r in results:
        if r.status == "skipped":
            continue
        for table, key in ((per_op, r.op), (per_group, op_group(r.op))):
            table[key][r.status] += 1
            table[key]["cases"] += 1
            table[key]["frozen"] += r.status == ok and r.frozen
            table[key]["ort_passed"] += r.ort == "passed"
    # count columns of the per-group and per-operator tables: (header, counter key)
    columns = [("cases", "cases"), (f"tvmc {ok}", ok), ("frozen", "frozen"),
               *([] if compile_only else [("failed", "failed"), ("inexact", "inexact")]),
               ("error", "error"), ("onnxruntime passed", "ort_passed")]
    heads = " | ".join(h for h, _ in columns)
    rule = " | ".join("---:" for _ in columns)

    def counts(c) -> str:
        return " | ".join(str(c[k]) for _, k in columns)

    excluded = collections.Counter(r.reason for r in results if r.status == "skipped")
    make = (f"make conformance{'' if target == DEFAULT_TARGET else ' TARGET=' + target}"
            f"{' COMPILE_ONLY=1' * compile_only}")
    lines = [
        f"# ONNX backend node conformance ({'x86' if target == DEFAULT_TARGET else target}"
        f"{', compile only' * compile_only})",
        "",
        f"Generated by `{make}` "
        f"(`python -m tvmc.conformance --target {target}{' --compile-only' * compile_only}`); do not edit by hand.",
        f"onnx {onnx.__version__}: {len(results)} node cases. In scope (issue 18): every case whose graph "
        "inputs and outputs are tensors of numpy's dtypes (float16/32/64, int8/16/32/64, uint8/16/32/64, "
        "bool), except the string operators, the ai.onnx.ml and training domains, the loss functions, "
        "training-mode BatchNormalization and training-mode Dropout with a nonzero ratio (random draws; "
        "ratio 0 keeps every element, as at inference).",
        "",
        *_summary(s, target, compile_only),
        "",
        f"Cases onnxruntime passes and tvmc does not{' compile' * compile_only}: {s['ort_only']}. "
        f"Core operators of issue 3: tvmc {ok} {s['core_passed']} of {s['core_in_scope']}. "
        f"Out of scope: {s['skipped']} "
        f"({', '.join(f'{why} {n}' for why, n in sorted(excluded.items()))}).",
        "",
        "## Per converter group",
        "",
        f"| group | {heads} |",
        f"| --- | {rule} |",
    ]
    lines += [f"| {g} | {counts(per_group[g])} |" for g in sorted(per_group)]
    lines += ["", "## Per operator", "", f"| op | group | {heads} |", f"| --- | --- | {rule} |"]
    lines += [f"| {op} | {op_group(op)} | {counts(per_op[op])} |" for op in sorted(per_op)]
    lines += ["", "## tvmc failures and errors", "",
              "Marked **(onnxruntime passes)** where onnxruntime gets the case right.", ""]
    bad = [r for r in results if r.status in ("failed", "error")]
    for r in sorted(bad, key=lambda r: (r.op, r.name)):
        mark = " **(onnxruntime passes)**" if r.ort == "passed" else ""
        lines.append(f"- `{r.name}` ({r.op}, {r.status}{', frozen' if r.frozen else ''}){mark}: "
                     f"{r.reason.replace('|', '/')}")
    if not bad:
        lines.append("(none)")
    if not compile_only:
        lines += ["", "## Cases whose expected data are inexact", "",
                  "tvmc's output is wrong against the case's expected data and right against the float64 "
                  "evaluation of the same model (onnx.reference.ReferenceEvaluator), which the expected data miss.", ""]
        inexact = [r for r in results if r.status == "inexact"]
        for r in sorted(inexact, key=lambda r: (r.op, r.name)):
            lines.append(f"- `{r.name}` ({r.op}{', frozen' if r.frozen else ''}; onnxruntime: {r.ort or 'not run'}): "
                         f"{r.reason.replace('|', '/')}")
        if not inexact:
            lines.append("(none)")
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
    """Why the device of `target` (a --target spec) cannot run here, or None (tvmc.runtime.
    device_missing). Asked in a fresh interpreter: the workers fork from this one, and a CUDA
    driver initialized before a fork is unusable in the children."""
    code = "import sys; from tvmc.runtime import device_missing; print(device_missing(sys.argv[1]) or '')"
    res = subprocess.run([sys.executable, "-c", code, target], capture_output=True, text=True)
    lines = res.stdout.strip().splitlines() or ([] if res.returncode == 0 else [f"exit code {res.returncode}"])
    return lines[-1] if lines else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvmc.conformance", description=__doc__.splitlines()[0])
    p.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("-k", "--filter", default="", help="only cases whose name contains this text")
    p.add_argument("--ops", default="", help="only cases of these op types (comma-separated)")
    p.add_argument("--no-ort", action="store_true", help="do not run onnxruntime beside tvmc")
    p.add_argument("-t", "--target", default=DEFAULT_TARGET, help=f"target to compile for (default {DEFAULT_TARGET})")
    p.add_argument("-o", "--output", help=f"report path (default {REPORT_PATH}, docs/conformance-T.md for target T)")
    p.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    p.add_argument("--compile-only", action="store_true",
                   help="compile and package each case without running it (a GPU target where its device is "
                        "missing); the report counts compiled cases")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the workers run side by side
    missing = None if args.compile_only else _device_missing(args.target)
    if missing:
        print(f"error: target {args.target} runs on its device, and none runs here: {missing} "
              "(--compile-only compiles each case without running it)", file=sys.stderr)
        return 7
    ops = {o for o in args.ops.split(",") if o}
    cases = [c for c in collect_cases() if args.filter in c.name and (not ops or case_op(c) in ops)]
    t0 = time.perf_counter()
    global TARGET, COMPILE_ONLY
    TARGET, COMPILE_ONLY = args.target, args.compile_only
    output = args.output or report_path(args.target)
    results = run_all(cases, args.jobs, args.timeout, ort=not args.no_ort)
    elapsed = time.perf_counter() - t0
    write_report(results, output, elapsed, args.target, args.compile_only)
    update_targets_table(REPORT_PATH if args.output is None else output, args.target, results, output,
                         args.compile_only)
    s = summarize(results, "compiled" if args.compile_only else "passed")
    if args.compile_only:
        print(f"report: {output} ({s['in_scope']} in scope, {s['compiled']} compiled, not run; {s['error']} errors; "
              f"onnxruntime passes {s['ort_passed']}, {s['ort_only']} of them not compiled by tvmc)")
        print(f"conformance: {s['compiled']} compiled, {s['error']} failed")
        return 0
    print(f"report: {output} ({s['in_scope']} in scope, {_pct(s['passed'], s['in_scope'])} passed; "
          f"{s['failed']} wrong outputs, {s['inexact']} with inexact expected data, {s['error']} errors, "
          f"{s['skipped']} out of scope; "
          f"{s['frozen_passed']} passes with frozen shape inputs; onnxruntime passes {s['ort_passed']}, "
          f"{s['ort_only']} of them not by tvmc)")
    print(f"conformance: {s['passed']} passed, {s['failed'] + s['error']} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
