"""GRPO reward functions, named in 05 as `module:function`, and the guard's penalty.

A reward function takes trl's keywords: `prompts` and `completions` (strings; message lists for chat prompts),
`completion_ids`, the dataset's other columns (here `answer`, the reference answer 01 kept) and trl's `trainer_state`,
`log_extra`, `log_metric`; it returns one float per completion (None: no opinion). `total` calls it the same way for
05's held-out reward, so a function that trains also judges. The examples fit
the embedded task (one short answer word) and any task with short reference answers:
- `correct`: 1 when the completion is the reference answer (case and spacing aside), else 0;
- `well_formed`: 0.5 for one short line that says no word twice, else 0 (the reward that is not zero from step one,
  so the group's rewards differ even before any answer is right);
- `not_degenerate`: -1 for a completion `detect` judges degenerate (a loop, token soup): the penalty a rollout
  stopped by the guard gets, since the guard stops exactly what `detect` calls degenerate.
On data whose reference answers are longer (`nbutils.train.preferencedata.long_answer_problems`), they teach the
wrong thing: a short wrong answer scores above a right one in other words, so 05's plan asks for a reward of one's own.
"""

from __future__ import annotations

import importlib

from nbutils import defaults
from nbutils.eval.detect import detect
from nbutils.eval.metrics import _norm

DEFAULT = "nbutils.eval.rewards:correct,nbutils.eval.rewards:well_formed,nbutils.eval.rewards:not_degenerate"
# a short answer: at most this many words on one line (05's plan checks the references against the same figure)
MAX_WORDS = defaults.SHORT_ANSWER_WORDS


def text_of(completion) -> str:
    """A completion as text: trl passes strings for text prompts, [{"role": "assistant", "content": ...}] for chat."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def correct(completions, answer, **_) -> list[float]:
    """1.0 where the completion is the reference answer, ignoring case and spacing."""
    return [float(_norm(text_of(c)) == _norm(a)) for c, a in zip(completions, answer)]


def well_formed(completions, **_) -> list[float]:
    """0.5 for one non-empty line of at most MAX_WORDS words, none said twice."""
    out = []
    for c in completions:
        words = text_of(c).split()
        line = text_of(c).strip()
        ok = bool(words) and "\n" not in line and len(words) <= MAX_WORDS and len(set(words)) == len(words)
        out.append(0.5 if ok else 0.0)
    return out


def not_degenerate(completions, **_) -> list[float]:
    """-1.0 for a degenerate completion (what the guard stops), 0.0 otherwise."""
    return [-1.0 if detect(text_of(c)).degenerate else 0.0 for c in completions]


def load(specs: str) -> list:
    """`module:function,module:function` as the functions; errors name the spec and what to fix."""
    funcs = []
    for spec in (s.strip() for s in specs.split(",") if s.strip()):
        module_name, _, name = spec.partition(":")
        if not module_name or not name:
            raise ValueError(f"reward {spec!r}: write it module:function, e.g. mytask.rewards:correct")
        try:
            funcs.append(getattr(importlib.import_module(module_name), name))
        except ImportError as e:
            raise ValueError(f"reward {spec!r}: cannot import {module_name} ({e}); put the module on sys.path") from e
        except AttributeError:
            raise ValueError(f"reward {spec!r}: {module_name} has no function {name}") from None
    if not funcs:
        raise ValueError("reward_functions is empty: name at least one module:function")
    return funcs


def _ignore(*_, **__) -> None:
    """trl's log_extra and log_metric outside a trainer: nothing to log to."""


def total(funcs, prompts: list, completions: list, completion_ids: list[list[int]], columns: dict[str, list],
          trainer_state=None) -> list[float]:
    """The summed reward of each completion, each function called with the keywords and shapes trl's GRPOTrainer uses
    (`_calculate_rewards`: prompts, completions, completion_ids, every other column, trainer_state, log_extra,
    log_metric) and summed as trl sums them (weights of 1; None or NaN counts nothing, as trl's nansum)."""
    n = len(completions)
    sums = [0.0] * n
    for f in funcs:
        values = f(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns,
                   trainer_state=trainer_state, log_extra=_ignore, log_metric=_ignore)
        if len(values) != n:
            raise ValueError(f"reward {getattr(f, '__name__', f)!r} returned {len(values)} rewards for {n} completions: "
                             "return one number (or None) per completion")
        sums = [s + (float(v) if v is not None and v == v else 0.0) for s, v in zip(sums, values)]  # nansum
    return sums
