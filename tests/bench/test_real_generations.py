"""The real model's labelled generations (tests/data/real_generations.jsonl, written by bench/real_generations.py):
every row has a hand label and sits in the set and half its prompt belongs to, each set whole (every prompt in every
mode), the report sets last and read twice, so the degeneration bench's tune and report figures stand on what the
module says they do."""

import json
from collections import Counter

import pytest

from bench import real_generations as rg


def test_every_row_is_labelled_and_in_its_sets_half_and_every_set_is_whole():
    rows = rg.load()  # refuses rows without a label
    assert len({r["id"] for r in rows}) == len(rows)
    where = {p: (name, half) for name, (prompts, _, half) in rg.SETS.items() for ps in prompts.values() for p in ps}
    assert all((r["set"], r["half"]) == where[r["prompt"]] for r in rows)
    per_set = Counter(r["set"] for r in rows)
    assert per_set == {name: len(rg.MODES) * sum(map(len, prompts.values())) for name, (prompts, _, _) in rg.SETS.items()}
    halves = [half for _, _, half in rg.SETS.values()]
    assert halves[0] == "tune" and halves[-1] == "report"
    assert halves == sorted(halves, key=lambda half: half == "report")  # every tune set, then the report sets
    twice = {r["set"] for r in rows if "second_label" in r}
    assert twice == {name for name, (_, _, half) in rg.SETS.items() if half == "report"}  # each report set read twice ...
    assert all("second_label" in r for r in rows if r["set"] in twice)  # ... every row of it
    prompts = [p for prompts, _, _ in rg.SETS.values() for ps in prompts.values() for p in ps]
    assert len(set(prompts)) == len(prompts)  # each set's prompts are new
    assert len({seed for _, seed, _ in rg.SETS.values()}) == len(rg.SETS)


def test_a_regenerated_row_keeps_its_ids_labels_and_a_new_one_starts_unlabelled(tmp_path):
    row = {"id": "a", "text": "x"}
    assert rg.with_labels(row, {"label": "loop", "second_label": "junk", "text": "old"}) == \
        {"id": "a", "text": "x", "label": "loop", "second_label": "junk"}
    new = rg.with_labels(row, {})
    assert new == {"id": "a", "text": "x", "label": None}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(new) + "\n")
    with pytest.raises(ValueError, match="1 rows have no hand label"):
        rg.load(path)
