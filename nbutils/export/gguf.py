"""GGUF for llama.cpp / Ollama, when llama.cpp's converter is at hand; a clear skip otherwise.

Get it on Kaggle or Colab (internet on) with
    !git clone --depth 1 https://github.com/ggml-org/llama.cpp /kaggle/working/llama.cpp
(the converter imports the `gguf-py` folder next to it; do not pip-install its requirements file, which
pins its own torch). Types the converter writes itself: f32, f16, bf16, q8_0 (also tq1_0, tq2_0).
Others (q4_k_m, q5_k_m ...) need the `llama-quantize` binary: build it with
    !cmake -S llama.cpp -B llama.cpp/build && cmake --build llama.cpp/build --target llama-quantize -j
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONVERTER = "convert_hf_to_gguf.py"
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0", "tq1_0", "tq2_0")
SEARCH = ("/kaggle/working/llama.cpp", "/content/llama.cpp", "~/llama.cpp", "llama.cpp")


def find_llama_cpp(llama_cpp_dir: str = "") -> Path | None:
    """The llama.cpp checkout: the parameter, else $LLAMA_CPP_DIR, else the usual places; None when absent."""
    candidates = [llama_cpp_dir] if llama_cpp_dir else [os.environ.get("LLAMA_CPP_DIR", ""), *SEARCH]
    for c in candidates:
        if c and (Path(c).expanduser() / CONVERTER).exists():
            return Path(c).expanduser()
    return None


def _run(cmd: list[str]) -> None:
    """Run with its output printed in the cell (a subprocess' own output does not reach every notebook UI)."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-4000:] + proc.stderr[-4000:], flush=True)
    if proc.returncode:
        raise RuntimeError(f"{Path(cmd[1]).name if cmd[0] == sys.executable else cmd[0]} exited {proc.returncode}; "
                           "its output is above")


def find_quantize(root: Path) -> str | None:
    """llama-quantize built in the checkout, else on PATH."""
    for p in (root / "build" / "bin" / "llama-quantize", root / "llama-quantize"):
        if p.exists():
            return str(p)
    return shutil.which("llama-quantize")


def export_gguf(merged_dir: str | Path, out_dir: str | Path, quant_type: str = "q8_0", llama_cpp_dir: str = "") -> Path | None:
    """merged fp16 folder -> <out_dir>/model-<quant_type>.gguf; None (with the reason printed) when it cannot."""
    quant_type = quant_type.lower()
    root = find_llama_cpp(llama_cpp_dir)
    if root is None:
        print(f"[gguf] skipped: llama.cpp's {CONVERTER} not found (llama_cpp_dir, $LLAMA_CPP_DIR, {', '.join(SEARCH)}). "
              "Get it with `git clone --depth 1 https://github.com/ggml-org/llama.cpp` (see nbutils/export/gguf.py).",
              flush=True)
        return None
    quantize = None if quant_type in CONVERTER_TYPES else find_quantize(root)
    if quant_type not in CONVERTER_TYPES and quantize is None:
        print(f"[gguf] skipped: {quant_type} needs llama-quantize, not built in {root} and not on PATH; build it "
              f"(cmake --build {root}/build --target llama-quantize) or use one of {', '.join(CONVERTER_TYPES)}", flush=True)
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    first = out_dir / f"model-{quant_type if quantize is None else 'f16'}.gguf"
    _run([sys.executable, str(root / CONVERTER), str(merged_dir), "--outfile", str(first),
          "--outtype", quant_type if quantize is None else "f16"])
    if quantize is None:
        return first
    final = out_dir / f"model-{quant_type}.gguf"
    _run([quantize, str(first), str(final), quant_type.upper()])
    first.unlink()
    return final
