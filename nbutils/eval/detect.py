"""Is a generation garbage? Loops, token soup, unicode junk, empty output: detected cheaply, as it streams.

`detect(text)` judges the end of a text (its last TAIL_CHARS characters, so a check costs the same
at token 50 and at token 5000) with rules whose thresholds are counts of repeats and shares of a
fixed-size window, never a compression ratio (zlib's ratio grows with length: long healthy text
crosses Whisper's 2.4). Loops are found on a normalized token stream (numbers become one token)
whose last token may be cut short, so the verdict does not depend on where in its last period a
loop was cut off (`max_new_tokens` stops a generation anywhere). Letters with combining marks
(Vietnamese in NFD, Devanagari, Thai, Arabic harakat) are parts of words, and rulers are judged
by the same rule in every script. `nbutils.eval.guard.DegenerationGuard` runs the same function inside
`model.generate` on each row's text tail, so the guard and a post-hoc check agree.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from nbutils.eval.clauses import clause_loop
from nbutils.eval.counted import LIST_MARKS, NUM, counted
from nbutils.eval.cycle import early_cycle
from nbutils.eval.items import item_loop
from nbutils.eval.junk import CJK, unicode_junk
from nbutils.eval.lines import line_loop
from nbutils.eval.shuffled import shuffled_loop
from nbutils.eval.soup import soup
from nbutils.eval.textshape import MARKS, RUN_RE, SENTENCE_END_RE, width

TAIL_CHARS = 1600  # loops with a period up to ~500 characters are visible; the cost stays flat
RECENT_CHARS = 400  # unicode and subword checks look only here: junk is judged where it is
# Post hoc, soup is judged again where the text ended a word or a few earlier (within the last 32 characters): it is
# judged on its last 24 words, and a window moved by one word must not turn a soup healthy. The guard needs no such
# look back: it judges every prefix it checks as the text grows.
LOOKBACK_CHARS = 32

_SPECIAL = (r"<\|[^|<>\s]{1,40}\|>|</?s>|<(?:pad|unk|eos|bos|mask|eot|sep|cls|end_of_turn|start_of_turn)>"
            r"|\[(?:PAD|SEP|CLS|UNK|MASK|EOS|BOS)\]|<extra_id_\d+>")
SPECIAL_RE = re.compile(_SPECIAL, re.I)
PARTIAL_SPECIAL_RE = re.compile(r"<\|[^|<>\s]{0,40}\|?$|</?[a-z_]{0,13}$|\[[A-Z]{0,4}$")  # cut off in the middle of <|user|>
SPECIAL_RUN_RE = re.compile(rf"(?:(?:{_SPECIAL})\s*){{4,}}$", re.I)  # special tokens, over and over, at the end
END_MARK_RE = re.compile(r"end|eos|eot|</s>|stop", re.I)  # end-of-text markers: what follows them is padding


_LETTERS = rf"(?:[^\W\d_{CJK}][{MARKS}]*)+"  # a letter and its marks: Vietnamese in NFD, Devanagari, Thai, harakat
# Hex literals, words, numbers, newlines, single punctuation; a CJK character is a token (no spaces there).
TOKEN_RE = re.compile(rf"0[xX][0-9a-fA-F]+|\\[xuU][0-9a-fA-F]+|[{CJK}]|_*{_LETTERS}(?:_+{_LETTERS})*_*|\d+|\n"
                      r"|[^\w\s]")
# The same tokens for lowercased ASCII text, about 40% cheaper (\x1c-\x1f are whitespace to Unicode's \s).
ASCII_TOKEN_RE = re.compile(r"0x[0-9a-f]+|\\[xu][0-9a-f]+|_*[a-z]+(?:_+[a-z]+)*_*|\d+|\n|[^\w\s\x1c-\x1f]", re.A)
# Whole numbers as TOKEN_RE sees them (Step 41, Q41, 0x1f); escapes and digits inside names (x1d4b0) are left alone.
NUMBER_RE = re.compile(r"(\\[xuU][0-9a-fA-F]+)|(?<![\d.])(?:0[xX][0-9a-fA-F]+|\d+)(?=st\b|nd\b|rd\b|th\b|\W|$)")
SUBWORD_RE = re.compile(r"[ĠĊ]|âĢ|▁[^\W\d_]|##[^\W\d_]")
DIGIT_RE = re.compile(r"[\d\\]")
ESCAPE_CAP_RE = re.compile(r"\\([A-Z])(?![0-9A-Za-z])")  # \L and \l, \U and \u are different escapes: keep them apart
OPTION_CAP_RE = re.compile(r"(?<![\w-])-([A-Z])(?![0-9A-Za-z])")  # so are -F and -f (see _cased_loop)
SPACE_RE = re.compile(r"(?<=\S)\s")  # where a word ends
PARTIAL_ESCAPE_RE = re.compile(r"(?:\b0[xX]|\\[xuU]?)$")  # a hex literal or escape cut before its first digit
CUT_CHAR_RE = re.compile("\ufffd{1,3}$")  # a character whose last bytes are not generated yet (a stop, max_new_tokens)
BLANK_RE = re.compile(r"\n(?:[ \t\r\f]*\n){7,}")  # 7+ blank lines in a row; shipped text has at most 4
RULER_COLUMNS = 120  # a line of one separator up to this wide is a ruler (72, 78, 80, 100, 120 are common)
ROW_COPIES = 12  # a line of separators alone said this often is a loop; a box drawn in text is seldom so tall
OUTPUT_COPIES = 5  # inside a code block, a line said this often is a loop; fewer is a program's sample output
SEPARATORS = frozenset("-=_*#~.+^/\\|<>:;`'\"·•‧・ー\u0640")  # rulers; tatweel and ー stretch Arabic and Japanese lines
WHITESPACE_RE = re.compile(r"\s{160,}")  # spaces, tabs and newlines mixed: 160 in a row is no layout
COUNT_SEPARATORS = frozenset((",", ";", "\n"))  # what a count writes between its numbers (or only a space)
COUNT_REPEATS, COUNT_CHARS = 10, 1000  # a counted template is a loop from this many items or characters (_enough)

@dataclass
class Verdict:
    degenerate: bool
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def _special_run(text: str) -> bool:
    """<pad><pad><pad><pad> at the end with no end-of-text marker before: the model says nothing, forever."""
    run = SPECIAL_RUN_RE.search(text)
    if not run:
        return False
    before = SPECIAL_RE.findall(text[:run.start()][-40:])
    marks = SPECIAL_RE.findall(run.group()) + before[-1:]
    return not any(END_MARK_RE.search(t) for t in marks) and len(set(marks)) <= 2


def _is_word(tok: str) -> bool:
    """A token made of letters (an identifier counts; numbers, hex literals and punctuation do not)."""
    return tok.lstrip("_")[:1].isalpha() and tok[:2] not in ("0x", "0X")


def _char_runs(text: str, start: int, truncated: bool, m: dict) -> bool:
    """A run of one character (or of blank lines) longer than healthy text ever has."""
    worst = 0.0
    for match in RUN_RE.finditer(text, start):
        c, n, s = match.group(1), len(match.group(0)), match.start()
        if _separator(c):
            line_start = text.rfind("\n", 0, s) + 1
            if text[line_start:s].strip(" \t\ufeff" + c):  # (the run may start before the text searched)
                limit = 100  # after words on its line: dot leaders, "Loading......"
            elif s == 0 and truncated:
                continue  # a ruler whose line starts before the text in view
            else:  # a ruler: its line holds only it (a byte-order mark or indentation may come first)
                limit = RULER_COLUMNS // max(1, width(c)) + 1
        elif c.isspace():
            limit = 160  # indentation; blank lines are counted below
        elif c.isdigit() or text[max(0, s - 2):s] in ("0x", "0X"):
            limit = 41  # git's null hash is 40 zeros; 0xffff... masks
        elif c.isalpha() and not c.isascii():
            limit = 10  # 中中中中中中中中中中
        else:
            limit = 24
        worst = max(worst, n / limit)
    blank = max((g.count("\n") for g in BLANK_RE.findall(text, start)), default=0)
    blank = max(blank, 8 * bool(WHITESPACE_RE.search(text, start)))
    m.update(char_run=round(worst, 2), blank_lines=blank)
    return worst >= 1 or blank >= 8


def _separator(c: str) -> bool:
    """A ruler character in any script: dashes, lines, dots, arrows, box drawing, and their full-width forms."""
    c = unicodedata.normalize("NFKC", c)[:1] or c
    return c in SEPARATORS or unicodedata.category(c) in ("Pd", "Pc", "Sm", "Sk") or "\u2190" <= c <= "\u2bff"


def _char_period(text: str) -> int:
    """A short period at the character level, for repeats that have no token boundaries: hahaha, 你好你好, 353353."""
    last = text[-1:]
    for p in range(2, min(33, len(text))):
        if text[-1 - p] != last:
            continue
        unit = text[-p:]
        # the last need+p characters have period p; hex groups (ffff:) as long as digits: an IPv6 mask has 39
        need = max(5 * p, 42) if unit.isdigit() or _hex_groups(unit) else max(2 * p, 24)
        if len(text) < need + p or text[-need:] != text[-need - p:-p]:
            continue
        if unit.isdigit() or (sum(c.isalpha() for c in unit) >= max(2, 0.4 * p)
                              and any(_is_word(t) for t in TOKEN_RE.findall(unit))):
            return p
    return 0


def _hex_groups(s: str) -> bool:
    """Hex digits joined by colons and nothing else (ffff:ffff, FFFF:): an IPv6 address or mask, eight groups at most."""
    digits = s.replace(":", "")
    return 0 < len(digits) < len(s) and not digits.lower().strip("0123456789abcdef")


def _number(match: re.Match) -> str:
    return match.group(1) or NUM


def _loop(tail: str, tokens: list[str], m: dict, partial: bool = False, fenced: bool = False) -> str | None:
    """Tail periodicity on normalized tokens (numbers are NUM): 'token-repeat', 'loop' or 'counting-loop'.

    partial: the text ends inside a word or number, so its last token may be cut short. It is left
    out of the search and must be the start of the token one period before it: the verdict is the
    same wherever in its last period a loop was cut off. fenced: the whole text ends inside a code block.
    """
    cut = tokens[-1] if partial and tokens else ""
    rev, nums = (tokens[-2::-1] if cut else tokens[::-1]), None
    n, p = len(rev), 0
    while n >= 4:
        try:
            p = rev.index(rev[0], p + 1, n // 2 + 1)  # candidate period: where the last token occurred before
        except ValueError:
            return None
        if cut and not rev[p - 1].startswith(cut):
            continue
        run = 0
        while run < n - p and rev[run] == rev[run + p]:
            run += 1
        if run < p:
            continue  # not even two copies
        unit, span_nums, exact, counting, listed, every = rev[:p], [], True, False, False, False
        if NUM in unit:  # compare the actual numbers: the same template with new numbers is a counting loop
            if nums is None:
                nums = [x.group() for x in NUMBER_RE.finditer(tail) if not x.group(1)][:-1 if cut == NUM else None]
            span_nums = nums[max(0, len(nums) - rev[:run + p].count(NUM)):]
            exact, counting, listed, every = counted(rev, run + p, p, span_nums)
            if not exact and (whole := (run + p) // p * p) < run + p:
                # Said otherwise only in the part of a copy before the first whole one ("if n > 3:" before copies of
                # "if n % 3 == 0 ..."): that part matched as tokens, not as numbers; the whole copies are the loop.
                whole_nums = nums[max(0, len(nums) - rev[:whole].count(NUM)):]
                if counted(rev, whole, p, whole_nums)[0]:
                    run, exact, counting, listed, every, span_nums = whole - p, True, False, False, False, whole_nums
        span = sum(len(t) + 1 for t in rev[:run + p]) + sum(len(x) - 1 for x in span_nums)  # one space per token
        words = {t for t in unit if _is_word(t)}
        # a line said again whose line break is all that is left to say counts as said: "X\nX\nX" is three copies
        reps = (run + p + (rev[p - 1] == "\n")) / p
        if _enough(unit, words, reps, span, exact, counting, listed, every) or (
                exact and len(words) >= 8 and _sentence_cycle(tail, span * p / (run + p))):
            if unit.count("\n") == 1 and (run + p) / p < OUTPUT_COPIES and fenced:
                continue  # inside a code block: a program's sample output says a line a few times
            if not (exact or listed) and _code_table(tail, unit, (run + p) / p):
                continue
            m.update(loop_period=p, loop_repeats=round((run + p) / p, 2), loop_chars=span, loop_counts=int(counting))
            if (copies := _line_copies(rev, run + p, p)) is not None:
                m.update(loop_line_copies=round(copies, 2))
            if not exact:
                return "counting-loop"
            return "token-repeat" if len(words) <= 1 and p <= 2 else "loop"
    return None


def _cased_loop(tail: str, tokens: list[str], m: dict, partial: bool, fenced: bool) -> str | None:
    """_loop, and where it finds one in a text with a one-letter option in capitals, _loop again with options in their
    case: a linker's catalog says "cannot use -F without -shared" and then the same for -f. Only a loop pays for the
    second look: the guard runs detect at every check, and most checks find none."""
    found: dict = {}
    loop = _loop(tail, tokens, found, partial=partial, fenced=fenced)
    if loop and OPTION_CAP_RE.search(tail):
        found = {}
        loop = _loop(tail, _tokens(OPTION_CAP_RE.sub(r"-^\1", tail)), found, partial=partial, fenced=fenced)
    m.update(found)
    return loop


def _code_table(tail: str, unit: list[str], copies: float) -> bool:
    """Counted lines of code, each indented (an enum, a codec's or a key map's table: `    _curses.KEY_F21: 'kf21',`):
    what source files hold, however long. A counting loop writes its items at the margin or inside a sentence."""
    lines = unit.count("\n")
    if not lines or not _code_ish(unit):
        return False
    region = tail.split("\n")[-int(lines * copies):]  # the lines the counted items span, the last one maybe cut
    return len(region) >= 2 and all(line[:1] in (" ", "\t") for line in region if line)


def _code_ish(unit: list[str]) -> bool:
    """Symbols (not words, numbers or line breaks) are a third of the unit's tokens or more: code or markup."""
    return sum(not t[0].isalnum() and t != "\n" and t != NUM for t in unit) >= 0.35 * len(unit)


