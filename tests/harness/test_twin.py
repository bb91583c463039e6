"""Kaggle image twins: snapshots read strictly, cache keys, pristine hard-linked copies, the refresh filter; and
(integration) the twin gallery: what the harness catches in the numpy-1 twin with the dataset attached."""

import os
import time
from pathlib import Path

import pytest

from nbutils.harness import runner, twin
from tests.harness.faketwin import fake_twin
from tests.harness_gallery import make_gallery

GALLERY = Path(make_gallery.__file__).parent


def test_shipped_snapshots_pin_exactly_and_cover_numpy_1_and_2():
    twins = {t.name: t for t in twin.twins()}
    numpys = {line.split("==")[1][0] for t in twins.values() for line in twin.requirements(t.snapshot)
              if line.startswith("numpy==")}
    assert numpys == {"1", "2"} and len(twins) >= 2
    for t in twins.values():
        header = t.snapshot.read_text().split("\n\n")[0]
        assert "# date:" in header and "# source:" in header and "kaggle-image-refresh" in header


@pytest.mark.parametrize("line, error", [("numpy>=1.26", "is not `name==version`"),
                                         ("torch==2.4.0", "torch is torch's stack, never pinned"),
                                         ("nvidia-cudnn-cu12==9.1.0.70", "nvidia-cudnn-cu12 is torch's stack, never pinned")])
def test_a_bad_snapshot_line_is_named_with_file_and_line(tmp_path, line, error):
    snap = tmp_path / "img.txt"
    snap.write_text(f"# header\npandas==2.2.3\n{line}\n")
    with pytest.raises(ValueError, match=rf"img.txt:3: .*{error}"):
        twin.requirements(snap)


def test_the_cache_key_follows_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(twin, "SNAPSHOTS", tmp_path)
    (tmp_path / "a.txt").write_text("numpy==1.26.4\n")
    first = twin.twins(["a"])[0].key
    (tmp_path / "a.txt").write_text("numpy==2.4.6\n")
    assert twin.twins(["a"])[0].key != first
    with pytest.raises(KeyError, match="no snapshot b"):
        twin.twins(["b"])


def test_refresh_keeps_only_what_matters_from_a_real_freeze(tmp_path):
    freeze = tmp_path / "pip-freeze.txt"
    freeze.write_text("Boruta==0.4.3\nnumpy==2.4.6\npandas==2.3.3\ntorch==2.10.0+cu128\nhuggingface_hub==1.10.1\n"
                      "pyarrow @ file:///tmp/pyarrow.whl\nnltk==3.9.1\nsetuptools==75.2.0\nnvidia-nccl-cu12==2.29.7\n"
                      "pip==24.1.2\nwheel==0.46.3\n")
    path = twin.refresh(freeze, "img", tmp_path)
    # nltk: rouge-score (a pin) requires it, so the image's copy stays in the twin, as on Kaggle pip leaves it alone.
    # pip: the image's own runs the install cell. Not Boruta (nothing of ours needs it), not setuptools or wheel (the
    # venv's), never torch's stack.
    assert twin.requirements(path) == ["huggingface_hub==1.10.1", "nltk==3.9.1", "numpy==2.4.6", "pandas==2.3.3",
                                       "pip==24.1.2"]
    freeze.write_text("Boruta==0.4.3\n")
    with pytest.raises(ValueError, match="no numpy"):
        twin.refresh(freeze, "img", tmp_path)


def test_a_pristine_copy_never_writes_through_to_the_cached_twin(tmp_path, monkeypatch):
    t, venv = fake_twin(tmp_path, monkeypatch)
    python = twin.pristine_copy(t, tmp_path / "copy")
    assert python == tmp_path / "copy" / "bin" / "python"
    assert os.stat(tmp_path / "copy" / "lib" / "mod.py").st_ino == os.stat(venv / "lib" / "mod.py").st_ino
    assert (tmp_path / "copy" / "bin" / "pip").read_text() == f"#!{tmp_path / 'copy'}/bin/python\n"
    assert (venv / "bin" / "pip").read_text() == f"#!{venv}/bin/python\n"  # the script was replaced, not edited


