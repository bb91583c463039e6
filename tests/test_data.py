"""Data prep: every format in, every bad record quarantined with its reason and line, counts add up."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils import batching, data, readers
from nbutils.modeling import load_tokenizer

GALLERY = Path(__file__).parent / "data_gallery"
GOOD = {"instruction": "what kind of word is oslo ?", "input": "", "output": "city"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("embedded")


def _invariants(m):
    c = m["counts"]
    assert c["records"] == c["kept"] + c["quarantined"] + c["duplicates"] + c["too_long"]
    assert m["splits"]["train"] + m["splits"]["eval"] == c["kept"]


def _quarantine(out):
    return [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name, line, reason", [
    ("malformed_json", 2, "malformed-json"),
    ("missing_field", 2, "missing-field: output"),
    ("unknown_role", 1, "unknown-role: robot"),
    ("no_assistant_turn", 2, "no-assistant-turn"),
    ("invalid_utf8", 2, "invalid-utf8"),
    ("too_long", 2, "too-long"),
])
def test_gallery_single_bad_record(tok, tmp_path, name, line, reason):
    m = data.prepare([str(GALLERY / f"{name}.jsonl")], tmp_path, tok, max_seq_len=64, verbose=False)
    [q] = _quarantine(tmp_path)
    assert q["source"].endswith(f"{name}.jsonl") and q["line"] == line and q["reason"].startswith(reason)
    _invariants(m)


def test_gallery_several_bad_records(tok, tmp_path):
    m = data.prepare([str(GALLERY / "empty_field.jsonl"), str(GALLERY / "wrong_type.jsonl")], tmp_path, tok,
                     verbose=False)
    got = [(Path(q["source"]).name, q["line"], q["reason"]) for q in _quarantine(tmp_path)]
    assert got == [("empty_field.jsonl", 2, "empty-field: instruction"), ("empty_field.jsonl", 3, "empty-field: output"),
                   ("wrong_type.jsonl", 1, "wrong-type: instruction is int"),
                   ("wrong_type.jsonl", 3, "wrong-type: completion is list")]
    assert m["counts"]["quarantined"] == 4
    _invariants(m)


def test_duplicates_exact_and_normalized_blank_line_not_a_record(tok, tmp_path):
    m = data.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, tok, verbose=False)
    assert m["counts"] == {"records": 4, "kept": 2, "quarantined": 0, "duplicates": 2, "too_long": 0}
    _invariants(m)


def test_strict_stops_at_first_bad_record(tok, tmp_path):
    with pytest.raises(data.DataError, match=r"missing_field.jsonl line 2: missing-field: output"):
        data.prepare([str(GALLERY / "missing_field.jsonl")], tmp_path, tok, strict=True, verbose=False)


def test_truncate_keeps_long_records(tok, tmp_path):
    rec = {"instruction": "x", "output": "word " * 200}
    (tmp_path / "in.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(GOOD) + "\n")
    m = data.prepare([str(tmp_path / "in.jsonl")], tmp_path / "out", tok, max_seq_len=64, truncate=True, verbose=False)
    assert m["counts"]["kept"] == 2 and m["counts"]["truncated"] == 1 and m["token_lengths"]["max"] == 64


def test_completion_only_labels_end_with_eos(tok, tmp_path):
    conv = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a ?"},
                         {"role": "assistant", "content": "one"}, {"role": "user", "content": "b ?"},
                         {"role": "assistant", "content": "two"}]}
    (tmp_path / "in.jsonl").write_text(json.dumps(conv) + "\n" + json.dumps(GOOD) + "\n")
    data.prepare([str(tmp_path / "in.jsonl")], tmp_path / "out", tok, eval_fraction=0.0001, verbose=False)
    rows = list(data.load_split(tmp_path / "out", "train")) + list(data.load_split(tmp_path / "out", "eval"))
    row = next(r for r in rows if len(r["messages"]) == 5)
    targets = tok.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab != data.IGNORE_INDEX])
    assert "one" in targets and "two" in targets and "a ?" not in targets and "be brief" not in targets
    assert row["labels"][-1] == tok.eos_token_id and row["input_ids"][-1] == tok.eos_token_id
    assert targets.count(tok.eos_token) == 2  # every assistant turn ends with EOS, and it is learnt
    masked = data.render_masked(row, tok)
    assert masked.startswith("[") and "one" in masked


def test_train_on_prompt_labels_everything(tok, tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "instruction": "q"}) + "\n")
    data.prepare([str(tmp_path / "in.jsonl")], tmp_path / "o", tok, train_on_prompt=True, verbose=False)
    row = data.load_split(tmp_path / "o", "train")[0]
    assert row["labels"] == row["input_ids"]


def test_pad_equal_eos_is_refused(tok, tmp_path):
    import copy

    bad = copy.deepcopy(tok)
    bad.pad_token = bad.eos_token
    with pytest.raises(data.DataError, match="pad token == EOS token"):
        data.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, bad, verbose=False)


def test_fallback_template_for_base_models(tok, tmp_path):
    import copy

    plain = copy.deepcopy(tok)
    plain.chat_template = None
    m = data.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, plain, verbose=False)
    assert m["template"] == "fallback"
    row = data.load_split(tmp_path, "train")[0]
    assert "### Assistant:" in tok.decode(row["input_ids"])


def _write_formats(d: Path):
    (d / "a.json").write_text(json.dumps([{"prompt": "p1", "completion": "c1"}, {"prompt": "p2", "response": "r2"}]))
    (d / "b.jsonl").write_text(json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}) + "\n")
    (d / "c.csv").write_text('question,answer\n"multi\nline q","a, with comma"\nq2,a2\n')
    (d / "d.tsv").write_text("prompt\tresponse\np\tr\n")
    (d / "e.html").write_text("<html><body><dl><dt>What is QLoRA?</dt><dd>LoRA on a 4-bit base.</dd></dl></body></html>")
    (d / "f.sql").write_text("CREATE TABLE qa (question TEXT, answer TEXT);\n"
                             "INSERT INTO qa VALUES ('why; not?', 'because');\nINSERT INTO qa VALUES ('x', 'y');\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"instruction": ["i1"], "output": ["o1"]}), d / "g.parquet")
    from datasets import Dataset

    Dataset.from_list([{"text": "just text"}]).save_to_disk(str(d / "h_hf"))
    return {"a.json": ("json", 2), "b.jsonl": ("jsonl", 1), "c.csv": ("csv", 2), "d.tsv": ("tsv", 1),
            "e.html": ("html", 1), "f.sql": ("sql", 2), "g.parquet": ("parquet", 1), "h_hf": ("hf_disk", 1)}


def test_every_format_is_read_and_sniffed(tok, tmp_path):
    expected = _write_formats(tmp_path)
    for name, (fmt, n) in expected.items():
        path = str(tmp_path / name)
        assert readers.sniff(path) == fmt
        recs = [r for _, _, r in readers.read(path)]
        assert len(recs) == n and all(data.to_messages(r) for r in recs), name
    m = data.prepare([str(tmp_path / n) for n in expected], tmp_path / "out", tok, verbose=False)
    assert m["counts"]["kept"] == sum(n for _, n in expected.values())
    c = next(r for _, _, r in readers.read(str(tmp_path / "c.csv")))
    assert c["question"] == "multi\nline q" and c["answer"] == "a, with comma"


def test_sql_goes_through_sqlite(tmp_path):
    (tmp_path / "x.sql").write_text("CREATE TABLE t (prompt TEXT, response TEXT);\nINSERT INTO t VALUES ('it''s', 'ok');\n")
    [(_, _, rec)] = list(readers.read(str(tmp_path / "x.sql")))
    assert rec == {"prompt": "it's", "response": "ok"}
    assert sqlite3.sqlite_version  # parsed by SQLite itself, not by us


def test_cli_exit_codes(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "nbutils.data", "prepare", str(GALLERY / "missing_field.jsonl"),
                         "--out", str(tmp_path / "ok")], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout.splitlines()[-1])["counts"]["quarantined"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n{broken\n')
    res = subprocess.run([sys.executable, "-m", "nbutils.data", "prepare", str(bad), "--out", str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "nothing usable" in res.stderr.strip().splitlines()[-1]
    assert len((tmp_path / "b" / "quarantine.jsonl").read_text().splitlines()) == 2


def test_batching_plan_and_packing_mask():
    import random

    rng = random.Random(0)
    lengths = [min(512, int(rng.lognormvariate(4, 0.8))) + 8 for _ in range(2000)]
    plan = batching.plan(lengths, 16, 512)
    shares = plan["real_token_share"]
    assert shares["random"] < shares["length_grouped"] and plan["chosen_share"] >= 0.95
    mask = batching.block_causal_mask([[2, 3]], 6)[0, 0]
    assert mask[1, 0] and not mask[2, 1] and mask[4, 2] and not mask[1, 2] and mask[5, 5] and not mask[5, 4]


def test_packed_batch_equals_separate_examples(tok):
    import torch
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), attn_implementation="sdpa").eval()
    rows = []
    for r in embedded.task_records(5):
        enc = data.encode_batch({"messages": [data.to_messages(r)]}, tok, tok.chat_template, True)
        rows.append({"input_ids": enc["input_ids"][0], "labels": enc["labels"][0]})
    packed = batching.pack(rows, 64)
    batch = batching.make_collator({"strategy": "packed"}, tok.pad_token_id)(packed)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
        blocks = batching.pack_lengths([len(r["input_ids"]) for r in rows], 64)
        for b, block in enumerate(blocks):
            start = 0
            for i in block:
                n = len(rows[i]["input_ids"])
                alone = model(input_ids=torch.tensor([rows[i]["input_ids"]])).logits[0]
                assert torch.allclose(alone, logits[b, start:start + n], atol=1e-4)
                start += n
