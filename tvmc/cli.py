"""Command-line stage: `tvmc compile`, `tvmc tune`, `tvmc run`, `tvmc inspect` and `tvmc
build-runner` (click).

The commands parse their flags and call the Python API (tvmc/api.py); `--json` prints the
API result's document (docs/json.md) as the only output on stdout, the text output otherwise.
`--config FILE` (YAML or JSON) gives a command's option values; flags on the command line
override them.

The error contract: a failure prints one line on stderr and exits with its documented code.
Every tvmc.errors.TVMCError becomes `error: <message>` and the error's exit code; a usage
error (bad option or argument) `error: <message> (see tvmc <command> --help)` and exit 64;
Ctrl-C `error: interrupted` and exit 130; SIGTERM `error: terminated` and exit 143; SIGHUP
`error: hung up` and exit 129; any other
exception `internal error: ...` and exit 70. The line is bounded in length and shows control
characters escaped. `--verbose` prints the traceback before that line and keeps the exit code.
Temporary files are removed on every one of these paths (signals included). The codes are
listed once, in EXIT_CODES (shown by `tvmc --help`, tabled in the README).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import re
import signal
import sys
import traceback
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from tvmc.constants import __version__
from tvmc import errors
from tvmc.api import FILL_MODES, kernel_counts, kernels_line
from tvmc.autotune.tuner import TUNERS
from tvmc.te.expr import is_float
from tvmc.driver import DUMP_STAGES, MIXED_PRECISION_DTYPES
from tvmc.errors import ArtifactError, ModelError, Terminated, TuningError, TVMCError
from tvmc.paths import check_output_path, check_regular, dump_folder

INTERNAL_ERROR_EXIT = 70
USAGE_EXIT = 64              # BSD sysexits EX_USAGE
INTERRUPTED_EXIT = 130       # 128 + SIGINT
TERMINATED_EXIT = 143        # 128 + SIGTERM
HANGUP_EXIT = 129            # 128 + SIGHUP (the terminal closed)
MAX_ERROR_CHARS = 400

# Every exit code of tvmc, once: (code, meaning); the error classes' codes come from tvmc/errors.py.
EXIT_CODES = (
    (0, "success"),
    (1, "other tvmc error (TVMCError)"),
    (errors.ModelError.exit_code, "model: unreadable or invalid ONNX, unsupported operators, bad shapes (ModelError)"),
    (errors.TargetError.exit_code, "target: unknown name, invalid descriptor or option (TargetError)"),
    (errors.PassError.exit_code, "pass: unknown pass or option, a pass failed (PassError)"),
    (errors.ScheduleError.exit_code, "schedule: no implementation for the target (ScheduleError)"),
    (errors.CodegenError.exit_code, "codegen: LLVM or the linker failed (CodegenError)"),
    (errors.ArtifactError.exit_code, "artifact: missing, invalid, cannot run on this host (ArtifactError)"),
    (errors.InputError.exit_code, "inputs: wrong names, shapes, dtypes, unreadable .npz (InputError)"),
    (errors.TuningError.exit_code, "tuning: records missing or unreadable, bad task index (TuningError)"),
    (errors.ClusterError.exit_code, "cluster: unreachable, no device with the key, device cannot run the target "
                                    "(ClusterError)"),
    (USAGE_EXIT, "usage: unknown command or option, bad flag value"),
    (INTERNAL_ERROR_EXIT, "internal error, a bug in tvmc (--verbose shows the traceback)"),
    (INTERRUPTED_EXIT, "interrupted (Ctrl-C); temporary files removed"),
    (TERMINATED_EXIT, "terminated (SIGTERM); temporary files removed"),
    (HANGUP_EXIT, "hung up (SIGHUP); temporary files removed"),
)


def _one_line(err: BaseException) -> str:
    """The first line of `err`'s message, control and unencodable characters escaped,
    at most MAX_ERROR_CHARS characters."""
    text = str(err).strip()
    text = text.splitlines()[0] if text else type(err).__name__
    text = "".join(c if c.isprintable() and unicodedata.category(c) != "Cs" else ascii(c)[1:-1] for c in text)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def _fail(line: str, code: int, verbose: bool):
    if verbose:
        traceback.print_exc()
    click.echo(line, err=True)
    raise SystemExit(code) from None


def _handle_errors(fn):
    """Map exceptions raised by a command to one line of text and an exit code (see module doc)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        verbose = kwargs.get("verbose", False)
        if verbose:
            logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.UsageError as e:
            _fail(_usage_line(e), USAGE_EXIT, verbose)
        except TVMCError as e:
            _fail(f"error: {_one_line(e)}", e.exit_code, verbose)
        except KeyboardInterrupt:
            _fail("error: interrupted", INTERRUPTED_EXIT, verbose)
        except Terminated as e:
            if e.signum == signal.SIGHUP:
                _fail("error: hung up", HANGUP_EXIT, verbose)
            _fail("error: terminated", TERMINATED_EXIT, verbose)
        except RecursionError:
            _fail("error: input nested too deeply to process", ModelError.exit_code, verbose)
        except Exception as e:
            _fail(f"internal error: {type(e).__name__}: {_one_line(e)} (rerun with --verbose for the traceback)",
                  INTERNAL_ERROR_EXIT, verbose)

    return wrapper


def _usage_line(e: click.UsageError) -> str:
    ctx = e.ctx or click.get_current_context(silent=True)
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    body = _one_line(e.format_message())
    limit = MAX_ERROR_CHARS - len(hint)   # the whole line stays within the bound, hint included
    return f"error: {body if len(body) <= limit else body[:limit - 3] + '...'}{hint}"


class _Cli(click.Group):
    """The tvmc group: a usage error anywhere (an unknown command or option, a bad value) is one
    `error:` line and exit code USAGE_EXIT, apart from the model errors' exit code 2."""

    def main(self, *args, **kwargs):
        standalone = kwargs.pop("standalone_mode", True)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as e:
            click.echo(_usage_line(e), err=True)
            code = USAGE_EXIT
        except click.exceptions.Abort:
            click.echo("error: interrupted", err=True)
            code = INTERRUPTED_EXIT
        except Terminated as e:
            hangup = e.signum == getattr(signal, "SIGHUP", None)
            click.echo("error: hung up" if hangup else "error: terminated", err=True)
            code = HANGUP_EXIT if hangup else TERMINATED_EXIT
        except click.ClickException as e:
            click.echo(f"error: {_one_line(e.format_message())}", err=True)
            code = e.exit_code
        except click.exceptions.Exit as e:
            code = e.exit_code
        else:
            code = 0
        if standalone:
            sys.exit(code)
        return code


verbose_option = click.option("--verbose", "-v", is_flag=True,
                              help="On errors, print the traceback too (same exit code); keep IR dumps of a failed "
                                   "compile; show LLVM's messages.")


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document on stdout instead of the text (schema: docs/json.md).")


MAX_CONFIG_BYTES = 64 << 10

