"""Shared fixtures: the embedded default and a prepared copy of its task data."""

import pytest


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory):
    from nbutils import data, embedded
    from nbutils.modeling import load_tokenizer

    out = tmp_path_factory.mktemp("data_prep")
    data.prepare([embedded.resolve_raw_data("embedded")], out, load_tokenizer("embedded"), verbose=False)
    return out
