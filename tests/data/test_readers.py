"""Readers: each format yields (source, line, record | Bad); what cannot be read is marked Bad with its reason, and
damage stays where it is. The fuzz test at the end damages thousands of valid files (tests/data/damage.py)."""

import contextlib
import json
import pickle
import re
import sqlite3

import numpy as np
import pytest

from nbutils.data import hubdata, pairs, readers, records, splits
from nbutils.data.ledger import Ledger
from tests.data import damage

GOOD = [{"prompt": f"what kind of word is w{i} ?", "response": f"kind {i}"} for i in range(10)]


def _rows(path):
    return [(line, rec) for _, line, rec in readers.read(str(path))]


def test_jsonl_marks_bad_lines_and_skips_blank_ones(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"prompt": "a", "response": "b"}\n\n{not json}\n[1, 2]\n\xff\xfe\n{"text": "t"}\n')
    rows = _rows(path)
    assert [line for line, _ in rows] == [1, 3, 4, 5, 6]  # the blank line 2 is not a record
    assert rows[0][1] == {"prompt": "a", "response": "b"} and rows[4][1] == {"text": "t"}
    reasons = [rec.reason.split(":")[0] for _, rec in rows[1:4]]
    assert reasons == ["malformed-json", "wrong-type", "invalid-utf8"]


def test_csv_row_with_extra_fields_is_bad_and_keeps_its_start_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('prompt,response\n"two\nlines",ok\na,b,c\n')
    [(first, rec), (second, bad)] = _rows(path)
    assert (first, rec) == (2, {"prompt": "two\nlines", "response": "ok"})
    assert second == 4 and bad == readers.Bad("malformed-row: 3 fields, the header has 2")


def test_json_document_takes_the_first_list_and_numbers_records(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"meta": {"v": 1}, "train": [{"text": "a"}, "oops", {"text": "b"}]}))
    rows = _rows(path)
    assert [line for line, _ in rows] == [1, 2, 3]
    assert rows[1][1] == readers.Bad("wrong-type: record is str") and rows[2][1] == {"text": "b"}


def test_a_json_document_of_one_record_is_that_record_not_its_turns(tmp_path):
    rec = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    (tmp_path / "x.json").write_text(json.dumps(rec))
    assert [r for _, _, r in readers.read(str(tmp_path / "x.json"))] == [rec]


