"""A memory plan before loading: will it fit on this GPU, and what is the largest batch that does?

Estimate of peak GPU memory for QLoRA training with gradient checkpointing (bytes):
  linear layers  per layer q, k, v, o: hidden x heads*head_dim, hidden x kv_heads*head_dim (twice),
                 heads*head_dim x hidden (head_dim from the config: Qwen3's and Gemma's attention is not hidden
                 wide); the MLP: hidden x intermediate (twice), intermediate x hidden
  base weights   linear params x 0.53 (nf4 4 bits + double-quantized absmax constants)
                 + embedding/lm_head params x 4 (not quantized; peft's k-bit preparation casts them to fp32)
  LoRA           r x (in + out) per linear layer, fp32 weight + grad + 2 Adam states = 16 bytes/param
  checkpoints    checkpointed layer inputs: layers x batch x seq x hidden x 4 (the residual stream is fp32:
                 it starts at the fp32 embedding)
  then the largest of the moments that do not overlap (`peak`):
  loss step      lm_head copy + logits
  layer backward one layer recomputed and its gradients: batch x seq x ((14 x hidden + 8 x intermediate) x 2
                 + 8 x hidden: the fp32 gradient of the residual stream, in and out); eager attention (Gemma-2)
                 adds its seq x seq scores (`eager_scores`), its 4-D masks live all along (`eager_masks`)
  generation     GRPO's KV cache (plan_preference): layers x 2 x batch x seq x kv_heads x head_dim x 2
  lm_head copy   vocab x hidden x 2: the fp32 LM head cast to the compute dtype while the loss runs
                 (autocast's cast, or liger's own)
  logits         the loss step, by the loss that trains (nbutils.train.loss):
                 plain   batch x seq x vocab x 12: in backward, the saved fp32 log-softmax, its gradient
                         and the logits' gradient (3 x 4 bytes, measured on the CPU: `python -m bench loss`;
                         the 16-bit logits lm_head returns are freed by then): a known T4 OOM
                 chunked one chunk's logits, rows x vocab x (4 + 2: fp32 and a 16-bit copy beside it),
                         rows = loss.chunk_rows(vocab),
                         plus four batch x seq x hidden buffers: the kept positions' hidden states, their
                         gradient, that gradient scaled in backward, and the gradient scattered back into
                         the hidden states (measured on the CPU: `python -m bench loss`)
                 liger   planned as chunked (its Triton kernel's chunks are smaller: an upper bound)
                 trl     trl's fused LM head (DPO, KTO and GRPO in trl 1.16: the logits never exist whole): one
                         tile of at most 4096 tokens x 32768 vocabulary columns in the compute dtype, plus
                         per token the hidden states it keeps (compute dtype), their fp32 gradient and its
                         fp32 per-token statistics (12 at most); read from trl's Triton path, not measured
                         (on a CPU trl runs the head in plain torch, with several tile-sized temporaries)
  overhead       CUDA context and allocator slack, 0.6 GB (torch.cuda.max_memory_allocated does not see it:
                 `allocated_gb` is the estimate without it, what that counter should read)
The constants are deliberately round; the notebook prints the measured peak next to the estimate. The fp32
embedding, the fp32 checkpointed inputs and the LM head's 16-bit copy were read off the allocations live at the
peak of a GPU run (`make gpu-proof`'s Llama-3.2-1B shape, batches 1 and 2, docs/planning.md); the two moments and
the layer backward's 8 x intermediate from `make gpu-proof`'s sweeps of Llama-3.2-1B and Qwen2.5-1.5B at batches
1 to 32 (a small batch peaks in the loss step, a large one in a layer's backward).
The 16-bit terms are for the GPU (compute dtype fp16/bf16); `logits_bytes(..., compute_bytes=4)` is
the fp32 figure the CPU bench checks against its measurement, and `plan(..., compute_bytes=4)` a GPU run with
precision="fp32" (fp32 activations, no 16-bit LM head copy, the CUDA context still).
Split over several GPUs (device_map="auto", one process: `split_peak`), the weights, LoRA and the checkpoints divide;
the moment and the fp32 LM head (tied: the embedding) do not: one GPU holds them whole, with its share of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbutils.defaults import text_config

GB = 2**30
OVERHEAD = 0.6 * GB
LOSSES = ("plain", "chunked", "liger", "trl")
MARGIN = 0.92  # of a GPU's memory a plan may fill: the rest is left to fragmentation
PLAN_GPU_ENV = "NBUTILS_PLAN_GPU_GB"  # without a GPU, the GPU memory the plans check against (the dry run: a T4's)
CHUNK_BYTES = 128 * 2**20  # fp32 logits of one chunk of the chunked loss (nbutils.train.loss): its only large buffer


def chunk_rows(vocab: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Positions per chunk of the chunked loss, so that one chunk's fp32 logits take about chunk_bytes."""
    return max(16, chunk_bytes // (4 * vocab))


def logits_bytes(batch: int, seq_len: int, vocab: int, hidden: int, loss: str = "plain", compute_bytes: int = 2) -> float:
    """Peak bytes of the loss step (logits, softmax, gradients) for this loss; compute_bytes 2 (GPU) or 4 (fp32)."""
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r} is not one of {', '.join(LOSSES)}")
    tokens = batch * seq_len
    if loss == "plain":
        return tokens * vocab * 12
    if loss == "trl":
        rows, cols = trl_tile()
        return min(tokens, rows) * min(vocab, cols) * compute_bytes + tokens * (hidden * (compute_bytes + 4) + 12 * 4)
    low = compute_bytes if compute_bytes < 4 else 0  # a chunk's 16-bit logits or gradient beside the fp32 ones
    rows = min(tokens, chunk_rows(vocab))
    return rows * vocab * (4 + low) + tokens * hidden * compute_bytes * 4


