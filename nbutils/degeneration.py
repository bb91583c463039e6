"""Is a generation garbage? Loops, token soup, unicode junk, empty output: detected cheaply, as it streams.

`detect(text)` looks at a bounded tail of the text (so a check costs the same at token 50 and
token 5000) with rules whose thresholds are counts and shares, not compression ratios that grow
with length. `DegenerationGuard` runs it inside `model.generate` every few tokens and stops only
the rows that degenerate (it never changes the tokens of healthy rows). `CircuitBreaker` stops a
whole run when most early samples are garbage.

Command line:  python -m nbutils.degeneration check FILE.jsonl [--field text]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field

TAIL_CHARS = 1600  # loops longer than half of this are out of reach; costs stay flat
SPECIAL_RE = re.compile(r"<\|[^|<>\s]{1,30}\|>|</?s>|<pad>|<unk>|<eos>|<bos>|\[PAD\]|\[SEP\]|\[CLS\]|\[UNK\]|<mask>")
TOKEN_RE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]")
SUBWORD_RE = re.compile(r"##[^\W\d_]|Ġ\w|▁\w|Ċ|ĉ")
MOJIBAKE_RE = re.compile("Ã[\u0080-\u00bf]|â€[\u0080-\u00bf\u2122\u0153\u201c\u201d\u02dc\u0161]|Â[\u00a0-\u00bf]|ðŸ")
ZERO_WIDTH = set("\u200b\u200c\u200d\u2060\ufeff\u00ad")
# Rulers and indentation (-, =, _, *, #, ~, ., spaces, |, +, `, /, \) repeat in healthy text.
CHAR_RUN_RE = re.compile(r"([^-=_*#~. \n\t|+`/\\])\1{15,}")
BLANK_RUN_RE = re.compile(r"(?:\n[ \t\r]*){8,}")
CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
FUNCTION_WORDS = set("""
the a an of to in on at for from by with and or but not no is are was were be been being it its this that these those
as if then than so such there their they them he she his her we our you your i me my do does did have has had can could
will would should may might must shall which who whom whose what when where why how all any each some more most other
into over under about after before between through during without within also only very just again
der die das und nicht ist sind ein eine zu den dem des mit von im auf für als auch es sich wird werden oder aber wie
le la les et est un une des du pour dans que qui pas sur au avec ce il elle sont par plus ne se
el los las y es en que del por con para una se al lo como más pero sus su son
il lo gli e di che è per una non con sono della
o os as e é um uma do da em que não para com se por
и в не на что с как это по к из у за от же о для да так он она они мы вы но или
""".split())


@dataclass
class Verdict:
    degenerate: bool
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def _script(ch: str) -> str:
    if ch.isascii():
        return "latin"
    name = unicodedata.name(ch, "")
    for script in ("LATIN", "CYRILLIC", "GREEK", "ARABIC", "HEBREW", "CJK", "HIRAGANA", "KATAKANA", "HANGUL",
                   "DEVANAGARI", "THAI", "ARMENIAN", "GEORGIAN", "ETHIOPIC", "TAMIL", "BENGALI"):
        if name.startswith(script):
            return script.lower() if script not in ("HIRAGANA", "KATAKANA") else "kana"
    return "other"


def _unicode_junk(text: str, m: dict) -> bool:
    if text.isascii():  # the common case, kept cheap: only control characters can be junk here
        bad_ctrl = len(CONTROL_RE.findall(text))
        m.update(control=bad_ctrl)
        return bad_ctrl >= 3
    bad_ctrl = len(CONTROL_RE.findall(text))
    zero_width = sum(1 for c in text if c in ZERO_WIDTH)
    replacement = text.count("\ufffd")
    mojibake = len(MOJIBAKE_RE.findall(text))
    mixed = 0
    words = re.findall(r"[^\W\d_]{2,}", text)
    for w in words:
        if w.isascii():
            continue
        scripts = {_script(c) for c in w} - {"other"}
        if len(scripts) > 1 and not scripts <= {"cjk", "kana", "hangul"}:  # CJK scripts mix in normal writing
            mixed += 1
    script_counts: dict[str, int] = {}
    letters = 0
    for c in text:
        if c.isalpha():
            letters += 1
            s = _script(c)
            script_counts[s] = script_counts.get(s, 0) + 1
    major = [s for s, n in script_counts.items() if n >= max(3, 0.05 * letters)]
    privates = sum(1 for c in text if not c.isascii() and unicodedata.category(c) in ("Co", "Cn", "Cs"))
    m.update(control=bad_ctrl, zero_width=zero_width, replacement=replacement, mojibake=mojibake,
             mixed_script_words=mixed, scripts=len(major))
    return (replacement >= 2 or bad_ctrl >= 3 or zero_width >= 3 or mojibake >= 2 or privates >= 3
            or (mixed >= 3 and mixed >= 0.15 * len(words)) or len(major) >= 4)


def _char_repeat(text: str, m: dict) -> bool:
    blank = max((b.count("\n") for b in BLANK_RUN_RE.findall(text)), default=0)
    best = max((len(r.group(0)) for r in CHAR_RUN_RE.finditer(text)), default=0)
    m.update(newline_run=blank, char_run=best)
    return blank > 0 or best >= 16  # eight line breaks in a row: healthy text stops at three or four


def _needed_repeats(p: int, unit: list[str]) -> float:
    words = {t for t in unit if t.isalpha()}
    if p <= 2:
        return 5
    if p == 3:
        return 3
    return 2 if p > 5 and len(words) >= 3 else 2.5


def _loop(tokens: list[str], m: dict) -> str | None:
    """Tail periodicity on tokens with digits normalized: 'loop', 'token-repeat' or 'counting-loop'."""
    norm = ["0" if t.isdigit() else t.lower() for t in tokens]
    n = len(norm)
    m.update(loop_period=0, loop_repeats=0.0)
    for p in range(1, min(n // 2, 400) + 1):
        run = 0
        while run < n - p and norm[n - 1 - run] == norm[n - 1 - run - p]:
            run += 1
        repeats = (run + p) / p
        unit = norm[n - p:]
        if repeats < 2 or not any(t.isalpha() for t in unit):
            continue  # punctuation/number patterns (tables of figures, rulers) are not loops
        if repeats < _needed_repeats(p, unit):
            continue
        digits_vary = any(t.isdigit() for t in tokens[n - p:]) and tokens[n - p:] != tokens[n - 2 * p:n - p]
        if digits_vary and (repeats < 2.5 or "|" in unit or sum(len(t) >= 3 for t in unit if t.isalpha()) < 2):
            continue  # changelogs and tables of figures repeat a shape with new numbers; a counting loop has words
        m.update(loop_period=p, loop_repeats=round(repeats, 2))
        if p <= 2 and all(t.isalpha() for t in unit):
            return "token-repeat"
        return "counting-loop" if digits_vary else "loop"
    return None


def _soup(tokens: list[str], m: dict) -> str | None:
    """Word soup (words without grammar) or fragment soup, judged on the span of the last 40 words."""
    span, words = [], 0
    for t in reversed(tokens):
        if words >= 40:
            break
        span.append(t)
        words += t.isalpha()
    tail = [t for t in span if t.isalpha()]
    if len(tail) < 16:
        return None
    tail.reverse()
    punct = sum(1 for t in span if not t.isalnum()) / len(span)
    latin = sum(1 for w in tail if w.isascii()) / len(tail)
    function = sum(1 for w in tail if w.lower() in FUNCTION_WORDS) / len(tail)
    odd_pairs = sum(1 for a, b in zip(tail, tail[1:]) if a.lower() in ("the", "a", "an") and b.lower() in FUNCTION_WORDS)
    short = sum(1 for w in tail if len(w) <= 3 and w.lower() not in FUNCTION_WORDS) / len(tail)
    m.update(function_share=round(function, 3), punct_share=round(punct, 3), short_share=round(short, 3))
    if latin < 0.9:
        return None
    if short > 0.45 and punct < 0.15:
        return "subword-soup"
    if punct < 0.1 and (function < 0.12 or odd_pairs >= 3):
        return "word-soup"
    return None


def detect(text: str) -> Verdict:
    """Verdict on one text (only its last TAIL_CHARS characters are examined)."""
    m: dict[str, float] = {"chars": len(text)}
    if not text.strip():
        return Verdict(True, ["empty"], m)
    if not SPECIAL_RE.sub("", text).strip():
        return Verdict(True, ["special-tokens-only"], m)
    # Special tokens become a word, so a loop of role or end markers is a loop like any other.
    tail = SPECIAL_RE.sub(" specialtoken ", text[-TAIL_CHARS:])
    reasons = []
    if _unicode_junk(tail, m):
        reasons.append("unicode-junk")
    if len(SUBWORD_RE.findall(tail)) >= 3:
        reasons.append("subword-soup")
    if _char_repeat(tail, m):
        reasons.append("char-repeat")
    tokens = TOKEN_RE.findall(tail)
    # While streaming, the last word may be cut in half ("will" seen as "wil"): leave it out.
    loop = _loop(tokens[:-1] if tail[-1:].isalnum() else tokens, m)
    if loop:
        reasons.append(loop)
    soup = None if loop else _soup(tokens, m)
    if soup and soup not in reasons:
        reasons.append(soup)
    return Verdict(bool(reasons), reasons, m)


def whisper_rule(text: str, threshold: float = 2.4) -> bool:
    """Whisper's fallback rule, for comparison: zlib compression ratio above 2.4 (or empty)."""
    import zlib

    raw = text.encode("utf-8")
    return not text.strip() or len(raw) / len(zlib.compress(raw)) > threshold


