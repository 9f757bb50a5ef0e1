"""Tuning: config spaces, tuners on synthetic costs, the cost model's features (CPU and GPU
kernels), records (round trip, resume, apply-best, other targets, bad files), and measurement
faults (build errors, crashes, hangs, wrong results)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvmc.autotune import features
from tvmc.autotune.measure import MeasureError, MeasureOptions, MeasureResult, Measurer, build_candidate
from tvmc.autotune.record import IMPL_ALIASES, ApplyHistoryBest, RecordWriter, encode, load_records
from tvmc.autotune.space import ConfigSpace
from tvmc.autotune.task import tasks_of_functions, workload_key
from tvmc.autotune.tune import Progress, TuneOptions, side_by_side_speedup, split_budget, tune_tasks
from tvmc.autotune.tuner import TUNERS, make_tuner
from tvmc.cli import main
from tvmc.driver import CompileOptions, compile_model, extract_tasks
from tvmc.errors import ScheduleError, TuningError
from tvmc.graph.ir import Function, TensorType
from tvmc.ops.registry import make_call
from tvmc.graph.ir import Var as GraphVar
from tvmc.ops.fused import lower_fused
from tvmc.ops.registry import all_ops
from tvmc.target import resolve_target, with_cross_compiler
from tvmc.te.expr import FloatImm, IntImm, Load, Var
from tvmc.te.schedule import THREAD_TAGS
from tvmc.tir.ir import Allocate, Barrier, Buffer, For, IfThenElse, PrimFunc, Seq, Store

# Builds get their own generous limit (a loaded 2-core machine builds slowly); runs of these
# small kernels take milliseconds, so only a real hang reaches timeout_s.
FAST = MeasureOptions(number=1, repeat=1, timeout_s=20.0, build_timeout_s=300.0, parallel=2)


def _conv_model(c=8, k=16, hw=6) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, c, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, hw, hw])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def target():
    return resolve_target("native")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "conv.onnx"
    onnx.save(_conv_model(), str(path))
    return str(path)


@pytest.fixture(scope="module")
def tasks(model_path, target):
    return extract_tasks(model_path, target)


@pytest.fixture(scope="module")
def task(tasks):
    return tasks[0]


# ---- config spaces and tasks ------------------------------------------------------------------

def test_config_space_index_round_trip():
    space = ConfigSpace()
    space.define_split("tile", 12, fallback=5)
    space.define_knob("unroll", [False, True], fallback=True)
    assert space.knobs["tile"] == [1, 2, 3, 4, 6, 12]
    assert dict(space.fallback_config()) == {"tile": 4, "unroll": True}  # 5 does not divide 12
    assert space.fallback_config().is_fallback
    configs = list(space.all_configs())
    assert len(configs) == len(space) == 12
    assert [space.index_of(c) for c in configs] == list(range(12))
    assert [dict(space.get(i)) for i in range(12)] == [dict(c) for c in configs]
    assert space.index_of({"tile": 5, "unroll": True}) is None
    assert space.index_of({"tile": 4}) is None


def test_task_extraction(tasks, task, target):
    # one task per implementation of the conv: the choice between them is part of the search
    assert [t.impl for t in tasks] == ["conv2d_nchwc.cpu", "conv2d_nchwc_im2col.cpu"]
    assert tasks[0].workload == tasks[1].workload and task.op == "nn.conv2d_nchwc"
    assert task.flops == 2 * (16 * 6 * 6) * (8 * 3 * 3)  # 2 x outputs x reduction taps
    space = task.config_space(target)
    assert set(space.knobs) == {"tile_ow", "unroll_ic", "unroll_kw", "tile_oh", "tile_oc", "reorder_kernel_first"}
    assert space.index_of(space.fallback_config()) is not None
    # list and tuple spellings of a workload are the same key
    assert workload_key(task.workload) == workload_key(json.loads(json.dumps(task.workload)))


def test_identical_layers_are_one_task(tmp_path, target):
    w = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["a"], ["b"]),
                           helper.make_node("Conv", ["b", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [w])
    tasks = extract_tasks(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), target)
    assert len(tasks) == 2 and [t.calls for t in tasks] == [2, 2]  # direct and im2col


def test_winograd_task_counts_the_direct_conv2d_flops():
    """F(4x4, 3x3) forced for this conv on x86-avx2 (without the size budget, which a one-conv model
    never affords); its task counts 2 x N x O x OH x OW x C x 9, as the direct form's does, not its
    output elements."""
    from tvmc.driver import CompileOptions

    model = _conv_model(c=16, k=32, hw=8)
    options = CompileOptions(pass_config={"AlterOpLayout.winograd_tile_size": 4, "AlterOpLayout.size_budget": 0})
    (task,) = [t for t in extract_tasks(model, resolve_target("x86-avx2"), options) if "winograd" in t.impl]
    assert task.flops == 2 * 32 * 8 * 8 * 16 * 9


def test_summary_marks_the_faster_implementation(tasks):
    from tvmc.autotune.tune import TaskResult, format_summary

    direct, im2col = (TaskResult(t, trials=4, best_flops=f, fallback_flops=1e9) for t, f in zip(tasks, (3e9, 5e9)))
    rows = format_summary([direct, im2col]).splitlines()
    assert "conv2d_nchwc.cpu " in rows[1] and "conv2d_nchwc_im2col.cpu*" in rows[2]
    assert rows[-1].startswith("* the faster implementation")
    assert "*" not in format_summary([direct])  # one implementation: nothing to choose


def test_budget_split_in_proportion_to_flops(task, target):
    from dataclasses import replace

    big = replace(task, flops=task.flops * 3)
    size = len(task.config_space(target))
    assert split_budget([task, big], 8, target) == [2, 6]
    assert split_budget([task, big], 10 * size, target) == [size, size]  # capped at the space


# ---- tuners -----------------------------------------------------------------------------------

def _synthetic_space():
    space = ConfigSpace()
    space.define_knob("a", list(range(8)), fallback=0)
    space.define_knob("b", list(range(8)), fallback=0)
    space.define_knob("c", [False, True], fallback=False)
    return space


def _synthetic_flops(cfg) -> float:
    """A smooth peak at a=5, b=2, c=True."""
    return 100.0 - (cfg["a"] - 5) ** 2 - 2 * (cfg["b"] - 2) ** 2 - 10 * (not cfg["c"])


@pytest.mark.parametrize("kind", TUNERS)
def test_tuner_finds_the_best_of_a_synthetic_cost(kind):
    space = _synthetic_space()
    tuner = make_tuner(kind, space, featurize=lambda c: np.array([c["a"], c["b"], c["c"]], np.float32), seed=1)
    budget = len(space) if kind in ("grid", "random") else len(space) // 2
    seen = []
    tuner.tune(budget, lambda cfgs: [_synthetic_flops(c) for c in cfgs], batch_size=8,
               callback=lambda t, b, f: seen.extend(b))
    assert len(seen) == len(set(seen)) <= budget  # never measures a config twice
    assert dict(space.get(tuner.best_index)) == {"a": 5, "b": 2, "c": True}


def test_xgb_beats_random_to_the_best():
    """The cost model reaches the optimum in fewer trials than the expected half of the space."""
    space = _synthetic_space()
    tuner = make_tuner("xgb", space, featurize=lambda c: np.array([c["a"], c["b"], c["c"]], np.float32), seed=2)
    tuner.tune(len(space), lambda cfgs: [_synthetic_flops(c) for c in cfgs], batch_size=8, early_stopping=16)
    assert tuner.best_flops == 100.0 and tuner.best_trial < len(space) // 2


def _features(c):
    return np.array([c["a"], c["b"], c["c"]], np.float32)


def _trials_to_best(prior_peak, seed) -> int:
    """xgb with prior records of a synthetic task peaking at `prior_peak` (a, b); None: no prior."""
    space = _synthetic_space()
    tuner = make_tuner("xgb", space, featurize=_features, seed=seed)
    if prior_peak is not None:
        configs = list(space.all_configs())
        pa, pb = prior_peak
        tuner.add_prior(np.stack([_features(c) for c in configs]),
                        [100.0 - (c["a"] - pa) ** 2 - 2 * (c["b"] - pb) ** 2 - 10 * (not c["c"]) for c in configs])
    tuner.tune(len(space), lambda cfgs: [_synthetic_flops(c) for c in cfgs], batch_size=8, early_stopping=24)
    assert tuner.best_flops == 100.0
    return tuner.best_trial + 1


def test_xgb_transfer_from_a_related_task():
    """Prior records of a task whose optimum is one step away put the optimum in the first batch;
    misleading priors (optimum far away) cost trials but the task's own data still wins."""
    related = [_trials_to_best((5, 3), seed) for seed in range(3)]
    scratch = [_trials_to_best(None, seed) for seed in range(3)]
    misleading = [_trials_to_best((0, 7), seed) for seed in range(3)]
    assert max(related) <= 8 < sum(scratch) / 3, (related, scratch)
    assert max(misleading) < len(_synthetic_space()) // 2, misleading


