"""A cycle of sentences said again before its second copy is whole: `detect`'s early-cycle rule.

`max_new_tokens` cuts a looping generation anywhere, often before a cycle of a few sentences is said twice. Healthy
documents say text again too (sibling docstrings, catalogs that translate two messages alike, code), so the rule
asks for 100+ characters of prose said again verbatim from where a line or a sentence starts, and leaves indented,
wrapped and code-like blocks, and a template's pairs of messages, to the loop rules, which wait for a second whole
copy.
"""

from __future__ import annotations

import difflib
import re
import unicodedata

from nbutils.eval.soup import FUNCTION_WORDS
from nbutils.eval.textshape import MARKS, RUN_RE, SENTENCE_END_RE, width

WRAP_COLUMNS = 40  # a line broken inside a sentence at this width or more was wrapped (docstrings wrap at 72-79)
WRAP_LETTERS, MARKED_SHARE = 12, 0.15  # Vietnamese marks most syllables; French or German a few words in a line
COLUMN_GAP_RE = re.compile(r"\S {3,}\S")  # a row laid out in columns: "-y, --side-by-side    output in two columns"
INDENTED_RE = re.compile(r"\n(?: {4}|\t)")  # a line indented as code, or a docstring's body inside it
EARLY_CYCLE_CHARS = 100  # said again verbatim, this much prose is a cycle before its second copy is whole
VERSE_LINES, VERSE_COLUMNS = 4, 40  # this many lines, none wider, in stanzas: verse
BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")
EARLY_CYCLE_MIN = 60  # a shorter cycle in one line or of 2+ lines counts once said again whole, back to back
WORD_END_RE = re.compile(r"\S*\s+(?=\S)")  # the rest of a word and the spaces before the next (none in CJK text)
LETTER_RE = re.compile(rf"[^\W\d_]|[{MARKS}]")  # letters and their marks (Devanagari, Thai)
CODE_RE = re.compile(r"[(){}\[\]=<>_;#$*/\\|&^@`]")  # what code writes and prose seldom does
LINK_RE = re.compile(r"!?\[([^\]\n]{0,200})\]\([a-z]+://[^\s)]*\)|[a-z]+://[^\s)>\]]+")  # markdown links, URLs
FRAME_CHARS, FRAME_ALIKE = 32, 0.6  # a template's frame: this many characters before each copy, this much alike
# Messages without stops (a catalog's) say where they start by what precedes them: before a cycle's two copies,
# words that have nothing in common (the text before the loop, the cycle's end); a template's messages share them.
CONTEXT_CHARS, CONTEXT_MIN, CONTEXT_WORDS_ALIKE, CONTEXT_CHARS_ALIKE = 96, 24, 0.12, 0.3
CONTEXT_WORDS_NONE = 5  # this many content words on each side, none shared: unlike, however alike their letters
OPENINGS_ALIKE = 0.4  # paragraph openings this alike (content words): a paragraph said again, not a sentence echoed
CONTEXT_WORDS_FRAMED = 0.5  # sibling paragraphs of one template ("... for mice. / ... for touchpads.") share more
WORD_RE = re.compile(r"\w+")
NEXT_PARAGRAPH_RE = re.compile(r"[^\n]*\n[ \t]*\n[^\n]*\S[^\n]*")  # a paragraph's rest, a blank line, a new opening
HANGUL_RE = re.compile("[\uac00-\ud7a3]")  # precomposed Hangul syllables
HANGUL_SPLIT_RE = re.compile("([\uac00-\ud7a3]+)")


