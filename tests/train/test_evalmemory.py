"""The memory of passes without gradients: generation's cache, scoring by chunks against the whole logits, the
scoring batch "auto" picks."""

from types import SimpleNamespace

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
