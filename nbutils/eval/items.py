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
# An item's name: its bold opening or what comes before its first colon ("2. **The Tuba**: The tuba is ..."). Said
# again in its own item, it is a placeholder of the template, as a number is.
NAME_RE = re.compile(r"\*\*([^*\n]{1,60})\*\*|([^:\n]{1,40}):")
NAME = "\ue001"  # a name's words in the item's tokens (a private-use character, as detect's NUM: never real text)
EMPHASIS_RE = re.compile(r"\*\*|__")  # markdown's bold marks: emphasis, not code
PROSE_MARKS = frozenset(",.;:!?'\"\n")  # what sentences write between their words
ITEM_WORDS = 12  # items this long (two sentences, or one long one) said again alike are a loop; shorter are steps
ITEM_EDITS = 2  # tokens changed, inserted or deleted between one item and the next: "a word or two" ...
ITEM_SHARE = 0.2  # ... or this share of a longer item's tokens (an item of several sentences or lines)
ITEM_COPIES = 3  # items in a row, each this close to the one before
ITEM_SYMBOLS = 0.15  # items whose tokens are this share symbols or more are code, markup or links, not sentences


def item_loop(tail: str, tokens, m: dict) -> bool:
    """Are the last ITEM_COPIES items of a list in `tail` (an item: a line opening with a list item's mark, with the
    lines under it that open with none or with a deeper one) each ITEM_WORDS words or more (symbols under ITEM_SYMBOLS
    of the tokens), ending with a stop, and different from the item before by ITEM_EDITS tokens at most (or ITEM_SHARE
    of the longer one's), numbers, ordinals and the item's own name aside? `tokens` is detect's tokenizer (numbers
    become one token); the line being written is not judged yet."""
    items = _items(tail.split("\n")[-12 * ITEM_COPIES:-1])[-ITEM_COPIES:]
    if len(items) < ITEM_COPIES or not all(item.rstrip()[-1:] in ".!?" for item in items):
        return False  # not a list, or its items are no sentences (a changelog's entries, names, links)
    items = [_named(item, tokens) for item in items]
    if any(sum(t[:1].isalpha() for t in item) < ITEM_WORDS or _symbols(item) >= ITEM_SYMBOLS * len(item)
           for item in items):
        return False  # short items, or code and markup
    if all(token_edits(a, b) <= max(ITEM_EDITS, ITEM_SHARE * max(len(a), len(b))) for a, b in zip(items, items[1:])):
        m.update(item_copies=len(items))
        return True
    return False


def _items(lines: list[str]) -> list[str]:
    """The list's items among whole `lines`, each with the lines under it (blank lines aside); the items' marks are
    those least indented. Lines before the first item belong to none."""
    marks = [(ITEM_RE.match(line), len(line) - len(line.lstrip())) for line in lines]
    top = min((indent for mark, indent in marks if mark), default=0)
    items: list[list[str]] = []
    for line, (mark, indent) in zip(lines, marks):
        if mark and indent <= top:
            items.append([line[mark.end():]])  # the mark aside
        elif items and line.strip():
            items[-1].append(line.strip())
    return ["\n".join(item) for item in items]


def _named(item: str, tokens) -> list[str]:
    """An item's tokens, ordinals as numbers, with the words of its own name (its bold opening, or what comes before
    its first colon; words of four letters or more) made one placeholder: a template said again with its name
    swapped ("The tuba is a musical instrument that plays the tuba") is the same item."""
    said = tokens(ORDINAL_RE.sub("0", EMPHASIS_RE.sub("", item)))
    if not (name := NAME_RE.match(item)):
        return said
    words = {t for t in tokens(name.group(1) or name.group(2)) if len(t) >= 4 and t[:1].isalpha()}
    return [NAME if t in words else t for t in said]


def _symbols(item: list[str]) -> int:
    """Tokens that are neither words, numbers nor a sentence's punctuation (detect's tokens: a number is one
    private-use character): what code, markup and links write."""
    return sum(not t[:1].isalnum() and not "\ue000" <= t[:1] <= "\uf8ff" and t not in PROSE_MARKS for t in item)


def token_edits(a: list[str], b: list[str]) -> int:
    """Tokens of the longer list that the shorter one does not match in order (difflib, no junk heuristic)."""
    matched = sum(block.size for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return max(len(a), len(b)) - matched
