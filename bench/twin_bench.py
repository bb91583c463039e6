"""Twin stage vs project-venv stage of `make papermill-check`, side by side in one `harness check` run.

The project-venv stage runs the chain where every package is at our pins (the install cell does nothing);
the twin stage runs it again in each Kaggle image twin (kaggle-image/*.txt), each notebook in a hard-linked copy:
the first a pristine one that installs from the attached nbutils dataset, the later ones a copy of that image right
after its install (nbutils/harness/shared_install.py). Warm cache: the twins are built first
(their build time, cold or cached, is reported from the cache's built.json), then only the check is timed.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = re.compile(r"^\[papermill-check\] (project venv|twin (\S+)): (\d+) notebooks in (\d+) s$")


def run() -> list[dict]:
    from nbutils.harness import twin
    from nbutils.kaggle import dataset as kaggle

    rows = []
    for t in twin.twins():
        info = twin.build(t)
        rows.append({"bench": "twin", "metric": f"build {t.name} (s)", "value": info["seconds"],
                     "note": "cached" if info["cached"] else "built now", })
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            twin.pristine_copy(t, Path(tmp) / "venv")
            rows.append({"bench": "twin", "metric": f"pristine copy {t.name} (s)", "value": round(time.perf_counter() - t0, 1),
                         "note": "cp -al of the cached venv"})
    kaggle.dataset()
    with DiskPeak(tempfile.gettempdir()) as disk:
        stages, count, ok = _check("--twin", "all")
    alone_stages, _, alone_ok = _check()  # the project venv's stage as a check without twins runs it
    venv, alone = stages.pop("venv", None), alone_stages.get("venv")
    note = "one `harness check --twin all` run" + ("" if ok else " (the check FAILED: see its report)")
    rows.append({"bench": "twin", "metric": f"project-venv stage, {count} notebooks (s)", "value": venv, "note": note})
    rows.append({"bench": "twin", "metric": f"project-venv stage run alone, {count} notebooks (s)", "value": alone,
                 "note": "`harness check`, no twin" + ("" if alone_ok else " (the check FAILED: see its report)")})
    for name, seconds in stages.items():
        rows.append({"bench": "twin", "metric": f"twin {name} stage (s)", "value": seconds, "note": note})
    for name, seconds in stages.items() if venv else ():  # issue #13: each twin within 3x of the project venv
        rows.append({"bench": "twin", "metric": f"twin {name} stage / project-venv stage", "target": "<= 3",
                     "value": round(seconds / venv, 2), "note": note})
    if alone and stages:  # the twin stage: every twin at once, beside the project venv; against that venv alone
        rows.append({"bench": "twin", "metric": "twin stage (every twin, side by side) / project-venv stage run alone",
                     "target": "<= 3", "value": round(max(stages.values()) / alone, 2),
                     "note": f"the twins' stage times added: {sum(stages.values())} s, what they take one after the "
                             f"other ({sum(stages.values()) / alone:.1f}x)"})
    rows.append({"bench": "twin", "metric": "disk used at the peak of the check (MB)", "value": disk.peak_mb,
                 "note": "free space sampled every 0.5 s on the run's filesystem (other work there counts too); "
                         "the twins' cache and the dataset were in place before"})
    return rows


def _check(*args: str) -> tuple[dict[str, int], str, bool]:
    """One `python -m nbutils.harness check` into a fresh folder: seconds per stage ("venv" for the project venv's,
    else the twin's name), how many notebooks, whether it passed."""
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-m", "nbutils.harness", "check", *args, "--out", out],
                              cwd=ROOT, capture_output=True, text=True)
        report = Path(out) / "report.json"
        ok = json.loads(report.read_text())["ok"] if report.exists() else False
    matches = [m for m in map(STAGE.match, proc.stdout.splitlines()) if m]
    return {m.group(2) or "venv": int(m.group(4)) for m in matches}, matches[0].group(3) if matches else "?", ok


class DiskPeak:
    """Samples free disk space under `path` in a thread; `peak_mb`: the most used beyond what was used at the start."""

    def __init__(self, path: str):
        self.path, self.peak_mb, self._stop = path, 0, threading.Event()

    def _watch(self, start: int) -> None:
        while not self._stop.wait(0.5):
            self.peak_mb = max(self.peak_mb, round((start - shutil.disk_usage(self.path).free) / 2**20))

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, args=(shutil.disk_usage(self.path).free,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
