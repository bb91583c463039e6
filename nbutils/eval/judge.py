"""05's report against the SFT adapter: preference accuracy and reward margins (label accuracy on KTO's unpaired rows),
held-out reward, task metric.

The SFT adapter (02's) is loaded into the trained model a second time under the name "sft", so both policies share
the 4-bit base and every figure compares them on the same inputs:
- implicit reward of an answer: beta x (log p_policy(answer | prompt) - log p_sft(answer | prompt)); preference
  accuracy is the share of held-out pairs whose chosen answer gets the higher reward (a tie counts half: before
  training every reward is 0, so the SFT adapter scores 0.5), the margin the mean of chosen less rejected; on
  unpaired KTO rows, which have no pair to rank, the share whose reward has the sign of their label instead;
- the SFT adapter's own ranking (log p_sft of chosen above rejected), for the record;
- for GRPO, the mean held-out reward of sampled completions, SFT against the trained policy, with a paired
  bootstrap interval of the change;
- the task metric (03's), degeneration rates and win/tie/loss, through `evaluation.score` and `metrics.compare`.
Answers are tokenized as trl tokenizes them for training (`trl_ids`), scored in batches of the padded positions 05's
plan found fit (`plan.judge_batch_tokens`), with bootstrap intervals of the notebook's `n_bootstrap` and `seed`.
The report has 03's shape (`base` is the SFT adapter, `tuned` the trained one), so 04's gate reads it unchanged.
"""

from __future__ import annotations

import contextlib

from nbutils.eval import evaluation, metrics, rewards
from nbutils.train import evalmemory

SFT = "sft"


@contextlib.contextmanager
def adapter(model, name: str):
    """Run with one adapter active, then restore the one that was."""
    before = model.active_adapter
    model.set_adapter(name)
    try:
        yield model
    finally:
        model.set_adapter(before)


def trl_ids(tokenizer, prompt: str, answers: list[str]) -> tuple[list[int], list[list[int]]]:
    """(context ids, each answer's ids) as trl's DPO and KTO tokenize a text row, so the judge scores the tokens
    training saw: the prompt alone and prompt + answer + EOS (appended unless the answer ends with it) each tokenized
    whole, the tokenizer's own special tokens as it adds them, split where the two first differ. A SentencePiece
    tokenizer merges across the boundary (Phi-3.5: 'Par', 'is' after its prompt, '▁Paris' alone), so tokenizing
    the answer on its own would score other tokens. A pair is split where the earlier of its two sides splits. The
    prompt is taken as 05's rows hold it (`pairs.trl_text`: no second BOS where the tokenizer adds its own)."""
    from trl.data_utils import common_prefix_length  # trl's own split, so the judge cannot drift from training

    from nbutils.data.pairs import trl_text

    prompt, eos = trl_text(tokenizer, prompt), tokenizer.eos_token or ""
    prompt_ids = tokenizer(prompt)["input_ids"]
    whole = [tokenizer(prompt + (a if a.endswith(eos) else a + eos))["input_ids"] for a in answers]
    n = min(common_prefix_length(prompt_ids, w) for w in whole)
    return prompt_ids[:n], [w[n:] for w in whole]


def score_ids(model, pad_id: int, seqs: list[tuple[list[int], list[int]]],
              batch_tokens: int = evalmemory.BATCH_TOKENS) -> list[float]:
    """Sum of log-probabilities of each (context, answer) row's answer tokens, in batches of at most batch_tokens
    padded positions, through 02's chunked path (nbutils.train.loss): the whole logits never exist (a model whose
    logits are not lm_head's, Gemma-2's soft-capping, builds them: 05's plan sizes batch_tokens for that)."""
    import torch

    from nbutils.data.batching import IGNORE_INDEX, by_tokens
    from nbutils.train.loss import sequence_logprobs

    out = [0.0] * len(seqs)
    for rows in by_tokens([len(p) + len(a) for p, a in seqs], batch_tokens):
        width = max(len(seqs[r][0]) + len(seqs[r][1]) for r in rows)
        ids = torch.full((len(rows), width), pad_id)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, IGNORE_INDEX)
        for k, r in enumerate(rows):
            p, a = seqs[r]
            ids[k, :len(p) + len(a)] = torch.tensor(p + a)
            mask[k, :len(p) + len(a)] = 1
            labels[k, len(p):len(p) + len(a)] = torch.tensor(a, dtype=labels.dtype)
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        logps, _ = sequence_logprobs(model, {k: v.to(model.device) for k, v in batch.items()})
        for r, value in zip(rows, logps.tolist()):
            out[r] = value
    return out


