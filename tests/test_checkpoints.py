"""Checkpoints are complete or invisible: atomic saves, verification by name, resume after a crash."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nbutils import checkpoints, modeling
from nbutils.environment import detect_platform

ROOT = Path(__file__).resolve().parent.parent
STATE = {"global_step": 3, "log_history": []}


@pytest.fixture(scope="module")
def lora(embedded_dir):
    tok = modeling.load_tokenizer("embedded")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", True), r=4, gradient_checkpointing=False)
    return model, tok


class Wrapper(torch.nn.Module):
    """Stands in for DDP / DataParallel-like wrappers: the real model sits in .module, no save_pretrained."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def test_save_final_unwraps_writes_everything_and_verifies(lora, tmp_path):
    model, tok = lora
    ckpt = checkpoints.save_final(Wrapper(Wrapper(model)), tok, tmp_path / "checkpoint", {"p": 1}, STATE)
    assert checkpoints.missing_files(ckpt) == [] and checkpoints.is_complete(ckpt)
    assert not (tmp_path / "checkpoint.tmp").exists()
    report = checkpoints.verify(ckpt, "embedded")
    assert report["ok"] and isinstance(report["generated"], str)


def test_verifier_names_missing_tokenizer_files(lora, tmp_path):
    model, tok = lora
    ckpt = checkpoints.save_final(model, tok, tmp_path / "checkpoint", {}, STATE)
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "tokenizer_config.json").unlink()
    report = checkpoints.verify(ckpt, "embedded")
    assert not report["ok"] and report["missing"] == ["tokenizer_config.json", "tokenizer.json"]


def test_crash_during_final_save_keeps_the_previous_checkpoint(lora, tmp_path, monkeypatch):
    model, tok = lora
    dest = tmp_path / "checkpoint"
    checkpoints.save_final(model, tok, dest, {"run": 1}, STATE)

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(type(tok), "save_pretrained", crash)
    with pytest.raises(OSError):
        checkpoints.save_final(model, tok, dest, {"run": 2}, STATE)
    assert checkpoints.missing_files(dest) == [] and '"run": 1' in (dest / "run_config.json").read_text()
    assert not checkpoints.is_complete(tmp_path / "checkpoint.tmp")


def test_only_complete_trainer_checkpoints_count(tmp_path):
    for step, complete in ((5, True), (10, True), (15, False)):
        path = tmp_path / "trainer" / f"checkpoint-{step}"
        path.mkdir(parents=True)
        if complete:
            checkpoints.mark_complete(path)
    (tmp_path / "trainer" / "checkpoint-last").mkdir()
    found = checkpoints.trainer_checkpoints(tmp_path / "trainer")
    assert [p.name for p in found] == ["checkpoint-5", "checkpoint-10"]
    assert checkpoints.find_resumable(tmp_path, detect_platform({"NBUTILS_INPUT_ROOT": str(tmp_path / "none")})) \
        == tmp_path / "trainer" / "checkpoint-10"


def test_resume_finds_an_attached_earlier_kaggle_output(tmp_path):
    # A new Kaggle version with the previous version's output attached under /kaggle/input/<slug>/.
    earlier = tmp_path / "input" / "my-train-notebook" / "train_qlora" / "trainer" / "checkpoint-40"
    earlier.mkdir(parents=True)
    checkpoints.mark_complete(earlier)
    platform = detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Batch", "NBUTILS_INPUT_ROOT": str(tmp_path / "input"),
                                "NBUTILS_WORKING_ROOT": str(tmp_path / "working")})
    assert checkpoints.find_resumable(tmp_path / "working" / "train_qlora", platform) == earlier


KILL_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_training import _train, _cfg
_train(Path({data!r}), Path({out!r}), _cfg(max_steps=30))
"""


def test_sigkill_mid_save_keeps_previous_checkpoint_and_resume_works(prepared_data, tmp_path):
    from test_training import _cfg, _train  # tests/ is on sys.path (pytest's default import mode)

    script = KILL_SCRIPT.format(tests=str(ROOT / "tests"), data=str(prepared_data), out=str(tmp_path / "run"))
    # The hook (training.MarkComplete) writes a truncated adapter file, then SIGKILLs its own process.
    env = {**os.environ, "NBUTILS_TEST_KILL_IN_SAVE": "20", "NBUTILS_INPUT_ROOT": str(tmp_path / "none")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    trainer_dir = tmp_path / "run" / "trainer"
    assert (trainer_dir / "checkpoint-20").exists() and not checkpoints.is_complete(trainer_dir / "checkpoint-20")
    assert [p.name for p in checkpoints.trainer_checkpoints(trainer_dir)] == ["checkpoint-10"]
    _, _, resumed = _train(prepared_data, tmp_path / "run", _cfg(max_steps=30))
    assert resumed["resumed_from_step"] == 10 and resumed["global_step"] == 30
    assert [p.name for p in checkpoints.trainer_checkpoints(trainer_dir)][-1] == "checkpoint-30"
    assert checkpoints.missing_files(trainer_dir / "checkpoint-30", resumable=True) == []
