"""Records to chat messages: every shape we read, and the quarantine reason for each we cannot."""

import pytest

from nbutils.data.records import recognised, to_messages, turns

U, A = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}


def test_chat_messages_and_sharegpt_conversations():
    assert to_messages({"messages": [U, A]}) == [U, A]
    assert to_messages({"messages": '[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]'}) \
        == [U, A]  # CSV and SQL cells hold JSON text
    sharegpt = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    assert to_messages(sharegpt) == [U, A]


def test_turns_after_the_last_answer_are_dropped_so_eos_ends_the_text():
    assert to_messages({"messages": [U, A, {"role": "user", "content": "more?"}]}) == [U, A]


def test_alpaca_input_and_system_column_join_the_prompt():
    rec = {"Instruction": " q ", "input": "ctx", "output": "a", "system": "be brief"}
    assert to_messages(rec) == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "q\nctx"}, A]


def test_explicit_column_mapping_wins_over_detection():
    rec = {"prompt": "ignored", "response": "ignored", "Frage": "q", "Antwort": "a"}
    assert to_messages(rec, {"user": "frage", "assistant": "ANTWORT"}) == [U, A]


def test_lone_text_is_one_assistant_turn():
    assert to_messages({"text": " plain "}) == [{"role": "assistant", "content": "plain"}]


def test_an_empty_system_turn_is_dropped_as_an_empty_system_column_is(tmp_path):
    """Orca/ShareGPT exports carry {"role": "system", "content": ""}: the conversation is kept without it."""
    import json

    from nbutils.data import splits
    from nbutils.data.ledger import Ledger

    empty = {"role": "system", "content": ""}
    assert to_messages({"messages": [empty, U, A]}) == [U, A] == to_messages({"prompt": "q", "response": "a", "system": ""})
    sharegpt = [{"from": "system", "value": "  "}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    assert to_messages({"conversations": sharegpt}) == [U, A]
    with pytest.raises(ValueError, match="^empty-field: messages turn 2$"):  # an empty question is still refused
        to_messages({"messages": [empty, {"role": "user", "content": ""}, A]})
    path = tmp_path / "orca.jsonl"
    other = [empty, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in ([empty, U, A], [U, A], other)))
    ledger = Ledger()
    rows = splits.read_records([str(path)], ledger)
    assert [r["messages"] for r in rows] == [[U, A], other[1:]]
    assert ledger.counts == {"records": 3, "kept": 0, "quarantined": 0, "duplicates": 1}  # kept is prepare's to count
    assert ledger.counts["records"] == len(rows) + ledger.counts["quarantined"] + ledger.counts["duplicates"]


@pytest.mark.parametrize("rec, reason", [
    ({"question": "q"}, "missing-field: answer"),  # the first pair that has the column found
    ({"prompt": "q", "response": "  "}, "empty-field: response"),
    ({"prompt": "q", "response": 3}, "wrong-type: response is int"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown-role: wizard in messages turn 1"),
    ({"messages": [U]}, "no-assistant-turn: messages has no assistant turn"),
    ({"messages": "[not json"}, "malformed-json: messages"),
    ({"instruction": "q", "input": 5, "output": "a"}, "wrong-type: input is int"),
    ({"colour": "red"}, "unrecognised-record: keys colour"),
])
def test_each_unreadable_shape_raises_its_quarantine_reason(rec, reason):
    with pytest.raises(ValueError) as e:
        to_messages(rec)
    assert str(e.value) == reason


def test_recognised_columns():
    assert recognised(["Question", "Answer"]) and recognised(["messages"])
    assert not recognised(["question", "note"])
    assert recognised(["frage", "antwort"], {"user": "Frage", "assistant": "Antwort"})
    assert not recognised(["frage"], {"user": "Frage", "assistant": "Antwort"})


def test_message_lists_take_role_content_or_from_value_and_the_role_aliases_in_either_key():
    sharegpt_keys = [{"from": "human", "value": " q "}, {"from": "gpt", "value": "a"}]
    assert turns(sharegpt_keys, "prompt") == [U, A]
    assert to_messages({"messages": sharegpt_keys}) == [U, A]  # ShareGPT keys under `messages`
    assert to_messages({"conversations": [{"role": "user", "content": "q"}, {"role": "model", "content": "a"}]}) == [U, A]
    assert to_messages({"conversations": '[{"from": "human", "value": "q"}, {"from": "bot", "value": "a"}]'}) == [U, A]


@pytest.mark.parametrize("value, reason", [
    ([U, {"role": "assistant", "content": "  "}], "empty-field: chosen turn 2"),
    ([{"role": "user"}], "missing-field: chosen turn 1 content"),
    ([{"content": "x"}], "missing-field: chosen turn 1 role"),
    ([{"role": "user", "content": 3}], "wrong-type: chosen turn 1 content is int"),
    (["hi"], "wrong-type: chosen turn 1 is str"),
    ({"role": "user"}, "wrong-type: chosen is dict"),
    ([{"from": "robot", "value": "x"}], "unknown-role: robot in chosen turn 1"),
])
def test_turn_reasons_name_the_field_and_the_turn(value, reason):
    with pytest.raises(ValueError) as e:
        turns(value, "chosen")
    assert str(e.value) == reason


def test_preference_columns_are_recognised_too():
    assert recognised(["prompt", "chosen", "rejected"]) and recognised(["chosen", "rejected"])


def test_unified_arrow_structs_take_the_key_that_holds_a_value():
    """Parquet/Arrow give every turn both shapes' keys, the other shape's null: role/content or from/value."""
    unified = [{"role": None, "content": None, "from": "human", "value": "q"},
               {"role": "assistant", "content": "a", "from": None, "value": None}]
    assert to_messages({"conversations": unified}) == [U, A]
