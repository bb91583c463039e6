"""Data prep benchmarks: batched tokenization vs a per-record loop, and real tokens per batch by plan."""

import random
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


def tokenization(n: int = 100_000, loop_n: int = 10_000) -> list[dict]:
    from datasets import Dataset

    from nbutils import data
    from nbutils.modeling import load_tokenizer

    tok = load_tokenizer("embedded")
    template = tok.chat_template
    msgs = _records(n)
    ds = Dataset.from_dict({"messages": msgs})
    kwargs = {"tokenizer": tok, "template": template, "train_on_prompt": False}
    t0 = time.perf_counter()
    ds.map(data.encode_batch, batched=True, batch_size=1000, fn_kwargs=kwargs)
    batched = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    ds.map(data.encode_batch, batched=True, batch_size=1000, fn_kwargs=kwargs, num_proc=2)
    batched2 = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for m in msgs[:loop_n]:  # the per-record Python loop people write: one tokenizer call per record
        data.encode_batch({"messages": [m]}, tok, template, False)
    loop = loop_n / (time.perf_counter() - t0)
    return [
        {"bench": "data", "metric": f"tokenize, batched datasets.map ({n} records), rec/s", "value": round(batched)},
        {"bench": "data", "metric": f"tokenize, per-record loop ({loop_n} of the same), rec/s", "value": round(loop)},
        {"bench": "data", "metric": f"tokenize, batched datasets.map num_proc=2 ({n}), rec/s", "value": round(batched2)},
        {"bench": "data", "metric": "batched / loop throughput ratio", "value": round(batched / loop, 2),
         "note": "chat-template rendering (Python) dominates"},
        {"bench": "data", "metric": "batched num_proc=2 / loop throughput ratio", "value": round(batched2 / loop, 2)},
    ]


def padding(n: int = 20_000, batch_size: int = 16, max_seq_len: int = 1024) -> list[dict]:
    from nbutils import batching

    rng = random.Random(0)
    lengths = [min(max_seq_len, 16 + int(rng.lognormvariate(4.5, 0.9))) for _ in range(n)]  # long-tailed
    plan = batching.plan(lengths, batch_size, max_seq_len)
    rows = [{"bench": "data", "metric": f"real-token share, {s} batches (lognormal lengths)", "value": v}
            for s, v in plan["real_token_share"].items()]
    rows.append({"bench": "data", "metric": f"real-token share, chosen plan ({plan['strategy']})",
                 "value": plan["chosen_share"], "target": ">= 0.95"})
    return rows


def run() -> list[dict]:
    return tokenization() + padding()


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