def early_cycle(tail: str, m: dict, whole: bool = False) -> bool:
    """A cycle of sentences before its second copy is whole: the text ends with 100+ characters of prose said word for
    word before (a cycle of 60-99: within one line, or two different lines or more, said again
    whole, back to back), the rest of the cycle between them. A sentence (or a script: a catalog's next message)
    starts the part said again, or starts in it (a catalog says "the red/green/blue component: ..." alike).
    `max_new_tokens` cuts a looping generation anywhere; healthy prose seldom says sentences again verbatim. Indented
    lines (code, a docstring's body), prose wrapped at a column (documentation), one frame before both copies and a
    line said twice (a catalog's pairs) repeat: the loop rules judge those. A program's output is one short line said
    a few times (the loop rules know code blocks); lines of prose said again inside a code block are a loop as
    anywhere. whole: `tail` is the whole text (its start is where a copy may start)."""
    tail = _decomposed(tail)
    q = _said_before(tail)  # how far back the ending was said before
    short = q < EARLY_CYCLE_CHARS
    need = max(EARLY_CYCLE_MIN, q) if short else EARLY_CYCLE_CHARS  # how much must be said again, verbatim
    if not q or tail[-need:] != tail[-need - q:-q] or short and not _short_cycle(tail[-q:]):
        return False
    lo, hi = need, min(q, len(tail) - q)  # how much was said again, verbatim (slices compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if tail[-mid:] == tail[-mid - q:-q] else (lo, mid - 1)
    r = lo
    again = tail[-r:]
    lead = r - len(again.lstrip(" .,;:!?\t"))  # the end of the sentences before both copies may match too
    if r < len(tail) and LETTER_RE.match(tail[-r - 1]) and LETTER_RE.match(again) and (end := WORD_END_RE.match(again)):
        lead = end.end()  # the words before both copies end alike: a copy starts at the next word
    before = tail[:len(tail) - r + lead].rstrip(" ")
    first = again[lead:lead + 1]  # a capital, or no letter (%s, a digit, a quote); a caseless script needs a stop
    at_line = r >= len(tail) or tail[-r - 1] == "\n" or again[:1] == "\n"  # said again from a line's start
    stop = before[-3:] + tail[len(before):len(before) + 1]  # a stop ends a sentence before a space ("phi3.jinja": none)
    starts = (at_line or before[-1:] in ("", "\n") or SENTENCE_END_RE.search(stop) or first.isupper()
              or not first.isalpha() or SENTENCE_END_RE.search(again, 0, r - EARLY_CYCLE_CHARS)
              or _script_changes(before, first) or _unlike_context(tail, len(before), q, whole))
    prose = RUN_RE.sub("", LINK_RE.sub(r"\1", again))  # a ruler line or an address is neither prose nor not
    if r > q or r < min(q, EARLY_CYCLE_CHARS) or len(prose) < EARLY_CYCLE_CHARS // 2 or not starts \
            or len(LETTER_RE.findall(prose)) < 0.5 * len(prose):
        return False  # more than two copies (the loop rules judge them), a short cycle not said whole, no prose
    if _framed(tail, r, q):
        return False  # one frame before both copies, a word changed: a catalog's or a template's pair of messages
    cycle = tail[-r - q:-r]  # the whole cycle as first said: its layout shows before the part said again reaches it
    if INDENTED_RE.search(cycle) or _wrapped(cycle) or _verse(cycle):
        return False  # code, a docstring's body, wrapped documentation: siblings share all but their first words;
        # a poem's or a song's lines: a chorus comes back after a verse
    code = len(CODE_RE.findall(prose))
    # A stop where the text is cut ("array([-1.") is no sentence end yet: a number may go on.
    if code > 0.08 * r and (code > 0.2 * r or not SENTENCE_END_RE.search(again + "\0") and not _margin_lines(again)):
        return False  # code, which repeats its lines and blocks
    start = len(tail) - r + lead  # where the part said again starts; its first copy starts q before
    stuck = _next_paragraph(tail[len(tail) - q:start]) and _openings_alike(tail, start - q, start)
    m.update(cycle_chars=q, cycle_said_again=r, cycle_next_paragraph=int(stuck))
    return True


def _next_paragraph(between: str) -> bool:
    """Is the text between a cycle's two copies the rest of one paragraph, one blank line, and whole sentences that open
    the next paragraph (`between` ends at a sentence's end)? Then the paragraph after the first copy's says its text
    again with a new opening, as a generation stuck on a paragraph does; a document that says a paragraph again does
    so under a heading of its own, or from its first word."""
    return bool(NEXT_PARAGRAPH_RE.fullmatch(between)) and bool(SENTENCE_END_RE.search(between[-3:]))


def _openings_alike(tail: str, first: int, again: int) -> bool:
    """Do the paragraph openings before a cycle's two copies (from each copy's paragraph start to the copy) share
    OPENINGS_ALIKE of their content words or more? A generation stuck on a paragraph opens it again much as before
    ("The review is written in a friendly tone." / "The user's review is written in a friendly and professional
    tone."); a paragraph that goes on to echo one sentence of the one before opens with a sentence of its own."""
    openings = []
    for at in (first, again):
        blank = tail.rfind("\n\n", 0, at)  # the paragraph's start: after its blank line, or the tail's start
        openings.append(tail[blank + 2 if blank >= 0 else 0:at])
    return all(openings) and _alike(*map(_content_words, openings)) >= OPENINGS_ALIKE


