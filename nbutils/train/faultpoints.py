"""Named points where the fault-injection tests kill the process (SIGKILL) or fill its disk, chosen by an environment
variable.

NBUTILS_TEST_KILL_AT="save:2" kills the process the second time it passes the point "save";
NBUTILS_TEST_FULL_AT="file:3" raises ENOSPC there instead, as a full disk does in the middle of a write.
Unset (always, outside tests) a fault point costs two dictionary lookups.
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "NBUTILS_TEST_KILL_AT"
FULL_ENV = "NBUTILS_TEST_FULL_AT"
_hits: dict[tuple[str, str], int] = {}


def _armed(env: str, name: str) -> bool:
    spec = os.environ.get(env)
    if not spec or not spec.startswith(name + ":"):
        return False
    key = (env, name)
    _hits[key] = _hits.get(key, 0) + 1
    return _hits[key] == int(spec.split(":", 1)[1])


def point(name: str) -> None:
    """Die here (or run out of disk here) when the test asked for this point and hit count."""
    if _armed(ENV, name):
        os.kill(os.getpid(), signal.SIGKILL)
    if _armed(FULL_ENV, name):
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {name})")


def reset() -> None:
    """Forget the passes counted so far (a test that arms a point twice in one process)."""
    _hits.clear()
