"""Preference data in, validated pairs (or KTO rows) rendered with the model's chat template out; nothing lost silently.

Shapes read (JSONL/JSON/CSV/Parquet ... through `readers`, so every record keeps its file and line):
- pairs as strings: {"prompt": "...", "chosen": "...", "rejected": "..."};
- pairs as message lists (UltraFeedback-binarized, trl's conversational shape): "chosen" and "rejected" are whole
  conversations (or only the answer turns, with "prompt" a message list or a string); the shared turns are the prompt;
- Anthropic HH transcripts: "chosen" and "rejected" are "\\n\\nHuman: ... \\n\\nAssistant: ..." strings; everything up
  to the last "\\n\\nAssistant:" is the prompt, and it must be the same in both;
- unpaired KTO rows: {"prompt", "completion", "label"} (label true for a desirable completion).

Every record read ends up in one place: kept, quarantined (source, line, reason in quarantine.jsonl) or counted as a
duplicate: records == kept + quarantined + duplicates. Each row is rendered as 01 rendered SFT data: the prompt with
the generation prompt, each answer through its end-of-turn token (`chatformat.target_spans`).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

from nbutils.data import chatformat, readers, records, splits

HH_TURN = re.compile(r"\n\n(Human|Assistant):")
SHAPES = ("pairs", "messages", "hh", "kto")


class PreferenceDataError(ValueError):
    """Nothing usable was read, or a file holds no shape this reader knows; the message says what to fix."""


@dataclass
class Ledger:
    """Where every record read ends up; `counts` add up: records == kept + quarantined + duplicates."""

    quarantine: list[dict] = field(default_factory=list)
    counts: dict = field(default_factory=lambda: {"records": 0, "kept": 0, "quarantined": 0, "duplicates": 0})
    shapes: dict = field(default_factory=dict)

    def bad(self, source: str, line: int, reason: str) -> None:
        self.quarantine.append({"source": source, "line": line, "reason": reason})
        self.counts["quarantined"] += 1

    def reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for q in self.quarantine:
            rid = q["reason"].split(":")[0]
            out[rid] = out.get(rid, 0) + 1
        return dict(sorted(out.items()))


def shape_of(rec: dict) -> str:
    """Which shape a record has (its keys and value types decide); raises ValueError for none."""
    keys = {str(k).lower() for k in rec}
    if {"completion", "label"} <= keys:
        return "kto"
    if not {"chosen", "rejected"} <= keys:
        raise ValueError(f"unrecognised-record: keys {', '.join(sorted(keys))[:80]} (want prompt/chosen/rejected, "
                         "chosen/rejected transcripts, or prompt/completion/label)")
    chosen = rec.get("chosen")
    if isinstance(chosen, list):
        return "messages"
    if "prompt" not in keys and isinstance(chosen, str) and HH_TURN.search(chosen):
        return "hh"
    return "pairs"


def _hh_split(transcript, side: str) -> tuple[list[dict], str]:
    """An HH transcript as (prompt messages, last assistant answer)."""
    if not isinstance(transcript, str):
        raise ValueError(f"wrong-type: {side} is {type(transcript).__name__}")
    parts = HH_TURN.split("\n\n" + transcript.lstrip("\n") if not transcript.startswith("\n\n") else transcript)
    turns = [{"role": "user" if r == "Human" else "assistant", "content": t.strip()}
             for r, t in zip(parts[1::2], parts[2::2])]
    if not turns or turns[-1]["role"] != "assistant":
        raise ValueError(f"no-assistant-turn: {side} does not end with an Assistant turn")
    if any(not t["content"] for t in turns[:-1]):
        raise ValueError(f"empty-field: a turn of {side}'s prompt is empty")
    return turns[:-1], turns[-1]["content"]


def _conversation(value, side: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    return records._turns(value, "role", "content") if value else []  # noqa: SLF001 -- one turn validator


def _messages_split(rec: dict) -> tuple[list[dict], str, str]:
    """UltraFeedback / trl conversational pairs: the shared turns are the prompt, the last turns the answers."""
    chosen, rejected = _conversation(rec["chosen"], "chosen"), _conversation(rec["rejected"], "rejected")
    if not chosen or not rejected:
        raise ValueError(f"empty-field: {'chosen' if not chosen else 'rejected'}")
    prompt = rec.get("prompt")
    given = [{"role": "user", "content": prompt.strip()}] if isinstance(prompt, str) else \
        [{"role": m.get("role"), "content": m.get("content")} for m in prompt] if isinstance(prompt, list) else None
    c_prompt, r_prompt = chosen[:-1], rejected[:-1]
    if c_prompt != r_prompt:
        raise ValueError("prompt-mismatch: chosen and rejected do not share the turns before their answers")
    if not c_prompt:
        c_prompt = given or []
    elif given and [m["content"] for m in given if m["role"] == "user"][-1:] != \
            [m["content"] for m in c_prompt if m["role"] == "user"][-1:]:
        raise ValueError("prompt-mismatch: the prompt field is not the conversation's last user turn")
    if not c_prompt:
        raise ValueError("missing-field: prompt")
    return c_prompt, chosen[-1]["content"], rejected[-1]["content"]


def _side(value, name: str) -> str:
    if value is None:
        raise ValueError(f"missing-field: {name}")
    if not isinstance(value, str):
        raise ValueError(f"wrong-type: {name} is {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"empty-field: {name}")
    return value.strip()


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
    raises ValueError("<reason-id>: <detail>") for the quarantine."""
    rec = {str(k).strip().lower(): v for k, v in rec.items()}
    shape = shape_of(rec)
    if shape == "kto":
        prompt = rec.get("prompt")
        msgs = _conversation(prompt, "prompt") if isinstance(prompt, list) else \
            [{"role": "user", "content": _side(prompt, "prompt")}]
        return {"shape": shape, "prompt": msgs, "completion": _side(rec["completion"], "completion"),
                "label": _label(rec["label"])}
    if shape == "hh":
        (p1, chosen), (p2, rejected) = _hh_split(rec["chosen"], "chosen"), _hh_split(rec["rejected"], "rejected")
        if p1 != p2:
            raise ValueError("prompt-mismatch: the chosen and rejected transcripts differ before their last answer")
        prompt = p1
    elif shape == "messages":
        prompt, chosen, rejected = _messages_split(rec)
    else:
        prompt = [{"role": "user", "content": _side(rec.get("prompt"), "prompt")}]
        chosen, rejected = rec["chosen"], rec["rejected"]
    chosen, rejected = _side(chosen, "chosen"), _side(rejected, "rejected")
    if " ".join(chosen.split()) == " ".join(rejected.split()):
        raise ValueError("identical-sides: chosen and rejected are the same text")
    return {"shape": shape, "prompt": prompt, "chosen": chosen, "rejected": rejected}


