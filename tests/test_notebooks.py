"""Execute the three notebooks on the embedded default, one fresh kernel each, as papermill does.

This is the end-to-end evidence: the chain runs headless and shows real learning, and the same
seed gives the same numbers on a rerun.
"""

import json
from pathlib import Path

import papermill
import pytest

from nbutils import embedded

ROOT = Path(__file__).resolve().parent.parent
CHAIN = ["01_data_prep", "02_train_qlora", "03_eval"]


def run_chain(work: Path) -> dict:
    for name in CHAIN:
        papermill.execute_notebook(
            str(ROOT / "notebooks" / f"{name}.ipynb"), str(work / f"{name}.ipynb"), kernel_name="python3",
            cwd=str(work), progress_bar=False,
            # The kernel inherits os.environ; the roots are set by the fixture below.
        )
    return json.loads((work / "eval" / "eval_report.json").read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    embedded.ensure()
    out = []
    with pytest.MonkeyPatch.context() as mp:
        for i in range(2):
            work = tmp_path_factory.mktemp(f"chain{i}")
            mp.setenv("NBUTILS_WORKING_ROOT", str(work))
            mp.setenv("NBUTILS_INPUT_ROOT", str(work / "input"))
            out.append(run_chain(work))
    return out


def test_chain_shows_real_learning(reports):
    report = reports[0]
    assert report["n_samples"] > 0
    assert report["base"]["task_metric"] <= 0.1
    assert report["tuned"]["task_metric"] >= 0.5
    assert report["tuned"]["eval_loss"] <= 0.7 * report["base"]["eval_loss"]


def test_same_seed_same_numbers(reports):
    first, second = reports
    for model in ("base", "tuned"):
        assert first[model]["task_metric"] == second[model]["task_metric"]
        assert first[model]["eval_loss"] == pytest.approx(second[model]["eval_loss"], rel=1e-5)
