"""The papermill-check harness on its gallery: every check id caught with the right id and cell."""

import json
import os
from pathlib import Path

import pytest

from nbutils import harness
from tests.harness_gallery import make_gallery

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    dest = tmp_path_factory.mktemp("gallery")
    return dest, make_gallery.build(dest)


def _ids(problems, allowed=False):
    return {(p.check, p.cell) for p in problems if p.allowed == allowed}


@pytest.mark.parametrize("name", sorted(make_gallery.STATIC))
def test_static_check_caught(gallery, name):
    dest, expected = gallery
    [result] = harness.lint([dest / f"{name}.ipynb"])
    assert _ids(result.problems) == {expected[name]}, [str(p) for p in result.problems]


def test_runtime_checks_caught(gallery, monkeypatch, tmp_path):
    dest, expected = gallery
    monkeypatch.setenv("NBUTILS_GALLERY_TOKEN", "tok_abcdefgh12345")
    for name in sorted(make_gallery.RUNTIME):
        budget = 5 if name == "time_budget" else None
        result, _ = harness.run_notebook(dest / f"{name}.ipynb", tmp_path / name, {}, internet=False,
                                         time_budget=budget, mounts=[])
        assert expected[name] in _ids(result.problems), (name, [str(p) for p in result.problems])
        assert result.status == "failed"


def _snapshot(paths):
    seen = set()
    for root in paths:
        if root.exists():
            seen |= {str(p) for p in root.rglob("*") if "__pycache__" not in p.parts}
    return seen


def test_clean_notebooks_pass_and_nothing_escapes_the_sandbox(gallery, tmp_path):
    dest, _ = gallery
    out = tmp_path / "out"
    home = Path.home()
    # /tmp itself is not watched (other processes write there); where temp files went is checked below.
    watched = [ROOT, dest, home / ".cache", home / ".local", home / ".ipython", home / ".jupyter", home / ".config",
               home / ".keras"]
    before = _snapshot(watched)
    results = harness.run([dest / "clean_minimal.ipynb", dest / "clean_files.ipynb"], out, {}, False, None)
    after = _snapshot(watched)
    assert [r.status for r in results] == ["passed", "passed"], [str(p) for r in results for p in r.problems]
    escaped = {p for p in after - before if not p.startswith(str(out))}
    assert not escaped, sorted(escaped)[:10]
    assert (out / "sandbox" / "clean_files" / "working" / "plot.png").exists()
    executed = (out / "clean_files.ipynb").read_text()
    assert f"TMPDIR {out}" in executed  # tempfile in the kernel writes inside the sandbox


def test_allowance_is_reported_not_failed(gallery, tmp_path):
    dest, expected = gallery
    rc = harness.main(["lint", str(dest / "allowed_absolute_path.ipynb"), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    assert rc == 0 and report["ok"]
    assert report["notebooks"][0]["allowances"][0].startswith("absolute-path allowed_absolute_path.ipynb cell 2")
    assert (tmp_path / "junit.xml").read_text().count("<failure") == 0


def test_exit_code_and_junit_on_failure(gallery, tmp_path, capsys):
    dest, _ = gallery
    rc = harness.main(["lint", str(dest / "blocking_input.ipynb"), "--out", str(tmp_path)])
    line = capsys.readouterr().out.splitlines()[0]
    assert rc == 1
    assert line.startswith("blocking-input blocking_input.ipynb cell 2: ") and " -- " in line
    assert 'type="blocking-input"' in (tmp_path / "junit.xml").read_text()


def test_missing_artifact(tmp_path):
    import nbformat

    nb = make_gallery.notebook(["print('forgot to write the manifest')"])
    path = tmp_path / "01_data_prep.ipynb"
    nbformat.write(nb, path)
    [result] = harness.run([path], tmp_path / "out", {}, False, None)
    assert ("missing-artifact", None) in _ids(result.problems)


def test_our_notebooks_pass_lint_without_allowances():
    results = harness.lint([ROOT / nb for nb in harness.CHAIN])
    assert all(not r.problems for r in results), [str(p) for r in results for p in r.problems]


def test_cell_error_names_cell_line_and_exception(gallery, tmp_path):
    dest, _ = gallery
    result, _ = harness.run_notebook(dest / "cell_error.ipynb", tmp_path, {}, False, None, [])
    [problem] = [p for p in result.problems if p.check == "cell-error"]
    assert problem.cell == 2 and "ValueError: boom" in problem.what and "raise ValueError('boom')" in problem.what
    assert os.path.exists(result.executed)
