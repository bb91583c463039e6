"""The run's settings: every setting that changes the trained weights, as a resume compares them.

A checkpoint records them (checksums.json) and a resume refuses a checkpoint whose settings differ, naming
each key; the LoRA settings come from the LoraConfig the model trains with.
"""

from __future__ import annotations

import enum
import hashlib
import json

# smoke=True is a check of the chain, not a run to continue: its few steps spend the learning-rate schedule, and a
# real run resumed from it would read as training longer. So a smoke run's settings say so; only a smoke run's,
# so the settings (and their hash) of every other run stay what they were.
SMOKE_KEY = "smoke"
# run_config.json entries that do not change the trained weights: comparing them would refuse harmless resumes.
NOT_RESULT = frozenset({"time_budget_min", SMOKE_KEY, "versions", "loss", "world_size_started"})
# Nested entries flattened as "<section>.<key>", so a refused resume names the key that changed.
SECTIONS = ("quantization", "lora", "training")


# peft's LoraConfig.to_dict() keys that say where or with which peft it ran, not what trains (base_model is an
# entry of its own; the machine's cache path would refuse a resume on another machine).
LORA_NOT_SETTINGS = frozenset({"base_model_name_or_path", "peft_version", "inference_mode", "auto_mapping"})


def plain(value):
    """JSON-safe and order-free: sets become sorted lists (peft expands "all-linear" into a set of names)."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=str)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def lora_settings(lora_config) -> dict:
    """A peft LoraConfig as settings: its to_dict(), JSON-safe, less the keys in LORA_NOT_SETTINGS."""
    return {k: plain(v) for k, v in sorted(lora_config.to_dict().items()) if k not in LORA_NOT_SETTINGS}


def _quantization_keys(quant: dict | None) -> dict:
    """The keys of a BitsAndBytesConfig that decide the 4-bit weights (the rest differ between versions)."""
    return {k: v for k, v in (quant or {}).items() if k.startswith(("bnb_4bit", "load_in"))}


def settings(run_config: dict | None) -> dict:
    """Every setting that changes the trained weights, flat: the run config's top-level entries (base model,
    precision, the data's hash ...) and its quantization, LoRA and training sections as "<section>.<key>"."""
    run_config = run_config or {}
    flat = {k: v for k, v in run_config.items() if k not in SECTIONS and k not in NOT_RESULT}
    if run_config.get(SMOKE_KEY):
        flat[SMOKE_KEY] = True
    for section in SECTIONS:
        values = run_config.get(section)
        if section == "quantization":
            values = _quantization_keys(values)
        flat.update({f"{section}.{k}": v for k, v in (values or {}).items()})
    return json.loads(json.dumps(plain(flat), sort_keys=True, default=str))


def settings_hash(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _lora_default(name: str):
    """The installed peft's default for a LoraConfig field, as settings hold it; MISSING where peft has no such field
    (it was dropped since the checkpoint was written)."""
    import dataclasses

    from peft import LoraConfig

    field = next((f for f in dataclasses.fields(LoraConfig) if f.name == name), None)
    if field is None:
        return MISSING
    if field.default is not dataclasses.MISSING:
        return plain(field.default)
    return plain(field.default_factory()) if field.default_factory is not dataclasses.MISSING else MISSING


MISSING = "<missing>"


def epochs_ignored(old: dict, new: dict) -> bool:
    """True when both runs set a positive max_steps: the Trainer then ignores num_train_epochs (02 and 05 always set
    it; "auto" is num_epochs passes counted in steps, so a change of num_epochs shows as one of max_steps)."""
    return all((d.get("training.max_steps") or 0) > 0 for d in (old, new))


def _same(key: str, a, b, old: dict, new: dict) -> bool:
    """Whether a setting that differs on its face changes nothing: the Trainer reads num_train_epochs only without a
    positive max_steps, and a LoRA field one peft version has and the other lacks is the same at its default (peft
    adds fields in most releases; an image updated between runs must resume)."""
    if key == "training.num_train_epochs":
        return epochs_ignored(old, new)
    if key.startswith("lora.") and MISSING in (a, b):
        given = b if a == MISSING else a
        default = _lora_default(key.removeprefix("lora."))
        return given == default if default != MISSING else given in (None, False, [], {}, "")
    return False


def differences(old: dict, new: dict) -> list[str]:
    """Settings that differ between a checkpoint and this run, one line each ('missing' when only one has it)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, MISSING), new.get(key, MISSING)
        if a == b or _same(key, a, b, old, new):
            continue
        out.append(_smoke_line(a is True, b is True) if key == SMOKE_KEY else f"{key}: checkpoint has {a!r}, this run {b!r}")
    return out


def _smoke_line(checkpoint: bool, run: bool) -> str:
    why = ("a smoke run's few steps spend its learning-rate schedule: it checks the chain, it is no start to continue"
           if checkpoint else "a smoke run checks the chain: it would replace this run's final checkpoint and reports, "
           "so give it an output_dir of its own")
    return f"smoke: checkpoint has {checkpoint}, this run {run} ({why})"
