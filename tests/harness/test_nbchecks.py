"""The static notebook checks (no kernel): each gallery case caught with its id and cell, secret shapes, benign
cells left alone, machine paths, imports and install cells, allowances by tag."""

from pathlib import Path

import pytest

from nbutils.harness import nbchecks
from nbutils.harness.nbchecks import check_cells, check_notebook, machine_paths
from tests.harness_gallery import make_gallery

GALLERY = Path(make_gallery.__file__).parent
EXPECTED = make_gallery.expected()


@pytest.mark.parametrize("name", sorted(make_gallery.STATIC))
def test_static_check_caught(name):
    problems = check_notebook(GALLERY / f"{name}.ipynb")
    assert {(p.check, p.cell) for p in problems if not p.allowed} == {EXPECTED[name]}, [str(p) for p in problems]


@pytest.mark.parametrize("source", [
    "token = 'hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH'",
    "openai.api_key = 'sk-" + "proj-abcdefghijklmnopqrstuvwx'",
    "wandb.login(key='" + "0123456789abcdef" * 2 + "01234567')",
    "cfg = {'username': 'bob', 'key': '" + "fedcba9876543210" * 2 + "'}",
])
def test_every_secret_shape_is_caught(source):
    assert [p.check for p in check_cells("nb", [{"cell_type": "code", "source": source}])] == ["secret-in-source"]


@pytest.mark.parametrize("source", [
    "from huggingface_hub import hf_hub_download", "import sklearn  # sk-learn", "md5 = '" + "ab" * 16 + "'",
    "open('/kaggle/input/x/data.csv')", "open('/content/data.csv')", "!ls /kaggle/working", "!nvidia-smi",
    "url = 'https://example.org/a/b.csv'", "from tqdm.auto import tqdm", "!pip install -q peft==0.21.2",
])
def test_benign_cells_raise_nothing(source):
    assert check_cells("nb", [{"cell_type": "code", "source": source}]) == []


def test_absolute_paths_are_found_in_python_and_shell_lines():
    assert machine_paths("p = Path('/Users/me/data')\n!cp ~/x.csv .\nq = 'D:\\\\data\\\\x.csv'") == [
        "/Users/me/data", "D:\\\\data\\\\x.csv", "~/x.csv"]


def test_module_of_maps_distributions_to_import_names():
    assert nbchecks.module_of("scikit-learn") == "sklearn" and nbchecks.module_of("pyyaml") == "yaml"
    assert nbchecks.module_of("sentence-transformers") == "sentence_transformers"
    assert nbchecks.module_of("zope.interface") == "zope_interface"


def test_imported_packages_reads_imports_past_magics_and_skips_relative_ones():
    source = "%matplotlib inline\n!pip list\nimport numpy as np, os.path\nfrom transformers.utils import x\nfrom . import y\n"
    assert nbchecks.imported_packages(source) == {"numpy", "os", "transformers"}
    assert nbchecks.imported_packages("def broken(:\n") == set()  # unparsable: nothing claimed


def test_changeable_modules_is_everything_unless_no_deps_and_known():
    from nbutils.harness.install_lines import install_commands

    pinned = install_commands("!pip install --no-deps scikit-learn==1.5.0 pyyaml==6.0")
    assert nbchecks.changeable_modules(pinned, calls_installer=False) == {"sklearn", "yaml"}
    assert nbchecks.changeable_modules(pinned, calls_installer=True) is None  # the install step brings anything
    assert nbchecks.changeable_modules(install_commands("!pip install scikit-learn==1.5.0"), False) is None


def test_allowances_mark_only_the_tagged_check_in_the_tagged_cell():
    cells = [{"metadata": {"tags": ["allow-absolute-path"]}}, {"metadata": {}}]
    problems = [nbchecks.Problem("absolute-path", "nb", 0, "w", "f"), nbchecks.Problem("secret-in-source", "nb", 0, "w", "f"),
                nbchecks.Problem("absolute-path", "nb", 1, "w", "f"), nbchecks.Problem("absolute-path", "nb", None, "w", "f")]
    assert [p.allowed for p in nbchecks.apply_allowances(problems, cells)] == [True, False, False, False]
    assert str(problems[0]) == "absolute-path nb cell 0: w -- f [allowed]" and str(problems[3]) == "absolute-path nb: w -- f"
