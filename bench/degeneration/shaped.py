"""Healthy documents in the shapes that look like degeneration to a careless rule, made from text on the machine.

- `ruled`: documentation in every script of the gettext catalogs (Chinese and Ukrainian among them): sections of
  translated messages under titles, separated by ruler lines of one repeated character (`~` x 78, `====`, `───`),
  after blank lines, or underlining their title.
- `opened`: a document that opens with an emoji, a byte-order mark and a ruler, or CJK punctuation; it is always
  sampled from its start (`corpus.snippet`), since what is judged is the opening.
- `output`: a short program in a code block with its sample output, which repeats one short line two to four times;
  sampled from its start, as an answer that shows it would be.
- `commands`: lists of shell commands, as install guides write them: `pip install` / `pip uninstall` of the
  installed distributions, `apt-get install` of the system's packages, `python -m` and `git clone` lines.
Each document's source names what it was made from, so it falls in the tuning or the reported half by that name.
"""

from __future__ import annotations

import functools
import glob
import os
import random
import re
import zlib

from bench.degeneration import corpus
from bench.degeneration.corpus import SITE, Doc

RULER_CHARS = "=-~*#_+.─━═＝－～"
RULER_WIDTHS = [10, 20, 30, 40, 50, 60, 70, 72, 76, 78, 79, 80, 88, 100, 120]
EMOJI = ["🚀", "✨", "👉", "📦", "🔥", "✅", "⚠️", "💡", "🎉", "📖", "🛠️", "👋"]
CJK_OPENERS = ["【", "「", "『", "（", "《", "。", "、", "・", "〈", "“"]


