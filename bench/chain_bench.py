"""Seconds per notebook for the default chain (embedded default, plain papermill, fresh kernels)."""

import os
import tempfile
import time
from pathlib import Path
from unittest import mock

from nbutils import chain

ROOT = Path(__file__).resolve().parent.parent
CHAIN = chain.NOTEBOOKS  # the notebooks `make papermill-check` runs, in order


def run() -> list[dict]:
    import papermill

    from nbutils import embedded

    embedded.ensure()  # the one-off build is not part of a notebook's time
    rows = []
    with tempfile.TemporaryDirectory() as work:
        env = {"NBUTILS_WORKING_ROOT": work, "NBUTILS_INPUT_ROOT": os.path.join(work, "input")}
        with mock.patch.dict(os.environ, env):
            for name in CHAIN:
                t0 = time.perf_counter()
                papermill.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), os.path.join(work, f"{name}.ipynb"),
                                           kernel_name="python3", cwd=work, progress_bar=False)
                rows.append({"bench": "chain", "metric": f"{name} seconds", "value": round(time.perf_counter() - t0, 1)})
    rows.append({"bench": "chain", "metric": "total seconds", "value": round(sum(r["value"] for r in rows), 1),
                 "target": "< 180 (with harness)"})
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
