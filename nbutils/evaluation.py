"""Evaluation: batched greedy generation on the eval prompts, task metric and eval loss."""

from __future__ import annotations

import json
from pathlib import Path

from nbutils import batching


def prompts_and_references(eval_ds, tokenizer, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Chat-rendered prompts (with the generation prompt) and the reference answers."""
    rows = eval_ds if limit is None else eval_ds.select(range(min(limit, len(eval_ds))))
    prompts, refs = [], []
    for r in rows:
        msgs = r["messages"]
        prompts.append(tokenizer.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True))
        refs.append(msgs[-1]["content"])
    return prompts, refs


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 32, batch_size: int = 16) -> list[dict]:
    """Greedy generation with left padding; returns text, token count and whether EOS was emitted."""
    import torch

    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
    out = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = batch.to(model.device)
            with torch.no_grad():
                seq = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            for row in seq[:, batch["input_ids"].shape[1]:].tolist():
                eos = tokenizer.eos_token_id in row
                row = row[: row.index(tokenizer.eos_token_id)] if eos else row
                row = [t for t in row if t != tokenizer.pad_token_id]
                out.append({"text": tokenizer.decode(row, skip_special_tokens=True).strip(),
                            "tokens": len(row), "eos": eos})
    finally:
        tokenizer.padding_side = side
    return out


def exact_match(outputs: list[str], references: list[str]) -> float:
    """Share of outputs equal to the reference after trimming whitespace and case."""
    norm = lambda s: " ".join(s.lower().split())  # noqa: E731
    return sum(norm(o) == norm(r) for o, r in zip(outputs, references)) / max(1, len(references))


def eval_loss(model, eval_ds, pad_id: int, batch_size: int = 32) -> float:
    """Mean loss per target token over the whole eval split (prompt tokens masked)."""
    import torch

    collate = batching.make_collator({"strategy": "length_grouped"}, pad_id)
    total, count = 0.0, 0
    for i in range(0, len(eval_ds), batch_size):
        batch = collate([eval_ds[j] for j in range(i, min(i + batch_size, len(eval_ds)))])
        batch = {k: v.to(model.device) for k, v in batch.items()}
        n = int((batch["labels"][:, 1:] != -100).sum())
        with torch.no_grad():
            loss = model(**batch).loss
        total += float(loss) * n
        count += n
    return total / max(1, count)


def write_report(output_dir: str | Path, report: dict) -> Path:
    path = Path(output_dir) / "eval_report.json"
    path.write_text(json.dumps(report, indent=2))
    return path
