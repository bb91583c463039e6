"""llama.cpp's converter, its sources and its real tokenizers, from one pinned place: the llama-cpp-python sdist.

PyPI's llama-cpp-python source distribution vendors llama.cpp: `convert_hf_to_gguf.py` with its `conversion`
package, `convert_lora_to_gguf.py`, `gguf-py`, the C++ sources `llama-quantize` builds from, and
`models/ggml-vocab-*.gguf`, the vocabularies of real model families. `pip download` fetches it without git or a
compiler; it is cached under $NBUTILS_CACHE (else ~/.cache/nbutils) and unpacked once per part.

- `converter_dir()`: the converter (and the sources, with `sources=True`), unpacked from the cached sdist.
- `vocab_file(name)`: `ggml-vocab-<name>.gguf`, e.g. `llama-bpe`, `qwen2`, `phi-3`, `gpt-neox`.
- `pack(dest)`: the archive the Kaggle dataset carries (converter + sources + licenses, no vocab files).
- `from_archive(archive, dest)`: that archive unpacked, where 04 runs with the internet off.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.3.36"  # llama-cpp-python's version; the llama.cpp it vendors comes with it
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
ARCHIVE = f"llama.cpp-{VERSION}.tar.gz"  # the name in the Kaggle dataset
CONVERTER = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/*", "gguf-py/*", "LICENSE")
# What `cmake --build --target llama-quantize` needs: the top CMake files, ggml (CPU backend), libllama, common,
# the tools' folders (tools/CMakeLists.txt adds each), vendored headers, and the licenses that go with them.
SOURCES = ("CMakeLists.txt", "cmake/*", "include/*", "src/*", "common/*", "ggml/*", "tools/*", "vendor/*", "licenses/*")
# Never needed to convert or quantize, and most of the sdist's bytes: vocab files, docs, web UI, tests.
SKIP = ("models/", "docs/", "tools/ui/", "tools/server/public", "tests/", "examples/", "media/")


def cache_root() -> Path:
    """Under the suite's cache (embedded.cache_root), beside the embedded default and the twins."""
    from nbutils import embedded

    return embedded.cache_root() / f"llama.cpp-{VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sdist() -> Path:
    """The pinned sdist, downloaded once with pip (PyPI, no git), its sha256 checked."""
    path = cache_root() / SDIST
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                               "-d", tmp, f"llama-cpp-python=={VERSION}"], capture_output=True, text=True)
        got = Path(tmp) / SDIST
        if proc.returncode or not got.exists():
            raise RuntimeError(f"pip could not download llama-cpp-python=={VERSION} (needs PyPI): "
                               f"{(proc.stdout + proc.stderr).strip()[-1500:]}")
        if _sha256(got) != SDIST_SHA256:
            raise RuntimeError(f"{SDIST} from PyPI does not match the pinned sha256 {SDIST_SHA256}")
        os.replace(got, path)  # atomic: a half-downloaded file never sits under the final name
    return path


def _wanted(name: str, parts: tuple[str, ...], skip: tuple[str, ...]) -> bool:
    """A file that matches one of `parts` (fnmatch patterns: `*` spans folders) and lies under none of `skip`."""
    return any(fnmatch.fnmatchcase(name, p) for p in parts) and not any(name.startswith(s) for s in skip)


def _extract(archive: Path, dest: Path, parts: tuple[str, ...], prefix: str = PREFIX, skip: tuple[str, ...] = SKIP) -> Path:
    """Members of `archive` under `prefix` that `parts` names, unpacked into dest (atomically, once)."""
    if (dest / ".complete").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=dest.name + "."))
    try:
        with tarfile.open(archive) as tar:
            members = []
            for m in tar.getmembers():
                rel = m.name[len(prefix):] if m.name.startswith(prefix) else None
                if rel and m.isfile() and _wanted(rel, parts, skip):
                    m.name = rel
                    members.append(m)
            tar.extractall(tmp, members=members, filter="data")
        (tmp / ".complete").write_text(VERSION)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def converter_dir(sources: bool = False) -> Path:
    """The converter (and, with sources=True, what llama-quantize builds from), unpacked from the cached sdist."""
    parts = CONVERTER + (SOURCES if sources else ())
    return _extract(sdist(), cache_root() / ("llama.cpp" if sources else "converter"), parts)


def vocab_file(name: str) -> Path:
    """models/ggml-vocab-<name>.gguf: a real family's tokenizer (no weights), e.g. llama-bpe, qwen2, phi-3, gpt-neox."""
    folder = _extract(sdist(), cache_root() / "vocab", ("models/ggml-vocab-*.gguf",), skip=())
    path = folder / "models" / f"ggml-vocab-{name}.gguf"
    if not path.exists():
        have = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in (folder / "models").glob("ggml-vocab-*.gguf"))
        raise FileNotFoundError(f"no ggml-vocab-{name}.gguf in llama-cpp-python {VERSION}; it has {', '.join(have)}")
    return path


def pack(dest_dir: Path) -> Path:
    """<dest_dir>/llama.cpp-<VERSION>.tar.gz: converter, gguf-py, quantize sources and licenses (no vocab files)."""
    src = converter_dir(sources=True)
    out = Path(dest_dir) / ARCHIVE
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(src.rglob("*")):
            if path.is_file() and path.name != ".complete":
                tar.add(path, arcname=f"llama.cpp/{path.relative_to(src)}")
    os.replace(tmp, out)
    return out


def from_archive(archive: Path, dest: Path) -> Path:
    """The dataset's archive unpacked into dest (the temp folder: inputs are read-only, the output is for results)."""
    return _extract(Path(archive), Path(dest) / f"llama.cpp-{VERSION}", CONVERTER + SOURCES, prefix="llama.cpp/")
