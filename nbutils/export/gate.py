"""The export gate: ship only a model that 03 showed to be better than the base and not degenerate.

05's report (`written_by`) compares its adapter with 02's SFT adapter, the one it started from, under `base`:
preference tuning teaches which answers people prefer, not the task metric, so there the gate asks that the metric
not fall below the SFT adapter's (a gain of at least min_improvement, 0 by default), rather than that it rise."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.train import reports


class GateRefused(RuntimeError):
    """03's report says this model should not be exported (force=True overrides)."""


@dataclass
class GateDecision:
    metric: str
    base: float
    tuned: float
    degenerate_rate: float
    reasons: list[str] = field(default_factory=list)  # why it fails; empty when it passes
    forced: bool = False
    baseline: str = "base"  # what `base` is: 05's report compares with the SFT adapter

    @property
    def passed(self) -> bool:
        """No reason to refuse."""
        return not self.reasons

    def message(self) -> str:
        """One line: the decision, the figures, and why it failed if it did."""
        figures = (f"{self.metric}: tuned {self.tuned:.3f} vs {self.baseline} {self.base:.3f}; "
                   f"tuned degenerate rate {self.degenerate_rate:.1%}")
        if self.passed:
            return f"[gate] passed. {figures}"
        why = "; ".join(self.reasons)
        if self.forced:
            return f"[gate] FAILED but force=True: exporting anyway. {figures}. Failed because: {why}"
        return f"[gate] refused: {why}. {figures}"


def _metric_means(report: dict, metric: str) -> tuple[str, float, float]:
    block = report.get("metrics")
    if block:
        name = block["primary"] if metric == "auto" else metric
        if name not in block["metrics"]:
            raise KeyError(f"gate_metric {name!r} is not in eval_report.json (it has {', '.join(block['metrics'])}): "
                           "pick one of those, or re-run 03 with metrics including it")
        m = block["metrics"][name]
        return name, float(m["base"]["mean"]), float(m["tuned"]["mean"])
    if metric not in ("auto", "exact_match"):  # a report from before the metrics block: exact match only
        raise KeyError(f"eval_report.json has no metrics block, so only exact_match can gate; re-run 03 for {metric!r}")
    return "exact_match", float(report["base"]["task_metric"]), float(report["tuned"]["task_metric"])


def evaluate(report: dict, metric: str = "auto", min_improvement: float = 0.0,
             max_degenerate_rate: float = 0.2) -> GateDecision:
    """Tuned must beat base on the metric by more than min_improvement (05's report: gain at least that on the SFT
    adapter, its `base`), with degenerate rate below the threshold."""
    name, base, tuned = _metric_means(report, metric)
    rate = float(report["tuned"].get("degenerate_rate", 0.0))
    preference = report.get("written_by") == "05_preference"
    decision = GateDecision(name, base, tuned, rate, baseline="SFT adapter (02's)" if preference else "base")
    if preference and not tuned - base >= min_improvement:
        decision.reasons.append(f"the preference-tuned adapter falls below the SFT adapter it started from (02's) on "
                                f"{name} (gain {tuned - base:+.3f}, needed at least {min_improvement:+.3f})")
    elif not preference and not tuned - base > min_improvement:
        decision.reasons.append(f"the tuned model does not beat the base on {name} "
                                f"(gain {tuned - base:+.3f}, needed more than {min_improvement:+.3f})")
    if not rate < max_degenerate_rate:
        decision.reasons.append(f"{rate:.1%} of the tuned generations are degenerate "
                                f"(max_degenerate_rate is {max_degenerate_rate:.1%})")
    return decision


def check(report: dict | str | Path, metric: str = "auto", min_improvement: float = 0.0,
          max_degenerate_rate: float = 0.2, force: bool = False, checkpoint: str | Path | None = None) -> GateDecision:
    """Print the decision; raise GateRefused when it fails, unless force=True (which says so). With `checkpoint`
    (what 04 exports), a report of another checkpoint is refused first, naming the notebook to rerun (force or not:
    its figures are about another model)."""
    path = Path("eval_report.json")
    if not isinstance(report, dict):
        path = Path(report)
        if path.is_dir():
            path = path / MARKERS["eval"]
        report = json.loads(path.read_text())
    if checkpoint is not None:
        reports.check_describes(report, path, checkpoint, report.get("written_by") or "03_eval")
    decision = evaluate(report, metric, min_improvement, max_degenerate_rate)
    decision.forced = force and not decision.passed
    print(decision.message(), flush=True)
    if not decision.passed and not force:
        raise GateRefused(decision.message() + f". Improve the run (see {report.get('written_by') or '03_eval'}'s "
                          "report), or set force=True to export anyway.")
    return decision