def answer_logps(model, tokenizer, prompts: list[str], answers: list[str],
                 batch_tokens: int = evalmemory.BATCH_TOKENS) -> list[float]:
    """Sum of log-probabilities of each answer's tokens after its prompt (rendered text), tokenized as trl tokenizes
    them for training (`trl_ids`)."""
    seqs = [(c, a[0]) for c, a in (trl_ids(tokenizer, p, [x]) for p, x in zip(prompts, answers))]
    return score_ids(model, tokenizer.pad_token_id, seqs, batch_tokens)


def _rewards(model, tokenizer, seqs, beta: float, policy: str, batch_tokens: int):
    """(implicit rewards, the SFT adapter's log-probabilities) of each (context, answer) row."""
    logps = {}
    for name in (policy, SFT):
        with adapter(model, name):
            logps[name] = score_ids(model, tokenizer.pad_token_id, seqs, batch_tokens)
    return [beta * (p - s) for p, s in zip(logps[policy], logps[SFT])], logps[SFT]


def pair_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default",
                 batch_tokens: int = evalmemory.BATCH_TOKENS, n_boot: int = 1000, seed: int = 0) -> dict:
    """Preference accuracy, margins and the SFT adapter's own ranking on held-out pairs; intervals from n_boot
    bootstrap resamples drawn with seed (the notebook's)."""
    split = [trl_ids(tokenizer, r["prompt"], [r["chosen"], r["rejected"]]) for r in rows]
    reward, sft = {}, {}
    for k, side in enumerate(("chosen", "rejected")):
        reward[side], sft[side] = _rewards(model, tokenizer, [(c, a[k]) for c, a in split], beta, policy, batch_tokens)
    margins = [c - r for c, r in zip(reward["chosen"], reward["rejected"])]
    per_pair = [1.0 if m > 1e-6 else 0.5 if abs(m) <= 1e-6 else 0.0 for m in margins]
    sft_rank = [float(c > r) for c, r in zip(sft["chosen"], sft["rejected"])]
    n = max(1, len(rows))
    return {"n_pairs": len(rows), "beta": beta, "preference_accuracy": sum(per_pair) / n,
            "preference_accuracy_ci": metrics.bootstrap_ci(per_pair, n_boot, seed), "sft_preference_accuracy": 0.5,
            "reward_margin": sum(margins) / n, "reward_margin_ci": metrics.bootstrap_ci(margins, n_boot, seed),
            "reward_chosen": sum(reward["chosen"]) / n, "reward_rejected": sum(reward["rejected"]) / n,
            "sft_logp_ranking_accuracy": sum(sft_rank) / n, "bootstrap": {"n": n_boot, "seed": seed}}


def unpaired_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default",
                     batch_tokens: int = evalmemory.BATCH_TOKENS, n_boot: int = 1000, seed: int = 0) -> dict:
    """KTO's held-out figures on unpaired rows, which have no pair to rank: label accuracy (the share of completions
    whose implicit reward has the sign of their label; a tie counts half, so the SFT adapter scores 0.5), the mean
    reward of desirable and of undesirable completions, and the gap between them."""
    seqs = [(c, a[0]) for c, a in (trl_ids(tokenizer, r["prompt"], [r["completion"]]) for r in rows)]
    reward, _ = _rewards(model, tokenizer, seqs, beta, policy, batch_tokens)
    per_row = [0.5 if abs(x) <= 1e-6 else float((x > 0) == bool(r["label"])) for x, r in zip(reward, rows)]
    good = [x for x, r in zip(reward, rows) if r["label"]]
    bad = [x for x, r in zip(reward, rows) if not r["label"]]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    gap = mean(good) - mean(bad) if good and bad else None
    return {"n_rows": len(rows), "n_desirable": len(good), "n_undesirable": len(bad), "beta": beta,
            "label_accuracy": mean(per_row), "label_accuracy_ci": metrics.bootstrap_ci(per_row, n_boot, seed),
            "sft_label_accuracy": 0.5, "reward_desirable": mean(good), "reward_undesirable": mean(bad),
            "reward_gap": gap, "bootstrap": {"n": n_boot, "seed": seed},
            "note": "unpaired rows: no pair to rank, so no preference accuracy or margin"}


