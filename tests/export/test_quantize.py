"""k-quants: where llama-quantize is found, a failed quantization that leaves no file, and (integration, when a
build is at hand) a real q4_k_m GGUF of a family twin that passes its checks. The build: test_llamabuild.py."""

import os

import pytest

from nbutils.export import llamabuild, quantize


def _exe(path, text="#!/bin/sh\nexit 0\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_checkout_build_comes_first_then_the_cached_build_then_path(tmp_path, monkeypatch):
    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert quantize.find_quantize(tmp_path / "checkout") is None
    on_path = _exe(tmp_path / "bin" / quantize.BINARY)
    assert quantize.find_quantize(tmp_path / "checkout") == str(on_path)
    cached = _exe(llamabuild.build_dir() / "bin" / quantize.BINARY)
    assert quantize.find_quantize(tmp_path / "checkout") == str(cached)
    built = _exe(tmp_path / "checkout" / "build" / "bin" / quantize.BINARY)
    assert quantize.find_quantize(tmp_path / "checkout") == str(built)


def test_a_failed_quantize_leaves_nothing_under_the_final_name(tmp_path):
    fake = _exe(tmp_path / "q", "#!/bin/sh\necho half > \"$2\"\necho 'unknown type' >&2\nexit 1\n")
    why = quantize.quantize(str(fake), tmp_path / "in.gguf", tmp_path / "out.gguf", "q4_k_m")
    assert why == "unknown type" and not list(tmp_path.glob("out.gguf*"))


@pytest.mark.integration
def test_q4_k_m_of_a_real_tokenizer_twin_passes_its_checks(twin, tmp_path):
    binary = quantize.find_quantize()
    if binary is None and not os.environ.get("NBUTILS_BUILD_QUANTIZE"):
        pytest.skip("no llama-quantize built: tests/export/test_runtimecheck.py, `python -m bench gguf` (or "
                    "NBUTILS_BUILD_QUANTIZE=1) builds it, minutes")
    from tests.export.test_ggufbuild import _export_type

    result = _export_type("qwen2.5-instruct", twin("qwen2.5-instruct"), tmp_path, "q4_k_m")
    check = result["verification"]
    assert check["ok"] and check["perplexity"] <= check["merged_perplexity"] * (1 + check["ppl_margin"]), check
    assert result["file"].endswith("model-q4_k_m.gguf") and not list(tmp_path.rglob("model-f16.gguf"))
