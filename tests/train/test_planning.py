"""02's plan: one table before anything loads, the model from 01's manifest, every problem listed at once."""

import json
import shutil
from pathlib import Path

import pytest

from nbutils import defaults
from nbutils.train import launch, planning
from nbutils.train.recipe import UpstreamMismatch


def test_the_plan_takes_the_model_from_01_and_prints_one_table(prepared_data, tmp_path, capsys, no_model_loading):
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path / "out"))
    table = capsys.readouterr().out
    assert plan.base_model == "embedded" and plan.base_model_why == "from 01's manifest"
    assert (plan.max_steps, plan.eval_steps, plan.save_steps) == (80, 20, 20) and plan.problems == []
    assert plan.learning_rate == 3e-3 and plan.loss == "chunked" and plan.launch.mode == "single"
    keys = [line.split()[0] for line in table.splitlines()]
    for key in ("platform", "precision", "version.torch", "base_model", "data", "loss", "batch", "memory.peak", "mode",
                "learning_rate", "steps", "time_budget", "output", "problems"):
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
    with pytest.raises(planning.PlanError, match=r"disk full at .*: needs ~\d+\.\d\d GiB, 0\.02 GiB free; free space or "
                                                 r"lower keep_checkpoints \(now 2\)"):
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), show=False)


def _parameter_defaults(notebook: str) -> dict:
    """A notebook's parameters cell, its values as written (what a run at the defaults gets)."""
    import jupytext

    nb = jupytext.read(Path(__file__).resolve().parents[2] / "notebooks" / f"{notebook}.py")
    return launch.parameter_defaults(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])))


def test_a_10000_record_run_at_the_defaults_trains_at_least_one_epoch():
    """01's and 02's defaults on 10,000 records: 02 trains at the batch 01 planned for, and max_steps covers one
    epoch (625 steps), for a real model and a toy one alike; no one-epoch warning is due."""
    d01, d02 = _parameter_defaults("01_data_prep"), _parameter_defaults("02_train_qlora")
    from transformers import Qwen2Config

    manifest = {"batching": {"batch_size": d01["batch_size"], "strategy": "length_grouped"}}
    batch, why = planning.batch_size(d02["per_device_batch_size"], manifest)
    assert batch == d01["batch_size"] == 16 and why.startswith("auto")
    per_epoch = planning.steps_per_epoch(10_000, batch, d02["grad_accum"], world_size=1)
    assert per_epoch == 625
    qwen = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                       num_key_value_heads=2)  # Qwen2.5-1.5B's shape
    toy = Qwen2Config(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4)
    for config in (qwen, toy):
        steps, _ = defaults.max_steps(d02["max_steps"], per_epoch, d02["num_epochs"], config)
        assert steps >= per_epoch and planning.epoch_warning(steps, per_epoch, 10_000) is None


def test_a_step_count_short_of_one_epoch_is_a_warning_in_the_table(prepared_data, tmp_path, capsys):
    warning = planning.epoch_warning(80, 625, 10_000)
    assert warning.startswith("max_steps=80 covers 13% of one epoch: one pass over the 10,000 training rows is 625 steps")
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), max_steps=10)
    table = capsys.readouterr().out
    assert plan.steps_per_epoch == 27 and plan.problems == []  # 432 records at 16 a step: a warning, not a problem
    warned = [line for line in table.splitlines() if line.startswith("WARNING")]
    assert warned and "max_steps=10 covers 37% of one epoch" in warned[0] and "one epoch = 27 steps" in table
    assert planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), show=False).warnings == []


def test_another_batch_size_than_01s_is_allowed_and_the_plan_says_what_it_changes(prepared_data, tmp_path):
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=8, show=False)
    assert plan.per_device_batch_size == 8 and plan.memory["batch_size"] == 8
    assert "01 planned for 16: its padding figures" in plan.batch_why
    with pytest.raises(planning.PlanError, match=r'max_steps=-1: use "auto"'):
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), max_steps=-1, show=False)


