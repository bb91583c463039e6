"""The nbutils dataset: its metadata passes the client's create checks; the wheelhouse assumes requirements' torch."""

import importlib.metadata

import pytest

from nbutils.kaggle import dataset
from nbutils.platform import settings


def test_dataset_metadata_passes_the_clients_create_checks():
    meta = dataset.dataset_metadata("someone")
    owner, slug = meta["id"].split("/")
    assert owner == "someone" and slug == settings.DATASET_SLUG
    assert 6 <= len(slug) <= 50 and 6 <= len(meta["title"]) <= 50 and 20 <= len(meta["subtitle"]) <= 80
    assert len(meta["licenses"]) == 1


def test_the_wheelhouse_assumes_the_torch_of_requirements():
    # the closure is resolved against the torch this venv runs (requirements.txt's pin, a CPU build here)
    assert dataset.assumed_torch() == importlib.metadata.version("torch").split("+")[0]


def test_assumed_torch_without_a_pin_is_an_error(tmp_path):
    (tmp_path / "requirements.txt").write_text("transformers==5.23.0\n")
    with pytest.raises(ValueError, match="pins no torch"):
        dataset.assumed_torch(tmp_path)