def trl_tile() -> tuple[int, int]:
    """(tokens, vocabulary columns) of one tile of trl's fused LM head, from trl where it is installed."""
    try:
        from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE
        return TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE
    except ImportError:  # trl absent or reorganised: its 1.16 values
        return 4096, 32768


FULL_SHAPE = "nbutils_full_shape"  # in a dry-run twin's config: the dimensions of the model it stands for
SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "tie_word_embeddings", "head_dim")


def full_shape(cfg) -> dict:
    """The config's dimensions the plan reads (what a dry-run twin records of its model as FULL_SHAPE)."""
    text = text_config(cfg)
    return {k: getattr(text, k, None) for k in SHAPE_KEYS}


@dataclass
class Shape:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool
    head_dim: int = 0  # 0: hidden // heads. Qwen3 and Gemma-2/3 set their own, and heads x head_dim != hidden there

    def __post_init__(self):
        self.head_dim = self.head_dim or self.hidden // self.heads

    @property
    def attention(self) -> int:
        """The query's width (and the attention output's, o_proj's input): heads x head_dim, not hidden: Qwen3-4B's
        is 4,096 over a 2,560 hidden size, Gemma-2-2B's 2,048 under 2,304."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """The width of one layer's keys (and of its values) per position: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @classmethod
    def from_config(cls, cfg, own: bool = False) -> Shape:
        """The model's shape. A dry-run twin (nbutils.plan.shrink) records the shape of the model it stands for
        (FULL_SHAPE): its plans are that model's, so the chain refuses on the twin what a T4 would refuse for the
        model; own=True gives the twin's own (what the dry run measures it against)."""
        full = None if own else getattr(cfg, FULL_SHAPE, None)
        if full:
            from types import SimpleNamespace

            cfg = SimpleNamespace(**full)
        cfg = text_config(cfg)
        # a config without head_dim (Phi-3, a twin recorded before it was kept) has hidden // heads (__post_init__)
        return cls(cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers,
                   cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
                   bool(getattr(cfg, "tie_word_embeddings", False)), getattr(cfg, "head_dim", None) or 0)

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer LoRA adapts: q, k, v, o (their widths from heads x head_dim, not
        hidden), then the MLP's gate, up and down."""
        q, kv = self.attention, self.kv_width
        per_layer = [(self.hidden, q), (self.hidden, kv), (self.hidden, kv), (q, self.hidden),
                     (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return per_layer * self.layers


def eager_score_bytes(compute_bytes: int = 2, training: bool = False) -> int:
    """Bytes per element of one layer's rows x heads x length x length scores where the model attends eagerly, read
    from transformers' eager_attention_forward (Gemma-2's: matmul, x scaling, tanh soft-cap, + mask, softmax(dtype=
    float32), cast back to cb, dropout p=0 returns its input, matmul), not measured. Without gradients: at the
    softmax its cb input, the fp32 copy it makes and its fp32 output, cb + 8 (fp32: 8, no copy). Training (the
    layer recomputed, then its backward): autograd keeps tanh's output (cb), softmax's fp32 output and its cast
    back (cb); the most is at softmax's backward: tanh's output, softmax's, the fp32 gradient in and the fp32 one
    out, cb + 12 (the forward's most is 2 x cb + 8). Without a soft-cap (no tanh output kept): cb fewer."""
    if training:
        return compute_bytes + 12
    return compute_bytes + 8 if compute_bytes < 4 else 8


def eager_scores(shape: Shape, rows: int, length: int, compute_bytes: int = 2, attention: str = "eager",
                 training: bool = False) -> float:
    """One layer's scores for rows x length positions (`eager_score_bytes`); 0 for sdpa and FlashAttention-2."""
    return rows * shape.heads * length * length * eager_score_bytes(compute_bytes, training) if attention == "eager" else 0


def eager_masks(rows: int, length: int, mask_bytes: int, attention: str = "eager") -> float:
    """An eager model's 4-D masks, rows x length x length, two (Gemma-2's full and sliding-window ones; a packed
    batch's one mask serves both) in the input embeddings' dtype: cb for inference, fp32 in training (the k-bit
    preparation's fp32 embedding). 0 for sdpa and FlashAttention-2."""
    return 2 * rows * length * length * mask_bytes if attention == "eager" else 0


LOSS_STEP = ("lm_head_copy", "logits")  # live together while the loss runs
MOMENTS = (LOSS_STEP, ("layer_backward",), ("kv_cache",))  # the peak is the largest of these moments


def estimate(shape: Shape, seq_len: int, batch: int, lora_r: int, loss: str = "plain",
             compute_bytes: int = 2, gpu: bool | None = None, attention: str = "sdpa") -> dict[str, float]:
    """Estimated peak bytes by component (see the module docstring for the formula); "total" is `peak(parts)`.
    compute_bytes 2: fp16/bf16; 4: fp32 (no 16-bit LM head copy). gpu (default: compute_bytes < 4, fp32 being the
    CPU's) counts the CUDA context (precision="fp32" on a GPU: compute_bytes=4, gpu=True); attention="eager": its scores, masks."""
    linear = sum(i * o for i, o in shape.linears())
    embed = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    tokens = batch * seq_len
    gpu = compute_bytes < 4 if gpu is None else gpu
    parts = {
        "base_weights": linear * 0.53 + embed * 4,
        "lora_and_optimizer": sum(lora_r * (i + o) for i, o in shape.linears()) * 16,
        "checkpoints": tokens * 4 * shape.layers * shape.hidden,
        "lm_head_copy": shape.vocab * shape.hidden * 2 if compute_bytes < 4 else 0,  # fp32 compute: no cast
        "logits": logits_bytes(batch, seq_len, shape.vocab, shape.hidden, loss, compute_bytes),
        "layer_backward": tokens * (compute_bytes * (14 * shape.hidden + 8 * shape.intermediate) + 8 * shape.hidden)
        + eager_scores(shape, batch, seq_len, compute_bytes, attention, training=True),
        "overhead": OVERHEAD if gpu else 0,
    }
    if attention == "eager":  # a row only where there are masks to count
        parts["attention_masks"] = eager_masks(batch, seq_len, 4, attention)
    parts["total"] = peak(parts)
    return parts


def peak(parts: dict[str, float]) -> float:
    """What is live all along (weights, LoRA and optimizer, checkpoints, overhead, a reference adapter) plus the
    largest of the moments that do not overlap (MOMENTS: the loss step, one layer's backward, generation)."""
    moments = [sum(parts.get(k, 0) for k in m) for m in MOMENTS]
    return sum(v for k, v in parts.items() if k != "total" and not any(k in m for m in MOMENTS)) + max(moments)


def plan(model_config, seq_len: int, batch: int, lora_r: int, gpu_memory_gb: float | None, gpu_count: int = 1,
         loss: str = "plain", compute_bytes: int = 2, attention: str = "sdpa") -> dict:
    """Estimate at this batch size, against the GPU's memory, with the largest batch and the longest
    sequence that fit, and whether one GPU (`fits`) or only all together (`split_fits`, split_peak) hold it, from
    which nbutils.train.launch.decide picks the mode. `loss` is the loss that will train ("plain", "chunked",
    "liger"); compute_bytes 4 plans a GPU run with precision="fp32" (fp32 activations, the CUDA context still),
    `attention` the one the model loads with."""
    shape = Shape.from_config(model_config)

    def at(b: int, s: int = seq_len) -> dict[str, float]:
        return estimate(shape, s, b, lora_r, loss, compute_bytes, gpu=True, attention=attention)

    est = at(batch)
    from nbutils.train.diskspace import checkpoint_mb

    out = {"estimate_gb": round(est["total"] / GB, 2), "allocated_gb": round((est["total"] - OVERHEAD) / GB, 2),
           "parts_gb": {k: round(v / GB, 3) for k, v in est.items() if k != "total"},
           "gpu_memory_gb": gpu_memory_gb, "batch_size": batch, "seq_len": seq_len, "loss": loss,
           "compute_bytes": compute_bytes, "attention": attention,
           "checkpoint_mb": round(checkpoint_mb(sum(lora_r * (i + o) for i, o in shape.linears())), 1)}
    if gpu_memory_gb:
        budget = budget_bytes(gpu_memory_gb)
        out["fits"] = est["total"] <= budget
        out["largest_batch_that_fits"] = largest(lambda b: at(b)["total"] <= budget)
        out["longest_seq_that_fits"] = _longest_seq(lambda s: at(batch, s)["total"] <= budget)
        if gpu_count > 1:  # the facts launch.decide picks the multi-GPU mode from (it alone decides)
            split = split_peak(est, shape, gpu_count)
            out.update(gpu_count=gpu_count, split_estimate_gb=round(split / GB, 2), split_fits=split <= budget)
            out["split_largest_batch"] = largest(lambda b: split_peak(at(b), shape, gpu_count) <= budget)
            out["split_longest_seq"] = _longest_seq(lambda s: split_peak(at(batch, s), shape, gpu_count) <= budget)
    return out


def split_peak(parts: dict[str, float], shape: Shape, gpu_count: int) -> float:
    """One GPU's peak when device_map="auto" spreads the model over gpu_count GPUs in one process. The weights, the
    adapters and the checkpointed inputs divide (each layer's live on its GPU); the CUDA context is on every GPU; the
    moments do not divide: the loss step runs whole on the GPU that holds the LM head, a layer's backward on the GPU
    that holds the layer. The fp32 LM head (tied: the embedding itself) sits whole where the loss runs. Eager
    attention's masks are built once, on the first GPU, and do not divide either (counted whole: an upper bound)."""
    head = shape.vocab * shape.hidden * 4
    moment = max(sum(parts.get(k, 0) for k in m) for m in MOMENTS)
    whole = ("total", "overhead", "attention_masks")
    live = sum(v for k, v in parts.items() if k not in whole and not any(k in m for m in MOMENTS))
    return (live - head) / gpu_count + head + parts.get("overhead", 0) + parts.get("attention_masks", 0) + moment


def budget_bytes(gpu_memory_gb: float) -> float:
    """What a plan may fill of a GPU: MARGIN of its memory, the rest left to fragmentation."""
    return gpu_memory_gb * GB * MARGIN


def largest(fits, most: int = 256) -> int:
    """The largest n in 1..most for which fits(n) holds (fits grows with n: a binary search); 0 when none does."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def planning_gpu(gpu_memory_gb: float | None) -> tuple[float | None, str]:
    """The GPU memory a plan checks against, and whose: this machine's GPU; on a machine without one, the GPU named
    by NBUTILS_PLAN_GPU_GB (the dry run sets a T4's 14.7 GB, so every notebook's plan refuses there what a T4 would
    refuse); else none (the plan is what a GPU run would need)."""
    import os

    if gpu_memory_gb:
        return gpu_memory_gb, "this GPU"
    named = os.environ.get(PLAN_GPU_ENV)
    if named:
        return float(named), f"no GPU here: a {float(named):g} GB GPU ({PLAN_GPU_ENV}), as the dry run checks a T4"
    return None, "no GPU: the plan is what a GPU run would need"


def _longest_seq(fits, step: int = 64) -> int:
    """Longest sequence (a multiple of step, up to 128k) for which fits(seq_len) holds; 0 if none."""
    return step * largest(lambda n: fits(n * step), 2048)


def planned_attention(model_config, requested: str = "auto", preferred: str = "sdpa") -> str:
    """The attention a plan counts: `requested` unless "auto", else the one the load picks (modeling.choose_attention;
    `preferred`: preflight's, sdpa on a T4); a bare set of dimensions (no model class to ask) plans sdpa."""
    from transformers import PretrainedConfig

    from nbutils.train import modeling

    if requested != "auto" or isinstance(model_config, PretrainedConfig):
        return modeling.choose_attention(model_config, requested, preferred)
    return "sdpa"


def longest_sequence(model_config, batch: int, gpu_memory_gb: float, loss: str, lora_r: int = 16,
                     attention: str = "auto") -> tuple[int, str]:
    """The longest sequence (a multiple of 64) that trains at this batch size on a GPU of this memory, and why:
    01's cap on max_seq_len="auto". `loss`: the one 02's chunked_loss="auto" trains with at a length where the whole
    logits do not fit, "chunked" (liger's is planned as it), or "plain" for a model the chunks cannot serve
    (nbutils.train.loss.unsupported: Gemma-2's soft-capped logits); so 02's plan fits at any length up to the cap.
    02's LoRA rank is not chosen yet: r=16 is assumed. `attention` "auto" is what 02 loads on a T4
    (`planned_attention`: eager for Gemma-2, whose scores 02's plan counts, so the two agree). At 0 (nothing trains
    at this batch size) the why says how long a sequence batch size 1 trains."""
    shape, budget = Shape.from_config(model_config), budget_bytes(gpu_memory_gb)
    attention = planned_attention(model_config, attention)

    def longest_at(b: int) -> int:
        return _longest_seq(lambda s: estimate(shape, s, b, lora_r, loss, attention=attention)["total"] <= budget)

    n = longest_at(batch)
    why = (f"the memory of a {gpu_memory_gb:g} GB GPU at batch size {batch} ({loss} loss"
           + (", eager attention)" if attention == "eager" else ")"))
    if n == 0 and batch > 1:
        why += f" (batch size 1 trains up to {longest_at(1)} tokens there)"
    return n, why


def table(p: dict) -> str:
    rows = [(k + (f" ({p['loss']} loss)" if k == "logits" and p.get("loss") else ""), f"{v:.3f} GB")
            for k, v in p["parts_gb"].items()]
    rows.append(("estimated peak", f"{p['estimate_gb']:.2f} GB at batch {p['batch_size']} x seq {p['seq_len']}"))
    if p.get("gpu_memory_gb"):
        rows.append(("GPU memory", f"{p['gpu_memory_gb']} GB: {'fits' if p['fits'] else 'DOES NOT FIT'}; "
                                   f"largest batch that fits: {p['largest_batch_that_fits']}; longest sequence "
                                   f"at batch {p['batch_size']}: {p.get('longest_seq_that_fits', '?')}"))
    else:
        rows.append(("GPU memory", "no GPU: the plan is what a GPU run would need"))
    if p.get("measured_peak_gb") is not None:
        rows.append(("measured peak", f"{p['measured_peak_gb']:.2f} GB after the first steps (torch's allocations; "
                                      f"the plan's, without the overhead: {p['allocated_gb']:.2f} GB)"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def plan_preference(model_config, method: str, seq_len: int, batch: int, lora_r: int, num_generations: int,
                    completion_len: int, gpu_memory_gb: float | None, judge: dict | None = None,
                    compute_bytes: int = 2, attention: str = "sdpa") -> dict:
    """02's estimate, extended to the method: DPO and ORPO train on two sequences per pair (chosen and rejected
    in one batch); DPO and KTO keep a frozen copy of the adapter (fp32 weights, no gradient or optimizer state)
    and run a reference pass without gradients, which holds less than the training pass and adds no peak of its
    own; KTO adds its mismatched-pair batch for the KL estimate; GRPO first generates (the KV cache of its batch
    of completions), then trains on those batch x (prompt + completion) tokens. DPO, KTO and GRPO score
    through trl's fused LM head (loss "trl"); ORPO builds the logits whole ("plain"). After training, the judge
    pass (`judge`: 05's report against the SFT adapter, nbutils.train.evalmemory's generation and scoring, in bytes)
    runs on the model with its adapters (the optimizer's state counted still: the trainer may hold it): the peak is
    the larger of the two. With a GPU, the largest batch that fits. compute_bytes and attention as `plan`'s."""
    shape = Shape.from_config(model_config)
    same = dict(compute_bytes=compute_bytes, attention=attention)
    parts = _preference_parts(shape, method, seq_len, batch, lora_r, num_generations, completion_len, **same)
    after = sum(parts[k] for k in ("base_weights", "lora_and_optimizer", "reference_adapter", "overhead"))
    parts["judge_pass"] = judge["bytes"] if judge else 0
    total = max(peak({k: v for k, v in parts.items() if k != "judge_pass"}), after + parts["judge_pass"])
    rows = batch * 2 if method != "grpo" else batch
    what = (f"{batch} completions ({batch / max(1, num_generations):g} prompts x {num_generations}) x "
            f"{seq_len + completion_len} tokens" if method == "grpo" else
            f"{batch} {'pairs' if method != 'kto' else 'rows + their KL rows'} = {rows} sequences x {seq_len} tokens")
    linear_lora = sum(lora_r * (i + o) for i, o in shape.linears())
    out = {"estimate_gb": round(total / GB, 2), "allocated_gb": round((total - OVERHEAD) / GB, 2),
           "parts_gb": {k: round(v / GB, 3) for k, v in parts.items()},
           "gpu_memory_gb": gpu_memory_gb, "batch_size": batch, "seq_len": seq_len + (completion_len if method == "grpo" else 0),
           "what": what + (f"; then {judge['what']}" if judge else ""),
           "checkpoint_mb": round(2 * linear_lora * 4 / 2**20, 1)}
    if gpu_memory_gb:
        budget, step = budget_bytes(gpu_memory_gb), num_generations if method == "grpo" else 1
        out["fits"] = total <= budget
        out["largest_batch_that_fits"] = step * largest(lambda n: peak(_preference_parts(
            shape, method, seq_len, n * step, lora_r, num_generations, completion_len, **same)) <= budget, 1024)
        out["judge_fits"] = after + parts["judge_pass"] <= budget
    return out


def _preference_parts(shape: Shape, method: str, seq_len: int, batch: int, lora_r: int, num_generations: int,
                      completion_len: int, compute_bytes: int = 2, attention: str = "sdpa") -> dict[str, float]:
    """The training pass of 05's method at this batch, by component (see plan_preference); GRPO's generation holds
    its prompts' eager scores (no gradients) beside the cache."""
    linear_lora = sum(lora_r * (i + o) for i, o in shape.linears())
    if method == "grpo":
        rows, length = batch, seq_len + completion_len
        kv = shape.layers * 2 * rows * length * shape.kv_width * compute_bytes  # as evalmemory.kv_cache
        kv += eager_scores(shape, rows, seq_len, compute_bytes, attention)
    else:
        rows, length, kv = batch * 2, seq_len, 0
    # DPO, KTO and GRPO score answers through trl's fused LM head; ORPO (trl.experimental) builds the logits whole
    parts = estimate(shape, length, rows, lora_r, "plain" if method == "orpo" else "trl", compute_bytes, True, attention)
    parts.pop("total")
    parts["reference_adapter"] = linear_lora * 4 if method in ("dpo", "kto", "grpo") else 0
    parts["kv_cache"] = kv
    return parts
