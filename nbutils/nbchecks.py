"""Static checks on a notebook: the ways a Kaggle background run dies that can be seen without a kernel.

Each check yields Problems with a check id, the cell index and a fix. A cell tagged
`allow-<check-id>` allows that check for that cell (the harness still reports the allowance).
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# Preinstalled on Kaggle and Colab: upgrading them mid-session leaves the old version imported.
PREINSTALLED = {
    "torch", "torchvision", "torchaudio", "transformers", "protobuf", "numpy", "tensorflow", "jax",
    "accelerate", "datasets", "pandas", "scipy", "huggingface-hub", "huggingface_hub", "tokenizers",
}
INSTALL_RE = re.compile(r"^\s*(?:[!%]\s*)?(?:pip3?|(?:python3?|\S*\{sys\.executable\}\S*)\s+-m\s+pip|conda|mamba|uv\s+pip)"
                        r"\s+install\b(.*)$")
SUBPROCESS_PIP_RE = re.compile(r"""["'](?:-m)["']\s*,\s*["']pip["']\s*,\s*["']install["'](.*)""")
BLOCKING_RE = re.compile(r"\b(input|getpass\.getpass|getpass|notebook_login|interpreter_login|drive\.mount)\s*\(")
# A quoted path that exists on one machine only: home dirs, drive letters, or any absolute path outside
# the Kaggle/Colab roots and the system folders every Linux image has.
SHARED_ROOTS = ("kaggle", "content", "tmp", "dev", "proc", "sys", "usr", "etc", "bin", "lib", "sbin")
ABS_PATH_RE = re.compile(r"""["'](~/[^"'\s]*|/[A-Za-z0-9_.-]+/[^"'\s]*|[A-Za-z]:[\\/][^"']*)["']""")
SHELL_PATH_RE = re.compile(r"""(?:^|[\s=])(~/\S+|/[A-Za-z0-9_.-]+/\S*|[A-Za-z]:[\\/]\S*)""")
SECRET_SHAPES = {
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "OpenAI key": re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"),
    "Kaggle key": re.compile(r"""["']?key["']?\s*[:=]\s*["'][0-9a-f]{32}["']"""),
    "W&B key": re.compile(r"""wandb[^\n]{0,40}["'][0-9a-f]{40}["']""", re.IGNORECASE),
}


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
    """Source with IPython magics and shell lines blanked, so ast can parse it."""
    return "\n".join("" if ln.lstrip().startswith(("!", "%")) else ln for ln in source.splitlines())


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


def installs(source: str) -> list[tuple[str, bool, bool]]:
    """(package, pinned, upgrade) for each package a cell installs with pip/conda."""
    out = []
    for line in _code_lines(source):
        m = INSTALL_RE.match(line) or SUBPROCESS_PIP_RE.search(line)
        if not m:
            continue
        args = m.group(1).replace('"', " ").replace("'", " ").replace(",", " ").replace("]", " ")
        try:
            tokens = shlex.split(args)
        except ValueError:
            tokens = args.split()
        upgrade = any(t in ("-U", "--upgrade") for t in tokens)
        skip_next = False
        for tok in tokens:
            if skip_next:
                skip_next = False
                continue
            if tok in ("-r", "-c", "--find-links", "-f", "--index-url", "-i", "--extra-index-url", "-t", "--target"):
                skip_next = True
                continue
            if tok.startswith("-") or tok.startswith(("$", "{")) or "/" in tok or tok.endswith(".whl"):
                continue
            name = re.split(r"[<>=!~\[ ;@]", tok, maxsplit=1)[0]
            if name and re.match(r"^[A-Za-z0-9_.-]+$", name):
                out.append((name.lower(), "==" in tok or "@" in tok, upgrade))
    return out


def machine_paths(source: str) -> list[str]:
    """Paths in a cell (quoted in Python, bare in `!` lines) that only exist on the author's machine."""
    found = [m.group(1) for m in ABS_PATH_RE.finditer(_python_only(source))]
    for ln in source.splitlines():
        if ln.lstrip().startswith("!"):
            found += [m.group(1) for m in SHELL_PATH_RE.finditer(ln.lstrip()[1:])]
    return [p for p in found if not (p.startswith("/") and p.split("/")[1] in SHARED_ROOTS)]


def _norm(pkg: str) -> str:
    return pkg.lower().replace("-", "_")


def check_cells(name: str, cells: list[dict]) -> list[Problem]:
    """All source-level checks over a list of nbformat cells."""
    problems: list[Problem] = []
    imported: set[str] = set()
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        for pkg, pinned, upgrade in installs(src):
            heavy = imported & {"torch", "transformers"}
            if _norm(pkg) in {_norm(p) for p in imported} or heavy:
                why = f"{pkg} was imported earlier" if _norm(pkg) in {_norm(p) for p in imported} else \
                    f"{', '.join(sorted(heavy))} was imported earlier"
                problems.append(Problem("stale-import", name, i, f"installs {pkg} after {why}",
                                        "move every install into the first code cell, before any import"))
            if _norm(pkg) in {_norm(p) for p in PREINSTALLED} and not pinned:
                verb = "upgrades" if upgrade else "installs"
                problems.append(Problem("unpinned-install", name, i, f"{verb} preinstalled {pkg} without a pin",
                                        f"pin it ({pkg}==X.Y.Z) or leave the preinstalled version alone"))
        for ln in _code_lines(src):
            s = ln.strip()
            if s.startswith("!") and s.endswith("&") and not s.endswith("&&"):
                problems.append(Problem("background-process", name, i, f"`{s[:60]}` runs in the background",
                                        "run it in the foreground, or start it with subprocess.Popen and wait"))
        if BLOCKING_RE.search(_python_only(src)):
            call = BLOCKING_RE.search(_python_only(src)).group(1)
            problems.append(Problem("blocking-input", name, i, f"{call}() waits for a person; a batch run has none",
                                    "read secrets with nbutils.secrets.get_secret(name) and take choices as parameters"))
        if src.lstrip().startswith("%%capture") and installs(src):
            problems.append(Problem("hidden-install-output", name, i, "%%capture hides the output of an install",
                                    "drop %%capture so a failed install shows (use pip -q to keep it short)"))
        for path in machine_paths(src):
            problems.append(Problem("absolute-path", name, i, f"path {path!r} exists only on one machine",
                                    "use nbutils.environment paths (working/input roots) or a parameter"))
        if re.search(r"\btqdm\.notebook\b|from\s+tqdm\.notebook\b|\bipywidgets\b", src) and "tqdm.auto" not in src:
            problems.append(Problem("widget-progress", name, i, "widget-only progress shows nothing in a batch log",
                                    "use tqdm.auto (falls back to text) or nbutils' progress callback"))
        for label, rx in SECRET_SHAPES.items():
            if rx.search(src):
                problems.append(Problem("secret-in-source", name, i, f"looks like a {label} in the source",
                                        "revoke it, remove it, and read it with nbutils.secrets.get_secret"))
        imported |= imported_packages(src)
    return problems


def check_notebook(path: str | Path) -> list[Problem]:
    """Static checks on one .ipynb (plus pair drift against its .py when there is one)."""
    import nbformat

    path = Path(path)
    name = path.name
    nb = nbformat.read(path, as_version=4)
    problems = check_cells(name, nb.cells)
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
            p.allowed = f"allow-{p.check}" in tags
    return problems