def test_auto_takes_the_plain_loss_where_the_whole_logits_fit_the_gpu(prepared_data, tmp_path, monkeypatch, capsys):
    """On a T4 the embedded model's logits fit: the plain loss, the fastest there; explicit settings keep theirs, and a
    CPU (even one planning for a T4, as the dry run does) keeps the chunked one, the faster on a CPU."""
    from dataclasses import replace

    inspect = planning.inspect
    monkeypatch.setattr(planning, "inspect", lambda *a: (replace(inspect(*a)[0], gpu_count=1, gpu_memory_gb=15.0), []))
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path))
    table = capsys.readouterr().out
    assert plan.loss == "plain" and plan.memory["loss"] == "plain" and plan.memory["fits"]
    assert "plain (auto): the whole logits peak at" in table and "within the plan's margin" in table
    assert "15 GB (this GPU): fits" in table
    chunked = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), chunked_loss=True, show=False)
    assert chunked.loss == "chunked" and "(chunked_loss=True" in chunked.loss_why
    monkeypatch.setattr(planning, "inspect", inspect)
    monkeypatch.setenv("NBUTILS_PLAN_GPU_GB", "15")
    cpu = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), show=False)
    assert cpu.loss == "chunked" and cpu.memory["fits"] and "no GPU here: a 15 GB GPU" in cpu.memory["checked_against"]
    assert "on one that holds them, auto takes the plain loss" in cpu.loss_why


def test_a_batch_that_does_not_fit_is_refused_naming_the_largest_that_does(prepared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("NBUTILS_PLAN_GPU_GB", "0.7")  # 0.6 GB of it the CUDA context: little is left
    with pytest.raises(planning.PlanError, match=r"per_device_batch_size=256 does not fit the 0.7 GB GPU .* the largest "
                                                 r"that fits is (\d+)") as err:
        planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=256,
                          chunked_loss=False, max_steps=20, show=False)
    largest = int(str(err.value).split("the largest that fits is ")[1].split()[0])
    assert 0 < largest < 256 and 'chunked_loss="auto"' in str(err.value)
    fits = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=largest,
                             chunked_loss=False, max_steps=20, show=False)
    assert fits.memory["fits"]


@pytest.mark.parametrize("rows, batch, accum, steps", [(40, 4, 4, 3), (100, 16, 4, 2), (432, 16, 4, 7), (432, 16, 1, 27)])
def test_an_epoch_is_counted_as_the_trainer_counts_it_remainder_step_included(rows, batch, accum, steps):
    """The Trainer's last step of an epoch takes the batches left over: 10 batches at accumulation 4 are 3 steps."""
    assert planning.steps_per_epoch(rows, batch, accum, world_size=1) == steps


def test_packed_rows_are_planned_at_their_block_not_the_longest_record():
    """Packed rows fill up to the block size whatever the longest record: the memory plan must size that row."""
    packed = {"batching": {"strategy": "packed", "block_size": 2048}, "token_lengths": {"max": 896}}
    assert planning.planned_length(packed) == 2048
    assert planning.planned_length({**packed, "batching": {"strategy": "length_grouped"}}) == 896


def test_the_chunked_loss_is_named_as_a_way_out_only_where_it_can_help():
    plan = {"gpu_memory_gb": 15.0, "fits": False, "batch_size": 16, "estimate_gb": 21.0, "seq_len": 512,
            "loss": "plain", "largest_batch_that_fits": 5}
    assert 'chunked_loss="auto"' in planning.memory_problem(plan, "single")
    assert 'chunked_loss' not in planning.memory_problem(plan, "single", chunk_hint=False)  # Gemma-2, or auto already