class DegenerationError(RuntimeError):
    """Raised by the circuit breaker: most early generations are garbage, so stop the run now."""


class CircuitBreaker:
    """After `min_samples` generations, raise if more than `max_share` of them are degenerate."""

    def __init__(self, min_samples: int = 16, max_share: float = 0.5):
        self.min_samples, self.max_share = min_samples, max_share
        self.seen: list[tuple[str, Verdict]] = []

    def update(self, texts: list[str], verdicts: list[Verdict] | None = None) -> None:
        verdicts = verdicts or [detect(t) for t in texts]
        self.seen += list(zip(texts, verdicts))
        if len(self.seen) < self.min_samples:
            return
        bad = [(t, v) for t, v in self.seen if v.degenerate]
        share = len(bad) / len(self.seen)
        if share > self.max_share:
            examples = "\n".join(f"  - [{', '.join(v.reasons)}] {t[:120]!r}" for t, v in bad[:3])
            raise DegenerationError(
                f"{len(bad)} of the first {len(self.seen)} generations ({share:.0%}) are degenerate, above the "
                f"{self.max_share:.0%} limit. Examples:\n{examples}\nLikely causes: the model never learnt to emit "
                "EOS (pad token == EOS token, so EOS was masked in training); a wrong chat template (prompts not "
                "formatted as in training); fp16 overflow (NaN/inf logits: try bf16 on capability >= 8.0 or fp32)."
            )


