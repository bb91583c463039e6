"""Raw records in, validated chat-formatted and tokenized train/eval splits out; nothing lost silently.

Every record read ends up in exactly one place: kept (train or eval), quarantined (with source,
line and reason in quarantine.jsonl), dropped as a duplicate (counted), or too long (quarantined
as too-long and counted). The manifest's counts add up:
    records == kept + quarantined + duplicates + too_long      train + eval == kept

Output folder (what 02 and 03 read):
  train/, eval/      HF datasets with columns messages, input_ids, labels, length
  manifest.json      counts, splits, template, tokenizer, token-length stats, content hash, batching plan
  quarantine.jsonl   {"source", "line", "reason"} per record kept out
  lengths.png        token-length histogram with the cut-off marked

Command line:  python -m nbutils.data prepare INPUT [INPUT ...] --out DIR [--format auto] ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

from nbutils import readers

IGNORE_INDEX = -100  # label value the loss skips (prompt tokens under completion-only training)
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant",
         "model": "assistant", "bot": "assistant", "chatgpt": "assistant"}
# Column pairs recognised in CSV/TSV/Parquet/SQL/HTML records, in order of preference.
COLUMN_PAIRS = [("instruction", "output"), ("prompt", "completion"), ("prompt", "response"),
                ("question", "answer"), ("input", "output"), ("query", "response")]
# Used when a tokenizer has no chat template (base models): plain markers, EOS after each answer.
FALLBACK_TEMPLATE = (
    "{{ bos_token or '' }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] + '\n\n' }}"
    "{% elif m['role'] == 'user' %}{{ '### User:\n' + m['content'] + '\n\n' }}"
    "{% else %}{{ '### Assistant:\n' + m['content'] + eos_token + '\n\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '### Assistant:\n' }}{% endif %}"
)


class DataError(ValueError):
    """A bad record under strict=True, or no usable record at all."""


def _text(rec: dict, key: str) -> str:
    """A required string field; raises ValueError with the quarantine reason."""
    if key not in rec or rec[key] is None:
        raise ValueError(f"missing-field: {key}")
    value = rec[key]
    if not isinstance(value, str):
        raise ValueError(f"wrong-type: {key} is {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"empty-field: {key}")
    return value.strip()


def _turns(turns, role_key: str, content_key: str) -> list[dict]:
    if not isinstance(turns, list):
        raise ValueError(f"wrong-type: conversation is {type(turns).__name__}")
    out = []
    for t in turns:
        if not isinstance(t, dict):
            raise ValueError(f"wrong-type: turn is {type(t).__name__}")
        role = t.get(role_key)
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise ValueError(f"unknown-role: {role}")
        out.append({"role": ROLES[role.lower()], "content": _text(t, content_key)})
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError("no-assistant-turn")
    return out


def to_messages(rec: dict) -> list[dict]:
    """Normalize any supported record shape to chat messages; raises ValueError(reason) if it cannot."""
    if "messages" in rec:
        msgs = rec["messages"]
        if isinstance(msgs, str):
            try:
                msgs = json.loads(msgs)  # CSV/SQL cells hold JSON text
            except json.JSONDecodeError:
                raise ValueError("malformed-json: messages") from None
        return _turns(msgs, "role", "content")
    if "conversations" in rec:
        return _turns(rec["conversations"], "from", "value")
    both = [(a, b) for a, b in COLUMN_PAIRS if a in rec and b in rec]
    some = [(a, b) for a, b in COLUMN_PAIRS if a in rec or b in rec]
    if both or (some and "text" not in rec):
        a, b = (both or some)[0]
        user = _text(rec, a)  # raises missing-field / empty-field / wrong-type
        extra = rec.get("input") if a == "instruction" else None
        if extra is not None and not isinstance(extra, str):
            raise ValueError(f"wrong-type: input is {type(extra).__name__}")
        if extra and extra.strip():
            user += "\n" + extra.strip()
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": _text(rec, b)}]
        system = rec.get("system")
        if isinstance(system, str) and system.strip():
            msgs.insert(0, {"role": "system", "content": system.strip()})
        return msgs
    if "text" in rec:
        return [{"role": "assistant", "content": _text(rec, "text")}]
    raise ValueError(f"unrecognised-record: keys {', '.join(sorted(map(str, rec)))[:80]}")


def template_for(tokenizer) -> tuple[str, str]:
    """(template, name): the tokenizer's own chat template, or our documented fallback."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.chat_template, "tokenizer"
    return FALLBACK_TEMPLATE, "fallback"


