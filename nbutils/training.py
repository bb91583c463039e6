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
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from nbutils import batching, checkpoints, curves
from nbutils.callbacks import NanGuard, PeakMemory, Probe, ProgressLog, StopReason, TimeBudget
from nbutils.checkpoints import unwrap  # noqa: F401  (re-exported: notebooks call training.unwrap)
from nbutils.train import loss as lm_loss
from nbutils.trainconfig import TrainConfig

__all__ = ["TrainConfig", "train", "training_arguments", "run_config", "progress_mode", "write_summary", "save_checkpoint",
           "unwrap"]


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
        save_steps=cfg.save_steps, save_total_limit=2, load_best_model_at_end=cfg.load_best_model_at_end,
        fp16=cfg.precision == "fp16", bf16=cfg.precision == "bf16", seed=cfg.seed, data_seed=cfg.seed,
        train_sampling_strategy="group_by_length" if grouped else "random", length_column_name="length",
        report_to=[], disable_tqdm=progress not in ("widgets", "both"), remove_unused_columns=False, dataloader_num_workers=0,
        include_num_input_tokens_seen="non_padding", use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False, use_liger_kernel=loss_kind == "liger",
    )


def run_config(cfg: TrainConfig, env: dict, manifest: dict, **parameters) -> dict:
    """What a checkpoint carries about its run: every parameter, package versions, the data's hash."""
    from dataclasses import asdict

    return {"parameters": {**parameters, **asdict(cfg)},
            "versions": {k.removeprefix("version."): v for k, v in env.items() if k.startswith("version.")},
            "data_manifest_hash": manifest.get("content_hash")}


def progress_mode(progress: str = "auto") -> str:
    """'log' (plain lines: step, loss, tokens/s, ETA) in a batch run, where widgets show nothing;
    'both' (widgets and the lines) in an interactive session: a local papermill run looks
    interactive (papermill sets nothing the kernel can see), and the lines keep its log readable."""
    if progress not in ("auto", "widgets", "log", "both"):
        raise ValueError(f"progress={progress!r} is not one of auto, widgets, log, both")
    if progress != "auto":
        return progress
    from nbutils.environment import detect_platform

    return "log" if detect_platform().is_batch else "both"


class MarkComplete(TrainerCallback):
    """After the Trainer wrote checkpoint-N: add the run config and the COMPLETE marker (main process only)."""

    def __init__(self, run_config: dict):
        self.run_config = run_config

    def on_save(self, args, state, control, **kw):
        if not state.is_world_process_zero:
            return
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        (path / "run_config.json").write_text(json.dumps(self.run_config, indent=2, default=str))
        if os.environ.get("NBUTILS_TEST_KILL_IN_SAVE") == str(state.global_step):
            # Test hook: die half-way through a save (a file cut short, no marker), as a SIGKILL would.
            (path / "adapter_model.safetensors").write_bytes(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
        checkpoints.mark_complete(path)


def _plain_tqdm_bar(trainer) -> None:
    """tqdm.auto's bar (a widget in Jupyter, text elsewhere) instead of transformers' notebook bar, which
    crashes at the end of a run stopped in its first steps (1 / None in NotebookProgressBar.update_bar)."""
    from transformers.trainer_callback import ProgressCallback

    try:
        from transformers.utils.notebook import NotebookProgressCallback
    except ImportError:
        return
    if trainer.pop_callback(NotebookProgressCallback) is not None:
        trainer.add_callback(ProgressCallback)


def train(model, tokenizer, train_ds, eval_ds, cfg: TrainConfig, output_dir: str | Path, plan: dict | None = None,
          run_config: dict | None = None, probe=None, progress: str = "log", clock=time.time,
          session_start: float | None = None, memory_estimate_gb: float | None = None,
          callbacks: list | None = None) -> dict:
    """Train (resuming from the latest complete checkpoint if any) and return what the summary needs.

    probe(model) -> bool is called at each evaluation (True: degenerate generations); `callbacks`
    are extra TrainerCallbacks; clock/session_start drive the time budget (fakes in tests).
    """
    from datasets import Dataset
    from transformers import Trainer

    output_dir = Path(output_dir)
    plan = plan or {"strategy": "length_grouped"}
    cols = ["input_ids", "labels", "length"]
    train_rows, eval_rows = train_ds.select_columns(cols), eval_ds.select_columns(cols)
    if plan["strategy"] == "packed":  # eval too: the Trainer uses one collator for both
        train_rows = Dataset.from_list(batching.pack(list(train_rows), plan["block_size"]))
        eval_rows = Dataset.from_list(batching.pack(list(eval_rows), plan["block_size"]))
    stop = StopReason()
    peak = PeakMemory(estimate_gb=memory_estimate_gb)
    probe_cb = Probe(probe, stop) if probe is not None else None
    callbacks = [MarkComplete(run_config or {}), TimeBudget(cfg.time_budget_min, stop, session_start, clock),
                 NanGuard(stop), peak, *([ProgressLog()] if progress in ("log", "both") else []),
                 *([probe_cb] if probe_cb else []), *(callbacks or [])]
    loss_kind = lm_loss.choose(cfg.chunked_loss, model_config=unwrap(model).config,
                               head=unwrap(model).get_output_embeddings())
    trainer = (lm_loss.trainer_class() if loss_kind == "chunked" else Trainer)(
        model=model, processing_class=tokenizer,
        args=training_arguments(cfg, output_dir / "trainer", grouped=plan["strategy"] != "packed", progress=progress,
                                loss_kind=loss_kind),
        train_dataset=train_rows, eval_dataset=eval_rows,
        data_collator=batching.make_collator(plan, tokenizer.pad_token_id), callbacks=callbacks,
    )
    _plain_tqdm_bar(trainer)
    print(f"[train] loss: {loss_kind} (chunked_loss={cfg.chunked_loss!r})", flush=True)
    resume = checkpoints.find_resumable(output_dir) if cfg.resume else None
    if resume is not None:
        changed = checkpoints.resume_mismatch(resume, run_config or {})
        if changed:
            raise ValueError(f"{resume} is from a different run ({'; '.join(changed)}): resuming it would mix "
                             "them. Use a new output_dir, or resume=False to start over in this one.")
        print(f"[train] resuming from {resume}")
    t0 = time.time()
    if resume is not None and 0 < cfg.max_steps <= _step_of(resume):
        # Nothing left to train (a rerun after the run finished); Trainer would still take one more step.
        train_loss = restore_finished(trainer, resume)
    else:
        train_loss = trainer.train(resume_from_checkpoint=str(resume) if resume else None).training_loss
    reason = stop.reason
    if reason is None:
        reason = "max_steps" if cfg.max_steps > 0 and trainer.state.global_step >= cfg.max_steps else "completed"
    if probe_cb is not None:
        trainer.remove_callback(probe_cb)  # the final evaluation is for the numbers, not for stopping
    metrics = trainer.evaluate() if reason != "nan" else {"eval_loss": float("nan")}
    return {
        "replica_checksums": replica_checksums(model),
        "trainer": trainer, "global_step": trainer.state.global_step, "stopped_reason": reason,
        "stop_detail": stop.detail, "resumed_from_step": int(resume.name.split("-")[1]) if resume else None,
        "train_loss": train_loss, "eval_loss": metrics["eval_loss"], "seconds": round(time.time() - t0, 1),
        "log_history": trainer.state.log_history, "peak_memory_gb": peak.peak_gb, "run_peak_memory_gb": peak.run_peak_gb,
        "is_main": trainer.is_world_process_zero(),
    }


def _step_of(checkpoint: Path) -> int:
    return json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]


