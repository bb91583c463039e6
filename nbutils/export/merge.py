"""Merged 16-bit model: the base reloaded in fp16 (never the 4-bit weights: merging into quantized weights
is lossy), the adapter merged in, saved as safetensors shards with tokenizer, chat template and generation
config, then verified by reloading it and comparing its logits with base + adapter on a few prompts.

Only one copy of the model is in memory at a time: base + adapter computes the reference logits, is merged
in place and saved, freed, and the saved folder is reloaded for the comparison.

The bound is measured, not assumed. The reference is base + adapter computed in fp32 (each block's fp16 weights
upcast while it runs: the exact model, one block's extra memory). The same base + adapter computed in fp16 differs
from it by this model's own fp16 rounding (`fp16_noise`: 0.13 on SmolLM2-135M-Instruct's 30 layers, logits up to
38, where a share of the largest logit fitted to 2-layer twins allowed 0.08). The merged model, reloaded and run
in fp16, may differ from the reference by NOISE_FACTOR times that noise: its weights are rounded once more (the
merge) on top of the same fp16 arithmetic. A merge that lost the adapter is off by the adapter's whole effect,
another base model by far more.
"""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path

from nbutils.data import chatformat
from nbutils.runtime import modelsource

# A free session: Kaggle gives 29 GiB of RAM and a 15 GiB T4 (x2); Colab's free tier 12.7 GiB and one T4.
FREE_SESSIONS = {"kaggle": {"ram_gb": 29.0, "gpu_gb": 15.0}, "colab": {"ram_gb": 12.7, "gpu_gb": 15.0}}
HEADROOM = 1.25  # loading, merging and writing shards need more than the weights alone
# The merged model (fp16) against exact base + adapter (fp32): NOISE_FACTOR x the fp16 noise of base + adapter,
# at least MIN_TOLERANCE. Measured (`python -m bench real_model`, merge rows): merged / noise 1.95 on
# SmolLM2-135M-Instruct after 5 steps; the embedded default and the family twins in tests/export/test_merge.py.
NOISE_FACTOR, MIN_TOLERANCE = 4.0, 1e-2


# What to set where the fp16 merge fits nowhere: a GGUF is converted from the merged model, so it goes too.
ADAPTER_ONLY = "export the adapter only (export_merged=False, gguf_type=\"\")"


def tolerance_for(fp16_noise: float) -> float:
    """The allowed max |logit diff| of the merged model, from the measured fp16 noise of base + adapter."""
    return max(MIN_TOLERANCE, NOISE_FACTOR * fp16_noise)


@contextlib.contextmanager
def computing_in_fp32(model):
    """Run `model` in fp32 without an fp32 copy of it: each module's own weights are upcast while it runs and cast
    back after (fp16 -> fp32 -> fp16 is lossless), and floating inputs are upcast, so activations stay fp32."""
    import torch

    def floats(x):
        return x.float() if torch.is_tensor(x) and x.is_floating_point() else x

    def up(module, args, kwargs):
        module._merge_dtypes = {n: p.dtype for n, p in module.named_parameters(recurse=False)}
        for p in module.parameters(recurse=False):
            p.data = p.data.float()
        return tuple(floats(a) for a in args), {k: floats(v) for k, v in kwargs.items()}

    def down(module, args, kwargs, output):
        for n, p in module.named_parameters(recurse=False):
            p.data = p.data.to(module._merge_dtypes[n])
        return output

    owners = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    handles = [h for m in owners for h in (m.register_forward_pre_hook(up, with_kwargs=True),
                                           m.register_forward_hook(down, with_kwargs=True))]
    try:
        yield model
    finally:
        for h in handles:
            h.remove()


def _available() -> dict:
    import psutil
    import torch

    gpu = None
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(0)
        gpu = free / 2**30
    return {"ram_gb": psutil.virtual_memory().available / 2**30, "gpu_gb": gpu}


