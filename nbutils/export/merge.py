"""Merged 16-bit model: the base reloaded in fp16 (never the 4-bit weights: merging into quantized weights
is lossy), the adapter merged in one LoRA layer at a time, saved as safetensors shards with tokenizer, chat template
and generation config, then verified by reloading it. One copy of the model is in memory at a time.

The weights prove the adapter went in, whatever its size (nbutils.export.mergeweights): in each LoRA layer merged
W - base W must be the adapter's delta (scale x B @ A in fp32) within the rounding of W's dtype, and the reloaded
folder must hold those weights bit for bit (sha256). An adapter that moves no weight beyond that rounding cannot
live in an fp16 model: that fails too.

The logits catch the rest (another base, a broken save). The reference is base + adapter computed in fp32 (each
block's fp16 weights upcast while it runs: the exact model, one block's extra memory); the same in fp16 differs from
it by this model's own fp16 rounding (`fp16_noise`: 0.13 on SmolLM2-135M-Instruct's 30 layers, logits up to 38). The
merged model, reloaded and run in fp16, may differ from the reference by NOISE_FACTOR times that noise: its weights
are rounded once more on top of the same fp16 arithmetic. Another base model is off by far more. Non-finite logits
(fp16 overflow, which Gemma models are known for), noise or tolerance fail, each saying what overflowed.
"""

from __future__ import annotations

import contextlib
import gc
import math
import warnings
from pathlib import Path

from nbutils.data import chatformat
from nbutils.export import mergeweights
from nbutils.runtime import modelsource

# A free session: Kaggle gives 29 GiB of RAM and a 15 GiB T4 (x2); Colab's free tier 12.7 GiB and one T4.
FREE_SESSIONS = {"kaggle": {"ram_gb": 29.0, "gpu_gb": 15.0}, "colab": {"ram_gb": 12.7, "gpu_gb": 15.0}}
HEADROOM = 1.25  # loading, merging and writing shards need more than the weights alone
# The merged model (fp16) against exact base + adapter (fp32): NOISE_FACTOR x the fp16 noise of base + adapter,
# at least MIN_TOLERANCE. Measured (`python -m bench real_model`, merge rows): merged / noise 1.95 on
# SmolLM2-135M-Instruct after 5 steps; the embedded default and the family twins in tests/export/test_merge.py.
NOISE_FACTOR, MIN_TOLERANCE = 4.0, 1e-2
ROWS = 16  # logit rows compared at a time: no [tokens, vocab] difference is held

# What to set where the fp16 merge fits nowhere: a GGUF is converted from the merged model, so it goes too.
ADAPTER_ONLY = "export the adapter only (export_merged=False, gguf_type=\"\")"
OVERFLOW_ADVICE = f"{ADAPTER_ONLY} and run the adapter on the base in bf16 or fp32"


def prequantized(base_model: str, cfg=None) -> str | None:
    """Why the base cannot be merged into, or None: it is stored quantized (a quantization_config, as in the
    ...-bnb-4bit repos), and no fp16 merge starts from quantized weights (packed 4-bit ones cannot even be upcast)."""
    quant = getattr(cfg or modelsource.load_config(base_model), "quantization_config", None)
    method = (quant if isinstance(quant, dict) else quant.to_dict()).get("quant_method") if quant else None
    return None if not quant else (
        f"{base_model} is stored quantized ({method}: its config.json has a quantization_config), and the fp16 merge "
        f"needs unquantized weights: {ADAPTER_ONLY} in the parameters cell; or, for a merged model or a GGUF, set "
        "base_model in 01_data_prep to the unquantized original (the same model without -bnb-4bit; 02 quantizes it "
        "itself) and run 01 to 04 again")


