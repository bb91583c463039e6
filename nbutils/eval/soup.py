"""Word soup and subword soup: words without grammar, or fragments of words, judged on the last 24 words."""

from __future__ import annotations

import re

VOWELS = frozenset("aeiouy")
FUNCTION_WORDS = frozenset("""
the a an of to in on at for from by with and or but not no nor is are was were be been being it its this that these
those as if then than so such there their they them he she his her we our you your i me my do does did have has had
can could will would should may might must shall which who whom whose what when where why how all any each some more
most other into over under about after before between through during without within also only very just again both
while because until upon per via out up off one
der die das und nicht ist sind ein eine einen einem einer zu den dem des mit von im auf für als auch es sich wird
werden oder aber wie wenn nach bei aus um so dass noch nur war hat kann
le la les et est un une des du pour dans que qui pas sur au avec ce il elle sont par plus ne se en aux ou mais
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
_NEVER_TITLE = _PREP | _CONJ | frozenset("the an to is are was were".split())  # mid-sentence, as in "is and The"
TITLE_FW_RE = re.compile(r"\b[a-z]+ (?:{})\b".format("|".join(sorted(w.title() for w in _NEVER_TITLE))))
# A capitalized word between lowercase words, alone (not a name of several words): "file Context sydney".
MIDCAP_RE = re.compile(r"(?<=[a-z] )[A-Z][a-z]{2,}\b(?! [A-Z])")
_ONSETS = frozenset("bl br ch cl cr dr dw fl fr gh gl gn gr kl kn kr ph pl pn pr ps qu rh sc sh sk sl sm sn sp sq st sv "
                    "sw th tr ts tw vl wh wr zh".split())


def soup(tokens: list[str], recent: str, m: dict) -> str | None:
    """Word soup (words without grammar) or subword soup (fragments), judged on the last 24 words."""
    words: list[str] = []
    n = span = chars = other = lines = bad = function = short = 0
    bare, nxt = None, ""  # bare: words since the last punctuation or line break
    for t in reversed(tokens):
        if n == 24:
            break
        c = t.lstrip("_")[:1] or t[0]  # _private_name is a word
        span, chars = span + 1, chars + len(t) + 1
        if c.isalpha() and not "\u3040" <= c <= "\ufaff":
            if t in FUNCTION_WORDS:
                function += 1
                bad += nxt in _NOT_AFTER.get(t, ()) or (t == nxt and t != "that") or (nxt in (",", ";") and t in _DET)
            short += _fragment(t)
            words.append(t)
            n += 1
        else:
            bare = n if bare is None else bare
            lines += t == "\n"
            other += t != "\n" and (not c.isalnum() or "\u3040" <= c <= "\ufaff")  # punctuation, numbers, CJK
        nxt = t
    if n < 16 and not (n >= 12 and short >= 0.75 * n):  # a short text, unless it is nearly all fragments
        return None
    if bare is None:  # no punctuation in the window: how far back does the bare run go (up to 40 words)?
        bare = n
        for t in reversed(tokens[max(0, len(tokens) - span - 16):len(tokens) - span]):
            if not t[0].isalpha():
                break
            bare += 1
    bad += len(TITLE_FW_RE.findall(recent[-chars:]))  # "is and The once": a function word capitalized mid-sentence
    caps = len(MIDCAP_RE.findall(recent[-chars:]))
    snake = sum("_" in w.strip("_") for w in words)
    m.update(function_share=round(function / n, 3), punct_share=round(other / span, 3), short_share=round(short / n, 3),
             bad_pairs=bad, bare_words=bare, mid_caps=caps, snake=snake)
    if other >= 0.25 * span or lines >= n / 4 or sum(not w.isascii() for w in words) > 0.1 * n:
        return None  # code, tables, lists (few function words by nature); languages written with diacritics
    if short >= 0.5 * n or (function < 0.15 * n and sum(_odd_word(w) for w in words) >= 0.3 * n):
        return "subword-soup"
    if function < 0.1 * n or bad >= 3 or (bare >= 24 and (bad >= 1 or caps >= 1 or function < 0.25 * n)):
        return "word-soup"
    if snake >= 0.2 * n and other < 0.15 * span and function < 0.25 * n:  # identifiers strung together, no code
        return "word-soup"
    # Grammar broken twice, or capitalized words turning up alone among few function words.
    if (bad >= 2 and (caps >= 1 or function < 0.25 * n)) or (caps >= 4 and function < 0.25 * n):
        return "word-soup"
    if bare >= 16 and (caps >= 3 or caps >= 1 and function < 0.3 * n):  # capitalized words alone, no punctuation
        return "word-soup"
    return None


def _fragment(w: str) -> bool:
    """A piece of a word: one letter (other than a, I), or up to three letters that are no common word."""
    return len(w) <= 3 and (w not in FUNCTION_WORDS or (len(w) == 1 and w not in "ai") or not VOWELS.intersection(w))


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