def merge_parts(shape, prompt_tokens: int, lora_r: int = 16) -> dict[str, float]:
    """Bytes of merging and checking (this module): the fp16 weights (with HEADROOM for loading), the fp32 adapter,
    then the larger of the exact fp32 pass (`computing_in_fp32`: the largest module's weights upcast while it runs,
    one layer's fp32 activations, a prompt's logits in fp32 beside the fp16 pass's) and the merge (the largest
    linear layer's update in fp32). The check prompts run one at a time, each at most prompt_tokens long."""
    from nbutils.train import evalmemory

    largest_linear = max(i * o for i, o in shape.linears())
    largest_module = max(largest_linear, shape.vocab * shape.hidden)
    check = (largest_module * 4 + evalmemory.layer_forward(shape, prompt_tokens, 4)
             + prompt_tokens * shape.vocab * (4 + 2 + 4))
    return {"weights": evalmemory.weights(shape, quantized=False, compute_bytes=2) * HEADROOM,
            "adapter": evalmemory.adapters(shape, lora_r), "fp32_check": check, "merge": largest_linear * 4}


def memory_plan(base_model: str, prompt_tokens: int = 512, lora_r: int = 16) -> dict:
    """Does merging the fp16 base (and checking it against exact fp32 base + adapter) fit here, and in a free
    Kaggle/Colab session? From the config alone. A dry-run twin plans as the model it stands for; where
    NBUTILS_PLAN_GPU_GB names a GPU (the dry run: a T4) that, or a free Kaggle session's RAM, must hold it."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from nbutils.train import memory

    cfg = modelsource.load_config(base_model)
    with init_empty_weights():
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    shape, own = memory.Shape.from_config(cfg), memory.Shape.from_config(cfg, own=True)
    parts = merge_parts(shape, prompt_tokens, lora_r)
    need, here_need = _need(parts), _need(merge_parts(own, prompt_tokens, lora_r))  # the model's; what runs here
    here, context = _available(), memory.OVERHEAD / 2**30
    device = ("cuda" if here["gpu_gb"] and here["gpu_gb"] >= here_need + context else
              "cpu" if here["ram_gb"] >= here_need else None)
    named, why = (None, "this machine") if here["gpu_gb"] else memory.planning_gpu(None)
    if named and need + context > named * memory.MARGIN and need > FREE_SESSIONS["kaggle"]["ram_gb"]:
        device = None  # the dry run: neither the named GPU nor a free Kaggle session holds the model's merge
    return {"params": params, "weights_gb": round(parts["weights"] / HEADROOM / 2**30, 3), "needed_gb": round(need, 3),
            "estimate_gb": round(need + context, 2), "fits": device is not None,
            "parts_gb": {k: round(v / 2**30, 3) for k, v in parts.items()}, "prompt_tokens": prompt_tokens,
            "ram_free_gb": round(here["ram_gb"], 1), "gpu_free_gb": None if here["gpu_gb"] is None else round(here["gpu_gb"], 1),
            "device": device, "checked_against": why if named else "this machine",
            "free_sessions": {name: {"fits_gpu": s["gpu_gb"] * memory.MARGIN >= need + context,
                                     "fits_ram": s["ram_gb"] >= need} for name, s in FREE_SESSIONS.items()}}


def merge_need_bytes(shape, prompt_tokens: int, lora_r: int = 16) -> float:
    """Bytes at the merge's peak for this shape (no CUDA context): what the dry run measures on the twin."""
    return _need(merge_parts(shape, prompt_tokens, lora_r)) * 2**30


def _need(parts: dict) -> float:
    """GiB at the peak: weights and adapter, then the larger of the fp32 check and the merge."""
    return (parts["weights"] + parts["adapter"] + max(parts["fp32_check"], parts["merge"])) / 2**30


