"""05's memory plan against the measured peak, per method and batch: the preference rows of `make gpu-proof`.

For each method and batch, a fresh process loads the model as 05 does (4-bit base, k-bit preparation, a LoRA
adapter in fp32), builds 05's own trainer from the notebook (`trainer_arguments`, `make_trainer`, run by
nbutils.harness.notebook_recipe) on rows of known token lengths, trains a few steps and reads the peak of
torch.cuda.max_memory_allocated beside nbutils.train.memory.plan_preference's estimate for the same shape. DPO
rows are pairs of PROMPT + ANSWER tokens a side; GRPO generates ANSWER tokens for prompts of PROMPT tokens
(random weights seldom say EOS: every rollout runs to the limit, the plan's worst case). The batches stop at the
first that runs out of memory under the cap (bench.machine.cap_gpu_memory).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

WORD = " hello"  # one token per repeat in the byte-level BPE vocabularies (Qwen2, Llama-3); lengths are measured
REWARDS = "nbutils.eval.rewards:well_formed,nbutils.eval.rewards:not_degenerate"
GENERATIONS = 4


def _rows(method: str, count: int, prompt: int, answer: int) -> list[dict]:
    text = WORD.strip() + WORD * (prompt - 1)
    if method == "grpo":
        return [{"prompt": text, "answer": "hello"} for _ in range(count)]
    return [{"prompt": text, "chosen": WORD * answer, "rejected": " world" * answer} for _ in range(count)]


def _plan(out: Path, rows: list[dict], precision: str, steps: int, max_length: int):
    """The fields of 05's plan that its recipe reads (as bench/preference_bench.py builds them)."""
    from dataclasses import replace

    from nbutils.runtime.preflight import inspect

    env, _ = inspect(load_in_4bit=True)
    return SimpleNamespace(out=out, max_steps=steps, learning_rate=2e-5, precision=precision, save_steps=1000,
                           env=replace(env, precision=precision), max_length=max_length, train_rows=rows,
                           eval_rows=rows[:4], method="dpo", held_out_rows=lambda: rows[:4])


def measure(model_path: str, method: str, batch: int, prompt: int, answer: int, precision: str, steps: int) -> dict:
    """One method at one batch in this process: the planned and the measured peak, GB (peak None without CUDA)."""
    import torch

    from bench import machine
    from nbutils.data import chatformat
    from nbutils.harness import notebook_recipe
    from nbutils.runtime import modelsource
    from nbutils.train import memory, modeling, training

    cap = machine.cap_gpu_memory()
    tokenizer = chatformat.load_tokenizer(model_path)
    rows = _rows(method, batch * steps, prompt, answer)
    first = rows[0]
    prompt_len = len(tokenizer(first["prompt"])["input_ids"])
    seq = prompt_len + (answer if method == "grpo" else len(tokenizer(first["chosen"])["input_ids"]))
    plan_seq = prompt_len if method == "grpo" else seq
    estimate = memory.plan_preference(modelsource.load_config(model_path), method, plan_seq, batch, 16, GENERATIONS,
                                      answer, cap)["allocated_gb"]
    with tempfile.TemporaryDirectory() as tmp:
        plan = _plan(Path(tmp), rows, precision, steps, seq + 8)
        ns = notebook_recipe.namespace(plan, notebook=notebook_recipe.PREFERENCE, method=method,
                                       per_device_batch_size=batch, num_generations=GENERATIONS,
                                       max_completion_length=answer, reward_functions=REWARDS, guard="off")
        bnb, lora = notebook_recipe.configs(precision)
        model = modeling.attach_lora(modeling.load_base(model_path, precision, bnb), lora)
        run = training.Run(plan.out, {"base_model": model_path}, time_budget_min=60, keep_checkpoints=1,
                           progress="log")
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        try:
            ns["make_trainer"](model, tokenizer, run).train()
        except torch.OutOfMemoryError:
            return {"method": method, "batch": batch, "seq": seq, "plan_gb": estimate, "peak_gb": None, "fits": False}
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    print(f"[gpu-proof] {method} at batch {batch} x {seq} tokens: plan {estimate:.2f} GB, measured peak "
          + (f"{peak:.2f} GB" if peak is not None else "(no GPU)"), flush=True)
    return {"method": method, "batch": batch, "seq": seq, "plan_gb": estimate, "peak_gb": peak, "fits": True}


def tasks(model_path: str, setup) -> list[tuple]:
    """measure()'s arguments for every method and batch of the setup (each runs in a fresh process)."""
    return [(model_path, method, batch, setup.preference_prompt, setup.preference_answer, setup.precision, 2)
            for method, batches in setup.preference for batch in batches]


def rows_for(name: str, measured: list[dict], memory_gb: float | None) -> list[dict]:
    """Table rows: plan / peak per method and batch, with the sequence shape."""
    cap = f"cap {memory_gb:g} GB" if memory_gb else "no cap"
    out = []
    for r in measured:
        what = "pairs" if r["method"] != "grpo" else f"completions ({GENERATIONS} per prompt)"
        peak = f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else ("out of memory" if not r["fits"] else "no GPU")
        ratio = f" (peak/plan {r['peak_gb'] / r['plan_gb']:.2f})" if r["peak_gb"] else ""
        out.append({"bench": "gpu_proof",
                    "metric": f"{name}: {r['method']} memory plan / measured peak, GB, {r['batch']} {what} x "
                              f"{r['seq']} tokens, {cap} (allocations: the plan without its overhead)",
                    "value": f"{r['plan_gb']:.2f} / {peak}{ratio}", "target": "0.9 - 1.1" if r["peak_gb"] else ""})
    return out
