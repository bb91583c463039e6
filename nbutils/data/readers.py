"""Raw files in, records out: format readers yielding (source, line, record | Bad), and sniffing.
`nbutils.data.records.to_messages` then turns each record into validated chat messages.

A record is a dict as found in the file. `line` is where to look for it: the 1-based line
(JSONL; CSV/TSV: the line the record starts on; HTML: the line of its tag; SQL: the line of its INSERT) or the
1-based record number (JSON arrays, Parquet, HF datasets). A `Bad` carries the reason a record could
not even be read, so the pipeline quarantines it instead of dropping it silently.
A blank line (or an empty CSV row) is not a record.

Damage stays where it is: a broken JSONL line, a broken element of a JSON array, a CSV row whose quoting broke or a
SQL statement SQLite refuses is one bad record, and reading goes on with the next one (the lines a broken quote
swallowed are read again on their own).

`sniff` picks the format from the extension, then checks the content by what parses: lines that parse on their own
are JSONL (whatever the extension, bad lines anywhere), a file that parses whole is one JSON document; a file without
a known extension is judged by its first bytes.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nbutils.data import htmlpage, hubdata, jsondoc, sqldump
from nbutils.data.records import recognised

FORMATS = ("jsonl", "json", "csv", "tsv", "parquet", "html", "sql", "hf_disk", "hf_hub")
HF_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")  # what datasets' save_to_disk writes
EXTENSIONS = {"jsonl": "jsonl", "ndjson": "jsonl", "json": "json", "csv": "csv", "tsv": "tsv", "tab": "tsv",
               "parquet": "parquet", "pq": "parquet", "html": "html", "htm": "html", "sql": "sql"}


@dataclass
class Bad:
    reason: str


Row = tuple[str, int, "dict | Bad"]
SNIFF_BYTES = 1 << 20  # what sniffing reads of a file: enough lines to judge, never the whole of a large one
FIELD_LIMIT = 2**31 - 1  # characters in one CSV field: any text a file holds (the csv module's default is 131,072)
_DECODER = json.JSONDecoder()


# --- sniffing and reading ----------------------------------------------------------------------

def _is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _json_kind(head: bytes, whole: bool, named: str) -> tuple[str, str]:
    """('json' | 'jsonl', evidence) by what parses: a file that parses whole is one document; lines that parse on
    their own (at least half of them) are JSONL, its bad lines quarantined wherever they are; a broken array is a
    document read element by element; anything else is read as its name says, every bad line quarantined. `head`: the
    file's first SNIFF_BYTES (`whole`: all of it)."""
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    lines = text.split("\n")[:None if whole else -1]  # a sample's last line may be cut
    lines = [x.strip() for x in lines if x.strip()]
    if whole and len(lines) > 1:
        try:
            json.loads(text)
            return "json", "one JSON document"
        except json.JSONDecodeError:
            pass
    good = sum(map(_is_object, lines)) if len(lines) > 1 else 0
    if good and 2 * good >= len(lines):
        return "jsonl", f"{good} of {len(lines)} lines{'' if whole else ' read'} parse on their own"
    if text.lstrip().startswith("["):
        return "json", "a JSON array"
    if not good and len(lines) > 1 and text.lstrip().startswith("{"):
        return "json", "JSON values spread over several lines each (pretty-printed), read value by value"
    if len(lines) <= 1:
        return named, "one line"
    return named, (f"neither one JSON document nor JSON lines ({good} of {len(lines)} lines parse): read as {named}, "
                   "each bad record quarantined")


_SAVE_AS_TEXT = "write its records as JSONL or CSV (UTF-8) and pass that file"
_MAGIC = (  # first bytes of the binary files people pass by mistake, and what to do with each
    (b"\x1f\x8b", "a gzip-compressed file: decompress it first (`gunzip -k FILE`) and pass the file inside."),
    (b"SQLite format 3\x00", "an SQLite database, not text: dump it as SQL (`sqlite3 FILE .dump > NEW.sql`) or one "
                             "table as CSV (`sqlite3 -header -csv FILE 'SELECT * FROM t' > NEW.csv`) and pass that."),
    (b"\x93NUMPY", f"a NumPy array (.npy), not text: {_SAVE_AS_TEXT}."),
    (b"%PDF", "a PDF document, not text: extract its text (`pdftotext FILE NEW.txt`), shape it into records (JSONL "
              "or CSV) and pass that file."),
    (b"\xd0\xcf\x11\xe0", "an old Office file (Excel .xls, Word .doc), not text: in Excel, File > Save As > "
                         "'CSV UTF-8 (Comma delimited)', and pass the .csv."),
)
# NULs in the first 4 KiB that text may still hold: a record damaged by a NUL or a few is read (and quarantined by
# what follows); random or compressed bytes average 16 NULs per 4 KiB and binary headers and padding far more.
STRAY_NULS = 8


