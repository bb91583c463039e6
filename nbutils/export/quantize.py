"""k-quants (q4_k_m, q5_k_m, q6_k ...): llama.cpp's `llama-quantize`, built from the pinned sources when needed.

The converter writes f32, f16, bf16 and q8_0 itself. Anything else goes f16 GGUF -> llama-quantize. The binary
is looked for in a checkout's build/bin, then in the cached build, then on PATH; when there is none it is built
once from the same pinned llama.cpp sources the converter came from (the Kaggle dataset carries them), together
with 04's runtime probe (nbutils.export.llamabuild: one CMake tree, cached under
$NBUTILS_CACHE/llama.cpp-<version>/build). It takes minutes (`python -m bench gguf` times it); without a compiler
it says so and what to do instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from nbutils.export import llamabuild

BINARY = llamabuild.QUANTIZE


def find_quantize(root: str | Path | None = None) -> str | None:
    """llama-quantize in a checkout's build, the cached build, or on PATH."""
    places = [Path(root) / "build" / "bin" / BINARY] if root else []
    for p in (*places, llamabuild.build_dir() / "bin" / BINARY):
        if p.exists() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(BINARY)


def ensure(sources) -> tuple[str | None, str]:
    """llama-quantize found, else built (with the runtime probe, once, under a lock); (path, note) or (None, why)."""
    found = find_quantize()
    if found:
        return found, "llama-quantize found"
    folder, note = llamabuild.ensure(sources)
    return (str(folder / "bin" / BINARY), note) if folder else (None, note)


def quantize(binary: str, f16_file: str | Path, out_file: str | Path, quant_type: str) -> str | None:
    """f16 GGUF -> out_file in quant_type (written as .partial, renamed when complete); None, or why it failed."""
    out_file = Path(out_file)
    partial = out_file.with_name(out_file.name + ".partial")
    try:
        proc = subprocess.run([binary, str(f16_file), str(partial), quant_type.upper()], capture_output=True, text=True)
        if proc.returncode:
            return " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-2:])
        os.replace(partial, out_file)
        return None
    finally:
        partial.unlink(missing_ok=True)
