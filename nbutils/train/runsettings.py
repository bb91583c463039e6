"""The run's settings: every setting that changes the trained weights, as a resume compares them.

A checkpoint records them (checksums.json) and a resume refuses a checkpoint whose settings differ, naming
each key; the LoRA settings come from the LoraConfig the model trains with.
"""

from __future__ import annotations

import enum
import hashlib
import json

# Settings that do not change the trained weights: comparing them would refuse harmless resumes.
NOT_RESULT = frozenset({"time_budget_min", "resume", "eval_steps", "save_steps", "logging_steps", "eval_strategy",
                        "save_strategy", "save_total_limit", "smoke", "versions"})


# peft's LoraConfig.to_dict() keys that say where or with which peft it ran, not what trains (base_model is a
# parameter of its own; the machine's cache path would refuse a resume on another machine).
LORA_NOT_SETTINGS = frozenset({"base_model_name_or_path", "peft_version", "inference_mode", "auto_mapping"})


def _plain(value):
    """JSON-safe and order-free: sets become sorted lists (peft expands "all-linear" into a set of names)."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=str)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def lora_settings(lora_config) -> dict:
    """A peft LoraConfig as settings: its to_dict(), JSON-safe, less the keys in LORA_NOT_SETTINGS."""
    return {k: _plain(v) for k, v in sorted(lora_config.to_dict().items()) if k not in LORA_NOT_SETTINGS}


def with_lora(run_config: dict | None, model) -> dict:
    """run_config plus "lora": the settings of the LoraConfig the model trains with: the very object 02 builds
    and hands to attach_lora, so an edit of r, lora_alpha or target_modules there reaches the resume check.
    A run_config that carries "lora" already, or a model without adapters, is left as it is."""
    run_config = dict(run_config or {})
    peft = getattr(model, "peft_config", None) or {}
    if "lora" not in run_config and "default" in peft:
        run_config["lora"] = lora_settings(peft["default"])
    return run_config


def settings(cfg=None, run_config: dict | None = None) -> dict:
    """Every setting that changes the trained weights: the run config's parameters, the data hash, the TrainConfig,
    and the LoRA config's keys as "lora.<key>" (so a refused resume names the key that changed)."""
    from dataclasses import asdict

    run_config = run_config or {}
    flat = {**run_config.get("parameters", {}),
            **{k: v for k, v in run_config.items() if k not in ("parameters", "lora")},
            **{f"lora.{k}": v for k, v in (run_config.get("lora") or {}).items()}}
    if cfg is not None:
        flat.update(asdict(cfg))
    return json.loads(json.dumps({k: v for k, v in flat.items() if k not in NOT_RESULT}, sort_keys=True, default=str))


def settings_hash(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


# TrainConfig fields that only recorded the LoRA settings, dropped when the LoraConfig ("lora.*") became their one
# record: a checkpoint saved before then still carries them, and must not be refused for it.
RETIRED = frozenset({"lora_r", "lora_dropout", "use_rslora"})


def differences(old: dict, new: dict) -> list[str]:
    """Settings that differ between a checkpoint and this run, one line each ('missing' when only one has it)."""
    out = []
    for key in sorted((set(old) | set(new)) - RETIRED):
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if a != b:
            out.append(f"{key}: checkpoint has {a!r}, this run {b!r}")
    return out
