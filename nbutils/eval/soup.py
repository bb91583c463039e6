"""Word soup and subword soup: words without grammar, or fragments of words, judged on the last 24 words, then 40."""

from __future__ import annotations

import re
from collections.abc import Iterator
from string import ascii_letters as ASCII_LETTERS

VOWELS = frozenset("aeiouy")
FUNCTION_WORDS = frozenset("""
the a an of to in on at for from by with and or but not no nor is are was were be been being it its this that these
those as if then than so such there their they them he she his her we our you your i me my do does did have has had
can could will would should may might must shall which who whom whose what when where why how all any each some more
most other into over under about after before between through during without within also only very just again both
while because until upon per via out up off one
der die das und nicht ist sind ein eine einen einem einer zu den dem des mit von im auf für als auch es sich wird
werden oder aber wie wenn nach bei aus um so dass noch nur war hat kann sie ich wir er ihr ihre ihren ihrem ihrer
sein seine seinen seiner muss müssen kein keine alle alles zum zur vom am über durch ohne bis diese dieser dieses
hier sehr schon mehr doch ob
le la les et est un une des du pour dans que qui pas sur au avec ce il elle sont par plus ne se en aux ou mais
à sans cette ces cet son sa ses leur leurs nous vous ils elles tout tous toute être été avoir fait comme jusqu lorsque
el los las y es en que del por con para una se al lo como más pero sus su son
il lo gli e di che è per una non con sono della nel
o os as e é um uma do da em que não para com se por
и в не на что с как это по к из у за от же о для да так он она они мы вы но или бы был была было есть
de het een van en op te dat niet zijn voor met als er maar om aan ook bij nog naar uit dan wel
och att det som på är av för med till den har inte ett og er til af jeg ikke
i w z na nie się do że jest jak po co ale v se je ze s
yang dan di ke dari untuk dengan ini itu tidak ada pada adalah akan dalam ve bir bu da ile için çok ama gibi daha
""".split())
# English closed-class words in orders grammar never puts them ("the of", "in is", "and or", "can will", "the."):
# word soup that keeps function words at their natural rate still breaks these rules every few words.
_DET = frozenset("the a an every its their our your my".split())
_PREP = frozenset("of in on at for from by with into over under about after during without within upon via".split())
_AUX = frozenset("is are was were has have had does did can could will would should may might must shall".split())
_CONJ = frozenset("and or but nor".split())
_PRON = frozenset("it they he she we you i".split())
_NOT_AFTER = {**{w: _PREP | _AUX | _DET | _CONJ | _PRON for w in _DET},
              **{w: _PREP | _AUX | _CONJ for w in _PREP}, **{w: _AUX - {"has", "have", "had"} for w in _AUX},
              **{w: _CONJ for w in _CONJ}, "to": _PREP | _AUX | _CONJ}
# "in or on", "to and from", "in or through": prepositions joined, as laws and manuals write them
_COORDINATED = _PREP | frozenset("to through before near between".split())
_BOUNDS = frozenset(("least", "most"))  # "for at least two hours", "in at most a day": a bound, no broken pair
_NEVER_TITLE = _PREP | _CONJ | frozenset("the an to is are was were".split())  # mid-sentence, as in "is and The"
TITLE_FW_RE = re.compile(r"\b[a-z]+ (?:{})\b".format("|".join(sorted(w.title() for w in _NEVER_TITLE))))
# A capitalized word between lowercase words, alone (not a name of several words): "file Context sydney". After "the"
# it is a name too: "the Sun", "the Earth", "the Software"; "Sam Ruby" is one; so is one after a possessive's "s"
# ("Constantine's Christianity": the "s" after the apostrophe is no word of its own).
MIDCAP_RE = re.compile(r"(?<!['\u2019])\b(?!the )[a-z]+ ([A-Z][a-z]{2,})\b(?! [A-Z])")
_ONSETS = frozenset("bl br ch cl cr dr dw fl fr gh gl gn gr kl kn kr ph pl pn pr ps qu rh sc sh sk sl sm sn sp sq st sv "
                    "sw th tr ts tw vl wh wr zh".split())


