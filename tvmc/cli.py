"""Command-line stage: `tvmc compile`, `tvmc tune`, `tvmc run` and `tvmc inspect` (click).

Every tvmc.errors.TVMCError becomes one line `error: <message>` on stderr and the error's
exit code; any other exception becomes `internal error: ...` and exit code 70. `--verbose`
re-raises instead, so the traceback shows. Usage errors keep click's behaviour (exit 2).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from pathlib import Path

import click
import numpy as np

import tvmc
from tvmc.errors import ArtifactError, InputError, ModelError, TVMCError

INTERNAL_ERROR_EXIT = 70
DUMP_STAGES = ("graph", "tir", "ll", "asm")


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _handle_errors(fn):
    """Map exceptions raised by a command to one line of text and an exit code (see module doc)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        verbose = kwargs.get("verbose", False)
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except TVMCError as e:
            if verbose:
                raise
            click.echo(f"error: {_one_line(e)}", err=True)
            raise SystemExit(e.exit_code) from None
        except Exception as e:
            if verbose:
                raise
            click.echo(f"internal error: {type(e).__name__}: {_one_line(e)} (rerun with --verbose "
                       f"for the traceback)", err=True)
            raise SystemExit(INTERNAL_ERROR_EXIT) from None

    return wrapper


verbose_option = click.option("--verbose", "-v", is_flag=True, help="Show tracebacks on errors.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(tvmc.__version__, prog_name="tvmc")
def cli():
    """tvmc: compile ONNX models into a deployable mod.tar, and run them."""


# ---------------------------------------------------------------------------------------------
# Option parsing


def _parse_pairs(values, what: str) -> dict:
    """['key=value', ...] -> {key: value}; raises click.BadParameter naming `what`."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"'{item}' is not key=value", param_hint=what)
        out[key.strip()] = value.strip()
    return out


def _parse_value(text: str):
    """A --pass-config value: int, float, true/false, else the string itself."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


_SHAPE_ITEM = re.compile(r"\s*([^\s\[\]]+):\[([^\]]*)\]\s*")


def parse_input_shapes(text: str | None) -> tuple:
    """'name:[1,3,224,224] other:[1,128]' -> (('name', (1, 3, 224, 224)), ('other', (1, 128))).

    Names may contain ':' (the last ':' before '[' separates name and shape). Raises
    click.BadParameter on syntax errors, non-positive dimensions or repeated names.
    """
    if not text:
        return ()
    out, pos = {}, 0
    while text[pos:].strip():
        m = _SHAPE_ITEM.match(text, pos)
        if not m:
            raise click.BadParameter(f"cannot parse '{text[pos:].strip()}'; expected e.g. "
                                     f"\"data:[1,3,224,224] mask:[1,128]\"", param_hint="--input-shapes")
        name, dims_text = m.group(1), m.group(2)
        try:
            dims = tuple(int(d) for d in dims_text.split(",") if d.strip())
        except ValueError:
            raise click.BadParameter(f"shape of '{name}' must be integers, got [{dims_text}]",
                                     param_hint="--input-shapes") from None
        if any(d < 1 for d in dims):
            raise click.BadParameter(f"shape of '{name}' must have positive dimensions, got [{dims_text}]",
                                     param_hint="--input-shapes")
        if name in out:
            raise click.BadParameter(f"input '{name}' given twice", param_hint="--input-shapes")
        out[name] = dims
        pos = m.end()
    return tuple(out.items())


def _parse_list(values, what: str, choices=None) -> tuple:
    """Repeated and/or comma-separated names -> tuple; checks `choices` when given."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if choices is not None:
        bad = [n for n in names if n not in choices]
        if bad:
            raise click.BadParameter(f"unknown {', '.join(bad)}; choose from {', '.join(choices)}", param_hint=what)
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# compile


def _fmt_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _fmt_bytes(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} KB"


def kernel_counts(metadata: dict, graph_json: dict) -> tuple:
    """(distinct kernels, kernel calls): metadata's num_kernels / num_kernel_calls, else counted
    from the graph JSON's tvm_op nodes."""
    ops = [n for n in graph_json.get("nodes", []) if n.get("op") == "tvm_op"]
    distinct = metadata.get("num_kernels")
    calls = metadata.get("num_kernel_calls")
    return (len({n["attrs"]["func_name"] for n in ops}) if distinct is None else distinct,
            len(ops) if calls is None else calls)


def activation_summary(metadata: dict) -> str | None:
    """'activations <planned> planned, <unplanned> without reuse (ratio r)' from metadata's
    planned_activation_bytes / unplanned_activation_bytes (PlanMemory: intermediate tensors with
    storage reuse vs one buffer each), or None when the metadata lacks them."""
    planned = metadata.get("planned_activation_bytes")
    unplanned = metadata.get("unplanned_activation_bytes")
    if planned is None or unplanned is None:
        return None
    ratio = f"{planned / unplanned:.3f}" if unplanned else "-"
    return f"activations {_fmt_bytes(planned)} planned, {_fmt_bytes(unplanned)} without reuse (ratio {ratio})"


def print_compile_summary(model, target, options, module, output, package_s: float, pass_times=False) -> None:
    """Print what was compiled, for which target, into what, and how long each stage took (s)."""
    params_bytes = sum(int(np.asarray(v).nbytes) for v in module.params.values())
    distinct, calls = kernel_counts(module.metadata, module.graph_json)
    activations = activation_summary(module.metadata)
    stages = {k: v for k, v in module.timings_s.items() if "/" not in k}
    stages["package"] = package_s
    rows = [
        ("model", str(model)),
        ("target", str(target)),
        ("opt level", str(options.opt_level)),
        ("kernels", f"{distinct} distinct, {calls} calls"),
        ("params", f"{params_bytes / 1e6:.2f} MB"),
        *([("memory", activations)] if activations else []),
        ("output", str(output)),
        ("time", ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()) + f" (total {sum(stages.values()):.2f} s)"),
    ]
    click.echo("compile summary")
    for key, value in rows:
        click.echo(f"  {key:<10} {value}")
    if pass_times:
        per_pass = [(k.split("/", 1)[1], v) for k, v in module.timings_s.items() if k.startswith("passes/")]
        click.echo("pass times")
        if not per_pass:
            click.echo("  (the driver recorded no per-pass times)")
        for name, seconds in per_pass:
            click.echo(f"  {name:<28} {seconds * 1e3:10.2f} ms")


