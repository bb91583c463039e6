"""The memory of passes without gradients: generation's cache, scoring by chunks against the whole logits, the
scoring batch "auto" picks."""

from types import SimpleNamespace

import pytest

from nbutils.train import evalmemory, memory

QWEN = memory.Shape(vocab=151_936, hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2, tied=True)


def test_generation_holds_the_cache_of_its_rows():
    one, two = (evalmemory.kv_cache(QWEN, rows, 544) for rows in (1, 2))
    assert two == 2 * one == 2 * 28 * 2 * 544 * 256 * 2


def test_scoring_by_chunks_holds_one_chunk_of_logits_and_the_whole_path_all_of_them():
    tokens = 32 * 512
    whole, chunks = evalmemory.scoring(QWEN, tokens, "plain"), evalmemory.scoring(QWEN, tokens, "chunked")
    assert whole - evalmemory.layer_forward(QWEN, tokens) == tokens * QWEN.vocab * 10  # 16-bit, fp32, log-softmax
    assert whole / 2**30 > 23 and chunks / 2**30 < 1.5
    assert evalmemory.scoring(QWEN, 2 * tokens, "chunked") < 2 * chunks  # the chunk does not grow with the batch


def test_auto_scores_the_most_rows_of_the_longest_that_fit_up_to_16384_tokens():
    tokens, why = evalmemory.batch_tokens("auto", lambda n: True, 300)
    assert tokens == 16_200 and why.startswith("auto")  # 54 rows of 300
    assert evalmemory.batch_tokens("auto", lambda n: n <= 3000, 300)[0] == 3000
    assert evalmemory.batch_tokens(100, lambda n: True, 300) == (300, "given")  # never under the longest row


def test_the_plan_names_the_largest_generation_and_scoring_batches_that_fit():
    config = SimpleNamespace(vocab_size=151_936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                             num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True)
    plan = evalmemory.plan_inference(config, quantized=True, lora_r=16, n_adapters=1, generate_rows=16, prompt=256,
                                     new_tokens=64, tokens=16384, gpu_memory_gb=15.0)
    assert plan["fits"] and plan["largest_generate_rows"] > 16 and plan["largest_tokens"] > 16384
    assert set(evalmemory.rows(plan)) >= {"memory.weights", "memory.scoring", "memory.peak", "memory.gpu"}


def test_an_fp32_run_on_a_gpu_counts_the_cuda_context():
    """A Gemma run trained with precision="fp32" (the way out of fp16's overflow on a T4) is evaluated in fp32: the
    plan checked against the GPU still holds the CUDA context (it counted 0 and approved 0.6 GB too much)."""
    config = SimpleNamespace(vocab_size=151_936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                             num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True)
    same = dict(quantized=True, lora_r=16, n_adapters=1, generate_rows=16, prompt=256, new_tokens=64, tokens=4096)
    gpu = evalmemory.plan_inference(config, gpu_memory_gb=14.7, compute_bytes=4, **same)
    cpu = evalmemory.plan_inference(config, gpu_memory_gb=None, compute_bytes=4, **same)
    assert gpu["parts_gb"]["overhead"] == round(memory.OVERHEAD / 2**30, 3) > 0 and cpu["parts_gb"]["overhead"] == 0
    assert gpu["estimate_gb"] - gpu["allocated_gb"] == pytest.approx(memory.OVERHEAD / 2**30, abs=0.011)
    assert gpu["estimate_gb"] > cpu["estimate_gb"]


def test_the_cache_is_kv_heads_x_head_dim_wide_where_heads_x_head_dim_is_not_hidden():
    """Qwen3-4B keeps 8 x 128 keys per position and layer, not 2,560 x 8 / 32 = 640: at 16 x (512 + 1,024) tokens
    3.38 GB, not 2.11; Qwen3-0.6B 2.62 GB, not 1.31; Gemma-2-2B's 4 x 256 against 2,304 x 4 / 8 = 1,152."""
    from tests.train.test_memory import published

    for name, gb in (("qwen3-4b", 3.375), ("qwen3-0.6b", 2.625), ("gemma-2-2b", 2.4375)):
        config = published(name)
        shape = memory.Shape.from_config(config)
        kv = config.num_hidden_layers * 2 * 16 * 1536 * config.num_key_value_heads * config.head_dim * 2
        assert evalmemory.kv_cache(shape, 16, 1536) == kv == gb * memory.GB, name


