"""Metrics checked against the libraries' own results on known pairs, the auto choice, intervals and user scorers."""

import sys
import textwrap

import pytest

from nbutils import plots
from nbutils.eval import metrics

HYP, REF = "the cat lay on the mat", "the cat sat on the mat"


def test_exact_match_known_pairs():
    assert metrics.exact_match(["  Paris ", "rome"], ["paris", "oslo"]) == [1.0, 0.0]


def test_rouge_l_matches_rouge_score():
    from rouge_score import rouge_scorer

    expected = rouge_scorer.RougeScorer(["rougeL"]).score(REF, HYP)["rougeL"].fmeasure
    assert metrics.rouge_l([HYP], [REF]) == [pytest.approx(expected)]
    assert expected == pytest.approx(5 / 6)  # LCS of 5 words out of 6 on both sides


def test_chrf_matches_sacrebleu():
    from sacrebleu.metrics import CHRF

    expected = CHRF().sentence_score(HYP, [REF]).score / 100
    assert metrics.chrf([HYP], [REF]) == [pytest.approx(expected)]
    assert 0.5 < expected < 1.0
    assert metrics.chrf([REF], [REF]) == [pytest.approx(1.0)]


def test_auto_picks_by_reference_length():
    assert metrics.resolve("auto", ["city", "name", "a pet"]) == (list(metrics.BUILTIN), "exact_match")
    assert metrics.resolve("auto", ["a long answer in a full sentence"] * 3)[1] == "rouge_l"
    assert metrics.resolve("chrf, rouge_l", ["x"]) == (["chrf", "rouge_l"], "chrf")
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.resolve("bleu", ["x"])


def test_user_metric(tmp_path, monkeypatch):
    (tmp_path / "mytask_scoring.py").write_text(textwrap.dedent("""
        def startswith(output, reference):
            return float(output.startswith(reference[:1]))
        def broken(output, reference):
            return "yes"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    block = metrics.compare("mytask_scoring:startswith", {"base": ["x", "y"], "tuned": ["a", "b"]}, ["a", "b"], n_boot=50)
    assert block["primary"] == "mytask_scoring:startswith"
    assert block["metrics"]["mytask_scoring:startswith"]["tuned"]["mean"] == 1.0
    with pytest.raises(TypeError, match="must return a number"):
        metrics.compare("mytask_scoring:broken", {"tuned": ["a"]}, ["a"])
    with pytest.raises(ValueError, match="cannot import"):
        metrics.compare("no_such_module_xyz:f", {"tuned": ["a"]}, ["a"])
    sys.modules.pop("mytask_scoring", None)


def test_compare_intervals_and_win_tie_loss(tmp_path):
    refs = ["city"] * 10
    block = metrics.compare("auto", {"base": ["name"] * 8 + ["city"] * 2, "tuned": ["city"] * 9 + ["pet"]}, refs,
                            n_boot=500, seed=1)
    em = block["metrics"]["exact_match"]
    assert em["base"]["mean"] == pytest.approx(0.2) and em["tuned"]["mean"] == pytest.approx(0.9)
    assert em["base"]["ci"][0] <= 0.2 <= em["base"]["ci"][1]
    assert em["tuned"]["ci"][1] <= 1.0 and em["delta"]["ci"][0] > 0
    assert em["win_tie_loss"] == {"win": 8, "tie": 1, "loss": 1}
    assert set(block["metrics"]) == {"exact_match", "rouge_l", "chrf"}
    assert block == metrics.compare("auto", {"base": ["name"] * 8 + ["city"] * 2, "tuned": ["city"] * 9 + ["pet"]}, refs,
                                    n_boot=500, seed=1)  # same seed, same intervals
    fig = plots.plot_metric_comparison(block, tmp_path / "metrics.png")
    assert (tmp_path / "metrics.png").stat().st_size > 1000 and [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "exact_match *", "rouge_l", "chrf"]  # the primary metric starred (the figure itself: tests/test_plots.py)
    assert [r["metric"] for r in metrics.summary_rows(block)][0] == "exact_match (primary)"
