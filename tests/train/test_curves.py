"""Learning curves: each diagnosis from a log history shaped to produce it, and the plot from the same history."""

import pytest

from nbutils.train import curves


def _history(train, evals, lr=2e-4):
    out = [{"step": s, "loss": v, "learning_rate": lr} for s, v in train]
    return out + [{"step": s, "eval_loss": v} for s, v in evals]


def test_series_pairs_steps_with_losses_and_skips_other_logs():
    history = _history([(10, 2.0)], [(10, 2.5)]) + [{"train_runtime": 3.0}, {"loss": 1.0}]  # no step: not a point
    assert curves.series(history) == ([(10, 2.0)], [(10, 2.5)])


def test_well_fit():
    assert curves.diagnose(_history([(10, 2.0), (20, 1.0)], [(10, 2.0), (20, 1.0)])).startswith(
        "well fit: eval loss fell from 2.0000 to 1.0000")


def test_overfit_names_the_best_step():
    history = _history([(10, 2.0), (20, 0.5), (30, 0.2)], [(10, 2.0), (20, 1.0), (30, 1.5)])
    assert curves.diagnose(history).startswith("overfit from step 20: eval loss rose from 1.0000 to 1.5000")


# The three curves of the review that found the diagnosis without a "diverging" verdict: both losses climbing read as
# "underfit ... raise the learning rate", and an eval loss 22-50% above its best as "well fit ... did not rise".
CLIMBS = _history([(10, 1.8), (20, 1.4), (30, 1.2), (40, 1.1), (50, 1.6), (60, 2.1)], [(0, 2.0), (20, 1.5), (40, 1.2), (60, 2.1)])
RISES = _history([(10, 1.8), (20, 1.4), (30, 1.2), (40, 1.1), (50, 1.3), (60, 1.5)], [(0, 2.0), (20, 1.3), (40, 1.0), (60, 1.5)])
TRAIN_ABOVE = _history([(10, 1.9), (20, 1.6), (30, 1.45), (40, 1.35), (50, 1.3), (60, 1.25)],
                       [(0, 2.0), (20, 1.3), (40, 1.15), (60, 1.4)])


@pytest.mark.parametrize("history, best", [(CLIMBS, "1.2000 at step 40 to 2.1000"), (RISES, "1.0000 at step 40 to 1.5000")])
def test_eval_and_train_losses_rising_together_diverge_and_ask_for_a_lower_learning_rate(history, best):
    verdict = curves.diagnose(history)
    assert verdict.startswith(f"diverging: eval loss rose from {best} and train loss rose too"), verdict
    assert "lower the learning rate from 2.0e-04" in verdict and "raise" not in verdict and "did not rise" not in verdict


def test_an_eval_loss_rising_while_train_falls_is_overfit_even_with_train_above_the_best_eval():
    verdict = curves.diagnose(TRAIN_ABOVE)
    assert verdict == "overfit from step 40: eval loss rose from 1.1500 to 1.4000 while train loss kept falling", verdict


def test_never_did_not_rise_when_it_rose():
    """Within 10% of its best the run is still well fit, and the verdict names the best instead of denying the rise."""
    verdict = curves.diagnose(_history([(10, 2.0), (20, 1.0), (30, 0.9)], [(10, 2.0), (20, 1.0), (30, 1.05)]))
    assert verdict == "well fit: eval loss fell from 2.0000 to 1.0500 (its best 1.0000 at step 20, within 10%)", verdict


@pytest.mark.parametrize("lr, advice", [
    (2e-4, "raise the learning rate from 2.0e-04"),
    (1e-3, "the learning rate (1.0e-03) is already high"),
    (None, "train longer or raise the learning rate"),
])
def test_underfit_advice_depends_on_the_learning_rate(lr, advice):
    history = _history([(10, 2.0), (20, 1.9)], [(10, 2.0), (20, 1.9)], lr)
    if lr is None:
        history = [{k: v for k, v in h.items() if k != "learning_rate"} for h in history]
    verdict = curves.diagnose(history)
    assert verdict.startswith("underfit: eval loss fell only from 2.0000 to 1.9000") and advice in verdict


