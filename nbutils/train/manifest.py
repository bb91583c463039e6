"""A checkpoint's manifest: every file with its size and SHA-256, the global step, the run's settings.

Written after every other file and before the COMPLETE marker, so a checkpoint that has the marker
also says what it must contain. `problems` re-reads the folder against it: a truncated or altered
file, a trainer_state.json whose step disagrees, or a folder named for another step is damaged.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
from pathlib import Path

NAME = "manifest.json"
MARKER = "COMPLETE"
# Settings that do not change the trained weights: comparing them would refuse harmless resumes.
NOT_RESULT = frozenset({"time_budget_min", "resume", "eval_steps", "save_steps", "logging_steps", "eval_strategy",
                        "save_strategy", "save_total_limit", "smoke", "versions"})


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (NAME, MARKER))


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


def write(folder: Path, step: int | None, run_settings: dict | None) -> dict:
    """Hash every file of the folder into manifest.json (fsynced): call it last, just before the marker."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": sha256(p)} for p in _files(folder)}
    data = {"format": 1, "global_step": step, "settings_hash": settings_hash(run_settings or {}),
            "settings": run_settings or {}, "files": files}
    with open(folder / NAME, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    return data


def read(folder: Path) -> dict | None:
    try:
        return json.loads((Path(folder) / NAME).read_text())
    except (OSError, ValueError):
        return None


def problems(folder: Path, required: list[str] = ()) -> list[str]:
    """Why this checkpoint cannot be trusted, one reason each (empty list: it verifies)."""
    folder = Path(folder)
    if not (folder / MARKER).exists():
        return ["no COMPLETE marker (the save did not finish)"]
    data = read(folder)
    if data is None or not isinstance(data.get("files"), dict):
        return [f"{NAME} missing or unreadable"]
    out = [f"{name} missing" for name in required if name not in data["files"] and not (folder / name).exists()]
    step = data.get("global_step")
    state = folder / "trainer_state.json"
    if state.exists():
        try:
            state_step = json.loads(state.read_text()).get("global_step")
        except ValueError:
            state_step = "unreadable"
        if state_step != step:
            out.append(f"trainer_state.json says step {state_step}, the manifest {step}")
    if folder.name.startswith("checkpoint-") and folder.name != f"checkpoint-{step}":
        out.append(f"folder name says step {folder.name.split('-', 1)[1]}, the manifest {step}")
    for name, meta in data["files"].items():
        path = folder / name
        if not path.is_file():
            out.append(f"{name} missing")
        elif path.stat().st_size != meta["size"]:
            out.append(f"{name} is {path.stat().st_size} bytes, the manifest says {meta['size']} (truncated or rewritten)")
        elif sha256(path) != meta["sha256"]:
            out.append(f"{name} content differs from its SHA-256 in the manifest (altered)")
    return out


def step(folder: Path) -> int | None:
    """The global step the manifest records (None without a readable manifest)."""
    data = read(folder)
    return data.get("global_step") if data else None


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
