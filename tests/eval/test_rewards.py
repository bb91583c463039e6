"""GRPO's example rewards: right answers, short well-formed lines, and the penalty for what the guard stops."""

import pytest

from nbutils.eval import rewards
from nbutils.train import preferencedata


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
    assert rewards.total(funcs, ["a", "b"], ["city", "pet " * 40], [[1], [2]], {"answer": ["city", "pet"]}) == [1.5, -1.0]
    with pytest.raises(ValueError, match="module:function"):
        rewards.load("correct")
    with pytest.raises(ValueError, match="has no function nope"):
        rewards.load("nbutils.eval.rewards:nope")


def _trl_kwargs(inputs, prompts, completions, completion_ids) -> dict:
    """The keywords trl's GRPOTrainer._calculate_rewards passes a reward function (trl itself, on a stand-in trainer)."""
    from types import SimpleNamespace

    import torch
    from trl import GRPOTrainer

    seen = {}

    def record(**kw):
        seen.update(kw)
        return [0.0] * len(kw["completions"])

    trainer = SimpleNamespace(accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
                              reward_funcs=[record], reward_processing_classes=[None], reward_func_names=["record"],
                              state=SimpleNamespace(global_step=0), args=SimpleNamespace(report_to=[]),
                              _log_completion_extra=None, _log_metric=None, environments=None)
    GRPOTrainer._calculate_rewards(trainer, inputs, prompts, completions, completion_ids)
    return seen


def test_total_calls_a_reward_function_with_trls_keywords_and_shapes():
    """A reward function written for trl (prompts=, completions= as message lists, completion_ids=, the columns,
    trainer_state=) judges 05's held-out reward too: total passes what trl passes in training."""
    inputs = [{"prompt": [{"role": "user", "content": "kind of oslo ?"}], "answer": "city"}] * 2
    prompts = [r["prompt"] for r in inputs]
    completions = [[{"role": "assistant", "content": "city"}], [{"role": "assistant", "content": "food"}]]
    trl = _trl_kwargs(inputs, prompts, completions, [[5, 2], [6]])
    ours = {}

    def strict(prompts, completions, completion_ids, answer, trainer_state, log_extra, log_metric, **kw):
        ours.update(prompts=prompts, completions=completions, completion_ids=completion_ids, answer=answer,
                    trainer_state=trainer_state, log_extra=log_extra, log_metric=log_metric, **kw)
        return [float(c[0]["content"] == a) for c, a in zip(completions, answer)]

    got = rewards.total([strict, rewards.correct], prompts, completions, [[5, 2], [6]], {"answer": ["city", "city"]})
    assert got == [2.0, 0.0] and set(ours) == set(trl)
    assert all(ours[k] == trl[k] for k in ("prompts", "completions", "completion_ids", "answer"))


def test_total_sums_as_trl_none_and_nan_count_nothing_and_a_wrong_length_says_what_to_return():
    half = lambda completions, **_: [None, float("nan")]  # noqa: E731
    assert rewards.total([half, rewards.well_formed], ["p", "p"], ["city", "city"], [[1], [1]], {}) == [0.5, 0.5]
    with pytest.raises(ValueError, match="return one number"):
        rewards.total([lambda completions, **_: [1.0]], ["p", "p"], ["a", "b"], [[1], [2]], {})


def test_the_examples_on_long_reference_answers_are_a_plan_problem_naming_the_share():
    """`correct` (exact match) and `well_formed` (0.5 for at most MAX_WORDS words) score a short wrong answer above a
    right one in other words: on data whose reference answers are mostly longer, GRPO would learn to answer short.
    The plan stops, asking for the user's own reward; the embedded task's one-word answers and a reward of the
    user's own pass."""
    ref = "The mitochondria is the organelle that produces most of the cell's ATP by oxidative phosphorylation."
    paraphrase = [{"role": "assistant", "content": "Mitochondria make most of a cell's ATP, by oxidative phosphorylation."}]
    short_wrong = [{"role": "assistant", "content": "Ribosomes."}]
    funcs = rewards.load(rewards.DEFAULT)
    assert rewards.total(funcs, [[]] * 2, [paraphrase, short_wrong], [[1]] * 2, {"answer": [ref] * 2}) == [0.0, 0.5]
    answers = [ref] * 3 + ["city"]
    # the plan's check (train layer) names this module and its short-answer length: one source each
    assert (preferencedata.EXAMPLES_MODULE, preferencedata.SHORT_ANSWER_WORDS) == (rewards.__name__, rewards.MAX_WORDS)
    [problem] = preferencedata.long_answer_problems(rewards.DEFAULT, answers)
    assert problem.startswith("3 of 4 (75%) of 01's reference answers are longer than 8 words")
    assert "reward_functions as module:function" in problem and "nbutils.eval.rewards:not_degenerate" in problem
    assert preferencedata.long_answer_problems("nbutils.eval.rewards:correct", answers)  # the examples alone, any of them
    assert preferencedata.long_answer_problems(rewards.DEFAULT, [ref, "city", "pet", "food"]) == []  # most answers short
    assert preferencedata.long_answer_problems(f"mytask.rewards:score,{rewards.__name__}:not_degenerate", answers) == []