def test_one_evaluation_is_not_enough():
    assert curves.diagnose(_history([(10, 2.0)], [(10, 2.0)])) == "not enough evaluations to tell"


def test_plot_is_written(tmp_path):
    path = tmp_path / "curves.png"
    curves.plot(_history([(10, 2.0), (20, 1.0)], [(10, 2.0), (20, 1.2)]), path)
    assert path.stat().st_size > 1000


def test_grpo_losses_at_or_below_zero_stay_on_the_plot_beside_the_reward(tmp_path):
    """GRPO logs losses of zero and below and a reward: a log axis would drop the losses, so the axis is linear, and
    the reward is drawn on a second axis."""
    history = [{"step": s, "loss": loss, "reward": r} for s, loss, r in [(1, 0.0, 0.1), (2, -0.02, 0.2), (3, 0.01, 0.3)]]
    fig = curves.plot(history, tmp_path / "curves.png")
    left, right = fig.axes
    assert left.get_yscale() == "linear" and len(left.lines[0].get_xdata()) == 3
    assert right.get_ylabel() == "reward" and list(right.lines[0].get_ydata()) == pytest.approx([0.1, 0.2, 0.3])
    assert curves.rewards(history) == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert curves.plot(_history([(10, 2.0)], [(10, 2.0)]), tmp_path / "c.png").axes[0].get_yscale() == "log"


class _Trainer:
    """What final_eval reads of a Trainer: its state's log history and step, load_best_model_at_end, evaluate()."""

    def __init__(self, history, step, best=False):
        from types import SimpleNamespace

        self.state = SimpleNamespace(log_history=history, global_step=step)
        self.args = SimpleNamespace(load_best_model_at_end=best)
        self.evaluated = 0

    def evaluate(self):
        self.evaluated += 1
        return {"eval_loss": 9.0}


def test_final_eval_reuses_the_evaluation_the_run_ended_on_and_evaluates_otherwise():
    ended_on_one = _Trainer(_history([(10, 2.0)], [(0, 3.0), (10, 2.5)]) + [{"step": 10, "train_runtime": 5.0}], 10)
    assert curves.final_eval(ended_on_one) == {"eval_loss": 2.5} and ended_on_one.evaluated == 0
    stopped_between = _Trainer(_history([(12, 2.0)], [(10, 2.5)]), 12)  # a stop after the last evaluation
    assert curves.final_eval(stopped_between) == {"eval_loss": 9.0} and stopped_between.evaluated == 1
    best = _Trainer(_history([(10, 2.0)], [(10, 2.5)]), 10, best=True)  # the best checkpoint's weights were loaded
    assert curves.final_eval(best) == {"eval_loss": 9.0} and best.evaluated == 1
    assert curves.final_eval(_Trainer([], 0))["eval_loss"] == 9.0  # no evaluation at all


def test_run_loss_weighs_each_log_by_the_steps_it_covers_across_a_resume():
    """Stopped at step 13 (logging every 10), resumed there: the log at 20 is the mean of steps 14-20, seven steps."""
    history = _history([(10, 2.0), (20, 1.0)], []) + [{"step": 13, curves.RESUMED: True}]
    assert curves.run_loss(history) == pytest.approx((2.0 * 10 + 1.0 * 7) / 17)
    at_a_log = _history([(10, 2.0), (20, 1.0)], []) + [{"step": 10, curves.RESUMED: True}]  # stopped where it logged
    assert curves.run_loss(at_a_log) == pytest.approx(1.5)
    assert curves.run_loss(_history([(10, 2.0), (20, 1.0)], [])) == pytest.approx(1.5)  # no resume: ten steps each
    assert curves.series(history) == ([(10, 2.0), (20, 1.0)], [])  # the resume is no point of the curves
