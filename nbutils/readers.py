"""Readers for the raw formats people have, all yielding (source, line, record | Bad).

A record is a dict as found in the file; `line` is the 1-based line (JSONL) or record number
(everything else). A `Bad` carries the reason the record could not even be read, so the
pipeline can quarantine it instead of dropping it silently. Blank lines are not records.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("jsonl", "json", "csv", "tsv", "parquet", "html", "sql", "hf_disk", "hf_hub")


@dataclass
class Bad:
    reason: str


Row = tuple[str, int, "dict | Bad"]


def sniff(path: str) -> str:
    """Guess the format from the extension, then the content; says what it chose via the return value."""
    p = Path(path)
    if p.is_dir():
        if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() or (p / "state.json").exists():
            return "hf_disk"
        raise ValueError(f"{path}: a folder, but not a saved HF dataset (no dataset_info.json); pass a file instead.")
    if not p.exists():
        if "/" in path and not path.startswith((".", "/")) and path.count("/") == 1:
            return "hf_hub"
        raise FileNotFoundError(f"{path}: no such file. Check the path (relative paths start at the working dir).")
    ext = p.suffix.lower().lstrip(".")
    if ext in ("jsonl", "ndjson"):
        return "jsonl"
    if ext in ("json", "csv", "tsv", "parquet", "sql"):
        return ext
    if ext in ("html", "htm"):
        return "html"
    head = p.read_bytes()[:4096]
    if head.startswith(b"PAR1"):
        return "parquet"
    text = head.decode("utf-8", "replace").lstrip()
    if text.startswith("<"):
        return "html"
    if text.upper().startswith(("INSERT", "CREATE", "BEGIN", "--")):
        return "sql"
    if text.startswith("["):
        return "json"
    if text.startswith("{"):
        return "jsonl"
    return "tsv" if "\t" in text.splitlines()[0] else "csv"


def read(path: str, fmt: str = "auto") -> Iterator[Row]:
    """Yield (source, line, record-or-Bad) for every record in one input."""
    fmt = sniff(path) if fmt == "auto" else fmt
    reader = {"jsonl": _jsonl, "json": _json, "csv": _csv, "tsv": _tsv, "parquet": _parquet, "html": _html,
              "sql": _sql, "hf_disk": _hf_disk, "hf_hub": _hf_hub}.get(fmt)
    if reader is None:
        raise ValueError(f"format={fmt!r} is not one of auto, {', '.join(FORMATS)}")
    yield from reader(path)


def _jsonl(path: str) -> Iterator[Row]:
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield path, n, Bad(f"invalid-utf8: byte {e.start}")
                continue
            if not line.strip():
                continue  # a blank line is not a record
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                yield path, n, Bad(f"malformed-json: {e.msg}")
                continue
            yield path, n, rec if isinstance(rec, dict) else Bad(f"wrong-type: record is {type(rec).__name__}")


def _json(path: str) -> Iterator[Row]:
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        yield path, 1, Bad(f"invalid-utf8: byte {e.start}")
        return
    except json.JSONDecodeError as e:
        yield path, e.lineno, Bad(f"malformed-json: {e.msg}")
        return
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...]}: take the first list
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    for n, rec in enumerate(data, 1):
        yield path, n, rec if isinstance(rec, dict) else Bad(f"wrong-type: record is {type(rec).__name__}")


def _delimited(path: str, delimiter: str) -> Iterator[Row]:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        yield path, 1, Bad(f"invalid-utf8: byte {e.start}")
        return
    import io

    for n, row in enumerate(csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter), 1):
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue  # an empty row is not a record
        yield path, n, {k: v for k, v in row.items() if k is not None}


def _csv(path: str) -> Iterator[Row]:
    yield from _delimited(path, ",")


def _tsv(path: str) -> Iterator[Row]:
    yield from _delimited(path, "\t")


def _parquet(path: str) -> Iterator[Row]:
    import pyarrow.parquet as pq

    for n, rec in enumerate(pq.read_table(path).to_pylist(), 1):
        yield path, n, rec


def _html(path: str) -> Iterator[Row]:
    """Q/A pairs from a page: <dt>/<dd> pairs, else table rows (first two cells), else headings + text.

    The rule is: a definition list or a table is question -> answer; otherwise each heading is a
    question and the paragraphs under it, up to the next heading, are its answer.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(Path(path).read_bytes(), "html.parser")
    pairs = [(dt.get_text(" ", strip=True), dd.get_text(" ", strip=True))
             for dt, dd in zip(soup.find_all("dt"), soup.find_all("dd"))]
    if not pairs:
        for tr in soup.find_all("tr"):
            cells = tr.find_all("td")
            if len(cells) >= 2:
                pairs.append((cells[0].get_text(" ", strip=True), cells[1].get_text(" ", strip=True)))
    if not pairs:
        for h in soup.find_all(["h1", "h2", "h3", "h4"]):
            body = []
            for sib in h.find_next_siblings():
                if sib.name in ("h1", "h2", "h3", "h4"):
                    break
                body.append(sib.get_text(" ", strip=True))
            pairs.append((h.get_text(" ", strip=True), " ".join(b for b in body if b)))
    for n, (q, a) in enumerate(pairs, 1):
        yield path, n, {"prompt": q, "response": a}


def _sql(path: str) -> Iterator[Row]:
    """Load the dump into an in-memory SQLite database and read the table whose columns we recognise."""
    from nbutils.data import COLUMN_PAIRS

    db = sqlite3.connect(":memory:")
    try:
        db.executescript(Path(path).read_text(encoding="utf-8"))
    except sqlite3.Error as e:
        raise ValueError(f"{path}: SQLite could not load the dump ({e}); it must be INSERT/CREATE statements.") from e
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        if any(a in cols and b in cols for a, b in COLUMN_PAIRS) or "text" in cols or "messages" in cols:
            cur = db.execute(f'SELECT * FROM "{table}"')
            for n, row in enumerate(cur, 1):
                yield path, n, dict(zip(cols, row))
            return
    raise ValueError(f"{path}: no table with recognisable columns among {tables}; expected e.g. prompt/response.")


def _hf_disk(path: str) -> Iterator[Row]:
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(path)
    if isinstance(ds, DatasetDict):
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    for n, rec in enumerate(ds, 1):
        yield path, n, rec


def _hf_hub(path: str) -> Iterator[Row]:
    from datasets import load_dataset

    try:
        ds = load_dataset(path, split="train")
    except Exception as e:  # noqa: BLE001 -- the hub raises many types; the message says what to do
        raise ValueError(f"{path}: could not load it as a Hugging Face dataset id ({type(e).__name__}: {e}). "
                         "Without internet, download it once and pass the saved folder or a file.") from e
    for n, rec in enumerate(ds, 1):
        yield path, n, rec
