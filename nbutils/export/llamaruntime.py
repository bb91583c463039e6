"""llama.cpp's runtime at hand: the probe (nbutils/export/probe/probe.cpp) built from the pinned sources and run on a
GGUF, as llama-cli and llama-server would load and run it.

Why a probe and not llama.cpp's own tools: the chat template is rendered by llama.cpp's Jinja engine, which lives
in its common library; of the tools that reach it, llama-cli and llama-server drag in the HTTP server and its web
UI, and llama-completion only renders a chat interactively. The Python bindings (llama-cpp-python) render templates
in Python's Jinja2, not llama.cpp's. llama-tokenize prints ids but no template, llama-simple prints text but no ids,
and llama-perplexity's KL divergence needs base logits made by llama.cpp itself. The probe makes the calls those
tools make (tokenize with special tokens added and parsed, common_chat_templates_apply, greedy decoding until an
end-of-generation token, the logits of every position) in one process and one model load, and writes them out.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from nbutils.export import llamabuild

TIMEOUT_S = 1800  # one run of the probe: an 8B q8_0 on a 4-core CPU runs the check in minutes, not half an hour


class ProbeFailed(RuntimeError):
    """llama.cpp could not load or run the GGUF: the message holds what it said."""


def probe(sources) -> tuple[str | None, str]:
    """(the probe's path, how it was had) or (None, why not): the cached build, else built now (minutes, once).
    `sources`: llama.cpp's source folder, or a function giving it (called only to build)."""
    found = llamabuild.find_probe()
    if found:
        return found, "cached build"
    folder, note = llamabuild.ensure(sources)
    return (llamabuild.find_probe(folder), note) if folder else (None, note)


def run(binary: str, gguf_file: str | Path, request: dict, out_dir: str | Path, lora: str | Path | None = None) -> dict:
    """The probe on gguf_file (with a LoRA GGUF applied, if given): its result.json as a dict, with the warnings
    llama.cpp printed under "warnings"; raises ProbeFailed with llama.cpp's last lines."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "request.json").write_text(json.dumps(request))
    cmd = [binary, str(gguf_file), str(out_dir / "request.json"), str(out_dir), *([str(lora)] if lora else [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace",
                              env={**os.environ, "LLAMA_LOG_COLORS": "0"})
    except subprocess.TimeoutExpired as e:
        raise ProbeFailed(f"llama.cpp took more than {TIMEOUT_S} s on {Path(gguf_file).name}") from e
    said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode or not (out_dir / "result.json").exists():
        raise ProbeFailed(f"llama.cpp could not run {Path(gguf_file).name}{' with ' + Path(lora).name if lora else ''} "
                          f"(exit code {proc.returncode}): {' | '.join(said[-3:]) or '(no output)'}")
    result = json.loads((out_dir / "result.json").read_text())
    result["warnings"] = said[-20:]
    return result


def logits(entry: dict):
    """One text's logits as llama.cpp computed them: a read-only (positions, vocabulary) float32 array on disk."""
    import numpy as np

    return np.memmap(entry["file"], dtype=np.float32, mode="r", shape=(entry["rows"], entry["n_vocab"]))
