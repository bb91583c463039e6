"""Characters as layout sees them, in every script: combining marks, display width, sentence ends, runs.

Shared by `detect`'s rules: a letter's marks belong to it (Vietnamese in NFD, Devanagari, Thai, Arabic harakat), a
wide (CJK) character takes two columns, and a sentence ends with a stop after a non-space, then a space.
"""

from __future__ import annotations

import re
import unicodedata


def _mark_class() -> str:
    """Every combining mark (Mn, Mc, Me) below U+20000 as a character-class body: marks belong to their letter."""
    ranges, start = [], None
    for c in range(0x300, 0x20001):
        mark = c < 0x20000 and unicodedata.category(chr(c))[0] == "M"
        if mark and start is None:
            start = c
        elif not mark and start is not None:
            ranges.append(f"{chr(start)}-{chr(c - 1)}")
            start = None
    return "".join(ranges)


MARKS = _mark_class()
RUN_RE = re.compile(r"(.)\1{9,}", re.S)  # one character ten times or more in a row
# The end of a sentence as prose writes it (a stop after a non-space, then a space): code has `a.b`, not `b. C`.
SENTENCE_END_RE = re.compile(r"\S[.!?\u0964\u061f][\"'\u201d\u2019\u00bb)\]*`]*(?:\s|$)|[\u3002\uff01\uff1f]")


def width(line: str) -> int:
    """Columns a line takes in a monospace font: wide (CJK) characters count two, marks written over or under their
    letter none (Mn, Me: accents, Thai and Devanagari vowel signs, which have no combining class), spacing marks one."""
    return sum(0 if unicodedata.category(c) in ("Mn", "Me") else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in line)