def test_early_stopping():
    space = _synthetic_space()
    tuner = make_tuner("grid", space)
    tuner.tune(len(space), lambda cfgs: [1.0] * len(cfgs), batch_size=4, early_stopping=8)
    assert tuner.trials == 8


# ---- cost-model features ----------------------------------------------------------------------

def _documented_layout() -> dict:
    """slot -> feature name, as the features module's docstring lists them."""
    doc = features.__doc__
    per_loop = int(re.search(r"PER_LOOP = (\d+)", doc).group(1))
    access_base, per_access = map(int, re.search(r"slot (\d+) \+ a \* PER_ACCESS \+ offset \(PER_ACCESS = (\d+)",
                                                 doc).groups())
    groups = {g: int(n) for g, n in re.findall(r"(\w+\.\w+) at (\d+)", doc)}
    out = {}
    for offset, name in re.findall(r"^ +(\d+)  (\S+)", doc, re.M):
        offset = int(offset)
        if "{d}" in name:
            slots = {d * per_loop + offset: name.format(d=d) for d in range(features.MAX_LOOPS)}
        elif "{a}" in name:
            slots = {access_base + a * per_access + offset: name.format(a=a) for a in range(features.MAX_ACCESSES)}
        elif name.startswith("<scope>.<dir>."):
            slots = {base + offset: g + name[len("<scope>.<dir>"):] for g, base in groups.items()
                     if not (g.startswith("local.") and offset >= len(features.LOCAL_TRAFFIC_FEATURES))}
        else:
            slots = {offset: name}
        assert not set(slots) & set(out), f"{name} documented at a slot already taken"
        out.update(slots)
    assert int(re.search(r"LENGTH = (\d+)", doc).group(1)) == features.LENGTH
    return out


def test_every_feature_slot_has_one_name_as_documented():
    """Each slot of the vector is one named feature, and the module docstring lists them all at
    their slots (the old layout wrote nesting depth over a loop-kind slot)."""
    assert len(set(features.NAMES)) == len(features.NAMES) == features.LENGTH
    assert features.SLOT == {name: k for k, name in enumerate(features.NAMES)}
    assert _documented_layout() == dict(enumerate(features.NAMES))


def _loop(name, extent, kind, body):
    v = Var(name)
    return For(v, extent, kind, body(v))


def _feature(vec, name) -> float:
    return float(vec[features.SLOT[name]])