def held_out_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default",
                     batch_tokens: int = evalmemory.BATCH_TOKENS, n_boot: int = 1000, seed: int = 0) -> dict:
    """The figures that apply to the held-out rows: {"preference": ...} on pairs, {"unpaired": ...} on KTO rows."""
    pairs = [r for r in rows if "chosen" in r]
    kto = [r for r in rows if "completion" in r]
    same = dict(policy=policy, batch_tokens=batch_tokens, n_boot=n_boot, seed=seed)
    return {**({"preference": pair_figures(model, tokenizer, pairs, beta, **same)} if pairs else {}),
            **({"unpaired": unpaired_figures(model, tokenizer, kto, beta, **same)} if kto else {})}


def _completions(tokenizer, seq, prompt_width: int, report: list[dict], stops: list[int], chat: bool):
    """(completions, completion ids) as trl hands them to reward functions: each row through its first stop token
    (trl keeps the EOS), a row the guard stopped cut there, decoded without special tokens; for chat prompts each
    completion an assistant message list."""
    from nbutils.eval.rollouts import cut

    rows, _ = cut(seq[:, prompt_width:].tolist(), report)
    ids = [r[:next((k + 1 for k, t in enumerate(r) if t in stops), len(r))] for r in rows]
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return ([[{"role": "assistant", "content": t}] for t in texts] if chat else texts), ids


def sampled_rewards(model, tokenizer, rows: list[dict], funcs, samples: int, max_new_tokens: int, seed: int,
                    temperature: float = 1.0) -> list[float]:
    """Mean reward per prompt over `samples` completions sampled as GRPO samples them, under the guard. rows: GRPO's
    rows (`prompt`, a message list rendered with the chat template's generation prompt as trl renders it, or text,
    and the other columns, such as `answer`); each reward function is called as trl calls it in training."""
    import torch
    from transformers import StoppingCriteriaList

    from nbutils.data import chatformat
    from nbutils.eval.guard import DegenerationGuard

    torch.manual_seed(seed)
    stops, side = chatformat.stop_ids(tokenizer, model), tokenizer.padding_side
    tokenizer.padding_side, per_prompt = "left", []
    try:
        step = evalmemory.SAMPLED_PROMPTS
        for i in range(0, len(rows), step):
            group = [r for r in rows[i:i + step] for _ in range(samples)]
            chat = isinstance(group[0]["prompt"], list)
            texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) if chat
                     else r["prompt"] for r in group]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            guard = DegenerationGuard(tokenizer, eos_token_id=stops)
            with torch.no_grad():
                seq = model.generate(**batch, do_sample=True, temperature=temperature, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=stops,
                                     stopping_criteria=StoppingCriteriaList([guard]))
            completions, ids = _completions(tokenizer, seq, batch["input_ids"].shape[1], guard.report(), stops, chat)
            columns = {k: [r[k] for r in group] for k in group[0] if k not in ("prompt", "completion", "completion_ids")}
            scores = rewards.total(funcs, [r["prompt"] for r in group], completions, ids, columns)
            per_prompt += [sum(scores[k:k + samples]) / samples for k in range(0, len(scores), samples)]
    finally:
        tokenizer.padding_side = side
    return per_prompt


