"""Degeneration on the stress set: post-hoc `detect` beside Whisper's compression rule, and the streaming guard under
three tokenizers (the embedded one, Qwen2's and Llama-3's).

    python -m bench degeneration_bench

The stress set (bench/degeneration/) is built from text shipped with Python, installed packages, the system's
gettext catalogs and package lists. Headline figures come from the REPORTED sample (seed REPORTED_SEED, the
reported half of the documents); the TUNING sample (seed TUNING_SEED, the other half) is what the rules were tuned
on and is shown beside them. Every degenerate text is cut at 8 offsets of its end; "min cut" is the worst of the 8.
Latency: characters after the onset until `detect` first fires on a growing prefix (8 characters at a time), first
cut only. The guard is fed each text token by token, called after every token as `generate` calls it, in observe
mode; a stop of a healthy text at any prefix counts as a false stop, and every stop is checked against `detect` on
the prefix decoded up to it. Empty output is left out of the stream: a row that says nothing ends at once.
The real tokenizers come from llama-cpp-python's source distribution (bench/real_vocab.py); where PyPI cannot be
reached their rows say so. Rows are kept in bench/results/<machine>.json.
"""

from __future__ import annotations

import time

from bench.degeneration import scorecard
from bench.degeneration.stress import CUTS, REPORTED_SEED, TUNING_SEED, build
from nbutils.eval.detect import detect

# 250 healthy samples per script or kind (30 of them on a machine with the usual catalogs), so the limit of 1% per
# script or kind is a rate the sample can tell: at 83 a group, one stop read 1.2%. 320 degenerate texts per class.
PER_GROUP, PER_CLASS = 250, 40
# The guard is streamed token by token, the whole reported sample under each tokenizer (the guard rows' notes give
# the tokens and seconds each tokenizer took; the whole bench, 7 minutes on a 2-core machine). A smaller run can
# stream a subsample drawn with its own seed: STREAM_HEALTHY healthy texts (None: all) and STREAM_CUTS of the 8 cuts
# of every degenerate generation.
STREAM_SEED, STREAM_HEALTHY, STREAM_CUTS = 2, None, CUTS
TOKENIZERS = ("embedded", "qwen2", "llama-3")
COMMAND = "python -m bench degeneration_bench"


def _flag(text: str) -> bool:
    return detect(text).degenerate


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def _worst(groups: dict[str, float]) -> str:
    g = max(groups, key=groups.get)
    return f"worst {g} {groups[g]:.3f}"


def _row(metric: str, value, target: str = "", note: str = "") -> dict:
    return {"bench": "degeneration", "metric": metric, "value": value, "target": target, "note": note}


def detect_rows(healthy: list, bad: list, tune: dict) -> list[dict]:
    """Per class: recall, its worst cut, latency, Whisper beside; then recall, false positives and latency overall."""
    flags = {id(s): _flag(s.text) for s in healthy + bad}
    ours = scorecard.score(healthy, bad, flags, _flag)
    whisper = scorecard.score(healthy, bad, {id(s): scorecard.whisper_rule(s.text) for s in healthy + bad})
    rows = [_row(f"detect recall {cls} (n={c['n']}, 8 cuts)", round(c["recall"], 3), ">= 0.97",
                 f"min over cuts {c['min_cut']:.3f}; median latency {_fmt(c['latency'])} chars; "
                 f"whisper {whisper['classes'][cls]['recall']:.3f}; tuning sample {tune['classes'][cls]['recall']:.3f}")
            for cls, c in ours["classes"].items()]
    worst = min(ours["classes"], key=lambda k: ours["classes"][k]["recall"])
    return rows + [
        _row(f"detect recall, all classes (n={len(bad)})", round(ours["recall"], 3), ">= 0.97",
             f"worst class {worst} {ours['classes'][worst]['recall']:.3f}; whisper {whisper['recall']:.3f}; "
             f"tuning sample {tune['recall']:.3f}"),
        _row(f"detect false-positive rate, healthy (n={len(healthy)})", round(ours["fp"], 4), "<= 0.003",
             f"per script/kind: {_worst(ours['fp_groups'])} (<= 0.01); structured {ours['fp_structured']:.4f}; "
             f"whisper {whisper['fp']:.4f}; tuning {tune['fp']:.4f}"),
        _row("detect median latency after onset, chars", _fmt(scorecard.median(ours["latency"])), "<= 64",
             "first cut of every degenerate text"),
    ]


def _tokenizer(name: str):
    if name == "embedded":
        from nbutils.data.chatformat import load_tokenizer

        return load_tokenizer("embedded")
    from bench import real_vocab

    return real_vocab.load_tokenizer(name)


