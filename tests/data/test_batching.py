"""Batching: the padding each strategy wastes, best-fit packing, and packed rows that give the logits and loss
of the examples run one by one (block-diagonal causal mask, restarting positions)."""

import random

import pytest

from nbutils.data import batching, records, splits


def test_real_token_share_counts_the_padding_of_each_batch():
    # one batch of four, padded to the longest: 10 real tokens of 16, whatever the order
    assert batching.real_token_share([4, 2, 3, 1], 4, "random") == 10 / 16
    assert batching.real_token_share([5, 5, 5, 5], 2, "random") == 1.0
    assert batching.real_token_share([4, 1, 4, 1], 2, "length_grouped") == 1.0  # the fours go together
    assert batching.real_token_share([3, 1, 2, 2], 1, "packed", block_size=4) == 1.0  # two full blocks of 4


def test_pack_lengths_is_best_fit_decreasing_within_the_block():
    blocks = batching.pack_lengths([5, 3, 4, 1, 2], 6)
    assert blocks == [[0, 3], [2, 4], [1]]  # 5+1, 4+2, 3
    assert batching.pack_lengths([9, 2], 4) == [[0], [1]]  # an over-long example fills one block, cut to 4
    assert sorted(i for b in batching.pack_lengths(list(range(1, 40)), 16) for i in b) == list(range(39))


def test_pack_restarts_positions_and_never_predicts_across_examples():
    rows = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4, 5], "labels": [-100, 5]}]
    [block] = batching.pack(rows, 8)
    assert block == {"input_ids": [1, 2, 3, 4, 5], "labels": [-100, 2, 3, -100, 5], "position_ids": [0, 1, 2, 0, 1],
                     "seq_lens": [3, 2], "length": 5}


def test_batching_plan_packs_only_long_tailed_data():
    rng = random.Random(0)
    tailed = [min(1024, 16 + int(rng.lognormvariate(4.5, 0.9))) for _ in range(3000)]
    plan = batching.plan(tailed, 16, 1024)
    shares = plan["real_token_share"]
    assert shares["random"] < shares["length_grouped"] < shares["packed"]
    assert plan["strategy"] == "packed" and plan["chosen_share"] >= 0.95
    even = [rng.randint(40, 60) for _ in range(3000)]
    assert batching.plan(even, 16, 256)["strategy"] == "length_grouped"


def test_block_causal_mask_shape():
    mask = batching.block_causal_mask([[2, 3]], 6)[0, 0]
    assert mask[1, 0] and not mask[2, 1] and mask[4, 2] and not mask[1, 2] and mask[5, 5] and not mask[5, 4]


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    return AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), attn_implementation="sdpa").eval()


def _examples(tok, n=5):
    from nbutils import embedded

    rows = []
    for r in embedded.task_records(n):
        enc = splits.encode_batch({"messages": [records.to_messages(r)]}, tok, tok.chat_template, False)
        rows.append({"input_ids": enc["input_ids"][0], "labels": enc["labels"][0]})
    return rows


@pytest.mark.parametrize("attn", ["sdpa", "eager", "flash_attention_2"])
def test_packed_batch_equals_separate_examples(tok, tiny_model, attn):
    """Packed rows with the block-diagonal mask and restarting positions give the same logits and loss."""
    import torch

    rows = _examples(tok)
    block = 2 * max(len(r["input_ids"]) for r in rows) + 1
    packed = batching.pack(rows, block)
    assert len(packed) >= 2 and len({p["length"] for p in packed}) > 1  # some rows padded in the batch
    batch = batching.make_collator({"strategy": "packed"}, tok.pad_token_id, attn)(packed)
    # flash_attention_2's collation (no mask, positions only) is checked through SDPA: without a KV
    # cache (as in training) transformers derives the block-diagonal mask from the restarting positions.
    tiny_model.set_attn_implementation("eager" if attn == "eager" else "sdpa")
    try:
        with torch.no_grad():
            out = tiny_model(**batch, use_cache=False)
            nll, count = 0.0, 0
            for b, block_rows in enumerate(batching.pack_lengths([len(r["input_ids"]) for r in rows], block)):
                start = 0
                for i in block_rows:
                    ids, labels = torch.tensor([rows[i]["input_ids"]]), torch.tensor([rows[i]["labels"]])
                    alone = tiny_model(input_ids=ids, labels=labels)
                    n = ids.shape[1]
                    assert torch.allclose(alone.logits[0], out.logits[b, start:start + n], atol=1e-4)
                    k = int((labels[0, 1:] != splits.IGNORE_INDEX).sum())
                    nll, count = nll + alone.loss.item() * k, count + k
                    start += n
    finally:
        tiny_model.set_attn_implementation("sdpa")
    assert abs(out.loss.item() - nll / count) < 1e-4
    assert torch.isfinite(out.logits).all()


def test_packed_collator_takes_unpacked_eval_rows(tok, tiny_model):
    import torch

    rows = _examples(tok, 3)
    collate = batching.make_collator({"strategy": "packed"}, tok.pad_token_id)
    batch = collate(rows)
    assert batch["attention_mask"].shape == (3, 1, batch["input_ids"].shape[1], batch["input_ids"].shape[1])
    plain = batching.make_collator({"strategy": "length_grouped"}, tok.pad_token_id)(rows)
    with torch.no_grad():
        a, b = tiny_model(**batch), tiny_model(**plain)
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


def test_scoring_batches_follow_a_token_budget_longest_first():
    lengths = [5, 40, 10, 40, 100, 8]
    batches = batching.by_tokens(lengths, 80)
    assert batches == [[4], [1, 3], [2, 5, 0]]  # 100 alone (over the budget), 2 x 40, then 3 x 10
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * max(lengths[i] for i in b) <= 80 or len(b) == 1 for b in batches)
