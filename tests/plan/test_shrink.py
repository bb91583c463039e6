"""The dry run's twin keeps the model's class, vocabulary and attention shape, cut to CPU size."""

from transformers import Qwen2Config

from nbutils.plan import shrink


def test_the_twin_keeps_the_vocabulary_and_grouping_and_cuts_the_size():
    config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True)
    small = shrink.shrink_config(config)
    assert type(small) is Qwen2Config and small.vocab_size == 151936 and small.tie_word_embeddings
    assert small.num_hidden_layers < 28 and small.hidden_size < 1536 and small.hidden_size % 64 == 0
    assert small.num_attention_heads // small.num_key_value_heads == 6  # the model's query heads per kv head
    assert config.num_hidden_layers == 28  # the model's own config is untouched
    assert "28 ->" in shrink.describe(config, small)
