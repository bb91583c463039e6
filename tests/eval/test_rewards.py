"""GRPO's example rewards: right answers, short well-formed lines, and the penalty for what the guard stops."""

import pytest

from nbutils.eval import rewards


def test_correct_reads_strings_and_chat_completions():
    chat = [[{"role": "assistant", "content": " City "}], [{"role": "assistant", "content": "food"}]]
    assert rewards.correct(chat, answer=["city", "pet"]) == [1.0, 0.0]
    assert rewards.correct(["city", "food"], answer=["city", "food"]) == [1.0, 1.0]


def test_well_formed_wants_one_short_line_without_repeats():
    assert rewards.well_formed(["city", "city city", "", "a\nb", " ".join("abcdefghij")]) == [0.5, 0, 0, 0, 0]


def test_not_degenerate_penalises_loops_only():
    assert rewards.not_degenerate(["city", "city " * 40]) == [0.0, -1.0]


def test_load_names_and_sums_the_functions():
    funcs = rewards.load(rewards.DEFAULT)
    assert [f.__name__ for f in funcs] == ["correct", "well_formed", "not_degenerate"]
    assert rewards.total(funcs, ["city", "pet " * 40], ["city", "pet"]) == [1.5, -1.0]
    with pytest.raises(ValueError, match="module:function"):
        rewards.load("correct")
    with pytest.raises(ValueError, match="has no function nope"):
        rewards.load("nbutils.eval.rewards:nope")
