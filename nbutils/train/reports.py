"""Reports that always describe the files beside them: the checkpoint they are about, and the files they list.

- A report about a checkpoint (02's and 05's training_summary.json, 03's and 05's eval_report.json, 04's
  export_summary.json) names it: folder, step and content hash (`identity`). The next notebook compares that with
  the checkpoint beside it and refuses a report of another one, naming the notebook to rerun (`check_describes`).
- A run about to change what a report describes removes the report first (`retract`): a folder holds a report
  that is true, or none. 03, 04 and 05 start with `begin`: the output folder's lock (02's, with 02's message),
  then their own summary retracted, then what killed runs left.
- A stage's summary (04's export_summary.json, 05's preference_summary.json) is written last, atomically, and only
  once every file it lists is in place: each listed file with its size and SHA-256 (`write_summary`), so `problems`
  can tell at any moment whether the folder still holds what its summary says.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.train import atomic, checksums, runlock

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # what the content hash covers: the model
LOCK_FILES = (runlock.LOCK, runlock.HOLDER)


class ReportMismatchError(RuntimeError):
    """A report describes another checkpoint than the one beside it: the message says which notebook to rerun."""


def content_hash(checkpoint: str | Path) -> str:
    """The SHA-256 of the adapter's files (config and weights, by their SHA-256): equal for two folders holding the
    same adapter (the final checkpoint and the Trainer checkpoint it came from), different after any change."""
    checkpoint = Path(checkpoint)
    known = (checksums.read(checkpoint) or {}).get("files", {})
    lines = [f"{name}:{known.get(name, {}).get('sha256') or checksums.sha256(checkpoint / name)}\n"
             for name in ADAPTER_FILES if (checkpoint / name).exists()]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def identity(checkpoint: str | Path) -> dict:
    """What a report names to say which checkpoint it describes: its folder, step and content hash."""
    checkpoint = Path(checkpoint)
    return {"dir": str(checkpoint), "step": checksums.step(checkpoint), "content_hash": content_hash(checkpoint)}


def _short(ident: dict) -> str:
    return f"step {ident.get('step')}, content {str(ident.get('content_hash'))[:12]}"


def check_describes(report: dict, report_path: str | Path, checkpoint: str | Path, rerun: str) -> dict:
    """Refuse a report that names another checkpoint than `checkpoint` (or none); returns the checkpoint's identity."""
    here = identity(checkpoint)
    named = report.get("checkpoint") if isinstance(report, dict) else None
    if not isinstance(named, dict) or "content_hash" not in named:
        raise ReportMismatchError(f"{report_path} does not say which checkpoint it describes (written by an older "
                                  f"version of the suite): rerun {rerun} on {checkpoint} ({_short(here)}).")
    if named["content_hash"] != here["content_hash"]:
        raise ReportMismatchError(
            f"{report_path} describes another checkpoint ({_short(named)}) than the one beside it, {checkpoint} "
            f"({_short(here)}): the checkpoint changed after the report was written. Rerun {rerun} so that its "
            "report describes this checkpoint.")
    return here


def retract(folder: str | Path, names) -> list[str]:
    """Remove these reports before what they describe changes (each one gone for good, its folder fsynced)."""
    folder, gone = Path(folder), []
    for name in names:
        path = folder / name
        if path.exists():
            path.unlink()
            gone.append(name)
    if gone:
        atomic.fsync_dir(folder)
    return gone


def begin(output_dir: str | Path, stage: str) -> Path:
    """Before anything is loaded or written: the output folder's lock (main process; a second run is refused naming
    the holder, a dead holder's lock is taken over), the stage's summary retracted (it is rewritten last), the
    temporary files of killed runs removed."""
    output_dir = Path(output_dir)
    if int(os.environ.get("RANK", "0")) > 0:  # one rank of a launch: the first one holds the lock and writes
        return output_dir
    runlock.acquire(output_dir)
    if retract(output_dir, [MARKERS[stage]]):
        print(f"[{stage}] removed the earlier {MARKERS[stage]}: it is written again, last, when this run completes",
              flush=True)
    atomic.clean(output_dir)
    return output_dir


def _files(folder: Path, names) -> list[Path]:
    out = []
    for name in names:
        path = folder / name
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and not atomic.is_leftover(p))
        elif path.is_file():
            out.append(path)
        else:
            raise FileNotFoundError(f"{path} is listed in the summary but not there: the summary is not written")
    return out


def manifest(folder: str | Path, names) -> dict:
    """Every file of the listed files and folders, by path relative to `folder`, with its size and SHA-256."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": checksums.sha256(p)}
            for p in _files(folder, names)}


def write_summary(folder: str | Path, name: str, summary: dict, files, what: str = "") -> dict:
    """The stage's summary, last: `files` (names in `folder`) must all be there; each file under them is listed with
    its size and SHA-256, then the summary is written atomically. Returns what was written."""
    folder = Path(folder)
    names = sorted(set(files))
    data = {**summary, "files": [n + "/" if (folder / n).is_dir() else n for n in names],
            "checksums": manifest(folder, names)}
    atomic.write_json(folder / name, data, what or name)
    return data


def problems(folder: str | Path, name: str) -> list[str]:
    """Why the summary `name` in `folder` does not describe the folder (empty: every file it lists is there, whole)."""
    path = Path(folder) / name
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []  # no summary: the folder claims nothing
    except (ValueError, UnicodeDecodeError) as e:
        return [f"{name} is not valid JSON ({e})"]
    out = []
    for rel, meta in (data.get("checksums") or {}).items():
        p = Path(folder) / rel
        if not p.is_file():
            out.append(f"{rel} missing")
        elif p.stat().st_size != meta["size"]:
            out.append(f"{rel} is {p.stat().st_size} bytes, {name} says {meta['size']}")
        elif checksums.sha256(p) != meta["sha256"]:
            out.append(f"{rel} differs from its SHA-256 in {name}")
    return out
