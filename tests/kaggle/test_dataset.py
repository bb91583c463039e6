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
    cached = tmp_path / "cache" / "kaggle-wheelhouse"
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
    assert sorted(p.name for p in cached.iterdir()) == sorted(p.name for p in dest.iterdir() if p.name != "nbutils-0.1-py3-none-any.whl")
