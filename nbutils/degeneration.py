"""Is a generation garbage? Loops, token soup, unicode junk, empty output: detected cheaply, as it streams.

`detect(text)` judges the end of a text (its last TAIL_CHARS characters, so a check costs the same
at token 50 and at token 5000) with rules whose thresholds are counts of repeats and shares of a
fixed-size window, never a compression ratio (zlib's ratio grows with length: long healthy text
crosses Whisper's 2.4). `DegenerationGuard` (in nbutils.guard, importable from here too) runs the
same checks inside `model.generate` and stops only the rows that degenerate; it never changes the
tokens of healthy rows. `CircuitBreaker` stops a whole run when most early samples are garbage.

Command line:  python -m nbutils.degeneration check FILE.jsonl [--field text]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
import zlib
from dataclasses import dataclass, field

TAIL_CHARS = 1600  # loops with a period up to ~500 characters are visible; the cost stays flat
RECENT_CHARS = 400  # unicode and subword checks look only here: junk is judged where it is

_SPECIAL = (r"<\|[^|<>\s]{1,40}\|>|</?s>|<(?:pad|unk|eos|bos|mask|eot|sep|cls|end_of_turn|start_of_turn)>"
            r"|\[(?:PAD|SEP|CLS|UNK|MASK|EOS|BOS)\]|<extra_id_\d+>")
SPECIAL_RE = re.compile(_SPECIAL, re.I)
SPECIAL_RUN_RE = re.compile(rf"(?:(?:{_SPECIAL})\s*){{4,}}$", re.I)  # special tokens, over and over, at the end
END_MARK_RE = re.compile(r"end|eos|eot|</s>|stop", re.I)  # end-of-text markers: what follows them is padding
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Hex literals, words, numbers, newlines, single punctuation; a CJK character is a token (no spaces there).
TOKEN_RE = re.compile(rf"0[xX][0-9a-fA-F]+|\\[xuU][0-9a-fA-F]+|[{CJK}]|_*[^\W\d_{CJK}]+(?:_+[^\W\d_{CJK}]+)*_*|\d+|\n"
                      r"|[^\w\s]")
# The same tokens for lowercased ASCII text, about 40% cheaper (\x1c-\x1f are whitespace to Unicode's \s).
ASCII_TOKEN_RE = re.compile(r"0x[0-9a-f]+|\\[xu][0-9a-f]+|_*[a-z]+(?:_+[a-z]+)*_*|\d+|\n|[^\w\s\x1c-\x1f]", re.A)
# Whole numbers as TOKEN_RE sees them (Step 41, Q41, 0x1f); escapes and digits inside names (x1d4b0) are left alone.
NUMBER_RE = re.compile(r"(\\[xuU][0-9a-fA-F]+)|(?<![\d.])(?:0[xX][0-9a-fA-F]+|\d+)(?=st\b|nd\b|rd\b|th\b|\W|$)")
SUBWORD_RE = re.compile(r"[ĠĊ]|âĢ|▁[^\W\d_]|##[^\W\d_]")
# UTF-8 read as Latin-1/cp1252: a lead byte (Â-ð) followed by continuation bytes (U+0080-U+00BF or their cp1252 glyphs).
_CONT = "\u0080-\u00bf\u20ac\u201a\u0192\u201e\u2026\u2020\u2021\u02c6\u2030\u0160\u2039\u0152\u017d\u2018\u2019" \
        "\u201c\u201d\u2022\u2013\u2014\u02dc\u2122\u0161\u203a\u0153\u017e\u0178"
MOJIBAKE_RE = re.compile(f"[\u00c2-\u00df][{_CONT}]|[\u00e0-\u00ef][{_CONT}]{{2}}|\u00f0[{_CONT}]{{3}}")
CONTROL_RE = re.compile("[\x00-\x08\x0e-\x1f\x7f]")  # \t \n \v \f \r are ordinary in text and source files
# Invisible characters after ASCII (where no script needs them), or ones no script needs at all.
INVISIBLE_RE = re.compile("(?<=[\x20-\x7e\u0400-\u04ff])[\u200b-\u200f]|[\ufeff\u2060-\u2064]")
COMBINING_RUN_RE = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]{4,}")
PRIVATE_RE = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]")
RUN_RE = re.compile(r"(.)\1{9,}", re.S)
DIGIT_RE = re.compile(r"[\d\\]")
NUM = "\ue000"  # what a number becomes in the normalized token stream (a private-use character: never real text)
BLANK_RE = re.compile(r"\n(?:[ \t\r\f]*\n){7,}")  # 7+ blank lines in a row; shipped text has at most 4
SEPARATORS = frozenset("-=_*#~.+^/\\|<>:;`'\"") | {chr(c) for c in range(0x2500, 0x25a0)}  # rulers, box drawing
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
_ONSETS = frozenset("bl br ch cl cr dr dw fl fr gh gl gn gr kl kn kr ph pl pn pr ps qu rh sc sh sk sl sm sn sp sq st sv "
                    "sw th tr ts tw vl wh wr zh".split())


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
        if c in SEPARATORS:
            line_start = text.rfind("\n", 0, s) + 1
            prev = text[text.rfind("\n", 0, max(0, line_start - 1)) + 1:max(0, line_start - 1)].strip()
            if line_start == s and (n <= len(prev) + 2 or (s == 0 and truncated)):
                continue  # reStructuredText underline, as long as its title (or whose title is out of view)
            limit = 100
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
    m.update(char_run=round(worst, 2), blank_lines=blank)
    return worst >= 1 or blank >= 8


def _char_period(text: str) -> int:
    """A short period at the character level, for repeats that have no token boundaries: hahaha, 你好你好, 353353."""
    last = text[-1:]
    for p in range(2, min(33, len(text))):
        if text[-1 - p] != last:
            continue
        unit = text[-p:]
        need = max(5 * p, 42) if unit.isdigit() else max(2 * p, 24)  # the last need+p characters have period p
        if len(text) < need + p or text[-need:] != text[-need - p:-p]:
            continue
        if unit.isdigit() or (sum(c.isalpha() for c in unit) >= max(2, 0.4 * p)
                              and any(_is_word(t) for t in TOKEN_RE.findall(unit))):
            return p
    return 0


def _number(match: re.Match) -> str:
    return match.group(1) or NUM


def _loop(tail: str, tokens: list[str], m: dict) -> str | None:
    """Tail periodicity on normalized tokens (numbers are 0): 'token-repeat', 'loop' or 'counting-loop'."""
    rev, n, p, nums = tokens[::-1], len(tokens), 0, None
    while n >= 4:
        try:
            p = rev.index(rev[0], p + 1, n // 2 + 1)  # candidate period: where the last token occurred before
        except ValueError:
            return None
        run = 0
        while run < n - p and rev[run] == rev[run + p]:
            run += 1
        if run < p:
            continue  # not even two copies
        reps, unit = (run + p) / p, rev[:p]
        words = {t for t in unit if _is_word(t)}
        numbers = unit.count(NUM)
        exact, counting = True, False
        if numbers:  # compare the actual numbers: the same template with new numbers is a counting loop
            nums = nums or [x.group() for x in NUMBER_RE.finditer(tail) if not x.group(1)]
            span_nums = nums[max(0, len(nums) - rev[:run + p].count(NUM)):]
            exact = all(a == b for a, b in zip(span_nums, span_nums[numbers:]))
            for k in range(numbers):
                vals = [int(v) for v in span_nums[k::numbers] if v.isdigit()]
                steps = {b - a for a, b in zip(vals, vals[1:])}
                counting |= len(vals) >= 3 and len(steps) == 1 and 0 not in steps
        code_ish = sum(not t[0].isalnum() and t != "\n" and t != NUM for t in unit) >= 0.35 * p
        span = sum(len(t) + 1 for t in rev[:run + p])  # characters, counting one space per token
        span += sum(len(x) - 1 for x in span_nums) if numbers else 0
        if not words:  # a number said again and again; rulers and escapes are left to the character check
            ok = exact and numbers > 0 and reps >= 10 and span >= 40
        elif not exact:
            ok = span >= 40 and reps >= (8 if numbers > len(words) else 6 if code_ish else 3 if counting else 5)
        elif p <= 2:
            ok = reps >= 5 and span >= 16
        elif code_ish and len(words) < 3:  # markup rows: <td>yes</td> <td>yes</td> ...
            ok = reps >= 6 and span >= 40
        elif p <= 4 or len(words) < 3 or (code_ish and span < 160 * reps):
            ok = reps >= 3 and span >= 24
        else:
            ok = span >= 32
        if ok:
            m.update(loop_period=p, loop_repeats=round(reps, 2), loop_chars=span)
            if not exact:
                return "counting-loop"
            return "token-repeat" if len(words) <= 1 and p <= 2 else "loop"
    return None


def _soup(tokens: list[str], recent: str, m: dict) -> str | None:
    """Word soup (words without grammar) or subword soup (fragments), judged on the last 24 words."""
    words: list[str] = []
    n = span = chars = other = lines = bad = function = short = 0
    bare, nxt = None, ""  # bare: words since the last punctuation or line break
    for t in reversed(tokens):
        if n == 24:
            break
        c = t[0]
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
            other += t != "\n" and not c.isalnum()  # punctuation and numbers
        nxt = t
    if n < 16:
        return None
    if bare is None:  # no punctuation in the window: how far back does the bare run go (up to 40 words)?
        bare = n
        for t in reversed(tokens[max(0, len(tokens) - span - 16):len(tokens) - span]):
            if not t[0].isalpha():
                break
            bare += 1
    bad += len(TITLE_FW_RE.findall(recent[-chars:]))  # "is and The once": a function word capitalized mid-sentence
    m.update(function_share=round(function / n, 3), punct_share=round(other / span, 3), short_share=round(short / n, 3),
             bad_pairs=bad, bare_words=bare)
    if other >= 0.25 * span or lines >= n / 4 or sum(not w.isascii() for w in words) > 0.1 * n:
        return None  # code, tables, lists (few function words by nature); languages written with diacritics
    if short >= 0.5 * n or (function < 0.15 * n and sum(_odd_word(w) for w in words) >= 0.3 * n):
        return "subword-soup"
    if function < 0.1 * n or bad >= 3 or (bare >= 24 and (bad >= 1 or function < 0.25 * n)):
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


def _script(c: str) -> str:
    if c < "\u0250":
        return "latin" if c.isalpha() else "other"
    if "\u3040" <= c <= "\ufaff" or "\u1100" <= c <= "\u11ff" or "\u3130" <= c <= "\u318f":
        return "cjk"
    if not c.isalpha():
        return "symbol" if unicodedata.category(c)[0] == "S" else "other"  # punctuation separates, like spaces
    return unicodedata.name(c, "? ?").split(" ", 1)[0]


def _script_switches(text: str) -> float:
    """Changes of script between adjacent characters, symbols included (Latin next to CJK counts a quarter)."""
    score, prev = 0.0, None
    for c in text:
        s = "other" if c.isspace() or c.isdigit() or c.isascii() and not c.isalpha() else _script(c)
        if s == "other":
            prev = None
            continue
        if prev and s != prev:
            score += 0.25 if {s, prev} == {"latin", "cjk"} else 1
        prev = s
    return score


def _unicode_junk(text: str, m: dict) -> bool:
    """Replacement characters, control and invisible characters, mojibake, private-use and stacked marks."""
    control = len(CONTROL_RE.findall(text))
    if text.isascii():
        m.update(control=control)
        return control >= 2
    counts = {
        "replacement": text.count("\ufffd"), "control": control, "invisible": len(INVISIBLE_RE.findall(text)),
        "mojibake": len(MOJIBAKE_RE.findall(text)), "private_use": len(PRIVATE_RE.findall(text)),
        "stacked_marks": len(COMBINING_RUN_RE.findall(text)), "script_switches": _script_switches(text[-120:]),
    }
    m.update(counts)
    return (counts["replacement"] >= 2 or control >= 2 or counts["invisible"] >= 3 or counts["mojibake"] >= 2
            or counts["private_use"] >= 3 or counts["stacked_marks"] >= 2 or counts["script_switches"] >= 8)


def detect(text: str) -> Verdict:
    """Verdict on one text; only its last TAIL_CHARS characters are examined."""
    m: dict[str, float] = {"chars": len(text)}
    if not text.strip():
        return Verdict(True, ["empty"], m)
    tail = text[-TAIL_CHARS:]
    if "<" in tail or "[" in tail:
        tail = SPECIAL_RE.sub(" ", tail)
    if not tail.strip() and not SPECIAL_RE.sub("", text).strip():
        return Verdict(True, ["special-tokens-only"], m)
    recent = tail[-RECENT_CHARS:]
    reasons = []
    if text.rstrip().endswith((">", "]")) and _special_run(text[-RECENT_CHARS:]):
        reasons.append("token-repeat")
    if _unicode_junk(recent, m):
        reasons.append("unicode-junk")
    if (not recent.isascii() or "##" in recent) and len(SUBWORD_RE.findall(recent)) >= 3:  # ASCII: only ## can match
        reasons.append("subword-soup")
    if _char_runs(tail, len(tail) - len(recent), len(text) > len(tail), m):
        reasons.append("char-repeat")
    low = tail.lower()
    normalized = NUMBER_RE.sub(_number, low) if DIGIT_RE.search(low) else low  # numbers become NUM
    tokens = (ASCII_TOKEN_RE if low.isascii() else TOKEN_RE).findall(normalized)  # NUM: one token either way
    loop = _loop(tail, tokens, m)
    if not loop and (p := _char_period(recent)):
        loop = "loop" if any(c.isspace() for c in recent[-p:]) else "token-repeat"
        m.update(loop_period_chars=p)
    if loop:
        reasons.append(loop)
    soup = None if loop else _soup(tokens, recent, m)
    if soup and soup not in reasons:
        reasons.append(soup)
    return Verdict(bool(reasons), reasons, m)


def whisper_rule(text: str, threshold: float = 2.4) -> bool:
    """Whisper's fallback rule, for comparison: empty, or zlib compression ratio above 2.4."""
    raw = text.encode("utf-8")
    return not text.strip() or len(raw) / len(zlib.compress(raw)) > threshold