# What a --config file may hold, checked before any value is used: option names mapped to a
# scalar, a list of scalars (a repeated flag) or a mapping of names to scalars or to lists of
# integers or ranges "LO..HI" (key=value flags; input_shapes {name: [dims]}).
_SCALAR = {"type": ["string", "number", "boolean"]}
_DIM = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^\s*\d+\s*\.\.\s*\d+\s*$"}]}
CONFIG_SCHEMA = {
    "type": "object",
    "propertyNames": {"type": "string", "maxLength": 100},
    "additionalProperties": {"anyOf": [
        _SCALAR,
        {"type": "array", "maxItems": 1000, "items": _SCALAR},
        {"type": "object", "maxProperties": 1000, "propertyNames": {"type": "string", "maxLength": 1000},
         "additionalProperties": {"anyOf": [_SCALAR, {"type": "array", "maxItems": 64, "items": _DIM}]}},
    ]},
}


def _load_config(ctx, param, value):
    """--config FILE: a YAML (or JSON) mapping of this command's option names (the long flag
    without its dashes; '-' or '_' alike) to values, which become the command's defaults, so a
    flag on the command line overrides the file. Mappings are accepted where a flag takes
    pairs: input_shapes {name: [dims]}, target_option and pass_config {key: value}; lists where
    a flag repeats. The file follows the descriptors' input rules: a regular file (a FIFO or a
    device is refused at once) of at most MAX_CONFIG_BYTES, parsed with limits (no aliases,
    tvmc.target.parse_yaml_limited), its structure checked against CONFIG_SCHEMA. Raises
    click.BadParameter (one line) naming the file and the key."""
    if value is None:
        return None
    import jsonschema

    from tvmc.paths import read_bounded
    from tvmc.target import parse_yaml_limited, schema_message

    data = read_bounded(value, MAX_CONFIG_BYTES, click.BadParameter, "a --config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise click.BadParameter(f"{value}: not UTF-8 text (byte {e.start})") from None
    data = parse_yaml_limited(text, value, click.BadParameter, "a config file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise click.BadParameter(f"{value}: expected a mapping of option names to values, got {type(data).__name__}")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(CONFIG_SCHEMA).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)[:80] or "(top level)"
        raise click.BadParameter(f"{value}: malformed at '{where}': {schema_message(error, 160)}")
    options = {o[2:].replace("-", "_"): p for p in ctx.command.params if isinstance(p, click.Option)
               and p.name not in _NOT_IN_CONFIG for o in p.opts if o.startswith("--")}
    defaults = {}
    for key, v in data.items():
        opt = options.get(str(key).replace("-", "_"))
        if opt is None:
            raise click.BadParameter(f"{value}: unknown option '{_one_line(key)[:100]}' for tvmc {ctx.command.name}; "
                                     f"known: {', '.join(sorted(options))}")
        defaults[opt.name] = _config_value(opt, v, f"{value}: '{key}'")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


_NOT_IN_CONFIG = ("config", "verbose", "as_json", "help")


def _config_value(opt: click.Option, value, where: str):
    """A config-file value in the form the flag's parser takes (see _load_config). For an on/off
    flag, true means the flag is given (`no_shipped_records: true` is --no-shipped-records)."""
    if opt.is_flag and isinstance(opt.flag_value, bool) and isinstance(value, bool):
        return opt.flag_value if value else not opt.flag_value
    if opt.name == "input_shapes" and isinstance(value, dict):
        return " ".join(f"{k}:[{','.join(str(d).replace(' ', '') for d in v)}]" for k, v in value.items())
    if isinstance(value, dict):
        if opt.metavar not in ("KEY=VALUE", "NAME=VALUE", "NAME=LO..HI"):
            raise click.BadParameter(f"{where}: a mapping is not a value of --{opt.name.replace('_', '-')}")
        value = [f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in value.items()]
    if opt.multiple:
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if isinstance(value, list):
        raise click.BadParameter(f"{where}: a list is not a value of --{opt.name.replace('_', '-')}")
    return value


config_option = click.option("--config", type=click.Path(exists=True, dir_okay=False), callback=_load_config,
                             is_eager=True, expose_value=False,
                             help="YAML or JSON file of this command's options (e.g. opt_level: 2); "
                                  "flags on the command line override it.")


def _echo_json(doc: dict) -> None:
    click.echo(json.dumps(doc, indent=2, allow_nan=False))


def _exit_code_epilog() -> str:
    return "\b\nExit codes:\n" + "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_CODES)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=_exit_code_epilog())
@click.version_option(__version__, prog_name="tvmc")
def cli():
    """tvmc: compile ONNX models into a deployable mod.tar, and run them.

    Start with `tvmc compile model.onnx --target native -o model.tar`, then `tvmc run model.tar`.
    """


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
    """'name:[1,3,224,224] other:[1,1..512]' -> (('name', (1, 3, 224, 224)), ('other', (1, (1, 512)))).

    A dimension is a positive int or a range LO..HI of them (LO <= HI): a symbolic dimension for
    every size in it. Names may contain ':' (the last ':' before '[' separates name and shape).
    Raises click.BadParameter on syntax errors, non-positive dimensions, empty ranges, a shape of
    more than MAX_TENSOR_BYTES elements at the upper bounds (tvmc.graph.ir) or repeated names.
    """
    from tvmc.graph.ir import MAX_TENSOR_BYTES

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
            dims = tuple(_parse_dim(d) for d in dims_text.split(",") if d.strip())
        except ValueError:
            raise click.BadParameter(f"shape of '{name}' must be integers or ranges LO..HI, got [{dims_text}]",
                                     param_hint="--input-shapes") from None
        if any(min(d) < 1 if isinstance(d, tuple) else d < 1 for d in dims):
            raise click.BadParameter(f"shape of '{name}' must have positive dimensions, got [{dims_text}]",
                                     param_hint="--input-shapes")
        empty = [f"{d[0]}..{d[1]}" for d in dims if isinstance(d, tuple) and d[0] > d[1]]
        if empty:
            raise click.BadParameter(f"shape of '{name}' has the empty range {empty[0]} (LO must not exceed HI)",
                                     param_hint="--input-shapes")
        elements = math.prod(d[1] if isinstance(d, tuple) else d for d in dims)
        if elements > MAX_TENSOR_BYTES:
            raise click.BadParameter(f"shape of '{name}' has {elements} elements, more than the "
                                     f"limit of {MAX_TENSOR_BYTES}", param_hint="--input-shapes")
        if name in out:
            raise click.BadParameter(f"input '{name}' given twice", param_hint="--input-shapes")
        out[name] = dims
        pos = m.end()
    return tuple(out.items())


def _parse_dim(text: str):
    """'128' -> 128, '1..512' -> (1, 512); ValueError otherwise."""
    lo, sep, hi = text.strip().partition("..")
    return (int(lo), int(hi)) if sep else int(text)


def parse_dim_ranges(items) -> dict:
    """('seq=1..512', 'batch=1..16') -> {'seq': (1, 512), 'batch': (1, 16)} for --dim-range (the
    last '=' separates the dim_param's name and its range). Raises click.BadParameter on syntax
    errors, bounds below 1, LO > HI or repeated names."""
    out = {}
    for item in items:
        name, _, text = item.rpartition("=")
        try:
            pair = _parse_dim(text) if name else None
        except ValueError:
            pair = None
        if not isinstance(pair, tuple):
            raise click.BadParameter(f"cannot parse '{item}'; expected NAME=LO..HI, e.g. seq=1..512",
                                     param_hint="--dim-range")
        if pair[0] < 1 or pair[0] > pair[1]:
            raise click.BadParameter(f"range of '{name}' must be 1 <= LO <= HI, got {text}", param_hint="--dim-range")
        if name in out:
            raise click.BadParameter(f"dimension '{name}' given twice", param_hint="--dim-range")
        out[name] = pair
    return out


def parse_dim_sizes(ctx, param, items) -> dict:
    """('seq=32,128,512', 'batch=1,16') -> {'seq': [32, 128, 512], 'batch': [1, 16]} for tvmc tune's
    --dim-sizes (the last '=' separates the size variable's name and its sizes). Raises
    click.BadParameter on syntax errors, sizes below 0 or repeated names."""
    out = {}
    for item in items or ():
        name, _, text = item.rpartition("=")
        try:
            sizes = [int(s) for s in text.split(",")] if name else None
        except ValueError:
            sizes = None
        if not sizes or any(s < 0 for s in sizes):
            raise click.BadParameter(f"cannot parse '{item}'; expected NAME=SIZE,SIZE,..., e.g. seq=32,128,512",
                                     param_hint="--dim-sizes")
        if name in out:
            raise click.BadParameter(f"size variable '{name}' given twice", param_hint="--dim-sizes")
        out[name] = sizes  # sorted and deduplicated by tvmc.api (list_tasks)
    return out


def parse_value_ranges(items) -> dict:
    """('n=1:64', 'len=0:512') -> {'n': (1.0, 64.0), 'len': (0.0, 512.0)} for --value-range
    (the last '=' separates name and range). Raises click.BadParameter on syntax errors, non-finite
    bounds (nan, inf), LO > HI or repeated names."""
    out = {}
    for item in items:
        name, _, text = item.rpartition("=")
        lo, sep, hi = text.partition(":")
        try:
            pair = (float(lo), float(hi)) if name and sep else None
        except ValueError:
            pair = None
        if pair is None:
            raise click.BadParameter(f"cannot parse '{item}'; expected NAME=LO:HI, e.g. n=1:64",
                                     param_hint="--value-range")
        if not (math.isfinite(pair[0]) and math.isfinite(pair[1])):
            raise click.BadParameter(f"range of '{name}' must be finite numbers, got {lo}:{hi}",
                                     param_hint="--value-range")
        if not pair[0] <= pair[1]:
            raise click.BadParameter(f"range of '{name}' is empty: {lo} > {hi}", param_hint="--value-range")
        if name in out:
            raise click.BadParameter(f"input '{name}' given twice", param_hint="--value-range")
        out[name] = pair
    return out


def _parse_list(values, what: str, choices=None) -> tuple:
    """Repeated and/or comma-separated names -> tuple; checks `choices` when given."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if choices is not None:
        bad = [n for n in names if n not in choices]
        if bad:
            raise click.BadParameter(f"unknown {', '.join(bad)}; choose from {', '.join(choices)}", param_hint=what)
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------
# The flags that set options objects: one declaration each, in one table per options dataclass;
# a command takes the tables it needs (compile and tune share GRAPH_FLAGS) and builds its options
# objects from them (FlagTable.build). Defaults, checks and meanings live in the dataclasses.


@dataclass(frozen=True)
class Flag:
    """A command-line flag that sets one field of an options dataclass.

    decls:  click's declarations, e.g. ("-O", "--opt-level")
    dest:   the field it sets, also its click parameter name (what --config files are checked
            against is the long flag; the command function receives `dest`)
    parse:  (click's value, the flag's name) -> the field's value (None: click's value as it is);
            raises click.BadParameter on a value it cannot parse
    click:  click.option's other arguments (type, help, multiple, metavar, is_flag, ...)
    """

    decls: tuple
    dest: str
    parse: object = None
    click: dict = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return next(d for d in self.decls if d.startswith("--"))


def flag(*decls, dest: str, parse=None, **click_args) -> Flag:
    return Flag(decls, dest, parse, click_args)


class _FieldOption(click.Option):
    """A click option whose shown default is its field's default in the options dataclass, read
    when --help is printed (importing the dataclass's module then, not when the CLI starts)."""

    def __init__(self, *decls, table: "FlagTable", **kwargs):
        super().__init__(*decls, **kwargs)
        self.table = table

    def get_help_extra(self, ctx):
        extra = super().get_help_extra(ctx)
        if not self.multiple and not self.is_flag and "default" not in extra:
            value = self.table.field_default(self.name)
            if value is not None and value not in ("", ()):
                extra["default"] = str(value)
        return extra


@dataclass(frozen=True)
class FlagTable:
    """The flags that set fields of one options dataclass, `cls` ('module:Name', imported when
    first needed). A flag left off the command line (and out of --config) leaves its field at the
    dataclass's default."""

    cls: str
    flags: tuple

    def options_class(self):
        import importlib

        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)

    def field_default(self, dest: str):
        f = next(f for f in dataclasses.fields(self.options_class()) if f.name == dest)
        return f.default if f.default is not dataclasses.MISSING else None

    def __call__(self, fn):
        """Decorate a click command with the table's flags (in the table's order in --help)."""
        for f in reversed(self.flags):
            fn = click.option(*f.decls, f.dest, cls=_FieldOption, table=self, **f.click)(fn)
        return fn

    def __add__(self, other: "FlagTable") -> "FlagTable":
        assert other.cls == self.cls, (self.cls, other.cls)
        return FlagTable(self.cls, self.flags + other.flags)

    def build(self, values: dict, **fields):
        """The options object of the command's flag `values` (its keyword arguments; the table's
        are taken out of it): each flag given on the command line or in --config parsed into its
        field, then `fields` (set by the command itself). A value the dataclass refuses (TypeError,
        ValueError) is a usage error naming the flag's field."""
        ctx = click.get_current_context()
        given = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.DEFAULT_MAP,
                 click.core.ParameterSource.ENVIRONMENT)
        for f in self.flags:
            value = values.pop(f.dest)
            if ctx.get_parameter_source(f.dest) in given:
                fields.setdefault(f.dest, f.parse(value, f.name) if f.parse is not None else value)
        try:
            return self.options_class()(**fields)
        except (TypeError, ValueError) as e:
            raise click.UsageError(str(e)) from None


