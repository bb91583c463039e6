"""`make gpu-proof`: the GPU path proven in one command, on real-shaped models under a T4's conditions.

On a CUDA machine, for Llama-3.2-1B and Qwen2.5-1.5B (their published configs with their real tokenizers,
bench/real_models.py, and random weights at the real size): fp16 only (a T4 has no real bf16) and the GPU memory
capped at 15 GB (torch.cuda.set_per_process_memory_fraction), it measures
- tokens/s of the plain transformers + peft recipe, of the suite, and of the suite with liger-kernel
  (bench/throughput_bench.py's side-by-side runs), for the first model;
- the memory plan against the measured peak at each batch size, and the largest batch that fits 15 GB, measured
  (batches doubled until one runs out of memory) beside the plan's;
- the time plan from 02's calibration against the actual time of the same run (01's data, 02's recipe).
The memory measurements of every model run first, side by side (a process's peak is its own); the timed ones after,
alone. Rows go to bench/results/gpu-<device>.json. Without CUDA it says what it needs and exits 0. The tests run the same
code on the CPU with the CUDA-only settings off (fp32, no cap, no liger) on a shrunk twin (CPU_SETUP).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import gpu_spawn, machine, real_models

NEEDS = ("make gpu-proof needs a CUDA GPU (torch.cuda.is_available() is False here): run it on a machine with one "
         "(about 10 minutes on an H100; packages it lacks install from wheels: docs/planning.md). "
         "Nothing was measured.")


@dataclass(frozen=True)
class Setup:
    cuda: bool
    precision: str  # fp16: a T4's compute dtype
    memory_gb: float | None  # the cap (a T4's usable memory)
    full_size: bool  # random weights at the real size; else the shrunk twin (nbutils.plan.shrink)
    models: tuple[str, ...]
    sweep: tuple[int, ...]  # batch sizes for the memory plan against the measured peak
    seq: int  # every row of the sweep this long: the plan's worst case
    steps: int  # the calibrated run (time plan against actual): 80 or more, or 02 makes no plan
    batch: int
    throughput_rows: int  # examples of the side-by-side tokens/s runs (0: skipped)
    preference: tuple[tuple[str, tuple[int, ...]], ...] = ()  # 05's methods and batches (bench/gpu_preference.py)
    preference_prompt: int = 512  # tokens of a prompt; DPO adds an answer of preference_answer tokens a side,
    preference_answer: int = 512  # GRPO generates that many
    preference_models: int = 1  # the first this many models get the preference rows
    throughput_models: int = 1  # and the tokens/s rows (their ratios are the point; each model costs minutes)
    minutes: float = 8.5  # stages not started by then are recorded as skipped: the run ends within 10 minutes
    stages: tuple[str, ...] = ()  # only these stages (STAGES); empty: all of them
    eval_steps: int = 20  # the calibrated run evaluates and saves this often (an evaluation of Qwen2.5-1.5B: 1.8 s)


GPU_SETUP = Setup(True, "fp16", 15.0, True, ("qwen2.5-1.5b-instruct", "llama-3.2-1b-instruct"),
                  (1, 2, 4, 8, 16, 32, 64), 1024, 100, 4, 64, (("dpo", (1, 4, 16)), ("grpo", (8, 32))), 512, 512)
CPU_SETUP = Setup(False, "fp32", None, False, ("llama-3.2-1b-instruct",), (1, 2), 64, 80, 4, 0,
                  (("dpo", (1,)), ("grpo", (4,))), 16, 16)


# What each piece took on an H200 under these conditions (bench/results/gpu-nvidia-h200*.json: their `seconds`, and
# the steps, evaluations and saves in their time-plan notes): `planned_seconds` sums a setup's run from them before
# it starts, and tests/bench/test_gpu_proof.py holds GPU_SETUP's sum under 9 minutes, a minute short of the 10.
COSTS = {"build": 16.0,  # one model at the real size, random weights, saved, and 01's data (251 s less both runs)
         "process": 20.0,  # a fresh process: imports, the 4-bit load, the adapter
         "wave": 40.0,  # one round of the memory stages' parallel processes (Llama's seven batches at once: 53 s)
         "warmup": 20.0,  # a run's first steps, compiling kernels (Qwen's steps 1-4: 9.9 4.1 2.8 2.9 s)
         "step": {"qwen2.5-1.5b-instruct": 0.64, "llama-3.2-1b-instruct": 0.34},  # batch 4, up to 1,024 tokens
         "eval": 1.8, "save": 0.8}
PARALLEL = 8  # memory processes at once: 15 GB caps on an H200's 141 GB (bench/gpu_spawn.py)
VARIANTS = 4  # tokens/s runs: the plain recipe, the suite (auto), its chunked loss, liger (throughput_bench.compare)


def planned_seconds(setup: Setup) -> dict[str, float]:
    """The run's seconds by stage, from COSTS: what `make gpu-proof` is arranged to fit in 10 minutes by."""
    import math

    models = setup.models
    tasks = len(models) * len(setup.sweep) + setup.preference_models * sum(len(b) for _, b in setup.preference)
    runs = [setup.steps * COSTS["step"].get(m, 0.64) for m in models]
    evals = setup.steps // setup.eval_steps
    rows = setup.throughput_models * VARIANTS * (COSTS["process"] + setup.throughput_rows / setup.batch
                                                 * COSTS["step"].get(models[0], 0.64) * 1.5)  # the plain recipe pads
    return {"build": len(models) * COSTS["build"], "memory": math.ceil(tasks / PARALLEL) * COSTS["wave"],
            "time plan": sum(COSTS["process"] + COSTS["warmup"] + r + (evals + 1) * COSTS["eval"] + evals * COSTS["save"]
                             for r in runs),
            "tokens/s": rows}


