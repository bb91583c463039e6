"""papermill-check's runs: every environment with the canary token, each stamped; fresh only for the sources it was made from."""

import json
import os
import time
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


def test_fingerprint_follows_what_the_stamped_static_checks_read(tmp_path):
    """The rows hold the static checks: pair-drift reads notebooks/*.py, the lint reads the images' freezes."""
    (tmp_path / "kaggle-image" / "freezes").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    before = chainrun.fingerprint(tmp_path)
    (tmp_path / "notebooks" / "01_data_prep.py").write_text("# %%\nx = 1\n")
    paired = chainrun.fingerprint(tmp_path)
    assert paired != before
    (tmp_path / "kaggle-image" / "freezes" / "kaggle.txt").write_text("numpy==2.0.2\n")
    assert chainrun.fingerprint(tmp_path) != paired


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
    results = chainrun.check([Path("01_data_prep.ipynb")], tmp_path, {}, 60, ["all"], jobs=1)
    assert seen == [(tmp_path.name, chainrun.CANARY, False), ("twin-img", chainrun.CANARY, False)]
    assert [r.notebook for r in results] == ["01_data_prep.ipynb", "01_data_prep.ipynb [twin img]"]
    assert chainrun.fresh_rows(tmp_path) is not None and chainrun.fresh_twin_runs(tmp_path) == [tmp_path / "twin-img"]
    assert os.environ["HF_TOKEN"] == "hf_the_users_own_token_never_reaches_a_kernel"  # put back after the run


def _worker(twin_name, notebooks, out, params, time_budget):
    """check's `one` in a worker process: which process ran it, what its kernels would see, and whether another
    run was going on at the same time (each run waits, up to a minute, until two have started)."""
    (out / f"{twin_name}.started").touch()
    deadline = time.monotonic() + 60
    while len(list(out.glob("*.started"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    together = len(list(out.glob("*.started"))) >= 2
    return [Result(f"{together} {twin_name} {os.getpid()} {os.environ.get('HF_TOKEN')} {os.environ.get('OMP_NUM_THREADS')}")]


def test_check_runs_the_environments_side_by_side_in_worker_processes(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("nbutils.harness.twin.twins", lambda names: [SimpleNamespace(name="a"), SimpleNamespace(name="b")])
    rows = [r.notebook.split() for r in chainrun.check([], tmp_path, {}, 60, ["all"], jobs=2, one=_worker)]
    assert all(r[0] == "True" for r in rows)  # two at a time
    rows = [r[1:] for r in rows]
    assert [r[0] for r in rows] == ["None", "a", "b"]  # the project venv first, then the twins, as the runs are listed
    assert len({r[1] for r in rows}) == 2 and str(os.getpid()) not in {r[1] for r in rows}  # two workers, not here
    assert {r[2] for r in rows} == {chainrun.CANARY}
    assert {r[3] for r in rows} == {str(max(1, (os.cpu_count() or 1) // 2))}  # each run its share of the cores
    assert "OMP_NUM_THREADS" not in os.environ
