"""Data prep benchmarks: batched tokenization vs per-record loops, and real tokens per batch by plan.

Tokenization: 100k synthetic chat records through `splits.encode_batch` with batched `datasets.map`
(what prepare() runs), against two per-record Python loops over the same records: the same
function called one record at a time, and the loop people usually write (apply_chat_template for
prompt and full text, two tokenizer calls, labels by prompt length). Loops run on the first
`loop_n` records; rates (records/s) are compared, measured side by side in one run.

Padding: the share of real (non-pad) tokens fed to the model for random batches, length-grouped
batches and packing, on long-tailed (lognormal) lengths and on the embedded task's own lengths.
"""

import random
import tempfile
import time


def _records(n: int, seed: int = 0) -> list[list[dict]]:
    from nbutils import embedded

    rng = random.Random(seed)
    words = [w for ws in embedded.FIELDS.values() for w in ws]
    out = []
    for _ in range(n):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        a = " ".join(rng.choice(words) for _ in range(rng.randint(1, 20)))
        out.append([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
    return out


def _naive(tok, msgs: list[dict]) -> dict:
    """The per-record code people usually write for completion-only labels."""
    prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(msgs, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = tok(full, add_special_tokens=False)["input_ids"]
    return {"input_ids": ids, "labels": [-100] * len(p_ids) + ids[len(p_ids):]}


def _rate(n: int, fn) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def tokenization(n: int = 100_000, loop_n: int = 20_000) -> list[dict]:
    from datasets import Dataset
    from datasets.utils import disable_progress_bars

    from nbutils.data import splits
    from nbutils.data.chatformat import load_tokenizer

    disable_progress_bars()
    tok = load_tokenizer("embedded")
    msgs = _records(n)
    ds = Dataset.from_dict({"messages": msgs})
    kw = {"tokenizer": tok, "template": tok.chat_template, "train_on_prompt": False}
    batched = _rate(n, lambda: ds.map(splits.encode_batch, batched=True, batch_size=1000, fn_kwargs=kw))
    batched2 = _rate(n, lambda: ds.map(splits.encode_batch, batched=True, batch_size=1000, fn_kwargs=kw, num_proc=2))
    same_loop = _rate(loop_n, lambda: [splits.encode_batch({"messages": [m]}, **kw) for m in msgs[:loop_n]])
    naive_loop = _rate(loop_n, lambda: [_naive(tok, m) for m in msgs[:loop_n]])
    row = lambda metric, value, **kw: {"bench": "data", "metric": metric, "value": value, **kw}  # noqa: E731
    return [
        row(f"tokenize, batched datasets.map, num_proc=1 ({n} records), rec/s", round(batched)),
        row(f"tokenize, batched datasets.map, num_proc=2 ({n} records), rec/s", round(batched2)),
        row(f"tokenize, per-record loop, same function ({loop_n} of them), rec/s", round(same_loop)),
        row(f"tokenize, per-record loop, usual code ({loop_n} of them), rec/s", round(naive_loop),
            note="apply_chat_template x2 + 2 tokenizer calls per record"),
        row("ratio batched map (num_proc=1) / usual per-record loop", round(batched / naive_loop, 2)),
        row("ratio batched map (num_proc=2) / usual per-record loop", round(batched2 / naive_loop, 2)),
        row("ratio batched map (num_proc=1) / same function per record", round(batched / same_loop, 2),
            note="what batching alone buys on this CPU"),
    ]


def end_to_end(n: int = 50_000) -> list[dict]:
    """prepare() on a JSONL file: read, validate, dedupe, tokenize (batched map), split, save."""
    import json
    from pathlib import Path

    from nbutils.data import splits
    from nbutils.data.chatformat import load_tokenizer

    tok = load_tokenizer("embedded")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.jsonl"
        with open(path, "w") as f:
            for m in _records(n, seed=1):
                f.write(json.dumps({"prompt": m[0]["content"], "response": m[1]["content"]}) + "\n")
        t0 = time.perf_counter()
        m = splits.prepare([str(path)], Path(d) / "out", tok, max_seq_len=256, verbose=False)
        rate = n / (time.perf_counter() - t0)
    return [{"bench": "data", "metric": f"prepare() end to end, JSONL ({n} records), rec/s", "value": round(rate),
             "note": f"kept {m['counts']['kept']}, duplicates {m['counts']['duplicates']}"}]


def padding(n: int = 20_000, batch_size: int = 16, max_seq_len: int = 1024) -> list[dict]:
    from nbutils.data import batching

    rng = random.Random(0)
    lengths = [min(max_seq_len, 16 + int(rng.lognormvariate(4.5, 0.9))) for _ in range(n)]  # long-tailed
    rows = []
    for name, lens, cut in (("lognormal lengths", lengths, max_seq_len), ("embedded task", _embedded_lengths(), 256)):
        plan = batching.plan(lens, batch_size, cut)
        rows += [{"bench": "data", "metric": f"real-token share, {s} batches ({name}, bs {batch_size})", "value": v}
                 for s, v in plan["real_token_share"].items()]
        rows.append({"bench": "data", "metric": f"real-token share, chosen plan: {plan['strategy']} ({name})",
                     "value": plan["chosen_share"], "target": ">= 0.95",
                     "note": f"p95/median {plan['tail_ratio_p95_median']}"})
    return rows


def _embedded_lengths() -> list[int]:
    from nbutils import embedded
    from nbutils.data import records, splits
    from nbutils.data.chatformat import load_tokenizer

    tok = load_tokenizer("embedded")
    msgs = [records.to_messages(r) for r in embedded.task_records()]
    return splits.encode_batch({"messages": msgs}, tok, tok.chat_template, False)["length"]


def run() -> list[dict]:
    return tokenization() + end_to_end() + padding()


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
