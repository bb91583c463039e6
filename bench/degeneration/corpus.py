"""Healthy text for the degeneration stress set, only from what ships with Python, installed packages and the system.

English and structure: stdlib source code and docstrings, licenses, package READMEs, changelogs,
markdown tables and numbered lists in them, and logs (the system's package logs where readable,
plus log lines formatted by `logging` from gettext message ids). Other scripts: the translated
messages of the gettext catalogs installed on the system (`/usr/share/locale/*/LC_MESSAGES/*.mo`,
read with `gettext`), one document per catalog and language, labelled with the script most of its
letters are written in; Vietnamese is also given in NFD (decomposed marks), and CPython's CJK codec
test texts and a few package docstrings add more. Each document is in the tuning half or the
reported half by a hash of its source path.
"""

from __future__ import annotations

import ast
import functools
import gettext
import glob
import logging
import os
import random
import re
import sysconfig
import unicodedata
import zlib
from dataclasses import dataclass

STDLIB = sysconfig.get_paths()["stdlib"]
SITE = sysconfig.get_paths()["purelib"]
LOCALE_DIRS = ["/usr/share/locale", "/usr/share/locale-langpack"]
LANGUAGES = ["vi", "hi", "th", "ar", "fa", "he", "ka", "hy", "am", "ta", "bn", "ja", "zh_CN", "ko", "ru", "uk", "el",
             "de", "fr", "es", "pl", "tr"]
# Regional languages written in Latin letters with spellings of their own (Low German, Limburgish, Walloon, Friulian,
# Bavarian): a group of their own, so unusual spelling is judged apart from the standard languages.
REGIONAL = ["nds", "li", "wa", "fur", "bar"]
STRUCTURED = ("table", "numbered", "markdown", "code", "log", "changelog", "ruled", "opened", "output", "commands")


@dataclass
class Doc:
    kind: str  # prose, docstring, license, readme, changelog, table, numbered, markdown, code, log
    source: str
    text: str
    script: str = "latin"


def _read(path: str, limit: int = 300_000) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError):
        return ""


def script_of(text: str) -> str:
    """The script most letters of `text` are written in (Unicode name prefix: latin, cyrillic, cjk, arabic...)."""
    counts: dict[str, int] = {}
    for c in text[:4000]:
        if c.isalpha():
            if "\u3040" <= c <= "\u30ff":
                s = "japanese"
            elif "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf":
                s = "han"
            elif "\uac00" <= c <= "\ud7af" or "\u1100" <= c <= "\u11ff":
                s = "hangul"
            else:
                s = unicodedata.name(c, "other x").split(" ", 1)[0].lower()
            counts[s] = counts.get(s, 0) + 1
    if counts.get("japanese", 0) >= 0.1 * sum(counts.values()):
        return "japanese"
    return max(counts, key=counts.get) if counts else "other"


def _docstrings(src: str) -> str:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return ""
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
    return "\n\n".join(dict.fromkeys(d for n in nodes if (d := ast.get_docstring(n)) and len(d) > 40))


