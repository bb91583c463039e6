"""A checkpoint's manifest: every file with its size and SHA-256, the global step, the run's settings.

Written after every other file and before the COMPLETE marker, so a checkpoint that has the marker
also says what it must contain. `problems` re-reads the folder against it: a truncated or altered
file, a trainer_state.json whose step disagrees, or a folder named for another step is damaged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

NAME = "manifest.json"
MARKER = "COMPLETE"
# Settings that do not change the trained weights: comparing them would refuse harmless resumes.
NOT_RESULT = frozenset({"time_budget_min", "resume", "eval_steps", "save_steps", "logging_steps", "eval_strategy",
                        "save_strategy", "save_total_limit", "smoke"
                        "versions"})


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (NAME, MARKER))


def settings(cfg=None, run_config: dict | None = None) -> dict:
    """Every setting that changes the trained weights: the run config's parameters, the data hash, the TrainConfig."""
    from dataclasses import asdict

    run_config = run_config or {}
    flat = {**run_config.get("parameters", {}), **{k: v for k, v in run_config.items() if k != "parameters"}}
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


def differences(old: dict, new: dict) -> list[str]:
    """Settings that differ between a checkpoint and this run, one line each ('missing' when only one has it)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if a != b:
            out.append(f"{key}: checkpoint has {a!r}, this run {b!r}")
    return out
