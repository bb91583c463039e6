"""The time plan: the run's first steps timed on the real hardware and batch plan, then the whole run predicted.

The calibration is not a separate run. `TimeLog` times the first steps of the real run (about 5% of them, and at
least MIN_TIMED_S seconds of steps where steps are short); at the calibration's last step the Trainer evaluates
and saves once (nothing extra when a scheduled evaluation and save falls there),
and the plan is printed right after, before the next step: no step is done twice, and the calibration costs that
one evaluation and save, measured, whose share of the run the table says. From the timed steps (seconds per
token: the batches of a length-grouped run differ in length), the evaluation and the save, `predict` gives the
rest of the run and one table: the expected wall time with a range, where the time budget stops it, the sessions
and the share of the platform's weekly quota it needs (nbutils.runtime.limits), and what to change to fit one
session.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

from transformers import TrainerCallback

from nbutils.runtime.limits import Limits

WARMUP = 2  # steps not timed: the first ones allocate memory, pick kernels and fill caches
MIN_TIMED, MAX_TIMED = 4, 50
TIMED_SHARE = 0.05  # time this share of the run's steps (between MIN_TIMED and MAX_TIMED): they are real steps
COST_LIMIT = 0.03  # what the calibration may cost, as a share of the run
# Steps of a small model are short: 20 steps may be a second, which sees one moment of a shared machine's speed (on
# the 2-core VM the benches run on, a fixed workload's speed moves by 1.2x to 1.5x between one-second windows:
# `python -m bench timeplan_bench`'s control). So the window goes on until it has timed MIN_TIMED_S, ending on a
# scheduled evaluation and save where there are some, but never past MAX_TIMED_SHARE of the run's steps.
MIN_TIMED_S, MAX_TIMED_SHARE = 5.0, 0.25
MIN_RANGE = 0.10  # the range is never narrower than this: the load and the lengths still to come vary
ONE_TIME = 2.0  # a timed step this many times slower than the typical one paid a one-time cost: left out
# The warm-up goes on while the steps still get faster: a GPU's first steps of a new run allocate, pick kernels and
# warm its clocks for several steps (Qwen2.5-1.5B on an H200: 9.86 4.06 2.82 2.88 0.92 0.77 s, then about 0.64 s;
# `make gpu-proof`), so two fixed warm-up steps timed the tail of the warm-up (a plan 15% to 70% long). It ends at
# the first step whose next SETTLE steps are at most FALLING slower (per token) than the SETTLE after them, and
# never later than MAX_WARMUP_SHARE of the run's steps.
SETTLE, FALLING, MAX_WARMUP_SHARE = 3, 0.15, 0.10


def warmup_end(steps: list[tuple[int, float, int]], start: int, total: int) -> int | None:
    """The last warm-up step: the first k >= start + WARMUP whose next SETTLE steps' median pace (seconds per token)
    is within FALLING of the SETTLE steps after them; at most MAX_WARMUP_SHARE of the run in. None: still falling."""
    pace = {step: s / t if t else s for step, s, t in steps}
    cap = start + max(WARMUP, int((total - start) * MAX_WARMUP_SHARE))
    for k in range(start + WARMUP, cap + 1):
        now = [pace[i] for i in range(k + 1, k + 1 + SETTLE) if i in pace]
        after = [pace[i] for i in range(k + 1 + SETTLE, k + 1 + 2 * SETTLE) if i in pace]
        if len(after) < SETTLE:
            return None  # not enough steps yet to tell
        if statistics.median(now) <= (1 + FALLING) * statistics.median(after):
            return k
    return cap


def scheduled_every(eval_steps: int, save_steps: int) -> int:
    """Every how many steps an evaluation and a save fall on the same step (0: never)."""
    return math.lcm(eval_steps, save_steps) if eval_steps > 0 and save_steps > 0 else 0


def too_short() -> int:
    """Runs with fewer steps than this get no time plan: 80."""
    return max(2 * (WARMUP + MIN_TIMED) + 1, math.ceil(MIN_TIMED / TIMED_SHARE))


def window(start: int, total: int, eval_steps: int, save_steps: int) -> int | None:
    """The calibration's last step: WARMUP + about TIMED_SHARE of the steps after `start`; a scheduled evaluation
    and save inside that window, or within twice it, is taken instead (then nothing extra is done). None: too
    short to plan."""
    left = total - start
    if left < too_short():  # over before a plan would matter; a forced evaluation and save would cost more than
        return None  # COST_LIMIT
    first, last = start + WARMUP + MIN_TIMED, start + WARMUP + min(MAX_TIMED, max(MIN_TIMED, round(left * TIMED_SHARE)))
    both = scheduled_every(eval_steps, save_steps)
    scheduled = [s for s in range(first, last + 1) if both and s % both == 0]
    if scheduled:
        return scheduled[0]
    # The next scheduled one, when it comes within twice the window and a quarter of the run: a few more steps
    # timed instead of a forced evaluation and save (on a GPU one of those can be 5% of a 100-step run).
    later = (last // both + 1) * both if both else None
    if later and later - start <= 2 * (last - start) and later - start <= left * MAX_TIMED_SHARE:
        return later
    return last


class TimeLog(TrainerCallback):
    """Times every step (with the tokens it saw), evaluation and save; at the calibration window's last step it asks
    for an evaluation and a save, then calls on_plan(args, state) (which makes and prints the plan).

    Goes last among the callbacks, so an evaluation's time includes the probe and a save's the checksums."""

    def __init__(self, calibrate: bool = True, clock=time.time, on_plan=None):
        self.calibrate, self.clock, self.on_plan = calibrate, clock, on_plan
        self.start_step = self.end_step = None
        self.warm_end: int | None = None  # the warm-up's last step, once the steps stopped getting faster
        self.forced: set[int] = set()  # the calibration's extra evaluation: the probe does not count its verdict
        self.forced_saves: set[int] = set()
        self.steps: list[tuple[int, float, int]] = []  # (step, seconds, tokens)
        self.evals: dict[int, float] = {}
        self.eval_batches: dict[int, list[float]] = {}  # each evaluation's batches, timed one by one
        self.saves: dict[int, float] = {}
        self.train_start = self.last = self.batch_end = None
        self.tokens = 0
        self.skipped = "time_plan=False" if not calibrate else "no training step ran in this session"

    def on_train_begin(self, args, state, control, **kw):
        self.last, self.tokens = self.clock(), state.num_input_tokens_seen or 0
        if self.train_start is None:
            self.train_start, self.start_step = self.last, state.global_step
            if self.calibrate:
                self.end_step = window(state.global_step, state.max_steps, every(args, "eval"), every(args, "save"))
                left = state.max_steps - state.global_step
                self.skipped = None if self.end_step else f"{left} steps to train: too short to plan (under {too_short()})"

    def on_step_end(self, args, state, control, **kw):
        now, seen = self.clock(), state.num_input_tokens_seen or 0
        self.steps.append((state.global_step, now - self.last, seen - self.tokens))
        self.last, self.tokens = now, seen
        if self.end_step and self.warm_end is None:
            self.warm_end = warmup_end(self.steps, self.start_step, state.max_steps)
        if state.global_step == self.end_step:
            self.end_step = self.longer(state.global_step, state.max_steps, every(args, "eval"), every(args, "save"))
        if state.global_step == self.end_step:
            if not control.should_evaluate:
                self.forced.add(state.global_step)
            if not control.should_save:
                self.forced_saves.add(state.global_step)
            control.should_evaluate = control.should_save = True

    def on_prediction_step(self, args, state, control, **kw):
        if self.last is None or state.global_step in self.evals:
            return
        batches, now = self.eval_batches.setdefault(state.global_step, []), self.clock()
        batches.append(now - (self.batch_end if batches else self.last))  # the first: since the step's end
        self.batch_end = now

    def on_evaluate(self, args, state, control, **kw):
        if self.last is None:  # no training in this process (a finished run's rerun evaluates once): nothing to time
            return
        now = self.clock()
        self.evals.setdefault(state.global_step, now - self.last)
        self.last = now

    def eval_s(self, step: int) -> float:
        """The evaluation at `step` as later ones will take: its time less what its batches paid once. On a GPU the
        first evaluation's first batches compile kernels for shapes training never had (Qwen2.5-1.5B on an H200,
        fp16, liger: the calibration's evaluation 6.0 s, each later one 2.1 s; `make gpu-proof`). A batch more
        than ONE_TIME x slower than the median batch paid that once: its excess over the median is left out."""
        batches = self.eval_batches.get(step, [])
        typical = statistics.median(batches) if len(batches) >= 3 else math.inf  # too few to tell a slow one
        return self.evals.get(step, 0.0) - sum(b - typical for b in batches if b > ONE_TIME * typical)

    def on_save(self, args, state, control, **kw):
        if self.last is None:
            return
        now = self.clock()
        self.saves[state.global_step] = now - self.last
        if state.global_step == self.end_step and self.on_plan is not None:
            self.on_plan(args, state)
        self.last = self.clock()  # the plan's own few milliseconds go to no step

    def longer(self, step: int, total: int, eval_steps: int, save_steps: int) -> int:
        """The window's last step, moved on while the steps are still getting faster (warm-up: none timed yet) or
        while those timed after it are fewer than MIN_TIMED or add up to less than MIN_TIMED_S: to the next scheduled
        evaluation and save (checked again there), or, with none scheduled, to where the steps should reach it at
        their pace; never past MAX_TIMED_SHARE of the run's steps. `step` when it has timed enough."""
        if self.warm_end is None:
            self.warm_end = warmup_end(self.steps, self.start_step, total)
        settling = self.warm_end is None  # still getting faster: nothing timed yet
        timed = [] if settling else [s for _, s, _ in self.timed(step)]
        both = scheduled_every(eval_steps, save_steps)
        cap = self.start_step + WARMUP + int((total - self.start_step) * MAX_TIMED_SHARE)
        if both and cap // both * both > self.start_step + WARMUP:
            cap = cap // both * both  # end on a scheduled evaluation and save: nothing extra
        if step >= cap or (len(timed) >= MIN_TIMED and sum(timed) >= MIN_TIMED_S) or (not settling and not timed):
            return step
        if both:  # the next scheduled evaluation and save: the window costs nothing
            return min(cap, (step // both + 1) * both)
        if len(timed) < MIN_TIMED:
            return min(cap, step + (SETTLE if settling else MIN_TIMED - len(timed)))
        return min(cap, step + math.ceil((MIN_TIMED_S - sum(timed)) * len(timed) / sum(timed)))

    def timed(self, until: int | None = None) -> list[tuple[int, float, int]]:
        """The calibration's steps after the warm-up (up to its last step, or to `until`)."""
        last = (self.end_step or 0) if until is None else until
        first = self.start_step + WARMUP if self.warm_end is None else max(self.warm_end, self.start_step + WARMUP)
        return [s for s in self.steps if first < s[0] <= last]

    def cost_s(self) -> float | None:
        """What the calibration added to the run: its extra evaluation and save (none when they were scheduled)."""
        if self.end_step is None or self.end_step not in self.saves:
            return None
        step = self.end_step
        return self.evals.get(step, 0.0) * (step in self.forced) + self.saves[step] * (step in self.forced_saves)


def every(args, what: str) -> int:
    """eval_steps or save_steps of these TrainingArguments when that strategy is 'steps', else 0."""
    strategy = getattr(args, f"{what}_strategy", "no")
    return int(getattr(args, f"{what}_steps") or 0) if str(getattr(strategy, "value", strategy)) == "steps" else 0


def step_model(timed: list[tuple[int, float, int]]) -> tuple[float, float, float]:
    """(fixed seconds per step, seconds per token, relative spread) from the timed steps.

    Proportional to the tokens unless the timed steps' lengths differ enough to separate a fixed part (least
    squares, kept only when that part comes out between zero and the fastest step). Without token counts
    (include_num_input_tokens_seen off) a step is a step. A step more than ONE_TIME x slower than both the median
    step and the median pace per token at its length is left out: on a GPU a batch of a shape not seen before
    compiles kernels (Qwen2.5-1.5B on an H200, fp16, liger: steps 3 and 4 took 1.9 and 2.1 s, the run's steps
    0.6 s; `make gpu-proof`), a cost paid once, not the run's pace. The spread: two standard errors of the mean
    seconds per token, relative to it (the uncertainty of the rate the whole run is predicted with)."""
    if not all(t for *_, t in timed):
        timed = [(step, s, 1) for step, s, _ in timed]
    step_s, rate = statistics.median(s for _, s, _ in timed), statistics.median(s / t for _, s, t in timed)
    timed = [x for x in timed if x[1] <= ONE_TIME * max(step_s, rate * x[2])]  # never empty: the median step stays
    seconds, tokens = [s for _, s, _ in timed], [t for _, _, t in timed]
    rates = [s / t for s, t in zip(seconds, tokens)]
    spread = 2 * statistics.stdev(rates) / statistics.fmean(rates) / len(rates) ** 0.5 if len(rates) > 1 else 1.0
    if max(tokens) >= 1.5 * min(tokens):
        mt, ms = statistics.fmean(tokens), statistics.fmean(seconds)
        slope = sum((t - mt) * (s - ms) for t, s in zip(tokens, seconds)) / sum((t - mt) ** 2 for t in tokens)
        fixed = ms - slope * mt
        if 0 <= fixed < min(seconds) and slope > 0:
            return fixed, slope, spread
    return 0.0, sum(seconds) / sum(tokens), spread


@dataclass
class TimePlan:
    """The prediction made after the calibration, and what the table says."""

    done_step: int
    total_steps: int
    timed_steps: int
    step_s: float  # a step of average length
    tokens_per_step: float
    eval_s: float
    save_s: float
    n_evals: int
    n_saves: int
    elapsed_s: float  # the run so far (from its first step): the calibration
    predicted_s: float  # the whole run, first step to final evaluation
    low_s: float
    high_s: float
    budget_s: float | None  # time_budget_min, in seconds
    budget_left_s: float | None
    stop_step: int | None  # where the time budget stops it (None: it finishes)
    sessions: int | None
    gpu_hours: float
    limits: Limits
    cost_s: float = 0.0  # the calibration's extra evaluation and save (none when they were scheduled there)
    warmup_steps: int = WARMUP  # steps left out before the timing: until the steps stopped getting faster
    suggestions: list[str] = field(default_factory=list)

    @property
    def rest_s(self) -> float:
        return self.predicted_s - self.elapsed_s

    def record(self) -> dict:
        """What training_summary.json keeps of the plan (beside the actual time)."""
        out = {k: v for k, v in asdict(self).items() if k != "limits"}
        return {**out, "platform": self.limits.platform}

    def rows(self) -> dict:
        steps = self.total_steps - self.done_step
        rows = {
            "time.calibration": f"steps {self.done_step - self.timed_steps + 1}-{self.done_step} timed after "
                                f"{self.warmup_steps} warm-up: {self.step_s:.3g} s a step at {self.tokens_per_step:,.0f} tokens; "
                                f"evaluation {duration(self.eval_s)}, save {duration(self.save_s)}",
            "time.expected": f"{duration(self.predicted_s)} ({duration(self.low_s)} - {duration(self.high_s)}) for "
                             f"{self.total_steps} steps: {steps} steps to go {duration(steps * self.step_s)}, "
                             f"{self.n_evals} evaluations {duration(self.n_evals * self.eval_s)}, {self.n_saves} saves "
                             f"{duration(self.n_saves * self.save_s)}",
            "time.calibration_cost": self._cost_row(),
            "time.budget": self._budget_row(),
            "time.sessions": self._sessions_row(),
        }
        if self.suggestions:
            rows["time.to_fit"] = "; ".join(self.suggestions)
        return rows

    def _cost_row(self) -> str:
        share = self.cost_s / self.predicted_s if self.predicted_s else 0.0
        text = f"{duration(self.cost_s)}, {share:.1%} of the run (an extra evaluation and save)" if self.cost_s else \
            "nothing: a scheduled evaluation and save fell in the window"
        if share > COST_LIMIT:
            text += f": more than {COST_LIMIT:.0%} of a run this short; time_plan=False skips the plan"
        return text

    def _budget_row(self) -> str:
        if self.budget_left_s is None:
            return "no time budget"
        if self.stop_step is None:
            return f"{duration(self.budget_left_s)} left: fits"
        return (f"{duration(self.budget_left_s)} left: DOES NOT FIT; the budget stops it at about step {self.stop_step} "
                f"of {self.total_steps}, after a save")

    def _sessions_row(self) -> str:
        lim = self.limits
        if lim.session_h is None or self.budget_s is None:
            return f"{lim.platform}: no session limit; {duration(self.gpu_hours * 3600)} in all"
        text = (f"{self.sessions} session(s) of {duration(self.budget_s)} (time_budget_min; {lim.platform} stops one at "
                f"{lim.session_h:g} h); {duration(self.gpu_hours * 3600)} in all")
        if lim.week_h:
            text += f", {self.gpu_hours / lim.week_h:.0%} of the {lim.week_h:g} GPU h a week"
            if self.gpu_hours > lim.week_h:
                text += (f": MORE than {lim.platform} gives in a week ({math.ceil(self.gpu_hours / lim.week_h)} weeks); "
                         "fewer steps, or more GPUs (several machines: docs/multi-gpu.md)")
        return text

    def table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


def duration(seconds: float) -> str:
    """'42 s', '3 min 5 s', '2 h 10 min'."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def predict(log: TimeLog, *, total_steps: int, eval_steps: int, save_steps: int, tokens_per_step: float,
            budget_s: float | None, session_start: float, limits: Limits, batch_size: int, now: float | None = None
            ) -> TimePlan:
    """The whole run from the calibration in `log` (see the module docstring)."""
    now = log.clock() if now is None else now
    timed, done = log.timed(), log.end_step
    fixed, per_token, spread = step_model(timed)
    tokens = tokens_per_step if all(t for _, _, t in timed) else 1.0
    step_s = fixed + per_token * tokens
    eval_s, save_s = log.eval_s(done), log.saves.get(done, 0.0)
    n_evals = (total_steps // eval_steps - done // eval_steps if eval_steps else 0) + 1  # + the final evaluation
    n_saves = total_steps // save_steps - done // save_steps + bool(total_steps % save_steps) if save_steps else 0
    elapsed = now - log.train_start
    rest = (total_steps - done) * step_s + n_evals * eval_s + n_saves * save_s
    margin = max(MIN_RANGE, spread)
    plan = TimePlan(done, total_steps, len(timed), step_s, tokens, eval_s, save_s, n_evals, n_saves, elapsed,
                    elapsed + rest, elapsed + rest * (1 - margin), elapsed + rest * (1 + margin), budget_s, None, None,
                    None, 0.0, limits)
    plan.warmup_steps = (log.warm_end if log.warm_end is not None else log.start_step + WARMUP) - log.start_step
    plan.cost_s = log.evals.get(done, 0.0) * (done in log.forced) + save_s * (done in log.forced_saves)
    startup = log.train_start - session_start  # install, load: every later session pays it again
    plan.gpu_hours = (startup + plan.predicted_s) / 3600
    if budget_s is None:
        return plan
    plan.budget_left_s = budget_s - (now - session_start)
    per_step = rest / max(1, total_steps - done)  # evaluations and saves spread over the steps
    if rest + save_s > plan.budget_left_s:
        usable = plan.budget_left_s - 2 * (step_s + eval_s + save_s) - save_s  # TimeBudget's margin: two slow steps
        plan.stop_step = done + max(0, int(usable // per_step))
        later = max(1.0, budget_s - startup - save_s)
        plan.sessions = 1 + math.ceil((rest - max(0.0, usable)) / later)
        plan.gpu_hours += (plan.sessions - 1) * startup / 3600
        plan.suggestions = suggestions(plan, per_step, fixed, eval_steps, save_steps, batch_size)
    else:
        plan.sessions = 1
    return plan


def suggestions(plan: TimePlan, per_step: float, fixed: float, eval_steps: int, save_steps: int,
                batch_size: int) -> list[str]:
    """What to change so the run fits this session, each with the figure it gives. The calibration saved a checkpoint
    of this run, which a resume holds to its length and batch: those two changes start over (resume=False); the
    evaluation and save intervals are this run's own on a resume too."""
    out = [f"max_steps={plan.stop_step} fits this session (a shorter run than this one: with resume=False)"]
    evals = plan.n_evals * plan.eval_s
    if evals >= 0.1 * plan.rest_s and eval_steps:
        out.append(f"eval_steps={2 * eval_steps}, save_steps={2 * save_steps} saves about {duration(evals / 2)}")
    half = (fixed + (plan.step_s - fixed) / 2) / plan.step_s
    fit = plan.done_step + int((plan.stop_step - plan.done_step) / max(half, 1e-9))
    # a step on half the rows trains on half the data: with max_steps="auto" an epoch then has twice the steps
    out.append(f"per_device_batch_size={max(1, batch_size // 2)} (or a max_seq_len half as long, in 01) makes a step "
               f"about {1 - half:.0%} shorter: about {min(fit, plan.total_steps)} of these {plan.total_steps} steps "
               "fit, each on half the rows (with resume=False)")
    out.append(f"or let it stop and save at step {plan.stop_step}: running 02 again with this output attached resumes "
               f"it ({plan.sessions} sessions in all)")
    return out