def _verse(cycle: str) -> bool:
    """Is the cycle stanzas (a blank line between) of VERSE_LINES lines or more, each at most VERSE_COLUMNS wide: a
    poem's or a song's, whose chorus is said again after a verse? A list's short lines have no blank line between
    them. The loop rules still judge a chorus when it comes a third time."""
    lines = [line for line in cycle.split("\n") if line.strip()]
    return BLANK_LINE_RE.search(cycle) is not None and len(lines) >= VERSE_LINES and all(
        width(line) <= VERSE_COLUMNS for line in lines)


def _short_cycle(cycle: str) -> bool:
    """A cycle under EARLY_CYCLE_CHARS said again whole, back to back: within one line (healthy documents almost never
    say 60 characters of a line again at once), or two different lines or more (messages, list items). One line
    said twice is a list's or a program's output."""
    return "\n" not in cycle or len({line.strip() for line in cycle.split("\n") if line.strip()}) >= 2


def _script_changes(before: str, first: str) -> bool:
    """Is the letter `first` in another script than the last letter of `before` (as Unicode names them: LATIN,
    DEVANAGARI, CJK ...)? A catalog's next message, which opens in lowercase or in a script without capitals."""
    last = next((c for c in reversed(before[-8:]) if c.isalpha()), first)
    return unicodedata.name(first, "?").split(" ", 1)[0] != unicodedata.name(last, "?").split(" ", 1)[0]


def _decomposed(text: str) -> str:
    """Letters with marks decomposed (NFD), so lengths count alike whether a tokenizer composes them on decode (Qwen2's)
    or keeps them decomposed; Hangul syllables stay whole (NFD would write each as two or three jamo, and Korean is
    written composed whatever the tokenizer)."""
    if text.isascii() or unicodedata.is_normalized("NFD", text):
        return text
    if not HANGUL_RE.search(text):
        return unicodedata.normalize("NFD", text)
    return "".join(p if HANGUL_RE.match(p) else unicodedata.normalize("NFD", p) for p in HANGUL_SPLIT_RE.split(text))


def _unlike_context(tail: str, start: int, q: int, whole: bool) -> bool:
    """Do the CONTEXT_CHARS before the part said again and before its first copy (as many as there are, at least
    CONTEXT_MIN) share almost no words and few characters? Then each copy starts a message, as a cycle's copies do
    after the text before the loop and after the cycle's end, with or without a stop: sibling messages built from
    one template share the words before the part they say alike. A first copy that opens the whole text has nothing
    before it; one after a word or two ("red" + a message said for three colours) is not judged."""
    if start - q <= 0:
        return whole
    context = _contexts(tail, start, q)
    if context is None:
        return False
    a, b = context
    words_a, words_b = _content_words(a), _content_words(b)
    alike = _alike(words_a, words_b)
    if alike == 0 and min(len(words_a), len(words_b)) >= CONTEXT_WORDS_NONE:
        return True  # many words and not one shared (their letters may be: English beside Vietnamese)
    return alike < CONTEXT_WORDS_ALIKE and _alike(a, b) < CONTEXT_CHARS_ALIKE


def _contexts(tail: str, start: int, q: int) -> tuple[str, str] | None:
    """The CONTEXT_CHARS before the first copy and before the part said again at `start` (as many as there are before
    the first copy); None where fewer than CONTEXT_MIN precede the first copy."""
    room = start - q
    if room < CONTEXT_MIN:
        return None
    n = min(CONTEXT_CHARS, room)
    return tail[room - n:room], tail[start - n:start]


def _alike(a, b) -> float:
    """How alike two strings or two lists of words are (difflib's ratio, without its junk heuristic)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _content_words(text: str) -> list[str]:
    """The words of a text but its first (maybe cut short) and the function words any two texts share ("the", "of")."""
    text = unicodedata.normalize("NFC", text)  # the text is decomposed: words split at their marks otherwise
    return [w for w in WORD_RE.findall(text.lower())[1:] if w not in FUNCTION_WORDS]


def _framed(tail: str, r: int, q: int) -> bool:
    """The FRAME_CHARS before the part said again and before its first copy are more alike than not ("This option
    sets what a double-click / a middle-click ..."), or the CONTEXT_CHARS before them share most of their words (a
    paragraph said again for a second device, its subject a few words longer): text built from one template. A
    looping generation's first copy follows whatever it wrote before the loop began, its second the end of the cycle."""
    end = len(tail) - r
    before_first, before_again = tail[max(0, end - q - FRAME_CHARS):end - q], tail[max(0, end - FRAME_CHARS):end]
    if _alike(before_first, before_again) >= FRAME_ALIKE:
        return True
    context = _contexts(tail, end, q)
    return context is not None and _alike(*map(_content_words, context)) >= CONTEXT_WORDS_FRAMED