def summarize(rows: list[dict], max_new_tokens: int) -> dict:
    """Rates and counts for a report; rows have text, tokens, eos, and optionally guard_stopped/verdict."""
    n = max(1, len(rows))
    reasons: dict[str, int] = {}
    for r in rows:
        for reason in r["verdict"].reasons:
            reasons[reason] = reasons.get(reason, 0) + 1
    return {
        "degenerate_rate": sum(r["verdict"].degenerate for r in rows) / n,
        "eos_rate": sum(bool(r["eos"]) for r in rows) / n,
        "no_eos_at_max": sum(1 for r in rows if not r["eos"] and r["tokens"] >= max_new_tokens),
        "reasons": dict(sorted(reasons.items())),
        "tokens_generated": sum(r["tokens"] for r in rows),
        "tokens_saved": sum(max_new_tokens - r["tokens"] for r in rows if r.get("guard_stopped")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.degeneration", description="Check generations.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="one JSON verdict per line of a JSONL file, then a summary line")
    p.add_argument("file")
    p.add_argument("--field", default="text")
    args = parser.parse_args(argv)
    total, bad, errors, reasons = 0, 0, 0, {}
    with open(args.file, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[args.field]
                if not isinstance(text, str):
                    raise TypeError(f"field {args.field!r} is {type(text).__name__}, not text")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                errors += 1
                print(json.dumps({"line": n, "error": f"{type(e).__name__}: {e}"}))
                continue
            v = detect(text)
            total += 1
            bad += v.degenerate
            for r in v.reasons:
                reasons[r] = reasons.get(r, 0) + 1
            print(json.dumps({"line": n, "degenerate": v.degenerate, "reasons": v.reasons, "metrics": v.metrics}))
    print(json.dumps({"summary": {"checked": total, "degenerate": bad, "unreadable_lines": errors,
                                  "degenerate_rate": bad / total if total else 0.0, "reasons": reasons}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
