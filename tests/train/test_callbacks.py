"""The Trainer callbacks on their own: who stops training, when, and what each one prints."""

import io
import math
from types import SimpleNamespace

import torch

from nbutils.train import callbacks, curves
from nbutils.train.callbacks import NanGuard, StopReason


def _control():
    return SimpleNamespace(should_training_stop=False, should_save=False)


def test_stop_reason_keeps_the_first_writer(capsys):
    stop = StopReason()
    stop.set("nan", "loss is nan")
    stop.set("time_budget", "later")
    assert (stop.reason, stop.detail) == ("nan", "loss is nan")
    assert capsys.readouterr().err == "[train] stopping: loss is nan\n"  # printed once


def test_agree_is_the_flag_itself_in_one_process():
    assert callbacks.agree(True) is True and callbacks.agree(False) is False


def test_time_budget_stops_when_two_steps_and_a_save_no_longer_fit():
    ticks = iter([0, 10, 20, 40, 45])  # steps at 10 s, save took 10 s after the step at 20
    budget = callbacks.TimeBudget(1.0, StopReason(), start=0, clock=lambda: next(ticks))
    control, state = _control(), SimpleNamespace(global_step=1)
    budget.on_step_end(None, state, control)  # t=0: no step time known yet
    budget.on_step_end(None, state, control)  # t=10: 50 s left >= 2 x 10 s
    budget.on_step_end(None, state, control)  # t=20
    budget.on_save(None, state, control)  # t=40: a save takes 20 s
    assert not control.should_training_stop
    state.global_step = 4
    budget.on_step_end(None, state, control)  # t=45: 15 s left < two steps of 25 s (the last one) + a 20 s save
    assert control.should_training_stop and control.should_save and budget.stop.reason == "time_budget"
    assert "time budget of 1 min nearly used at step 4" in budget.stop.detail


def test_nan_guard_tolerates_fp16_scaler_skips_but_not_nan_loss():
    def log(guard, fp16, **logs):
        control = SimpleNamespace(should_training_stop=False, should_save=True)
        guard.on_log(SimpleNamespace(fp16=fp16), SimpleNamespace(global_step=7), control, logs=logs)
        return control.should_training_stop

    guard = NanGuard(StopReason())
    # fp16: an inf grad norm means the grad scaler skipped the step; only a run of them is a failure.
    assert [log(guard, True, loss=1.0, grad_norm=math.inf) for _ in range(3)] == [False, False, True]
    assert guard.stop.reason == "nan"
    assert log(NanGuard(StopReason()), False, loss=1.0, grad_norm=math.inf)  # fp32/bf16: no scaler, a failure
    assert log(NanGuard(StopReason()), True, loss=math.nan, grad_norm=1.0)
    assert log(NanGuard(StopReason()), True, eval_loss=math.nan)  # weights gone bad since the last training log
    healed = NanGuard(StopReason())
    assert not any(log(healed, True, loss=1.0, grad_norm=n) for n in (math.inf, math.inf, 1.0, math.inf, math.inf))


def test_nan_guard_checks_the_weights_before_a_save():
    model = torch.nn.Linear(2, 2)
    guard, control = NanGuard(StopReason()), _control()
    control.should_save = True
    guard.on_step_end(None, SimpleNamespace(global_step=3), control, model=model)
    assert not control.should_training_stop and callbacks.finite_trainables(model)
    model.weight.data[0, 0] = math.nan
    guard.on_step_end(None, SimpleNamespace(global_step=4), control, model=model)
    assert control.should_training_stop and not control.should_save and "weights hold NaN/inf at step 4" in guard.stop.detail
    model.weight.requires_grad_(False)  # a frozen NaN is not the adapter's
    assert callbacks.finite_trainables(model)


def _state(step, tokens=0, max_steps=20):
    return SimpleNamespace(global_step=step, max_steps=max_steps, num_input_tokens_seen=tokens, is_world_process_zero=True)


def test_progress_log_prints_one_line_per_interval_and_one_per_evaluation():
    out = io.StringIO()
    log = callbacks.ProgressLog(stream=out)
    log.on_train_begin(None, _state(0), None)
    log.on_log(None, _state(10, tokens=5000), None, logs={"loss": 1.23456, "grad_norm": 0.5})
    log.on_log(None, _state(10, tokens=5000), None, logs={"eval_loss": 1.5})
    log.on_log(None, _state(10, tokens=5000), None, logs={"eval_loss": 1.5})  # the final evaluate() at the same step
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[train] step 10/20  loss 1.2346  tokens/s ")
    assert "ETA " in lines[0] and lines[1] == "[eval] step 10/20  eval loss 1.5000"


def test_probe_stops_after_patience_degenerate_evaluations_in_a_row():
    verdicts = iter([True, False, True, True])
    probe = callbacks.Probe(lambda model: next(verdicts), StopReason())
    control = _control()
    for step in (5, 10, 15):
        probe.on_evaluate(None, SimpleNamespace(global_step=step), control, model=object())
        assert not control.should_training_stop
    probe.on_evaluate(None, SimpleNamespace(global_step=20), control, model=object())
    assert control.should_training_stop and control.should_save and probe.stop.reason == "degenerate"
    probe.on_evaluate(None, SimpleNamespace(global_step=25), control, model=None)  # no model: nothing to probe


