"""The one matplotlib helper: Agg in a batch run, every chart saved as a PNG and closed (nothing left open)."""

import os
import subprocess
import sys

import pytest

from nbutils import plots
from nbutils.eval import report
from nbutils.train import curves

PNG = b"\x89PNG\r\n\x1a\n"


def test_pyplot_picks_agg_in_a_batch_run_whatever_the_default():
    # TkAgg would need a display; a batch run (papermill, a Kaggle commit) has none.
    probe = "from nbutils import plots; print(plots.pyplot().get_backend().lower())"
    env = {**os.environ, "MPLBACKEND": "TkAgg"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "agg", out.stdout + out.stderr


def test_save_writes_the_png_and_closes_the_figure(tmp_path):
    plt = plots.pyplot()
    plt.close("all")
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    assert plt.get_fignums() == [fig.number]
    assert plots.save(fig, tmp_path / "line.png") is fig
    assert (tmp_path / "line.png").read_bytes()[:8] == PNG
    assert plt.get_fignums() == []


BLOCK = {"primary": "exact_match", "metrics": {
    "exact_match": {"base": {"mean": 0.2, "ci": [0.1, 0.3]}, "tuned": {"mean": 0.8, "ci": [0.7, 0.9]}},
    "rouge_l": {"base": {"mean": 0.4, "ci": [0.3, 0.5]}, "tuned": {"mean": 0.6, "ci": [0.5, 0.7]}}}}
HISTORY = [{"step": 10, "loss": 2.0}, {"step": 10, "eval_loss": 2.1}, {"step": 20, "loss": 1.0},
           {"step": 20, "eval_loss": 1.2}]
CHARTS = {
    "length_histogram": lambda path: plots.plot_length_histogram([5, 8, 8, 13, 40], 32, path),
    "metric_comparison": lambda path: plots.plot_metric_comparison(BLOCK, path),
    "learning_curves": lambda path: curves.plot(HISTORY, path),
    "reasons_chart": lambda path: report.reasons_chart({"base": {"loop": 3}, "tuned": {"empty": 1}}, path),
}


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_every_chart_goes_through_the_helper_and_leaves_nothing_open(tmp_path, name):
    plt = plots.pyplot()
    plt.close("all")
    fig = CHARTS[name](tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG
    assert fig.axes and plt.get_fignums() == [], f"{name} left {plt.get_fignums()} open"


def test_a_mean_a_rounding_error_outside_its_interval_draws_no_negative_error_bar(tmp_path):
    """Eight scores of 0.1: the mean by Python's sum is 0.09999999999999999, numpy's interval [0.1, 0.1]; matplotlib
    refused the negative yerr after both models had generated."""
    from nbutils.eval import metrics

    scores = [0.1] * 8
    mean, ci = sum(scores) / len(scores), metrics.bootstrap_ci(scores, 200)
    assert mean < ci[0]
    entry = {"mean": mean, "ci": ci}
    block = {"primary": "rouge_l", "metrics": {"rouge_l": {"base": entry, "tuned": entry}}}
    plots.plot_metric_comparison(block, tmp_path / "metrics.png")
    assert (tmp_path / "metrics.png").read_bytes()[:8] == PNG
