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