def _log2(x) -> float:
    return float(np.float32(np.log2(1 + x)))


def test_features_of_a_deep_cpu_nest_keep_kinds_and_counts_apart():
    """Six nested loops: each loop's one-hot kind, extent and presence sit in its own slots."""
    a, out = Buffer("a", (2, 3, 4, 5, 6, 8), "float32"), Buffer("out", (2, 3, 4, 5, 6, 8), "float32")
    kinds = ["parallel", "serial", "serial", "serial", "unroll", "vectorize"]
    extents = a.shape

    def nest(k, idx):
        if k == len(kinds):
            flat = a.flat_index(idx)
            return Store(out, flat, Load(a, flat) * FloatImm(2.0))
        return _loop(f"i{k}", extents[k], kinds[k], lambda v: nest(k + 1, idx + [v]))

    vec = features.loop_features(PrimFunc("k", [a, out], nest(0, [])))
    for d, (kind, extent) in enumerate(zip(kinds, extents)):
        assert _feature(vec, f"loop{d}.kind={kind}") == 1.0 and _feature(vec, f"loop{d}.present") == 1.0
        assert _feature(vec, f"loop{d}.log2_extent") == _log2(extent)
        assert sum(_feature(vec, f"loop{d}.kind={k}") for k in features.KINDS) == 1.0
    assert _feature(vec, "loop6.present") == 0.0
    assert _feature(vec, "kernel.loops.kind=serial") == 3 and _feature(vec, "kernel.loops.kind=unroll") == 1
    assert _feature(vec, "kernel.log2_dominant_unrolled") == _log2(6)
    assert _feature(vec, "kernel.is_gpu") == 0.0 and _feature(vec, "launch.log2_threads_per_block") == 0.0
    # the contiguous vector loop: 8 lanes of float32 per load and store; stride 1 on the innermost loop
    assert _feature(vec, "access0.log2_vector_bytes") == _log2(32) == _feature(vec, "access1.log2_vector_bytes")
    assert _feature(vec, "loop5.access0.log2_stride") == _log2(1)
    assert _feature(vec, "global.load.log2_accesses_per_thread") == _log2(2 * 3 * 4 * 5 * 6)
    assert _feature(vec, "global.load.log2_touched_bytes_per_thread") == _log2(4 * a.size)
    assert _feature(vec, "compute.log2_ops_per_thread") == _log2(a.size)


def _copy_kernel(load_index, vector_lanes=1):
    """out[b*64 + t*L + l] = a[load_index(b, t, l)] on 16 blocks of 64 / L threads, L vector lanes."""
    a, out = Buffer("a", (1024,), "float32"), Buffer("out", (1024,), "float32")
    lanes = vector_lanes
    body = _loop("b", 16, "blockIdx.x", lambda b: _loop(
        "t", 64 // lanes, "threadIdx.x", lambda t: _loop(
            "l", lanes, "vectorize" if lanes > 1 else "serial", lambda lane: Store(
                out, b * 64 + t * lanes + lane, Load(a, load_index(b, t, lane))))))
    return PrimFunc("copy", [a, out], body)


