"""Figures on a real model's own generations, labelled by hand (bench/real_generations.py, tests/data/).

`figures(rows, tokenizer)` streams each generation's own tokens through the guard as `generate` would and runs
`detect` on each whole text, then scores both against the labels: "loop" and "junk" are degenerate, "healthy" is
not. A guard stop counts as early when it comes before the generation's token limit (a loop that ran to the limit
would have been cut there, saving the rest). `readers(rows)` scores a second reader's labels (rows read twice, by the
same written rules) the same way against the first's: how far two readers agree bounds how far any rule can.
"""

from __future__ import annotations

from bench.degeneration.scorecard import stream
from bench.degeneration.stress import Sample
from nbutils.eval.detect import detect

DEGENERATE = ("loop", "junk")


def _share(hits: int, n: int) -> float | None:
    return round(hits / n, 3) if n else None


def figures(rows: list[dict], tokenizer, limit: int) -> dict:
    """Precision and recall of `detect` and of the streamed guard against the hand labels, with the guard's misses
    and false stops named by row id."""
    samples = [Sample(r["label"], r["text"], group=r["kind"]) for r in rows]
    stops = stream(samples, tokenizer, token_ids={id(s): r["token_ids"] for s, r in zip(samples, rows)})
    bad = [r["label"] in DEGENERATE for r in rows]
    flagged = [detect(r["text"]).degenerate for r in rows]
    stopped = [stops[id(s)].stopped for s in samples]
    early = [stops[id(s)].stopped and stops[id(s)].at_token + 1 < limit for s in samples]
    loops = [i for i, r in enumerate(rows) if r["label"] == "loop"]
    junk = [i for i, r in enumerate(rows) if r["label"] == "junk"]
    return {
        "n": len(rows), "loops": len(loops), "junk": len(junk), "healthy": len(rows) - sum(bad),
        "detect_precision": _share(sum(f and b for f, b in zip(flagged, bad)), sum(flagged)),
        "detect_recall": _share(sum(f and b for f, b in zip(flagged, bad)), sum(bad)),
        "guard_precision": _share(sum(s and b for s, b in zip(stopped, bad)), sum(stopped)),
        "guard_loop_recall_early": _share(sum(early[i] for i in loops), len(loops)),
        "guard_junk_recall": _share(sum(stopped[i] for i in junk), len(junk)),
        "guard_false_stops": [rows[i]["id"] for i in range(len(rows)) if stopped[i] and not bad[i]],
        "guard_missed_loops": [rows[i]["id"] for i in loops if not early[i]],
        "detect_false_positives": [rows[i]["id"] for i in range(len(rows)) if flagged[i] and not bad[i]],
        "tokens_saved": sum(len(r["token_ids"]) - stops[id(s)].at_token - 1
                            for s, r in zip(samples, rows) if stops[id(s)].stopped),
    }


def readers(rows: list[dict]) -> dict | None:
    """The second reader's labels (`second_label`, on the rows read twice) judged as the guard is, against the first
    reader's: the share of the rows it calls loop or junk that the first does too (precision), and the share of the
    first's loops it calls loop or junk (loop recall). None where no row was read twice."""
    both = [r for r in rows if r.get("second_label")]
    if not both:
        return None
    said = [r for r in both if r["second_label"] in DEGENERATE]
    loops = [r for r in both if r["label"] == "loop"]
    return {"n": len(both), "agree": _share(sum(r["label"] == r["second_label"] for r in both), len(both)),
            "precision": _share(sum(r["label"] in DEGENERATE for r in said), len(said)),
            "loop_recall": _share(sum(r["second_label"] in DEGENERATE for r in loops), len(loops)),
            "differ": [(r["id"], r["label"], r["second_label"]) for r in both if r["label"] != r["second_label"]]}
