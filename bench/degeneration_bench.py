"""Degeneration detector vs the Whisper rule on a labelled set, and the guard's overhead in generate()."""

import statistics
import time


def _latency(text: str, onset: int, flag, step: int = 8) -> int | None:
    """Characters after the onset until `flag` first fires on a growing prefix (None: never)."""
    if onset == 0 and len(text) <= step:
        return 0 if flag(text) else None
    k = step
    while onset + k <= len(text) + step - 1:
        if flag(text[: onset + k]):
            return k
        k += step
    return None


def run(seed: int = 0) -> list[dict]:
    from bench.degeneration_set import CLASSES, build
    from nbutils.degeneration import detect, whisper_rule

    healthy, degenerate = build(seed)
    ours = lambda t: detect(t).degenerate  # noqa: E731
    rows = []
    fp_ours = sum(ours(h["text"]) for h in healthy) / len(healthy)
    fp_whisper = sum(whisper_rule(h["text"]) for h in healthy) / len(healthy)
    all_lat, all_hit, all_hit_w = [], 0, 0
    for cls in CLASSES:
        items = [d for d in degenerate if d["class"] == cls]
        hits = sum(ours(d["text"]) for d in items)
        hits_w = sum(whisper_rule(d["text"]) for d in items)
        lats = [lat for d in items if (lat := _latency(d["text"], d["onset"], ours)) is not None]
        all_lat += lats
        all_hit += hits
        all_hit_w += hits_w
        rows.append({"bench": "degeneration", "metric": f"recall {cls} (n={len(items)})",
                     "value": round(hits / len(items), 3), "note": f"whisper {hits_w / len(items):.3f}; "
                     f"median latency {statistics.median(lats) if lats else '-'} chars"})
    n_deg = len(degenerate)
    whisper_lats = [lat for d in degenerate[:: max(1, n_deg // 200)]
                    if (lat := _latency(d["text"], d["onset"], whisper_rule)) is not None]
    rows += [
        {"bench": "degeneration", "metric": f"recall, all degenerate (n={n_deg})", "value": round(all_hit / n_deg, 3),
         "target": ">= 0.97", "note": f"whisper rule {all_hit_w / n_deg:.3f}"},
        {"bench": "degeneration", "metric": f"false-positive rate, healthy (n={len(healthy)})", "value": round(fp_ours, 4),
         "target": "<= 0.01", "note": f"whisper rule {fp_whisper:.4f}"},
        {"bench": "degeneration", "metric": "median detection latency after onset (chars)",
         "value": statistics.median(all_lat), "target": "<= 64",
         "note": f"whisper rule {statistics.median(whisper_lats) if whisper_lats else '-'} (sampled)"},
    ]
    return rows


def run_overhead(repeats: int = 11, batch: int = 8, new_tokens: int = 64) -> list[dict]:
    """generate() wall time with the guard on vs off, interleaved; plus identical tokens on healthy rows."""
    import torch
    from transformers import StoppingCriteriaList

    from nbutils import embedded, modeling
    from nbutils.guard import DegenerationGuard

    tok = modeling.load_tokenizer("embedded")
    tok.padding_side = "left"
    model = modeling.load_base("embedded", "fp32", True).eval()
    recs = embedded.task_records(batch, seed=5)
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                       add_generation_prompt=True) for r in recs]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)

    class Observe(DegenerationGuard):  # does all the guard's work but never stops a row: pure cost
        def __call__(self, input_ids, scores=None, **k):
            super().__call__(input_ids, scores, **k)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def timed(criteria):
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**enc, **kw, stopping_criteria=criteria)
        return time.perf_counter() - t0, out

    timed(None)  # warm-up
    on, off = [], []
    for _ in range(repeats):
        t, base_out = timed(None)
        off.append(t)
        t, guarded = timed(StoppingCriteriaList([Observe(tok, enc["input_ids"].shape[1])]))
        on.append(t)
    same = torch.equal(base_out, guarded)
    ratio = statistics.median(on) / statistics.median(off)
    return [
        {"bench": "guard", "metric": f"generate, guard off (batch {batch}, {new_tokens} tokens), s",
         "value": round(statistics.median(off), 4)},
        {"bench": "guard", "metric": "generate, guard on (checks run, no stop), s", "value": round(statistics.median(on), 4)},
        {"bench": "guard", "metric": "guard overhead ratio on/off", "value": round(ratio, 3), "target": "<= 1.03",
         "note": f"median of {repeats} interleaved; identical tokens: {same}"},
    ]


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run() + run_overhead())
