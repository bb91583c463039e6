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
    ({"prompt": "q", "response": True}, "wrong-type: response is bool"),  # a number is its text; a bool is no answer
    ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown-role: wizard in messages turn 1"),
    ({"messages": [U]}, "no-assistant-turn: messages has no assistant turn"),
    ({"messages": "[not json"}, "malformed-json: messages"),
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


def test_columns_beside_the_pair_join_the_prompt_whatever_the_question_is_called():
    """sql-create-context's schema (question/context/answer), OpenOrca's system_prompt, LLaMA-Factory's history."""
    sql = {"question": "How many heads?", "context": "CREATE TABLE head (age INTEGER)", "answer": "SELECT COUNT(*)"}
    assert to_messages(sql) == [{"role": "user", "content": "How many heads?\nCREATE TABLE head (age INTEGER)"},
                                {"role": "assistant", "content": "SELECT COUNT(*)"}]
    orca = {"id": "niv.1", "system_prompt": " be brief ", "question": "q", "response": "a"}
    unused = set()
    assert to_messages(orca, unused=unused) == [{"role": "system", "content": "be brief"}, U, A]
    assert unused == {"id"}
    factory = {"instruction": "q", "input": "", "output": "a", "history": [["q0", "a0"], ["q1", "a1"]]}
    assert to_messages(factory) == [{"role": "user", "content": "q0"}, {"role": "assistant", "content": "a0"},
                                    {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, U, A]
    assert to_messages({**factory, "history": []}) == [U, A]
    with pytest.raises(ValueError, match="^empty-field: history item 1 answer$"):
        to_messages({**factory, "history": [["q0", " "]]})
    with pytest.raises(ValueError, match="^wrong-type: history item 1 is not a"):
        to_messages({**factory, "history": ["q0"]})
    # the answer's column is never joined to the question: context/response reads context as the question
    assert to_messages({"context": "q", "response": "a"}) == [U, A]
    assert to_messages({"instruction": "q", "input": "", "context": "ctx", "output": "a"})[0]["content"] == "q\nctx"


def test_columns_not_read_are_named_and_blank_ones_are_not():
    unused = set()
    to_messages({"messages": [U, A], "prompt_id": "x1", "source": "", "score": None}, unused=unused)
    to_messages({"Instruction": "q", "output": "a", "Category": "open_qa"}, unused=unused)
    assert unused == {"prompt_id", "Category"}
    hotpot = {"question": "q", "answer": "a", "context": {"title": ["t"], "sentences": [["s"]]}}  # not text: not joined
    assert to_messages(hotpot, unused=unused) == [U, A] and "context" in unused


def test_a_number_is_read_as_its_text():
    assert to_messages({"question": 2, "answer": 4.5}) == [{"role": "user", "content": "2"},
                                                          {"role": "assistant", "content": "4.5"}]
    with pytest.raises(ValueError, match="^missing-field: answer$"):  # NaN: pandas' empty cell
        to_messages({"question": "q", "answer": float("nan")})


def test_openai_messages_text_parts_developer_role_and_tool_calls():
    parts = {"messages": [{"role": "developer", "content": "be nice"},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}]}
    assert to_messages(parts) == [{"role": "system", "content": "be nice"}, {"role": "user", "content": "Hi\nthere"},
                                  {"role": "assistant", "content": "Hello"}]
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, A]
    with pytest.raises(ValueError, match="^unsupported-content: image_url in messages turn 1"):
        to_messages({"messages": image})
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]}
    with pytest.raises(ValueError, match="^unsupported-tool-calls: messages turn 2 calls a tool"):
        to_messages({"messages": [U, call, A]})
    result = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    with pytest.raises(ValueError, match="^unsupported-tool-calls: messages turn 2 is a tool's result"):
        to_messages({"messages": [U, result, A]})
    unified = [{"role": "user", "content": "q", "tool_calls": None}, {"role": "assistant", "content": "a", "tool_calls": []}]
    assert to_messages({"messages": unified}) == [U, A]  # Arrow gives every turn the key, null where unused


def test_records_share_a_prompt_when_their_turns_before_the_answer_match():
    from nbutils.data.records import prompt_key

    assert prompt_key([U, A]) == prompt_key([{"role": "user", "content": " Q "}, {"role": "assistant", "content": "b"}])
    assert prompt_key([U, A]) != prompt_key([{"role": "system", "content": "s"}, U, A])
    assert prompt_key([A]) is None  # plain text has no prompt to share