def _ruler(rng: random.Random, title: str) -> str:
    c = rng.choice(RULER_CHARS)
    wide = c in "─━═＝－～"
    width = len(title) if rng.random() < 0.3 else rng.choice(RULER_WIDTHS) // (2 if wide else 1)
    return c * max(3, min(width, 120 // (2 if wide else 1)))  # wider than 120 columns is no ruler (detect)


def _ruled(doc: Doc, rng: random.Random) -> str:
    paragraphs = [p.strip() for p in doc.text.split("\n\n") if p.strip()]
    titles = [p for p in paragraphs if len(p) < 40] or paragraphs[:1]
    parts, i = [], 0
    while i < min(len(paragraphs), 60):
        step, title = rng.randint(2, 5), rng.choice(titles)
        ruler = _ruler(rng, title)
        head = f"{title}\n{ruler}" if rng.random() < 0.5 else f"{ruler}\n{title}\n{ruler}"
        parts.append("\n" * rng.randint(1, 3) + head + "\n\n" + "\n\n".join(paragraphs[i:i + step]))
        i += step
        if rng.random() < 0.3:
            parts.append("\n\n" + _ruler(rng, title))  # a ruler alone between sections
    return "".join(parts).strip("\n")


def ruled(prose: list[Doc]) -> list[Doc]:
    """Translated messages laid out as documentation with rulers, one document per catalog and language."""
    return [Doc("ruled", "ruled:" + d.source, _ruled(d, random.Random(d.source)), d.script) for d in prose]


def _opening(rng: random.Random, text: str, script: str) -> str:
    first, _, rest = text.partition("\n")
    kind = rng.choice(["emoji", "bom", "cjk"]) if script in ("han", "japanese", "hangul") else rng.choice(
        ["emoji", "emoji", "bom"])
    if kind == "emoji":
        return f"{rng.choice(EMOJI)} {first}\n{rest}"
    if kind == "bom":
        ruler = rng.choice("=-~#*") * rng.choice([min(len(first), 120), 20, 40, 60, 80])
        return f"\ufeff{ruler}\n{first}\n{ruler}\n{rest}"
    return f"{rng.choice(CJK_OPENERS)}{first}\n{rest}"


def opened(docs: list[Doc]) -> list[Doc]:
    """Beginnings of documents (READMEs, markdown, translated prose) with an emoji, a BOM and a ruler, or CJK marks."""
    out = []
    for d in docs:
        if d.kind in ("readme", "markdown", "prose") and zlib_pick(d.source, 4):
            rng = random.Random(d.source)
            start = rng.randrange(max(1, len(d.text) - 3000))
            start = d.text.rfind("\n\n", 0, start) + 2 if start else 0
            out.append(Doc("opened", "opened:" + d.source, _opening(rng, d.text[start:start + 3000].lstrip(), d.script),
                           d.script))
    return out


def zlib_pick(source: str, every: int) -> bool:
    """One document in `every`, chosen by a hash of its source: the same ones on every checkout."""
    return zlib.crc32(source.encode()) % every == 0


def _program(rng: random.Random, line: str) -> tuple[str, str]:
    k = rng.randint(2, 4)
    quoted = line.replace('"', "'")
    code = rng.choice([f'for _ in range({k}):\n    print("{quoted}")', f'print("{quoted}\\n" * {k}, end="")',
                       f'>>> for i in range({k}):\n...     print("{quoted}")\n...'])
    return code, "\n".join([line] * k)


def output(docs: list[Doc], n: int = 120) -> list[Doc]:
    """Markdown with code blocks whose sample output says one short line a few times (a loop that is not one)."""
    lines = sorted({s.strip() for d in docs if d.kind in ("readme", "docstring") for s in d.text.split("\n")
                    if 8 <= len(s.strip()) <= 60 and s.strip()[0].isalpha() and "`" not in s})
    prose = [d for d in docs if d.kind in ("readme", "markdown")]
    out = []
    for i in range(n if lines and prose else 0):
        rng = random.Random(f"output-{i}")
        parts = []
        for _ in range(rng.randint(2, 4)):
            doc = rng.choice(prose)
            s = rng.randrange(max(1, len(doc.text) - 400))
            code, printed = _program(rng, rng.choice(lines))
            fence = rng.choice(["```", "```python", "```pycon"])
            said = doc.text[s:s + rng.randint(100, 400)].replace("```", "").strip()  # its own blocks cut in two
            parts.append(f"{said}\n\n{fence}\n{code}\n```\n\nOutput:\n\n```\n"
                         f"{printed}\n```\n")
        out.append(Doc("output", f"output-{i}", "\n".join(parts)))
    return out


def _installed() -> list[tuple[str, str]]:
    found = []
    for path in sorted(glob.glob(os.path.join(SITE, "*.dist-info"))):
        m = re.match(r"(.+)-([^-]+)\.dist-info$", os.path.basename(path))
        if m:
            found.append((m.group(1).replace("_", "-").lower(), m.group(2)))
    return found


def _system_packages() -> list[str]:
    try:
        with open("/var/lib/dpkg/status", encoding="utf-8") as f:
            return sorted(set(re.findall(r"^Package: (\S+)", f.read(), re.M)))
    except OSError:
        return []


def _command(rng: random.Random, dists: list[tuple[str, str]], debs: list[str], kinds: list[int]) -> str:
    name, version = rng.choice(dists)
    kind = rng.choice(kinds)
    if kind == 0:
        return f"pip install {' '.join(rng.choice(dists)[0] for _ in range(rng.randint(1, 4)))}"
    if kind == 1:
        return f"pip install {name}=={version}"
    if kind == 2:
        return f"pip uninstall -y {name}"
    if kind == 3:
        return f"python -m pip install -U {name}"
    if kind == 4 and debs:
        return f"sudo apt-get install -y {' '.join(rng.choice(debs) for _ in range(rng.randint(1, 3)))}"
    if kind == 5:
        return f"python -m {name.replace('-', '_')} --help"
    return f"git clone https://github.com/{name}/{name}.git && cd {name}"


def commands(n: int = 120) -> list[Doc]:
    """Install guides: lists of 4-30 shell commands, bare, with `$ ` prompts or in a fenced block."""
    dists, debs = _installed(), _system_packages()
    out = []
    for i in range(n if dists else 0):
        rng = random.Random(f"commands-{i}")
        blocks = []
        for _ in range(rng.randint(1, 4)):
            kinds = rng.sample(range(7), rng.randint(1, 3))  # a guide's block installs, or removes, or clones
            lines = [_command(rng, dists, debs, kinds) for _ in range(rng.randint(4, 30))]
            prompt = rng.choice(["", "", "$ "])
            body = "\n".join(prompt + ln for ln in lines)
            blocks.append(rng.choice([body, f"```bash\n{body}\n```", f"```\n{body}\n```"]))
        out.append(Doc("commands", f"commands-{i}", "\n\n".join(blocks)))
    return out


def documents(docs: list[Doc]) -> list[Doc]:
    """Every shaped document, made from `docs` (the corpus's) and the system's package lists."""
    prose = [d for d in docs if d.kind == "prose" and d.source.endswith(".mo") and zlib_pick(d.source, 3)]
    return ruled(prose) + opened(docs) + output(docs) + commands()


@functools.lru_cache(maxsize=1)
def _everything() -> tuple[Doc, ...]:
    base = corpus.documents()
    return tuple(base + documents(base))


def everything() -> list[Doc]:
    """The corpus's documents and the shaped ones made from them (built once per process)."""
    return list(_everything())
