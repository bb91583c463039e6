"""The time plan against the clock: 400-step runs of the embedded default, predicted from their own calibration.

Each run is 02's recipe (nbutils.harness.notebook_recipe: its Trainer, TrainingArguments and callbacks) with
02's defaults (evaluation, probe and save every 20 steps) at one batch size, in a fresh process with one math
thread. The time plan is made after the run's first steps; the run then goes on to step 400 and its final
evaluation. Rows: the predicted and the measured wall time (first step to final evaluation, evaluations and saves
included), the error, and what the calibration cost (its extra evaluation and save, when none was scheduled at
its last step) as a share of the run.

The plan's constants (nbutils/train/timeplan.py: warm-up, timed share, range) were set on runs at batch 16;
this bench reports batch sizes 8, 24 and 32, which were not used for that.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from pathlib import Path

BATCHES = (8, 24, 32)  # the report set; batch 16 was the tuning set
STEPS = 400
TARGET = 0.15


def _one(data: str, out: str, batch: int, steps: int) -> dict:
    """One run in this (fresh) process: the time plan's record, planned beside actual."""
    import torch

    from nbutils.harness import notebook_recipe

    torch.set_num_threads(1)
    _, _, session = notebook_recipe.train(data, out, max_steps=steps, per_device_batch_size=batch, resume=False)
    return session.result.time_plan


def prepared(folder: Path) -> Path:
    """01's output for the embedded default's task data, as 02 reads it."""
    from nbutils import embedded
    from nbutils.data import splits
    from nbutils.data.chatformat import load_tokenizer

    splits.prepare([embedded.resolve_raw_data("embedded")], folder, load_tokenizer("embedded"), verbose=False,
                   base_model="embedded")
    return folder


def measure(batches=BATCHES, steps: int = STEPS) -> list[dict]:
    """One planned-vs-actual record per batch size, each run in its own process."""
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned runs: a busy shared machine punishes spinning threads
    records = []
    with tempfile.TemporaryDirectory() as d:
        data = prepared(Path(d) / "data")
        for batch in batches:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                record = pool.apply(_one, (str(data), str(Path(d) / f"run{batch}"), batch, steps))
            records.append({"batch": batch, **record, "load_average_1min": round(os.getloadavg()[0], 2)})
    return records


def rows(records: list[dict]) -> list[dict]:
    """The bench table's rows from measure()'s records."""
    out = []
    for r in records:
        where = f"{STEPS} steps of the embedded default, batch {r['batch']}"
        out += [{"bench": "timeplan", "metric": f"predicted / measured wall time, s ({where})",
                 "value": f"{r['predicted_s']:.1f} / {r['actual_s']:.1f}",
                 "note": f"range {r['low_s']:.0f}-{r['high_s']:.0f} s; timed steps {r['done_step'] - r['timed_steps'] + 1}"
                         f"-{r['done_step']}; load average {r['load_average_1min']}"},
                {"bench": "timeplan", "metric": f"time plan error ({where})", "value": f"{r['error']:+.1%}",
                 "target": f"within {TARGET:.0%}"},
                {"bench": "timeplan", "metric": f"calibration cost, share of the run ({where})",
                 "value": f"{r['calibration_share']:.1%}", "target": "<= 3%",
                 "note": f"{r['calibration_cost_s']:.2f} s: the extra evaluation and save"}]
    worst = max(abs(r["error"]) for r in records)
    out.append({"bench": "timeplan", "metric": "largest time plan error of the runs", "value": f"{worst:.1%}",
                "target": f"within {TARGET:.0%}"})
    return out


def run() -> list[dict]:
    return rows(measure())


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
