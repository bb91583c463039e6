"""04's runtime check: a GGUF as llama.cpp runs it (nbutils.export.llamaruntime) against the merged model in
transformers, on the eval prompts and texts 04 already checks the GGUF's weights on.

(a) tokens: each eval prompt, rendered by llama.cpp from its messages and tokenized from the GGUF alone, is the HF
    tokenizer's ids, BOS exactly once; a plain text gets BOS in llama.cpp exactly when the chat template writes it.
(b) template: multi-turn conversations (with and without a system prompt) render to the HF template's text.
(c) greedy: llama.cpp's greedy tokens from each eval prompt are the merged model's, up to a near-tie (the merged
    model's top two within twice the runtime's largest logit difference on the held-out texts), and it ends where
    the merged model ends, on one of the suite's stop tokens; every stop is an end-of-generation token declared in
    the GGUF's metadata (llama.cpp also stops on a few token names it knows; other runtimes read the metadata).
(d) logits on the held-out texts (the same token ids on both sides): NMSE (llama.cpp's examples/model-conversion
    definition: mean squared error over the merged model's variance), mean KL(merged || runtime) and top-1
    agreement, within the type's bounds (nbutils.export.ggufbounds: runtime_nmse, kl_mean, top1).
(e) the LoRA GGUF on a GGUF of the base model gives the merged model's logits within the bounds of the base's type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nbutils.export import ggufbounds, llamaruntime

RUNTIME_TOKENS = 48  # greedy tokens per eval prompt: room for a short answer and its end-of-turn token
SYSTEM = "You are a helpful assistant."
CONFIDENT = 0.5  # the top-1 bound counts positions where the merged model gives its top token at least this


@dataclass
class Plan:
    """What both sides are asked: the eval prompts' messages, conversations, held-out texts, and the HF side's
    renderings and ids."""
    chats: list[list[dict]]
    conversations: list[list[dict]]
    plain: list[str]  # texts without special tokens: llama.cpp's BOS policy on a raw prompt
    stop_ids: list[int]
    template_bos: bool
    hf: dict = field(default_factory=dict)
    max_new: int = RUNTIME_TOKENS
    piece: object = None  # token id -> the HF tokenizer's token, for messages


def runtime_context() -> dict:
    """What llama.cpp passes to every chat template besides the messages (common/chat.cpp, common_chat_extra_context):
    today's date. The HF side renders with the same, so the check compares the template and its engine, not the
    clock; where the date changes the prompt, `plan` notes it."""
    import datetime

    now = datetime.datetime.now()
    return {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y")}


# The default generation prompt on both sides, not the one the model was trained to continue where they differ
# (Qwen3's enable_thinking=False, modelfile.prompt_variant): the probe renders each chat from its messages through
# llama.cpp's own template engine, which (a) and (b) check, and it passes the template no arguments. Both sides
# render the same prompt, so the comparison holds either way.
def _hf(tokenizer, messages: list[dict], context: dict | None = None) -> tuple[str, list[int]]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(context or {}))
    return text, tokenizer(text, add_special_tokens=False).input_ids


def conversations(tokenizer, chats: list[list[dict]], answers: list[str]) -> list[list[dict]]:
    """Two eval exchanges and a third question as one conversation, and the same with a system prompt where the
    template takes one."""
    turns = []
    for i, chat in enumerate(chats[:3]):
        turns += [m for m in chat if m["role"] != "system"]
        if i < min(2, len(chats) - 1):
            turns.append({"role": "assistant", "content": answers[i]})
    found = [turns]
    try:
        tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}, *turns], tokenize=False)
        found.append([{"role": "system", "content": SYSTEM}, *turns])
    except Exception:  # noqa: BLE001 -- a template that refuses a system role (Gemma 2, Mistral) has no such case
        pass
    return found


def plan(tokenizer, chats: list[list[dict]], answers: list[str], texts: list[str], stop_ids: list[int],
         template_bos: bool, max_new: int = RUNTIME_TOKENS) -> Plan:
    """The HF side of the check, rendered and tokenized once for every GGUF 04 checks."""
    p = Plan([list(c) for c in chats], conversations(tokenizer, chats, answers), [a for a in answers if a.strip()],
             list(stop_ids), template_bos, max_new=max_new)
    context = runtime_context()
    convs = [_hf(tokenizer, c, context) for c in p.conversations]
    dated = _hf(tokenizer, p.conversations[0])[0] != convs[0][0]
    p.hf = {"chats": [_hf(tokenizer, c, context) for c in p.chats], "conversations": convs,
            "plain": [tokenizer(t, add_special_tokens=False).input_ids for t in p.plain],
            "texts": [tokenizer(t, add_special_tokens=False).input_ids for t in texts],
            "bos": tokenizer.bos_token_id, "bos_text": tokenizer.bos_token,
            "note": f"the chat template takes date_string: llama.cpp fills it with today's date "
                    f"({context['date_string']}) where training rendered the template's own default" if dated else None}
    p.piece = lambda i: tokenizer.convert_ids_to_tokens(int(i))
    return p


def threads() -> int:
    """llama.cpp's threads: OMP_NUM_THREADS where set, else the cores other work leaves idle. Its threads meet at a
    barrier after every operation: on a busy machine one descheduled thread stalls the others (a twin's 48 greedy
    tokens took 14.8 s on 2 threads against 2.2 s on 1, at a load average of 7.5 on 2 cores)."""
    cores = os.cpu_count() or 1
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, min(cores, int(os.environ["OMP_NUM_THREADS"])))
    return max(1, cores - int(os.getloadavg()[0]))


def request(p: Plan, logits_only: bool = False) -> dict:
    """The probe's request: chats to render, tokenize and continue greedily, plain texts, and the texts' ids."""
    req = {"threads": threads(), "logits": p.hf["texts"]}
    if not logits_only:
        req["chats"] = ([{"messages": c, "add_generation_prompt": True, "generate": p.max_new} for c in p.chats] +
                        [{"messages": c, "add_generation_prompt": True, "generate": 0} for c in p.conversations])
        req["texts"] = p.plain
    return req


class LogitStats:
    """NMSE, mean and largest KL(reference || runtime), top-1 agreement and max |diff|, accumulated over texts.
    Top-1 agreement is also counted where the reference gives its top token a probability of at least CONFIDENT
    (top1_confident), the share the bound applies to: where the merged model hesitates between tokens, a small
    difference may swap them (a random-weight twin hesitates everywhere, its top token has about 1/vocabulary)."""

    def __init__(self):
        self.sse = self.s1 = self.s2 = self.n = self.kl = self.kl_max = self.top1 = self.rows = self.max_abs = 0.0
        self.vocab_note = ""
        self.confident = self.confident_same = 0

    def add(self, ref, got, chunk: int = 64) -> None:
        import numpy as np
        import torch

        v = min(ref.shape[1], got.shape[1])
        if ref.shape[1] != got.shape[1]:
            self.vocab_note = f"vocabularies of {ref.shape[1]} (merged) and {got.shape[1]} (GGUF): first {v} compared"
        for start in range(0, ref.shape[0], chunk):
            a = ref[start:start + chunk, :v].double()
            b = torch.from_numpy(np.array(got[start:start + chunk, :v])).double()
            d = b - a
            self.sse += float(d.pow(2).sum())
            self.s1, self.s2, self.n = self.s1 + float(a.sum()), self.s2 + float(a.pow(2).sum()), self.n + a.numel()
            self.max_abs = max(self.max_abs, float(d.abs().max()))
            lp, lq = a.log_softmax(-1), b.log_softmax(-1)
            kl = (lp.exp() * (lp - lq)).sum(-1)
            self.kl, self.kl_max = self.kl + float(kl.sum()), max(self.kl_max, float(kl.max()))
            same = a.argmax(-1) == b.argmax(-1)
            sure = lp.max(-1).values.exp() >= CONFIDENT
            self.top1 += float(same.sum())
            self.rows += a.shape[0]
            self.confident += int(sure.sum())
            self.confident_same += int((same & sure).sum())

    def summary(self) -> dict:
        var = self.s2 / max(1, self.n) - (self.s1 / max(1, self.n)) ** 2
        nmse = (self.sse / max(1, self.n)) / var if var > 0 else float("inf")
        return {"nmse": nmse, "kl_mean": self.kl / max(1, self.rows), "kl_max": self.kl_max,
                "top1": self.top1 / max(1, self.rows),
                "top1_confident": self.confident_same / self.confident if self.confident else None,
                "confident_positions": self.confident, "max_abs_diff": self.max_abs, "positions": int(self.rows),
                **({"note": self.vocab_note} if self.vocab_note else {})}


def _greedy(model, ids: list[int], max_new: int, stop_ids: list[int]) -> dict:
    """The merged model's greedy tokens from ids until a stop token (kept) or max_new, with its top-two gaps."""
    import torch

    from nbutils.export import ggufcheck

    out, margins = ggufcheck.greedy_after(model, model(torch.tensor([ids], device=model.device), use_cache=True),
                                          max_new, stop_ids)
    return {"ids": out, "margins": margins, "stopped": bool(out) and out[-1] in stop_ids}


