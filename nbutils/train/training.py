"""QLoRA training with the HF Trainer: resumable, time-boxed, NaN-guarded, and never losing the adapter.

Output folder layout (what 03 and people read):
  trainer/checkpoint-N/   Trainer checkpoints (adapter, optimizer, scheduler, RNG, trainer state,
                          tokenizer, run config); only those with a COMPLETE marker count
  checkpoint/             the final adapter + tokenizer + run_config.json (atomic, COMPLETE marker)
  training_summary.json   global_step, stopped_reason, resumed_from_step, losses, checkpoint_dir, ...
  learning_curves.png     train and eval loss, with the diagnosis in the title
Under several processes (accelerate/torchrun) only the main process writes these files.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from transformers import TrainerCallback

from nbutils.chain import MARKERS
from nbutils.data import batching
from nbutils.train import checkpoints, curves, diskspace, faultpoints, runlock, runsettings
from nbutils.train import loss as lm_loss
from nbutils.train.callbacks import NanGuard, PeakMemory, Probe, ProgressLog, StopReason, TimeBudget, agree
from nbutils.train.checkpoints import unwrap
from nbutils.train.trainconfig import TrainConfig

__all__ = ["TrainResult", "train", "training_arguments", "run_config", "progress_mode", "write_summary",
           "save_checkpoint"]


@dataclass
class TrainResult:
    """What `train` hands the notebook's later steps; write_summary turns the JSON part into training_summary.json."""

    global_step: int
    stopped_reason: str  # max_steps | completed | time_budget | nan | degenerate | disk_full
    stop_detail: str
    resumed_from_step: int | None
    train_loss: float
    eval_loss: float
    seconds: float
    log_history: list[dict]
    settings: dict  # every setting that changes the weights (its hash goes in the summary)
    cfg: TrainConfig | None = None
    peak_memory_gb: float | None = None  # after the first steps, on a GPU
    run_peak_memory_gb: float | None = None
    replica_checksums: list[float] | None = None  # one per process: equal means the replicas stayed in sync
    is_main: bool = True  # the process that writes the files
    trainer: object = field(default=None, repr=False)  # the live Trainer (its state goes into the final checkpoint)


def training_arguments(cfg: TrainConfig, output_dir: str | Path, grouped: bool = True, progress: str = "log",
                       loss_kind: str = "plain"):
    """TrainingArguments from our config: fp16/bf16 from the precision rule, never both."""
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(output_dir), max_steps=cfg.max_steps, num_train_epochs=cfg.num_epochs,
        per_device_train_batch_size=cfg.per_device_batch_size, per_device_eval_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.grad_accum, learning_rate=cfg.learning_rate, optim=cfg.optim,
        lr_scheduler_type="cosine", warmup_steps=cfg.warmup_steps, logging_steps=cfg.logging_steps,
        eval_strategy=cfg.eval_strategy, eval_steps=cfg.eval_steps, save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps, save_total_limit=None,  # our rotation: by step, verified (MarkComplete)
        load_best_model_at_end=cfg.load_best_model_at_end,
        fp16=cfg.precision == "fp16", bf16=cfg.precision == "bf16", seed=cfg.seed, data_seed=cfg.seed,
        train_sampling_strategy="group_by_length" if grouped else "random", length_column_name="length",
        report_to=[], disable_tqdm=progress not in ("widgets", "both"), remove_unused_columns=False, dataloader_num_workers=0,
        include_num_input_tokens_seen="non_padding", use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False, use_liger_kernel=loss_kind == "liger",
    )


def run_config(cfg: TrainConfig, versions: dict, manifest: dict, **parameters) -> dict:
    """What a checkpoint carries about its run: every parameter, package versions (preflight's env.versions),
    the data's hash."""
    from dataclasses import asdict

    return {"parameters": {**parameters, **asdict(cfg)}, "versions": dict(versions),
            "data_manifest_hash": manifest.get("content_hash")}


def progress_mode(progress: str = "auto") -> str:
    """'log' (plain lines: step, loss, tokens/s, ETA) in a batch run, where widgets show nothing;
    'both' (widgets and the lines) in an interactive session: a local papermill run looks
    interactive (papermill sets nothing the kernel can see), and the lines keep its log readable."""
    if progress not in ("auto", "widgets", "log", "both"):
        raise ValueError(f"progress={progress!r} is not one of auto, widgets, log, both")
    if progress != "auto":
        return progress
    from nbutils.runtime.environment import detect_platform

    return "log" if detect_platform().is_batch else "both"


