"""The dry run, measured: real-shaped model folders through `python -m nbutils.plan dry-run`, and broken ones.

    python -m bench dryrun_bench

Each folder of bench/real_models.py (the published config.json and generation_config.json values, the family's
real tokenizer from llama.cpp's vocabulary files, no weights) goes through the dry run as a user's folder would:
the twin is built from it and the chain runs on the twin with smoke=True. The deliberately broken folders
(real_models.BROKEN) must fail with their problem named. Rows: the verdict, the problem the report names, and the
wall time of the whole dry run (files, twin, chain) with the CPU seconds of all its processes beside it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TARGET_S = 120  # a dry run of one model, on this CPU


def _row(metric: str, value, target: str = "", note: str = "") -> dict:
    return {"bench": "dryrun", "metric": metric, "value": value, "target": target, "note": note}


def one(name: str) -> dict:
    """The dry run of one folder: verdict, report, seconds."""
    from bench import real_models
    from nbutils.plan import dryrun

    with tempfile.TemporaryDirectory() as tmp:
        run = dryrun.dry_run(str(real_models.folder(name)), Path(tmp) / "run")
        return {"name": name, "ok": run.ok, "report": run.report(), "shape": run.shape, "seconds": dict(run.seconds),
                "load": round(os.getloadavg()[0], 2)}


def rows(records: list[dict]) -> list[dict]:
    from bench import real_models

    out = []
    for r in records:
        s = r["seconds"]
        wall = s.get("total", sum(v for k, v in s.items() if k in ("fetch", "build")))
        if r["name"] in real_models.BROKEN:
            words = real_models.BROKEN[r["name"]][2]
            named = not r["ok"] and words in r["report"]
            problem = next((line for line in r["report"].splitlines() if words in line), "")
            out.append(_row(f"dry run of {r['name']}: fails naming its problem", "yes" if named else "no", "yes",
                            problem.strip()[:160]))
        else:
            out.append(_row(f"dry run of {r['name']}: passes", "yes" if r["ok"] else "no", "yes", r["shape"]))
        out.append(_row(f"dry run of {r['name']}: wall time, s", round(wall), f"< {TARGET_S}",
                        f"cpu {s.get('cpu', 0):.0f} s (all processes); chain {s.get('chain', 0):.0f} s; "
                        f"load average {r['load']}"))
    return out


def run() -> list[dict]:
    from bench import real_models

    return rows([one(name) for name in [*real_models.MODELS, *real_models.BROKEN]])


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
