"""The embedded default: offline, deterministic, shaped for bitsandbytes' CPU 4-bit path."""

import json

import pytest

from nbutils import embedded


@pytest.fixture(scope="module")
def built():
    return embedded.ensure()


def test_shapes_are_multiples_of_64():
    for key in ("vocab_size", "hidden_size", "intermediate_size"):
        assert embedded.MODEL_SHAPE[key] % 64 == 0, key


def test_built_default_has_chat_template_and_distinct_pad(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built / "model")
    assert tok.pad_token_id != tok.eos_token_id
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                   tokenize=False)
    assert text.endswith(tok.eos_token)
    info = json.loads((built / "info.json").read_text())
    assert info["pretrain_loss_last"] < info["pretrain_loss_first"] / 3  # it did learn something


def test_task_data_is_deterministic_and_not_in_pretraining():
    assert embedded.task_records(50, seed=1) == embedded.task_records(50, seed=1)
    corpus = " ".join(embedded.pretraining_texts(200))
    assert "kind of word" not in corpus  # the question form is new to the base model


@pytest.mark.integration  # a child interpreter builds the model from scratch
def test_the_build_runs_in_a_child_process(tmp_path, monkeypatch):
    """Pre-training runs a backward pass, after which a forked process cannot use CUDA (seen on an H100):
    built in the notebook kernel, it would break 02's notebook launcher. So this process must not build."""
    from nbutils import embedded

    def not_here(*args, **kwargs):
        raise AssertionError("the embedded default was built in the calling process")

    monkeypatch.setattr(embedded, "build", not_here)
    embedded._build_in_a_child(tmp_path, seed=0, pretrain_steps=3)
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["pretrain_steps"] == 3 and (tmp_path / "model" / "config.json").exists()