@cli.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", "target_spec", required=True,
              help='Target: a shipped name (native = this host; x86, x86-avx2, x86-64), or a descriptor YAML path, optionally with LLVM-style overrides: "x86 -mcpu=skylake-avx512", "native -mattr=-avx2".')
@click.option("--target-option", multiple=True, metavar="KEY=VALUE", help="Override a target descriptor field.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Output artifact (mod.tar).")
@click.option("-O", "--opt-level", type=click.IntRange(0, 3), default=3, show_default=True, help="Optimization level.")
@click.option("--disabled-pass", multiple=True, metavar="A,B", help="Passes to skip (comma-separated, repeatable).")
@click.option("--pass-config", multiple=True, metavar="NAME=VALUE", help='Pass option "<Pass>.<option>=VALUE" (repeatable).')
@click.option("--input-shapes", metavar="SHAPES", help='Fix input shapes: "data:[1,3,224,224] mask:[1,128]".')
@click.option("--dump-ir", multiple=True, metavar="STAGES",
              help=f"Write IR text next to the output, comma-separated from: {','.join(DUMP_STAGES)}.")
@click.option("--print-pass-times", is_flag=True, help="Print the time spent in each graph pass.")
@click.option("--tuning-records", type=click.Path(dir_okay=False), help="Apply the best configs of a `tvmc tune` records file.")
@click.option("--cross-compiler", metavar="CC", help="Compiler driver that links the library instead of the target's linker "
              "command's first word (e.g. aarch64-linux-gnu-gcc, clang); the descriptor's linker flags stay.")
