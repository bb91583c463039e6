"""Raw records in, validated chat-formatted and tokenized train/eval splits out; nothing lost silently.

Every record read ends up in exactly one place: kept (train or eval), quarantined (with source,
line and reason in quarantine.jsonl), dropped as a duplicate (listed there too, with the line it repeats), or too
long (written to quarantine.jsonl as too-long, counted under too_long). The manifest's counts add up:
    records == kept + quarantined + duplicates + too_long      train + eval == kept
(with truncate=True, records cut to max_seq_len count as kept and also under `truncated`).

Output folder (what 02 and 03 read):
  train/, eval/      HF datasets with columns messages, input_ids, labels, length; a prompt's records in one of them
  manifest.json      counts, splits, records moved to their prompt's split, template, tokens (pad, EOS, end of
                     turn, stop ids), role fixes, max_seq_len and why, token-length stats, content hash, batching plan
  quarantine.jsonl   {"source", "line", "reason"} per record kept out; reason = "<stable-id>: <detail>"
                     (`nbutils.data.ledger`)
  lengths.png        token-length histogram with the cut-off marked

Command line:  python -m nbutils.data prepare INPUT [INPUT ...] --out DIR [--format auto] ...  (nbutils/data/__main__.py)
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
import re
from pathlib import Path

from nbutils import defaults
from nbutils.chain import MARKERS
from nbutils.data import chatformat, records
from nbutils.data.batching import IGNORE_INDEX
from nbutils.data.intake import read_records
from nbutils.data.ledger import Ledger

SPLIT_COLUMNS = ["messages", "input_ids", "labels", "length"]


class DataError(ValueError):
    """A bad record under strict=True, a tokenizer that would teach the wrong thing, or nothing usable."""


# --- rendering and labels ----------------------------------------------------------------------

def template_for(tokenizer) -> tuple[str, str]:
    """(template, name): the tokenizer's own chat template, or the fallback, which is then set on the
    tokenizer so the probe, 03 and every checkpoint render what training saw."""
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template, tokenizer.template_source = chatformat.FALLBACK_TEMPLATE, "fallback"
    name = getattr(tokenizer, "template_source", None)
    return tokenizer.chat_template, name or ("fallback" if tokenizer.chat_template == chatformat.FALLBACK_TEMPLATE else "tokenizer")


def check_tokenizer(tokenizer) -> None:
    """Refuse a tokenizer that would teach the model never to stop."""
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no EOS token: the model could never learn to stop.")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise DataError("pad token == EOS token: padding would mask the EOS the model must learn. "
                        "Load the tokenizer with nbutils.data.chatformat.load_tokenizer, which sets a distinct pad token.")


def renderer(tokenizer, template: str):
    """render(messages, add_generation_prompt=False) -> text, the same as apply_chat_template(tokenize=False).

    Renders with the compiled template directly (about 2.5x faster than apply_chat_template,
    which copies every conversation first); falls back to apply_chat_template if that moves.
    """
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        compiled, special = _compile_jinja_template(template), dict(tokenizer.special_tokens_map)
        return lambda msgs, gen=False: compiled.render(messages=msgs, add_generation_prompt=gen, **special)
    except ImportError:
        return lambda msgs, gen=False: tokenizer.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                                                     add_generation_prompt=gen)


def control_tokens(tokenizer, template: str) -> re.Pattern | None:
    """Special tokens that must not appear inside content (they would be read as chat markers or EOS)."""
    toks = [t.content for t in tokenizer.added_tokens_decoder.values()
            if (t.special or t.content in template) and t.content.strip()]
    return re.compile("|".join(map(re.escape, sorted(toks, key=len, reverse=True)))) if toks else None


REASONING = ("<think>", "</think>")  # reasoning markers a template (Qwen3) writes inside the last answer itself


def content_problem(msgs: list[dict], control: re.Pattern | None, markers: set[str]) -> str | None:
    """Why a conversation's text cannot be rendered as written (a quarantine reason), or None.

    A control token inside content would be read as a chat marker or EOS; the template's own reasoning markers are
    the exception in the last answer, where the template keeps them (single-turn reasoning SFT). In an earlier answer
    the template drops the reasoning, so that answer would not be found, let alone trained."""
    for i, m in enumerate(msgs):
        for hit in control.finditer(m["content"]) if control else ():
            token = hit.group(0)
            if token not in markers or m["role"] != "assistant":
                return f"control-token: {token} in {m['role']} text"
            if i != len(msgs) - 1:
                return (f"earlier-reasoning: {token} in an answer before the last (turn {i + 1} of {len(msgs)}): the "
                        "chat template drops earlier answers' reasoning, so it cannot be trained there. Make one "
                        "record per answer (the turns before it and that answer), or remove the earlier think blocks")
    return None


def encode_batch(batch: dict, tokenizer, template: str, train_on_prompt: bool) -> dict:
    """Batched tokenization with completion-only labels (a datasets.map function).

    Adds input_ids, labels, length, and `error` (a quarantine reason, "" when fine) so one bad
    record (a template that refuses it, a control token in its text) never stops the batch.
    """
    render, control = renderer(tokenizer, template), control_tokens(tokenizer, template)
    rules, eot = chatformat.role_rules(render), chatformat.end_of_turn(tokenizer)
    markers = {t for t in REASONING if t in template}
    bos = tokenizer.bos_token if tokenizer.bos_token and render(chatformat.PROBE).startswith(tokenizer.bos_token) else ""
    texts, spans, errors, fixed, merges = [], [], [], [], {"system": [], "turns": [], "leading": [], "plain": []}
    for msgs in batch["messages"]:
        msgs, merged = chatformat.normalize_roles(msgs, rules)
        plain = not rules["answer_alone"] and all(m["role"] != "user" for m in msgs)
        fixed.append(msgs)
        for k in merges:
            merges[k].append(int(plain) if k == "plain" else merged[k])
        try:
            if problem := content_problem(msgs, control, markers):
                raise ValueError(problem)
            text, sp = chatformat.plain_spans(msgs, bos, tokenizer.eos_token) if plain else \
                chatformat.target_spans(render, msgs, eot)
            err = ""
        except Exception as e:  # noqa: BLE001 -- jinja raises anything (TemplateError, TypeError, ...)
            text, sp = "", []
            err = str(e) if str(e).startswith(("control-token:", "earlier-reasoning:", "template-error:")) else \
                f"template-error: {type(e).__name__}: {str(e)[:120]}"
        texts.append(text)
        spans.append(sp)
        errors.append(err)
    input_ids, offsets = _tokenize(tokenizer, texts)
    labels, straddles = [], []
    for ids, offs, sp in zip(input_ids, offsets, spans):
        if train_on_prompt:
            labels.append(list(ids))
            straddles.append(0)
            continue
        starts, ends = [a for a, _ in offs], [b for _, b in offs]  # non-decreasing: bisect finds each span
        lab, n = [IGNORE_INDEX] * len(ids), 0
        for s, e in sp:
            # From the token holding the span's first character: one straddling the boundary is kept.
            i0, i1 = bisect.bisect_right(ends, s), bisect.bisect_left(starts, e)
            n += i0 < len(starts) and starts[i0] < s
            lab[i0:i1] = ids[i0:i1]
        labels.append(lab)
        straddles.append(n)
    return {"messages": fixed, "input_ids": input_ids, "labels": labels, "length": [len(i) for i in input_ids],
            "error": errors, "merged_system": merges["system"], "merged_turns": merges["turns"], "straddled": straddles,
            "dropped_leading": merges["leading"], "plain_text": merges["plain"]}


def _tokenize(tokenizer, texts: list[str]) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Token ids and character offsets for many texts in one call to the Rust tokenizer.

    The backend is called directly: transformers' __call__ converts every encoding to a dict of
    Python lists first, which costs as much as the tokenization itself.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        if backend.padding is not None:  # a saved tokenizer.json may carry padding/truncation; the
            backend.no_padding()  # transformers call resets both the same way before encoding
        if backend.truncation is not None:
            backend.no_truncation()
        encs = backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encs], [e.offsets for e in encs]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)  # slow (Python) tokenizers
    return enc["input_ids"], enc["offset_mapping"]


def _truncate_batch(batch: dict, max_seq_len: int) -> dict:
    return {"input_ids": [x[:max_seq_len] for x in batch["input_ids"]],
            "labels": [x[:max_seq_len] for x in batch["labels"]],
            "length": [min(n, max_seq_len) for n in batch["length"]]}


def length_stats(lengths: list[int]) -> dict:
    """min / median / p95 / max of token lengths."""
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"min": s[0], "median": pick(0.5), "p95": pick(0.95), "max": s[-1], "mean": round(sum(s) / len(s), 1)}


# --- the pipeline ------------------------------------------------------------------------------

@contextlib.contextmanager
def _no_progress_bars():
    """datasets' bars are tqdm.auto: widgets in Jupyter, which a batch run (papermill, Kaggle) cannot show."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def prepare(inputs: list[str], out_dir: str | Path, tokenizer, max_seq_len: int | str = "auto", eval_fraction: float = 0.1,
            seed: int = 0, max_records: int | None = None, train_on_prompt: bool = False, fmt: str = "auto",
            strict: bool = False, truncate: bool = False, batch_size: int = 16, columns: dict | None = None,
            verbose: bool = True, base_model: str | None = None, seq_len_cap: tuple[int, str] | None = None,
            split: str | None = None, plot: bool = True) -> dict:
    """Read, validate, normalize, dedupe, tokenize and split; write the output folder; return the manifest.

    tokenizer: a prepared tokenizer or the model's name; base_model: the name recorded for 02, 03 and 04 (default:
    the tokenizer's name); seq_len_cap: (longest sequence that trains, why) for max_seq_len="auto"; split: the split
    read from a saved HF dataset folder that holds several, or from a hub dataset whose id names none (default: train,
    else the first train* split, said in the log); eval_fraction: the share held out, above 0 and below 1; plot:
    draw lengths.png (01 shows it; a script that only wants the splits saves the ~0.2 s of matplotlib)."""
    if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float)) or not 0 < eval_fraction < 1:
        raise DataError(f"eval_fraction={eval_fraction!r}: the share of records held out for evaluation, above 0 and "
                        "below 1 (0.1 holds out 10%). Not 0: 02 measures eval loss and picks its best checkpoint on "
                        "the eval split and 03 scores it; a tiny fraction (0.001) holds out a single record.")
    if isinstance(tokenizer, (str, Path)):
        base_model = str(tokenizer) if base_model is None else base_model
        tokenizer = chatformat.load_tokenizer(str(tokenizer))
    base_model = getattr(tokenizer, "name_or_path", "") if base_model is None else base_model
    with _no_progress_bars():
        manifest = _prepare(inputs, out_dir, tokenizer, max_seq_len, eval_fraction, seed, max_records, train_on_prompt,
                            fmt, strict, truncate, batch_size, columns, verbose, seq_len_cap, split, plot)
    # 02, 03 and 04 take the model from here: it is named once, in 01. The fingerprint lets 02 accept another
    # name for the same tokenizer (a Hub id here, its Kaggle input folder there) and refuse any other.
    manifest.update(base_model=base_model, tokenizer_fingerprint=chatformat.fingerprint(tokenizer))
    (Path(out_dir) / MARKERS["data_prep"]).write_text(json.dumps(manifest, indent=2))  # the stage's marker: last
    return manifest


