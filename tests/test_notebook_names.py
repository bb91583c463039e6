"""tools/notebook_names.py (in `make lint`): the chain's notebooks named alike in the README, docs, notebooks and
nbutils/__init__.py, and no notebook linking a relative path."""

import importlib.util
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("notebook_names", ROOT / "tools" / "notebook_names.py")
notebook_names = importlib.util.module_from_spec(spec)
spec.loader.exec_module(notebook_names)


def test_the_repository_names_its_notebooks_alike_everywhere():
    assert notebook_names.findings() == []


def test_a_chain_told_short_a_wrong_count_and_an_unknown_notebook_are_named():
    found = notebook_names.text_findings("README.md", "Five steps, in four notebooks.\n\n"
                                         "First of the suite (01 data prep → 02 train → 03 eval).\n\n"
                                         "Run all, 01 to 04.\n\nThen 06_extra.\n", must_name_all=True)
    expected = ("README.md:7: 06_extra is not a notebook", "README.md:1: 'four notebooks', but the chain has five",
                "README.md:3: the chain told from 01 to 03", "README.md:5: the chain told from 01 to 04",
                "README.md:1: never names notebook(s) 05")
    assert len(found) == len(expected) and all(any(f.startswith(w) for f in found) for w in expected), found


def test_a_short_listing_is_fine_when_its_paragraph_says_where_the_others_come_in():
    text = "runs 01 -> 02 -> 03 -> 04 with smoke=True (`--through preference` adds 05); 0.05 and 2026-06 are no notebooks"
    assert notebook_names.text_findings("docs/planning.md", text, must_name_all=False) == []


def test_a_relative_link_in_a_notebook_is_named_and_absolute_ones_and_anchors_pass():
    text = "# see [planning](../docs/planning.md), [the docs](https://github.com/o/r/blob/main/docs/x.md), [below](#resume)"
    (found,) = notebook_names.notebook_links("notebooks/02_train_qlora.py", text)
    assert found.startswith("notebooks/02_train_qlora.py:1: links '../docs/planning.md', a relative path")


def test_a_notebook_left_out_of_the_package_docstring_fails_the_check(tmp_path):
    for rel in ("README.md", "nbutils/__init__.py", "docs", "notebooks"):
        src = ROOT / rel
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / rel)
    init = tmp_path / "nbutils" / "__init__.py"
    init.write_text(init.read_text().replace("05_preference", "the fifth"))
    assert notebook_names.findings(tmp_path) == [
        "nbutils/__init__.py:3: the chain told from 01 to 04: name every notebook to 05, or say where the others come in",
        "nbutils/__init__.py:1: never names notebook(s) 05 of the chain"]
