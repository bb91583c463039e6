"""The static notebook checks (no kernel): each gallery case caught with its id and cell, secret shapes, benign
cells left alone, machine paths, imports in branches, outputs counted, the cell to tag named, allowances by tag."""

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
    "open('/kaggle/input/x/data.csv')", "cache = '/root/.cache/huggingface'", "!ls /kaggle/working", "!nvidia-smi",
    "url = 'https://example.org/a/b.csv'", "from tqdm import tqdm", "!pip install -q peft==0.21.2",
    "x = 1  # do not call input() here, nor open('/home/alice/x')", "!pip install -q ipywidgets==8.1.5",
    "print('notebook_login() waits')", "from huggingface_hub import login\nlogin(token=tok)", "login()",
])
def test_benign_cells_raise_nothing(source):
    assert check_cells("nb", [{"cell_type": "code", "source": source}]) == []


def test_absolute_paths_are_found_in_python_and_shell_lines():
    assert machine_paths("p = Path('/Users/me/data')\n!cp ~/x.csv .\nq = 'D:\\\\data\\\\x.csv'") == [
        ("/Users/me/data", 1), ("D:\\data\\x.csv", 3), ("~/x.csv", 2)]


def _lint(source: str, platform_name: str) -> list[tuple[str, int | None, str]]:
    return [(p.check, p.line, p.what) for p in check_cells("nb", [{"cell_type": "code", "source": source}],
                                                            platform_name=platform_name)]


def test_absolute_paths_are_judged_by_the_linted_platforms_folders():
    """Both platforms' roots passed everywhere: a Kaggle lint let /content/drive through, a Colab lint /kaggle/input."""
    assert [c for c, *_ in _lint("df = open('/content/drive/MyDrive/data.csv')", "kaggle")] == ["absolute-path"]
    [(check, line, what)] = _lint("x = 1\ndf = open('/kaggle/input/my-data/train.csv')", "colab")
    assert (check, line) == ("absolute-path", 2) and "does not exist on Colab" in what
    assert _lint("df = open('/content/data.csv')\ncache = '/root/.cache/huggingface'", "colab") == []
    branch = ("import os\nif os.path.exists('/kaggle/input'):\n    data = '/kaggle/input/d/x.csv'\n"
              "else:\n    data = '/content/x.csv'")  # each platform's path in its own branch, the probe no use
    assert _lint(branch, "kaggle") == [] and _lint(branch, "colab") == []
    from nbutils.runtime.install import bootstrap_cell_source  # its /kaggle/input is a default it only globs

    assert [c for c, *_ in _lint(bootstrap_cell_source(), "colab")] == []


def test_blocking_and_widget_calls_are_read_from_the_code_that_runs_there():
    kaggle_never = "import os\nif 'KAGGLE_KERNEL_RUN_TYPE' not in os.environ:\n    name = input('model? ')\n"
    assert _lint(kaggle_never, "kaggle") == []
    assert [(c, n) for c, n, _ in _lint(kaggle_never, "colab")] == [("blocking-input", 3)]
    login = "from huggingface_hub import notebook_login\n# then log in\nnotebook_login()"
    assert [(c, n) for c, n, _ in _lint(login, "kaggle")] == [("blocking-input", 3)]
    widgets = "if 'COLAB_GPU' in os.environ and 'KAGGLE_URL_BASE' not in os.environ:\n    import ipywidgets as w"
    assert _lint("import os\n" + widgets, "kaggle") == []
    assert [(c, n) for c, n, _ in _lint("import os\n" + widgets, "colab")] == [("widget-progress", 3)]
    assert [(c, n) for c, n, _ in _lint("import tqdm.notebook\nbar = tqdm.notebook.tqdm", "kaggle")] == [
        ("widget-progress", 1)]


