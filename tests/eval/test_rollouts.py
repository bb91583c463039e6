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
