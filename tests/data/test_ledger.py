"""The ledger: every record read kept, quarantined or a duplicate listed with the line it repeats; counts that add up."""

import json

import pytest

from nbutils.data.ledger import Ledger


def test_duplicates_are_listed_with_the_line_they_repeat_and_the_counts_add_up(tmp_path):
    ledger = Ledger(extra=("too_long",))
    for source, line, key in [("a.jsonl", 1, "x"), ("a.jsonl", 2, "y"), ("a.jsonl", 3, "x"), ("b.csv", 7, "y")]:
        ledger.counts["records"] += 1
        ledger.counts["kept"] += ledger.first(key, source, line)
    ledger.counts["records"] += 1
    ledger.bad("b.csv", 9, "empty-field: response")
    c = ledger.counts
    assert c == {"records": 5, "kept": 2, "quarantined": 1, "duplicates": 2, "too_long": 0}
    assert [q["reason"] for q in ledger.quarantine] == ["duplicate: repeats line 1", "duplicate: repeats a.jsonl line 2",
                                                        "empty-field: response"]
    assert ledger.quarantine[1]["repeats"] == {"source": "a.jsonl", "line": 2}
    assert ledger.reasons() == {"duplicate": 2, "empty-field": 1}
    written = [json.loads(x) for x in ledger.write(tmp_path).read_text().splitlines()]
    assert written == ledger.quarantine and len(written) == c["quarantined"] + c["duplicates"]


def test_strict_raises_the_given_error_naming_the_file_and_line():
    class Stop(ValueError):
        pass

    with pytest.raises(Stop, match=r"x.jsonl line 4: wrong-type: output is int \(strict=True"):
        Ledger(strict=True, error=Stop).bad("x.jsonl", 4, "wrong-type: output is int")


def test_a_record_kept_out_by_design_does_not_stop_strict():
    """01's auto max_seq_len leaves the longest records out on purpose: strict=True quarantines those (stop=False)."""
    ledger = Ledger(strict=True, extra=("too_long",))
    ledger.bad("x.jsonl", 4, "too-long: 900 > 512 tokens", key="too_long", stop=False)
    assert ledger.counts["too_long"] == 1 and ledger.quarantine[0]["line"] == 4
