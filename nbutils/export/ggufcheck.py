"""Every GGUF is checked before it is kept: its metadata against the tokenizer the model was trained with, and
the model itself reloaded (transformers' `gguf_file`, dequantized) and compared with the merged model.

Metadata: the eos/eot/eom fields hold exactly the suite's stop ids, the pad id and the chat template are the
checkpoint's, and the token list is the tokenizer's, id for id. A mismatch fails with the field named.
Model: on the check prompts, the logits' NMSE (mean squared difference over the variance of the merged model's
logits: free of the logits' scale and of the model's depth) within the type's bound, greedy continuations equal for
f32/f16/bf16/q8_0 up to near-ties (where they part, the merged model's top two lie within twice the largest logit
difference measured on the prompts, `greedy_agrees`), and for every type the perplexity on the eval texts within
the type's margin of the merged model's. The bounds: nbutils.export.ggufbounds, one table for this check and
llama.cpp's. Non-finite logits or losses, on either side, fail saying which model overflowed (a NaN compared with a
bound is never greater, so it would pass every figure).
"""

from __future__ import annotations

import gc
import math
from pathlib import Path

from nbutils.export import ggufbounds, ggufload
from nbutils.export.merge import ADAPTER_ONLY

ABS_FLOOR = 0.02  # the smallest logit difference a near-tie is judged against
GREEDY_TOKENS = 12


class GGUFCheckFailed(RuntimeError):
    """The GGUF does not match the model it was converted from; the message names the field or the figure."""


def read_metadata(path: str | Path) -> dict:
    """The fields the check needs: stop fields, pad, chat template, token list, architecture and file type."""
    return metadata(ggufload.read_kv(path))


def metadata(kv: dict) -> dict:
    """read_metadata's fields from a GGUF's key-value metadata (ggufload.read_kv)."""
    return {"architecture": kv.get("general.architecture"), "file_type": kv.get("general.file_type"),
            "stops": {n: kv.get(f"tokenizer.ggml.{n}_token_id") for n in ("eos", "eot", "eom")},
            "pad": kv.get("tokenizer.ggml.padding_token_id"), "bos": kv.get("tokenizer.ggml.bos_token_id"),
            "add_bos": kv.get("tokenizer.ggml.add_bos_token"), "chat_template": kv.get("tokenizer.chat_template"),
            "tokens": kv.get("tokenizer.ggml.tokens", [])}


def metadata_problems(meta: dict, tokenizer, stop_ids: list[int], add_bos: bool | None = None) -> list[str]:
    """What in the GGUF's metadata differs from the trained tokenizer, one sentence per field."""
    problems = []
    if add_bos is not None and bool(meta["add_bos"]) != add_bos:
        problems.append(f"tokenizer.ggml.add_bos_token is {meta['add_bos']}, the chat template "
                        f"{'starts' if add_bos else 'does not start'} with BOS")
    held = {v for v in meta["stops"].values() if v is not None}
    if held != set(stop_ids):
        problems.append(f"tokenizer.ggml.eos/eot/eom_token_id hold {sorted(held)}, the model stops on {sorted(stop_ids)}")
    if tokenizer.pad_token_id is not None and meta["pad"] != tokenizer.pad_token_id:
        problems.append(f"tokenizer.ggml.padding_token_id is {meta['pad']}, the tokenizer's pad is {tokenizer.pad_token_id}")
    if (meta["chat_template"] or None) != (tokenizer.chat_template or None):
        problems.append("tokenizer.chat_template differs from the chat template the model was trained with")
    ours = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    theirs = meta["tokens"][: len(ours)]
    if theirs != ours:
        first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        problems.append(f"tokenizer.ggml.tokens differs from the tokenizer at id {first} "
                        f"({theirs[first] if first < len(theirs) else 'missing'!r} vs {ours[first]!r})")
    return problems


