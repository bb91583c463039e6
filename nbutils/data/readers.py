"""Raw files in, records out: format readers yielding (source, line, record | Bad), and sniffing.
`nbutils.data.records.to_messages` then turns each record into validated chat messages.

A record is a dict as found in the file. `line` is where to look for it: the 1-based line
(JSONL; CSV/TSV: the line the record starts on; HTML: the line of its tag) or the 1-based record
number (JSON arrays, Parquet, SQL rows, HF datasets). A `Bad` carries the reason a record could
not even be read, so the pipeline quarantines it instead of dropping it silently.
A blank line (or an empty CSV row) is not a record.

`sniff` picks the format from the extension, then checks the content (a `.json` file holding
one object per line is JSONL; a file without a known extension is judged by its first bytes).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nbutils.data.records import recognised

FORMATS = ("jsonl", "json", "csv", "tsv", "parquet", "html", "sql", "hf_disk", "hf_hub")
_EXTENSIONS = {"jsonl": "jsonl", "ndjson": "jsonl", "json": "json", "csv": "csv", "tsv": "tsv", "tab": "tsv",
               "parquet": "parquet", "pq": "parquet", "html": "html", "htm": "html", "sql": "sql"}


@dataclass
class Bad:
    reason: str


Row = tuple[str, int, "dict | Bad"]


# --- sniffing and reading ----------------------------------------------------------------------

def _json_kind(path: Path, default: str) -> str:
    """'json' for one document (an array, or an object over several lines), 'jsonl' for one object per line."""
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8-sig", "replace").strip()
        second = f.readline()
        while second and not second.strip():
            second = f.readline()
    if first.startswith("["):
        return "json"
    if not second:
        return default  # a single line: an object is one JSONL record, or one JSON document; trust the name
    try:
        json.loads(first)
    except json.JSONDecodeError:
        return "json"  # a pretty-printed object: its first line alone does not parse
    return "jsonl"


def sniff_why(path: str) -> tuple[str, str]:
    """(format, why): the format of one input and the evidence, for the one-line log."""
    p = Path(path)
    if p.is_dir():
        if any((p / f).exists() for f in ("dataset_info.json", "dataset_dict.json", "state.json")):
            return "hf_disk", "a saved Hugging Face dataset folder"
        raise ValueError(f"{path}: a folder, but not a saved HF dataset (no dataset_info.json); pass a file instead.")
    if not p.exists():
        if re.fullmatch(r"[\w.-]+/[\w.-]+", path) and not path.startswith("."):
            return "hf_hub", "no such file; looks like a hub dataset id (owner/name)"
        raise FileNotFoundError(f"{path}: no such file. Check the path (relative paths start at the working dir); "
                                "for a hub dataset id pass format='hf_hub'.")
    head = p.read_bytes()[:65536]
    ext = p.suffix.lower().lstrip(".")
    fmt = _EXTENSIONS.get(ext)
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if fmt in ("json", "jsonl"):
        kind = _json_kind(p, fmt)
        return kind, f"extension .{ext}" + ("" if kind == fmt else f", but the content is {kind}")
    if fmt:
        return fmt, f"extension .{ext}"
    if head.startswith(b"PAR1"):
        return "parquet", "content: Parquet magic bytes"
    if text.startswith("<"):
        return "html", "content: starts with a tag"
    if re.match(r"(INSERT|CREATE|BEGIN|PRAGMA|--)", text, re.IGNORECASE):
        return "sql", "content: SQL statements"
    if text.startswith(("[", "{")):
        return _json_kind(p, "jsonl"), "content: JSON"
    first = text.splitlines()[0] if text else ""
    return ("tsv", "content: tab-separated header") if "\t" in first else ("csv", "content: comma-separated text")


def sniff(path: str) -> str:
    """The format of one input, guessed from its extension and content."""
    return sniff_why(path)[0]


def read(path: str, fmt: str = "auto", columns: dict | None = None) -> Iterator[Row]:
    """Yield (source, line, record-or-Bad) for every record in one input."""
    fmt = sniff(path) if fmt == "auto" else fmt
    reader = {"jsonl": _jsonl, "json": _json, "csv": _csv, "tsv": _tsv, "parquet": _parquet, "html": _html,
              "sql": _sql, "hf_disk": _hf_disk, "hf_hub": _hf_hub}.get(fmt)
    if reader is None:
        raise ValueError(f"format={fmt!r} is not one of auto, {', '.join(FORMATS)}")
    yield from (reader(path, columns) if fmt == "sql" else reader(path))


def _undecodable(value, where: str = "") -> str | None:
    """The field holding bytes that were not UTF-8 (kept as lone surrogates by surrogateescape), if any."""
    if isinstance(value, str):
        return where or "text" if re.search("[\udc80-\udcff]", value) else None
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
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
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
    except json.JSONDecodeError as e:
        yield path, e.lineno, Bad(f"malformed-json: {e.msg}")  # one document: nothing else can be read
        return
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...]}: take the first list
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    for n, rec in enumerate(data, 1):
        yield _checked(path, n, rec)


def _delimited(path: str, delimiter: str) -> Iterator[Row]:
    # surrogateescape keeps the rest of the file readable; the rows holding bad bytes are quarantined
    text = Path(path).read_bytes().decode("utf-8-sig", "surrogateescape")
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = [h.strip() for h in next(rows, [])]
    end = rows.line_num
    for row in rows:
        start, end = end + 1, rows.line_num
        if not any(c.strip() for c in row):
            continue
        if len(row) > len(header):
            yield path, start, Bad(f"malformed-row: {len(row)} fields, the header has {len(header)}")
            continue
        yield _checked(path, start, dict(zip(header, row)))  # a short row lacks fields: missing-field later


def _csv(path: str) -> Iterator[Row]:
    yield from _delimited(path, ",")


def _tsv(path: str) -> Iterator[Row]:
    yield from _delimited(path, "\t")


def _parquet(path: str) -> Iterator[Row]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
        for rec in batch.to_pylist():
            n += 1
            yield path, n, rec


def _html(path: str) -> Iterator[Row]:
    """Q/A records from a page, by the first rule that finds any:

    1. definition lists: each <dt> is a question, the <dd> elements after it (up to the next <dt>)
       its answer;
    2. tables: each body row is a record keyed by the header cells (<th>, or the first row), so
       the usual column detection applies; a table without a header gives (first cell, second cell);
    3. headings: each <h1>-<h6> is a question, the text of the elements after it up to the next
       heading its answer.
    Text is taken with BeautifulSoup's get_text (scripts and styles removed), never by regex.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(Path(path).read_bytes(), "html.parser")
    for tag in soup(["script", "style", "template", "noscript"]):
        tag.decompose()
    text = lambda t: t.get_text(" ", strip=True)  # noqa: E731
    found = False
    for dt in soup.find_all("dt"):
        answer = []
        for sib in dt.find_next_siblings(["dt", "dd"]):
            if sib.name == "dt":
                break
            answer.append(text(sib))
        found = True
        yield path, dt.sourceline or 0, {"prompt": text(dt), "response": " ".join(answer)}
    if found:
        return
    for table in soup.find_all("table"):
        rows = table.find_all("tr")
        header = [text(c) for c in rows[0].find_all(["th", "td"])] if rows else []
        if not recognised(header):
            header = None
        for tr in rows[1:] if header else rows:
            cells = [text(c) for c in tr.find_all(["td", "th"])]
            if header:
                found = True
                yield path, tr.sourceline or 0, dict(zip(header, cells))
            elif len(cells) >= 2:
                found = True
                yield path, tr.sourceline or 0, {"prompt": cells[0], "response": cells[1]}
    if found:
        return
    headings = ["h1", "h2", "h3", "h4", "h5", "h6"]
    for h in soup.find_all(headings):
        body = []
        for sib in h.find_next_siblings():
            if sib.name in headings:
                break
            body.append(text(sib))
        yield path, h.sourceline or 0, {"prompt": text(h), "response": " ".join(b for b in body if b)}


