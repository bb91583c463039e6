"""The harness command line: parameters passed, allowances reported not failed, exit code and JUnit on failure,
static checks before a run unless told not to."""

import json
from pathlib import Path

import nbformat
import pytest

from nbutils.harness import cli
from tests.harness_gallery import make_gallery

GALLERY = Path(make_gallery.__file__).parent
kernel = pytest.mark.integration  # these start a Jupyter kernel: the full gate, not `make test-fast`


@kernel
def test_run_cli_passes_parameters(tmp_path, capsys):
    rc = cli.main(["run", str(GALLERY / "clean_minimal.ipynb"), "-p", "steps", "7", "--out", str(tmp_path)])
    assert rc == 0
    executed = nbformat.read(tmp_path / "clean_minimal.ipynb", as_version=4)
    assert '{"steps": 7}' in executed.cells[-1].outputs[0].text
    assert json.loads((tmp_path / "report.json").read_text())["ok"]
    assert "clean_minimal.ipynb  passed" in capsys.readouterr().out


def test_allowance_is_reported_not_failed(tmp_path, capsys):
    rc = cli.main(["lint", str(GALLERY / "allowed_absolute_path.ipynb"), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    assert rc == 0 and report["ok"]
    assert report["notebooks"][0]["allowances"][0].startswith("absolute-path allowed_absolute_path.ipynb cell 2")
    assert "allowed: absolute-path (cell 2)" in capsys.readouterr().out  # the summary table
    assert (tmp_path / "junit.xml").read_text().count("<failure") == 0


def test_exit_code_and_junit_on_failure(tmp_path, capsys):
    rc = cli.main(["lint", str(GALLERY / "blocking_input.ipynb"), "--out", str(tmp_path)])
    line = capsys.readouterr().out.splitlines()[0]
    assert rc == 1
    assert line.startswith("blocking-input blocking_input.ipynb cell 2 line 1: ") and " -- " in line
    assert 'type="blocking-input"' in (tmp_path / "junit.xml").read_text()


@kernel
def test_run_also_runs_the_static_checks_unless_told_not_to(tmp_path, capsys):
    nb = str(GALLERY / "committed_outputs.ipynb")  # runs fine; only the static check finds something
    assert cli.main(["run", nb, "--out", str(tmp_path / "a")]) == 1
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert [p["check"] for p in report["notebooks"][0]["problems"]] == ["committed-outputs"]
    assert cli.main(["run", nb, "--no-static", "--out", str(tmp_path / "b")]) == 0


def test_run_follows_the_metadata_and_check_runs_offline_on_a_budget_as_the_docs_say(monkeypatch, tmp_path):
    from nbutils.harness import chainrun

    seen = []
    monkeypatch.setattr(cli, "run", lambda nbs, out, params, internet, budget: seen.append(("run", internet, budget)) or [])
    monkeypatch.setattr(cli, "with_static", lambda nbs, ran: ran())
    monkeypatch.setattr(chainrun, "check", lambda nbs, out, params, budget, *a: seen.append(("check", budget)) or [])
    monkeypatch.setattr(cli, "report", lambda results, out: 0)
    cli.main(["run", "nb.ipynb", "--out", str(tmp_path)])
    cli.main(["run", "nb.ipynb", "--no-internet", "--time-budget", "60", "--out", str(tmp_path)])
    cli.main(["check", "--out", str(tmp_path)])
    assert seen == [("run", None, None), ("run", False, 60.0), ("check", 600.0)]  # None: each kernel's metadata
    docs = (GALLERY.parents[1] / "docs" / "harness.md").read_text()
    assert "`run` follows each notebook's `enable_internet`" in docs and "budget of 600 s per notebook" in docs


def test_cli_parameter_values_are_python_literals_else_text():
    assert cli.literal("7") == 7 and cli.literal("[1, 'a']") == [1, "a"] and cli.literal("True") is True
    assert cli.literal("embedded") == "embedded" and cli.literal("1e-3") == 0.001



def test_lint_reads_the_branches_as_the_chosen_platform_runs_them(tmp_path):
    nb = make_gallery.notebook(['import os\nif "KAGGLE_KERNEL_RUN_TYPE" in os.environ:\n    !pip install -U timm'])
    path = tmp_path / "branch.ipynb"
    nbformat.write(nb, path)
    assert cli.main(["lint", str(path), "--out", str(tmp_path / "k")]) == 1  # Kaggle: the branch runs, timm moves
    report = json.loads((tmp_path / "k" / "report.json").read_text())
    [problem] = report["notebooks"][0]["problems"]
    assert (problem["check"], problem["cell"], problem["line"]) == ("unpinned-install", 2, 3)
    assert cli.main(["lint", str(path), "--platform", "colab", "--out", str(tmp_path / "c")]) == 0  # never on Colab