class MarkComplete(TrainerCallback):
    """After the Trainer wrote checkpoint-N: add the run config, the checksums and the COMPLETE marker, then
    rotate by step keeping the newest `keep` verified checkpoints (main process only)."""

    def __init__(self, run_config: dict, settings: dict | None = None, keep: int | None = 2):
        self.run_config, self.settings, self.keep, self.verified = run_config, settings or {}, keep, set()

    def on_save(self, args, state, control, **kw):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every rank has written its rng_state_<rank>.pth before checksums.json lists the folder
        if not state.is_world_process_zero:
            return
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        (path / "run_config.json").write_text(json.dumps(self.run_config, indent=2, default=str))
        faultpoints.point("save")
        checkpoints.mark_complete(path, state.global_step, self.settings)
        self.verified.add(str(path))  # just hashed into checksums.json
        checkpoints.rotate(args.output_dir, self.keep, state.best_model_checkpoint, self.verified)


class _BarOnly(TrainerCallback):
    """The Trainer's tqdm.auto bar without the dict it writes under the bar at every log: ProgressLog's line says it."""

    def __init__(self):
        from transformers.trainer_callback import ProgressCallback

        self.bar = ProgressCallback()

    def on_train_begin(self, args, state, control, **kw):
        self.bar.on_train_begin(args, state, control, **kw)

    def on_step_end(self, args, state, control, **kw):
        self.bar.on_step_end(args, state, control, **kw)

    def on_train_end(self, args, state, control, **kw):
        self.bar.on_train_end(args, state, control, **kw)


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


def train(model, tokenizer, train_ds, eval_ds, cfg: TrainConfig, output_dir: str | Path, plan: dict | None = None,
          run_config: dict | None = None, probe=None, progress: str = "log", clock=time.time,
          session_start: float | None = None, memory_estimate_gb: float | None = None,
          callbacks: list | None = None) -> TrainResult:
    """Train (resuming from the newest verified checkpoint if any) and return what the summary needs.

    The main process holds the output_dir lock until write_summary. probe(model) -> True at an evaluation means
    degenerate generations; `callbacks`: extra TrainerCallbacks; clock/session_start drive the time budget."""
    output_dir = Path(output_dir)
    plan = plan or {"strategy": "length_grouped"}
    run_config = runsettings.with_lora(run_config, model)  # the LoraConfig 02 built: an edit there reaches the resume check
    settings = runsettings.settings(cfg, run_config)
    stop = StopReason()
    peak = PeakMemory(estimate_gb=memory_estimate_gb)
    probe_cb = Probe(probe, stop) if probe is not None else None
    callbacks = [MarkComplete(run_config, settings, cfg.save_total_limit),
                 TimeBudget(cfg.time_budget_min, stop, session_start, clock),
                 NanGuard(stop), peak, *([ProgressLog()] if progress in ("log", "both") else []),
                 *([probe_cb] if probe_cb else []), *(callbacks or [])]
    trainer, loss_kind = _make_trainer(model, tokenizer, train_ds, eval_ds, cfg, output_dir, plan, progress, callbacks)
    main = trainer.is_world_process_zero()
    if main:  # one log: ranks above 0 print nothing
        print(f"[train] loss: {loss_kind} (chunked_loss={cfg.chunked_loss!r})", flush=True)
    _lock(output_dir, main)
    try:
        resume = _pick_resume(cfg, output_dir, settings, model, main)
        resume_step = checkpoints.checkpoint_step(resume) if resume else None  # read now: rotation may delete it
        faultpoints.point("train")
        t0 = time.time()
        if resume is not None and 0 < cfg.max_steps <= resume_step:
            # Nothing left to train (a rerun after the run finished); Trainer would still take one more step.
            restore_finished(trainer, resume)
        else:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except BaseException as e:  # KeyboardInterrupt too: an interrupted cell must not keep output_dir locked
        if main and diskspace.is_no_space(e):
            _stop_on_disk_full(trainer, cfg, output_dir, settings, e)
        if main:
            runlock.release(output_dir)
        raise
    reason = stop.reason
    if reason is None:
        reason = "max_steps" if cfg.max_steps > 0 and trainer.state.global_step >= cfg.max_steps else "completed"
    if probe_cb is not None:
        trainer.remove_callback(probe_cb)  # the final evaluation is for the numbers, not for stopping
    metrics = trainer.evaluate() if reason != "nan" else {"eval_loss": float("nan")}
    return TrainResult(
        trainer.state.global_step, reason, stop.detail, resume_step, run_loss(trainer.state.log_history),
        metrics["eval_loss"], round(time.time() - t0, 1), trainer.state.log_history, settings, cfg,
        peak.peak_gb, peak.run_peak_gb, replica_checksums(model), main, trainer)


