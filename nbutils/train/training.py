"""One QLoRA training run around the notebook's own Trainer: resumable, time-boxed, NaN-guarded, never losing the adapter.

02 builds the recipe itself (BitsAndBytesConfig, LoraConfig, TrainingArguments, Trainer) and hands this module
the Trainer; a `Run` supplies the callbacks it passes in and the session around `trainer.train()`:
    run = Run(out, record, time_budget_min=..., probe=...)
    trainer = Trainer(..., callbacks=run.callbacks)
    with run.session(trainer) as resume_from:   # the output_dir lock, the disk, the checkpoint to resume
        if not run.finished:
            trainer.train(resume_from_checkpoint=resume_from)
    run.save_final(model, tokenizer); run.write_summary(...)

Output folder layout (what 03 and people read):
  trainer/checkpoint-N/   Trainer checkpoints (adapter, optimizer, scheduler, RNG, trainer state,
                          tokenizer, run config); only those with a COMPLETE marker count
  checkpoint/             the final adapter + tokenizer + run_config.json (atomic, COMPLETE marker)
  training_summary.json   global_step, stopped_reason, resumed_from_step, losses, checkpoint_dir, ...
  learning_curves.png     train and eval loss, with the diagnosis in the title
Under several processes (accelerate/torchrun) only the main process writes these files.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from transformers import TrainerCallback

from nbutils.chain import MARKERS
from nbutils.runtime import limits
from nbutils.train import atomic, checkpoints, curves, diskspace, faultpoints, recipe, reports, runlock, runsettings, timeplan
from nbutils.train import loss as lm_loss
from nbutils.train.callbacks import NanGuard, PeakMemory, Probe, ProgressLog, ResumedState, StartEvalRng, StopReason, TimeBudget, agree
from nbutils.train.modeling import release_training, unwrap

__all__ = ["TrainResult", "Run", "write_summary", "save_checkpoint"]
# What 02 and 05 write about their final checkpoint, the stage's marker first (05's summary lists the others).
REPORTS = (MARKERS["preference"], MARKERS["eval"], MARKERS["train_qlora"])


@dataclass
class TrainResult:
    """What a run hands the notebook's later steps; write_summary turns the JSON part into training_summary.json."""

    global_step: int
    stopped_reason: str  # max_steps | completed | time_budget | nan | degenerate | disk_full
    stop_detail: str
    resumed_from_step: int | None
    train_loss: float
    eval_loss: float
    seconds: float
    log_history: list[dict]
    settings: dict  # every setting that changes the weights (its hash goes in the summary)
    run_config: dict = field(default_factory=dict)  # what every checkpoint of the run records
    peak_memory_gb: float | None = None  # after the first steps, on a GPU
    run_peak_memory_gb: float | None = None
    replica_checksums: list[float] | None = None  # one per process: equal means the replicas stayed in sync
    is_main: bool = True  # the process that writes the files
    trainer: object = field(default=None, repr=False)  # the live Trainer (its state goes into the final checkpoint)
    time_plan: dict | None = None  # the time plan made after the calibration, with the actual time beside it
    time_plan_skipped: str | None = None  # why there is none (time_plan=False, a run too short to plan)
    resumed_from: str | None = None  # the checkpoint this session resumed: a NaN stop before its first save falls back on it


class MarkComplete(TrainerCallback):
    """After the Trainer wrote checkpoint-N: add the run config, the checksums and the COMPLETE marker, then
    rotate by step keeping the newest `keep` verified checkpoints (main process only). The run config and the
    settings are the Run's, known once its session starts. Weights holding NaN/inf are never marked: a callback
    may ask for a save after NanGuard looked (the time plan's calibration does), and a complete checkpoint is
    what a NaN stop later copies as the final one; that folder is removed and training stops (reason "nan"). Nor is
    a save asked for after a NaN stop marked (a NaN eval loss at the evaluation that ends the probe's streak)."""

    def __init__(self, run: Run):
        self.run, self.verified = run, set()

    def on_save(self, args, state, control, model=None, **kw):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every rank has written its rng_state_<rank>.pth before checksums.json lists the folder
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.run.nan.bad_weights(model, control, state.global_step) or self.run.stop.reason == "nan":
            if state.is_world_process_zero and path.exists():
                checkpoints.discard(path)
            return
        if not state.is_world_process_zero:
            return
        (path / "run_config.json").write_text(json.dumps(self.run.run_config, indent=2, default=str))
        faultpoints.point("save")
        checkpoints.mark_complete(path, state.global_step, self.run.settings)
        self.verified.add(str(path))  # just hashed into checksums.json
        checkpoints.rotate(args.output_dir, self.run.keep_checkpoints, state.best_model_checkpoint, self.verified)


