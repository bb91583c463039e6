"""Trainer callbacks for the ways runs lose GPU hours: the 12-hour wall, NaNs, silent progress, garbage.

Each callback that stops training records why in a shared `StopReason` (first writer wins), so
the summary can say it. Under several processes every stop decision goes through `agree`: a
stop taken by one rank alone would leave the others waiting in the next all-reduce forever.
"""

from __future__ import annotations

import math
import sys
import time

from transformers import TrainerCallback

from nbutils.runtime.limits import session_start
from nbutils.train import curves


class StopReason:
    """Shared, first-writer-wins reason for stopping ("time_budget", "nan", "degenerate")."""

    def __init__(self):
        self.reason: str | None = None
        self.detail: str = ""

    def set(self, reason: str, detail: str) -> None:
        if self.reason is None:
            self.reason, self.detail = reason, detail
            print(f"[train] stopping: {detail}", file=sys.stderr, flush=True)


def agree(flag: bool) -> bool:
    """True on every process if it is True on any: a stop decided by one rank alone would hang the others."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    import torch

    t = torch.tensor([1.0 if flag else 0.0], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class TimeBudget(TrainerCallback):
    """Stop and save before the budget runs out, leaving room for one more step and a save (no budget: None)."""

    def __init__(self, budget_min: float | None, stop: StopReason, start: float | None = None, clock=time.time):
        self.budget_s, self.stop, self.clock = None if budget_min is None else budget_min * 60, stop, clock
        self.start = session_start() if start is None else start
        self.last, self.step_s, self.save_s = None, 0.0, 0.0

    def on_step_end(self, args, state, control, **kw):
        now = self.clock()
        if self.last is not None:
            self.step_s = max(self.step_s, now - self.last)
        self.last = now
        remaining = math.inf if self.budget_s is None else self.budget_s - (now - self.start)
        if agree(remaining < 2 * self.step_s + self.save_s):
            self.stop.set("time_budget", f"time budget of {self.budget_s / 60:g} min nearly used at step "
                                         f"{state.global_step}; saving a complete checkpoint")
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args, state, control, **kw):
        if self.last is not None:
            self.save_s = max(self.save_s, self.clock() - self.last)


class NanGuard(TrainerCallback):
    """NaN/inf loss or weights: stop at once; the last good checkpoint stays the one to use.

    Under fp16 an inf gradient norm alone is normal: the grad scaler skips that step and lowers
    its scale. It counts only when it repeats at `patience` logs in a row (the scale collapsed).
    Before every save the trainable weights are checked too, so a NaN between two log lines is
    never written into a checkpoint that looks good.
    """

    def __init__(self, stop: StopReason, patience: int = 3, capability: tuple[int, int] | None = None):
        self.stop, self.patience, self.bad_norms = stop, patience, 0
        self.capability = capability  # the GPU's compute capability (None: read from CUDA when a stop needs it)
        self.fp16 = False  # the run's, from the Trainer's arguments (bad_weights may be called without them)

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        fp16 = self.fp16 = bool(getattr(args, "fp16", False))
        for key in ("loss", "eval_loss"):  # a NaN eval loss: weights gone bad since the last training log
            if logs.get(key) is not None and not math.isfinite(float(logs[key])):
                return nan_stop(self.stop, control, f"{key} is {logs[key]} at step {state.global_step}",
                                nan_advice(fp16, self.capability))
        norm = logs.get("grad_norm")
        if norm is None:
            return
        self.bad_norms = 0 if math.isfinite(float(norm)) else self.bad_norms + 1
        if self.bad_norms >= (self.patience if fp16 else 1):
            nan_stop(self.stop, control, f"grad_norm is {norm} at step {state.global_step}",
                     nan_advice(fp16, self.capability))

    def on_step_end(self, args, state, control, model=None, **kw):
        if args is not None:
            self.fp16 = bool(getattr(args, "fp16", False))
        if control.should_save:
            self.bad_weights(model, control, state.global_step)

    def bad_weights(self, model, control, step: int) -> bool:
        """True, and training stopping (nan_stop), when the trainable weights hold NaN/inf on any process."""
        if model is None or not agree(not finite_trainables(model)):
            return False
        nan_stop(self.stop, control, f"trainable weights hold NaN/inf at step {step}", nan_advice(self.fp16, self.capability))
        return True


def nan_advice(fp16: bool, capability: tuple[int, int] | None = None) -> str:
    """What to change after a NaN: under fp16 usually an overflow, whose way out depends on the GPU: bf16 where it
    is native (compute capability >= 8.0), else precision="fp32" (a T4: Gemma-2/3 overflow fp16)."""
    if not fp16:
        return "lower learning_rate"
    capability = capability or _cuda_capability()
    way_out = ("or set precision=\"bf16\" (this GPU has native bf16)" if capability and capability >= (8, 0) else
               "or set precision=\"fp32\" (this GPU has no native bf16; fp32 is slower and needs about twice the "
               "activations' memory, but does not overflow)")
    return f"in fp16 this is usually an overflow: lower learning_rate, {way_out}"


def _cuda_capability() -> tuple[int, int] | None:
    """The training GPU's compute capability, where CUDA is already in use (never initialised here for it)."""
    import torch

    if not torch.cuda.is_initialized():
        return None
    return tuple(torch.cuda.get_device_capability())


def nan_stop(stop: StopReason, control, detail: str, advice: str | None = None) -> None:
    """Stop at once with reason "nan" and no save: the last verified checkpoint stays the one to use."""
    stop.set("nan", f"{detail}: {advice or nan_advice(True)}")
    control.should_training_stop = True
    control.should_save = False


