"""Shared fixtures of the training tests."""

import json

import pytest

from nbutils.train import checkpoints


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