def test_gpu_features_see_coalescing_and_vector_width():
    coalesced = features.loop_features(_copy_kernel(lambda b, t, lane: b * 64 + t * 4 + lane, vector_lanes=4))
    assert _feature(coalesced, "kernel.is_gpu") == 1.0  # no launch set: taken from the thread loops
    assert _feature(coalesced, "launch.log2_threads_per_block") == _log2(16)
    assert _feature(coalesced, "launch.log2_blocks") == _log2(16)
    assert _feature(coalesced, "loop0.kind=blockIdx.x") == _feature(coalesced, "loop1.kind=threadIdx.x") == 1.0
    assert _feature(coalesced, "global.load.log2_vector_bytes") == _log2(16)
    assert _feature(coalesced, "global.load.coalesced_fraction") == 1.0
    assert _feature(coalesced, "access1.log2_stride_threadIdx.x") == _log2(4)
    assert _feature(coalesced, "global.load.log2_bytes_per_block") == _log2(256)
    # the transposed read: consecutive threads 16 elements apart, one float at a time
    strided = features.loop_features(_copy_kernel(lambda b, t, lane: t * 16 + b))
    assert _feature(strided, "global.load.coalesced_fraction") == 0.0
    assert _feature(strided, "global.store.coalesced_fraction") == 1.0
    assert _feature(strided, "access1.log2_stride_threadIdx.x") == _log2(16)
    assert _feature(strided, "access1.coalesced") == 0.0 and _feature(strided, "access0.coalesced") == 1.0
    # a floordiv/floormod index (a fused loop split again) is evaluated: consecutive threads, stride 1
    fused = features.loop_features(_copy_kernel(lambda b, t, lane: (b * 64 + t) % 8 + (b * 64 + t) // 8 * 8))
    assert _feature(fused, "global.load.coalesced_fraction") == 1.0


def test_features_of_odd_kernels():
    """Any loop kind, buffer scope and dtype, guards, indirect and floordiv indices, barriers,
    and kernels without a store give a finite vector."""
    a = Buffer("a", (64,), "float32")
    idx = Buffer("idx", (64,), "int64")
    tex = Buffer("tex", (64,), "bfloat16", scope="texture")
    out = Buffer("out", (64,), "float32")
    body = _loop("w", 2, "vthread", lambda w: _loop("t", 32, "threadIdx.x", lambda t: Allocate(tex, Seq([
        Store(tex, t, Load(a, Load(idx, w * 32 + t))),
        Barrier(),
        IfThenElse(Load(idx, t) < IntImm(5), Store(out, w * 32 + t, Load(tex, (t // 2) * 2))),
    ]))))
    vec = features.loop_features(PrimFunc("odd", [a, idx, out], body))
    assert np.isfinite(vec).all() and vec.shape == (features.LENGTH,)
    assert _feature(vec, "kernel.loops.kind=other") == 1 and _feature(vec, "loop0.kind=other") == 1
    assert _feature(vec, "access0.scope=other") == 1.0  # the dominant store: the first (ties, same depth)
    assert _feature(vec, "kernel.guarded_store_fraction") == 0.5
    assert _feature(vec, "sync.barriers") == 1
    assert _feature(vec, "kernel.stores") == 2
    no_store = features.loop_features(PrimFunc("sync", [], _loop("t", 32, "threadIdx.x", lambda t: Barrier())))
    assert _feature(no_store, "kernel.is_gpu") == 1.0 and _feature(no_store, "sync.barriers") == 1
    assert _feature(no_store, "loop0.present") == 0.0
    assert not features.loop_features(PrimFunc("empty", [], Seq([]))).any()


def _dense_task(target, m=64, n=128, k=32):
    x, w = GraphVar("x", TensorType((m, k), "float32")), GraphVar("w", TensorType((n, k), "float32"))
    (task,) = [t for t in tasks_of_functions([Function([x, w], make_call("nn.dense", [x, w]), "f")], target)
               if t.impl.endswith(".gpu") or target.kind != "gpu"][:1]
    return task


@pytest.mark.parametrize("spec", ["opencl", "cuda-sm90"])
def test_gpu_kernel_features_without_a_device(spec):
    """Features of a GPU target's device kernel come from lowering alone (no GPU, no driver), and
    tell apart dense.gpu configs that differ only in thread binding and tiling."""
    gpu = resolve_target(spec)
    task = _dense_task(gpu)
    space = task.config_space(gpu)
    fallback = space.fallback_config()
    prim = lower_fused(task.function(), gpu, lambda name, wl: fallback if name == task.impl else None)
    vec = features.config_features(task, gpu, fallback)
    assert _feature(vec, "kernel.is_gpu") == 1.0
    assert _feature(vec, "launch.log2_threads_per_block") == _log2(prim.launch.threads_per_block)
    assert _feature(vec, "memory.log2_shared_bytes_per_block") == _log2(prim.launch.shared_bytes) > 0
    assert _feature(vec, "sync.barriers") >= 1 and _feature(vec, "memory.log2_local_bytes_per_thread") > 0
    assert _feature(vec, "kernel.dominant_stores_local") == 1.0  # the register accumulator
    assert _feature(vec, "global.load.coalesced_fraction") == 1.0  # the cooperative fetches
    bound = [k for k in features.KINDS if k in THREAD_TAGS for d in range(features.MAX_LOOPS)
             if _feature(vec, f"loop{d}.kind={k}")]
    assert {"blockIdx.x", "threadIdx.x", "threadIdx.y"} <= set(bound)
    # the same tiles on a transposed thread block; and random configs: different kernels, different
    # vectors (configs whose tiles exceed the problem lower to the same kernel as smaller ones)
    swapped = dict(fallback, tile_x=fallback["tile_y"] // 2, tile_y=fallback["tile_x"] * 2)
    picks = np.random.default_rng(0).choice(len(space), 40, replace=False)
    kernels = {}
    for config in [fallback, swapped] + [space.get(int(i)) for i in picks]:
        try:
            text = str(lower_fused(task.function(), gpu, lambda name, wl, c=config: c if name == task.impl else None))
        except ScheduleError:  # beyond the target's threads or shared memory per block
            continue
        kernels[text] = features.config_features(task, gpu, config).tobytes()
    vec_swapped = features.config_features(task, gpu, swapped)
    assert vec_swapped.any() and not np.array_equal(vec, vec_swapped)
    assert len(kernels) >= 10 and len(set(kernels.values())) == len(kernels)


def test_cpu_kernel_features_tell_configs_apart(task, target):
    """x86: the conv task's configs give distinct vectors, with the target's vector width."""
    space = task.config_space(target)
    vectors = [features.config_features(task, target, space.get(i)) for i in range(min(len(space), 24))]
    assert len({v.tobytes() for v in vectors}) == len(vectors)
    width = target.vector_width_bits // 8
    assert max(_feature(v, "global.store.log2_vector_bytes") for v in vectors) <= _log2(width)
    assert all(_feature(v, "kernel.is_gpu") == 0.0 for v in vectors)


def test_xgb_tune_on_cuda_without_a_gpu_is_a_one_line_error(model_path, tmp_path, capsys, monkeypatch):
    from tvmc import runtime
    from tvmc.backends.gpu import CUDABackend

    if runtime.device_missing("cuda") is None:  # a GPU here: pretend it is missing
        monkeypatch.setattr(CUDABackend, "missing", lambda self, target: "no CUDA driver (test)")
    code = main(["tune", model_path, "--target", "cuda", "-o", str(tmp_path / "r.json"), "--trials", "4"])
    err = capsys.readouterr().err
    assert code == TuningError.exit_code, err
    assert err.count("\n") == 1
    assert err.startswith("error: target cuda is tuned by measuring on its device, and none runs here")
    assert not (tmp_path / "r.json").exists()


# ---- measurement and records ------------------------------------------------------------------

def test_tune_writes_records_and_resumes(task, target, tmp_path):
    out = tmp_path / "records.json"
    opts = TuneOptions(trials=5, tuner="random", measure=FAST)
    (res,) = tune_tasks([task], target, str(out), opts, Progress(live=False))
    records = load_records(out)
    assert len(records) == 5 and res.trials == 5
    assert all(r.ok for r in records), [r.data["error_msg"] for r in records]
    fallback = task.config_space(target).fallback_config()
    assert records[0].config == dict(fallback)  # the fallback is measured first
    assert res.fallback_flops > 0 and res.best_flops >= res.fallback_flops
    line = json.loads(out.read_text().splitlines()[0])
    assert {"version", "target", "task", "config", "costs_s", "error", "timestamp"} <= set(line)
    assert line["target"] == {"name": target.name, "hash": target.hash, "tuning_key": target.tuning_key}
    # resume with a larger budget: measured configs are skipped, 3 new ones are measured
    (res2,) = tune_tasks([task], target, str(out), TuneOptions(trials=8, tuner="xgb", measure=FAST),
                         Progress(live=False))
    records = load_records(out)
    assert res2.resumed == 5 and res2.trials == 3 and len(records) == 8
    assert len({r.config_key() for r in records}) == 8


class _ScriptedMeasurer:
    """Answers measure() with the given costs (s) per call, remembering the configs asked for."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), []

    def measure(self, task, configs, reference=False):
        self.asked.append([dict(c) for c in configs])
        return [MeasureResult([c]) if c else MeasureResult([], MeasureError.RUNTIME_DEVICE)
                for c in self.answers.pop(0)]


def test_speedup_is_measured_side_by_side(task, target):
    fallback = dict(task.config_space(target).fallback_config())
    best = dict(fallback, tile_oh=1 if fallback["tile_oh"] != 1 else 2)
    m = _ScriptedMeasurer([3e-3, 1e-3], [2e-3, None])
    assert side_by_side_speedup(task, fallback, best, m) == pytest.approx(3.0)
    assert m.asked == [[fallback, best]]  # one call: the two configs one after the other
    assert np.isnan(side_by_side_speedup(task, fallback, best, m))  # a failed check gives no number
    assert side_by_side_speedup(task, fallback, dict(fallback), m) == 1.0 and len(m.asked) == 2
    assert np.isnan(side_by_side_speedup(task, fallback, None, m))


def test_torn_last_line_is_skipped(task, target, tmp_path):
    out = tmp_path / "r.json"
    with RecordWriter(out) as w:
        w.write(target, task, task.config_space(target).fallback_config(), MeasureResult([1e-3]))
    with open(out, "a") as f:
        f.write('{"version": 1, "target": {"na')  # killed mid-line
    assert len(load_records(out)) == 1


def _write_records(path, target, task, rows):
    with RecordWriter(path) as w:
        for cfg, cost, err in rows:
            w.write(target, task, cfg, MeasureResult([cost] if cost else [], MeasureError(err)))


def test_apply_best_uses_the_best_valid_record(task, target, model_path, tmp_path):
    space = task.config_space(target)
    good = {"tile_ow": 2, "unroll_ic": False, "unroll_kw": True, "tile_oh": 3, "tile_oc": 1,
            "reorder_kernel_first": True}
    failed = {"tile_ow": 1, "unroll_ic": False, "unroll_kw": False, "tile_oh": 1, "tile_oc": 1,
              "reorder_kernel_first": False}
    path = tmp_path / "r.json"
    _write_records(path, target, task, [(dict(space.fallback_config()), 2e-3, 0), (good, 1e-3, 0),
                                        (failed, 1e-6, int(MeasureError.WRONG_ANSWER))])
    lookup = ApplyHistoryBest.from_file(path, target)
    cfg = lookup(task.impl, task.workload)
    assert dict(cfg) == good and cfg.cost_s == pytest.approx(1e-3)
    prim = lower_fused(task.function(), target, lookup)
    assert "unroll for conv2d_nchwc_i2 in 0..3" in str(prim)  # the tile_oh = 3 rows of the tuned tile
    # the compiled model uses it, and says so in metadata.json
    module = compile_model(model_path, target, CompileOptions(tuning_records=str(path)))
    meta = module.metadata["tuning_records"]
    assert (meta["workloads"], meta["workloads_from_records"], meta["workloads_fallback"]) == (1, 1, 0)
    assert (meta["tasks"], meta["tasks_with_records"]) == (2, 1)  # direct and im2col; only direct has records
    assert meta["applied"][0]["config"] == good
    assert meta["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and "file" not in meta


def test_artifact_names_records_by_content_not_path(task, target, model_path, tmp_path, monkeypatch):
    _write_records(tmp_path / "rec.json", target, task, [(dict(task.config_space(target).fallback_config()), 1e-3, 0)])
    monkeypatch.chdir(tmp_path)
    tars = []
    for k, records in enumerate(["rec.json", "./rec.json", str(tmp_path / "rec.json")]):
        assert main(["compile", model_path, "--target", "native", "-o", f"m{k}.tar", "--tuning-records", records]) == 0
        tars.append((tmp_path / f"m{k}.tar").read_bytes())
    assert tars[0] == tars[1] == tars[2]


def test_records_for_another_target_are_not_applicable(task, target, model_path, tmp_path, capsys):
    other = resolve_target("x86 -mcpu=skylake-avx512")
    path = tmp_path / "r.json"
    _write_records(path, other, task, [(dict(task.config_space(other).fallback_config()), 1e-3, 0)])
    lookup = ApplyHistoryBest.from_file(path, target)
    assert lookup(task.impl, task.workload) is None and lookup.not_applicable == 1
    assert main(["compile", model_path, "--target", "native", "-o", str(tmp_path / "m.tar"),
                 "--tuning-records", str(path)]) == 0
    text = capsys.readouterr().out
    assert "0/1 kernel workloads from records, 1 fallback (0 of 2 tuning tasks over 1 kernel workload had records)" \
        in text
    assert f"1 records for target x86 ({other.tuning_key}) not applicable" in text


def test_records_measured_under_emulation_say_so_and_are_never_applied(task, target, model_path, tmp_path, capsys):
    """A cluster's --emulate device times QEMU: its records carry "measured": "emulated", compile
    counts them without applying them, and a tune measured natively does not resume from them."""
    fallback = dict(task.config_space(target).fallback_config())
    path = tmp_path / "r.json"
    with RecordWriter(path) as w:
        w.write(target, task, fallback, MeasureResult([1e-3], emulated=True))
    line = json.loads(path.read_text())
    assert line["measured"] == "emulated" and load_records(path)[0].emulated
    assert "measured" not in json.loads(encode(target, task, fallback, MeasureResult([1e-3])))
    lookup = ApplyHistoryBest.from_file(path, target)
    assert lookup(task.impl, task.workload) is None and lookup.summary()["emulated_records"] == 1
    assert main(["compile", model_path, "--target", "native", "-o", str(tmp_path / "m.tar"),
                 "--tuning-records", str(path)]) == 0
    assert "1 records measured under emulation not applied" in capsys.readouterr().out
    (res,) = tune_tasks([task], target, str(path), TuneOptions(trials=1, tuner="grid", measure=FAST),
                        Progress(live=False))
    assert res.resumed == 0 and res.trials == 1 and not res.emulated
    records = load_records(path)
    assert [r.emulated for r in records] == [True, False] and records[1].config == fallback


def _legacy_line(target, task, config, cost, impl=None) -> str:
    """A record line as tvmc wrote it before tuning keys (target hash only) and, with `impl`,
    before the CPU implementations were named *.cpu."""
    line = json.loads(encode(target, task, config, MeasureResult([cost])))
    del line["target"]["tuning_key"]
    assert line["target"]["hash"] == target.hash
    if impl is not None:
        line["task"]["name"] = impl
    return json.dumps(line)


def test_records_tuned_without_a_cross_compiler_apply_with_it(task, target, model_path, tmp_path, capsys):
    cfg = {**task.config_space(target).fallback_config(), "tile_oh": 3}
    path = tmp_path / "r.json"
    _write_records(path, target, task, [(cfg, 1e-3, 0)])
    cross = with_cross_compiler(target, "cc", "-O2")
    assert cross.hash != target.hash and cross.tuning_key == target.tuning_key
    assert ApplyHistoryBest.from_file(path, cross)(task.impl, task.workload) == cfg
    assert main(["compile", model_path, "--target", "native", "--cross-compiler", "cc", "--cross-compiler-options",
                 "-O2", "-o", str(tmp_path / "m.tar"), "--tuning-records", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tuning_key"] == target.tuning_key and doc["target"]["linker"][0] == "cc"
    assert doc["tuning_records"]["workloads_from_records"] == 1
    assert doc["tuning_records"]["applied"][0]["config"] == cfg


def test_records_written_before_tuning_keys_still_apply(task, target, tmp_path):
    cfg = {**task.config_space(target).fallback_config(), "tile_oh": 3}
    path = tmp_path / "old.json"
    path.write_text(_legacy_line(target, task, cfg, 1e-3) + "\n")
    for t in (target, with_cross_compiler(target, "cc")):  # by the hash of the descriptor's own toolchain
        lookup = ApplyHistoryBest.from_file(path, t)
        assert lookup(task.impl, task.workload) == cfg and lookup.not_applicable == 0
    other = dataclasses.replace(target, l2_bytes=target.l2_bytes // 2)  # another code fact: not applicable
    lookup = ApplyHistoryBest.from_file(path, other)
    assert lookup(task.impl, task.workload) is None
    assert lookup.other_targets == {f"{target.name} ({target.hash})": 1}


def test_records_naming_x86_implementations_apply_to_the_cpu_ones(task, target, tmp_path):
    assert task.impl == "conv2d_nchwc.cpu"
    cfg = {**task.config_space(target).fallback_config(), "tile_oh": 3}
    path = tmp_path / "old.json"
    path.write_text(_legacy_line(target, task, cfg, 1e-3, impl="conv2d_nchwc.x86") + "\n")
    (rec,) = load_records(path)
    assert rec.impl == "conv2d_nchwc.cpu" and rec.key == task.key and rec.task() == dataclasses.replace(task, calls=1)
    assert ApplyHistoryBest.from_file(path, target)(task.impl, task.workload) == cfg
    cpu_names = {i.name for op in all_ops().values() for i in op.strategy.get("cpu", ())}
    assert set(IMPL_ALIASES.values()) <= cpu_names and not any(n.endswith(".x86") for n in cpu_names)


def test_stale_record_falls_back(task, target, tmp_path):
    path = tmp_path / "r.json"
    _write_records(path, target, task, [({"tile_ow": 2, "no_such_knob": 1}, 1e-3, 0)])
    lookup = ApplyHistoryBest.from_file(path, target)
    assert lookup(task.impl, task.workload) is None and len(lookup.stale) == 1


@pytest.mark.parametrize("edit", [
    lambda d: d.update(costs_s=[1e400]), lambda d: d.update(costs_s=["a"]), lambda d: d.update(timestamp="now"),
    lambda d: d["task"].update(flops=1.5), lambda d: d["task"].update(workload="conv"),
    lambda d: d.update(config=[1, 2]), lambda d: d["target"].pop("hash"), lambda d: d.update(error=-1),
    lambda d: d.update(version=2),
])
def test_malformed_record_lines_are_skipped_with_a_reason(task, target, tmp_path, edit):
    good = tmp_path / "good.json"
    _write_records(good, target, task, [({"tile_ow": 2}, 1e-3, 0)])
    line = json.loads(good.read_text().splitlines()[0])
    edit(line)
    bad = tmp_path / "bad.json"
    text = json.dumps(line).replace("1e+400", "1e400").replace("Infinity", "1e400")
    bad.write_text(text + "\n")
    with pytest.raises(TuningError, match="not a tuning records file .1 unreadable lines.*first: "):
        load_records(bad)
    bad.write_text(text + "\n" + good.read_text())
    assert len(load_records(bad)) == 1


def test_records_file_must_be_a_regular_file(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(TuningError, match="not a regular file .a FIFO."):
        load_records(tmp_path / "fifo.json")


def test_missing_or_corrupt_records_are_errors(target, model_path, tmp_path, capsys):
    with pytest.raises(TuningError, match="not found"):
        load_records(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json\n")
    with pytest.raises(TuningError, match="not a tuning records file"):
        load_records(bad)
    code = main(["compile", model_path, "--target", "native", "-o", str(tmp_path / "m.tar"),
                 "--tuning-records", str(bad)])
    assert code == TuningError.exit_code
    assert "not a tuning records file" in capsys.readouterr().err


# ---- measurement faults -----------------------------------------------------------------------

_C_CRASH = "void tvmc_task(void *a, void *b, void *c) { *(volatile int *)0 = 1; }\n"
_C_HANG = "void tvmc_task(void *a, void *b, void *c) { for (volatile int i = 0;; i++) {} }\n"
_C_WRONG = "void tvmc_task(void *a, void *b, float *c) { for (int i = 0; i < 16 * 36; i++) c[i] = 7.0f; }\n"


def _c_library(code: str, path: str):
    src = path + ".c"
    with open(src, "w") as f:
        f.write(code)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", path, src], check=True)


def _hangs(config) -> bool:
    return (config["tile_oh"] == 3 and config["tile_ow"] == 6 and not config["unroll_ic"] and not config["unroll_kw"]
            and config["tile_oc"] == 1 and not config["reorder_kernel_first"])


def _is_fallback(task, target, config) -> bool:
    return dict(config) == dict(task.config_space(target).fallback_config())


def faulty_build(task, target, config, path):
    """A build function with faults keyed on the config: tile_oh 2 crashes at run time, one config
    hangs (_hangs), tile_oh 4 computes wrong values, tile_ow 1 fails to build; the rest, and the
    fallback (the tuner's reference, whatever its tile_oh on this host), build for real."""
    if _is_fallback(task, target, config):
        return build_candidate(task, target, config, path)
    if config["tile_oh"] == 2:
        _c_library(_C_CRASH, path)
    elif _hangs(config):
        _c_library(_C_HANG, path)
    elif config["tile_oh"] == 4:
        _c_library(_C_WRONG, path)
    elif config["tile_ow"] == 1:
        return MeasureError.INSTANTIATION_ERROR, "ValueError: injected", 0.0
    else:
        return build_candidate(task, target, config, path)
    return MeasureError.NO_ERROR, "", 0.0


def wrong_im2col_build(task, target, config, path):
    """Every im2col candidate (its fallback too) computes wrong values; the direct form builds for real."""
    if task.impl == "conv2d_nchwc_im2col.cpu":
        _c_library(_C_WRONG, path)
        return MeasureError.NO_ERROR, "", 0.0
    return build_candidate(task, target, config, path)


def test_alternative_implementation_is_checked_against_the_default(tasks, target, tmp_path):
    """The im2col task's reference is the direct form's fallback output, so a wrong im2col
    fallback cannot become the reference that wrong candidates then agree with."""
    out = tmp_path / "r.json"
    opts = TuneOptions(trials=3, tuner="grid", measure=FAST)
    (res,) = tune_tasks([tasks[1]], target, str(out), opts, Progress(live=False), build_fn=wrong_im2col_build)
    assert [r.error for r in load_records(out)] == [MeasureError.WRONG_ANSWER] * 3
    assert res.best_flops == 0


# Timeouts: a candidate that hangs or builds forever must time out, and no correct candidate
# may, however loaded the machine: the faulty candidates run under a run timeout (RELAXED)
# hundreds of times what a correct one needs, the hanging one is measured on its own under a
# short one, and the build-timeout test's quick builds copy a library built beforehand.
RELAXED = dataclasses.replace(FAST, timeout_s=300.0)
_PREBUILT = {}   # set before a Measurer forks its build workers


def no_hang_build(task, target, config, path):
    """faulty_build, except that the hanging config is not built (test_hanging_candidate_times_out)
    and that of the correct configs only those without unrolling build for real: the others copy
    _PREBUILT["path"] (a correct library), so the whole space is measured in seconds."""
    import shutil

    if _hangs(config):
        return MeasureError.INSTANTIATION_ERROR, "skipped: hangs", 0.0
    if config["tile_oh"] in (1, 3) and config["tile_ow"] != 1 and (config["unroll_ic"] or config["unroll_kw"]):
        shutil.copyfile(_PREBUILT["path"], path)
        return MeasureError.NO_ERROR, "", 0.0
    return faulty_build(task, target, config, path)


def slow_build(task, target, config, path):
    """unroll_kw configs build for 10 minutes; the others copy _PREBUILT["path"] at once."""
    import shutil
    import time

    if config["unroll_kw"]:
        time.sleep(600)
    shutil.copyfile(_PREBUILT["path"], path)
    return MeasureError.NO_ERROR, "", 0.0


def test_faulty_candidates_are_recorded_and_tuning_goes_on(task, target, tmp_path):
    out = tmp_path / "r.json"
    space = task.config_space(target)
    configs = [c for c in space.all_configs() if not _hangs(c)]
    opts = TuneOptions(trials=len(space), tuner="grid", measure=RELAXED)
    _PREBUILT["path"] = str(tmp_path / "prebuilt.so")
    assert build_candidate(task, target, space.fallback_config(), _PREBUILT["path"])[0] == MeasureError.NO_ERROR
    (res,) = tune_tasks([task], target, str(out), opts, Progress(live=False), build_fn=no_hang_build)
    records = load_records(out)
    assert len(records) == len(space)  # every config measured once, the tuner never stopped
    by_error = {}
    for r in records:
        by_error.setdefault(MeasureError(r.error), []).append(r.config)
    correct = [c for c in configs if c["tile_oh"] in (1, 3) and c["tile_ow"] != 1 or _is_fallback(task, target, c)]
    assert all(c["tile_oh"] == 2 for c in by_error[MeasureError.RUNTIME_DEVICE])
    assert all(c["tile_oh"] == 4 for c in by_error[MeasureError.WRONG_ANSWER])
    assert all(c["tile_ow"] == 1 or _hangs(c) for c in by_error[MeasureError.INSTANTIATION_ERROR])
    assert MeasureError.RUN_TIMEOUT not in by_error and MeasureError.BUILD_TIMEOUT not in by_error
    assert len(by_error[MeasureError.NO_ERROR]) == len(correct), \
        [(r.config, r.data["error_msg"]) for r in records if r.error and r.config["tile_oh"] in (1, 3)]
    assert res.best_flops > 0 and res.best_config in correct and not _hangs(res.best_config)
    assert "signal 11" in next(r for r in records if r.error == MeasureError.RUNTIME_DEVICE).data["error_msg"]


def test_hanging_candidate_times_out(task, target):
    (hang,) = [c for c in task.config_space(target).all_configs() if _hangs(c)]
    with Measurer(target, dataclasses.replace(FAST, timeout_s=2.0), faulty_build) as m:
        (result,) = m.measure(task, [hang])
    assert result.error == MeasureError.RUN_TIMEOUT and "longer than 2 s" in result.error_msg


@pytest.mark.slow  # two 5 s build timeouts; the run timeout above stays in make test
def test_build_timeout(task, target, tmp_path):
    space = task.config_space(target)
    configs = [c for c in space.all_configs()
               if c["tile_oh"] == 1 and c["tile_ow"] == 6 and c["tile_oc"] == 1 and not c["reorder_kernel_first"]]
    assert [c["unroll_kw"] for c in configs] == [False, True, False, True]
    _PREBUILT["path"] = str(tmp_path / "prebuilt.so")
    assert build_candidate(task, target, configs[0], _PREBUILT["path"])[0] == MeasureError.NO_ERROR
    with Measurer(target, dataclasses.replace(RELAXED, build_timeout_s=5.0), slow_build) as m:
        results = m.measure(task, configs, reference=True)
    assert [r.error for r in results] == [MeasureError.NO_ERROR, MeasureError.BUILD_TIMEOUT,
                                          MeasureError.NO_ERROR, MeasureError.BUILD_TIMEOUT]


def test_cli_tune_then_compile(model_path, tasks, tmp_path, capsys):
    assert main(["tune", model_path, "--target", "native", "--list-tasks", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kind"] == "tasks" and (listing["num_tasks"], listing["num_workloads"]) == (2, 1)
    assert [t["implementation"] for t in listing["tasks"]] == [t.impl for t in tasks]
    assert [t["index"] for t in listing["tasks"]] == [0, 1] and listing["tasks"][0]["flops"] == tasks[0].flops
    out = tmp_path / "records.json"
    assert main(["tune", model_path, "--target", "native", "-o", str(out), "--trials", "3", "--tuner", "ga",
                 "--number", "1", "--repeat", "1", "--parallel", "1"]) == 0
    text = capsys.readouterr().out
    # 3 trials over the direct and im2col tasks of the one conv, in proportion to FLOPs (equal)
    assert "2 tuning tasks over 1 kernel workload from" in text
    assert "[Task  1/ 2]  Current/Best:" in text and "[Task  2/ 2]" in text
    assert "best GFLOP/s" in text and "speed-up" in text
    assert len(load_records(out)) == 3
    assert main(["compile", model_path, "--target", "native", "-o", str(tmp_path / "m.tar"),
                 "--tuning-records", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["tuning_records"]
    # compile counts what tune counts: tuning tasks and kernel workloads
    assert (summary["tasks"], summary["workloads"]) == (listing["num_tasks"], listing["num_workloads"])
    assert summary["workloads_from_records"] == 1 and summary["tasks_with_records"] == 2


def test_cli_tune_a_subset_of_tasks(model_path, tasks, tmp_path, capsys):
    out = tmp_path / "records.json"
    assert main(["tune", model_path, "--target", "native", "-o", str(out), "--tasks", "1", "--trials", "2",
                 "--tuner", "random", "--number", "1", "--repeat", "1", "--parallel", "1", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout holds the document alone; the progress went to stderr
    assert "[Task  1/ 1]" in captured.err
    assert doc["kind"] == "tune" and [t["index"] for t in doc["tasks"]] == [1]
    (task_doc,) = doc["tasks"]
    assert task_doc["implementation"] == tasks[1].impl and task_doc["trials"] == 2
    assert task_doc["best_config"] is not None and (task_doc["speedup"] is None or task_doc["speedup"] > 0)
    assert {r.impl for r in load_records(out)} == {tasks[1].impl}


def test_cli_tune_task_index_out_of_range(model_path, tmp_path, capsys):
    code = main(["tune", model_path, "--target", "native", "-o", str(tmp_path / "r.json"), "--tasks", "0,5"])
    assert code == TuningError.exit_code
    assert "task index 5 out of range: the model has 2 tasks (0-1" in capsys.readouterr().err
    # a usage error
    assert main(["tune", model_path, "--target", "native", "-o", str(tmp_path / "r.json"), "--tasks", "2-1"]) == 64
