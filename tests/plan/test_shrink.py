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


def test_a_multimodal_models_language_model_is_cut_in_its_text_config():
    """Gemma-3 4B/12B: Gemma3Config holds the language model in text_config (no num_attention_heads of its own)."""
    from transformers import Gemma3Config

    from nbutils.plan import memcheck
    from nbutils.train import memory

    config = Gemma3Config()
    small = shrink.shrink_config(config)
    text = small.text_config
    assert type(small) is Gemma3Config and text.vocab_size == 262_208 and text.hidden_size % 64 == 0
    assert text.num_hidden_layers < 26 and text.hidden_size < 2304 and small.vision_config.num_hidden_layers == shrink.LAYERS
    assert memory.Shape.from_config(small) == memory.Shape.from_config(config)  # plans as the model it stands for
    assert memory.Shape.from_config(small, own=True).hidden == text.hidden_size
    assert config.text_config.num_hidden_layers == 26 and config.vision_config.num_hidden_layers == 12  # untouched
    assert "26 ->" in shrink.describe(config, small) and "262,208 kept" in shrink.describe(config, small)
    assert shrink.deeper(small, 3).text_config.num_hidden_layers == 3 * text.num_hidden_layers
    assert memcheck.deeper_times(config) >= 2
