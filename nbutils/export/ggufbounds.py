"""What a GGUF of each type must hold against the merged model: one table, read by both of 04's checks, the weights
reloaded in transformers (nbutils.export.ggufcheck) and the file run in llama.cpp (nbutils.export.runtimecheck).
docs/export.md shows it with the figures measured against it and the commands that measured them.

NMSE is llama.cpp's own definition (examples/model-conversion, check-nmse.py): the mean squared logit difference
over the variance of the merged model's logits, free of the logits' scale and of the model's depth. That script's
grades: under 1e-4 "excellent", typical of a good f16 conversion; under 1e-2 "good", its pass mark; under 0.1
"acceptable". Reloaded in transformers, f32 and f16 keep the merged fp16 weights as they are (only the converter's
f32 norms differ; measured NMSE 0 on SmolLM2-135M-Instruct), so their bound there is far tighter; llama.cpp also
rounds the activations to fp16 in an f16 matrix product, so its f32/f16 bound is the script's "excellent". bf16 keeps
8 bits of mantissa, q8_0 one 8-bit scale per 32 weights; k-quants (3-6 bits) move logits visibly, and for them the
perplexity margin and top-1 agreement are the real tests. KL after llama-perplexity's tables for Llama-3-8B (q8_0
near 1e-3 nats with 98-99% of top tokens kept, q4_k_m near 0.03 with about 92%; small models lose more to 4 bits).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bounds:
    """One type's bounds (NMSE: see the module's docstring)."""
    nmse: float  # logits' NMSE, the GGUF reloaded in transformers, on the check prompts
    runtime_nmse: float  # logits' NMSE, the GGUF run in llama.cpp, on the held-out texts
    kl_mean: float  # mean KL(merged || llama.cpp) in nats, per position
    top1: float  # top-1 agreement in llama.cpp where the merged model gives its top token p >= 0.5
    ppl_margin: float  # perplexity of the reloaded GGUF on the eval texts, relative to the merged model's
    greedy: bool  # greedy continuations must equal the merged model's in transformers (up to near-ties)


TABLE = {"f32": Bounds(1e-6, 1e-4, 1e-3, 0.98, 0.001, True),
         "f16": Bounds(1e-5, 1e-4, 1e-3, 0.98, 0.005, True),
         "bf16": Bounds(1e-2, 1e-2, 1e-2, 0.95, 0.05, True),
         "q8_0": Bounds(1e-2, 1e-2, 1e-2, 0.95, 0.05, True)}
KQUANT = Bounds(0.1, 0.1, 0.1, 0.85, 0.10, False)  # q4_k_m, q5_k_m, q6_k ...


def for_type(quant_type: str) -> Bounds:
    """The bounds of a GGUF type (any k-quant: KQUANT)."""
    return TABLE.get(quant_type.lower(), KQUANT)
