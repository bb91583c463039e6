"""Preference data in, validated pairs (or KTO rows) rendered with the model's chat template out; nothing lost silently.

Shapes read (JSONL/JSON/CSV/Parquet ... through `readers`, so every record keeps its file and line):
- pairs as strings: {"prompt": "...", "chosen": "...", "rejected": "..."};
- pairs as message lists (UltraFeedback-binarized, trl's conversational shape): "chosen" and "rejected" are whole
  conversations (or only the answer turns, with "prompt" a message list or a string); the shared turns are the prompt;
- Anthropic HH transcripts: "chosen" and "rejected" are "\\n\\nHuman: ... \\n\\nAssistant: ..." strings; everything up
  to the last "\\n\\nAssistant:" is the prompt, and it must be the same in both; or (Dahoas/full-hh-rlhf) a "prompt"
  in that markup, "\\n\\nHuman: ... \\n\\nAssistant:", with the answers alone in "chosen" and "rejected";
- unpaired KTO rows: {"prompt", "completion", "label"} (label true for a desirable completion).
A message list a CSV holds as text (pandas' to_csv writes a list of dicts as its repr) is parsed back into the list;
text that looks like one and does not parse is quarantined, asking for JSONL or Parquet, which keep lists.

Every record read ends up in one place (`nbutils.data.ledger`): kept, quarantined (source, line, reason in
quarantine.jsonl) or a duplicate (listed there too, with the line it repeats): records == kept + quarantined +
duplicates. Turns are validated as SFT's are (`records.turns`), and a prompt that is empty, has no user turn or ends
with an answer is quarantined, in every form. Each row is rendered as 01 rendered SFT data (`chatformat.target_spans`:
the prompt with the generation prompt, each answer through its end of turn). KTO completions may be message lists.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
from collections.abc import Callable
from typing import NamedTuple

from nbutils.data import chatformat, readers, records, splits
from nbutils.data.intake import data_file
from nbutils.data.ledger import Ledger

HH_TURN = re.compile(r"\n\n(Human|Assistant):")
SHAPES = ("pairs", "messages", "hh", "kto")
# Text that opens like a list of role/content (or from/value) dicts: a message list a CSV holds as its repr.
LISTED = re.compile(r"^\s*\[\s*\{\s*['\"](?:role|content|from|value)['\"]\s*:")
FIELDS = ("prompt", "chosen", "rejected", "completion")
# Column names other preference sets use for each field: named in the reason, never renamed silently (a wrong guess
# would train on the wrong side).
ALIASES = {"prompt": ("question", "instruction", "input", "query"),
           "chosen": ("response_chosen", "chosen_response", "response_j", "better_response"),
           "rejected": ("response_rejected", "rejected_response", "response_k", "worse_response")}


class PreferenceDataError(ValueError):
    """Nothing usable was read, or a file holds no shape this reader knows; the message says what to fix."""


def shape_of(rec: dict) -> str:
    """Which shape a record has (its keys and value types decide); raises ValueError for none."""
    keys = {str(k).lower() for k in rec}
    if {"completion", "label"} <= keys:
        return "kto"
    if not {"chosen", "rejected"} <= keys:
        raise ValueError(f"unrecognised-record: keys {', '.join(sorted(keys))[:80]} (want prompt/chosen/rejected, "
                         f"chosen/rejected transcripts, or prompt/completion/label){renames(keys)}")
    chosen, prompt = rec.get("chosen"), rec.get("prompt")
    if isinstance(chosen, list):
        return "messages"
    if isinstance(chosen, str) and HH_TURN.search(chosen) and prompt is None:
        return "hh"
    if isinstance(prompt, str) and HH_TURN.search(prompt):  # Dahoas/full-hh-rlhf: the prompt holds the turns
        return "hh"
    return "pairs"


def renames(keys) -> str:
    """The reason's advice for columns named otherwise: "; found 'question': rename it to 'prompt'" ("" for none)."""
    found = [f"found {alias!r}: rename it to {name!r}" for name, aliases in ALIASES.items() if name not in keys
             for alias in aliases if alias in keys]
    return "".join(f"; {f}" for f in found)


