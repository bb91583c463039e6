"""The "auto" values of learning_rate and max_steps (02), max_seq_len (01) and max_new_tokens (03 and the probe).

"auto" is every notebook's one way to say "choose for me": a parameter the suite can choose defaults to "auto"
and its comment says what it chooses (`is_auto`); "" means none (no Hub push, no GGUF).
Chosen for real 0.5B-8B models on a T4, while the embedded default (a 2-layer model that only
learns in a few dozen steps at a high rate) keeps its fast values. Each returns (value, why),
and the why is printed and written beside the value.
(Top-level, not in a subpackage: 01, 02 and 03 all use it.)
"""

from __future__ import annotations

import math

# What a Kaggle/Colab T4 reports: torch's total_memory there is 14.74 GiB, which preflight shows as 14.7 and 02's
# plan checks on the T4; 01's cap and the dry run check the same, so what they pass, 02 does not refuse there.
T4_MEMORY_GB = 14.7
TINY_PARAMS = 50e6  # below this (non-embedding parameters) a model is a toy: debug runs, the embedded default
LR_REAL, LR_TINY = 2e-4, 3e-3
TINY_MIN_STEPS = 80  # the embedded default learns its task in about 80 steps: 3 passes over its 432 training records
AUTO = "auto"
# GRPO's example rewards' short answer (nbutils.eval.rewards.MAX_WORDS), which 05's plan checks 01's answers against
SHORT_ANSWER_WORDS = 8


def is_auto(value) -> bool:
    """Whether a parameter asks the suite to choose: the string "auto" (None too: a Python caller's default)."""
    return value is None or (isinstance(value, str) and value.strip().lower() == AUTO)


def text_config(config):
    """The config that holds the language model's fields (vocab_size, hidden_size, layers, positions): a multimodal
    model's (Gemma-3 4B/12B's Gemma3Config) keeps them in its text_config; any other config is its own."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def body_parameters(model_config) -> float:
    """Parameters in the transformer blocks (attention + MLP), without the embeddings."""
    model_config = text_config(model_config)  # a multimodal model's (Gemma-3 4B) language model
    h, layers = model_config.hidden_size, model_config.num_hidden_layers
    inter = getattr(model_config, "intermediate_size", None) or 4 * h
    return layers * (4 * h * h + 3 * h * inter)


def learning_rate(value, model_config) -> tuple[float, str]:
    """value unless "auto"; else 2e-4 for real models (the QLoRA paper's range is 1e-4 to 2e-4),
    3e-3 for toy models under 50M block parameters (the embedded default learns in 80 steps with it)."""
    if not is_auto(value):
        return float(value), "given"
    n = body_parameters(model_config)
    if n < TINY_PARAMS:
        return LR_TINY, f"auto: {n / 1e6:.1f}M block parameters, a toy model: {LR_TINY:g}"
    return LR_REAL, f"auto: {n / 1e9:.2f}B block parameters: {LR_REAL:g}, the QLoRA range for real models"


def max_steps(value, steps_per_epoch: int, num_epochs: float, model_config) -> tuple[int, str]:
    """value unless "auto"; else num_epochs passes over the training rows, so a run covers its data (the Trainer
    stops there), and at least 80 steps for a toy model (the embedded default needs about 3 passes to learn)."""
    if not is_auto(value):
        return int(value), "given"
    steps = max(1, math.ceil(num_epochs * steps_per_epoch))
    why = f"auto: {num_epochs:g} epoch(s) of {steps_per_epoch} steps"
    if body_parameters(model_config) < TINY_PARAMS and steps < TINY_MIN_STEPS:
        return TINY_MIN_STEPS, f"{why}, raised to {TINY_MIN_STEPS} for a toy model (it learns in about that many)"
    return steps, why


def max_seq_len(value, lengths: list[int], model_config=None, cap: tuple[int, str] | None = None,
                coverage: float = 0.99) -> tuple[int, str]:
    """value unless "auto"; else the length covering `coverage` of the records, rounded up to a multiple
    of 64, capped by the model's positions and by `cap` (the longest sequence that trains on the GPU, with
    why: nbutils.train.memory.longest_sequence, which 01 passes in). A cap of 0 (nothing trains at 01's
    batch_size) is a ValueError naming batch_size."""
    if not is_auto(value):
        return int(value), "given"
    if not lengths:
        return 256, "auto: no usable record to measure, 256"
    s = sorted(lengths)
    want = s[min(len(s) - 1, math.ceil(coverage * len(s)) - 1)]
    n = 64 * math.ceil(want / 64)
    covers = f"auto: {n} covers {coverage:.0%} of records (longest {s[-1]})"
    positions = getattr(text_config(model_config), "max_position_embeddings", None) if model_config is not None else None
    if positions and n > positions:
        n, covers = positions, f"auto: capped at {n} by the model's {positions} positions"
    if cap is not None and cap[0] < n:
        if cap[0] <= 0:
            raise ValueError(f"max_seq_len=\"auto\" found no length that trains: not even 64 tokens fit {cap[1]}. "
                             f"Lower batch_size in 01's parameters cell (the records want {n} tokens), or use a "
                             "smaller model")
        n, covers = cap[0], f"auto: capped at {cap[0]} by {cap[1]} (the records want {n})"
    return n, f"{covers}; {sum(x > n for x in lengths)} of {len(lengths)} records are longer"


def max_new_tokens(value, tokenizer, references: list[str]) -> tuple[int, str]:
    """value unless "auto"; else 1.5x the longest reference answer in tokens plus room for the stop token,
    between 16 and 1024."""
    if not is_auto(value):
        return int(value), "given"
    longest = max((len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in references), default=0)
    n = min(1024, max(16, math.ceil(1.5 * longest) + 4))
    return n, f"auto: longest reference answer {longest} tokens -> {n}"


def model_config_of(tokenizer):
    """The model config beside the tokenizer (for max_seq_len="auto"), or None."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(tokenizer.name_or_path)
    except Exception:  # noqa: BLE001 -- a bare tokenizer folder, a hub id offline: no caps from the model
        return None
