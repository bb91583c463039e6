"""05's rows and the checks on them before anything loads: what each method trains on, held out apart from it, and
the steps and lengths the data asks for.

Pairs (DPO, ORPO) or unpaired rows (KTO) come from `nbutils.data.pairs`; GRPO's prompts and reference answers are
01's splits, each prompt measured as trl renders it (longer than max_length: quarantined, as a too-long pair is).
KTO's rows are shuffled (with `seed`): trl reads them in order and draws each row's KL completion from its neighbour
in the batch, which, unshuffled, answers the same prompt.
`preference_data="embedded"` builds pairs from 01's task (train pairs from 01's train split, held-out pairs from its
eval split) when 01 prepared the embedded task; on any other data it builds none and the plan refuses
it (a rejected answer that is a random word of the toy task would report a high accuracy that means nothing).
Held-out rows whose prompt is also a training prompt are quarantined, whichever way they were held out, so the
held-out accuracy is measured on prompts the policy never trained on.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from nbutils import defaults
from nbutils.data import pairs as prefdata
from nbutils.data import splits
from nbutils.data.ledger import Ledger
from nbutils.train import atomic

# Steps when max_steps is "auto", for a toy model (the embedded default, the twins) and every smoke run: GRPO learns
# from its own sampled rollouts, which needs more steps than the pair methods (embedded default, docs/preference.md:
# 16 steps left the held-out reward where it was, 40 raised it).
STEPS = {"dpo": 16, "orpo": 16, "kto": 16, "grpo": 40}
# A real model's "auto" is one pass over the training rows, at most this many steps: preference sets run to 60k pairs
# and more (UltraFeedback), 3,800 steps at batch 16, more than a free T4 session trains (the time budget would stop
# it part-way with no schedule finished); past a thousand steps a run is a choice to make, max_steps=N.
MAX_AUTO_STEPS = 1000
TOO_LONG_SHARE = 0.2  # more than a fifth of the records over max_length: the data wants another max_length
EMBEDDED_FILES = ("embedded_pairs.train.jsonl", "embedded_pairs.eval.jsonl")  # preference_data="embedded" only
NOT_EMBEDDED = "not built: 01's data is not the embedded task"  # counts["pairs"] when "embedded" meets other data
EXAMPLES_MODULE = "nbutils.eval.rewards"  # GRPO's example rewards, made for short answers
SHORT_ANSWER_WORDS = defaults.SHORT_ANSWER_WORDS  # their short answer: at most this many words on one line


def grpo_rows(ds) -> list[dict]:
    """01's rows as GRPO prompts (the conversation before the answer) with the reference `answer`."""
    return [{"prompt": r["messages"][:-1], "answer": r["messages"][-1]["content"]} for r in ds]


def prompt_tokens(tokenizer, prompt: list[dict]) -> int:
    """A GRPO prompt's tokens as trl's GRPOTrainer renders them (`_tokenize_prompts`): the chat template with its
    generation prompt, tokenized by apply_chat_template, which adds no special token to the template's own BOS."""
    return len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"])


def _grpo_data(data_dir: Path, out: Path, tokenizer, max_length: int, limit: dict) -> tuple[list, list, dict]:
    """01's prompts, train and held out. A prompt over max_length tokens is quarantined as too-long (source: 01's
    split folder, line: the row's index in it), as a pair over it is: trl generates after every prompt in full, and
    the memory plan counts the longest prompt kept (counts["longest_prompt"])."""
    ledger, sides, lengths = Ledger(), [], []
    for split, n in (("train", limit.get("train")), ("eval", limit.get("held_out"))):
        kept = []
        for i, row in enumerate(grpo_rows(splits.load_split(data_dir, split))[:n]):
            ledger.counts["records"] += 1
            tokens = prompt_tokens(tokenizer, row["prompt"])
            if tokens > max_length:
                ledger.bad(str(Path(data_dir) / split), i, f"too-long: the prompt is {tokens} tokens, over "
                                                           f"max_length={max_length}")
                ledger.quarantine[-1]["tokens"] = tokens  # what max_length would keep it (the plan names one)
                continue
            kept.append(row)
            lengths.append(tokens)
        sides.append(kept)
    train, held = sides
    ledger.counts["kept"] = len(train) + len(held)
    ledger.write(out, atomic.write_text)
    counts = {"prompts": len(train), "held_out_prompts": len(held), **ledger.counts,
              "longest_prompt": max(lengths, default=0)}
    counts.update({"reasons": ledger.reasons()} if ledger.quarantine else {})
    return train, held, {**counts, **_lengths(lengths, ledger)}


