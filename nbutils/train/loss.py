"""Cross-entropy from the final hidden states, in chunks: the full (batch, seq, vocab) logits never exist.

The plain causal-LM loss builds fp32 logits for every position (batch x seq x vocab x 4 bytes, and copies in
the softmax and its gradient): for Llama-3 (vocab 128,256) at batch 2 x 2048 that is several GB of a T4's 15
(measured by `python -m bench loss_bench`, recorded in bench/results; 02's plan prints it for its own model).
Here lm_head is applied to a chunk of positions at a time, and only at positions that have a target
(labels shifted by one, ignore_index dropped: prompt and padding cost nothing). Each chunk's gradient
with respect to its hidden states (softmax - one-hot, times lm_head) is computed in the forward pass,
while the chunk's logits are at hand, and kept (rows x hidden, small); backward only scales it. This is
what liger-kernel's fused linear cross-entropy does in a Triton kernel; liger is used instead where it
runs (CUDA with liger-kernel installed, through the Trainer's `use_liger_kernel`, which also fuses
RMSNorm, SwiGLU and RoPE), this pure-torch version everywhere else.

Loss value and reduction are those of transformers' ForCausalLMLoss: the sum over target tokens divided
by num_items_in_batch (the target tokens of the whole accumulated batch, which the Trainer passes) when
given, else the mean.

In the Trainer: `ChunkedLossTrainer` hooks lm_head for the duration of compute_loss (its input is kept,
it is handed an empty sequence so it computes nothing) and computes the loss from the kept hidden states.
The forward still goes through the wrapped model (peft, DDP), so gradient sync and checkpointing are intact.
"""

from __future__ import annotations

import contextlib
import importlib.util

import torch

from nbutils.data.batching import IGNORE_INDEX
from nbutils.defaults import text_config
from nbutils.train.memory import chunk_rows


def liger_available(cuda: bool | None = None) -> bool:
    """liger-kernel's fused kernels run here: CUDA present (cuda=None: ask torch, which initialises
    CUDA; a notebook about to fork passes what preflight saw instead) and liger-kernel with triton installed."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    return cuda and importlib.util.find_spec("liger_kernel") is not None and importlib.util.find_spec("triton") is not None


def unsupported(model_config=None, head=None) -> str | None:
    """Why the chunked loss would not be the model's own loss (None: it is): logits it post-processes (read from the
    language model's config, a multimodal model's text_config), an lm_head that is not a plain Linear (quantized, or
    given LoRA)."""
    config = text_config(model_config) if model_config is not None else None
    for attr in ("final_logit_softcapping", "logit_scale"):  # Gemma 2/3, Cohere: logits = f(lm_head(h))
        if getattr(config, attr, None) not in (None, 1, 1.0):
            return f"the model's config has {attr}={getattr(config, attr)}"
    if head is not None and type(head) is not torch.nn.Linear:
        return f"lm_head is a {type(head).__name__}, not a plain Linear"
    return None


def without_whole_logits(model_config) -> str:
    """The loss that spares this model its whole logits: "chunked", or "plain" where the chunks cannot serve it
    (`unsupported`). 01's length cap, 03's eval loss and 05's judge pass plan and score with it."""
    return "plain" if unsupported(model_config) else "chunked"


# Why each loss, as 02's plan prints it beside the choice.
WHY = {"liger": "liger-kernel's fused kernels (CUDA with liger-kernel installed): no full logits, and RMSNorm, "
                "SwiGLU and RoPE fused too; the fastest",
       "chunked": "lm_head a chunk of positions at a time, at positions with a target only: the plain loss's value "
                  "and gradients without its full logits (pure torch, runs anywhere)",
       "plain": "the full logits, as transformers computes them"}
# What the chunks cost where the whole logits fit: Qwen2.5-1.5B, batch 4 x up to 1,024 tokens, fp16, an H200
# (`python -m bench.gpu_proof --stages tokens/s --throughput-rows 128`): chunked 230 and liger 232 target tokens/s,
# the plain loss 321.
SLOWER = "chunked 0.72x and liger 0.72x the plain loss's tokens/s on an H200, Qwen2.5-1.5B at batch 4 x 1,024"


def describe(kind: str, setting, plain_logits_gb: float, plain_fits: bool | None = None) -> str:
    """One line for 02's plan: the loss that trains, whether auto chose it, why, and what the full logits cost here."""
    whole = f"the whole logits peak at {plain_logits_gb:.2f} GB at this batch and length"
    if setting == "auto" and kind == "plain" and plain_fits:
        return (f"plain (auto): {whole} and the run fits the GPU with them, within the plan's margin: the fastest loss "
                f"where they fit (the chunks cost time: {SLOWER})")
    if setting == "auto" and plain_fits is False:
        return f"{kind} (auto): {whole}: with them the run would not fit the GPU; {WHY[kind]}"
    label = {"auto": "auto", True: "chunked_loss=True: chunked, liger where it runs"}.get(setting, "asked for")
    no_gpu = setting == "auto" and plain_fits is None and kind != "plain"
    return f"{kind} ({label}): {WHY[kind]}; {whole}" + (
        " (no GPU here: on one that holds them, auto takes the plain loss)" if no_gpu else "")


