"""Memory of the passes without gradients: generation and scoring (03's evaluation, 05's judge, 04's merge check).

A model loaded for inference (no k-bit preparation: the embedding and the LM head stay in the compute dtype) holds
its weights and adapters, then the larger of two moments that never overlap. Bytes; cb is the compute dtype's size
(2 on a GPU computing in fp16/bf16, 4 for fp32 on a CPU):
  weights        linear params x 0.53 (nf4 with double-quantized constants, as memory.py) or x cb (16-bit: 04's
                 merge), + the embedding and an untied LM head x cb
  adapters       r x (in + out) per linear layer x 4 (peft keeps LoRA weights in fp32 over a 16-bit base), each
  generation     the KV cache of rows x (prompt + new tokens): layers x 2 x kv_heads x head_dim x cb (head_dim from
                 the config: Qwen3-4B's 128 is not hidden / heads = 80); the prompt's forward,
                 one layer at a time (`layer_forward`); the last position's logits, rows x vocab x (cb + 4): the
                 16-bit ones and their fp32 copy (generate keeps no other position's logits)
  scoring        03's eval loss and 05's answer log-probabilities, batched by tokens (at most `tokens` padded
                 positions: nbutils.train.loss.sequence_logprobs): the final hidden states and the kept positions'
                 copy (2 x tokens x hidden x cb), one layer's forward, one chunk of logits (loss.chunk_rows x vocab
                 x (cb + 4); x 4 in fp32, where the matmul's logits are the fp32 ones). The plain path
                 (transformers' own loss, or a model whose logits are not lm_head's output) holds tokens x vocab x
                 (cb + 4 + 4) instead: the 16-bit logits, their fp32 copy and its log-softmax: 32 rows x 512 tokens
                 of Qwen2.5's 151,936-token vocabulary are 23 GiB
  layer_forward  tokens x (4 x width + 3 x intermediate) x cb: q, k, v and the attention output, the MLP's gate,
                 up and their product: the most one layer holds without gradients (sdpa: no seq x seq scores);
                 width = the larger of hidden and heads x head_dim (q and the attention output are the latter)
  eager scores   where the model attends eagerly (modeling.choose_attention: Gemma-2, whose class refuses sdpa),
                 one layer's rows x heads x length x length scores on top of layer_forward, in the prompt's
                 forward (generation) and in each scoring batch: x (cb + 8) in 16 bits (the scores, the fp32 copy
                 softmax(dtype=float32) makes of bf16 ones, its fp32 output: transformers' eager_attention_forward),
                 x 8 in fp32 (memory.eager_score_bytes, which 02's training plan reads too); plus the model's 4-D
                 masks, rows x length x length x cb, two (Gemma-2's full and sliding-window ones), held for the
                 whole forward (memory.eager_masks)
  overhead       the CUDA context and the allocator's slack on a GPU (memory.OVERHEAD)
Read from the code paths, not fitted: the dry run measures them on a CPU twin beside the plan
(`python -m nbutils.plan dry-run`), and `python -m bench dryrun_bench` on SmolLM2-135M-Instruct's 30 layers.
"""

from __future__ import annotations

from nbutils.train import memory
from nbutils.train.memory import GB, Shape

GENERATE_ROWS = 16  # prompts generated at once (03's generate_batch_size, 05's judge)
SAMPLED_PROMPTS = 8  # 05's held-out reward: prompts sampled at once, each reward_samples times
BATCH_TOKENS = 16384  # padded positions a scoring batch holds at most ("auto": this, or the largest that fits)


def weights(shape: Shape, quantized: bool = True, compute_bytes: int = 2) -> float:
    """The model's weights as loaded for inference: 4-bit linear layers (or 16-bit), the embedding in cb."""
    linear = sum(i * o for i, o in shape.linears())
    embed = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    return linear * (0.53 if quantized else compute_bytes) + embed * compute_bytes


