"""The dry run, measured: real-shaped model folders through `python -m nbutils.plan dry-run`, and broken ones.

    python -m bench dryrun_bench

Each folder of bench/real_models.py (the published config.json and generation_config.json values, the family's
real tokenizer from llama.cpp's vocabulary files, no weights) goes through the dry run as a user's folder would:
the twin is built from it and the chain runs on the twin with smoke=True. The deliberately broken folders
(real_models.BROKEN) must fail with their problem named. Rows: the verdict, the problem the report names, the
wall time of the whole dry run (files, twin, chain, memory check) with the CPU seconds of all its processes beside
it, and each notebook's memory line: the model's plan on a T4 beside the twin's peak measured on this CPU and
extrapolated to the model's depth (nbutils/plan/memcheck.py).

The depth check: the memory check extrapolates a 2-layer twin to the model's depth, and 2-layer twins are where
earlier bounds broke on a real model (the merge's fp16 noise on SmolLM2-135M-Instruct's 30 layers). So the same
work is measured on SmolLM2-135M-Instruct itself (bench/pretrained.py: the real 30-layer model, offline), beside its
2-layer twin's extrapolation and the plan's formula for the model on a CPU.
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
                "load": round(os.getloadavg()[0], 2),
                "memory": [{**vars(c), "ratio": c.ratio} for c in run.memory]}


DEPTH_JOBS = {"02 training step, batch 4 x 128, chunked": ("train", {"batch": 4, "seq": 128, "loss": "chunked"}),
              "03 generation 8 x (64 + 16) and scoring 2,048 tokens": (
                  "infer", {"rows": 8, "prompt": 64, "new_tokens": 16, "tokens": 2048, "longest": 128,
                            "loss": "chunked"}),
              "04 merge and fp32 check, a 64-token prompt": ("merge", {"prompt": 64})}


def depth_check(work: Path) -> list[dict]:
    """SmolLM2-135M-Instruct's 30 layers measured, against its twin extrapolated from 2 layers and the plan."""
    from transformers import AutoConfig

    from bench import pretrained
    from nbutils.plan import fetch, memcheck, probes, shrink
    from nbutils.train import memory

    model = pretrained.ensure()
    light = fetch.fetch(str(model), work / "light")
    config = AutoConfig.from_pretrained(light)
    twin, deeper = shrink.build(light, work / "twin"), shrink.build(light, work / "deeper",
                                                                      times=memcheck.deeper_times(config))
    depths = [AutoConfig.from_pretrained(f).num_hidden_layers for f in (twin, deeper)]
    jobs = [(probe, str(folder), s) for probe, s in DEPTH_JOBS.values() for folder in (model, twin, deeper)]
    peaks = probes.measure_all(jobs, work / "probes")
    out, shape = [], memory.Shape.from_config(config)
    for i, (what, (probe, settings)) in enumerate(DEPTH_JOBS.items()):
        real, low, high = peaks[3 * i: 3 * i + 3]
        extrapolated = high + (shape.layers - depths[1]) * max(0.0, (high - low) / (depths[1] - depths[0]))
        planned = memcheck.twin_plan_bytes(probe, shape, settings)
        out.append(_row(f"SmolLM2-135M-Instruct (30 layers), {what}: measured peak, GB", round(real / memory.GB, 3),
                        note=f"2-layer twin extrapolated from {depths[0]} and {depths[1]} layers: "
                             f"{extrapolated / memory.GB:.3f} GB ({extrapolated / real:.2f}x); the plan on a CPU "
                             f"{planned / memory.GB:.3f} GB ({planned / real:.2f}x)"))
    return out


def old_eval_path() -> list[dict]:
    """03 at 32 rows x 512 tokens of Qwen2.5-1.5B on a T4: the whole logits (the path before) against the chunks."""
    import json
    import tempfile
    from types import SimpleNamespace

    from bench import real_models
    from nbutils.eval import evalplan
    from nbutils.train.recipe import Recipe

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(real_models.MODELS["qwen2.5-1.5b-instruct"]["config"]))
        trained, t4 = Recipe(d, {"load_in_4bit": True}, "fp16", "fp16", {"r": 16}), SimpleNamespace(gpu_memory_gb=15.0,
                                                                                                      rows=dict)
        out = []
        for loss in ("plain", "chunked"):
            try:
                plan = evalplan.plan_eval(trained, t4, [256] * 64, [512] * 500, 32, eval_batch_tokens=32 * 512,
                                          loss=loss, show=False)
                verdict, gb = "fits", plan.memory["estimate_gb"]
            except evalplan.EvalPlanError as e:
                verdict, gb = "refused before loading", float(str(e).split("(plan ")[1].split(" GB")[0])
            out.append(_row(f"03, Qwen2.5-1.5B, 32 x 512 tokens on a T4, {loss} logits: plan, GB", gb,
                            "refused" if loss == "plain" else "fits", verdict))
    return out


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
                        f"cpu {s.get('cpu', 0):.0f} s (all processes); chain {s.get('chain', 0):.0f} s; memory check "
                        f"{s.get('memory', 0):.0f} s; load average {r['load']}"))
        for m in r.get("memory", []):
            out.append(_row(f"dry run of {r['name']}: {m['notebook']} memory, T4 plan / twin peak / twin plan, GB",
                            f"{m['plan_gb']:.2f} / {m['measured_gb']:.3f} / {m['twin_plan_gb']:.3f}", "",
                            f"twin measured/planned {m['ratio']:.2f}; {m['settings']}; {m['depths']}"))
    return out


def run() -> list[dict]:
    from bench import real_models

    out = rows([one(name) for name in [*real_models.MODELS, *real_models.BROKEN]]) + old_eval_path()
    with tempfile.TemporaryDirectory() as tmp:
        return out + depth_check(Path(tmp))


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
