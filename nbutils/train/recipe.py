"""The run's recipe: named once upstream, recorded by 02's checkpoint, loaded as recorded by 03, 04 and the check.

The base model is chosen in 01 (its manifest records it with the tokenizer's fingerprint); 02 takes it from there.
What 02 builds (the 4-bit BitsAndBytesConfig, the LoraConfig, the precision, the TrainingArguments that change the
weights) is read off the live model and Trainer into run_config.json of every checkpoint (`run_config`), and 03,
04 and `checkpoints.verify` load exactly that (`from_checkpoint`). A value given explicitly that contradicts its
upstream is refused with both values named (`UpstreamMismatch`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nbutils.defaults import is_auto

# TrainingArguments that change the trained weights: a resume compares them (runsettings), the summary shows them.
# Evaluation, saving, logging and progress settings are left out: changing them must not refuse a resume.
WEIGHT_ARGUMENTS = ("learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay", "optim",
                    "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "max_steps", "num_train_epochs",
                    "per_device_train_batch_size", "gradient_accumulation_steps", "world_size", "seed", "data_seed",
                    "fp16", "bf16", "train_sampling_strategy")


class UpstreamMismatch(ValueError):
    """An explicit value contradicts what the upstream notebook recorded; the message names both."""


@dataclass(frozen=True)
class Recipe:
    """How a checkpoint's model is loaded again: what 02 trained on, as its run_config.json records it."""

    base_model: str
    quantization: dict | None  # BitsAndBytesConfig.to_dict() of 02's config; None: trained on full-precision weights
    precision: str  # the compute dtype to load with here (the recorded one where this machine has it)
    trained_precision: str  # what 02 computed in
    lora: dict  # the LoraConfig's settings (runsettings.lora_settings)


def base_model_for_training(manifest: dict, given: str = "auto", tokenizer_fingerprint=None) -> tuple[str, str]:
    """(base model, why) for 02: 01's unless given ("auto" takes 01's); a given one is refused unless it is the same
    name or the same tokenizer (`tokenizer_fingerprint(name)` -> fingerprint, asked only when the names differ)."""
    recorded = manifest.get("base_model")
    given = "" if is_auto(given) else given
    if not recorded:
        if not given:
            raise UpstreamMismatch("01's manifest names no base model (prepared by an older 01): re-run 01_data_prep, "
                                   "or set base_model here to the model 01 used.")
        return given, "given (01's manifest names none)"
    if not given or given == recorded:
        return recorded, "from 01's manifest"
    theirs = manifest.get("tokenizer_fingerprint")
    if tokenizer_fingerprint is not None and theirs and tokenizer_fingerprint(given) == theirs:
        return given, f"given; its tokenizer is the one 01 used for {recorded!r}"
    raise UpstreamMismatch(
        f"base_model={given!r} here, but 01 prepared the data with {recorded!r} (its manifest), and the tokenizers "
        "differ: the token ids would not match the model. Leave base_model=\"auto\" to train 01's model, or re-run "
        f"01_data_prep with base_model={given!r}.")


def same_tokenizer(tokenizer, manifest: dict, source: str) -> None:
    """Refuse a tokenizer other than the one 01 rendered the data with (its manifest's fingerprint: vocabulary,
    special tokens, chat template). A model updated on the hub between 01 and a later notebook would otherwise
    train or be scored on prompts rendered differently from 01's, silently."""
    from nbutils.data import chatformat

    want = manifest.get("tokenizer_fingerprint")
    if want and (got := chatformat.fingerprint(tokenizer)) != want:
        raise UpstreamMismatch(
            f"the tokenizer of {source} (fingerprint {got}) is not the one 01 prepared the data with ({want}, its "
            "manifest): its vocabulary, special tokens or chat template changed since 01 ran (a model updated on the "
            "hub, another revision). Re-run 01_data_prep with this model, then 02, so that training and evaluation "
            "render the same tokens.")


def trained_tokenizer(checkpoint: str | Path, data_dir: str | Path | None = None, verbose: bool = False):
    """The tokenizer 02 saved beside the adapter, prepared as 01 prepared it: 03, 04 and 05 render prompts with
    the template, special tokens and pad token training used, and download nothing. With data_dir, it must be the
    one 01 rendered that data with (`same_tokenizer`)."""
    from transformers import AutoTokenizer

    from nbutils.data import chatformat, splits

    tokenizer = chatformat.prepare_tokenizer(AutoTokenizer.from_pretrained(str(checkpoint)), verbose)
    if data_dir is not None:
        same_tokenizer(tokenizer, splits.load_manifest(data_dir), f"the checkpoint {checkpoint}")
    return tokenizer


