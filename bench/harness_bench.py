"""Harness overhead: `python -m nbutils.harness run` vs plain papermill on the same three notebooks.

Both sides are one fresh Python process executing the three notebooks in order with the same (default)
parameters, so interpreter start-up and imports cost the same; runs are interleaved so drift on a shared
machine hits both sides. The plain side gets working/input roots in a temp dir so 02 and 03 find their
upstream outputs through the path helper, as they would in one Kaggle session.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAIN = """
import sys, papermill
work, notebooks = sys.argv[1], sys.argv[2:]
for nb in notebooks:
    papermill.execute_notebook(nb, f"{work}/{nb.rsplit('/', 1)[-1]}", kernel_name="python3", cwd=work, progress_bar=False)
"""


def _timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def _plain(work: str, notebooks: list[str]) -> float:
    env = {**os.environ, "NBUTILS_WORKING_ROOT": work, "NBUTILS_INPUT_ROOT": os.path.join(work, "input"),
           "NBUTILS_TEMP_ROOT": os.path.join(work, "tmp")}
    return _timed([sys.executable, "-c", PLAIN, work, *notebooks], env)


def _harness(work: str, notebooks: list[str]) -> float:
    return _timed([sys.executable, "-m", "nbutils.harness", "run", *notebooks, "--no-internet", "--out", work],
                  dict(os.environ))


def run(repeats: int = 2) -> list[dict]:
    from nbutils import chain, embedded

    embedded.ensure()  # built once up front; both sides only read it
    notebooks = [str(ROOT / nb) for nb in chain.notebook_paths()]
    plain, checked = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            plain.append(_plain(a, notebooks))
            checked.append(_harness(b, notebooks))
    p, h = statistics.median(plain), statistics.median(checked)
    note = f"median of {repeats} interleaved runs, one process per side"
    return [
        {"bench": "harness", "metric": "plain papermill, 3 notebooks (s)", "value": round(p, 1), "note": note},
        {"bench": "harness", "metric": "harness run, 3 notebooks (s)", "value": round(h, 1), "note": note},
        {"bench": "harness", "metric": "overhead ratio harness/plain", "value": round(h / p, 3), "target": "<= 1.10"},
    ]


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