def _make_trainer(model, tokenizer, train_ds, eval_ds, cfg: TrainConfig, output_dir: Path, plan: dict, progress: str,
                  callbacks: list):
    """The Trainer (or the chunked-loss Trainer) over the planned batches; returns it and the loss it trains with."""
    from transformers import Trainer

    loss_kind = lm_loss.choose(cfg.chunked_loss, model_config=unwrap(model).config,
                               head=unwrap(model).get_output_embeddings())
    trainer = (lm_loss.trainer_class() if loss_kind == "chunked" else Trainer)(
        model=model, processing_class=tokenizer,
        args=training_arguments(cfg, output_dir / "trainer", grouped=plan["strategy"] != "packed", progress=progress,
                                loss_kind=loss_kind),
        train_dataset=_rows(train_ds, plan), eval_dataset=_rows(eval_ds, plan),  # eval packed too: one collator for both
        data_collator=batching.make_collator(plan, tokenizer.pad_token_id, _attention(model)), callbacks=callbacks,
    )
    _one_progress_line(trainer)
    return trainer, loss_kind


def _rows(ds, plan: dict):
    from datasets import Dataset

    rows = ds.select_columns(["input_ids", "labels", "length"])
    return Dataset.from_list(batching.pack(list(rows), plan["block_size"])) if plan["strategy"] == "packed" else rows


def _attention(model) -> str:
    """The model's attention implementation: the packed mask differs for eager (Gemma-2) and sdpa."""
    return getattr(getattr(checkpoints.unwrap(model), "config", None), "_attn_implementation", None) or "sdpa"


def _lock(output_dir: Path, main: bool) -> None:
    """The main process takes the output_dir lock; if it is refused, every rank stops (the others would wait forever)."""
    refused = None
    if main:
        try:
            runlock.acquire(output_dir)
        except runlock.RunLockedError as e:
            refused = e
    if agree(refused is not None):
        raise refused or runlock.RunLockedError(f"{output_dir} is in use by another run (see the first process's error)")


def _pick_resume(cfg: TrainConfig, output_dir: Path, settings: dict, model, main: bool) -> Path | None:
    """The newest verified checkpoint of this same run, or None; refuses one trained with other settings."""
    trainer_dir = output_dir / "trainer"
    need = diskspace.needed_mb(diskspace.checkpoint_mb(sum(p.numel() for p in model.parameters() if p.requires_grad)),
                               cfg.save_total_limit)
    problem = diskspace.check(output_dir, need, cfg.save_total_limit) if main else None
    if agree(problem is not None):  # every rank stops, as for the lock
        raise diskspace.DiskFullError(problem or f"disk full at {output_dir} (see the first process's error)")
    if not cfg.resume:
        if main and checkpoints.checkpoint_dirs(trainer_dir):
            aside = trainer_dir.with_name(f"trainer.before-{time.strftime('%Y%m%d-%H%M%S')}")
            trainer_dir.rename(aside)
            print(f"[train] resume=False: the earlier checkpoints moved to {aside}; delete it if not needed")
        return None
    resume = checkpoints.find_resumable(output_dir)
    if resume is not None:
        changed = checkpoints.resume_mismatch(resume, settings)
        longer = [c for c in changed if c.split(":")[0] in checkpoints.EXTENDABLE]
        if longer:
            print(f"[train] training longer ({'; '.join(longer)}): the learning-rate schedule is recomputed for the new "
                  "length from here on, so the result differs from a run planned that long from the start")
        changed = [c for c in changed if c not in longer]
        if changed:
            raise checkpoints.ResumeMismatchError(
                f"{resume} was trained with other settings, and resuming it would mix two runs:\n- "
                + "\n- ".join(changed) + "\nUse a new output_dir to keep both, or resume=False to start over in this one.")
        print(f"[train] resuming from {resume} (step {checkpoints.checkpoint_step(resume)}, verified)")
    if main:
        checkpoints.clean_unverified(trainer_dir, checkpoints.checkpoint_step(resume) if resume else None)
    return resume


def _stop_on_disk_full(trainer, cfg: TrainConfig, output_dir: Path, settings: dict, error: BaseException) -> None:
    """A save ran out of disk: remove the partial checkpoint, write the summary (stopped_reason="disk_full")
    and raise one clear DiskFullError instead of the writer's traceback."""
    trainer_dir = output_dir / "trainer"
    last, _ = checkpoints.newest_verified(trainer_dir)
    checkpoints.clean_unverified(trainer_dir, checkpoints.checkpoint_step(last) if last else None)
    size = sum(p.stat().st_size for p in last.rglob("*") if p.is_file()) / diskspace.MB if last else \
        diskspace.checkpoint_mb(sum(p.numel() for p in trainer.model.parameters() if p.requires_grad))
    kept = f"{last} (step {checkpoints.checkpoint_step(last)}) is intact" if last else "no checkpoint was saved yet"
    msg = diskspace.message(trainer_dir, diskspace.needed_mb(size, cfg.save_total_limit), cfg.save_total_limit,
                            f". {kept}; rerun after freeing space to resume. (The writer said: {error})")
    history = [h for h in trainer.state.log_history if not last or h.get("step", 0) <= checkpoints.checkpoint_step(last)]
    result = TrainResult(checkpoints.checkpoint_step(last) if last else 0, "disk_full", msg, None, run_loss(history),
                         float("nan"), 0.0, history, settings)
    try:
        write_summary(output_dir, result, cfg, None)
    except OSError as e:
        print(f"[train] could not write the summary either: {e}", flush=True)
    raise diskspace.DiskFullError(msg) from None


