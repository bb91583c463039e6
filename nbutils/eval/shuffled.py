"""Numbered items said again in shuffled order: `detect`'s rule for a list that cycles through a few items.

A small model stuck in a list often goes on naming the same few items in a new order under the list's next numbers
("8. Tomatoes / 9. Bell peppers / 10. Carrots / 11. Eggplants / 12. Tomatoes ..."), so no period repeats and the
loop rules never see it. Healthy numbered lists name each item once; code, catalogs and columns of words say their
lines again among others, and a key of answers ("True", "False") cycles through two.
"""

from __future__ import annotations

import re

NUMBERED_RE = re.compile(r"[ \t]*\d{1,3}[.)][ \t]+")  # a numbered list item's mark (and the indentation before it)
LETTER_RE = re.compile(r"[^\W\d_]")
SHUFFLED_LINES = 12  # the last this many whole lines are judged ...
SHUFFLED_COPIES = 6  # ... and this many of them said before in the tail (a mark or a list number aside) is a loop,
SHUFFLED_DISTINCT = 3  # where they cycle through this many items or more (not a key of True and False)
SHUFFLED_LETTERS = 4  # a line with fewer letters says too little to count ("}", "fi", "A")


def shuffled_loop(tail: str, m: dict) -> bool:
    """Are the last SHUFFLED_LINES whole lines of `tail` (blank lines aside; the line being written is not judged)
    items under a list's numbers, SHUFFLED_COPIES or more of them copies of an item said before them in `tail` (its
    number and emphasis aside, lowercased), with SHUFFLED_DISTINCT different items or more among the copies? Catalogs,
    code and columns of words say lines again among others; a numbered list names each item once."""
    lines = []
    for line in tail.split("\n")[:-1]:
        mark = NUMBERED_RE.match(line)
        if item := line[mark.end() if mark else 0:].strip(" \t*_").lower():
            lines.append((item, mark is not None))
    last = lines[-SHUFFLED_LINES:]
    if len(last) < SHUFFLED_LINES or not all(numbered and len(LETTER_RE.findall(item)) >= SHUFFLED_LETTERS
                                             for item, numbered in last):
        return False
    said = [item for item, _ in lines]
    start = len(lines) - len(last)
    copies = [item for i, (item, _) in enumerate(last) if item in said[:start + i]]
    if len(copies) < SHUFFLED_COPIES or len(set(copies)) < SHUFFLED_DISTINCT:
        return False
    m.update(shuffled_copies=len(copies), shuffled_items=len(set(said[start:])))
    return True