OPTION_RE = re.compile(r"(?:^|\s)--?[A-Za-z]")  # an option, in a command or opening a help line: -U, -y, --help
COLUMN_RE = re.compile(r"\S {3,}\S")  # a gap of three spaces or more inside a line: columns aligned
MESSAGE_WORDS = 16  # a catalog's message or a title seldom runs longer on one line
PATTERN_LETTERS = 3  # one-letter words from this few letters ("A B B A") are a pattern, not soup
WINDOWS = (24, 40)  # words judged at the end of a text: a short soup shows in 24, sparse signs need 40
# Distinctly German function words: where they are, capitals mark nouns, not soup.
GERMAN = frozenset("der und nicht ist sind ein eine einen einem einer den dem des mit von im auf für auch sich wird "
                   "werden oder aber wenn nach bei aus dass noch nur kann zum zur konnte kein keine".split())
# A sentence never ends on an article, a conjunction or "to", and seldom on a preposition: "of by." "list in.";
# nor does a clause on an article or "to" ("for an, match", "Speed to, command"). "a" is left out: (a, b).
STRANDED_RE = re.compile(r"\b(?:{})\.(?=\s|$)|\b(?:{}),(?=\s)".format(
    "|".join(sorted((_DET | _PREP | _CONJ | {"to"}) - {"a"})), "|".join(sorted((_DET | {"to"}) - {"a"}))))
# "an" before a consonant, "a" before a vowel (lowercase words: "an SQL", "an hour", "a user" are fine).
ARTICLE_RE = re.compile(r"\b(?:an [bcdfgjklmnpqrstvwz][a-z]|a [aei][a-z]{2})")  # "a is", "a in": a variable
# A sentence of one or two words between two others ("soup. Powerful. Red making", "module. Str py. Type"):
# prose has few, soup with stops sprinkled in has one every few sentences: one or more count as one broken pair
# ("Try it. ... Read more. ... See below." in a short answer: one, not three).
STUB_RE = re.compile(r"[a-z]\. [A-Z][a-z]+(?: [a-z]+)?\. [A-Z]")
_CONTRACTED = frozenset("t s ll re ve d m".split())  # can't, it's, we'll: the piece after an apostrophe


_KEYS = ("n", "span", "chars", "other", "lines", "bad", "function", "short", "german", "bare")


def _scan(tokens: list[str], windows: tuple[int, ...], cut: bool) -> Iterator[dict]:
    """Counts over the last `window` words, for each window in turn, in one pass read only as far as asked: words,
    function words, fragments, broken pairs, punctuation. Plain locals in the loop: the guard runs it on every check."""
    n = span = chars = other = lines = bad = function = short = german = glued = 0
    bare, words, found, line = None, [], 0, None
    nxt = after = ""  # the next token and the one after it
    last = len(tokens) - 1
    for i in range(last, -1, -1):
        if n == windows[found]:
            yield dict(zip(_KEYS, (n, span, chars, other, lines, bad, function, short, german, bare)), words=words[:], line=line)
            found += 1
            if found == len(windows):
                return
        t, prev = tokens[i], tokens[i - 1] if i else ""
        if n >= 16 and t[0] > "\u024f" and t[0].isalpha():
            break  # Latin-script words after text in another script (Greek, Thai...): they are judged alone
        first = t.lstrip("_")[:1] or t[0]  # _private_name is a word
        span, chars = span + 1, chars + len(t) + 1
        if first.isalpha() and not "\u3040" <= first <= "\ufaff" and nxt != ":" and not (
                prev == "'" and t in _CONTRACTED):  # a label (INFO:, Install:) or a contraction is no word
            if t in FUNCTION_WORDS:  # a word said twice in a row is a broken pair; three times, a chant ("la la la")
                function += 1
                if after != "-":  # "an in-memory tree": the next word is part of a compound
                    bad += (nxt in _NOT_AFTER.get(t, ()) and not (after in _COORDINATED and nxt in _CONJ and t in _COORDINATED)
                            and not (nxt == "at" and _bound(tokens, i + 2, cut))) or (
                        t == nxt and t != "that" and t not in (prev, after)) or (nxt == ";" and t in _DET)
            # isn't, won't; letters after digits that are no whole number (h8300sx, 041f: a number alone is NUM);
            # letters between digits of a hash (e77fd93)
            short += _fragment(t) and nxt != "'" and not prev[:1].isdigit() and not (
                t.strip("abcdef") == "" and (nxt[:1].isdigit() or "\ue000" in (prev, nxt))) and not _alphabet(t, prev, nxt)
            german += t in GERMAN
            words.append(t)
            n += 1
        else:
            bare = n if bare is None else bare
            if t == "\n" and not lines:
                line = (n, short, other, span, glued)  # the last line alone: soup that starts on a line of its own
            glued += t[:1].isdigit()  # digits that are no whole number (NUM): glued to letters (h8300sx), or versions
            lines += t == "\n"
            other += t != "\n" and (not first.isalnum() or "\u3040" <= first <= "\ufaff" or nxt == ":")
            # punctuation, CJK and labels are structure
        nxt, after = ("", "") if i == last and cut else (t, nxt)  # a word cut short pairs with nothing
    for _ in range(found, len(windows)):  # the text ran out first: every window left sees all of it
        yield dict(zip(_KEYS, (n, span, chars, other, lines, bad, function, short, german, bare)), words=words[:], line=line)


