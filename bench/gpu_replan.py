"""The memory plan as it is now against the peaks a GPU run recorded: `python -m bench.gpu_proof --replan FILE`.

A change to nbutils.train.memory is checked against `make gpu-proof`'s measurements without a GPU: each row of
plan / measured peak in bench/results/gpu-<device>*.json is planned again (tests/train/test_memory.py does it for
every results file, and fails beyond 10%). A row records the loss its batch trained with (`loss`); rows recorded
before it did trained with liger-kernel's. The tokens/s runs' peaks are planned again too (`replan_throughput`):
their rows name the examples, batch and longest length, and each recipe's loss (the plain recipe's and "plain loss":
the whole logits; "this suite" before auto read the plan: chunked; "+ liger": liger's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench import real_models

_SFT_ROW = re.compile(r"^(?P<model>[^:]+): memory plan / measured peak at batch (?P<batch>\d+), GB")
_PREF_ROW = re.compile(r"^(?P<model>[^:]+): (?P<method>dpo|grpo) memory plan / measured peak, GB, (?P<batch>\d+) "
                       r".* x (?P<seq>\d+) tokens")


def replan(results: Path) -> list[dict]:
    """nbutils.train.memory's plan as it is now against every peak a GPU run recorded in `results` (its rows of
    plan / measured peak): a change to the plan is checked against the GPU's measurements without a GPU
    (`python -m bench.gpu_proof --replan bench/results/gpu-<device>.json`)."""
    from transformers import AutoConfig

    from bench import gpu_preference
    from nbutils.train import memory

    run = json.loads(Path(results).read_text())["gpu_proof"]
    setup, out = run["setup"], []
    for row in run["rows"]:
        sft, pref = _SFT_ROW.match(row["metric"]), _PREF_ROW.match(row["metric"])
        measured = str(row["value"]).split(" / ")[-1].split(" ")[0]
        if not (sft or pref) or not re.fullmatch(r"[\d.]+", measured):
            continue
        m = sft or pref
        config = AutoConfig.for_model(**real_models.MODELS[m["model"]]["config"])
        batch = int(m["batch"])
        if sft:
            plan = memory.plan(config, setup["seq"], batch, 16, setup["memory_gb"], loss=row.get("loss", "liger"))
        else:
            answer = setup["preference_answer"]
            seq = int(m["seq"]) - answer if m["method"] == "grpo" else int(m["seq"])
            plan = memory.plan_preference(config, m["method"], seq, batch, 16, gpu_preference.GENERATIONS, answer,
                                          setup["memory_gb"])
        ratio = float(measured) / plan["allocated_gb"]
        out.append({"bench": "gpu_proof", "metric": re.sub(r" \(allocations[^)]*\)$", "", row["metric"]) + ", the plan now",
                    "value": f"{plan['allocated_gb']:.2f} / {float(measured):.2f} (peak/plan {ratio:.2f})",
                    "target": "0.9 - 1.1", "note": f"peak measured {run['machine']['date'][:10]}, {run['command']}"})
    return out


_TOKENS_ROW = re.compile(r"^(?P<name>[^:]+): real target tokens/s \((?P<model>[^,]+), random weights, (?P<n>\d+) "
                         r"examples, batch (?P<batch>\d+), max len (?P<len>\d+), fp16(?:; auto: (?P<auto>\w+) loss)?\)")
LOSS_OF = {"plain recipe": "plain", "this suite, plain loss": "plain", "this suite, chunked loss": "chunked",
           "this suite + liger": "liger"}


def replan_throughput(results: Path) -> list[dict]:
    """The plan as it is now against the peak of each tokens/s run a GPU run recorded, at the widest batch: the
    longest of bench/throughput_bench.instruction_rows, which a recipe's batches are padded up to, or the block size
    (max len) where the suite packed the rows into blocks."""
    from transformers import AutoConfig

    from bench import throughput_bench
    from nbutils.train import memory

    run = json.loads(Path(results).read_text())["gpu_proof"]
    rows, out = run["rows"], []
    for i, row in enumerate(rows):
        m = _TOKENS_ROW.match(row["metric"])
        peak = rows[i + 1] if i + 1 < len(rows) else {}
        if not m or not str(peak.get("metric", "")).endswith("peak training memory, GB"):
            continue
        config = AutoConfig.for_model(**real_models.MODELS[m["model"]]["config"])
        if "batches: packed" in row.get("note", ""):  # every batch is blocks of max len
            longest = int(m["len"])
        else:
            longest = max(r["length"] for r in throughput_bench.instruction_rows(int(m["n"]), config.vocab_size, int(m["len"])))
        loss = LOSS_OF.get(m["name"], m["auto"] or "chunked")
        plan = memory.plan(config, longest, int(m["batch"]), 16, run["setup"]["memory_gb"], loss=loss)
        ratio = float(peak["value"]) / plan["allocated_gb"]
        out.append({"bench": "gpu_proof", "metric": f"{m['name']}: memory plan / measured peak, GB, batch {m['batch']} x "
                                                    f"{longest} ({loss} loss), the plan now",
                    "value": f"{plan['allocated_gb']:.2f} / {float(peak['value']):.2f} (peak/plan {ratio:.2f})",
                    "target": "0.9 - 1.1", "note": f"peak measured {run['machine']['date'][:10]}, {run['command']}"})
    return out