def _pass_config(values, what: str) -> dict:
    return {k: _parse_value(v) for k, v in _parse_pairs(values, what).items()}


# CompileOptions that decide the graph: compile's, and tune's (its tasks are taken after the
# passes of the compile that will apply its records, so it takes the same flags)
GRAPH_FLAGS = FlagTable("tvmc.driver:CompileOptions", (
    flag("-O", "--opt-level", dest="opt_level", type=click.IntRange(0, 3),
         help="Optimization level: which graph passes run (configs/pipelines.yaml); for tune, the compile's."),
    flag("--disabled-pass", dest="disabled_passes", multiple=True, metavar="A,B", parse=_parse_list,
         help="Passes to skip (comma-separated, repeatable)."),
    flag("--pass-config", dest="pass_config", multiple=True, metavar="NAME=VALUE", parse=_pass_config,
         help='Pass option "<Pass>.<option>=VALUE" (repeatable).'),
    flag("--input-shapes", dest="input_shapes", metavar="SHAPES", parse=lambda v, what: parse_input_shapes(v),
         help='Fix input shapes: "data:[1,3,224,224] mask:[1,128]"; a dimension LO..HI is symbolic, any size in '
              'the range: "input_ids:[1,1..512]".'),
    flag("--dim-range", dest="dim_ranges", multiple=True, metavar="NAME=LO..HI",
         parse=lambda v, what: parse_dim_ranges(v),
         help="The model's symbolic dimension NAME (an ONNX dim_param, one size in every input where it "
              "appears) takes any size in LO..HI (repeatable), e.g. seq=1..512."),
    flag("--value-range", dest="value_ranges", multiple=True, metavar="NAME=LO:HI",
         parse=lambda v, what: parse_value_ranges(v),
         help="Every value of graph input NAME lies in [LO, HI] at run time (repeatable). Bounds the outputs of "
              "Range, Expand and ConstantOfShape whose shape inputs are computed from it; a run whose values "
              "break it stops with an error naming the output (docs/dynamic_shapes.md)."),
    # TVM tvmc's flags
    flag("--mixed-precision", dest="mixed_precision", type=click.Choice(MIXED_PRECISION_DTYPES),
         help="Compute convolutions and matrix products (and the elementwise ops after them) in float16 or "
              "bfloat16, accumulating in float32, with weights of that dtype; GPUs with tensor cores for it run "
              "them there (bfloat16: sm_80 on). Changes numerics: outputs within that dtype's tolerances "
              "(bfloat16 keeps float32's range with 8 significant bits, float16 11 bits up to 65504)."),
    flag("--mixed-precision-ops", dest="mixed_precision_ops", multiple=True, metavar="OPS", parse=_parse_list,
         help="Operators --mixed-precision converts, comma-separated tvmc names (default "
              "nn.conv2d,nn.conv2d_transpose,nn.dense,nn.matmul)."),
))