@click.option("--cross-compiler-options", metavar="OPTS", help='Extra linker arguments, shell-quoted: "-L/opt/sysroot/lib -Wl,-rpath,.".')
@verbose_option
@_handle_errors
def compile_cmd(model, target_spec, target_option, output, opt_level, disabled_pass, pass_config,
                input_shapes, dump_ir, print_pass_times, tuning_records, cross_compiler, cross_compiler_options, verbose):
    """Compile an ONNX MODEL into a mod.tar for a target."""
    from tvmc.driver import CompileOptions, compile_model
    from tvmc.package import save_artifact
    from tvmc.target import resolve_target, with_cross_compiler

    target_options = _parse_pairs(target_option, "--target-option")
    pass_cfg = {k: _parse_value(v) for k, v in _parse_pairs(pass_config, "--pass-config").items()}
    shapes = parse_input_shapes(input_shapes)
    dumps = _parse_list(dump_ir, "--dump-ir", DUMP_STAGES)
    disabled = _parse_list(disabled_pass, "--disabled-pass")

    if not os.path.exists(model):
        raise ModelError(f"{model}: no such file")
    target = with_cross_compiler(resolve_target(target_spec, target_options), cross_compiler, cross_compiler_options)
    out = Path(output)
    dump_dir = str(out.parent if str(out.parent) else Path("."))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"{out.parent}: cannot create output folder: {e.strerror or e}") from None
    options = CompileOptions(opt_level=opt_level, disabled_passes=frozenset(disabled),
                             pass_config=tuple(sorted(pass_cfg.items())), input_shapes=shapes,
                             dump_ir=dumps, dump_dir=dump_dir, tuning_records=tuning_records)
    module = compile_model(model, target, options)
    t0 = time.perf_counter()
    save_artifact(module, out)
    print_compile_summary(model, target, options, module, out, time.perf_counter() - t0, print_pass_times)
    if tuning_records:
        from tvmc.autotune.tune import records_summary_lines

        for line in records_summary_lines(module.metadata["tuning_records"]):
            click.echo(line)


# ---------------------------------------------------------------------------------------------
# tune


@cli.command("tune")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", "target_spec", required=True, help="Target name or descriptor, as for compile.")
@click.option("--target-option", multiple=True, metavar="KEY=VALUE", help="Override a target descriptor field.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Records file (JSON lines); appended to, and resumed from when it exists.")
@click.option("--trials", type=click.IntRange(min=1), default=200, show_default=True,
              help="Total measurements, split over tasks in proportion to their FLOPs.")
