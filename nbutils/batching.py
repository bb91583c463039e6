"""How to batch the training data: how much padding each way wastes, and packing done safely.

Three ways to batch examples of different lengths:
- random: the padding of each batch is set by its longest example; long tails waste most of it;
- length_grouped: sort within large random chunks, then batch neighbours (what the HF Trainer's
  `train_sampling_strategy="group_by_length"` does), so examples in a batch have similar lengths;
- packed: concatenate examples into blocks of max_seq_len. On a T4 there is no FlashAttention-2,
  so packing is only correct with a per-example block-diagonal causal mask and positions that
  restart at 0 for each example; without them examples attend to each other.
"""

from __future__ import annotations

import random

from nbutils.data import IGNORE_INDEX


def _batches(lengths: list[int], batch_size: int, strategy: str, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if strategy == "length_grouped":
        mega = batch_size * 50  # the HF LengthGroupedSampler's megabatch
        order = [i for k in range(0, len(order), mega)
                 for i in sorted(order[k:k + mega], key=lambda j: -lengths[j])]
    return [[lengths[i] for i in order[k:k + batch_size]] for k in range(0, len(order), batch_size)]


def real_token_share(lengths: list[int], batch_size: int, strategy: str, block_size: int = 0, seed: int = 0) -> float:
    """Share of non-pad tokens over all tokens fed to the model, for one epoch."""
    real = sum(lengths)
    if strategy == "packed":
        blocks = len(pack_lengths(lengths, block_size))
        return real / (blocks * block_size)
    padded = sum(max(b) * len(b) for b in _batches(lengths, batch_size, strategy, seed))
    return real / padded


def pack_lengths(lengths: list[int], block_size: int) -> list[list[int]]:
    """First-fit decreasing: indices of examples per block, each block at most block_size tokens."""
    blocks: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        n = min(lengths[i], block_size)
        for b, free in enumerate(room):
            if n <= free:
                blocks[b].append(i)
                room[b] -= n
                break
        else:
            blocks.append([i])
            room.append(block_size - n)
    return blocks


def plan(lengths: list[int], batch_size: int, max_seq_len: int, seed: int = 0) -> dict:
    """Measure the three ways on these lengths and pick one (packing only when it clearly wins)."""
    shares = {s: round(real_token_share(lengths, batch_size, s, max_seq_len, seed), 4)
              for s in ("random", "length_grouped", "packed")}
    grouped, packed = shares["length_grouped"], shares["packed"]
    strategy = "packed" if grouped < 0.95 and packed > grouped + 0.03 else "length_grouped"
    return {"strategy": strategy, "batch_size": batch_size, "block_size": max_seq_len,
            "real_token_share": shares, "chosen_share": shares[strategy]}


def pack(rows: list[dict], block_size: int) -> list[dict]:
    """Packed examples: concatenated ids/labels, positions restarting per example, and the example lengths."""
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


def block_causal_mask(seq_lens_batch: list[list[int]], width: int):
    """Boolean [batch, 1, width, width] mask: causal within each example, nothing across; pads see themselves."""
    import torch

    mask = torch.zeros((len(seq_lens_batch), 1, width, width), dtype=torch.bool)
    for b, seqs in enumerate(seq_lens_batch):
        start = 0
        for n in seqs:
            mask[b, 0, start:start + n, start:start + n] = torch.tril(torch.ones((n, n), dtype=torch.bool))
            start += n
        for k in range(start, width):
            mask[b, 0, k, k] = True  # padding rows: attend to self only, so softmax stays finite
    return mask


def make_collator(plan: dict, pad_id: int):
    """Collate function for the plan: right padding, plus the block mask and positions when packed."""
    import torch

    packed = plan.get("strategy") == "packed"

    def collate(rows):
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        pos = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.tensor(r["input_ids"])
            labels[i, :n] = torch.tensor(r["labels"])
            mask[i, :n] = 1
            pos[i, :n] = torch.tensor(r["position_ids"]) if packed else torch.arange(n)
        batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if packed:
            batch["attention_mask"] = block_causal_mask([r["seq_lens"] for r in rows], width)
            batch["position_ids"] = pos
        return batch

    return collate
