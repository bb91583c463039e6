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


def answer_logps(model, tokenizer, prompts: list[str], answers: list[str],
                 batch_tokens: int = evalmemory.BATCH_TOKENS) -> list[float]:
    """Sum of log-probabilities of each answer's tokens after its prompt (both rendered text, no special tokens added),
    in batches of at most batch_tokens padded positions, through 02's chunked path (nbutils.train.loss): the whole
    logits never exist."""
    import torch

    from nbutils.data.batching import IGNORE_INDEX, by_tokens
    from nbutils.train.loss import sequence_logprobs

    p_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    a_ids = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in answers]
    out = [0.0] * len(prompts)
    for rows in by_tokens([len(p) + len(a) for p, a in zip(p_ids, a_ids)], batch_tokens):
        width = max(len(p_ids[r]) + len(a_ids[r]) for r in rows)
        ids = torch.full((len(rows), width), tokenizer.pad_token_id)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, IGNORE_INDEX)
        for k, r in enumerate(rows):
            p, a = p_ids[r], a_ids[r]
            ids[k, :len(p) + len(a)] = torch.tensor(p + a)
            mask[k, :len(p) + len(a)] = 1
            labels[k, len(p):len(p) + len(a)] = torch.tensor(a, dtype=labels.dtype)
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        logps, _ = sequence_logprobs(model, {k: v.to(model.device) for k, v in batch.items()})
        for r, value in zip(rows, logps.tolist()):
            out[r] = value
    return out


def _rewards(model, tokenizer, prompts: list[str], answers: list[str], beta: float, policy: str):
    """(implicit rewards, the SFT adapter's log-probabilities) of each answer after its prompt."""
    logps = {}
    for name in (policy, SFT):
        with adapter(model, name):
            logps[name] = answer_logps(model, tokenizer, prompts, answers)
    return [beta * (p - s) for p, s in zip(logps[policy], logps[SFT])], logps[SFT]


def pair_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default") -> dict:
    """Preference accuracy, margins and the SFT adapter's own ranking on held-out pairs."""
    prompts = [r["prompt"] for r in rows]
    reward, sft = {}, {}
    for side in ("chosen", "rejected"):
        reward[side], sft[side] = _rewards(model, tokenizer, prompts, [r[side] for r in rows], beta, policy)
    margins = [c - r for c, r in zip(reward["chosen"], reward["rejected"])]
    per_pair = [1.0 if m > 1e-6 else 0.5 if abs(m) <= 1e-6 else 0.0 for m in margins]
    sft_rank = [float(c > r) for c, r in zip(sft["chosen"], sft["rejected"])]
    n = max(1, len(rows))
    return {"n_pairs": len(rows), "beta": beta, "preference_accuracy": sum(per_pair) / n,
            "preference_accuracy_ci": metrics.bootstrap_ci(per_pair), "sft_preference_accuracy": 0.5,
            "reward_margin": sum(margins) / n, "reward_margin_ci": metrics.bootstrap_ci(margins),
            "reward_chosen": sum(reward["chosen"]) / n, "reward_rejected": sum(reward["rejected"]) / n,
            "sft_logp_ranking_accuracy": sum(sft_rank) / n}


def unpaired_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default") -> dict:
    """KTO's held-out figures on unpaired rows, which have no pair to rank: label accuracy (the share of completions
    whose implicit reward has the sign of their label; a tie counts half, so the SFT adapter scores 0.5), the mean
    reward of desirable and of undesirable completions, and the gap between them."""
    reward, _ = _rewards(model, tokenizer, [r["prompt"] for r in rows], [r["completion"] for r in rows], beta, policy)
    per_row = [0.5 if abs(x) <= 1e-6 else float((x > 0) == bool(r["label"])) for x, r in zip(reward, rows)]
    good = [x for x, r in zip(reward, rows) if r["label"]]
    bad = [x for x, r in zip(reward, rows) if not r["label"]]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    gap = mean(good) - mean(bad) if good and bad else None
    return {"n_rows": len(rows), "n_desirable": len(good), "n_undesirable": len(bad), "beta": beta,
            "label_accuracy": mean(per_row), "label_accuracy_ci": metrics.bootstrap_ci(per_row),
            "sft_label_accuracy": 0.5, "reward_desirable": mean(good), "reward_undesirable": mean(bad),
            "reward_gap": gap, "note": "unpaired rows: no pair to rank, so no preference accuracy or margin"}


