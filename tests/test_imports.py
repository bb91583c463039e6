"""The import graph: every module imports in a fresh interpreter; every import, function-level included, goes down
the layers (chain-wide modules < runtime < data < train < eval < export; harness and kaggle apart, above) and no
import forms a cycle; the runtime subpackages never import the build tools, and no notebook does either."""

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "nbutils"
TOOLS = ("nbutils.harness", "nbutils.kaggle", "nbutils.plan")
RUNTIME = ("nbutils.runtime", "nbutils.data", "nbutils.train", "nbutils.eval", "nbutils.export",
           "nbutils.defaults", "nbutils.embedded", "nbutils.plots")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py")) if p.name != "__main__.py"}


def _targets(node: ast.AST, current: str) -> list[str]:
    """nbutils modules an import statement names (`from pkg import mod` names the module when it is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("nbutils")]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolve against the importing package
        pkg = current.split(".") if MODULES[current].name == "__init__.py" else current.split(".")[:-1]
        base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
    if not base.startswith("nbutils"):
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _module_level(tree: ast.Module):
    """Import statements that run when the module is imported (not inside functions or `if TYPE_CHECKING`)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + [n for h in node.handlers for n in h.body] + node.orelse + node.finalbody


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each module parsed once for the tests that walk the graph (four of them, two kinds of graph)."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache  # read only by the tests: one graph of each kind per session
def static_graph(module_level_only: bool = True) -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        tree = _tree(path)
        nodes = _module_level(tree) if module_level_only else ast.walk(tree)
        graph[name] = {t for n in nodes for t in _targets(n, name) if t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a -> b -> ... -> a, or None (depth-first search, three colours)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_one_and_only_one_that_exists():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# Lower layers first. A module imports only from its own layer or below: what a lower layer needs from a higher one
# is passed in (01 hands splits.prepare the memory cap; 02's plan hands the loss kind to the memory plan).
LAYERS = (("nbutils", "nbutils.chain", "nbutils.embedded", "nbutils.plots", "nbutils.defaults"), ("nbutils.runtime",),
          ("nbutils.data",), ("nbutils.train",), ("nbutils.eval",), ("nbutils.export",),
          ("nbutils.harness", "nbutils.kaggle", "nbutils.plan"))


def layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names if n != "nbutils") or module == "nbutils":
            return i
    raise AssertionError(f"{module} is in no layer of tests/test_imports.py: LAYERS")


def test_every_module_is_in_a_layer():
    assert all(layer(m) >= 0 for m in MODULES)


def test_no_import_goes_up_a_layer_function_level_included():
    up = [f"{MODULES[m].relative_to(ROOT)}: {m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
          for m, targets in static_graph(module_level_only=False).items() for t in sorted(targets) if layer(t) > layer(m)]
    assert not up, "imports up the layers (pass the value in instead):\n" + "\n".join(up)


def test_the_layer_check_finds_an_upward_import():
    assert layer("nbutils.data.splits") < layer("nbutils.train.memory") < layer("nbutils.harness.runner")
    assert layer("nbutils.defaults") < layer("nbutils.runtime.preflight")


def test_no_import_cycle_module_level_or_inside_functions():
    for module_level_only in (True, False):
        cycle = find_cycle(static_graph(module_level_only))
        assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_runtime_never_imports_the_build_tools():
    """The notebooks' wheel leaves harness and kaggle out (pyproject.toml): a runtime import of them would fail there."""
    bad = [f"{MODULES[m].relative_to(ROOT)} imports {t}" for m, targets in static_graph(False).items()
           if m.startswith(RUNTIME) for t in targets if t.startswith(TOOLS)]
    assert not bad, bad


def test_no_notebook_imports_the_build_tools():
    pattern = re.compile(r"^\s*(?:from|import)\s+nbutils\.(?:harness|kaggle)\b|^\s*from\s+nbutils\s+import\s+.*\b(?:harness|kaggle)\b",
                         re.M)
    bad = [f"{p.relative_to(ROOT)}:{p.read_text()[:m.start()].count(chr(10)) + 1}"
           for p in sorted((ROOT / "notebooks").glob("*.py")) for m in pattern.finditer(p.read_text())]
    assert sorted((ROOT / "notebooks").glob("*.py")), "no notebooks found"
    assert not bad, bad


# Runs in a fresh interpreter: imports every module and records each import statement that runs while an nbutils
# module is still executing its body (importlib marks it `__spec__._initializing`): the graph as Python walks it.
PROBE = r"""
import builtins, importlib, json, sys
edges, real_import = set(), builtins.__import__
def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    module = real_import(name, globals, locals, fromlist, level)
    importer = (globals or {}).get("__name__", "")
    spec = getattr(sys.modules.get(importer), "__spec__", None)
    if importer.startswith("nbutils") and getattr(spec, "_initializing", False):
        if level:
            package = globals.get("__package__") or importer.rpartition(".")[0]
            package = package.rsplit(".", level - 1)[0] if level > 1 else package
            name = f"{package}.{name}" if name else package
        if name.startswith("nbutils"):
            for target in [f"{name}.{item}" for item in fromlist or ()] or [name]:
                edges.add((importer, target if target in sys.modules else name))
    return module
builtins.__import__ = recording_import
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"failed": failed, "edges": sorted(e for e in edges if e[0] != e[1])}))
"""


# Starting an interpreter that imports every module takes about 9 s: make test runs it, the quick loop keeps the
# static checks below (module level and inside functions), which read the same imports without running them.
@pytest.mark.integration
def test_every_module_imports_in_a_fresh_interpreter_without_a_cycle():
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sorted(MODULES))], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    graph: dict[str, set[str]] = {}
    for a, b in result["edges"]:
        graph.setdefault(a, set()).add(b)
    assert graph, "the probe recorded no import at all"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle at run time: " + " -> ".join(cycle)
