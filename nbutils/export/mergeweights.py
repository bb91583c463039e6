"""The merge proved in the weights, whatever the adapter's size: the adapter merged into its base one LoRA layer at
a time, and in each layer merged W - base W must be the adapter's delta (scale x B @ A, computed here in fp32) within
the rounding of W's dtype. A logit comparison cannot tell a merge that lost a weak adapter from a right one (its
effect is below the tolerance); this can, in every weight the adapter moves by more than that rounding.

Memory: one layer's base weight is copied (in its own dtype) at a time, and the check runs a block of rows at a time,
so even a vocab-sized lm_head adds BLOCK_BYTES, never an fp32 copy of itself. Each merged weight's sha256 is kept,
so the reloaded folder can be shown to hold these weights bit for bit (`changed`).
"""

from __future__ import annotations

BLOCK = 2**20  # elements of W checked at a time
BLOCK_BYTES = BLOCK * 4 * 12  # at most 12 fp32 temporaries of a block at once
FP32_UNIT = 2.0**-24  # fp32's unit roundoff: the products and sums of the delta (peft's and this check's)


def half_ulp(x, dtype=None):
    """Half the spacing of `dtype` (x's own by default; x may hold its values in fp32) above each |x|, which bounds a
    rounding to x from either side, in fp32; at zero, half the smallest subnormal spacing."""
    import torch

    dtype = dtype or x.dtype
    if dtype == torch.float16:  # from fp32 bits: fp16's half-spacing is 2**(exponent - 11), at least 2**-25
        bits = x.float().view(torch.int32) & 0x7F800000  # the exponent field: 3 passes where frexp's path takes 15
        return bits.sub_(11 << 23).clamp_min_((127 - 25) << 23).view(torch.float32)
    info = torch.finfo(dtype)
    spacing = torch.exp2(torch.frexp(x.float()).exponent - 1.0) * info.eps  # |x| = m 2**e with 0.5 <= m < 1
    return torch.where(x == 0, 0.0, spacing).clamp_min(info.smallest_normal * info.eps) / 2


def merge_error(after, before, factors: list) -> tuple[int, int, int]:
    """(weights off, weights not finite, weights moved) of one merged layer. factors: (P, Q, scale) per adapter, its
    delta scale x P @ Q laid out as W. Off: |merged - base - delta| beyond the bound from the dtypes: half a spacing
    of W's dtype at the merged value (its last rounding), half a spacing of the adapter's dtype at the delta where
    that is not fp32 (peft rounds the delta to it first), and c = (2 rank + 8) fp32 unit roundoffs of |base| + the
    row's largest sum of |scale P Q| terms (the most fp32 products and sums of rank terms round, peft's and these, plus
    the additions); |base| <= |merged| + that sum + its half-spacing, and |merged| < (4 / eps) x its half-spacing,
    so the |base| term is folded into the other two. Moved: |delta| beyond the bound, the weights where a merge that
    lost the adapter is caught."""
    import torch

    rank, rows = sum(p.shape[1] for p, _, _ in factors), max(1, BLOCK // max(1, after.shape[1]))
    c = (2 * rank + 8) * FP32_UNIT
    off = bad = moved = 0
    for i in range(0, after.shape[0], rows):
        w1, w0 = after[i:i + rows], before[i:i + rows]
        delta = torch.zeros(w1.shape, dtype=torch.float32, device=w1.device)
        size = torch.zeros((w1.shape[0], 1), dtype=torch.float32, device=w1.device)
        for p, q, scale in factors:
            ps, q = p[i:i + rows].float() * scale, q.float()
            delta.addmm_(ps, q)
            size += ps.abs() @ q.abs().amax(dim=1, keepdim=True)  # >= sum_k |ps_ik q_kj| for every j of the row
        got = w1.float()
        bound = half_ulp(got, w1.dtype).mul_(1 + c * (4 / torch.finfo(w1.dtype).eps + 1)).add_(size, alpha=2 * c)
        if factors and factors[0][0].dtype != torch.float32:
            bound += half_ulp(delta.to(factors[0][0].dtype))
        within = int(torch.count_nonzero(got.sub_(w0).sub_(delta).abs_().le_(bound)))  # NaN is not within
        off += w1.numel() - within
        moved += int(torch.count_nonzero(delta.abs_().gt_(bound)))
        bad += int(w1.numel() - torch.count_nonzero(torch.isfinite(w1))) if within < w1.numel() else 0
    return off, bad, moved


def digest(weight) -> str:
    """sha256 of a weight's bytes (a CPU copy of one layer at most): fp16 is saved and reloaded bit for bit."""
    import hashlib

    import torch

    return hashlib.sha256(weight.detach().contiguous().cpu().flatten().view(torch.uint8).numpy()).hexdigest()


def _factors(layer, adapter: str) -> tuple:
    a, b, scale = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight, layer.scaling[adapter]
    return (a.T, b.T, scale) if layer.fan_in_fan_out else (b, a, scale)  # Conv1D (GPT-2) stores W transposed


def merge_layers(model) -> dict:
    """Merge a PeftModel's adapter into its base one LoRA layer at a time (peft's per-layer merge, the one
    merge_and_unload runs) and check each (`merge_error`). Layers this cannot check (DoRA and other variants, a LoRA
    bias, LoRA on embeddings or convolutions) are merged and listed as unchecked. Returns the counts, the layers
    off ("lost") or not finite ("overflow") as "name (n weights)", and each merged weight's digest."""
    import torch
    from peft.tuners.lora import Linear, LoraLayer

    found = {"checked": 0, "unchecked": [], "lost": [], "overflow": [], "moved": 0, "weights": 0, "digests": {}}
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # TF32 would round peft's delta beyond the bound
    try:
        for name, layer in model.get_base_model().named_modules():
            if not isinstance(layer, LoraLayer):
                continue
            names = [a for a in layer.active_adapters if a in layer.lora_A]
            plain = isinstance(layer, Linear) and not any(
                a in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(a) for a in names)
            weight = layer.get_base_layer().weight
            before = weight.detach().clone() if plain else None
            layer.merge(adapter_names=names)
            if plain:
                off, bad, moved = merge_error(weight.detach(), before, [_factors(layer, a) for a in names])
                del before
                found["checked"], found["moved"] = found["checked"] + 1, found["moved"] + moved
                found["weights"] += weight.numel()
                found["overflow" if bad else "lost"] += [f"{name} ({bad or off} weights)"] if bad or off else []
            else:
                found["unchecked"].append(name)
            found["digests"][name] = digest(weight)
    finally:
        torch.set_float32_matmul_precision(precision)
    return found


def changed(model, digests: dict) -> list[str]:
    """The layers of a reloaded model whose weight is not, bit for bit, the one `merge_layers` merged and checked."""
    named = dict(model.named_modules())
    return [n for n, d in digests.items() if n not in named or digest(named[n].weight) != d]
