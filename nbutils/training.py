"""Training with the HF Trainer and saving a complete checkpoint (adapter + tokenizer + run config)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbutils import batching


@dataclass
class TrainConfig:
    max_steps: int = 120
    num_epochs: float = 1.0
    learning_rate: float = 3e-3
    per_device_batch_size: int = 16
    grad_accum: int = 1
    lora_r: int = 16
    warmup_steps: int = 10
    eval_steps: int = 40
    logging_steps: int = 10
    precision: str = "fp32"
    seed: int = 0
    extra: dict = field(default_factory=dict)


def training_arguments(cfg: TrainConfig, output_dir: str | Path, grouped: bool = True):
    """TrainingArguments from our config: fp16/bf16 from the precision rule, never both."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(output_dir), max_steps=cfg.max_steps, num_train_epochs=cfg.num_epochs,
        per_device_train_batch_size=cfg.per_device_batch_size, per_device_eval_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.grad_accum, learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine", warmup_steps=cfg.warmup_steps, logging_steps=cfg.logging_steps,
        eval_strategy="steps", eval_steps=cfg.eval_steps, save_strategy="no",
        fp16=cfg.precision == "fp16", bf16=cfg.precision == "bf16", seed=cfg.seed, data_seed=cfg.seed,
        train_sampling_strategy="group_by_length" if grouped else "random", length_column_name="length",
        report_to=[], disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=0,
    )


def train(model, tokenizer, train_ds, eval_ds, cfg: TrainConfig, output_dir: str | Path, plan: dict | None = None) -> dict:
    """Run the Trainer with the data manifest's batching plan; return the log history and timing."""
    from datasets import Dataset
    from transformers import Trainer

    plan = plan or {"strategy": "length_grouped"}
    cols = ["input_ids", "labels", "length"]
    train_rows = train_ds.select_columns(cols)
    if plan["strategy"] == "packed":
        train_rows = Dataset.from_list(batching.pack(list(train_rows), plan["block_size"]))
    trainer = Trainer(
        model=model, args=training_arguments(cfg, Path(output_dir) / "trainer", grouped=plan["strategy"] != "packed"),
        train_dataset=train_rows, eval_dataset=eval_ds.select_columns(cols),
        data_collator=batching.make_collator(plan, tokenizer.pad_token_id),
    )
    t0 = time.time()
    result = trainer.train()
    metrics = trainer.evaluate()
    return {
        "global_step": trainer.state.global_step, "train_loss": result.training_loss,
        "eval_loss": metrics["eval_loss"], "seconds": round(time.time() - t0, 1),
        "log_history": trainer.state.log_history,
    }


def unwrap(model):
    """Strip accelerate/DDP/compile wrappers so save_pretrained reaches the PEFT model."""
    try:
        from accelerate.utils import extract_model_from_parallel

        model = extract_model_from_parallel(model)
    except ImportError:
        pass
    while hasattr(model, "module"):
        model = model.module
    return model


def save_checkpoint(model, tokenizer, output_dir: str | Path, run_config: dict) -> Path:
    """Write adapter + tokenizer + run config into <output_dir>/checkpoint."""
    ckpt = Path(output_dir) / "checkpoint"
    unwrap(model).save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    (ckpt / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str))
    return ckpt


def write_summary(output_dir: str | Path, result: dict, cfg: TrainConfig, checkpoint_dir: Path) -> dict:
    """training_summary.json: the facts 03 and people read about this run."""
    summary = {
        "global_step": result["global_step"], "stopped_reason": "max_steps" if cfg.max_steps > 0 else "completed",
        "resumed_from_step": None, "train_loss": result["train_loss"], "eval_loss": result["eval_loss"],
        "checkpoint_dir": str(checkpoint_dir), "checkpoint_complete": (checkpoint_dir / "adapter_config.json").exists(),
        "seconds": result["seconds"], "config": asdict(cfg),
    }
    (Path(output_dir) / "training_summary.json").write_text(json.dumps(summary, indent=2))
    (Path(output_dir) / "log_history.json").write_text(json.dumps(result["log_history"], indent=2))
    return summary