def tolerance_for(fp16_noise: float) -> float:
    """The allowed max |logit diff| of the merged model, from the measured fp16 noise of base + adapter. NaN where
    the noise is not finite (the fp16 pass overflowed): no difference passes NaN, where max() would give 0.01 or inf."""
    if not math.isfinite(fp16_noise):
        return math.nan
    return max(MIN_TOLERANCE, NOISE_FACTOR * fp16_noise)


@contextlib.contextmanager
def computing_in_fp32(model):
    """Run `model` in fp32 without an fp32 copy of it: each module's own weights are upcast while it runs and cast
    back after (fp16 -> fp32 -> fp16 is lossless), and floating inputs are upcast, so activations stay fp32."""
    import torch

    floats = lambda x: x.float() if torch.is_tensor(x) and x.is_floating_point() else x
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

    gpu = torch.cuda.mem_get_info(0)[0] / 2**30 if torch.cuda.is_available() else None
    return {"ram_gb": psutil.virtual_memory().available / 2**30, "gpu_gb": gpu}


def merge_parts(shape, prompt_tokens: int, lora_r: int = 16, prompts: int = 1) -> dict[str, float]:
    """Bytes of merging and checking (this module): the fp16 weights (with HEADROOM for loading), the fp32 adapter,
    the check prompts' exact logits (fp32, kept from before the merge until the reloaded model is compared), then the
    larger of a check pass (`computing_in_fp32`: the largest module's weights upcast while it runs, one layer's fp32
    activations; one more prompt's logits in fp16 and their fp32 copy, reduced and freed) and the merge (the largest
    linear layer: peft's fp32 update, a copy of its base weight in fp16, a block of the weight check's fp32
    temporaries). The check prompts run one at a time, each at most prompt_tokens long."""
    from nbutils.train import evalmemory

    largest_linear = max(i * o for i, o in shape.linears())
    largest_module = max(largest_linear, shape.vocab * shape.hidden)
    check = (largest_module * 4 + evalmemory.layer_forward(shape, prompt_tokens, 4)
             + prompt_tokens * shape.vocab * (2 + 4))
    return {"weights": evalmemory.weights(shape, quantized=False, compute_bytes=2) * HEADROOM,
            "adapter": evalmemory.adapters(shape, lora_r), "reference_logits": prompt_tokens * shape.vocab * 4 * prompts,
            "fp32_check": check, "merge": largest_linear * (4 + 2) + mergeweights.BLOCK_BYTES}