class Run:
    """The suite's side of one training run: the callbacks 02 passes to its Trainer and the session around
    `trainer.train()` (one run per output_dir, the disk checked, resume from the newest verified checkpoint of
    the same settings, a full disk as one clear error, the stop reason and the final evaluation).

    record: what the checkpoints record beyond what is read off the model and the Trainer (planning.record:
    base model, precision, the data's hash, versions). probe(model) -> True at an evaluation means degenerate
    generations; clock/session_start drive the time budget (tests fake them); callbacks: extra TrainerCallbacks;
    time_plan: time the first steps and print the time plan there (nbutils.train.timeplan); memory_estimate_gb: the
    memory plan's `allocated_gb`, printed beside the peak torch measures (which never counts the CUDA context)."""

    def __init__(self, output_dir: str | Path, record: dict, *, time_budget_min="auto", keep_checkpoints: int | None = 2,
                 resume: bool = True, probe=None, progress: str = "log", memory_estimate_gb: float | None = None,
                 clock=time.time, session_start: float | None = None, callbacks: list | None = None,
                 time_plan: bool = True):
        self.output_dir, self.record, self.resume = Path(output_dir), dict(record), resume
        self.run_config, self.settings, self.keep_checkpoints = dict(record), {}, keep_checkpoints
        self.stop, self.progress = StopReason(), progress
        self.peak, self.nan = PeakMemory(planned_gb=memory_estimate_gb), NanGuard(self.stop)
        self.timelog = timeplan.TimeLog(time_plan, clock, on_plan=self._plan_time)  # last: its times include the others'
        self.probe = Probe(probe, self.stop, uncounted=self.timelog.forced) if probe is not None else None
        self.budget = TimeBudget(limits.budget_min(time_budget_min), self.stop, session_start, clock)  # "auto": limits.py
        self.callbacks = [ResumedState(), StartEvalRng(), MarkComplete(self), self.budget, self.nan, self.peak,
                          *([ProgressLog()] if progress in ("log", "both") else []), *([self.probe] if self.probe else []),
                          *(callbacks or []), self.timelog]
        self.finished, self.resume_step, self.result, self.is_main, self.time_plan = False, None, None, True, None
        self._trainer, self.resumed_from = None, None

    @contextlib.contextmanager
    def session(self, trainer):
        """Yields the checkpoint to resume from (None: from the start); on leaving, `result` holds the run's."""
        self.run_config = {**recipe.run_config(trainer.model, trainer.args, self.record), "loss": lm_loss.kind_of(trainer)}
        self.settings = runsettings.settings(self.run_config)
        self._trainer = trainer  # the time plan reads its training data
        _one_progress_line(trainer)
        self.is_main = trainer.is_world_process_zero()
        if self.is_main:  # one log: ranks above 0 print nothing
            print(f"[train] loss: {self.run_config['loss']}", flush=True)
        lock(self.output_dir, self.is_main)
        t0 = time.time()
        try:
            resume = _pick_resume(self.output_dir, self.resume, self.keep_checkpoints, self.settings, trainer.model, self.is_main)
            # The step now: rotation may delete the checkpoint (a NaN stop before this session's first save copies it)
            self.resume_step, self.resumed_from = (checkpoints.checkpoint_step(resume), str(resume)) if resume else (None, None)
            if resume is not None:  # the first session evaluated the start; a resumed one would only repeat a step's
                trainer.args.eval_on_start = False
            faultpoints.point("train")
            if resume is not None and 0 < trainer.args.max_steps <= self.resume_step:
                # Nothing left to train (a rerun after the run finished); the Trainer would still take one more step.
                restore_finished(trainer, resume)
                self.finished = True
            yield resume
        except BaseException as e:  # KeyboardInterrupt too: an interrupted cell must not keep output_dir locked
            if self.is_main and diskspace.is_no_space(e):
                _stop_on_disk_full(trainer, self, e)
            if self.is_main:
                runlock.release(self.output_dir)
            raise
        self.result = self._finish(trainer, time.time() - t0)

    def _plan_time(self, args, state) -> None:
        """The time plan, at the calibration's last step (TimeLog calls it after that step's save); printed once."""
        rows = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        data = getattr(self._trainer, "train_dataset", None)
        lengths = data["length"] if data is not None and "length" in data.column_names else None
        # An epoch's tokens over its steps (its last batch may be short), else what the timed steps saw.
        per_step = sum(lengths) / math.ceil(len(lengths) / rows) if lengths else \
            statistics.fmean(t for *_, t in self.timelog.timed())
        self.time_plan = timeplan.predict(
            self.timelog, total_steps=state.max_steps, eval_steps=timeplan.every(args, "eval"),
            save_steps=timeplan.every(args, "save"), tokens_per_step=per_step, budget_s=self.budget.budget_s,
            session_start=self.budget.start, limits=limits.for_platform(), batch_size=args.per_device_train_batch_size)
        if state.is_world_process_zero:
            print(f"[time plan] {self.time_plan.limits.describe()}\n{self.time_plan.table()}", flush=True)

    def _finish(self, trainer, seconds: float) -> TrainResult:
        reason = self.stop.reason
        if reason is None:
            max_steps = trainer.args.max_steps
            reason = "max_steps" if max_steps > 0 and trainer.state.global_step >= max_steps else "completed"
        if self.probe is not None:
            trainer.remove_callback(self.probe)  # the final evaluation is for the numbers, not for stopping
        metrics = curves.final_eval(trainer) if reason != "nan" else {"eval_loss": float("nan")}
        planned = self._planned_vs_actual()
        return TrainResult(
            trainer.state.global_step, reason, self.stop.detail, self.resume_step, curves.run_loss(trainer.state.log_history),
            metrics["eval_loss"], round(seconds, 1), trainer.state.log_history, self.settings, self.run_config,
            self.peak.peak_gb, self.peak.run_peak_gb, replica_checksums(trainer.model), self.is_main, trainer,
            time_plan=planned, time_plan_skipped=None if planned else self.timelog.skipped, resumed_from=self.resumed_from)

    def _planned_vs_actual(self) -> dict | None:
        """The time plan beside what the run took (first step to final evaluation) and the calibration's cost."""
        if self.time_plan is None:
            return None
        actual, cost = self.timelog.clock() - self.timelog.train_start, self.timelog.cost_s()
        return {**self.time_plan.record(), "actual_s": round(actual, 2),
                "error": round(self.time_plan.predicted_s / actual - 1, 4), "calibration_cost_s": cost,
                "calibration_share": None if cost is None else round(cost / actual, 4)}

    def save_final(self, model, tokenizer) -> Path | None:
        """The final checkpoint in <output_dir>/checkpoint (see save_checkpoint); then the optimizer's state goes, before
        the checkpoint's verification loads a second base model (modeling.release_training)."""
        ckpt = save_checkpoint(model, tokenizer, self.output_dir, self.result)
        release_training(self.result.trainer if self.result else None)
        return ckpt

    def write_summary(self, checkpoint_dir: Path | None, memory_plan: dict | None = None, release: bool = True) -> dict:
        """training_summary.json and learning_curves.png (see write_summary); releases the output_dir lock unless
        told not to (05 writes its own summary after this one)."""
        return write_summary(self.output_dir, self.result, checkpoint_dir, memory_plan, release)


