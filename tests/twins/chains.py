"""The family matrix's chain for one family twin, run once per test session whichever test file asks first.

`pytest -n 2 --dist loadfile` runs test files in separate processes: the family matrix (tests/test_families.py)
and 04's end-to-end tests (tests/export/test_export_notebook.py), which start from the same Qwen2.5 chain. The
chain runs under a folder every worker shares, behind a file lock: the first to ask runs it, the other waits and
reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from nbutils import chain

ROOT = Path(__file__).resolve().parents[2]
# 04's runtime check in llama.cpp runs in one test, on one twin (tests/export/test_runtimecheck.py), not in every
# family's chain.
PARAMS = {"04_export:force": "True", "04_export:verify_runtime": "False", "05_preference:per_device_batch_size": "2",
          "smoke": "True", "batch_size": "4", "per_device_batch_size": "4"}


def shared_root(tmp_path_factory) -> Path:
    """A folder all xdist workers of this session share (each worker's basetemp is a child of the session's)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "family-chains"
    root.mkdir(parents=True, exist_ok=True)
    return root


def family_chain(name: str, folder: Path, root: Path, last: int = 5) -> tuple[Path, int, str]:
    """01 -> 05 (or up to notebook `last`) under `python -m nbutils.harness run` on the family twin in `folder`,
    named in 01 alone (02 to 05 take it from upstream, as a user's chain does), offline: (harness output folder, exit
    code, the log's tail). Whoever asks first decides `last` for the session."""
    out, done = root / name, root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            cmd = [sys.executable, "-m", "nbutils.harness", "run", *(str(ROOT / nb) for nb in chain.notebook_paths()[:last]),
                   "-p", "01_data_prep:base_model", str(folder), "--no-internet", "--out", str(out)]
            for key, value in PARAMS.items():
                cmd += ["-p", key, value]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            done.write_text(json.dumps({"returncode": proc.returncode, "log": proc.stdout[-3000:] + proc.stderr[-3000:]}))
        ran = json.loads(done.read_text())
    return out, ran["returncode"], ran["log"]