def _encode_rows(rows, tokenizer, template, train_on_prompt):
    """The rows rendered and tokenized (a datasets.Dataset), and the role fixes the rendering made."""
    from datasets import Dataset

    ds = Dataset.from_list(rows)
    # Batched: 1000 texts per Rust tokenizer call; a 2nd process pays off only on large inputs (bench: ~1.2x on 2
    # cores). Named by our fingerprint: datasets would pickle the whole tokenizer to name it (6 s for 256k tokens).
    procs = 2 if len(ds) >= 50_000 and (os.cpu_count() or 1) >= 2 else None
    name = chatformat.fingerprint(tokenizer, ds._fingerprint, template, train_on_prompt)
    ds = ds.map(encode_batch, batched=True, batch_size=1000, num_proc=procs, new_fingerprint=name,
                fn_kwargs={"tokenizer": tokenizer, "template": template, "train_on_prompt": train_on_prompt},
                desc="tokenize")
    errors = ds["error"][:]  # lists: datasets' lazy Column indexes slowly
    fixes = {k: sum(v for v, e in zip(ds[col][:], errors) if not e) for k, col in
             (("system_merged", "merged_system"), ("turns_merged", "merged_turns"),
              ("boundary_tokens_kept", "straddled"), ("leading_answers_dropped", "dropped_leading"),
              ("plain_text", "plain_text"))}
    if getattr(tokenizer, "pad_reason", "").startswith("the last ordinary") and any(
            tokenizer.pad_token_id in ids for ids in ds["input_ids"][:]):
        raise DataError(f"the pad token chosen, {tokenizer.pad_token!r}, occurs in the data: set "
                        "tokenizer.pad_token to a token the data never uses (not EOS), then run again.")
    return ds, fixes


