"""One way to write an artifact: complete under its final name or not there; a folder swapped in whole; a full disk
as one clear error; a kill leaves only temporary names, which the next run cleans."""

import errno
import os
import signal
import subprocess
import sys

import pytest

from nbutils.train import atomic, diskspace, faultpoints


@pytest.fixture
def full_at(monkeypatch):
    """full_at("file:1"): the named fault point raises ENOSPC on that pass, as a full disk does mid-write."""
    def arm(spec):
        faultpoints.reset()
        monkeypatch.setenv(faultpoints.FULL_ENV, spec)
    yield arm
    faultpoints.reset()


def test_a_file_replaces_the_old_one_whole_and_leaves_no_temporary_name(tmp_path):
    path = tmp_path / "summary.json"
    atomic.write_json(path, {"step": 1})
    atomic.write_json(path, {"step": 2})
    assert path.read_text() == '{\n  "step": 2\n}' and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_full_disk_mid_file_keeps_the_old_file_and_says_what_how_much_and_how_much_is_free(tmp_path, full_at):
    path = tmp_path / "export_summary.json"
    atomic.write_text(path, "old")
    full_at("file:1")
    with pytest.raises(diskspace.DiskFullError) as err:
        atomic.write_text(path, "x" * 3000, "the export summary")
    msg = str(err.value)
    assert msg.startswith(f"disk full at {tmp_path} writing the export summary: needs ~0.0 MB, ") and " GiB free; " in msg
    assert "nothing was left half-written under export_summary.json" in msg and "No space left on device" in msg
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["export_summary.json"]


def test_sizes_under_a_hundredth_of_a_gib_read_in_mb():
    assert diskspace.size_text(3.2) == "3.2 MB" and diskspace.size_text(10.23) == "10.2 MB"
    assert diskspace.size_text(10.24) == "0.01 GiB" and diskspace.size_text(16 * 1024) == "16.00 GiB"


def test_a_folder_is_swapped_in_whole_and_a_failure_keeps_the_old_one(tmp_path, full_at, monkeypatch):
    dest = tmp_path / "merged"
    with atomic.folder(dest) as tmp:
        (tmp / "model.safetensors").write_text("first")
    full_at("folder:1")  # everything written, the disk fills before the swap: the old folder stays
    with pytest.raises(diskspace.DiskFullError, match="writing the merged model: needs ~1.0 MB"):
        with atomic.folder(dest, "the merged model", 2**20) as tmp:
            (tmp / "model.safetensors").write_text("second")
    assert (dest / "model.safetensors").read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["merged"]
    monkeypatch.delenv(faultpoints.FULL_ENV)
    with pytest.raises(ValueError):
        with atomic.folder(dest) as tmp:
            raise ValueError("a failed verification")
    with atomic.folder(dest) as tmp:
        (tmp / "model.safetensors").write_text("third")
    assert (dest / "model.safetensors").read_text() == "third" and [p.name for p in tmp_path.iterdir()] == ["merged"]


def test_copy_file_and_file_are_atomic_too(tmp_path):
    src = tmp_path / "a.gguf"
    src.write_bytes(os.urandom(3 * atomic.CHUNK + 5))
    assert atomic.copy_file(src, tmp_path / "b.gguf").read_bytes() == src.read_bytes()
    with atomic.file(tmp_path / "curves.png") as tmp:
        assert tmp.suffix == ".png" and atomic.is_leftover(tmp)  # savefig reads the format from the suffix
        tmp.write_bytes(b"png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "curves.png"]


KILLED = """
import sys
from pathlib import Path
from nbutils.train import atomic
atomic.write_text(Path(sys.argv[1]) / "report.json", "new " * 1000)
"""


def test_a_kill_mid_write_leaves_the_old_file_and_a_temporary_name_that_clean_removes(tmp_path):
    (tmp_path / "report.json").write_text("old")
    (tmp_path / "adapter").mkdir()
    env = {**os.environ, faultpoints.ENV: "file:1"}
    proc = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], env=env, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if atomic.is_leftover(p)]
    assert len(left) == 1 and 0 < left[0].stat().st_size < 4000  # half written, under a temporary name only
    assert (tmp_path / "report.json").read_text() == "old"
    (tmp_path / "adapter" / "weights.tmp-1-ab.bin").write_text("half")
    (tmp_path / ".trash-merged-1234abcd").mkdir()
    (tmp_path / "adapter" / "adapter-f16.gguf.partial").write_text("the converter's, cut short")
    assert len(atomic.clean(tmp_path)) == 4
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adapter", "report.json"]


def test_discard_renames_first_and_any_other_error_is_left_alone(tmp_path, monkeypatch):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "f").write_text("x")
    atomic.discard(tmp_path / "old")
    atomic.discard(tmp_path / "never-there")
    assert list(tmp_path.iterdir()) == []

    def denied(*a, **k):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(atomic.os, "replace", denied)
    with pytest.raises(PermissionError):
        atomic.write_text(tmp_path / "x.json", "{}")
    assert list(tmp_path.iterdir()) == []
