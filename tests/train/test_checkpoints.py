"""Checkpoints are complete or invisible: atomic saves, verification by name, resume after a crash."""

import json

import pytest
import torch

from nbutils.data import chatformat
from nbutils.runtime.environment import detect_platform
from nbutils.train import checkpoints, modeling
from tests import recipe
from tests.train.conftest import trainer_checkpoints

STATE = {"global_step": 3, "log_history": []}


def _run_config():
    """What 02's checkpoint records about how to load the base: verify reloads it that way."""
    return {"base_model": "embedded", "precision": "fp32", "quantization": recipe.nf4().to_dict()}


@pytest.fixture(scope="module")
def lora(embedded_dir):
    tok = chatformat.load_tokenizer("embedded")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", recipe.nf4()), recipe.lora(4), gradient_checkpointing=False)
    return model, tok


class Wrapper(torch.nn.Module):
    """Stands in for DDP / DataParallel-like wrappers: the real model sits in .module, no save_pretrained."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def test_save_final_unwraps_writes_everything_and_verifies(lora, tmp_path):
    model, tok = lora
    ckpt = checkpoints.save_final(Wrapper(Wrapper(model)), tok, tmp_path / "checkpoint", _run_config(), STATE)
    assert checkpoints.missing_files(ckpt) == [] and checkpoints.is_complete(ckpt)
    assert not (tmp_path / "checkpoint.tmp").exists()
    report = checkpoints.verify(ckpt)
    assert report["ok"] and isinstance(report["generated"], str)


def test_save_final_writes_the_trained_adapter_alone(lora, tmp_path):
    """05's DPO and KTO hold a frozen copy of 02's adapter ("ref") beside the trained one: the checkpoint is the trained
    adapter, not twice its size, and it verifies and reloads as before."""
    model, tok = lora
    model.add_adapter("ref", recipe.lora(4))  # as trl adds it: the active adapter stays "default"
    try:
        ckpt = checkpoints.save_final(model, tok, tmp_path / "checkpoint", _run_config(), STATE)
    finally:
        model.delete_adapter("ref")
    assert not (ckpt / "ref").exists() and checkpoints.problems(ckpt) == []
    assert checkpoints.verify(ckpt)["ok"]


def test_a_trainer_checkpoint_copied_as_final_holds_the_trained_adapter_alone(lora, tmp_path):
    """After a NaN stop the last verified Trainer checkpoint becomes the final one: what save_final writes, without
    05's frozen "ref" adapter (the Trainer saves every adapter) nor what only the Trainer reads; same content hash."""
    import json

    from nbutils.train import reports

    model, tok = lora
    src = tmp_path / "trainer" / "checkpoint-3"
    model.add_adapter("ref", recipe.lora(4))
    try:
        model.save_pretrained(src)  # as the Trainer saves a checkpoint: every adapter, "ref" in ref/
    finally:
        model.delete_adapter("ref")
    chatformat.save_tokenizer(tok, src)
    trainer_only = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_0.pth", "training_args.bin")
    for name in trainer_only:
        (src / name).write_bytes(b"trainer only")
    (src / "run_config.json").write_text(json.dumps(_run_config()))
    (src / "trainer_state.json").write_text(json.dumps(STATE))
    checkpoints.mark_complete(src, 3, {"lr": 1})
    assert (src / "ref" / "adapter_config.json").is_file()
    final = checkpoints.copy_complete(src, tmp_path / "checkpoint")
    assert not (final / "ref").exists() and not [name for name in trainer_only if (final / name).exists()]
    assert checkpoints.problems(final) == [] and checkpoints.missing_files(final) == []
    assert reports.content_hash(final) == reports.content_hash(src) and checkpoints.checkpoint_step(final) == 3
    assert checkpoints.verify(final)["ok"]


