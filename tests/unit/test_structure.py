"""The shape of the tree (issue 26): only tvmc/backends/ and tvmc/target.py decide by what kind
of target or library they meet, the rest asks the backend (tvmc.backends.backend_for) or the
Target's own properties; and no module imports itself back, through any chain of imports, those
inside functions included."""

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


# the package tvmc and the folders setup.cfg maps into it
PACKAGES = {"tvmc": ROOT / "tvmc", "tvmc.passes": ROOT / "passes", "tvmc.targets": ROOT / "targets",
            "tvmc.configs": ROOT / "configs"}


def modules() -> dict:
    """{module name: path} of every module of the tvmc package."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            if pkg == "tvmc" and parts and "tvmc." + parts[0] in PACKAGES:
                continue
            out[".".join([pkg, *parts])] = path
    return out


def import_graph() -> dict:
    """{module: set of modules it imports}, from every import statement, at any depth (inside
    functions too): `from a import b` imports module a.b where that is a module, else a."""
    mods = modules()

    def owner(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                names = subs + ([node.module] if len(subs) < len(node.names) else [])
            for name in names:
                target = owner(name) if name.startswith("tvmc") else None
                if target and target != m:
                    graph[m].add(target)
    return graph


def import_cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert len(graph) > 100 and "tvmc.ops.registry" in graph["tvmc.ops.fused"]
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_codegen_imports_only_the_loop_ir_the_target_errors_and_the_toolchain():
    """Codegen is a leaf below lowering (DESIGN.md section 9): no graph, ops, passes, autotune,
    backends, package or runtime; besides those, only the leaf modules of shared facts and
    formats (tvmc.constants, tvmc.mod_json: the graph entry is generated from mod.json)."""
    allowed = ("tvmc.codegen", "tvmc.tir", "tvmc.te", "tvmc.target", "tvmc.targets", "tvmc.errors", "tvmc.toolchain",
               "tvmc.process", "tvmc.paths", "tvmc.constants", "tvmc.mod_json")
    graph = import_graph()
    found = {m: sorted(t for t in ts if not t.startswith(allowed)) for m, ts in graph.items()
             if m.startswith("tvmc.codegen")}
    assert {m: ts for m, ts in found.items() if ts} == {}


def test_the_graph_ir_imports_no_operator():
    graph = import_graph()
    assert {m: sorted(t for t in ts if t.startswith("tvmc.ops")) for m, ts in graph.items()
            if m.startswith("tvmc.graph") and any(t.startswith("tvmc.ops") for t in ts)} == {}


def test_every_runtime_executor_keeps_the_executor_protocol():
    """One Executor protocol (tvmc.runtime.executor.Executor) for every runtime's executor."""
    import inspect

    from tvmc.runtime.cpu import GraphExecutor
    from tvmc.runtime.device import DeviceExecutor
    from tvmc.runtime.emulated import EmulatedExecutor
    from tvmc.runtime.executor import Executor
    from tvmc.runtime.wasm import WasmExecutor

    members = [m for m in dir(Executor) if not m.startswith("_")]
    assert {"run", "set_input", "get_output", "profile", "num_outputs"} <= set(members)
    for cls in (GraphExecutor, EmulatedExecutor, WasmExecutor, DeviceExecutor):
        missing = [m for m in members if m not in ("input_names", "output_names") and not hasattr(cls, m)]
        assert missing == [], cls.__name__
        assert list(inspect.signature(cls.profile).parameters)[1:] == ["runs"], cls.__name__
        for name in ("input_names", "output_names"):  # instance attributes, set in __init__
            assert f"self.{name} =" in inspect.getsource(cls.__init__), (cls.__name__, name)


def test_cpu_executor_reads_the_plan_through_the_c_api_only():
    """The CPU executor runs mod.so's C API (tvmc_kernels.h) and leaves the plan to it: it reads
    neither mod.json nor its readers (issue 26: the compiled plan is read once, by the library)."""
    import inspect

    import tvmc.runtime.cpu as cpu

    source = inspect.getsource(cpu)
    assert "graph_json" not in source and "tvmc.mod_json" not in source
    assert {"tvmc_model_create", "tvmc_model_set_input", "tvmc_model_run", "tvmc_model_get_output"} <= set(cpu.C_API)