def _load_sql(script: str) -> sqlite3.Connection:
    """Run the dump in an in-memory SQLite database; a dump of bare INSERTs gets its tables created.

    SQLite does all the parsing. When the dump has no CREATE TABLE, SQLite's own error names the
    missing table or column; we create it (untyped) and run the dump again on a fresh database.
    """
    schema: dict[str, list[str]] = {}
    for _ in range(200):
        db = sqlite3.connect(":memory:")
        ddl = "".join(f'CREATE TABLE "{t}" ("' + '", "'.join(cols) + '");\n' for t, cols in schema.items())
        try:
            db.executescript(ddl + script)
            return db
        except sqlite3.OperationalError as e:
            msg = str(e)
            if m := re.fullmatch(r"no such table: (?:main\.)?(.+)", msg):
                schema[m.group(1).strip('"`[]')] = ["_nbutils_placeholder"]
            elif (m := re.fullmatch(r"table (.+) has no column named (.+)", msg)) and m.group(1) in schema:
                cols = schema[m.group(1)]
                cols[:] = [c for c in cols if c != "_nbutils_placeholder"] + [m.group(2)]
            else:
                raise ValueError(f"SQLite could not load the dump ({msg}); it must be SQLite-compatible "
                                 "INSERT (and CREATE TABLE) statements.") from e
        except sqlite3.Error as e:
            raise ValueError(f"SQLite could not load the dump ({e}).") from e
    raise ValueError("SQLite could not load the dump: too many tables/columns to create.")