def _model_settings(model) -> dict:
    """The 4-bit config and LoRA settings the live model carries: what 02 built, read off the model itself."""
    from nbutils.train.runsettings import lora_settings, plain

    inner = getattr(model, "base_model", model)
    inner = getattr(inner, "model", inner)
    quant = getattr(getattr(inner, "config", None), "quantization_config", None)
    if quant is not None and not isinstance(quant, dict):
        quant = quant.to_dict()
    peft = getattr(model, "peft_config", None) or {}
    return {"quantization": plain(quant) if quant else None,
            "lora": lora_settings(peft["default"]) if "default" in peft else None}


def run_config(model, args, record: dict) -> dict:
    """What every checkpoint of this run carries in run_config.json: `record` (base model, precision, the data's
    hash, versions ..., from the plan), the model's quantization and LoRA settings, the weight-changing
    TrainingArguments."""
    training = {k: getattr(args, k) for k in WEIGHT_ARGUMENTS if hasattr(args, k)}
    training = {k: (v.value if hasattr(v, "value") else v) for k, v in training.items()}  # enums as their names
    return {**record, **_model_settings(model), "training": training}


def read_run_config(checkpoint: str | Path) -> dict:
    """run_config.json of a checkpoint (02's, or a Trainer checkpoint's)."""
    path = Path(checkpoint) / "run_config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UpstreamMismatch(f"{path} cannot be read ({e}): re-run 02_train_qlora.") from None


def from_checkpoint(checkpoint: str | Path, base_model: str = "auto", precision: str = "auto",
                    machine_precision: str = "fp32", data_dir: str | Path | None = None) -> Recipe:
    """The checkpoint's recipe for 03 and 04. base_model: "auto" takes the recorded one, a different one is refused.
    precision: "auto" takes the recorded compute dtype where this machine has it (`machine_precision` is
    preflight's: a T4-trained fp16 adapter evaluates in fp32 on a CPU), else the one given."""
    base_model, precision = ("" if is_auto(base_model) else base_model), ("" if is_auto(precision) else precision)
    if precision and precision not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"precision={precision!r} is not one of auto, fp32, fp16, bf16")
    if precision == "bf16" and machine_precision == "fp16":
        raise ValueError("precision='bf16' on a GPU without bf16 (a T4: compute capability 7.5, bf16 needs 8.0): use "
                         "'fp16' or 'auto'")
    rc = read_run_config(checkpoint)
    recorded = rc.get("base_model")
    if not recorded:
        raise UpstreamMismatch(f"{checkpoint}/run_config.json names no base model: re-run 02_train_qlora.")
    if base_model and base_model != recorded:
        raise UpstreamMismatch(
            f"base_model={base_model!r} here, but the adapter in {checkpoint} was trained on {recorded!r} (its "
            "run_config.json): an adapter only fits the weights it was trained on. Leave base_model=\"auto\" to load "
            f"{recorded!r}.")
    _same_data(checkpoint, rc, data_dir)
    trained = rc.get("precision", "fp32")
    here = precision or (trained if _runs_here(trained, machine_precision) else machine_precision)
    return Recipe(recorded, rc.get("quantization"), here, trained, rc.get("lora") or {})


def _same_data(checkpoint, rc: dict, data_dir) -> None:
    """01's output given to 03, 04 or 05 must be the one the adapter trained on (its manifest's content hash): another
    run of 01 (another model's tokens, other records) would score nonsense, or hold out records the adapter saw."""
    if data_dir is None or not rc.get("data_manifest_hash"):
        return
    from nbutils.data import splits

    found = splits.load_manifest(data_dir).get("content_hash")
    if found != rc["data_manifest_hash"]:
        raise UpstreamMismatch(
            f"data_dir={str(data_dir)!r} holds other data (content hash {found}) than the adapter in {checkpoint} "
            f"trained on ({rc['data_manifest_hash']}, its run_config.json): give the output of the 01 run that 02 "
            "trained on, or train 02 again on this one.")


def _runs_here(trained: str, machine: str) -> bool:
    """Whether this machine computes in the dtype the run trained in: fp32 anywhere, fp16 on any GPU, bf16 only
    where preflight chose bf16 (compute capability 8.0 and up)."""
    return trained == "fp32" or (trained == "fp16" and machine in ("fp16", "bf16")) or trained == machine
