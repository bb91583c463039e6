"""QLoRA training with 02's own recipe (its load_model, Trainer and TrainingArguments, run through
nbutils.harness.notebook_recipe): resumable, time-boxed, NaN-guarded, probed, and the summary 03 reads."""

import json
import math
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerCallback

from nbutils.harness import notebook_recipe
from nbutils.train import checkpoints, curves, runsettings, training
from tests.train.conftest import trainer_checkpoints

# Most tests here train for real (seconds each): they run in make test, not in the quick loop (make test-fast),
# which keeps the packed-plan run as its one end-to-end training.
trains = pytest.mark.integration

# 02's parameters for these runs (lora_r 8: a smaller adapter), and TrainingArguments a test reads more often.
PARAMS = dict(max_steps=40, eval_steps=10, save_steps=10, learning_rate=3e-3, lora_r=8, probe_prompts=0)
ARGS = dict(logging_steps=5, warmup_steps=0)


def _train(prepared, out, arguments=None, run=None, **params):
    """(model, tokenizer, TrainResult) of 02's recipe on the prepared data, into out."""
    model, tok, session = notebook_recipe.train(prepared, out, arguments={**ARGS, **(arguments or {})}, run=run,
                                                **{**PARAMS, **params})
    return model, tok, session.result


def _train_losses(result, after_step=0):
    return {h["step"]: h["loss"] for h in result.log_history if "loss" in h and h["step"] > after_step}


def _clock():
    """A fake clock: one "second" per call."""
    ticks = iter(range(10**6))
    return {"clock": lambda: next(ticks), "session_start": 0}


@trains
def test_time_budget_stop_then_resume_matches_uninterrupted(prepared_data, tmp_path):
    _, _, full = _train(prepared_data, tmp_path / "full")
    # The 36 s budget of the fake clock runs out between step 10 and 40 (the evaluation before the first step
    # reads the clock too).
    _, _, stopped = _train(prepared_data, tmp_path / "cut", time_budget_min=0.6, run=_clock())
    assert stopped.stopped_reason == "time_budget" and 10 < stopped.global_step < 40
    last = trainer_checkpoints(tmp_path / "cut" / "trainer")[-1]
    assert last.name == f"checkpoint-{stopped.global_step}"  # saved at the stop, not only at save_steps
    assert checkpoints.missing_files(last, resumable=True) == []

    _, _, resumed = _train(prepared_data, tmp_path / "cut")
    assert resumed.resumed_from_step == stopped.global_step
    assert resumed.global_step == full.global_step == 40
    # Same data order, optimizer, scheduler and adapter weights: the losses logged after the resume
    # point are the uninterrupted run's, and so is the final eval loss. Measured: within 1e-3 (the
    # CPU 4-bit kernels of bitsandbytes differ in the last digits by code path); with the data order
    # not reproduced (ignore_data_skip) they are 3-9% off. A logged loss is the mean over the steps since the
    # previous log: only the logs whose steps all come after the stop are compared (a stop between two logs
    # leaves the resumed run's first log the mean of fewer steps).
    after = {s: v for s, v in _train_losses(resumed).items() if s - ARGS["logging_steps"] >= stopped.global_step}
    assert after and all(after[s] == pytest.approx(_train_losses(full)[s], rel=5e-3) for s in after)
    assert resumed.eval_loss == pytest.approx(full.eval_loss, rel=5e-3)