@click.option("--tuner", type=click.Choice(["xgb", "ga", "random", "grid"]), default="xgb", show_default=True)
@click.option("--early-stopping", type=click.IntRange(min=1), help="Stop a task after N trials without a new best.")
@click.option("--number", type=click.IntRange(min=1), default=4, show_default=True, help="Runs per timing round.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True, help="Timing rounds per candidate.")
@click.option("--min-repeat-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Grow --number until a round lasts this long.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds per candidate, build and run.")
@click.option("--parallel", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default=True,
              help="Build worker processes.")
@click.option("--tuning-records", "prior", type=click.Path(dir_okay=False),
              help="Prior records: their configs are not measured again; other tasks' train the xgb model.")
@click.option("--input-shapes", metavar="SHAPES", help='Fix input shapes: "data:[1,3,224,224]".')
@click.option("-O", "--opt-level", type=click.IntRange(0, 3), default=3, show_default=True,
              help="Opt level of the graph passes the tasks are taken after (use the compile one).")
@verbose_option
@_handle_errors
def tune_cmd(model, target_spec, target_option, output, trials, tuner, early_stopping, number, repeat, min_repeat_ms,
             timeout, parallel, prior, input_shapes, opt_level, verbose):
    """Tune the kernels of an ONNX MODEL on this machine; write measurement records."""
    from tvmc.autotune.measure import MeasureOptions
    from tvmc.autotune.task import extract_tasks, workload_key
    from tvmc.autotune.tune import TuneOptions, format_summary, tune_tasks
    from tvmc.driver import CompileOptions
    from tvmc.target import resolve_target

    if not os.path.exists(model):
        raise ModelError(f"{model}: no such file")
    target = resolve_target(target_spec, _parse_pairs(target_option, "--target-option"))
    options = CompileOptions(opt_level=opt_level, input_shapes=parse_input_shapes(input_shapes))
    tasks = extract_tasks(model, target, options)
    workloads = len({(t.op, workload_key(t.workload)) for t in tasks})
    click.echo(f"{len(tasks)} tasks ({workloads} kernel workload{'s' * (workloads != 1)}, one task per "
               f"implementation) from {model} (opt level {opt_level}, target {target.name})")
    topts = TuneOptions(trials=trials, tuner=tuner, early_stopping=early_stopping, prior_records=prior,
                        measure=MeasureOptions(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                               timeout_s=timeout, parallel=parallel))
    results = tune_tasks(tasks, target, output, topts)
    click.echo(format_summary(results))
    click.echo(f"records: {output}")


# ---------------------------------------------------------------------------------------------
# run


def make_inputs(executor, fill_mode: str, seed: int = 0) -> dict:
    """Inputs for every model input: zeros, ones, or random with `seed`.

    random: floats uniform in [0, 1), integers uniform in [0, 10), bools fair coin.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name in executor.input_names:
        shape, dtype = executor.input_info(name)
        dt = np.dtype(dtype)
        if fill_mode == "zeros":
            out[name] = np.zeros(shape, dt)
        elif fill_mode == "ones":
            out[name] = np.ones(shape, dt)
        elif dt.kind == "f":
            out[name] = rng.random(shape).astype(dt)
        elif dt.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(dt)
        else:
            out[name] = rng.integers(0, 10, shape).astype(dt)
    return out


def load_inputs(path: str, expected_names) -> dict:
    """Arrays of an .npz file keyed by input name; raises InputError on unreadable files or wrong names."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as e:  # np.load raises ValueError/OSError/zipfile errors on bad files
        raise InputError(f"{path}: cannot read inputs as .npz: {_one_line(e)}") from None
    unknown = sorted(set(arrays) - set(expected_names))
    missing = [n for n in expected_names if n not in arrays]
    if unknown or missing:
        parts = ([f"unknown {', '.join(unknown)}"] if unknown else []) + \
                ([f"missing {', '.join(missing)}"] if missing else [])
        raise InputError(f"{path}: {'; '.join(parts)}; the model's inputs are: {', '.join(expected_names)}")
    return arrays


def save_outputs(path: str, outputs: dict) -> None:
    """Write `outputs` ({name: array}) to the .npz `path` atomically (temporary file + rename)."""
    from tvmc.package import write_atomically

    write_atomically(path, lambda f: np.savez(f, **outputs), "outputs")


def print_outputs_summary(outputs: dict) -> None:
    """One line per output: name, shape, dtype, min / max / mean."""
    click.echo("outputs")
    for name, arr in outputs.items():
        line = f"  {name}: {_fmt_shape(arr.shape)} {arr.dtype.name}"
        if arr.size and arr.dtype.kind in "fiub":
            a = arr.astype(np.float64)
            line += f"  min {a.min():.6g}  max {a.max():.6g}  mean {a.mean():.6g}"
        click.echo(line)


def print_time_table(stats: dict) -> None:
    """The benchmark statistics in ms per run."""
    click.echo(f"execution time (ms per run; {stats['repeat']} repeats x {stats['number']} runs)")
    keys = ("mean", "median", "min", "max", "std")
    click.echo("  " + "".join(f"{k:>10}" for k in keys))
    click.echo("  " + "".join(f"{stats[k + '_ms']:>10.3f}" for k in keys))


def print_top_classes(outputs: dict, k: int) -> None:
    """Top-k classes and scores of each output with one non-singleton axis ([N], [1, N],
    [1, N, 1, 1]); other outputs are skipped with a note."""
    for name, arr in outputs.items():
        if sum(d > 1 for d in arr.shape) > 1:
            click.echo(f"top-{k}: {name} {list(arr.shape)} is not a vector of class scores; skipped")
            continue
        arr = arr.reshape(-1)
        order = np.argsort(-arr.astype(np.float64), kind="stable")[:k]
        click.echo(f"top-{len(order)} of {name}")
        for rank, cls in enumerate(order, 1):
            click.echo(f"  {rank}. class {int(cls):>5}  score {float(arr[cls]):.6g}")


@cli.command("run")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False), help="Inputs .npz keyed by input name.")
@click.option("--outputs", "outputs_path", type=click.Path(dir_okay=False), help="Write outputs .npz keyed by output name.")
@click.option("--fill-mode", type=click.Choice(["zeros", "ones", "random"]), default="random", show_default=True,
              help="Inputs to use without --inputs (random: seed 0).")