def test_the_next_notebooks_copy_is_made_ahead_and_a_copy_cut_short_is_never_handed_out(tmp_path, monkeypatch):
    t, venv = fake_twin(tmp_path, monkeypatch)
    boxes = tmp_path / "sandbox"
    twin.prefetch(t, boxes)
    dest = boxes / "02" / "env"
    twin.pristine_copy(t, dest, spare=True)
    assert not list(boxes.glob(".spare-*"))  # taken: renamed into place, not copied again
    assert os.stat(dest / "lib" / "mod.py").st_ino == os.stat(venv / "lib" / "mod.py").st_ino
    assert (dest / "bin" / "pip").read_text() == f"#!{dest}/bin/python\n"  # made elsewhere, its scripts fixed here
    # A spare left without its .ready mark (a copy killed half-way) is set aside; the notebook gets a full copy.
    half = boxes / ".spare-fake-k"
    (half / "bin").mkdir(parents=True)
    dest = boxes / "03" / "env"
    twin.pristine_copy(t, dest, spare=True)
    assert (dest / "lib" / "mod.py").read_text() == "old" and not half.exists()


def test_a_spare_nobody_takes_is_dropped_once_its_copy_is_done(tmp_path, monkeypatch):
    # The chain stopped early (a failure): the copy made ahead for the next notebook goes, links and .ready mark too.
    t, venv = fake_twin(tmp_path, monkeypatch)
    boxes = tmp_path / "sandbox"
    twin.prefetch(t, boxes)
    twin.drop_spare(t, boxes)
    assert not [p for p in boxes.iterdir() if not p.name.endswith(".old")]  # renamed aside at once
    assert (venv / "lib" / "mod.py").read_text() == "old"  # the cached twin is untouched
    twin.drop_spare(t, boxes)  # none left: nothing to do


def test_a_finished_notebooks_copy_is_released_and_its_outputs_stay(tmp_path, monkeypatch):
    t, venv = fake_twin(tmp_path, monkeypatch)
    box = tmp_path / "sandbox" / "01"
    twin.pristine_copy(t, box / "env")
    (box / "working").mkdir()
    twin.release(box)
    assert not (box / "env").exists() and (box / "working").exists()
    assert (venv / "lib" / "mod.py").read_text() == "old"  # the cached twin is untouched
    twin.release(box)  # nothing left: nothing to do


def test_older_builds_of_a_snapshot_go_once_unused_and_never_while_in_use(tmp_path, monkeypatch):
    t, _ = fake_twin(tmp_path, monkeypatch)
    t = twin.Twin("fake", t.snapshot, "0123456789ab")
    cache = tmp_path / "cache"
    old, recent, other = cache / "fake-aaaaaaaaaaaa", cache / "fake-bbbbbbbbbbbb", cache / "fake-extra-cccccccccccc"
    for folder in (t.folder, old, recent, other):
        (folder / "venv").mkdir(parents=True)
        (folder / "built.json").write_text("{}")
    hours_ago = time.time() - 3 * 3600
    for folder in (old, other):
        os.utime(folder / "built.json", (hours_ago, hours_ago))
    (recent / "used").touch()  # a chain in another checkout copied it just now
    os.utime(recent / "built.json", (hours_ago, hours_ago))
    assert twin.prune(t) == [old]
    assert not old.exists() and recent.exists() and other.exists() and t.folder.exists()  # another snapshot's twin stays