def memory_plan(base_model: str, prompt_tokens: int = 512, lora_r: int = 16, prompts: int = 3) -> dict:
    """Does merging the fp16 base (and checking it against exact fp32 base + adapter) fit here, and in a free
    Kaggle/Colab session? From the config alone, for `prompts` check prompts (04's verify_prompts). A dry-run twin
    plans as the model it stands for; where NBUTILS_PLAN_GPU_GB names a GPU (the dry run: a T4) that, or a free
    Kaggle session's RAM, must hold it."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from nbutils.train import memory

    cfg = modelsource.load_config(base_model)
    with init_empty_weights():
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    shape, own = memory.Shape.from_config(cfg), memory.Shape.from_config(cfg, own=True)
    parts = merge_parts(shape, prompt_tokens, lora_r, prompts)
    need, here_need = _need(parts), _need(merge_parts(own, prompt_tokens, lora_r, prompts))  # the model's; what runs here
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
                                     "fits_ram": s["ram_gb"] >= need} for name, s in FREE_SESSIONS.items()},
            "prequantized": prequantized(base_model, cfg)}


def merge_need_bytes(shape, prompt_tokens: int, lora_r: int = 16, prompts: int = 1) -> float:
    """Bytes at the merge's peak for this shape (no CUDA context): what the dry run's probe (one prompt) measures on the twin."""
    return _need(merge_parts(shape, prompt_tokens, lora_r, prompts)) * 2**30


def _need(parts: dict) -> float:
    """GiB at the peak: weights, adapter and the kept reference logits, then the larger of a check pass and the merge."""
    held = parts["weights"] + parts["adapter"] + parts["reference_logits"]
    return (held + max(parts["fp32_check"], parts["merge"])) / 2**30


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
    """04's stop before anything is written: a merge is wanted (the merged export, or a GGUF, converted from the merged
    model even with export_merged=False) and the base is stored quantized, or the plan found nowhere to run it."""
    if plan.get("prequantized") and (export_merged or gguf_type):
        raise ValueError(f"No fp16 merge: {plan['prequantized']}.")
    if plan["device"] is None and (export_merged or gguf_type):
        wanted = "the merged export" if export_merged else f"the GGUF (gguf_type={gguf_type!r}) is converted from it"
        raise MemoryError(f"The fp16 merge needs about {plan['needed_gb']:.1f} GiB, more than this machine has "
                          f"({plan['checked_against']}), and {wanted}: {ADAPTER_ONLY} and run again, or merge on a "
                          "machine with more memory.")


def check_tokens(tokenizer, prompts: list[str]) -> int:
    """The longest check prompt in tokens, tokenized as `logits` runs it: what `memory_plan` sizes a check pass by."""
    return max((len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts), default=1)


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


def _worst(values: list[float]) -> float:
    """The largest, NaN where any is NaN (Python's max keeps a NaN only when it comes first)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _gap(a, b) -> float:
    """max |a - b| of one prompt's logits, ROWS positions at a time (no full-size difference); NaN/inf propagate."""
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return _worst([float((a[i:i + ROWS] - b[i:i + ROWS]).abs().max()) for i in range(0, a.shape[0], ROWS)])


def _extremes(t) -> tuple[float, float]:
    return tuple(float(v) for v in t.aminmax())  # NaN reaches both, inf one: no full-size temporary


def _finite(t) -> bool:
    return all(math.isfinite(v) for v in _extremes(t))


def _measure(model, tokenizer, prompts: list[str]) -> dict:
    """Per prompt, one at a time: the exact (fp32) base + adapter logits, kept for the comparison after the reload,
    and two reductions: the adapter's effect (the base alone against them) and this model's own fp16 rounding (the
    same base + adapter run in fp16 against them). The other passes' logits are freed at once (merge_parts)."""
    kept, effect, noise = [], [], []
    overflow = {"reference": [], "base": [], "fp16": []}  # the prompts (from 1) whose logits are not finite
    for k, prompt in enumerate(prompts, 1):
        with computing_in_fp32(model):
            exact = logits(model, tokenizer, [prompt])[0]
            with model.disable_adapter():
                base_only = logits(model, tokenizer, [prompt])[0]
        exact_finite = _finite(exact)
        overflow["reference"] += [] if exact_finite else [k]
        overflow["base"] += [] if _finite(base_only) else [k]
        effect.append(_gap(base_only, exact))
        del base_only
        fp16 = logits(model, tokenizer, [prompt])[0]
        overflow["fp16"] += [k] if exact_finite and not _finite(fp16) else []
        noise.append(_gap(fp16, exact))
        del fp16
        kept.append(exact)
    return {"logits": kept, "fp16_noise": _worst(noise), "adapter_effect": _worst(effect), "overflow": overflow}


def _overflow_problems(overflow: dict, merged: list[int] = ()) -> list[str]:
    """One sentence per kind of non-finite logits (check prompts counted from 1): what overflowed and what to do."""
    said = {"reference": "exact base + adapter (fp32) gives non-finite logits (NaN/inf) on check prompt(s) {}: the "
                         "base or the adapter holds non-finite weights (a diverged run?), nothing can be checked "
                         "against it; check 02's checkpoint and its training loss",
            "base": "the base model alone (fp32) gives non-finite logits on check prompt(s) {}: the adapter's effect "
                    "cannot be measured; check base_model",
            "fp16": "base + adapter run in fp16 gives non-finite logits on check prompt(s) {} where fp32 does not: "
                    "fp16 overflow (Gemma models are known for it), so no fp16 noise or tolerance, and an fp16 "
                    "merged model overflows the same way; " + OVERFLOW_ADVICE,
            "merged": "the merged model, reloaded in fp16, gives non-finite logits on check prompt(s) {}: fp16 "
                      "overflow in the merged model (or non-finite merged weights); " + OVERFLOW_ADVICE}
    found = {**overflow, "merged": list(merged)}
    return [said[k].format(", ".join(map(str, v))) for k, v in found.items() if v]


def merge_checked(model) -> dict:
    """Merge the adapter one LoRA layer at a time, each checked in the weights (mergeweights.merge_layers); raises,
    before anything is saved, when merged weights overflow fp16, a layer lost the adapter, or no weight shows it."""
    found = mergeweights.merge_layers(model)
    if found["overflow"] or found["lost"] or (found["checked"] and not found["moved"] and not found["unchecked"]):
        raise RuntimeError(_unproven(found))
    return found


def _unproven(found: dict) -> str:
    if found["overflow"]:
        return (f"the merged weights overflow fp16 in {len(found['overflow'])} LoRA layer(s) (e.g. "
                f"{found['overflow'][0]}): base + adapter leaves fp16's range; {OVERFLOW_ADVICE}")
    if found["lost"]:
        return (f"the merge lost the adapter in {len(found['lost'])} of {found['checked']} LoRA layers (e.g. "
                f"{found['lost'][0]}: merged W - base W is not scale x B @ A within fp16 rounding); {ADAPTER_ONLY}, "
                "or merge with another peft version")
    return (f"the adapter moves no weight of its {found['checked']} LoRA layers by more than fp16 rounding: an fp16 "
            f"merged model is the base model and cannot carry it; {ADAPTER_ONLY}")


def merge_and_save(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                   device: str = "cpu", max_shard_size: str = "2GB") -> dict:
    """Merge the adapter into the fp16 base (each LoRA layer proved, `merge_checked`) and save it. Returns the
    reference: exact (fp32) base + adapter logits on the prompts, the fp16 noise of base + adapter and the adapter's
    effect (both max |logit diff| from them), and the weight check. Non-finite logits stop it before the merge."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if why := prequantized(base_model):  # before anything loads: computing_in_fp32 cannot upcast packed weights
        raise ValueError(f"cannot merge {adapter_dir}: {why}.")
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)  # the checkpoint's: pad token and chat template as trained
    base = modelsource.load(AutoModelForCausalLM.from_pretrained, base_model, dtype=torch.float16,
                            device_map={"": device})
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    measured = _measure(model, tokenizer, prompts)
    if problems := _overflow_problems(measured["overflow"]):  # nothing to check against, or fp16 overflows anyway
        raise RuntimeError(f"cannot merge {adapter_dir} into {base_model}: " + "; ".join(problems))
    weights = merge_checked(model)
    with warnings.catch_warnings():  # every layer is merged already: merge_and_unload only unloads
        warnings.filterwarnings("ignore", message="All adapters are already merged")
        merged = model.merge_and_unload()
    merged.generation_config = _generation_config(merged, tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, max_shard_size=max_shard_size)
    chatformat.save_tokenizer(tokenizer, out_dir)  # writes the chat template with it
    del merged, model, base
    gc.collect()
    return {**measured, "weights": weights}


def _problems(reference: dict, merged_overflow: list[int], model, tolerance: float) -> list[str]:
    """What fails the merged model besides a finite difference over the tolerance, one sentence each: non-finite
    logits or tolerance, and LoRA layers whose reloaded weight is not, bit for bit, the merge `merge_checked` proved."""
    overflow = {**reference.get("overflow", {})}
    overflow["reference"] = sorted({*overflow.get("reference", []),
                                    *(k for k, r in enumerate(reference["logits"], 1) if not _finite(r))})
    problems = _overflow_problems(overflow, merged_overflow)
    if not math.isfinite(tolerance):
        problems.append(f"the tolerance is {tolerance} (fp16 noise of base + adapter: {reference['fp16_noise']}), not "
                        f"finite, so no difference can be judged; a non-finite noise is fp16 overflow; {OVERFLOW_ADVICE}")
    if changed := mergeweights.changed(model, (reference.get("weights") or {}).get("digests", {})):
        problems.append(f"the saved merged weights differ from the merge proved in memory in {len(changed)} LoRA "
                        f"layer(s) (e.g. {changed[0]}): the folder does not hold that merge; export again")
    return problems


def verify(out_dir: str | Path, reference: dict, prompts: list[str], device: str = "cpu",
           tolerance: float | None = None) -> dict:
    """Reload the merged folder with AutoModelForCausalLM + its tokenizer: its LoRA layers' weights must be the merge
    proved in memory, bit for bit, and its logits within the tolerance of exact base + adapter (max |logit diff|),
    one prompt at a time. Anything non-finite fails, named in `problems`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float16, device_map={"": device}).eval()
    exact, diffs, same_argmax, overflow = reference["logits"], [], True, []
    for k, (prompt, ref) in enumerate(zip(prompts, exact), 1):
        got = logits(model, tokenizer, [prompt])[0]
        diffs.append(_gap(got, ref))
        same_argmax = same_argmax and bool((got.argmax(-1) == ref.argmax(-1)).all())
        overflow += [] if _finite(got) else [k]
        del got
    tolerance = tolerance_for(reference["fp16_noise"]) if tolerance is None else tolerance
    problems = _problems(reference, overflow, model, tolerance)
    del model
    gc.collect()
    return {"prompts": len(prompts), "max_abs_diff": _worst(diffs), "per_prompt": diffs,
            "max_abs_logit": _worst([max(abs(v) for v in _extremes(r)) for r in exact]),
            "fp16_noise": reference["fp16_noise"], "adapter_effect": reference["adapter_effect"],
            "same_argmax": same_argmax, "tolerance": tolerance, "problems": problems,
            "weights": {k: v for k, v in (reference.get("weights") or {}).items() if k != "digests"},
            "ok": not problems and _worst(diffs) <= tolerance, "has_chat_template": bool(tokenizer.chat_template),
            "files": sorted(p.name for p in Path(out_dir).iterdir())}


