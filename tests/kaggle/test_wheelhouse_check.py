"""The wheelhouse check runs the notebooks' real bootstrap cell offline, as a Kaggle batch run, with the dataset
mounted where Kaggle mounts it; here through a stand-in interpreter that records what it was asked to run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils.kaggle import wheelhouse_check
from nbutils.runtime import settings
from nbutils.runtime.install import bootstrap_cell_source

FAKE_PYTHON = '''#!{python}
import json, os, sys
log = {log!r}
calls = json.load(open(log)) if os.path.exists(log) else []
calls.append({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
json.dump(calls, open(log, "w"))
if sys.argv[1:4] == ["-m", "pip", "list"]:  # two packages more after the install cell ran
    print("torch==2.13.0" + ("\\nnbutils==0.1\\npeft==0.21.2" if len(calls) > 1 else ""))
'''


def _fake_python(tmp_path: Path) -> tuple[Path, Path]:
    py, log = tmp_path / "bin" / "python", tmp_path / "calls.json"
    py.parent.mkdir()
    py.write_text(FAKE_PYTHON.format(python=sys.executable, log=str(log)))
    py.chmod(0o755)
    return py, log


@pytest.mark.parametrize("strict", [True, False])
def test_check_env_runs_the_bootstrap_cell_offline_as_a_kaggle_batch_run(tmp_path, strict):
    py, log = _fake_python(tmp_path)
    (tmp_path / "dataset").mkdir()
    result = wheelhouse_check.check_env("fake", str(py), tmp_path / "work", tmp_path / "dataset", strict)
    calls = json.loads(log.read_text())
    offline = bool(wheelhouse_check._offline_prefix())
    assert result["env"] == "fake" and result["installed"] == 2 and result["network_namespace"] is offline
    kinds = [c["argv"][:3] if c["argv"][0] == "-m" else c["argv"][:1] for c in calls]
    assert kinds == [["-m", "pip", "list"], ["-c"], ["-c"], *([["-m", "pip", "check"]] if strict else []),
                     ["-m", "pip", "list"]]
    cell = calls[1]
    assert cell["argv"] == ["-c", bootstrap_cell_source()]  # the notebooks' own cell, not a copy
    env = cell["env"]
    assert env["KAGGLE_KERNEL_RUN_TYPE"] == "Batch" and env["HOME"] == str(tmp_path / "work" / "home")
    mounted = Path(env["NBUTILS_INPUT_ROOT"]) / settings.DATASET_SLUG
    assert mounted.resolve() == (tmp_path / "dataset").resolve()
    assert offline or env["PIP_NO_INDEX"] == "1"  # no network namespace: pip is told to use no index
    assert "import nbutils" in calls[2]["argv"][1] and "nbutils.runtime.install" in calls[2]["argv"][1]


def test_a_failing_cell_stops_the_check(tmp_path):
    py, _ = _fake_python(tmp_path)
    py.write_text(py.read_text() + "if sys.argv[1] == '-c': sys.exit(3)\n")
    (tmp_path / "dataset").mkdir()
    with pytest.raises(subprocess.CalledProcessError, match="returned non-zero exit status 3"):
        wheelhouse_check.check_env("fake", str(py), tmp_path / "work", tmp_path / "dataset", strict=False)
    assert os.path.islink(tmp_path / "work" / "input" / settings.DATASET_SLUG)
