"""Every input read into chat messages, each record counted in the ledger: what 01 trains on, before tokenizing.

A record cap (`max_records`, smoke runs) is shared by the inputs: each reads its share of what is left, so every input
is tried and a short one leaves the rest to the inputs after it; an input the cap cut says so. A file whose
undecodable records read as Windows-1252 (Excel's default "CSV") gets the one line that converts it; those records
stay quarantined.
"""

from __future__ import annotations

import codecs
import re

from nbutils.data import readers, records

_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, kept by surrogateescape
_NOT_ASCII = re.compile("[^\x00-\x7f\udc80-\udcff]")  # text that decoded as UTF-8 beyond ASCII (a mixed file)
# What the encoding hint reads past a file's first undecodable byte: thousands of lines to judge it by, in bounded memory
HINT_SAMPLE = 4 << 20
_CHUNK = 1 << 20


def read_records(inputs: list[str], ledger, fmt: str = "auto", columns: dict | None = None,
                 max_records: int | None = None, split: str | None = None, verbose: bool = False) -> list[dict]:
    """Every record of every input as chat messages ({"messages", "source", "line"}), duplicates dropped; each record
    read is counted in the ledger (`nbutils.data.ledger`) and the ones kept out are listed there with their reason."""
    rows = []
    for k, path in enumerate(inputs):
        kind, why = readers.sniff_why(path, split) if fmt == "auto" else (fmt, "given")
        ledger.inputs[path] = how = {"format": kind, "why": why}
        before, bad_before = ledger.counts["records"], len(ledger.quarantine)
        share = -(-(max_records - before) // (len(inputs) - k)) if max_records else None  # ceil: the cap is reached
        for source, line, rec in readers.read(path, kind, columns, split):
            if share is not None and ledger.counts["records"] - before >= share:
                how["capped"] = share
                break
            ledger.counts["records"] += 1
            try:
                if isinstance(rec, readers.Bad):
                    raise ValueError(rec.reason)
                msgs = records.to_messages(rec, columns)
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
            print(f"[data] {path}: read as {kind} ({why}), {ledger.counts['records'] - before} records{capped}")
            if "hint" in how:
                print(f"[data] {how['hint']}")
    return rows


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
