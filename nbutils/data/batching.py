"""How to batch the training data: how much padding each way wastes, and packing done safely.

Three ways to batch examples of different lengths:
- random: the padding of each batch is set by its longest example; long tails waste most of it;
- length_grouped: sort within large random chunks, then batch neighbours (what the HF Trainer's
  `train_sampling_strategy="group_by_length"` with `length_column_name="length"` does), so the
  examples in a batch have similar lengths;
- packed: several examples per row, up to block_size tokens. On a T4 there is no
  FlashAttention-2, so with SDPA packing is only correct with a 4D attention mask that is causal
  AND block-diagonal (no example sees another) plus position_ids restarting at 0 per example.
  transformers (5.x masking_utils) takes a 4D mask as-is: it adds no causality and converts no
  dtype, so the mask must be complete and in the attention kernel's convention (bool for SDPA,
  additive float for eager). With FlashAttention-2 the position_ids alone delimit the examples.

`plan` measures all three on the real lengths and picks length_grouped unless packing clearly
wins on long-tailed data; training.train reads the plan from the manifest and calls
`make_collator(plan, pad_id, attn_implementation)`.
"""

from __future__ import annotations

import bisect
import random

IGNORE_INDEX = -100  # label value the loss skips (prompt tokens, padding); splits and loss import it from here
MEGABATCH = 50  # the HF LengthGroupedSampler sorts within chunks of 50 batches


def _order(n: int, lengths: list[int], batch_size: int, strategy: str, rng: random.Random) -> list[int]:
    order = list(range(n))
    rng.shuffle(order)
    if strategy == "length_grouped":
        mega = batch_size * MEGABATCH
        order = [i for k in range(0, n, mega) for i in sorted(order[k:k + mega], key=lambda j: -lengths[j])]
    return order


def real_token_share(lengths: list[int], batch_size: int, strategy: str, block_size: int = 0, seed: int = 0) -> float:
    """Share of real (non-pad) tokens among all tokens fed to the model in one epoch, as the collator pads."""
    rng = random.Random(seed)
    if strategy == "packed":
        rows = [sum(min(lengths[i], block_size) for i in b) for b in pack_lengths(lengths, block_size)]
        order = _order(len(rows), rows, batch_size, "random", rng)  # the Trainer shuffles the blocks
    else:
        rows = lengths
        order = _order(len(rows), rows, batch_size, strategy, rng)
    padded = sum(max(rows[i] for i in order[k:k + batch_size]) * len(order[k:k + batch_size])
                 for k in range(0, len(order), batch_size))
    return sum(rows) / padded if padded else 1.0


def pack_lengths(lengths: list[int], block_size: int) -> list[list[int]]:
    """Best-fit decreasing: indices of examples per block, each block at most block_size tokens.

    Longest first, each into the fullest block it still fits (a sorted list of free room, so
    100k examples take about a second, not the hours a linear first-fit scan would).
    """
    blocks: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, block index), sorted
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        n = min(lengths[i], block_size)
        k = bisect.bisect_left(free, (n, -1))
        if k < len(free):
            room, b = free.pop(k)
        else:
            room, b = block_size, len(blocks)
            blocks.append([])
        blocks[b].append(i)
        if room - n > 0:
            bisect.insort(free, (room - n, b))
    return blocks