class _BarOnly(TrainerCallback):
    """The Trainer's tqdm.auto bar without the dict it writes under the bar at every log: ProgressLog's line says it."""

    def __init__(self):
        from transformers.trainer_callback import ProgressCallback

        self.bar = ProgressCallback()  # its bar's events only: its on_log is what writes the dicts
        self.on_train_begin, self.on_step_end, self.on_train_end = self.bar.on_train_begin, self.bar.on_step_end, self.bar.on_train_end


def _one_progress_line(trainer) -> None:
    """One line per interval: ProgressLog's. The Trainer's own dict logs ({'loss': '2.898', 'grad_norm': ...},
    {'train_runtime': ...}, eval dicts) repeat it, so PrinterCallback goes; the bar, when asked for, is tqdm.auto's
    (a widget in Jupyter, text elsewhere) without the dicts, never transformers' notebook bar, which crashes at the
    end of a run stopped in its first steps (1 / None in NotebookProgressBar.update_bar)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    try:
        from transformers.utils.notebook import NotebookProgressCallback
    except ImportError:
        NotebookProgressCallback = ProgressCallback
    bars = [trainer.pop_callback(cls) for cls in (NotebookProgressCallback, ProgressCallback)]
    trainer.pop_callback(PrinterCallback)
    if any(bar is not None for bar in bars):
        trainer.add_callback(_BarOnly())


def lock(output_dir: Path, main: bool = True) -> None:
    """The main process takes the output_dir lock (again: it is re-entrant) and removes what killed runs' writers left
    there (temporary and trash names: the lock says no other run writes); if it is refused, every rank stops (the
    others would wait forever). 02 calls it before loading the model, so a second run is refused in seconds."""
    refused = None
    if main:
        try:
            runlock.acquire(output_dir)
            atomic.clean(output_dir)
        except runlock.RunLockedError as e:
            refused = e
    if agree(refused is not None):
        raise refused or runlock.RunLockedError(f"{output_dir} is in use by another run (see the first process's error)")


def _pick_resume(output_dir: Path, resume: bool, keep: int | None, settings: dict, model, main: bool) -> Path | None:
    """The newest verified checkpoint of this same run, or None; refuses one trained with other settings (a smoke
    run's is moved aside by a real run instead: checkpoints.drop_smoke)."""
    trainer_dir = output_dir / "trainer"
    need = diskspace.needed_mb(diskspace.checkpoint_mb(sum(p.numel() for p in model.parameters() if p.requires_grad)), keep)
    problem = diskspace.check(output_dir, need, keep) if main else None
    if agree(problem is not None):  # every rank stops, as for the lock
        raise diskspace.DiskFullError(problem or f"disk full at {output_dir} (see the first process's error)")
    if not resume:
        if main and checkpoints.checkpoint_dirs(trainer_dir):
            checkpoints.move_aside(trainer_dir, "resume=False")
        return None
    found = checkpoints.find_resumable(output_dir)  # every rank reads and hashes the checkpoints ...
    agree(False)  # ... and waits here until all have, before the main one moves a smoke run's aside or cleans any
    found = checkpoints.drop_smoke(found, trainer_dir, settings, main)
    if found is not None:
        longer = checkpoints.extended(found, settings)
        changed = [c for c in checkpoints.resume_mismatch(found, settings) if c not in longer]
        if changed:
            raise checkpoints.ResumeMismatchError(
                f"{found} was trained with other settings, and resuming it would mix two runs:\n- "
                + "\n- ".join(changed) + "\nUse a new output_dir to keep both, or resume=False to start over in this one.")
        if longer:
            print(f"[train] training longer ({'; '.join(longer)}): the learning-rate schedule is recomputed for the new "
                  "length from here on, so the result differs from a run planned that long from the start")
        print(f"[train] resuming from {found} (step {checkpoints.checkpoint_step(found)}, verified)")
    if main:
        checkpoints.clean_unverified(trainer_dir, checkpoints.checkpoint_step(found) if found else None)
    return found


def _stop_on_disk_full(trainer, run: Run, error: BaseException) -> None:
    """A save ran out of disk: remove the partial checkpoint, write the summary (stopped_reason="disk_full")
    and raise one clear DiskFullError instead of the writer's traceback."""
    trainer_dir = run.output_dir / "trainer"
    last, _ = checkpoints.newest_verified(trainer_dir)
    checkpoints.clean_unverified(trainer_dir, checkpoints.checkpoint_step(last) if last else None)
    size = sum(p.stat().st_size for p in last.rglob("*") if p.is_file()) / diskspace.MB if last else \
        diskspace.checkpoint_mb(sum(p.numel() for p in trainer.model.parameters() if p.requires_grad))
    kept = f"{last} (step {checkpoints.checkpoint_step(last)}) is intact" if last else "no checkpoint was saved yet"
    msg = diskspace.message(trainer_dir, diskspace.needed_mb(size, run.keep_checkpoints), run.keep_checkpoints,
                            f". {kept}; rerun after freeing space to resume. (The writer said: {error})")
    history = [h for h in trainer.state.log_history if not last or h.get("step", 0) <= checkpoints.checkpoint_step(last)]
    result = TrainResult(checkpoints.checkpoint_step(last) if last else 0, "disk_full", msg, None, curves.run_loss(history),
                         float("nan"), 0.0, history, run.settings, run.run_config)
    try:
        write_summary(run.output_dir, result, None)
    except OSError as e:
        print(f"[train] could not write the summary either: {e}", flush=True)
    raise diskspace.DiskFullError(msg) from None


def restore_finished(trainer, checkpoint: Path) -> None:
    """Load a finished run's adapter weights and trainer state without training."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import TrainerState

    set_peft_model_state_dict(unwrap(trainer.model), load_file(Path(checkpoint) / "adapter_model.safetensors"))
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
    print(f"[train] {checkpoint.name} already reached max_steps={trainer.state.max_steps}: nothing left to train")


def replica_checksums(model) -> list[float]:
    """Sum of the trainable (LoRA) weights on every process: equal numbers mean the replicas stayed in sync."""
    import torch
    import torch.distributed as dist

    local = torch.tensor([float(sum(p.detach().double().sum() for p in model.parameters() if p.requires_grad))])
    if not (dist.is_available() and dist.is_initialized()):
        return [local.item()]
    if dist.get_backend() == "nccl":
        local = local.cuda()
    gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [g.item() for g in gathered]


def save_checkpoint(model, tokenizer, output_dir: str | Path, result: TrainResult | None = None) -> Path | None:
    """The final checkpoint in <output_dir>/checkpoint; after a NaN stop, a copy of the last verified
    Trainer checkpoint instead (None when there is none: NaN weights are never saved as final).
    A full disk: the summary is written with stopped_reason="disk_full", then one DiskFullError."""
    output_dir = Path(output_dir)
    dest = output_dir / "checkpoint"
    # The reports describe the checkpoint about to be replaced: they go first, and are written again after it.
    reports.retract(output_dir, REPORTS)
    if result and result.stopped_reason == "nan":
        good = _last_good(output_dir / "trainer", result.resumed_from)
        if good is None:
            print("[train] NaN before the first verified checkpoint: nothing worth saving", flush=True)
            return None
        print(f"[train] NaN: the final checkpoint is a copy of {good}, the last verified one", flush=True)
        return checkpoints.copy_complete(good, dest)
    state = asdict(result.trainer.state) if result and result.trainer is not None else None
    try:
        return checkpoints.save_final(model, tokenizer, dest, result.run_config if result else {}, state,
                                      result.settings if result else None)
    except diskspace.DiskFullError as e:
        if result:
            write_summary(output_dir, replace(result, stopped_reason="disk_full", stop_detail=str(e)), None)
        raise


def _last_good(trainer_dir: Path, resumed_from: str | None) -> Path | None:
    """The newest verified checkpoint of the run: in trainer_dir, or the one this session resumed from when it is newer
    (on Kaggle, an attached earlier output's, when the NaN came before this session's first save)."""
    good, skipped = checkpoints.newest_verified(trainer_dir, resumable=False)
    checkpoints.report_skipped(skipped)
    start = [Path(resumed_from)] if resumed_from and not checkpoints.problems(Path(resumed_from)) else []
    return max(([good] if good else []) + start, key=checkpoints.checkpoint_step, default=None)  # a tie: this run's


def write_summary(output_dir: str | Path, result: TrainResult, checkpoint_dir: Path | None,
                  memory_plan: dict | None = None, release: bool = True) -> dict:
    """training_summary.json and learning_curves.png: the facts 03 and people read about this run, naming the
    checkpoint they describe (step and content hash). The end of the run: the output_dir lock is released here."""
    output_dir = Path(output_dir)
    complete = bool(checkpoint_dir) and not checkpoints.problems(checkpoint_dir)
    summary = {
        "global_step": result.global_step, "stopped_reason": result.stopped_reason,
        "stop_detail": result.stop_detail, "resumed_from_step": result.resumed_from_step,
        "train_loss": result.train_loss, "eval_loss": result.eval_loss,
        # Relative, so 03 finds it wherever the folder is mounted; "checkpoint" even when nothing was
        # saved (NaN before the first checkpoint): checkpoint_complete is what says whether to use it.
        "checkpoint_dir": os.path.relpath(checkpoint_dir or output_dir / "checkpoint", output_dir),
        "checkpoint_complete": complete,
        "checkpoint": reports.identity(checkpoint_dir) if complete else None,
        "written_by": "05_preference" if "method" in (result.run_config or {}) else "02_train_qlora",
        "settings_hash": runsettings.settings_hash(result.settings or {}),
        "diagnosis": curves.diagnose(result.log_history), "seconds": result.seconds,
        "memory_plan": memory_plan, "measured_peak_gb": result.peak_memory_gb,
        "run_peak_gb": result.run_peak_memory_gb, "config": result.run_config,
        "world_size": len(result.replica_checksums or [0]), "replica_checksums": result.replica_checksums,
        "time_plan": result.time_plan,  # planned vs actual: the plan's error after every run
        "time_plan_skipped": result.time_plan_skipped,
    }
    try:
        with atomic.file(output_dir / "learning_curves.png", "the learning curves") as tmp:
            curves.plot(result.log_history, tmp)
        atomic.write_json(output_dir / "log_history.json", result.log_history)
        atomic.write_json(output_dir / MARKERS["train_qlora"], summary)  # the marker: last
    finally:
        if release:
            runlock.release(output_dir)
    return summary