def soup(tokens: list[str], recent: str, m: dict, whole: bool = False) -> str | None:
    """Word soup (words without grammar) or subword soup (fragments), judged on the last 24 words, then 40.

    whole: `recent` is the text from its start (a short generation), so its first line is whole, not cut."""
    # zip asks the scan for the 40-word counts only when the 24-word ones left it going on
    for window, c in zip(WINDOWS, _scan(tokens, WINDOWS, recent[-1:].isalnum())):
        if window > WINDOWS[0] and c["n"] <= WINDOWS[0]:
            return None  # no more words than the first window judged
        if kind := _judge(c, tokens, recent, m, wide=window > WINDOWS[0], whole=whole):
            return kind
        if not _signs(m):
            return None  # the 40 words are read only where the last 24 show a sign of soup: the guard's cost
    return None


def _signs(m: dict) -> bool:
    """Any sign of soup in the counts _judge left: a broken pair, a lone capital, few function words, fragments."""
    return bool(m.get("bad_pairs") or m.get("mid_caps") or m.get("snake") or m.get("function_share", 1) < 0.25
                or m.get("short_share", 0) >= 0.25)


def _judge(c: dict, tokens: list[str], recent: str, m: dict, wide: bool = False, whole: bool = False) -> str | None:
    """The verdict on one window's counts (see _kind), with the signs read off the raw text added."""
    n, span, chars, other, function, short, bad, words = (c[k] for k in ("n", "span", "chars", "other", "function",
                                                                          "short", "bad", "words"))
    if c["lines"] and _columns(recent, chars, whole):
        return None
    if _fragment_line(c):
        return "subword-soup"
    if n < 16 and not (n >= 12 and short >= 0.75 * n):  # a short text, unless it is nearly all fragments
        return None
    if all(len(w) == 1 for w in words) and len(set(words)) <= PATTERN_LETTERS:
        return None  # "A B A B B A": a pattern of a few letters, as asked to continue one; no words at all
    bare = c["bare"]
    if bare is None:  # no punctuation in the window: how far back does the bare run go (up to 40 words)?
        bare = n
        for t in reversed(tokens[max(0, len(tokens) - span - 16):len(tokens) - span]):
            if not t[0].isalpha():
                break
            bare += 1
    caps = 0
    if c["german"] < 2:  # German capitalizes every noun
        text = _from_word_start(recent, chars).rstrip(ASCII_LETTERS)  # the last word may be cut short: it says nothing yet
        bad += len(TITLE_FW_RE.findall(text))  # "is and The once": a function word capitalized mid-sentence
        bad += len(STRANDED_RE.findall(text)) + len(ARTICLE_RE.findall(text)) + (STUB_RE.search(text) is not None)
        caps = len(set(MIDCAP_RE.findall(text)))  # a word said again capitalized is one
    snake = sum("_" in w.strip("_") for w in words)
    m.update(function_share=round(function / n, 3), punct_share=round(other / span, 3), short_share=round(short / n, 3),
             bad_pairs=bad, bare_words=bare, mid_caps=caps, snake=snake)
    if other >= 0.25 * span or c["lines"] >= n / 4 or sum(not w.isascii() for w in words) > 0.1 * n:
        return None  # code, tables, lists (few function words by nature); languages written with diacritics
    if c["lines"] >= 2:  # `pip install x` line after line, a catalog's messages: lines, not words run together
        lines = recent[-chars:].split("\n")
        if any(_listed(v) or _messages(v) for v in ([lines[1:], lines] if whole and chars >= len(recent) else [lines[1:]])):
            return None  # (the first line may be cut, unless the text's start is in view)
    if wide:  # more words add broken pairs and capitals; how long a run goes without punctuation is judged in 24
        bare = 0
    return _kind(n, span, other, function, short, bad, bare, caps, snake, words, recent[-chars:].count(", "))


