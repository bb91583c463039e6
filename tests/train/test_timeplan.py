"""The time plan's arithmetic on a fake clock: calibration window, prediction, budget verdict, what to change."""

from types import SimpleNamespace

from nbutils.runtime import limits
from nbutils.train import timeplan


def test_the_window_takes_a_scheduled_evaluation_and_save_when_one_falls_in_it():
    assert timeplan.window(0, 400, 20, 20) == 20  # 2 warm-up + 20 timed: step 20 is evaluated and saved anyway
    assert timeplan.window(0, 400, 7, 11) == timeplan.WARMUP + 20  # nothing scheduled: 5% of the steps timed
    assert timeplan.window(0, 10, 5, 5) is None  # too short to plan
    # 100 steps, evaluated and saved every 10: step 10 instead of a forced evaluation and save at step 7
    assert timeplan.window(0, 100, 10, 10) == 10 and timeplan.window(0, 100, 50, 50) == 7


def _log(step_s=1.0, eval_s=4.0, save_s=2.0, end=22, forced=False):
    """A TimeLog as TimeLog would leave it after `end` steps of step_s seconds, 100 tokens each."""
    log = timeplan.TimeLog(clock=lambda: 1000.0 + end * step_s + eval_s + save_s)
    log.train_start, log.start_step, log.end_step = 1000.0, 0, end
    log.steps = [(s, step_s, 100) for s in range(1, end + 1)]
    log.evals, log.saves = {end: eval_s}, {end: save_s}
    if forced:
        log.forced, log.forced_saves = {end}, {end}
    return log


def _predict(log, budget_s=None, total=400):
    return timeplan.predict(log, total_steps=total, eval_steps=20, save_steps=20, tokens_per_step=100,
                            budget_s=budget_s, session_start=990.0, limits=limits.for_platform("kaggle"), batch_size=8)


def test_the_prediction_adds_the_steps_evaluations_and_saves_still_to_come():
    plan = _predict(_log())
    # 378 steps of 1 s, evaluations at 40..400 plus the final one (20 x 4 s), saves at 40..400 (19 x 2 s)
    assert plan.n_evals == 20 and plan.n_saves == 19
    assert abs(plan.predicted_s - (28.0 + 378 + 80 + 38)) < 1e-6
    assert plan.low_s < plan.predicted_s < plan.high_s
    assert plan.stop_step is None and "no time budget" in plan.table()  # local: no session limit either
    assert plan.cost_s == 0.0 and "nothing" in plan.rows()["time.calibration_cost"]


def test_a_run_that_cannot_fit_its_budget_is_told_where_it_stops_and_what_to_change():
    plan = _predict(_log(), budget_s=300.0)
    assert plan.stop_step is not None and plan.stop_step < 400 and plan.sessions >= 2
    table = plan.table()
    assert "DOES NOT FIT" in table and "time.to_fit" in table
    assert f"max_steps={plan.stop_step}" in table and "per_device_batch_size=4" in table


def test_a_forced_calibration_counts_its_evaluation_and_save_as_its_cost():
    plan = _predict(_log(forced=True), total=40)
    assert plan.cost_s == 6.0
    assert "more than 3%" in plan.rows()["time.calibration_cost"]  # a 40-step run: the plan says it costs too much


def test_more_than_the_weekly_quota_is_named():
    plan = _predict(_log(step_s=400.0), budget_s=690 * 60.0)
    assert "MORE than kaggle gives in a week" in plan.rows()["time.sessions"]


def test_every_reads_the_strategy():
    args = SimpleNamespace(eval_strategy="steps", eval_steps=20, save_strategy="no", save_steps=50)
    assert timeplan.every(args, "eval") == 20 and timeplan.every(args, "save") == 0



def _timed(step_s: float, upto: int) -> timeplan.TimeLog:
    log = timeplan.TimeLog()
    log.start_step, log.steps = 0, [(s, step_s, 100) for s in range(1, upto + 1)]
    return log


def test_a_window_of_short_steps_goes_on_to_the_next_scheduled_evaluation_until_it_has_timed_enough():
    # 0.05 s steps: the 18 timed steps by step 20 are 0.9 s, under MIN_TIMED_S (5 s)
    assert _timed(0.05, 20).longer(20, 400, 20, 20) == 40  # the next scheduled evaluation and save
    assert _timed(0.05, 100).longer(100, 400, 20, 20) == 100  # a quarter of the run: it ends there, at a scheduled one
    assert _timed(0.05, 22).longer(22, 400, 0, 20) == 2 + 100  # nothing scheduled: where 5 s is reached, capped
    assert _timed(1.0, 20).longer(20, 400, 20, 20) == 20  # 18 s timed: long enough


def test_the_extended_window_asks_for_one_evaluation_and_save_at_its_end_only():
    clock = iter(range(10_000))
    log = timeplan.TimeLog(clock=lambda: next(clock) * 0.05)
    args = SimpleNamespace(eval_strategy="steps", eval_steps=20, save_strategy="steps", save_steps=20)
    state = SimpleNamespace(global_step=0, max_steps=400, num_input_tokens_seen=0)
    log.on_train_begin(args, state, None)
    asked = []
    for step in range(1, 121):
        state.global_step = step
        control = SimpleNamespace(should_evaluate=step % 20 == 0, should_save=step % 20 == 0)
        log.on_step_end(args, state, control)
        asked += [step] if step == log.end_step else []
    assert asked == [100] and log.end_step == 100 and not log.forced and not log.forced_saves


