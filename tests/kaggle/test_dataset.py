"""The nbutils dataset: its metadata passes the client's create checks (the torch it assumes: tests/runtime/test_packages.py)."""



from nbutils.kaggle import dataset
from nbutils.runtime import settings


def test_dataset_metadata_passes_the_clients_create_checks():
    meta = dataset.dataset_metadata("someone")
    owner, slug = meta["id"].split("/")
    assert owner == "someone" and slug == settings.DATASET_SLUG
    assert 6 <= len(slug) <= 50 and 6 <= len(meta["title"]) <= 50 and 20 <= len(meta["subtitle"]) <= 80
    assert len(meta["licenses"]) == 1