STAGES = ("memory", "preference memory", "time plan", "tokens/s")
TOGETHER = ("memory", "preference memory")  # peaks: a process's own, so these run side by side; the timed ones alone


def model_folder(name: str, dest: Path, setup: Setup) -> Path:
    """The model's folder with random weights: at the real size on the GPU, its shrunk twin on the CPU."""
    from nbutils.plan import shrink

    return shrink.build(real_models.folder(name), dest, full_size=setup.full_size)


def prepared(model: Path, dest: Path, setup: Setup) -> Path:
    """01's output for the embedded task data with this model's tokenizer (what 02 reads)."""
    from nbutils import embedded
    from nbutils.data import splits

    splits.prepare([embedded.resolve_raw_data("embedded")], dest, str(model), verbose=False, batch_size=setup.batch)
    return dest


def _until_full(measured: list[dict]) -> list[dict]:
    """The rows of a sweep up to its first batch that runs out of memory (under the cap), per method where the rows
    name one (05's DPO and GRPO sweeps side by side)."""
    out, full = [], set()
    for r in measured:
        if r.get("method") not in full:
            out.append(r)
        if not r["fits"]:
            full.add(r.get("method"))
    return out


def _one_batch(model: str, batch: int, setup: Setup) -> dict:
    """02's recipe for 3 steps at this batch, every row the widest: the plan's estimate and the measured peak."""
    import torch
    from datasets import Dataset

    from nbutils.data import batching
    from nbutils.harness import notebook_recipe
    from nbutils.runtime import modelsource
    from nbutils.train import loss, memory

    machine.cap_gpu_memory()
    config = modelsource.load_config(model)
    whole = memory.plan(config, setup.seq, batch, 16, setup.memory_gb, loss="plain").get("fits") if setup.cuda else None
    kind = loss.choose("auto", cuda=setup.cuda, plain_fits=whole)  # as 02's plan picks it at this batch
    ds = Dataset.from_list([_full_row(config.vocab_size, setup.seq)] * (batch * 3))
    batches = batching.plan([setup.seq] * len(ds), batch, setup.seq)
    plan_gb = memory.plan(config, setup.seq, batch, 16, setup.memory_gb, loss=kind)["allocated_gb"]
    try:
        with tempfile.TemporaryDirectory() as d:
            plan = notebook_recipe.adhoc_plan(d, ds, ds, batches, model, kind, 2e-4, max_steps=3)
            plan.env = _with_precision(plan.env, setup.precision)
            notebook_recipe.train(None, d, plan=plan, max_steps=3, per_device_batch_size=batch, resume=False,
                                  chunked_loss=kind, probe_prompts=0, run={"progress": "off", "time_plan": False},
                                  arguments={"eval_strategy": "no", "save_strategy": "no", "warmup_steps": 0})
    except torch.OutOfMemoryError:
        return {"batch": batch, "plan_gb": plan_gb, "peak_gb": None, "fits": False, "loss": kind}
    peak = torch.cuda.max_memory_allocated() / 2**30 if setup.cuda else None
    print(f"[gpu-proof] batch {batch} ({kind} loss): plan {plan_gb:.2f} GB, measured peak "
          + (f"{peak:.2f} GB" if peak is not None else "(no GPU)"), flush=True)
    return {"batch": batch, "plan_gb": plan_gb, "peak_gb": peak, "fits": True, "loss": kind}