def test_gemma_on_a_t4_is_warned_about_fp16_and_fp32_is_planned_at_fp32(prepared_data, tmp_path, monkeypatch):
    """precision="auto" computes a Gemma-2/3 in fp16 on a T4, which it overflows: the plan's table warns, naming
    precision="fp32"; the plan of a precision="fp32" run counts fp32 activations (the 02 parameter reaches the
    memory plan)."""
    from dataclasses import replace

    from transformers import Gemma2Config

    gemma = Gemma2Config(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=256)
    inspect = planning.inspect
    t4 = lambda *a: (replace(inspect(*a)[0], gpu_count=1, gpu_memory_gb=14.7, gpu_capability=(7, 5),  # noqa: E731
                             precision="fp32" if a[0] == "fp32" else "fp16"), [])
    monkeypatch.setattr(planning, "inspect", t4)
    monkeypatch.setattr(planning.modelsource, "load_config", lambda name: gemma)
    same = dict(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=1, show=False)
    plan = planning.plan_run(**same)
    assert plan.memory["compute_bytes"] == 2
    assert any("gemma2 computes in fp16" in w and 'precision="fp32"' in w for w in plan.warnings), plan.warnings
    full = planning.plan_run(precision="fp32", **same)
    assert full.memory["compute_bytes"] == 4 and not full.warnings
    assert full.memory["parts_gb"]["layer_backward"] > plan.memory["parts_gb"]["layer_backward"]


def test_split_that_does_not_fit_names_the_largest_batch_over_the_gpus_and_on_one():
    plan = {"gpu_memory_gb": 14.7, "fits": False, "batch_size": 8, "estimate_gb": 21.2, "seq_len": 2048,
            "loss": "chunked", "largest_batch_that_fits": 3, "gpu_count": 2, "split_fits": False,
            "split_estimate_gb": 15.2, "split_largest_batch": 6}
    said = planning.memory_problem(plan, "split")
    assert said.startswith("per_device_batch_size=8 does not fit 2 GPUs of 14.7 GB together")
    assert "the largest that fits is 6 over the GPUs together (3 on one GPU" in said
    assert planning.memory_problem({**plan, "split_fits": True}, "split") is None
    # not even batch 1 over both: the longest sequence named is the split's, not one GPU's (it halved data for nothing)
    none = {**plan, "largest_batch_that_fits": 0, "split_largest_batch": 0, "longest_seq_that_fits": 832,
            "split_longest_seq": 1664}
    assert "the longest sequence that fits is 1664" in planning.memory_problem(none, "split")
    assert "the longest sequence that fits is 832" in planning.memory_problem(none, "single")


def test_gemma_2s_plan_counts_its_eager_scores_and_agrees_with_01s_cap(prepared_data, tmp_path, monkeypatch):
    """02 loads Gemma-2 eagerly (attn_implementation="auto"): its plan counts the seq x seq scores, and the longest
    sequence it trains at a batch size on a T4 is 01's max_seq_len cap there (memory.longest_sequence as 01 calls
    it), not the sdpa figure: neither accepts what the other refuses."""
    from dataclasses import replace

    from transformers import Gemma2Config

    from nbutils.train import loss as lm_loss
    from nbutils.train import memory

    gemma = Gemma2Config(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=256)
    inspect = planning.inspect
    t4 = lambda *a: (replace(inspect(*a)[0], gpu_count=1, gpu_memory_gb=defaults.T4_MEMORY_GB,  # noqa: E731
                             gpu_capability=(7, 5), precision="fp16"), [])
    monkeypatch.setattr(planning, "inspect", t4)
    monkeypatch.setattr(planning.modelsource, "load_config", lambda name: gemma)
    plan = planning.plan_run(data_dir=str(prepared_data), output_dir=str(tmp_path), per_device_batch_size=1, show=False)
    cap, _ = memory.longest_sequence(gemma, 1, defaults.T4_MEMORY_GB, loss=lm_loss.without_whole_logits(gemma))
    sdpa = memory.plan(gemma, plan.memory["seq_len"], 1, 16, defaults.T4_MEMORY_GB, loss=plan.loss)
    assert plan.attention == plan.memory["attention"] == "eager" and "scores counted" in plan.rows()["model_attention"]
    assert plan.memory["longest_seq_that_fits"] == cap < sdpa["longest_seq_that_fits"]
    assert "attention_masks" in plan.memory["parts_gb"] and "attention_masks" not in sdpa["parts_gb"]
