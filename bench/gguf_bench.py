"""GGUF export, measured: 04's GGUF step (nbutils.export.ggufbuild) with its checks in transformers and in llama.cpp
itself, per family and type, and the build of llama.cpp's tools.

Rows per model and type (f16, q8_0, q4_k_m): the GGUF's build (converter, and llama-quantize for q4_k_m) in seconds,
the runtime check's seconds (llama.cpp's runs and the merged model's side), the runtime's NMSE, mean KL and top-1
agreement on held-out text against the merged model, and what the check found (prompt tokens, template, greedy,
stops). Models: every family twin with a real tokenizer (tests/twins/realvocab.py: random weights, so no greedy
answer ends on its own), then SmolLM2-135M-Instruct (bench/pretrained.py), a real chat model, with an adapter
trained briefly on the order task (bench/order_task.py) and merged by 04's merge: its answers end on <|im_end|>, and
its LoRA GGUF is checked on a GGUF of the base. Last, what the runtime check adds to 04 (SmolLM2, q8_0: the step
with and without it) and the build of llama-quantize and the probe (measured when no build is cached, else the
cached build's own record).

    python -m bench gguf        # rows saved in bench/results/<machine>.json under "gguf"
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

TYPES = ("f16", "q8_0", "q4_k_m")
ORDERS = 12  # order-task records: 8 to train the adapter on, 4 held out (the check's prompts and texts)


def _row(metric: str, value, **extra) -> dict:
    return {"bench": "gguf", "metric": metric, "value": value, **extra}


def _rows(label: str, result: dict, seconds: float) -> list[dict]:
    if not result.get("file"):
        return [_row(f"{label}", "no GGUF", note=result.get("reason") or result.get("error"))]
    v, rt = result["verification"], result["runtime"]
    sides = rt.get("seconds") or {}
    rows = [_row(f"{label}: GGUF build s / 04's checks s (of which llama.cpp, merged model's side)",
                 f"{result['seconds']['convert']} / {result['seconds']['checks']} ({sides.get('llama_cpp')}, "
                 f"{sides.get('merged_model')})",
                 note=f"{result['size_mb']} MB; step {seconds:.0f} s; transformers: logits' NMSE {v['nmse']:.3g} "
                      f"(bound {v['nmse_bound']:g}), perplexity GGUF / merged "
                      f"{v['perplexity'] / v['merged_perplexity']:.4f}")]
    if "logits" not in rt:
        return rows + [_row(f"{label}: llama.cpp", "not checked" if not rt.get("checked") else "FAILED", note=rt["reason"])]
    lg, g, t = rt["logits"], rt["greedy"], rt["tokens"]
    b = lg["bounds"]
    confident = "-" if lg["top1_confident"] is None else f"{lg['top1_confident']:.1%}"
    rows.append(_row(f"{label}: llama.cpp NMSE / KL / top-1 (confident positions)",
                     f"{lg['nmse']:.2e} / {lg['kl_mean']:.2e} / {lg['top1']:.1%} ({confident})",
                     target=f"<= {b['nmse']:g} / <= {b['kl_mean']:g} / ({b['top1']:.0%})",
                     note=f"{lg['positions']} positions, {lg['confident_positions']} confident; max |logit diff| "
                          f"{lg['max_abs_diff']:.3g}"))
    rows.append(_row(f"{label}: llama.cpp tokens / template / greedy / stops",
                     f"{t['same_ids']}/{t['eval_prompts']} / {rt['template']['equal']}/{rt['template']['conversations']}"
                     f" / {g['same']}/{g['prompts']} / {g['stopped']}/{g['merged_stopped']}",
                     target="all equal; stops: llama.cpp/merged", note=f"ok {rt['ok']}; ties {g['ties']}; stopped on "
                     f"{sorted(set(g['stopped_on']))}; {'; '.join(rt['problems'])[:300]}"))
    if rt.get("lora") and "nmse" in rt["lora"]:
        lo = rt["lora"]
        sure = "-" if lo["top1_confident"] is None else f"{lo['top1_confident']:.1%}"
        rows.append(_row(f"{label}: base {lo['base_type']} GGUF + LoRA GGUF: NMSE / KL / top-1 (confident)",
                         f"{lo['nmse']:.2e} / {lo['kl_mean']:.2e} / {lo['top1']:.1%} ({sure})",
                         note=f"top-1 vs the merged GGUF {lo['top1_vs_merged_gguf']:.1%}; ok: {not lo['problems']}"))
    return rows


def _family_rows(name: str, quant_type: str, root: Path) -> list[dict]:
    from tests.export.test_ggufbuild import _export_type
    from tests.twins import families

    t0 = time.monotonic()
    result = _export_type(name, families.ensure(name), root, quant_type, verify_runtime=True)
    return _rows(f"{name} {quant_type}", result, time.monotonic() - t0)


def _adapter(base: Path, tok, chats: list, answers: list, out: Path) -> Path:
    """A LoRA on the base, trained 24 steps on the order task (a checkpoint folder: adapter and tokenizer)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    texts = [tok.apply_chat_template([*c, {"role": "assistant", "content": a}], tokenize=False) for c, a in zip(chats, answers)]
    for step in range(24):
        ids = tok(texts[step % len(texts)], return_tensors="pt", add_special_tokens=False).input_ids
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _smollm(root: Path) -> tuple:
    """SmolLM2 merged with a briefly trained adapter by 04's merge: (base, adapter, merged folder, chats, answers)."""
    from transformers import AutoTokenizer

    from bench import order_task, pretrained
    from nbutils.data import chatformat
    from nbutils.export import merge

    base = pretrained.ensure()
    tok = chatformat.prepare_tokenizer(AutoTokenizer.from_pretrained(base))
    rows = order_task.records(ORDERS, seed=1)
    chats = [[{"role": "user", "content": f"{r['instruction']}\n\n{r['input']}"}] for r in rows]
    answers = [r["output"] for r in rows]
    adapter = _adapter(base, tok, chats[:8], answers[:8], root / "adapter")
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats[8:]]
    merge.merge_and_save(str(base), adapter, root / "merged", prompts)
    return base, adapter, root / "merged", chats[8:], answers[8:]


