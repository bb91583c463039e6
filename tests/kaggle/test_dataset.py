"""The nbutils dataset: its metadata passes the client's create checks (the torch it assumes: tests/runtime/test_packages.py)."""

import os
import shutil
import subprocess

from nbutils.kaggle import dataset
from nbutils.runtime import settings


def test_dataset_metadata_passes_the_clients_create_checks():
    meta = dataset.dataset_metadata("someone")
    owner, slug = meta["id"].split("/")
    assert owner == "someone" and slug == settings.DATASET_SLUG
    assert 6 <= len(slug) <= 50 and 6 <= len(meta["title"]) <= 50 and 20 <= len(meta["subtitle"]) <= 80
    assert len(meta["licenses"]) == 1


def test_the_dataset_carries_llama_cpps_archive_even_when_only_nbutils_changed(tmp_path, monkeypatch):
    from nbutils.runtime import llamacpp

    packed = []
    monkeypatch.setattr(dataset, "_wheelhouse_current", lambda dest, specs, python_version: True)
    monkeypatch.setattr(dataset, "_build_nbutils_wheel", lambda dest: (dest / "nbutils-0.1-py3-none-any.whl").touch()
                        or dest / "nbutils-0.1-py3-none-any.whl")
    monkeypatch.setattr(llamacpp, "pack", lambda dest: packed.append(dest) or (dest / llamacpp.ARCHIVE).touch())
    tmp_path.mkdir(exist_ok=True)
    dataset.dataset(tmp_path)
    assert packed == [tmp_path] and (tmp_path / llamacpp.ARCHIVE).exists()
    dataset.dataset(tmp_path)  # there already: not packed again
    assert packed == [tmp_path] and "llama.cpp" in dataset.dataset_metadata("x")["description"]