def test_verifier_names_missing_tokenizer_files(lora, tmp_path):
    model, tok = lora
    ckpt = checkpoints.save_final(model, tok, tmp_path / "checkpoint", _run_config(), STATE)
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "tokenizer_config.json").unlink()
    report = checkpoints.verify(ckpt)
    assert not report["ok"] and report["missing"] == ["tokenizer_config.json", "tokenizer.json"]


@pytest.mark.parametrize("damage, reason", [
    (lambda p: (p / "adapter_model.safetensors").write_bytes((p / "adapter_model.safetensors").read_bytes()[:100]),
     "adapter_model.safetensors is 100 bytes"),
    (lambda p: (p / "adapter_config.json").write_text((p / "adapter_config.json").read_text().replace('"r": 4', '"r": 5')),
     "adapter_config.json content differs"),
    (lambda p: (p / "trainer_state.json").write_text(json.dumps({"global_step": 999, "log_history": []})),
     "trainer_state.json says step 999, checksums.json 3"),
    (lambda p: (p / "checksums.json").unlink(), "checksums.json missing"),
])
def test_checksums_catch_damage_the_marker_alone_would_miss(lora, tmp_path, damage, reason):
    model, tok = lora
    ckpt = checkpoints.save_final(model, tok, tmp_path / "checkpoint", _run_config(), STATE, {"learning_rate": 1e-3})
    assert checkpoints.problems(ckpt) == [] and checkpoints.verify(ckpt)["ok"]
    damage(ckpt)
    assert checkpoints.is_complete(ckpt)  # the marker is still there: only checksums.json can tell
    report = checkpoints.verify(ckpt)
    assert not report["ok"] and any(reason in p for p in report["problems"]), report["problems"]


def test_newest_verified_skips_damaged_and_rotation_keeps_the_last_verified(tmp_path, capsys, fake_checkpoint):
    trainer = tmp_path / "trainer"
    for step in (10, 20, 30):
        fake_checkpoint(trainer / f"checkpoint-{step}", step)
    (trainer / "checkpoint-30" / "optimizer.pt").write_text("cut")
    (trainer / "checkpoint-20" / "trainer_state.json").write_text(json.dumps({"global_step": 120}))
    found, skipped = checkpoints.newest_verified(trainer)
    assert found.name == "checkpoint-10" and [p.name for p, _ in skipped] == ["checkpoint-30", "checkpoint-20"]
    assert checkpoints.find_resumable(tmp_path, detect_platform({"NBUTILS_INPUT_ROOT": str(tmp_path / "none")})) == found
    assert "skipped" in capsys.readouterr().out
    # keep=1: the damaged newer ones are not counted, and the only verified one is never deleted.
    assert checkpoints.rotate(trainer, 1) == []
    assert (trainer / "checkpoint-10").exists()
    fake_checkpoint(trainer / "checkpoint-40", 40)
    removed = checkpoints.rotate(trainer, 1)
    assert [p.name for p in removed] == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]
    assert [p.name for p in checkpoints.checkpoint_dirs(trainer)] == ["checkpoint-40"]
    assert not list(trainer.glob(".trash-*"))


def test_rotation_orders_by_step_not_modification_time(tmp_path, fake_checkpoint):
    trainer = tmp_path / "trainer"
    for step in (30, 20, 10):  # 10 written last: the Trainer's mtime rotation would keep it
        fake_checkpoint(trainer / f"checkpoint-{step}", step)
    checkpoints.rotate(trainer, 2)
    assert [p.name for p in checkpoints.checkpoint_dirs(trainer)] == ["checkpoint-20", "checkpoint-30"]


