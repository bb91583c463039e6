"""The dry run: a model's exact architecture, shrunk, with random weights, through 01 -> 02 -> 03 -> 04 on a CPU.

05 (preference tuning) joins with through="preference": it is optional after 02, and on a real vocabulary its
policy and reference passes are the slowest notebook of the chain.

Its light files are fetched (fetch.py), a twin is built from them (shrink.py), and the chain runs on it under the
harness, as a Kaggle background run would (internet off), with smoke=True, the model named in 01 alone, and 04's
gate forced (random weights never beat the base). Template, pad, label, attention, stop-token and export problems
show in minutes, with the notebook, the cell and the message, before any GPU time.

Memory too: the twin plans as the model it stands for, and every notebook's plan is checked against a T4
(NBUTILS_PLAN_GPU_GB=14.7 while the chain runs), so a notebook that would not fit one refuses in its plan cell, naming
the parameter to change. Then each notebook's work is measured on the twin at two depths, extrapolated to the
model's, beside the plan (memcheck.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbutils import chain
from nbutils.harness import runner
from nbutils.harness.results import Result, summary_table
from nbutils.plan import fetch, memcheck, shrink

ROOT = runner.ROOT
BATCH = 4  # rows per batch: the real vocabulary's logits are the cost on a CPU
TIME_BUDGET_S = 900.0  # per notebook
THROUGH = "export"  # the last stage a dry run runs by default


@dataclass
class DryRun:
    model: str
    folder: Path  # where the model's files, its twin and the chain's run are
    shape: str = ""
    results: list[Result] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # fetch, build, chain, total; cpu: all processes' CPU time
    error: str = ""  # a model that could not be fetched or built
    notebooks: int = 0  # how many notebooks the chain runs
    memory: list[memcheck.Check] = field(default_factory=list)  # each notebook's plan beside the twin's peak

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.results) and not any(r.failing for r in self.results) and \
            len(self.results) == self.notebooks and not any(c.problem for c in self.memory)

    def report(self) -> str:
        """What the command prints: the twin's shape, one row per notebook, every problem, the verdict."""
        lines = [f"dry run of {self.model}: {self.shape or 'no twin'}"]
        if self.error:
            lines.append(f"problem: {self.error}")
        if self.results:
            lines.append(summary_table(self.results))
            lines += [str(p) for r in self.results for p in r.failing]
        if self.memory:
            lines.append(memcheck.table(self.memory))
        spent = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        verdict = "PASSED: the chain works on this architecture" if self.ok else "FAILED: see the problems above"
        return "\n".join([*lines, f"{verdict} ({spent}); files in {self.folder}"])


def slug(model: str) -> str:
    """A folder name for a Hub id or a path."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(model).strip("/")).strip("-").lower() or "model"


def notebooks_through(stage: str) -> list[str]:
    """The chain's notebook paths from 01 up to the one writing `stage`."""
    last = chain.NOTEBOOKS.index(chain.by_stage(stage).notebook)
    return chain.notebook_paths()[:last + 1]


def dry_run(model: str, out: str | Path | None = None, params: dict | None = None, through: str = THROUGH) -> DryRun:
    """Fetch, shrink and run the chain up to `through`; the DryRun says what passed and every problem found."""
    folder = Path(out) if out else ROOT / "runs" / "dry-run" / slug(model)
    paths = notebooks_through(through)
    run, t0, cpu0 = DryRun(model, folder, notebooks=len(paths)), time.perf_counter(), _cpu_s()
    try:
        files = fetch.fetch(model, folder / "model")
        run.seconds["fetch"] = time.perf_counter() - t0
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(files)
        run.shape = shrink.describe(config, shrink.shrink_config(config))
        twin = shrink.build(files, folder / "twin")
        deeper = shrink.build(files, folder / "twin-deeper", times=memcheck.deeper_times(config))  # its second depth
        run.seconds["build"] = time.perf_counter() - t0 - run.seconds["fetch"]
    except (OSError, ValueError, KeyError) as e:  # unreachable, no config.json, an architecture transformers lacks
        run.error = f"{type(e).__name__}: {e}"
        return run
    except AttributeError as e:  # a config without a language model's fields: a raw traceback would say nothing
        run.error = (f"{type(e).__name__}: {e}: the config.json of {model} lacks a field a language model's config "
                     "has (its own, or a multimodal model's text_config); the dry run takes causal language models, "
                     "text-only or image-text: give it one of those")
        return run
    notebooks = [ROOT / nb for nb in paths]
    # 04's GGUF is not run in llama.cpp here: where no build is cached, the probe's build (minutes) would eat the
    # notebook's time budget; the run itself is 04's, on the real model.
    params = {"01_data_prep:base_model": str(twin), "smoke": True, "04_export:force": True,
              "04_export:verify_runtime": False, "batch_size": BATCH, "per_device_batch_size": BATCH, **(params or {})}
    start = time.perf_counter()
    with planning_for_a_t4():
        run.results = runner.run(notebooks, folder / "chain", params, internet=False, time_budget=TIME_BUDGET_S)
    run.seconds["chain"] = time.perf_counter() - start
    start = time.perf_counter()
    run.memory = memcheck.check(config, twin, deeper, folder / "chain", notebooks)
    run.seconds["memory"] = time.perf_counter() - start
    run.seconds["total"] = time.perf_counter() - t0
    run.seconds["cpu"] = _cpu_s() - cpu0  # beside the wall time: on a shared machine the two differ
    return run


@contextlib.contextmanager
def planning_for_a_t4():
    """While the chain runs, every plan without a GPU checks a T4's memory (nbutils.train.memory.planning_gpu)."""
    from nbutils.train import memory

    before = os.environ.get(memory.PLAN_GPU_ENV)
    os.environ[memory.PLAN_GPU_ENV] = str(memcheck.T4_GB)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(memory.PLAN_GPU_ENV, None)
        else:
            os.environ[memory.PLAN_GPU_ENV] = before


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the notebooks' kernels)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
