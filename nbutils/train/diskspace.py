"""Disk space for checkpoints: what a run needs, and one clear error when a save runs out of it.

A full disk surfaces as many different exceptions: OSError ENOSPC from Python writes, and from
torch.save's C++ writer RuntimeErrors such as 'basic_ios::clear: iostream error' or
'unexpected pos 240960 vs 240852'. `is_no_space` recognises them all, also when chained.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

MB = 2**20
TOKENIZER_ALLOWANCE_MB = 20  # tokenizer.json of real models is 2-17 MB
_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NO_SPACE_TEXT = ("no space left", "disk quota", "iostream error", "unexpected pos", "file write failed")


class DiskFullError(OSError):
    """A save ran out of disk space; the message says where, how much is needed and what to do."""


def is_no_space(exc: BaseException | None) -> bool:
    """True when the exception (or one it was raised from) means the disk is full."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFullError):
            return True
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS:
            return True
        if says_no_space(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def checkpoint_mb(trainable_params: int) -> float:
    """One Trainer checkpoint: fp32 LoRA weights (4 bytes) + two Adam states (8 bytes) + tokenizer and state."""
    return trainable_params * 12 / MB + TOKENIZER_ALLOWANCE_MB


def final_mb(trainable_params: int) -> float:
    """The final checkpoint: fp32 LoRA weights, tokenizer and run files."""
    return trainable_params * 4 / MB + TOKENIZER_ALLOWANCE_MB


def needed_mb(ckpt_mb: float, keep: int | None) -> float:
    """The kept checkpoints, the one being written, and the final adapter with its temp copy."""
    return ckpt_mb * ((keep or 1) + 2)


def free_mb(folder: Path) -> float:
    folder = Path(folder)
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free / MB


def size_text(mb: float) -> str:
    """A size as people read it: GiB with two decimals, MB below 0.01 GiB (where GiB would read 0.00)."""
    return f"{mb / 1024:.2f} GiB" if mb >= 0.01 * 1024 else f"{mb:.1f} MB"


def says_no_space(text: str) -> bool:
    """True when a message (a subprocess's last line, say) means the disk is full."""
    return any(t in str(text).lower() for t in _NO_SPACE_TEXT)


def message(folder: Path, need_mb: float, keep: int | None = None, detail: str = "", what: str = "",
            advice: str | None = None) -> str:
    """The one disk-full message: where, what was being written, how much it needs, how much is free, what to do."""
    if advice is None:
        advice = "free space or lower keep_checkpoints" + (f" (now {keep})" if keep is not None else "")
    writing = f" writing {what}" if what else ""
    return (f"disk full at {folder}{writing}: needs ~{size_text(need_mb)}, {size_text(free_mb(folder))} free; "
            f"{advice}{detail}")


def check(folder: Path, need_mb: float, keep: int | None) -> str | None:
    """A clear problem line when the filesystem holding `folder` has less free space than needed, or when `keep`
    would keep every checkpoint (the need then grows with the run and no plan bounds it), else None."""
    if keep is None or keep < 1:
        return (f"keep_checkpoints={keep} keeps every checkpoint, so a long run fills the disk one save at a time: "
                "set 1 or more (1 keeps only the newest that verifies)")
    if free_mb(folder) < need_mb:
        return message(folder, need_mb, keep, " before training starts, so no hours are lost on a save that fails")
    return None