def adapters(shape: Shape, lora_r: int, count: int = 1) -> float:
    """count LoRA adapters in fp32."""
    return sum(lora_r * (i + o) for i, o in shape.linears()) * 4 * count


def layer_forward(shape: Shape, tokens: int, compute_bytes: int = 2) -> float:
    """The most one layer holds in a forward pass without gradients. Each of q, k, v and the attention output is
    counted at most max(hidden, heads x head_dim) wide: Qwen3's q is wider than its hidden size, and where
    heads x head_dim == hidden (Llama, Qwen2.5, Mistral, Phi-3.5) this is the 4 x hidden it always was."""
    width = max(shape.hidden, shape.attention)
    return tokens * (4 * width + 3 * shape.intermediate) * compute_bytes


def kv_cache(shape: Shape, rows: int, length: int, compute_bytes: int = 2) -> float:
    """Keys and values of every layer for rows x length positions: kv_heads x head_dim wide each (not
    hidden x kv_heads / heads: Qwen3-0.6B's are twice that)."""
    return shape.layers * 2 * rows * length * shape.kv_width * compute_bytes


def eager_scores(shape: Shape, rows: int, length: int, compute_bytes: int = 2, attention: str = "eager") -> float:
    """One layer's attention scores for rows x length positions where the model attends eagerly, with the masks
    (see the module docstring); 0 for sdpa and FlashAttention-2, which never hold them."""
    return (memory.eager_scores(shape, rows, length, compute_bytes, attention)
            + memory.eager_masks(rows, length, compute_bytes, attention))


def generation(shape: Shape, rows: int, prompt: int, new_tokens: int, compute_bytes: int = 2,
               attention: str = "sdpa") -> float:
    """Generating new_tokens for rows prompts of up to `prompt` tokens (see the module docstring)."""
    return (kv_cache(shape, rows, prompt + new_tokens, compute_bytes) + layer_forward(shape, rows * prompt, compute_bytes)
            + eager_scores(shape, rows, prompt, compute_bytes, attention) + rows * shape.vocab * (compute_bytes + 4))


def scoring(shape: Shape, tokens: int, loss: str = "chunked", compute_bytes: int = 2, attention: str = "sdpa",
            length: int | None = None) -> float:
    """Scoring `tokens` padded positions at once, rows of `length` (None: one row of them all): by chunks
    ("chunked"), or from the whole logits ("plain")."""
    length = min(length or tokens, tokens)
    layer = layer_forward(shape, tokens, compute_bytes) + eager_scores(shape, tokens // length, length, compute_bytes,
                                                                       attention)
    if loss == "plain":
        return tokens * shape.vocab * (compute_bytes + 8) + layer
    chunk = min(tokens, memory.chunk_rows(shape.vocab)) * shape.vocab * (compute_bytes + 4 if compute_bytes < 4 else 4)
    return 2 * tokens * shape.hidden * compute_bytes + layer + chunk


