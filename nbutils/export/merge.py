"""Merged 16-bit model: the base reloaded in fp16 (never the 4-bit weights: merging into quantized weights
is lossy), the adapter merged in, saved as safetensors shards with tokenizer, chat template and generation
config, then verified by reloading it and comparing its logits with base + adapter on a few prompts.

Only one copy of the model is in memory at a time: base + adapter computes the reference logits, is merged
in place and saved, freed, and the saved folder is reloaded for the comparison.
"""

from __future__ import annotations

import gc
from pathlib import Path

from nbutils.data import chatformat
from nbutils.runtime import modelsource

# A free session: Kaggle gives 29 GiB of RAM and a 15 GiB T4 (x2); Colab's free tier 12.7 GiB and one T4.
FREE_SESSIONS = {"kaggle": {"ram_gb": 29.0, "gpu_gb": 15.0}, "colab": {"ram_gb": 12.7, "gpu_gb": 15.0}}
HEADROOM = 1.25  # loading, merging and writing shards need more than the weights alone
# Merged vs base+adapter, both fp16, differ only by rounding order: allow about two fp16 steps (eps ~1e-3)
# of the largest |logit|, and at least 0.01. A merge that lost the adapter is off by its whole effect.
REL_TOLERANCE, MIN_TOLERANCE = 2e-3, 1e-2


def tolerance_for(max_abs_logit: float) -> float:
    """The allowed max |logit diff| for logits up to this size."""
    return max(MIN_TOLERANCE, REL_TOLERANCE * max_abs_logit)


def _available() -> dict:
    import psutil
    import torch

    gpu = None
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(0)
        gpu = free / 2**30
    return {"ram_gb": psutil.virtual_memory().available / 2**30, "gpu_gb": gpu}


def memory_plan(base_model: str, bytes_per_param: int = 2) -> dict:
    """Does the fp16 base fit here, and in a free Kaggle/Colab session? Parameter count from the config alone."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    cfg = modelsource.load_config(base_model)
    with init_empty_weights():
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    need = params * bytes_per_param / 2**30 * HEADROOM
    here = _available()
    device = "cuda" if here["gpu_gb"] and here["gpu_gb"] >= need else "cpu" if here["ram_gb"] >= need else None
    plan = {"params": params, "weights_gb": round(params * bytes_per_param / 2**30, 3), "needed_gb": round(need, 3),
            "ram_free_gb": round(here["ram_gb"], 1), "gpu_free_gb": None if here["gpu_gb"] is None else round(here["gpu_gb"], 1),
            "device": device,
            "free_sessions": {name: {"fits_gpu": s["gpu_gb"] >= need, "fits_ram": s["ram_gb"] >= need}
                              for name, s in FREE_SESSIONS.items()}}
    return plan


def plan_text(plan: dict) -> str:
    """One paragraph: what merging needs, what is free here, and what to do when it does not fit."""
    where = {"cuda": "on the GPU", "cpu": "in CPU RAM"}.get(plan["device"], "NOWHERE here")
    sessions = ", ".join(f"{n}: {'GPU' if f['fits_gpu'] else 'RAM' if f['fits_ram'] else 'does not fit'}"
                         for n, f in plan["free_sessions"].items())
    text = (f"fp16 base: {plan['params'] / 1e6:.1f}M parameters, {plan['weights_gb']:.2f} GiB of weights, about "
            f"{plan['needed_gb']:.2f} GiB to merge. Free here: {plan['ram_free_gb']} GiB RAM, GPU "
            f"{'none' if plan['gpu_free_gb'] is None else str(plan['gpu_free_gb']) + ' GiB'} -> merging {where}. "
            f"Free sessions: {sessions}.")
    if plan["device"] is None:
        text += " Export the adapter only (export_merged=False), or merge on a machine with more memory."
    if plan["weights_gb"] > 8:  # a GGUF f16 beside the merged shards would pass Kaggle's output limit
        text += (" Kaggle keeps at most 20 GB in /kaggle/working: with a GGUF as well, pick a quantized gguf_type "
                 "or push and delete as you go.")
    return text


def logits(model, tokenizer, prompts: list[str]) -> list:
    """Float32 logits of each prompt (one at a time: no padding to disturb the comparison)."""
    import torch

    out = []
    for p in prompts:
        ids = tokenizer(p, return_tensors="pt", add_special_tokens=False).to(model.device)
        with torch.no_grad():
            out.append(model(**ids).logits.float().cpu())
    return out


def _generation_config(model, tokenizer):
    gen = model.generation_config
    # Every token the chat ends on (end-of-turn, EOS, the base's own list), so the merged model stops where it was trained to.
    gen.eos_token_id, gen.pad_token_id = chatformat.stop_ids(tokenizer, model), tokenizer.pad_token_id
    if tokenizer.bos_token_id is not None:
        gen.bos_token_id = tokenizer.bos_token_id
    return gen


def merge_and_save(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                   device: str = "cpu", max_shard_size: str = "2GB") -> list:
    """Merge the adapter into the fp16 base and save it; returns base+adapter logits on the prompts."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)  # the checkpoint's: pad token and chat template as trained
    base = modelsource.load(AutoModelForCausalLM.from_pretrained, base_model, dtype=torch.float16,
                            device_map={"": device})
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    reference = logits(model, tokenizer, prompts)
    merged = model.merge_and_unload()
    merged.generation_config = _generation_config(merged, tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, max_shard_size=max_shard_size)
    chatformat.save_tokenizer(tokenizer, out_dir)  # writes the chat template with it
    del merged, model, base
    gc.collect()
    return reference


def verify(out_dir: str | Path, reference: list, prompts: list[str], device: str = "cpu",
           tolerance: float | None = None) -> dict:
    """Reload the merged folder with AutoModelForCausalLM + its tokenizer; max |logit diff| vs base+adapter."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float16, device_map={"": device}).eval()
    merged = logits(model, tokenizer, prompts)
    diffs = [float((a - b).abs().max()) for a, b in zip(merged, reference)]
    scale = max(float(r.abs().max()) for r in reference)
    same_argmax = all(bool((a.argmax(-1) == b.argmax(-1)).all()) for a, b in zip(merged, reference))
    del model
    gc.collect()
    tolerance = tolerance_for(scale) if tolerance is None else tolerance
    result = {"prompts": len(prompts), "max_abs_diff": max(diffs), "per_prompt": diffs, "max_abs_logit": scale,
              "same_argmax": same_argmax, "tolerance": tolerance, "ok": max(diffs) <= tolerance,
              "has_chat_template": bool(tokenizer.chat_template),
              "files": sorted(p.name for p in Path(out_dir).iterdir())}
    return result


def export_merged(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                  device: str = "cpu", tolerance: float | None = None, max_shard_size: str = "2GB") -> dict:
    """Merge, save, reload, compare; raises when the reloaded model's logits are off by more than the tolerance."""
    reference = merge_and_save(base_model, adapter_dir, out_dir, prompts, device, max_shard_size)
    result = verify(out_dir, reference, prompts, device, tolerance)
    if not result["ok"]:
        raise RuntimeError(f"merged model in {out_dir} disagrees with base+adapter: max |logit diff| "
                           f"{result['max_abs_diff']:.4g} > tolerance {result['tolerance']:.4g} "
                           f"(logits up to {result['max_abs_logit']:.1f}). "
                           "Use the adapter export, and check that base_model is the base the adapter was trained on.")
    return result
