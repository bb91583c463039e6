"""One writer per output_dir: a filelock held for the whole run, naming its holder when a second run is refused.

`filelock.FileLock` uses an OS lock (fcntl/msvcrt): the kernel drops it when the process dies,
even by SIGKILL, so a killed run never blocks the next one on the same machine. The holder's host,
pid and start time sit next to it in `.run.lock.json`, for the message a refused run shows.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

from nbutils.train import atomic

LOCK = ".run.lock"
HOLDER = ".run.lock.json"
_held: dict[str, FileLock] = {}


class RunLockedError(RuntimeError):
    """Another run writes into this output_dir."""


def acquire(output_dir: str | Path) -> FileLock:
    """Take the output_dir lock for this process (re-entrant within it); raise RunLockedError naming the holder."""
    output_dir = Path(output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    key = str(output_dir)
    if key in _held and _held[key].is_locked:
        return _held[key]
    lock = FileLock(str(output_dir / LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunLockedError(_refusal(output_dir)) from None
    info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    atomic.write_json(output_dir / HOLDER, info)  # a kill mid-write never leaves an unreadable holder
    _held[key] = lock
    return lock


def _refusal(output_dir: Path) -> str:
    try:
        who = json.loads((output_dir / HOLDER).read_text())
        holder = f"host {who['host']}, pid {who['pid']}, started {who['started']}"
    except (OSError, ValueError, KeyError):
        holder = "holder unknown"
    return (f"{output_dir} is in use by another run ({holder}): two runs writing one output_dir mix their "
            f"checkpoints. Wait for it to finish, or use another output_dir. If that run is gone (its machine "
            f"died with the folder on shared storage), the lock is stale: delete {output_dir / LOCK} and rerun.")


def release(output_dir: str | Path) -> None:
    """Let the next run in; the holder file goes first so a stale one never names a finished run."""
    key = str(Path(output_dir).resolve())
    lock = _held.pop(key, None)
    if lock is not None and lock.is_locked:
        (Path(key) / HOLDER).unlink(missing_ok=True)
        lock.release(force=True)