def guard_rows(name: str, healthy: list, bad: list) -> list[dict]:
    """The guard streamed under one tokenizer: recall per class, false stops, stops detect does not confirm, cost."""
    from bench import real_vocab

    try:
        tok = _tokenizer(name)
    except real_vocab.Unavailable as e:
        return [_row(f"guard ({name})", "not run", note=str(e))]
    said = [s for s in bad if s.cls != "empty"]
    t0 = time.perf_counter()
    stops = scorecard.stream(healthy + said, tok)
    spent = time.perf_counter() - t0
    tokens = scorecard.stream.tokens
    g = scorecard.score(healthy, said, {k: v.stopped for k, v in stops.items()})
    per_class = "; ".join(f"{cls} {c['recall']:.3f} (min cut {c['min_cut']:.3f})" for cls, c in g["classes"].items())
    worst = min(g["classes"], key=lambda k: g["classes"][k]["recall"])
    unconfirmed = sum(v.stopped and not v.agreed for v in stops.values())
    return [
        _row(f"guard recall, worst class ({name}, streamed)", round(g["classes"][worst]["recall"], 3), ">= 0.97",
             f"{worst}; all classes {g['recall']:.3f}; {per_class}"),
        _row(f"guard false stops, healthy at any prefix ({name}, n={len(healthy)})", round(g["fp"], 4), "<= 0.003",
             f"per script/kind: {_worst(g['fp_groups'])} (<= 0.01); structured {g['fp_structured']:.4f} (<= 0.01)"),
        _row(f"guard stops detect does not confirm on the decoded prefix ({name})", unconfirmed, "0",
             f"of {sum(v.stopped for v in stops.values())} stops"),
        _row(f"guard time per 1,000 tokens, streamed ({name}), ms", round(1e6 * spent / tokens, 1),
             note=f"{tokens} tokens in {spent:.0f} s, the bench's own token-by-token loop included"),
    ]


def stream_sample(healthy: list, bad: list) -> tuple[list, list]:
    """The subsample the guard streams: STREAM_HEALTHY healthy texts, STREAM_CUTS cuts of every degenerate generation,
    drawn with STREAM_SEED (apart from the seeds that built the samples)."""
    import random

    rng = random.Random(STREAM_SEED)
    keep = {(s.cls, s.base): set(rng.sample(range(CUTS), STREAM_CUTS)) for s in bad}
    picked = [s for s in bad if s.cut in keep[(s.cls, s.base)]]
    k = len(healthy) if STREAM_HEALTHY is None else min(STREAM_HEALTHY, len(healthy))
    return [healthy[i] for i in sorted(rng.sample(range(len(healthy)), k))], picked


def real_rows() -> list[dict]:
    """The real model's own generations, labelled by hand (bench/real_generations.py): detect and the streamed guard
    against the labels, on the report set (the last sets of new prompts and seeds, labelled before any rule met them;
    the sets tuned on beside), and a second reader's labels of the report set against the first's."""
    from transformers import AutoTokenizer

    from bench import pretrained, real_generations
    from bench.degeneration import labelled

    try:
        tok = AutoTokenizer.from_pretrained(pretrained.ensure())
    except pretrained.Unavailable as e:
        return [_row("real generations", "not run", note=str(e))]
    rows = real_generations.load()
    got = {h: labelled.figures([r for r in rows if r["half"] == h], tok, real_generations.MAX_NEW_TOKENS)
           for h in ("report", "tune")}
    rep, tune = got["report"], got["tune"]
    reported = ", ".join(sorted({r["set"] for r in rows if r["half"] == "report"}))
    what = (f"{real_generations.NAME}: {rep['n']} generations ({rep['loops']} loops, {rep['junk']} junk, "
            f"{rep['healthy']} healthy) of the report set ({reported}; the tune set: {tune['n']})")
    return [
        _row("real: guard precision (stops labelled loop or junk)", rep["guard_precision"], "1.00",
             f"{what}; false stops {rep['guard_false_stops'] or 'none'}; tune set {tune['guard_precision']}"),
        _row("real: guard recall on loops, stopped before the token limit", rep["guard_loop_recall_early"], ">= 0.90",
             f"missed {rep['guard_missed_loops'] or 'none'}; junk stopped {rep['guard_junk_recall']}; "
             f"{rep['tokens_saved']} tokens saved; tune set {tune['guard_loop_recall_early']}"),
        _row("real: detect precision / recall (whole texts)", f"{rep['detect_precision']} / {rep['detect_recall']}",
             note=f"false positives {rep['detect_false_positives'] or 'none'}; tune set "
                  f"{tune['detect_precision']} / {tune['detect_recall']}"),
    ] + _readers_row([r for r in rows if r["half"] == "report"])


def _readers_row(rows: list[dict]) -> list[dict]:
    """A second reader's labels scored like the guard against the first's, where the report set was read twice."""
    from bench.degeneration import labelled

    got = labelled.readers(rows)
    if got is None:
        return []
    return [_row("real: a second reader against the first, precision / loop recall",
                 f"{got['precision']} / {got['loop_recall']}",
                 note=f"{got['n']} generations read by two readers under the same rules; the same label on {got['agree']}"
                      f"; labelled otherwise {got['differ'] or 'none'}")]


def run() -> list[dict]:
    """Rows: detect per class and overall on the reported sample (tuning beside), the guard per tokenizer, then the
    real model's labelled generations."""

    t0 = time.perf_counter()
    healthy, bad = build(REPORTED_SEED, reported=True, per_class=PER_CLASS, per_group=PER_GROUP)
    tune_h, tune_b = build(TUNING_SEED, reported=False, per_class=PER_CLASS, per_group=PER_GROUP)
    tune = scorecard.score(tune_h, tune_b, {id(s): _flag(s.text) for s in tune_h + tune_b})
    rows = detect_rows(healthy, bad, tune)
    s_healthy, s_bad = stream_sample(healthy, bad)
    for name in TOKENIZERS:
        rows += guard_rows(name, s_healthy, s_bad)
    rows += real_rows()
    rows.append(_row("bench time, s", round(time.perf_counter() - t0)))
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