def _from_word_start(recent: str, chars: int) -> str:
    """The window's last `chars` characters, from the start of the word they begin in. `chars` is counted from the
    tokens (each one and a space), not the text: the cut may fall inside a word, whose end would read as a word of
    its own ("mean the" as "an the", an article before a consonant)."""
    start = max(0, len(recent) - chars)
    while start and (recent[start - 1].isalnum() or recent[start - 1] == "_"):
        start -= 1
    return recent[start:]


def _listed(lines: list[str]) -> bool:
    """Lines most of which open with a word that opens another line too (`pip`, `python`) or pass an option (`-y`,
    `--help`): a list of commands or options, whatever its words. Soup runs on without line breaks."""
    lines = [line for line in lines if line.strip()]
    firsts = [line.split(None, 1)[0] for line in lines]
    return len(lines) >= 2 and sum(firsts.count(f) >= 2 or OPTION_RE.search(line) is not None
                                   for f, line in zip(firsts, lines)) >= 0.6 * len(lines)


def _columns(recent: str, chars: int, whole: bool) -> bool:
    """A help text's table (`erase CHAR    CHAR erases ...`, `lt le eq ne ge gt       (...)`), whose names and
    abbreviations are no words: two lines of the window with a gap of three spaces or more inside; or one, and a line
    that starts a word at the column the gap leads to, after two spaces or after one with the same character there
    (`lt-nl le-nl ge-nl gt-nl (...)`). A table's cell is short: where the last line runs on past MESSAGE_WORDS words
    after its last gap, it is no table. Soup is not aligned."""
    if "   " not in recent[-chars:]:
        return False
    start = max(0, len(recent) - chars)
    lines = recent[recent.rfind("\n", 0, start) + 1:].split("\n")  # from the first line's start
    if len(re.split(r"\S {3,}", lines[-1])[-1].split()) > MESSAGE_WORDS:
        return False
    if sum(COLUMN_RE.search(line) is not None for line in lines) >= 2:
        return True
    if not whole and "\n" not in recent[:start]:
        lines = lines[1:]  # the text's first line may be cut: where its columns are is unknown
    starts = {(gap.end() - 1, line[gap.end() - 1]) for line in lines for gap in COLUMN_RE.finditer(line)}
    return any(sum(line[c - 1:c + 1] == " " + char or (line[c - 2:c] == "  " and line[c:c + 1].strip() != "")
                   for line in lines) >= 2 for c, char in starts)


def _messages(lines: list[str]) -> bool:
    """Two lines or more, each opening with a capital and at most MESSAGE_WORDS words: a catalog's messages, titles,
    menu entries, in whatever language (a dialect's function words are in no list). Soup runs on without line breaks."""
    lines = [line.strip() for line in lines if line.strip()]
    return len(lines) >= 2 and all(line[:1].isupper() and len(line.split()) <= MESSAGE_WORDS for line in lines)