def _margin_lines(text: str) -> bool:
    """Two lines or more, none indented: messages or list items without stops (a changelog's, a catalog's), prose
    that may name code; code indents its lines (a block's body, reStructuredText's `::`)."""
    return "\n" in text.strip() and not re.search(r"\n[ \t]+\S", text)


def _wrapped(text: str) -> bool:
    """A line break inside a sentence (after a lowercase or caseless letter or a comma, before a lowercase or caseless
    letter of the same script, the next line indented or not) in a line WRAP_COLUMNS wide or more, where the next word
    would not have fit within the widest line: prose wrapped at a column, as docstrings, man pages and catalogs are (a
    wrapper breaks a line only there). A generation writes a paragraph as one line; its lines of separate messages
    break anywhere, and where the script changes (a Vietnamese message, then a Hindi one), the language changes (a
    Vietnamese message, then an English one) or the next line leaves room for the word after it, a new message starts."""
    widest, at = max(map(width, text.split("\n"))), text.find("\n", 1)
    while 0 < at < len(text) - 1:
        if _wrap_break(text, at, widest):
            return True
        at = text.find("\n", at + 1)
    return False


def _wrap_break(text: str, at: int, widest: int) -> bool:
    """Is the line break at `at` one a wrapper at the widest line's column made inside a paragraph (see _wrapped)?"""
    before, after = _base(text, at), text[at + 1:at + 9].lstrip(" \t")[:1]
    line = text[text.rfind("\n", 0, at) + 1:at]
    wide = width(line)
    if not ((before == "," or before.isalpha() and not before.isupper()) and after.isalpha() and not after.isupper()):
        return False
    if wide < WRAP_COLUMNS or wide + 1 + width(text[at + 1:].split(None, 1)[0]) <= widest:
        return False
    if COLUMN_GAP_RE.search(line) and text[at + 1] not in " \t" or _script_changes(line, after):
        return False
    end = text.find("\n", at + 1)
    nxt, following = (text[at + 1:end], text[end + 1:]) if end > 0 else (text[at + 1:], "")
    return not _marks_change(line, nxt) and not _unfilled(nxt, following, widest)


def _marks_change(line: str, after: str) -> bool:
    """Is one line written with marks on MARKED_SHARE of its letters or more (Vietnamese, decomposed) and the other with
    none (English, a command, a URL)? Two messages in two languages of one script: a wrapper breaks inside one."""
    shares = []
    for text in (line, after):
        letters = LETTER_RE.findall(text)
        if len(letters) < WRAP_LETTERS:
            return False
        shares.append(sum(unicodedata.category(c) == "Mn" for c in letters) / len(letters))
    return min(shares) == 0 and max(shares) >= MARKED_SHARE


def _unfilled(nxt: str, following: str, widest: int) -> bool:
    """Does the line after a break (`nxt`) end where the first word of the text after it, lowercase, would have fit?
    A wrapper fills each line of a paragraph; lines of messages (a catalog's, without stops) end anywhere."""
    if not following[:1].isalpha() or following[:1].isupper():
        return False
    return width(nxt) + 1 + width(following.split(None, 1)[0]) <= widest


def _base(text: str, at: int) -> str:
    """The character before `at`, its marks skipped (a decomposed "ệ" is "e" and two marks; Devanagari and Thai
    write vowel signs after their consonant)."""
    i = at - 1
    while i > 0 and unicodedata.category(text[i])[0] == "M":
        i -= 1
    return text[i]


def _said_before(tail: str) -> int:
    """How far back the last 24 characters of `tail` were said before (0: not said, or a tail under 120 characters).
    A run of one character at the end (a ruler being written) says nothing of where a cycle began: it is matched
    from the characters before it."""
    if len(tail) < 2 * EARLY_CYCLE_MIN:
        return 0
    run = len(tail) - len(tail.rstrip(tail[-1])) if tail[-10:] == tail[-1] * 10 else 0
    end = len(tail) - run
    at = tail.rfind(tail[end - 24:end], 0, end - 25)
    return 0 if at < 0 else end - 24 - at