def choose(setting: str | bool = "auto", cuda: bool | None = None, model_config=None, head=None, model=None,
           plain_fits: bool | None = None) -> str:
    """Which loss to train with: 'plain' (full logits), 'liger' (fused kernels, CUDA) or 'chunked' (pure torch).
    'auto' takes the plain loss where the memory plan says the run fits the GPU with the whole logits (`plain_fits`,
    from 02's plan: the fastest there), else liger where it runs, else chunked. Before loading (02's plan) from the
    config alone; in a training process from the loaded `model` (its config and its lm_head), with cuda=None asking
    torch, which a process that trains may do."""
    if model is not None:
        from nbutils.train.modeling import unwrap

        model_config, head = unwrap(model).config, unwrap(model).get_output_embeddings()
    if setting not in ("auto", True, False, "liger", "chunked", "plain"):
        raise ValueError(f"chunked_loss={setting!r}: use 'auto', True (chunked, liger where it runs), False (plain "
                         "full-logits loss), or one of 'liger', 'chunked', 'plain'")
    if setting in (False, "plain") or (setting == "auto" and plain_fits):
        return "plain"
    if setting == "liger" and not liger_available(cuda):
        raise ValueError("chunked_loss='liger' needs CUDA and `pip install liger-kernel`; use 'auto' to fall back "
                         "to the pure-torch chunked loss")
    if setting == "liger" or (setting != "chunked" and liger_available(cuda)):
        return "liger"
    reason = unsupported(model_config, head)
    if reason and setting == "chunked":
        raise ValueError(f"chunked_loss='chunked': {reason}; use 'auto' (the plain loss for this model)")
    if reason:
        print(f"[train] the chunked loss is off: {reason}", flush=True)
    return "plain" if reason else "chunked"


def _chunk(h, t, weight):
    """One chunk of positions: exp(logits - their max) (the chunk's one big buffer, in place), its row sums, the max
    and the targets' logits; fp32, as ForCausalLMLoss computes (matmul in the compute dtype, softmax in fp32)."""
    logits = (h @ weight.T).float()
    target = logits.gather(1, t[:, None]).squeeze(1)
    top = logits.max(dim=-1, keepdim=True).values
    probs = logits.sub_(top).exp_()
    return probs, probs.sum(dim=-1, keepdim=True), top, target


class _ChunkedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, scale, rows):
        need_h, need_w = ctx.needs_input_grad[:2]  # both False under no_grad (evaluation): the value only
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], rows):
            h, t = hidden[s:s + rows], targets[s:s + rows]
            probs, total_exp, top, target = _chunk(h, t, weight)
            total += (top + total_exp.log() - target[:, None]).sum()
            if need_h or need_w:
                probs.div_(total_exp)  # softmax; minus the one-hot: dloss/dlogits
                probs[torch.arange(len(t), device=t.device), t] -= 1
                probs = probs.to(weight.dtype)
                if need_h:
                    grad_h[s:s + rows] = probs @ weight
                if need_w:
                    grad_w += (probs.T @ h).float()
            del probs  # freed before the next chunk's logits exist, not after
        ctx.save_for_backward(grad_h, grad_w, scale)
        ctx.weight_dtype = weight.dtype
        return total * scale

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, scale = ctx.saved_tensors
        g = grad_out * scale
        dh = grad_h * g.to(grad_h.dtype) if grad_h is not None else None
        dw = (grad_w * g).to(ctx.weight_dtype) if grad_w is not None else None
        return dh, dw, None, None, None


def chunked_cross_entropy(hidden, weight, labels, num_items_in_batch=None, ignore_index: int = IGNORE_INDEX,
                          rows: int | None = None, shift: bool = True):
    """Causal-LM cross-entropy of lm_head(hidden) against labels, computed chunk by chunk.

    hidden (batch, seq, dim) final hidden states; weight (vocab, dim) lm_head's; labels (batch, seq) as
    the model takes them (shift=True: position t predicts labels[t+1], like ForCausalLMLoss).
    """
    if shift:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    keep = labels != ignore_index
    h, t = hidden[keep], labels[keep].to(hidden.device)
    count = num_items_in_batch if num_items_in_batch is not None else t.numel()
    scale = 1.0 / torch.as_tensor(count, dtype=torch.float32, device=hidden.device)  # 0 targets: nan, as the mean
    return _ChunkedCE.apply(h, weight, t, scale, rows or chunk_rows(weight.shape[0]))


