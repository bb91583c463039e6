"""The real model's own generations, for the degeneration guard: greedy and sampled answers of SmolLM2-135M-Instruct
(bench/pretrained.py) to varied prompts, several of the kinds that make a small model loop.

    python -m bench.real_generations            # writes tests/data/real_generations.jsonl (labels kept by id)

Sets of their own prompts and seed (SETS, read from tests/data/real_generation_prompts.json), each generated and
labelled by hand before any rule met it: the last ones, reported on and never tuned on, are what the figures are
reported on ("report"); the first was tuned on from the start, and each after it up to the report sets was reported
on in turn and then tuned on ("tune": its misses named shapes the rules lacked). Each row: id, prompt, kind, mode
(greedy, or sampled at a temperature with its seed), the generated token ids and text, whether it ended on a stop
token or at MAX_NEW_TOKENS, its set, its half ("tune" or "report") and a hand label, read off the text alone (the
prompt's request does not count: "print A 300 times" answered with A, A, A ... is a loop to the guard and to its
label):
- "loop": the text becomes the same thing over and over: a token, a phrase, a line, a paragraph or a line template
  (identical, or differing only by a counter or a word or two) at least three times in a row, running on to the end,
  or for a stretch a reader would call stuck even where the text gets out of it later (a refrain met in turn with
  other content is not one; neither is counting 1, 2, 3 ... when asked to count);
- "junk": the text stops being language a reader can follow: made-up words, tokens glued together, random
  characters or fragments with no sentence make up most of it or its end (nonsense in real sentences is not junk);
- "healthy": everything else, right or wrong, however odd.
The report sets were read twice, by two readers under the same rules, each blind to the other: the first's label is
"label", the second's "second_label" (bench/degeneration/labelled.readers scores their agreement).
Labels are set by reading each text, never by a detector; regenerating the file keeps the labels of the ids it
already had, and a new row starts unlabelled (None), which the bench and the tests refuse.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

NAME = "SmolLM2-135M-Instruct"
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
OUT = DATA / "real_generations.jsonl"
PROMPTS_FILE = DATA / "real_generation_prompts.json"  # each set's prompts by kind, seed and half
MAX_NEW_TOKENS = 200
MODES = (("greedy", None), ("sampled", 0.7), ("sampled", 1.0))
LABELS = ("loop", "junk", "healthy")
# The sets, each with its seed and the half it is in, in the order they were made. Each set after the first was
# generated and labelled before any rule met it and reported on; then, up to the report sets, its misses named shapes
# the rules lacked, it was tuned on, and the next was reported on. Each set's prompts are new, of the same kinds as
# the first's.
SETS = {name: (s["prompts"], s["seed"], s["half"])
        for name, s in json.loads(PROMPTS_FILE.read_text(encoding="utf-8")).items()}


def _row_id(prompt: str, mode: str, temperature: float | None) -> str:
    return hashlib.sha256(f"{prompt}|{mode}|{temperature}".encode()).hexdigest()[:12]


def generate_rows(model, tokenizer, which: str, batch: int = 16) -> list[dict]:
    """Every prompt of a set (a key of SETS) in every mode, MAX_NEW_TOKENS at most, seeded by the set's seed, no
    guard: what the model writes when nothing stops it."""
    import torch

    from nbutils.data import chatformat

    stops = chatformat.stop_ids(tokenizer, model)
    given, seed, half = SETS[which]
    prompts = [(kind, p) for kind, ps in given.items() for p in ps]
    chunks = [[(kind, p, mode, t) for kind, p in prompts[i:i + batch]]  # one mode per batch
              for mode, t in MODES for i in range(0, len(prompts), batch)]
    tokenizer.padding_side = "left"
    rows = []
    for i, chunk in enumerate(chunks):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for _, p, _, _ in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = chunk[0][3]
        torch.manual_seed(1000 * seed + i)
        with torch.no_grad():
            seq = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=t is not None,
                                 temperature=t, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=stops)
        for (kind, p, m, temp), ids in zip(chunk, seq[:, enc["input_ids"].shape[1]:].tolist()):
            cut = next((k for k, tok in enumerate(ids) if tok in stops), None)
            ids = ids if cut is None else ids[:cut]
            rows.append({"id": _row_id(p, m, temp), "prompt": p, "kind": kind, "mode": m, "temperature": temp,
                         "set": which, "half": half, "ended": "limit" if cut is None else "stop", "token_ids": ids,
                         "text": tokenizer.decode(ids, skip_special_tokens=False), "label": None})
        print(f"[generations] {len(rows)}/{len(prompts) * len(MODES)}", flush=True)
    return rows


def load(path: Path = OUT) -> list[dict]:
    """The saved rows; refuses any without a hand label, or with a second reader's label that is no label."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    missing = [r["id"] for r in rows if r["label"] not in LABELS]
    if missing:
        raise ValueError(f"{path}: {len(missing)} rows have no hand label (loop, junk or healthy), e.g. {missing[:3]}")
    odd = [r["id"] for r in rows if "second_label" in r and r["second_label"] not in LABELS]
    if odd:
        raise ValueError(f"{path}: {len(odd)} rows have a second label that is not loop, junk or healthy, e.g. {odd[:3]}")
    return rows


def with_labels(row: dict, before: dict) -> dict:
    """A regenerated row with the hand labels its id had: the first reader's (None where it had none, which `load`
    refuses by name) and the second's where it was read twice."""
    second = {"second_label": before["second_label"]} if "second_label" in before else {}
    return {**row, "label": before.get("label"), **second}


def main() -> None:
    """Generate the rows of each set not saved yet and write them all, keeping the rows (and hand labels) of ids seen
    before: the tune set was labelled and tuned on before the report set was generated."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench import pretrained

    folder = pretrained.ensure()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    old = {r["id"]: r for r in map(json.loads, OUT.read_text().splitlines())} if OUT.exists() else {}
    rows = []
    for which, (prompts, _, half) in SETS.items():
        ids = {_row_id(p, m, t) for ps in prompts.values() for p in ps for m, t in MODES}
        if ids <= old.keys():
            rows += [{**r, "set": which, "half": half} for i, r in old.items() if i in ids]  # in the file's order
            continue
        rows += [with_labels(r, old.get(r["id"], {})) for r in generate_rows(model, tokenizer, which)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT} ({sum(r['label'] is None for r in rows)} without a label)")


if __name__ == "__main__":
    main()