def _full_row(vocab: int, seq: int) -> dict:
    ids = [3 + i % (vocab - 3) for i in range(seq)]
    return {"input_ids": ids, "labels": [-100] * (seq // 2) + ids[seq // 2:], "length": seq, "messages": []}


def _with_precision(env, precision: str):
    """preflight's record with the precision forced (fp16 on a GPU that could do bf16: the T4's rule)."""
    from dataclasses import replace

    return replace(env, precision=precision)


def _timed_run(data: str, out: str, setup: Setup) -> dict:
    """02's recipe on 01's data with the time plan: planned against actual (training_summary.json's record)."""
    from nbutils.harness import notebook_recipe

    machine.cap_gpu_memory()
    _, _, session = notebook_recipe.train(data, out, max_steps=setup.steps, per_device_batch_size=setup.batch,
                                          eval_steps=setup.eval_steps, save_steps=setup.eval_steps, resume=False,
                                          precision=setup.precision)
    plan = session.result.time_plan
    return plan and {**plan, "where": where_the_time_went(session.timelog)}


def where_the_time_went(log) -> str:
    """The calibration's steps against the rest, and its evaluation against the later ones: what a plan that
    misses was told (nbutils.train.timeplan.TimeLog's record)."""
    from statistics import fmean

    end = log.end_step or 0
    timed = [s for _, s, _ in log.timed()]
    later = [s for step, s, _ in log.steps if step > end]
    first_eval = log.evals.get(end)
    evals = [s for step, s in log.evals.items() if step != end]
    parts = [f"calibration steps {fmean(timed):.3f} s" if timed else "no calibration steps",
             f"later steps {fmean(later):.3f} s" if later else "no later steps",
             f"calibration's evaluation {first_eval:.2f} s" if first_eval is not None else "no calibration evaluation",
             f"later evaluations {fmean(evals):.2f} s ({len(evals)})" if evals else "no later evaluations",
             *(f"evaluation at step {step}: batches " + " ".join(f"{b:.2f}" for b in log.eval_batches[step])
               + f" s, the rest {log.evals[step] - sum(log.eval_batches[step]):.2f} s (metrics, probe)"
               for step in sorted(log.eval_batches)[:2] if step in log.evals),
             f"saves {fmean(log.saves.values()):.2f} s" if log.saves else "no saves",
             "steps 1-20 " + " ".join(f"{s:.2f}" for _, s, _ in log.steps[:20]) + " s"]
    return "; ".join(parts)


def _throughput(model: Path, setup: Setup) -> list[dict]:
    """tokens/s of the plain recipe, the suite and the suite with liger, side by side (bench/throughput_bench.py)."""
    from bench import throughput_bench

    if not setup.throughput_rows:
        return []
    return throughput_bench.compare(f"{model.name}, random weights", str(model), n=setup.throughput_rows,
                                    batch=setup.batch, max_len=setup.seq, precision=setup.precision,
                                    fused=setup.cuda, repeats=1)


def memory_rows(name: str, sweep: list[dict], memory_gb: float | None) -> list[dict]:
    """Plan against peak per batch, and the largest batch that fits."""
    out = [{"bench": "gpu_proof", "metric": f"{name}: memory plan / measured peak at batch {r['batch']}, GB "
                                            "(allocations: the plan without its overhead)",
            "value": f"{r['plan_gb']:.2f} / " + (f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else
                                                 ("out of memory" if not r["fits"] else "no GPU")),
            "target": "0.9 - 1.1" if r["peak_gb"] else "", **({"loss": r["loss"]} if "loss" in r else {})}
           for r in sweep]
    fitting = [r["batch"] for r in sweep if r["fits"]]
    cap = f"{memory_gb:g} GB" if memory_gb else "no cap"
    out.append({"bench": "gpu_proof", "metric": f"{name}: largest batch that fits {cap}, measured",
                "value": max(fitting) if fitting else 0,
                "note": "the sweep stopped at its largest batch" if len(fitting) == len(sweep) else ""})
    return out


def time_rows(name: str, timing: dict | None) -> list[dict]:
    """The calibrated time plan against the actual time (none when 02 made no plan)."""
    if not timing:
        return [{"bench": "gpu_proof", "metric": f"{name}: time plan / actual", "value": "no plan",
                 "note": "02 made no time plan for this run"}]
    return [{"bench": "gpu_proof", "metric": f"{name}: time plan / actual, s ({timing['total_steps']} steps)",
             "value": f"{timing['predicted_s']:.1f} / {timing['actual_s']:.1f} ({timing['error']:+.1%})",
             "target": "within 15%", "note": f"calibration cost {timing['calibration_share']:.1%} of the run"
                                             + (f"; {timing['where']}" if timing.get("where") else "")}]


def rows_for(name: str, sweep: list[dict], timing: dict | None, memory_gb: float | None) -> list[dict]:
    """The table's rows of one model: plan against peak per batch, the largest batch that fits, the time plan."""
    return memory_rows(name, sweep, memory_gb) + time_rows(name, timing)


def _memory_together(built: dict[str, tuple[Path, Path]], setup: Setup, wanted: tuple[str, ...]) -> list[dict]:
    """Every memory measurement of every model, in one pool of fresh processes: the SFT sweep (each batch of
    setup.sweep, rows of setup.seq tokens) and 05's DPO/GRPO for the first setup.preference_models. A model loaded
    earlier in a process stays partly alive and would count in the next peak, hence a process each."""
    from bench import gpu_preference

    jobs = []  # (model, stage, tasks)
    for i, (name, (model, _)) in enumerate(built.items()):
        if "memory" in wanted:
            jobs.append((name, "memory", [(_one_batch, (str(model), batch, setup)) for batch in setup.sweep]))
        if "preference memory" in wanted and setup.preference and i < setup.preference_models:
            jobs.append((name, "preference memory",
                         [(gpu_preference.measure, t) for t in gpu_preference.tasks(str(model), setup)]))
    results, rows = iter(gpu_spawn.tasks([t for _, _, tasks in jobs for t in tasks])), []
    for name, stage, tasks in jobs:
        got = [next(results) for _ in tasks]
        failed = next((r for r in got if isinstance(r, gpu_spawn.Failed)), None)
        if failed:
            rows.append(_failed_row(name, stage, failed.error))
        elif stage == "memory":
            rows += memory_rows(name, _until_full(got), setup.memory_gb)
        else:
            rows += gpu_preference.rows_for(name, _until_full(got), setup.memory_gb)
    return rows


def _stages(built: dict[str, tuple[Path, Path]], work: Path, setup: Setup) -> list[tuple[str, str, object]]:
    """(model, stage, measure) in the order they run: the memory stages of every model first, side by side; then
    each model's timed stages alone, in --stages' order (time plan, then tokens/s for the first
    setup.throughput_models), the first model's before the next one's: what runs out of time is the least needed."""
    wanted = setup.stages or STAGES
    together = tuple(s for s in wanted if s in TOGETHER)
    out = [("every model", ", ".join(together), lambda: _memory_together(built, setup, together))] if together else []
    for i, (name, (model, data)) in enumerate(built.items()):
        run_dir = str(work / f"{name}-run")
        timed = {"time plan": lambda n=name, d=str(data), r=run_dir: time_rows(n, gpu_spawn.one(_timed_run, d, r, setup))}
        if i < setup.throughput_models:
            timed["tokens/s"] = lambda m=model: _throughput(m, setup)
        out += [(name, stage, timed[stage]) for stage in wanted if stage in timed]
    return out


def run(setup: Setup = GPU_SETUP, saved=None) -> list[dict]:
    """Every measurement of the module docstring for each model of the setup; one list of rows. A stage that
    fails becomes a row with its error and the next one runs; stages not started within setup.minutes are
    recorded as skipped. `saved(rows)` is called after every stage (partial results survive a killed run)."""
    if setup.memory_gb:
        os.environ["BENCH_GPU_MEMORY_GB"] = str(setup.memory_gb)  # the spawned processes cap themselves
    rows, deadline, built = [], time.monotonic() + setup.minutes * 60, {}
    with tempfile.TemporaryDirectory() as d:
        for name in setup.models:
            try:
                model = model_folder(name, Path(d) / name, setup)
                built[name] = (model, prepared(model, Path(d) / f"{name}-data", setup))
            except Exception as e:  # noqa: BLE001 - recorded as a row; the next model runs
                rows.append(_failed(name, "model folder and 01's data", e))
        for name, stage, measure in _stages(built, Path(d), setup):
            t0 = time.monotonic()
            if t0 > deadline:
                rows.append({"bench": "gpu_proof", "metric": f"{name}: {stage}", "value": "skipped",
                             "note": f"not started within {setup.minutes:g} minutes"})
                continue
            try:
                rows += measure()
            except Exception as e:  # noqa: BLE001 - recorded as a row; the next stage runs
                rows.append(_failed(name, stage, e))
            print(f"[gpu-proof] {name}: {stage} took {time.monotonic() - t0:.0f} s", flush=True)
            if saved:
                saved(rows)
    return rows


def _failed(name: str, stage: str, error: Exception) -> dict:
    import traceback

    traceback.print_exception(error)
    return _failed_row(name, stage, gpu_spawn.describe(error))


def _failed_row(name: str, stage: str, error: str) -> dict:
    return {"bench": "gpu_proof", "metric": f"{name}: {stage}", "value": "failed", "note": error}


def save(rows: list[dict], setup: Setup, seconds: float, results: Path = machine.RESULTS,
         command: str = "make gpu-proof") -> Path:
    """bench/results/gpu-<device>.json (a run of some stages only: gpu-<device>-<stages>.json): the rows, the
    machine, the conditions, the command and how long it took."""
    described = machine.describe()
    device = re.sub(r"[^a-z0-9]+", "-", (described["gpu"] or "cpu").lower()).strip("-")
    part = re.sub(r"[^a-z0-9]+", "-", "-".join(setup.stages).lower())
    path = results / (f"gpu-{device}-{part}.json" if setup.stages else f"gpu-{device}.json")
    results.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gpu_proof": {"machine": described, "command": command, "setup": asdict(setup),
                                              "seconds": round(seconds, 1), "rows": rows}}, indent=2) + "\n")
    return path