def _fragment_line(c: dict) -> bool:
    """The last line alone: twelve words or more, half of them fragments, few symbols (no code), all ASCII
    (Vietnamese and Devanagari syllables are short words, not fragments). Soup on a line of its own."""
    if not c["line"]:
        return False
    n, short, other, span, glued = c["line"]
    return n >= 12 and 2 * short >= n and 4 * other < span and 4 * glued < n and all(w.isascii() for w in c["words"][:n])


def _kind(n: int, span: int, other: int, function: int, short: int, bad: int, bare: int, caps: int, snake: int,
          words: list[str], commas: int) -> str | None:
    """Subword soup: mostly fragments or glued pseudo-words; word soup: few function words, broken pairs, lone capitals."""
    if short >= 0.5 * n or (function < 0.15 * n and sum(_odd_word(w) for w in words) >= 0.3 * n):
        return "subword-soup"
    # Few function words are soup, unless they are all there is and a comma comes every four words or sooner: items
    # listed ("redirects, multipart uploads, URL parsing"), as lists of features and of names are.
    if function < 0.1 * n and (bad or caps or snake or bare >= 16 or 4 * commas < n):
        return "word-soup"
    if bad >= 3 or (bare >= 24 and (bad >= 1 or caps >= 2 or function < 0.25 * n)):
        return "word-soup"
    if snake >= 0.2 * n and other < 0.15 * span and function < 0.25 * n:  # identifiers strung together, no code
        return "word-soup"
    # Grammar broken twice, or capitalized words turning up alone among few function words.
    if (bad >= 2 and (caps >= 1 or function < 0.25 * n)) or (caps >= 4 and function < 0.25 * n):
        return "word-soup"
    if bare >= 16 and (caps >= 3 or caps >= 1 and function < 0.3 * n):  # capitalized words alone, no punctuation
        return "word-soup"
    if bare >= 36 and function < 0.4 * n:  # 36 words without a comma or a stop, few of them function words
        return "word-soup"  # (more, and no broken pair: a run-on sentence, as a small model writes one)
    if function < 0.3 * n and (caps >= 4 or caps >= 2 and bad >= 1) and all(  # sparse soup: lone capitals, a
            w.isascii() and w not in GERMAN for w in words):  # broken pair; not where German capitalizes its nouns
        return "word-soup"
    if caps >= 4 and bad >= 1 and function < 0.4 * n:  # four lone capitals and a broken pair, in ordinary density
        return "word-soup"
    return None


def _fragment(w: str) -> bool:
    """A piece of a word: one letter (other than a, I), or up to three letters that are no common word."""
    return len(w) <= 3 and (w not in FUNCTION_WORDS or (len(w) == 1 and w not in "ai") or not VOWELS.intersection(w))


def _bound(tokens: list[str], j: int, cut: bool) -> bool:
    """Is tokens[j] "least" or "most" (after "for at", "in at": a bound), or its start, where the text ends inside it?"""
    w = tokens[j] if j < len(tokens) else ""
    return bool(w) and any(b.startswith(w) if cut and j == len(tokens) - 1 else b == w for b in _BOUNDS)


def _alphabet(t: str, prev: str, nxt: str) -> bool:
    """One letter beside the letter before or after it in the alphabet, alone too ("a b c d", "z y x"): letters
    listed in order, an alphabet or a sequence, not pieces of words."""
    return len(t) == 1 and any(len(o) == 1 and abs(ord(o) - ord(t)) == 1 for o in (prev, nxt))


def _odd_word(w: str) -> bool:
    """A pseudo-word glued from fragments: no vowel, four consonants in a row, three vowels, or a foreign onset."""
    if len(w) < 3 or "_" in w:
        return False
    if w[0] not in VOWELS and w[1] not in VOWELS and w[:2] not in _ONSETS:
        return True
    cons = vows = 0
    for c in w:
        if c in VOWELS:
            cons, vows = 0, vows + 1
        else:
            cons, vows = cons + 1, 0
        if cons >= 4 or vows >= 3:
            return True
    return not any(c in VOWELS for c in w)