def run_loss(log_history: list[dict]) -> float:
    """Mean training loss of the whole run, across resumes: the logged losses weighted by the steps each covers."""
    logs = sorted((h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h)
    total, steps, prev = 0.0, 0, 0
    for step, loss in logs:
        total, steps, prev = total + loss * (step - prev), steps + (step - prev), step
    return total / steps if steps else float("nan")


def restore_finished(trainer, checkpoint: Path) -> None:
    """Load a finished run's adapter weights and trainer state without training."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import TrainerState

    set_peft_model_state_dict(checkpoints.unwrap(trainer.model), load_file(Path(checkpoint) / "adapter_model.safetensors"))
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


def save_checkpoint(model, tokenizer, output_dir: str | Path, run_config: dict,
                    result: TrainResult | None = None) -> Path | None:
    """The final checkpoint in <output_dir>/checkpoint; after a NaN stop, a copy of the last verified
    Trainer checkpoint instead (None when there is none: NaN weights are never saved as final).
    A full disk: the summary is written with stopped_reason="disk_full", then one DiskFullError."""
    output_dir = Path(output_dir)
    dest = output_dir / "checkpoint"
    if result and result.stopped_reason == "nan":
        good, skipped = checkpoints.newest_verified(output_dir / "trainer", resumable=False)
        checkpoints.report_skipped(skipped)
        if good is None:
            print("[train] NaN before the first verified checkpoint: nothing worth saving", flush=True)
            return None
        print(f"[train] NaN: the final checkpoint is {good.name}, the last verified one", flush=True)
        return checkpoints.copy_complete(good, dest)
    from dataclasses import asdict

    state = asdict(result.trainer.state) if result and result.trainer is not None else None
    try:
        return checkpoints.save_final(model, tokenizer, dest, runsettings.with_lora(run_config, model), state,
                                      result.settings if result else None)
    except diskspace.DiskFullError as e:
        if result and result.cfg is not None:
            write_summary(output_dir, replace(result, stopped_reason="disk_full", stop_detail=str(e)), result.cfg, None)
        raise


def write_summary(output_dir: str | Path, result: TrainResult, cfg: TrainConfig, checkpoint_dir: Path | None,
                  memory_plan: dict | None = None) -> dict:
    """training_summary.json and learning_curves.png: the facts 03 and people read about this run.
    The end of the run: the output_dir lock is released here."""
    from dataclasses import asdict

    output_dir = Path(output_dir)
    curves.plot(result.log_history, output_dir / "learning_curves.png")
    summary = {
        "global_step": result.global_step, "stopped_reason": result.stopped_reason,
        "stop_detail": result.stop_detail, "resumed_from_step": result.resumed_from_step,
        "train_loss": result.train_loss, "eval_loss": result.eval_loss,
        # Relative, so 03 finds it wherever the folder is mounted; "checkpoint" even when nothing was
        # saved (NaN before the first checkpoint): checkpoint_complete is what says whether to use it.
        "checkpoint_dir": os.path.relpath(checkpoint_dir or output_dir / "checkpoint", output_dir),
        "checkpoint_complete": bool(checkpoint_dir) and not checkpoints.problems(checkpoint_dir),
        "settings_hash": runsettings.settings_hash(result.settings or {}),
        "diagnosis": curves.diagnose(result.log_history), "seconds": result.seconds,
        "memory_plan": memory_plan, "measured_peak_gb": result.peak_memory_gb,
        "run_peak_gb": result.run_peak_memory_gb, "config": asdict(cfg),
        "world_size": len(result.replica_checksums or [0]), "replica_checksums": result.replica_checksums,
    }
    try:
        (output_dir / "log_history.json").write_text(json.dumps(result.log_history, indent=2))
        (output_dir / MARKERS["train_qlora"]).write_text(json.dumps(summary, indent=2, default=str))  # the marker: last
    finally:
        runlock.release(output_dir)
    return summary
