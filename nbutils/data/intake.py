"""Every input read into chat messages, each record counted in the ledger: what 01 trains on, before tokenizing.

A record cap (`max_records`, smoke runs) is shared by the inputs: each reads its share of what is left, so every input
is tried and a short one leaves the rest to the inputs after it; an input the cap cut says so. A file whose
undecodable records read as Windows-1252 (Excel's default "CSV") gets the one line that converts it; those records
stay quarantined. A folder that is not a saved dataset (a Kaggle input, a hub snapshot) is read through the one data
file it holds; one holding several is refused, naming them as the value to paste. The columns of a file's records
that no record's shape reads (an id, a category) are named once, in the log and the manifest's inputs.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from nbutils.data import readers, records

_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, kept by surrogateescape
_NOT_ASCII = re.compile("[^\x00-\x7f\udc80-\udcff]")  # text that decoded as UTF-8 beyond ASCII (a mixed file)
# What the encoding hint reads past a file's first undecodable byte: thousands of lines to judge it by, in bounded memory
HINT_SAMPLE = 4 << 20
_CHUNK = 1 << 20
_NOT_DATA = {"dataset_infos.json", "dataset-metadata.json", *readers.HF_MARKERS}  # JSON beside data, not records
NAMED = 10  # data files a folder's message names, and puts in the value to paste


def read_records(inputs: list[str], ledger, fmt: str = "auto", columns: dict | None = None,
                 max_records: int | None = None, split: str | None = None, verbose: bool = False) -> list[dict]:
    """Every record of every input as chat messages ({"messages", "source", "line"}), duplicates dropped; each record
    read is counted in the ledger (`nbutils.data.ledger`) and the ones kept out are listed there with their reason."""
    rows = []
    for k, path in enumerate(inputs):
        path, found = data_file(path)
        kind, why = readers.sniff_why(path, split) if fmt == "auto" else (fmt, "given")
        ledger.inputs[path] = how = {"format": kind, "why": f"{why}; {found}" if found else why}
        before, bad_before, unused = ledger.counts["records"], len(ledger.quarantine), set()
        share = -(-(max_records - before) // (len(inputs) - k)) if max_records else None  # ceil: the cap is reached
        for source, line, rec in readers.read(path, kind, columns, split):
            if share is not None and ledger.counts["records"] - before >= share:
                how["capped"] = share
                break
            ledger.counts["records"] += 1
            try:
                if isinstance(rec, readers.Bad):
                    raise ValueError(rec.reason)
                msgs = records.to_messages(rec, columns, unused)
            except ValueError as e:
                ledger.bad(source, line, str(e))
                continue
            if ledger.first(records.normalized_key(msgs), source, line):
                rows.append({"messages": msgs, "source": source, "line": line})
        if any(q["reason"].startswith("invalid-utf8") for q in ledger.quarantine[bad_before:]):
            if hint := encoding_hint(path):
                how["hint"] = hint
        if verbose:
            capped = (f"; stopped there: max_records={max_records} is shared by {len(inputs)} inputs"
                      if "capped" in how else "")
            print(f"[data] {path}: read as {kind} ({how['why']}), {ledger.counts['records'] - before} records{capped}")
            if "hint" in how:
                print(f"[data] {how['hint']}")
        if unused:
            how["columns_not_used"] = sorted(unused)
            if verbose:
                print(f"[data] {path}: columns not used: {', '.join(sorted(unused)[:20])}"
                      f"{f' and {len(unused) - 20} more' if len(unused) > 20 else ''} (columns=\"user=COL,"
                      "assistant=COL[,system=COL]\" reads others)")
    return rows


def folder_inputs(path: str) -> list[Path]:
    """What a folder that is not a saved dataset (a Kaggle input, a hub snapshot) holds to read, one or two levels
    down: data files by their extension, saved dataset folders; hidden names skipped."""
    saved = lambda p: p.is_dir() and any((p / f).exists() for f in readers.HF_MARKERS)  # noqa: E731
    found, level = [], [Path(path)]
    for _ in range(2):
        below = [p for d in level for p in sorted(d.iterdir()) if not p.name.startswith((".", "_"))]
        found += [p for p in below if saved(p) or (p.is_file() and p.suffix.lower()[1:] in readers.EXTENSIONS
                                                   and p.name.lower() not in _NOT_DATA)]
        level = [p for p in below if p.is_dir() and p not in found]
    return found


def data_file(path: str) -> tuple[str, str]:
    """(what to read, "" or why it is not `path`): an input, or the one data file in a folder that is not a saved
    dataset; raises ValueError for such a folder holding several or none, naming up to NAMED of them."""
    p = Path(path)
    if not p.is_dir() or any((p / f).exists() for f in readers.HF_MARKERS):
        return path, ""
    found = folder_inputs(path)
    if len(found) == 1:
        return str(found[0]), f"the only data file in the folder {path}"
    listed = ", ".join(str(f.relative_to(p)) for f in found[:NAMED]) + (
        f" and {len(found) - NAMED} more" if len(found) > NAMED else "")
    raise ValueError(f"{path}: a folder, but not a saved HF dataset (no dataset_info.json), " + (
        f"holding {len(found)} data files: {listed}. Name those to read, comma-separated (01's raw_data, 05's "
        f"preference_data), leaving out any you do not train on (a test split): \"{','.join(map(str, found[:NAMED]))}\""
        if found else "and no data file (JSONL, JSON, CSV, TSV, Parquet, HTML, SQL) one or two levels down: pass a file."))


def encoding_hint(path: str) -> str | None:
    """The fix for a file in Windows-1252 (Excel's 'CSV', accents as single bytes), or None: its bytes are not all
    UTF-8, read as cp1252, and hold no UTF-8 beyond ASCII (converting a mixed file would garble its UTF-8)."""
    try:
        with open(path, "rb") as f:
            if not _cp1252_only(f):
                return None
    except OSError:  # a folder, a hub id
        return None
    return (f"{path}: its records with undecodable bytes read as Windows-1252 (Excel's default 'CSV'); they are "
            f"quarantined. Convert the file (`iconv -f cp1252 -t utf-8 {path} > NEW`, or save it from Excel as "
            "'CSV UTF-8') and pass the new one.")


def _cp1252_only(f) -> bool:
    """Whether a file's bytes look like cp1252 and not UTF-8, judged on it streamed up to about HINT_SAMPLE bytes past
    its first undecodable byte: never the whole of a large file in memory, nor read further than the judgement needs."""
    decoder, seen = codecs.getincrementaldecoder("utf-8-sig")("surrogateescape"), None
    while seen is None or f.tell() - seen < HINT_SAMPLE:
        chunk = f.read(_CHUNK)
        try:
            chunk.decode("cp1252")
        except UnicodeDecodeError:  # bytes cp1252 leaves undefined
            return False
        text = decoder.decode(chunk, final=not chunk)
        if _NOT_ASCII.search(text):  # a mixed file
            return False
        if seen is None and _ESCAPED.search(text):
            seen = f.tell()
        if not chunk:
            break
    return seen is not None  # None: all UTF-8