def export_merged(base_model: str, adapter_dir: str | Path, out_dir: str | Path, prompts: list[str],
                  device: str = "cpu", tolerance: float | None = None, max_shard_size: str = "2GB") -> dict:
    """Merge, save, reload, compare; raises when a LoRA layer or the saved folder lost the adapter, when anything is
    not finite (saying what overflowed), or when the reloaded model's logits are off by more than the tolerance."""
    if not prompts:  # before the fp16 base loads: the check has nothing to compare on
        raise ValueError("no check prompts (verify_prompts=0): the merged model is compared with base + adapter on "
                         "eval prompts before it is kept; set verify_prompts to 1 or more")
    reference = merge_and_save(base_model, adapter_dir, out_dir, prompts, device, max_shard_size)
    result = verify(out_dir, reference, prompts, device, tolerance)
    if result["problems"]:  # not a difference in the logits: never the wrong-base advice below
        raise RuntimeError(f"merged model in {out_dir} failed its check: " + "; ".join(result["problems"]))
    if not result["ok"]:
        raise RuntimeError(f"merged model in {out_dir} disagrees with base+adapter: max |logit diff| "
                           f"{result['max_abs_diff']:.4g} > tolerance {result['tolerance']:.4g} ({NOISE_FACTOR:g} x "
                           f"the fp16 noise of base+adapter, {result['fp16_noise']:.4g}; the adapter moves logits by "
                           f"up to {result['adapter_effect']:.4g}). "
                           "Use the adapter export, and check that base_model is the base the adapter was trained on.")
    return result
