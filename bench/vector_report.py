"""Vectorization evidence without a device: the hot loops of ResNet-18's convolutions and the
BERT-style encoder's dense layers, read from the assembly tvmc generates for a target.

`make bench-vector TARGET=arm` (any target whose codegen is LLVM), or
`python bench/vector_report.py --target arm [--models resnet18,bert] [--int8] [--out FILE.md]`.

With `--int8` (`make bench-vector TARGET=arm-neoverse-n1 INT8=1`) the models are first quantized
by onnxruntime as bench/int8_models.py does (ResNet-18 through quantize_static QDQ, the encoder
through quantize_dynamic) and the table counts the int8 dot-product and matrix instructions of
each hot loop instead (aarch64 `sdot`/`udot`/`usdot`: 16 multiply-adds each, `usmmla`: 32;
x86 `vpdpbusd`: 16 per 128 bits), with their multiply-adds per instruction of the loop. On
`udot`'s form (uint8 data on +dotprod) one `udot` per step is the correction term, counted too.

No timing under emulation counts as a speed result, so this report reads the generated code
instead. Per tuning task of the model (one per distinct anchor workload: the convolutions and
dense layers, with the fallback config a plain compile uses) the task's kernel is compiled alone
for the target and its assembly is split into loops: a loop is the span between a label and a
later branch back to it; the innermost loops are those holding no other loop; the hot loop is
the innermost loop with the most vector FMAs (the register-tile loop of a conv2d or dense
schedule: everything else runs once per tile). Columns:

    FLOP          FLOPs of one call (tvmc.autotune.task: 2 x multiply-adds)
    calls         kernel calls of that workload in the model
    hot loop      instructions in the hot loop's body
    vector FMA    vector fused multiply-adds in it (aarch64 `fmla v.4s`, x86 `vfmadd...ps`)
    FMA share     vector FMAs / instructions of the hot loop
    spills        stack loads and stores in the hot loop (register spills; the goal is 0)

Exit code 0 when every hot loop has vector FMAs, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Per architecture (LLVM triple component): how its assembly spells a vector FMA, a branch to a
# label, a stack access and a comment.
ASM = {
    "aarch64": {
        "vfma": re.compile(r"^\s*fmla\s+v\d+\.(4s|2d|8h)"),
        # int8 instructions -> multiply-adds: 4 int32 lanes x 4 products, a 2 x 2 block x 8
        "dots": [(re.compile(r"^\s*(sdot|udot|usdot)\s+v\d+\.4s"), 16), (re.compile(r"^\s*usmmla\s"), 32)],
        "branch": re.compile(r"^\s*(b|b\.\w+|cbn?z|tbn?z)\s+.*?(\.?L\w+)\s*$"),
        "stack": re.compile(r"^\s*(ld|st)(r|p|ur)\w*\s+.*\[sp"),
        "comment": "//",
    },
    "x86_64": {
        "vfma": re.compile(r"^\s*vfn?madd\d+p[sd]\s"),
        "dots": [(re.compile(r"^\s*vpdpbusd\s.*%zmm"), 64), (re.compile(r"^\s*vpdpbusd\s.*%ymm"), 32)],
        "branch": re.compile(r"^\s*j\w+\s+(\.?L\w+)\s*$"),
        "stack": re.compile(r"\((%rsp|%rbp)\)"),
        "comment": "#",
    },
}
_LABEL = re.compile(r"^(\.?L\w+|[A-Za-z_][\w.$]*):")


@dataclass
class HotLoop:
    instructions: int
    vector_fmas: int
    stack_accesses: int
    dots: dict = None  # int8 instruction -> count
    dot_macs: int = 0  # their multiply-adds


def functions(asm: str, arch: str) -> dict:
    """{function name: [instruction or label lines]} of an assembly file, comments removed."""
    out, current = {}, None
    comment = ASM[arch]["comment"]
    for raw in asm.splitlines():
        line = raw.split(comment)[0].rstrip()
        m = _LABEL.match(line)
        if m and not m.group(1).startswith(".L"):
            current = m.group(1)
            out[current] = []
            continue
        if current is None or not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith(".") and not _LABEL.match(stripped):
            if stripped.startswith(".Lfunc_end"):
                current = None
            continue
        out[current].append(stripped)
    return out


def hot_loop(lines: list, arch: str) -> HotLoop | None:
    """The innermost loop of `lines` with the most vector FMAs (see the module docstring)."""
    pats = ASM[arch]
    labels = {}
    loops = []
    for j, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = j
            continue
        b = pats["branch"].match(line)
        if b:
            target = b.groups()[-1]
            if target in labels:  # a branch back to an earlier label closes a loop
                loops.append((labels[target], j))
    innermost = [(i, j) for i, j in loops if not any(i <= a and b <= j and (a, b) != (i, j) for a, b in loops)]
    best = None
    for i, j in innermost:
        body = [x for x in lines[i:j + 1] if not _LABEL.match(x)]
        dots, macs = {}, 0
        for x in body:
            for pattern, per in pats.get("dots", ()):
                if pattern.match(x):
                    name = x.split()[0]
                    dots[name] = dots.get(name, 0) + 1
                    macs += per
        loop = HotLoop(len(body), sum(bool(pats["vfma"].match(x)) for x in body),
                       sum(bool(pats["stack"].search(x)) for x in body), dots, macs)
        if best is None or (loop.vector_fmas + loop.dot_macs, loop.instructions) > \
                (best.vector_fmas + best.dot_macs, best.instructions):
            best = loop
    return best


# the tasks reported: the float convolutions and matrix products, the int8 ones (--int8)
ANCHOR_OPS = ("nn.conv2d", "nn.conv2d_nchwc", "nn.dense", "nn.dense_pack", "nn.batch_matmul", "nn.matmul",
              "qnn.conv2d_nchwc_u8s8", "qnn.conv2d_nchwc_u8s8_mmla", "qnn.conv2d_nchw_u8s8", "qnn.dense_u8s8",
              "qnn.dense_u8s8_mmla")


def task_asm(task, target) -> str:
    """Assembly of `task`'s kernel alone, compiled for `target` with its fallback config."""
    from tvmc.codegen.build import compile_ir
    from tvmc.codegen.llvm import CodeGenLLVM
    from tvmc.ops.fused import lower_fused

    cg = CodeGenLLVM(target)
    cg.add_function(lower_fused(task.function(), target))
    dumps = {"_want": ("asm",)}
    compile_ir(cg.ir_text(), target, dumps)
    return dumps["asm"]


