"""Reading every input into records: a record cap shared by the inputs, and the fix for an Excel (cp1252) CSV."""

import json
import tracemalloc

from nbutils.data import intake
from nbutils.data.intake import read_records
from nbutils.data.ledger import Ledger


def _jsonl(path, n, tag):
    path.write_text("".join(json.dumps({"prompt": f"{tag} {i}", "response": "a"}) + "\n" for i in range(n)))
    return str(path)


def test_the_record_cap_is_shared_so_every_input_is_read(tmp_path, capsys):
    inputs = [_jsonl(tmp_path / "a.jsonl", 300, "a"), _jsonl(tmp_path / "b.jsonl", 5, "b"),
              _jsonl(tmp_path / "c.jsonl", 300, "c")]
    ledger = Ledger()
    rows = read_records(inputs, ledger, max_records=200, verbose=True)
    got = {p: sum(r["source"] == p for r in rows) for p in inputs}
    assert got == {inputs[0]: 67, inputs[1]: 5, inputs[2]: 128}  # b's unused share goes to c
    assert ledger.counts["records"] == 200 and ledger.inputs[inputs[0]]["capped"] == 67
    out = capsys.readouterr().out
    assert f"{inputs[0]}: read as jsonl" in out and "stopped there: max_records=200 is shared by 3 inputs" in out


def test_a_windows_1252_csv_says_how_to_convert_it_and_keeps_its_rows_quarantined(tmp_path, capsys):
    path = tmp_path / "excel.csv"
    path.write_bytes("instruction,output\r\nSay café,It’s café\r\nSay hi,hi\r\n".encode("cp1252"))
    ledger = Ledger()
    rows = read_records([str(path)], ledger, verbose=True)
    assert len(rows) == 1 and [q["reason"] for q in ledger.quarantine] == ["invalid-utf8: in instruction"]
    assert "iconv -f cp1252 -t utf-8" in ledger.inputs[str(path)]["hint"]
    assert "Windows-1252" in capsys.readouterr().out
    mixed = tmp_path / "mixed.csv"  # UTF-8 accents beside one cp1252 row: converting would garble the UTF-8 ones
    mixed.write_bytes("instruction,output\nSay café,café\n".encode() + "Say thé,thé\n".encode("cp1252"))
    ledger = Ledger()
    read_records([str(mixed)], ledger)
    assert ledger.counts["quarantined"] == 1 and "hint" not in ledger.inputs[str(mixed)]


def test_the_encoding_of_a_large_file_is_judged_in_bounded_memory(tmp_path):
    """A multi-GB Excel CSV must not be read whole (and decoded twice) to say how to convert it: a 48 MiB one is
    judged from a bounded stream, and a cp1252 accent far down the file still gets the hint."""
    path = tmp_path / "big.csv"
    line = b"instruction,output\r\n" + b"Say hi,hi there and a few more words\r\n" * 20000
    with open(path, "wb") as f:
        for _ in range(48 << 20 // len(line)):
            f.write(line)
        f.write("Say café,café\r\n".encode("cp1252"))
    tracemalloc.start()
    try:
        hint = intake.encoding_hint(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert hint and "iconv -f cp1252" in hint
    assert peak < 4 * intake.HINT_SAMPLE  # the chunks in flight, not the file's 48 MiB


def test_columns_no_shape_reads_are_named_once_per_file(tmp_path, capsys):
    """sql-create-context keeps its schema (context joins the question); what no record reads is said, once."""
    path = tmp_path / "sql.jsonl"
    recs = [{"question": f"q{i}", "context": "CREATE TABLE t (a INT)", "answer": "SELECT 1", "id": i, "note": ""}
            for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ledger = Ledger()
    rows = read_records([str(path)], ledger, verbose=True)
    assert rows[0]["messages"][0]["content"] == "q0\nCREATE TABLE t (a INT)"
    out = capsys.readouterr().out
    assert out.count("columns not used") == 1 and f"[data] {path}: columns not used: id (" in out
    assert ledger.inputs[str(path)]["columns_not_used"] == ["id"]
    read_records([_jsonl(tmp_path / "plain.jsonl", 2, "p")], Ledger(), verbose=True)
    assert "columns not used" not in capsys.readouterr().out


def test_a_folder_is_read_through_its_one_data_file_or_names_its_files_to_paste(tmp_path, capsys):
    """A Kaggle input (/kaggle/input/mydata: train.csv, test.csv) or a hub snapshot (data/train-*.parquet) is not a
    saved dataset: its one data file is read, said in the log; several are listed as the raw_data value to paste."""
    import pytest

    one = tmp_path / "one"
    (one / "data").mkdir(parents=True)
    (one / "README.md").write_text("# card")
    (one / ".gitattributes").write_text("*.jsonl lfs")
    _jsonl(one / "data" / "train-00000-of-00001.jsonl", 3, "a")
    ledger = Ledger()
    rows = read_records([str(one)], ledger, verbose=True)
    file = str(one / "data" / "train-00000-of-00001.jsonl")
    assert len(rows) == 3 and rows[0]["source"] == file
    assert f"the only data file in the folder {one}" in ledger.inputs[file]["why"] and file in capsys.readouterr().out
    kaggle = tmp_path / "mydata"
    kaggle.mkdir()
    for name in ("train.csv", "test.csv"):
        (kaggle / name).write_text("prompt,response\nq,a\n")
    with pytest.raises(ValueError, match="holding 2 data files: test.csv, train.csv") as e:
        read_records([str(kaggle)], Ledger())
    assert f'"{kaggle / "test.csv"},{kaggle / "train.csv"}"' in str(e.value) and "raw_data" in str(e.value)
    many = tmp_path / "shards"
    (many / "data").mkdir(parents=True)
    for i in range(12):
        (many / "data" / f"train-{i:05d}.parquet").write_bytes(b"PAR1")
    with pytest.raises(ValueError, match=r"holding 12 data files: data/train-00000.parquet, .* and 2 more"):
        read_records([str(many)], Ledger())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no data file"):
        read_records([str(tmp_path / "empty")], Ledger())