def _sentence_cycle(tail: str, per_copy: float) -> bool:
    """Sentences said again, verbatim, as a block of 100+ characters: a loop at two copies, whatever else the block
    holds (`code`, <urls>, %s). Healthy text repeats a code example, seldom a run of sentences word for word.

    per_copy: the token period's length estimate; the exact character period is found on the raw tail (the
    nearest earlier occurrence of its last 24 characters) and must hold for two whole copies.
    """
    if per_copy < 90:
        return False
    q = len(tail) - 24 - tail.rfind(tail[-24:], 0, len(tail) - 25)
    if not 100 <= q <= 2 * per_copy or q > len(tail) // 2 or tail[-2 * q:-q] != tail[-q:]:
        return False
    return bool(SENTENCE_END_RE.search(tail[-q - 3:]))


def _sample_output(text: str, p: int, fenced: bool) -> bool:
    """A line said fewer than OUTPUT_COPIES times at the end of a text inside a code block (`fenced`, judged on the
    whole text: a window of its end can start inside an earlier block): a program's output."""
    unit = text[-p:]
    return unit.count("\n") == 1 and fenced and text[-p * OUTPUT_COPIES:] != unit * OUTPUT_COPIES


def _line_copies(rev: list[str], size: int, p: int) -> float | None:
    """Copies of a periodic region (rev[:size], reversed) counted from the first line start in it.

    A catalog line that ends like the line before it and is then said again ("X changed, used to
    notify" / "Y changed, used to notify" twice) is a region of 2.6 periods but 1.9 copies of a line.
    None for units without a line break, for regions that start at a line start (or the text's), and for
    regions whose copies start at a line start after the first (a loop of lines said after a word: the
    text before the first copy ends mid-line, the loop itself starts its lines where every copy does),
    unless the line the first copy ends opens with the unit's first two tokens: a catalog's lines that
    start alike ("No-break space in row 3, thin no-break space in row 4" / "No-break space in row 4").
    """
    if "\n" not in rev[:p] or size >= len(rev) or rev[size] == "\n":
        return None
    if rev[size - p] == "\n":
        start = rev.index("\n", size) if "\n" in rev[size:] else len(rev)  # the first copy's line starts after it
        if start - size < 2 or rev[start - 2:start] != rev[size - 2:size]:
            return None
    lead = 0
    while lead < p and rev[size - 1 - lead] != "\n":
        lead += 1
    while lead < size and rev[size - 1 - lead] == "\n":
        lead += 1  # the line breaks end the line before: the first copy starts after them
    return (size - lead) / p


