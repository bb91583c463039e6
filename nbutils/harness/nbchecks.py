"""Static checks on a notebook: the ways a Kaggle background run dies that can be seen without a kernel.

Each check yields Problems with a check id, the cell (and line) and a fix. The cells are read as a run on the
platform executes them (default Kaggle; branches.py decides the branches, install_checks.py judges the installs).
A cell tagged `allow-<check-id>` allows that check for that cell (the harness still reports the allowance).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from nbutils.harness import install_checks as ic
from nbutils.harness.branches import CellWalker, python_source
from nbutils.harness.conditions import CellReach, Evaluator, dotted
from nbutils.harness.install_lines import install_commands, logical_lines, shell_lines
from nbutils.harness.platforms import FACTS, Platform, platform
from nbutils.harness.problems import Problem
from nbutils.runtime.secrets import SECRET_SHAPES

# The notebooks' own install step installs whatever the platform lacks, dependencies included.
INSTALL_CALL = re.compile(r"\bensure_packages\s*\(")
# Calls that need a person (read from the parsed cell: a comment naming one is no call). A background run's kernel
# takes no input (input, getpass raise); notebook_login(), or login() without a token, shows a widget and returns.
BLOCKING_NAMES = ("input", "getpass")  # the builtin, `from getpass import getpass`
BLOCKING_LAST = ("getpass", "notebook_login", "interpreter_login")  # getpass.getpass, huggingface_hub.notebook_login
HUB_LOGIN = "huggingface_hub.login"  # also `login` imported from there (hub_logins)
# A path that exists on one machine only: home dirs, drive letters, or an absolute path outside the system folders
# every Linux image has and outside the linted platform's own (platforms.FACTS paths: /kaggle on Kaggle, /content on
# Colab, /root on both). The other platform's folders are flagged: /kaggle/input does not exist on Colab.
SYSTEM_ROOTS = ("tmp", "dev", "proc", "sys", "usr", "etc", "bin", "lib", "sbin")
PATH_TEXT = re.compile(r"""~/[^"'\s]*|/[A-Za-z0-9_.-]+/[^"'\s]*|[A-Za-z]:[\\/][^"']*""")
ABS_PATH_RE = re.compile(r"""["'](~/[^"'\s]*|/[A-Za-z0-9_.-]+/[^"'\s]*|[A-Za-z]:[\\/][^"']*)["']""")
SHELL_PATH_RE = re.compile(r"""(?:^|[\s=])(~/\S+|/[A-Za-z0-9_.-]+/\S*|[A-Za-z]:[\\/]\S*)""")
# Calls that only look for a path (call -> the argument that names it): another platform's folder there is probed,
# not used; os.environ.get's default is one the environment overrides (the install cell's NBUTILS_INPUT_ROOT).
PROBES = {"os.path.exists": 0, "os.path.isdir": 0, "os.path.isfile": 0, "os.path.lexists": 0, "glob.glob": 0,
          "glob.iglob": 0, "os.environ.get": 1, "os.getenv": 1}
PATH_PROBES = ("exists", "is_dir", "is_file")  # Path(p).exists()
# Non-Python tools that reach the network from a `!` line: the harness's offline guard patches Python's sockets
# only (sandbox.py), so on an internet-off run these would succeed here and fail on Kaggle.
NETWORK_TOOL = re.compile(r"(?:^|[\s;&|(`])(curl|wget|aria2c|git\s+(?:clone|fetch|pull|ls-remote|submodule)|"
                          r"apt(?:-get)?\s+(?:-\S+\s+)*(?:install|update))\b|/dev/(?:tcp|udp)/")
SHOWN_CELLS = 8  # cells listed by number in a message about many
KNOB_TEXT = 80  # a longer string assigned in a cell is a prompt or a template, not a setting


def _python_only(source: str) -> str:
    """Source with IPython magics and shell lines (continuations too) blanked, for the regex checks."""
    shell = shell_lines(source)
    return "\n".join("" if i in shell else ln for i, ln in enumerate(source.splitlines()))


def _tree(source: str) -> ast.Module | None:
    """The cell parsed with its shell and magic lines as placeholders (same line numbers); None if it is not Python."""
    try:
        return ast.parse(python_source(source) or "")
    except SyntaxError:
        return None


def imported_packages(source: str, reach: CellReach | None = None) -> dict[str, tuple[int, str]]:
    """Top-level package -> (1-based line, condition or '') of its first import in a cell, by line; imports in
    branches that never run on the platform are skipped."""
    tree = _tree(source)
    if tree is None:
        return {}
    names: dict[str, tuple[int, str]] = {}
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):  # the first by line, not by depth
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = [node.module]
        else:
            continue
        at = reach.at(node.lineno - 1) if reach is not None else None
        if at is None or not at.never:
            for module in found:
                names.setdefault(module.split(".")[0], (node.lineno, " and ".join(at.unless) if at else ""))
    return dict(sorted(names.items(), key=lambda kv: kv[1][0]))


