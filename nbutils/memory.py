"""A memory plan before loading: will it fit on this GPU, and what is the largest batch that does?

Estimate of peak GPU memory for QLoRA training with gradient checkpointing (bytes):
  base weights   linear params x 0.53 (nf4 4 bits + double-quantized absmax constants)
                 + embedding/lm_head params x 2 (kept in the 16-bit compute dtype)
  LoRA           r x (in + out) per linear layer, fp32 weight + grad + 2 Adam states = 16 bytes/param
  activations    checkpointed layer inputs: layers x batch x seq x hidden x 2
                 + one layer recomputed: batch x seq x (14 x hidden + 3 x intermediate) x 2
  logits         batch x seq x vocab x 4 x 2 (fp32 upcast for the loss, and its gradient: a known T4 OOM)
  overhead       CUDA context and allocator slack, 0.6 GB
The constants are deliberately round; the notebook prints the measured peak next to the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 2**30
OVERHEAD = 0.6 * GB


@dataclass
class Shape:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool

    @classmethod
    def from_config(cls, cfg) -> Shape:
        return cls(cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers,
                   cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
                   bool(getattr(cfg, "tie_word_embeddings", False)))

    def linears(self) -> list[tuple[int, int]]:
        kv = self.hidden * self.kv_heads // self.heads
        per_layer = [(self.hidden, self.hidden), (self.hidden, kv), (self.hidden, kv), (self.hidden, self.hidden),
                     (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return per_layer * self.layers


def estimate(shape: Shape, seq_len: int, batch: int, lora_r: int) -> dict[str, float]:
    """Estimated peak bytes by component (see the module docstring for the formula)."""
    linear = sum(i * o for i, o in shape.linears())
    embed = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    parts = {
        "base_weights": linear * 0.53 + embed * 2,
        "lora_and_optimizer": sum(lora_r * (i + o) for i, o in shape.linears()) * 16,
        "activations": batch * seq_len * 2 * (shape.layers * shape.hidden + 14 * shape.hidden + 3 * shape.intermediate),
        "logits": batch * seq_len * shape.vocab * 4 * 2,
        "overhead": OVERHEAD,
    }
    parts["total"] = sum(parts.values())
    return parts


def plan(model_config, seq_len: int, batch: int, lora_r: int, gpu_memory_gb: float | None, gpu_count: int = 1) -> dict:
    """Estimate at this batch size, against the GPU's memory, with the largest batch size that fits,
    and which multi-GPU mode to use: DDP when one GPU holds the model, split when only all together do."""
    shape = Shape.from_config(model_config)
    est = estimate(shape, seq_len, batch, lora_r)
    from nbutils.train.diskspace import checkpoint_mb

    out = {"estimate_gb": round(est["total"] / GB, 2),
           "parts_gb": {k: round(v / GB, 3) for k, v in est.items() if k != "total"},
           "gpu_memory_gb": gpu_memory_gb, "batch_size": batch, "seq_len": seq_len,
           "checkpoint_mb": round(checkpoint_mb(sum(lora_r * (i + o) for i, o in shape.linears())), 1)}
    if gpu_memory_gb:
        budget = gpu_memory_gb * GB * 0.92  # leave room for fragmentation
        fits = [b for b in range(1, 257) if estimate(shape, seq_len, b, lora_r)["total"] <= budget]
        out["fits"] = est["total"] <= budget
        out["largest_batch_that_fits"] = max(fits) if fits else 0
        if gpu_count > 1:
            split_fits = est["total"] - OVERHEAD <= (budget - OVERHEAD) * gpu_count
            out["recommended_mode"] = ("ddp: one process per GPU (multi_gpu='auto' starts them)" if out["fits"] else
                                       "split: multi_gpu='split' (device_map=auto)" if split_fits else
                                       "neither: lower batch size or sequence length, or use a smaller model")
    return out


def table(p: dict) -> str:
    rows = [(k, f"{v:.3f} GB") for k, v in p["parts_gb"].items()]
    rows.append(("estimated peak", f"{p['estimate_gb']:.2f} GB at batch {p['batch_size']} x seq {p['seq_len']}"))
    if p.get("gpu_memory_gb"):
        rows.append(("GPU memory", f"{p['gpu_memory_gb']} GB: {'fits' if p['fits'] else 'DOES NOT FIT'}; "
                                   f"largest batch that fits: {p['largest_batch_that_fits']}"))
    else:
        rows.append(("GPU memory", "no GPU: the plan is what a GPU run would need"))
    if p.get("recommended_mode"):
        rows.append(("multi-GPU mode", p["recommended_mode"]))
    if p.get("measured_peak_gb") is not None:
        rows.append(("measured peak", f"{p['measured_peak_gb']:.2f} GB after the first steps"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
