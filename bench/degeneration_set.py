"""A labelled set for the degeneration detector, built only from text shipped with Python and installed packages.

Healthy: docstrings, source code, licenses, package READMEs/changelogs, CJK sample texts from
CPython's test suite, French and Russian strings shipped in packages. Degenerate: a healthy
prefix followed by a procedural corruption of one class, with its onset (character offset).
"""

from __future__ import annotations

import glob
import importlib
import inspect
import os
import random
import re
import sysconfig

STDLIB_MODULES = ["json", "argparse", "pathlib", "collections", "functools", "itertools", "subprocess", "logging",
                  "textwrap", "string", "re", "shutil", "tempfile", "typing", "dataclasses", "unittest", "email",
                  "http.client", "urllib.parse", "csv", "sqlite3", "zipfile", "tarfile", "datetime", "decimal",
                  "fractions", "statistics", "random", "heapq", "bisect", "contextlib", "asyncio", "threading",
                  "multiprocessing", "socket", "ssl", "hashlib", "hmac", "secrets", "uuid", "pickle", "copy", "pprint",
                  "inspect", "ast", "dis", "tokenize", "difflib", "calendar", "locale", "gettext", "codecs"]
CLASSES = ["char-repeat", "token-repeat", "phrase-loop", "sentence-loop", "multi-sentence-loop", "multi-line-loop",
           "prompt-echo", "counting-loop", "word-soup", "subword-soup", "unicode-junk", "empty-special"]


def _site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def _read(path: str, limit: int = 200_000) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError):
        return ""


def sources() -> dict[str, list[str]]:
    """Long healthy documents by kind."""
    docs: dict[str, list[str]] = {"docstring": [], "code": [], "license": [], "readme": [], "non-english": []}
    for name in STDLIB_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        # Unique docstrings: inherited ones repeat verbatim and would make the "healthy" text a loop.
        text = "\n\n".join(dict.fromkeys(inspect.getdoc(obj) for _, obj in inspect.getmembers(mod)
                                          if (inspect.isfunction(obj) or inspect.isclass(obj)) and inspect.getdoc(obj)))
        if len(text) > 500:
            docs["docstring"].append(text)
        src = _read(inspect.getsourcefile(mod) or "") if hasattr(mod, "__file__") else ""
        if src:
            docs["code"].append(src)
    site = _site_packages()
    for path in sorted(glob.glob(os.path.join(site, "*.dist-info", "licenses", "*")) +
                       glob.glob(os.path.join(site, "*.dist-info", "LICENSE*"))):
        text = _read(path)
        if len(text) > 500:
            docs["license"].append(text)
    for path in sorted(glob.glob(os.path.join(site, "*.dist-info", "METADATA"))):
        text = _read(path)
        body = text.split("\n\n", 1)[-1]
        if len(body) > 1500:
            docs["readme"].append(body)
    stdlib = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(stdlib, "test", "cjkencodings", "*-utf8.txt"))):
        docs["non-english"].append(_read(path))
    for path in glob.glob(os.path.join(site, "tornado", "test", "gettext_translations", "*", "*", "*.po")):
        docs["non-english"].append("\n".join(re.findall(r'msgstr "(.+)"', _read(path))))
    russian = []
    for path in glob.glob(os.path.join(site, "transformers", "models", "*", "*.py"))[:400]:
        russian += re.findall(r"[А-Яа-яЁё][А-Яа-яЁё ,.!?\-]{20,}", _read(path))
    if russian:
        docs["non-english"].append("\n".join(dict.fromkeys(russian)))
    return {k: [d for d in v if d.strip()] for k, v in docs.items()}