def _select(ds, rows, max_seq_len, truncate, ledger: Ledger, auto: bool = False) -> tuple[list[int], int]:
    """Indexes of the rows kept under max_seq_len (or cut to it with truncate=True), and how many were cut. auto: the
    length was chosen to leave the longest records out, so strict=True quarantines those rather than stopping."""
    keep, truncated = [], 0
    for i, (n, err) in enumerate(zip(ds["length"][:], ds["error"][:])):
        if err:
            ledger.bad(rows[i]["source"], rows[i]["line"], err)
        elif n <= max_seq_len:
            keep.append(i)
        elif truncate and any(x != IGNORE_INDEX for x in ds[i]["labels"][1:max_seq_len]):
            keep.append(i)  # cut at max_seq_len: the end of the answer (and its EOS) is lost
            truncated += 1
        else:
            ledger.bad(rows[i]["source"], rows[i]["line"], f"too-long: {n} > {max_seq_len} tokens", key="too_long",
                       stop=not auto)
    return keep, truncated


def _write_splits(kept, out_dir: Path, keys: list, eval_fraction, seed, verbose) -> tuple[dict, str, dict]:
    """Split by a random draw that keeps each prompt's records together (`records.split_by_prompt`; keys: each kept
    record's prompt key) and save train/eval; (splits, content hash of their tokens and labels, what moved)."""
    train, held, by_prompt = records.split_by_prompt(keys, eval_fraction, seed)
    both, moved = by_prompt["prompts_in_both"], by_prompt["moved"]
    if verbose and both:
        print(f"[split] {both} prompt{'s are' if both > 1 else ' is'} in both splits: keeping each prompt's records "
              "together would leave a split empty (too few distinct prompts)")
    elif verbose and moved:
        print(f"[split] {moved} record{'s' if moved > 1 else ''} moved to the split of the first record with the same "
              "prompt, so no eval prompt is trained on (manifest split_by_prompt)")
    splits = {"train": kept.select(train), "eval": kept.select(held)}
    digest = hashlib.sha256()
    for name, split in splits.items():
        split.save_to_disk(str(out_dir / name))
        for b in split.select_columns(["input_ids", "labels"]).iter(batch_size=10_000):
            digest.update(json.dumps([name, b["input_ids"], b["labels"]]).encode())
    return splits, digest.hexdigest()[:16], by_prompt


