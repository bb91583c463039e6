"""Evaluation: guarded batched generation on a bounded sample, task metric, and loss on the whole eval split.

Generation is the expensive part (peft#217: generate on a few dozen examples, perplexity for the
rest), so `n_samples` prompts are generated and the eval loss covers every eval example.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.data import batching, chatformat
from nbutils.eval import metrics as task_metrics
from nbutils.eval.degeneration import CircuitBreaker, summarize
from nbutils.eval.detect import detect
from nbutils.train import atomic, evalmemory, reports, runlock

NO_PROMPT = ("01's eval records have no prompt: each is one text (a `text` field), which cannot be generated from and "
             "compared with an answer. Give 01 prompt/answer records (instruction/output, prompt/completion, messages "
             "with a user turn), or name the columns with columns='user=COL,assistant=COL'")
# A think block opening a generation (Qwen3's, empty where 01 taught it): <think> and </think> are added tokens that
# are not special, so decode(skip_special_tokens=True) keeps them, and a perfect answer behind one scored 0.
THINK_RE = re.compile(r"<think>.*?</think>\s*", re.S)
# The generation prompts a template may write, each as apply_chat_template's extra arguments. Qwen3's default ends at
# '<|im_start|>assistant\n' (the model then thinks at length), while 01 rendered each answer behind the empty think
# block of the template's non-thinking form, which enable_thinking=False writes into the prompt (render_prompt).
PROMPT_VARIANTS = ({}, {"enable_thinking": False})
# Greedy decoding as it is, whatever the model's generation_config says: generate starts from it (a clean
# GenerationConfig is filled from it too), and a repetition_penalty there (Qwen2.5-Instruct ships 1.05) or
# no_repeat_ngram_size applies to greedy decoding as well, changing the answers 03 scores and the chat shows.
GREEDY = {"do_sample": False, "num_beams": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}


def _rows(eval_ds, limit: int | None, show: bool = False) -> list[dict]:
    """The first `limit` eval records that have a prompt (a user turn before the answer); a record of one text has
    none (01 keeps it as one answer to train on). Raises ValueError (NO_PROMPT) when no record has one."""
    rows, seen = [], 0
    for r in eval_ds:
        if limit is not None and len(rows) >= limit:
            break
        seen += 1
        if any(m["role"] == "user" for m in r["messages"][:-1]):
            rows.append(r)
    if seen and not rows:
        raise ValueError(NO_PROMPT)
    if show and len(rows) < seen:
        print(f"[eval] {seen - len(rows)} of the {seen} eval records read have no prompt (one text each): they count in "
              "the eval loss, not in generation", flush=True)
    return rows


def prompt_messages(eval_ds, limit: int | None = None) -> list[list[dict]]:
    """The prompts of prompts_and_references as messages (every turn but the answer), for a runtime that renders
    the chat template itself (llama.cpp)."""
    return [r["messages"][:-1] for r in _rows(eval_ds, limit)]


def render_prompt(tokenizer, turns: list[dict], answer: str = chatformat.STAND_IN) -> str:
    """The turns before an answer, rendered up to where 01's training text has the answer (`prompt_choice`)."""
    return prompt_choice(tokenizer, turns, answer)[1]


def prompt_choice(tokenizer, turns: list[dict], answer: str = chatformat.STAND_IN) -> tuple[dict, str]:
    """(apply_chat_template's extra arguments, the prompt they render): of the template's generation prompts
    (PROMPT_VARIANTS), the longest that starts the conversation with `answer` as 01 renders it (Qwen3: the empty think
    block of a plain answer, not of one that reasons); the default where none does. A stand-in answer where the real
    one is not known (a chat question, an export's template): a plain answer."""
    default = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    try:
        full = tokenizer.apply_chat_template([*turns, {"role": "assistant", "content": answer}], tokenize=False)
        variants = [(extra, tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True, **extra))
                    for extra in PROMPT_VARIANTS[1:]]
    except Exception:  # noqa: BLE001 -- templates raise anything; the default prompt is what one without variants has
        return {}, default
    fits = [(extra, p) for extra, p in (({}, default), *variants) if full.startswith(p)]
    return max(fits, key=lambda fit: len(fit[1])) if fits else ({}, default)


