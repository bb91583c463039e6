"""A random-weight twin of a model's exact architecture, small enough to train on a CPU in seconds.

What decides whether a chain works is kept as the model has it: the model class, the vocabulary (the embedding's
rows), tied or untied embeddings, the special-token ids, the rope and attention settings (rope type and its
parameters, sliding windows, the pattern of layer types, soft-capping), the maximum positions; the tokenizer, its
chat template and the generation config are copied as they are. What only makes it big is cut: two layers (or one
of each layer type), one key/value head with the model's query heads per group, a small head dimension, an MLP
twice the width. Where the model's attention is not as wide as its hidden size (heads x head_dim != hidden: Qwen3's
is wider, Gemma-2/3's narrower), the twin's is not either, wider or narrower as the model's (by a factor of two), so
the dry run runs and measures the plans' head_dim terms. Widths are multiples of 64, which bitsandbytes' CPU 4-bit
kernels need. The twin's config records the model's own dimensions (nbutils.train.memory.FULL_SHAPE): the
notebooks' memory plans on the twin are the model's.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from nbutils.defaults import text_config
from nbutils.train import memory

LAYERS = 2
MIN_HEAD_DIM = 16
MAX_EXPERTS, MAX_EXPERTS_PER_TOKEN = 4, 2
COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json")


def _heads(config) -> tuple[int, int]:
    """(query heads, key/value heads): the model's query heads per key/value head, over one key/value head
    (four of each for a model without grouped attention)."""
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    groups = max(1, heads // kv)
    return (groups, 1) if groups > 1 else (4, 4)


def _head_dim(heads: int) -> int:
    """The smallest head dimension (>= MIN_HEAD_DIM, even) that makes heads x head_dim a multiple of 64."""
    dim = math.lcm(heads, 64) // heads
    while dim < MIN_HEAD_DIM or dim % 2:
        dim *= 2
    return dim


def _widths(config, heads: int) -> tuple[int, int]:
    """(head_dim, hidden size) of the twin of `config` with `heads` query heads: hidden = heads x head_dim, unless
    the model's own head_dim sets its attention wider (the twin's head_dim doubled) or narrower (the twin's hidden
    doubled) than its hidden size: the relation the memory plans read (memory.Shape.attention)."""
    head_dim = _head_dim(heads)
    own = getattr(config, "head_dim", None)
    attention = config.num_attention_heads * own if own else config.hidden_size
    if attention > config.hidden_size:
        return 2 * head_dim, heads * head_dim
    if attention < config.hidden_size:
        return head_dim, 2 * heads * head_dim
    return head_dim, heads * head_dim


def _layer_types(config) -> list[str] | None:
    """One layer of each type the model mixes (sliding and full attention ...), in the order they first come."""
    types = getattr(config, "layer_types", None)
    if not types:
        return None
    kept = list(dict.fromkeys(types))
    return kept if len(kept) >= LAYERS else (kept * LAYERS)[:LAYERS]


def _resample(values: list, n: int) -> list:
    """n values spread evenly over `values` (longrope's per-dimension factors for a smaller head)."""
    if len(values) == n or not values:
        return list(values)
    return [values[round(i * (len(values) - 1) / max(1, n - 1))] for i in range(n)]


def _rope(parameters, rotary_half: int):
    """The rope parameters with every per-dimension factor list resampled to the new rotary size."""
    if isinstance(parameters, dict):
        return {k: _resample(v, rotary_half) if k in ("short_factor", "long_factor") and isinstance(v, list)
                else _rope(v, rotary_half) for k, v in parameters.items()}
    return parameters


def shrink_config(config):
    """The same config, cut to CPU size as the module docstring says (a copy; the model's own is untouched). A
    multimodal model's (Gemma-3 4B/12B) language model is cut in its text_config, and its vision tower to LAYERS
    layers, its widths kept (the projector reads them): the chain trains on text, and Gemma-3's 27-layer tower alone
    took a twin to 450M parameters."""
    import copy

    small_all = copy.deepcopy(config)
    vision = getattr(small_all, "vision_config", None)
    if getattr(vision, "num_hidden_layers", None):
        vision.num_hidden_layers = min(LAYERS, vision.num_hidden_layers)
    config, small = text_config(config), text_config(small_all)
    heads, kv = _heads(config)
    head_dim, small.hidden_size = _widths(config, heads)
    small.num_attention_heads, small.num_key_value_heads = heads, kv
    if getattr(config, "head_dim", None) is not None:
        small.head_dim = head_dim
    for name in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if getattr(config, name, None):
            setattr(small, name, 2 * small.hidden_size)
    for name, most in (("num_experts", MAX_EXPERTS), ("num_local_experts", MAX_EXPERTS),
                       ("num_experts_per_tok", MAX_EXPERTS_PER_TOKEN)):
        if getattr(config, name, None):
            setattr(small, name, min(getattr(config, name), most))
    types = _layer_types(config)
    small.num_hidden_layers = len(types) if types else min(LAYERS, config.num_hidden_layers)
    if types:
        small.layer_types = types
    for part in {id(small_all): small_all, id(small): small}.values():  # where the plans look, whichever config they get
        setattr(part, memory.FULL_SHAPE, memory.full_shape(config))
    rotary = int(head_dim * (getattr(config, "partial_rotary_factor", None) or getattr(config, "rotary_pct", None) or 1))
    if getattr(config, "rope_parameters", None):
        small.rope_parameters = _rope(config.rope_parameters, rotary // 2)
    return small_all


def describe(config, small) -> str:
    """'Qwen2ForCausalLM: 28 -> 2 layers, hidden 1536 -> 192, heads 12/2 -> 6/1, vocab 151,936 kept'."""
    arch = (getattr(config, "architectures", None) or [config.model_type])[0]
    config, small = text_config(config), text_config(small)
    return (f"{arch}: {config.num_hidden_layers} -> {small.num_hidden_layers} layers, hidden {config.hidden_size} -> "
            f"{small.hidden_size}, heads {config.num_attention_heads}/{getattr(config, 'num_key_value_heads', None)} -> "
            f"{small.num_attention_heads}/{small.num_key_value_heads}, vocab {config.vocab_size:,} kept")


def deeper(small, times: int):
    """The twin's config with its layers repeated `times` over (each layer type kept): the dry run measures the twin
    at two depths and extrapolates to the model's."""
    import copy

    out_all = copy.deepcopy(small)
    small, out = text_config(small), text_config(out_all)
    out.num_hidden_layers = small.num_hidden_layers * times
    if getattr(small, "layer_types", None):
        out.layer_types = list(small.layer_types) * times
    return out_all


def build(source: str | Path, dest: str | Path, seed: int = 0, full_size: bool = False, times: int = 1) -> Path:
    """Write the twin of the model in `source` (a folder with config.json and the tokenizer files) into `dest`;
    full_size: the config as it is (random weights at the real size, for a GPU: `make gpu-proof`); times: the twin's
    layers that many times over (`deeper`)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source, dest = Path(source), Path(dest)
    config = AutoConfig.from_pretrained(source)
    small = config if full_size else deeper(shrink_config(config), times)
    torch.manual_seed(seed)
    with torch.device("cuda" if full_size and torch.cuda.is_available() else "cpu"):  # a 1B model initialises in seconds
        model = AutoModelForCausalLM.from_config(small, dtype=torch.float32)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, torch.dtype):
        model = model.to(dtype)  # saved as the model's own weights are (bf16 for most)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    for name in COPIED:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)  # after save_pretrained: the model's own generation config
    return dest