@click.option("--print-time", is_flag=True, help="Print latency statistics (ms).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Number of measurements.")
@click.option("--number", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per measurement.")
@click.option("--print-top", type=click.IntRange(min=1), metavar="K", help="Print the top-K classes of each output.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads for parallel loops (also: OMP_NUM_THREADS).")
@click.option("--device", metavar="DEVICE",
              help="Device of a GPU artifact: opencl, opencl:PLATFORM or opencl:PLATFORM:DEVICE; cuda or cuda:ORDINAL "
                   "(default: the first).")
@verbose_option
@_handle_errors
def run_cmd(artifact, inputs_path, outputs_path, fill_mode, print_time, repeat, number, print_top, threads, device,
            verbose):
    """Run a compiled ARTIFACT (mod.tar) on this machine."""
    from tvmc.runtime import benchmark, create_executor

    executor = create_executor(artifact, device)
    if getattr(executor, "device_name", None):
        click.echo(f"device: {executor.device_name}")
    if threads:
        executor.set_num_threads(threads)
    if inputs_path:
        inputs = load_inputs(inputs_path, executor.input_names)
    else:
        inputs = make_inputs(executor, fill_mode)
    for name in executor.input_names:
        executor.set_input(name, inputs[name])
    if print_time:
        stats = benchmark(executor, repeat, number)
    else:
        executor.run()
    outputs = {name: executor.get_output(i) for i, name in enumerate(executor.output_names)}
    if outputs_path:
        save_outputs(outputs_path, outputs)
    print_outputs_summary(outputs)
    if print_time:
        print_time_table(stats)
    if print_top:
        print_top_classes(outputs, print_top)


# ---------------------------------------------------------------------------------------------
# inspect


@cli.command("inspect")
@click.argument("artifact", type=click.Path(dir_okay=False))
@verbose_option
@_handle_errors
def inspect_cmd(artifact, verbose):
    """Print what a compiled ARTIFACT (mod.tar) holds."""
    from tvmc.package import graph_attr, load_artifact

    art = load_artifact(artifact)
    g = art.graph_json
    distinct, calls = kernel_counts(art.metadata, g)
    activations = activation_summary(art.metadata)
    sids = graph_attr(g, "storage_id")
    storage = g.get("storage_bytes")
    storage_total = sum(storage.values() if isinstance(storage, dict) else storage) if storage is not None else None
    click.echo("metadata")
    click.echo("  " + json.dumps(art.metadata, sort_keys=True, indent=2).replace("\n", "\n  "))
    click.echo(f"kernels        {distinct} distinct, {calls} calls")
    click.echo(f"params         {len(art.params)} tensors, {art.params_bytes} bytes")
    click.echo(f"storage        {len(set(sids))} buffers for {len(sids)} tensors"
               + (f", {storage_total} bytes" if storage_total is not None else ""))
    if activations:
        click.echo(f"memory         {activations}")
    click.echo(f"library        {os.path.basename(art.library_path)}, {os.path.getsize(art.library_path)} bytes")
    if isinstance(g.get("kernels"), dict):
        print_kernel_table(g)


def print_kernel_table(graph_json: dict) -> None:
    """The device kernels of a GPU artifact (mod.json "kernels"): calls, launch grid and block,
    threads and shared memory per block, MFLOP, global memory bytes per FLOP."""
    calls: dict = {}
    for node in graph_json["nodes"]:
        if node.get("op") == "tvm_op":
            name = node["attrs"]["func_name"]
            calls[name] = calls.get(name, 0) + 1
    click.echo("device kernels")
    click.echo(f"  {'kernel':<44} {'calls':>5} {'grid':>14} {'block':>12} {'threads':>7} {'shared B':>8} "
               f"{'MFLOP':>9} {'B/FLOP':>7}")
    for name, k in graph_json["kernels"].items():
        per_flop = f"{k['global_bytes'] / k['flops']:.3f}" if k.get("flops") else "-"
        click.echo(f"  {name[:44]:<44} {calls.get(name, 0):>5} {'x'.join(map(str, k['grid'])):>14} "
                   f"{'x'.join(map(str, k['block'])):>12} {k['block'][0] * k['block'][1] * k['block'][2]:>7} "
                   f"{k['shared_bytes']:>8} {k.get('flops', 0) / 1e6:>9.2f} {per_flop:>7}")


def main(argv=None) -> int:
    """Console entry point (`tvmc`). Returns the exit code."""
    try:
        cli.main(args=argv, prog_name="tvmc")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