def merged_side(model, p: Plan, keep_logits: bool = False, limits: list[int] | None = None):
    """The merged model's greedy tokens from the eval prompts (HF ids; at most `limits[i]` tokens, else p.max_new)
    and its logits of each held-out text: a list when keep_logits (to compare several GGUFs), else a generator (one
    text in memory at a time)."""
    import torch

    limits = limits or [p.max_new] * len(p.hf["chats"])
    with torch.no_grad():
        greedy = [_greedy(model, ids, n, p.stop_ids) for (_, ids), n in zip(p.hf["chats"], limits)]

    def logits():
        with torch.no_grad():
            for ids in p.hf["texts"]:
                yield model(torch.tensor([ids], device=model.device)).logits[0].float().cpu()
    return {"greedy": greedy, "logits": list(logits()) if keep_logits else logits()}


def compare(merged: dict, runs: dict[str, dict]) -> dict:
    """The merged side against each runtime run: the greedy tokens, and the logit statistics per run."""
    stats = {name: LogitStats() for name in runs}
    for i, ref in enumerate(merged["logits"]):
        for name, run in runs.items():
            stats[name].add(ref, llamaruntime.logits(run["logits"][i]))
    return {"greedy": merged["greedy"], "logits": {name: s.summary() for name, s in stats.items()}}