def _sql(path: str, columns: dict | None = None) -> Iterator[Row]:
    """Load the dump into an in-memory SQLite database and read the table whose columns we recognise."""
    raw = Path(path).read_bytes()
    try:
        script, invalid = raw.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        script, invalid = raw.decode("utf-8-sig", "replace"), True  # SQLite cannot take lone surrogates
    try:
        db = _load_sql(script)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
    for table in tables:
        cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        if not recognised(cols, columns):
            continue
        for n, row in enumerate(db.execute(f'SELECT * FROM "{table}" ORDER BY rowid'), 1):
            rec = dict(zip(cols, row))
            bad = invalid and any(isinstance(v, str) and "\ufffd" in v for v in row)
            yield path, n, Bad("invalid-utf8: in a value") if bad else rec
        return
    raise ValueError(f"{path}: no table with recognisable columns among {tables}; expected e.g. prompt/response "
                     "(or pass a column mapping).")


def _hf_disk(path: str) -> Iterator[Row]:
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(path)
    if isinstance(ds, DatasetDict):
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    for n, rec in enumerate(ds, 1):
        yield path, n, rec


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub cannot be reached, or None; a few seconds here instead of a minute of retries."""
    import os
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(v, "").lower() in ("1", "true") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return None  # offline mode: load_dataset answers from the local cache, quickly
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        return f"cannot reach {host}: {e}"
    return None


def _hf_hub(path: str) -> Iterator[Row]:
    """A hub dataset id (Kaggle/Colab with internet on): its train split."""
    from datasets import load_dataset

    advice = ("Without internet (Kaggle: Settings > Internet off; or locally), download it once and pass the saved "
              "folder or a file instead, or set HF_HUB_OFFLINE=1 to use the local cache.")
    if why := _hub_unreachable():
        raise ValueError(f"{path}: looks like a Hugging Face dataset id, but {why}. {advice}")
    try:
        ds = load_dataset(path, split="train")
    except Exception as e:  # noqa: BLE001 -- the hub raises many types; the message says what to do
        raise ValueError(f"{path}: could not load it as a Hugging Face dataset id "
                         f"({type(e).__name__}: {str(e)[:200]}). {advice}") from e
    for n, rec in enumerate(ds, 1):
        yield path, n, rec
