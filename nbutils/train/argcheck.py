"""The training arguments checked before the model loads: mistakes found in seconds, not at hour 3.

Checked twice, by the same rules: 02's plan checks its parameters against the data before anything loads
(`values` named as TrainingArguments names them, only those it knows), and each training process checks the
TrainingArguments the recipe built (`of_arguments`) before it loads the model, so an edit of the recipe is
checked too.
"""

from __future__ import annotations

# TrainingArguments attributes the rules read.
READ = ("eval_strategy", "save_strategy", "eval_steps", "save_steps", "load_best_model_at_end", "fp16", "bf16",
        "per_device_train_batch_size", "gradient_accumulation_steps", "world_size", "max_steps", "num_train_epochs",
        "optim")


class ConfigError(ValueError):
    """One or more configuration mistakes, each with what to do."""


def of_arguments(args) -> dict:
    """The values the rules read, from a transformers TrainingArguments (strategies as plain strings)."""
    return {k: getattr(getattr(args, k), "value", getattr(args, k)) for k in READ if hasattr(args, k)}


def _strategies(v: dict) -> list[str]:
    out = []
    ev, sv = v.get("eval_strategy"), v.get("save_strategy")
    if ev not in (None, "no") and sv not in (None, "no") and ev != sv:
        out.append(f"eval_strategy={ev!r} but save_strategy={sv!r}: use the same strategy for both so every saved "
                   "checkpoint has an evaluation.")
    if ev == sv == "steps" and v.get("eval_steps") and v.get("save_steps", 0) % v["eval_steps"]:
        out.append(f"save_steps={v['save_steps']} is not a multiple of eval_steps={v['eval_steps']}: checkpoints would "
                   "be saved without an eval loss; make save_steps a multiple of eval_steps.")
    if v.get("load_best_model_at_end") and (ev in (None, "no") or ev != sv):
        out.append("load_best_model_at_end=True needs eval_strategy == save_strategy (and not 'no'); "
                   "set both to 'steps' or turn load_best_model_at_end off.")
    return out


def _precision(v: dict, gpu_capability: tuple[int, int] | None) -> list[str]:
    if v.get("bf16") and gpu_capability is not None and gpu_capability < (8, 0):
        return [f"bf16 on a GPU of compute capability {gpu_capability[0]}.{gpu_capability[1]} (below 8.0, e.g. a T4) "
                "is emulated: slow or broken. Use fp16 (precision='auto' picks it)."]
    if (v.get("fp16") or v.get("bf16")) and gpu_capability is None:
        return ["mixed precision (fp16/bf16) on the CPU: it needs a GPU. Use precision='auto' (fp32 on the CPU)."]
    return []


def _steps(v: dict, n_train: int) -> list[str]:
    out = []
    effective = v.get("per_device_train_batch_size", 1) * v.get("gradient_accumulation_steps", 1) * v.get("world_size", 1)
    if effective > n_train:
        out.append(f"effective batch size {effective} (per-device batch x gradient accumulation x processes) is larger "
                   f"than the {n_train} training examples: lower per_device_batch_size or grad_accum.")
    steps_per_epoch = max(1, n_train // max(1, effective))
    max_steps, epochs = v.get("max_steps", -1), v.get("num_train_epochs", 1.0)
    if max_steps > 0 and max_steps / steps_per_epoch > 50:
        out.append(f"max_steps={max_steps} is {max_steps / steps_per_epoch:.0f} epochs of {n_train} examples: "
                   "it will overfit; lower max_steps or add data.")
    if 0 < max_steps < 5 or (max_steps <= 0 and epochs * steps_per_epoch < 5):
        out.append("fewer than 5 optimizer steps: nothing will be learnt; raise max_steps or num_epochs "
                   "(use smoke=True for a quick end-to-end check instead).")
    return out


def problems(values: dict, n_train: int, gpu_capability: tuple[int, int] | None, resume: bool = True,
             max_seq_len: int | None = None, model_max_positions: int | None = None) -> list[str]:
    """Every mistake found in `values` (TrainingArguments names; absent ones are not checked), one clear message
    each; an empty list: good to go."""
    out = _strategies(values) + _precision(values, gpu_capability) + _steps(values, n_train)
    if "paged" in str(values.get("optim", "")) and resume:
        out.append(f"optim={values['optim']!r} with resume: paged optimizers' states do not restore correctly "
                   "(axolotl#864, bitsandbytes#782); use adamw_torch / adamw_8bit or set resume=False.")
    if model_max_positions and max_seq_len and max_seq_len > model_max_positions:
        out.append(f"the data's max_seq_len={max_seq_len} (01) is above the model's max_position_embeddings="
                   f"{model_max_positions}: re-run 01 with a smaller max_seq_len.")
    return out


def validate(values: dict, **kwargs) -> None:
    """Raise one ConfigError listing every mistake, before anything heavy happens."""
    found = problems(values, **kwargs)
    if found:
        raise ConfigError("Training configuration has problems:\n- " + "\n- ".join(found))