def _prepare(inputs, out_dir, tokenizer, max_seq_len, eval_fraction, seed, max_records, train_on_prompt, fmt, strict,
             truncate, batch_size, columns, verbose, seq_len_cap, split, plot) -> dict:
    from nbutils.data import batching
    from nbutils.plots import plot_length_histogram

    inputs = [inputs] if isinstance(inputs, (str, Path)) else [str(p) for p in inputs]
    check_tokenizer(tokenizer)
    template, template_name = template_for(tokenizer)
    if verbose:
        print(chatformat.describe_line(tokenizer))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(strict, DataError, ("too_long",))
    rows = read_records(inputs, ledger, fmt, columns, max_records, split, verbose)
    keep, truncated, fixes, seq_why, ds, auto = [], 0, {}, "given", None, defaults.is_auto(max_seq_len)
    if rows:
        ds, fixes = _encode_rows(rows, tokenizer, template, train_on_prompt)
        if verbose and (fixes["leading_answers_dropped"] or fixes["plain_text"]):  # the template refuses those turns
            print(f"[roles] {fixes['plain_text']} records without a question trained as plain text + EOS; "
                  f"{fixes['leading_answers_dropped']} answers before a conversation's first question dropped "
                  "(manifest role_fixes)")
        usable = [n for n, e in zip(ds["length"][:], ds["error"][:]) if not e]
        max_seq_len, seq_why = defaults.max_seq_len(max_seq_len, usable, defaults.model_config_of(tokenizer), seq_len_cap)
        if verbose:
            print(f"[max_seq_len] {max_seq_len} ({seq_why})")
        if plot:
            plot_length_histogram(usable, max_seq_len, out_dir / "lengths.png")
        keep, truncated = _select(ds, rows, max_seq_len, truncate, ledger, auto)
    counts = ledger.counts
    if truncate:
        counts["truncated"] = truncated
    counts["kept"] = len(keep)
    ledger.write(out_dir)
    if not keep:
        raise DataError(f"nothing usable: {counts['records']} records read, all kept out; "
                        f"see {out_dir / 'quarantine.jsonl'} for each reason.")
    kept = ds.select(keep).select_columns(SPLIT_COLUMNS)
    if truncated:
        kept = kept.map(_truncate_batch, batched=True, fn_kwargs={"max_seq_len": max_seq_len}, desc="truncate")
    keys = [records.prompt_key(rows[i]["messages"]) for i in keep]
    splits, content_hash, by_prompt = _write_splits(kept, out_dir, keys, eval_fraction, seed, verbose)
    kept_lengths, train_lengths = kept["length"][:], splits["train"]["length"][:]
    manifest = {
        "inputs": [{"path": p, **how} for p, how in ledger.inputs.items()],
        "counts": counts,
        "splits": {k: len(v) for k, v in splits.items()}, "split_by_prompt": by_prompt,  # a prompt's records: one split
        "quarantine_reasons": ledger.reasons(),
        "template": template_name,
        "tokenizer": getattr(tokenizer, "name_or_path", ""),
        "eos_token": tokenizer.eos_token, "pad_token": tokenizer.pad_token,
        "tokens": chatformat.describe(tokenizer),  # pad, EOS, end of turn, stop ids: what 02 and 03 use too
        "role_fixes": fixes,  # system text merged into the first user turn, same-role turns merged
        "train_on_prompt": train_on_prompt,
        "max_seq_len": max_seq_len, "max_seq_len_why": seq_why,
        "seed": seed,
        "token_lengths": length_stats(kept_lengths),
        "content_hash": content_hash,
        "batching": batching.plan(train_lengths or kept_lengths, batch_size, max_seq_len, seed),
    }
    return manifest


