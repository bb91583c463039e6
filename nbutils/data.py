"""Raw records in, chat-formatted, tokenized train/eval splits out, with a manifest.

Output folder layout (what 02 and 03 read):
  train/, eval/      HF datasets (save_to_disk) with columns messages, input_ids, labels, length
  manifest.json      counts, splits, template, tokenizer, token-length stats, content hash
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

IGNORE_INDEX = -100  # label value the loss skips (prompt tokens under completion-only training)


def read_jsonl(path: str | Path) -> list[dict]:
    """Read alpaca-style JSONL (instruction/input/output); blank lines are not records."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {line_no}: not valid JSON ({e.msg}); fix or remove it.") from e
    return out


def to_messages(record: dict) -> list[dict]:
    """Alpaca record -> chat messages (user turn = instruction + optional input)."""
    user = record["instruction"].strip()
    if str(record.get("input", "")).strip():
        user += "\n" + record["input"].strip()
    return [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"].strip()}]


def encode(messages: list[dict], tokenizer, train_on_prompt: bool = False) -> dict:
    """Render with the chat template; labels mask the prompt unless train_on_prompt."""
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    if ids[: len(prompt_ids)] != prompt_ids:
        raise ValueError("chat template renders the prompt differently inside the full conversation")
    if ids[-1] != tokenizer.eos_token_id:
        ids.append(tokenizer.eos_token_id)  # the model must learn to stop
    labels = list(ids) if train_on_prompt else [IGNORE_INDEX] * len(prompt_ids) + ids[len(prompt_ids):]
    return {"input_ids": ids, "labels": labels, "length": len(ids)}


def _stats(lengths: list[int]) -> dict:
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"min": s[0], "median": pick(0.5), "p95": pick(0.95), "max": s[-1]}


def prepare(inputs: list[str], out_dir: str | Path, tokenizer, max_seq_len: int = 256,
            eval_fraction: float = 0.1, seed: int = 0, max_records: int | None = None,
            train_on_prompt: bool = False) -> dict:
    """Read, normalize, tokenize and split; write train/, eval/ and manifest.json into out_dir."""
    from datasets import Dataset

    out_dir = Path(out_dir)
    records = [r for path in inputs for r in read_jsonl(path)]
    if max_records:
        records = records[:max_records]
    rows = []
    for r in records:
        msgs = to_messages(r)
        rows.append({"messages": msgs, **encode(msgs, tokenizer, train_on_prompt)})
    kept = [r for r in rows if r["length"] <= max_seq_len]
    order = list(range(len(kept)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, round(len(kept) * eval_fraction))
    splits = {"eval": [kept[i] for i in order[:n_eval]], "train": [kept[i] for i in order[n_eval:]]}
    for name, split in splits.items():
        Dataset.from_list(split).save_to_disk(str(out_dir / name))
    digest = hashlib.sha256(json.dumps([r["input_ids"] for r in kept]).encode()).hexdigest()[:16]
    manifest = {
        "inputs": [str(p) for p in inputs],
        "counts": {"records": len(records), "kept": len(kept), "quarantined": 0, "duplicates": 0,
                   "too_long": len(rows) - len(kept)},
        "splits": {k: len(v) for k, v in splits.items()},
        "template": "tokenizer chat template",
        "tokenizer": getattr(tokenizer, "name_or_path", ""),
        "max_seq_len": max_seq_len,
        "token_lengths": _stats([r["length"] for r in kept]),
        "content_hash": digest,
        "batching": {"strategy": "length_grouped"},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def load_split(data_dir: str | Path, split: str):
    """Load one prepared split (train or eval) written by prepare()."""
    from datasets import load_from_disk

    return load_from_disk(str(Path(data_dir) / split))


def load_manifest(data_dir: str | Path) -> dict:
    return json.loads((Path(data_dir) / "manifest.json").read_text())