def __getattr__(name: str):
    """`from nbutils.degeneration import DegenerationGuard` works: the generate-time half lives in nbutils.guard."""
    if name in ("DegenerationGuard", "GenerationObserver", "RowState"):
        from nbutils import guard

        return getattr(guard, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- after generation ------------------------------------------------------------------------------------------------

class DegenerationError(RuntimeError):
    """Raised by CircuitBreaker: most early generations are garbage, so the run is stopped before it burns hours."""


class CircuitBreaker:
    """Raises DegenerationError when more than `max_degenerate_share` of the first `min_samples` outputs degenerate."""

    def __init__(self, min_samples: int = 16, max_degenerate_share: float = 0.5, *, max_share: float | None = None):
        self.min_samples = min_samples
        self.max_share = max_degenerate_share if max_share is None else max_share
        self.seen: list[tuple[str, Verdict]] = []
        self.checked = False

    def update(self, items, verdicts: list[Verdict] | None = None) -> None:
        """Feed outputs (texts) or Verdicts (or texts plus their verdicts); checks once min_samples are in."""
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        for k, item in enumerate(items):
            if isinstance(item, Verdict):
                self.seen.append(("", item))
            else:
                self.seen.append((item, verdicts[k] if verdicts is not None else detect(item)))
        if self.checked or len(self.seen) < self.min_samples:
            return
        self.checked = True
        first = self.seen[: self.min_samples]
        bad = [(t, v) for t, v in first if v.degenerate]
        share = len(bad) / len(first)
        if share > self.max_share:
            reasons: dict[str, int] = {}
            for _, v in bad:
                for r in v.reasons:
                    reasons[r] = reasons.get(r, 0) + 1
            examples = "\n".join(f"  - [{', '.join(v.reasons)}] {t[:160]!r}{'...' if len(t) > 160 else ''}"
                                 for t, v in bad[:3])
            raise DegenerationError(
                f"{len(bad)} of the first {len(first)} generations ({share:.0%}) are degenerate, more than the "
                f"{self.max_share:.0%} allowed; reasons: {reasons}.\nExamples:\n{examples}\nLikely causes: the model "
                "never learnt to emit EOS (pad token == EOS token, so EOS was masked out of the labels in training); "
                "a chat template different from the one used in training, or none; fp16 overflow (inf/NaN logits: "
                "use fp32 or bf16 where the GPU really supports it).")


def summarize(rows: list[dict], max_new_tokens: int) -> dict:
    """Rates and counts for a report. A row has text or verdict; optionally eos, tokens, stopped (by the guard)."""
    reasons: dict[str, int] = {}
    degenerate = eos = at_max = saved = 0
    for r in rows:
        stopped = bool(r.get("stopped", r.get("guard_stopped")))
        v = r.get("verdict") or (detect(r["text"]) if "text" in r else Verdict(stopped, list(r.get("reasons", []))))
        degenerate += v.degenerate or stopped
        for reason in dict.fromkeys(v.reasons or (r.get("reasons", []) if stopped else [])):
            reasons[reason] = reasons.get(reason, 0) + 1
        eos += bool(r.get("eos"))
        at_max += not r.get("eos") and not stopped and r.get("tokens", 0) >= max_new_tokens  # never said EOS
        saved += max(0, max_new_tokens - r.get("tokens", max_new_tokens)) if stopped else 0
    n = max(1, len(rows))
    return {"n": len(rows), "degenerate_rate": degenerate / n, "eos_rate": eos / n, "no_eos_at_max": at_max,
            "reasons": dict(sorted(reasons.items())), "tokens_generated": sum(r.get("tokens", 0) for r in rows),
            "tokens_saved": saved}


# ---- command line ------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.degeneration", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="print one JSON verdict per JSONL record, then a summary line")
    check.add_argument("file")
    check.add_argument("--field", default="text", help="the field holding the generated text (default: text)")
    args = parser.parse_args(argv)
    counts = {"checked": 0, "degenerate": 0, "unreadable_lines": 0}
    reasons: dict[str, int] = {}
    with open(args.file, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[args.field]
                if not isinstance(text, str):
                    raise TypeError(f"field {args.field!r} holds {type(text).__name__}, not text")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                counts["unreadable_lines"] += 1
                print(json.dumps({"line": n, "error": f"{type(e).__name__}: {e}"}))
                continue
            v = detect(text)
            counts["checked"] += 1
            counts["degenerate"] += v.degenerate
            for r in v.reasons:
                reasons[r] = reasons.get(r, 0) + 1
            print(json.dumps({"line": n, "degenerate": v.degenerate, "reasons": v.reasons, "metrics": v.metrics}))
    rate = counts["degenerate"] / counts["checked"] if counts["checked"] else 0.0
    print(json.dumps({"summary": {**counts, "degenerate_rate": round(rate, 4), "reasons": reasons}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
