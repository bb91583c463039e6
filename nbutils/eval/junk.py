"""Unicode junk: replacement and control characters, invisible ones, mojibake, private use, stacked marks, and
characters of many scripts side by side where no writing system puts them (`detect` asks `unicode_junk`)."""

from __future__ import annotations

import re
import unicodedata

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# UTF-8 read as Latin-1/cp1252: a lead byte (Â-ð) followed by continuation bytes (U+0080-U+00BF or their cp1252 glyphs).
_CONT_REST = "\u0080-\u009f\u00a1-\u00bf\u20ac\u201a\u0192\u201e\u2026\u2020\u2021\u02c6\u2030\u0160\u2039\u0152\u017d\u2018\u2019" \
        "\u201c\u201d\u2022\u2013\u2014\u02dc\u2122\u0161\u203a\u0153\u017e\u0178"
_CONT = "\u00a0" + _CONT_REST
# French sets a no-break space before : ; ! ? and », so in "DÉCONSEILLÉ\u00a0:" the É is a letter, not U+0260
# mis-decoded: a lead Ä-ß before U+00A0 counts only where no such punctuation follows. Â and Ã before it always count:
# they are what a no-break space and à turn into.
MOJIBAKE_RE = re.compile(f"[\u00c2\u00c3][{_CONT}]|[\u00c4-\u00df](?:[{_CONT_REST}]|\u00a0(?![:;!?\u00bb]))|"
                         f"[\u00e0-\u00ef][{_CONT}]{{2}}|\u00f0[{_CONT}]{{3}}")
# \t \n \v \f \r are ordinary in text and source files; so are \x1c-\x1f, field separators (gnupg's catalogs have them)
CONTROL_RE = re.compile("[\x00-\x08\x0e-\x1b\x7f]")
# Invisible characters after ASCII (where no script needs them), or ones no script needs at all.
# Bidi marks (U+200E, U+200F) are ordinary in Hebrew and Arabic text next to Latin, and left alone.
INVISIBLE_RE = re.compile("(?<=[\x20-\x7e\u0400-\u04ff])[\u200b-\u200d]|[\ufeff\u2060-\u2064]")
COMBINING_RUN_RE = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]{4,}")
LONE_LETTER_RE = re.compile(f"(?<=[{CJK}])[A-Za-z\u00c0-\u024f](?=[{CJK}])")  # 数h鏽: no script writes so
ACCENTED_WORD_RE = re.compile("[A-Za-z\u00c0-\u024f]*[\u00c0-\u024f][A-Za-z\u00c0-\u024f]*")
PRINTF_RE = re.compile(r"%[-+ #0-9.*]*[hlLqjzt]*[a-zA-Z]")  # %li, %.250s: catalogs put them next to any script
PRIVATE_RE = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]")


def _script(c: str) -> str:
    if c < "\u0250":
        return "latin" if c.isalpha() else "other"
    if "\u3040" <= c <= "\ufaff" or "\u1100" <= c <= "\u11ff" or "\u3130" <= c <= "\u318f":
        return "cjk"
    if not c.isalpha():
        return "symbol" if unicodedata.category(c)[0] == "S" else "other"  # punctuation separates, like spaces
    return unicodedata.name(c, "? ?").split(" ", 1)[0].lower()  # "LATIN" (U+1EA1) is "latin" (U+00E0)


def _script_switches(text: str) -> float:
    """Changes of script between adjacent characters, symbols included (Latin next to CJK counts a quarter,
    a symbol next to CJK a half: Korean and Chinese write ☆, ⓡ and ㅠ.ㅠ between words without spaces)."""
    score, prev = 0.0, None
    for c in text:
        s = "other" if c.isspace() or c.isdigit() or c.isascii() and not c.isalpha() else _script(c)
        if s == "other":
            prev = None
            continue
        if prev and s != prev:
            pair = {s, prev}
            score += 0.25 if pair == {"latin", "cjk"} else 0.5 if pair == {"symbol", "cjk"} else 1
        prev = s
    return score


def _odd_letters(text: str) -> int:
    """Letters no script writes so: one Latin letter alone between CJK characters, or a capital after a small
    letter inside a word where either has a diacritic (ŏüŶ, űĭãŮ; camelCase in ASCII is code): random characters."""
    odd = len(LONE_LETTER_RE.findall(text))
    for word in ACCENTED_WORD_RE.findall(text):  # only Latin words with a diacritic: the loop stays short
        odd += sum(a.islower() and b.isupper() and not (a.isascii() and b.isascii()) for a, b in zip(word, word[1:]))
    return odd


def unicode_junk(text: str, m: dict) -> bool:
    """Replacement characters, control and invisible characters, mojibake, private-use and stacked marks."""
    control = len(CONTROL_RE.findall(text))
    if text.isascii():
        m.update(control=control)
        return control >= 2
    counts = {
        "replacement": text.count("\ufffd"), "control": control, "invisible": len(INVISIBLE_RE.findall(text)),
        "mojibake": len(MOJIBAKE_RE.findall(text)), "private_use": len(PRIVATE_RE.findall(text)),
        "stacked_marks": len(COMBINING_RUN_RE.findall(text)),
        "script_switches": _script_switches(PRINTF_RE.sub(" ", text[-120:]) if "%" in text else text[-120:]),
        "odd_letters": _odd_letters(text[-120:]),
    }
    m.update(counts)
    return (counts["replacement"] >= 2 or control >= 2 or counts["invisible"] >= 3 or counts["mojibake"] >= 2
            or counts["private_use"] >= 2 or counts["stacked_marks"] >= 2
            or counts["script_switches"] + 2 * counts["odd_letters"] >= 8)
