"""A labelled set for the degeneration detector, built only from text shipped with Python and installed packages.

Healthy: docstrings and source code of stdlib modules, licenses, package READMEs and changelogs,
markdown tables and numbered lists found in them, and the little non-English prose that ships
(CPython's CJK codec test texts, a French .po file, example sentences in package docstrings).
Documents are split into a dev half (used while tuning the detector) and a held-out half by a
hash of their source path, so the held-out figures come from text the rules were not tuned on.

Degenerate: a healthy prefix (or none) followed by a procedural corruption of one class; each
sample carries `onset`, the character offset where it becomes degenerate (for loops: where the
first repetition starts; the first copy of a unit is ordinary text) and `start`, where the
corrupted continuation starts. Parameters vary widely (periods of 1 to ~400 characters, several
vocabulary sources, separators, templates) so the detector cannot be fitted to one shape.
"""

from __future__ import annotations

import ast
import glob
import os
import random
import re
import sysconfig
import zlib
from dataclasses import dataclass

CLASSES = ["char-repeat", "token-repeat", "phrase-loop", "sentence-loop", "multi-sentence-loop", "multi-line-loop",
           "prompt-echo", "counting-loop", "word-soup", "subword-soup", "unicode-junk", "empty-special"]
STDLIB = sysconfig.get_paths()["stdlib"]
SITE = sysconfig.get_paths()["purelib"]
# Example sentences in other languages that packages ship inside docstrings and tests.
NON_ENGLISH_FILES = [
    "transformers/models/fsmt/modeling_fsmt.py", "transformers/models/fsmt/tokenization_fsmt.py",
    "transformers/models/mbart/tokenization_mbart.py", "transformers/models/m2m_100/tokenization_m2m_100.py",
    "transformers/models/cpmant/modeling_cpmant.py", "transformers/models/marian/tokenization_marian.py",
    "transformers/models/nllb/tokenization_nllb.py", "transformers/models/t5/modeling_t5.py",
    "transformers/models/gpt_neox_japanese/tokenization_gpt_neox_japanese.py", "charset_normalizer/__init__.py",
    "numpy/_core/strings.py", "papermill/tests/test_iorw.py", "pyarrow/tests/test_io.py", "rich/__main__.py",
]


@dataclass
class Doc:
    kind: str
    source: str
    text: str


def _read(path: str, limit: int = 300_000) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError):
        return ""


def _docstrings(src: str) -> str:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return ""
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
    return "\n\n".join(dict.fromkeys(d for n in nodes if (d := ast.get_docstring(n)) and len(d) > 40))


def _non_english_lines(text: str) -> list[str]:
    """String literals / lines where most words are written in a non-Latin script or carry diacritics."""
    out = []
    for line in text.splitlines():
        for chunk in re.findall(r"[\"']([^\"'\\]{25,})[\"']", line) or [line]:
            words = re.findall(r"[^\W\d_]{2,}", chunk)
            if len(words) >= 4 and sum(not w.isascii() for w in words) >= 0.5 * len(words):
                out.append(chunk.strip())
    return out