def plan_table(plan: dict, machine: dict | None = None) -> str:
    """04's first table: preflight's rows (`machine`), then each part of the memory plan, the need, what is free
    and where it merges."""
    rows = {**(machine or {}), **{f"memory.{k}": f"{v:.3f} GB" for k, v in plan.get("parts_gb", {}).items()},
            "memory.checked_against": plan.get("checked_against", "this machine"), "memory.merge": plan_text(plan)}
    width = max(len(k) for k in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


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
        text += f" {ADAPTER_ONLY}, or merge on a machine with more memory."
    if plan["weights_gb"] > 8:  # a GGUF f16 beside the merged shards would pass Kaggle's output limit
        text += (" Kaggle keeps at most 20 GB in /kaggle/working: with a GGUF as well, pick a quantized gguf_type "
                 "or push and delete as you go.")
    return text


def check_fits(plan: dict, export_merged: bool, gguf_type: str) -> None:
    """04's stop before anything is written: a merge is wanted (the merged export, or a GGUF, which is converted from
    the merged model even with export_merged=False) and the memory plan found nowhere to run it."""
    if plan["device"] is None and (export_merged or gguf_type):
        wanted = "the merged export" if export_merged else f"the GGUF (gguf_type={gguf_type!r}) is converted from it"
        raise MemoryError(f"The fp16 merge needs about {plan['needed_gb']:.1f} GiB, more than this machine has "
                          f"({plan['checked_against']}), and {wanted}: {ADAPTER_ONLY} and run again, or merge on a "
                          "machine with more memory.")


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


def _max_diff(a: list, b: list) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def merge_and_save(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                   device: str = "cpu", max_shard_size: str = "2GB") -> dict:
    """Merge the adapter into the fp16 base and save it. Returns the reference: exact (fp32) base + adapter logits
    on the prompts, the fp16 noise of base + adapter and the adapter's effect (both max |logit diff| from it)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)  # the checkpoint's: pad token and chat template as trained
    base = modelsource.load(AutoModelForCausalLM.from_pretrained, base_model, dtype=torch.float16,
                            device_map={"": device})
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    with computing_in_fp32(model):
        reference = logits(model, tokenizer, prompts)
        with model.disable_adapter():
            base_only = logits(model, tokenizer, prompts)
    noise = _max_diff(logits(model, tokenizer, prompts), reference)  # this model's own fp16 rounding
    effect = _max_diff(base_only, reference)
    merged = model.merge_and_unload()
    merged.generation_config = _generation_config(merged, tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, max_shard_size=max_shard_size)
    chatformat.save_tokenizer(tokenizer, out_dir)  # writes the chat template with it
    del merged, model, base
    gc.collect()
    return {"logits": reference, "fp16_noise": noise, "adapter_effect": effect}


def verify(out_dir: str | Path, reference: dict, prompts: list[str], device: str = "cpu",
           tolerance: float | None = None) -> dict:
    """Reload the merged folder with AutoModelForCausalLM + its tokenizer; max |logit diff| vs exact base+adapter."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float16, device_map={"": device}).eval()
    merged, exact = logits(model, tokenizer, prompts), reference["logits"]
    diffs = [float((a - b).abs().max()) for a, b in zip(merged, exact)]
    scale = max(float(r.abs().max()) for r in exact)
    same_argmax = all(bool((a.argmax(-1) == b.argmax(-1)).all()) for a, b in zip(merged, exact))
    del model
    gc.collect()
    tolerance = tolerance_for(reference["fp16_noise"]) if tolerance is None else tolerance
    result = {"prompts": len(prompts), "max_abs_diff": max(diffs), "per_prompt": diffs, "max_abs_logit": scale,
              "fp16_noise": reference["fp16_noise"], "adapter_effect": reference["adapter_effect"],
              "same_argmax": same_argmax, "tolerance": tolerance, "ok": max(diffs) <= tolerance,
              "has_chat_template": bool(tokenizer.chat_template),
              "files": sorted(p.name for p in Path(out_dir).iterdir())}
    return result


def export_merged(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                  device: str = "cpu", tolerance: float | None = None, max_shard_size: str = "2GB") -> dict:
    """Merge, save, reload, compare; raises when the reloaded model's logits are off by more than the tolerance."""
    if not prompts:  # before the fp16 base loads: the check has nothing to compare on
        raise ValueError("no check prompts (verify_prompts=0): the merged model is compared with base + adapter on "
                         "eval prompts before it is kept; set verify_prompts to 1 or more")
    reference = merge_and_save(base_model, adapter_dir, out_dir, prompts, device, max_shard_size)
    result = verify(out_dir, reference, prompts, device, tolerance)
    if not result["ok"]:
        raise RuntimeError(f"merged model in {out_dir} disagrees with base+adapter: max |logit diff| "
                           f"{result['max_abs_diff']:.4g} > tolerance {result['tolerance']:.4g} ({NOISE_FACTOR:g} x "
                           f"the fp16 noise of base+adapter, {result['fp16_noise']:.4g}; the adapter moves logits by "
                           f"up to {result['adapter_effect']:.4g}). "
                           "Use the adapter export, and check that base_model is the base the adapter was trained on.")
    return result