def test_a_fresh_checkout_takes_the_wheelhouse_another_one_downloaded_at_the_same_pins(tmp_path, monkeypatch):
    from nbutils.runtime import llamacpp

    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / f"kaggle-wheelhouse-py{dataset.KAGGLE_PYTHON}"
    cached.mkdir(parents=True)
    for name in ("wheelhouse.json", "dataset-metadata.json", "six-1.17.0-py2.py3-none-any.whl", llamacpp.ARCHIVE,
                 "nbutils-0.0-py3-none-any.whl"):
        (cached / name).write_text(name)
    monkeypatch.setattr(dataset, "_wheelhouse_current", lambda dest, specs, python_version: (dest / "wheelhouse.json").exists())
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError(f"downloaded: {a}")))
    monkeypatch.setattr(dataset, "_build_nbutils_wheel", lambda dest: (dest / "nbutils-0.1-py3-none-any.whl").touch()
                        or dest / "nbutils-0.1-py3-none-any.whl")
    dest = tmp_path / "checkout" / "build" / "kaggle-dataset"
    dataset.dataset(dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(["wheelhouse.json", "dataset-metadata.json", llamacpp.ARCHIVE,
                                                             "six-1.17.0-py2.py3-none-any.whl", "nbutils-0.1-py3-none-any.whl"])
    wheel = "six-1.17.0-py2.py3-none-any.whl"
    assert os.stat(dest / wheel).st_ino == os.stat(cached / wheel).st_ino  # linked, not copied
    assert not list(dest.parent.glob(".*partial"))
    shutil.rmtree(cached)  # and the other way: a checkout whose wheelhouse is current fills an empty cache
    dataset.dataset(dest)
    assert sorted(p.name for p in cached.iterdir()) == sorted(
        p.name for p in dest.iterdir() if p.name not in ("nbutils-0.1-py3-none-any.whl", "dataset-metadata.json"))


def test_the_metadata_names_todays_owner_even_when_the_wheelhouse_is_kept(tmp_path, monkeypatch):
    """A build made before KAGGLE_USERNAME was set kept `your-kaggle-username/...` through every later build: the
    current wheelhouse returned early, and the shared cache handed its metadata to fresh checkouts."""
    import json

    from nbutils.runtime import llamacpp

    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(dataset, "_wheelhouse_current", lambda dest, specs, python_version: (dest / "wheelhouse.json").exists())
    monkeypatch.setattr(dataset, "_build_nbutils_wheel", lambda dest: (dest / "nbutils-0.1-py3-none-any.whl").touch()
                        or dest / "nbutils-0.1-py3-none-any.whl")
    monkeypatch.setattr(llamacpp, "pack", lambda dest: (dest / llamacpp.ARCHIVE).touch())
    dest = tmp_path / "build" / "kaggle-dataset"
    dest.mkdir(parents=True)
    (dest / "wheelhouse.json").write_text("{}")
    (dest / "dataset-metadata.json").write_text(json.dumps(dataset.dataset_metadata("your-kaggle-username")))
    monkeypatch.setenv("KAGGLE_USERNAME", "alice")
    dataset.dataset(dest)
    assert json.loads((dest / "dataset-metadata.json").read_text())["id"] == f"alice/{settings.DATASET_SLUG}"
    cached = tmp_path / "cache" / f"kaggle-wheelhouse-py{dataset.KAGGLE_PYTHON}"
    assert (cached / "wheelhouse.json").exists() and not (cached / "dataset-metadata.json").exists()


def test_a_build_for_kaggles_python_keeps_the_cache_the_twins_install(tmp_path, monkeypatch):
    """One cache for every Python: the upload built for Kaggle's 3.12 replaced the 3.11 wheelhouse this machine's twins
    install, and the next `make kaggle-dataset` downloaded it all again."""
    from nbutils.runtime import llamacpp

    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(dataset, "_wheelhouse_current", lambda dest, specs, python_version: (
        dest / "wheelhouse.json").exists() and (dest / "wheelhouse.json").read_text() == python_version)
    monkeypatch.setattr(dataset, "_build_nbutils_wheel", lambda dest: (dest / "nbutils-0.1-py3-none-any.whl").touch()
                        or dest / "nbutils-0.1-py3-none-any.whl")
    monkeypatch.setattr(llamacpp, "pack", lambda dest: (dest / llamacpp.ARCHIVE).touch())
    legacy = tmp_path / "cache" / "kaggle-wheelhouse"  # the one folder earlier versions kept: still read
    legacy.mkdir(parents=True)
    (legacy / "wheelhouse.json").write_text("3.11")
    dataset.dataset(tmp_path / "a", "3.11")
    assert (tmp_path / "a" / "wheelhouse.json").read_text() == "3.11"
    upload = tmp_path / "b"
    upload.mkdir()
    (upload / "wheelhouse.json").write_text("3.12")
    dataset.dataset(upload, "3.12")
    assert (legacy / "wheelhouse.json").read_text() == "3.11"
    assert (tmp_path / "cache" / "kaggle-wheelhouse-py3.12" / "wheelhouse.json").read_text() == "3.12"
    assert dataset.image_python() == "3.12"  # the freeze's header: what the note on the upload names


def test_each_python_builds_into_its_own_folder_and_the_twins_attach_theirs(monkeypatch):
    """`make papermill-check` rebuilt build/kaggle-dataset/ for 3.11 over the 3.12 build the docs said to upload."""
    from nbutils.harness import twin

    monkeypatch.delenv("NBUTILS_TWIN_DATASET", raising=False)
    assert dataset.default_dest(dataset.TWIN_PYTHON) == dataset.ROOT / "build" / "kaggle-dataset" == twin.dataset_dir()
    assert dataset.default_dest("3.12") == dataset.ROOT / "build" / "kaggle-dataset-py3.12"


def test_a_dataset_built_for_another_python_is_refused_not_replaced(tmp_path, monkeypatch):
    """The cached wheelhouse of the twins' Python was copied over a folder holding the upload for Kaggle's 3.12."""
    import json

    import pytest

    monkeypatch.setenv("NBUTILS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(dataset, "_wheelhouse_current", lambda dest, specs, python_version: (
        dataset._built_for(dest) == python_version))
    cached = tmp_path / "cache" / "kaggle-wheelhouse-py3.11"
    cached.mkdir(parents=True)
    (cached / "wheelhouse.json").write_text(json.dumps({"python_version": "3.11"}))
    upload = tmp_path / "build" / "kaggle-dataset"
    upload.mkdir(parents=True)
    (upload / "wheelhouse.json").write_text(json.dumps({"python_version": "3.12"}))
    (upload / "numpy-2.4.6-cp312-cp312-manylinux_2_17_x86_64.whl").write_text("x")
    with pytest.raises(RuntimeError, match=r"for Python 3\.12, and this build is for 3\.11.*kaggle-dataset-py3\.12"):
        dataset.dataset(upload, "3.11")
    assert dataset._built_for(upload) == "3.12" and len(list(upload.glob("*cp312*.whl"))) == 1