def test_sniff_explains_a_json_file_holding_jsonl(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert readers.sniff_why(str(path)) == ("jsonl", "extension .json, but the content is jsonl (2 of 2 lines parse on "
                                                     "their own)")


def test_unknown_format_is_refused_with_the_choices(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="format='xml' is not one of auto, jsonl"):
        list(readers.read(str(tmp_path / "x.jsonl"), "xml"))


def test_hub_id_without_internet_is_a_clear_error(tmp_path, monkeypatch):
    assert readers.sniff("someone/some_dataset") == "hf_hub"
    for not_an_id in ("./data/train.jsonl", "-x/y", "data/sub/train.jsonl"):  # the Hub's owner/name only
        with pytest.raises(FileNotFoundError, match="no such file"):
            readers.sniff(not_an_id)
    # Unreachable whatever this machine's network: the check answers before any download is tried.
    monkeypatch.setattr(hubdata, "unreachable", lambda timeout=3.0: "cannot reach huggingface.co: timed out")
    with pytest.raises(ValueError, match="but cannot reach huggingface.co: timed out. .*download it once and pass the "
                                         "saved folder"):
        list(readers.read("someone/some_dataset"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        readers.sniff(str(tmp_path / "missing.jsonl"))


# --- the cases a new user met -----------------------------------------------------------------------------------

def _jsonl(path, first_line: str, rows=GOOD):
    path.write_text(first_line + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_jsonl_whose_first_line_is_broken_keeps_the_ten_good_records_in_01_and_05(tmp_path, tok):
    path = _jsonl(tmp_path / "x.jsonl", '{"prompt": "broken", "response": ')
    assert readers.sniff_why(path) == ("jsonl", "extension .jsonl")
    ledger = Ledger()
    rows = splits.read_records([path], ledger)  # 01
    assert len(rows) == 10 and ledger.counts == {"records": 11, "kept": 0, "quarantined": 1, "duplicates": 0}
    assert [(q["line"], q["reason"].split(":")[0]) for q in ledger.quarantine] == [(1, "malformed-json")]
    pref = [{"prompt": r["prompt"], "chosen": r["response"], "rejected": "no"} for r in GOOD]
    kept, ledger = pairs.read([_jsonl(tmp_path / "p.jsonl", "{not json", pref)], tok, 128)  # 05
    assert (len(kept), ledger.counts["records"], ledger.counts["quarantined"]) == (10, 11, 1)


def test_a_jsonl_with_its_broken_line_second_reads_the_same(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(GOOD[0]) + "\n{broken\n" + "".join(json.dumps(r) + "\n" for r in GOOD[1:]))
    rows = [(n, r) for _, n, r in readers.read(str(path))]
    assert len(rows) == 11 and [n for n, r in rows if isinstance(r, readers.Bad)] == [2]


def test_a_json_named_file_of_lines_with_a_broken_first_line_is_jsonl(tmp_path):
    path = _jsonl(tmp_path / "x.json", "{oops")
    kind, why = readers.sniff_why(path)
    assert kind == "jsonl" and why == "extension .json, but the content is jsonl (10 of 11 lines parse on their own)"


def test_a_file_that_is_neither_json_nor_jsonl_says_so_and_quarantines_each_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('"prompt": "a",\n"response": \n')
    kind, why = readers.sniff_why(str(path))
    assert kind == "jsonl" and "neither one JSON document nor JSON lines (0 of 2 lines parse)" in why
    assert [r.reason.split(":")[0] for _, _, r in readers.read(str(path))] == ["malformed-json"] * 2


def test_a_json_array_with_a_broken_element_keeps_the_others(tmp_path):
    text = json.dumps(GOOD[:3], indent=2).replace('"kind 1"', '"kind 1') + "\n"
    (tmp_path / "x.json").write_text(text)
    rows = [(n, r) for _, n, r in readers.read(str(tmp_path / "x.json"))]
    assert [r for _, r in rows if not isinstance(r, readers.Bad)] == [GOOD[0], GOOD[2]]
    [(n, bad)] = [(n, r) for n, r in rows if isinstance(r, readers.Bad)]
    assert n == 2 and bad.reason.startswith("malformed-json: Invalid control character at line 8")


def test_a_csv_row_whose_quote_was_cut_does_not_swallow_the_rows_after_it(tmp_path):
    (tmp_path / "x.csv").write_text('prompt,response\n"what, then\nq2,a2\n"q, 3",a3\nq4,"a4"\n')
    rows = [(n, r) for _, n, r in readers.read(str(tmp_path / "x.csv"))]
    assert rows[0][0] == 2 and rows[0][1].reason.startswith("malformed-row: ")
    assert rows[1:] == [(3, {"prompt": "q2", "response": "a2"}), (4, {"prompt": "q, 3", "response": "a3"}),
                        (5, {"prompt": "q4", "response": "a4"})]


def test_a_bom_at_the_start_of_a_later_jsonl_line_is_not_damage(tmp_path):
    path = tmp_path / "x.jsonl"  # two files joined, the second saved with a BOM
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD[0]).encode() + b"\n\xef\xbb\xbf" + json.dumps(GOOD[1]).encode())
    assert [r for _, _, r in readers.read(str(path))] == GOOD[:2]


def test_a_cut_parquet_file_is_refused_naming_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(GOOD), tmp_path / "x.parquet")
    data = (tmp_path / "x.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.parquet: not a readable Parquet file .*export it as JSONL or CSV"):
        list(readers.read(str(tmp_path / "cut.parquet")))


def test_a_dataset_dict_without_train_names_the_split_it_read_and_split_chooses_another(tmp_path):
    from datasets import Dataset, DatasetDict

    folder = tmp_path / "prefs"
    DatasetDict({"train_sft": Dataset.from_list(GOOD[:2]), "train_prefs": Dataset.from_list(GOOD[2:5]),
                 "test_prefs": Dataset.from_list(GOOD[5:6])}).save_to_disk(str(folder))
    kind, why = readers.sniff_why(str(folder))
    assert kind == "hf_disk" and "split 'train_sft' (chosen among train_sft, train_prefs, test_prefs; split=NAME" in why
    assert len(list(readers.read(str(folder)))) == 2
    assert "split 'train_prefs' (given" in readers.sniff_why(str(folder), "train_prefs")[1]
    assert [r for _, _, r in readers.read(str(folder), split="train_prefs")] == GOOD[2:5]
    with pytest.raises(ValueError, match="no split 'dev'; it has train_sft, train_prefs, test_prefs"):
        readers.sniff_why(str(folder), "dev")


# --- the fuzz test: thousands of damaged files --------------------------------------------------------------------

def _content(kind: str, row: dict):
    """What a record says, whitespace and case aside (a CRLF file, an HTML page's collapsed text)."""
    if kind == "sft":
        return records.normalized_key(row["messages"] if "messages" in row and "source" in row
                                      else records.to_messages(row))
    norm = lambda v: " ".join(v.lower().split()) if isinstance(v, str) else (  # noqa: E731
        [(m["role"], norm(m["content"])) for m in v] if isinstance(v, list) else v)
    row = row if "source" in row else pairs.normalize(row)
    return json.dumps({k: norm(row[k]) for k in ("prompt", "chosen", "rejected", "completion", "label") if k in row})


def _fuzz_problem(case: damage.Case, path) -> str | None:
    """What went wrong with one damaged file (None: nothing)."""
    path.write_bytes(case.data)
    try:
        if case.kind == "sft":
            ledger = Ledger()
            kept = splits.read_records([str(path)], ledger)
        else:
            kept, ledger = pairs.collect([str(path)])
    except ValueError as e:  # a file that cannot be read at all: allowed when the damage touched every record
        return None if str(path) in str(e) and len(case.touched) == len(case.records) else f"refused: {e}"
    except Exception as e:  # noqa: BLE001 -- a raw exception is what the test looks for
        return f"raw {type(e).__name__}: {e}"
    c = ledger.counts
    if c["records"] != len(kept) + c["quarantined"] + c["duplicates"] or \
            len(ledger.quarantine) != c["quarantined"] + c["duplicates"]:
        return f"counts {c}, {len(kept)} kept, {len(ledger.quarantine)} listed"
    ids = [set(re.findall(r"\br(\d+) ", json.dumps(r.get("messages", r), ensure_ascii=False))) for r in kept]
    merged = [sorted(i) for i in ids if len(i) > 1 and {int(x) for x in i} - case.touched]
    if merged:  # every text starts "r<index> ": one record took in the text of another the damage left alone
        return f"records merged: {merged}"
    found = {_content(case.kind, r) for r in kept}
    lost = [i for i, r in enumerate(case.records) if i not in case.touched and _content(case.kind, r) not in found]
    return f"lost records {lost} (damage touched {sorted(case.touched)})" if lost else None


@pytest.mark.parametrize("kind", ["sft", "preference"])
def test_fuzz_damaged_files_never_raise_never_lose_a_good_record_and_counts_add_up(kind, tmp_path):
    """1,200 files of each kind (seeded): each a valid file of 1-8 records in one format, with 1-3 kinds of damage. A
    record the damage did not touch is always kept, never merged with another; the counts always add up; no raw
    exception (a file is refused with its name only when the damage touched every record)."""
    problems = []
    for case in damage.cases(seed=60, kind=kind, n=1200):
        if problem := _fuzz_problem(case, tmp_path / f"in.{case.fmt}"):
            problems.append(f"{case.name} {case.damage}: {problem}\n  {case.data[:300]!r}")
    assert not problems, f"{len(problems)} of 1200 damaged files:\n" + "\n".join(problems[:5])


def test_pretty_printed_json_values_in_a_jsonl_are_read_value_by_value(tmp_path):
    """`jq '.[]' data.json > data.jsonl` writes each record over several lines: read line by line, every line was bad."""
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"prompt": "a?", "completion": "A"}, indent=2) + "\n"
                    + json.dumps({"prompt": "b?", "completion": "B"}, indent=2) + "\n")
    kind, why = readers.sniff_why(str(path))
    assert kind == "json" and "pretty-printed" in why
    assert [rec for _, rec in _rows(path)] == [{"prompt": "a?", "completion": "A"}, {"prompt": "b?", "completion": "B"}]


