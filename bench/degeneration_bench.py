"""Degeneration detector vs Whisper's compression-ratio rule on a labelled set (the guard's cost: guard_bench).

    python bench/degeneration_bench.py

The set is built from text shipped with Python and the installed packages (bench/degeneration_set.py).
Headline figures come from the held-out half (documents the rules were not tuned on, another seed);
the dev half is shown beside them. Latency: the text is fed as growing prefixes, 8 characters at a
time from the onset; latency is the first flagged prefix length minus the onset.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.degeneration_set import CLASSES, build, documents, is_heldout  # noqa: E402
from nbutils.degeneration import detect, whisper_rule  # noqa: E402


def ours(text: str) -> bool:
    return detect(text).degenerate


def latency(text: str, onset: int, flag, step: int = 8) -> int | None:
    """Characters after `onset` until `flag` first fires on a growing prefix (None: never)."""
    k = 0 if onset == 0 else step
    while True:
        end = min(onset + k, len(text))
        if flag(text[:end]):
            return end - onset
        if end == len(text):
            return None
        k += step


def _median(xs: list) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


def evaluate(healthy: list[dict], degenerate: list[dict], flag) -> dict:
    """Recall per class, false-positive rate, detection latencies (from the onset and from the continuation start)."""
    out = {"fp": sum(flag(h["text"]) for h in healthy) / len(healthy), "classes": {}}
    fp_kinds: dict[str, int] = {}
    for h in healthy:
        if flag(h["text"]):
            fp_kinds[h["kind"]] = fp_kinds.get(h["kind"], 0) + 1
    out["fp_kinds"] = fp_kinds
    hits = 0
    all_lat, all_lat_start = [], []
    for cls in CLASSES:
        items = [d for d in degenerate if d["class"] == cls]
        found = [d for d in items if flag(d["text"])]
        lats = [lat for d in found if (lat := latency(d["text"], d["onset"], flag)) is not None]
        from_start = [lat + d["onset"] - d["start"] for d, lat in zip(found, lats)]
        out["classes"][cls] = {"n": len(items), "recall": len(found) / len(items), "latency": lats}
        hits += len(found)
        all_lat += lats
        all_lat_start += from_start
    out["recall"] = hits / len(degenerate)
    out["latency"], out["latency_from_start"] = all_lat, all_lat_start
    return out


def window_fp(docs, flag, rng: random.Random, per_doc: int = 40) -> tuple[int, int]:
    """Flagged windows among prefixes cut at random points of whole healthy documents (every part of them)."""
    n = bad = 0
    for d in docs:
        for k in sorted(rng.sample(range(60, len(d.text)), min(per_doc, len(d.text) // 300))) if len(d.text) > 400 else []:
            n += 1
            bad += flag(d.text[max(0, k - 4000):k])
    return bad, n


def run(seed: int = 0) -> list[dict]:
    """Rows for the bench table: per-class recall and latency, false positives, beside the Whisper rule."""
    docs = documents()
    rows = []
    results = {}
    for split, heldout, s in (("held-out", True, seed + 1), ("dev", False, seed)):
        healthy, degenerate = build(s, heldout=heldout, docs=docs)
        results[split] = (len(healthy), len(degenerate), evaluate(healthy, degenerate, ours),
                          evaluate(healthy, degenerate, whisper_rule))
    n_h, n_d, mine, whisper = results["held-out"]
    for cls in CLASSES:
        c, w = mine["classes"][cls], whisper["classes"][cls]
        rows.append({"bench": "degeneration", "metric": f"recall {cls} (n={c['n']})", "value": round(c["recall"], 3),
                     "note": f"whisper {w['recall']:.3f}; median latency {_median(c['latency'])} chars "
                             f"(whisper {_median(w['latency'])})"})
    dev_n_h, dev_n_d, dev, dev_w = results["dev"]
    held_docs = [d for d in docs if is_heldout(d)]
    bad, windows = window_fp(held_docs, ours, random.Random(seed))
    bad_w, _ = window_fp(held_docs, whisper_rule, random.Random(seed))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(mine["fp_kinds"].items())) or "none"
    rows += [
        {"bench": "degeneration", "metric": f"recall, all degenerate classes (held-out, n={n_d})",
         "value": round(mine["recall"], 3), "target": ">= 0.97",
         "note": f"whisper rule {whisper['recall']:.3f}; dev half {dev['recall']:.3f} (n={dev_n_d})"},
        {"bench": "degeneration", "metric": f"false-positive rate, healthy snippets (held-out, n={n_h})",
         "value": round(mine["fp"], 4), "target": "<= 0.01",
         "note": f"whisper rule {whisper['fp']:.4f}; dev half {dev['fp']:.4f} (n={dev_n_h}); flagged: {kinds}"},
        {"bench": "degeneration", "metric": f"false-positive rate, windows of whole documents (held-out, n={windows})",
         "value": round(bad / windows, 4), "target": "<= 0.01", "note": f"whisper rule {bad_w / windows:.4f}"},
        {"bench": "degeneration", "metric": "median detection latency after onset, chars (held-out)",
         "value": _median(mine["latency"]), "target": "<= 64",
         "note": f"whisper rule {_median(whisper['latency'])}; dev half {_median(dev['latency'])}; "
                 f"from the start of the corrupted text {_median(mine['latency_from_start'])}"},
    ]
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    t0 = time.perf_counter()
    print_table(run())
    print(f"({time.perf_counter() - t0:.0f} s)")