def restore_finished(trainer, checkpoint: Path) -> float:
    """Load a finished run's adapter weights and trainer state without training; its mean logged loss."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import TrainerState

    set_peft_model_state_dict(checkpoints.unwrap(trainer.model), load_file(Path(checkpoint) / "adapter_model.safetensors"))
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"[train] {checkpoint.name} already reached max_steps={trainer.state.max_steps}: nothing left to train")
    return sum(losses) / len(losses) if losses else float("nan")


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


def save_checkpoint(model, tokenizer, output_dir: str | Path, run_config: dict, result: dict | None = None) -> Path | None:
    """The final checkpoint in <output_dir>/checkpoint; after a NaN stop, a copy of the last good
    Trainer checkpoint instead (None when there is none: NaN weights are never saved as final)."""
    dest = Path(output_dir) / "checkpoint"
    if result and result["stopped_reason"] == "nan":
        good = checkpoints.trainer_checkpoints(Path(output_dir) / "trainer")
        if not good:
            print("[train] NaN before the first complete checkpoint: nothing worth saving", flush=True)
            return None
        print(f"[train] NaN: the final checkpoint is {good[-1].name}, the last good one", flush=True)
        return checkpoints.copy_complete(good[-1], dest)
    from dataclasses import asdict

    state = asdict(result["trainer"].state) if result and result.get("trainer") else None
    return checkpoints.save_final(model, tokenizer, dest, run_config, state)


def write_summary(output_dir: str | Path, result: dict, cfg: TrainConfig, checkpoint_dir: Path | None,
                  memory_plan: dict | None = None) -> dict:
    """training_summary.json and learning_curves.png: the facts 03 and people read about this run."""
    from dataclasses import asdict

    output_dir = Path(output_dir)
    curves.plot(result["log_history"], output_dir / "learning_curves.png")
    summary = {
        "global_step": result["global_step"], "stopped_reason": result["stopped_reason"],
        "stop_detail": result.get("stop_detail", ""), "resumed_from_step": result["resumed_from_step"],
        "train_loss": result["train_loss"], "eval_loss": result["eval_loss"],
        # Relative, so 03 finds it wherever the folder is mounted; "checkpoint" even when nothing was
        # saved (NaN before the first checkpoint): checkpoint_complete is what says whether to use it.
        "checkpoint_dir": os.path.relpath(checkpoint_dir or output_dir / "checkpoint", output_dir),
        "checkpoint_complete": bool(checkpoint_dir) and checkpoints.is_complete(checkpoint_dir)
        and not checkpoints.missing_files(checkpoint_dir),
        "diagnosis": curves.diagnose(result["log_history"]), "seconds": result["seconds"],
        "memory_plan": memory_plan, "measured_peak_gb": result.get("peak_memory_gb"),
        "run_peak_gb": result.get("run_peak_memory_gb"), "config": asdict(cfg),
        "world_size": len(result.get("replica_checksums", [0])), "replica_checksums": result.get("replica_checksums"),
    }
    (output_dir / "training_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (output_dir / "log_history.json").write_text(json.dumps(result["log_history"], indent=2))
    return summary