def _smollm_export(made: tuple, root: Path, quant_type: str, verify_runtime) -> tuple[dict, float]:
    from transformers import AutoTokenizer

    from nbutils.export import card, diskplan, ggufbuild, ggufcheck

    base, adapter, merged, chats, answers = made
    disk = diskplan.make_plan(root / "out", root / "temp", {"gguf": 2**20, "merged": 2**20, "adapter_gguf": 2**20})
    disk.path("merged").symlink_to(merged, target_is_directory=True)  # merged once, read by every export
    tok = AutoTokenizer.from_pretrained(merged)
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    t0 = time.monotonic()
    try:
        result = ggufbuild.export(disk, quant_type, tok, prompts, [p + a for p, a in zip(prompts, answers)], str(base),
                                  adapter, card.collect_facts(root, root, root, str(base)), chats=chats,
                                  answers=answers, verify_runtime=verify_runtime)
    except ggufcheck.GGUFCheckFailed as e:  # the transformers check refused it: a row says so
        result = {"error": f"{type(e).__name__}: {e}"}
    return result, time.monotonic() - t0


def _smollm_rows(root: Path) -> list[dict]:
    made = _smollm(root / "smollm2")
    rows, took = [], {}
    for quant_type in TYPES:
        result, took[quant_type] = _smollm_export(made, root / f"smollm2-{quant_type}", quant_type, True)
        rows += _rows(f"SmolLM2-135M-Instruct {quant_type}", result, took[quant_type])
    without, s_without = _smollm_export(made, root / "smollm2-plain", "q8_0", False)
    rows.append(_row("SmolLM2-135M-Instruct q8_0: 04's GGUF step without / with the runtime check, s",
                     f"{s_without:.0f} / {took['q8_0']:.0f}", target="adds <= 120 s",
                     note=f"adds {took['q8_0'] - s_without:.0f} s (the base GGUF for the LoRA check included); "
                          f"without: {(without.get('runtime') or {}).get('reason') or without.get('error')}"[:200]))
    return rows


def _build_rows(root: Path) -> list[dict]:
    import os

    from nbutils.export import llamabuild
    from nbutils.runtime import llamacpp

    cached = llamabuild.build_dir() / llamabuild.BUILT
    if llamabuild.find_probe() and cached.exists():
        return [_row("llama-quantize + probe build (the cached build's record)", cached.read_text())]
    folder, note = llamabuild.build(llamacpp.converter_dir(sources=True), root / "build")
    rows = [_row(f"llama-quantize + probe build (load {os.getloadavg()[0]:.1f})", note if folder else "failed",
                 note=None if folder else note)]
    if folder and llamabuild.find_probe() is None:  # keep it as the cached build the notebook finds
        llamabuild.build_dir().parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, llamabuild.build_dir())
    return rows


def run() -> list[dict]:
    from tests.twins import realvocab

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows += _build_rows(root)
        for name in sorted(realvocab.VOCAB):
            for quant_type in TYPES:
                rows += _family_rows(name, quant_type, root / f"{name}-{quant_type}")
        rows += _smollm_rows(root)
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
