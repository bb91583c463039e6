"""List items said again with a word or two changed: `detect`'s rule for a looping list whose items are no exact copies.

A small model that loops in a numbered list often writes the same long item again and again with a word swapped
("4. Cube to the bottom again: The fourth step is to remove the bottom layer ... / 5. Cube to the top again: The fifth
step is to remove the top layer ..."), so no period of tokens repeats and the loop rules never see it. Healthy lists
differ more from item to item; short items that start alike ("Cube the top layer." / "Cube the remaining layers.")
are a list's terse steps, catalogs' messages built from one template are no list items, and a changelog's entries
from one template ("Bump X from 2 to 3 (#12)") are no sentences.
"""

from __future__ import annotations

import difflib
import re

ITEM_RE = re.compile(r"[ \t]*(?:\d{1,3}[.)]|[-*•+])[ \t]")  # a list item's mark at the start of its line
# Ordinals count like numbers: "The fourth step ..." then "The fifth step ..." is the same item with the next number.
ORDINAL_RE = re.compile(r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)\b",
                        re.I)
ITEM_WORDS = 12  # items this long (two sentences, or one long one) said again alike are a loop; shorter are steps
ITEM_EDITS = 2  # tokens changed, inserted or deleted between one item and the next: "a word or two"
ITEM_COPIES = 3  # items in a row, each this close to the one before
ITEM_SYMBOLS = 0.15  # items whose tokens are this share symbols or more are code, markup or links, not sentences


def item_loop(tail: str, tokens, m: dict) -> bool:
    """Do the last ITEM_COPIES whole lines (blank lines aside) of `tail` open with a list item's mark, end with a stop,
    hold ITEM_WORDS words or more each (symbols under ITEM_SYMBOLS of the tokens), and differ from the line before by ITEM_EDITS
    tokens at most, numbers and ordinals aside? `tokens` is detect's tokenizer (numbers become one token); the line
    being written is not judged yet."""
    lines = [line.rstrip() for line in tail.split("\n")[-4 * ITEM_COPIES:-1] if line.strip()][-ITEM_COPIES:]
    if len(lines) < ITEM_COPIES or not all(ITEM_RE.match(line) and line[-1] in ".!?" for line in lines):
        return False  # not a list, or its items are no sentences (a changelog's entries, names, links)
    items = [tokens(ORDINAL_RE.sub("0", line[ITEM_RE.match(line).end():])) for line in lines]  # the marks aside
    if any(sum(t[:1].isalpha() for t in item) < ITEM_WORDS or _symbols(item) >= ITEM_SYMBOLS * len(item)
           for item in items):
        return False  # short items, or code and markup
    if all(_edits(a, b) <= ITEM_EDITS for a, b in zip(items, items[1:])):
        m.update(item_copies=len(items))
        return True
    return False


def _symbols(item: list[str]) -> int:
    """Tokens that are neither words nor numbers (detect's tokens: a number is one private-use character)."""
    return sum(not t[:1].isalnum() and not "\ue000" <= t[:1] <= "\uf8ff" for t in item)


def _edits(a: list[str], b: list[str]) -> int:
    """Tokens of the longer list that the shorter one does not match in order (difflib, no junk heuristic)."""
    matched = sum(block.size for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return max(len(a), len(b)) - matched
