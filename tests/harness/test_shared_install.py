"""The chain's install step run once per twin: the kernel hook's snapshot right after the install cell, and the
later notebooks' copies of it (only for the same setup and internet setting; the cached twin never written)."""

import json
import os
import sys
from types import SimpleNamespace

import nbformat

from nbutils.harness import sandbox, twin
from nbutils.harness.shared_install import SNAPSHOT_VAR, SharedInstall, digest, setup_cells
from tests.harness.faketwin import fake_twin

INSTALL = "# @title Install\nensure_packages()\n"


def test_setup_cells_are_the_code_before_the_parameters():
    cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell(INSTALL),
             nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}), nbformat.v4.new_code_cell("y")]
    assert setup_cells(nbformat.v4.new_notebook(cells=cells)) == (INSTALL,)
    assert setup_cells(nbformat.v4.new_notebook(cells=cells[2:])) == ()


def _kernel_hooks(box, monkeypatch, prefix):
    """The sandbox's IPython startup file run against a stand-in shell: its registered hooks by event name."""
    hooks = {}
    shell = SimpleNamespace(execution_count=3, user_ns={},
                            events=SimpleNamespace(register=lambda name, fn: hooks.setdefault(name, fn)))
    monkeypatch.setenv("NBUTILS_EVENTS", str(box.events))
    monkeypatch.setattr(sys, "prefix", str(prefix))
    startup = box.root / "ipython" / "profile_default" / "startup" / "00-nbutils-harness.py"
    exec(compile(startup.read_text(), str(startup), "exec"), {"get_ipython": lambda: shell})  # noqa: S102
    return hooks


def _ran(hooks, source, success=True):
    hooks["post_run_cell"](SimpleNamespace(execution_count=2, error_in_exec=None, success=success,
                                           info=SimpleNamespace(raw_cell=source)))


def test_the_kernel_takes_the_snapshot_once_right_after_the_install_cell_succeeds(tmp_path, monkeypatch):
    box = sandbox.create(tmp_path, "01_data_prep")
    image = tmp_path / "env"
    (image / "lib").mkdir(parents=True)
    (image / "lib" / "installed.py").write_text("by the install cell")
    dest = box.root / "installed"
    monkeypatch.setenv(SNAPSHOT_VAR, f"{digest(INSTALL)}:{dest}")
    hooks = _kernel_hooks(box, monkeypatch, image)
    _ran(hooks, "print('another cell')")
    _ran(hooks, INSTALL, success=False)  # a failed install is never shared
    assert not dest.exists()
    _ran(hooks, INSTALL)
    assert os.stat(dest / "lib" / "installed.py").st_ino == os.stat(image / "lib" / "installed.py").st_ino
    assert not list(box.root.glob("*.partial"))
    (image / "lib" / "later.py").write_text("a later cell's install")
    _ran(hooks, INSTALL)  # once: what later cells change is not the install step's state
    assert not (dest / "lib" / "later.py").exists()


def _prepared_twin(tmp_path, monkeypatch):
    """The fake twin, built, with a dataset to attach: what `twin.prepare` needs."""
    t, _ = fake_twin(tmp_path, monkeypatch)
    (t.folder / "built.json").write_text("{}")
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "wheelhouse.json").write_text(json.dumps({}))
    monkeypatch.setattr(twin, "dataset_dir", lambda: dataset)
    return t


def test_later_notebooks_with_the_same_setup_start_from_the_snapshot_the_others_from_a_pristine_copy(tmp_path, monkeypatch):
    t, shared, key = _prepared_twin(tmp_path, monkeypatch), SharedInstall(), (False, INSTALL)
    alone = sandbox.create(tmp_path, "00")
    assert SNAPSHOT_VAR not in twin.prepare(t, alone, False, SharedInstall(), key)[2]  # no notebook follows: no snapshot
    first = sandbox.create(tmp_path, "01")
    _, _, env = twin.prepare(t, first, True, shared, key)
    assert env[SNAPSHOT_VAR] == f"{digest(INSTALL)}:{first.root / 'installed'}"
    assert not list((tmp_path / "sandbox").glob(".spare-*"))  # nothing made ahead: the next one copies the snapshot
    # what the install cell leaves, then the kernel hook's snapshot of it
    (first.root / "env" / "lib" / "installed.py").write_text("by the install cell")
    (first.root / "env" / "bin" / "tool").write_text(f"#!{first.root / 'env'}/bin/python\n")
    os.system(f"cp -al {first.root / 'env'} {first.root / 'installed'}")  # noqa: S605
    second = sandbox.create(tmp_path, "02")
    _, python, env = twin.prepare(t, second, True, shared, key)
    assert SNAPSHOT_VAR not in env and python == str(second.root / "env" / "bin" / "python")
    assert (second.root / "env" / "lib" / "installed.py").read_text() == "by the install cell"
    for script in ("pip", "tool"):  # every script names this copy's interpreter; the snapshot's stay as they were
        assert (second.root / "env" / "bin" / script).read_text() == f"#!{second.root / 'env'}/bin/python\n"
        assert (first.root / "installed" / "bin" / script).read_text() == f"#!{first.root / 'env'}/bin/python\n"
    for other in ((True, INSTALL), (False, INSTALL + "# changed\n")):  # internet on, or another install cell
        box = sandbox.create(tmp_path, "03")
        twin.prepare(t, box, False, shared, other)
        assert not (box.root / "env" / "lib" / "installed.py").exists()
    assert not (t.folder / "venv" / "lib" / "installed.py").exists()  # the cached twin is untouched