def render_masked(row: dict, tokenizer) -> str:
    """One example as the model sees it, with the tokens the loss ignores shown in [brackets]."""
    out, run, masked = [], [], None
    for tok, lab in zip(row["input_ids"], row["labels"]):
        m = lab == IGNORE_INDEX
        if run and m != masked:
            out.append(f"[{tokenizer.decode(run)}]" if masked else tokenizer.decode(run))
            run = []
        run.append(tok)
        masked = m
    if run:
        out.append(f"[{tokenizer.decode(run)}]" if masked else tokenizer.decode(run))
    return "".join(out)


def load_split(data_dir: str | Path, split: str):
    """Load one prepared split (train or eval) written by prepare()."""
    from datasets import load_from_disk

    return load_from_disk(str(Path(data_dir) / split))


def load_manifest(data_dir: str | Path) -> dict:
    """The manifest prepare() wrote (counts, template, token lengths, batching plan ...)."""
    return json.loads((Path(data_dir) / MARKERS["data_prep"]).read_text())


def parse_columns(spec: str) -> dict | None:
    """'user=question,assistant=answer[,system=sys]' -> a column mapping; "auto" -> None (auto-detect)."""
    if not spec or not spec.strip() or defaults.is_auto(spec):
        return None
    mapping = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    mapping = {k.strip(): v.strip() for k, v in mapping.items()}
    if not {"user", "assistant"} <= set(mapping) or set(mapping) - {"user", "assistant", "system"}:
        raise ValueError(f"columns={spec!r}: expected 'user=COL,assistant=COL[,system=COL]'")
    return mapping
