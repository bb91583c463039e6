"""Task metrics for generated answers: exact match, ROUGE-L (rouge-score), chrF (sacrebleu), or your own.

`metrics="auto"` computes all three built-ins (they cost milliseconds) and makes the one that fits the
references primary: exact match when the answers are short (median <= SHORT_ANSWER_WORDS words), else
ROUGE-L. A comma-separated list names the metrics instead (the first is primary; "auto" in it stands for the three
and auto's primary); `module:function` is a user scorer called as `function(output: str, reference: str) -> float`
(`"auto,mytask:score"` adds it to the built-ins, `"mytask:score"` alone scores with it alone).

Words are Unicode words, each Chinese or Japanese character one (rouge-score's own tokenizer keeps only a-z and 0-9:
identical Russian or Chinese answers scored 0), a letter's combining marks part of its word (Devanagari), and in
Thai, Lao, Myanmar and Khmer, written without spaces, each letter with its marks one (as for Chinese). Every
metric compares NFC text: the tokenizer gives NFC back (Qwen's normalises), so an NFD reference (Vietnamese typed on
macOS) would score a right answer 0.

Every metric is a per-sample score in [0, 1] averaged over samples, so one bootstrap over samples gives
its confidence interval, and the paired per-sample scores give tuned vs base win/tie/loss counts.
"""

from __future__ import annotations

import importlib
import numbers
import re
import statistics
import unicodedata
from collections.abc import Callable

from nbutils.eval.textshape import MARKS

SHORT_ANSWER_WORDS = 3
BUILTIN = ("exact_match", "rouge_l", "chrf")
TIE_TOLERANCE = 1e-9
# A word: a run of letters or digits in any script, each with its combining marks (Devanagari vowel signs are
# marks, not \w: without them 'नमस्ते' split in three); in the scripts that put no spaces between words, one unit
# each: a CJK ideograph or kana, or a Thai, Lao, Myanmar or Khmer letter with its marks (as a run, a whole Thai
# sentence would be one word, and ROUGE-L all or nothing).
UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
UNSPACED_MARKED = "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
WORD_RE = re.compile(rf"[{UNSPACED}]|[{UNSPACED_MARKED}][{MARKS}]*|(?:[^\W_{UNSPACED_MARKED}][{MARKS}]*)+")


def nfc(text: str) -> str:
    """The text in Unicode NFC: one spelling for a letter with accents, however it was typed."""
    return unicodedata.normalize("NFC", text)


def words(text: str) -> list[str]:
    """The text's words, NFC and lowercased (WORD_RE): what ROUGE-L matches and auto's answer length counts."""
    return WORD_RE.findall(nfc(text).lower())


class _Words:
    """rouge-score's tokenizer interface over `words`."""

    def tokenize(self, text: str) -> list[str]:
        return words(text)


def _norm(text: str) -> str:
    return " ".join(nfc(text).lower().split())


def exact_match(outputs: list[str], references: list[str]) -> list[float]:
    """1.0 where the output equals the reference after trimming whitespace and case (in NFC), else 0.0."""
    return [float(_norm(o) == _norm(r)) for o, r in zip(outputs, references)]


def rouge_l(outputs: list[str], references: list[str]) -> list[float]:
    """ROUGE-L F-measure per sample (rouge-score, over `words`: the same as its own tokenizer on English)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Words())
    return [scorer.score(r, o)["rougeL"].fmeasure for o, r in zip(outputs, references)]


def chrf(outputs: list[str], references: list[str]) -> list[float]:
    """Sentence-level chrF per sample (sacrebleu defaults: char 6-grams, beta 2) on NFC text, scaled to [0, 1]."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    return [metric.sentence_score(nfc(o), [nfc(r)]).score / 100.0 for o, r in zip(outputs, references)]


def load_user_metric(spec: str) -> Callable[[list[str], list[str]], list[float]]:
    """A `module:function` scorer wrapped to the per-sample list form; errors name the spec and what to fix."""
    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"metric {spec!r}: a user metric is written module:function, e.g. mytask.scoring:score")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except ImportError as e:
        raise ValueError(f"metric {spec!r}: cannot import {module_name} ({e}); put the module on sys.path "
                         "(the notebook's folder, or an attached dataset) and run again") from e
    except AttributeError as e:
        raise ValueError(f"metric {spec!r}: {module_name} has no function {func_name}") from e

    def score(outputs: list[str], references: list[str]) -> list[float]:
        """The user function on each pair (in NFC, as the built-ins compare), checked to return a number."""
        out = []
        for i, (o, r) in enumerate(zip(outputs, references)):
            value = func(nfc(o), nfc(r))
            if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's floats and ints are Real
                raise TypeError(f"metric {spec!r} returned {type(value).__name__} for sample {i}; it must return a number")
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"metric {spec!r} returned {float(value):g} for sample {i}; a score is in [0, 1] "
                                 "(scale it): intervals and the chart read it so")
            out.append(float(value))
        return out

    return score