def documents() -> list[Doc]:
    """Every healthy source document, in a fixed order."""
    docs: list[Doc] = []
    for path in sorted(glob.glob(os.path.join(STDLIB, "*.py")) + glob.glob(os.path.join(STDLIB, "*", "*.py"))):
        if "/test" in path or "/idlelib/" in path or os.path.getsize(path) < 4000:
            continue
        src = _read(path)
        if src:
            docs.append(Doc("code", path, src))
            if len(doc := _docstrings(src)) > 400:
                docs.append(Doc("docstring", path + "#doc", doc))
    meta = sorted(glob.glob(os.path.join(SITE, "*.dist-info", "METADATA")))
    for path in meta:
        body = _read(path).split("\n\n", 1)[-1]
        if len(body) > 800:
            docs.append(Doc("readme", path, body))
        m = re.search(r"^(#+ *)?(changelog|change log|history|release notes)\s*$", body, re.I | re.M)
        if m and len(body) - m.start() > 800:
            docs.append(Doc("changelog", path + "#changes", body[m.start():]))
        tables = re.findall(r"(?:^[^\n]*\n)?(?:^\|[^\n]*\|[ \t]*\n){3,}", body, re.M)
        if tables:
            docs.append(Doc("table", path + "#tables", "\n\n".join(tables)))
        numbered = re.findall(r"(?:^[^\n]*\n)?(?:^ {0,3}\d{1,2}[.)] [^\n]+\n(?:^ {3,}[^\n]+\n)*){3,}", body, re.M)
        if numbered:
            docs.append(Doc("numbered", path + "#numbered", "\n\n".join(numbered)))
    for pattern in ("*.dist-info/licenses/**/*", "*.dist-info/LICEN[CS]E*", "*.dist-info/COPYING*"):
        for path in sorted(glob.glob(os.path.join(SITE, pattern), recursive=True)):
            if os.path.isfile(path) and len(text := _read(path)) > 400:
                docs.append(Doc("license", path, text))
    docs.append(Doc("license", "stdlib/LICENSE.txt", _read(os.path.join(STDLIB, "LICENSE.txt"))))
    for path in sorted(glob.glob(os.path.join(SITE, "*", "**", "*.md"), recursive=True)
                       + glob.glob(os.path.join(SITE, "*", "**", "*.rst"), recursive=True)
                       + glob.glob(os.path.join(SITE, "*", "**", "*.txt"), recursive=True)):
        if ".dist-info" in path or "/grammar" in path or not 1500 < os.path.getsize(path) < 300_000:
            continue
        text = _read(path)
        if text and " the " in text:  # prose, not data tables or word lists
            docs.append(Doc("readme", path, text))
    seen: set[str] = set()
    for path in sorted(glob.glob(os.path.join(STDLIB, "test", "cjkencodings", "*-utf8.txt"))):
        text = _read(path)
        if text and text not in seen:
            seen.add(text)
            docs.append(Doc("non-english", path, text))
    for path in sorted(glob.glob(os.path.join(SITE, "tornado", "**", "*.po"), recursive=True)):
        docs.append(Doc("non-english", path, "\n".join(re.findall(r'msgstr "(.+)"', _read(path)))))
    sentences = [s for rel in NON_ENGLISH_FILES for s in _non_english_lines(_read(os.path.join(SITE, rel)))]
    sentences += _non_english_lines(_read(os.path.join(STDLIB, "test", "encoded_modules", "__init__.py")))
    for i, s in enumerate(dict.fromkeys(sentences)):
        docs.append(Doc("non-english", f"sentence-{i}", s))
    return [d for d in docs if d.text.strip()]


def is_heldout(doc: Doc) -> bool:
    return zlib.crc32(doc.source.encode()) % 2 == 1


def snippet(doc: Doc, rng: random.Random, length: int | None = None) -> str:
    """A piece of `doc` of 100-3000 characters (log-uniform) starting at a line start."""
    length = length or int(10 ** rng.uniform(2, 3.48))
    text = doc.text
    if len(text) <= length:
        return text.strip()
    starts = [0] + [m.end() for m in re.finditer(r"\n", text[: len(text) - length])]
    s = rng.choice(starts)
    return text[s:s + length].strip()


def healthy_snippets(docs: list[Doc], n: int, rng: random.Random) -> list[dict]:
    """n healthy samples, kinds sampled evenly so that small kinds (tables, non-English) are represented."""
    by_kind: dict[str, list[Doc]] = {}
    for d in docs:
        by_kind.setdefault(d.kind, []).append(d)
    kinds = sorted(by_kind)
    out = []
    while len(out) < n:
        kind = kinds[len(out) % len(kinds)]
        text = snippet(rng.choice(by_kind[kind]), rng)
        if len(text) >= 40:
            out.append({"kind": kind, "text": text})
    return out


# ---- corruptions ------------------------------------------------------------------------------------------------

SPECIALS = ["</s>", "<s>", "<pad>", "<unk>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<eos>",
            "[PAD]", "[SEP]", "<|eot|>", "<end_of_turn>", "<|end_of_text|>"]
CHAR_POOL = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" * 3 + "0123456789" + "!?.,;:*-=#~_)" +
             "éüßçЖжщ中好的のあ한글αω" + "😀🙂👍")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?。])\s+", text) if 20 <= len(s.strip()) <= 250 and "\n\n" not in s]


