"""Static checks on a notebook: the ways a Kaggle background run dies that can be seen without a kernel.

Each check yields Problems with a check id, the cell index and a fix. A cell tagged
`allow-<check-id>` allows that check for that cell (the harness still reports the allowance).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from nbutils.harness.install_lines import InstallCommand, install_commands, shell_lines
from nbutils.runtime.packages import preinstalled_anywhere
from nbutils.runtime.secrets import SECRET_SHAPES

# Imported before the install cell, these keep their old build loaded when the install moves them or a
# library under them (pandas loads pyarrow): Kaggle's template cell `import numpy as np; import pandas as pd`.
HEAVY_MODULES = ("numpy", "pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "torch", "transformers", "tokenizers",
                 "huggingface_hub", "datasets", "accelerate")
# Distribution name -> import name where they differ (the rest: '-' becomes '_').
MODULE_OF = {"scikit-learn": "sklearn", "beautifulsoup4": "bs4", "pillow": "PIL", "opencv-python": "cv2",
             "opencv-python-headless": "cv2", "protobuf": "google", "pyyaml": "yaml", "python-dateutil": "dateutil"}
# The notebooks' own install step installs whatever the platform lacks, dependencies included.
INSTALL_CALL = re.compile(r"\bensure_packages\s*\(")
BLOCKING_RE = re.compile(r"\b(input|getpass\.getpass|getpass|notebook_login|interpreter_login|drive\.mount)\s*\(")
# A quoted path that exists on one machine only: home dirs, drive letters, or any absolute path outside
# the Kaggle/Colab roots and the system folders every Linux image has.
SHARED_ROOTS = ("kaggle", "content", "tmp", "dev", "proc", "sys", "usr", "etc", "bin", "lib", "sbin")
ABS_PATH_RE = re.compile(r"""["'](~/[^"'\s]*|/[A-Za-z0-9_.-]+/[^"'\s]*|[A-Za-z]:[\\/][^"']*)["']""")
SHELL_PATH_RE = re.compile(r"""(?:^|[\s=])(~/\S+|/[A-Za-z0-9_.-]+/\S*|[A-Za-z]:[\\/]\S*)""")


@dataclass
class Problem:
    check: str
    notebook: str
    cell: int | None
    what: str
    fix: str
    allowed: bool = False

    def __str__(self) -> str:
        where = f" cell {self.cell}" if self.cell is not None else ""
        tag = " [allowed]" if self.allowed else ""
        return f"{self.check} {self.notebook}{where}: {self.what} -- {self.fix}{tag}"


def _code_lines(source: str) -> list[str]:
    return source.splitlines()


def _python_only(source: str) -> str:
    """Source with IPython magics and shell lines (continuations too) blanked, so ast can parse it."""
    shell = shell_lines(source)
    return "\n".join("" if i in shell else ln for i, ln in enumerate(source.splitlines()))


def module_of(distribution: str) -> str:
    """The import name of a distribution (scikit-learn -> sklearn), best effort."""
    return MODULE_OF.get(distribution, distribution.replace("-", "_").replace(".", "_"))


def changeable_modules(commands: list[InstallCommand], calls_installer: bool) -> set[str] | None:
    """Import names an install cell can replace; None when it can replace anything (dependencies, unknowns)."""
    if calls_installer or any(not c.no_deps or c.unknown for c in commands):
        return None
    return {module_of(n) for c in commands for n in c.names}


def imported_packages(source: str) -> set[str]:
    """Top-level package names imported by a cell (best effort on magics)."""
    try:
        tree = ast.parse(_python_only(source))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def machine_paths(source: str) -> list[str]:
    """Paths in a cell (quoted in Python, bare in `!` lines) that only exist on the author's machine."""
    found = [m.group(1) for m in ABS_PATH_RE.finditer(_python_only(source))]
    for ln in source.splitlines():
        if ln.lstrip().startswith("!"):
            found += [m.group(1) for m in SHELL_PATH_RE.finditer(ln.lstrip()[1:])]
    return [p for p in found if not (p.startswith("/") and p.split("/")[1] in SHARED_ROOTS)]


def _install_problems(name: str, i: int, src: str, imported_at: dict[str, int], reported: set[int],
                      base: Path | None) -> list[Problem]:
    """stale-import (this cell installs what was imported), unpinned-install, import-before-install (earlier cells)."""
    commands = install_commands(src, base)
    calls_installer = bool(INSTALL_CALL.search(_python_only(src)))
    problems = []
    direct = set()
    for cmd in commands:
        for pkg in cmd.packages:
            if pkg.name and module_of(pkg.name) in imported_at:
                direct.add(module_of(pkg.name))
                problems.append(Problem("stale-import", name, i, f"installs {pkg.name} after cell "
                                        f"{imported_at[module_of(pkg.name)]} imported it; the old version stays loaded",
                                        "move every install into the first code cell, before any import"))
            if pkg.name and preinstalled_anywhere(pkg.name) and not pkg.pinned:  # moving it leaves the old one imported
                verb = "upgrades" if cmd.upgrade else "installs"
                problems.append(Problem("unpinned-install", name, i, f"{verb} preinstalled {pkg.name} without a pin",
                                        f"pin it ({pkg.name}==X.Y.Z) or leave the preinstalled version alone"))
    if not commands and not calls_installer:
        return problems
    can_change = changeable_modules(commands, calls_installer)
    by_cell: dict[int, list[str]] = {}
    for module, cell in imported_at.items():
        if module in HEAVY_MODULES and module not in direct and (can_change is None or module in can_change):
            by_cell.setdefault(cell, []).append(module)
    for cell, modules in sorted(by_cell.items()):
        if cell in reported:
            continue
        reported.add(cell)
        problems.append(Problem("import-before-install", name, cell,
                                f"imports {', '.join(sorted(modules))} before the install in cell {i}, which can replace "
                                "them or a library they load (pandas loads pyarrow); the old builds stay loaded",
                                f"delete this cell or move it below cell {i}: installs go in the first code cell"))
    return problems


def check_cells(name: str, cells: list[dict], base: Path | None = None) -> list[Problem]:
    """All source-level checks over a list of nbformat cells (`base`: the folder `-r` files are read from)."""
    problems: list[Problem] = []
    imported_at: dict[str, int] = {}
    reported: set[int] = set()
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        problems += _install_problems(name, i, src, imported_at, reported, base)
        for ln in _code_lines(src):
            s = ln.strip()
            if s.startswith("!") and s.endswith("&") and not s.endswith("&&"):
                problems.append(Problem("background-process", name, i, f"`{s[:60]}` runs in the background",
                                        "run it in the foreground, or start it with subprocess.Popen and wait"))
        if BLOCKING_RE.search(_python_only(src)):
            call = BLOCKING_RE.search(_python_only(src)).group(1)
            problems.append(Problem("blocking-input", name, i, f"{call}() waits for a person; a batch run has none",
                                    "read secrets with nbutils.runtime.secrets.get_secret(name) and take choices as parameters"))
        if src.lstrip().startswith("%%capture") and install_commands(src, base):
            problems.append(Problem("hidden-install-output", name, i, "%%capture hides the output of an install",
                                    "drop %%capture so a failed install shows (use pip -q to keep it short)"))
        for path in machine_paths(src):
            problems.append(Problem("absolute-path", name, i, f"path {path!r} exists only on one machine",
                                    "use nbutils.runtime.environment paths (working/input roots) or a parameter"))
        if re.search(r"\btqdm\.notebook\b|from\s+tqdm\.notebook\b|\bipywidgets\b", src) and "tqdm.auto" not in src:
            problems.append(Problem("widget-progress", name, i, "widget-only progress shows nothing in a batch log",
                                    "use tqdm.auto (falls back to text) or nbutils' progress callback"))
        for label, rx in SECRET_SHAPES.items():
            if rx.search(src):
                problems.append(Problem("secret-in-source", name, i, f"looks like a {label} in the source",
                                        "revoke it, remove it, and read it with nbutils.runtime.secrets.get_secret"))
        for module in imported_packages(src):
            imported_at.setdefault(module, i)
    return sorted(problems, key=lambda p: (p.cell if p.cell is not None else -1))


def check_notebook(path: str | Path) -> list[Problem]:
    """Static checks on one .ipynb (plus pair drift against its .py when there is one)."""
    import nbformat

    path = Path(path)
    name = path.name
    nb = nbformat.read(path, as_version=4)
    problems = check_cells(name, nb.cells, path.parent)
    if not any("parameters" in c.metadata.get("tags", []) for c in nb.cells):
        problems.append(Problem("missing-parameters", name, None, "no cell is tagged `parameters`",
                                "tag the cell holding the knobs `parameters` so papermill and batch runs can set them"))
    if not nb.metadata.get("kernelspec", {}).get("name"):
        problems.append(Problem("missing-kernelspec", name, None, "no kernelspec in the notebook metadata",
                                "add kernelspec python3 (make sync writes it from the .py header)"))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count")):
            problems.append(Problem("committed-outputs", name, i, "the committed notebook carries outputs",
                                    "regenerate it without outputs: make sync"))
            break
    pair = path.with_suffix(".py")
    if pair.exists():
        import jupytext

        source = [(c.cell_type, c.source.strip()) for c in jupytext.read(pair).cells]
        committed = [(c.cell_type, c.source.strip()) for c in nb.cells]
        if source != committed:
            first = next((i for i, (a, b) in enumerate(zip(source, committed)) if a != b), min(len(source), len(committed)))
            problems.append(Problem("pair-drift", name, first, f"differs from {pair.name} (first at this cell)",
                                    "edit the .py and run make sync to regenerate the .ipynb"))
    return apply_allowances(problems, nb.cells)


def apply_allowances(problems: list[Problem], cells) -> list[Problem]:
    """Mark problems in cells tagged allow-<check-id> as allowed (kept in the report)."""
    for p in problems:
        if p.cell is not None and p.cell < len(cells):
            tags = cells[p.cell].get("metadata", {}).get("tags", [])
            p.allowed = p.allowed or f"allow-{p.check}" in tags
    return problems
