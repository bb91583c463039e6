"""The nbutils dataset: its metadata passes the client's create checks (the torch it assumes: tests/runtime/test_packages.py)."""



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
