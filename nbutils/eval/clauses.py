"""One clause said again and again, joined differently each time: `detect`'s rule for a loop of prose whose copies
are no exact period.

A small model stuck on a sentence says it again after a comma, then after a stop, then in a new paragraph, or in
turn with a short frame ("Lily's mom continued, ..." / "Lily's mom explained, ..."), so no period of tokens repeats
and the loop rules never see it. A clause here is what lies between punctuation, line breaks and the conjunctions
that join clauses; healthy prose seldom says one clause of CLAUSE_WORDS words or more CLAUSE_COPIES times among
its last few, while lists and code say their short clauses often ("return False", "margin: 0").
"""

from __future__ import annotations

import re

from nbutils.eval.items import token_edits

# Where a clause ends: punctuation (not an apostrophe: "I'm" is one word), quotes, brackets, a line break, or a
# conjunction that joins two clauses.
CLAUSE_END_RE = re.compile(r"[.,;:!?\"\u201c\u201d()\[\]\n]+|\b(?:and|but|or)\b", re.I)
WORD_RE = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
CLAUSE_WORDS = 6  # clauses this long said again are a loop; "he said" or "mix well" are phrases any text repeats
CLAUSE_COPIES = 3  # copies of one clause ...
NEAR_CLAUSE_WORDS = 10  # a clause this long with a word added or dropped is said again: "The ocean is home to
# countless ecosystems ..." and "The ocean is also home to ..." (a word changed is another clause: "the best in the
# world of sports", "... of dreams")
CLAUSE_WINDOW = 6  # ... among the last this many whole clauses
CLAUSE_CHARS = 600  # the tail read: six clauses of a loop fit in it


def clause_loop(tail: str, m: dict) -> bool:
    """Is one clause of CLAUSE_WORDS words or more (lowercased, its words alone) said CLAUSE_COPIES times among the
    last CLAUSE_WINDOW whole clauses of `tail` (as it was, or with one word added or dropped where it holds
    NEAR_CLAUSE_WORDS words or more), two of them in one line? Lines that each say it once are a catalog's
    messages built from one template, or a program's output, which the loop rules judge. The clause being written
    (after the last clause end) is not judged."""
    clauses = []  # (words, line number)
    for n, line in enumerate(tail[-CLAUSE_CHARS:].lower().split("\n")):
        clauses += [(words, n) for words in map(_words, CLAUSE_END_RE.split(line)) if words]
    clauses = clauses[1:-1][-CLAUSE_WINDOW:]  # the first may start mid-clause, the last is being written
    long = [(c, n) for c, n in clauses if len(c) >= CLAUSE_WORDS]
    for c, _ in long:  # a clause said CLAUSE_COPIES times, with a word added or dropped or as it was
        lines = [n for d, n in long if d == c or _one_word_more(c, d)]
        if len(lines) >= CLAUSE_COPIES and len(set(lines)) < len(lines):
            m.update(clause_copies=len(lines), clause_words=len(c))
            return True
    return False


def _words(clause: str) -> tuple[str, ...]:
    return tuple(WORD_RE.findall(clause))


def _one_word_more(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Is one clause the other with one word added, both NEAR_CLAUSE_WORDS words long or more?"""
    return abs(len(a) - len(b)) == 1 and min(len(a), len(b)) >= NEAR_CLAUSE_WORDS and token_edits(a, b) == 1
