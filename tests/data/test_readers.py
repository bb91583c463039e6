"""Readers: each format yields (source, line, record | Bad); what cannot be read is marked Bad with its reason."""

import json

import pytest

from nbutils.data import readers


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


def test_sniff_explains_a_json_file_holding_jsonl(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert readers.sniff_why(str(path)) == ("jsonl", "extension .json, but the content is jsonl")


def test_unknown_format_is_refused_with_the_choices(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="format='xml' is not one of auto, jsonl"):
        list(readers.read(str(tmp_path / "x.jsonl"), "xml"))


def test_sql_insert_only_dump_goes_through_sqlite(tmp_path):
    (tmp_path / "x.sql").write_text("INSERT INTO t (prompt, response) VALUES ('it''s', 'ok; fine');\n")
    [(_, n, rec)] = list(readers.read(str(tmp_path / "x.sql")))
    assert n == 1 and rec == {"prompt": "it's", "response": "ok; fine"}
    (tmp_path / "y.sql").write_text("INSERT INTO t VALUES ('a', 'b');\n")
    with pytest.raises(ValueError, match="y.sql: SQLite could not load the dump"):
        list(readers.read(str(tmp_path / "y.sql")))


def test_hub_id_without_internet_is_a_clear_error(tmp_path, monkeypatch):
    assert readers.sniff("someone/some_dataset") == "hf_hub"
    # Unreachable whatever this machine's network: the check answers before any download is tried.
    monkeypatch.setattr(readers, "_hub_unreachable", lambda timeout=3.0: "cannot reach huggingface.co: timed out")
    with pytest.raises(ValueError, match="but cannot reach huggingface.co: timed out. .*download it once and pass the "
                                         "saved folder"):
        list(readers.read("someone/some_dataset"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        readers.sniff(str(tmp_path / "missing.jsonl"))