def embedded_task(data_dir: Path) -> bool:
    """Whether 01 prepared the embedded task alone: every input its manifest records is the embedded default's
    `task.jsonl` (nbutils.embedded.resolve_raw_data: `<cache>/embedded-v<version>/task.jsonl`, on whichever machine
    01 ran)."""
    inputs = [Path(i.get("path", "")) for i in splits.load_manifest(data_dir).get("inputs") or []]
    return bool(inputs) and all(p.name == "task.jsonl" and p.parent.name.startswith("embedded-v") for p in inputs)


def _embedded_files(data_dir: Path, out: Path, seed: int) -> tuple[list[str], list[str]]:
    """Pairs built from 01's train and eval splits, written as JSONL so they are read like a user's file."""
    files = []
    for split, name in zip(("train", "eval"), EMBEDDED_FILES):
        path = out / name
        rows = prefdata.embedded_records(splits.load_split(data_dir, split), seed=seed + (split == "eval"))
        atomic.write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
        files.append(str(path))
    return [files[0]], [files[1]]


def read_data(method: str, data_dir: Path, out: Path, tokenizer, preference_data: str, preference_eval: str,
              eval_fraction: float, seed: int, max_length: int, max_records: dict | None,
              split: str | None = None) -> tuple[list, list, dict]:
    """(train rows, held-out rows, counts): the method's rows; quarantine.jsonl written beside the plan.

    max_records: {"train": n, "held_out": n}, the records read from each side (a smoke run's SMOKE_RECORDS); split:
    of a saved HF dataset folder holding several. counts["length"]: the records over max_length, of those measured,
    and the max_length that keeps 99% of them."""
    limit = max_records or {}
    if method == "grpo":
        return _grpo_data(data_dir, out, tokenizer, max_length, limit)
    if preference_data == "embedded":
        if not embedded_task(data_dir):  # fit_problems says what to set
            return [], [], {"pairs": NOT_EMBEDDED}
        train_files, eval_files = _embedded_files(data_dir, out, seed)
    else:
        train_files = [p.strip() for p in preference_data.split(",") if p.strip()]
        eval_files = [] if defaults.is_auto(preference_eval) else [p.strip() for p in preference_eval.split(",") if p.strip()]
    ledger = Ledger()
    rows, ledger = prefdata.read(train_files, tokenizer, max_length, max_records=limit.get("train"), ledger=ledger,
                                 split=split)
    if eval_files:
        held, ledger = prefdata.read(eval_files, tokenizer, max_length, max_records=limit.get("held_out"),
                                     ledger=ledger, split=split)
        held = prefdata.drop_overlap(rows, held, ledger)  # two files: nothing else keeps a training prompt out
    else:
        rows, held = prefdata.split(rows, eval_fraction, seed)
    ledger.counts["kept"] = len(rows) + len(held)
    ledger.write(out, atomic.write_text)
    counts = {**ledger.counts, "shapes": dict(ledger.shapes),
              "inputs": {p: f"{how['format']} ({how['why']})" for p, how in ledger.inputs.items()}}
    counts.update({"reasons": ledger.reasons()} if ledger.quarantine else {})
    counts.update(_lengths([r["tokens"] for r in rows + held], ledger))
    if method == "kto":
        rows = prefdata.unpaired(rows)  # held-out rows keep their shape: pairs are ranked, KTO rows judged by label
        # trl's KTO reads its rows in order (train_sampling_strategy "sequential") and takes each row's KL completion
        # from the next row of its batch: a pair's two rows side by side would make half the "mismatched" KL pairs
        # answer the same prompt, and a file of all desirable rows first would train in one-label batches. Shuffled
        # here, the order is part of the rows' content hash (a resume compares it)
        random.Random(seed).shuffle(rows)
    return rows, held, counts