def reward_figures(sft: list[float], tuned: list[float], n_boot: int = 1000, seed: int = 0) -> dict:
    """Mean held-out reward of both, and the paired change with its bootstrap interval."""
    delta = [t - s for t, s in zip(tuned, sft)]
    n = max(1, len(delta))
    return {"n_prompts": len(delta), "sft": {"mean": sum(sft) / n, "ci": metrics.bootstrap_ci(sft, n_boot, seed)},
            "tuned": {"mean": sum(tuned) / n, "ci": metrics.bootstrap_ci(tuned, n_boot, seed)},
            "delta": {"mean": sum(delta) / n, "ci": metrics.bootstrap_ci(delta, n_boot, seed)},
            "win_tie_loss": metrics.win_tie_loss(tuned, sft)}


def task_figures(model, tokenizer, eval_ds, limit: int, max_new_tokens: int, n_boot: int, seed: int,
                 policy: str = "default", batch_tokens: int = evalmemory.BATCH_TOKENS) -> tuple[dict, list[dict]]:
    """03's figures for the SFT adapter (as `base`) and the trained one (as `tuned`): task metric, eval loss (scored
    batch_tokens padded positions at a time: 05's plan), degeneration, metrics with intervals and win/tie/loss; and
    the per-sample rows."""
    prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, limit)
    entries, outs = {}, {}
    for label, name in (("base", SFT), ("tuned", policy)):
        with adapter(model, name):
            entries[label], outs[label] = evaluation.score(model, tokenizer, eval_ds, prompts, refs, max_new_tokens,
                                                           guard="flag", batch_tokens=batch_tokens)
    scores = metrics.compare("auto", {k: [o["text"] for o in v] for k, v in outs.items()}, refs, n_boot, seed)
    rows = evaluation.sample_rows(prompts, refs, outs["base"], outs["tuned"])
    return {"n_samples": len(prompts), "guard": "flag", "base": entries["base"], "tuned": entries["tuned"],
            "metrics": scores, "compared_with": "the SFT adapter (02)"}, rows


# Below this many held-out pairs, rows or prompts the bootstrap interval says little: resampled from a handful of
# values it is narrow or a single point (3 pairs all ranked right give [1.00, 1.00]); the line says so beside it.
FEW = 30


def _few(n: int, what: str) -> str:
    return f" (only {n} {what}: too few for the interval to mean much)" if n < FEW else ""


def summary_line(method: str, report: dict) -> str:
    """One line: the primary task metric both ways, by name, and the method's own figure against the SFT adapter;
    an interval over fewer than FEW held-out items is flagged."""
    name = report["base"].get("primary_metric", {}).get("name")
    value = lambda m: report[m]["primary_metric"]["value"] if name else report[m]["task_metric"]  # noqa: E731
    line = f"[{method}] {name or 'task metric'} {value('base'):.3f} (SFT) -> {value('tuned'):.3f}"
    if "preference" in report:
        p = report["preference"]
        line += (f"; preference accuracy 0.5 (SFT) -> {p['preference_accuracy']:.3f} "
                 f"[{p['preference_accuracy_ci'][0]:.2f}, {p['preference_accuracy_ci'][1]:.2f}], "
                 f"margin {p['reward_margin']:.3f} on {p['n_pairs']} held-out pairs" + _few(p["n_pairs"], "pairs"))
    if "unpaired" in report:
        u = report["unpaired"]
        line += (f"; label accuracy 0.5 (SFT) -> {u['label_accuracy']:.3f} [{u['label_accuracy_ci'][0]:.2f}, "
                 f"{u['label_accuracy_ci'][1]:.2f}] on {u['n_rows']} held-out unpaired rows (reward sign against label)"
                 + _few(u["n_rows"], "rows"))
    if "held_out_reward" in report:
        r = report["held_out_reward"]
        line += (f"; held-out reward {r['sft']['mean']:.3f} -> {r['tuned']['mean']:.3f}, change "
                 f"{r['delta']['mean']:+.3f} [{r['delta']['ci'][0]:+.3f}, {r['delta']['ci'][1]:+.3f}]"
                 + _few(r["n_prompts"], "prompts"))
    return line
