"""Preference data: each shape read from a file, bad rows quarantined by line, counts that add up, and rows rendered
with the chat template exactly as 01 rendered SFT data."""

import json
from pathlib import Path

import pytest

from nbutils.data import pairs, splits

GALLERY = Path(__file__).resolve().parents[1] / "data_gallery" / "preference"


def _read(tok, name, max_tokens=128):
    return pairs.read([str(GALLERY / name)], tok, max_tokens)


def _reasons(ledger):
    return {(q["line"], q["reason"].split(":")[0]) for q in ledger.quarantine}


def test_string_pairs_quarantine_by_line_and_counts_add_up(tok):
    rows, ledger = _read(tok, "pairs.jsonl")
    assert _reasons(ledger) == {(2, "identical-sides"), (3, "empty-field"), (4, "duplicate"), (5, "too-long"),
                                (6, "malformed-json")}
    c = ledger.counts
    assert (c["records"], c["kept"], c["quarantined"], c["duplicates"]) == (7, 2, 4, 1)
    assert c["records"] == c["kept"] + c["quarantined"] + c["duplicates"]
    assert [r["line"] for r in rows] == [1, 7] and all(r["source"].endswith("pairs.jsonl") for r in rows)


def test_rendered_exactly_as_sft_renders_the_conversation(tok):
    rows, _ = _read(tok, "pairs.jsonl")
    msgs = [{"role": "user", "content": "what kind of word is oslo ?"}, {"role": "assistant", "content": "city"}]
    full = tok.apply_chat_template(msgs, tokenize=False)
    assert rows[0]["prompt"] == tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert rows[0]["prompt"] + rows[0]["chosen"] == full  # the answer runs through its end-of-turn token
    assert rows[0]["chosen"].endswith(tok.eos_token) and rows[0]["rejected"].endswith(tok.eos_token)


def test_message_list_pairs_split_off_the_shared_turns(tok):
    rows, ledger = _read(tok, "messages.jsonl")
    assert _reasons(ledger) == {(2, "prompt-mismatch")}
    assert [r["line"] for r in rows] == [1, 3]
    assert "lima" in rows[0]["prompt"] and rows[0]["chosen"].strip().startswith("city")
    assert "baker" in rows[1]["prompt"] and ledger.shapes == {"messages": 2}


def test_hh_transcripts_keep_earlier_turns_in_the_prompt(tok):
    rows, ledger = _read(tok, "hh.jsonl")
    assert _reasons(ledger) == {(2, "prompt-mismatch"), (3, "no-assistant-turn")}
    assert len(rows) == 1 and "rome" in rows[0]["prompt"] and rows[0]["rejected"].strip().startswith("pet")
    two = pairs.normalize({"chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: gus ?\n\nAssistant: name",
                                "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: gus ?\n\nAssistant: city"})
    assert [m["role"] for m in two["prompt"]] == ["user", "assistant", "user"] and two["chosen"] == "name"


def test_kto_rows_and_pairs_unpaired(tok):
    rows, ledger = _read(tok, "kto.jsonl")
    assert _reasons(ledger) == {(3, "wrong-type")}
    assert [r["label"] for r in rows] == [True, False]
    two, _ = _read(tok, "pairs.jsonl")
    flat = pairs.unpaired(two)
    assert [r["label"] for r in flat] == [True, False, True, False]
    assert flat[0]["completion"] == two[0]["chosen"] and flat[1]["completion"] == two[0]["rejected"]


def test_an_all_bad_file_fails_with_a_clear_message(tok):
    with pytest.raises(pairs.PreferenceDataError, match=r"no usable preference record.*3 read, 3 quarantined"
                       r".*line 1: identical-sides"):
        _read(tok, "all_bad.jsonl")


def test_split_keeps_every_prompt_on_one_side(tok):
    rows = [{"prompt": f"p{i % 10}", "chosen": "a", "rejected": "b"} for i in range(40)]
    train, held = pairs.split(rows, 0.2, seed=0)
    assert len(train) + len(held) == 40 and not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    assert pairs.split(rows, 0.2, seed=0) == (train, held)


def test_embedded_pairs_are_read_like_a_users_file(tok, prepared_data, tmp_path):
    records = pairs.embedded_records(splits.load_split(prepared_data, "eval"))
    loops = [r for r in records if len(r["rejected"].split()) > 1]
    assert loops and all(r["rejected"].split()[0] == r["chosen"] for r in loops)
    assert all(r["chosen"] != r["rejected"] for r in records)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows, ledger = pairs.read([str(path)], tok, 128)
    assert ledger.counts["records"] == len(records) == len(rows) + ledger.counts["duplicates"]


