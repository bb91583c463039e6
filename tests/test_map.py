"""`python -m nbutils` prints the package map; these tests keep the map true to the folders."""

import subprocess
import sys

import pytest

from nbutils import __main__ as nbmap

ROOT = nbmap.ROOT


def _named(items) -> list[str]:
    return [name for names, _ in items for name in names]


def test_every_subpackage_on_disk_is_in_the_map():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert on_disk == set(nbmap.SUBPACKAGES)
    top = _named(nbmap.entries(nbmap._docstring(ROOT / "__init__.py").split("Chain-wide modules:")[0]))
    assert top == list(nbmap.SUBPACKAGES), "nbutils/__init__.py lists the subpackages in another order or misses one"


@pytest.mark.parametrize("row", nbmap.package_map(), ids=lambda row: row[0])
def test_each_map_names_exactly_the_modules_on_disk(row):
    name, summary, items = row
    folder = ROOT if name == "nbutils" else ROOT / name.split(".")[1]
    named = _named(items)
    assert summary and all(text for _, text in items)
    assert len(named) == len(set(named)), f"{name}: a module is listed twice"
    missing, stale = set(nbmap.modules(folder)) - set(named), set(named) - set(nbmap.modules(folder))
    assert not missing, f"{folder / '__init__.py'}: add a '- `module`: one line' entry for {sorted(missing)}"
    assert not stale, f"{folder / '__init__.py'}: the map names modules that do not exist: {sorted(stale)}"


def test_entries_join_continuation_lines_and_shared_entries():
    doc = "Title.\n\n- `a`, `b`: first\n  and more.\n- `c`: second\nNot an entry.\n"
    assert nbmap.entries(doc) == [(["a", "b"], "first and more."), (["c"], "second")]


def test_python_m_nbutils_prints_every_module_without_importing_torch():
    out = subprocess.run([sys.executable, "-m", "nbutils"], capture_output=True, text=True, cwd=ROOT.parent)
    assert out.returncode == 0, out.stderr
    for name, _, items in nbmap.package_map():
        assert f"{name}: " in out.stdout
        for names, text in items:
            assert f"{', '.join(names)} " in out.stdout and text in out.stdout
    # Every line a full sentence: a docstring's first line cut mid-sentence shows here.
    cut = [line for line in out.stdout.splitlines() if line.strip() and not line.endswith(".")]
    assert not cut, f"lines of the map that do not end with a full stop (each summary is one sentence): {cut}"
    probe = "import nbutils.__main__ as m, sys; m.render(); print(sorted(k for k in sys.modules if k.startswith('torch')))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"


# Tests mirror the modules: nbutils/<pkg>/<module>.py -> tests/<pkg>/test_<module>.py (top level: tests/test_<module>.py).


def _mirror(module: str):
    package, _, name = module.rpartition("/")
    return ROOT.parent / "tests" / package / f"test_{name}.py"


def test_every_module_has_its_own_test_file():
    found = sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in ROOT.rglob("*.py")
                   if not p.name.startswith("__"))
    missing = [f"{m} -> {_mirror(m).relative_to(ROOT.parent)}" for m in found
               if not _mirror(m).exists()]
    assert not missing, "modules without their own test file (add it, or move their tests there):\n" + "\n".join(missing)