def reference(model, p: Plan, runs: dict[str, dict]) -> dict:
    """With the merged model loaded: its side of the check, compared with every runtime run. Its greedy tokens go one
    past llama.cpp's (enough to see where the two part or stop), not always to p.max_new."""
    limits = [min(p.max_new, len(c["generated"]["ids"]) + 1) if "generated" in c else 1
              for c in runs["gguf"]["chats"][:len(p.chats)]]
    return compare(merged_side(model, p, limits=limits), runs)


def agreement(run_a: dict, run_b: dict) -> float:
    """Share of positions where two runtime runs (the merged GGUF, the base GGUF with the LoRA) pick the same top token."""
    import numpy as np

    same = total = 0
    for a, b in zip(run_a["logits"], run_b["logits"]):
        x, y = llamaruntime.logits(a), llamaruntime.logits(b)
        same += int((np.asarray(x).argmax(-1) == np.asarray(y).argmax(-1)).sum())
        total += x.shape[0]
    return same / max(1, total)


def bounds(quant_type: str) -> tuple[float, float, float]:
    """The type's (NMSE, mean KL, top-1) bounds in llama.cpp, from the one table (ggufbounds)."""
    b = ggufbounds.for_type(quant_type)
    return b.runtime_nmse, b.kl_mean, b.top1


def logit_problems(stats: dict, quant_type: str, what: str) -> list[str]:
    """The runtime's logits outside the type's bounds, one sentence each."""
    nmse, kl, top1 = bounds(quant_type)
    problems = []
    if not stats["nmse"] <= nmse:
        problems.append(f"{what}: NMSE {stats['nmse']:.3g} of llama.cpp's logits against the merged model's is above "
                        f"{nmse:g} for {quant_type}")
    if not stats["kl_mean"] <= kl:
        problems.append(f"{what}: mean KL divergence {stats['kl_mean']:.3g} is above {kl:g} for {quant_type}")
    if stats["top1_confident"] is not None and not stats["top1_confident"] >= top1:
        problems.append(f"{what}: top-1 agreement {stats['top1_confident']:.1%} where the merged model is confident "
                        f"(its top token at p >= {CONFIDENT:g}: {stats['confident_positions']} of {stats['positions']} "
                        f"positions) is below {top1:.0%} for {quant_type}")
    return problems
