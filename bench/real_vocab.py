"""Real tokenizers offline: the vocabularies llama.cpp ships, read from llama-cpp-python's source distribution.

    from bench import real_vocab
    tok = real_vocab.load_tokenizer("qwen2")     # Qwen2's 151,936-token BPE, as a transformers fast tokenizer

The model hub may be out of reach where the benches and tests run; PyPI is not. llama-cpp-python's
source distribution vendors llama.cpp, whose `models/ggml-vocab-*.gguf` files hold real tokenizers
(vocabulary, merges, special tokens, no weights). The sdist is the one pinned, downloaded and unpacked by
nbutils.runtime.llamacpp (04's GGUF step uses the same files); `load_tokenizer()` converts a vocabulary with
transformers (`gguf_file=`, which needs the `gguf` package) and keeps the converted tokenizer beside it, so later
loads take a second. Nothing of it is committed to the repository.
"""

from __future__ import annotations

from nbutils.runtime import llamacpp

CACHE = llamacpp.cache_root() / "tokenizers"
VOCABS = {  # name -> llama.cpp's name in models/ggml-vocab-<name>.gguf
    "qwen2": "qwen2",  # Qwen2 / Qwen2.5: byte-level BPE, 151,936 ids
    "llama-3": "llama-bpe",  # Llama-3.x: byte-level BPE, 128,256 ids
    "phi-3": "phi-3",  # Phi-3 / Phi-3.5: SentencePiece (Llama-2 style), 32,064 ids
}


class Unavailable(RuntimeError):
    """The source distribution could not be downloaded (no route to PyPI): the message says pip's last words."""


def vocab_file(name: str):
    """The `ggml-vocab-*.gguf` file of tokenizer `name` (a key of VOCABS), extracted from the pinned sdist once."""
    try:
        return llamacpp.vocab_file(VOCABS[name])
    except RuntimeError as e:  # llamacpp.sdist: pip could not reach PyPI, or the sha256 differs
        raise Unavailable(str(e)) from e


def load_tokenizer(name: str):
    """Tokenizer `name` as a transformers fast tokenizer (converted from its GGUF vocabulary once, then cached)."""
    from filelock import FileLock
    from transformers import AutoTokenizer

    converted = CACHE / name
    if not (converted / "tokenizer.json").exists():
        gguf = vocab_file(name)
        CACHE.mkdir(parents=True, exist_ok=True)
        with FileLock(str(converted) + ".lock"):  # test workers that start together convert it once
            if not (converted / "tokenizer.json").exists():
                tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                tok.save_pretrained(str(converted))
    return AutoTokenizer.from_pretrained(str(converted))
