"""papermill-check's runs: every environment with the canary token, each stamped; fresh only for the sources it was made from."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

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


def test_check_runs_every_environment_with_the_canary_token_and_stamps_each(tmp_path, monkeypatch):
    from nbutils.harness import runner

    seen = []

    def run(notebooks, out, params, internet, time_budget, twin=None):
        seen.append((out.name, os.environ.get("HF_TOKEN"), internet))
        return [Result(nb.name) for nb in notebooks]

    monkeypatch.setenv("HF_TOKEN", "hf_the_users_own_token_never_reaches_a_kernel")
    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr(runner, "lint", lambda notebooks: [])
    monkeypatch.setattr("nbutils.harness.twin.twins", lambda names: [SimpleNamespace(name="img", key="k")])
    results = chainrun.check([Path("01_data_prep.ipynb")], tmp_path, {}, 60, ["all"])
    assert seen == [(tmp_path.name, chainrun.CANARY, False), ("twin-img", chainrun.CANARY, False)]
    assert [r.notebook for r in results] == ["01_data_prep.ipynb", "01_data_prep.ipynb [twin img]"]
    assert chainrun.fresh_rows(tmp_path) is not None and chainrun.fresh_twin_runs(tmp_path) == [tmp_path / "twin-img"]
    assert os.environ["HF_TOKEN"] == "hf_the_users_own_token_never_reaches_a_kernel"  # put back after the run