def not_text(head: bytes) -> str | None:
    """What a file is and what to do, when its first bytes say it is not UTF-8 text (None: it may be): a compressed
    archive, a spreadsheet, a database, a pickle, UTF-16, other binary. A stray NUL in UTF-8 text is none of these:
    the record holding it is read."""
    if why := next((why for magic, why in _MAGIC if head.startswith(magic)), None):
        return why
    if head.startswith(b"PK\x03\x04"):
        if b"xl/" in head[:4096] or b"[Content_Types].xml" in head[:4096]:
            return ("an Excel workbook (.xlsx), not text: in Excel, File > Save As > 'CSV UTF-8 (Comma delimited)', "
                    "and pass the .csv.")
        return "a zip archive: unzip it first (`unzip FILE`) and pass the file inside."
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):  # PROTO opcode, protocol 2-5
        return f"a Python pickle, not text: load it in Python and {_SAVE_AS_TEXT}."
    sample = head[:4096]
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    # ASCII in UTF-16: every other byte NUL, far fewer between them (U+xx00, a stray U+0000); a binary's fall on both.
    # Text mostly in CJK has few NULs (its punctuation and digits), but still on one side: that is UTF-16 too.
    most, least = max(even, odd), min(even, odd)
    alternate = len(sample) >= 8 and ((most * 4 >= len(sample) and least * 2 <= most)
                                      or (most > STRAY_NULS and least * 4 <= most))
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or alternate:
        return ("UTF-16 text (Excel's 'Unicode Text', PowerShell's `>`), not UTF-8: save it as UTF-8 (Excel: CSV "
                "UTF-8; `iconv -f UTF-16 -t UTF-8 FILE > NEW`) and pass the new file.")
    if (nuls := even + odd) > STRAY_NULS:
        return (f"binary, not text ({nuls} NUL bytes in its first {len(sample)} bytes): pass the records as UTF-8 text "
                "(JSONL, JSON, CSV, TSV, HTML, SQL), Parquet or a saved Hugging Face dataset.")
    return None


def sniff_why(path: str, split: str | None = None) -> tuple[str, str]:
    """(format, why): the format of one input and the evidence (the split, for a dataset folder), for the log."""
    p = Path(path)
    if p.is_dir():
        if any((p / f).exists() for f in HF_MARKERS):
            return "hf_disk", "a saved Hugging Face dataset folder" + hf_split(path, split)[1]
        raise ValueError(f"{path}: a folder, but not a saved HF dataset (no dataset_info.json); pass its data files "
                         "(nbutils.data.intake.data_file names them).")
    if not p.exists():
        if hubdata.parse(path):  # the Hub's owner/name, as for a model, with an optional :config and @split
            return "hf_hub", "no such file; looks like " + hubdata.describe(path, split)
        raise FileNotFoundError(f"{path}: no such file. Check the path (relative paths start at the working dir); "
                                "a hub dataset id is owner/name[:config][@split].")
    with open(p, "rb") as f:
        head, whole = f.read(SNIFF_BYTES), not f.read(1)
    ext = p.suffix.lower().lstrip(".")
    fmt = EXTENSIONS.get(ext)
    if fmt != "parquet" and not head.startswith(b"PAR1") and (why := not_text(head)):
        raise ValueError(f"{path}: {why}")
    text = head[:65536].decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if fmt in ("json", "jsonl"):
        kind, evidence = _json_kind(head, whole, fmt)
        return kind, f"extension .{ext}" + (f", but the content is {kind} ({evidence})" if kind != fmt
                                             else f" ({evidence})" if evidence.startswith("neither") else "")
    if fmt:
        return fmt, f"extension .{ext}"
    if head.startswith(b"PAR1"):
        return "parquet", "content: Parquet magic bytes"
    if text.startswith("<"):
        return "html", "content: starts with a tag"
    if re.match(r"(INSERT|CREATE|BEGIN|PRAGMA|--)", text, re.IGNORECASE):
        return "sql", "content: SQL statements"
    if text.startswith(("[", "{")):
        kind, evidence = _json_kind(head, whole, "jsonl")
        return kind, f"content: JSON ({evidence})"
    first = text.splitlines()[0] if text else ""
    return ("tsv", "content: tab-separated header") if "\t" in first else ("csv", "content: comma-separated text")


