"""Figures on the stress set: the post-hoc `detect`, the streaming guard fed token by token, and how they agree.

`score(healthy, degenerate, flag)` gives recall per class (and its minimum over the cut offsets),
false-positive rates overall, per script and in structured text, and the median detection latency
after the onset. `stream(samples, tokenizer)` runs every text through `DegenerationGuard` as
`generate` does (rows in a batch, `check_every` tokens at a time, EOS after the text) in observe
mode and returns, per text, whether and where it would have been stopped.
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from bench.degeneration.stress import CLASSES, CUTS, Sample, is_structured


def latency(text: str, onset: int, flag: Callable[[str], bool], step: int = 8) -> int | None:
    """Characters after `onset` until `flag` first fires on a growing prefix (None: never)."""
    k = 0 if onset == 0 else step
    while True:
        end = min(onset + k, len(text))
        if flag(text[:end]):
            return end - onset
        if end == len(text):
            return None
        k += step


def whisper_rule(text: str, threshold: float = 2.4) -> bool:
    """Whisper's fallback rule, for comparison: empty, or zlib compression ratio above 2.4."""
    raw = text.encode("utf-8")
    return not text.strip() or len(raw) / len(zlib.compress(raw)) > threshold


def median(xs: list) -> float | None:
    return statistics.median(xs) if xs else None


def score(healthy: list[Sample], degenerate: list[Sample], flags: dict[int, bool],
          flag: Callable[[str], bool] | None = None) -> dict:
    """Recall per class and per cut, false positives per group; latency (needs `flag`) on the first cut of each.

    flags: id(sample) -> flagged, for every sample of both lists.
    """
    groups: dict[str, list[bool]] = {}
    for s in healthy:
        groups.setdefault(s.group, []).append(flags[id(s)])
    fp = {g: sum(v) / len(v) for g, v in groups.items()}
    structured = [f for g, v in groups.items() if is_structured(g) for f in v]
    out = {"fp": sum(flags[id(s)] for s in healthy) / max(1, len(healthy)), "fp_groups": fp,
           "fp_structured": sum(structured) / max(1, len(structured)), "classes": {}, "latency": []}
    for cls in CLASSES:
        items = [s for s in degenerate if s.cls == cls]
        if not items:
            continue
        by_cut = [[flags[id(s)] for s in items if s.cut == j] for j in range(CUTS)]
        lats = []
        if flag is not None and cls != "empty":
            lats = [lat for s in items if s.cut == 0 and flags[id(s)]
                    and (lat := latency(s.text, s.onset, flag)) is not None]
        out["classes"][cls] = {"n": len(items), "recall": sum(flags[id(s)] for s in items) / len(items),
                               "min_cut": min(sum(c) / len(c) for c in by_cut if c), "latency": median(lats)}
        out["latency"] += lats
    out["recall"] = sum(flags[id(s)] for s in degenerate) / max(1, len(degenerate))
    return out


@dataclass
class Stop:
    stopped: bool
    reasons: list[str]
    at_char: int | None  # characters of the text generated when the guard would have stopped it
    agreed: bool | None = None  # does `detect` call the decoded prefix at the stop degenerate? (None: no stop)
    at_token: int | None = None  # the token it would have stopped on (0-based)


def stream(samples: list[Sample], tokenizer, batch: int = 32, check_every: int = 8,
           token_ids: dict[int, list[int]] | None = None) -> dict[int, Stop]:
    """Feed every text token by token through DegenerationGuard, calling it after every token as `generate` does;
    id(sample) -> Stop. The texts go on after a stop (the feed is fixed), but the guard never checks a stopped row
    again, as in `generate`. token_ids: id(sample) -> the tokens a model generated (else the text is tokenized)."""
    import torch

    from nbutils.eval.detect import detect
    from nbutils.eval.guard import DegenerationGuard

    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id or 0
    encoded = [(s, token_ids[id(s)] if token_ids else tokenizer(s.text, add_special_tokens=False)["input_ids"])
               for s in samples]
    encoded.sort(key=lambda e: len(e[1]))
    out: dict[int, Stop] = {}
    for b in range(0, len(encoded), batch):
        chunk = encoded[b:b + batch]
        width = max(len(ids) for _, ids in chunk) + 1
        rows = [[bos] + ids + [eos] * (width - len(ids)) for _, ids in chunk]
        seq = torch.tensor(rows, dtype=torch.long)
        guard = DegenerationGuard(tokenizer, prompt_length=1, check_every=check_every, eos_token_id=eos)
        for end in range(2, seq.shape[1] + 1):
            guard(seq[:, :end], None)
        for (s, ids), state in zip(chunk, guard.report()):
            at = agreed = None
            if state["reasons"]:  # the prefix as the eval decodes it (evaluation.generate), judged post hoc
                prefix = tokenizer.decode(ids[:state["stop_token"] + 1], skip_special_tokens=False)
                at, agreed = len(prefix), detect(prefix).degenerate
            out[id(s)] = Stop(bool(state["reasons"]), state["reasons"], at, agreed, state["stop_token"])
    stream.tokens = sum(len(ids) for _, ids in encoded)  # what was streamed, for a cost per token
    return out
