"""The suite on a real pretrained chat model: SmolLM2-135M-Instruct (bench/pretrained.py) taught the order task
(bench/order_task.py), 01 -> 02 -> 03 -> 04, then 05's DPO on pairs from the task and the model's own wrong answers.

    python -m bench real_model_bench

Every notebook runs under `python -m nbutils.harness run` as a user's chain does (the model named in 01 alone,
offline). Rows: base against tuned on 03's primary metric with 95% intervals, eval loss before and after and the
curve's diagnosis, degenerate rates of base and tuned on the task and on open-ended prompts, seconds per step (the
time plan's timed steps) and the kernels' peak resident memory, DPO's held-out preference accuracy and task metric
against SFT, and 04's merged model and GGUFs (q8_0; q4_k_m where llama-quantize is built already) with their
verification figures. Tuned on nothing: the task, its seed and the settings below were fixed before the first run.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import order_task, pretrained

ROOT = Path(__file__).resolve().parent.parent
RECORDS, SEED = 700, 0
# 80 steps at batch 8 (about one epoch of 630 records): the time plan's shortest run, so the step time is measured.
SFT = {"batch_size": "8", "per_device_batch_size": "8", "max_steps": "80", "eval_steps": "20", "save_steps": "20",
       "n_samples": "64"}
DPO = {"method": "dpo", "per_device_batch_size": "8", "max_steps": "16", "save_steps": "8", "eval_samples": "48"}
OPEN_ENDED = ("Write a poem about the sea.", "Explain how vaccines work.", "List 20 animals.",
              "Write a short story about a lost key.", "What should I pack for a week of hiking?",
              "Describe your favourite city.", "How do I bake bread?", "Write a Python function that reverses a list.",
              "Tell me about the history of the bicycle.", "Give me three tips for learning a language.",
              "Write a song with a chorus about summer.", "What is the difference between weather and climate?")


def harness(notebooks: list[str], out: Path, params: dict) -> tuple[int, str, float]:
    """The notebooks under the harness, offline: (exit code, the log's tail, seconds)."""
    cmd = [sys.executable, "-m", "nbutils.harness", "run", *(str(ROOT / "notebooks" / f"{n}.ipynb") for n in notebooks),
           "--no-internet", "--out", str(out)]
    for key, value in params.items():
        cmd += ["-p", key, str(value)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    return proc.returncode, (proc.stdout + proc.stderr)[-4000:], time.perf_counter() - t0


def stage(out: Path, notebook: str, name: str) -> Path:
    """A notebook's output folder inside the harness sandbox."""
    return out / "sandbox" / notebook / "working" / name


def _peak_rss_gb() -> float:
    """The largest resident set of any child process waited for so far (the notebook kernels), in GiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def _row(metric: str, value, target: str = "", note: str = "") -> dict:
    return {"bench": "real_model", "metric": metric, "value": value, "target": target, "note": note}


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _ci(block: dict) -> str:
    return f"[{block['ci'][0]:.3f}, {block['ci'][1]:.3f}]"


def sft_rows(out: Path) -> list[dict]:
    """02's and 03's figures: learning, loss, degeneration, step time."""
    train = json.loads((stage(out, "02_train_qlora", "train_qlora") / "training_summary.json").read_text())
    report = json.loads((stage(out, "03_eval", "eval") / "eval_report.json").read_text())
    primary = report["metrics"]["primary"]
    m = report["metrics"]["metrics"][primary]
    history = json.loads((stage(out, "02_train_qlora", "train_qlora") / "log_history.json").read_text())
    evals = [h["eval_loss"] for h in history if "eval_loss" in h]
    plan = train["time_plan"] or {}
    return [
        _row(f"{primary}, base -> tuned (n={report['n_samples']})", f"{m['base']['mean']:.3f} -> {m['tuned']['mean']:.3f}",
             "tuned's interval above base's", f"95% intervals base {_ci(m['base'])}, tuned {_ci(m['tuned'])}; "
             f"win/tie/loss {m['win_tie_loss']}"),
        _row("eval loss, base -> tuned (03)", f"{report['base']['eval_loss']:.4f} -> {report['tuned']['eval_loss']:.4f}",
             "falls", f"02's curve: {' -> '.join(f'{e:.4f}' for e in evals)}; {train['diagnosis']}"),
        _row("degenerate rate on the task, base -> tuned", f"{report['base']['degenerate_rate']:.3f} -> "
             f"{report['tuned']['degenerate_rate']:.3f}", "tuned <= base",
             f"EOS rate {report['base']['eos_rate']:.3f} -> {report['tuned']['eos_rate']:.3f}"),
        _row("seconds per training step (02, batch 8, CPU)", round(plan.get("step_s", train["seconds"] / train["global_step"]), 2),
             note=f"{train['global_step']} steps in {train['seconds']:.0f} s (evaluations and saves included); "
                  f"time plan {_seconds(plan.get('predicted_s'))} predicted, {_seconds(plan.get('actual_s'))} taken"),
    ]


def open_ended_rows(out: Path) -> list[dict]:
    """Base and tuned on OPEN_ENDED prompts under the guard (flag): how often each degenerates off the task."""
    import torch
    from peft import PeftModel

    from nbutils.data import chatformat
    from nbutils.eval import evaluation
    from nbutils.train import checkpoints, modeling, recipe

    ckpt, _ = checkpoints.for_eval(stage(out, "02_train_qlora", "train_qlora"))
    trained = recipe.from_checkpoint(ckpt, "", "", "fp32")
    tokenizer = chatformat.load_tokenizer(trained.base_model)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
               for p in OPEN_ENDED]
    model = modeling.load_base(trained.base_model, trained.precision, trained.quantization, "auto").eval()
    rates = {}
    for name in ("base", "tuned"):
        if name == "tuned":
            model = PeftModel.from_pretrained(model, ckpt).eval()
        with torch.no_grad():
            outs = evaluation.generate(model, tokenizer, prompts, max_new_tokens=160, guard="flag")
        rates[name] = sum(o["verdict"].degenerate for o in outs) / len(outs)
    return [_row(f"degenerate rate on open-ended prompts, base -> tuned (n={len(prompts)})",
                 f"{rates['base']:.3f} -> {rates['tuned']:.3f}", "tuned <= base", "160 new tokens, greedy, 4-bit as 03")]


def own_answers(out: Path, rows: list[tuple[str, str]]) -> dict[str, str]:
    """The base model's own greedy answers to every other row (the rest get near misses): its real mistakes."""
    from nbutils.data import chatformat
    from nbutils.eval import evaluation
    from nbutils.train import modeling

    folder = pretrained.ensure()
    tokenizer = chatformat.load_tokenizer(str(folder))
    model = modeling.load_base(str(folder), "fp32", None, "auto").eval()
    asked = [p for p, _ in rows[::2]]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
               for p in asked]
    outs = evaluation.generate(model, tokenizer, prompts, max_new_tokens=48, guard="flag")
    return {p: o["text"] for p, o in zip(asked, outs)}


def write_pairs(out: Path, work: Path) -> dict[str, Path]:
    """Train pairs from 01's train split, held-out pairs from its eval split, each half against the model's own answers."""
    data = stage(out, "01_data_prep", "data_prep")
    files = {}
    for split, name in (("train", "preference_data"), ("eval", "preference_eval")):
        rows = order_task.split_rows(data, split)
        pairs = order_task.pairs(rows, seed=SEED + (split == "eval"), own=own_answers(out, rows))
        files[name] = work / f"pairs.{split}.jsonl"
        files[name].write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return files


def dpo_rows(out: Path, work: Path) -> list[dict]:
    """05's DPO from 02's adapter on the task's pairs: held-out preference accuracy and task metric against SFT."""
    files = write_pairs(out, work)
    params = {**DPO, **{k: str(v) for k, v in files.items()},
              "data_dir": stage(out, "01_data_prep", "data_prep"), "adapter_dir": stage(out, "02_train_qlora", "train_qlora")}
    code, log, seconds = harness(["05_preference"], work / "dpo", params)
    if code:
        return [_row("DPO (05)", "failed", note=log[-1500:])]
    report = json.loads((stage(work / "dpo", "05_preference", "preference") / "eval_report.json").read_text())
    pref, primary = report["preference"], report["metrics"]["primary"]
    m = report["metrics"]["metrics"][primary]
    return [
        _row(f"DPO held-out preference accuracy (n={pref['n_pairs']} pairs)", round(pref["preference_accuracy"], 3),
             ">= 0.8", f"95% interval [{pref['preference_accuracy_ci'][0]:.2f}, {pref['preference_accuracy_ci'][1]:.2f}]; "
             f"reward margin {pref['reward_margin']:.3f}; SFT's own log-prob ranking {pref['sft_logp_ranking_accuracy']:.3f}"),
        _row(f"DPO {primary}, SFT -> DPO (n={report['n_samples']})", f"{m['base']['mean']:.3f} -> {m['tuned']['mean']:.3f}",
             "DPO >= SFT", f"95% intervals SFT {_ci(m['base'])}, DPO {_ci(m['tuned'])}; {DPO['max_steps']} steps in "
             f"{seconds:.0f} s (05 whole)"),
    ]


def export_rows(out: Path, work: Path) -> list[dict]:
    """04's merged model and q8_0 GGUF (from the chain), and a q4_k_m where llama-quantize is built already."""
    from nbutils.export import quantize

    rows = []
    exports = [("q8_0", stage(out, "04_export", "export"))]
    if quantize.find_quantize() is not None:
        params = {"gguf_type": "q4_k_m", "gguf_lora": "False", "force": "True",
                  "data_dir": stage(out, "01_data_prep", "data_prep"), "adapter_dir": stage(out, "02_train_qlora", "train_qlora"),
                  "eval_dir": stage(out, "03_eval", "eval")}  # written to its own run's stage: the harness checks it there
        code, log, _ = harness(["04_export"], work / "q4run", params)
        exports.append(("q4_k_m", stage(work / "q4run", "04_export", "export")) if not code else ("q4_k_m", log))
    else:
        rows.append(_row("GGUF q4_k_m", "not run", note="llama-quantize is not built yet (04 builds it: minutes)"))
    for kind, where in exports:
        if isinstance(where, str):
            rows.append(_row(f"GGUF {kind}", "failed", note=where[-1500:]))
            continue
        summary = json.loads((where / "export_summary.json").read_text())
        if kind == "q8_0":
            mg = summary["merged"]
            rows.append(_row("merged model: max |logit diff| vs exact base + adapter", round(mg["max_abs_diff"], 4),
                             f"<= {mg['tolerance']:.4f}", f"4 x the fp16 noise {mg['fp16_noise']:.4f}; the adapter's "
                             f"effect {mg['adapter_effect']:.3f}; logits up to {mg['max_abs_logit']:.1f}"))
        g = summary["gguf"]
        v = g.get("verification") or {}
        rows.append(_row(f"GGUF {kind}: verified", bool(v.get("ok")), "True",
                         _gguf_note(v, Path(g["file"])) if v else g.get("reason", "")))
    return rows


def more_types_rows(out: Path, work: Path) -> list[dict]:
    """The chain's merged model converted to f16 and bf16 as 04 converts it, each checked as 04 checks its GGUF."""
    from nbutils.data import chatformat, splits
    from nbutils.eval import evaluation
    from nbutils.export import gguf, ggufbuild, ggufcheck, modelfile

    merged = stage(out, "04_export", "export") / "merged"
    tokenizer = chatformat.load_tokenizer(str(merged))
    prompts, refs = evaluation.prompts_and_references(splits.load_split(stage(out, "01_data_prep", "data_prep"), "eval"),
                                                      tokenizer, limit=3)
    stops, converter = ggufbuild.stop_ids(tokenizer, merged), gguf.find_converter("auto", work)
    if isinstance(converter, str):
        return [_row("GGUF f16, bf16", "not run", note=converter)]
    eot = tokenizer.convert_tokens_to_ids(chatformat.end_of_turn(tokenizer))
    fields = {**gguf.stop_fields(tokenizer.eos_token_id, eot, stops), "add_bos": modelfile.starts_with_bos(tokenizer)}
    rows = []
    for kind in ("f16", "bf16"):
        made = work / f"model-{kind}.gguf"
        why = gguf.convert(merged, made, kind, converter, fields)
        if why:
            rows.append(_row(f"GGUF {kind}: verified", "not converted", note=why))
            continue
        try:
            v = ggufcheck.verify(made, merged, tokenizer, stops, prompts, [p + r for p, r in zip(prompts, refs)], kind,
                                 add_bos=fields["add_bos"])
        except ggufcheck.GGUFCheckFailed as e:
            rows.append(_row(f"GGUF {kind}: verified", False, "True", str(e)))
            continue
        rows.append(_row(f"GGUF {kind}: verified", True, "True", _gguf_note(v, made)))
        made.unlink()
    return rows


def _gguf_note(v: dict, made: Path) -> str:
    return (f"logits' NMSE {v['nmse']:.3g} (bound {v['nmse_bound']:g}), max |logit diff| {v['max_abs_diff']:.3g}; "
            f"perplexity {v['perplexity']:.4g} vs merged {v['merged_perplexity']:.4g}; greedy equal "
            f"{v['same_greedy']}, ties {v['greedy_ties']}; {made.stat().st_size / 2**20:.0f} MB")


def run() -> list[dict]:
    """The chain on the real model, then DPO and the exports; rows as the module docstring says."""
    try:
        folder = pretrained.ensure()
    except pretrained.Unavailable as e:
        return [_row("real model", "not run", note=str(e))]
    keep = os.environ.get("REAL_MODEL_BENCH_WORK")  # a folder to keep the run in: a stage can be re-run from it
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return run_in(Path(keep), folder)
    with tempfile.TemporaryDirectory() as tmp:
        return run_in(Path(tmp), folder)


def run_in(work: Path, folder: Path) -> list[dict]:
    """Every stage in `work`: the chain's notebooks under work/chain, 05 under work/dpo, the extra GGUFs beside."""
    raw = order_task.write_records(work / "orders.jsonl", RECORDS, SEED)
    params = {"01_data_prep:base_model": str(folder), "01_data_prep:raw_data": str(raw), "04_export:force": "True", **SFT}
    code, log, seconds = harness(["01_data_prep", "02_train_qlora", "03_eval", "04_export"], work / "chain", params)
    rows = [_row("chain 01 -> 04, seconds", round(seconds), note=f"exit {code}; kernels' peak RSS {_peak_rss_gb():.2f} GiB")]
    if code:
        return rows + [_row("chain", "failed", note=log[-2000:])]
    out = work / "chain"
    return rows + sft_rows(out) + open_ended_rows(out) + export_rows(out, work) + more_types_rows(out, work) \
        + dpo_rows(out, work)


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
