"""llama.cpp's tools built once (nbutils.export.llamabuild): why they cannot be built, a failed build that leaves
nothing under the final name, and a cached build found only when it holds the probe of the sources at hand."""

from nbutils.export import llamabuild


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_without_a_compiler_it_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    folder, why = llamabuild.build(tmp_path)
    assert folder is None and "no C++ compiler" in why and "gguf_type='q8_0'" in why and "verify_runtime=False" in why


def test_a_failed_build_leaves_nothing_under_the_final_name(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text("this is not cmake(\n")
    if llamabuild.compiler() and llamabuild.cmake():
        folder, why = llamabuild.build(tmp_path / "src", tmp_path / "build")
        assert folder is None and why.startswith("building llama-quantize, nbutils-llama-probe failed")
        assert not (tmp_path / "build").exists()


def test_a_cached_build_counts_only_with_the_probe_of_these_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    folder = llamabuild.build_dir()
    for name in (llamabuild.QUANTIZE, llamabuild.PROBE):
        _exe(folder / "bin" / name)
    assert llamabuild.find_probe() is None  # no stamp: built from other (or unknown) probe sources
    (folder / llamabuild.STAMP).write_text("0" * 64)
    assert llamabuild.find_probe() is None
    (folder / llamabuild.STAMP).write_text(llamabuild.probe_hash())
    assert llamabuild.find_probe() == str(folder / "bin" / llamabuild.PROBE)
    built = llamabuild.ensure(lambda: (_ for _ in ()).throw(AssertionError("the sources are not needed")))
    assert built == (folder, "cached build")