def _lengths(kept: list[int], ledger: Ledger) -> dict:
    """{"length": ...} when records were too long: how many of those rendered (kept: the kept records' lengths), and
    the max_length keeping 99%."""
    long = [q["tokens"] for q in ledger.quarantine if "tokens" in q]
    if not long:
        return {}
    lengths = kept + long
    return {"length": {"too_long": len(long), "measured": len(lengths),
                       "keeps_99_percent": defaults.max_seq_len("auto", lengths)[0]}}


def length_problems(counts: dict, max_length: int) -> list[str]:
    """More than a fifth of the records (GRPO: prompts) over max_length is a plan problem naming the max_length that
    keeps 99%: training on what is left would be training on the short end of the data."""
    length = counts.get("length")
    if not length or length["too_long"] <= TOO_LONG_SHARE * length["measured"]:
        return []
    return [f"{length['too_long']} of {length['measured']} records are longer than max_length={max_length} tokens "
            f"(quarantined as too-long): set max_length={length['keeps_99_percent']}, which keeps 99% of them (the "
            "plan then says whether it fits the GPU), or give shorter records"]


def auto_steps(method: str, value, smoke: dict | None, rows: int, batch: int, grad_accum: int,
               num_generations: int, model_config) -> tuple[int, str]:
    """(max_steps, why): smoke's, the value given, the method's own (STEPS) for a toy model, else one pass over the
    training rows (GRPO: prompts, batch x grad_accum / num_generations a step), at most MAX_AUTO_STEPS."""
    if smoke:
        return smoke["max_steps"], "smoke"
    if not defaults.is_auto(value):
        return int(value), "given"
    if defaults.body_parameters(model_config) < defaults.TINY_PARAMS:
        return STEPS[method], f"auto: {method}'s own for a toy model"
    steps = max(1, math.ceil(rows / _per_step(method, batch, grad_accum, num_generations)))
    if steps > MAX_AUTO_STEPS:
        return MAX_AUTO_STEPS, f"auto: one epoch would be {steps} steps, capped at {MAX_AUTO_STEPS}"
    return steps, "auto: one epoch"


def epochs(method: str, steps: int, rows: int, batch: int, grad_accum: int, num_generations: int) -> float:
    """The passes over the training rows that `steps` make (the plan's table prints it)."""
    return steps * _per_step(method, batch, grad_accum, num_generations) / max(1, rows)


