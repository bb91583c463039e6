"""Damaged input files for the readers' fuzz test, from a seed: valid files of each format, then random damage (a line
cut, a field of the wrong type, a wrong key, an empty side, bytes that are not UTF-8, a BOM, CRLF endings, no final
newline), and which records the damage touched, so the test knows the records it must find.

A file is written as lines, each with the records whose text is on it (`Line.owners`); a line every record depends on
(a CSV header, a SQL CREATE TABLE) has them all. Record-level damage (a wrong type, a wrong key, an empty side, bad
bytes) changes one record before it is written; a cut shortens one line and touches its owners.
"""

from __future__ import annotations

import copy
import csv
import html
import io
import json
import random
from dataclasses import dataclass, field

FORMATS = {"sft": ("jsonl", "json", "csv", "tsv", "sql", "html", "parquet"),
           "preference": ("jsonl", "json", "csv", "tsv", "sql", "parquet")}
RECORD_DAMAGE = ("wrong_type", "wrong_key", "empty_side", "bad_bytes")
FILE_DAMAGE = ("cut", "bom", "crlf", "no_final_newline")
BAD = "@@BAD@@"  # replaced by bytes that are not UTF-8 once the file is encoded
WORDS = ("oslo", "rice", "it's", 'say "hi"', "a, b", "semi;colon", "tab\there", "café", "日本", "🙂", "--dash",
         "<b>", "x & y", "line\nbreak", "back\\slash", "50%", "{brace}", "[list]", "null")
FLAT = ("csv", "tsv", "sql", "html", "parquet")  # formats whose records are columns of text


@dataclass
class Line:
    text: str
    spans: list = field(default_factory=list)  # (start, end, record index): whose text lies where on the line

    @classmethod
    def of(cls, text: str, *owners: int) -> Line:
        return cls(text, [(0, len(text), i) for i in owners])


@dataclass
class Case:
    name: str
    kind: str
    fmt: str
    data: bytes
    records: list  # as written, before damage
    touched: set  # indexes of the records the damage touched
    damage: list


def _text(rng: random.Random, fmt: str, i: int) -> str:
    words = [w for w in WORDS if not (fmt == "html" and "\n" in w)]
    return f"r{i} " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))


def record(rng: random.Random, kind: str, fmt: str, i: int) -> dict:
    """One valid record of a shape the format can hold (message lists only in JSON)."""
    t = lambda: _text(rng, fmt, i)  # noqa: E731
    nested = fmt not in FLAT
    if kind == "sft":
        shapes = ["pair", "alpaca", "messages", "sharegpt"] if nested else ["pair"]
        shape = rng.choice(shapes)
        if shape == "alpaca":
            return {"instruction": t(), "input": "", "output": t()}
        if shape == "messages":
            return {"messages": [{"role": "user", "content": t()}, {"role": "assistant", "content": t()}]}
        if shape == "sharegpt":
            return {"conversations": [{"from": "human", "value": t()}, {"from": "gpt", "value": t()}]}
        return {"prompt": t(), "response": t()}
    shape = rng.choice(["pairs", "kto", "messages", "hh"] if nested else ["pairs"])
    if shape == "kto":
        return {"prompt": t(), "completion": t(), "label": rng.random() < 0.5}
    if shape == "messages":
        return {"prompt": [{"role": "user", "content": t()}], "chosen": [{"role": "assistant", "content": t() + " a"}],
                "rejected": [{"role": "assistant", "content": t() + " b"}]}
    if shape == "hh":
        q = t()
        return {"chosen": f"\n\nHuman: {q}\n\nAssistant: {t()} a", "rejected": f"\n\nHuman: {q}\n\nAssistant: {t()} b"}
    return {"prompt": t(), "chosen": t() + " a", "rejected": t() + " b"}


def _text_fields(rec: dict) -> list[tuple]:
    """Paths to the text a record cannot do without: ("key",) or ("key", turn, "content")."""
    out = []
    for k, v in rec.items():
        if isinstance(v, str) and k != "input":
            out.append((k,))
        elif isinstance(v, list):
            out += [(k, n, "content" if "content" in turn else "value") for n, turn in enumerate(v)]
    return out


