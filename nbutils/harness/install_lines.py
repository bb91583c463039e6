"""Install commands in notebook cells, read the way a shell would read them.

`!pip install -qqq \\` followed by the packages on the next lines, a `# comment` after the packages,
quoted specs (`"transformers>=4.0,<5"`), `%pip`, `uv pip`, `python -m pip`, `-r requirements.txt`,
several commands joined by `&&`, `||` or `;` (shell_lists.py: which of them run), and
`subprocess.run([sys.executable, "-m", "pip", "install", ...])` all become `InstallCommand`s. IPython variables
(`$w`, `{path}`) take the value the cell gives them when it has one (branches.py), else stay unknown arguments.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_sdist_filename, parse_wheel_filename

from nbutils.harness.conditions import ALWAYS, CellReach, Evaluator, Reach
from nbutils.harness.platforms import platform
from nbutils.harness.shell_lists import ShellReader, tokens

# Options that take a value in pip or uv pip (`--opt value` and `--opt=value` are both accepted).
VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-f", "--find-links", "-i", "--index-url",
    "--extra-index-url", "-t", "--target", "--prefix", "--root", "--src", "--platform", "--python-version",
    "--implementation", "--abi", "--upgrade-strategy", "--progress-bar", "--cache-dir", "--log", "--proxy",
    "--retries", "--timeout", "--trusted-host", "--cert", "--client-cert", "--global-option", "-C",
    "--config-settings", "--report", "--no-binary", "--only-binary", "--exists-action", "--python", "-p",
    "--index", "--default-index", "--index-strategy", "--torch-backend", "--resolution", "--prerelease",
    "--override", "--group", "--extra", "--keyring-provider", "--link-mode", "--reinstall-package",
    "--upgrade-package", "-P", "--exclude-newer", "--python-platform", "--no-build-isolation-package",
}
# `2>&1`, `> log.txt`, `>>log`: a redirection at the start of a word (`torch>=2` has its `>` inside one).
REDIRECT = re.compile(r"\d*(?:>>?|<)(?:&\d+|\s*[^\s;&|'\"]+)")
# A pip/uv command starts with one of these word sequences (after an optional `!`/`%` and env assignments).
PIP_HEADS = (("pip",), ("pip3",), ("uv", "pip"), ("conda",), ("mamba",), ("micromamba",))
SUBPROCESS_PIP = re.compile(r"""\[[^\[\]]*["']-m["']\s*,\s*["']pip["']\s*,\s*["']install["'][^\[\]]*\]""", re.S)


@dataclass
class Package:
    name: str | None  # canonical distribution name; None when unknown (a variable, a URL without a name)
    spec: str  # as written
    pinned: bool  # `==` / `===` on one version, a URL, or a wheel file: exactly one build


@dataclass
class InstallCommand:
    line: int  # 0-based line of the cell where the command starts
    text: str  # the logical line (continuations joined), for messages
    lines: list[int] = field(default_factory=list)  # the physical lines it spans (0-based)
    reach: Reach = ALWAYS  # whether it runs on the platform the cell was read for
    packages: list[Package] = field(default_factory=list)
    upgrade: bool = False
    no_deps: bool = False
    requirement_files: list[str] = field(default_factory=list)
    unknown: bool = False  # some argument could not be read (a variable, an unreadable -r file)

    @property
    def names(self) -> set[str]:
        """The canonical names of the packages it names."""
        return {p.name for p in self.packages if p.name}


def logical_lines(source: str) -> list[tuple[int, str, list[int], bool]]:
    """(first line, text, physical lines, is shell) per line, a shell/magic line's `\\` continuations joined.

    Python lines come back one per physical line; a `%%bash`/`%%sh` cell is shell throughout.
    """
    lines = source.splitlines()
    whole_shell = bool(lines) and lines[0].strip().split(" ")[0] in ("%%bash", "%%sh", "%%script")
    out, i = [], 0
    while i < len(lines):
        start, text = i, lines[i]
        is_shell = whole_shell and i > 0 or text.lstrip().startswith(("!", "%"))
        while is_shell and text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        out.append((start, text, list(range(start, i + 1)), is_shell))
        i += 1
    return out


def shell_lines(source: str) -> set[int]:
    """Physical line numbers that belong to shell commands or magics (blank them before `ast.parse`)."""
    return {n for _, _, phys, shell in logical_lines(source) if shell for n in phys}


def _strip_redirects(text: str) -> str:
    """Drop redirections outside quotes (`'pandas>=2, <3'` keeps its `<3`)."""
    out, quote, i = [], None, 0
    while i < len(text):
        ch = text[i]
        if quote is None and (i == 0 or text[i - 1].isspace()):
            m = REDIRECT.match(text, i)
            if m:
                out.append(" ")
                i = m.end()
                continue
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        out.append(ch)
        i += 1
    return "".join(out)


def _install_args(words: list[str]) -> list[str] | None:
    """The arguments after `install` when the words are a pip/uv/conda install command, else None."""
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # VAR=value before the command
        words = words[1:]
    if len(words) >= 3 and words[1] == "-m" and re.match(r"^(\S*/)?python[0-9.]*$|^\{sys\.executable\}$|^\$", words[0]):
        words = words[2:]  # python -m pip ...
    if words and words[0] in ("uv",) and len(words) > 1 and words[1] == "pip":
        words = ["uv pip", *words[2:]]
    if not words or not any(words[0] == " ".join(h) or words[0].endswith("/" + h[0]) for h in PIP_HEADS):
        return None
    rest = words[1:]
    while rest and rest[0].startswith("-"):  # global options before the subcommand (pip -q install)
        rest = rest[1:]
    return rest[1:] if rest and rest[0] == "install" else None


def _package(token: str) -> Package:
    if token.startswith(("$", "{")) or "{" in token:
        return Package(None, token, False)
    base = token.rsplit("/", 1)[-1]
    for parse in (parse_wheel_filename, parse_sdist_filename):
        try:
            return Package(canonicalize_name(parse(base)[0]), token, True)
        except (InvalidWheelFilename, ValueError):
            continue
    direct = re.match(r"^[A-Za-z0-9_.-]+(\[[^\]]*\])?\s*@", token)  # name @ url
    if not direct and ("://" in token or token.startswith((".", "/", "~"))):
        egg = re.search(r"#egg=([A-Za-z0-9_.-]+)", token)
        name = egg.group(1) if egg else _repository_name(token)
        return Package(canonicalize_name(name) if name else None, token, True)
    try:
        req = Requirement(token)
    except InvalidRequirement:
        return Package(None, token, False)
    pinned = bool(req.url) or (len(req.specifier) == 1 and next(iter(req.specifier)).operator in ("==", "==="))
    return Package(canonicalize_name(req.name), token, pinned)


def _repository_name(url: str) -> str | None:
    """A VCS URL's package, read as its repository (or `subdirectory=`) name: git+https://github.com/o/unsloth-zoo."""
    if not re.match(r"^(git|hg|svn|bzr)\+", url):
        return None
    sub = re.search(r"[#&]subdirectory=([^&]+)", url)
    path = sub.group(1) if sub else re.sub(r"@[^/]*$", "", url.split("#")[0])
    name = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return name if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) else None