def prompts_and_references(eval_ds, tokenizer, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Prompts rendered as 01's training text starts (render_prompt) and the reference answers, of the records that
    have a prompt (see _rows)."""
    prompts, refs = [], []
    for r in _rows(eval_ds, limit, show=True):
        msgs = r["messages"]
        prompts.append(render_prompt(tokenizer, msgs[:-1], msgs[-1]["content"]))
        refs.append(msgs[-1]["content"])
    return prompts, refs


def answer(text: str) -> str:
    """The answer a generation gives: its text after a leading think block (THINK_RE), the text itself without one.
    What 03 scores and shows."""
    block = THINK_RE.match(text)
    return text[block.end():] if block else text


def check_guard(guard: str) -> str:
    """03's guard parameter, refused when it is none of off, flag, abort (a typo would otherwise only flag)."""
    if guard not in ("off", "flag", "abort"):
        raise ValueError(f"guard={guard!r} is not one of off, flag, abort")
    return guard


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 32, batch_size: int = evalmemory.GENERATE_ROWS,
             guard: str = "flag", breaker: CircuitBreaker | None = None,
             eos_token_id: int | list[int] | None = None) -> list[dict]:
    """Greedy generation with left padding. guard: 'off', 'flag' (stop degenerate rows, keep going) or
    'abort' (also raise DegenerationError through the circuit breaker when most early outputs are garbage).
    Stops on any of eos_token_id; by default the union of EOS, the template's end-of-turn token and the
    model's generation_config.eos_token_id (nbutils.data.chatformat.stop_ids). A row's text is its `answer`."""
    import torch
    from transformers import StoppingCriteriaList

    from nbutils.eval.guard import DegenerationGuard

    check_guard(guard)
    breaker = breaker if breaker is not None else (CircuitBreaker() if guard == "abort" else None)
    eos = chatformat.stop_ids(tokenizer, model) if eos_token_id is None else eos_token_id
    stops = set(eos) if isinstance(eos, (list, tuple, set)) else {eos}
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
    out = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = batch.to(model.device)
            width = batch["input_ids"].shape[1]
            watch = DegenerationGuard(tokenizer, prompt_length=width, eos_token_id=eos) if guard != "off" else None
            with torch.no_grad():
                seq = model.generate(**batch, max_new_tokens=max_new_tokens, **GREEDY,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                                     stopping_criteria=StoppingCriteriaList([watch]) if watch else None)
            states = watch.report() if watch else [{}] * len(seq)
            texts = []
            for row, state in zip(seq[:, width:].tolist(), states):
                cut = next((k for k, t in enumerate(row) if t in stops), None)
                row = row[:cut] if cut is not None else row
                # generate pads a row the guard stopped, and where the pad is a stop id too (Qwen's <|endoftext|>)
                # that pad is no EOS the model said
                ended = cut is not None and not state.get("stopped")
                row = [t for t in row if t != tokenizer.pad_token_id]
                text = answer(tokenizer.decode(row, skip_special_tokens=True).strip())
                verdict = detect(tokenizer.decode(row, skip_special_tokens=False))  # marker loops count too
                if state.get("stopped") and not verdict.degenerate:
                    verdict.degenerate, verdict.reasons = True, list(state["reasons"])
                texts.append(text)
                out.append({"text": text, "tokens": len(row), "eos": ended, "verdict": verdict,
                            "guard_stopped": bool(state.get("stopped")), "stop_token": state.get("stop_token")})
            if breaker is not None:
                breaker.update(texts, [r["verdict"] for r in out[-len(texts):]])
    finally:
        tokenizer.padding_side = side
    return out


def exact_match(outputs: list[str], references: list[str]) -> float:
    """Share of outputs equal to the reference after trimming whitespace and case (metrics.exact_match's rule)."""
    return sum(task_metrics.exact_match(outputs, references)) / max(1, len(references))