def batch_tokens(value, fits, longest: int) -> tuple[int, str]:
    """Padded positions per scoring batch: a number as given, or "auto": BATCH_TOKENS, or the largest multiple of
    the longest row below it that fits (`fits(tokens)`); never under the longest row (it goes alone)."""
    from nbutils import defaults

    if not defaults.is_auto(value):
        return max(int(value), longest), "given"
    most = max(BATCH_TOKENS, longest)
    rows = memory.largest(lambda n: fits(n * longest), max(1, most // max(1, longest)))
    return max(rows, 1) * longest, f"auto: at most {BATCH_TOKENS:,} padded positions, what fits"


def peak_bytes(shape: Shape, *, quantized: bool, lora_r: int, n_adapters: int, rows: int, prompt: int,
               new_tokens: int, tokens: int, loss: str = "chunked", compute_bytes: int = 2, attention: str = "sdpa",
               length: int | None = None, gpu: bool | None = None) -> float:
    """Weights, adapters and the CUDA context (a GPU: by default one computing in 16 bits, fp32 being the CPU's;
    gpu=True for fp32 on a GPU), then the larger of generation and scoring (rows of `length`)."""
    fixed = weights(shape, quantized, compute_bytes) + adapters(shape, lora_r, n_adapters)
    gpu = compute_bytes < 4 if gpu is None else gpu
    return fixed + (memory.OVERHEAD if gpu else 0) + max(
        generation(shape, rows, prompt, new_tokens, compute_bytes, attention),
        scoring(shape, tokens, loss, compute_bytes, attention, length))


def plan_inference(model_config, *, quantized: bool, lora_r: int, n_adapters: int, generate_rows: int, prompt: int,
                   new_tokens: int, tokens: int, gpu_memory_gb: float | None, loss: str = "chunked",
                   compute_bytes: int = 2, attention: str = "sdpa", length: int | None = None) -> dict:
    """The peak of a notebook that loads a model to generate and score (03, 05's judge): parts, estimate, and
    against the GPU whether it fits and the largest generation batch and scoring batch (tokens) that do.
    `attention`: the implementation the model loads with (eager counts its scores); `length`: the scoring rows'."""
    shape = Shape.from_config(model_config)
    gpu = bool(gpu_memory_gb) or compute_bytes < 4  # checked against a GPU: its CUDA context, in fp32 too
    same = dict(quantized=quantized, lora_r=lora_r, n_adapters=n_adapters, prompt=prompt, new_tokens=new_tokens,
                loss=loss, compute_bytes=compute_bytes, attention=attention, length=length, gpu=gpu)
    overhead = memory.OVERHEAD if gpu else 0
    parts = {"weights": weights(shape, quantized, compute_bytes), "adapters": adapters(shape, lora_r, n_adapters),
             "overhead": overhead,
             "generation": generation(shape, generate_rows, prompt, new_tokens, compute_bytes, attention),
             "scoring": scoring(shape, tokens, loss, compute_bytes, attention, length)}
    total = peak_bytes(shape, rows=generate_rows, tokens=tokens, **same)
    out = {"estimate_gb": round(total / GB, 2), "allocated_gb": round((total - overhead) / GB, 2),
           "parts_gb": {k: round(v / GB, 3) for k, v in parts.items()}, "gpu_memory_gb": gpu_memory_gb,
           "generate_rows": generate_rows, "prompt": prompt, "new_tokens": new_tokens, "tokens": tokens, "loss": loss,
           "lora_r": lora_r, "quantized": quantized, "attention": attention}
    if gpu_memory_gb:
        budget = memory.budget_bytes(gpu_memory_gb)
        out["fits"] = total <= budget
        out["largest_generate_rows"] = memory.largest(lambda n: peak_bytes(shape, rows=n, tokens=1, **same) <= budget,
                                                      1024)
        out["largest_tokens"] = 64 * memory.largest(lambda n: peak_bytes(shape, rows=1, tokens=64 * n, **same) <= budget,
                                                    4096)
    return out


def rows(p: dict) -> dict:
    """The plan's table rows: each part, the peak, and the GPU's verdict."""
    out = {f"memory.{k}": f"{v:.3f} GB" for k, v in p["parts_gb"].items()}
    out["memory.peak"] = (f"{p['estimate_gb']:.2f} GB: generating {p['generate_rows']} x ({p['prompt']} + "
                          f"{p['new_tokens']}) tokens, or scoring {p['tokens']:,} padded positions ({p['loss']})"
                          + ("; eager attention: its scores counted" if p.get("attention") == "eager" else ""))
    if p.get("gpu_memory_gb"):
        out["memory.gpu"] = (f"{p['gpu_memory_gb']:g} GB: {'fits' if p['fits'] else 'DOES NOT FIT'}; largest "
                             f"generation batch {p['largest_generate_rows']}, largest scoring batch "
                             f"{p['largest_tokens']:,} tokens")
    else:
        out["memory.gpu"] = "no GPU: the plan is what a GPU run would need"
    return out
