"""One way to write an artifact: under its final name it is complete, or it is not there at all.

02's checkpoints, 03's report, 04's exports and 05's reports are all written here:
- a file goes to a temporary name in its own folder (`<stem>.tmp-<pid>-<id><suffix>`), is fsynced, then renamed over the
  final name (a rename within one filesystem is atomic), and the folder is fsynced so the rename survives a crash;
- a folder is built whole under a temporary name, every file fsynced, then swapped in: the old folder is renamed
  aside only once the new one is complete, and deleted after (`.trash-<name>-<id>`);
- a full disk during either becomes one DiskFullError that says what was being written, how much it needed and
  how much is free, and the temporary name is removed.
A kill leaves at most a temporary or trash name beside the final ones; `clean` removes them on the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path

from nbutils.train import diskspace, faultpoints

CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (new files, renames) durable, not only the files' bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Every file and folder under `path`, and `path` itself, on disk."""
    for p in Path(path).rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        elif p.is_dir():
            fsync_dir(p)
    fsync_dir(path)


def tmp_name(dest: Path) -> Path:
    """A temporary name beside `dest` that no other writer (or an earlier killed run) can share; it keeps the
    suffix, which some writers read the format from (matplotlib's savefig)."""
    dest = Path(dest)
    return dest.with_name(f"{dest.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{dest.suffix}")


def is_leftover(path: Path) -> bool:
    """A temporary or trash name a killed writer left behind (or llama.cpp's converter: `<name>.partial`)."""
    return ".tmp-" in path.name or path.name.startswith(".trash-") or path.name.endswith(".partial")


def _full(e: BaseException, dest: Path, what: str, need_bytes: int) -> diskspace.DiskFullError:
    return diskspace.DiskFullError(diskspace.message(
        dest.parent, need_bytes / diskspace.MB, what=what or dest.name, advice="free space and run it again",
        detail=f"; nothing was left half-written under {dest.name} (the writer said: {e})"))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_stream(f, chunks) -> None:
    """Write the chunks; the fault point sits after the first, so a test's kill or full disk lands mid-file."""
    for i, chunk in enumerate(chunks):
        f.write(chunk)
        if i == 0:
            f.flush()
            faultpoints.point("file")
    f.flush()
    os.fsync(f.fileno())


def _halves(data: bytes) -> list[bytes]:
    return [data[: len(data) // 2], data[len(data) // 2:]]


def write_bytes(path: str | Path, data: bytes, what: str = "") -> Path:
    """`data` at `path`, atomically (temp name, fsync, rename, folder fsync); a full disk is one clear error."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            _write_stream(f, _halves(data))
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if diskspace.is_no_space(e) and not isinstance(e, diskspace.DiskFullError):
            raise _full(e, path, what, len(data)) from None
        raise
    return path


def write_text(path: str | Path, text: str, what: str = "") -> Path:
    """A text file (UTF-8), atomically."""
    return write_bytes(path, text.encode("utf-8"), what)


def write_json(path: str | Path, obj, what: str = "") -> Path:
    """A JSON file (indented; paths and other objects as text), atomically."""
    return write_text(path, json.dumps(obj, indent=2, default=str), what)


def copy_file(src: str | Path, dest: str | Path, what: str = "") -> Path:
    """A copy of `src` at `dest`, atomically (never a half-copied file under `dest`'s name)."""
    src, dest = Path(src), Path(dest)
    tmp = tmp_name(dest)
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            _write_stream(fout, iter(lambda: fin.read(CHUNK), b""))
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if diskspace.is_no_space(e) and not isinstance(e, diskspace.DiskFullError):
            raise _full(e, dest, what, src.stat().st_size) from None
        raise
    return dest


@contextlib.contextmanager
def file(path: str | Path, what: str = "", need_bytes: int = 0):
    """Yield a temporary path for a library to write (savefig, save_file ...); fsynced and renamed to `path` when
    the block succeeds, removed when it fails."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if diskspace.is_no_space(e) and not isinstance(e, diskspace.DiskFullError):
            raise _full(e, path, what, need_bytes) from None
        raise


@contextlib.contextmanager
def folder(dest: str | Path, what: str = "", need_bytes: int = 0):
    """Yield an empty temporary folder beside `dest`; when the block succeeds, every file in it is fsynced and it
    replaces `dest` whole (the old one goes only once the new one is complete). A failure removes it."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(dest)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        faultpoints.point("folder")
        swap_in(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if diskspace.is_no_space(e) and not isinstance(e, diskspace.DiskFullError):
            raise _full(e, dest, what, need_bytes) from None
        raise


def swap_in(tmp: Path, dest: Path) -> None:
    """Put the complete folder `tmp` in place of `dest`: the old one renamed aside, the new one renamed in, the old
    one deleted. A kill between the two renames leaves `dest` absent (never mixed) and both copies whole."""
    tmp, dest = Path(tmp), Path(dest)
    trash = None
    if dest.exists():
        trash = dest.with_name(f".trash-{dest.name}-{uuid.uuid4().hex[:8]}")
        dest.rename(trash)
        faultpoints.point("swap")
    tmp.rename(dest)
    fsync_dir(dest.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def discard(path: str | Path) -> None:
    """Delete a file or folder so that a kill half-way never leaves a damaged one under its name: rename, then delete."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
    path.rename(trash)
    fsync_dir(path.parent)
    _remove(trash)


def clean(folder: str | Path) -> list[Path]:
    """Remove what killed writers left in `folder` (temporary and trash names, one level deep); returns them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if is_leftover(p)]
    found += [q for p in folder.iterdir() if p.is_dir() and not is_leftover(p) for q in p.iterdir() if is_leftover(q)]
    for path in found:
        _remove(path)
    return found