def snippets(docs: dict[str, list[str]], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """(kind, text) healthy snippets of 100-3000 characters starting at a line start."""
    out = []
    kinds = [k for k, v in docs.items() if v]
    while len(out) < n:
        kind = rng.choice(kinds)
        doc = rng.choice(docs[kind])
        length = rng.choice([100, 200, 400, 800, 1600, 3000])
        starts = [m.end() for m in re.finditer(r"\n", doc[: max(1, len(doc) - length)])] or [0]
        s = rng.choice(starts)
        text = doc[s:s + length].strip()
        if len(text) >= 60:
            out.append((kind, text))
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{2,}", text)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s.strip()) <= 200]


def corrupt(cls: str, prefix: str, pool: list[str], vocab: list[str], rng: random.Random) -> tuple[str, int]:
    """prefix + a degenerate continuation of class `cls`; returns (text, onset).

    For loops the onset is where the first repetition starts: the first occurrence of the unit is
    ordinary text; the output becomes degenerate when it comes round again.
    """
    onset = len(prefix)
    sep = " " if prefix and not prefix.endswith((" ", "\n")) else ""
    if cls == "empty-special":
        return rng.choice(["", "   ", "\n\n", "<|end|>", "</s></s></s>", "<pad><pad><pad><pad>", "<|eot_id|>\n",
                           "[PAD] [PAD] [PAD]", "<|im_end|><|endoftext|>", " \t\n "]), 0
    if cls == "char-repeat":
        c = rng.choice("abcdefghijklmnopqrstuvwxyz!?0123456789") if rng.random() < 0.8 else rng.choice("éあЖ中")
        return prefix + sep + c * rng.randint(30, 400), onset
    if cls == "token-repeat":
        w = rng.choice(vocab)
        joiner = rng.choice([" ", ", ", "\n", " - "])
        return prefix + sep + joiner.join([w] * rng.randint(12, 120)), onset + len(sep + w)
    if cls == "phrase-loop":
        unit = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 6))) + rng.choice([" ", ", ", ". "])
        return prefix + sep + unit * rng.randint(6, 40), onset + len(sep + unit)
    if cls in ("sentence-loop", "multi-sentence-loop"):
        sents = [s for doc in rng.sample(pool, min(5, len(pool))) for s in _sentences(doc)] or ["This is it."]
        k = 1 if cls == "sentence-loop" else rng.randint(2, 4)
        unit = " ".join(rng.choice(sents) for _ in range(k)) + " "
        return prefix + sep + unit * rng.randint(3, 8), onset + len(sep + unit)
    if cls == "multi-line-loop":
        lines = [ln for ln in rng.choice(pool).splitlines() if ln.strip()] or ["x = 1"]
        start = rng.randrange(len(lines))
        unit = "\n".join(lines[start:start + rng.randint(2, 5)]) + "\n"
        return prefix + "\n" + unit * rng.randint(3, 8), onset + 1 + len(unit)
    if cls == "prompt-echo":
        prompt = rng.choice(pool)[: rng.randint(60, 300)].strip()
        return prefix + sep + ("\n" + prompt) * rng.randint(3, 6), onset + len(sep + "\n" + prompt)
    if cls == "counting-loop":
        verb = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 6)))
        start = rng.randint(1, 60)
        form = rng.choice(["Step {n}: {v}.", "{n}. {v}", "Item {n} - {v};", "({n}) {v}", "Example {n}: {v}"])
        joiner = rng.choice([" ", "\n"])
        first = form.format(n=start, v=verb) + joiner
        return prefix + sep + joiner.join(form.format(n=start + i, v=verb) for i in range(rng.randint(6, 30))), \
            onset + len(sep + first)
    if cls == "word-soup":
        return prefix + sep + " ".join(rng.choice(vocab) for _ in range(rng.randint(30, 150))), onset
    if cls == "subword-soup":
        marker = rng.choice(["Ġ", "▁", "##", ""])
        frags = [w[i:i + rng.randint(1, 3)] for w in rng.sample(vocab, min(60, len(vocab))) for i in (0, 2)]
        if marker:
            body = " ".join((marker + f) if rng.random() < 0.6 else f for f in frags[: rng.randint(20, 80)])
        else:
            body = " ".join(frags[: rng.randint(25, 80)])
        return prefix + sep + body, onset
    if cls == "unicode-junk":
        kind = rng.choice(["random", "mojibake", "replacement", "zero-width"])
        if kind == "random":
            body = "".join(chr(rng.choice([rng.randint(0x400, 0x4FF), rng.randint(0x4E00, 0x9FFF), rng.randint(0x600, 0x6FF),
                                           rng.randint(0x370, 0x3FF), rng.randint(0x21, 0x7E), rng.randint(0xE000, 0xE0FF)]))
                           for _ in range(rng.randint(20, 200)))
        elif kind == "mojibake":
            src = rng.choice(["café résumé naïve façade über Straße", "привет мир как дела", "日本語のテキスト",
                              "“quoted” – dash — ‘single’ …"]) * rng.randint(2, 6)
            body = src.encode("utf-8").decode("latin-1", errors="replace")
        elif kind == "replacement":
            body = " ".join(rng.choice(vocab) + "\ufffd" * rng.randint(1, 3) for _ in range(rng.randint(5, 30)))
        else:
            body = "".join(rng.choice(vocab) + rng.choice(["\u200b", "\u200d", "\x07", "\x1b", "\ufeff"])
                           for _ in range(rng.randint(10, 60)))
        return prefix + sep + body, onset
    raise ValueError(cls)


def build(seed: int = 0, n_healthy: int = 700, per_class: int = 60) -> tuple[list[dict], list[dict]]:
    """(healthy, degenerate) samples; degenerate ones carry class and onset."""
    rng = random.Random(seed)
    docs = sources()
    healthy = [{"kind": k, "text": t} for k, t in snippets(docs, n_healthy, rng)]
    pool = [t for d in docs.values() for t in d]
    vocab = sorted({w.lower() for d in docs["docstring"] + docs["readme"] for w in _words(d)})
    degenerate = []
    for cls in CLASSES:
        for _ in range(per_class):
            prefix = "" if rng.random() < 0.2 else snippets(docs, 1, rng)[0][1][: rng.choice([40, 120, 300, 800])]
            text, onset = corrupt(cls, prefix, pool, vocab, rng)
            degenerate.append({"class": cls, "text": text, "onset": onset})
    return healthy, degenerate
