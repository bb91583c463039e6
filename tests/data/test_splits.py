"""Data prep: every format in, every bad record quarantined with its reason and line, counts add up."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils.data import chatformat, readers, records, splits
from nbutils.data.chatformat import load_tokenizer

GALLERY = Path(__file__).parents[1] / "data_gallery"
EXPECTED = json.loads((GALLERY / "expected.json").read_text())["files"]
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


def _rows(out):
    return list(splits.load_split(out, "train")) + list(splits.load_split(out, "eval"))


def _write(path: Path, *recs) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


# --- the bad-input gallery: one file per failure class -----------------------------------------

@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gallery_file_quarantines_each_bad_record_with_reason_and_line(tok, tmp_path, name):
    m = splits.prepare([str(GALLERY / name)], tmp_path, tok, max_seq_len=64, verbose=False, plot=False)
    got = [(Path(q["source"]).name, q["line"], q["reason"]) for q in _quarantine(tmp_path)]
    want = EXPECTED[name]
    assert [(n, line) for n, line, _ in got] == [(name, line) for line, _ in want], got
    for (_, _, reason), (_, prefix) in zip(got, want):
        assert reason.startswith(prefix), (reason, prefix)
    c = m["counts"]
    assert c["quarantined"] + c["too_long"] + c["duplicates"] == len(want)
    assert c["too_long"] == sum(r.startswith("too-long") for _, r in want)
    _invariants(m)


def test_whole_gallery_at_once_counts_add_up(tok, tmp_path):
    files = [str(GALLERY / n) for n in sorted(EXPECTED) if n != "malformed_document.json"]
    m = splits.prepare(files, tmp_path, tok, max_seq_len=64, verbose=False, plot=False)
    _invariants(m)
    c = m["counts"]
    assert len(_quarantine(tmp_path)) == c["quarantined"] + c["too_long"] + c["duplicates"]
    assert m["counts"]["duplicates"] > 2  # the good record repeated across files is kept once
    assert sum(m["quarantine_reasons"].values()) == len(_quarantine(tmp_path))


def test_duplicates_exact_and_normalized_blank_line_not_a_record(tok, tmp_path):
    m = splits.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, tok, verbose=False, plot=False)
    assert m["counts"] == {"records": 4, "kept": 2, "quarantined": 0, "duplicates": 2, "too_long": 0}


def test_strict_stops_at_first_bad_record_naming_file_and_line(tok, tmp_path):
    with pytest.raises(splits.DataError, match=r"missing_field.jsonl line 2: missing-field: output"):
        splits.prepare([str(GALLERY / "missing_field.jsonl")], tmp_path, tok, strict=True, verbose=False, plot=False)
    with pytest.raises(splits.DataError, match=r"bad_rows.csv line 5: invalid-utf8"):
        splits.prepare([str(GALLERY / "bad_rows.csv")], tmp_path, tok, strict=True, verbose=False, plot=False)
    with pytest.raises(splits.DataError, match=r"too_long.jsonl line 2: too-long"):
        splits.prepare([str(GALLERY / "too_long.jsonl")], tmp_path, tok, max_seq_len=64, strict=True, verbose=False, plot=False)


def test_truncate_keeps_long_records(tok, tmp_path):
    path = _write(tmp_path / "in.jsonl", {"instruction": "x", "output": "word " * 200}, GOOD)
    m = splits.prepare([path], tmp_path / "out", tok, max_seq_len=64, truncate=True, verbose=False, plot=False)
    assert m["counts"]["kept"] == 2 and m["counts"]["truncated"] == 1 and m["counts"]["too_long"] == 0
    assert m["token_lengths"]["max"] == 64 and max(r["length"] for r in _rows(tmp_path / "out")) == 64
    _invariants(m)


def test_nothing_usable_still_writes_quarantine(tok, tmp_path):
    path = _write(tmp_path / "in.jsonl", {"nope": 1}, {"instruction": "q", "output": ""})
    with pytest.raises(splits.DataError, match="nothing usable: 2 records"):
        splits.prepare([path], tmp_path / "o", tok, verbose=False, plot=False)
    assert len(_quarantine(tmp_path / "o")) == 2


# --- labels, EOS, templates ----------------------------------------------------------------------

def test_completion_only_labels_every_assistant_turn_ends_with_eos(tok, tmp_path):
    conv = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a ?"},
                         {"role": "assistant", "content": "one"}, {"role": "user", "content": "b ?"},
                         {"role": "assistant", "content": "two"}, {"role": "user", "content": "dangling"}]}
    path = _write(tmp_path / "in.jsonl", conv, GOOD)
    splits.prepare([path], tmp_path / "out", tok, eval_fraction=0.0001, verbose=False, plot=False)
    rows = _rows(tmp_path / "out")
    for row in rows:
        assert row["input_ids"][-1] == tok.eos_token_id and row["labels"][-1] == tok.eos_token_id
        assert tok.pad_token_id not in row["input_ids"]
    row = next(r for r in rows if len(r["messages"]) > 2)
    assert [m["content"] for m in row["messages"]][-1] == "two"  # a trailing user turn teaches nothing
    targets = tok.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab != splits.IGNORE_INDEX])
    assert "one" in targets and "two" in targets and "a ?" not in targets and "be brief" not in targets
    assert "<|user|>" not in targets and "<|assistant|>" not in targets
    assert targets.count(tok.eos_token) == 2  # every assistant turn ends with EOS, and it is learnt
    masked = splits.render_masked(row, tok)
    assert masked.startswith("[<|bos|><|system|> be brief") and " one\n<|end|>[" in masked


def test_train_on_prompt_labels_everything(tok, tmp_path):
    path = _write(tmp_path / "in.jsonl", GOOD, {**GOOD, "instruction": "q"})
    m = splits.prepare([path], tmp_path / "o", tok, train_on_prompt=True, verbose=False, plot=False)
    assert m["train_on_prompt"] is True
    row = splits.load_split(tmp_path / "o", "train")[0]
    assert row["labels"] == row["input_ids"]


def test_pad_equal_eos_is_refused_with_the_fix(tok, tmp_path):
    bad = copy.deepcopy(tok)
    bad.pad_token = bad.eos_token
    with pytest.raises(splits.DataError, match="pad token == EOS token.*load_tokenizer"):
        splits.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, bad, verbose=False, plot=False)


def test_fallback_template_for_base_models(tok, tmp_path):
    plain = copy.deepcopy(tok)
    plain.chat_template = None
    m = splits.prepare([str(GALLERY / "duplicates.jsonl")], tmp_path, plain, verbose=False, plot=False)
    assert m["template"] == "fallback"
    row = splits.load_split(tmp_path, "train")[0]
    text = tok.decode(row["input_ids"])
    assert "### User:" in text and "### Assistant:" in text and row["labels"][-1] == tok.eos_token_id
    assert "### User:" in splits.render_masked(row, tok).split("]")[0]  # the prompt is masked


@pytest.mark.parametrize("template", ["tokenizer", "fallback"])
def test_fast_renderer_matches_apply_chat_template(tok, template):
    tpl = tok.chat_template if template == "tokenizer" else chatformat.FALLBACK_TEMPLATE
    render = splits.renderer(tok, tpl)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    for gen, part in ((False, msgs), (True, msgs[:2])):
        assert render(part, gen) == tok.apply_chat_template(part, chat_template=tpl, tokenize=False,
                                                            add_generation_prompt=gen)


def test_direct_backend_tokenization_matches_the_tokenizer_call(tok):
    texts = ["<|bos|><|user|> what is oslo ?\n<|assistant|> city\n<|end|>", "short", "a  b\n\n c"]
    ids, offsets = splits._tokenize(tok, texts)
    assert ids == tok(texts, add_special_tokens=False)["input_ids"]  # no padding, no truncation
    assert [len(o) for o in offsets] == [len(i) for i in ids]


def test_template_that_rewrites_history_falls_back_to_finding_the_answer(tok):
    # Like templates that drop earlier reasoning: past assistant turns render differently in a longer chat.
    def template(past):
        return ("{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
                "{{ '<|assistant|> (past) ' + " + past + " + '\\n' }}"
                "{% else %}{{ '<|' + m['role'] + '|> ' + m['content'] + '\\n' }}{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")

    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "one"},
            {"role": "user", "content": "b"}, {"role": "assistant", "content": "two"}]
    text, spans = chatformat.target_spans(splits.renderer(tok, template("m['content']")), msgs, tok.eos_token)
    assert [text[s:e] for s, e in spans] == ["one", " two\n" + tok.eos_token]
    with pytest.raises(ValueError, match="template-error"):  # the answer is gone: quarantined, not mislabelled
        chatformat.target_spans(splits.renderer(tok, template("'...'")), msgs, tok.eos_token)


# --- readers and sniffing ------------------------------------------------------------------------

def _write_formats(d: Path):
    (d / "a.json").write_text(json.dumps([{"prompt": "p1", "completion": "c1"}, {"prompt": "p2", "response": "r2"}]))
    (d / "b.jsonl").write_text(json.dumps({"conversations": [{"from": "human", "value": "hi"},
                                                             {"from": "gpt", "value": "yo"}]}) + "\n")
    (d / "c.csv").write_text('Question,Answer\n"multi\nline q","a, with comma"\nq2,a2\n')
    (d / "d.tsv").write_text("prompt\tresponse\np\tr\n")
    (d / "e.html").write_text("<html><body><dl><dt>What is QLoRA?</dt><dd>LoRA on a 4-bit base.</dd></dl></body></html>")
    (d / "f.sql").write_text("CREATE TABLE meta (k TEXT);\nCREATE TABLE qa (question TEXT, answer TEXT);\n"
                             "INSERT INTO qa VALUES ('why; not?', 'because');\nINSERT INTO qa VALUES ('x', 'y');\n")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset

    pq.write_table(pa.table({"instruction": ["i1"], "output": ["o1"]}), d / "g.parquet")
    Dataset.from_list([{"text": "just text"}]).save_to_disk(str(d / "h_hf"))
    (d / "i.json").write_text(json.dumps({"messages": [{"role": "user", "content": "u"},
                                                       {"role": "assistant", "content": "v"}]}) + "\n"
                              + json.dumps({"prompt": "w", "completion": "z"}) + "\n")  # JSONL named .json
    (d / "j_noext").write_text("instruction\toutput\nsay x\tx\n")
    (d / "k.html").write_text("<table><tr><th>Prompt</th><th>Response</th></tr><tr><td>t1</td><td>t2</td></tr>"
                              "<tr><td>t3</td><td>t4</td></tr></table>")
    (d / "l.htm").write_text("<h2>Why 4-bit?</h2><p>Memory.</p><p>A T4 has 16 GB.</p><h2>Why LoRA?</h2><p>Few weights.</p>")
    return {"a.json": ("json", 2), "b.jsonl": ("jsonl", 1), "c.csv": ("csv", 2), "d.tsv": ("tsv", 1),
            "e.html": ("html", 1), "f.sql": ("sql", 2), "g.parquet": ("parquet", 1), "h_hf": ("hf_disk", 1),
            "i.json": ("jsonl", 2), "j_noext": ("tsv", 1), "k.html": ("html", 2), "l.htm": ("html", 2)}


def test_every_format_is_read_and_sniffed(tok, tmp_path, capsys):
    expected = _write_formats(tmp_path)
    for name, (fmt, n) in expected.items():
        path = str(tmp_path / name)
        assert readers.sniff(path) == fmt, name
        recs = [r for _, _, r in readers.read(path)]
        assert len(recs) == n and all(records.to_messages(r) for r in recs), name
    m = splits.prepare([str(tmp_path / n) for n in expected], tmp_path / "out", tok)
    assert m["counts"]["kept"] == sum(n for _, n in expected.values()) and m["counts"]["quarantined"] == 0
    log = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[data]")]
    assert len(log) == len(expected)
    assert any("i.json: read as jsonl (extension .json, but the content is jsonl (2 of 2 lines parse on their own))" in x for x in log)
    c = next(r for _, _, r in readers.read(str(tmp_path / "c.csv")))
    assert records.to_messages(c) == [{"role": "user", "content": "multi\nline q"},
                                   {"role": "assistant", "content": "a, with comma"}]
    [(_, _, h1), (_, _, h2)] = readers.read(str(tmp_path / "l.htm"))
    assert h1 == {"prompt": "Why 4-bit?", "response": "Memory. A T4 has 16 GB."} and h2["response"] == "Few weights."


def test_column_mapping_and_case_insensitive_detection(tok, tmp_path):
    (tmp_path / "x.csv").write_text("Frage,Antwort,Note\nwie alt ?,drei,-\n")
    with pytest.raises(ValueError, match="unrecognised-record"):
        records.to_messages(next(r for _, _, r in readers.read(str(tmp_path / "x.csv"))))
    cols = splits.parse_columns("user=Frage, assistant=antwort")
    m = splits.prepare([str(tmp_path / "x.csv")], tmp_path / "o", tok, columns=cols, verbose=False, plot=False)
    assert m["counts"]["kept"] == 1
    assert records.to_messages({"INSTRUCTION": "i", "Output": "o"})[1] == {"role": "assistant", "content": "o"}
    with pytest.raises(ValueError, match="user=COL"):
        splits.parse_columns("q=Frage")


@pytest.mark.integration  # three child interpreters, each importing datasets and transformers
def test_cli_exit_codes(tmp_path):
    cmd = [sys.executable, "-m", "nbutils.data", "prepare"]
    ok = subprocess.run([*cmd, str(GALLERY / "missing_field.jsonl"), "--out", str(tmp_path / "ok")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.splitlines()[-1])["counts"]["quarantined"] == 1
    bad = _write(tmp_path / "bad.jsonl", {"nope": 1})
    with open(bad, "a") as f:
        f.write("{broken\n")
    res = subprocess.run([*cmd, bad, "--out", str(tmp_path / "b")], capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.strip().splitlines()[-1].startswith("error: nothing usable")
    assert len((tmp_path / "b" / "quarantine.jsonl").read_text().splitlines()) == 2


# --- manifest --------------------------------------------------------------------------------------

def test_manifest_is_complete_and_deterministic(tok, tmp_path):
    recs = [{**GOOD, "instruction": f"question number {i} ?"} for i in range(40)]
    path = _write(tmp_path / "in.jsonl", *recs)
    m1 = splits.prepare([path], tmp_path / "a", tok, seed=3, verbose=False)
    m2 = splits.prepare([path], tmp_path / "b", tok, seed=3, verbose=False, plot=False)
    m3 = splits.prepare([path], tmp_path / "c", tok, seed=4, verbose=False, plot=False)
    assert m1 == m2 and m1["content_hash"] != m3["content_hash"]
    assert m1["splits"] == {"train": 36, "eval": 4} and m1["template"] == "tokenizer"
    assert set(m1["token_lengths"]) >= {"min", "median", "p95", "max"}
    # forty questions of one shape: no long tail, so no packing (packed plans: tests/data/test_batching.py)
    assert m1["batching"]["strategy"] == "length_grouped" and m1["batching"]["batch_size"] == 16
    assert m1["batching"]["tail_ratio_p95_median"] < 2
    assert set(m1["batching"]["real_token_share"]) == {"random", "length_grouped", "packed"}
    assert (tmp_path / "a" / "lengths.png").stat().st_size > 1000 and not (tmp_path / "b" / "lengths.png").exists()  # plot=False
    assert list(splits.load_split(tmp_path / "a", "eval").features) == splits.SPLIT_COLUMNS


def test_a_token_straddling_the_prompt_answer_boundary_is_kept_in_the_labels(tok):
    # The generation prompt ends with a space that BPE merges into the answer's first word ("Ġcity").
    tpl = ("{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + '\\n' }}"
           "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}")
    msgs = [{"role": "user", "content": "what is oslo ?"}, {"role": "assistant", "content": "city"}]
    out = splits.encode_batch({"messages": [msgs]}, tok, tpl, train_on_prompt=False)
    ids, labels = out["input_ids"][0], out["labels"][0]
    targets = tok.decode([t for t, lab in zip(ids, labels) if lab != splits.IGNORE_INDEX])
    assert targets.strip().startswith("city") and out["straddled"] == [1]


def test_system_text_is_merged_where_the_template_refuses_it(tok, tmp_path):
    no_system = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                 + tok.chat_template)
    strict = copy.deepcopy(tok)
    strict.chat_template = no_system
    conv = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a ?"},
                         {"role": "assistant", "content": "one"}]}
    m = splits.prepare([_write(tmp_path / "in.jsonl", conv, GOOD)], tmp_path / "out", strict, verbose=False, plot=False)
    assert m["counts"]["quarantined"] == 0 and m["role_fixes"]["system_merged"] == 1
    row = next(r for r in _rows(tmp_path / "out") if r["messages"][0]["content"].startswith("be brief"))
    assert row["messages"][0] == {"role": "user", "content": "be brief\n\na ?"}


@pytest.mark.parametrize("fraction", [0, 1, 10, -0.1, "0.1"])
def test_eval_fraction_outside_zero_to_one_is_refused_with_why(tok, tmp_path, fraction):
    """10 meant as 10% would hold out all but one record; 0 would leave 02 and 03 nothing to measure on."""
    path = _write(tmp_path / "x.jsonl", GOOD)
    with pytest.raises(splits.DataError, match=rf"eval_fraction={fraction!r}: .*above 0 and below 1"):
        splits.prepare([path], tmp_path / "out", tok, eval_fraction=fraction, verbose=False, plot=False)


def test_a_lone_surrogate_is_quarantined_and_the_rest_written(tok, tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(GOOD) + '\n{"instruction": "hi", "output": "ok \\ud83d cut"}\n')
    m = splits.prepare([str(path)], tmp_path / "out", tok, verbose=False, plot=False)
    assert m["counts"]["kept"] == 1 and m["quarantine_reasons"] == {"invalid-utf8": 1}
    assert "lone surrogate" in _quarantine(tmp_path / "out")[0]["reason"]


# --- held-out prompts, strict with an auto length --------------------------------------------------

def test_without_shared_prompts_the_split_is_the_random_draw_itself():
    """Data whose prompts all differ splits exactly as a plain shuffle does: recorded splits do not move."""
    import random

    keys = [records.prompt_key([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}])
            for i in range(50)] + [None] * 5  # plain text shares no prompt
    order = list(range(55))
    random.Random(7).shuffle(order)
    train, held, moved = records.split_by_prompt(keys, 0.2, 7)
    assert (train, held, moved) == (order[11:], order[:11], {"moved": 0, "prompts_in_both": 0})


def test_records_that_share_a_prompt_share_a_split(tok, tmp_path, capsys):
    """Several answers to one prompt: each goes where the first one's draw put it, so 03's held-out prompts are held
    out; the records moved are counted in the manifest and the log."""
    recs = [{"instruction": f"question {i // 3} ?", "output": f"answer {i}"} for i in range(60)]  # 20 prompts x 3
    m = splits.prepare([_write(tmp_path / "in.jsonl", *recs)], tmp_path / "o", tok, eval_fraction=0.3, seed=1,
                       plot=False)
    prompts = {s: {r["messages"][0]["content"] for r in splits.load_split(tmp_path / "o", s)} for s in ("train", "eval")}
    assert prompts["eval"] and not prompts["train"] & prompts["eval"]
    assert m["splits"]["train"] + m["splits"]["eval"] == 60 and m["splits"]["eval"] % 3 == 0
    assert m["split_by_prompt"]["moved"] > 0 and m["split_by_prompt"]["prompts_in_both"] == 0
    assert f"[split] {m['split_by_prompt']['moved']} records moved" in capsys.readouterr().out
    one = [{"instruction": "same ?", "output": f"answer {i}"} for i in range(4)]  # one prompt: no split keeps it whole
    m = splits.prepare([_write(tmp_path / "one.jsonl", *one)], tmp_path / "p", tok, verbose=False, plot=False)
    assert m["splits"] == {"train": 3, "eval": 1} and m["split_by_prompt"] == {"moved": 0, "prompts_in_both": 1}


def test_strict_quarantines_what_an_auto_length_leaves_out_and_stops_on_a_given_one(tok, tmp_path):
    """max_seq_len="auto" leaves up to 1% of the records out by design: strict=True keeps them out as too long rather
    than stopping at the first; a length the user gave still stops it."""
    recs = [{"instruction": f"what kind of word is word{i} ?", "output": "city"} for i in range(150)]
    path = _write(tmp_path / "in.jsonl", *recs, {"instruction": "x", "output": "word " * 300})
    m = splits.prepare([path], tmp_path / "o", tok, strict=True, verbose=False, plot=False)
    assert m["counts"]["too_long"] == 1 and m["counts"]["kept"] == 150 and m["max_seq_len_why"].startswith("auto")
    with pytest.raises(splits.DataError, match=r"in.jsonl line 151: too-long"):
        splits.prepare([path], tmp_path / "g", tok, max_seq_len=64, strict=True, verbose=False, plot=False)
