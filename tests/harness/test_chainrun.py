"""The stamp that lets the tests reuse papermill-check's chain run: fresh only for the sources it was made from."""

import json

from nbutils.harness import chainrun
from nbutils.harness.results import Result


def test_fingerprint_follows_every_source_and_nothing_else(tmp_path):
    (tmp_path / "nbutils").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "nbutils" / "a.py").write_text("x = 1\n")
    (tmp_path / "notebooks" / "01.ipynb").write_text("{}")
    before = chainrun.fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("not a source")
    assert chainrun.fingerprint(tmp_path) == before
    (tmp_path / "nbutils" / "a.py").write_text("x = 2\n")
    assert chainrun.fingerprint(tmp_path) != before
    (tmp_path / "nbutils" / "a.py").write_text("x = 1\n")
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\n")
    assert chainrun.fingerprint(tmp_path) != before


def test_stamped_run_is_fresh_until_a_source_changes(tmp_path):
    rows = chainrun.stamped(lambda: [Result("01_data_prep.ipynb")], tmp_path, {})
    assert [r.notebook for r in rows] == ["01_data_prep.ipynb"]
    assert chainrun.fresh_rows(tmp_path) == [{"notebook": "01_data_prep.ipynb", "status": "passed", "problems": []}]
    stamp = json.loads((tmp_path / chainrun.STAMP).read_text())
    (tmp_path / chainrun.STAMP).write_text(json.dumps({**stamp, "fingerprint": "0" * 64}))
    assert chainrun.fresh_rows(tmp_path) is None


def test_a_run_with_parameters_is_never_reused(tmp_path):
    chainrun.stamped(lambda: [], tmp_path, {"steps": 3})
    assert chainrun.fresh_rows(tmp_path) is None


def test_a_run_that_dies_leaves_no_stamp(tmp_path):
    chainrun.stamped(lambda: [], tmp_path, {})

    def dies():
        raise KeyboardInterrupt

    try:
        chainrun.stamped(dies, tmp_path, {})
    except KeyboardInterrupt:
        pass
    assert not (tmp_path / chainrun.STAMP).exists() and chainrun.fresh_rows(tmp_path) is None
