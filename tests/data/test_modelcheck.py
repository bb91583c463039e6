"""01 refuses a tokenizer that cannot train with its model, naming the problem (chatformat.check_model)."""

from types import SimpleNamespace

import pytest

from nbutils.data import chatformat


@pytest.fixture(scope="module")
def tok():
    return chatformat.load_tokenizer("embedded")


def test_the_embedded_default_passes(tok):
    chatformat.check_model(tok, SimpleNamespace(vocab_size=len(tok)))


def test_a_template_without_an_assistant_marker_is_named(tok):
    broken = chatformat.load_tokenizer("embedded")
    broken.chat_template = "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"
    with pytest.raises(ValueError, match="marks no assistant turn"):
        chatformat.check_model(broken, SimpleNamespace(vocab_size=len(broken)))


def test_a_vocabulary_smaller_than_the_tokenizer_is_named(tok):
    with pytest.raises(ValueError, match=r"vocabulary has .* rows .* ids have no embedding"):
        chatformat.check_model(tok, SimpleNamespace(vocab_size=len(tok) // 2))
