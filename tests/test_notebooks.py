"""Execute the three notebooks on the embedded default under the Kaggle batch simulation.

This is the end-to-end evidence: the chain runs headless with the internet off, passes every
harness check without an allowance, shows real learning, and gives the same numbers on a rerun.
"""

import json
from pathlib import Path

import pytest

from nbutils import harness

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = []
    for i in range(2):
        dest = tmp_path_factory.mktemp(f"chain{i}")
        results = harness.run([ROOT / nb for nb in harness.CHAIN], dest, {}, internet=False, time_budget=600)
        report = dest / "sandbox" / "03_eval" / "working" / "eval" / "eval_report.json"
        out.append((results, json.loads(report.read_text()) if report.exists() else None))
    return out


def test_chain_passes_every_check_without_allowances(runs):
    results, _ = runs[0]
    assert [r.status for r in results] == ["passed"] * 3, [str(p) for r in results for p in r.problems]
    assert not [p for r in results for p in r.problems]


def test_chain_shows_real_learning(runs):
    _, report = runs[0]
    assert report["n_samples"] > 0
    assert report["base"]["task_metric"] <= 0.1
    assert report["tuned"]["task_metric"] >= 0.5
    assert report["tuned"]["eval_loss"] <= 0.7 * report["base"]["eval_loss"]


def test_same_seed_same_numbers(runs):
    (_, first), (_, second) = runs
    for model in ("base", "tuned"):
        assert first[model]["task_metric"] == second[model]["task_metric"]
        assert first[model]["eval_loss"] == pytest.approx(second[model]["eval_loss"], rel=1e-5)