def test_big_identical_files_are_shared_with_the_project_venv_never_sources(tmp_path):
    site, other = tmp_path / "twin", tmp_path / "project"
    for root in (site, other):
        (root / "torch" / "lib").mkdir(parents=True)
        (root / "torch" / "lib" / "libtorch.so").write_bytes(b"x" * 4096)
        (root / "torch" / "__init__.py").write_text("# same source, own times\n" * 200)
        (root / "torch" / "lib" / "small.so").write_bytes(b"y" * 10)
    (site / "torch" / "lib" / "other.so").write_bytes(b"a" * 4096)
    (other / "torch" / "lib" / "other.so").write_bytes(b"b" * 4096)  # same size, other bytes
    assert twin.share_files(site, other, least=1024) == 4096
    same = lambda rel: (site / rel).samefile(other / rel)  # noqa: E731
    assert same("torch/lib/libtorch.so") and (site / "torch" / "lib" / "libtorch.so").read_bytes() == b"x" * 4096
    assert not same("torch/__init__.py") and not same("torch/lib/small.so") and not same("torch/lib/other.so")
    assert twin.share_files(site, other, least=1024) == 0  # already shared: nothing more
    assert not list(site.rglob("*.nbutils-link"))


def test_bytecode_written_in_a_copy_never_reaches_the_cached_twin(tmp_path, monkeypatch):
    """Twins run with bytecode on (sandbox.environment): a .pyc written or rewritten in the copy stays in the copy."""
    import subprocess
    import sys

    monkeypatch.setenv("NBUTILS_TWIN_CACHE", str(tmp_path / "cache"))
    t = twin.Twin("fake", tmp_path / "fake.txt", "k")
    lib = t.folder / "venv" / "lib"
    (t.folder / "venv" / "bin").mkdir(parents=True)
    lib.mkdir()
    (lib / "mod.py").write_text("X = 1\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def load(folder):
        subprocess.run([sys.executable, "-c", "import mod"], cwd=tmp_path, env={**env, "PYTHONPATH": str(folder)},
                       check=True)

    load(lib)  # the cached twin's own bytecode, as a build leaves it
    [cached] = (lib / "__pycache__").glob("mod.*.pyc")
    before = cached.read_bytes()
    twin.pristine_copy(t, tmp_path / "copy")
    copied = tmp_path / "copy" / "lib"
    (copied / "mod.py").unlink()  # what pip does to a file it upgrades
    (copied / "mod.py").write_text("X = 2  # a newer release\n")
    load(copied)
    assert cached.read_bytes() == before  # the copy's .pyc was replaced by rename, not written through the link
    assert (copied / "__pycache__" / cached.name).read_bytes() != before


def test_kernelspec_points_at_the_copy(tmp_path):
    import json

    name, folder = twin.kernelspec(tmp_path / "env" / "bin" / "python", tmp_path / "jupyter")
    spec = json.loads((folder / "kernels" / name / "kernel.json").read_text())
    assert spec["argv"][0] == str(tmp_path / "env" / "bin" / "python") and "ipykernel_launcher" in spec["argv"]


# --- integration: the twin gallery in the numpy-1 twin ------------------------------------------

@pytest.fixture(scope="module")
def numpy1_twin():
    from nbutils.kaggle import dataset as kaggle

    [t] = [t for t in twin.twins() if t.name.startswith("numpy1")]
    twin.build(t)  # cached after the first build (minutes from a cold pip cache)
    kaggle.dataset()  # seconds when only nbutils changed
    return t


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(make_gallery.TWIN))
def test_twin_gallery_case_is_caught(numpy1_twin, name, tmp_path):
    [result] = runner.with_static([GALLERY / f"{name}.ipynb"], lambda: runner.run(
        [GALLERY / f"{name}.ipynb"], tmp_path, {}, False, None, twin=numpy1_twin))
    found = {(p.check, p.cell) for p in result.failing}
    assert found == make_gallery.TWIN[name][1], [str(p) for p in result.problems]
    twin.release(tmp_path / "sandbox" / name)  # 250-400 MB of installed packages, not needed once checked
    text = "\n".join(str(p) for p in result.failing)
    if name == "twin_broken_import":
        assert "pyarrow no longer imports" in text and "NumPy 2.0" in text
    else:  # the install step itself stops and names what to do
        assert "pyarrow (19.0.1 -> 25.0.1) were loaded before this cell replaced them" in text
        assert "restart the session" in text
