"""One run per output_dir: a second process is refused with the holder named; release lets the next one in."""

import subprocess
import sys

import pytest

from nbutils.train import runlock

HOLD = "import sys, time; from nbutils.train import runlock; runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)"


def test_reentrant_in_one_process_and_released(tmp_path):
    lock = runlock.acquire(tmp_path)
    assert runlock.acquire(tmp_path) is lock and (tmp_path / runlock.HOLDER).exists()
    runlock.release(tmp_path)
    assert not lock.is_locked and not (tmp_path / runlock.HOLDER).exists()


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(runlock.RunLockedError, match=rf"in use by another run \(host .*, pid {holder.pid}, started"):
            runlock.acquire(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    runlock.acquire(tmp_path)  # the kernel dropped the killed holder's lock: nothing stale blocks this run
    runlock.release(tmp_path)


def test_02s_lock_removes_what_killed_writers_left_and_only_once_it_holds_the_folder(tmp_path):
    from nbutils.train import training

    left = [tmp_path / "training_summary.tmp-41-0a1b2c3d.json", tmp_path / "learning_curves.tmp-41-0a1b2c3d.png",
            tmp_path / ".run.lock.tmp-41-0a1b2c3d.json", tmp_path / "trainer" / ".trash-checkpoint-20-0a1b"]
    kept = [tmp_path / "log_history.json", tmp_path / "trainer" / "checkpoint-20" / "adapter_model.safetensors"]
    for path in left + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(runlock.RunLockedError):
            training.lock(tmp_path)
        assert all(p.exists() for p in left)  # another run holds the folder: its files in flight are its own
    finally:
        holder.kill()
        holder.wait()
    training.lock(tmp_path)
    runlock.release(tmp_path)
    assert not any(p.exists() for p in left) and all(p.exists() for p in kept)
