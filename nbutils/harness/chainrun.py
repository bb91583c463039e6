"""The chain run `papermill-check` leaves behind, reused by the tests when it is fresh for this source tree.

CI executes the notebook chain once per environment: `make papermill-check` runs 01 -> 04 in the project venv
and writes `chain-stamp.json` beside its report; tests/harness/test_notebooks.py reads that run when the stamp's
fingerprint matches the files it was made from, and runs the chain itself (once per session) otherwise.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAMP = "chain-stamp.json"
# Everything a notebook run depends on in this repository: change one and the stamp no longer matches.
SOURCES = ("nbutils/**/*.py", "notebooks/*.ipynb", "kaggle-metadata/*/kernel-metadata.json", "requirements*.txt",
           "pyproject.toml")


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
