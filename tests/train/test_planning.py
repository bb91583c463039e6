"""02's plan: one table before anything loads, the model from 01's manifest, every problem listed at once."""

import json
import shutil

import pytest

from nbutils.train import planning
from nbutils.train.recipe import UpstreamMismatch


def test_the_plan_takes_the_model_from_01_and_prints_one_table(prepared_data, tmp_path, capsys, no_model_loading):
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path / "out"))
    table = capsys.readouterr().out
    assert plan.base_model == "embedded" and plan.base_model_why == "from 01's manifest"
    assert (plan.max_steps, plan.eval_steps, plan.save_steps) == (80, 20, 20) and plan.problems == []
    assert plan.learning_rate == 3e-3 and plan.loss == "chunked" and plan.launch.mode == "single"
    keys = [line.split()[0] for line in table.splitlines()]
    for key in ("platform", "precision", "version.torch", "base_model", "data", "loss", "memory.peak", "mode",
                "learning_rate", "steps", "output", "problems"):
        assert key in keys, table
    assert no_model_loading == []  # the config alone: no weights before the plan is made
    record = plan.record(smoke=False)
    assert record["base_model"] == "embedded" and record["data_manifest_hash"] == plan.manifest["content_hash"]


def test_smoke_trains_ten_steps_saving_every_five(prepared_data, tmp_path):
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), smoke=True, show=False)
    assert (plan.max_steps, plan.eval_steps, plan.save_steps) == (10, 5, 5)


def test_every_problem_is_listed_at_once_after_the_table(prepared_data, tmp_path, capsys):
    with pytest.raises(planning.PlanError) as err:
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=4096,
                          save_steps=30, multi_gpu="bogus")
    msg = str(err.value)
    assert "larger than the 432 training examples" in msg and "save_steps=30 is not a multiple" in msg
    assert "multi_gpu='bogus'" in msg
    assert "problems" in capsys.readouterr().out  # the table came first, with the numbers


def test_another_model_with_another_tokenizer_is_refused_naming_both(prepared_data, tmp_path, twin):
    other = twin("qwen2.5-instruct")
    with pytest.raises(UpstreamMismatch) as err:
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), base_model=str(other), show=False)
    assert f"base_model={str(other)!r} here" in str(err.value) and "'embedded' (its manifest)" in str(err.value)


def test_another_name_for_the_same_tokenizer_is_taken(prepared_data, tmp_path, embedded_dir):
    copy = shutil.copytree(embedded_dir / "model", tmp_path / "copy")  # the same model under another name
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path / "out"), base_model=str(copy),
                             show=False)
    assert plan.base_model == str(copy) and "the one 01 used for 'embedded'" in plan.base_model_why


def test_a_manifest_without_a_model_asks_for_01_again(prepared_data, tmp_path):
    data = shutil.copytree(prepared_data, tmp_path / "data")
    manifest = json.loads((data / "manifest.json").read_text())
    del manifest["base_model"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UpstreamMismatch, match="re-run 01_data_prep"):
        planning.plan_run(data_dir=str(data), output_dir=str(tmp_path / "out"), show=False)


def test_progress_mode_follows_the_platform(monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    assert planning.progress_mode("auto") == "log"
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert planning.progress_mode("auto") == "both"
    assert planning.progress_mode("log") == "log" and planning.progress_mode("widgets") == "widgets"
    with pytest.raises(ValueError):
        planning.progress_mode("bars")


def test_a_disk_too_small_for_the_checkpoints_is_a_problem_of_the_plan(prepared_data, tmp_path, monkeypatch):
    from nbutils.train import diskspace

    monkeypatch.setattr(diskspace, "free_mb", lambda folder: 25.0)
    with pytest.raises(planning.PlanError, match=r"disk full at .*: needs ~\d+ MB, 25 MB free; free space or lower "
                                                 r"save_total_limit \(now 2\)"):
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), show=False)