def sniff(path: str) -> str:
    """The format of one input, guessed from its extension and content."""
    return sniff_why(path)[0]


def read(path: str, fmt: str = "auto", columns: dict | None = None, split: str | None = None) -> Iterator[Row]:
    """Yield (source, line, record-or-Bad) for every record in one input (split: of a saved HF dataset folder)."""
    fmt = sniff(path) if fmt == "auto" else fmt
    reader = {"jsonl": _jsonl, "json": _json, "csv": _csv, "tsv": _tsv, "parquet": _parquet, "html": _html,
              "sql": _sql, "hf_disk": _hf_disk, "hf_hub": _hf_hub}.get(fmt)
    if reader is None:
        raise ValueError(f"format={fmt!r} is not one of auto, {', '.join(FORMATS)}")
    yield from (reader(path, columns) if fmt == "sql" else reader(path, split) if fmt.startswith("hf_") else reader(path))


_SURROGATE = re.compile("[\ud800-\udfff]")  # what str.encode("utf-8") refuses; Arrow (datasets) cannot store it


def _undecodable(value, where: str = "") -> str | None:
    """Where a string cannot be written as UTF-8, if anywhere: the field, and "lone surrogate" when it came from a
    JSON escape (half of an emoji's \\ud83d\\ude00 pair, the other half cut off) rather than from bytes that were not
    UTF-8 (kept as \\udc80-\\udcff by surrogateescape)."""
    if isinstance(value, str):
        hit = _SURROGATE.search(value)
        if hit is None:
            return None
        field = where or "text"
        return field if "\udc80" <= hit.group(0) <= "\udcff" else (
            f"{field} (lone surrogate \\u{ord(hit.group(0)):04x}: half of an escaped pair; fix or remove it)")
    if isinstance(value, dict):
        return next((w for k, v in value.items() if (w := _undecodable(v, str(k)))), None)
    if isinstance(value, list):
        return next((w for v in value if (w := _undecodable(v, where))), None)
    return None


def _checked(path: str, n: int, rec) -> Row:
    if not isinstance(rec, dict):
        return path, n, Bad(f"wrong-type: record is {type(rec).__name__}")
    field = _undecodable(rec)
    return path, n, Bad(f"invalid-utf8: in {field}") if field else rec


def _jsonl(path: str) -> Iterator[Row]:
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff")  # a BOM: the file's, or one of several files joined
            except UnicodeDecodeError as e:
                yield path, n, Bad(f"invalid-utf8: byte {e.start}")
                continue
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                yield path, n, Bad(f"malformed-json: {e.msg}")
                continue
            yield _checked(path, n, rec)


def _json(path: str) -> Iterator[Row]:
    text = Path(path).read_bytes().decode("utf-8-sig", "surrogateescape")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        yield from _salvage(path, text)
        return
    for n, rec in enumerate(jsondoc.records_in(path, data), 1):
        yield _checked(path, n, rec)


