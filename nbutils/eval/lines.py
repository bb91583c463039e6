"""Lines said again with a word or two changed, outside a list: `detect`'s rule for a stuck line that varies.

A small model stuck on a line writes it again and again with a word swapped here and there ("I have the most
incredible gift, but I am not the same" / "... but I am no longer the same" / "... but I am not the same"), so no
period of tokens repeats and the loop rules never see it, and no list's mark makes it a list item. A catalog's
messages built from one template differ the same way, one word each ("Cannot load the GIF file." / "... the ICO
file."), but say no message twice: the stuck line comes back word for word among its variants.
"""

from __future__ import annotations

from nbutils.eval.items import ITEM_RE, token_edits
from nbutils.eval.soup import OPTION_RE

LINE_COPIES = 4  # lines in a row, each close to the one before ...
LINE_WORDS = 6  # ... of this many words or more each ...
LINE_EDITS = 2  # ... differing from the one before by this many tokens at most (numbers aside) ...
LINE_SHARE = 0.2  # ... or this share of the longer one's tokens, and one of them said before word for word


def line_loop(tail: str, tokens, m: dict) -> bool:
    """Are the last LINE_COPIES whole lines of `tail` (blank lines aside; the line being written is not judged), none
    a list's item or a command with an option (`pip install -U typer`), of LINE_WORDS words or more each, each
    different from the line before by LINE_EDITS tokens at most (or LINE_SHARE of the longer one's), one of them said
    again as it was, not all alike? `tokens` is detect's tokenizer (numbers become one token, so a line with a new
    number differs by none)."""
    lines = [line for line in tail.split("\n")[-4 * LINE_COPIES:-1] if line.strip()][-LINE_COPIES:]
    if len(lines) < LINE_COPIES or any(ITEM_RE.match(line) or OPTION_RE.search(line) for line in lines):
        return False  # a list's items are judged by items.py (short steps start alike); commands pass options
    said = [tokens(line) for line in lines]
    if any(sum(t[:1].isalpha() for t in words) < LINE_WORDS for words in said):
        return False
    if not 1 < len({line.strip() for line in lines}) < len(lines):
        return False  # no line said again as it was (a catalog's messages from one template), or one line said again
        # and again, which the loop rules judge (and a program's output in a code block)
    if all(token_edits(a, b) <= max(LINE_EDITS, LINE_SHARE * max(len(a), len(b))) for a, b in zip(said, said[1:])):
        m.update(line_copies=len(said))
        return True
    return False