def _read_requirements(path: str, base: Path | None) -> list[str] | None:
    if base is None or path.startswith(("$", "{")):
        return None
    file = (base / path).expanduser()
    try:
        text = file.read_text()
    except OSError:
        return None
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#") and not line.startswith("-"):
            out.append(line)
    return out


def parse_install(args: list[str], line: int, text: str, base: Path | None = None) -> InstallCommand:
    """One install command from its arguments after `install`."""
    cmd = InstallCommand(line, text.strip())
    i = 0
    while i < len(args):
        arg = args[i]
        opt, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if opt in VALUE_OPTIONS:
            value = inline or (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if inline else 2
            if opt in ("-r", "--requirement"):
                cmd.requirement_files.append(value)
                reqs = _read_requirements(value, base)
                cmd.unknown |= reqs is None
                cmd.packages += [_package(r) for r in reqs or []]
            elif opt in ("-e", "--editable"):
                cmd.packages.append(_package(value))
            continue
        if arg in ("-U", "--upgrade", "--force-reinstall", "--reinstall") or re.match(r"^-[a-zA-Z]*U", arg):
            cmd.upgrade = True
        elif arg == "--no-deps":
            cmd.no_deps = True
        elif not arg.startswith("-"):
            pkg = _package(arg)
            cmd.unknown |= pkg.name is None
            cmd.packages.append(pkg)
        i += 1
    return cmd


def _subprocess_installs(source: str) -> list[InstallCommand]:
    out = []
    for m in SUBPROCESS_PIP.finditer(source):
        line = source[:m.start()].count("\n")
        items = []
        try:
            tree = ast.parse(m.group(0), mode="eval").body
            items = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "$?" for e in tree.elts]
        except SyntaxError:
            continue
        at = items.index("install")
        out.append(parse_install([a for a in items[at + 1:] if a != "$?"], line, m.group(0)))
        out[-1].unknown |= "$?" in items[at + 1:]
    return out


