"""The degeneration guard inside `model.generate`: stop only the rows that turn to garbage.

Cheap by construction: every `check_every` tokens one vectorized pass over the batch's token ids
looks for an exact tail repeat (no decoding); text-level detection (soup, junk, counting loops)
decodes only a bounded tail window, and only every `text_every` tokens or when the id pass
suspects a loop. It detects and never intervenes: healthy rows get exactly the tokens they would
get without it (no penalties, no logits changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor, StoppingCriteria

from nbutils.degeneration import detect


@dataclass
class RowState:
    stopped: bool = False
    reasons: list[str] = field(default_factory=list)
    stop_token: int | None = None  # index of the generated token at which the row was stopped


class DegenerationGuard(StoppingCriteria):
    """Per-row stopping criterion: returns a BoolTensor[batch], True for rows found degenerate."""

    def __init__(self, tokenizer, prompt_length: int, check_every: int = 16, text_every: int = 16,
                 tail_tokens: int = 256, max_period: int = 48, eos_token_id: int | None = None):
        self.tok, self.prompt_length = tokenizer, prompt_length
        self.check_every, self.text_every, self.tail_tokens, self.max_period = check_every, text_every, tail_tokens, max_period
        self.eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self.rows: list[RowState] = []
        self._done: torch.Tensor | None = None

    def _suspect_loops(self, tail: torch.Tensor) -> torch.Tensor:
        """Rows whose id tail repeats with some period at least 3 times over >= 24 tokens (one batched pass)."""
        length = tail.shape[1]
        periods = min(self.max_period, length // 3)
        if periods < 1:
            return torch.zeros(tail.shape[0], dtype=torch.bool, device=tail.device)
        window = length - periods
        p = torch.arange(1, periods + 1, device=tail.device)
        idx = torch.arange(window, device=tail.device).unsqueeze(0) + (periods - p).unsqueeze(1)  # [P, W]
        match = tail[:, idx] == tail[:, periods:].unsqueeze(1)  # [B, P, W]: token == its p-back twin
        run = match.flip(2).int().cumprod(2).sum(2)  # trailing matches per row and period
        return (((run + p) >= 3 * p) & ((run + p) >= 24)).any(1)

    def __call__(self, input_ids: torch.Tensor, scores=None, **kwargs) -> torch.Tensor:
        batch, cur = input_ids.shape
        if self._done is None or self._done.shape[0] != batch:
            self.rows = [RowState() for _ in range(batch)]
            self._done = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        generated = cur - self.prompt_length
        if generated <= 0 or generated % self.check_every:
            return self._done.clone()
        new = input_ids[:, self.prompt_length:]
        finished = (new == self.eos).any(1) if self.eos is not None else torch.zeros_like(self._done)
        tail = new[:, -self.tail_tokens:]
        text_turn = generated % self.text_every == 0
        suspects = self._done if text_turn else self._suspect_loops(tail)  # every row is read on a text turn
        for i in range(batch):
            if self._done[i] or finished[i] or not (text_turn or suspects[i]):
                continue
            verdict = detect(self.tok.decode(tail[i].tolist(), skip_special_tokens=False))
            if verdict.degenerate:
                self.rows[i] = RowState(True, verdict.reasons, generated)
                self._done[i] = True
        return self._done.clone()

    def report(self) -> list[dict]:
        return [{"stopped": r.stopped, "reasons": r.reasons, "stop_token": r.stop_token} for r in self.rows]


class ObservingLogits(LogitsProcessor):
    """Records per-row mean entropy and top probability of the next-token distribution; returns scores unchanged."""

    def __init__(self):
        self.entropy_sum: torch.Tensor | None = None
        self.top_prob_sum: torch.Tensor | None = None
        self.steps = 0

    def __call__(self, input_ids, scores):
        probs = torch.softmax(scores.float(), dim=-1)
        entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
        top = probs.max(-1).values
        self.entropy_sum = entropy if self.entropy_sum is None else self.entropy_sum + entropy
        self.top_prob_sum = top if self.top_prob_sum is None else self.top_prob_sum + top
        self.steps += 1
        return scores

    def summary(self) -> list[dict]:
        if not self.steps:
            return []
        return [{"mean_entropy": float(e) / self.steps, "mean_top_prob": float(t) / self.steps}
                for e, t in zip(self.entropy_sum, self.top_prob_sum)]
