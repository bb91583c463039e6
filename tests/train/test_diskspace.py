"""Disk space: every shape a full disk takes is recognised, and the sizes a run needs add up."""

import errno

import pytest

from nbutils.train import diskspace


@pytest.mark.parametrize("exc", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 240960 vs 240852"),
    RuntimeError("basic_ios::clear: iostream error"),
    diskspace.DiskFullError("disk full"),
])
def test_a_full_disk_is_recognised_in_every_form(exc):
    assert diskspace.is_no_space(exc)


def test_a_full_disk_is_recognised_when_chained_and_nothing_else_is():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("save failed") from inner
    except RuntimeError as outer:
        assert diskspace.is_no_space(outer)
    assert not diskspace.is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert not diskspace.is_no_space(ValueError("bad value")) and not diskspace.is_no_space(None)


def test_sizes_add_up():
    params = 2**20  # a million trainable parameters
    assert diskspace.checkpoint_mb(params) == 12 + diskspace.TOKENIZER_ALLOWANCE_MB
    assert diskspace.final_mb(params) == 4 + diskspace.TOKENIZER_ALLOWANCE_MB
    assert diskspace.needed_mb(10, 3) == 50 and diskspace.needed_mb(10, None) == 30


def test_check_names_the_folder_and_what_to_do(tmp_path):
    assert diskspace.size_text(5.0) == "5.0 MB" and diskspace.size_text(2048) == "2.00 GiB"  # MB under 0.01 GiB
    missing = tmp_path / "not" / "yet"  # measured on the nearest folder that exists
    assert diskspace.check(missing, 1, 2) is None
    line = diskspace.check(missing, 1e12, 2)
    assert line.startswith(f"disk full at {missing}: needs ~976562500.00 GiB, ") and "keep_checkpoints (now 2)" in line
    assert diskspace.says_no_space("OSError: [Errno 28] No space left on device") and not diskspace.says_no_space("ok")


@pytest.mark.parametrize("keep", [0, None, -1])
def test_keeping_every_checkpoint_is_refused_before_training(tmp_path, keep):
    """0 or None would keep every checkpoint: the disk need grows with the run, which no plan bounds."""
    assert f"keep_checkpoints={keep} keeps every checkpoint" in diskspace.check(tmp_path, 1.0, keep)
    assert diskspace.check(tmp_path, 1.0, 1) is None