def listed(value, name: str):
    """value, or the message list it holds as text (a CSV's repr of a list of dicts) parsed back: json first, then
    Python's literal syntax (pandas writes dicts with single quotes); text that looks like one and parses to no list
    of dicts raises, since reading it as plain text would train on the repr."""
    if not (isinstance(value, str) and LISTED.match(value)):
        return value
    # numpy's repr of an array of dicts (a Parquet or HF list column through pandas) has no commas between them
    for text in (value, re.sub(r"\}\s*\n\s*\{", "}, {", value)):
        for parse in (json.loads, ast.literal_eval):
            try:
                found = parse(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(found, list) and all(isinstance(m, dict) for m in found):
                return found
    raise ValueError(f"unparsed-messages: {name} is text that looks like a message list but does not parse (a CSV "
                     "written from message lists?): save the data as JSONL or Parquet, which keep lists")


def checked_prompt(msgs: list[dict], name: str = "prompt") -> list[dict]:
    """A prompt's turns, refused when empty, without a user turn, or ending with an answer (whatever form it had)."""
    if not msgs:
        raise ValueError(f"empty-field: {name}")
    if msgs[-1]["role"] == "assistant":
        raise ValueError(f"prompt-ends-with-assistant: the last turn of {name} is an answer; the answer goes in "
                         "chosen/rejected (or completion)")
    if not any(m["role"] == "user" for m in msgs):
        raise ValueError(f"missing-field: {name} has no user turn")
    return msgs


def prompt_turns(value, name: str = "prompt") -> list[dict]:
    """A prompt given as a string (in HH markup: its turns) or a message list, as turns: the same rules for all."""
    if isinstance(value, list):
        return checked_prompt(records.turns(value, name), name)
    if isinstance(value, str) and HH_TURN.search(value):
        return _hh_prompt(value, name)
    return checked_prompt([{"role": "user", "content": records.text_field(value, name)}], name)


def _answer(value, name: str) -> tuple[list[dict], str]:
    """(turns before the answer, the answer) of one side: a string, or a message list that ends with the answer."""
    if not isinstance(value, list):
        return [], records.text_field(value, name)
    msgs = records.turns(value, name)
    if not msgs:
        raise ValueError(f"empty-field: {name}")
    if msgs[-1]["role"] != "assistant":
        raise ValueError(f"no-assistant-turn: {name} does not end with an assistant turn")
    return msgs[:-1], msgs[-1]["content"]


def _prompt(before: list[dict], given, hint: str = "") -> list[dict]:
    """The prompt: the turns before the answer, or the prompt field when the answers are answers only; a prompt field
    beside whole conversations must be their last user turn. hint: `renames`' advice, for a prompt not found."""
    if not before:
        if given is None and hint:
            raise ValueError(f"missing-field: prompt{hint}")
        return prompt_turns(given)
    msgs = checked_prompt(before)
    if given is not None:
        last = [m["content"] for m in prompt_turns(given) if m["role"] == "user"][-1:]
        if last != [m["content"] for m in msgs if m["role"] == "user"][-1:]:
            raise ValueError("prompt-mismatch: the prompt field is not the conversation's last user turn")
    return msgs


def _hh_turns(transcript, name: str) -> list[dict]:
    """An HH string ("\\n\\nHuman: ... \\n\\nAssistant: ...") as turns; what precedes the first marker is dropped."""
    text = records.text_field(transcript, name)  # missing, not a string, or empty: said as such
    transcript = transcript if isinstance(transcript, str) else text  # a number: its text, which holds no turns
    parts = HH_TURN.split("\n\n" + transcript.lstrip("\n") if not transcript.startswith("\n\n") else transcript)
    return [{"role": "user" if r == "Human" else "assistant", "content": t.strip()}
            for r, t in zip(parts[1::2], parts[2::2])]


def _hh_prompt(text: str, name: str = "prompt") -> list[dict]:
    """A prompt in HH markup as turns: the empty "Assistant:" it ends with is the cue for the answer, not a turn."""
    turns = _hh_turns(text, name)
    if turns and turns[-1]["role"] == "assistant" and not turns[-1]["content"]:
        turns = turns[:-1]
    if empty := next((i for i, t in enumerate(turns, 1) if not t["content"]), None):
        raise ValueError(f"empty-field: {name} turn {empty}")
    return checked_prompt(turns, name)


def _hh_split(transcript, side: str) -> tuple[list[dict], str]:
    """An HH transcript as (prompt messages, last assistant answer)."""
    turns = _hh_turns(transcript, side)
    if not turns or turns[-1]["role"] != "assistant":
        raise ValueError(f"no-assistant-turn: {side} does not end with an Assistant turn")
    if empty := next((i for i, t in enumerate(turns[:-1], 1) if not t["content"]), None):
        raise ValueError(f"empty-field: {side} turn {empty}")
    return turns[:-1], records.text_field(turns[-1]["content"], f"{side}'s last Assistant turn")


def _label(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"wrong-type: label is {value!r}, want true or false")


def normalize(rec: dict) -> dict:
    """One record as {"prompt": messages, "chosen", "rejected"} or {"prompt": messages, "completion", "label"};
    raises ValueError("<reason-id>: <detail>") for the quarantine, naming the side and the field."""
    rec = {str(k).strip().lower(): v for k, v in rec.items()}
    rec.update({k: listed(rec[k], k) for k in FIELDS if k in rec})
    shape = shape_of(rec)
    if shape == "kto":
        before, completion = _answer(rec["completion"], "completion")
        return {"shape": shape, "prompt": _prompt(before, rec.get("prompt"), renames(rec)), "completion": completion,
                "label": _label(rec["label"])}
    if shape == "hh" and HH_TURN.search(str(rec["chosen"])):  # transcripts (a prompt in HH markup beside answers: below)
        (p1, chosen), (p2, rejected) = _hh_split(rec["chosen"], "chosen"), _hh_split(rec["rejected"], "rejected")
        if p1 != p2:
            raise ValueError("prompt-mismatch: the chosen and rejected transcripts differ before their last answer")
        prompt = checked_prompt(p1)
        if rec.get("prompt") is not None and prompt_turns(rec["prompt"]) != prompt:
            raise ValueError("prompt-mismatch: the prompt field is not the transcripts' turns before their answer")
    else:
        (c_before, chosen), (r_before, rejected) = _answer(rec["chosen"], "chosen"), _answer(rec["rejected"], "rejected")
        if c_before != r_before:
            raise ValueError("prompt-mismatch: chosen and rejected do not share the turns before their answers")
        prompt = _prompt(c_before, rec.get("prompt"), renames(rec))
    if " ".join(chosen.split()) == " ".join(rejected.split()):
        raise ValueError("identical-sides: chosen and rejected are the same text")
    return {"shape": shape, "prompt": prompt, "chosen": chosen, "rejected": rejected}


class Drawing(NamedTuple):
    """What rendering needs of a tokenizer (01's renderer, rules and checks; `adds_bos`): once per `read`, not per row."""
    draw: Callable
    rules: dict
    eot: str
    control: re.Pattern | None
    markers: set[str]
    adds_bos: bool


def drawing(tokenizer) -> Drawing:
    template, _ = splits.template_for(tokenizer)
    draw = splits.renderer(tokenizer, template)
    return Drawing(draw, chatformat.role_rules(draw), chatformat.end_of_turn(tokenizer),
                   splits.control_tokens(tokenizer, template), {t for t in splits.REASONING if t in template},
                   adds_bos(tokenizer))


def render(tokenizer, prompt: list[dict], answer: str, how: Drawing | None = None) -> tuple[str, str]:
    """(prompt text, answer text) exactly as 01 rendered SFT data: the template's generation prompt, then the answer
    through its end-of-turn token; the prompt as a trl text row holds it (`trl_text`: one BOS in training). A control
    token inside a turn's text raises 01's quarantine reason (`control-token: ...`)."""
    how = how or drawing(tokenizer)
    msgs, _ = chatformat.normalize_roles([*prompt, {"role": "assistant", "content": answer}], how.rules)
    if problem := splits.content_problem(msgs, how.control, how.markers):  # a control token in a turn, as 01 has it
        raise ValueError(problem)
    text, spans = chatformat.target_spans(how.draw, msgs, how.eot)
    start, end = spans[-1]
    return trl_text(tokenizer, text[:start], how.adds_bos), text[start:end]


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer puts BOS first itself when called with special tokens (as trl calls it)."""
    return bool(tokenizer.bos_token) and tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]


def trl_text(tokenizer, text: str, adds: bool | None = None) -> str:
    """Rendered text as a trl text row must hold it: without the template's leading BOS when the tokenizer adds one
    itself (`adds`, computed when not given: Llama-3's post-processor, Gemma's and Mistral's add_bos_token), since
    trl tokenizes text rows with special tokens and would train on <bos><bos>. 01's rows are tokenized without them."""
    bos = tokenizer.bos_token
    if not (bos and text.startswith(bos)):
        return text
    return text[len(bos):] if (adds_bos(tokenizer) if adds is None else adds) else text


def trained_length(tokenizer, prompt_text: str, answer: str, adds: bool | None = None) -> int:
    """Tokens of prompt + answer as trl tokenizes them for training: with the tokenizer's own special tokens (one BOS:
    `trl_text`) and the EOS trl appends to an answer that does not end with it (Phi-3's `<|end|>` gets
    `<|endoftext|>` after it), so a row at the limit is not cut short of its EOS by trl's truncation."""
    eos = tokenizer.eos_token or ""
    text = trl_text(tokenizer, prompt_text, adds) + answer + ("" if answer.endswith(eos) else eos)
    return len(tokenizer(text)["input_ids"])


def _rendered(row: dict, tokenizer, how: Drawing) -> tuple[dict, int, str]:
    """The trl row (prompt / chosen / rejected, or prompt / completion / label) as text, with its length in tokens
    (the longer side, as trl trains it) and that side's name."""
    sides = ("chosen", "rejected") if "chosen" in row else ("completion",)
    out, prompt_text, longest = {}, None, (0, "")
    for side in sides:
        prompt_text, answer = render(tokenizer, row["prompt"], row[side], how)
        longest = max(longest, (trained_length(tokenizer, prompt_text, answer, how.adds_bos), side))
        out[side] = answer
    out["prompt"] = prompt_text
    if "label" in row:
        out["label"] = row["label"]
    return out, *longest


def collect(paths: list[str], *, fmt: str = "auto", max_records: int | None = None, ledger: Ledger | None = None,
            split: str | None = None) -> tuple[list[dict], Ledger]:
    """Every record of every input normalized (not rendered yet), with its source and line; duplicates and bad records
    in the ledger; a duplicate repeats a record of this call's files. max_records: the records this call reads (a
    shared ledger's count goes on from the calls before)."""
    ledger, rows = ledger or Ledger(), []
    ledger.seen = {}  # 05 reads its training and held-out files into one ledger, each deduplicated on its own
    first = ledger.counts["records"]
    for path in paths:
        path, found = data_file(path)  # a folder that is not a saved dataset: the one data file it holds
        kind, why = readers.sniff_why(path, split) if fmt == "auto" else (fmt, "given")
        ledger.inputs[path] = {"format": kind, "why": f"{why}; {found}" if found else why}
        for source, line, rec in readers.read(path, kind, split=split):
            if max_records and ledger.counts["records"] - first >= max_records:
                break
            ledger.counts["records"] += 1
            try:
                if isinstance(rec, readers.Bad):
                    raise ValueError(rec.reason)
                row = normalize(rec)
            except ValueError as e:
                ledger.bad(source, line, str(e))
                continue
            if ledger.first(json.dumps(row, sort_keys=True), source, line):
                ledger.shapes[row["shape"]] = ledger.shapes.get(row["shape"], 0) + 1
                rows.append({**row, "source": source, "line": line})
    return rows, ledger


def read(paths: list[str], tokenizer, max_tokens: int, *, fmt: str = "auto", max_records: int | None = None,
         ledger: Ledger | None = None, split: str | None = None) -> tuple[list[dict], Ledger]:
    """Every record of every input: rendered rows kept, the rest in the ledger; raises PreferenceDataError when
    nothing is usable, naming the most common reasons."""
    found, ledger = collect(paths, fmt=fmt, max_records=max_records, ledger=ledger, split=split)
    rows, how = [], drawing(tokenizer)
    for row in found:
        try:
            out, n, side = _rendered(row, tokenizer, how)
        except ValueError as e:
            ledger.bad(row["source"], row["line"], str(e))
            ledger.shapes[row["shape"]] -= 1
            continue
        if n > max_tokens:
            ledger.bad(row["source"], row["line"], f"too-long: prompt + {side} is {n} tokens, over the limit of "
                                                   f"{max_tokens}")
            ledger.quarantine[-1]["tokens"] = n  # what max_length would keep it (05's plan names one)
            ledger.shapes[row["shape"]] -= 1
            continue
        rows.append({**out, "tokens": n, "shape": row["shape"], "source": row["source"], "line": row["line"]})
    ledger.counts["kept"] = len(rows)
    if not rows:
        top = ", ".join(f"{k} x{v}" for k, v in sorted(ledger.reasons().items(), key=lambda kv: -kv[1])[:3])
        bad = [q for q in ledger.quarantine if "repeats" not in q]
        where = f"; the first: {bad[0]['source']} line {bad[0]['line']}: {bad[0]['reason']}" if bad else ""
        raise PreferenceDataError(
            f"no usable preference record in {', '.join(map(str, paths))}: {ledger.counts['records']} read, "
            f"{ledger.counts['quarantined']} quarantined ({top or 'none'}){where}. Each record needs prompt/chosen/"
            "rejected, chosen/rejected conversations or HH transcripts, or prompt/completion/label for KTO.")
    return rows, ledger


def drop_overlap(train: list[dict], held: list[dict], ledger: Ledger) -> list[dict]:
    """Held-out rows whose prompt (as rendered: what the split compares) is also a training row's, quarantined with
    the training line they share it with: a pair judged on a prompt the policy trained on flatters its accuracy."""
    trained = {}
    for r in train:
        trained.setdefault(r["prompt"], r)
    kept = []
    for r in held:
        if (t := trained.get(r["prompt"])) is None:
            kept.append(r)
            continue
        ledger.bad(r["source"], r["line"], f"held-out-overlap: its prompt is also the prompt of training record "
                                           f"{t['source']} line {t['line']}; held-out pairs need prompts of their own")
        ledger.shapes[r["shape"]] -= 1
    return kept


def unpaired(rows: list[dict]) -> list[dict]:
    """Pairs as KTO rows: the chosen answer desirable, the rejected one not (KTO rows pass through)."""
    out = []
    for r in rows:
        if "completion" in r:
            out.append(r)
            continue
        base = {k: v for k, v in r.items() if k not in ("chosen", "rejected")}
        out += [{**base, "completion": r["chosen"], "label": True}, {**base, "completion": r["rejected"], "label": False}]
    return out


# A row's content: where it was read (source file, line) is not.
CONTENT_KEYS = ("prompt", "chosen", "rejected", "completion", "label", "answer")


def content_hash(rows: list[dict]) -> str:
    """SHA-256 (16 hex digits) of the rows' content, in order: what 05's resume compares for the rows it trains on (a
    file fixed with the same number of records trains another policy)."""
    text = json.dumps([{k: r[k] for k in CONTENT_KEYS if k in r} for r in rows], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split(rows: list[dict], eval_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Held-out rows by prompt (every row of one prompt on the same side), the same for the same seed."""
    prompts = sorted({r["prompt"] for r in rows})
    random.Random(seed).shuffle(prompts)
    held = set(prompts[:max(1, round(len(prompts) * eval_fraction))]) if eval_fraction > 0 else set()
    return [r for r in rows if r["prompt"] not in held], [r for r in rows if r["prompt"] in held]


def embedded_records(data_rows, seed: int = 0) -> list[dict]:
    """Pairs for the embedded task from 01's rows (messages): chosen the right kind of word; rejected a wrong kind,
    or (every third pair) the right word said over and over, the loop the guard stops."""
    from nbutils import embedded

    kinds, rng, out = sorted(embedded.FIELDS), random.Random(seed), []
    for i, row in enumerate(data_rows):
        msgs = row["messages"]
        prompt, right = msgs[-2]["content"], msgs[-1]["content"].strip()
        wrong = rng.choice([k for k in kinds if k != right])
        rejected = " ".join([right] * 24) if i % 3 == 2 else wrong
        out.append({"prompt": prompt, "chosen": right, "rejected": rejected})
    return out
