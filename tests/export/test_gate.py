"""The export gate on crafted reports: each reason to refuse, force, the metric choice and its errors."""

import json

import pytest

from nbutils.export import gate


def _report(base=0.1, tuned=0.8, rate=0.0, primary="exact_match"):
    metrics = {name: {"base": {"mean": base}, "tuned": {"mean": tuned}} for name in ("exact_match", "chrf")}
    return {"metrics": {"primary": primary, "metrics": metrics}, "tuned": {"degenerate_rate": rate}}


def test_better_and_healthy_passes_on_the_primary_metric(capsys):
    decision = gate.check(_report(), force=False)
    assert decision.passed and decision.metric == "exact_match" and not decision.forced
    assert capsys.readouterr().out.startswith("[gate] passed. exact_match: tuned 0.800 vs base 0.100")


@pytest.mark.parametrize("kwargs, needed, reason", [
    ({"tuned": 0.1}, {}, "does not beat the base on exact_match (gain +0.000, needed more than +0.000)"),
    ({"tuned": 0.15}, {"min_improvement": 0.1}, "gain +0.050, needed more than +0.100"),
    ({"rate": 0.2}, {}, "20.0% of the tuned generations are degenerate (max_degenerate_rate is 20.0%)"),
])
def test_each_reason_refuses(kwargs, needed, reason):
    decision = gate.evaluate(_report(**kwargs), **needed)
    assert not decision.passed and len(decision.reasons) == 1 and reason in decision.reasons[0]
    with pytest.raises(gate.GateRefused, match="set force=True to export anyway"):
        gate.check(_report(**kwargs), **needed)


def test_force_exports_anyway_and_says_why(tmp_path, capsys):
    (tmp_path / "eval_report.json").write_text(json.dumps(_report(tuned=0.0, rate=0.5)))
    decision = gate.check(tmp_path, force=True)  # a folder: its eval_report.json
    assert decision.forced and len(decision.reasons) == 2
    assert "[gate] FAILED but force=True: exporting anyway." in capsys.readouterr().out


def test_metric_choice_and_a_missing_metric():
    assert gate.evaluate(_report(primary="chrf")).metric == "chrf"
    assert gate.evaluate(_report(), metric="chrf").metric == "chrf"
    with pytest.raises(KeyError, match="gate_metric 'rouge_l' is not in eval_report.json"):
        gate.evaluate(_report(), metric="rouge_l")


def test_a_report_without_a_metrics_block_gates_on_exact_match_only():
    old = {"base": {"task_metric": 0.0}, "tuned": {"task_metric": 0.5, "degenerate_rate": 0.0}}
    assert gate.evaluate(old).passed and gate.evaluate(old).metric == "exact_match"
    with pytest.raises(KeyError, match="only exact_match can gate"):
        gate.evaluate(old, metric="chrf")


# --- the gate on a report shaped as 03 writes it (tests/export/conftest.py) ---------------------------

def test_gate_passes_a_better_model(tmp_path, capsys, make_report):
    (tmp_path / "eval_report.json").write_text(json.dumps(make_report()))
    decision = gate.check(tmp_path)
    assert decision.passed and not decision.forced and decision.metric == "exact_match"
    assert "[gate] passed" in capsys.readouterr().out


def test_gate_refuses_a_worse_model_and_force_overrides(capsys, make_report):
    worse = make_report(base=0.6, tuned=0.4)
    with pytest.raises(gate.GateRefused, match="does not beat the base on exact_match"):
        gate.check(worse)
    with pytest.raises(gate.GateRefused, match="does not beat the base on rouge_l"):
        gate.check(make_report(), metric="rouge_l")  # a metric where the tuned model lost
    decision = gate.check(worse, force=True)
    assert decision.forced and not decision.passed
    assert "force=True: exporting anyway" in capsys.readouterr().out


def test_gate_refuses_degenerate_output_and_unknown_metrics(make_report):
    with pytest.raises(gate.GateRefused, match="35.0% of the tuned generations are degenerate"):
        gate.check(make_report(degenerate=0.35), max_degenerate_rate=0.2)
    with pytest.raises(gate.GateRefused, match="needed more than"):
        gate.check(make_report(base=0.5, tuned=0.52), min_improvement=0.05)
    with pytest.raises(KeyError, match="chrf"):
        gate.check(make_report(), metric="chrf")
    old = {"base": {"task_metric": 0.0}, "tuned": {"task_metric": 1.0, "degenerate_rate": 0.0}}
    assert gate.check(old).passed  # a report from before the metrics block gates on exact match


def test_a_report_of_another_checkpoint_is_refused_even_with_force(tmp_path, trained_adapter):
    from nbutils.train import reports

    other = {"dir": "elsewhere", "step": 16, "content_hash": "f" * 64}
    (tmp_path / "eval_report.json").write_text(json.dumps({**_report(), "checkpoint": other, "written_by": "05_preference"}))
    with pytest.raises(reports.ReportMismatchError, match=rf"{tmp_path / 'eval_report.json'} describes another "
                                                          r"checkpoint \(step 16.*Rerun 05_preference"):
        gate.check(tmp_path, force=True, checkpoint=trained_adapter)
    (tmp_path / "eval_report.json").write_text(json.dumps({**_report(), "checkpoint": reports.identity(trained_adapter)}))
    assert gate.check(tmp_path, checkpoint=trained_adapter).passed


def test_05s_report_gates_on_not_falling_below_the_sft_adapter_it_names(capsys):
    """05's report calls 02's SFT adapter `base`: preference tuning need not raise the task metric, so its adapter
    passes when the metric holds (04's docs send 05's result through this gate) and is refused, naming the SFT
    adapter, when it falls. 03's report still needs a gain over the base model."""
    same = {**_report(base=0.8, tuned=0.8), "written_by": "05_preference"}
    decision = gate.check(same)
    assert decision.passed and "tuned 0.800 vs SFT adapter (02's) 0.800" in capsys.readouterr().out
    with pytest.raises(gate.GateRefused, match=r"falls below the SFT adapter it started from \(02's\) on exact_match "
                                               r"\(gain -0.050, needed at least \+0.000\).*see 05_preference's report"):
        gate.check({**_report(base=0.8, tuned=0.75), "written_by": "05_preference"})
    assert not gate.evaluate({**same, "written_by": "05_preference"}, min_improvement=0.01).passed  # a gain asked for
    assert not gate.evaluate(_report(base=0.8, tuned=0.8)).passed  # 03's: tuned must beat the base
    assert "does not beat the base" in gate.evaluate({**same, "written_by": "03_eval"}).reasons[0]
