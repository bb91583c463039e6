"""SQL dumps to records: each statement run in an in-memory SQLite database, then the table whose columns we recognise
read back, every row with the line of the INSERT that wrote it.

SQLite does all the parsing (`sqlite3.complete_statement` finds where a statement ends). A dump of bare INSERTs gets
its tables created: SQLite's own error names the missing table or column, which is then created (untyped). A
statement SQLite refuses is one bad record at its line; when it ran over several lines (a line cut inside a quoted
value swallows the lines after it), reading goes on from the line after its first, so the statements it swallowed
are read on their own.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

PLACEHOLDER = "_nbutils_placeholder"
_TARGET = re.compile(r'(?:INSERT|REPLACE)(?:\s+OR\s+\w+)?\s+INTO\s+("[^"]+"|`[^`]+`|\[[^\]]+\]|[\w.]+)', re.I)
_COMMENTS = re.compile(r"\s*(?:--[^\n]*(?:\n|$)\s*)*")


def statements(script: str) -> Iterator[tuple[int, str, bool]]:
    """(line, statement, spans several lines) for each statement, in order; `send(True)` after a failed one that spans
    several lines restarts at the line after its first."""
    pos = 0
    while pos < len(script):
        start = _COMMENTS.match(script, pos).end()  # the statement's line: its first non-comment text
        if start >= len(script):
            return
        end = start
        while True:
            end = script.find(";", end) + 1
            if not end:
                end = len(script)  # the last statement, without its semicolon
                break
            if sqlite3.complete_statement(script[start:end]):
                break
        text = script[start:end]
        line = script.count("\n", 0, start) + 1
        multi = "\n" in text.rstrip()
        restart = yield line, text, multi
        pos = script.find("\n", start) + 1 if restart and multi else end


def _target(statement: str) -> str | None:
    m = _TARGET.match(statement.lstrip())
    return m.group(1).strip('"`[]') if m else None


def _run(db: sqlite3.Connection, statement: str, created: set) -> sqlite3.Cursor:
    """Execute one statement; a missing table or column (a dump without its CREATE TABLE) is created and it runs again."""
    for _ in range(200):
        try:
            return db.execute(statement)
        except sqlite3.OperationalError as e:
            msg = str(e)
            if m := re.fullmatch(r"no such table: (?:main\.)?(.+)", msg):
                table = m.group(1).strip('"`[]')
                db.execute(f'CREATE TABLE "{table}" ("{PLACEHOLDER}")')
                created.add(table)
            elif (m := re.fullmatch(r"table (.+) has no column named (.+)", msg)) and m.group(1) in created:
                db.execute(f'ALTER TABLE "{m.group(1)}" ADD COLUMN "{m.group(2)}"')
            else:
                raise
    raise sqlite3.OperationalError("too many tables/columns to create")


def load(script: str) -> tuple[sqlite3.Connection, dict, list[tuple[int, str]]]:
    """(database, line of each row as {(table, rowid): line}, failures as (line, message))."""
    db, created, lines, failed = sqlite3.connect(":memory:"), set(), {}, []
    steps = statements(script)
    restart = None
    while True:
        try:
            line, text, _ = steps.send(restart)
        except StopIteration:
            break
        try:
            cur = _run(db, text, created)
            restart = False
        except (sqlite3.Error, ValueError) as e:  # ValueError: lone surrogates, NUL characters
            failed.append((line, f"{type(e).__name__}: {e}"))
            restart = True
            continue
        table = _target(text)
        if table and cur.rowcount > 0 and cur.lastrowid:
            for rowid in range(cur.lastrowid - cur.rowcount + 1, cur.lastrowid + 1):
                lines[(table, rowid)] = line
    return db, lines, failed


def read(path: str, recognised) -> Iterator[tuple[int, dict | str]]:
    """(line, record) for each row of the first table whose columns `recognised(columns)` accepts, and (line, reason)
    for each statement SQLite refused; raises ValueError naming the file when no table is recognised."""
    raw = Path(path).read_bytes()
    try:
        script, invalid = raw.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        script, invalid = raw.decode("utf-8-sig", "replace"), True  # SQLite cannot take lone surrogates
    db, lines, failed = load(script)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
    for table in tables:
        cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")') if r[1] != PLACEHOLDER]
        if not recognised(cols):
            continue
        rows = db.execute(f'SELECT rowid, {", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)} FROM "{table}" '
                          "ORDER BY rowid")
        found = [(lines.get((table, r[0]), n), r[1:]) for n, r in enumerate(rows, 1)]
        for line, why in failed:
            found.append((line, f"malformed-sql: {why}"))
        for line, row in sorted(found, key=lambda x: x[0]):
            if isinstance(row, str):
                yield line, row
            elif invalid and any(isinstance(v, str) and "\ufffd" in v for v in row):
                yield line, "invalid-utf8: in a value"
            else:
                yield line, dict(zip(cols, row))
        return
    first = f"; the first statement it refused, line {failed[0][0]}: {failed[0][1]}" if failed else ""
    raise ValueError(f"{path}: SQLite could not load the dump into a table with recognisable columns (tables: "
                     f"{tables}{first}). It must be SQLite-compatible INSERT (and CREATE TABLE) statements with e.g. "
                     "prompt/response columns (or pass a column mapping).")