def test_a_probe_streak_ending_at_a_nan_evaluation_asks_for_no_save():
    """The Trainer calls on_log (NanGuard: a NaN eval loss clears the save) before on_evaluate (the probe): the
    probe's streak ending there must not ask for that save again, or a NaN stop would take it as the last good one."""
    stop = StopReason()
    guard, probe, control = NanGuard(stop), callbacks.Probe(lambda model: True, stop, patience=1), _control()
    control.should_save = True  # the evaluation's step is a save step
    guard.on_log(SimpleNamespace(fp16=True), SimpleNamespace(global_step=10), control, logs={"eval_loss": math.nan})
    probe.on_evaluate(None, SimpleNamespace(global_step=10), control, model=object())
    assert control.should_training_stop and not control.should_save and stop.reason == "nan"


def test_probe_gives_no_verdict_on_the_model_before_the_first_step():
    calls = []
    probe = callbacks.Probe(lambda model: calls.append(model) or True, StopReason(), patience=1)
    control = _control()
    probe.on_train_begin(None, SimpleNamespace(global_step=0), control)
    probe.on_evaluate(None, SimpleNamespace(global_step=0), control, model=object())  # eval_on_start: the base model
    assert not calls and not control.should_training_stop
    probe.on_evaluate(None, SimpleNamespace(global_step=5), control, model=object())
    assert len(calls) == 1 and control.should_training_stop


def test_a_resumed_run_notes_its_resume_step_in_the_log_history():
    """curves.run_loss weighs the resumed run's first log by the steps since the resume: the step goes in the history."""
    fresh, resumed = (SimpleNamespace(global_step=step, log_history=[{"step": 10}][:step], max_steps=20,
                                      compute_steps=lambda args, max_steps: None) for step in (0, 13))
    for state in (fresh, resumed):
        callbacks.ResumedState().on_train_begin(None, state, _control())
    assert fresh.log_history == [] and resumed.log_history == [{"step": 10}, {"step": 13, curves.RESUMED: True}]


def test_peak_memory_measures_nothing_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    peak = callbacks.PeakMemory(after_steps=1, planned_gb=2.0)
    peak.on_step_end(None, _state(1), None)
    peak.on_train_end(None, _state(1), None)
    assert peak.steps == 1 and peak.peak_gb is None and peak.run_peak_gb is None and capsys.readouterr().out == ""


def test_peak_memory_prints_the_measured_peak_beside_the_plan_without_the_cuda_context(monkeypatch):
    """torch.cuda.max_memory_allocated never sees the CUDA context: the line compares it with the plan's allocated_gb
    and says so."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 1.5 * 2**30)
    out = io.StringIO()
    callbacks.PeakMemory(after_steps=1, planned_gb=1.4, stream=out).on_step_end(None, _state(1), None)
    assert out.getvalue() == "[memory] peak allocated after 1 steps: 1.50 GB; planned 1.40 GB (without the CUDA context)\n"


def test_a_resumed_run_evaluates_and_saves_at_its_own_intervals(tmp_path):
    """The Trainer's resume loads the checkpoint's TrainerState, the smoke run's every 5 steps included; this run's
    arguments set them again before the first step, as a fresh run gets them."""
    from transformers import TrainerState, TrainingArguments

    smoke = TrainerState(eval_steps=5, save_steps=5, logging_steps=5, max_steps=10)
    smoke.save_to_json(str(tmp_path / "trainer_state.json"))
    state = TrainerState.load_from_json(str(tmp_path / "trainer_state.json"))  # what the Trainer does on resume
    state.max_steps = 1234
    args = TrainingArguments(output_dir=str(tmp_path), eval_steps=20, save_steps=40, logging_steps=10, use_cpu=True,
                             report_to=[])
    callbacks.ResumedState().on_train_begin(args, state, _control())
    assert (state.eval_steps, state.save_steps, state.logging_steps) == (20, 40, 10)


def test_a_nan_stop_names_the_precision_this_gpu_can_use():
    """Under fp16 a NaN is usually an overflow: a T4 (no native bf16) is told precision="fp32", a GPU with bf16 is
    told bf16; a bf16/fp32 run is told to lower the learning rate, with no precision advice."""
    def stop_on(capability, fp16):
        guard, control = NanGuard(StopReason(), capability=capability), _control()
        guard.on_log(SimpleNamespace(fp16=fp16), SimpleNamespace(global_step=3), control, logs={"loss": math.nan})
        return guard.stop.detail

    t4 = stop_on((7, 5), True)
    assert 'precision="fp32"' in t4 and "bf16" not in t4.replace("no native bf16", "") and "learning_rate" in t4
    assert 'precision="bf16"' in stop_on((8, 0), True)
    assert stop_on((7, 5), False).endswith("lower learning_rate")
    guard, control = NanGuard(StopReason(), capability=(7, 5)), _control()
    model = torch.nn.Linear(2, 2)
    model.weight.data[0, 0] = math.nan
    control.should_save = True
    guard.on_step_end(SimpleNamespace(fp16=True), SimpleNamespace(global_step=4), control, model=model)
    assert 'precision="fp32"' in guard.stop.detail  # the weights' check knows the run's fp16 from the step's arguments
