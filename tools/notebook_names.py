"""The chain's notebooks named alike everywhere: README.md, docs/, the notebooks and nbutils/__init__.py.

    python tools/notebook_names.py      # `make lint` runs it

Checked against nbutils/chain.py, the one source of the chain:
- README.md, docs/ (its pages together) and nbutils/__init__.py each name every notebook of the chain, and no text
  names one that is not in it (`06_x`, or `06` in prose);
- a count of notebooks in words ("four notebooks") is the chain's;
- a listing or a range that starts at the first notebook (`01 -> 02 -> 03`, `01 to 04`) runs to the last one, or
  its paragraph names the others (`--through preference` adds 05): the chain told short is how a notebook gets lost;
- no notebook links a relative path (`../docs/planning.md`): on Kaggle and Colab the notebook is alone, so only
  absolute URLs (and links to its own sections, `#...`) resolve.
Prints one `path:line: what` per finding and exits 1 when there is any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbutils import chain  # noqa: E402 -- stdlib only; the path above makes it importable without the venv

NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
STEM = re.compile(r"\b(0[0-9])_[a-z][a-z0-9_]*[a-z0-9]")
# A notebook's number in prose: "01", "05's", not part of a longer number, a version, a path or an identifier.
NUMBER = re.compile(r"(?<![\w.\-:/+])(0[0-9])(?![\w.,:]?\d|_\w)")
ARROW = re.compile(r"\s*(?:->|→)\s*")
RANGE = re.compile(r"(?<![\w.])(0[0-9]) to (0[0-9])(?![\w.]?\d)")
COUNT = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r") notebooks\b", re.I)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def numbers() -> list[str]:
    """The chain's notebook numbers in order: '01', '02', ..."""
    return [nb.split("_", 1)[0] for nb in chain.NOTEBOOKS]


def named(text: str) -> set[str]:
    """The notebook numbers a text names, by stem (`02_train_qlora`) or in prose (`02`)."""
    return {m.group(1) for m in STEM.finditer(text)} | {m.group(1) for m in NUMBER.finditer(text)}


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _listings(paragraph: str) -> list[tuple[int, list[str]]]:
    """(offset, numbers) of each arrow listing (`01 data prep -> 02 train`) and range (`01 to 04`) in a paragraph."""
    found = [(m.start(), [m.group(1), m.group(2)]) for m in RANGE.finditer(paragraph)]
    refs = [(m.start(), m.end(), m.group(1)) for m in NUMBER.finditer(paragraph)]
    refs += [(m.start(), m.end(), m.group(1)) for m in STEM.finditer(paragraph)]
    refs.sort()
    run: list[tuple[int, int, str]] = []
    for ref in refs:
        if run and ARROW.search(paragraph[run[-1][1]:ref[0]]) and len(paragraph[run[-1][1]:ref[0]]) <= 40:
            run.append(ref)
            continue
        if len(run) > 1:
            found.append((run[0][0], [r[2] for r in run]))
        run = [ref]
    if len(run) > 1:
        found.append((run[0][0], [r[2] for r in run]))
    return found


def text_findings(path: str, text: str, must_name_all: bool) -> list[str]:
    """Findings in one text: unknown notebooks, wrong counts, short listings; all of the chain when `must_name_all`."""
    chain_numbers, out = numbers(), []
    for m in STEM.finditer(text):
        if m.group(0) not in chain.NOTEBOOKS:
            out.append(f"{path}:{_line(text, m.start())}: {m.group(0)} is not a notebook of the chain "
                       f"({', '.join(chain.NOTEBOOKS)})")
    for m in COUNT.finditer(text):
        if m.group(1).lower() != NUMBER_WORDS[len(chain_numbers) - 1]:
            out.append(f"{path}:{_line(text, m.start())}: '{m.group(0)}', but the chain has "
                       f"{NUMBER_WORDS[len(chain_numbers) - 1]} (nbutils/chain.py)")
    start = 0
    for paragraph in re.split(r"\n\s*\n", text):
        offset = text.index(paragraph, start)
        start = offset + len(paragraph)
        for pos, listed in _listings(paragraph):
            if listed[0] == chain_numbers[0] and listed[-1] != chain_numbers[-1] \
                    and not set(chain_numbers) <= named(paragraph):
                out.append(f"{path}:{_line(text, offset + pos)}: the chain told from {listed[0]} to {listed[-1]}: "
                           f"name every notebook to {chain_numbers[-1]}, or say where the others come in")
    if must_name_all and not set(chain_numbers) <= named(text):
        missing = sorted(set(chain_numbers) - named(text))
        out.append(f"{path}:1: never names notebook(s) {', '.join(missing)} of the chain")
    return out


def notebook_links(path: str, text: str) -> list[str]:
    """Relative links in a notebook: they point outside it, where Kaggle and Colab have nothing."""
    out = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"(https?://|mailto:|#)", target):
            out.append(f"{path}:{_line(text, m.start())}: links {target!r}, a relative path: on Kaggle and Colab "
                       "it leads nowhere; link the absolute URL (https://github.com/...)")
    return out


def findings(root: Path = ROOT) -> list[str]:
    """Every finding in the repository at `root`."""
    out = []
    for rel in ("README.md", "nbutils/__init__.py"):
        out += text_findings(rel, (root / rel).read_text(encoding="utf-8"), must_name_all=True)
    docs = sorted((root / "docs").glob("*.md"))
    for page in docs:
        out += text_findings(f"docs/{page.name}", page.read_text(encoding="utf-8"), must_name_all=False)
    together = "\n\n".join(p.read_text(encoding="utf-8") for p in docs)
    if not set(numbers()) <= named(together):
        out.append(f"docs/:1: the pages never name notebook(s) {', '.join(sorted(set(numbers()) - named(together)))}")
    for nb in chain.NOTEBOOKS:
        rel = f"notebooks/{nb}.py"
        text = (root / rel).read_text(encoding="utf-8")
        out += text_findings(rel, text, must_name_all=False) + notebook_links(rel, text)
    return out


def main() -> int:
    found = findings()
    print("\n".join(found) if found else f"notebook names: {len(chain.NOTEBOOKS)} notebooks named alike everywhere")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
