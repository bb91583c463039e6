"""llama.cpp's tools built once from the pinned sources: `llama-quantize` (k-quants) and `nbutils-llama-probe` (04's
runtime check), one CMake tree, cached.

The tree is `nbutils/export/probe/CMakeLists.txt`: llama.cpp's sources (the Kaggle dataset carries them, else the
pinned sdist) as a subproject, and the probe, a small program linked against llama.cpp's library and its common
library (the tokenizer calls and the Jinja chat-template engine llama-cli and llama-server use). Both targets share
everything but their own file: the probe costs seconds on top of llama-quantize's build (357 s with 2 jobs on the
suite's 2-core machine). CMake (from PATH, else the `cmake` package from PyPI or the dataset's wheelhouse) and a
C++ compiler, CPU only, static binaries, cached under $NBUTILS_CACHE/llama.cpp-<version>/build. The build is
written as `.partial` and renamed when complete, under a file lock: two notebooks (or test workers) build it once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from nbutils.runtime import llamacpp

QUANTIZE, PROBE = "llama-quantize", "nbutils-llama-probe"
PROBE_SOURCES = Path(__file__).parent / "probe"
STAMP = "probe.sha256"  # in the build folder: the probe sources it was built from
BUILT = "built.txt"  # in the build folder: how long the build took, with how many jobs (benchmarks quote it)
ORIGIN = "origin.txt"  # in a build under way: the folders it is built from (a build that failed goes on from there)
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF")


def build_dir() -> Path:
    return llamacpp.cache_root() / "build"


def probe_hash() -> str:
    """The probe's sources, hashed: a cached build of other sources is built again."""
    digest = hashlib.sha256()
    for name in ("CMakeLists.txt", "probe.cpp"):
        digest.update((PROBE_SOURCES / name).read_bytes())
    return digest.hexdigest()


def _runnable(path: Path) -> bool:
    return path.exists() and os.access(path, os.X_OK)


def find_probe(folder: Path | None = None) -> str | None:
    """The probe in the cached build (or `folder`), built from the probe sources at hand."""
    folder = Path(folder or build_dir())
    stamp = folder / STAMP
    probe = folder / "bin" / PROBE
    ok = _runnable(probe) and stamp.exists() and stamp.read_text().strip() == probe_hash()
    return str(probe) if ok else None


def cmake() -> str | None:
    """cmake on PATH, else the one the `cmake` package (PyPI) ships."""
    found = shutil.which("cmake")
    if found:
        return found
    try:
        import cmake as package

        return str(Path(package.CMAKE_BIN_DIR) / "cmake")
    except ImportError:
        return None


def compiler() -> str | None:
    return next((c for c in (os.environ.get("CXX", ""), "c++", "g++", "clang++") if c and shutil.which(c)), None)


def build(sources: str | Path, dest: str | Path | None = None, jobs: int | None = None,
          targets: tuple[str, ...] = (QUANTIZE, PROBE)) -> tuple[Path | None, str]:
    """Build `targets` from the llama.cpp sources into dest; (dest, how long it took) or (None, why not)."""
    from nbutils.runtime.install import ensure_extra

    if compiler() is None:
        return None, ("no C++ compiler here (c++, g++ or clang++): use gguf_type='q8_0' and verify_runtime=False, "
                      "or quantize and run the f16 GGUF elsewhere with llama.cpp")
    if cmake() is None:
        ensure_extra(("cmake",))
    found = cmake()
    if found is None:
        return None, "no cmake: `pip install cmake` (or attach the nbutils dataset, which carries it) and run again"
    dest = Path(dest or build_dir())
    partial = dest.with_name(dest.name + ".partial")
    origin = f"{PROBE_SOURCES.resolve()}\n{Path(sources).resolve()}\n"
    if (partial / ORIGIN).exists() and (partial / ORIGIN).read_text() != origin:
        shutil.rmtree(partial)  # begun from other folders: CMake refuses to go on with it
    partial.mkdir(parents=True, exist_ok=True)
    (partial / ORIGIN).write_text(origin)
    jobs = jobs or os.cpu_count() or 2
    t0 = time.monotonic()
    steps = ([found, "-S", str(PROBE_SOURCES), "-B", str(partial), f"-DLLAMA_SOURCES={Path(sources).resolve()}",
              *CMAKE_FLAGS], [found, "--build", str(partial), "--target", *targets, "-j", str(jobs)])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            return None, f"building {', '.join(targets)} failed ({' '.join(step[:2])}): {tail}"
    note = f"built in {time.monotonic() - t0:.0f} s with {jobs} jobs on {os.cpu_count()} cores"
    (partial / STAMP).write_text(probe_hash())
    (partial / BUILT).write_text(note)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)  # only a finished build is found; one that failed goes on from where it stopped
    return dest, note


def ensure(sources, jobs: int | None = None) -> tuple[Path | None, str]:
    """The cached build with both tools, built first when missing (minutes, once, under a file lock); (folder,
    note) or (None, why not). `sources`: llama.cpp's source folder, or a function giving it (called only to build)."""
    from filelock import FileLock

    folder = build_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.with_name("build.lock"))):
        if find_probe(folder) and _runnable(folder / "bin" / QUANTIZE):
            return folder, "cached build"
        print("[llama.cpp] building llama-quantize and the runtime probe from the pinned sources (minutes, once)",
              flush=True)
        return build(sources() if callable(sources) else sources, folder, jobs)