def _enough(unit: list[str], words: set, reps: float, span: int, exact: bool, counting: bool,
            listed: bool = False, every: bool = False) -> bool:
    """Is a periodic tail long enough to be a loop? Repeats and characters needed, by the kind of unit."""
    p, numbers = len(unit), unit.count(NUM)
    if listed:  # a list's items said again under its next numbers: three whole copies, as lines said again
        return reps >= 3 and span >= 24
    code_ish = _code_ish(unit)
    if not words and numbers:  # a number said again and again, or counted: [29] [30] [31]
        # A count, what counting to 100 writes: bare numbers stepping evenly ("1, 2, 3, 4"), or a numbered list of
        # its numbers ("1. 1 / 2. 2 / 3. 3", every number stepping evenly).
        if counting and all(t == NUM or t in COUNT_SEPARATORS for t in unit) or every and "\n" in unit and numbers >= 2 \
                and all(t == NUM or t in COUNT_SEPARATORS or t in LIST_MARKS for t in unit):
            return False
        # A numbered list of numbers that differ ("1. 1 / 2. 2 / 3. 4 / 4. 5", "14. 8*11": divisors, wrong ones too) is
        # a list; one value said again under the next numbers was judged above (listed).
        if not exact and "\n" in unit and any(t in LIST_MARKS for t in unit) and numbers >= 2 * unit.count("\n"):
            return False  # (a list's number and a value on each line: "(59)" / "(60)" are counted marks, a loop)
        if exact and "\n" not in unit and numbers >= 4 and p >= 8:  # a formula said again: "= 7 × 6 × 5 × 4 × 3"
            return reps >= 3 and span >= 60
        return (exact or counting) and reps >= 10 and span >= 40
    if not words:  # punctuation: ", , , ,"; a ruler of separators is judged by its length, like a character run
        if all(_separator(c) for t in unit if t != "\n" for c in t):  # longer than a ruler (spaces are counted)
            # or a row of them said again ROW_COPIES times: an empty table's rows ("|   |   |"), however they are spaced
            return reps >= 8 and span > 2 * RULER_COLUMNS or "\n" in unit and reps >= ROW_COPIES
        return reps >= (16 if "\n" in unit else 8) and span >= 16
    if all(unit[(i + 1) % p] == "%" for i, t in enumerate(unit) if t in words):  # (unit is reversed: % comes next)
        # printf placeholders alone ("--%s, --%s, ... or --%s": dpkg names twelve options), each a different value
        # when printed, are a list, as counted items are, up to 2 * COUNT_REPEATS
        return reps >= 2 * COUNT_REPEATS and span >= 40
    if not exact:
        # A counted template ("Move window to workspace 4", a table of keys) is what healthy menus, catalogs and code
        # list up to about nine times: a loop from COUNT_REPEATS items (twice as many where the numbers do not step
        # evenly: a menu listed as text sorts them 1, 10, 11, 12, 2 ...) or COUNT_CHARS characters of them.
        if reps < COUNT_REPEATS * (1 if counting else 2) and span < COUNT_CHARS:
            return False
        return span >= 40 and reps >= (8 if numbers > len(words) else 6 if code_ish else 4 if counting else 13)
    if p <= 2:  # hex groups joined by colons are an IPv6 address or mask up to its eight groups (ffff:ffff:...)
        return reps >= (9 if _hex_groups("".join(unit)) else 5) and span >= 16
    if code_ish and len(words) < 3:  # markup rows: <td>yes</td> <td>yes</td> ... (tables say a cell 6 times)
        return reps >= 8 and span >= 40
    if p <= 4 or len(words) < 3 or (code_ish and span < 160 * reps):
        return reps >= 3 and span >= 24
    # Two copies of a unit of 100 characters are a loop, and two of a pair of sentences of 40 within a line; a shorter
    # one needs half a third: one sentence said twice ("I'm a service provider, and I'm not a service provider."
    # again) is emphasis, and lines of a list start alike.
    pair = "\n" not in unit and sum(t in ".!?" for t in unit) >= 2
    return span >= 32 and reps >= (2 if span >= (40 if pair else 100) * reps else 2.5)


