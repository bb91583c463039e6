"""`python -m nbutils` (and `make map`): the map a newcomer reads first.

The map is read from each package's `__init__` docstring (a list of "- `module`: one line" items), never by
importing a module: printing it costs nothing and pulls in no torch. tests/test_map.py keeps it true.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SUBPACKAGES = ("runtime", "data", "train", "eval", "export", "harness", "kaggle", "plan")
ENTRY = re.compile(r"^- ((?:`\w+`(?:, )?)+): (.*)$")  # "- `detect`, `soup`: what they do"


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def entries(docstring: str) -> list[tuple[list[str], str]]:
    """The "- `mod`: text" items of a package docstring (continuation lines joined), in order."""
    out: list[tuple[list[str], str]] = []
    for line in docstring.splitlines():
        m = ENTRY.match(line)
        if m:
            out.append((re.findall(r"`(\w+)`", m.group(1)), m.group(2).strip()))
        elif out and line.startswith("  ") and line.strip():
            names, text = out[-1]
            out[-1] = (names, f"{text} {line.strip()}")
    return out


def modules(package: Path) -> list[str]:
    """The modules a package holds on disk (what the map must name)."""
    return sorted(p.stem for p in package.glob("*.py") if not p.name.startswith("__"))


def package_map() -> list[tuple[str, str, list[tuple[list[str], str]]]]:
    """(name, summary, entries) for the chain-wide modules, then each subpackage in reading order."""
    top = _docstring(ROOT / "__init__.py")
    rows = [("nbutils", "Chain-wide modules, used by more than one stage.", entries(top.split("Chain-wide modules:")[-1]))]
    for name in SUBPACKAGES:
        doc = _docstring(ROOT / name / "__init__.py")
        rows.append((f"nbutils.{name}", doc.splitlines()[0] if doc else "", entries(doc)))
    return rows


def render() -> str:
    lines = [_docstring(ROOT / "__init__.py").splitlines()[0], ""]
    for name, summary, items in package_map():
        lines.append(f"{name}: {summary}")
        width = max((len(", ".join(n)) for n, _ in items), default=0)
        lines += [f"  {', '.join(n):<{width}}  {text}" for n, text in items]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
