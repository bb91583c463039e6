"""The install cell itself (install.bootstrap_cell_source): short, the same in every notebook, pinned to the
notebooks' version, and where it takes nbutils from (the dataset's wheel of this version, GitHub, the dataset's other one)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils.runtime import install, settings

SOURCE = install.bootstrap_cell_source()


def test_bootstrap_is_short_plain_and_pins_no_torch():
    compile(SOURCE, "bootstrap", "exec")
    assert len(SOURCE.strip().splitlines()) <= 21 and "noqa" not in SOURCE
    assert SOURCE.startswith("# @title ")  # the line a learner sees when the cell is folded
    assert "%%capture" not in SOURCE and "&" not in SOURCE and "!" not in SOURCE.replace("!=", "")
    assert "torch" not in SOURCE.replace("never torch", "")
    assert f"git+https://github.com/{settings.repository()}@{settings.ref()}" in SOURCE


def test_every_notebooks_first_code_cell_is_the_install_cell_folded_to_its_title():
    import nbformat

    from nbutils import chain

    root = Path(__file__).resolve().parents[2]
    for stage in chain.STAGES:
        nb = nbformat.read(root / "notebooks" / f"{stage.notebook}.ipynb", as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "code")
        assert first.source.strip() == SOURCE.strip(), f"{stage.notebook}: run python -m nbutils.kaggle sync, then make sync"
        assert {k: first.metadata.get(k) for k in install.BOOTSTRAP_CELL_METADATA} == install.BOOTSTRAP_CELL_METADATA, \
            f"{stage.notebook}: the install cell is not folded (Colab form, Kaggle/JupyterLab input hidden)"


def test_the_install_cell_pins_the_version_the_notebooks_were_built_with():
    """Each notebook's install cell names the tag of the package version it was synced with, never a branch: the
    version pyproject.toml declares and the installed nbutils reports (a bump without a sync fails here)."""
    import importlib.metadata
    import re

    import nbformat

    from nbutils import chain

    root = Path(__file__).resolve().parents[2]
    declared = re.search(r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(), re.M).group(1)  # [project]
    assert importlib.metadata.version("nbutils") == declared, "pyproject.toml's version changed: run make setup"
    for stage in chain.STAGES:
        for suffix in (".py", ".ipynb"):
            text = (root / "notebooks" / f"{stage.notebook}{suffix}").read_text()
            if suffix == ".ipynb":
                text = "".join(c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code")
            refs = re.findall(r"nbutils @ git\+https://github\.com/[\w.-]+/[\w.-]+@([\w./-]+)", text)
            assert refs == [f"v{declared}"], f"{stage.notebook}{suffix} installs nbutils at {refs}, not v{declared}: " \
                                              "run python -m nbutils.kaggle sync, then make sync"


def run_bootstrap(monkeypatch, nbutils_installed, input_root):
    """Exec the cell with pip and ensure_packages replaced; returns the pip argv lists it ran."""
    calls, ensured = [], []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "Successfully installed nbutils-0.1.0\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(install, "ensure_packages", lambda: ensured.append(True))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "nbutils" and not nbutils_installed
                        else real(n, *a))
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(input_root))
    exec(SOURCE, {"__name__": "__main__"})
    assert ensured == [True]
    return calls


def test_bootstrap_on_kaggle_installs_the_datasets_wheel_offline(monkeypatch, tmp_path, capsys):
    (tmp_path / "qlora-nbutils").mkdir()
    wheel = tmp_path / "qlora-nbutils" / "nbutils-0.1.0-py3-none-any.whl"
    wheel.write_text("")
    (calls,) = run_bootstrap(monkeypatch, False, tmp_path)
    assert calls[:6] == [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    # packaging too (the install step imports it; a bare image lacks it), found beside the wheel, offline
    assert calls[6:] == ["--no-index", "-f", str(wheel.parent), str(wheel), "packaging"]
    assert "Successfully installed" not in capsys.readouterr().out  # quiet on success: pip's log is not the lesson


def test_bootstrap_takes_github_over_a_dataset_wheel_of_another_version_and_that_one_only_offline(monkeypatch, tmp_path):
    (tmp_path / "qlora-nbutils").mkdir()
    stale = tmp_path / "qlora-nbutils" / "nbutils-0.0.1-py3-none-any.whl"  # a dataset built before this notebook
    stale.write_text("")
    (calls,) = run_bootstrap(monkeypatch, False, tmp_path)
    assert calls[-2:] == [install.nbutils_git_spec(), "packaging"] and "--no-index" not in calls
    tried = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: tried.append(cmd) or subprocess.CompletedProcess(
        cmd, int(install.nbutils_git_spec() in cmd), "", "git: could not resolve host"))  # the internet is off
    exec(SOURCE, {"__name__": "__main__"})
    assert [c[6:] for c in tried] == [[install.nbutils_git_spec(), "packaging"],
                                      ["--no-index", "-f", str(stale.parent), str(stale), "packaging"]]


def test_bootstrap_without_a_wheel_installs_from_the_repository(monkeypatch, tmp_path):
    (calls,) = run_bootstrap(monkeypatch, False, tmp_path)
    assert calls[-2:] == [install.nbutils_git_spec(), "packaging"] and "--no-index" not in calls


def test_bootstrap_does_nothing_when_nbutils_is_installed(monkeypatch, tmp_path):
    assert run_bootstrap(monkeypatch, True, tmp_path) == []


def test_bootstrap_fails_loudly_with_pips_messages_when_pip_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: no space"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None)
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"pip could not install nbutils \(nbutils @ git\+.*\):\nERROR: no space"):
        exec(SOURCE, {"__name__": "__main__"})


def test_offline_without_a_dataset_the_error_starts_with_the_way_out(monkeypatch, tmp_path):
    """Kaggle, internet off, no dataset attached: pip's git error alone ("Could not resolve host") named no way out."""
    git = "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com"
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", git))
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None)
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path))
    with pytest.raises(RuntimeError) as err:
        exec(SOURCE, {"__name__": "__main__"})
    assert str(err.value).startswith(install.OFFLINE_ADVICE) and git in str(err.value)
    assert "Add Input > Datasets > qlora-nbutils, or Settings > Internet on" in install.OFFLINE_ADVICE
    (tmp_path / "qlora-nbutils").mkdir()  # a dataset is attached (its wheel failed): not the advice to give
    (tmp_path / "qlora-nbutils" / "nbutils-0.0.1-py3-none-any.whl").write_text("")
    with pytest.raises(RuntimeError, match=r"^pip could not install nbutils"):
        exec(SOURCE, {"__name__": "__main__"})


def test_an_old_python_is_stopped_first_with_the_menu_that_fixes_it(monkeypatch):
    """A kernel pinned to an old Kaggle image (Python 3.10): pip would refuse nbutils and the pins with errors that
    name no way out; the cell says what to change before it runs pip at all."""
    monkeypatch.setattr(sys, "version_info", (3, 10, 12, "final", 0))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    with pytest.raises(RuntimeError, match=r"^this kernel runs Python 3\.10; the notebooks need 3\.11\+: on Kaggle, "
                                           r"Settings > Environment > Always use latest environment"):
        exec(SOURCE, {"__name__": "__main__"})


def test_the_cells_python_floor_is_pyprojects():
    import re

    root = Path(__file__).resolve().parents[2]
    declared = re.search(r'^requires-python = ">=([0-9.]+)"', (root / "pyproject.toml").read_text(), re.M).group(1)
    assert tuple(int(x) for x in declared.split(".")) == install.MIN_PYTHON
    assert f"sys.version_info < {install.MIN_PYTHON}" in SOURCE
