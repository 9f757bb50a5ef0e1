"""The shape of the tree (issue 26): only tvmc/backends/ and tvmc/target.py decide by what kind
of target or library they meet; the rest asks the backend (tvmc.backends.backend_for) or the
Target's own properties."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a target's facts that choose code paths, with the values descriptors give them (targets/schema.json)
FACTS = {"kind": {"cpu", "gpu"}, "codegen": {"llvm", "opencl"}, "library_format": {"so", "wasm", "cl", "ptx"},
         "runtime": {"cpu", "wasm", "cuda", "opencl"}}
ALLOWED = ("tvmc/backends/", "tvmc/target.py")


def _fact_of(node):
    """The fact name an expression reads: x.kind, x.get("runtime"), x["library_format"]; else None."""
    if isinstance(node, ast.Attribute) and node.attr in FACTS:
        return node.attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and node.args[0].value in FACTS:
        return node.args[0].value
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in FACTS:
        return node.slice.value
    return None


def _literals(node) -> set:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def target_fact_comparisons(path: Path) -> list:
    """(line, text) of every comparison of a target fact with one of its literal values in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for a, b in zip(sides, sides[1:]):
            for fact_side, other in ((a, b), (b, a)):
                fact = _fact_of(fact_side)
                if fact and _literals(other) & FACTS[fact]:
                    out.append((node.lineno, ast.unparse(node)))
    return out


def test_only_the_backends_and_the_target_compare_a_targets_kind_codegen_format_or_runtime():
    found = []
    for folder in ("tvmc", "passes", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            found += [f"{rel}:{line}: {text}" for line, text in target_fact_comparisons(path)]
    assert found == []


def test_the_check_finds_such_comparisons(tmp_path):
    """The check itself sees the forms the tree used to have."""
    src = tmp_path / "x.py"
    src.write_text('if target.kind == "gpu": pass\nif req["runtime"] in ("opencl", "cuda"): pass\n'
                   'if meta.get("library_format") != "so": pass\nif a.dtype.kind == "f": pass\n')
    assert [line for line, _ in target_fact_comparisons(src)] == [1, 2, 3]