def report(model_name: str, model, target) -> list:
    """Rows (task text, FLOP, calls, HotLoop or None) for the conv2d / dense tasks of `model`."""
    from tvmc.driver import extract_tasks

    rows = []
    seen = set()
    for task in extract_tasks(model, target):
        if task.op not in ANCHOR_OPS or (task.op, task.workload) in seen:
            continue
        if "im2col" in task.impl:  # the alternative a plain compile does not run
            continue
        seen.add((task.op, task.workload))
        fns = functions(task_asm(task, target), target.arch)
        loops = [h for lines in fns.values() if (h := hot_loop(lines, target.arch)) is not None]
        hot = max(loops, key=lambda h: (h.vector_fmas, h.instructions), default=None)
        rows.append((f"{model_name} {task.op} {task.describe()}", task.flops, task.calls, hot))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="arm", help="target spec, \"name\" or \"name:key=value\" for target "
                        "options (default arm)")
    parser.add_argument("--models", default="resnet18,bert", help="comma-separated: resnet18, bert")
    parser.add_argument("--int8", action="store_true", help="the models quantized by onnxruntime; count the int8 "
                        "dot-product instructions")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import models

    from tvmc.target import resolve_target

    name, _, options = args.target.partition(":")  # "name" or "name:key=value[;key=value]"
    target = resolve_target(name, dict(o.split("=", 1) for o in options.split(";") if o) or None)
    if target.arch not in ASM:
        print(f"error: no assembly patterns for {target.arch} (known: {', '.join(ASM)})", file=sys.stderr)
        return 2
    builders = {"resnet18": models.resnet18, "bert": models.bert}
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        model = builders[name]()
        if args.int8:
            model = _quantized(name, model)
        rows += report(name, model, target)
        print(f"  {name} done", file=sys.stderr, flush=True)
    if args.int8:
        return _int8_table(rows, target, args.out)
    lines = [f"Hot loops of the generated code for target {target} ({target.vector_width_bits}-bit vectors, "
             f"{target.num_vector_registers} vector registers), fallback configs.", "",
             "| kernel | GFLOP | calls | hot loop instrs | vector FMA | FMA share | spills |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ok = True
    for text, flops, calls, hot in rows:
        if hot is None or hot.vector_fmas == 0:
            ok = False
        cells = ["-", "-", "-", "-"] if hot is None else [
            str(hot.instructions), str(hot.vector_fmas), f"{hot.vector_fmas / max(hot.instructions, 1):.0%}",
            str(hot.stack_accesses)]
        lines.append(f"| {text} | {flops / 1e9:.3f} | {calls} | " + " | ".join(cells) + " |")
    with_fma = [h for *_, h in rows if h is not None and h.vector_fmas]
    total = sum(h.instructions for h in with_fma)
    lines += ["", f"{len(with_fma)}/{len(rows)} kernels have vector FMAs in their hot loop; over those loops "
                  f"{sum(h.vector_fmas for h in with_fma) / max(total, 1):.0%} of the instructions are vector FMAs; "
                  f"{sum(h.stack_accesses > 0 for h in with_fma)} hot loops touch the stack."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if ok else 1


def _quantized(name: str, model):
    """`model` quantized by onnxruntime as bench/int8_models.py does: the encoder dynamically,
    the CNN statically (QDQ, calibrated on seeded inputs of its input shape)."""
    import tempfile

    import int8_models

    with tempfile.TemporaryDirectory() as tmp:
        if name == "bert":
            return int8_models.quantize_dynamic(model, tmp)
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        return int8_models.quantize(model, shape, tmp)


def _int8_table(rows, target, out) -> int:
    """The --int8 table (module docstring); exit code 0 when every int8 kernel's hot loop has
    int8 dot-product instructions."""
    lines = [f"int8 hot loops of the generated code for target {target} (models quantized by onnxruntime), "
             "fallback configs.", "",
             "| kernel | GOP | calls | hot loop instrs | int8 instructions | multiply-adds / instruction | "
             "vector FMA | spills |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    ok = True
    for text, flops, calls, hot in rows:
        if " qnn." in text and (hot is None or not hot.dot_macs):
            ok = False
        cells = ["-"] * 5 if hot is None else [
            str(hot.instructions), ", ".join(f"{n} {c}" for n, c in sorted(hot.dots.items())) or "-",
            f"{hot.dot_macs / max(hot.instructions, 1):.1f}" if hot.dot_macs else "-", str(hot.vector_fmas),
            str(hot.stack_accesses)]
        lines.append(f"| {text} | {flops / 1e9:.3f} | {calls} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
