"""The "auto" defaults: learning rate by model size, max_seq_len from the data, max_new_tokens from the answers."""

from types import SimpleNamespace

from transformers import LlamaConfig

from nbutils import defaults
from nbutils.train import curves, memory

TINY = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, max_position_embeddings=256)
REAL = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, vocab_size=128256,
                   max_position_embeddings=131072)  # Llama-3.2-1B's shape


def test_learning_rate_auto_by_size_and_given_values_kept():
    assert defaults.learning_rate("auto", TINY)[0] == 3e-3
    assert defaults.learning_rate("auto", REAL)[0] == 2e-4
    assert defaults.learning_rate(1e-4, REAL) == (1e-4, "given")


def test_max_seq_len_covers_99_percent_and_says_what_it_cuts():
    lengths = [100] * 990 + [5000] * 10
    n, why = defaults.max_seq_len("auto", lengths, REAL)
    assert n == 128 and "10 of 1000 records are longer" in why
    assert defaults.max_seq_len(300, lengths) == (300, "given")


def test_max_seq_len_capped_by_positions_and_by_what_trains_on_a_t4():
    n, why = defaults.max_seq_len("auto", [400] * 100, TINY)
    assert n == 256 and "256 positions" in why
    cap = memory.longest_sequence(REAL, 16, defaults.T4_MEMORY_GB, loss="chunked")
    n, why = defaults.max_seq_len("auto", [60000] * 100, REAL, cap=cap)
    assert 64 <= n == cap[0] < 60000 and "14.7 GB GPU at batch size 16" in why  # what torch reports on a T4


def test_a_capped_max_seq_len_claims_no_coverage_and_a_zero_cap_names_batch_size():
    """Capped by memory, the why says so and how many records are longer, not that the length covers 99%; a cap of 0
    (not even 64 tokens train at 01's batch_size) stops 01 naming batch_size, not a silent 64."""
    import pytest

    n, why = defaults.max_seq_len("auto", [300] * 90 + [600] * 10, REAL, cap=(128, "the memory of a T4"))
    assert n == 128 and "covers" not in why and "capped at 128 by the memory of a T4" in why
    assert "100 of 100 records are longer" in why
    gemma9 = SimpleNamespace(vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                             num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True, head_dim=256)
    cap = memory.longest_sequence(gemma9, 16, defaults.T4_MEMORY_GB, "plain")
    assert cap[0] == 0 and "batch size 1 trains up to" in cap[1]
    with pytest.raises(ValueError, match="batch_size in 01's parameters cell") as err:
        defaults.max_seq_len("auto", [300] * 90 + [600] * 10, gemma9, cap=cap)
    assert "batch size 16" in str(err.value) and "640 tokens" in str(err.value)


def test_a_multimodal_configs_language_model_sizes_the_defaults():
    """Gemma-3 4B/12B's Gemma3Config keeps its positions and sizes in text_config."""
    from transformers import Gemma3Config

    config = Gemma3Config(text_config={"max_position_embeddings": 256})
    n, why = defaults.max_seq_len("auto", [400] * 100, config)
    assert n == 256 and "256 positions" in why
    assert defaults.body_parameters(config) == defaults.body_parameters(config.text_config) > defaults.TINY_PARAMS
    assert defaults.learning_rate("auto", config)[0] == defaults.LR_REAL


def test_max_new_tokens_from_the_longest_reference(tok):
    assert defaults.max_new_tokens("auto", tok, ["city"])[0] == 16
    long = " ".join(["city"] * 40)
    n, _ = defaults.max_new_tokens("auto", tok, ["pet", long])
    assert n >= 1.5 * len(tok(long, add_special_tokens=False)["input_ids"])
    assert defaults.max_new_tokens(32, tok, ["x"]) == (32, "given")


def test_underfit_advice_depends_on_the_learning_rate_used():
    def hist(lr):
        return [{"step": 1, "loss": 2.0, "learning_rate": lr}, {"step": 1, "eval_loss": 2.0},
                {"step": 2, "loss": 1.9, "learning_rate": lr}, {"step": 2, "eval_loss": 1.95}]

    assert "already high" in curves.diagnose(hist(3e-3)) and "raise" not in curves.diagnose(hist(3e-3))
    assert "raise the learning rate from 2.0e-04" in curves.diagnose(hist(2e-4))


def test_max_steps_auto_is_num_epochs_passes_and_at_least_80_for_a_toy_model():
    assert defaults.max_steps("auto", 625, 1.0, REAL) == (625, "auto: 1 epoch(s) of 625 steps")
    assert defaults.max_steps("auto", 625, 2.5, REAL)[0] == 1563
    assert defaults.max_steps("auto", 27, 1.0, TINY)[0] == 80  # the embedded default: 27 steps an epoch
    assert defaults.max_steps("auto", 625, 1.0, TINY)[0] == 625
    assert defaults.max_steps(80, 625, 1.0, REAL) == (80, "given")


def test_auto_is_one_word_for_choose_for_me():
    assert defaults.is_auto("auto") and defaults.is_auto(" Auto ") and defaults.is_auto(None)
    assert not defaults.is_auto("") and not defaults.is_auto(0) and not defaults.is_auto("runs/x")


def test_every_notebook_says_choose_for_me_one_way():
    """"auto" lets the suite choose, in every notebook's parameters; "" means none (no push, no GGUF); no comment
    says "empty:", "0:" or "-1" for a default any more."""
    import re
    from pathlib import Path

    import jupytext

    from nbutils import chain

    for stem in chain.NOTEBOOKS:
        nb = jupytext.read(Path(__file__).resolve().parents[1] / "notebooks" / f"{stem}.py")
        cell = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        for line in cell.splitlines():
            value, _, comment = line.partition("  # ")
            assert not re.search(r"\bempty\b|(^|[\s(])(0\s*(:|means)|-1\b)", comment), f"{stem}: {line}"
            if value.rstrip().endswith('= ""'):
                assert re.search(r'"": (no|none)\b', comment), f"{stem}: say what \"\" means, or default to \"auto\": {line}"
