"""Training configuration, validated before any model is loaded: mistakes found in a second, not at hour 3."""

from __future__ import annotations

from dataclasses import dataclass

KAGGLE_LIMIT_MIN = 12 * 60
SAFETY_MARGIN_MIN = 30  # time left for the final save, the verify step and the notebook's last cells


@dataclass
class TrainConfig:
    max_steps: int = 80  # -1: train num_epochs instead
    num_epochs: float = 1.0
    learning_rate: float = 3e-3
    per_device_batch_size: int = 16
    grad_accum: int = 1
    warmup_steps: int = 5
    eval_strategy: str = "steps"
    save_strategy: str = "steps"
    eval_steps: int = 20
    save_steps: int = 20
    save_total_limit: int = 2  # Trainer checkpoints kept (newest verified, by step); the last verified one always is
    logging_steps: int = 10
    load_best_model_at_end: bool = False
    optim: str = "adamw_torch"
    precision: str = "fp32"
    max_seq_len: int = 256
    time_budget_min: float = KAGGLE_LIMIT_MIN - SAFETY_MARGIN_MIN
    resume: bool = True
    seed: int = 0
    world_size: int = 1
    chunked_loss: str | bool = "auto"  # auto: liger's fused kernels on CUDA when installed, else chunked; False: plain

    @property
    def effective_batch(self) -> int:
        return self.per_device_batch_size * self.grad_accum * self.world_size


class ConfigError(ValueError):
    """One or more configuration mistakes, each with what to do."""


def problems(cfg: TrainConfig, n_train: int, gpu_capability: tuple[int, int] | None,
             model_max_positions: int | None = None, data_max_seq_len: int | None = None) -> list[str]:
    """Every mistake in the configuration, one clear message each (empty list: good to go)."""
    out = []
    if cfg.eval_strategy != "no" and cfg.save_strategy != "no" and cfg.eval_strategy != cfg.save_strategy:
        out.append(f"eval_strategy={cfg.eval_strategy!r} but save_strategy={cfg.save_strategy!r}: use the same "
                   "strategy for both so every saved checkpoint has an evaluation.")
    if cfg.eval_strategy == cfg.save_strategy == "steps" and cfg.eval_steps and cfg.save_steps % cfg.eval_steps:
        out.append(f"save_steps={cfg.save_steps} is not a multiple of eval_steps={cfg.eval_steps}: checkpoints would "
                   "be saved without an eval loss; make save_steps a multiple of eval_steps.")
    if cfg.load_best_model_at_end and (cfg.eval_strategy == "no" or cfg.eval_strategy != cfg.save_strategy):
        out.append("load_best_model_at_end=True needs eval_strategy == save_strategy (and not 'no'); "
                   "set both to 'steps' or turn load_best_model_at_end off.")
    if cfg.precision == "bf16" and gpu_capability is not None and gpu_capability < (8, 0):
        out.append(f"bf16 on a GPU of compute capability {gpu_capability[0]}.{gpu_capability[1]} (below 8.0, e.g. a T4) "
                   "is emulated: slow or broken. Use precision='fp16' (or 'auto').")
    if cfg.precision in ("fp16", "bf16") and gpu_capability is None:
        out.append(f"precision={cfg.precision!r} on the CPU: mixed precision needs a GPU. Use 'auto' (fp32 on the CPU).")
    if cfg.effective_batch > n_train:
        out.append(f"effective batch size {cfg.effective_batch} (per_device_batch_size x grad_accum x processes) is "
                   f"larger than the {n_train} training examples: lower per_device_batch_size or grad_accum.")
    steps_per_epoch = max(1, n_train // max(1, cfg.effective_batch))
    if cfg.max_steps > 0 and cfg.max_steps / steps_per_epoch > 50:
        out.append(f"max_steps={cfg.max_steps} is {cfg.max_steps / steps_per_epoch:.0f} epochs of {n_train} examples: "
                   "it will overfit; lower max_steps or add data.")
    if 0 < cfg.max_steps < 5 or (cfg.max_steps <= 0 and cfg.num_epochs * steps_per_epoch < 5):
        out.append("fewer than 5 optimizer steps: nothing will be learnt; raise max_steps or num_epochs "
                   "(use smoke=True for a quick end-to-end check instead).")
    if "paged" in cfg.optim and cfg.resume:
        out.append(f"optim={cfg.optim!r} with resume: paged optimizers' states do not restore correctly "
                   "(axolotl#864, bitsandbytes#782); use adamw_torch / adamw_8bit or set resume=False.")
    if model_max_positions and cfg.max_seq_len > model_max_positions:
        out.append(f"max_seq_len={cfg.max_seq_len} is above the model's max_position_embeddings={model_max_positions}.")
    if data_max_seq_len and cfg.max_seq_len > data_max_seq_len:
        out.append(f"max_seq_len={cfg.max_seq_len} is above the {data_max_seq_len} the data was prepared for "
                   "(01_data_prep's max_seq_len): re-run 01 with a larger max_seq_len or lower this one.")
    return out


def validate(cfg: TrainConfig, **kwargs) -> None:
    """Raise one ConfigError listing every mistake, before anything heavy happens."""
    found = problems(cfg, **kwargs)
    if found:
        raise ConfigError("Training configuration has problems:\n- " + "\n- ".join(found))
