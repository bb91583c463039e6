"""The "auto" defaults: learning rate by model size, max_seq_len from the data, max_new_tokens from the answers."""

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
    cap = memory.longest_sequence(REAL, 16, defaults.T4_MEMORY_GB)
    n, why = defaults.max_seq_len("auto", [60000] * 100, REAL, cap=cap)
    assert 64 <= n == cap[0] < 60000 and "15 GB GPU at batch size 16" in why
    assert defaults.max_seq_len("auto", [60000] * 100, REAL, cap=(0, "nothing fits"))[0] == 64


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