def test_a_csv_field_longer_than_the_csv_modules_limit_is_read_whole(tmp_path):
    article = "\n".join(f"para, {i} of a long article" for i in range(8000))  # ~230,000 characters, many lines
    path = tmp_path / "x.csv"
    path.write_text('instruction,output\nSummarize,"' + article + '"\nNext,"short"\n')
    assert [(line, rec["output"][:4]) for line, rec in _rows(path)] == [(2, "para"), (8002, "shor")]


def test_a_short_csv_row_names_the_field_it_lacks(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("prompt,response\nonly a prompt\nq,a\n")
    ledger = Ledger()
    kept = splits.read_records([str(path)], ledger)
    assert len(kept) == 1 and [q["reason"] for q in ledger.quarantine] == ["missing-field: response"]


def test_a_tsv_field_that_starts_with_a_quote_is_text(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text('prompt\tcompletion\n"Stop" means halt\tok\nq\ta\n')
    assert [rec for _, rec in _rows(path)] == [{"prompt": '"Stop" means halt', "completion": "ok"},
                                              {"prompt": "q", "completion": "a"}]


@pytest.mark.parametrize("name", ["x.csv", "x.jsonl", "x.txt"])
def test_a_utf16_file_is_refused_naming_it_and_what_to_do(tmp_path, name):
    path = tmp_path / name
    path.write_bytes('prompt,completion\nq,a\n'.encode("utf-16"))
    with pytest.raises(ValueError, match=rf"{name}: UTF-16 text .* save it as UTF-8"):
        readers.sniff_why(str(path))


def test_several_lists_in_one_json_object_are_refused_not_one_read(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"train": [{"text": "a"}], "test": [{"text": "b"}]}))
    with pytest.raises(ValueError, match=r"several lists of records \(train, test\)"):
        _rows(path)