def _tokens(tail: str) -> list[str]:
    low = (ESCAPE_CAP_RE.sub(r"\\^\1", tail) if "\\" in tail else tail).lower()
    normalized = NUMBER_RE.sub(_number, low) if DIGIT_RE.search(low) else low  # numbers become NUM
    return (ASCII_TOKEN_RE if low.isascii() else TOKEN_RE).findall(normalized)  # NUM: one token either way


def _soup_before(tail: str, lookback: int, m: dict, whole: bool) -> str | None:
    """Soup judged where the text ended at each space within its last `lookback` characters (latest first). The last
    word there is taken as possibly cut short, as the guard takes it at a check. whole: `tail` is the whole text."""
    spaces = [s.start() for s in SPACE_RE.finditer(tail, max(0, len(tail) - lookback))]
    for end in reversed(spaces):
        recent = tail[max(0, end - RECENT_CHARS):end]
        if end and (kind := soup(_tokens(tail[:end]), recent, {}, whole and end <= RECENT_CHARS)):
            m.update(soup_chars_before_end=len(tail) - end)
            return kind
    return None


def detect(text: str, lookback: int = LOOKBACK_CHARS) -> Verdict:
    """Verdict on one text; only its last TAIL_CHARS characters are examined.

    lookback: soup is also judged at the spaces within the last `lookback` characters (0: only at the end, as the
    guard does on each check)."""
    m: dict[str, float] = {"chars": len(text)}
    if text.endswith("\ufffd"):  # the guard judges up to the last whole character; so does a check after the fact
        text = CUT_CHAR_RE.sub("", text)
    if not text.strip():
        return Verdict(True, ["empty"], m)
    tail, whole = text[-TAIL_CHARS:], len(text) <= TAIL_CHARS  # whole: the text from its start is in view
    if "<" in tail or "[" in tail:
        tail = SPECIAL_RE.sub(" ", PARTIAL_SPECIAL_RE.sub("", tail))
    if not tail.strip() and not SPECIAL_RE.sub("", PARTIAL_SPECIAL_RE.sub("", text)).strip():
        return Verdict(True, ["special-tokens-only"], m)  # "<|im_": a marker cut short is a marker too
    recent = tail[-RECENT_CHARS:]
    reasons = []
    if text.rstrip().endswith((">", "]")) and _special_run(text[-RECENT_CHARS:]):
        reasons.append("token-repeat")
    if unicode_junk(recent, m):
        reasons.append("unicode-junk")
    if (not recent.isascii() or "##" in recent) and len(SUBWORD_RE.findall(recent)) >= 3:  # ASCII: only ## can match
        reasons.append("subword-soup")
    if _char_runs(tail, len(tail) - len(recent), len(text) > len(tail), m):
        reasons.append("char-repeat")
    if (cut_escape := PARTIAL_ESCAPE_RE.search(tail, len(tail) - 3)) and cut_escape.start():  # 0x, \\x cut short
        tail = tail[:cut_escape.start()]
    tokens = _tokens(tail)
    last, fenced = tail[-1:], text.count("```") % 2 == 1  # the whole text's fences: a window may start inside one
    loop = _cased_loop(tail, tokens, m, partial=last.isalnum() or last == "_" or unicodedata.category(last)[0] == "M",
                       fenced=fenced)
    if not loop and (early_cycle(tail, m, whole) or item_loop(tail, _tokens, m) or clause_loop(tail, m)
                     or shuffled_loop(tail, m) or line_loop(tail, _tokens, m)):
        loop = "loop"
    if not loop and (p := _char_period(recent)) and not _sample_output(recent, p, fenced):
        loop = "loop" if any(c.isspace() for c in recent[-p:]) else "token-repeat"
        m.update(loop_period_chars=p)
    if loop:
        reasons.append(loop)
    kind = None if loop else soup(tokens, recent, m, whole and len(tail) <= RECENT_CHARS)
    if lookback and not reasons and not kind:
        kind = _soup_before(tail, lookback, m, whole)
    if kind and kind not in reasons:
        reasons.append(kind)
    return Verdict(bool(reasons), reasons, m)
