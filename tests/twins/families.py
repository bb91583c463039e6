"""Family twins: tiny random-weight models arranged like the real families people fine-tune on a T4.

Each twin is the family's real model class (2 layers, hidden 64, MLP 128: bitsandbytes' CPU 4-bit
kernels need widths that are multiples of 64) with the family's real embedding size, and its tokenizer:
the family's real one where llama.cpp's sdist ships its vocabulary (realvocab.py: Llama 3, Qwen2.5/3,
Phi-3.5, Pythia), else a small byte-level BPE whose special tokens sit at the family's real ids (the
gap filled with reserved placeholders, as the real vocabularies have); with the real bos/eos/pad/unk settings,
`tokenizer_class`, chat template, `generation_config.eos_token_id` list, tied embeddings where
the family ties them, and a model vocabulary larger than the tokenizer where the family pads it.

Built once and cached under $NBUTILS_CACHE or ~/.cache/nbutils, in twins/<name>-<hash of this
file and templates.py>. `python -m tests.twins.families [NAME ...]` builds them and prints where.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.data import chatformat
from tests.twins import realvocab, templates

HERE = Path(__file__).parent
VERSION = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in ("families.py", "templates.py", "realvocab.py"))
                         ).hexdigest()[:10]
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)


@dataclass
class Family:
    name: str
    arch: str  # transformers config class
    model_vocab: int  # embedding rows
    tok_size: int  # len(tokenizer): ids 0..tok_size-1
    specials: dict[int, str]  # id -> content (added tokens at their real ids, special unless named in plain)
    bos: str | None
    eos: str
    pad: str | None
    unk: str | None
    tokenizer_class: str
    gen_eos: list[int] | int
    tie: bool
    template: str | None = None
    config: dict = field(default_factory=dict)
    # what the suite is expected to do (checked by the tests)
    expect_pad: str = ""
    expect_stop: str = ""  # the end-of-turn token the labels must end each answer with
    expect_attention: str = "sdpa"
    # added tokens the real tokenizer marks "special": false: single tokens that decode(skip_special_tokens=True) keeps
    plain: frozenset[str] = frozenset()
    # the tokenizer puts BOS before the text when called (Llama-3's post-processor, Gemma's and Mistral's
    # add_bos_token: true); Phi-3.5 says add_bos_token: false, Qwen and Pythia have none to add
    adds_bos: bool = False


def _reserved(first_id: int, last_id: int, fmt: str, start: int = 0, skip: dict | None = None) -> dict[int, str]:
    out, n = {}, start
    for i in range(first_id, last_id + 1):
        if skip and i in skip:
            continue
        out[i] = fmt.format(n)
        n += 1
    return out


def _llama3_specials() -> dict[int, str]:
    named = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
             128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>",
             128010: "<|python_tag|>"}
    return {**named, **_reserved(128000, 128255, "<|reserved_special_token_{}|>", skip=named)}


_QWEN = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
         "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
         "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
         "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
_QWEN3_EXTRA = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
# Qwen2.5's and Qwen3's tokenizer.json add these with "special": false (the <|...|> chat and vision markers are
# special): Qwen3's <think> block survives skip_special_tokens, as it does on the real model.
_QWEN_PLAIN = frozenset(["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                         "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                         "<think>", "</think>"])
_GEMMA_BASE = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[@BOS@]"}
_PHI = {0: "<unk>", 1: "<s>", 2: "</s>", 32000: "<|endoftext|>", 32001: "<|assistant|>", 32002: "<|placeholder1|>",
        32003: "<|placeholder2|>", 32004: "<|placeholder3|>", 32005: "<|placeholder4|>", 32006: "<|system|>",
        32007: "<|end|>", 32008: "<|placeholder5|>", 32009: "<|placeholder6|>", 32010: "<|user|>"}
_SMOL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>",
         "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
         "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>"]
_MISTRAL = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[TOOL_CALLS]", 6: "[AVAILABLE_TOOLS]",
            7: "[/AVAILABLE_TOOLS]", 8: "[TOOL_RESULTS]", 9: "[/TOOL_RESULTS]"}

FAMILIES = {f.name: f for f in [
    Family("llama-3.2-instruct", "LlamaConfig", 128256, 128256, _llama3_specials(), "<|begin_of_text|>", "<|eot_id|>",
           None, None, "PreTrainedTokenizerFast", [128001, 128008, 128009], tie=True, template=templates.LLAMA_31,
           config=dict(max_position_embeddings=131072, rope_theta=500000.0),
           expect_pad="<|finetune_right_pad_id|>", expect_stop="<|eot_id|>", adds_bos=True),
    Family("llama-3-base", "LlamaConfig", 128256, 128256, _llama3_specials(), "<|begin_of_text|>", "<|end_of_text|>",
           None, None, "PreTrainedTokenizerFast", 128001, tie=False,
           config=dict(max_position_embeddings=8192, rope_theta=500000.0),
           expect_pad="<|finetune_right_pad_id|>", expect_stop="<|end_of_text|>", adds_bos=True),
    Family("qwen2.5-instruct", "Qwen2Config", 151936, 151665, {151643 + i: t for i, t in enumerate(_QWEN)}, None,
           "<|im_end|>", "<|endoftext|>", None, "Qwen2Tokenizer", [151645, 151643], tie=True, template=templates.QWEN25,
           config=dict(max_position_embeddings=32768), expect_pad="<|endoftext|>", expect_stop="<|im_end|>",
           plain=_QWEN_PLAIN),
    Family("qwen3", "Qwen3Config", 151936, 151669, {151643 + i: t for i, t in enumerate(_QWEN + _QWEN3_EXTRA)}, None,
           "<|im_end|>", "<|endoftext|>", None, "Qwen2Tokenizer", [151645, 151643], tie=True, template=templates.QWEN3,
           config=dict(max_position_embeddings=40960, head_dim=16), expect_pad="<|endoftext|>", expect_stop="<|im_end|>",
           plain=_QWEN_PLAIN),
    Family("gemma-2", "Gemma2Config", 256000, 256000,
           {**_GEMMA_BASE, **_reserved(6, 105, "<unused{}>"), 106: "<start_of_turn>", 107: "<end_of_turn>"},
           "<bos>", "<eos>", "<pad>", "<unk>", "GemmaTokenizer", [1, 107], tie=True, template=templates.GEMMA2,
           config=dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=4096, max_position_embeddings=8192),
           expect_pad="<pad>", expect_stop="<end_of_turn>", expect_attention="eager", adds_bos=True),
    Family("gemma-3", "Gemma3TextConfig", 262144, 262144,
           {**_GEMMA_BASE, **_reserved(6, 104, "<unused{}>"), 105: "<start_of_turn>", 106: "<end_of_turn>"},
           "<bos>", "<eos>", "<pad>", "<unk>", "GemmaTokenizer", [1, 106], tie=True, template=templates.GEMMA3,
           config=dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=512, max_position_embeddings=32768),
           expect_pad="<pad>", expect_stop="<end_of_turn>", adds_bos=True),
    Family("mistral-v0.3", "MistralConfig", 32768, 32768, {**_MISTRAL, **_reserved(10, 770, "[control_{}]", start=8)},
           "<s>", "</s>", None, "<unk>", "LlamaTokenizer", 2, tie=False, template=templates.MISTRAL_V03,
           config=dict(max_position_embeddings=32768, sliding_window=None), expect_pad="<unk>", expect_stop="</s>",
           adds_bos=True),
    Family("phi-3.5-mini", "Phi3Config", 32064, 32011, _PHI, "<s>", "<|endoftext|>", "<|endoftext|>", "<unk>",
           "LlamaTokenizer", [32000, 32001, 32007], tie=False, template=templates.PHI35,
           config=dict(max_position_embeddings=131072),
           expect_pad="<|placeholder1|>", expect_stop="<|end|>"),
    Family("smollm2-instruct", "LlamaConfig", 49152, 49152, dict(enumerate(_SMOL)), "<|im_start|>", "<|im_end|>",
           "<|im_end|>", "<|endoftext|>", "GPT2Tokenizer", 2, tie=True, template=templates.SMOLLM2,
           config=dict(max_position_embeddings=8192, rope_theta=100000.0), expect_pad="<|endoftext|>",
           expect_stop="<|im_end|>"),
    # Pythia pads its embedding matrix to 50304; this twin keeps 50277 rows (not a multiple of 64) on purpose.
    Family("pythia-base", "GPTNeoXConfig", 50277, 50277, {0: "<|endoftext|>", 1: "<|padding|>"}, "<|endoftext|>",
           "<|endoftext|>", None, "<|endoftext|>", "GPTNeoXTokenizer", 0, tie=False,
           config=dict(max_position_embeddings=2048, rotary_pct=0.25, intermediate_size=256),
           expect_pad="<|padding|>", expect_stop="<|endoftext|>"),
]}


def cache_root() -> Path:
    from nbutils import embedded

    return embedded.cache_root() / "twins"


def _corpus() -> list[str]:
    import re

    from nbutils import embedded

    docs = [re.sub(r"<\|[a-z]+\|>", " ", d) for d in embedded.pretraining_texts(1500)]
    return docs + [json.dumps(r) for r in embedded.task_records()]


def _trained_merges(backend) -> tuple[list[str], list[tuple[str, str]]]:
    """BPE pieces (in training order) and merges learnt with the family class's own normalizer and pre-tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer, trainer_tok.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if "ByteLevel" in str(backend.pre_tokenizer) else []
    trainer_tok.train_from_iterator(_corpus(), trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                                                   initial_alphabet=alphabet))
    model = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return sorted(model["vocab"], key=model["vocab"].get), merges


