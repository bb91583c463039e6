"""The harness's results: report.json and junit.xml agree with the rows, allowances never fail a run."""

import json
import xml.etree.ElementTree as ET

from nbutils.harness.problems import Problem
from nbutils.harness.results import Result, report, summary_table


def _rows():
    bad = Problem("cell-error", "02.ipynb", 3, "ValueError: boom", "fix the cell")
    allowed = Problem("absolute-path", "01.ipynb", 2, "/Users/me/x", "use a relative path", allowed=True)
    return [Result("01.ipynb", seconds=1.5, problems=[allowed]), Result("02.ipynb", "failed", 2.0, [bad])]


def test_report_json_and_junit_agree_with_the_rows(tmp_path, capsys):
    assert report(_rows(), tmp_path) == 1
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["ok"] is False and [n["notebook"] for n in data["notebooks"]] == ["01.ipynb", "02.ipynb"]
    assert data["notebooks"][0]["allowances"] == [str(_rows()[0].problems[0])]
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    [failure] = suite.iter("failure")
    assert failure.get("type") == "cell-error" and "ValueError: boom" in failure.get("message")
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("absolute-path 01.ipynb cell 2: ")  # every problem first, then the table


def test_allowed_problems_alone_pass():
    only_allowed = _rows()[:1]
    assert report(only_allowed, None) == 0 and not only_allowed[0].failing


def test_summary_table_shows_the_first_problem_or_the_allowance():
    table = summary_table(_rows()).splitlines()
    assert table[0].split() == ["notebook", "status", "seconds", "first", "problem"]
    assert table[1].startswith("01.ipynb") and table[1].endswith("allowed: absolute-path (cell 2)")
    assert "failed" in table[2] and "cell-error 02.ipynb cell 3: ValueError: boom" in table[2]