def target_logprobs(hidden, weight, targets, rows: int | None = None):
    """log p(target) at each of the positions in hidden (n, dim), lm_head's weight applied to a chunk of positions
    at a time, without gradients: the scoring passes' (03's eval loss, 05's answer log-probabilities) whole logits
    never exist, only one chunk's (the chunked loss's arithmetic, `_chunk`)."""
    rows = rows or chunk_rows(weight.shape[0])
    out = torch.empty(len(targets), dtype=torch.float32, device=hidden.device)
    with torch.no_grad():
        for s in range(0, len(targets), rows):
            probs, total_exp, top, target = _chunk(hidden[s:s + rows], targets[s:s + rows], weight)
            out[s:s + rows] = target - (top + total_exp.log()).squeeze(1)
            del probs
    return out


def sequence_logprobs(model, batch: dict, ignore_index: int = IGNORE_INDEX):
    """Per row of a collated batch (input ids, attention mask, labels as the model takes them: shifted by one
    inside): the sum of log p(label) over its target positions, and how many there are. Through lm_head_input and
    target_logprobs, so no (batch, seq, vocab) logits; a model whose logits are not lm_head's output (soft-capping,
    a logit scale: `unsupported`) is scored from its own logits instead."""
    from nbutils.train.modeling import unwrap

    inputs = {k: v for k, v in batch.items() if k != "labels"}
    labels = torch.nn.functional.pad(batch["labels"], (0, 1), value=ignore_index)[..., 1:]
    keep = labels != ignore_index
    with torch.no_grad():
        if unsupported(unwrap(model).config, unwrap(model).get_output_embeddings()):
            logits = model(**inputs).logits.float()
            logp = torch.log_softmax(logits[keep.to(logits.device)], -1).gather(
                -1, labels[keep].to(logits.device)[:, None]).squeeze(-1)
        else:
            with lm_head_input(model) as (kept, head):
                model(**inputs)
            hidden = kept["hidden"]
            logp = target_logprobs(hidden[keep.to(hidden.device)], head.weight, labels[keep].to(hidden.device))
    rows = keep.nonzero()[:, 0].to(logp.device)
    sums = torch.zeros(labels.shape[0], dtype=torch.float32, device=logp.device).index_add_(0, rows, logp)
    return sums, keep.sum(-1)


@contextlib.contextmanager
def lm_head_input(model):
    """While open, lm_head keeps its input (the final hidden states) and computes logits for none of it."""
    from nbutils.train.modeling import unwrap

    head = unwrap(model).get_output_embeddings()
    kept = {}

    def hook(module, args):
        kept["hidden"] = args[0]
        return (args[0][..., :0, :],)  # (batch, 0, dim): the model returns empty logits

    handle = head.register_forward_pre_hook(hook)
    try:
        yield kept, head
    finally:
        handle.remove()


def kind_of(trainer) -> str:
    """The loss a Trainer trains with: 'chunked' (trainer_class's), 'liger' (use_liger_kernel) or 'plain'."""
    if getattr(trainer, "chunked_loss", False):
        return "chunked"
    return "liger" if getattr(trainer.args, "use_liger_kernel", False) else "plain"


def trainer_class(kind: str = "chunked"):
    """transformers' Trainer counting real tokens in packed batches, and for kind 'chunked' its subclass whose loss is
    `chunked_cross_entropy` on lm_head's input (same value and gradients, no full logits); 'liger' is the first with
    use_liger_kernel."""
    from transformers import Trainer

    class RealTokensTrainer(Trainer):
        """Counts the tokens seen ("non_padding") by the token ids, not the attention mask, where the mask is a
        packed batch's 4D block mask: its sum is every allowed (query, key) pair, hundreds of times the tokens, or
        with eager's additive mask a large negative number, and the time plan and tokens/s read that count."""

        def _track_num_input_tokens(self, inputs):
            mask = inputs.get("attention_mask")
            if mask is not None and mask.dim() != 2:  # transformers counts the ids that are not the pad token then
                inputs = {k: v for k, v in inputs.items() if k != "attention_mask"}
            return super()._track_num_input_tokens(inputs)

    if kind != "chunked":
        return RealTokensTrainer

    class ChunkedLossTrainer(RealTokensTrainer):
        """Trainer computing the causal-LM loss without full logits (see nbutils.train.loss)."""

        chunked_loss = True

        def __init__(self, *args, **kwargs):
            # As a compute_loss_func, the Trainer pops the labels (the model computes no loss) and
            # treats the result as normalised by num_items_in_batch for gradient accumulation.
            super().__init__(*args, compute_loss_func=self._loss, **kwargs)
            self._kept = {}

        def _loss(self, outputs, labels, num_items_in_batch=None):
            return chunked_cross_entropy(self._kept["hidden"], self._kept["head"].weight, labels, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            with lm_head_input(model) as (kept, head):
                self._kept = kept
                kept["head"] = head
                try:
                    return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
                finally:
                    self._kept = {}

    return ChunkedLossTrainer