def _per_step(method: str, batch: int, grad_accum: int, num_generations: int) -> int:
    """Training rows one optimizer step reads. GRPO's: prompts, num_generations completions each, generated for the
    whole step at once (trl's generation batch: per_device_batch_size x grad_accum completions)."""
    if method == "grpo":
        return max(1, batch * grad_accum // max(1, num_generations))
    return batch * grad_accum


def grpo_batch_problems(method: str, batch: int, grad_accum: int, num_generations: int) -> list[str]:
    """trl's rule for GRPO's batches: one optimizer step generates per_device_batch_size x grad_accum completions
    (its generation batch), which must hold whole groups of num_generations."""
    if method != "grpo" or not batch * grad_accum % num_generations:
        return []
    return [f"per_device_batch_size={batch} x grad_accum={grad_accum} = {batch * grad_accum} completions a step is "
            f"not a multiple of num_generations={num_generations}: GRPO compares the completions of one prompt within "
            "a step's generation batch; change one of the three"]


def fit_problems(method: str, train: list[dict], held: list[dict], preference_data: str, batch: int,
                 counts: dict | None = None) -> list[str]:
    """Whether the data's shape fits the method, said before anything loads: pairs for DPO and ORPO, pairs or unpaired
    rows for KTO (and batches of two or more: KTO estimates its KL term from the other rows of a batch), prompts
    with a user turn for GRPO, which samples its own answers to 01's prompts and reads no preference file; and
    preference_data="embedded" only on the embedded task (read_data builds no rows on other data: `counts` says so)."""
    found = []
    if (counts or {}).get("pairs") == NOT_EMBEDDED:
        found.append("preference_data='embedded' builds toy pairs from the embedded task (the rejected answer a random "
                     "word of that task), and 01 prepared your data: set preference_data to your pairs or KTO file(s) "
                     "(JSONL/JSON/CSV/Parquet, docs/preference.md), or method='grpo', which needs none. No pairs were "
                     "built, so 05 has no rows to train on or hold out")
        return found
    if method in ("dpo", "orpo"):
        unpaired = {side: sum("completion" in r for r in rows) for side, rows in (("train", train), ("held-out", held))}
        if any(unpaired.values()):
            where = " and ".join(f"{n} {side}" for side, n in unpaired.items() if n)
            found.append(f"the data holds unpaired KTO rows (prompt/completion/label: {where}), and {method.upper()} "
                         "trains on pairs (prompt/chosen/rejected): set method='kto' to train on them, or give pairs")
    if method == "kto" and batch < 2:
        found.append(f"per_device_batch_size={batch}: KTO estimates its KL term from the other rows of a batch; use 2 "
                     "or more")
    if method == "grpo":
        if preference_data not in ("", "embedded"):
            found.append(f"preference_data={preference_data!r}: GRPO samples its own answers to 01's prompts and reads "
                         "no preference file; leave preference_data='embedded', or choose dpo, orpo or kto for it")
        empty = sum(not any(m["role"] == "user" for m in r["prompt"]) for r in (*train, *held))
        if empty:
            found.append(f"{empty} of 01's records have no user turn before their answer (plain text): GRPO needs "
                         "prompts to answer; prepare 01 from prompt/answer records")
    return found


def completion_length(method: str, value, tokenizer, train: list[dict]) -> tuple[int, str]:
    """GRPO's max_completion_length: the value given, else 03's max_new_tokens rule over the training rows' reference
    answers (1.5x the longest, at least 16: the embedded task's one-word answers keep 16). 0 for the other methods,
    which sample nothing."""
    if method != "grpo":
        return (0, "not used: only GRPO samples completions") if defaults.is_auto(value) else (int(value), "given")
    return defaults.max_new_tokens(value, tokenizer, [r["answer"] for r in train])


def long_answer_problems(specs: str, answers: list[str]) -> list[str]:
    """A plan problem when reward_functions names only GRPO's examples (EXAMPLES_MODULE) and most reference answers
    are longer than SHORT_ANSWER_WORDS words: `correct` (exact match) then almost never fires and `well_formed` pays
    0.5 for a short line, so GRPO would learn to answer short, whatever is right. A stop, not a warning: such a run
    learns nothing wanted. Here, not in nbutils.eval.rewards: the plan (this layer) may not import up to it."""
    own = [s.strip() for s in specs.split(",") if s.strip()]
    long = sum(len(str(a).split()) > SHORT_ANSWER_WORDS for a in answers)
    if not own or any(s.partition(":")[0] != EXAMPLES_MODULE for s in own) or long * 2 <= len(answers):
        return []
    return [f"{long} of {len(answers)} ({long / len(answers):.0%}) of 01's reference answers are longer than "
            f"{SHORT_ANSWER_WORDS} words, and reward_functions names only the examples of {EXAMPLES_MODULE}, made "
            f"for short answers (correct: the exact reference answer; well_formed: 0.5 for one line of at most "
            f"{SHORT_ANSWER_WORDS} words): GRPO would learn to answer short. Write a reward for your task, "
            "def score(completions, answer, **kwargs) -> list[float] (docs/preference.md), and name it in "
            f"reward_functions as module:function, beside {EXAMPLES_MODULE}:not_degenerate"]