# CompileOptions of compile alone
COMPILE_FLAGS = GRAPH_FLAGS + FlagTable("tvmc.driver:CompileOptions", (
    flag("--dump-ir", dest="dump_ir", multiple=True, metavar="STAGES",
         parse=lambda v, what: _parse_list(v, what, DUMP_STAGES),
         help=f"Write IR text into <output name>.dumps/ beside the output (replaced on each compile), "
              f"comma-separated from: {','.join(DUMP_STAGES)}."),
    flag("--tuning-records", dest="tuning_records", type=click.Path(dir_okay=False),
         help="Apply the best configs of a `tvmc tune` records file."),
    flag("--no-shipped-records", dest="shipped_records", is_flag=True, flag_value=False,
         help="Do not apply the tuning records tvmc ships for the target's descriptor (configs/tuning/); kernels "
              "without --tuning-records take the fallback rules."),
))

# TuneOptions (the search) and MeasureOptions (building and timing candidates) of tune
TUNE_FLAGS = FlagTable("tvmc.autotune.tune:TuneOptions", (
    flag("--trials", dest="trials", type=click.IntRange(min=1),
         help="Total measurements, split over tasks in proportion to their FLOPs."),
    flag("--tuner", dest="tuner", type=click.Choice(TUNERS),
         help="Search: xgb (XGBoost cost model, AutoTVM), ga (genetic), random, grid."),
    flag("--early-stopping", dest="early_stopping", type=click.IntRange(min=1),
         help="Stop a task after N trials without a new best."),
    flag("--time-budget", dest="time_budget_s", type=click.FloatRange(min=1.0), metavar="SECONDS",
         help="Seconds for the whole search (with a large --trials): each task in turn gets the seconds still "
              "left in proportion to its FLOPs among the tasks still to tune."),
    flag("--tuning-records", dest="prior_records", type=click.Path(dir_okay=False),
         help="Prior records: their configs are not measured again; other tasks' train the xgb model."),
))
MEASURE_FLAGS = FlagTable("tvmc.autotune.measure:MeasureOptions", (
    flag("--number", dest="number", type=click.IntRange(min=1), help="Runs per timing round."),
    flag("--repeat", dest="repeat", type=click.IntRange(min=1), help="Timing rounds per candidate."),
    flag("--min-repeat-ms", dest="min_repeat_ms", type=click.FloatRange(min=0),
         help="Grow --number until a round lasts this long."),
    flag("--timeout", dest="timeout_s", type=click.FloatRange(min=0.1), help="Seconds per candidate, build and run."),
    flag("--parallel", dest="parallel", type=click.IntRange(min=1),
         help="Build worker processes  [default: one per core]"),
))


# ---------------------------------------------------------------------------------------------
# compile


def _fmt_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _fmt_bytes(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} KB"


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


def params_growth(params_bytes: int, metadata: dict) -> str:
    """', <r>x the model's <size> of weights' (params_bytes against metadata's model_weight_bytes:
    the imported constants, before packing and Winograd transforms), or '' when the metadata
    lacks it."""
    weights = metadata.get("model_weight_bytes")
    if not weights:
        return ""
    return f", {params_bytes / weights:.2f}x the model's {_fmt_bytes(weights)} of weights"


def print_compile_summary(result, pass_times=False) -> None:
    """Print what was compiled, for which target, into what, and how long each stage took (s),
    from an api.CompileResult; with `pass_times`, the time of each graph pass (ms)."""
    module = result.module
    params_bytes = sum(int(np.asarray(v).nbytes) for v in module.params.values())
    distinct, calls, load = kernel_counts(module.metadata, module.graph_json)
    activations = activation_summary(module.metadata)
    stages = dict(result.timings_s)
    total = stages.pop("total")
    rows = [
        ("model", str(result.model)),
        ("target", str(result.target)),
        ("opt level", str(result.options.opt_level)),
        ("kernels", kernels_line(distinct, calls, load)),
        ("params", f"{params_bytes / 1e6:.2f} MB" + params_growth(params_bytes, module.metadata)),
        *([("memory", activations)] if activations else []),
        ("output", str(result.output)),
        ("time", ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()) + f" (total {total:.2f} s)"),
    ]
    click.echo("compile summary")
    for key, value in rows:
        click.echo(f"  {key:<10} {value}")
    if pass_times:
        click.echo("pass times")
        if not result.pass_times_s:
            click.echo("  (the driver recorded no per-pass times)")
        for name, seconds in result.pass_times_s.items():
            click.echo(f"  {name:<28} {seconds * 1e3:10.2f} ms")