def _set(rec: dict, path: tuple, value) -> None:
    target = rec
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value


def damage_record(rng: random.Random, rec: dict, how: str, fmt: str) -> dict:
    """The record with one kind of damage that makes it unusable."""
    rec = copy.deepcopy(rec)
    path = rng.choice(_text_fields(rec))
    if how == "wrong_type":
        wrong = {"parquet": [None], "sql": [7, None]}.get(fmt, [7, 2.5, ["x"], {"a": 1}, None])
        _set(rec, path, rng.choice(wrong))
    elif how == "empty_side":
        _set(rec, path, rng.choice(["", "   "]))
    elif how == "bad_bytes":
        _set(rec, path, BAD + " " + _get(rec, path))
    elif how == "wrong_key":
        if len(path) == 1:
            rec = {(k + "_x" if k == path[0] else k): v for k, v in rec.items()}
        else:
            turn = _get(rec, path[:2])
            turn[path[2] + "_x"] = turn.pop(path[2])
    if "label" in rec and how == "wrong_type" and rng.random() < 0.3:
        rec["label"] = "maybe"  # the one field that is not text
    return rec


def _get(rec: dict, path: tuple):
    for p in path:
        rec = rec[p]
    return rec


def applicable(how: str, fmt: str) -> bool:
    """Record damage a format can carry: CSV/TSV/HTML hold only text; Parquet holds no bytes that are not UTF-8."""
    if how == "wrong_type":
        return fmt in ("jsonl", "json", "sql", "parquet")
    if how == "wrong_key":
        return fmt in ("jsonl", "json", "sql")
    if how == "bad_bytes":
        return fmt != "parquet"
    return True


# --- writers: records to lines ---------------------------------------------------------------------------------

def _jsonl(rng, recs):
    return [Line.of(json.dumps(r, ensure_ascii=rng.random() < 0.5), i) for i, r in enumerate(recs)]


def _json(rng, recs):
    style = rng.choice(["per_line", "pretty", "minified"])
    if style == "minified":  # one line: a cut there touches every record from the cut on
        text, spans = "[", []
        for i, r in enumerate(recs):
            part = json.dumps(r, ensure_ascii=False)
            spans.append((len(text), len(text) + len(part) + 1, i))
            text += part + ("," if i < len(recs) - 1 else "")
        return [Line(text + "]", spans)]
    lines = [Line("[")]
    for i, r in enumerate(recs):
        body = json.dumps(r, indent=2 if style == "pretty" else None, ensure_ascii=False).split("\n")
        body[-1] += "," if i < len(recs) - 1 else ""
        lines += [Line.of("  " + b, i) for b in body]
    return lines + [Line("]")]


def _delimited(rng, recs, delimiter):
    keys = list(dict.fromkeys(k for r in recs for k in r))
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerow(keys)
    lines = [Line.of(out.getvalue().rstrip("\n"), *range(len(recs)))]  # every record needs the header
    for i, r in enumerate(recs):
        out = io.StringIO()
        csv.writer(out, delimiter=delimiter, lineterminator="\n").writerow([r.get(k, "") for k in keys])
        lines += [Line.of(x, i) for x in out.getvalue().rstrip("\n").split("\n")]
    return lines


def _sql_value(v) -> str:
    return "NULL" if v is None else str(v) if isinstance(v, (int, float)) else "'" + str(v).replace("'", "''") + "'"


def _sql(rng, recs):
    lines = [Line("-- a dump")]
    if rng.random() < 0.5:
        cols = list(dict.fromkeys(k for r in recs for k in r))
        lines.append(Line(f"CREATE TABLE t ({', '.join(c + ' TEXT' for c in cols)});"))
    for i, r in enumerate(recs):
        stmt = f"INSERT INTO t ({', '.join(r)}) VALUES ({', '.join(map(_sql_value, r.values()))});"
        lines += [Line.of(x, i) for x in stmt.split("\n")]
    return lines


