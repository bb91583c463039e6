"""`make papermill-check`'s run of the chain, stamped so the tests reuse it while it is fresh for this source tree.

CI executes the notebook chain once per environment: `check` runs the chain in the project venv and in each
Kaggle image twin, side by side, and writes `chain-stamp.json` beside each run; tests/harness/test_notebooks.py
reads those runs when a stamp's fingerprint matches the files it was made from, and runs the chain itself otherwise.
Every run has a secret attached (`CANARY`), as a Kaggle user's HF_TOKEN is, so the secret-in-output check
has a real value to look for.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
STAMP = "chain-stamp.json"
# Everything a stamped row depends on in this repository: change one and the stamp no longer matches. The rows hold
# the static checks too: pair-drift reads the notebooks' .py, the lint reads the images' freezes.
SOURCES = ("nbutils/**/*.py", "notebooks/*.ipynb", "notebooks/*.py", "kaggle-metadata/*/kernel-metadata.json",
           "requirements*.txt", "pyproject.toml", "kaggle-image/*.txt", "kaggle-image/freezes/*.txt")
# Shaped like a real Hugging Face token (the secret shapes match it), but not one; split so the source has no match.
CANARY = "hf_" + "Zp4Lq8WnR2tXc6VbM9kJd3HgF7sA5eYu1o"



def fingerprint(root: Path = ROOT) -> str:
    """SHA-256 over the path and content of every source file a chain run depends on."""
    digest = hashlib.sha256()
    for path in sorted({p for pattern in SOURCES for p in root.glob(pattern) if p.is_file()}):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def stamped(execute, out: Path, params: dict):
    """Run `execute()` (the project-venv chain), then stamp `out` with its rows and the source fingerprint.

    The old stamp goes first, so a run that dies half-way never leaves a stamp beside half-written outputs.
    """
    (out / STAMP).unlink(missing_ok=True)
    before = fingerprint()  # taken first: a file edited during the run makes the stamp stale, never wrongly fresh
    results = execute()
    rows = [{"notebook": r.notebook, "status": r.status, "problems": [str(p) for p in r.problems]} for r in results]
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).write_text(json.dumps({"fingerprint": before, "params": params, "rows": rows}, indent=2))
    return results


def fresh_rows(out: Path, root: Path = ROOT) -> list[dict] | None:
    """The stamped run's rows when `out` holds a default-parameter run of exactly these sources, else None."""
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if stamp.get("params") or stamp.get("fingerprint") != fingerprint(root):
        return None
    return stamp["rows"]


def check(notebooks: list[Path], out: Path, params: dict, time_budget: float | None, twin_names: list[str],
          jobs: int = 0, one=None) -> list:
    """What `python -m nbutils.harness check` runs: static checks, the chain in the project venv and in each twin.

    The runs are independent (each its own folder, kernels and twin copy), so they go `jobs` at a time in worker
    processes (0: all at once), each kernel with its share of the cores' math threads. All at once, not one per
    core: a chain leaves its core idle while kernels start and pip reads, and with fewer cores than runs the
    shortest would run last, alone. Offline, with `CANARY` as HF_TOKEN (the caller's own token never reaches the
    kernels: nothing online runs); each run is stamped for the tests. Rows come back in the order of the runs: the
    project venv, then the twins. `one`: what runs one of them (run_one; a module-level function, so a worker
    process can import it).
    """
    from nbutils.harness import runner

    names = [t.name for t in runner._twins().twins(None if "all" in twin_names else twin_names)] if twin_names else []
    runs, one = [None, *names], one or run_one
    jobs = max(1, min(jobs or len(runs), len(runs)))
    threads = {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}
    with mock.patch.dict(os.environ, {"HF_TOKEN": CANARY, **(threads if jobs > 1 else {})}):
        if jobs == 1:
            return [r for name in runs for r in one(name, notebooks, out, params, time_budget)]
        # spawn, not fork: the workers start clean (no copy of this process's threads or imported torch). The twins
        # first: each takes longer than the project venv (its first notebook installs).
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(one, name, notebooks, out, params, time_budget) for name in [*runs[1:], None]}
            return [r for name in runs for r in futures[name].result()]


def run_one(twin_name: str | None, notebooks: list[Path], out: Path, params: dict, time_budget: float | None) -> list:
    """One stamped run of the chain: in the project venv (twin_name None, static checks included) or in that twin."""
    from nbutils.harness import runner

    if twin_name is not None:
        twin = runner._twins().twins([twin_name])[0]
        return runner.run_twin(twin, notebooks, out, params, False, time_budget, stamp=stamped)
    t0 = time.monotonic()
    execute = lambda: runner.with_static(notebooks, lambda: runner.run(notebooks, out, params, False, time_budget))  # noqa: E731
    results = stamped(execute, out, params)
    print(f"[papermill-check] project venv: {len(notebooks)} notebooks in {time.monotonic() - t0:.0f} s", flush=True)
    return results


def fresh_twin_runs(out: Path, root: Path = ROOT) -> list[Path]:
    """The twin runs under `out` (twin-NAME/) that are stamped fresh for these sources."""
    return sorted(d for d in out.glob("twin-*") if fresh_rows(d, root) is not None)
