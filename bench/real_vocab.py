"""Real tokenizers offline: the vocabularies llama.cpp ships, read from llama-cpp-python's source distribution.

    from bench import real_vocab
    tok = real_vocab.load_tokenizer("qwen2")     # Qwen2's 151,936-token BPE, as a transformers fast tokenizer

The model hub may be out of reach where the benches and tests run; PyPI is not. llama-cpp-python's
source distribution vendors llama.cpp, whose `models/ggml-vocab-*.gguf` files hold real tokenizers
(vocabulary, merges, special tokens, no weights). `sdist()` downloads it once with pip into CACHE,
`vocab_file()` extracts one vocabulary from it, and `load_tokenizer()` converts it with transformers
(`gguf_file=`, which needs the `gguf` package) and keeps the converted tokenizer beside it, so later
loads take a second. Nothing of it is committed to the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"  # the one pin: every vocabulary here comes from this release
CACHE = Path(os.environ.get("NBUTILS_REAL_VOCAB_CACHE", Path.home() / ".cache" / "nbutils-real-vocab"))
VOCABS = {  # name -> the file in vendor/llama.cpp/models/
    "qwen2": "ggml-vocab-qwen2.gguf",  # Qwen2 / Qwen2.5: byte-level BPE, 151,936 ids
    "llama-3": "ggml-vocab-llama-bpe.gguf",  # Llama-3.x: byte-level BPE, 128,256 ids
}


class Unavailable(RuntimeError):
    """The source distribution could not be downloaded (no route to PyPI): the message says pip's last words."""


def _lock(path: Path):
    from filelock import FileLock

    CACHE.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")  # test workers that start together download it once


def sdist() -> Path:
    """The cached source distribution, downloaded with pip the first time."""
    name, version = SDIST.split("==")
    path = CACHE / f"{name.replace('-', '_')}-{version}.tar.gz"
    with _lock(path):
        if not path.exists():
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", SDIST,
                   "-d", str(CACHE)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0 or not path.exists():
                last = (out.stderr.strip().splitlines() or ["no output"])[-1]
                raise Unavailable(f"`{' '.join(cmd[2:])}` failed: {last}")
    return path


def vocab_file(name: str) -> Path:
    """The `ggml-vocab-*.gguf` file of tokenizer `name` (a key of VOCABS), extracted from the sdist once."""
    filename = VOCABS[name]
    path = CACHE / "vocab" / filename
    if path.exists():
        return path
    archive = sdist()
    with _lock(path), tarfile.open(archive) as tar:
        if not path.exists():
            stem = archive.name.removesuffix(".tar.gz")
            member = tar.extractfile(f"{stem}/vendor/llama.cpp/models/{filename}")
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_suffix(".part")
            with open(part, "wb") as f:
                shutil.copyfileobj(member, f)
            part.replace(path)  # whole or absent: a killed extraction leaves no half file behind
    return path


def load_tokenizer(name: str):
    """Tokenizer `name` as a transformers fast tokenizer (converted from its GGUF vocabulary once, then cached)."""
    from transformers import AutoTokenizer

    converted = CACHE / "tokenizers" / name
    if not (converted / "tokenizer.json").exists():
        gguf = vocab_file(name)
        with _lock(converted):
            if not (converted / "tokenizer.json").exists():
                tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                tok.save_pretrained(str(converted))
    return AutoTokenizer.from_pretrained(str(converted))
