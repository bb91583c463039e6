"""Named points where the fault-injection tests kill the process (SIGKILL), chosen by an environment variable.

NBUTILS_TEST_KILL_AT="save:2" kills the process the second time it passes the point "save".
Unset (always, outside tests) a fault point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "NBUTILS_TEST_KILL_AT"
_hits: dict[str, int] = {}


def point(name: str) -> None:
    """Die here when the test asked for this point and hit count."""
    spec = os.environ.get(ENV)
    if not spec or not spec.startswith(name + ":"):
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(spec.split(":", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)
