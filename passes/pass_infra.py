"""Pass infrastructure: pass registry, PassContext, and the pipeline runner (TVM's transform.Sequential)."""

from __future__ import annotations

import importlib.resources
import os
import time
import types
from dataclasses import dataclass, field
from typing import Callable

import yaml

from tvmc.errors import PassError, TVMCError
from tvmc.graph.ir import Graph, print_graph
from tvmc.paths import write_new_text

# Passes that codegen cannot do without: they run even when gated off by the opt level or
# disabled, in a reduced mode (FuseOps: one op per function; PlanMemory: no storage reuse).
CODEGEN_PASSES = ("FuseOps", "PlanMemory")


@dataclass(frozen=True)
class PassInfo:
    """A registered pass: `fn(graph, ctx) -> Graph`, its name, opt level, required passes and
    declared options ({option name: default}); options are set as `config["<name>.<option>"]`."""

    name: str
    opt_level: int
    required: tuple
    options: types.MappingProxyType
    fn: Callable

    def __call__(self, graph: Graph, ctx: "PassContext") -> Graph:
        return self.fn(graph, ctx)


_PASSES: dict = {}


def graph_pass(name: str, opt_level: int, required=(), options=None):
    """Decorator declaring a pass (TVM's `relay.transform.function_pass`).

        @graph_pass("FoldConstant", opt_level=1)
        def fold_constant(graph: Graph, ctx: PassContext) -> Graph: ...

    The function must return a new Graph and never mutate its input. `options` maps option
    names to defaults; the value's type is the option's type. Returns the PassInfo.
    Raises ValueError when the name is registered twice.
    """

    def wrap(fn):
        if name in _PASSES:
            raise ValueError(f"pass {name} registered twice")
        info = PassInfo(name, int(opt_level), tuple(required), types.MappingProxyType(dict(options or {})), fn)
        _PASSES[name] = info
        return info

    return wrap


register_pass = graph_pass


def list_passes() -> list:
    """Names of all registered passes, sorted."""
    return sorted(_PASSES)


def get_pass(name: str) -> PassInfo:
    """Look up a pass by name; raises PassError listing the known passes."""
    try:
        return _PASSES[name]
    except KeyError:
        raise PassError(f"unknown pass '{name}'; known passes: {', '.join(sorted(_PASSES))}") from None


def _check_option_type(key: str, value, default):
    if default is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise PassError(f"pass option {key}={value!r}: expected {type(default).__name__}")


@dataclass(frozen=True, eq=False)
class PassContext:
    """Options of one optimization run (TVM's `transform.PassContext`).

    opt_level:        0..3; a pass whose opt_level is higher is skipped.
    disabled_passes:  pass names to skip (FuseOps/PlanMemory then run in reduced mode).
    config:           per-pass options, keys "<Pass>.<option>" (e.g. "FuseOps.max_depth": 256).
    dump_dir:         if set, the graph text after each pass goes to
                      `{dump_dir}/graph.{NN}_{PassName}.txt`.
    instruments:      objects with optional `run_before_pass(name, graph)` /
                      `run_after_pass(name, graph)` methods (TVM's PassInstrument).
    target:           the tvmc.target.Target being compiled for, or None (target-independent
                      run): target-specific passes such as AlterOpLayout skip themselves without one.
    config_lookup:    the tuning records the compile applies (tvmc.autotune.record.ApplyHistoryBest
                      or LayeredLookup), or None: AlterOpLayout chooses between Winograd and the
                      direct convolution by their measured costs (cost_s) where they hold both.
    pass_times:       filled while running: [(pass name, wall time in ms)], in run order.

    Raises PassError on an unknown pass name, unknown option key or wrongly typed option value.
    """

    opt_level: int = 3
    disabled_passes: frozenset = frozenset()
    config: dict = field(default_factory=dict)
    dump_dir: str | None = None
    instruments: tuple = ()
    target: object = None
    config_lookup: object = None
    pass_times: list = field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.opt_level, int) or not 0 <= self.opt_level <= 3:
            raise PassError(f"opt_level must be an integer in 0..3, got {self.opt_level!r}")
        object.__setattr__(self, "disabled_passes", frozenset(self.disabled_passes))
        object.__setattr__(self, "config", types.MappingProxyType(dict(self.config)))
        object.__setattr__(self, "instruments", tuple(self.instruments))
        for name in sorted(self.disabled_passes):
            get_pass(name)
        for key, value in self.config.items():
            pass_name, _, option = str(key).partition(".")
            info = get_pass(pass_name)
            if option not in info.options:
                known = sorted(f"{n}.{o}" for n in list_passes() for o in _PASSES[n].options)
                raise PassError(f"unknown pass option '{key}'; known options: {', '.join(known)}")
            _check_option_type(key, value, info.options[option])

    def is_enabled(self, name: str) -> bool:
        """True when pass `name` runs in full: not disabled and its opt_level <= ctx.opt_level."""
        info = get_pass(name)
        return name not in self.disabled_passes and info.opt_level <= self.opt_level

    def option(self, pass_name: str, option: str):
        """Value of a pass option: the configured one, else the pass's declared default."""
        info = get_pass(pass_name)
        if option not in info.options:
            raise PassError(f"pass {pass_name} declares no option '{option}'; known: {', '.join(sorted(info.options))}")
        return self.config.get(f"{pass_name}.{option}", info.options[option])


