"""Degeneration on the stress set: post-hoc `detect`, the streaming guard, and Whisper's compression rule beside them.

    python -m bench degeneration_bench

The stress set (bench/degeneration/stress.py) is built from text shipped with Python, installed packages
and the system's gettext catalogs. Headline figures come from the REPORTED sample (seed
REPORTED_SEED, the reported half of the documents); the TUNING sample (seed TUNING_SEED, the other
half) is what the rules were tuned on and is shown beside them. Every degenerate text is cut at 8
offsets of its last period; "min over cuts" is the worst of the 8. Latency: characters after the
onset until `detect` first fires on a growing prefix (8 characters at a time), first cut only. The
guard is fed each text token by token (embedded tokenizer) as `generate` runs it, in observe mode:
a stop of a healthy text at any prefix counts as a false positive.
"""

from __future__ import annotations

import time

from bench.degeneration import scorecard
from bench.degeneration.stress import LOOP_CLASSES, REPORTED_SEED, TUNING_SEED, build
from nbutils.eval.detect import detect, whisper_rule

N_HEALTHY, PER_CLASS = 2500, 40  # about 100 healthy samples per script or kind; 320 texts per class


def _flag(text: str) -> bool:
    return detect(text).degenerate


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def _worst(groups: dict[str, float]) -> str:
    g = max(groups, key=groups.get)
    return f"worst {g} {groups[g]:.3f}"


def run() -> list[dict]:
    """Rows: per class (detect, its worst cut, latency, Whisper, guard), then false positives and agreement."""
    from nbutils.data.chatformat import load_tokenizer

    t0 = time.perf_counter()
    healthy, bad = build(REPORTED_SEED, reported=True, n_healthy=N_HEALTHY, per_class=PER_CLASS)
    tune_h, tune_b = build(TUNING_SEED, reported=False, n_healthy=N_HEALTHY, per_class=PER_CLASS)
    flags = {id(s): _flag(s.text) for s in healthy + bad}
    ours = scorecard.score(healthy, bad, flags, _flag)
    tune = scorecard.score(tune_h, tune_b, {id(s): _flag(s.text) for s in tune_h + tune_b})
    whisper = scorecard.score(healthy, bad, {id(s): whisper_rule(s.text) for s in healthy + bad})
    stops = scorecard.stream(healthy + bad, load_tokenizer("embedded"))
    gflags = {k: v.stopped for k, v in stops.items()}
    guard = scorecard.score(healthy, bad, gflags)
    rows = []
    for cls, c in ours["classes"].items():
        g, w = guard["classes"][cls], whisper["classes"][cls]
        rows.append({"bench": "degeneration", "metric": f"recall {cls} (n={c['n']}, 8 cuts)", "value": round(c["recall"], 3),
                     "target": ">= 0.97, min cut >= 0.95",
                     "note": f"min over cuts {c['min_cut']:.3f}; median latency {_fmt(c['latency'])} chars; "
                             f"whisper {w['recall']:.3f}; guard {g['recall']:.3f} (min cut {g['min_cut']:.3f}); "
                             f"tuning sample {tune['classes'][cls]['recall']:.3f}"})
    loops = [s for s in bad if s.cls in LOOP_CLASSES]
    loop_recall = sum(gflags[id(s)] for s in loops) / len(loops)
    # Empty output never reaches the guard (the row ends at once), so agreement is counted on the other texts.
    said = [id(s) for s in healthy + bad if s.cls != "empty"]
    agree = sum(gflags[k] == flags[k] for k in said) / len(said)
    n_h = len(healthy)
    rows += [
        {"bench": "degeneration", "metric": f"detect recall, all classes (n={len(bad)})", "value": round(ours["recall"], 3),
         "target": ">= 0.97", "note": f"whisper {whisper['recall']:.3f}; tuning sample {tune['recall']:.3f}"},
        {"bench": "degeneration", "metric": f"detect false-positive rate, healthy (n={n_h})", "value": round(ours["fp"], 4),
         "target": "<= 0.005", "note": f"per script/kind: {_worst(ours['fp_groups'])} (<= 0.01); structured "
                                        f"{ours['fp_structured']:.4f}; whisper {whisper['fp']:.4f}; tuning {tune['fp']:.4f}"},
        {"bench": "degeneration", "metric": "detect median latency after onset, chars",
         "value": _fmt(scorecard.median(ours["latency"])), "target": "<= 64", "note": "first cut of every degenerate text"},
        {"bench": "degeneration", "metric": f"guard recall, loop classes (n={len(loops)}, streamed)",
         "value": round(loop_recall, 3), "target": ">= 0.95", "note": f"all classes {guard['recall']:.3f}"},
        {"bench": "degeneration", "metric": f"guard false stops, healthy at any prefix (n={n_h})", "value": round(guard["fp"], 4),
         "target": "<= 0.005", "note": f"per script/kind: {_worst(guard['fp_groups'])} (<= 0.01); structured "
                                        f"{guard['fp_structured']:.4f} (<= 0.01)"},
        {"bench": "degeneration", "metric": "guard and post-hoc detect agree (same non-empty texts)",
         "value": round(agree, 4),
         "note": f"guard stops, detect clean: {sum(gflags[k] and not flags[k] for k in said)}; detect flags, guard "
                 f"ran on: {sum(flags[k] and not gflags[k] for k in said)} of {len(said)}; "
                 f"{time.perf_counter() - t0:.0f} s"},
    ]
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