def path_exists(path: str, plat: Platform) -> bool | None:
    """Does the platform have this path? Its facts' nearest folder decides; None where they say nothing."""
    known = [(k, there) for k, there in plat.paths.items() if path == k or path.startswith(k.rstrip("/") + "/")]
    return max(known, key=lambda kv: len(kv[0]))[1] if known else None


def _platform_path(path: str) -> bool:
    """Is it a folder some platform has (or under one)? Then a probe of it is how a notebook tells platforms apart."""
    return any(path_exists(path, platform(name)) for name in FACTS)


def _probed(tree: ast.AST) -> set[int]:
    """ids of the nodes a probe call only looks at (PROBES, Path(p).exists())."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        call, at = node, PROBES.get(dotted(node.func))
        if at is None and isinstance(node.func, ast.Attribute) and node.func.attr in PATH_PROBES \
                and isinstance(node.func.value, ast.Call) and dotted(node.func.value.func) in ("Path", "pathlib.Path"):
            call, at = node.func.value, 0
        if at is not None and len(call.args) > at:
            out |= {id(n) for n in ast.walk(call.args[at])}
    return out


def _python_paths(source: str, reach: CellReach) -> list[tuple[str, int, bool]]:
    """(path, 1-based line, probed) for each path-shaped string the cell's Python can run on the platform."""
    tree = _tree(source)
    if tree is None:  # not parsed: every quoted path-shaped text counts, as written
        text = _python_only(source)
        return [(m.group(1), _line_of(text, m.start()) or 1, False) for m in ABS_PATH_RE.finditer(text)]
    probed = _probed(tree)
    return [(n.value, n.lineno, id(n) in probed) for n in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and PATH_TEXT.fullmatch(n.value)
            and not reach.at(n.lineno - 1).never]


def machine_paths(source: str, plat: Platform | None = None, reach: CellReach | None = None) -> list[tuple[str, int]]:
    """(path, 1-based line) of the paths in a cell (strings in Python, bare in `!` lines) that the platform (default
    Kaggle) lacks: the author's machine's, or another platform's used outside a probe."""
    plat, reach = plat or platform("kaggle"), reach or CellReach()
    found = _python_paths(source, reach)
    for n, ln in enumerate(source.splitlines()):
        if ln.lstrip().startswith("!") and not reach.at(n).never:
            found += [(m.group(1), n + 1, False) for m in SHELL_PATH_RE.finditer(ln.lstrip()[1:])]
    return [(p, line) for p, line, probed in found if not (p.startswith("/") and p.split("/")[1] in SYSTEM_ROOTS)
            and not path_exists(p, plat) and not (probed and _platform_path(p))]