def render(tokenizer, prompt: list[dict], answer: str) -> tuple[str, str]:
    """(prompt text, answer text) exactly as 01 rendered SFT data: the template's generation prompt, then the answer
    through its end-of-turn token."""
    template, _ = splits.template_for(tokenizer)
    draw = splits.renderer(tokenizer, template)
    msgs, _ = chatformat.normalize_roles([*prompt, {"role": "assistant", "content": answer}],
                                         chatformat.role_rules(draw))
    text, spans = chatformat.target_spans(draw, msgs, chatformat.end_of_turn(tokenizer))
    start, end = spans[-1]
    return text[:start], text[start:end]


def _rendered(row: dict, tokenizer, max_tokens: int) -> dict:
    """The trl row (prompt / chosen / rejected, or prompt / completion / label) as text; too-long sides raise."""
    sides = ("chosen", "rejected") if "chosen" in row else ("completion",)
    out, prompt_text = {}, None
    for side in sides:
        prompt_text, answer = render(tokenizer, row["prompt"], row[side])
        n = len(tokenizer(prompt_text + answer, add_special_tokens=False)["input_ids"])
        if n > max_tokens:
            raise ValueError(f"too-long: prompt + {side} is {n} tokens, over the limit of {max_tokens}")
        out[side] = answer
    out["prompt"] = prompt_text
    if "label" in row:
        out["label"] = row["label"]
    return out


def read(paths: list[str], tokenizer, max_tokens: int, *, fmt: str = "auto", max_records: int | None = None,
         ledger: Ledger | None = None) -> tuple[list[dict], Ledger]:
    """Every record of every input: rendered rows kept, the rest in the ledger; raises PreferenceDataError when
    nothing is usable, naming the most common reasons. max_records: the records this call reads (a shared
    ledger's count goes on from the calls before)."""
    ledger, rows, seen = ledger or Ledger(), [], set()
    first = ledger.counts["records"]
    for path in paths:
        for source, line, rec in readers.read(path, readers.sniff(path) if fmt == "auto" else fmt):
            if max_records and ledger.counts["records"] - first >= max_records:
                break
            ledger.counts["records"] += 1
            try:
                if isinstance(rec, readers.Bad):
                    raise ValueError(rec.reason)
                row = normalize(rec)
                key = json.dumps(row, sort_keys=True)
                if key in seen:
                    ledger.counts["duplicates"] += 1
                    continue
                seen.add(key)
                ledger.shapes[row["shape"]] = ledger.shapes.get(row["shape"], 0) + 1
                rows.append({**_rendered(row, tokenizer, max_tokens), "source": source, "line": line})
            except ValueError as e:
                ledger.bad(source, line, str(e))
    ledger.counts["kept"] = len(rows)
    if not rows:
        top = ", ".join(f"{k} x{v}" for k, v in sorted(ledger.reasons().items(), key=lambda kv: -kv[1])[:3])
        first = ledger.quarantine[0] if ledger.quarantine else None
        where = f"; the first: {first['source']} line {first['line']}: {first['reason']}" if first else ""
        raise PreferenceDataError(
            f"no usable preference record in {', '.join(map(str, paths))}: {ledger.counts['records']} read, "
            f"{ledger.counts['quarantined']} quarantined ({top or 'none'}){where}. Each record needs prompt/chosen/"
            "rejected, chosen/rejected conversations or HH transcripts, or prompt/completion/label for KTO.")
    return rows, ledger


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
