"""The pinned llama.cpp sources: which files are taken from the sdist, unpacking once and atomically, the dataset's
archive round trip, and (integration) the real sdist's converter and vocab files."""

import io
import tarfile

import pytest

from nbutils.runtime import llamacpp


def _tar(path, files: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_only_the_named_parts_are_taken_and_never_the_skipped_ones():
    take = llamacpp.CONVERTER + llamacpp.SOURCES
    assert llamacpp._wanted("convert_hf_to_gguf.py", take, llamacpp.SKIP)
    assert llamacpp._wanted("conversion/qwen.py", take, llamacpp.SKIP)
    assert llamacpp._wanted("ggml/src/ggml-cpu/ggml-cpu.c", take, llamacpp.SKIP)
    assert not llamacpp._wanted("docs/build.md", take, llamacpp.SKIP)
    assert not llamacpp._wanted("tools/ui/index.html", take, llamacpp.SKIP)
    assert not llamacpp._wanted("models/ggml-vocab-qwen2.gguf", take, llamacpp.SKIP)
    assert llamacpp._wanted("models/ggml-vocab-qwen2.gguf", ("models/ggml-vocab-*.gguf",), ())


def test_extract_unpacks_once_under_the_final_name(tmp_path):
    prefix = llamacpp.PREFIX
    archive = _tar(tmp_path / "sdist.tar.gz", {prefix + "convert_hf_to_gguf.py": "print(1)",
                                               prefix + "docs/x.md": "doc", prefix + "gguf-py/gguf/__init__.py": "",
                                               f"llama_cpp_python-{llamacpp.VERSION}/README.md": "not vendored"})
    dest = llamacpp._extract(archive, tmp_path / "converter", llamacpp.CONVERTER)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == [".complete", "convert_hf_to_gguf.py", "gguf-py/gguf/__init__.py"]
    (dest / "convert_hf_to_gguf.py").write_text("kept")  # a second call finds it complete and leaves it
    assert llamacpp._extract(archive, dest, llamacpp.CONVERTER) == dest
    assert (dest / "convert_hf_to_gguf.py").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("converter")] == ["converter"]


def test_the_dataset_archive_round_trips(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "conversion").mkdir(parents=True)
    (src / "convert_hf_to_gguf.py").write_text("main")
    (src / "conversion" / "qwen.py").write_text("qwen")
    (src / "CMakeLists.txt").write_text("cmake")
    (src / ".complete").write_text("")
    monkeypatch.setattr(llamacpp, "converter_dir", lambda sources=False: src)
    archive = llamacpp.pack(tmp_path / "dataset")
    assert archive.name == llamacpp.ARCHIVE and not list((tmp_path / "dataset").glob("*.partial"))
    root = llamacpp.from_archive(archive, tmp_path / "temp")
    assert (root / "conversion" / "qwen.py").read_text() == "qwen" and (root / "CMakeLists.txt").exists()


@pytest.mark.integration
def test_the_pinned_sdist_has_the_converter_and_real_vocabularies():
    root = llamacpp.converter_dir()
    assert (root / "convert_hf_to_gguf.py").exists() and (root / "gguf-py" / "gguf" / "__init__.py").exists()
    assert (root / "LICENSE").read_text().startswith("MIT License")
    for name in ("llama-bpe", "qwen2", "phi-3", "gpt-neox"):
        assert llamacpp.vocab_file(name).stat().st_size > 500_000
    with pytest.raises(FileNotFoundError, match="it has .*qwen2"):
        llamacpp.vocab_file("no-such-family")