def held_out_figures(model, tokenizer, rows: list[dict], beta: float, policy: str = "default") -> dict:
    """The figures that apply to the held-out rows: {"preference": ...} on pairs, {"unpaired": ...} on KTO rows."""
    pairs = [r for r in rows if "chosen" in r]
    kto = [r for r in rows if "completion" in r]
    return {**({"preference": pair_figures(model, tokenizer, pairs, beta, policy)} if pairs else {}),
            **({"unpaired": unpaired_figures(model, tokenizer, kto, beta, policy)} if kto else {})}


def sampled_rewards(model, tokenizer, prompts: list[str], answers: list[str], funcs, samples: int,
                    max_new_tokens: int, seed: int, temperature: float = 1.0) -> list[float]:
    """Mean reward per prompt over `samples` completions sampled as GRPO samples them, under the guard."""
    import torch
    from transformers import StoppingCriteriaList

    from nbutils.data import chatformat
    from nbutils.eval.guard import DegenerationGuard
    from nbutils.eval.rollouts import cut

    torch.manual_seed(seed)
    stops, side = chatformat.stop_ids(tokenizer, model), tokenizer.padding_side
    tokenizer.padding_side, per_prompt = "left", []
    try:
        step = evalmemory.SAMPLED_PROMPTS
        for i in range(0, len(prompts), step):
            chunk = [p for p in prompts[i:i + step] for _ in range(samples)]
            batch = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            guard = DegenerationGuard(tokenizer, eos_token_id=stops)
            with torch.no_grad():
                seq = model.generate(**batch, do_sample=True, temperature=temperature, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=stops,
                                     stopping_criteria=StoppingCriteriaList([guard]))
            rows, _ = cut(seq[:, batch["input_ids"].shape[1]:].tolist(), guard.report())
            rows = [r[:next((k for k, t in enumerate(r) if t in stops), len(r))] for r in rows]
            texts = [tokenizer.decode(r, skip_special_tokens=True).strip() for r in rows]
            refs = [a for a in answers[i:i + step] for _ in range(samples)]
            scores = rewards.total(funcs, texts, refs)
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
                 policy: str = "default") -> tuple[dict, list[dict]]:
    """03's figures for the SFT adapter (as `base`) and the trained one (as `tuned`): task metric, eval loss,
    degeneration, metrics with intervals and win/tie/loss; and the per-sample rows."""
    prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, limit)
    entries, outs = {}, {}
    for label, name in (("base", SFT), ("tuned", policy)):
        with adapter(model, name):
            entries[label], outs[label] = evaluation.score(model, tokenizer, eval_ds, prompts, refs, max_new_tokens,
                                                           guard="flag")
    scores = metrics.compare("auto", {k: [o["text"] for o in v] for k, v in outs.items()}, refs, n_boot, seed)
    rows = evaluation.sample_rows(prompts, refs, outs["base"], outs["tuned"])
    return {"n_samples": len(prompts), "guard": "flag", "base": entries["base"], "tuned": entries["tuned"],
            "metrics": scores, "compared_with": "the SFT adapter (02)"}, rows


def summary_line(method: str, report: dict) -> str:
    """One line: the primary task metric both ways, by name, and the method's own figure against the SFT adapter."""
    name = report["base"].get("primary_metric", {}).get("name")
    value = lambda m: report[m]["primary_metric"]["value"] if name else report[m]["task_metric"]  # noqa: E731
    line = f"[{method}] {name or 'task metric'} {value('base'):.3f} (SFT) -> {value('tuned'):.3f}"
    if "preference" in report:
        p = report["preference"]
        line += (f"; preference accuracy 0.5 (SFT) -> {p['preference_accuracy']:.3f} "
                 f"[{p['preference_accuracy_ci'][0]:.2f}, {p['preference_accuracy_ci'][1]:.2f}], "
                 f"margin {p['reward_margin']:.3f} on {p['n_pairs']} held-out pairs")
    if "unpaired" in report:
        u = report["unpaired"]
        line += (f"; label accuracy 0.5 (SFT) -> {u['label_accuracy']:.3f} [{u['label_accuracy_ci'][0]:.2f}, "
                 f"{u['label_accuracy_ci'][1]:.2f}] on {u['n_rows']} held-out unpaired rows (reward sign against label)")
    if "held_out_reward" in report:
        r = report["held_out_reward"]
        line += (f"; held-out reward {r['sft']['mean']:.3f} -> {r['tuned']['mean']:.3f}, change "
                 f"{r['delta']['mean']:+.3f} [{r['delta']['ci'][0]:+.3f}, {r['delta']['ci'][1]:+.3f}]")
    return line