class Material:
    """Words, sentences and lines to build corruptions from, with several vocabulary sources."""

    def __init__(self, docs: list[Doc]):
        prose = [d for d in docs if d.kind in ("docstring", "readme", "license", "changelog")]
        self.docs = docs
        self.sentences = [s for d in prose for s in _sentences(d.text)][:20000]
        words = [w for d in prose for w in re.findall(r"[A-Za-z][a-z]+", d.text)]
        self.vocab = {
            "types": sorted({w.lower() for w in words}),  # uniform over distinct words: content words dominate
            "running": words[:200000],  # frequency-weighted: function words at their natural rate
            "code": sorted({w for d in docs if d.kind == "code" for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", d.text)}),
            "non-ascii": sorted({w for d in docs if d.kind == "non-english" for w in re.findall(r"[^\W\d_]{2,}", d.text)
                                 if not w.isascii()}) or ["слово"],
        }

    def words(self, rng: random.Random, k: int, source: str | None = None) -> list[str]:
        source = source or rng.choice(["types", "types", "running", "code", "non-ascii"])
        pool = self.vocab[source]
        return [rng.choice(pool) for _ in range(k)]

    def lines(self, rng: random.Random, lo: int, hi: int) -> str:
        doc = rng.choice(self.docs)
        lines = [ln for ln in doc.text.splitlines() if ln.strip()]
        if len(lines) < 2:
            return doc.text[:hi]
        start = rng.randrange(len(lines))
        unit = "\n".join(lines[start:start + rng.randint(2, 8)])[:hi]
        return unit if len(unit) >= lo else unit + "\n" + rng.choice(self.sentences)


def _mojibake(rng: random.Random, m: Material) -> str:
    src = rng.choice([" ".join(m.words(rng, rng.randint(4, 30), "non-ascii")),
                      "It’s “quoted” – a dash — ‘single’ … café, naïve, über, façade, São Paulo, Straße."])
    return src.encode("utf-8").decode(rng.choice(["latin-1", "cp1252"]), errors="replace")


def corrupt(cls: str, prefix: str, m: Material, rng: random.Random) -> tuple[str, int, int]:
    """prefix + a degenerate continuation of class `cls` -> (text, onset, start)."""
    if cls == "empty-special":
        k = rng.randint(1, 12)
        text = rng.choice(["", " ", "\n\n", " \t\n ", "".join(rng.choice(SPECIALS) for _ in range(k)),
                           rng.choice(SPECIALS) + rng.choice(["<pad>", "[PAD]", "</s>"]) * k,
                           " ".join(rng.choice(SPECIALS) for _ in range(k)) + "\n"])
        return text, 0, 0
    sep = "" if not prefix or prefix.endswith((" ", "\n")) else rng.choice([" ", "\n", "\n\n"])
    head = prefix + sep
    start = len(head)
    if cls == "char-repeat":
        c = rng.choice(CHAR_POOL)
        return head + c * rng.randint(30, 400), start, start
    if cls == "token-repeat":
        tok = rng.choice([m.words(rng, 1)[0], m.words(rng, 1, "code")[0], str(rng.randint(0, 999)),
                          rng.choice("中好的のあЖ"), rng.choice(m.words(rng, 1))[:3]])
        joiner = rng.choice([" ", " ", ", ", "\n", " - ", "", "|", ". "])
        unit = tok + joiner
        return head + unit * rng.randint(10, 150), start + len(unit), start
    if cls == "phrase-loop":
        if rng.random() < 0.5:
            unit = " ".join(m.words(rng, rng.randint(2, 8)))
        else:
            s = rng.choice(m.sentences).split()
            i = rng.randrange(len(s))
            unit = " ".join(s[i:i + rng.randint(2, 8)])
        unit += rng.choice([" ", ", ", ". ", "\n", "! ", " - "])
        return head + unit * rng.randint(4, 40), start + len(unit), start
    if cls in ("sentence-loop", "multi-sentence-loop"):
        k = 1 if cls == "sentence-loop" else rng.randint(2, 4)
        unit = " ".join(rng.choice(m.sentences) for _ in range(k))[:420] + rng.choice([" ", " ", "\n", "\n\n"])
        return head + unit * rng.randint(3, 8), start + len(unit), start
    if cls == "multi-line-loop":
        unit = m.lines(rng, 20, 420) + "\n"
        return head + unit * rng.randint(3, 8), start + len(unit), start
    if cls == "prompt-echo":
        prompt = " ".join(rng.choice(m.sentences) for _ in range(rng.randint(1, 3)))[: rng.randint(60, 360)]
        unit = rng.choice(["{p}\n", "### Instruction:\n{p}\n\n### Response:\n", "User: {p}\nAssistant: ",
                           "Q: {p}\nA: ", "{p} ", "<|user|>\n{p}\n<|assistant|>\n"]).format(p=prompt)
        return head + unit * rng.randint(3, 6), start + len(unit), start
    if cls == "counting-loop":
        body = " ".join(m.words(rng, rng.randint(2, 8))) if rng.random() < 0.6 else rng.choice(m.sentences)[:160]
        form = rng.choice(["Step {n}: {v}.", "{n}. {v}", "Item {n} - {v};", "({n}) {v}", "Example {n}: {v}",
                           "{v} {n}", "Chapter {n}\n{v}\n", "Q{n}: {v}?", "{v} #{n}", "| {n} | {v} |", "The {n}th {v}",
                           "- [{n}] {v}", "Day {n}: {v}"])
        first, step = rng.randint(0, 120), rng.choice([1, 1, 1, 2, 5, 10, -1])
        joiner = rng.choice([" ", "\n", "\n", "\n\n"])
        parts = [form.format(n=first + i * step, v=body) for i in range(rng.randint(4, 30))]
        return head + joiner.join(parts), start + len(parts[0] + joiner), start
    if cls == "word-soup":
        words = m.words(rng, rng.randint(30, 150), rng.choice(["types", "types", "running", "code"]))
        if rng.random() < 0.4:  # sprinkle punctuation and capitals, as sampled soup often has
            words = [w + rng.choice([",", ".", ""]) if rng.random() < 0.12 else w for w in words]
            words = [w.capitalize() if i and words[i - 1].endswith(".") else w for i, w in enumerate(words)]
        return head + " ".join(words), start, start
    if cls == "subword-soup":
        words = m.words(rng, 400, rng.choice(["types", "running", "code"]))
        frags = []
        for w in words:
            i = rng.randrange(max(1, len(w) - 1))
            frags.append(w[i:i + rng.randint(1, 4)])
        style = rng.choice(["Ġ", "▁", "##", "plain", "glued", "bytes"])
        n = rng.randint(20, 100)
        if style in ("Ġ", "▁", "##"):
            body = " ".join(style + f if rng.random() < 0.6 else f for f in frags[:n])
        elif style == "plain":
            body = " ".join(frags[:n])
        elif style == "glued":
            cuts = [0]
            while len(cuts) <= n:
                cuts.append(cuts[-1] + rng.randint(2, 4))
            body = " ".join("".join(frags[a:b]) for a, b in zip(cuts, cuts[1:]))
        else:
            body = "".join(rng.choice(["Ġ", "Ċ", "âĢĻ", "ĠĠ", ""]) + f for f in frags[:n])
        return head + body, start, start
    if cls == "unicode-junk":
        kind = rng.choice(["random", "mojibake", "replacement", "invisible", "private", "zalgo"])
        if kind == "random":
            ranges = [(0x400, 0x4FF), (0x4E00, 0x9FFF), (0x600, 0x6FF), (0x370, 0x3FF), (0x21, 0x7E), (0xE0, 0x17F),
                      (0x900, 0x97F), (0x2580, 0x259F), (0x1F300, 0x1F5FF), (0xAC00, 0xD7A3), (0x0E00, 0x0E7F)]
            picked = rng.sample(ranges, rng.randint(2, 5))
            body = "".join(chr(rng.randint(*rng.choice(picked))) for _ in range(rng.randint(20, 200)))
        elif kind == "mojibake":
            body = _mojibake(rng, m)
        elif kind == "replacement":
            body = " ".join(w + "\ufffd" * rng.randint(1, 3) for w in m.words(rng, rng.randint(5, 30)))
        elif kind == "invisible":
            body = "".join(w + rng.choice(["\u200b", "\u200d", "\x07", "\x1b", "\ufeff", "\x00", "\u2060"])
                           for w in m.words(rng, rng.randint(10, 60)))
        elif kind == "private":
            body = " ".join(w + chr(rng.randint(0xE000, 0xF8FF)) for w in m.words(rng, rng.randint(5, 40)))
        else:
            body = "".join(c + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(3, 8)))
                           for c in " ".join(m.words(rng, rng.randint(3, 20))))
        return head + body, start, start
    raise ValueError(cls)


def build(seed: int = 0, heldout: bool = False, n_healthy: int = 800, per_class: int = 60,
          docs: list[Doc] | None = None) -> tuple[list[dict], list[dict]]:
    """(healthy, degenerate) samples from the dev or the held-out half of the documents."""
    rng = random.Random(seed)
    docs = [d for d in (docs or documents()) if is_heldout(d) == heldout]
    healthy = healthy_snippets(docs, n_healthy, rng)
    material = Material(docs)
    degenerate = []
    for cls in CLASSES:
        for _ in range(per_class):
            prefix = "" if rng.random() < 0.2 else snippet(rng.choice(docs), rng, rng.randint(20, 1500))
            text, onset, start = corrupt(cls, prefix, material, rng)
            degenerate.append({"class": cls, "text": text, "onset": onset, "start": start})
    return healthy, degenerate
