"""Line budget: each module <= 400 lines, each function <= 60 lines (ISSUE 18), so a file reads in one sitting.

    python tools/line_budget.py [PATH ...]     # default: nbutils bench tests; `make lint` runs it

Prints one line per offender (`path:line: ...`) and exits 1 when there is any. A function's lines run from its
`def` (decorators excluded) to its last line, comments and docstring included: what a reader has to read.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
DEFAULT_PATHS = ("nbutils", "bench", "tests")
ROOT = Path(__file__).resolve().parents[1]


def offenders(path: Path) -> list[str]:
    """Budget breaches in one file, as `path:line: what` lines."""
    text = path.read_text(encoding="utf-8")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    out = []
    n = len(text.splitlines())
    if n > MAX_MODULE_LINES:
        out.append(f"{shown}:1: module has {n} lines (max {MAX_MODULE_LINES}): split it by job")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{shown}:{node.lineno}: function {node.name} has {length} lines "
                           f"(max {MAX_FUNCTION_LINES}): move a step into its own function")
    return out


def python_files(paths: list[str]) -> list[Path]:
    files = []
    for p in map(Path, paths):
        p = p if p.is_absolute() else ROOT / p
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [f for f in files if not {".venv", "build", "__pycache__"} & set(f.parts)]


def main(argv: list[str] | None = None) -> int:
    found = [line for f in python_files(argv or list(DEFAULT_PATHS)) for line in offenders(f)]
    print("\n".join(found or ["line budget: ok"]), file=sys.stderr if found else sys.stdout)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
