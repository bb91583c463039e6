"""GRPO rollouts under the degeneration guard: a looping completion stops where it loops, not at max length.

trl's GRPOTrainer generates with `model.generate` (no vLLM: it ends T4 support at old versions) and no stopping
criteria of its own. `guarded(GRPOTrainer)` gives a subclass whose rollouts run with `DegenerationGuard` among the
stopping criteria: a row the guard stops is cut after its last token before the stop (generate pads it from there
on), so it is scored as written (the `not_degenerate` reward's penalty) and trained on at that length, and the
batch ends once every row has stopped or said EOS. Per step, trl's log gets `guard/stopped_share` (rollouts the
guard stopped) and `guard/tokens_saved` (max_completion_length less the tokens of each stopped rollout, summed).
`guard_stats` (05's summary, the bench) counts training rollouts only: an evaluation's rollouts (the run's final
eval loss samples its own) train nothing.
It lives in nbutils.eval because it runs the guard (train may not import eval).
"""

from __future__ import annotations

import contextlib
import functools

from nbutils.eval.guard import DegenerationGuard


@contextlib.contextmanager
def _with_guard(model, guard):
    """model.generate with the guard among its stopping criteria, for the duration of one rollout batch."""
    from transformers import StoppingCriteriaList

    original = model.generate

    @functools.wraps(original)
    def generate(*args, **kwargs):
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(guard)
        return original(*args, stopping_criteria=criteria, **kwargs)

    model.generate = generate  # an instance attribute: trl's call goes through it, the class is untouched
    try:
        yield
    finally:
        del model.generate


def cut(completion_ids: list[list[int]], report: list[dict]) -> tuple[list[list[int]], list[int]]:
    """Each stopped row cut after its last token before the stop; (rows, the length of each stopped row)."""
    out, stopped = [], []
    for ids, state in zip(completion_ids, report):
        if state.get("stopped") and state.get("stop_token") is not None:
            ids = ids[:state["stop_token"] + 1]
            stopped.append(len(ids))
        out.append(ids)
    return out, stopped


# A rollout is short (16-256 tokens), not a long answer: the guard's defaults for eval (ids every 8 tokens, detect
# every 48) would judge a 64-token rollout once, three quarters in, so a loop found there still cost most of it.
# Here ids are looked at every 4 tokens and detect runs every 8: a few short decodes per rollout, small beside a
# training step. Chosen on other prompts and seeds than the bench reports (docs/preference.md).
ROLLOUT_CHECK_EVERY, ROLLOUT_DETECT_EVERY = 4, 8


def _tally(trainer, completion_ids, stopped: int = 0, saved: int = 0) -> None:
    """Add one batch of training rollouts to trainer.guard_stats; an evaluation's (model in eval mode) are left out."""
    if not trainer.model.training:
        return
    stats = trainer.guard_stats = dict(trainer.guard_stats)  # per instance, not the class's
    stats["rollouts"] += len(completion_ids)
    stats["stopped"] += stopped
    stats["tokens"] += sum(len(c) for c in completion_ids)
    stats["tokens_saved"] += saved


def guarded(trainer_class, check_every: int = ROLLOUT_CHECK_EVERY, detect_every: int = ROLLOUT_DETECT_EVERY):
    """A subclass of trl's GRPOTrainer (`trainer_class`) whose rollouts run under the degeneration guard."""

    class GuardedGRPOTrainer(trainer_class):
        guard_stats = {"rollouts": 0, "stopped": 0, "tokens": 0, "tokens_saved": 0}

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            if self.use_vllm:
                raise ValueError("the guarded rollouts run model.generate; set use_vllm=False")
            guard = DegenerationGuard(self.processing_class, check_every=check_every, detect_every=detect_every,
                                      eos_token_id=self.eos_token_ids)
            model = self.accelerator.unwrap_model(self.model_wrapped)
            with _with_guard(model, guard):
                completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            completion_ids, stopped = cut(completion_ids, guard.report())
            self._count(completion_ids, stopped)
            return completion_ids, logprobs

        def _count(self, completion_ids, stopped):
            mode = "train" if self.model.training else "eval"
            saved = sum(max(0, self.max_completion_length - n) for n in stopped)
            n = max(1, len(completion_ids))
            self._metrics[mode]["guard/stopped_share"].append(len(stopped) / n)
            self._metrics[mode]["guard/tokens_saved"].append(float(saved))
            _tally(self, completion_ids, len(stopped), saved)

    GuardedGRPOTrainer.__name__ = GuardedGRPOTrainer.__qualname__ = f"Guarded{trainer_class.__name__}"
    return GuardedGRPOTrainer


def counted(trainer_class):
    """The same trainer without the guard, counting its rollouts' tokens the same way (the bench's other side)."""

    class CountedGRPOTrainer(trainer_class):
        guard_stats = {"rollouts": 0, "stopped": 0, "tokens": 0, "tokens_saved": 0}

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            _tally(self, completion_ids)
            return completion_ids, logprobs

    return CountedGRPOTrainer


GUARD_VALUES = ("flag", "off")  # 05's `guard`, the type and words of 03's ("abort" is 03's alone: it ends an evaluation)


def for_guard(trainer_class, guard: str):
    """05's GRPO trainer for its `guard` parameter: "flag" runs rollouts under the guard (a looping answer stops
    early and takes the penalty), "off" only counts their tokens."""
    if guard not in GUARD_VALUES:
        raise ValueError(f"guard={guard!r}: 05 takes \"flag\" (rollouts under the degeneration guard) or \"off\"; "
                         "\"abort\" is 03's (it ends an evaluation that degenerates)")
    return guarded(trainer_class) if guard == "flag" else counted(trainer_class)


def settings(args, reward_functions: str, guard: str) -> dict:
    """GRPO's settings that decide what its rollouts are and how they score, for the run's record (a resume refuses a
    change, naming it): the reward functions, the group, the completion length, the sampling temperature and the
    scaling of rewards from trl's config `args`, and 05's guard. {} for the other methods' configs."""
    if not hasattr(args, "num_generations"):
        return {}
    specs = [s.strip() for s in reward_functions.split(",") if s.strip()]
    return {"grpo.reward_functions": specs, "grpo.num_generations": args.num_generations,
            "grpo.max_completion_length": args.max_completion_length, "grpo.temperature": args.temperature,
            "grpo.scale_rewards": str(args.scale_rewards), "grpo.guard": guard}
