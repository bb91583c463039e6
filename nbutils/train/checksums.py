"""A checkpoint's checksums: every file with its size and SHA-256, the global step, the run's settings.

Written to checksums.json after every other file and before the COMPLETE marker, so a checkpoint that has
the marker also says what it must contain. `problems` re-reads the folder against it: a truncated or altered
file, a trainer_state.json whose step disagrees, or a folder named for another step is damaged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nbutils.train.runsettings import settings_hash

NAME = "checksums.json"
MARKER = "COMPLETE"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (NAME, MARKER))


def write(folder: Path, step: int | None, run_settings: dict | None) -> dict:
    """Hash every file of the folder into checksums.json (fsynced): call it last, just before the marker."""
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
            out.append(f"trainer_state.json says step {state_step}, checksums.json {step}")
    if folder.name.startswith("checkpoint-") and folder.name != f"checkpoint-{step}":
        out.append(f"folder name says step {folder.name.split('-', 1)[1]}, checksums.json {step}")
    for name, meta in data["files"].items():
        path = folder / name
        if not path.is_file():
            out.append(f"{name} missing")
        elif path.stat().st_size != meta["size"]:
            out.append(f"{name} is {path.stat().st_size} bytes, checksums.json says {meta['size']} (truncated or rewritten)")
        elif sha256(path) != meta["sha256"]:
            out.append(f"{name} content differs from its SHA-256 in checksums.json (altered)")
    return out


def step(folder: Path) -> int | None:
    """The global step checksums.json records (None without a readable one)."""
    data = read(folder)
    return data.get("global_step") if data else None