def test_max_records_counts_this_calls_records_when_the_ledger_is_shared(tok):
    """05 reads the training file, then the held-out file into the same ledger, each with its own smoke limit."""
    _, ledger = pairs.read([str(GALLERY / "pairs.jsonl")], tok, 128)
    rows, ledger = pairs.read([str(GALLERY / "pairs.jsonl")], tok, 128, max_records=3, ledger=ledger)
    assert ledger.counts["records"] == 7 + 3 and [r["line"] for r in rows] == [1]  # lines 1-3: one kept, two quarantined


# --- message lists, one rule in every form ------------------------------------------------------------------------

def _file(tmp_path, *recs):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


ANSWERS = {"chosen": [{"role": "assistant", "content": "city"}], "rejected": [{"role": "assistant", "content": "food"}]}


def test_a_sharegpt_prompt_list_is_read_not_a_raw_type_error(tok, tmp_path):
    rec = {"prompt": [{"from": "human", "value": "what kind of word is oslo ?"}], **ANSWERS}
    rows, ledger = pairs.read([_file(tmp_path, rec)], tok, 128)
    assert ledger.counts["kept"] == 1 and not ledger.quarantine
    assert pairs.normalize(rec)["prompt"] == [{"role": "user", "content": "what kind of word is oslo ?"}]


def test_role_human_renders_as_user_not_as_a_role_of_its_own(tok, tmp_path):
    human = {"prompt": [{"role": "human", "content": "what kind of word is oslo ?"}], **ANSWERS}
    user = {"prompt": "what kind of word is oslo ?", "chosen": "city", "rejected": "food"}
    [a], _ = pairs.read([_file(tmp_path, human)], tok, 128)
    [b], _ = pairs.read([_file(tmp_path, user)], tok, 128)
    assert "human" not in a["prompt"] and (a["prompt"], a["chosen"]) == (b["prompt"], b["chosen"])


@pytest.mark.parametrize("rec, reason", [
    ({"prompt": [{"role": "user", "content": "q"}, {"role": "user", "content": " "}], **ANSWERS},
     "empty-field: prompt turn 2"),
    ({"prompt": "q", "chosen": [{"role": "assistant", "content": ""}], "rejected": ANSWERS["rejected"]},
     "empty-field: chosen turn 1"),
    ({"prompt": "q", "completion": [{"role": "assistant", "content": ""}], "label": True},
     "empty-field: completion turn 1"),
])
def test_an_empty_turn_is_quarantined_naming_the_side_and_the_turn(rec, reason):
    with pytest.raises(ValueError) as e:
        pairs.normalize(rec)
    assert str(e.value) == reason


