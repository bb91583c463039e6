"""Shared fixtures: the embedded default and a prepared copy of its task data."""

import os

# One math thread per process: on a small shared machine two OpenMP threads per test process
# fight the other processes for cores and training runs several times slower, not faster.
# (Set before torch is imported; subprocesses inherit it.)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

# The longest files, longest first: `make test` starts them first. Under --dist loadfile a file runs whole in one
# worker, and xdist hands out files in collection order; the family matrix (about 12 of make test's minutes) handed
# out late ran alone at the end, and so did the 04 tests (3-4 minutes) after it. Measured with
# `pytest -n 2 --dist loadfile --durations=45` (integration files only: the others take seconds).
LONGEST_FIRST = ("test_families.py", "test_real_model.py", "test_export_notebook.py", "test_distributed.py", "test_notebooks.py",
                 "test_faults.py", "test_multinode.py", "test_gpu_proof.py", "test_preference.py", "test_twin.py",
                 "test_runner.py")


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle: the rest keeps its order
def pytest_collection_modifyitems(items):
    from collections import Counter

    tests_in = Counter(item.path for item in items)
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # then the files with the most tests, as xdist's own reordering (turned off in make test) does
    items.sort(key=lambda item: (first.get(item.path.name, len(first)), -tests_in[item.path]))


@pytest.fixture(scope="session")
def embedded_dir():
    """Folder of the offline tiny Llama model and tokenizer (built once, cached)."""
    from nbutils import embedded

    return embedded.ensure()


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory, embedded_dir):
    """Output folder of splits.prepare on the embedded task data (train/eval splits + manifest)."""
    from nbutils import embedded
    from nbutils.data import splits
    from nbutils.data.chatformat import load_tokenizer

    out = tmp_path_factory.mktemp("data_prep")
    splits.prepare([embedded.resolve_raw_data("embedded")], out, load_tokenizer("embedded"), verbose=False, plot=False,
                   base_model="embedded")
    return out


@pytest.fixture(scope="session")
def twin():
    """twin(name) -> folder of a family twin (tests/twins/families.py), built once and cached."""
    from tests.twins import families

    return families.ensure


@pytest.fixture(scope="session")
def tok(embedded_dir):
    """The embedded default's prepared tokenizer."""
    from nbutils.data.chatformat import load_tokenizer

    return load_tokenizer("embedded")


def pytest_unconfigure(config):
    """The process is about to exit: its last garbage collection would walk every object torch and transformers made
    (about 1.5 s of each worker's exit, memory the system takes back anyway). Frozen objects are left out of it;
    exit handlers still run."""
    import gc

    gc.freeze()