def test_tqdm_auto_is_the_widget_on_an_image_with_ipywidgets_and_the_fix_is_plain_text():
    """tqdm.auto was exempted and recommended, yet in a Kaggle kernel (ipywidgets installed) it is the widget: a batch
    log stuck at 0%."""
    for source in ("from tqdm.auto import tqdm", "from tqdm.auto import tqdm\nfrom tqdm.notebook import tqdm as t2",
                   "import tqdm.autonotebook"):
        [problem] = check_cells("nb", [{"cell_type": "code", "source": source}])
        assert problem.check == "widget-progress" and "tqdm.auto" not in problem.fix, source
        assert "ProgressLog" in problem.fix and "from tqdm import tqdm" in problem.fix


def test_a_hub_login_without_a_token_is_blocking_and_said_truthfully():
    """`from huggingface_hub import login; login()` went unflagged; and the message said the run "waits", whereas
    input() raises and notebook_login() shows a widget and returns."""
    cells = [{"cell_type": "code", "source": "from huggingface_hub import login"},
             {"cell_type": "code", "source": "import huggingface_hub as hf\nx = 1\nlogin()"},
             {"cell_type": "code", "source": "hf.login(new_session=False)"},
             {"cell_type": "code", "source": "login(token=token)\nlogin(token)\nhf.login(token=token)"}]
    found = check_cells("nb", cells)
    assert [(p.check, p.cell, p.line) for p in found] == [("blocking-input", 1, 3), ("blocking-input", 2, 1)]
    assert "returns at once" in found[0].what and "wait" not in found[0].what
    [typed] = check_cells("nb", [{"cell_type": "code", "source": "name = input('model? ')"}])
    assert "StdinNotImplementedError" in typed.what and "wait" not in typed.what


def test_network_tools_in_shell_lines_are_found_for_an_internet_off_run():
    """The offline guard patches Python's sockets; curl, wget, git and /dev/tcp go around it."""
    cells = [{"cell_type": "code", "source": s} for s in (
        "!wget -q https://example.org/a.bin  # weights", "!ls  # not curl", "x = 1\n!git clone https://x/y.git",
        "import os\nif 'KAGGLE_KERNEL_RUN_TYPE' not in os.environ:\n    !curl -O https://x/z", "%%bash\ncat < /dev/tcp/x/80")]
    found = [(p.check, p.cell, p.line) for p in nbchecks.offline_problems("nb", cells)]
    assert found == [("network-access", 0, 1), ("network-access", 2, 2), ("network-access", 4, 2)]
    assert "wget, which is not Python" in nbchecks.offline_problems("nb", cells[:1])[0].what


def test_imported_packages_reads_imports_past_magics_and_skips_relative_ones():
    source = "%matplotlib inline\n!pip list\nimport numpy as np, os.path\nfrom transformers.utils import x\nfrom . import y\n"
    assert nbchecks.imported_packages(source) == {"numpy": (3, ""), "os": (3, ""), "transformers": (4, "")}
    assert nbchecks.imported_packages("def broken(:\n") == {}  # unparsable: nothing claimed


def test_imports_in_a_branch_are_found_with_its_condition_and_skipped_where_it_cannot_run():
    from nbutils.harness.branches import CellWalker
    from nbutils.harness.conditions import Evaluator
    from nbutils.harness.platforms import platform

    source = ("import os\nif 'KAGGLE_KERNEL_RUN_TYPE' not in os.environ:\n    !pip install x\n    import numpy\n"
              "if is_t4:\n    import torch\n")
    reach = CellWalker(Evaluator(platform("kaggle"))).walk(source)
    assert nbchecks.imported_packages(source, reach) == {"os": (1, ""), "torch": (6, "`is_t4`")}


