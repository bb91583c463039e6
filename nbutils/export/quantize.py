"""k-quants (q4_k_m, q5_k_m, q6_k ...): llama.cpp's `llama-quantize`, built from the pinned sources when needed.

The converter writes f32, f16, bf16 and q8_0 itself. Anything else goes f16 GGUF -> llama-quantize. The binary
is looked for in a checkout's build/bin, then in the cached build, then on PATH; when there is none it is built
once from the same pinned llama.cpp sources the converter came from (the Kaggle dataset carries them): CMake
(from PATH, else the `cmake` package from PyPI or the dataset's wheelhouse) and a C++ compiler, CPU only, a
static binary, cached under $NBUTILS_CACHE/llama.cpp-<version>/build. It takes minutes (`python -m bench gguf` times
it); without a compiler it says so and what to do instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from nbutils.runtime import llamacpp

BINARY = "llama-quantize"
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF")


def build_dir() -> Path:
    return llamacpp.cache_root() / "build"


def find_quantize(root: str | Path | None = None) -> str | None:
    """llama-quantize in a checkout's build, the cached build, or on PATH."""
    places = [Path(root) / "build" / "bin" / BINARY] if root else []
    for p in (*places, build_dir() / "bin" / BINARY):
        if p.exists() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(BINARY)


def _cmake() -> str | None:
    """cmake on PATH, else the one the `cmake` package (PyPI) ships."""
    found = shutil.which("cmake")
    if found:
        return found
    try:
        import cmake

        return str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    except ImportError:
        return None


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CXX", ""), "c++", "g++", "clang++") if c and shutil.which(c)), None)


def build(sources: str | Path, dest: str | Path | None = None, jobs: int | None = None) -> tuple[str | None, str]:
    """Build llama-quantize from the llama.cpp sources into dest; (path, how long it took) or (None, why not)."""
    from nbutils.runtime.install import ensure_extra

    if _compiler() is None:
        return None, ("no C++ compiler here (c++, g++ or clang++): use gguf_type='q8_0', or quantize the f16 GGUF "
                      "elsewhere with llama.cpp's llama-quantize")
    if _cmake() is None:
        ensure_extra(("cmake",))
    cmake = _cmake()
    if cmake is None:
        return None, "no cmake: `pip install cmake` (or attach the nbutils dataset, which carries it) and run again"
    dest = Path(dest or build_dir())
    partial = dest.with_name(dest.name + ".partial")
    jobs = jobs or os.cpu_count() or 2
    t0 = time.monotonic()
    steps = ([cmake, "-S", str(sources), "-B", str(partial), *CMAKE_FLAGS],
             [cmake, "--build", str(partial), "--target", BINARY, "-j", str(jobs)])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            return None, f"building {BINARY} failed ({' '.join(step[:2])}): {tail}"
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)  # only a finished build is found by find_quantize
    return str(dest / "bin" / BINARY), f"built in {time.monotonic() - t0:.0f} s with {jobs} jobs"


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