def test_the_cache_is_what_transformers_keeps():
    """One layer at the published widths (the MLP and vocabulary cut: the cache does not see them), run with a cache:
    its keys and values are the plan's kv_cache for one layer, in fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.train.test_memory import NOT_HIDDEN_WIDE, published

    for name in NOT_HIDDEN_WIDE:
        config = published(name)
        config.num_hidden_layers, config.intermediate_size, config.vocab_size = 1, 64, 256
        config.layer_types = config.layer_types[:1]
        torch.manual_seed(0)
        with torch.no_grad():
            cache = AutoModelForCausalLM.from_config(config).eval()(torch.randint(0, 256, (2, 8)), use_cache=True).past_key_values
        held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
        assert held == evalmemory.kv_cache(memory.Shape.from_config(config), 2, 8, compute_bytes=4), name


def test_a_layers_forward_counts_q_and_the_attention_output_at_their_own_width():
    """Qwen3-0.6B's q and attention output are 16 x 128 = 2,048 wide over a 1,024 hidden size."""
    from tests.train.test_memory import published

    qwen3 = memory.Shape.from_config(published("qwen3-0.6b"))
    assert evalmemory.layer_forward(qwen3, 100) == 100 * (4 * 2048 + 3 * 3072) * 2
    assert evalmemory.layer_forward(QWEN, 100) == 100 * (4 * 1536 + 3 * 8960) * 2  # hidden wide: as it was


def test_eager_attention_adds_its_scores_to_generation_and_scoring():
    """Gemma-2 loads eagerly (its class refuses sdpa): the prompt's forward holds one layer's rows x heads x
    prompt x prompt scores (16-bit, softmax's fp32 copy and output: 10 bytes each) and the two 4-D masks (2 bytes
    each); sdpa holds none. 16 prompts of 1,024 tokens: 1.31 GiB the sdpa plan would miss."""
    from tests.train.test_memory import published

    config = published("gemma-2-2b")
    shape = memory.Shape.from_config(config)
    scores = 16 * 1024 * 1024 * (8 * 10 + 2 * 2)
    assert evalmemory.generation(shape, 16, 1024, 64, attention="eager") - evalmemory.generation(shape, 16, 1024, 64) \
        == scores == evalmemory.eager_scores(shape, 16, 1024)
    assert round(scores / memory.GB, 2) == 1.31
    # a scoring batch of 8 rows x 2,048: each row's own 2,048 x 2,048 scores, not the batch's 16,384 squared
    assert evalmemory.scoring(shape, 8 * 2048, "plain", attention="eager", length=2048) - evalmemory.scoring(
        shape, 8 * 2048, "plain", length=2048) == 8 * 2048 * 2048 * (8 * 10 + 2 * 2)
    assert evalmemory.eager_scores(shape, 16, 1024, attention="sdpa") == 0
    assert evalmemory.eager_scores(shape, 1, 1024, compute_bytes=4) == 1024 * 1024 * (8 * 8 + 2 * 4)  # fp32
    same = dict(quantized=True, lora_r=16, n_adapters=1, generate_rows=16, prompt=1024, new_tokens=64, tokens=16384,
                gpu_memory_gb=14.7, loss="plain", length=2048)
    sdpa, eager = (evalmemory.plan_inference(config, attention=a, **same) for a in ("sdpa", "eager"))
    assert eager["parts_gb"]["generation"] - sdpa["parts_gb"]["generation"] == pytest.approx(scores / memory.GB, abs=1e-3)
    assert eager["largest_generate_rows"] < sdpa["largest_generate_rows"]
    assert eager["largest_tokens"] < sdpa["largest_tokens"] and "eager attention" in evalmemory.rows(eager)["memory.peak"]