def resolve(metrics: str | list[str], references: list[str]) -> tuple[list[str], str]:
    """(metric names to compute, primary metric) for the parameter value and these references."""
    if isinstance(metrics, str):
        names = [m.strip() for m in metrics.split(",") if m.strip()]
    else:
        names = list(metrics)
    if not names:
        raise ValueError("metrics is empty: use 'auto', or names from exact_match, rouge_l, chrf, module:function")
    if "auto" in names:  # the built-ins in its place (auto's primary when it comes first), then the others named
        length = statistics.median(len(words(r)) for r in references) if references else 0
        primary = "exact_match" if length <= SHORT_ANSWER_WORDS else "rouge_l"
        at = names.index("auto")
        names = list(dict.fromkeys(names[:at] + list(BUILTIN) + names[at + 1:]))
        return names, names[0] if at else primary
    unknown = [n for n in names if n not in BUILTIN and ":" not in n]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}: choose from auto, {', '.join(BUILTIN)}, or module:function")
    return names, names[0]


def scorer(name: str) -> Callable[[list[str], list[str]], list[float]]:
    """The per-sample scoring function for a metric name."""
    return {"exact_match": exact_match, "rouge_l": rouge_l, "chrf": chrf}.get(name) or load_user_metric(name)


def bootstrap_ci(scores: list[float], n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> list[float]:
    """Percentile bootstrap interval of the mean over samples, [low, high]; [nan, nan] (no interval) without scores
    or with n_boot 0 (03's n_bootstrap = 0: no resample was drawn)."""
    import numpy as np

    if n_boot < 0:
        raise ValueError(f"n_bootstrap={n_boot}: the number of resamples is 0 (no intervals) or more; 1000 is usual")
    if not scores or not n_boot:
        return [float("nan"), float("nan")]
    values = np.asarray(scores, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))]


def win_tie_loss(tuned: list[float], base: list[float]) -> dict[str, int]:
    """Per sample: tuned scored higher (win), the same (tie) or lower (loss) than base."""
    out = {"win": 0, "tie": 0, "loss": 0}
    for t, b in zip(tuned, base):
        out["tie" if abs(t - b) <= TIE_TOLERANCE else "win" if t > b else "loss"] += 1
    return out


def compare(metrics: str | list[str], outputs: dict[str, list[str]], references: list[str],
            n_boot: int = 1000, seed: int = 0) -> dict:
    """Every metric for base and tuned: mean, bootstrap interval, paired delta interval, win/tie/loss, per-sample."""
    names, primary = resolve(metrics, references)
    block: dict = {"primary": primary, "n_samples": len(references), "bootstrap": {"n": n_boot, "level": 0.95},
                   "metrics": {}}
    for name in names:
        score = scorer(name)
        per = {model: score(texts, references) for model, texts in outputs.items()}
        entry = {model: {"mean": sum(s) / max(1, len(s)), "ci": bootstrap_ci(s, n_boot, seed)} for model, s in per.items()}
        if "base" in per and "tuned" in per:
            delta = [t - b for t, b in zip(per["tuned"], per["base"])]
            entry["delta"] = {"mean": sum(delta) / max(1, len(delta)), "ci": bootstrap_ci(delta, n_boot, seed)}
            entry["win_tie_loss"] = win_tie_loss(per["tuned"], per["base"])
        entry["per_sample"] = {model: [round(v, 6) for v in s] for model, s in per.items()}
        block["metrics"][name] = entry
    return block


def summary_rows(block: dict) -> list[dict]:
    """One row per metric for display: base and tuned with intervals, delta, win/tie/loss."""
    rows = []
    for name, m in block["metrics"].items():
        fmt = lambda e: f"{e['mean']:.3f} [{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]"  # noqa: E731
        wtl = m.get("win_tie_loss", {})
        rows.append({"metric": name + (" (primary)" if name == block["primary"] else ""), "base": fmt(m["base"]),
                     "tuned": fmt(m["tuned"]), "delta": fmt(m["delta"]) if "delta" in m else "",
                     "win/tie/loss": f"{wtl.get('win', 0)}/{wtl.get('tie', 0)}/{wtl.get('loss', 0)}"})
    return rows