@pytest.mark.parametrize("rec", [
    {"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], **ANSWERS},
    {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, *ANSWERS["chosen"]],
     "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, *ANSWERS["rejected"]]},
    {"prompt": [{"role": "user", "content": "q"}, {"role": "gpt", "content": "a"}], "completion": "x", "label": True},
])
def test_a_prompt_that_ends_with_an_assistant_turn_is_quarantined_in_every_form(rec):
    with pytest.raises(ValueError, match="^prompt-ends-with-assistant: the last turn of prompt is an answer"):
        pairs.normalize(rec)


@pytest.mark.parametrize("rec", [
    {"prompt": "", **ANSWERS},  # message-list answers: kept before
    {"prompt": "  ", "chosen": "city", "rejected": "food"},
    {"prompt": [], **ANSWERS},
    {"prompt": "", "completion": "city", "label": True},
])
def test_an_empty_prompt_is_quarantined_in_string_and_message_forms(rec):
    with pytest.raises(ValueError) as e:
        pairs.normalize(rec)
    assert str(e.value) == "empty-field: prompt"


def test_an_hh_record_with_an_empty_rejected_says_empty_field_rejected():
    with pytest.raises(ValueError) as e:
        pairs.normalize({"chosen": "\n\nHuman: q ?\n\nAssistant: city", "rejected": ""})
    assert str(e.value) == "empty-field: rejected"
    with pytest.raises(ValueError, match="^no-assistant-turn: rejected does not end with an Assistant turn"):
        pairs.normalize({"chosen": "\n\nHuman: q ?\n\nAssistant: city", "rejected": "\n\nHuman: q ?"})


def test_duplicates_are_listed_with_the_line_they_repeat(tok):
    _, ledger = _read(tok, "pairs.jsonl")
    [dup] = [q for q in ledger.quarantine if q["reason"].startswith("duplicate")]
    assert (dup["line"], dup["reason"], dup["repeats"]["line"]) == (4, "duplicate: repeats line 1", 1)


def test_kto_rows_take_message_lists_as_prompts_and_completions(tok, tmp_path):
    rec = {"prompt": [{"from": "human", "value": "what kind of word is oslo ?"}],
           "completion": [{"role": "assistant", "content": "city"}], "label": 1}
    [row], ledger = pairs.read([_file(tmp_path, rec)], tok, 128)
    assert ledger.shapes == {"kto": 1} and row["label"] is True and row["completion"].strip().startswith("city")


def test_an_hh_prompt_column_is_read_as_turns_not_as_one_user_turn_of_markup(tok, tmp_path):
    """Dahoas/full-hh-rlhf: the prompt holds the Human/Assistant turns, chosen and rejected the answers alone."""
    dahoas = {"prompt": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: what kind of word is oslo ?\n\nAssistant:",
              "chosen": " city", "rejected": " food"}
    transcripts = {k: dahoas["prompt"] + dahoas[k] for k in ("chosen", "rejected")}
    row = pairs.normalize(dahoas)
    assert row["prompt"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                             {"role": "user", "content": "what kind of word is oslo ?"}]
    assert (row["shape"], row["chosen"], row["rejected"]) == ("hh", "city", "food")
    [a], ledger = pairs.read([_file(tmp_path, dahoas)], tok, 256)
    [b], _ = pairs.read([_file(tmp_path, transcripts)], tok, 256)
    assert "Human:" not in a["prompt"] and (a["prompt"], a["chosen"]) == (b["prompt"], b["chosen"])
    assert ledger.shapes == {"hh": 1}
    kto = pairs.normalize({"prompt": "\n\nHuman: q ?\n\nAssistant:", "completion": "city", "label": True})
    assert kto["prompt"] == [{"role": "user", "content": "q ?"}]
    with pytest.raises(ValueError, match="^prompt-mismatch: the prompt field is not the transcripts'"):
        pairs.normalize({"prompt": "\n\nHuman: other ?\n\nAssistant:", **transcripts})
    with pytest.raises(ValueError, match="^empty-field: prompt turn 1"):
        pairs.normalize({"prompt": "\n\nHuman: \n\nAssistant:", "chosen": "a", "rejected": "b"})


def test_content_hash_follows_the_rows_content_not_where_they_were_read():
    rows = [{"prompt": "p", "chosen": "a", "rejected": "b", "source": "x.jsonl", "line": 1}]
    moved = [{**rows[0], "source": "y.jsonl", "line": 7}]
    swapped = [{**rows[0], "chosen": "b", "rejected": "a"}]
    assert pairs.content_hash(rows) == pairs.content_hash(moved) != pairs.content_hash(swapped)


def test_the_length_limit_counts_what_trl_trains_eos_included(twin):
    """Phi-3.5 ends an answer on <|end|>, and trl appends its EOS (<|endoftext|>) after it: a pair whose rendered text
    alone is at the limit is one token over it in training, and is quarantined as too long rather than cut."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(twin("phi-3.5-mini"))
    prompt = [{"role": "user", "content": "what kind of word is oslo ?"}]
    text, answer = pairs.render(tok, prompt, "city")
    bare = len(tok(text + answer, add_special_tokens=False)["input_ids"])
    assert not answer.endswith(tok.eos_token) and pairs.trained_length(tok, text, answer) == bare + 1
    row = {"prompt": prompt, "chosen": "city", "rejected": "town"}
    _, n, side = pairs._rendered(row, tok, pairs.drawing(tok))
    assert n > bare and side in ("chosen", "rejected")


def test_a_too_long_record_is_quarantined_with_its_length_and_kept_rows_carry_theirs(tok, tmp_path):
    """05's plan names the max_length that keeps most records: every rendered row and too-long entry says its length."""
    short, long = {"prompt": "p", "chosen": "a", "rejected": "b"}, {"prompt": "q", "chosen": "word " * 80, "rejected": "c"}
    [row], ledger = pairs.read([_file(tmp_path, short, long)], tok, 64)
    [q] = ledger.quarantine
    assert q["reason"].startswith(f"too-long: prompt + chosen is {q['tokens']} tokens, over the limit of 64")
    assert q["tokens"] > 64 >= row["tokens"] > 0 and ledger.shapes == {"pairs": 1}


def _csv(tmp_path, rows):
    import pandas as pd

    path = tmp_path / "uf.csv"
    pd.DataFrame(rows).to_csv(path, index=False)  # a list of dicts becomes its repr in the cell
    return str(path)


def test_a_csv_written_from_message_lists_is_read_as_messages_not_as_their_repr(tok, tmp_path):
    def conv(answer):
        return [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": answer}]

    [row], ledger = pairs.read([_csv(tmp_path, [{"prompt": "What is 2+2?", "chosen": conv("4"),
                                                 "rejected": conv("5")}])], tok, 128)
    assert ledger.shapes == {"messages": 1} and row["chosen"] == pairs.render(tok, conv("4")[:1], "4")[1]
    assert row["prompt"] == pairs.render(tok, conv("4")[:1], "4")[0]


def test_numpys_repr_of_a_message_array_is_read_and_an_unparsable_one_quarantined(tok, tmp_path):
    """A Parquet or HF list column through pandas is a numpy array of dicts: its repr has no commas between them."""
    arr = "[{'content': 'Hi', 'role': 'user'}\n {'content': 'Hello', 'role': 'assistant'}]"
    assert pairs.listed(arr, "chosen")[1] == {"content": "Hello", "role": "assistant"}
    cut = "[{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hel"  # a cell cut short
    rows, ledger = pairs.read([_csv(tmp_path, [{"prompt": "Hi", "chosen": cut, "rejected": "no"},
                                               {"prompt": "Q", "chosen": "a", "rejected": "b"}])], tok, 128)
    [q] = ledger.quarantine
    assert [r["line"] for r in rows] == [3] and q["line"] == 2
    assert q["reason"].startswith("unparsed-messages: chosen is text that looks like a message list")
    assert "save the data as JSONL or Parquet" in q["reason"]
    assert pairs.listed("[a list in words]", "chosen") == "[a list in words]"  # plain text stays text


@pytest.mark.parametrize("rec, reason", [
    ({"question": "Q", "response_chosen": "a", "response_rejected": "b"},
     "found 'question': rename it to 'prompt'; found 'response_chosen': rename it to 'chosen'"),
    ({"instruction": "Q", "chosen": "a", "rejected": "b"}, "missing-field: prompt; found 'instruction': rename it"),
])
def test_columns_named_otherwise_are_named_with_the_rename_that_reads_them(rec, reason):
    with pytest.raises(ValueError, match=reason):
        pairs.normalize(rec)


def test_held_out_rows_that_share_a_training_prompt_are_quarantined_naming_the_training_line():
    from nbutils.data.ledger import Ledger

    train = [{"prompt": f"p{i}", "shape": "pairs", "source": "t.jsonl", "line": i} for i in range(3)]
    held = [{"prompt": "p1", "shape": "pairs", "source": "e.jsonl", "line": 1},
            {"prompt": "new", "shape": "pairs", "source": "e.jsonl", "line": 2}]
    ledger = Ledger(counts={"kept": 5}, shapes={"pairs": 5})
    assert pairs.drop_overlap(train, held, ledger) == [held[1]]
    [q] = ledger.quarantine
    assert (q["line"], ledger.counts["quarantined"], ledger.shapes["pairs"]) == (2 - 1, 1, 4)
    assert q["reason"].startswith("held-out-overlap: its prompt is also the prompt of training record t.jsonl line 1")


@pytest.mark.parametrize("family", ["gemma-2", "llama-3.2-instruct"])
def test_a_tokenizer_that_adds_bos_itself_gets_no_second_one_from_the_rendered_prompt(twin, family):
    """trl tokenizes 05's text rows with the tokenizer's special tokens: where it adds BOS itself (Llama-3's
    post-processor, Gemma-2's and Mistral's add_bos_token=true), the template's own BOS is left out of the row, so
    training sees one BOS, and the length counts that one; a tokenizer that adds none keeps the template's."""
    from transformers import AutoTokenizer

    prompt = [{"role": "user", "content": "what kind of word is oslo ?"}]
    for adds in (True, False):
        tok = AutoTokenizer.from_pretrained(str(twin(family)), add_bos_token=adds)  # the twin adds, as its family
        text, answer = pairs.render(tok, prompt, "city")
        assert text.startswith(tok.bos_token) != adds
        ids = tok(text + answer + ("" if answer.endswith(tok.eos_token) else tok.eos_token))["input_ids"]  # as trl
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
        assert pairs.trained_length(tok, text, answer) == len(ids)
        assert pairs.trl_text(tok, tok.bos_token + text) == (text if adds else tok.bos_token + text)


def test_a_control_token_inside_a_pairs_text_is_quarantined_as_01_quarantines_it(twin, tmp_path):
    """A scraped chat log with a literal end-of-turn in an answer would train an end of turn and a fake user turn in
    the middle of the chosen answer; 01 quarantines it (control-token), and so do 05's pairs."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(twin("qwen2.5-instruct")))
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "Hi", "chosen": "Hi!<|im_end|>\n<|im_start|>user\nmore", "rejected": "no"})
                    + "\n" + json.dumps({"prompt": "Hi", "chosen": "Hello!", "rejected": "no"}) + "\n")
    rows, ledger = pairs.read([str(path)], tok, 128)
    assert len(rows) == 1 and ledger.counts["quarantined"] == 1
    assert ledger.quarantine[0]["reason"].startswith("control-token: <|im_end|> in assistant text")