def codegen_progress():
    """A progress(stage, done, total) callback drawing one updating line on stderr (tqdm) when
    stderr is a terminal, else None: nothing extra goes into CI logs. Close it with .close()."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=1, desc="codegen", unit="kernel", file=sys.stderr, leave=False, dynamic_ncols=True)

    def update(stage: str, done: int, total: int) -> None:
        bar.set_description(f"codegen: {'lowering kernels' if stage == 'lower' else stage}")
        bar.total, bar.n = total, done
        bar.refresh()

    update.close = bar.close
    return update


def _output_folder_made(output) -> Path:
    """Path(output), after creating its folder; ArtifactError when that fails."""
    out = Path(output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"{out.parent}: cannot create output folder: {e.strerror or e}") from None
    return out


@cli.command("compile", short_help="Compile an ONNX model into a mod.tar for a target.")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", "target_spec", required=True,
              help='Target: a shipped name (native = this host; x86, x86-avx2, x86-64), or a descriptor YAML path, '
                   'optionally with LLVM-style overrides: "x86 -mcpu=skylake-avx512", "native -mattr=-avx2".')
@click.option("--target-option", multiple=True, metavar="KEY=VALUE",
              help="Override a target descriptor field, e.g. cpu=znver3 or l2_bytes=1048576 (repeatable).")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Output artifact (mod.tar), or folder with --output-format web.")
@click.option("--output-format", type=click.Choice(["tar", "web"]), default="tar", show_default=True,
              help="tar: mod.tar; web (wasm targets): a static folder with the model files, the ES-module "
                   "runtime tvmc.js and an index.html that runs the model and shows outputs and latency.")
@COMPILE_FLAGS
@click.option("--print-pass-times", is_flag=True, help="Print the time spent in each graph pass.")
@click.option("--cross-compiler", metavar="CC",
              help="Compiler driver that links the library instead of the target's linker command's first word "
                   "(e.g. aarch64-linux-gnu-gcc, clang); the descriptor's linker flags stay. Records tuned without it "
                   "still apply (the tuning key leaves the toolchain out).")
@click.option("--cross-compiler-options", metavar="OPTS",
              help='Extra linker arguments, shell-quoted: "-L/opt/sysroot/lib -Wl,-rpath,.".')
@config_option
@json_option
@verbose_option
@_handle_errors
def compile_cmd(model, target_spec, target_option, output, output_format, print_pass_times, cross_compiler,
                cross_compiler_options, as_json, verbose, **flags):
    """Compile an ONNX MODEL into a mod.tar for a target.

    Prints a summary (kernels, params, memory, time per stage); --json prints it as JSON.
    """
    from tvmc.api import compile as compile_model_api
    from tvmc.target import resolve_target, with_cross_compiler

    target_options = _parse_pairs(target_option, "--target-option")
    options = COMPILE_FLAGS.build(flags)
    check_regular(model, ModelError, "an ONNX model file")
    if output_format == "tar":
        if Path(output).is_dir():  # a usage error, as click's own file-name check gives it
            raise click.BadParameter(f"'{output}' is a folder; the artifact is a file (--output-format web "
                                     f"writes a folder)", param_hint="'-o' / '--output'")
        check_output_path(output, ArtifactError, "artifact",
                          [model] + ([options.tuning_records] if options.tuning_records else []))
    target = with_cross_compiler(resolve_target(target_spec, target_options), cross_compiler, cross_compiler_options)
    out = _output_folder_made(output)
    progress = codegen_progress()
    try:
        dumps = dump_folder(out, ArtifactError, keep_on_error=verbose) if options.dump_ir else contextlib.nullcontext()
        with dumps as dump_dir:
            result = compile_model_api(model, target, out, dataclasses.replace(options, dump_dir=dump_dir),
                                       progress=progress, output_format=output_format)
    finally:
        if progress is not None:
            progress.close()
    if as_json:
        _echo_json(result.to_json())
        return
    print_compile_summary(result, print_pass_times)
    from tvmc.autotune.tune import records_summary_lines

    if options.tuning_records:
        for line in records_summary_lines(result.module.metadata["tuning_records"], options.tuning_records):
            click.echo(line)
    shipped = result.module.metadata.get("shipped_records")
    if shipped:
        for line in records_summary_lines(shipped, f"{shipped['file']} (shipped)"):
            click.echo(line)


# ---------------------------------------------------------------------------------------------
# tune


def _task_indices(ctx, param, value):
    from tvmc.api import parse_task_indices

    if value is None:
        return None
    try:
        return parse_task_indices(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def print_task_list(task_list) -> None:
    """The table of `tvmc tune --list-tasks`: one row per task (api.TaskList.rows)."""
    from tvmc.autotune.tune import task_count_line

    click.echo(f"{task_count_line(len(task_list.tasks), task_list.num_workloads)} in {task_list.model} "
               f"(target {task_list.target.name}; a workload has one task per implementation)")
    rows = task_list.rows()
    width = max([len("workload")] + [len(r["workload"]) for r in rows])
    click.echo(f"{'index':>5}  {'op':<20} {'implementation':<24} {'workload':<{width}} {'MFLOP':>10} {'calls':>5} "
               f"{'configs':>8}")
    for r in rows:
        click.echo(f"{r['index']:>5}  {r['op']:<20} {r['implementation']:<24} {r['workload']:<{width}} "
                   f"{r['flops'] / 1e6:>10.2f} {r['calls']:>5} {r['config_space_size']:>8}")


def _device_key(ctx, param, value):
    if value is None:
        return None
    from tvmc.cluster import device_resource

    try:
        device_resource(value)
    except TVMCError as e:
        raise click.BadParameter(str(e)) from None
    return value


cluster_option = click.option("--cluster", metavar="ADDRESS",
                              help="A Ray cluster: ray://HOST:10001, HOST:6379 (a head) or local (a Ray instance in "
                                   "this process); needs --device-key (README: Tuning on devices).")
device_key_option = click.option("--device-key", metavar="KEY", callback=_device_key,
                                 help="The device of --cluster to measure or run on (tvmc device-worker --key KEY).")


@cli.command("tune", short_help="Tune the kernels of an ONNX model on this machine; write measurement records.")
@click.argument("model", type=click.Path(dir_okay=False), required=False)
@click.option("--target", "target_spec", help="Target name or descriptor, as for compile.  [required]")
@click.option("--target-option", multiple=True, metavar="KEY=VALUE",
              help="Override a target descriptor field (repeatable).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Records file (JSON lines); appended to, and resumed from when it exists. "
                   "Required unless --list-tasks.")
@click.option("--list-tasks", is_flag=True,
              help="Print the tasks (index, op, implementation, workload, FLOPs, calls, config-space size) and exit.")
@click.option("--tasks", "task_indices", metavar="INDICES", callback=_task_indices,
              help="Tune only these tasks, by --list-tasks index: e.g. 0,2-4.")
@cluster_option
@device_key_option
@click.option("--list-devices", is_flag=True, help="With --cluster: print its devices (key, target) and exit.")
@click.option("--dim-sizes", "dim_sizes", multiple=True, metavar="NAME=S1,S2,...", callback=parse_dim_sizes,
              help="With size ranges (--dim-range, LO..HI in --input-shapes): tune the kernels of these sizes of "
                   "the size variable NAME (repeatable; every combination; a variable not named is tuned at its "
                   "upper bound). A compile of the range applies the records per size bucket.")
@click.option("--device-wait", "device_wait_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS", help="With --cluster: how long to wait for the device to come back when it leaves "
                                      "mid-tune; then the tune stops with what it recorded.")
@TUNE_FLAGS
@MEASURE_FLAGS
@GRAPH_FLAGS
@config_option
@json_option
@verbose_option
@_handle_errors
def tune_cmd(model, target_spec, target_option, output, list_tasks, task_indices, cluster, device_key, list_devices,
             device_wait_s, dim_sizes, as_json, verbose, **flags):
    """Tune the kernels of an ONNX MODEL on this machine; write measurement records.

    The graph flags (-O, --input-shapes, --mixed-precision, ...) are the compile's: the tasks are
    taken after its passes. --list-tasks prints the tasks without tuning; --tasks tunes a subset.
    --cluster ADDRESS --device-key KEY builds candidates on a Ray cluster's nodes and measures them
    on its device KEY (tvmc device-worker); --cluster ADDRESS --list-devices lists its devices.
    A compile of size ranges is tuned at representative sizes: --dim-sizes seq=1,64,512.
    """
    from tvmc.api import list_tasks as list_model_tasks
    from tvmc.api import tune
    from tvmc.autotune.tune import Progress, format_summary, task_count_line
    from tvmc.target import resolve_target

    if list_devices:
        if not cluster:
            raise click.UsageError("--list-devices lists the devices of a --cluster ADDRESS")
        from tvmc.cluster import cluster_session, format_devices, list_devices as cluster_devices

        with cluster_session(cluster):
            devices = cluster_devices()
        if as_json:
            from tvmc.api import json_document

            _echo_json(json_document("devices", {"cluster": cluster, "devices": devices}))
        else:
            click.echo(format_devices(devices, cluster))
        return
    if model is None:
        raise click.UsageError("Missing argument 'MODEL'.")
    if target_spec is None:
        raise click.UsageError("Missing option '--target'.")
    if cluster and not device_key:
        raise click.UsageError("--cluster needs --device-key KEY: the device to measure on (see --list-devices)")
    if device_key and not cluster:
        raise click.UsageError("--device-key names a device of a --cluster ADDRESS")
    compile_options = GRAPH_FLAGS.build(flags)
    options = TUNE_FLAGS.build(flags, measure=MEASURE_FLAGS.build(flags))
    if not list_tasks and not output:
        raise click.UsageError("Missing option '-o' / '--output' (the records file), or use --list-tasks.")
    check_regular(model, ModelError, "an ONNX model file")
    if output:
        check_output_path(output, TuningError, "tuning records",
                          [model] + ([options.prior_records] if options.prior_records else []))
    target = resolve_target(target_spec, _parse_pairs(target_option, "--target-option"))
    task_list = list_model_tasks(model, target, compile_options, dim_sizes=dim_sizes)
    if list_tasks:
        if as_json:
            _echo_json(task_list.to_json())
        else:
            print_task_list(task_list)
        return
    chosen = task_indices if task_indices is not None else range(len(task_list.tasks))
    say = functools.partial(click.echo, err=as_json)  # with --json, stdout carries the document alone
    say(f"{task_count_line(len(task_list.tasks), task_list.num_workloads)} from {model} (opt level "
        f"{compile_options.opt_level}, target {target.name}; a workload has one task per implementation)"
        + (f"; tuning tasks {', '.join(map(str, chosen))}" if task_indices is not None else ""))
    if cluster:
        say(f"measuring on device {device_key} of the Ray cluster at {cluster}; building on its nodes")
    result = tune(model, target, output, options, tasks=task_indices, task_list=task_list,
                  progress=Progress(sys.stderr if as_json else sys.stdout), cluster=cluster, device_key=device_key,
                  device_wait_s=device_wait_s)
    if as_json:
        _echo_json(result.to_json())
    else:
        click.echo(format_summary(result.results, result.indices))
        click.echo(f"records: {output}")
    if result.stopped:
        tuned = len(result.results)
        raise TuningError(f"tuning stopped in task {result.indices[-1]} ({tuned} of {len(chosen)} tasks tuned): "
                          f"{result.stopped}; the records in {output} resume it (run the same command again)")


# ---------------------------------------------------------------------------------------------
# run


def save_outputs(path: str, outputs: dict, reads=()) -> None:
    """Write `outputs` ({name: array}) to the .npz `path` atomically (temporary file + rename);
    `path` must not be one of `reads` (tvmc.paths.check_output_path)."""
    from tvmc.package import write_atomically

    write_atomically(path, lambda f: np.savez(f, **outputs), "outputs", reads)


def print_outputs_summary(outputs: dict) -> None:
    """One line per output: name, shape, dtype, min / max / mean."""
    click.echo("outputs")
    for name, arr in outputs.items():
        line = f"  {name}: {_fmt_shape(arr.shape)} {arr.dtype.name}"
        if arr.size and (arr.dtype.kind in "fiub" or is_float(arr.dtype.name)):
            a = arr.astype(np.float64)
            line += f"  min {a.min():.6g}  max {a.max():.6g}  mean {a.mean():.6g}"
        click.echo(line)


def time_unit(ms: float) -> tuple:
    """(unit name, factor from ms) to print a latency of `ms` milliseconds: µs below 1 ms, so
    that small kernels and models do not print as 0.002 ms."""
    return ("µs", 1e3) if ms < 1.0 else ("ms", 1.0)


def print_time_table(stats: dict) -> None:
    """The benchmark statistics per run, in ms (µs when the median is below 1 ms)."""
    unit, factor = time_unit(stats["median_ms"])
    click.echo(f"execution time ({unit} per run; {stats['repeat']} repeats x {stats['number']} runs)")
    keys = ("mean", "median", "min", "max", "std")
    click.echo("  " + "".join(f"{k:>10}" for k in keys))
    click.echo("  " + "".join(f"{stats[k + '_ms'] * factor:>10.3f}" for k in keys))


def _fmt_time(ms: float) -> str:
    unit, factor = time_unit(ms)
    return f"{ms * factor:.3f} {unit}"


def print_profile(rows: list, runs: int, clock: str = "each kernel call timed from Python") -> None:
    """The per-kernel table of `tvmc run --profile` (api.profile_rows), largest total first;
    `clock` says how the kernels were timed (api.RunResult.profile_clock)."""
    click.echo(f"profile (kernel by kernel, {runs} run{'s' * (runs != 1)}; times per run, {clock})")
    width = max([len("kernel")] + [len(r["name"]) for r in rows])
    click.echo(f"  {'kernel':<{width}} {'calls':>5} {'total':>12} {'mean':>12} {'share':>7} {'GFLOP/s':>9}")
    for r in rows:
        gflops = f"{r['gflop_s']:.1f}" if r["gflop_s"] is not None else "-"
        click.echo(f"  {r['name']:<{width}} {r['calls']:>5} {_fmt_time(r['total_ms']):>12} "
                   f"{_fmt_time(r['mean_ms']):>12} {r['share'] * 100:>6.1f}% {gflops:>9}")
    click.echo(f"  {'all kernels':<{width}} {sum(r['calls'] for r in rows):>5} "
               f"{_fmt_time(sum(r['total_ms'] for r in rows)):>12}")


def print_top_classes(top: dict, k: int, outputs: dict) -> None:
    """Top-k classes and scores of each output with one non-singleton axis ([N], [1, N],
    [1, N, 1, 1]) from api.RunResult.top_classes; other outputs are skipped with a note."""
    for name, best in top.items():
        if best is None:
            click.echo(f"top-{k}: {name} {_fmt_shape(outputs[name].shape)} is not a vector of class scores; skipped")
            continue
        click.echo(f"top-{len(best)} of {name}")
        for rank, (cls, score) in enumerate(best, 1):
            click.echo(f"  {rank}. class {cls:>5}  score {score:.6g}")


@cli.command("run", short_help="Run a compiled mod.tar on this machine; print outputs, timing, per-kernel profile.")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False),
              help="Inputs .npz keyed by input name; inputs it lacks are made by --fill-mode.")
@click.option("--outputs", "outputs_path", type=click.Path(dir_okay=False),
              help="Write outputs .npz keyed by output name.")
@click.option("--fill-mode", type=click.Choice(list(FILL_MODES)), default="random", show_default=True,
              help="Inputs not given by --inputs: zeros, ones, or random (seed 0).")
@click.option("--print-time", is_flag=True, help="Time the run and print latency statistics (ms, µs below 1 ms).")
@click.option("--repeat", type=click.IntRange(min=1), help="Timing measurements (implies --print-time)  [default: 1]")
@click.option("--number", type=click.IntRange(min=1), help="Runs per measurement (implies --print-time)  [default: 1]")
@click.option("--profile", is_flag=True,
              help="Also run kernel by kernel and print each kernel's calls, time, share and GFLOP/s.")
@click.option("--print-top", type=click.IntRange(min=1), metavar="K", help="Print the top-K classes of each output.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads for parallel loops (also: OMP_NUM_THREADS).")
@click.option("--device", metavar="DEVICE",
              help="Device of a GPU artifact: opencl, opencl:PLATFORM or opencl:PLATFORM:DEVICE; cuda or cuda:ORDINAL "
                   "(default: the first).")
@click.option("--target", "target_spec", metavar="TARGET",
              help="Descriptor (shipped name or YAML file) whose emulator and C compiler run an artifact of "
                   "another architecture; default: the shipped one matching the artifact's code. Commands named "
                   "in the artifact's metadata.json are never run.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="CUDA artifacts: capture the graph once and replay it on each run (a graph with a run-time loop "
                   "always launches kernel by kernel; the device line says which mode ran).")
@cluster_option
@device_key_option
@config_option
@json_option
@verbose_option
@_handle_errors
def run_cmd(artifact, inputs_path, outputs_path, fill_mode, print_time, repeat, number, profile, print_top, threads,
            device, target_spec, cuda_graph, cluster, device_key, as_json, verbose):
    """Run a compiled ARTIFACT (mod.tar) on this machine.

    Prints each output's shape, dtype and statistics; --print-time (or --repeat/--number) the
    latency, --profile a per-kernel table, --print-top the top classes; --json all of it as JSON.
    On a GPU, --profile times each kernel with the device's events (OpenCL profiling events, CUDA
    events), kernel by kernel; a CUDA artifact's runs replay one CUDA graph unless --no-cuda-graph.
    --cluster ADDRESS --device-key KEY runs it on that device of a Ray cluster (tvmc device-worker).
    """
    from tvmc.api import run

    if bool(cluster) != bool(device_key):
        raise click.UsageError("--cluster ADDRESS and --device-key KEY go together: the device of a Ray cluster to "
                               "run on")

    if print_time and repeat is None and number is None:
        repeat = number = 1
    reads = [artifact] + ([inputs_path] if inputs_path else [])
    if outputs_path:
        check_output_path(outputs_path, ArtifactError, "outputs", reads)
    say = functools.partial(click.echo, err=as_json)  # with --json, stdout carries the document alone
    result = run(artifact, inputs_path, fill_mode=fill_mode, repeat=repeat, number=number, threads=threads,
                 profile=profile, device=device, on_device=lambda name: say(f"device: {name}"), cuda_graph=cuda_graph,
                 target=target_spec, cluster=cluster, device_key=device_key)
    if outputs_path:
        save_outputs(outputs_path, result.outputs, reads)
    if as_json:
        _echo_json(result.to_json(top=print_top, outputs_file=outputs_path))
        return
    filled = [n for n, src in result.inputs.items() if src != "given"]
    if inputs_path and filled:
        click.echo(f"inputs not in {inputs_path}, filled with {fill_mode}: {', '.join(filled)}")
    print_outputs_summary(result.outputs)
    if result.timing is not None:
        print_time_table(result.timing)
    if result.profile is not None:
        print_profile(result.profile, result.profile_runs, result.profile_clock)
    if print_top:
        print_top_classes(result.top_classes(print_top), print_top, result.outputs)


# ---------------------------------------------------------------------------------------------
# build-runner


@cli.command("build-runner", short_help="Build the C runner program (tvmc_run) for an artifact's target.")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The runner program to write.")
@click.option("--target", "target_spec", metavar="TARGET",
              help="Descriptor (shipped name or YAML file) whose C compiler builds the runner; its code facts "
                   "(triple, codegen, library format) must be the artifact's. Default: the shipped one matching them.")
@click.option("--cross-compiler", metavar="CC", help="Compiler driver instead of the first word of the descriptor's "
              "linker command.")
@click.option("--cross-compiler-options", metavar="OPTS", help='Extra compiler and linker arguments, shell-quoted.')
@verbose_option
@_handle_errors
def build_runner_cmd(artifact, output, target_spec, cross_compiler, cross_compiler_options, verbose):
    """Build tvmc_run, the C runner of tvmc/runtime/tvmc_run.c, for the target ARTIFACT (mod.tar)
    was compiled for, with the C compiler driver of the known descriptor for that code (e.g.
    aarch64-linux-gnu-gcc for arm; --target names another), never a command from the artifact.

    On the device, put it in one folder with mod.so and mod.params from the tar and run
    `./tvmc_run -p mod.params -i NAME=in.npy -o NAME=out.npy -r 10`: inputs and outputs as .npy
    files, a timing loop, nothing needed but libc (and libgomp).
    """
    from tvmc.backends import backend_for
    from tvmc.package import load_artifact, write_atomically
    from tvmc.target import artifact_target, with_cross_compiler

    check_output_path(output, ArtifactError, "runner", [artifact])
    art = load_artifact(artifact)
    target = artifact_target(art.metadata["target"], target_spec, artifact, ArtifactError)
    if art.library_name != "mod.so":
        raise ArtifactError(f"{artifact}: target {target.name} keeps its kernels in {art.library_name}; "
                            f"the C runner runs CPU libraries (mod.so)")
    target = with_cross_compiler(target, cross_compiler, cross_compiler_options)
    program = backend_for(target).link_runner(art.library, target)
    path = write_atomically(_output_folder_made(output), lambda f: f.write(program), "runner", [artifact])
    path.chmod(0o755)
    click.echo(f"runner: {path} ({target.arch}, built by {target.linker[0]} for target {target.name})")
    click.echo(f"run it beside mod.so and mod.params (from {artifact}): ./{path.name} -p mod.params "
               f"-i INPUT=in.npy -o OUTPUT=out.npy -r 10")


# ---------------------------------------------------------------------------------------------
# device-worker


@cli.command("device-worker", short_help="Join a Ray cluster as a device that tuning measures on and tvmc run runs on.")
@click.option("--address", required=True, metavar="HOST:PORT", help="The Ray head's address (its GCS port, 6379).")
@click.option("--key", required=True, metavar="KEY", callback=_device_key,
              help="The device's key: tvmc tune/run --device-key KEY reach it.")
@click.option("--target", "target_spec", default="native", show_default=True, metavar="TARGET",
              help="The target whose artifacts this host must run (checked before it joins).")
@click.option("--num-cpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs this node offers the cluster: 1 keeps builds on the other nodes.")
@click.option("--emulate", is_flag=True,
              help="TARGET is of another CPU architecture: run and measure its code under the target's emulator "
                   "(qemu-user). The times are the emulator's, marked so in the records: to try a cluster's "
                   "routing, not to tune.")
@verbose_option
@_handle_errors
def device_worker_cmd(address, key, target_spec, num_cpus, emulate, verbose):
    """Make this host device KEY of the Ray cluster whose head is at ADDRESS, until interrupted.

    A wrapper of `ray start --address ADDRESS --num-cpus 1 --resources '{"tvmc-device:KEY": 1}'
    --labels tvmc-device-key=KEY,tvmc-target=TARGET,tvmc-measure=native|emulated --block`: first
    it checks this host can run TARGET's artifacts (architecture, CPU features, GPU driver; another
    architecture under its emulator, with --emulate only) and refuses with the reason otherwise.
    tvmc must be installed here in the tuner's version; Ray's token (~/.ray/auth_token of the head)
    too.
    """
    from tvmc.cluster import start_device_worker
    from tvmc.target import resolve_target

    target = resolve_target(target_spec)
    code = start_device_worker(address, key, target, num_cpus, say=click.echo, emulate=emulate)
    if code:
        raise errors.ClusterError(f"ray start --address {address} ended with exit code {code}")


# ---------------------------------------------------------------------------------------------
# inspect


@cli.command("inspect", short_help="Print what a compiled mod.tar holds (metadata, kernels, params, storage).")
@click.argument("artifact", type=click.Path(dir_okay=False))
@json_option
@verbose_option
@_handle_errors
def inspect_cmd(artifact, as_json, verbose):
    """Print what a compiled ARTIFACT (mod.tar) holds."""
    from tvmc.api import json_document
    from tvmc.mod_json import graph_attr
    from tvmc.package import load_artifact

    art = load_artifact(artifact, read_data=False)
    g = art.graph_json
    distinct, calls, load = kernel_counts(art.metadata, g)
    sids = graph_attr(g, "storage_id")
    storage = g.get("storage_bytes")
    storage_total = sum(storage.values() if isinstance(storage, dict) else storage) if storage is not None else None
    library = art.library_name
    library_bytes = art.member_bytes[library]
    if as_json:
        _echo_json(json_document("inspect", {
            "artifact": str(artifact), "metadata": art.metadata,
            "kernels": {"distinct": distinct, "calls": calls, "load_calls": load},
            "params": {"tensors": len(art.param_info), "bytes": art.params_bytes},
            "storage": {"buffers": len(set(sids)), "tensors": len(sids), "bytes": storage_total},
            "activations": {"planned_bytes": art.metadata.get("planned_activation_bytes"),
                            "unplanned_bytes": art.metadata.get("unplanned_activation_bytes")},
            "library": {"file": library, "bytes": library_bytes, "description_matches": True},
            "device_kernels": g.get("kernels")}))
        return
    activations = activation_summary(art.metadata)
    click.echo("metadata")
    click.echo("  " + json.dumps(art.metadata, sort_keys=True, indent=2).replace("\n", "\n  "))
    click.echo(f"kernels        {kernels_line(distinct, calls, load)}")
    click.echo(f"params         {len(art.param_info)} tensors, {art.params_bytes} bytes")
    click.echo(f"storage        {len(set(sids))} buffers for {len(sids)} tensors"
               + (f", {storage_total} bytes" if storage_total is not None else ""))
    if activations:
        click.echo(f"memory         {activations}")
    if art.metadata.get("size_vars"):  # symbolic shapes: one artifact for these ranges
        click.echo("size variables " + ", ".join(f"{v['name']} in {v['range']}" for v in art.metadata["size_vars"])
                   + "; inputs " + " ".join(f"{i['name']}:[{','.join(map(str, i.get('symbolic_shape', i['shape'])))}]"
                                           for i in art.metadata["inputs"]))
    click.echo(f"library        {library}, {library_bytes} bytes; "
               f"its embedded description matches mod.json, mod.params and metadata.json, every member its sha256 "
               f"(not loaded)")
    if isinstance(g.get("kernels"), dict):
        print_kernel_table(g)


def print_kernel_table(graph_json: dict) -> None:
    """The device kernels of a GPU artifact (mod.json "kernels"): calls, launch grid and block,
    threads and shared memory per block, MFLOP, global memory bytes per FLOP. An artifact compiled
    for ranges shows a grid or block extent that follows the size variables as its expression of
    them (the threads of such a block at the variables' upper bounds, marked <=); its FLOPs and
    bytes are those at the upper bounds."""
    from tvmc.graph.symbolic import eval_postfix, postfix_text

    calls: dict = {}
    for node in graph_json["nodes"]:
        if node.get("op") == "tvm_op":
            name = node["attrs"]["func_name"]
            calls[name] = calls.get(name, 0) + 1
    size_vars = graph_json.get("size_vars") or []
    click.echo("device kernels")
    click.echo(f"  {'kernel':<44} {'calls':>5} {'grid':>14} {'block':>12} {'threads':>7} {'shared B':>8} "
               f"{'MFLOP':>9} {'B/FLOP':>7}")
    for name, k in graph_json["kernels"].items():
        args = (graph_json.get("size_args") or {}).get(name, [])
        names = [size_vars[i]["name"] for i in args]
        upper = [size_vars[i]["hi"] for i in args]

        def dims(extents, names=names):
            return "x".join(postfix_text(e, names) if isinstance(e, int) else f"({postfix_text(e, names)})"
                            for e in extents)

        threads = math.prod(eval_postfix(e, upper) for e in k["block"])
        symbolic_block = any(isinstance(e, list) for e in k["block"])
        per_flop = f"{k['global_bytes'] / k['flops']:.3f}" if k.get("flops") else "-"
        click.echo(f"  {name[:44]:<44} {calls.get(name, 0):>5} {dims(k['grid']):>14} {dims(k['block']):>12} "
                   f"{('<=' if symbolic_block else '') + str(threads):>7} "
                   f"{k['shared_bytes']:>8} {k.get('flops', 0) / 1e6:>9.2f} {per_flop:>7}")


def _terminate(signum, frame):
    raise Terminated(signum)


def main(argv=None) -> int:
    """Console entry point (`tvmc`). Returns the exit code.

    SIGTERM and SIGHUP raise tvmc.errors.Terminated in the main thread, so a terminated command
    removes its temporary files (and kills the tools it started, tvmc.process) as an interrupted
    one does (exit 143, 129)."""
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None:
            with contextlib.suppress(ValueError, OSError):  # not the main thread, or no signals here
                signal.signal(signum, _terminate)
    try:
        cli.main(args=argv, prog_name="tvmc")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
