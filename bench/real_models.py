"""Model folders without weights, as the Hub serves them: real config.json values and real tokenizers, offline.

    folder = real_models.folder("qwen2.5-1.5b-instruct")   # config.json, tokenizer files, generation_config.json

What `python -m nbutils.plan dry-run` fetches from the Hub (a few files, no weights), made here without the Hub: the
published config.json and generation_config.json values, and the tokenizer llama.cpp ships for the family
(bench/real_vocab.py) with the special tokens and chat template of the published tokenizer_config.json. The
dry run's tests and benches and `make gpu-proof` start from these. BROKEN holds two deliberate mistakes, each of
which the dry run must name. Folders are built once under llamacpp.cache_root()/models/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import real_vocab
from nbutils.runtime import llamacpp
from tests.twins import templates

# Phi-3.5-mini's longrope factors: the published lists have 48 values (head_dim 96 / 2) rising from 1.0 (short)
# and 1.08 (long); these stand-ins have the same length and range, which is all the architecture checks.
_SHORT = [round(1.0 + 0.0625 * i ** 1.5 / 48 ** 0.5, 4) for i in range(48)]
_LONG = [round(1.08 + 0.95 * i, 4) for i in range(48)]

MODELS = {
    "qwen2.5-1.5b-instruct": {
        "vocab": "qwen2", "template": templates.QWEN25,
        "tokens": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None},
        "config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643,
                   "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 1536, "intermediate_size": 8960,
                   "max_position_embeddings": 32768, "max_window_layers": 21, "num_attention_heads": 12,
                   "num_hidden_layers": 28, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                   "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
                   "use_sliding_window": False, "vocab_size": 151936},
        "generation": {"bos_token_id": 151643, "pad_token_id": 151643, "eos_token_id": [151645, 151643],
                       "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1},
    },
    "llama-3.2-1b-instruct": {
        "vocab": "llama-3", "template": templates.LLAMA_31,
        "tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": None, "unk_token": None},
        # Llama-3.1 named three reserved tokens of Llama-3's vocabulary (the one llama.cpp ships); the rest is equal.
        "renamed": {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>", 128010: "<|python_tag|>"},
        "config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "bos_token_id": 128000,
                   "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
                   "intermediate_size": 8192, "max_position_embeddings": 131072, "num_attention_heads": 32,
                   "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                   "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                   "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 128256},
        "generation": {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": True,
                       "temperature": 0.6, "top_p": 0.9},
    },
    "phi-3.5-mini-instruct": {
        "vocab": "phi-3", "template": templates.PHI35,
        "tokens": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>"},
        "config": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "bos_token_id": 1, "eos_token_id": 32000,
                   "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
                   "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 32,
                   "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
                   "rms_norm_eps": 1e-05, "rope_scaling": {"long_factor": _LONG, "short_factor": _SHORT, "type": "longrope"},
                   "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": False,
                   "torch_dtype": "bfloat16", "vocab_size": 32064},
        "generation": {"bos_token_id": 1, "eos_token_id": [32007, 32001, 32000], "pad_token_id": 32000},
    },
}
_NO_ASSISTANT_MARKER = (  # Qwen2.5's turns, but an answer follows the user's turn with no <|im_start|>assistant
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ m['content'] + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}{% endfor %}")
BROKEN = {  # name -> (the model it changes, the change, words the dry run's message must hold)
    "qwen2.5-no-assistant-marker": ("qwen2.5-1.5b-instruct", {"template": _NO_ASSISTANT_MARKER},
                                    "marks no assistant turn"),
    "qwen2.5-small-vocab": ("qwen2.5-1.5b-instruct", {"config": {"vocab_size": 151000}},
                            "vocabulary has 151,000 rows"),
}


def spec(name: str) -> dict:
    """A model's entry, a broken one with its change applied."""
    if name in MODELS:
        return MODELS[name]
    base, change, _ = BROKEN[name]
    out = dict(MODELS[base])
    for key, value in change.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) else value
    return out


def write(name: str, dest: Path) -> Path:
    """The model folder: config.json, generation_config.json and the tokenizer files, no weights."""
    s = spec(name)
    dest.mkdir(parents=True, exist_ok=True)
    real_vocab.load_tokenizer(s["vocab"]).save_pretrained(dest)
    tok_json = json.loads((dest / "tokenizer.json").read_text())
    rows = s["config"]["vocab_size"] if name in MODELS else MODELS[BROKEN[name][0]]["config"]["vocab_size"]
    renamed = s.get("renamed", {})
    # transformers' GGUF conversion adds '<|endoftext|>' past Llama-3's last id; the real tokenizer has no such token.
    tok_json["added_tokens"] = [{**t, "content": renamed.get(t["id"], t["content"])} for t in tok_json["added_tokens"]
                                if t["id"] < rows]
    vocab = tok_json["model"]["vocab"]
    for piece, i in [(piece, i) for piece, i in vocab.items() if i in renamed]:
        del vocab[piece]
        vocab[renamed[i]] = i
    (dest / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False))
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    cfg.update(s["tokens"], tokenizer_class="PreTrainedTokenizerFast")
    cfg.pop("added_tokens_decoder", None)  # tokenizer.json holds them, renamed
    cfg.pop("chat_template", None)
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    (dest / "chat_template.jinja").write_text(s["template"])  # where transformers saves a template, and reads it first
    (dest / "config.json").write_text(json.dumps(s["config"], indent=2))
    (dest / "generation_config.json").write_text(json.dumps(s["generation"], indent=2))
    return dest


def folder(name: str) -> Path:
    """The cached model folder of `name` (a key of MODELS or BROKEN), written on first use."""
    from filelock import FileLock

    dest = llamacpp.cache_root() / "models" / name
    real_vocab.load_tokenizer(spec(name)["vocab"])  # converted once, outside the lock below
    with FileLock(str(dest) + ".lock"):
        if not (dest / "config.json").exists():
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            write(name, tmp)
            tmp.rename(dest)
    return dest