def test_summary_errors_name_the_file_and_03_falls_back_to_a_verified_checkpoint(lora, tmp_path, capsys):
    model, tok = lora
    with pytest.raises(checkpoints.CheckpointError, match="training_summary.json not found"):
        checkpoints.for_eval(tmp_path)
    (tmp_path / "training_summary.json").write_text('{"global_step": 3, "checkpoint_dir": "checkpo')
    with pytest.raises(checkpoints.CheckpointError, match=r"training_summary.json is damaged.*re-run 02_train_qlora"):
        checkpoints.for_eval(tmp_path)
    (tmp_path / "training_summary.json").write_text(json.dumps({"global_step": 3, "checkpoint_dir": "checkpoint",
                                                                "checkpoint_complete": True}))
    final = checkpoints.save_final(model, tok, tmp_path / "checkpoint", _run_config(), STATE)
    assert checkpoints.for_eval(tmp_path)[0] == final
    (final / "adapter_model.safetensors").write_bytes(b"x")
    with pytest.raises(checkpoints.CheckpointError, match="no checkpoint .* verifies"):
        checkpoints.for_eval(tmp_path)
    older = checkpoints.save_final(model, tok, tmp_path / "trainer" / "checkpoint-3", {}, STATE)
    assert checkpoints.for_eval(tmp_path)[0] == older
    assert "skipped" in capsys.readouterr().out


def test_a_summary_of_another_checkpoint_is_refused_naming_the_notebook_to_rerun(lora, tmp_path):
    from nbutils.train import reports

    model, tok = lora
    final = checkpoints.save_final(model, tok, tmp_path / "checkpoint", _run_config(), STATE)
    other = {"dir": str(final), "step": 3, "content_hash": "0" * 64}
    (tmp_path / "training_summary.json").write_text(json.dumps({"checkpoint_dir": "checkpoint", "checkpoint": other}))
    with pytest.raises(reports.ReportMismatchError, match=r"training_summary.json describes another checkpoint "
                                                          r"\(step 3, content 000000000000\).*Rerun 02_train_qlora"):
        checkpoints.for_eval(tmp_path)
    (tmp_path / "training_summary.json").write_text(json.dumps({"checkpoint_dir": "checkpoint", "written_by":
                                                                "05_preference", "checkpoint": reports.identity(final)}))
    assert checkpoints.for_eval(tmp_path)[0] == final
    (tmp_path / "training_summary.json").unlink()
    (final / "run_config.json").write_text(json.dumps({**_run_config(), "method": "dpo"}))
    with pytest.raises(checkpoints.CheckpointError, match="training_summary.json not found: run 05_preference"):
        checkpoints.for_eval(tmp_path)


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
    assert not list(tmp_path.glob("checkpoint.tmp*"))  # the temp folder is removed


def test_only_complete_trainer_checkpoints_count(tmp_path, fake_checkpoint):
    for step, complete in ((5, True), (10, True), (15, False)):
        fake_checkpoint(tmp_path / "trainer" / f"checkpoint-{step}", step, complete)
    (tmp_path / "trainer" / "checkpoint-last").mkdir()
    found = trainer_checkpoints(tmp_path / "trainer")
    assert [p.name for p in found] == ["checkpoint-5", "checkpoint-10"]
    assert checkpoints.find_resumable(tmp_path, detect_platform({"NBUTILS_INPUT_ROOT": str(tmp_path / "none")})) \
        == tmp_path / "trainer" / "checkpoint-10"


def test_resume_finds_an_attached_earlier_kaggle_output(tmp_path, fake_checkpoint):
    # A new Kaggle version with the previous version's output attached under /kaggle/input/<slug>/.
    earlier = fake_checkpoint(tmp_path / "input" / "my-train-notebook" / "train_qlora" / "trainer" / "checkpoint-40", 40)
    platform = detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Batch", "NBUTILS_INPUT_ROOT": str(tmp_path / "input"),
                                "NBUTILS_WORKING_ROOT": str(tmp_path / "working")})
    assert checkpoints.find_resumable(tmp_path / "working" / "train_qlora", platform) == earlier
    # 05 takes 02's output as an input: 02's checkpoints are never 05's to resume, only an earlier 05's are.
    assert checkpoints.find_resumable(tmp_path / "working" / "preference", platform) is None
    own = fake_checkpoint(tmp_path / "input" / "my-05" / "preference" / "trainer" / "checkpoint-8", 8)
    assert checkpoints.find_resumable(tmp_path / "working" / "preference", platform) == own
