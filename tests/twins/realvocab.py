"""Real tokenizers for the family twins, rebuilt from llama.cpp's ggml-vocab files (nbutils.runtime.llamacpp).

A vocab file holds a family's real token list, merges (BPE) or scores (SentencePiece), and token types. The
twin keeps the family's own special tokens at their real ids (Llama 3.1 renamed three of Llama 3's reserved
tokens; Qwen2.5 and Qwen3 named Qwen2's padding slots), so the tokenizer is the real one, byte for byte, on
ordinary text: llama.cpp's converter recognises it by hashing how it splits its test text.
"""

from __future__ import annotations

import json
from pathlib import Path

# family twin -> ggml-vocab file. Gemma-2/3 (the sdist has Gemma 4's vocabulary), Mistral v0.3 (32768 tokens;
# llama-spm is Llama 2's 32000) and SmolLM2 have none: those twins keep their small trained tokenizer.
VOCAB = {"llama-3.2-instruct": "llama-bpe", "llama-3-base": "llama-bpe", "qwen2.5-instruct": "qwen2",
         "qwen3": "qwen2", "phi-3.5-mini": "phi-3", "pythia-base": "gpt-neox"}
# Llama 3's pre-tokenizer split (tokenizer.json of Meta-Llama-3); Qwen2 and GPT-NeoX classes build their own.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def read_vocab(path: Path) -> dict:
    """tokens, token types, scores and merges of a ggml-vocab file (gguf-py's reader)."""
    from nbutils.export import ggufload

    fields = ggufload.reader(path).fields

    def array(key):
        f = fields.get(key)
        return [] if f is None else [f.contents(i) for i in range(len(f.data))]

    return {"model": fields["tokenizer.ggml.model"].contents(), "tokens": array("tokenizer.ggml.tokens"),
            "types": array("tokenizer.ggml.token_type"), "scores": array("tokenizer.ggml.scores"),
            "merges": array("tokenizer.ggml.merges")}


def _relabelled(vocab: dict, fam) -> tuple[list[str], list[int]]:
    """The first tok_size tokens with the family's added tokens written over their slots: control tokens, or
    user-defined ones (added, not special) where the real tokenizer marks them "special": false (fam.plain)."""
    tokens, types = list(vocab["tokens"][: fam.tok_size]), list(vocab["types"][: fam.tok_size])
    for i, content in fam.specials.items():
        tokens[i], types[i] = content, USER_DEFINED if content in fam.plain else CONTROL
    return tokens, types


def bpe_tokenizer(fam, vocab: dict):
    """A byte-level BPE tokenizer in the family's class: real vocab and merges, the family's specials."""
    import transformers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    tokens, types = _relabelled(vocab, fam)
    merges = [tuple(m.split(" ", 1)) for m in vocab["merges"]]
    ranks = {t: i for i, t in enumerate(tokens)}  # specials too: add_tokens then keeps their real ids
    added = [AddedToken(t, special=k == CONTROL, normalized=k != CONTROL and t not in fam.plain)  # as the hub's files
             for t, k in zip(tokens, types) if k in (CONTROL, USER_DEFINED)]
    named = {k: v for k, v in dict(bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad, unk_token=fam.unk).items() if v}
    if fam.tokenizer_class == "PreTrainedTokenizerFast":  # Llama 3: tokenizer.json as Meta ships it
        tok = Tokenizer(models.BPE(vocab=ranks, merges=merges, ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.add_tokens(added)
        if fam.adds_bos:  # Meta's tokenizer.json: "<|begin_of_text|> $A" on every call with special tokens
            bos = (fam.bos, ranks[fam.bos])
            tok.post_processor = processors.TemplateProcessing(single=f"{fam.bos} $A:0",
                                                               pair=f"{fam.bos} $A:0 {fam.bos}:1 $B:1", special_tokens=[bos])
        return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **named)
    fast = getattr(transformers, fam.tokenizer_class)(vocab=ranks, merges=merges, **named)
    fast.add_tokens(added)
    return fast


def spm_model(vocab: dict, fam) -> bytes:
    """A SentencePiece model (tokenizer.model) with the real pieces, scores and types: what Phi-3 ships."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    tokens, types = _relabelled(vocab, fam)
    model = pb.ModelProto()
    for piece, score, kind in zip(tokens, vocab["scores"], types):
        model.pieces.add(piece=piece, score=float(score), type=kind if kind != USER_DEFINED else CONTROL)
    spec = model.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = pb.TrainerSpec.BPE, len(tokens), True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    norm = model.normalizer_spec
    norm.name, norm.add_dummy_prefix, norm.remove_extra_whitespaces, norm.escape_whitespaces = "identity", True, False, True
    return model.SerializeToString()


def build_tokenizer(fam, folder: Path):
    """The family's real tokenizer, built in `folder` (which then holds tokenizer.model for SentencePiece families)."""
    from nbutils.runtime import llamacpp

    vocab = read_vocab(llamacpp.vocab_file(VOCAB[fam.name]))
    if vocab["model"] == "gpt2":
        return bpe_tokenizer(fam, vocab)
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(spm_model(vocab, fam))
    named = {k: v for k, v in dict(bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad, unk_token=fam.unk).items() if v}
    tok = getattr(transformers, fam.tokenizer_class).from_pretrained(folder, **named, legacy=False)
    (folder / "tokenizer_config.json").unlink(missing_ok=True)
    return tok


def describe(folder: Path) -> str:
    """One line: the class, size and special tokens of a saved tokenizer (for `python -m tests.twins.families`)."""
    cfg = json.loads((Path(folder) / "tokenizer_config.json").read_text())
    return f"{cfg.get('tokenizer_class')}: eos {cfg.get('eos_token')}, pad {cfg.get('pad_token')}"
