"""The time plan against the clock: 400-step runs of the embedded default, predicted from their own calibration.

Each run is 02's recipe (nbutils.harness.notebook_recipe: its Trainer, TrainingArguments and callbacks) with
02's defaults (evaluation, probe and save every 20 steps) at one batch size, in a fresh process with one math
thread. The time plan is made after the run's first steps; the run then goes on to step 400 and its final
evaluation. Rows: the predicted and the measured wall time (first step to final evaluation, evaluations and saves
included), the error, and what the calibration cost (its extra evaluation and save, when none was scheduled at
its last step) as a share of the run.

The plan's constants (nbutils/train/timeplan.py: warm-up, timed share and seconds, range) were set on runs at batch 16;
this bench reports batch sizes 8, 24 and 32, which were not used for that.

Two controls say how much of the error is the machine's own: the first batch size run a second time, the same
way (an A/A pair: nothing differs but the moment), and a fixed workload (one thread, a 256 x 256 matmul) timed in
one-second windows for CONTROL_S seconds: on a shared virtual machine its speed moves by itself, and a
calibration of about a second sees one moment of it.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from pathlib import Path

BATCHES = (8, 24, 32)  # the report set; batch 16 was the tuning set
STEPS = 400
TARGET = 0.15
CONTROL_S = 40


def machine_speed(seconds: float = CONTROL_S) -> dict:
    """The fixed workload's time per one-second window (in this process, one math thread): slowest / fastest."""
    import statistics
    import time

    import torch

    torch.set_num_threads(1)
    a, chunks = torch.randn(256, 256), []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        chunks.append(time.perf_counter() - t0)
    per = max(1, round(1.0 / statistics.fmean(chunks)))  # chunks in about a second
    windows = [sum(chunks[i:i + per]) / per for i in range(0, len(chunks) - per + 1, per)]
    return {"windows": len(windows), "slowest_over_fastest": max(windows) / min(windows),
            "cv": statistics.stdev(windows) / statistics.fmean(windows)}


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


def measure(batches=BATCHES, steps: int = STEPS, repeat: bool = True) -> list[dict]:
    """One planned-vs-actual record per batch size, each run in its own process; with `repeat`, the first batch size
    once more (the A/A control, marked "repeat")."""
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned runs: a busy shared machine punishes spinning threads
    records = []
    with tempfile.TemporaryDirectory() as d:
        data = prepared(Path(d) / "data")
        for i, batch in enumerate([*batches, *batches[:1 if repeat else 0]]):
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                record = pool.apply(_one, (str(data), str(Path(d) / f"run{i}"), batch, steps))
            records.append({"batch": batch, **record, "load_average_1min": round(os.getloadavg()[0], 2),
                            "repeat": i >= len(batches)})
    return records


def rows(records: list[dict], speed: dict | None = None) -> list[dict]:
    """The bench table's rows from measure()'s records (and machine_speed()'s control)."""
    out = []
    for r in records:
        where = f"{STEPS} steps of the embedded default, batch {r['batch']}" + (", run again" if r.get("repeat") else "")
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
    pair = [r for r in records if r["batch"] == records[0]["batch"]]
    if len(pair) == 2:
        a, b = pair
        out.append({"bench": "timeplan", "metric": f"control: the same run twice (batch {a['batch']}), measured wall time",
                    "value": f"{a['actual_s']:.1f} / {b['actual_s']:.1f} s ({b['actual_s'] / a['actual_s'] - 1:+.1%})",
                    "note": f"their calibrations: {a['step_s']:.3g} / {b['step_s']:.3g} s a step"})
    if speed:
        out.append({"bench": "timeplan", "metric": f"control: a fixed workload's slowest / fastest one-second window "
                                                   f"({speed['windows']} windows)",
                    "value": f"{speed['slowest_over_fastest']:.2f}x",
                    "note": f"coefficient of variation {speed['cv']:.1%}: the machine's own speed, no change in the work"})
    return out


def run() -> list[dict]:
    records = measure()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        speed = pool.apply(machine_speed)
    return rows(records, speed)


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
