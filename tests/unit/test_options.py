"""Options objects (CompileOptions, TuneOptions, MeasureOptions): the friendly forms they take,
the canonical hashable forms they keep, the errors naming the field, and what metadata.json
records of CompileOptions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tvmc.autotune.measure import MeasureOptions
from tvmc.autotune.tune import TuneOptions
from tvmc.driver import NOT_IN_METADATA, CompileOptions, metadata_options


def test_compile_options_keep_canonical_hashable_forms():
    friendly = CompileOptions(opt_level=2, disabled_passes="FoldConstant, FoldScaleAxis",
                              pass_config={"FuseOps.max_depth": 8},
                              input_shapes={"x": [1, 3, 8, 8]}, value_ranges={"n": (1, 64)}, dump_ir=["ll", "asm"],
                              mixed_precision="float16", mixed_precision_ops="nn.dense,nn.conv2d")
    canonical = CompileOptions(opt_level=2, disabled_passes=frozenset({"FoldScaleAxis", "FoldConstant"}),
                               pass_config=(("FuseOps.max_depth", 8),), input_shapes=(("x", (1, 3, 8, 8)),),
                               value_ranges=(("n", (1.0, 64.0)),), dump_ir=("ll", "asm"), mixed_precision="float16",
                               mixed_precision_ops=("nn.dense", "nn.conv2d"))
    assert friendly == canonical and hash(friendly) == hash(canonical)
    assert dataclasses.replace(friendly, opt_level=1).input_shapes == (("x", (1, 3, 8, 8)),)  # idempotent
    assert CompileOptions(mixed_precision=None).mixed_precision == ""


def test_compile_options_take_symbolic_ranges():
    friendly = CompileOptions(input_shapes={"ids": [1, "1..512"], "x": (2, (3, 4))}, dim_ranges={"seq": "1..512"})
    canonical = CompileOptions(input_shapes=(("ids", (1, (1, 512))), ("x", (2, (3, 4)))),
                               dim_ranges=(("seq", (1, 512)),))
    assert friendly == canonical and hash(friendly) == hash(canonical)
    assert dataclasses.replace(friendly, opt_level=1).dim_ranges == (("seq", (1, 512)),)  # idempotent
    meta = metadata_options(friendly)
    assert meta["input_shapes"] == {"ids": [1, "1..512"], "x": [2, "3..4"]} and meta["dim_ranges"] == {"seq": "1..512"}
    assert json.loads(json.dumps(meta)) == meta


@pytest.mark.parametrize("fields,error,words", [
    (dict(input_shapes={"x": [1, (5, 2)]}), ValueError, "ranges (lo, hi) / 'lo..hi' with 1 <= lo <= hi"),
    (dict(input_shapes={"x": [1, "0..2"]}), ValueError, "input_shapes['x']"),
    (dict(dim_ranges={"seq": (0, 4)}), ValueError, "dim_ranges['seq'] must be a range"),
    (dict(dim_ranges={"seq": "1-4"}), ValueError, "dim_ranges['seq'] must be a range"),
    (dict(dim_ranges=["seq"]), TypeError, "dim_ranges must be a dict"),
    (dict(opt_level=4), ValueError, "opt_level must be in 0..3"),
    (dict(opt_level="3"), TypeError, "opt_level must be an int"),
    (dict(input_shapes=[1, 32]), TypeError, "input_shapes must be a dict"),
    (dict(input_shapes={"x": [2, 0]}), ValueError, "input_shapes['x']"),
    (dict(value_ranges={"n": (5, 1)}), ValueError, "value_ranges['n']: (5, 1) is empty"),
    (dict(value_ranges={"n": (0, float("inf"))}), ValueError, "must be finite"),
    (dict(pass_config="FuseOps.max_depth=8"), TypeError, "pass_config must be a dict"),
    (dict(dump_ir="ll,pdf"), ValueError, "dump_ir stage must be one of"),
    (dict(mixed_precision="bfloat8"), ValueError, "mixed_precision must be one of float16"),
    (dict(mixed_precision_ops="nn.dense"), ValueError, "mixed_precision_ops needs mixed_precision"),
    (dict(mixed_precision="float16", mixed_precision_ops="conv"), ValueError, "unknown operator 'conv'"),
    (dict(shipped_records="no"), TypeError, "shipped_records must be a bool"),
    (dict(tuning_records=3), TypeError, "tuning_records must be a path"),
])
def test_compile_options_errors_name_the_field(fields, error, words):
    with pytest.raises(error) as info:
        CompileOptions(**fields)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("make,error,words", [
    (lambda: TuneOptions(trials=0), ValueError, "trials must be >= 1"),
    (lambda: TuneOptions(tuner="anneal"), ValueError, "tuner must be one of xgb, ga, random, grid"),
    (lambda: TuneOptions(early_stopping=0), ValueError, "early_stopping must be >= 1"),
    (lambda: TuneOptions(time_budget_s=0), ValueError, "time_budget_s must be a positive number of seconds"),
    (lambda: TuneOptions(time_budget_s=True), TypeError, "time_budget_s must be a number of seconds"),
    (lambda: TuneOptions(measure={"number": 2}), TypeError, "measure must be a MeasureOptions"),
    (lambda: MeasureOptions(number=0), ValueError, "number must be >= 1"),
    (lambda: MeasureOptions(min_repeat_ms=-1), ValueError, "min_repeat_ms must be a non-negative number"),
    (lambda: MeasureOptions(timeout_s=0), ValueError, "timeout_s must be a positive number of seconds"),
    (lambda: MeasureOptions(parallel=0), ValueError, "parallel must be >= 1"),
])
def test_tune_and_measure_options_errors_name_the_field(make, error, words):
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value)


def test_measure_options_build_on_every_core_by_default(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 7)
    assert MeasureOptions().parallel == 7 and MeasureOptions(parallel=None).parallel == 7
    assert MeasureOptions(parallel=3).parallel == 3 and TuneOptions(prior_records=None).measure.parallel >= 1


def test_metadata_records_asdict_less_where_the_compile_reads_and_writes():
    options = CompileOptions(opt_level=1, disabled_passes="B,A", pass_config={"FuseOps.max_depth": 8},
                             input_shapes={"x": [1, 8]}, value_ranges={"n": (0, 4)}, tuning_records="/tmp/r.json",
                             dump_ir="ll", dump_dir="/tmp/somewhere", shipped_records=False)
    meta = metadata_options(options)
    # dim_ranges only when given: a static compile's metadata.json is what it was before they existed
    assert set(meta) == {f.name for f in dataclasses.fields(CompileOptions)} - set(NOT_IN_METADATA) - {"dim_ranges"}
    assert meta == {"opt_level": 1, "disabled_passes": ["A", "B"], "pass_config": {"FuseOps.max_depth": 8},
                    "input_shapes": {"x": [1, 8]}, "value_ranges": {"n": [0.0, 4.0]}, "mixed_precision": "",
                    "mixed_precision_ops": [], "shipped_records": False}
    # where the records and the dumps are does not reach the artifact
    elsewhere = dataclasses.replace(options, tuning_records="r.json", dump_ir=(), dump_dir=None)
    assert json.dumps(metadata_options(elsewhere), sort_keys=True) == json.dumps(meta, sort_keys=True)