def _catalog(path: str) -> list[tuple[str, str]]:
    """(message id, translation) pairs of a compiled gettext catalog, header and plural forms left out."""
    try:
        with open(path, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    # A key with a context is "context\x04message": the message is what a program prints.
    return [(k.split("\x04")[-1], v) for k, v in cat.items() if isinstance(k, str) and k and isinstance(v, str)
            and v.strip()]


def translations() -> list[Doc]:
    """One document per installed catalog and language: its translated messages, one paragraph each."""
    docs = []
    for lang in LANGUAGES + REGIONAL:
        paths = sorted({p for d in LOCALE_DIRS for p in glob.glob(f"{d}/{lang}/LC_MESSAGES/*.mo")})
        for path in paths:
            # A catalog holds the same message for several programs, aligned differently: keep one of each.
            msgs = {" ".join(v.split()): v.strip() for _, v in _catalog(path) if len(v.strip()) >= 12}
            text = "\n\n".join(msgs.values())[:60_000]
            if len(text) < 600:
                continue
            script = "vietnamese" if lang == "vi" else "regional" if lang in REGIONAL else script_of(text)
            docs.append(Doc("prose", path, text, script))
            if lang == "vi":  # the same text with its marks decomposed, as some tokenizers and editors write it
                docs.append(Doc("prose", path + "#nfd", unicodedata.normalize("NFD", text), "vietnamese-nfd"))
    return docs


def _generated_log(rng: random.Random, messages: list[str], n: int = 200) -> str:
    """Log lines as `logging` formats them, with message ids of the gettext catalogs as messages."""
    fmt = logging.Formatter(rng.choice(["%(asctime)s %(levelname)s %(name)s: %(message)s",
                                        "[%(asctime)s] %(levelname)-8s %(message)s", "%(levelname)s:%(name)s:%(message)s"]))
    lines, t = [], 1_700_000_000.0
    for _ in range(n):
        t += rng.expovariate(1 / 3)
        msg = rng.choice(messages).replace("\n", " ")
        msg = re.sub(r"%l?[sdu]", lambda _: rng.choice([str(rng.randint(0, 9999)), "/var/lib/x", "eth0"]), msg)
        rec = logging.LogRecord(rng.choice(["app", "worker.3", "db"]), rng.choice([10, 20, 20, 20, 30, 40]), "", 0,
                                msg, None, None)
        rec.created = t
        lines.append(fmt.format(rec))
    return "\n".join(lines)


def logs() -> list[Doc]:
    """System package logs where readable, and logs formatted from catalog message ids (English)."""
    docs = []
    for path in ["/var/log/dpkg.log", "/var/log/alternatives.log", "/var/log/apt/history.log",
                 "/var/log/fontconfig.log"]:
        if len(text := _read(path, 200_000)) > 1000:
            docs.append(Doc("log", path, text))
    ids = sorted({k for p in sorted(glob.glob(f"{LOCALE_DIRS[0]}/de/LC_MESSAGES/*.mo")) for k, _ in _catalog(p)
                  if 20 <= len(k) <= 160 and k.isprintable()})
    for i in range(20 if ids else 0):
        docs.append(Doc("log", f"logging-{i}", _generated_log(random.Random(i), ids)))
    return docs


def _metadata_docs() -> list[Doc]:
    docs = []
    for path in sorted(glob.glob(os.path.join(SITE, "*.dist-info", "METADATA"))):
        body = _read(path).split("\n\n", 1)[-1]
        if len(body) > 800:
            docs.append(Doc("readme", path, body))
        m = re.search(r"^(#+ *)?(changelog|change log|history|release notes)\s*$", body, re.I | re.M)
        if m and len(body) - m.start() > 800:
            docs.append(Doc("changelog", path + "#changes", body[m.start():]))
        if tables := re.findall(r"(?:^[^\n]*\n)?(?:^\|[^\n]*\|[ \t]*\n){3,}", body, re.M):
            docs.append(Doc("table", path + "#tables", "\n\n".join(tables)))
        numbered = re.findall(r"(?:^[^\n]*\n)?(?:^ {0,3}\d{1,2}[.)] [^\n]+\n(?:^ {3,}[^\n]+\n)*){3,}", body, re.M)
        if numbered:
            docs.append(Doc("numbered", path + "#numbered", "\n\n".join(numbered)))
    for pattern in ("*.dist-info/licenses/**/*", "*.dist-info/LICEN[CS]E*", "*.dist-info/COPYING*"):
        for path in sorted(glob.glob(os.path.join(SITE, pattern), recursive=True)):
            if os.path.isfile(path) and len(text := _read(path)) > 400:
                docs.append(Doc("license", path, text))
    return docs


@functools.lru_cache(maxsize=1)
def _all_documents() -> tuple[Doc, ...]:
    docs: list[Doc] = []
    for path in sorted(glob.glob(os.path.join(STDLIB, "*.py")) + glob.glob(os.path.join(STDLIB, "*", "*.py"))):
        if "/test" in path or "/idlelib/" in path or os.path.getsize(path) < 4000:
            continue
        if src := _read(path):
            docs.append(Doc("code", path, src))
            if len(doc := _docstrings(src)) > 400:
                docs.append(Doc("docstring", path + "#doc", doc))
    docs += _metadata_docs()
    docs.append(Doc("license", "stdlib/LICENSE.txt", _read(os.path.join(STDLIB, "LICENSE.txt"))))
    for path in sorted(glob.glob(os.path.join(SITE, "*", "**", "*.md"), recursive=True)
                       + glob.glob(os.path.join(SITE, "*", "**", "*.rst"), recursive=True)):
        if ".dist-info" not in path and 1500 < os.path.getsize(path) < 300_000 and " the " in (text := _read(path)):
            docs.append(Doc("markdown", path, text))
    for path in sorted(glob.glob(os.path.join(STDLIB, "test", "cjkencodings", "*-utf8.txt"))):
        if "johab" not in path and (text := _read(path)):  # johab's test text is garbled on purpose
            docs.append(Doc("prose", path, text, script_of(text)))
    docs += logs() + translations()
    return tuple(d for d in docs if d.text.strip())


def documents() -> list[Doc]:
    """Every healthy source document, in a fixed order (read once per process)."""
    return list(_all_documents())


def is_reported(doc: Doc) -> bool:
    """Which half a document is in: the reported half (True) or the tuning half, by a hash of its source.

    The hash is of the path inside site-packages, not of the virtual environment's location: every
    checkout (a worktree, a fresh clone, CI) draws the same halves and so gets the same figures.
    """
    source = "site-packages" + doc.source[len(SITE):] if doc.source.startswith(SITE) else doc.source
    return zlib.crc32(source.encode()) % 2 == 1


def snippet(doc: Doc, rng: random.Random, length: int | None = None) -> str:
    """A piece of `doc` of 100-3000 characters (log-uniform) starting at a line start (at its start: `opened`)."""
    length = length or int(10 ** rng.uniform(2, 3.48))
    text = doc.text
    if doc.kind in ("opened", "output"):  # how it opens (a BOM, an emoji, CJK marks); a code block from its fence
        return text[:length].rstrip()
    if len(text) <= length:
        return text.strip()
    starts = [0] + [m.end() for m in re.finditer(r"\n", text[: len(text) - length])]
    s = rng.choice(starts)
    return text[s:s + length].strip()