def expand(text: str, variables: dict[str, str]) -> str:
    """IPython's expansion of `{name}`, `$name` and `${name}` in a shell line, for the names with a known value."""
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return variables.get(name, m.group(0))
    return re.sub(r"\{([A-Za-z_]\w*)\}|\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", sub, text) if variables else text


def install_commands(source: str, base: Path | None = None, cell: CellReach | None = None,
                     evaluator: Evaluator | None = None) -> list[InstallCommand]:
    """Every install a cell runs: shell/magic lines read as a shell would, and pip run through subprocess.

    `base` is the folder `-r` files are read from (the notebook's folder); without it they count as unknown.
    `cell` (branches.CellWalker's reading of the cell) gives each line its reach and the variables' values;
    `evaluator` decides shell tests (`pip show X || pip install X`) for its platform (default Kaggle).
    """
    evaluator = evaluator or Evaluator(platform("kaggle"))
    out = []
    scripts = _scripts(source, cell)
    for lines, phys, outer in scripts:
        for words, line, reach in ShellReader(evaluator, tokens(lines)).read():
            args = _install_args(words)
            if args is not None:
                text = dict(lines)[line]
                cmd = parse_install(args, line, text, base)
                cmd.lines, cmd.reach = phys[line], reach.within(outer)
                out.append(cmd)
    for cmd in _subprocess_installs(source):
        cmd.lines = [cmd.line]
        cmd.reach = cell.at(cmd.line) if cell else ALWAYS
        out.append(cmd)
    return out


def _scripts(source: str, cell: CellReach | None) -> list[tuple[list[tuple[int, str]], dict[int, list[int]], Reach]]:
    """The shell scripts of a cell: each `!`/`%` line on its own, a %%bash cell as one; (line, text) items with the
    variables expanded, each line's physical lines, and the reach of the script in the cell's Python."""
    logical = logical_lines(source)
    whole = bool(logical) and logical[0][1].strip().split(" ")[0] in ("%%bash", "%%sh", "%%script")
    scripts = []
    for start, text, phys, shell in logical:
        stripped = text.lstrip()
        if not shell or stripped.startswith("%%"):
            continue
        if stripped.startswith("%") and not re.match(r"^%(pip|conda|mamba|uv)\b", stripped):
            continue  # a line magic other than an installer (%env, %cd ...): not shell
        variables = cell.variables.get(start, {}) if cell else {}
        item = (start, _strip_redirects(expand(stripped.lstrip("!%") if not whole else stripped, variables)))
        if whole and scripts:
            scripts[-1][0].append(item)
            scripts[-1][1][start] = phys
        else:
            scripts.append(([item], {start: phys}, cell.at(start) if cell else ALWAYS))
    return scripts
