"""Harness overhead: `nbutils.harness run` vs plain papermill on the same three notebooks, side by side."""

import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _plain(work: str) -> float:
    import papermill

    from nbutils import harness

    old = {k: os.environ.get(k) for k in ("NBUTILS_WORKING_ROOT", "NBUTILS_INPUT_ROOT")}
    os.environ.update({"NBUTILS_WORKING_ROOT": work, "NBUTILS_INPUT_ROOT": os.path.join(work, "input")})
    t0 = time.perf_counter()
    try:
        for nb in harness.CHAIN:
            papermill.execute_notebook(str(ROOT / nb), os.path.join(work, Path(nb).name), kernel_name="python3",
                                       cwd=work, progress_bar=False)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return time.perf_counter() - t0


def _harness(work: str) -> float:
    from nbutils import harness

    t0 = time.perf_counter()
    notebooks = [ROOT / nb for nb in harness.CHAIN]
    harness.lint(notebooks)
    results = harness.run(notebooks, Path(work), {}, internet=False, time_budget=600)
    assert all(r.status == "passed" for r in results), [str(p) for r in results for p in r.problems]
    return time.perf_counter() - t0


def run(repeats: int = 2) -> list[dict]:
    from nbutils import embedded

    embedded.ensure()
    plain, checked = [], []
    for _ in range(repeats):  # interleaved, so drift on a shared machine hits both sides
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            plain.append(_plain(a))
            checked.append(_harness(b))
    p, h = statistics.median(plain), statistics.median(checked)
    return [
        {"bench": "harness", "metric": "plain papermill, 3 notebooks (s)", "value": round(p, 1)},
        {"bench": "harness", "metric": "harness lint+run, 3 notebooks (s)", "value": round(h, 1)},
        {"bench": "harness", "metric": "overhead ratio harness/plain", "value": round(h / p, 3), "target": "<= 1.10",
         "note": f"median of {repeats} interleaved runs"},
    ]


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