def _html(rng, recs):
    esc = lambda r, k: html.escape(str(r.get(k) if r.get(k) is not None else ""))  # noqa: E731
    keys = list(dict.fromkeys(k for r in recs for k in r))
    if rng.random() < 0.5:
        lines = [Line("<html><body>"), Line("<dl>")]
        for i, r in enumerate(recs):  # a term's answer is every <dd> up to the next <dt>: one lost joins the last
            lines += [Line.of(f"  <dt>{esc(r, keys[0])}</dt>", *{i, max(i - 1, 0)}),
                      Line.of(f"  <dd>{esc(r, keys[1])}</dd>", i)]
        return lines + [Line("</dl>"), Line("</body></html>")]
    every = range(len(recs))
    lines = [Line.of("<table>", *every), Line.of("<tr>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>", *every)]
    for i, r in enumerate(recs):
        lines.append(Line.of("<tr>" + "".join(f"<td>{esc(r, k)}</td>" for k in keys) + "</tr>", i))
    return lines + [Line("</table>")]


WRITERS = {"jsonl": _jsonl, "json": _json, "csv": lambda rng, r: _delimited(rng, r, ","),
           "tsv": lambda rng, r: _delimited(rng, r, "\t"), "sql": _sql, "html": _html}


def _parquet(recs) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in recs for k in r))
    out = io.BytesIO()
    pq.write_table(pa.table({k: pa.array([r.get(k) for r in recs], pa.string()) for k in keys}), out)
    return out.getvalue()


# --- one damaged file ------------------------------------------------------------------------------------------

def case(seed: int, kind: str, fmt: str) -> Case:
    """A valid file of 1-8 records of `kind` in `fmt`, with 1-3 kinds of damage."""
    rng = random.Random(seed)
    recs = [record(rng, kind, fmt, i) for i in range(rng.randint(1, 8))]
    kinds = [d for d in RECORD_DAMAGE + FILE_DAMAGE if applicable(d, fmt)
             and (fmt != "parquet" or d in RECORD_DAMAGE + ("cut",))]
    damage = rng.sample(kinds, rng.randint(1, 3))
    written, touched = list(recs), set()
    for how in damage:
        if how in RECORD_DAMAGE and len(touched) < len(recs):
            i = rng.choice([k for k in range(len(recs)) if k not in touched])  # one kind of damage a record
            written[i], touched = damage_record(rng, written[i], how, fmt), touched | {i}
    if fmt == "parquet":
        data = _parquet(written)
        if "cut" in damage:
            data, touched = data[:rng.randrange(len(data))], set(range(len(recs)))
        return Case(f"{kind}-{fmt}-{seed}", kind, fmt, data, recs, touched, damage)
    lines = WRITERS[fmt](rng, written)
    if "cut" in damage:
        at = rng.choice([n for n, line in enumerate(lines) if line.text])
        col = rng.randrange(len(lines[at].text))
        touched |= {o for start, end, o in lines[at].spans if end > col}
        lines[at] = Line(lines[at].text[:col])
    text = ("\r\n" if "crlf" in damage else "\n").join(line.text for line in lines)
    text += "" if "no_final_newline" in damage else "\r\n" if "crlf" in damage else "\n"
    data = ("\ufeff" if "bom" in damage else "").encode() + text.encode("utf-8").replace(BAD.encode(), b"\xff\xfe")
    return Case(f"{kind}-{fmt}-{seed}", kind, fmt, data, recs, touched, damage)


def cases(seed: int, kind: str, n: int, formats: tuple = ()):
    """n damaged files of one kind, the formats in turn (Parquet a third as often: writing one takes 10 ms)."""
    turn = [f for f in formats or FORMATS[kind] for _ in range(1 if f == "parquet" else 3)]
    for k in range(n):
        yield case(seed * 1_000_003 + k, kind, turn[k % len(turn)])
