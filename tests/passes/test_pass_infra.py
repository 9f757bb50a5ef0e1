"""Pass infrastructure: PassContext validation, gating, required passes, timing, dumps, pipelines."""

import dataclasses
import os

import pytest

from pass_helpers import batch_norm, call, conv, op_names, snapshot, var
from tvmc.errors import PassError
from tvmc.graph.ir import Graph
from tvmc.passes import PassContext, get_pass, graph_pass, list_passes, optimize, run_passes
from tvmc.passes import pass_infra

STANDARD = ["DeadCodeElimination", "EliminateCommonSubexpr", "FoldConstant", "FoldScaleAxis", "FuseOps",
            "PlanMemory", "SimplifyExpr", "SimplifyInference"]


def model():
    x = var("x", (1, 3, 6, 6))
    y = call("nn.relu", batch_norm(conv(x, 4, "conv"), "bn"))
    return Graph([x], [call("nn.dropout", y)])


def test_registry_lists_standard_passes():
    assert set(STANDARD) <= set(list_passes())
    info = get_pass("FuseOps")
    assert info.name == "FuseOps" and dict(info.options) == {"max_depth": 256}
    assert get_pass("PlanMemory").required == ("FuseOps",)


@pytest.mark.parametrize("make", [
    lambda: PassContext(disabled_passes={"NoSuchPass"}),
    lambda: optimize(model(), PassContext(), pipeline=["SimplifyInference", "NoSuchPass"]),
    lambda: get_pass("NoSuchPass"),
])
def test_unknown_pass_lists_known_ones(make):
    with pytest.raises(PassError) as err:
        make()
    msg = str(err.value)
    assert "NoSuchPass" in msg and all(n in msg for n in STANDARD)


def test_pass_options_are_validated():
    with pytest.raises(PassError) as err:
        PassContext(config={"FuseOps.max_dept": 3})
    assert "FuseOps.max_depth" in str(err.value) and "PlanMemory.alignment_bytes" in str(err.value)
    with pytest.raises(PassError):
        PassContext(config={"Nope.max_depth": 3})
    with pytest.raises(PassError):
        PassContext(config={"FuseOps.max_depth": "deep"})
    with pytest.raises(PassError):
        PassContext(opt_level=4)
    ctx = PassContext(config={"FuseOps.max_depth": 3})
    assert ctx.option("FuseOps", "max_depth") == 3
    assert PassContext().option("FuseOps", "max_depth") == 256


def test_context_is_frozen():
    ctx = PassContext()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.opt_level = 1
    with pytest.raises(TypeError):
        ctx.config["FuseOps.max_depth"] = 1


def test_disabled_pass_is_skipped():
    ctx = PassContext(disabled_passes={"SimplifyInference"})
    out = run_passes(model(), ["SimplifyInference", "FoldConstant"], ctx)
    assert "nn.batch_norm" in op_names(out)
    assert [n for n, _ in ctx.pass_times] == ["FoldConstant"]


def test_opt_level_gating():
    ctx = PassContext(opt_level=0)
    run_passes(model(), ["SimplifyInference", "FoldConstant"], ctx)
    assert [n for n, _ in ctx.pass_times] == ["SimplifyInference"]      # FoldConstant is level 1


def test_optimize_runs_pipeline_and_records_times():
    g = model()
    snap = snapshot(g)
    for level in range(4):
        ctx = PassContext(opt_level=level)
        out = optimize(g, ctx)
        names = [n for n, _ in ctx.pass_times]
        assert names == pass_infra.load_pipeline(level)
        assert names[-2:] == ["FuseOps", "PlanMemory"]
        assert all(isinstance(ms, float) and ms >= 0 for _, ms in ctx.pass_times)
        assert "storage_id" in out.meta
    assert snapshot(g) == snap


def test_codegen_passes_always_run_last():
    ctx = PassContext(disabled_passes={"FuseOps", "PlanMemory"})
    out = optimize(model(), ctx, pipeline=["PlanMemory", "SimplifyInference"])
    assert [n for n, _ in ctx.pass_times] == ["SimplifyInference", "FuseOps", "PlanMemory"]
    assert op_names(out) == ["fused_nn_conv2d", "fused_multiply", "fused_add", "fused_nn_relu"]


def test_pipelines_yaml_names_are_known():
    for level in range(4):
        names = pass_infra.load_pipeline(level)
        assert all(n in list_passes() for n in names)
        assert names[-2:] == ["FuseOps", "PlanMemory"]


def test_dump_files(tmp_path):
    ctx = PassContext(dump_dir=str(tmp_path / "dumps"))
    optimize(model(), ctx)
    files = sorted(os.listdir(tmp_path / "dumps"))
    names = pass_infra.load_pipeline(3)             # FoldConstant appears twice: one file per run
    assert names.count("FoldConstant") == 2
    assert files == [f"graph.{k:02d}_{name}.txt" for k, name in enumerate(names)]
    text = (tmp_path / "dumps" / f"graph.{len(names) - 2:02d}_FuseOps.txt").read_text()
    # FoldScaleAxis moved the batch norm's scale into the conv weight; its shift is the bias
    assert "fused_nn_conv2d_add_nn_relu" in text and text.startswith("graph(")


def test_custom_pass_with_required_pass_and_instruments():
    seen = []

    @graph_pass("TestRenameOutputs", opt_level=2, required=("SimplifyInference",), options={"prefix": "y"})
    def rename(graph, ctx):
        prefix = ctx.option("TestRenameOutputs", "prefix")
        return Graph(graph.inputs, graph.outputs, [f"{prefix}{i}" for i in range(len(graph.outputs))])

    class Recorder:
        def run_before_pass(self, name, graph):
            seen.append(("before", name))

        def run_after_pass(self, name, graph):
            seen.append(("after", name))

    try:
        with pytest.raises(ValueError):
            graph_pass("TestRenameOutputs", opt_level=0)(rename.fn)
        ctx = PassContext(config={"TestRenameOutputs.prefix": "out"}, instruments=[Recorder()])
        out = run_passes(model(), ["TestRenameOutputs"], ctx)
        assert out.output_names == ("out0",)
        assert "nn.batch_norm" not in op_names(out)                       # required pass ran first
        assert seen == [("before", "SimplifyInference"), ("after", "SimplifyInference"),
                        ("before", "TestRenameOutputs"), ("after", "TestRenameOutputs")]
        gated = PassContext(opt_level=1)
        assert run_passes(model(), ["TestRenameOutputs"], gated).output_names == ("output_0",)
    finally:
        del pass_infra._PASSES["TestRenameOutputs"]


def test_failing_pass_becomes_pass_error():
    @graph_pass("TestBroken", opt_level=0)
    def broken(graph, ctx):
        raise RuntimeError("boom")

    try:
        with pytest.raises(PassError, match="TestBroken.*boom"):
            run_passes(model(), ["TestBroken"], PassContext())
    finally:
        del pass_infra._PASSES["TestBroken"]
