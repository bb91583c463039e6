"""What each platform gives a run: the session's wall-clock limit, the weekly GPU quota, the GPUs per session.

The one place these numbers live. 02's and 05's `time_budget_min="auto"` is this platform's session limit less a
30-minute margin for the save (`budget_min`); the time plan (nbutils.train.timeplan) counts the sessions and the share of the
weekly quota a run needs from here. Figures are the platforms' published ones; Colab publishes no quota for its
free tier and ends sessions earlier when GPUs are scarce, so its session limit is an upper bound.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

HOUR = 3600.0


@dataclass(frozen=True)
class Limits:
    platform: str
    session_h: float | None  # a session's wall-clock limit in hours (None: no limit)
    week_h: float | None  # GPU hours a week (None: no quota, or none published)
    gpus: int | None  # GPUs one session can have (None: whatever the machine holds)
    note: str

    @property
    def session_s(self) -> float | None:
        return None if self.session_h is None else self.session_h * HOUR

    def describe(self) -> str:
        """One line for a plan's table: '12 h a session, 30 GPU h a week, up to 2 GPUs (...)'."""
        parts = [f"{self.session_h:g} h a session" if self.session_h else "no session limit",
                 f"{self.week_h:g} GPU h a week" if self.week_h else "no weekly quota",
                 f"up to {self.gpus} GPU(s)" if self.gpus else "the machine's GPUs"]
        return f"{self.platform}: {', '.join(parts)} ({self.note})"


LIMITS = {
    "kaggle": Limits("kaggle", 12.0, 30.0, 2, "a notebook run stops at 12 h; the GPU quota resets weekly"),
    "colab": Limits("colab", 12.0, None, 1, "free tier: at most 12 h, often less; usage limits are not published"),
    "local": Limits("local", None, None, None, "your own machine"),
}
MARGIN_MIN = 30.0  # stop this long before the session limit: the save and the final checks need it


def for_platform(name: str | None = None) -> Limits:
    """The limits of `name` (kaggle, colab, local), or of the platform this runs on."""
    if name is None:
        from nbutils.runtime.environment import detect_platform

        name = detect_platform().name
    return LIMITS.get(name, LIMITS["local"])


def default_budget_min(limits: Limits) -> float | None:
    """The time budget that stops a run MARGIN_MIN before the session limit (None where there is none)."""
    return None if limits.session_h is None else limits.session_h * 60 - MARGIN_MIN


def budget_min(value="auto", platform: str | None = None) -> float | None:
    """time_budget_min as a run uses it: a number of minutes as given, or "auto": the session limit of this platform
    (or `platform`) less MARGIN_MIN; None where there is no limit (a local run is never stopped for time)."""
    from nbutils.defaults import is_auto

    if not is_auto(value):
        return float(value)
    return default_budget_min(for_platform(platform))


def session_start(platform=None) -> float:
    """When the time budget starts counting: on a platform whose sessions end at a wall-clock limit (Kaggle, Colab:
    LIMITS) the kernel's start, since that limit runs from the session's start, not from this cell
    (nor from its rerun); elsewhere now (a local kernel may have been open for days, and nothing stops it).
    Processes the notebook starts for DDP inherit the kernel's answer through NBUTILS_SESSION_START:
    their own start is the fork, which may come hours into the session."""
    from nbutils.runtime.environment import detect_platform, process_start_time

    if os.environ.get("NBUTILS_SESSION_START"):
        return float(os.environ["NBUTILS_SESSION_START"])
    if for_platform((platform or detect_platform()).name).session_h is None:
        return time.time()
    try:
        return process_start_time()
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()