def _setup(argv: list[str]) -> tuple[Setup, str | None]:
    """GPU_SETUP, or part of it: --models NAME[,NAME] and --stages STAGE[,STAGE] (one of STAGES each), --eval-steps and
    --throughput-rows (a recorded run made with others is rerun alike); and the results file of --replan (None
    without it)."""
    import argparse
    from dataclasses import replace

    parser = argparse.ArgumentParser(prog="python -m bench.gpu_proof")
    parser.add_argument("--models", default=",".join(GPU_SETUP.models))
    parser.add_argument("--stages", default="", help="a comma-separated subset of: " + ", ".join(STAGES))
    parser.add_argument("--replan", metavar="RESULTS", help="no GPU needed: the memory plan as it is now against the "
                                                            "peaks recorded in this results file (the memory sweep's "
                                                            "and the tokens/s runs')")
    parser.add_argument("--eval-steps", type=int, default=GPU_SETUP.eval_steps)
    parser.add_argument("--throughput-rows", type=int, default=GPU_SETUP.throughput_rows)
    args = parser.parse_args(argv)
    stages = tuple(s for s in args.stages.split(",") if s)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage {unknown[0]!r}: use one of {', '.join(STAGES)}")
    return replace(GPU_SETUP, models=tuple(args.models.split(",")), stages=stages, eval_steps=args.eval_steps,
                   throughput_rows=args.throughput_rows), args.replan


def main(setup: Setup | None = None, argv: list[str] | None = None) -> int:
    import torch

    argv = sys.argv[1:] if argv is None and setup is None else (argv or [])
    from bench.__main__ import print_table

    if setup is None:
        if not torch.cuda.is_available() and "--replan" not in argv:  # --replan needs no GPU
            print(NEEDS)
            return 0
        setup, replan_file = _setup(argv)
        if replan_file:
            from bench import gpu_replan

            rows = gpu_replan.replan(Path(replan_file)) + gpu_replan.replan_throughput(Path(replan_file))
            print_table(rows)
            if not rows:
                print(f"[gpu-proof] {replan_file} records no memory peak to plan again (no plan / measured peak row, "
                      "no tokens/s run with its peak)")
            return 0
    command = " ".join(["python -m bench.gpu_proof", *argv]) if argv else "make gpu-proof"
    t0 = time.perf_counter()
    rows = run(setup, saved=lambda rows: save(rows, setup, time.perf_counter() - t0, command=command))
    print_table(rows)
    print(f"[gpu-proof] {save(rows, setup, time.perf_counter() - t0, command=command)} "
          f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
