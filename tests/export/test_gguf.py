"""GGUF export: skip messages without llama.cpp or llama-quantize, and a run through a stand-in converter."""

from nbutils.export import gguf


def test_gguf_skips_without_llama_cpp(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LLAMA_CPP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert gguf.export_gguf(tmp_path, tmp_path / "gguf", "q8_0", str(tmp_path / "nowhere")) is None
    assert "convert_hf_to_gguf.py not found" in capsys.readouterr().out
    fake = tmp_path / "llama.cpp"
    fake.mkdir()
    (fake / gguf.CONVERTER).write_text("import sys; open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write('GGUF')\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-quantize anywhere
    assert gguf.export_gguf(tmp_path, tmp_path / "gguf", "q4_k_m", str(fake)) is None
    assert "q4_k_m needs llama-quantize" in capsys.readouterr().out
    made = gguf.export_gguf(tmp_path, tmp_path / "gguf", "q8_0", str(fake))
    assert made.name == "model-q8_0.gguf" and made.read_text() == "GGUF"


def test_llama_cpp_is_found_from_the_parameter_then_the_environment(tmp_path, monkeypatch):
    for name in ("given", "from_env"):
        (tmp_path / name).mkdir()
        (tmp_path / name / gguf.CONVERTER).write_text("")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tmp_path / "from_env"))
    assert gguf.find_llama_cpp(str(tmp_path / "given")) == tmp_path / "given"
    assert gguf.find_llama_cpp() == tmp_path / "from_env"
    assert gguf.find_llama_cpp(str(tmp_path / "nowhere")) is None  # a given folder is not second-guessed


def test_quantize_built_in_the_checkout_comes_before_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    on_path = tmp_path / "bin" / "llama-quantize"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert gguf.find_quantize(tmp_path / "checkout") == str(on_path)
    built = tmp_path / "checkout" / "build" / "bin" / "llama-quantize"
    built.parent.mkdir(parents=True)
    built.write_text("")
    assert gguf.find_quantize(tmp_path / "checkout") == str(built)
