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


def test_the_twin_keeps_the_models_attention_wider_or_narrower_than_its_hidden_size():
    """Qwen3's attention (heads x head_dim) is wider than its hidden size, Gemma-2's narrower: the twin's is too, so
    the dry run measures the plans' head_dim terms (memory.Shape.attention, kv_width) on the twin as transformers
    builds it; where it is hidden wide (Llama-3.2-1B, Qwen2.5) the twin is cut as it always was."""
    import torch
    from transformers import AutoModelForCausalLM

    from nbutils.train import memory
    from tests.train.test_memory import published

    for name, relation in (("qwen3-0.6b", 1), ("qwen3-4b", 1), ("gemma-2-2b", -1), ("llama-3.2-1b", 0),
                           ("qwen2.5-1.5b", 0)):
        config = published(name)
        small = shrink.shrink_config(config)
        own = memory.Shape.from_config(small, own=True)
        assert (own.attention > own.hidden) - (own.attention < own.hidden) == relation, name
        assert own.hidden % 64 == 0 and own.attention % 64 == 0 and own.hidden < config.hidden_size, name
        assert memory.Shape.from_config(small) == memory.Shape.from_config(config), name  # head_dim in FULL_SHAPE
        with torch.device("meta"):
            attn = AutoModelForCausalLM.from_config(small).model.layers[0].self_attn
        built = [(m.in_features, m.out_features) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)]
        assert own.linears()[:4] == built, name
    assert shrink.shrink_config(published("llama-3.2-1b")).hidden_size == 64  # 4 heads x 16, as before
