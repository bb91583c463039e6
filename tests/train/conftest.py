"""Shared fixtures of the training tests."""

import json
from types import SimpleNamespace

import pytest

from nbutils.train import checkpoints

# Llama-3.1-8B's config: the memory plan's real-size case, with no download.
LLAMA_8B = SimpleNamespace(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)


def trainer_checkpoints(folder):
    """Trainer checkpoints (checkpoint-N) holding the COMPLETE marker, in step order (not yet verified)."""
    return [p for p in checkpoints.checkpoint_dirs(folder) if checkpoints.is_complete(p)]


def _fake_checkpoint(path, step, complete=True, settings=None):
    """A Trainer checkpoint folder with every file resume needs (small stand-in contents)."""
    path.mkdir(parents=True)
    for name in checkpoints.ADAPTER_FILES + checkpoints.TOKENIZER_FILES + checkpoints.RESUME_FILES + ["run_config.json"]:
        (path / name).write_text(f"{name} at {step}")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if complete:
        checkpoints.mark_complete(path, step, settings)
    return path


@pytest.fixture()
def fake_checkpoint():
    """fake_checkpoint(path, step, complete=True, settings=None) -> a Trainer checkpoint folder of stand-in files."""
    return _fake_checkpoint


@pytest.fixture
def no_model_loading(monkeypatch):
    """Any from_pretrained of a model during validation fails the test."""
    import transformers

    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError("a model was loaded before validation")

    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    return calls