def plan(lengths: list[int], batch_size: int, max_seq_len: int, seed: int = 0) -> dict:
    """Measure random / grouped / packed on these lengths and pick one (packing only when it clearly wins).

    Packing is chosen only when the data is long-tailed (p95 at least twice the median), grouped
    batches still waste over 5% on padding, and packing gains at least 3 points of real tokens;
    otherwise length_grouped, which needs no special mask and keeps one example per row.
    """
    shares = {s: round(real_token_share(lengths, batch_size, s, max_seq_len, seed), 4)
              for s in ("random", "length_grouped", "packed")}
    s = sorted(lengths)
    median, p95 = s[len(s) // 2], s[min(len(s) - 1, int(0.95 * len(s)))]
    tail = round(p95 / max(1, median), 2)
    grouped, packed = shares["length_grouped"], shares["packed"]
    strategy = "packed" if tail >= 2 and grouped < 0.95 and packed >= grouped + 0.03 else "length_grouped"
    blocks = len(pack_lengths(lengths, max_seq_len)) if strategy == "packed" else 0
    return {"strategy": strategy, "batch_size": batch_size, "block_size": max_seq_len,
            "real_token_share": shares, "chosen_share": shares[strategy], "tail_ratio_p95_median": tail,
            "examples_per_block": round(len(lengths) / blocks, 2) if blocks else 1.0}


def by_tokens(lengths: list[int], budget: int) -> list[list[int]]:
    """Row indices in batches of at most `budget` padded positions (rows x the batch's longest), longest first, so a
    scoring pass's memory follows a token budget, not a row count; a row longer than the budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def pack(rows: list[dict], block_size: int) -> list[dict]:
    """Packed rows: concatenated ids/labels, positions restarting per example, and the example lengths."""
    blocks = pack_lengths([len(r["input_ids"]) for r in rows], block_size)
    out = []
    for block in blocks:
        ids, labels, pos, seqs = [], [], [], []
        for i in block:
            r_ids, r_labels = rows[i]["input_ids"][:block_size], rows[i]["labels"][:block_size]
            ids += r_ids
            # The first token of an example must not be predicted from the previous example.
            labels += [IGNORE_INDEX] + list(r_labels[1:])
            pos += list(range(len(r_ids)))
            seqs.append(len(r_ids))
        out.append({"input_ids": ids, "labels": labels, "position_ids": pos, "seq_lens": seqs, "length": len(ids)})
    return out


def rows(ds, plan: dict):
    """The columns the Trainer batches (input_ids, labels, length), packed into blocks when the plan packs."""
    from datasets import Dataset

    kept = ds.select_columns(["input_ids", "labels", "length"])
    return Dataset.from_list(pack(list(kept), plan["block_size"])) if plan["strategy"] == "packed" else kept


def block_causal_mask(seq_lens_batch: list[list[int]], width: int):
    """Boolean [batch, 1, width, width] mask, True = may attend: causal within each example, nothing across.

    Padding rows attend to themselves only, so no softmax row is empty (an all-False row gives NaN).
    """
    import torch

    mask = torch.zeros((len(seq_lens_batch), 1, width, width), dtype=torch.bool)
    for b, seqs in enumerate(seq_lens_batch):
        start = 0
        for n in seqs:
            mask[b, 0, start:start + n, start:start + n] = torch.tril(torch.ones((n, n), dtype=torch.bool))
            start += n
        idx = torch.arange(start, width)
        mask[b, 0, idx, idx] = True
    return mask


def make_collator(plan: dict, pad_id: int, attn_implementation: str = "sdpa"):
    """Collate function for the plan: right padding, plus the per-example mask and positions when packed.

    Packed rows (from `pack`) get position_ids restarting per example and, for "sdpa", a 4D bool
    block-diagonal causal mask; "eager" gets the same mask as an additive float; for
    "flash_attention_2" no mask: the kernel finds the examples from the position_ids. Rows that
    were not packed (an eval split) count as one example each, so the same collator serves both.
    """
    import torch

    packed = plan.get("strategy") == "packed"

    def collate(rows):
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        seqs = []
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.tensor(r["input_ids"])
            labels[i, :n] = torch.tensor(r["labels"])
            mask[i, :n] = 1
            pos[i, :n] = torch.tensor(r["position_ids"]) if "position_ids" in r else torch.arange(n)
            seqs.append(list(r.get("seq_lens") or [n]))
        batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if not packed:
            return batch
        batch["position_ids"] = pos
        if attn_implementation == "flash_attention_2":
            del batch["attention_mask"]
            for i, s in enumerate(seqs):  # padding as its own sequence, so it cannot join the last example
                pad = width - sum(s)
                pos[i, sum(s):] = torch.arange(pad)
        elif attn_implementation == "eager":
            allowed = block_causal_mask(seqs, width)
            batch["attention_mask"] = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float16).min)
        else:
            batch["attention_mask"] = block_causal_mask(seqs, width)
        return batch

    return collate
