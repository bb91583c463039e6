"""The Kaggle command line as make runs it (mk/kaggle.mk -> python -m nbutils.kaggle ...)."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_fragment_targets(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"PY := .venv/bin/python\nsetup:\n\t@true\ninclude {ROOT / 'mk' / 'kaggle.mk'}\n")
    expected = {"kaggle-bundle": "nbutils.kaggle bundle", "kaggle-push": "nbutils.kaggle push",
                "kaggle-dataset": "nbutils.kaggle dataset", "kaggle-metadata": "nbutils.kaggle metadata",
                "kaggle-wheelhouse-check": "nbutils.kaggle wheelhouse-check"}
    for target, command in expected.items():
        out = subprocess.run(["make", "-n", "-f", str(makefile), target], capture_output=True, text=True, check=True)
        assert f".venv/bin/python -m {command}" in out.stdout, out.stdout + out.stderr


def test_the_dataset_command_names_kaggles_python_when_the_build_is_for_another(tmp_path, monkeypatch, capsys):
    from nbutils.kaggle import __main__ as cli
    from nbutils.kaggle import dataset

    monkeypatch.setattr(dataset, "dataset", lambda: tmp_path)
    monkeypatch.setattr(dataset, "KAGGLE_PYTHON", "3.11")
    monkeypatch.setattr(dataset, "image_python", lambda: "3.12")
    assert cli.main(["dataset"]) == 0
    assert "for the upload, build it with KAGGLE_PYTHON=3.12 make kaggle-dataset" in capsys.readouterr().out
    monkeypatch.setattr(dataset, "KAGGLE_PYTHON", "3.12")
    cli.main(["dataset"])
    assert "note:" not in capsys.readouterr().out



def test_the_twins_dataset_is_built_for_their_python_whatever_kaggle_python_says():
    """KAGGLE_PYTHON=3.12 (the upload) in the shell made `make papermill-check` build the twins' dataset for 3.12."""
    import os
    import re

    from nbutils.kaggle import dataset

    assert re.search(r"^TWIN_PYTHON := (\S+)$", (ROOT / "mk" / "kaggle.mk").read_text(), re.M)[1] == dataset.TWIN_PYTHON
    env = {**os.environ, "KAGGLE_PYTHON": "3.12"}
    for target in ("papermill-check", "kaggle-wheelhouse-check"):
        out = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, env=env, check=True)
        assert f"KAGGLE_PYTHON={dataset.TWIN_PYTHON} .venv/bin/python -m nbutils.kaggle dataset" in out.stdout, out.stdout
        assert "KAGGLE_PYTHON=3.12" not in out.stdout
