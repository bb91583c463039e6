"""GRPO's rollouts under the guard: stopped rows cut where the guard stopped them, and a real guarded GRPO step."""

import pytest

from nbutils.eval import rollouts


def test_cut_keeps_stopped_rows_up_to_the_stop_and_others_whole():
    rows = [[1, 2, 3, 4, 5, 0, 0], [7, 8, 9]]
    report = [{"stopped": True, "stop_token": 2}, {"stopped": False, "stop_token": None}]
    assert rollouts.cut(rows, report) == ([[1, 2, 3], [7, 8, 9]], [3])


def test_with_guard_adds_the_guard_and_restores_generate():
    class Model:
        def generate(self, **kw):
            return kw["stopping_criteria"]

    model, guard = Model(), object()
    with rollouts._with_guard(model, guard):
        assert list(model.generate(stopping_criteria=None)) == [guard]
    assert "generate" not in vars(model)


@pytest.mark.integration
def test_guarded_grpo_stops_looping_rollouts_and_counts_the_tokens_it_saved(monkeypatch):
    from bench import preference_bench

    rows = preference_bench.looping_prompts(16)
    monkeypatch.setattr(preference_bench, "STEPS", 2)
    held_out = preference_bench.looping_prompts(2, seed=preference_bench.HELD_OUT_SEED)
    guarded = preference_bench.one_run(True, rows, held_out)
    assert guarded["stopped"] > 0 and guarded["tokens_saved"] > 0
    assert len(guarded["held_out"]) == 2 and all(-1.0 <= r <= 0.5 for r in guarded["held_out"])  # 05's held-out reward
    assert guarded["tokens"] + guarded["tokens_saved"] <= guarded["rollouts"] * preference_bench.COMPLETION
    assert len(guarded["rewards"]) == 2


@pytest.mark.parametrize("wrap", [rollouts.guarded, rollouts.counted])
def test_guard_stats_count_training_rollouts_not_an_evaluations(wrap):
    """The run's final evaluation samples rollouts of its own (16 held-out prompts x 4): they train nothing, so
    05's summary and the bench count the training ones only; trl's eval log still gets the guard's figures."""
    from collections import defaultdict
    from types import SimpleNamespace

    class Trainer:
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            return [[1, 2, 3], [4, 5]], None

    trainer = wrap(Trainer)()
    trainer.max_completion_length, trainer._metrics = 8, defaultdict(lambda: defaultdict(list))
    for training in (True, False):
        trainer.model = SimpleNamespace(training=training)
        if wrap is rollouts.guarded:
            trainer._count([[1, 2, 3], [4, 5]], [3])
        else:
            trainer._generate_single_turn(None)
    assert trainer.guard_stats["rollouts"] == 2 and trainer.guard_stats["tokens"] == 5
    if wrap is rollouts.guarded:
        assert trainer.guard_stats["stopped"] == 1 and trainer.guard_stats["tokens_saved"] == 5
        assert trainer._metrics["eval"]["guard/stopped_share"] == [0.5]
