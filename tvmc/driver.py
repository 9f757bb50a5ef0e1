"""The compile pipeline as one function of named stages: import -> passes -> lower -> codegen
(-> package, tvmc.package.save_artifact).

    graph   = frontend.onnx.from_onnx(model, input_shapes)
    graph   = passes.optimize(graph, PassContext(...))        # ends with FuseOps, PlanMemory
    json, params = graph.executor_json.build_executor_json(graph)
    kernels = ops.fused.lower_functions(fused functions, target, tuning records)
    library = backends.backend_for(target).build(kernels, target, json, params)
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from tvmc.checks import bool_arg, choice_arg, int_arg, names_arg, path_arg
from tvmc.constants import KERNEL_ABI_VERSION, __version__
from tvmc.target import Target
from tvmc.te.expr import FLOAT16_DTYPES

# the dtypes --mixed-precision computes in: the 16-bit floats (ToMixedPrecision's DTYPES)
MIXED_PRECISION_DTYPES = FLOAT16_DTYPES
DUMP_STAGES = ("graph", "tir", "ll", "asm")


@dataclass(frozen=True)
class CompileOptions:
    """Everything `tvmc compile` can set, the one place of each compile option: the Python API
    (tvmc.compile, tvmc.list_tasks, tvmc.tune) takes it, the CLI builds it from its flag table
    (tvmc.cli.GRAPH_FLAGS, COMPILE_FLAGS), metadata.json records it (metadata_options). Frozen
    and hashable: the friendly forms below are stored in their canonical (tuple) forms.

    opt_level:        0..3 (the pass pipelines per level are in configs/pipelines.yaml)
    disabled_passes:  pass names to skip ("A,B", a list or a set; stored as a frozenset)
    pass_config:      {"Pass.option": value} (stored as sorted (name, value) pairs)
    input_shapes:     {input name: [d0, d1, ...]} fixing symbolic dimensions, positive ints, or
                      ranges (lo, hi) / "lo..hi" with 1 <= lo <= hi for a symbolic dimension of any
                      size in it (stored as ((name, (d0, (lo, hi), ...)), ...))
    dim_ranges:       {dim_param: (lo, hi)} (or "lo..hi"): the model's symbolic dimension of that
                      name takes any size in lo..hi, 1 <= lo <= hi (stored as ((name, (lo, hi)), ...))
    value_ranges:     {input name: (lo, hi)}: every value of that graph input lies in [lo, hi] at
                      run time, finite, lo <= hi (bounds Range/Expand/ConstantOfShape computed from
                      it, docs/dynamic_shapes.md; stored as ((name, (lo, hi)), ...) of floats)
    mixed_precision:  '' or None (off), or the dtype the matrix operators compute in ('float16' or
                      'bfloat16'):
                      the ToMixedPrecision pass runs after the last FoldConstant of the pipeline,
                      followed by another FoldConstant (passes/to_mixed_precision.py)
    mixed_precision_ops: operator names that pass converts, tvmc's ("A,B" or a list; default: its
                      own list); needs mixed_precision
    shipped_records:  apply the records tvmc ships for the target's descriptor (configs/tuning/
                      <name>.json, tvmc.autotune.record.shipped_records) to the tasks that
                      `tuning_records` does not cover; False: those tasks take the fallback rules
    tuning_records:   path of a `tvmc tune` records file: the best valid config per task for
                      this target is applied, other tasks use their fallback configs
    dump_ir:          stage names to dump (DUMP_STAGES: 'graph', 'tir', 'll', 'asm'; "A,B" or a list)
    dump_dir:         folder where dumps go (`tvmc compile` passes a fresh one that becomes
                      <output>.dumps, see tvmc.paths.dump_folder)

    Raises TypeError (a value of the wrong type) or ValueError (a wrong value: opt level out of
    range, a non-positive dimension, an empty or non-finite range, an unknown dump stage, dtype
    or operator), naming the field.
    """

    opt_level: int = 3
    disabled_passes: frozenset = frozenset()
    pass_config: tuple = ()
    input_shapes: tuple = ()
    value_ranges: tuple = ()
    dim_ranges: tuple = ()
    dump_ir: tuple = ()
    dump_dir: str | None = None
    tuning_records: str | None = None
    mixed_precision: str = ""
    mixed_precision_ops: tuple = ()
    shipped_records: bool = True

    def __post_init__(self):
        canonical = {
            "opt_level": int_arg("opt_level", self.opt_level, 0, 3),
            "disabled_passes": frozenset(names_arg("disabled_passes", self.disabled_passes)),
            "pass_config": _pass_config(self.pass_config),
            "input_shapes": _input_shapes(self.input_shapes),
            "value_ranges": _value_ranges(self.value_ranges),
            "dim_ranges": _dim_ranges(self.dim_ranges),
            "dump_ir": tuple(choice_arg("dump_ir stage", s, DUMP_STAGES) for s in names_arg("dump_ir", self.dump_ir)),
            "dump_dir": path_arg("dump_dir", self.dump_dir, optional=True),
            "tuning_records": path_arg("tuning_records", self.tuning_records, optional=True),
            "mixed_precision": self.mixed_precision or "",
            "mixed_precision_ops": names_arg("mixed_precision_ops", self.mixed_precision_ops or ()),
            "shipped_records": bool_arg("shipped_records", self.shipped_records),
        }
        if canonical["mixed_precision"]:
            choice_arg("mixed_precision", canonical["mixed_precision"], MIXED_PRECISION_DTYPES)
        elif canonical["mixed_precision_ops"]:
            raise ValueError("mixed_precision_ops needs mixed_precision")
        if canonical["mixed_precision_ops"]:
            from tvmc.ops.registry import all_ops

            unknown = [n for n in canonical["mixed_precision_ops"] if n not in all_ops()]
            if unknown:
                raise ValueError(f"mixed_precision_ops: unknown operator {unknown[0]!r} (tvmc's names, e.g. "
                                 f"nn.conv2d, nn.dense, nn.matmul)")
        for name, value in canonical.items():
            object.__setattr__(self, name, value)


# Fields that say where a compile reads and writes, not what it makes: metadata.json leaves
# them out, so that an artifact is the same from any folder and with or without IR dumps (the
# records file is named there by its SHA-256, in "tuning_records").
NOT_IN_METADATA = ("tuning_records", "dump_ir", "dump_dir")


def metadata_options(options: CompileOptions) -> dict:
    """metadata.json "options": dataclasses.asdict(options) less NOT_IN_METADATA, in JSON forms:
    disabled_passes a sorted list, pass_config, input_shapes, value_ranges and dim_ranges mappings
    ({name: value}, {input: [dims]} with a range as "lo..hi", {input: [lo, hi]}, {dim_param:
    "lo..hi"}), tuples lists; dim_ranges only when given (a static compile's metadata stays as it was)."""
    data = {k: v for k, v in dataclasses.asdict(options).items() if k not in NOT_IN_METADATA}
    data["disabled_passes"] = sorted(options.disabled_passes)
    for key in ("pass_config", "input_shapes", "value_ranges"):
        data[key] = {name: list(v) if isinstance(v, tuple) else v for name, v in getattr(options, key)}
    data["input_shapes"] = {name: [f"{d[0]}..{d[1]}" if isinstance(d, tuple) else d for d in dims]
                            for name, dims in options.input_shapes}
    data["dim_ranges"] = {name: f"{lo}..{hi}" for name, (lo, hi) in options.dim_ranges}
    if not options.dim_ranges:
        del data["dim_ranges"]
    data["mixed_precision_ops"] = list(options.mixed_precision_ops)
    return data


def _pairs(name: str, value, what: str) -> list:
    """A mapping or (key, value) pairs -> list of pairs; TypeError naming `name` otherwise."""
    if isinstance(value, dict):
        return list(value.items())
    try:
        pairs = [tuple(p) for p in value]
    except TypeError:
        pairs = None
    if pairs is None or any(len(p) != 2 for p in pairs) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a dict {what}, got {type(value).__name__}")
    return pairs


def _pass_config(value) -> tuple:
    return tuple(sorted({str(k): v for k, v in _pairs("pass_config", value, "{'Pass.option': value}")}.items()))


def _input_shapes(value) -> tuple:
    out = []
    for name, dims in _pairs("input_shapes", value, "{input name: shape}"):
        if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
            raise TypeError(f"input_shapes['{name}'] must be a sequence of ints, got {dims!r}")
        dims = tuple(dims)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in dims
               if _range_arg(d) is None):
            raise ValueError(f"input_shapes['{name}'] must hold positive ints or ranges (lo, hi) / 'lo..hi' with "
                             f"1 <= lo <= hi, got {list(dims)}")
        out.append((str(name), tuple(_range_arg(d) or int(d) for d in dims)))
    return tuple(out)