def check_tokenizer(tokenizer) -> None:
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no EOS token: the model could never learn to stop.")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise DataError("pad token == EOS token: padding would mask the EOS the model must learn. "
                        "Load the tokenizer with nbutils.modeling.load_tokenizer, which sets a distinct pad token.")


def _render(tokenizer, template: str, msgs: list[dict], **kw) -> str:
    return tokenizer.apply_chat_template(msgs, chat_template=template, tokenize=False, **kw)


def target_spans(tokenizer, template: str, msgs: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """Full text and the character spans of every assistant turn (including its EOS)."""
    text = _render(tokenizer, template, msgs)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        prefix = _render(tokenizer, template, msgs[:i], add_generation_prompt=True) if i else ""
        if not text.startswith(prefix):
            raise DataError("the chat template renders a prefix differently inside the conversation")
        end = len(text) if i == len(msgs) - 1 else len(_render(tokenizer, template, msgs[: i + 1]))
        spans.append((len(prefix), end))
    if not text.rstrip().endswith(tokenizer.eos_token):
        text += tokenizer.eos_token  # EOS must end the last target, whatever the template does
        spans[-1] = (spans[-1][0], len(text))
    return text, spans


def encode_batch(batch: dict, tokenizer, template: str, train_on_prompt: bool) -> dict:
    """Batched tokenization with completion-only labels (a datasets.map function)."""
    texts, spans = zip(*(target_spans(tokenizer, template, m) for m in batch["messages"]))
    enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    labels = []
    for ids, offsets, sp in zip(enc["input_ids"], enc["offset_mapping"], spans):
        if train_on_prompt:
            labels.append(list(ids))
            continue
        labels.append([t if any(s <= a < e for s, e in sp) else IGNORE_INDEX for t, (a, _) in zip(ids, offsets)])
    return {"input_ids": enc["input_ids"], "labels": labels, "length": [len(i) for i in enc["input_ids"]]}


def _normalized(msgs: list[dict]) -> str:
    return json.dumps([(m["role"], " ".join(m["content"].lower().split())) for m in msgs])


def _stats(lengths: list[int]) -> dict:
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    return {"min": s[0], "median": pick(0.5), "p95": pick(0.95), "max": s[-1]}


def prepare(inputs: list[str], out_dir: str | Path, tokenizer, max_seq_len: int = 256, eval_fraction: float = 0.1,
            seed: int = 0, max_records: int | None = None, train_on_prompt: bool = False, fmt: str = "auto",
            strict: bool = False, truncate: bool = False, batch_size: int = 16, verbose: bool = True) -> dict:
    """Read, validate, normalize, dedupe, tokenize and split; write the output folder; return the manifest."""
    from datasets import Dataset

    from nbutils import batching

    check_tokenizer(tokenizer)
    template, template_name = template_for(tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    quarantine, rows, seen, formats = [], [], {}, {}
    counts = {"records": 0, "kept": 0, "quarantined": 0, "duplicates": 0, "too_long": 0}

    def bad(source, line, reason, key="quarantined"):
        if strict:
            raise DataError(f"{source} line {line}: {reason} (strict=True stops at the first bad record)")
        quarantine.append({"source": source, "line": line, "reason": reason})
        counts[key] += 1

    for path in inputs:
        formats[path] = readers.sniff(path) if fmt == "auto" else fmt
        if verbose:
            print(f"[data] {path}: format {formats[path]}" + (" (sniffed)" if fmt == "auto" else ""))
        for source, line, rec in readers.read(path, formats[path]):
            if max_records and counts["records"] >= max_records:
                break
            counts["records"] += 1
            if isinstance(rec, readers.Bad):
                bad(source, line, rec.reason)
                continue
            try:
                msgs = to_messages(rec)
            except ValueError as e:
                bad(source, line, str(e))
                continue
            key = _normalized(msgs)
            if key in seen:
                counts["duplicates"] += 1
                continue
            seen[key] = True
            rows.append({"messages": msgs, "source": source, "line": line})
    ds = Dataset.from_list(rows) if rows else None
    encoded = []
    if ds is not None:
        # Two processes pay off only on large inputs (each needs the tokenizer pickled over).
        ds = ds.map(encode_batch, batched=True, batch_size=1000, num_proc=2 if len(ds) >= 50_000 else None,
                    fn_kwargs={"tokenizer": tokenizer, "template": template, "train_on_prompt": train_on_prompt})
        truncated = 0
        from nbutils.plots import length_histogram

        length_histogram(ds["length"], max_seq_len, out_dir / "lengths.png")
        for r in ds:
            if r["length"] > max_seq_len:
                if truncate and any(x != IGNORE_INDEX for x in r["labels"][:max_seq_len]):
                    r = {**r, "input_ids": r["input_ids"][:max_seq_len], "labels": r["labels"][:max_seq_len],
                         "length": max_seq_len}
                    truncated += 1
                else:
                    bad(r["source"], r["line"], f"too-long: {r['length']} > {max_seq_len} tokens", key="too_long")
                    continue
            encoded.append(r)
        if truncate:
            counts["truncated"] = truncated
    counts["kept"] = len(encoded)
    (out_dir / "quarantine.jsonl").write_text("".join(json.dumps(q) + "\n" for q in quarantine))
    if not encoded:
        raise DataError(f"nothing usable: {counts['records']} records read, all kept out; "
                        f"see {out_dir / 'quarantine.jsonl'} for each reason.")
    order = list(range(len(encoded)))
    random.Random(seed).shuffle(order)
    n_eval = min(len(encoded) - 1, max(1, round(len(encoded) * eval_fraction))) if len(encoded) > 1 else 0
    cols = ["messages", "input_ids", "labels", "length"]
    splits = {"eval": [encoded[i] for i in order[:n_eval]], "train": [encoded[i] for i in order[n_eval:]]}
    for name, split in splits.items():
        columns = {c: [r[c] for r in split] for c in cols}
        Dataset.from_dict(columns, features=ds.select_columns(cols).features).save_to_disk(str(out_dir / name))
    lengths = [r["length"] for r in encoded]
    reasons: dict[str, int] = {}
    for q in quarantine:
        reasons[q["reason"].split(":")[0]] = reasons.get(q["reason"].split(":")[0], 0) + 1
    manifest = {
        "inputs": [{"path": p, "format": f} for p, f in formats.items()],
        "counts": counts,
        "splits": {k: len(v) for k, v in splits.items()},
        "quarantine_reasons": reasons,
        "template": template_name,
        "tokenizer": getattr(tokenizer, "name_or_path", ""),
        "train_on_prompt": train_on_prompt,
        "max_seq_len": max_seq_len,
        "token_lengths": _stats(lengths),
        "content_hash": hashlib.sha256(json.dumps([r["input_ids"] for r in encoded]).encode()).hexdigest()[:16],
        "batching": batching.plan([r["length"] for r in splits["train"]] or lengths, batch_size, max_seq_len, seed),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def render_masked(row: dict, tokenizer) -> str:
    """One example as the model sees it, with the tokens the loss ignores shown in [brackets]."""
    out = []
    for tok, lab in zip(row["input_ids"], row["labels"]):
        text = tokenizer.decode([tok])
        out.append(f"[{text}]" if lab == IGNORE_INDEX else text)
    return "".join(out).replace("][", "")


def load_split(data_dir: str | Path, split: str):
    """Load one prepared split (train or eval) written by prepare()."""
    from datasets import load_from_disk

    return load_from_disk(str(Path(data_dir) / split))


def load_manifest(data_dir: str | Path) -> dict:
    return json.loads((Path(data_dir) / "manifest.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.data", description="Prepare chat training data.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="raw files -> train/eval splits + manifest + quarantine")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--format", default="auto", choices=["auto", *readers.FORMATS])
    p.add_argument("--tokenizer", default="embedded", help="path or hub id; default: the embedded default's")
    p.add_argument("--max-seq-len", type=int, default=256)
    p.add_argument("--eval-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strict", action="store_true")
    p.add_argument("--truncate", action="store_true")
    p.add_argument("--train-on-prompt", action="store_true")
    args = parser.parse_args(argv)
    from nbutils.modeling import load_tokenizer

    try:
        m = prepare(args.inputs, args.out, load_tokenizer(args.tokenizer), max_seq_len=args.max_seq_len,
                    eval_fraction=args.eval_fraction, seed=args.seed, fmt=args.format, strict=args.strict,
                    truncate=args.truncate, train_on_prompt=args.train_on_prompt)
    except (DataError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"counts": m["counts"], "splits": m["splits"], "out": args.out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