def measure(model, tokenizer, prompts: list[str], texts: list[str]) -> dict:
    """Logits on the prompts, greedy continuations of them, and the mean NLL of the texts' tokens."""
    import torch

    out = {"logits": [], "greedy": [], "margins": [], "nll": 0.0, "tokens": 0}
    with torch.no_grad():
        for p in prompts:
            ids = tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids.to(model.device)
            step = model(ids, use_cache=True)
            out["logits"].append(step.logits.float().cpu()[0])
            greedy, margins = greedy_after(model, step, GREEDY_TOKENS)  # a fixed length, stop tokens included
            out["greedy"].append(greedy)
            out["margins"].append(margins)
        for t in texts:
            ids = tokenizer(t, return_tensors="pt", add_special_tokens=False).input_ids.to(model.device)
            loss = model(ids, labels=ids).loss.float().item()
            out["nll"] += loss * (ids.shape[1] - 1)
            out["tokens"] += ids.shape[1] - 1
    return out


def greedy_after(model, step, max_new: int, stop_ids=()) -> tuple[list[int], list[float]]:
    """Greedy tokens after a forward pass `step` (use_cache=True), each with the model's lead of its top token over
    the second: the gap a near-tie is judged by. Ends after a stop token (kept) or max_new tokens."""
    import torch

    out, margins = [], []
    for _ in range(max_new):
        top = step.logits[0, -1].float().topk(2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        if out[-1] in stop_ids or len(out) == max_new:
            break
        step = model(torch.tensor([[out[-1]]], device=model.device), past_key_values=step.past_key_values, use_cache=True)
    return out, margins


def greedy_agrees(reference: dict, got: dict, tolerance: float) -> tuple[bool, list]:
    """Greedy continuations agree token for token, up to a tie: where they first part, the merged model's own top two
    logits lie within 2 x tolerance, so a difference the logits check allows can swap them. (Random-weight twins have
    such ties everywhere; a trained model's chosen tokens lead by far more.) Returns (agree, [(prompt, step, gap)])."""
    ties = []
    for i, (a, b, gaps) in enumerate(zip(reference["greedy"], got["greedy"], reference["margins"])):
        step = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is not None:
            if not gaps[step] <= 2 * tolerance:  # a NaN gap is no tie
                return False, ties
            ties.append((i, step, round(gaps[step], 5)))
    return True, ties


def nmse(got: list, reference: list) -> float:
    """Mean squared logit difference over the variance of the reference's logits (all prompts and positions)."""
    import torch

    a, b = torch.cat([x.flatten() for x in got]), torch.cat([x.flatten() for x in reference])
    return float(((a - b) ** 2).mean() / ((b - b.mean()) ** 2).mean().clamp_min(1e-12))


def _perplexity(measured: dict) -> float:
    mean = measured["nll"] / max(1, measured["tokens"])
    return math.inf if mean > 709 else math.exp(mean)  # math.exp raises past 709; a NaN stays NaN


def nonfinite(reference: dict, got: dict, quant_type: str) -> list[str]:
    """Non-finite logits (on a check prompt or its greedy continuation) or eval loss, one sentence per side: which
    model overflowed and what to do. Such a figure is a failure, never compared with its bound."""
    import torch

    advice = {"merged": "it overflows (in fp16, as Gemma models are known to) or holds non-finite weights, and the GGUF "
                        f"cannot be judged against it; {ADAPTER_ONLY}",
              "gguf": "its dequantized pass overflows or the file holds non-finite tensors, so it is not kept; try "
                      f"another gguf_type or {ADAPTER_ONLY}"}
    said = []
    for side, m, who in (("merged", reference, "the merged model"), ("gguf", got, f"the {quant_type} GGUF")):
        bad = [k for k, (x, gaps) in enumerate(zip(m["logits"], m["margins"]), 1)
               if not (bool(torch.isfinite(x).all()) and all(math.isfinite(g) for g in gaps))]
        what = ([f"non-finite logits (NaN/inf) on check prompt(s) {bad}"] if bad else []) + (
            [f"a loss of {m['nll']} on the eval texts"] if not math.isfinite(m["nll"]) else [])
        if what:
            said.append(f"{who} gives {' and '.join(what)}: {advice[side]}")
    return said


def compare(reference: dict, got: dict, quant_type: str) -> dict:
    """The figures and the verdict: logits' NMSE within the type's bound, greedy equal up to ties (where required),
    perplexity within the type's margin; anything non-finite fails first (`nonfinite`)."""
    scale = max(float(r.abs().max()) for r in reference["logits"])
    diff = max(float((a - b).abs().max()) for a, b in zip(got["logits"], reference["logits"]))
    bounds = ggufbounds.for_type(quant_type)
    error, bound = nmse(got["logits"], reference["logits"]), bounds.nmse
    ppl_ref, ppl, margin = _perplexity(reference), _perplexity(got), bounds.ppl_margin
    same_greedy = got["greedy"] == reference["greedy"]
    tie = max(ABS_FLOOR, diff)  # what this file moves logits by, measured: a gap under twice that is a near-tie
    greedy_ok, ties = greedy_agrees(reference, got, tie)
    problems, beyond = nonfinite(reference, got, quant_type), []  # the figures only mean something when finite
    if not error <= bound:
        beyond.append(f"logits' NMSE {error:.3g} > {bound:g} for {quant_type} (max |logit diff| {diff:.4g})")
    if bounds.greedy and not greedy_ok:
        beyond.append(f"greedy continuations part from the merged model's where it leads by more than 2 x "
                      f"{tie:.4g} ({quant_type} must keep them)")
    if not ppl <= ppl_ref * (1 + margin):
        beyond.append(f"perplexity {ppl:.4g} vs the merged model's {ppl_ref:.4g}: more than {margin:.1%} worse")
    problems = problems or beyond
    return {"type": quant_type, "nmse": error, "nmse_bound": bound, "max_abs_diff": diff, "max_abs_logit": scale,
            "same_greedy": same_greedy, "greedy_ties": ties, "greedy_checked": bounds.greedy,
            "perplexity": ppl, "merged_perplexity": ppl_ref, "ppl_margin": margin, "problems": problems,
            "ok": not problems}


def verify(gguf_file: str | Path, merged_dir: str | Path, tokenizer, stop_ids: list[int], prompts: list[str],
           texts: list[str], quant_type: str, device: str = "cpu", add_bos: bool | None = None, also=None) -> dict:
    """Metadata, then the reloaded model against the merged one; raises GGUFCheckFailed naming what is wrong.
    `also(model)`, if given, runs while the merged model is loaded (04's runtime check); its answer is "also"."""
    gguf_file, merged_dir = Path(gguf_file), Path(merged_dir)
    kv = ggufload.read_kv(gguf_file)  # read once: the metadata check and the reload's hyper-parameters
    problems = metadata_problems(metadata(kv), tokenizer, stop_ids, add_bos)
    if problems:
        raise GGUFCheckFailed(f"{gguf_file.name}: " + "; ".join(problems))
    dtype = ggufload.compute_dtype(merged_dir, device)
    model = ggufload.load_merged(merged_dir, device, dtype)
    reference = measure(model, tokenizer, prompts, texts)
    extra = also(model) if also is not None else None
    del model
    gc.collect()
    model, how = ggufload.load(gguf_file, merged_dir, device, dtype, kv)
    got = measure(model, tokenizer, prompts, texts)
    del model
    gc.collect()
    result = {**compare(reference, got, quant_type), "reloaded_with": how, "dtype": str(dtype).replace("torch.", ""),
              "also": extra}
    if not result["ok"]:
        raise GGUFCheckFailed(f"{gguf_file.name} disagrees with the merged model: " + "; ".join(result["problems"]))
    return result


def lora_check(gguf_file: str | Path, adapter_dir: str | Path) -> dict:
    """The GGUF LoRA holds every A/B matrix of the adapter (Frobenius norms, which the converter's row permutations
    keep, equal to 1%) and its alpha."""
    import json

    import numpy as np
    from gguf.quants import dequantize
    from safetensors.torch import load_file

    reader = ggufload.reader(gguf_file)
    ours = sorted(float(t.float().norm()) for t in load_file(Path(adapter_dir) / "adapter_model.safetensors").values())
    theirs = sorted(float(np.linalg.norm(dequantize(t.data, t.tensor_type).astype("float64"))) for t in reader.tensors)
    alpha = reader.fields["adapter.lora.alpha"].contents() if "adapter.lora.alpha" in reader.fields else None
    want = json.loads((Path(adapter_dir) / "adapter_config.json").read_text()).get("lora_alpha")
    same = len(ours) == len(theirs) and all(math.isclose(a, b, rel_tol=1e-2, abs_tol=1e-4) for a, b in zip(ours, theirs))
    return {"tensors": len(theirs), "adapter_tensors": len(ours), "alpha": alpha, "ok": same and alpha == want}