def load_pipeline(opt_level: int) -> list:
    """Ordered pass names for `opt_level` from configs/pipelines.yaml, ending with FuseOps, PlanMemory."""
    text = importlib.resources.files("tvmc.configs").joinpath("pipelines.yaml").read_text()
    data = yaml.safe_load(text)
    try:
        names = list(data["opt_levels"][opt_level])
    except (KeyError, TypeError):
        raise PassError(f"configs/pipelines.yaml has no pipeline for opt level {opt_level}") from None
    return names + list(data.get("codegen", CODEGEN_PASSES))


def _run_one(info: PassInfo, graph: Graph, ctx: PassContext, step: int) -> Graph:
    for ins in ctx.instruments:
        if hasattr(ins, "run_before_pass"):
            ins.run_before_pass(info.name, graph)
    t0 = time.perf_counter()
    try:
        out = info(graph, ctx)
    except TVMCError:
        raise
    except Exception as e:
        raise PassError(f"pass {info.name} failed: {type(e).__name__}: {e}") from e
    ctx.pass_times.append((info.name, (time.perf_counter() - t0) * 1e3))
    if not isinstance(out, Graph):
        raise PassError(f"pass {info.name} returned {type(out).__name__}, not a Graph")
    for ins in ctx.instruments:
        if hasattr(ins, "run_after_pass"):
            ins.run_after_pass(info.name, out)
    if ctx.dump_dir is not None:
        os.makedirs(ctx.dump_dir, exist_ok=True)
        write_new_text(os.path.join(ctx.dump_dir, f"graph.{step:02d}_{info.name}.txt"), print_graph(out))
    return out


def run_passes(graph: Graph, names, ctx: PassContext) -> Graph:
    """Run the named passes in order under `ctx` (TVM's Sequential).

    A pass is skipped when disabled or above ctx.opt_level, except FuseOps and PlanMemory,
    which always run (reduced when gated off). A pass's required passes that have not run yet
    run first. Raises PassError for an unknown name (before anything runs) or a failing pass.
    """
    infos = [get_pass(n) for n in names]
    done: set = set()
    step = 0

    def run(info: PassInfo, g: Graph) -> Graph:
        nonlocal step
        if not ctx.is_enabled(info.name) and info.name not in CODEGEN_PASSES:
            return g
        for req in info.required:
            if req not in done:
                g = run(get_pass(req), g)
        g = _run_one(info, g, ctx, step)
        step += 1
        done.add(info.name)
        return g

    for info in infos:
        graph = run(info, graph)
    return graph


def optimize(graph: Graph, ctx: PassContext | None = None, pipeline=None) -> Graph:
    """Optimize `graph` for codegen: the pipeline of ctx.opt_level (configs/pipelines.yaml), or
    the explicit `pipeline` names, always ending with FuseOps then PlanMemory.

    The result is a graph of `Call(Function, args)` nodes with `meta["storage_id"]` etc.
    (see passes/plan_memory.py). Raises PassError.
    """
    ctx = ctx or PassContext()
    names = load_pipeline(ctx.opt_level) if pipeline is None else list(pipeline)
    names = [n for n in names if n not in CODEGEN_PASSES] + list(CODEGEN_PASSES)
    return run_passes(graph, names, ctx)