def eval_loss(model, eval_ds, pad_id: int, batch_tokens: int = evalmemory.BATCH_TOKENS) -> float:
    """Mean loss per target token over the whole eval split (prompt tokens masked), in batches of at most batch_tokens
    padded positions, lm_head applied a chunk of positions at a time (nbutils.train.loss.sequence_logprobs): the
    batch x length x vocabulary logits never exist (03's plan counts one chunk), except for a model that soft-caps
    or scales them (Gemma-2: loss.unsupported), scored from its whole logits (which the plan counts then). NaN
    where the split has no target token: no loss was measured (0.0 would read as a perfect model)."""
    from nbutils.train.loss import sequence_logprobs

    collate = batching.make_collator({"strategy": "length_grouped"}, pad_id)
    lengths = list(eval_ds["length"]) if "length" in eval_ds.column_names else [len(r["input_ids"]) for r in eval_ds]
    total, count = 0.0, 0
    for rows in batching.by_tokens(lengths, batch_tokens):
        batch = {k: v.to(model.device) for k, v in collate([eval_ds[j] for j in rows]).items()}
        logps, n = sequence_logprobs(model, batch)
        total -= float(logps.sum())
        count += int(n.sum())
    return total / count if count else float("nan")


def score(model, tokenizer, eval_ds, prompts, refs, max_new_tokens: int, guard: str,
          breaker: CircuitBreaker | None = None, metrics: str = "auto", batch_size: int = evalmemory.GENERATE_ROWS,
          batch_tokens: int = evalmemory.BATCH_TOKENS) -> tuple[dict, list[dict]]:
    """One model's report entry (task metric, the primary metric by name, loss, perplexity, degeneration figures) and
    its generations; `metrics` is 03's parameter (auto: exact match for short answers, ROUGE-L for long ones);
    batch_size prompts generated at once, batch_tokens padded positions scored at once (03's plan)."""
    outs = generate(model, tokenizer, prompts, max_new_tokens, batch_size, guard=guard, breaker=breaker)
    loss = eval_loss(model, eval_ds, tokenizer.pad_token_id, batch_tokens)
    texts = [o["text"] for o in outs]
    primary = task_metrics.resolve(metrics, refs)[1]
    values = task_metrics.scorer(primary)(texts, refs)
    entry = {"task_metric": exact_match(texts, refs), "eval_loss": loss,
             "primary_metric": {"name": primary, "value": sum(values) / max(1, len(values))},
             "perplexity": math.exp(min(loss, 50.0)), **summarize(outs, max_new_tokens)}
    return entry, outs


def probe(tokenizer, prompts: list[str], max_new_tokens: int = 32, threshold: float = 0.5):
    """A training-time probe for 02's hook: True when most probe generations are degenerate."""

    def run(model) -> bool:
        was_training = model.training
        model.eval()
        outs = generate(model, tokenizer, prompts, max_new_tokens, guard="flag")
        if was_training:
            model.train()
        share = sum(o["verdict"].degenerate for o in outs) / max(1, len(outs))
        print(f"[probe] {share:.0%} of {len(outs)} probe generations degenerate")
        return share > threshold

    return run


def training_probe(eval_ds, tokenizer, n: int):
    """02's probe on the first n eval prompts, generating as many new tokens as 03's "auto"; None when n is 0."""
    if not n:
        return None
    from nbutils import defaults

    try:
        prompts, refs = prompts_and_references(eval_ds, tokenizer, n)
    except ValueError as e:  # records of one text: training works, there is nothing to probe with
        print(f"[probe] skipped: {e}", flush=True)
        return None
    return probe(tokenizer, prompts, defaults.max_new_tokens("auto", tokenizer, refs)[0])


def sample_rows(prompts, refs, base_out, tuned_out) -> list[dict]:
    """Rows for the per-sample table: prompt / reference / output / verdict, for both models."""
    rows = []
    for p, r, b, t in zip(prompts, refs, base_out, tuned_out):
        for model, o in (("base", b), ("tuned", t)):
            verdict = ("degenerate: " + ", ".join(o["verdict"].reasons)) if o["verdict"].degenerate else "ok"
            rows.append({"model": model, "prompt": p, "reference": r, "output": o["text"], "verdict": verdict,
                         "eos": o["eos"], "tokens": o["tokens"], "correct": exact_match([o["text"]], [r]) == 1.0})
    return rows


def write_report(output_dir: str | Path, report: dict, checkpoint: str | Path) -> Path:
    """eval_report.json, last and atomically, naming the checkpoint it describes (04 refuses it for another one);
    the end of 03's run: its output_dir lock is released."""
    path = Path(output_dir) / MARKERS["eval"]
    try:
        atomic.write_json(path, {**report, "checkpoint": reports.identity(checkpoint), "written_by": "03_eval"})
    finally:
        runlock.release(output_dir)
    return path