def _salvage(path: str, text: str) -> Iterator[Row]:
    """A JSON document that does not parse, read value by value (an array's elements): a broken one is one bad record
    (its line in the reason), and reading goes on at the next line that starts a value as the others did."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    line_of = lambda pos: bisect.bisect_right(starts, pos)  # noqa: E731
    # Records start where no deeper object does: the least indented lines that open an object (pretty-printed or one
    # record a line); an inner object never starts a line further left than the records holding it.
    base = min((len(m.group(1)) for m in re.finditer(r"(?m)^([ \t]*)\{", text)), default=None)
    ahead = re.compile(rf"\n[ \t]{{{base}}}(?={{)") if base is not None else None
    pos, n = 0, 0
    while True:
        pos += len(text[pos:pos + 4096]) - len(text[pos:pos + 4096].lstrip(" \t\r\n,[]"))
        if pos >= len(text):
            return
        if text[pos] in " \t\r\n,[]":
            continue
        n += 1
        try:
            rec, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            where = f"line {line_of(e.pos)}" + (f" (the record starts on line {line_of(pos)})"
                                                 if line_of(pos) != line_of(e.pos) else "")
            yield path, n, Bad(f"malformed-json: {e.msg.removesuffix(' at')} at {where}")
            nxt = ahead.search(text, pos + 1) if ahead else None
            if not nxt:
                return
            pos = nxt.end()
            continue
        yield _checked(path, n, rec)


def _delimited(path: str, delimiter: str) -> Iterator[Row]:
    """Rows by the csv module in strict mode: a row whose quoting broke (a cut line leaves a quote open, and the field
    would swallow the lines after it) is one bad record at its first line, and reading goes on from the next line."""
    # surrogateescape keeps the rest of the file readable; the rows holding bad bytes are quarantined
    text = Path(path).read_bytes().decode("utf-8-sig", "surrogateescape")
    lines = io.StringIO(text, newline="").readlines()  # the physical lines as the csv module counts them
    header = [h.strip() for h in next(csv.reader(lines[:1], delimiter=delimiter), [])]
    csv.field_size_limit(FIELD_LIMIT)  # the module's own limit (131,072 characters) cut long articles
    at = 1  # lines read so far
    while at < len(lines):
        rows = csv.reader((lines[i] for i in range(at, len(lines))), delimiter=delimiter, strict=True)
        end = 0
        try:
            for row in rows:
                start, end = at + end + 1, rows.line_num  # end: lines this reader has read
                if not any(c.strip() for c in row):
                    continue
                if len(row) > len(header):
                    yield path, start, Bad(f"malformed-row: {len(row)} fields, the header has {len(header)}")
                    continue
                # a short row: the header's other fields are missing (missing-field names the one a record needs)
                yield _checked(path, start, dict(itertools.zip_longest(header, row)))
            return
        except csv.Error as e:
            row = lines[at + end].rstrip("\r\n").split(delimiter)
            if delimiter == "\t" and len(row) == len(header):  # TSV: quotes are text ('"Stop" means halt'), not quoting
                yield _checked(path, at + end + 1, dict(zip(header, row)))
            else:
                yield path, at + end + 1, Bad(f"malformed-row: {e}")
            at += end + 1  # on from the line after the broken row's first


def _csv(path: str) -> Iterator[Row]:
    yield from _delimited(path, ",")


def _tsv(path: str) -> Iterator[Row]:
    yield from _delimited(path, "\t")


def _parquet(path: str) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for rec in batch.to_pylist():
                n += 1
                yield _checked(path, n, rec)
    except (pa.ArrowException, OSError) as e:  # a cut or damaged file: what is left of it cannot be trusted
        raise ValueError(f"{path}: not a readable Parquet file after record {n} ({type(e).__name__}: {e}). Write it "
                         "again, or export it as JSONL or CSV, whose damaged lines are quarantined one by one.") from e


def _html(path: str) -> Iterator[Row]:
    """Q/A records from a page (`nbutils.data.htmlpage`: definition lists, tables, or headings)."""
    for line, rec in htmlpage.read(path, recognised):
        yield (path, line, Bad(rec)) if isinstance(rec, str) else _checked(path, line, rec)


def _sql(path: str, columns: dict | None = None) -> Iterator[Row]:
    """The dump run statement by statement in SQLite (`nbutils.data.sqldump`), the table whose columns we recognise."""
    for line, rec in sqldump.read(path, lambda cols: recognised(cols, columns)):
        yield path, line, Bad(rec) if isinstance(rec, str) else rec


def hf_split(path: str, split: str | None = None) -> tuple[str | None, str]:
    """(split to read, how it was chosen) for a saved dataset folder; (None, "") for a folder of one dataset.

    With several splits: `split` if given, else train, else the first whose name starts with train, else the first;
    raises ValueError for a split the folder does not have."""
    listing = Path(path) / "dataset_dict.json"
    names = json.loads(listing.read_text()).get("splits", []) if listing.exists() else []
    if not names:
        if split:
            raise ValueError(f"{path}: split={split!r}, but the folder holds one dataset, not several splits; "
                             "leave split empty.")
        return None, ""
    if split and split not in names:
        raise ValueError(f"{path}: no split {split!r}; it has {', '.join(names)}.")
    chosen = split or ("train" if "train" in names else next((n for n in names if n.startswith("train")), names[0]))
    how = "given" if split else "the default" if chosen == "train" else f"chosen among {', '.join(names)}"
    return chosen, (f", split {chosen!r} ({how}; split=NAME or the folder {Path(path) / '<NAME>'} reads another)"
                    if len(names) > 1 else f", split {chosen!r}")


def _hf_disk(path: str, split: str | None = None) -> Iterator[Row]:
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(path)
    if isinstance(ds, DatasetDict):
        ds = ds[hf_split(path, split)[0] or next(iter(ds))]
    for n, rec in enumerate(ds, 1):
        yield path, n, rec


def _hf_hub(path: str, split: str | None = None) -> Iterator[Row]:
    """A hub dataset id, owner/name[:config][@split] (`nbutils.data.hubdata`)."""
    yield from hubdata.read(path, split)