def test_allowances_mark_only_the_tagged_check_in_the_tagged_cell():
    cells = [{"metadata": {"tags": ["allow-absolute-path"]}}, {"metadata": {}}]
    problems = [nbchecks.Problem("absolute-path", "nb", 0, "w", "f"), nbchecks.Problem("secret-in-source", "nb", 0, "w", "f"),
                nbchecks.Problem("absolute-path", "nb", 1, "w", "f"), nbchecks.Problem("absolute-path", "nb", None, "w", "f")]
    assert [p.allowed for p in nbchecks.apply_allowances(problems, cells)] == [True, False, False, False]
    assert str(problems[0]) == "absolute-path nb cell 0: w -- f [allowed]" and str(problems[3]) == "absolute-path nb: w -- f"


def _nb(tmp_path, cells, name="nb.ipynb"):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / name
    nbformat.write(nb, path)
    return path, nb


def test_outputs_are_counted_and_an_execution_count_alone_is_none(tmp_path):
    import nbformat

    path, nb = _nb(tmp_path, ["steps = 1", "x = 1", "y = 2", "z = 3"])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.cells[1].execution_count = 4  # an execution count, no output: not a finding
    for i in (2, 3):
        nb.cells[i].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nbformat.write(nb, path)
    [p] = check_notebook(path)
    assert (p.check, p.cell) == ("committed-outputs", 2) and p.what.startswith("2 of 4 code cells carry outputs (cells 2, 3)")
    assert p.fix == "clear outputs before committing: `jupyter nbconvert --clear-output --inplace nb.ipynb`"
    nb.cells[2].outputs = nb.cells[3].outputs = []
    nbformat.write(nb, path)
    assert check_notebook(path) == []


def test_missing_parameters_names_the_cell_to_tag_or_the_settings_to_move(tmp_path):
    path, _ = _nb(tmp_path, ["import os", "model = 'x'  # knobs\nsteps = 60\nmenu = ['a', 'b']", "run(model)"])
    [p] = check_notebook(path)
    assert (p.check, p.cell, p.fix) == ("missing-parameters", 1, "tag cell 1 `parameters` (it sets model, steps)")
    assert "a Kaggle run does not need one, but papermill" in p.what
    path, _ = _nb(tmp_path, ["from x import load\nmax_seq_length = 2048\nload(max_seq_length)"], "b.ipynb")
    [p] = check_notebook(path)
    assert p.cell == 0 and p.fix.startswith("move the settings of cell 0 (max_seq_length) into a cell of their own")


def test_real_kaggle_notebooks_precision_and_recall_are_one():
    """Hand-labelled excerpts of public Kaggle notebooks (tests/harness_gallery/real_excerpts.py)."""
    from tests.harness_gallery.real_excerpts import EXCERPTS

    found, labelled = set(), set()
    for name, (notebook, cells, labels) in EXCERPTS.items():
        problems = check_cells(notebook, [{"cell_type": "code", "source": c} for c in cells])
        found |= {(name, p.check, p.cell, p.line) for p in problems}
        labelled |= {(name, *key) for key in labels}
    true = found & labelled
    assert (len(true) / len(found), len(true) / len(labelled)) == (1.0, 1.0), (found - labelled, labelled - found)


def test_the_find_spec_branch_runs_on_kaggle_and_says_why_its_elif_cannot():
    from tests.harness_gallery.real_excerpts import EXCERPTS

    _, cells, _ = EXCERPTS["find_spec"]
    problems = {p.line: p for p in check_cells("nb", [{"cell_type": "code", "source": cells[0]}])}
    assert "this line runs on Kaggle" in problems[8].what and "COLAB_RELEASE_TAG" in problems[8].what
    assert 12 not in problems and problems[8].condition is None


def test_knobs_set_together_count_and_prompts_do_not():
    assert nbchecks.settings("STEPS, LR = 500, 1e-4  # full run: 4000\nrun()") == (["STEPS", "LR"], False)
    assert nbchecks.settings("prompt = '''Below is an instruction.\n{}'''\nmodels = ['a', 'b']") == ([], False)
    assert nbchecks.settings("max_seq_length = 2048\ndtype = None\nmenu = ['a']") == (["max_seq_length", "dtype"], True)
