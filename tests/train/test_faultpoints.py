"""Fault points: nothing happens unless a test names the point; then SIGKILL on the asked-for pass, not before."""

import os
import signal
import subprocess
import sys

from nbutils.train import faultpoints

PASSES = """
from nbutils.train import faultpoints
faultpoints.point("load")
for i in range(1, 4):
    faultpoints.point("save")
    print("passed save", i, flush=True)
"""


def _run(spec, env_name=faultpoints.ENV):
    env = {k: v for k, v in os.environ.items() if k not in (faultpoints.ENV, faultpoints.FULL_ENV)}
    if spec:
        env[env_name] = spec
    return subprocess.run([sys.executable, "-c", PASSES], env=env, capture_output=True, text=True, timeout=60)


def test_unset_or_another_point_never_kills():
    for spec in (None, "step:1", "sav:1"):
        out = _run(spec)
        assert out.returncode == 0 and out.stdout.splitlines() == [f"passed save {i}" for i in (1, 2, 3)], spec


def test_the_named_point_is_killed_on_its_nth_pass():
    out = _run("save:2")
    assert out.returncode == -signal.SIGKILL and out.stdout.splitlines() == ["passed save 1"]
    assert _run("load:1").stdout == ""  # killed before any save


def test_a_full_disk_point_raises_enospc_on_its_nth_pass():
    out = _run("save:3", faultpoints.FULL_ENV)
    assert out.returncode == 1 and out.stdout.splitlines() == ["passed save 1", "passed save 2"]
    assert "OSError: [Errno 28] No space left on device (injected at save)" in out.stderr
