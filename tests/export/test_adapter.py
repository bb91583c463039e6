"""Adapter-only export: the LoRA weights, tokenizer and card, without the resume files or any secret."""

import json

import pytest

from nbutils.export import adapter, card
from nbutils.runtime import secrets
from nbutils.train import checkpoints


def test_adapter_export_and_cards_hold_no_secret(tmp_path, trained_adapter, monkeypatch, hf_token, make_report):
    monkeypatch.setenv("HF_TOKEN", hf_token)
    assert secrets.get_secret("HF_TOKEN") == hf_token  # fetched: redact now knows the value
    train = tmp_path / "train_qlora"
    train.mkdir()
    (train / "training_summary.json").write_text(json.dumps({"checkpoint_dir": str(trained_adapter), "global_step": 5,
                                                             "note": f"token {hf_token}"}))
    (tmp_path / "manifest.json").write_text(json.dumps({"content_hash": "abc123", "counts": {"kept": 9},
                                                        "splits": {"train": 8, "eval": 1}}))
    (tmp_path / "eval_report.json").write_text(json.dumps(make_report()))
    facts = card.collect_facts(tmp_path, train, tmp_path, "someone/base-model")
    text = card.model_card(facts, "adapter", "me/model")
    assert "base_model: someone/base-model" in text and "abc123" in text and '"kept": 9' in text
    assert "| exact_match (primary) | 0.100 [0.100, 0.100] | 0.800 [0.800, 0.800] | 1/0/0 |" in text
    assert "| lora_r | 8 |" in text
    out = adapter.export_adapter(trained_adapter, tmp_path / "adapter", text)
    assert "adapter_model.safetensors" in out["files"] and "trainer_state.json" not in out["files"]
    assert checkpoints.MARKER not in out["files"] and "checksums.json" not in out["files"]  # it describes the checkpoint
    for path in (tmp_path / "adapter").iterdir():
        assert hf_token not in path.read_bytes().decode("utf-8", "ignore"), path.name
    assert hf_token not in json.dumps(facts) and hf_token not in text


def test_an_incomplete_checkpoint_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "adapter_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="is not a complete checkpoint .*re-run 02"):
        adapter.export_adapter(tmp_path / "ckpt", tmp_path / "out", "# card")
    assert not (tmp_path / "out").exists()


def test_a_second_export_replaces_the_first_whole(tmp_path, trained_adapter, monkeypatch):
    adapter.export_adapter(trained_adapter, tmp_path / "out", "# first")
    (tmp_path / "out" / "stale.txt").write_text("from an earlier export")
    out = adapter.export_adapter(trained_adapter, tmp_path / "out", "# second")
    assert "stale.txt" not in out["files"] and (tmp_path / "out" / "README.md").read_text() == "# second"
    assert out["size_mb"] > 0 and out["files"] == sorted(p.name for p in (tmp_path / "out").iterdir())
    real = adapter.shutil.copyfile

    def bad_copy(src, dest):  # a copy that comes out different: the export is refused, the earlier one stays
        real(src, dest)
        if dest.name == "adapter_model.safetensors":
            dest.write_bytes(dest.read_bytes()[:100])

    monkeypatch.setattr(adapter.shutil, "copyfile", bad_copy)
    with pytest.raises(OSError, match="adapter_model.safetensors in the adapter export differs from it"):
        adapter.export_adapter(trained_adapter, tmp_path / "out", "# third")
    assert (tmp_path / "out" / "README.md").read_text() == "# second" and sorted(tmp_path.iterdir()) == [tmp_path / "out"]


def test_a_trainer_checkpoint_publishes_what_the_final_one_does_and_none_of_the_trainers_files(tmp_path,
                                                                                               trained_adapter):
    """04 exports a Trainer checkpoint when 02's final one fails verification: its training_args.bin (a pickle),
    optimizer, scheduler, scaler and each rank's random state stay out of the published folder and of its size, which
    then holds what an export of the final checkpoint holds: the adapter, its config, the tokenizer, the card."""
    import shutil

    from nbutils.export import diskplan

    normal = adapter.export_adapter(trained_adapter, tmp_path / "normal", "# card")
    trainer = tmp_path / "trainer" / "checkpoint-3"
    shutil.copytree(trained_adapter, trainer, ignore=shutil.ignore_patterns(checkpoints.MARKER, "checksums.json"))
    (trainer / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    only = ("training_args.bin", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt", "rng_state.pth",
            "rng_state_0.pth", "rng_state_1.pth")
    for name in only:
        (trainer / name).write_bytes(b"\x80\x04trainer-only")
    checkpoints.mark_complete(trainer, 3)
    out = adapter.export_adapter(trainer, tmp_path / "fallback", "# card")
    assert out["files"] == normal["files"] and not set(only) & set(out["files"])
    assert "adapter_model.safetensors" in out["files"] and "README.md" in out["files"]
    size = diskplan.export_sizes(trainer, 10**6, True, False, "", False)[0]["adapter"]
    assert size == diskplan.export_sizes(trained_adapter, 10**6, True, False, "", False)[0]["adapter"]