def test_a_step_that_compiled_kernels_is_not_the_runs_pace():
    """Steps 3 and 4 of a GPU run paid a one-time cost (make gpu-proof, Qwen2.5-1.5B, H200): left out of the pace;
    a long step that is slow for its length only is kept."""
    spikes = [(3, 1.93, 160), (4, 2.06, 150), (5, 0.63, 160), (6, 0.44, 140), (7, 0.42, 150), (8, 0.50, 160)]
    fixed, per_token, _ = timeplan.step_model(spikes)
    assert fixed + per_token * 155 < 0.6
    proportional = [(3, 1.0, 100), (4, 2.1, 200), (5, 4.2, 400), (6, 1.05, 100)]  # slow because long: kept
    fixed, per_token, _ = timeplan.step_model(proportional)
    assert abs(fixed + per_token * 400 - 4.2) < 0.3


def test_what_the_first_evaluations_batches_paid_once_is_left_out_of_every_later_one():
    log = _log(eval_s=6.0)
    log.eval_batches = {22: [3.0, 0.5, 0.5, 0.5, 0.5]}  # the first batch compiled kernels: 2.5 s more than the others
    plan = _predict(log)
    assert abs(log.eval_s(22) - 3.5) < 1e-9 and abs(plan.eval_s - 3.5) < 1e-9
    log.eval_batches = {22: [3.0, 0.5]}  # too few batches to tell a slow one from the typical one
    assert log.eval_s(22) == 6.0
    forced = _log(eval_s=6.0, forced=True)
    forced.eval_batches = {22: [3.0, 0.5, 0.5, 0.5, 0.5]}
    assert _predict(forced, total=40).cost_s == 8.0  # what the calibration cost: the evaluation as it took, 6 s + save 2 s


def test_each_evaluation_batch_is_timed_from_the_training_steps_end():
    clock = iter([0.0, 1.0, 4.0, 4.5, 5.0, 5.5, 100.0, 101.0])
    log = timeplan.TimeLog(calibrate=False, clock=lambda: next(clock))
    state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
    log.on_train_begin(None, state, None)  # 0.0
    state.global_step = 1
    log.on_step_end(None, state, SimpleNamespace(should_evaluate=True, should_save=False))  # 1.0
    for _ in range(4):
        log.on_prediction_step(None, state, None)  # 4.0, 4.5, 5.0, 5.5
    log.on_evaluate(None, state, None)  # 100.0: the metrics and the probe after the batches
    assert log.eval_batches[1] == [3.0, 0.5, 0.5, 0.5] and log.evals[1] == 99.0
    log.on_prediction_step(None, state, None)  # an evaluation at a step already timed adds no batch
    assert log.eval_batches[1] == [3.0, 0.5, 0.5, 0.5]


def test_a_run_without_a_plan_says_why():
    args = SimpleNamespace(eval_strategy="steps", eval_steps=20, save_strategy="steps", save_steps=20)
    short = timeplan.TimeLog()
    short.on_train_begin(args, SimpleNamespace(global_step=0, max_steps=40, num_input_tokens_seen=0), None)
    assert short.end_step is None and short.skipped == "40 steps to train: too short to plan (under 80)"
    long = timeplan.TimeLog()
    long.on_train_begin(args, SimpleNamespace(global_step=0, max_steps=400, num_input_tokens_seen=0), None)
    assert long.end_step == 20 and long.skipped is None
    assert timeplan.TimeLog(calibrate=False).skipped == "time_plan=False"


def test_the_warm_up_lasts_while_the_steps_still_get_faster():
    """Qwen2.5-1.5B's first steps on an H200 (make gpu-proof): still falling after the two fixed warm-up steps."""
    gpu = [9.86, 4.06, 2.82, 2.88, 0.92, 0.77, 0.71, 0.74, 2.92, 0.81] + [0.64] * 30
    steps = [(i + 1, s, 100) for i, s in enumerate(gpu)]
    assert timeplan.warmup_end(steps, 0, 100) == 4  # steps 5-7 are within 15% of steps 8-10
    assert timeplan.warmup_end(steps[:9], 0, 100) is None  # steps 8-10 not seen yet: cannot tell
    assert timeplan.warmup_end([(i, 1.0, 100) for i in range(1, 9)], 0, 100) == timeplan.WARMUP  # flat: the fixed two
    falling = [(i, 10.0 / i, 100) for i in range(1, 40)]
    assert timeplan.warmup_end(falling, 0, 100) == 10  # never settles: at most a tenth of the run
    log = timeplan.TimeLog()
    log.start_step, log.steps = 0, steps
    assert log.longer(10, 100, 10, 10) == 10 and log.warm_end == 4  # 6 steps timed after it, 6.9 s: enough
    assert [s for s, *_ in log.timed(10)] == [5, 6, 7, 8, 9, 10]
    fixed, per_token, _ = timeplan.step_model(log.timed(10))
    assert fixed + per_token * 100 < 0.85  # the two fixed warm-up steps would time 2.82 and 2.88 s steps too
    still = timeplan.TimeLog()
    still.start_step, still.steps = 0, steps[:8]
    assert still.longer(8, 100, 0, 0) == 8 + timeplan.SETTLE and still.warm_end is None  # no timing yet