class Poison(TrainerCallback):
    """Turns the LoRA weights into NaN at one step, as an fp16 overflow would."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, model=None, **kw):
        if state.global_step == self.step:
            for p in model.parameters():
                if p.requires_grad:
                    p.data.fill_(float("nan"))


@pytest.mark.parametrize("poison_step, logging_steps, last_good", [
    (12, 5, "checkpoint-10"),  # caught by the logged loss
    (19, 100, "checkpoint-10"),  # no log line before the save at step 20: caught by the weight check
    (3, 100, None),  # NaN before the first checkpoint: nothing is saved as final
])
@trains
def test_nan_stops_and_keeps_last_good_checkpoint(prepared_data, tmp_path, poison_step, logging_steps, last_good):
    model, tok, session = notebook_recipe.train(prepared_data, tmp_path, arguments={**ARGS, "logging_steps": logging_steps},
                                                run={"callbacks": [Poison(poison_step)]}, **{**PARAMS, "max_steps": 30})
    result = session.result
    assert result.stopped_reason == "nan" and result.global_step < 30, result.stop_detail
    good = trainer_checkpoints(tmp_path / "trainer")
    assert (good[-1].name if good else None) == last_good
    ckpt = session.save_final(model, tok)
    summary = session.write_summary(ckpt)
    assert summary["stopped_reason"] == "nan" and summary["checkpoint_dir"] == "checkpoint"
    assert summary["checkpoint_complete"] is (last_good is not None)
    if last_good:
        from safetensors.torch import load_file

        weights = load_file(ckpt / "adapter_model.safetensors")
        assert all(bool(w.isfinite().all()) for w in weights.values())
        assert checkpoints.verify(ckpt)["ok"]


@trains
def test_probe_hook_stops_after_two_degenerate_evaluations(prepared_data, tmp_path):
    verdicts = iter([True, False, True, True, True, True])  # streak broken once, then two in a row
    seen = []

    def probe(model):
        seen.append(model)
        return next(verdicts)

    model, _, result = _train(prepared_data, tmp_path, max_steps=60, eval_steps=5, save_steps=5, run={"probe": probe})
    assert result.stopped_reason == "degenerate" and result.global_step == 20
    assert len(seen) == 4 and all(m is model for m in seen)  # the model being trained, at each evaluation
    assert trainer_checkpoints(tmp_path / "trainer")[-1].name == "checkpoint-20"
    assert next(verdicts) is True  # the final evaluation did not call the probe again


@trains
def test_loss_is_normalized_by_target_tokens_across_accumulation(prepared_data, tmp_path):
    """grad_accum=2 over micro-batches with 13 and 11 target tokens == one batch of all four examples,
    with the chunked loss (the default on the CPU) and with the plain one: all four runs, one update.

    transformers 5 passes num_items_in_batch (target tokens of the whole accumulated batch) to models
    that accept loss kwargs, LlamaForCausalLM among them, and to the chunked loss; a per-micro-batch
    mean would differ."""
    import torch
    from datasets import Dataset

    from nbutils.data import chatformat
    from nbutils.train import modeling
    from tests import recipe

    tok = chatformat.load_tokenizer("embedded")
    ids = tok("the city is oslo . the pet is cat . the food is rice .", add_special_tokens=False)["input_ids"]
    rows = []
    for n_targets in (1, 12, 2, 9):
        labels = [-100] * (len(ids) - n_targets) + ids[-n_targets:]
        rows.append({"input_ids": ids, "labels": labels, "length": len(ids), "messages": []})
    ds = Dataset.from_list(rows)
    weights, eval_losses = {}, {}
    for chunked in (True, False):
        for bs, accum in ((4, 1), (2, 2)):
            model = modeling.attach_lora(modeling.load_base("embedded", "fp32"), recipe.lora(4), seed=0,
                                         gradient_checkpointing=False)
            for name, p in model.named_parameters():  # make B non-zero so A gets a gradient too
                if "lora_B" in name:
                    p.data.normal_(0, 0.01, generator=torch.Generator().manual_seed(1))
            out = tmp_path / f"{bs}x{accum}{chunked}"
            # keep the given order: micro-batches (1, 12) and (2, 9) targets
            plan = notebook_recipe.adhoc_plan(out, ds, ds, {"strategy": "random"}, max_steps=1, learning_rate=1.0,
                                              loss="chunked" if chunked else "plain")
            _, _, session = notebook_recipe.train(
                prepared_data, out, model, tok, plan=plan, per_device_batch_size=bs, grad_accum=accum, resume=False,
                chunked_loss=chunked, arguments={"warmup_steps": 0, "eval_strategy": "no", "save_strategy": "no",
                                                 "optim": "sgd", "train_sampling_strategy": "sequential"})
            eval_losses[bs, chunked] = session.result.eval_loss
            weights[bs, chunked] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    first = weights[4, False]
    moved = [n for n in first if "lora_A" in n]
    assert moved
    for run in weights.values():
        for name in first:
            assert run[name].allclose(first[name], atol=1e-6), name
    for bs in (4, 2):  # evaluation through the chunked loss: the plain loss's value
        assert eval_losses[bs, True] == pytest.approx(eval_losses[bs, False], rel=1e-5)


@trains
def test_summary_layout_and_progress_lines(prepared_data, tmp_path, capsys):
    model, tok, session = notebook_recipe.train(prepared_data, tmp_path, arguments=ARGS, **{**PARAMS, "max_steps": 20})
    result = session.result
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("[train] step")]
    assert [x.split()[2] for x in lines] == ["5/20", "10/20", "15/20", "20/20"]  # one line per logging interval
    assert all(k in lines[-1] for k in ("step 20/20", "loss", "tokens/s", "ETA"))
    # one line per evaluation (the one before the first step, then every eval_steps; the final evaluate() at step 20
    # is not a second one), and no Trainer dict logs
    assert [x.split()[2] for x in out.splitlines() if x.startswith("[eval] step")] == ["0/20", "10/20", "20/20"]
    assert "{'" not in out and "train_runtime" not in out, out
    moments = weakref.ref(next(iter(result.trainer.optimizer.state.values()))["exp_avg"])
    ckpt = session.save_final(model, tok)
    assert moments() is None and result.trainer.optimizer is None  # released before 02 verifies (a second model loads)
    summary = session.write_summary(ckpt)
    assert json.loads((tmp_path / "training_summary.json").read_text()) == json.loads(json.dumps(summary, default=str))
    assert summary["global_step"] == 20 and summary["stopped_reason"] == "max_steps"
    assert summary["resumed_from_step"] is None and summary["checkpoint_dir"] == "checkpoint"
    assert summary["checkpoint_complete"] is True and summary["eval_loss"] < summary["train_loss"] * 2
    # the summary carries the diagnosis of this run's own curves (each verdict: tests/train/test_curves.py)
    assert summary["diagnosis"] == curves.diagnose(result.log_history) and not summary["diagnosis"].startswith("not")
    assert (tmp_path / "learning_curves.png").stat().st_size > 1000
    # what 02 built, read off the live model and Trainer: the 4-bit config, the LoraConfig, the training arguments
    recorded = json.loads((ckpt / "run_config.json").read_text())
    assert recorded["lora"] == runsettings.lora_settings(model.peft_config["default"]) and recorded["lora"]["r"] == 8
    assert recorded["quantization"]["bnb_4bit_quant_type"] == "nf4" and recorded["base_model"] == "embedded"
    assert recorded["training"]["learning_rate"] == 3e-3 and recorded["training"]["max_steps"] == 20
    assert result.settings["lora.r"] == 8 and result.settings["training.max_steps"] == 20
    assert checkpoints.missing_files(ckpt) == []
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == 20
    # Rerunning a finished run trains nothing more (Trainer alone would take one extra step).
    _, _, again = _train(prepared_data, tmp_path, max_steps=20)
    assert again.global_step == 20 and again.resumed_from_step == 20
    assert again.eval_loss == pytest.approx(result.eval_loss, rel=5e-3)  # same weights; CPU 4-bit noise


@trains
def test_widget_progress_survives_a_stop_in_the_first_steps(prepared_data, tmp_path, monkeypatch):
    import transformers.trainer
    from transformers.utils.notebook import NotebookProgressCallback

    monkeypatch.setattr(transformers.trainer, "DEFAULT_PROGRESS_CALLBACK", NotebookProgressCallback)  # as in Jupyter
    _, _, result = _train(prepared_data, tmp_path, time_budget_min=0.03, run={**_clock(), "progress": "widgets"},
                          arguments={"disable_tqdm": False})
    assert result.stopped_reason == "time_budget" and result.global_step <= 2


@trains
def test_the_bar_comes_without_the_trainers_dict_logs(prepared_data, tmp_path, capsys):
    _train(prepared_data, tmp_path, max_steps=10, run={"progress": "both"}, arguments={"disable_tqdm": False})
    out = capsys.readouterr()
    assert "[train] step 10/10" in out.out and "{'" not in out.out + out.err, out
    assert "10/10" in out.err  # the tqdm bar (text outside Jupyter) reached the end


@trains
def test_resume_refuses_a_checkpoint_of_another_run(prepared_data, tmp_path):
    no_eval = {"eval_strategy": "no"}
    _train(prepared_data, tmp_path, max_steps=10, eval_steps=5, save_steps=5, arguments=no_eval)
    with pytest.raises(checkpoints.ResumeMismatchError) as err:
        _train(prepared_data, tmp_path, max_steps=10, eval_steps=5, save_steps=5, learning_rate=1e-3, arguments=no_eval)
    msg = str(err.value)
    for line in ("training.learning_rate: checkpoint has 0.003, this run 0.001", "new output_dir", "resume=False"):
        assert line in msg, msg
    assert "time_budget_min" not in msg and "save_steps" not in msg  # what does not change the weights is not compared


def test_a_save_of_nan_weights_is_never_marked_complete(tmp_path, fake_checkpoint):
    """A callback after NanGuard may ask for a save (the time plan's calibration does): the folder the Trainer wrote
    is removed unmarked, and the run stops for NaN, so the final checkpoint is the last good one."""
    import torch

    run, model, control = training.Run(tmp_path, {}, time_budget_min=None), torch.nn.Linear(2, 2), SimpleNamespace()
    for step in (4, 8):
        fake_checkpoint(tmp_path / "trainer" / f"checkpoint-{step}", step, complete=False)
        model.weight.data[0, 0] = math.nan if step == 8 else 0.0
        training.MarkComplete(run).on_save(SimpleNamespace(output_dir=str(tmp_path / "trainer")), SimpleNamespace(
            global_step=step, is_world_process_zero=True, best_model_checkpoint=None), control, model=model)
    assert [p.name for p in checkpoints.checkpoint_dirs(tmp_path / "trainer")] == ["checkpoint-4"]
    assert checkpoints.problems(tmp_path / "trainer" / "checkpoint-4", resumable=True) == []
    assert control.should_training_stop and run.stop.reason == "nan" and "at step 8" in run.stop.detail


def test_no_save_after_a_nan_stop_is_marked_complete(tmp_path, fake_checkpoint):
    """A NaN eval loss stops the run with finite weights (an fp16 evaluation overflowed); a save another callback asks
    for at that evaluation must not become the newest complete checkpoint, which the NaN stop copies as final."""
    import torch

    run, control = training.Run(tmp_path, {}, time_budget_min=None), SimpleNamespace()
    fake_checkpoint(tmp_path / "trainer" / "checkpoint-4", 4)
    fake_checkpoint(tmp_path / "trainer" / "checkpoint-8", 8, complete=False)
    run.nan.on_log(SimpleNamespace(fp16=True), SimpleNamespace(global_step=8), control, logs={"eval_loss": math.nan})
    training.MarkComplete(run).on_save(SimpleNamespace(output_dir=str(tmp_path / "trainer")), SimpleNamespace(
        global_step=8, is_world_process_zero=True, best_model_checkpoint=None), control, model=torch.nn.Linear(2, 2))
    assert [p.name for p in checkpoints.checkpoint_dirs(tmp_path / "trainer")] == ["checkpoint-4"]


@trains
def test_resume_false_starts_over_and_keeps_the_earlier_checkpoints_aside(prepared_data, tmp_path):
    no_eval = {"eval_strategy": "no"}
    _train(prepared_data, tmp_path, max_steps=10, eval_steps=5, save_steps=5, arguments=no_eval)
    _, _, fresh = _train(prepared_data, tmp_path, max_steps=10, eval_steps=5, save_steps=5, learning_rate=1e-3, resume=False,
                         arguments=no_eval)
    assert fresh.resumed_from_step is None and fresh.global_step == 10
    aside = list(tmp_path.glob("trainer.before-*"))
    assert len(aside) == 1 and [p.name for p in checkpoints.checkpoint_dirs(aside[0])] == ["checkpoint-5", "checkpoint-10"]
    assert checkpoints.resume_mismatch(tmp_path / "trainer" / "checkpoint-10", fresh.settings) == []


def test_packed_plan_trains(prepared_data, tmp_path):
    from nbutils.data import splits

    plan = notebook_recipe.plan_for(prepared_data, tmp_path, **{**PARAMS, "max_steps": 6, "eval_steps": 6, "save_steps": 6})
    plan.manifest["batching"] = {"strategy": "packed", "block_size": 256, "batch_size": 4}
    _, _, session = notebook_recipe.train(prepared_data, tmp_path, plan=plan, arguments=ARGS,
                                          **{**PARAMS, "max_steps": 6, "per_device_batch_size": 4})
    assert session.result.global_step == 6 and math.isfinite(session.result.eval_loss)
    assert len(splits.load_split(prepared_data, "train")) > 6 * 4  # packed rows: fewer than the examples
    # tokens seen are tokens (what the time plan and tokens/s read), not the sum of the 4D block mask's pairs
    seen = session.result.trainer.state.num_input_tokens_seen
    assert 6 * 4 * 16 < seen <= 6 * 4 * 256, seen


def test_02_checks_the_rows_it_batches_and_sets_its_peak_beside_the_plan_without_the_context(prepared_data, tmp_path,
                                                                                              monkeypatch):
    """02's own train_on_this_process: the argument check counts packed blocks, as the plan does, and the peak torch
    measures (no CUDA context) is set beside the plan's allocated_gb, not its estimate with the context."""
    from nbutils.eval import evaluation
    from nbutils.train import argcheck, planning

    plan = notebook_recipe.plan_for(prepared_data, tmp_path, **{**PARAMS, "max_steps": 6, "eval_steps": 6, "save_steps": 6})
    plan.manifest["batching"] = {"strategy": "packed", "block_size": 256, "batch_size": 4}
    del plan.n_train_rows  # the plan counted its rows unpacked, before this test packed them: count again
    ns, seen = notebook_recipe.namespace(plan, per_device_batch_size=4), {}
    ns["load_model"] = lambda: (None, None)
    for owner, name, fake in ((argcheck, "validate", lambda values, n_train, **kw: seen.update(n_train=n_train)),
                              (training, "lock", lambda *a, **k: None), (evaluation, "training_probe", lambda *a: None),
                              (training, "Run", lambda *a, **kw: seen.update(memory=kw["memory_estimate_gb"]) or 1 / 0)):
        monkeypatch.setattr(owner, name, fake)
    with pytest.raises(ZeroDivisionError):  # stopped once the Run is built: nothing loads or trains
        ns["train_on_this_process"]()
    assert seen["n_train"] == planning.train_rows(plan.train_ds, plan.batching) < len(plan.train_ds)
    assert seen["memory"] == plan.memory["allocated_gb"] < plan.memory["estimate_gb"]


@trains
def test_memory_plan_checkpoint_size_matches_a_saved_checkpoint(prepared_data, tmp_path):
    from nbutils.runtime import modelsource
    from nbutils.train import diskspace, memory

    _train(prepared_data, tmp_path, max_steps=5, eval_steps=5, save_steps=5, arguments={"eval_strategy": "no"})
    ckpt = tmp_path / "trainer" / "checkpoint-5"
    weights = sum((ckpt / n).stat().st_size for n in ("adapter_model.safetensors", "optimizer.pt")) / diskspace.MB
    planned = memory.plan(modelsource.load_config("embedded"), 64, 4, 8, None)["checkpoint_mb"] - diskspace.TOKENIZER_ALLOWANCE_MB
    assert 0.8 < weights / planned < 1.25, (weights, planned)  # LoRA weights + two Adam states, 12 bytes a parameter


def test_the_result_is_a_record_and_the_summary_keeps_its_json_keys(tmp_path):
    result = training.TrainResult(6, "max_steps", "", None, 1.5, 1.25, 3.0, [{"step": 5, "loss": 1.5}], {"lora.r": 16},
                                  {"base_model": "embedded"}, trainer=object())
    summary = training.write_summary(tmp_path, result, None)
    assert set(summary) == {"global_step", "stopped_reason", "stop_detail", "resumed_from_step", "train_loss", "eval_loss",
                            "checkpoint_dir", "checkpoint_complete", "settings_hash", "diagnosis", "seconds", "memory_plan",
                            "measured_peak_gb", "run_peak_gb", "config", "world_size", "replica_checksums", "time_plan",
                            "time_plan_skipped", "checkpoint", "written_by"}
    assert summary["checkpoint"] is None and summary["written_by"] == "02_train_qlora"  # no checkpoint was saved
    assert summary["world_size"] == 1 and summary["replica_checksums"] is None and not summary["checkpoint_complete"]
    on_disk = json.loads((tmp_path / "training_summary.json").read_text())
    assert on_disk["global_step"] == 6 and on_disk["eval_loss"] == 1.25 and "trainer" not in on_disk
    assert on_disk["config"] == {"base_model": "embedded"}


def test_the_summary_is_the_stages_marker_and_written_last(tmp_path, monkeypatch):
    """chain.py's rule: a folder is complete once its marker exists, so nothing may be written after it."""
    from nbutils.chain import MARKERS
    from nbutils.train import atomic

    written, real = [], atomic.os.replace  # every file goes through the atomic writer's rename
    monkeypatch.setattr(atomic.os, "replace", lambda src, dst: (written.append(Path(dst).name), real(src, dst))[1])
    result = training.TrainResult(6, "max_steps", "", None, 1.5, 1.25, 3.0, [{"step": 5, "loss": 1.5}], {}, trainer=None)
    training.write_summary(tmp_path, result, None)
    assert written == ["learning_curves.png", "log_history.json", MARKERS["train_qlora"]], written
    assert MARKERS["train_qlora"] == "training_summary.json" and not list(tmp_path.glob("*.tmp-*"))


def test_the_optimizer_state_is_released_once_the_final_checkpoint_is_written(tmp_path, monkeypatch):
    """02 verifies the final checkpoint next, loading a second base model: Adam's moments and the gradients are gone
    by then (the Trainer checkpoints keep the optimizer for a resume)."""
    import gc

    import torch

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    moments = weakref.ref(optimizer.state[model.weight]["exp_avg"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    trainer = SimpleNamespace(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                              callback_handler=SimpleNamespace(optimizer=optimizer, lr_scheduler=scheduler))
    run = training.Run(tmp_path, {}, time_budget_min=None)
    run.result = training.TrainResult(5, "max_steps", "", None, 1.0, 1.0, 1.0, [], {}, trainer=trainer)
    monkeypatch.setattr(training, "save_checkpoint", lambda *a: tmp_path / "checkpoint")
    assert run.save_final(model, None) == tmp_path / "checkpoint"
    gc.collect()
    assert moments() is None and model.weight.grad is None
    assert trainer.optimizer is None and trainer.callback_handler.lr_scheduler is None