def build_tokenizer(fam: Family):
    """The family's tokenizer class over a small BPE: special tokens at their real ids, placeholders in the gaps."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    named = dict(bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad, unk_token=fam.unk)
    cls = getattr(transformers, fam.tokenizer_class, None)
    if fam.tokenizer_class == "PreTrainedTokenizerFast":  # tokenizer.json loaded as is: byte-level like Llama-3's
        shell = Tokenizer(models.BPE())
        shell.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        shell.decoder = decoders.ByteLevel()
    else:  # these classes rebuild their pipeline from vocab + merges: train in that pipeline
        shell = cls(vocab={c: i for i, c in enumerate(dict.fromkeys(v for v in named.values() if v))},
                    merges=[]).backend_tokenizer
    pieces, merges = _trained_merges(shell)
    bytes_ = [f"<0x{b:02X}>" for b in range(256)] if "ByteFallback" in str(shell.decoder) else []
    free = (i for i in range(fam.tok_size) if i not in fam.specials)
    vocab = {content: i for i, content in fam.specials.items()}
    for piece, i in zip(bytes_ + [p for p in pieces if p not in fam.specials.values()], free):
        vocab[piece] = i
    for i in free:  # the rest of the real vocabulary: placeholders no merge ever produces
        vocab[f"<filler_{i}>"] = i
    added = [AddedToken(c, special=c not in fam.plain, normalized=False) for _, c in sorted(fam.specials.items())]
    specials, plain = [t for t in added if t.special], [t for t in added if not t.special]
    if cls is None or fam.tokenizer_class == "PreTrainedTokenizerFast":
        shell.model = models.BPE(vocab=vocab, merges=merges)
        shell.add_special_tokens(specials)
        shell.add_tokens(plain)
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=shell, **named)
    else:
        fast = cls(vocab=vocab, merges=merges, **{k: v for k, v in named.items() if v})
        fast.add_tokens(specials, special_tokens=True)
        fast.add_tokens(plain)
    if fam.template:
        fast.chat_template = fam.template
    return fast


def build_model(fam: Family, tokenizer):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig

    ids = lambda t: tokenizer.convert_tokens_to_ids(t) if t else None  # noqa: E731
    kw = dict(vocab_size=fam.model_vocab, tie_word_embeddings=fam.tie, bos_token_id=ids(fam.bos),
              pad_token_id=ids(fam.pad), eos_token_id=fam.gen_eos if isinstance(fam.gen_eos, int) else fam.gen_eos[0])
    cfg = getattr(transformers, fam.arch)(**{**kw, **SHAPE, **fam.config})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).to(torch.bfloat16)  # saved as the real ones are
    model.generation_config = GenerationConfig(bos_token_id=ids(fam.bos), eos_token_id=fam.gen_eos,
                                               pad_token_id=ids(fam.pad))
    return model


def build(name: str, dest: Path) -> Path:
    """Write the twin (model, generation config, tokenizer) into dest."""
    fam = FAMILIES[name]
    # The family's real tokenizer where llama.cpp ships its vocabulary (realvocab.VOCAB), else a small trained one.
    tok = realvocab.build_tokenizer(fam, dest) if fam.name in realvocab.VOCAB else build_tokenizer(fam)
    if fam.template:
        tok.chat_template = fam.template
    if fam.adds_bos and fam.tokenizer_class != "PreTrainedTokenizerFast":
        tok.add_bos_token = True  # saved as the hub's tokenizer.json has it: a post-processor putting BOS first
    model = build_model(fam, tok)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    chatformat.save_tokenizer(tok, dest)  # the added tokens listed in tokenizer_config.json, as the hub's files do
    cfg_path = dest / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = fam.tokenizer_class
    # The real configs say null where a family has no such token (class defaults would fill one in).
    cfg.update(bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad, unk_token=fam.unk)
    if fam.tokenizer_class != "PreTrainedTokenizerFast":  # Llama-3's BOS comes from tokenizer.json's post-processor
        cfg["add_bos_token"] = fam.adds_bos
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return dest


def ensure(name: str) -> Path:
    """The cached twin's folder, built on first use (a file lock keeps parallel builders apart)."""
    from filelock import FileLock

    dest = cache_root() / f"{name}-{VERSION}"
    if (dest / "DONE").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if not (dest / "DONE").exists():
            import shutil

            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            build(name, tmp)
            (tmp / "DONE").write_text("")
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
    return dest


if __name__ == "__main__":
    for n in sys.argv[1:] or FAMILIES:
        print(n, ensure(n))