def hub_logins(sources: list[str]) -> frozenset[str]:
    """The names a notebook calls huggingface_hub.login by (`login`, `hf.login` ...), from its imports in any cell."""
    names = {HUB_LOGIN}
    for node in (n for tree in filter(None, map(_tree, sources)) for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module == "huggingface_hub":
            names |= {a.asname or a.name for a in node.names if a.name == "login"}
        elif isinstance(node, ast.Import):
            names |= {f"{a.asname or a.name}.login" for a in node.names if a.name == "huggingface_hub"}
    return frozenset(names)


def blocking_calls(source: str, reach: CellReach, logins: frozenset[str] = frozenset({HUB_LOGIN})) -> list[tuple[str, int]]:
    """(call, 1-based line) of each call that needs a person and can run on the platform; `logins`: hub_logins()."""
    tree = _tree(source)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        name = dotted(node.func) if isinstance(node, ast.Call) else ""
        tokenless = name in logins and not node.args and not any(k.arg == "token" for k in node.keywords)
        if name and (name in BLOCKING_NAMES or name.rsplit(".", 1)[-1] in BLOCKING_LAST or name.endswith("drive.mount")
                     or tokenless) and not reach.at(node.lineno - 1).never:
            found.append((name, node.lineno))
    return sorted(found, key=lambda f: f[1])


def _blocking_what(call: str) -> str:
    """What a call that needs a person does in a background run (papermill's kernel takes no input)."""
    last = call.rsplit(".", 1)[-1]
    if call in BLOCKING_NAMES or last in ("getpass", "interpreter_login"):
        return f"{call}() asks for typed input, which a background run's kernel does not take: it raises StdinNotImplementedError"
    return (f"{call}() without a token shows a login widget that nobody fills in a background run and returns at once, "
            "not logged in: later Hub calls run without a token (a gated or private model fails there)"
            if last.endswith("login") else f"{call}() asks a person to authorize access; a background run has none to ask")


def widget_imports(source: str, reach: CellReach, plat: Platform | None = None) -> list[int]:
    """1-based lines that import or use a widget progress bar (tqdm.notebook, ipywidgets) and can run; tqdm.auto too
    where the image has ipywidgets (Kaggle's and Colab's do): in a kernel it is that widget, text only without it."""
    tree = _tree(source)
    if tree is None:
        return []
    auto = ("tqdm.auto", "tqdm.autonotebook") if (plat or platform("kaggle")).has_module("ipywidgets") else ()
    widgets, widget = ("tqdm.notebook", "ipywidgets", *auto), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            names = [dotted(node)]
        else:
            continue
        if any(n.startswith(widgets) for n in names) and not reach.at(node.lineno - 1).never:
            widget.append(node.lineno)
    return sorted(set(widget))


def offline_problems(name: str, cells: list[dict], platform_name: str = "kaggle") -> list[Problem]:
    """network-access, before an internet-off run: `!` lines that reach the network with a tool that is not Python
    (curl, wget, git clone, apt-get), which the run's guard does not stop (it refuses Python's connections only)."""
    walker, problems = CellWalker(Evaluator(platform(platform_name))), []
    for i, (cell, src) in enumerate(zip(cells, _sources(cells))):
        if cell.get("cell_type") != "code":
            continue
        reach = walker.walk(src)
        for start, text, _, shell in logical_lines(src):
            command = re.sub(r"(?:^|\s)#.*$", "", text.lstrip().lstrip("!"))  # a shell comment names no tool it runs
            if shell and not reach.at(start).never and (m := NETWORK_TOOL.search(command)):
                problems.append(Problem("network-access", name, i, f"`{text.strip()[:80]}` reaches the network with "
                                        f"{(m.group(1) or '/dev/tcp').split()[0]}, which is not Python: the harness's "
                                        "guard cannot stop it, and with the internet off on Kaggle the line fails",
                                        "ship what it fetches as an input (a dataset or model), or enable internet in "
                                        "kernel-metadata", line=start + 1,
                                        condition=" and ".join(reach.at(start).unless) or None))
    return apply_allowances(problems, cells)


def _install_problems(name: str, i: int, src: str, reach: CellReach, ev: Evaluator, state: ic.Installs,
                      cells: list[str], base: Path | None, imports: dict[str, tuple[int, str]]) -> list[Problem]:
    """The install checks of one cell (install_checks.py), on the installs that can run on the platform; `imports`:
    this cell's own, for an install below an import in the same cell."""
    commands = [c for c in install_commands(src, base, reach, ev) if not c.reach.never]
    lines, plat = src.splitlines(), ev.platform
    call = INSTALL_CALL.search(_python_only(src))
    installer = src[:call.start()].count("\n") if call and not reach.at(src[:call.start()].count("\n")).never else None
    return (ic.stale_problems(name, i, lines, commands, plat, state, imports)
            + ic.unpinned_problems(name, i, lines, commands, plat, state)
            + ic.import_problems(name, i, lines, commands, installer, plat, state, cells)
            + ic.hidden_output_problems(name, i, lines, commands))


def _line_problems(name: str, i: int, src: str, reach: CellReach, plat: Platform,
                   logins: frozenset[str] = frozenset({HUB_LOGIN})) -> list[Problem]:
    """background-process, blocking-input, absolute-path, widget-progress, secret-in-source."""
    problems = []
    def unless(line: int) -> str | None:  # the condition a 1-based line runs under, if any
        return " and ".join(reach.at(line - 1).unless) or None

    for n, ln in enumerate(src.splitlines()):
        s = ln.strip()
        if s.startswith("!") and s.endswith("&") and not s.endswith("&&") and not reach.at(n).never:
            problems.append(Problem("background-process", name, i, f"`{s[:60]}` runs in the background: a background "
                                    "run ends, or the next cell starts, while it still runs",
                                    "run it in the foreground, or start it with subprocess.Popen and wait", line=n + 1))
    for call, line in blocking_calls(src, reach, logins)[:1]:
        problems.append(Problem("blocking-input", name, i, _blocking_what(call), "read secrets with nbutils.runtime."
                                "secrets.get_secret(name) and pass them (a Hub token as token=...); take choices as "
                                "parameters", line=line, condition=unless(line)))
    for path, line in machine_paths(src, plat, reach):
        there = path_exists(path, plat) is False
        problems.append(Problem("absolute-path", name, i, f"path {path!r} does not exist on {plat.label}" if there
                                else f"path {path!r} exists only on one machine",
                                "use nbutils.runtime.environment paths (working/input roots) or a parameter"
                                + (", or a branch for the platform that has it" if there else ""),
                                line=line, condition=unless(line)))
    for line in widget_imports(src, reach, plat)[:1]:
        problems.append(Problem("widget-progress", name, i, "a widget progress bar: a batch run's saved notebook keeps "
                                "its first frame (0%)", "print plain progress lines, as the suite does (nbutils.train."
                                "callbacks.ProgressLog for a Trainer, with disable_tqdm=True), or tqdm's text bar: "
                                "`from tqdm import tqdm`", line=line, condition=unless(line)))
    for label, rx in SECRET_SHAPES.items():
        if m := rx.search(src):
            problems.append(Problem("secret-in-source", name, i, f"looks like a {label} in the source",
                                    "revoke it, remove it, and read it with nbutils.runtime.secrets.get_secret",
                                    line=_line_of(src, m.start())))
    return problems


def _sources(cells: list[dict]) -> list[str]:
    """Each cell's source as one string (nbformat keeps it as a string, or as a list of lines on disk)."""
    return ["".join(src) if isinstance(src := c.get("source", ""), list) else src for c in cells]


def _line_of(src: str, at: int) -> int | None:
    """The 1-based line of a character offset (None when not found)."""
    return src[:at].count("\n") + 1 if at >= 0 else None


def check_cells(name: str, cells: list[dict], base: Path | None = None, platform_name: str = "kaggle") -> list[Problem]:
    """All source-level checks over a list of nbformat cells, read as a run on the platform executes them.

    `base`: the folder `-r` files are read from; `platform_name`: kaggle (a background run) or colab.
    """
    ev = Evaluator(platform(platform_name))
    walker, state = CellWalker(ev), ic.Installs({}, set())
    sources = _sources(cells)
    problems: list[Problem] = []
    logins = hub_logins([src for c, src in zip(cells, sources) if c.get("cell_type") == "code"])
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = sources[i]
        reach = walker.walk(src)
        imports = imported_packages(src, reach)
        problems += _install_problems(name, i, src, reach, ev, state, sources, base, imports)
        problems += _line_problems(name, i, src, reach, ev.platform, logins)
        for module, (line, cond) in imports.items():
            state.imported_at.setdefault(module, (i, line, cond))
    return sorted(problems, key=lambda p: (p.cell if p.cell is not None else -1, p.line or 0))


def check_notebook(path: str | Path, platform_name: str = "kaggle") -> list[Problem]:
    """Static checks on one .ipynb (plus pair drift against its .py when there is one)."""
    import nbformat

    path = Path(path)
    name = path.name
    nb = nbformat.read(path, as_version=4)
    problems = check_cells(name, nb.cells, path.parent, platform_name)
    if not any("parameters" in c.metadata.get("tags", []) for c in nb.cells):
        problems.append(missing_parameters(name, nb.cells))
    if not nb.metadata.get("kernelspec", {}).get("name"):
        problems.append(Problem("missing-kernelspec", name, None, "no kernelspec in the notebook metadata: papermill "
                                "and a batch run do not know which kernel to start",
                                "add a kernelspec (python3) to the notebook metadata (jupytext writes it from the "
                                ".py header)"))
    pair = path.with_suffix(".py")
    problems += committed_outputs(name, nb.cells, pair if pair.exists() else None)
    if pair.exists():
        import jupytext

        source = [(c.cell_type, c.source.strip()) for c in jupytext.read(pair).cells]
        committed = [(c.cell_type, c.source.strip()) for c in nb.cells]
        if source != committed:
            first = next((i for i, (a, b) in enumerate(zip(source, committed)) if a != b), min(len(source), len(committed)))
            problems.append(Problem("pair-drift", name, first, f"differs from {pair.name} (first at this cell)",
                                    f"edit the .py and regenerate the .ipynb: jupytext --to ipynb {pair.name}"))
    return apply_allowances(problems, nb.cells)


def committed_outputs(name: str, cells, pair: Path | None) -> list[Problem]:
    """committed-outputs: the cells that carry outputs (an execution count alone is no output), counted."""
    code = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    carrying = [i for i in code if cells[i].get("outputs")]
    if not carrying:
        return []
    shown = ", ".join(map(str, carrying[:SHOWN_CELLS])) + (", …" if len(carrying) > SHOWN_CELLS else "")
    how = (f"regenerate it from its pair: `jupytext --to ipynb {pair.name}` (it writes no outputs)" if pair else
           f"`jupyter nbconvert --clear-output --inplace {name}`")
    return [Problem("committed-outputs", name, carrying[0],
                    f"{len(carrying)} of {len(code)} code cells carry outputs (cell{'s' if len(carrying) > 1 else ''} "
                    f"{shown}): a background run "
                    "writes its own, so they only make the file large and its diffs unreadable, and can hold what "
                    "an interactive session printed (paths, tokens)", f"clear outputs before committing: {how}")]


def missing_parameters(name: str, cells) -> Problem:
    """missing-parameters, naming the cell to tag (or the settings to move into one)."""
    what = ("no cell is tagged `parameters`: a Kaggle run does not need one, but papermill (and `python -m "
            "nbutils.harness run -p`) can set values only in a copy of the notebook, right after a tagged cell")
    best = None
    for i, cell in enumerate(cells):  # the first cell that sets knobs: where a reader looks for them
        if cell.get("cell_type") == "code" and (found := settings(cell.get("source", "")))[0]:
            best = (i, *found)
            break
    if best is None:
        return Problem("missing-parameters", name, None, what, "add a cell near the top that sets the knobs (model, "
                       "steps, paths) as plain assignments, and tag it `parameters`")
    i, names, only = best
    listed = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    if only:
        return Problem("missing-parameters", name, i, what, f"tag cell {i} `parameters` (it sets {listed})")
    return Problem("missing-parameters", name, i, what, f"move the settings of cell {i} ({listed}) into a cell of "
                   "their own above it and tag that cell `parameters` (values set after the code that reads them "
                   "would change nothing)")


def settings(source) -> tuple[list[str], bool]:
    """Names a cell assigns a literal at top level, and whether that is all the cell does."""
    source = "".join(source) if isinstance(source, list) else source
    try:
        tree = ast.parse(python_source(source) or "")
    except SyntaxError:
        return [], False
    names, others = [], 0
    for stmt in tree.body:
        found = _knobs(stmt) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else []
        names += found
        if not found and not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.List, ast.Tuple, ast.Dict))):
            others += 1  # a literal list (a menu of model names) is neither a knob nor work
    return names, bool(names) and not others


def _knobs(stmt: ast.Assign) -> list[str]:
    """`steps = 60`, `STEPS, LR = 500, 1e-4`: names set to one number, short string, bool or None each."""
    def knob(value: ast.AST) -> bool:
        value = value.operand if isinstance(value, ast.UnaryOp) else value
        return isinstance(value, ast.Constant) and not (isinstance(value.value, str) and (
            "\n" in value.value or len(value.value) > KNOB_TEXT))  # a prompt or template is no knob

    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Name) and knob(value):
        return [target.id]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts) \
            and all(isinstance(t, ast.Name) for t in target.elts) and all(map(knob, value.elts)):
        return [t.id for t in target.elts]
    return []


def apply_allowances(problems: list[Problem], cells) -> list[Problem]:
    """Mark problems in cells tagged allow-<check-id> as allowed (kept in the report)."""
    for p in problems:
        if p.cell is not None and p.cell < len(cells):
            tags = cells[p.cell].get("metadata", {}).get("tags", [])
            p.allowed = p.allowed or f"allow-{p.check}" in tags
    return problems