def finite_trainables(model) -> bool:
    """True when every trainable parameter (the LoRA weights) is finite."""
    import torch

    return all(bool(torch.isfinite(p).all()) for p in model.parameters() if p.requires_grad)


class ProgressLog(TrainerCallback):
    """One plain line per logging interval (step, loss, tokens/s, ETA) and one per evaluation (eval loss):
    the run's log in a batch run, where widgets show nothing, and in the saved notebook."""

    def __init__(self, stream=None):
        self.stream, self.t0, self.tokens0, self.eval_step = stream, None, 0, None  # stream None: sys.stdout

    def on_train_begin(self, args, state, control, **kw):
        self.t0, self.tokens0, self.step0 = time.time(), state.num_input_tokens_seen or 0, state.global_step

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or not state.is_world_process_zero:
            return
        if "eval_loss" in logs and state.global_step != self.eval_step:  # the final evaluate() repeats the last one
            self.eval_step = state.global_step
            self._print(f"[eval] step {state.global_step}/{state.max_steps}  eval loss {float(logs['eval_loss']):.4f}")
        if "loss" not in logs or self.t0 is None:
            return
        elapsed = max(1e-6, time.time() - self.t0)
        done = max(1, state.global_step - self.step0)
        eta = (state.max_steps - state.global_step) * elapsed / done
        tokens = (state.num_input_tokens_seen or 0) - self.tokens0
        self._print(f"[train] step {state.global_step}/{state.max_steps}  loss {float(logs['loss']):.4f}  "
                    f"tokens/s {tokens / elapsed:,.0f}  ETA {eta / 60:.1f} min")

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stdout, flush=True)


class Probe(TrainerCallback):
    """At each evaluation call probe(model) -> True if generations are degenerate; two in a row stop training.

    uncounted: steps whose evaluation is not a scheduled one (the time plan's calibration): the probe runs there,
    so its cost is timed, but its verdict neither starts nor breaks a streak."""

    def __init__(self, probe, stop: StopReason, patience: int = 2, uncounted: set | None = None):
        self.probe, self.stop, self.patience, self.streak, self.start = probe, stop, patience, 0, None
        self.uncounted = set() if uncounted is None else uncounted

    def on_train_begin(self, args, state, control, **kw):
        self.start = state.global_step

    def on_evaluate(self, args, state, control, model=None, **kw):
        if model is None or state.global_step == self.start:
            return  # eval_on_start: the model before this run's first step is no verdict on the training
        degenerate = agree(bool(self.probe(model)))
        if state.global_step in self.uncounted:
            return
        self.streak = self.streak + 1 if degenerate else 0
        if self.streak >= self.patience:
            self.stop.set("degenerate", f"probe generations degenerate at {self.streak} evaluations in a row "
                                        f"(step {state.global_step}); keeping the last checkpoint")
            control.should_training_stop = True
            if self.stop.reason != "nan":  # NanGuard cleared this evaluation's save (a NaN eval loss): no checkpoint
                control.should_save = True


class ResumedState(TrainerCallback):
    """A resumed Trainer takes its TrainerState from the checkpoint, eval, save and logging intervals included (only
    a warning says so), so a smoke run's every 5 steps would rule the real run resumed from it, and a save_steps
    raised to fit the time budget would change nothing. This run's arguments set them again before the first step.
    The resume goes into the log history too (kept in every later checkpoint): the resumed run's first logged loss is
    the mean of the steps since the resume, not since the log before the stop, and curves.run_loss weighs it so."""

    def on_train_begin(self, args, state, control, **kw):
        state.compute_steps(args, state.max_steps)
        if state.global_step > 0:
            state.log_history.append({"step": state.global_step, curves.RESUMED: True})


class StartEvalRng(TrainerCallback):
    """eval_on_start leaves the random state as it found it. Its DataLoader draws a seed from torch's global
    generator, which would shift every later draw (the training data's order): a run that evaluates its start would
    part from one resumed from its checkpoint, which does not. The state is kept at on_train_begin, just before that
    evaluation, and put back when the first epoch begins."""

    def __init__(self):
        self.kept = None

    def on_train_begin(self, args, state, control, **kw):
        import torch

        if args.eval_on_start:
            self.kept = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)

    def on_epoch_begin(self, args, state, control, **kw):
        import torch

        if self.kept is not None:
            cpu, cuda = self.kept
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
            self.kept = None


class PeakMemory(TrainerCallback):
    """On a GPU, the measured peak (torch.cuda.max_memory_allocated) after the first steps of this
    run, printed next to the memory plan's `allocated_gb` (its peak less the CUDA context, which that counter
    never sees: what it should read); at the end, the peak of the whole run."""

    def __init__(self, after_steps: int = 3, planned_gb: float | None = None, stream=None):
        self.after, self.planned_gb, self.stream = after_steps, planned_gb, stream
        self.steps, self.peak_gb, self.run_peak_gb = 0, None, None

    def on_step_end(self, args, state, control, **kw):
        import torch

        self.steps += 1  # counted in this run: a resumed run starts at a later global_step
        if self.steps == self.after and torch.cuda.is_available():
            self.peak_gb = torch.cuda.max_memory_allocated() / 2**30
            if state.is_world_process_zero:
                planned = f"; planned {self.planned_gb:.2f} GB (without the CUDA context)" if self.planned_gb else ""
                print(f"[memory] peak allocated after {self.after} steps: {self.peak_gb:.2f} GB{planned}",
                      file=self.stream or sys.stdout, flush=True)

    def on_train_end(self, args, state, control, **kw):
        import torch

        if torch.cuda.is_available():
            self.run_peak_gb = torch.cuda.max_memory_allocated() / 2**30
