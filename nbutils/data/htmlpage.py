"""HTML pages to question/answer records: definition lists, tables or headings, read with BeautifulSoup.

A page is read as UTF-8 (bad bytes kept so only their records are quarantined), a tag cut at the end of its line is
text, not a tag that takes the next one in, and a record that a tag left open spoiled (an answer holding the next
questions, a row holding the next rows) is one bad record, the records it holds read on their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

SWALLOWED = "malformed-html: the {} holds the {} after it (a tag left open); they are read on their own"
CUT_TAG = re.compile(r"</?(?:[A-Za-z][^<>\n]*)?(?=\r?\n[ \t]*<)")  # a tag cut before its ">", the next line a tag


def read(path: str, recognised) -> Iterator[tuple[int, dict | str]]:
    """Q/A records from a page, by the first rule that finds any:

    1. definition lists: each <dt> is a question, the <dd> elements after it (up to the next <dt>)
       its answer;
    2. tables: each body row is a record keyed by the header cells (<th>, or the first row), so
       the usual column detection applies; a table without a header gives (first cell, second cell);
    3. headings: each <h1>-<h6> is a question, the text of the elements after it up to the next
       heading its answer.
    Text is taken with BeautifulSoup's get_text (scripts and styles removed), never by regex. Yields (line of the
    tag, record), or (line, reason) for a record a tag left open spoiled; `recognised(columns)` says whether a table's
    first row is a header.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(markup(Path(path).read_bytes()), "html.parser")
    for tag in soup(["script", "style", "template", "noscript"]):
        tag.decompose()
    text = lambda t: t.get_text(" ", strip=True)  # noqa: E731
    found = False
    for dt in soup.find_all("dt"):
        answer = []
        for sib in dt.find_next_siblings(["dt", "dd"]):
            if sib.name == "dt":
                break
            answer.append(sib)
        found = True
        if any(a.find("dt") for a in answer):  # an unclosed <dd> holds the questions after it (read on their own)
            yield dt.sourceline or 0, SWALLOWED.format("answer", "questions")
            continue
        yield dt.sourceline or 0, {"prompt": text(dt), "response": " ".join(map(text, answer))}
    if found:
        return
    for table in soup.find_all("table"):
        rows = table.find_all("tr")
        header = [text(c) for c in rows[0].find_all(["th", "td"])] if rows else []
        if not recognised(header):
            header = None
        for tr in rows[1:] if header else rows:
            if tr.find("tr"):  # an unclosed cell holds the rows after it (read on their own)
                yield tr.sourceline or 0, SWALLOWED.format("row", "rows")
                found = True
                continue
            cells = [text(c) for c in tr.find_all(["td", "th"])]
            if header:
                found = True
                yield tr.sourceline or 0, dict(zip(header, cells))
            elif len(cells) >= 2:
                found = True
                yield tr.sourceline or 0, {"prompt": cells[0], "response": cells[1]}
    if found:
        return
    headings = ["h1", "h2", "h3", "h4", "h5", "h6"]
    for h in soup.find_all(headings):
        body = []
        for sib in h.find_next_siblings():
            if sib.name in headings:
                break
            body.append(text(sib))
        yield h.sourceline or 0, {"prompt": text(h), "response": " ".join(b for b in body if b)}


def markup(raw: bytes) -> str | bytes:
    """The page as text: UTF-8, its bad bytes kept as lone surrogates so only the records holding them are
    quarantined (guessing the charset of a page with one bad byte turns every accented letter into mojibake); bytes,
    for BeautifulSoup to decode, only for a page that declares another charset."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        declared = re.search(rb"""<meta[^>]+charset=["']?([\w-]+)""", raw[:4096], re.IGNORECASE)
        if declared and declared.group(1).lower() not in (b"utf-8", b"utf8"):
            return raw
        text = raw.decode("utf-8", "surrogateescape")
    # A tag cut at the end of its line (no ">" before the next line's "<") would take the next tag in: it is text
    # instead, so only its own record suffers.
    return CUT_TAG.sub(lambda m: "&lt;" + m.group(0)[1:], text)