def test_a_lone_surrogate_from_a_json_escape_is_quarantined_naming_its_field(tmp_path):
    """Half an emoji pair (`\\ud83d` escaped, its other half cut off) parses as JSON but cannot be written as UTF-8:
    the record is quarantined, not the whole input lost when the splits are written."""
    path = tmp_path / "x.jsonl"
    path.write_text('{"prompt": "hi", "completion": "ok \\ud83d cut"}\n'
                    '{"prompt": "q", "completion": "fine \\ud83d\\ude00 pair"}\n')
    (_, bad), (_, good) = _rows(path)
    assert re.fullmatch(r"invalid-utf8: in completion \(lone surrogate \\ud83d: .*\)", bad.reason)
    assert good["completion"] == "fine \U0001f600 pair"
    (tmp_path / "x.json").write_text('[{"messages": [{"role": "user", "content": "\\udfff"}]}]')
    assert _rows(tmp_path / "x.json")[0][1].reason.startswith("invalid-utf8: in content (lone surrogate \\udfff")


@pytest.mark.parametrize("head, says", [
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "gzip-compressed file: decompress it first"),
    (b"PK\x03\x04\x14\x00\x00\x00[Content_Types].xml\x00xl/workbook.xml", "Excel workbook .* 'CSV UTF-8"),
    (b"PK\x03\x04\x14\x00\x00\x00data.jsonl\x00\x00", "a zip archive: unzip it first"),
    ("prompt,completion\nq,a\n".encode("utf-16-le"), "UTF-16 text"),  # no BOM: every other byte NUL
    ("问题,回答\n什么是猫？,动物。\n".encode("utf-16-le") * 200, "UTF-16 text"),  # mostly CJK: few NULs, one side
    (pickle.dumps([{"prompt": "q", "completion": "a"}]), "a Python pickle, not text: .* JSONL or CSV"),
    (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "a PDF document, not text: extract its text"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512, r"an old Office file \(Excel .xls.*'CSV UTF-8"),
    (bytes(range(256)) * 4, r"binary, not text \(20 NUL bytes in its first 1040 bytes\)"),  # no magic, NULs spread
])
def test_binary_files_are_named_with_what_to_do(tmp_path, head, says):
    path = tmp_path / "x.csv"
    path.write_bytes(head + b"\x00" * 16)
    with pytest.raises(ValueError, match=rf"x.csv: .*{says}"):
        readers.sniff_why(str(path))


def test_a_database_or_numpy_array_named_csv_is_named_not_called_utf16(tmp_path):
    """Both hold NULs at every offset (page headers, zero padding, small numbers): what they are, and the way out."""
    db = tmp_path / "x.csv"
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("CREATE TABLE t (prompt TEXT, completion TEXT)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [("q", "a")] * 50)
    with pytest.raises(ValueError, match=r"x.csv: an SQLite database, not text: .* \.dump > NEW.sql"):
        readers.sniff_why(str(db))
    array = tmp_path / "y.csv"
    with open(array, "wb") as f:
        np.save(f, np.arange(1000, dtype=np.int64))
    with pytest.raises(ValueError, match=r"y.csv: a NumPy array \(.npy\), not text"):
        readers.sniff_why(str(array))


def test_a_stray_nul_in_utf8_text_is_read_not_called_utf16(tmp_path):
    path = tmp_path / "x.csv"
    nuls = b"\x00" * (readers.STRAY_NULS - 1)  # with the NUL above, as many as text may hold
    path.write_bytes(b"prompt,completion\nq,a\x00b\nq2,a2\nq3," + nuls + b"\n")
    assert readers.sniff_why(str(path))[0] == "csv"
    assert [rec["completion"] for _, rec in _rows(path)] == ["a\x00b", "a2", nuls.decode()]
    path.write_bytes(path.read_bytes() + b"q4,\x00\n")
    with pytest.raises(ValueError, match=r"x.csv: binary, not text \(9 NUL bytes"):
        readers.sniff_why(str(path))