def _range_arg(d):
    """(lo, hi) for a range dimension given as (lo, hi) or 'lo..hi' with 1 <= lo <= hi, else None."""
    if isinstance(d, str):
        lo, sep, hi = d.partition("..")
        try:
            d = (int(lo), int(hi)) if sep else None
        except ValueError:
            return None
    if isinstance(d, (tuple, list)) and len(d) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in d) and 1 <= d[0] <= d[1]:
        return int(d[0]), int(d[1])
    return None


def _dim_ranges(value) -> tuple:
    out = []
    for name, pair in _pairs("dim_ranges", value, "{dim_param: (lo, hi)}"):
        rng = _range_arg(pair)
        if rng is None:
            raise ValueError(f"dim_ranges['{name}'] must be a range (lo, hi) or 'lo..hi' of ints with "
                             f"1 <= lo <= hi, got {pair!r}")
        out.append((str(name), rng))
    return tuple(out)


def _value_ranges(value) -> tuple:
    out = []
    for name, pair in _pairs("value_ranges", value, "{input name: (lo, hi)}"):
        try:
            lo, hi = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise TypeError(f"value_ranges['{name}'] must be a pair of numbers (lo, hi), got {pair!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"value_ranges['{name}']: ({lo:g}, {hi:g}) must be finite numbers")
        if not lo <= hi:
            raise ValueError(f"value_ranges['{name}']: ({lo:g}, {hi:g}) is empty (lo must not exceed hi)")
        out.append((str(name), (lo, hi)))
    return tuple(out)


@dataclass
class CompiledModule:
    """Result of compile_model, everything package.save_artifact writes.

    library:    bytes of the shared library (mod.so) holding every kernel
    graph_json: dict in TVM's graph-executor JSON schema (mod.json)
    params:     {name: np.ndarray} constants after folding (mod.params, safetensors)
    metadata:   dict (metadata.json): version, target, inputs/outputs, options, ABI version,
                kernel_flops ({kernel name: FLOPs of one call}, for kernels with a reduction; at the
                upper bounds of symbolic extents), kernel_flops_programs ({kernel name: its FLOPs
                as a postfix program over "size_vars"}, kernels with symbolic extents),
                model_weight_bytes (the imported model's constants, before the passes: the
                params' growth, e.g. by Winograd weights, is measured against it)
    timings_s:  {stage name: seconds} for the compile summary
    device_binaries: {member name: bytes} of device code assembled beside the library (mod.cubin
                from ptxas for CUDA targets, where it is found); metadata "device_binaries" lists them
    """

    library: bytes
    graph_json: dict
    params: dict
    metadata: dict
    timings_s: dict = field(default_factory=dict)
    device_binaries: dict = field(default_factory=dict)


def optimize_loop_bodies(graph, ctx, bodies: dict) -> dict:
    """{LoopBody: its body Graph through the passes of PassContext `ctx` (FuseOps, PlanMemory
    included)} for every run-time loop (`control.loop`, tvmc.graph.ir.LoopBody) of the optimized
    `graph`, nested ones too, added to `bodies`; body kernels are named `loop<k>_<name>` so that
    they never clash with the main graph's in the one library, and their graph dumps go to the
    subfolder `loop<k>` of ctx.dump_dir."""
    import dataclasses
    import os

    from tvmc.graph.ir import Function
    from tvmc.passes import optimize

    for c in graph.calls():
        body = c.op == "control.loop" and c.attrs["body"]
        if body and body not in bodies:
            prefix = f"loop{len(bodies)}_"
            dumps = None if ctx.dump_dir is None else os.path.join(ctx.dump_dir, prefix[:-1])
            compiled = optimize(body.graph, dataclasses.replace(ctx, dump_dir=dumps))
            bodies[body] = compiled
            for e in compiled.calls():
                if isinstance(e.op, Function) and not e.op.name.startswith(prefix):
                    e.op.name = prefix + e.op.name
            optimize_loop_bodies(compiled, ctx, bodies)
    return bodies


def _activation_bytes(graph, bodies: dict, key: str):
    """PlanMemory's `key` ("planned_bytes", "unplanned_bytes") of the graph plus its loop bodies'
    (each body's storage is a region of its own); None when the plan has no such figure."""
    values = [g.meta.get(key) for g in (graph, *bodies.values())]
    return None if None in values else sum(values)


def pass_pipeline(options: CompileOptions) -> tuple:
    """(pass names, pass config) of `options`: the pipeline of its opt level with ToMixedPrecision
    and a FoldConstant after the pipeline's last FoldConstant (first, when it has none) when
    mixed precision is asked for, and its options added to the pass config."""
    from tvmc.passes.pass_infra import load_pipeline

    names = load_pipeline(options.opt_level)
    config = dict(options.pass_config)
    if options.mixed_precision:
        at = max((k + 1 for k, n in enumerate(names) if n == "FoldConstant"), default=0)
        names[at:at] = ["ToMixedPrecision", "FoldConstant"]
        config["ToMixedPrecision.dtype"] = options.mixed_precision
        if options.mixed_precision_ops:
            config["ToMixedPrecision.ops"] = ",".join(options.mixed_precision_ops)
    return names, config


def symbolic_compiles_for(target: Target) -> bool:
    """Whether models with symbolic shapes compile for `target`: its backend's symbolic_shapes,
    true for the LLVM CPU backends (x86-64 and aarch64 shared objects, wasm32 modules), whose C
    API binds the size variables, and for the GPU backends (OpenCL, CUDA), whose executors bind
    them in tvmc.runtime.device and pass each kernel its size arguments."""
    from tvmc.backends import backend_for

    return backend_for(target).symbolic_shapes


def _meta_shape(shape) -> dict:
    """A tensor's shape for metadata.json: {"shape": ints}, and for a symbolic shape "shape" at
    the upper bounds (what its storage holds) with "symbolic_shape": ints and each symbolic
    dimension as its expression's text ("seq", "(H + 1) // 2"); the variables' ranges are in
    metadata "size_vars"."""
    from tvmc.graph import symbolic

    if not any(symbolic.is_symbolic(d) for d in shape):
        return {"shape": list(shape)}
    return {"shape": [symbolic.upper_bound(d) if symbolic.is_symbolic(d) else d for d in shape],
            "symbolic_shape": [str(d) if symbolic.is_symbolic(d) else d for d in shape]}


def stop_before_symbolic_lowering(graph, ctx, pipeline, dim_ranges: bool = False, target=None) -> None:
    """Raise ScheduleError when `graph` (imported, not yet optimized) has symbolic dimensions: the
    graph passes of `pipeline` run and FuseOps groups the kernels, then the error names the first
    kernel whose extents are symbolic, its op and type, and the size variables it depends on, and
    shows the --input-shapes that compile one size (at the upper bounds; to be given without
    --dim-range when `dim_ranges` says the compile had some). Symbolic shapes reach the graph IR but not yet
    PlanMemory, lowering and code generation (issue 29: kernels with symbolic extents, storage
    planned for the bounds); until they do, no artifact is built for a range and none is built
    for one silently chosen size. A pass that fails on the symbolic graph is reported the same way.
    Called for targets where symbolic_compiles_for is False (`target` named in the message)."""
    from tvmc.errors import PassError, ScheduleError
    from tvmc.graph import symbolic
    from tvmc.graph.ir import Call, Function, post_order
    from tvmc.passes.pass_infra import CODEGEN_PASSES, run_passes

    size_vars = graph.size_vars()
    if not size_vars:
        return
    sizes = {v.name: v.hi for v in size_vars}
    one_size = " ".join(f"{v.name}:[{','.join(str(symbolic.substitute(d, sizes)) for d in v.shape)}]"
                        for v in graph.inputs)
    where = "code generation yet" if target is None else f"code generation for target '{target.name}' yet"
    why = (f"symbolic compilation reaches the graph IR but not {where}; compile one size per "
           f"artifact instead, e.g. --input-shapes \"{one_size}\"{' (without --dim-range)' if dim_ranges else ''}")
    note = ""
    try:
        fused = run_passes(graph, [n for n in pipeline if n not in CODEGEN_PASSES] + ["FuseOps"], ctx)
    except PassError as e:  # a pass that does not take symbolic shapes yet: the kernels as imported
        note = f" ({str(e).split(':', 1)[0]} on them)"
        fused = run_passes(graph, ["FuseOps"], ctx)
    for call in fused.calls():
        body = call.op.body if isinstance(call.op, Function) else call
        inner = [e for e in post_order([body]) if isinstance(e, Call) and e.is_symbolic]
        if inner or call.is_symbolic:
            first = (inner or [call])[0]
            kernel = f"kernel {call.op.name}" if isinstance(call.op, Function) else f"operator {call.op_name}"
            used = symbolic.free_vars([first.type.shape, list(first.attrs.values())])
            raise ScheduleError(f"{kernel} ({first.op_name} of node '{first.name or '?'}', {first.type}) has extents "
                                f"that depend on {', '.join(repr(v) for v in used)}{note}: {why}")
    raise ScheduleError(f"the inputs have symbolic dimensions ({symbolic.describe_vars(size_vars)}){note}: {why}")


def compile_model(model, target: Target, options: CompileOptions = CompileOptions(), progress=None) -> CompiledModule:
    """Compile an ONNX model (path or ModelProto) for `target`.

    `progress(stage, done, total)`, when given, is called as lowering and codegen advance (see
    tvmc.ops.fused.lower_functions and Backend.build); the CLI draws it as a progress line on a
    terminal.

    Raises the typed errors of tvmc.errors (ModelError/UnsupportedOpError from the frontend,
    PassError, ScheduleError, CodegenError).
    """
    from tvmc.backends import backend_for
    from tvmc.frontend.onnx import from_onnx
    from tvmc.graph.executor_json import build_executor_json
    from tvmc.graph.ir import Call, Constant, Function
    from tvmc.mod_json import runs_each_run
    from tvmc.ops.fused import function_flops, function_flops_program, lower_functions
    from tvmc.passes import PassContext, optimize

    timings = {}
    t0 = time.perf_counter()
    graph = from_onnx(model, dict(options.input_shapes), dict(options.value_ranges), dict(options.dim_ranges))
    timings["import"] = time.perf_counter() - t0
    model_weight_bytes = sum(int(e.value.nbytes) for e in graph.topo() if isinstance(e, Constant))

    from tvmc.autotune.record import ApplyHistoryBest, LayeredLookup, shipped_records, shipped_records_path

    user = ApplyHistoryBest.from_file(options.tuning_records, target) if options.tuning_records else None
    shipped = shipped_records(target) if options.shipped_records else None
    config_lookup = LayeredLookup(user, shipped) if user is not None or shipped is not None else None

    t0 = time.perf_counter()
    pipeline, pass_config = pass_pipeline(options)
    ctx = PassContext(opt_level=options.opt_level, disabled_passes=frozenset(options.disabled_passes),
                      config=pass_config, dump_dir=options.dump_dir if "graph" in options.dump_ir else None,
                      target=target, config_lookup=config_lookup)
    symbolic_graph = bool(graph.size_vars())
    if not symbolic_compiles_for(target):
        stop_before_symbolic_lowering(graph, ctx, pipeline, bool(options.dim_ranges), target)
    graph = optimize(graph, ctx, pipeline)
    timings["passes"] = time.perf_counter() - t0
    for name, ms in ctx.pass_times:
        key = f"passes/{name}"
        timings[key] = timings.get(key, 0.0) + ms / 1e3

    bodies = optimize_loop_bodies(graph, ctx, {})
    graph_json, params = build_executor_json(graph, bodies)
    functions = {}
    for g in (graph, *bodies.values()):
        views = g.meta.get("view_calls", ())  # concatenations and reshapes that run no kernel (PlanMemory)
        for e in g.topo():
            if isinstance(e, Call) and isinstance(e.op, Function) and e not in views:
                functions.setdefault(e.op.name, e.op)

    t0 = time.perf_counter()
    kernels = lower_functions(list(functions.values()), target, config_lookup, progress)
    timings["lower"] = time.perf_counter() - t0
    if symbolic_graph:  # each kernel's int64 size arguments, as indices into the graph's size variables
        index = {v["name"]: k for k, v in enumerate(graph_json["size_vars"])}
        graph_json["size_args"] = {k.prim.name: [index[v.name] for v in k.prim.size_vars]
                                   for k in kernels if k.prim.size_vars}
    t0 = time.perf_counter()
    device_binaries: dict = {}
    backend = backend_for(target)
    library = backend.build(kernels, target, graph_json=graph_json, params=params, dump_ir=options.dump_ir,
                            dump_dir=options.dump_dir, progress=progress, device_binaries=device_binaries)
    timings["codegen"] = time.perf_counter() - t0

    order = graph.size_vars()
    programs = {n: p for n, p in ((n, function_flops_program(fn, order)) for n, fn in functions.items())
                if p is not None} if order else {}
    metadata = {
        "tvmc_version": __version__,
        "kernel_abi_version": KERNEL_ABI_VERSION,
        "target": target.to_dict(),
        "target_hash": target.hash,
        "tuning_key": target.tuning_key,
        "inputs": [{"name": v.name, **_meta_shape(v.shape), "dtype": v.dtype} for v in graph.inputs],
        "outputs": [{"name": n, **_meta_shape(o.shape), "dtype": o.dtype,
                     **({"dynamic_axes": list(o.type.dynamic_axes)} if o.type.is_dynamic else {})}
                    for n, o in zip(graph.output_names, graph.outputs[:graph.num_model_outputs])],
        "options": metadata_options(options),
        "num_kernels": len(functions),
        "num_kernel_calls": sum(1 for n in graph_json["nodes"] if runs_each_run(n)),
        "kernel_flops": {name: f for name, f in ((n, function_flops(fn)) for n, fn in functions.items())
                         if f is not None},
        **({"kernel_flops_programs": programs} if programs else {}),
        "planned_activation_bytes": _activation_bytes(graph, bodies, "planned_bytes"),
        "unplanned_activation_bytes": _activation_bytes(graph, bodies, "unplanned_bytes"),
        "model_weight_bytes": model_weight_bytes,
        "tuning_records": user.summary() if user is not None else None,
        **({"shipped_records": {"file": f"configs/tuning/{shipped_records_path(target).name}",
                                **shipped.summary()}} if shipped is not None else {}),
        "device_requirements": backend.device_requirements(library),
    }
    if device_binaries:
        metadata["device_binaries"] = sorted(device_binaries)
    if symbolic_graph:
        metadata["size_vars"] = [{"name": v.name, "range": f"{v.lo}..{v.hi}"} for v in graph.size_vars()]
    params = {k: np.require(v, requirements="C") for k, v in params.items()}
    return CompiledModule(library, graph_json, params, metadata, timings, device_binaries)


def extract_tasks(model, target, options=None, dim_sizes=None) -> list:
    """Tasks of an ONNX model (path or ModelProto) compiled with CompileOptions `options`:
    the frontend and the graph passes of options.opt_level run, then every kernel call of the
    optimized graph and of its run-time loop bodies is counted (a fused function called twice
    counts twice; a body's kernels once, whatever the trip count).

    A compile with size variables (--dim-range, ranges in --input-shapes) has kernels of
    symbolic extents, which tuning cannot time: `dim_sizes` ({variable: [sizes]}, `tvmc tune
    --dim-sizes seq=32,128,512`) names representative sizes, and the tasks are those of the static
    graphs of every combination of them (size_combinations), each once, in first-seen order; the
    records then apply per size bucket of the range (tvmc.ops.fused: a kernel tuned at sizes
    s1 < s2 < ... runs s1's config up to s1, s2's up to s2, ..., the largest's above it).
    Raises TuningError for a symbolic compile without `dim_sizes`, naming its variables."""
    from tvmc.autotune.task import workload_key
    from tvmc.frontend.onnx import from_onnx

    options = options or CompileOptions()
    graph = from_onnx(model, dict(options.input_shapes), dict(options.value_ranges), dict(options.dim_ranges))
    found: dict = {}
    for sizes in size_combinations(graph, dim_sizes or {}):
        sized = graph if not sizes else from_onnx(model, dict(options.input_shapes), dict(options.value_ranges),
                                                  dict(options.dim_ranges), dim_sizes=sizes)
        for task in _tasks_of_graph(sized, target, options):
            found.setdefault((task.impl, workload_key(task.workload)), task)
    return list(found.values())


def size_combinations(graph, dim_sizes: dict) -> list:
    """[{variable: size}] for extract_tasks: every combination of the `dim_sizes` lists
    ({variable: [sizes]}) for the imported `graph`; a size variable of the graph not in
    `dim_sizes` is fixed at its upper bound (the size untuned symbolic kernels choose their tiles
    for). [{}] for a static graph without `dim_sizes`. Raises TuningError for a symbolic graph
    without `dim_sizes` (a name that is no size variable, or a size outside its range, is the
    ModelError of frontend.onnx.from_onnx's dim_sizes)."""
    import itertools

    from tvmc.errors import TuningError
    from tvmc.graph import symbolic

    variables = graph.size_vars()
    if not variables and not dim_sizes:
        return [{}]
    if not dim_sizes:
        example = " ".join(f"{v.name}={v.lo},{(v.lo + v.hi) // 2},{v.hi}" for v in variables)
        raise TuningError(f"the compile has symbolic dimensions ({symbolic.describe_vars(variables)}) and tuning times "
                          f"kernels of one size: give representative sizes, e.g. --dim-sizes {example}; compile "
                          "the range with the records, and each kernel picks the config tuned for its size bucket")
    names = list(dim_sizes)
    rest = {v.name: v.hi for v in variables if v.name not in dim_sizes}
    return [{**rest, **dict(zip(names, combo))} for combo in itertools.product(*(dim_sizes[n] for n in names))]


def _tasks_of_graph(graph, target, options) -> list:
    """extract_tasks for one imported (static) graph: the tasks of the graph passes' results
    under each pass config of _conv_form_configs (the passes leave `graph` itself as it was)."""
    from tvmc.autotune.task import tasks_of_functions, workload_key
    from tvmc.graph.ir import Call, Function
    from tvmc.passes import PassContext, optimize

    pipeline, pass_config = pass_pipeline(options)
    found: dict = {}  # (implementation, workload key) -> Task; a task in several form graphs: most calls
    for forms in _conv_form_configs(target, options, pass_config, pipeline):
        ctx = PassContext(opt_level=options.opt_level, disabled_passes=frozenset(options.disabled_passes),
                          config={**pass_config, **forms}, target=target)
        optimized = optimize(graph, ctx, pipeline)
        calls = [e.op for g in (optimized, *optimize_loop_bodies(optimized, ctx, {}).values()) for e in g.topo()
                 if isinstance(e, Call) and isinstance(e.op, Function)]
        for task in tasks_of_functions(calls, target):
            key = (task.impl, workload_key(task.workload))
            if key not in found or task.calls > found[key].calls:
                found[key] = task
    return list(found.values())


def _conv_form_configs(target, options, pass_config: dict, pipeline) -> list:
    """The pass configs whose graphs tuning takes tasks from: where AlterOpLayout runs on a CPU
    target and its pass config leaves the Winograd choice to it, one graph per form of the 3x3
    convolutions (direct, F(2x2, 3x3), F(4x4, 3x3), no size budget), so that the records hold
    each form's cost and the compile that applies them chooses by measurement (AlterOpLayout's
    config_lookup); else the pass config as given."""
    from tvmc.ops.cpu.conv2d_winograd import WINOGRAD_IMPL_TILES

    if (target.family != "cpu" or "AlterOpLayout" not in pipeline or "AlterOpLayout" in options.disabled_passes
            or options.opt_level < 3 or "AlterOpLayout.winograd_tile_size" in pass_config):
        return [{}]
    return [{"AlterOpLayout.winograd_tile_size": m, "AlterOpLayout.size_budget": 0.0}
            for m in (0, *WINOGRAD_IMPL_TILES)]
