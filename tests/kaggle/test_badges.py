"""Open-in-Colab/Kaggle badges that lead somewhere, the docs' notebooks table, and the notebooks' generated parts."""

import re
from pathlib import Path

import pytest

from nbutils import chain
from nbutils.kaggle import badges
from nbutils.runtime import install, settings

ROOT = Path(__file__).resolve().parents[2]


BADGE_LINK = re.compile(r"\]\((https://(?:colab\.research\.google\.com|(?:www\.)?kaggle\.com)/[^)\s]+)\)")


def _notebook_targets(text: str) -> list[str]:
    return [u for u in BADGE_LINK.findall(text) if not u.endswith(".svg")]


def test_badge_urls_open_the_reference_the_install_cell_installs(monkeypatch):
    monkeypatch.setenv("NBUTILS_REPOSITORY", "fork/suite")
    monkeypatch.setenv("NBUTILS_REF", "v9.9")
    md = badges.badges_markdown("02_train_qlora.ipynb")
    assert _notebook_targets(md) == [
        "https://colab.research.google.com/github/fork/suite/blob/v9.9/notebooks/02_train_qlora.ipynb",
        "https://kaggle.com/kernels/welcome?src=https://github.com/fork/suite/blob/v9.9/notebooks/02_train_qlora.ipynb"]
    assert "colab-badge.svg" in md and "open-in-kaggle.svg" in md
    assert "github.com/fork/suite@v9.9" in install.bootstrap_cell_source()  # the same reference, not a branch


def test_docs_carry_the_generated_notebooks_table():
    assert badges.notebooks_table_markdown() in (ROOT / "docs" / "kaggle-colab.md").read_text(), \
        "docs/kaggle-colab.md is stale: paste `python -m nbutils.kaggle table`"


@pytest.mark.parametrize("source", ["README.md", "docs/kaggle-colab.md", "notebooks/*.py"])
def test_every_badge_points_at_a_notebook_that_exists(source):
    paths = sorted(ROOT.glob(source))
    targets = [(p, u) for p in paths for u in _notebook_targets(p.read_text())]
    assert targets, f"no Colab/Kaggle badge found in {source}: paste badges.badges_markdown / notebooks_table_markdown"
    for path, url in targets:
        m = re.search(r"github(?:\.com)?/([\w.-]+/[\w.-]+)/blob/([\w.-]+)/(notebooks/[\w.-]+\.ipynb)$", url)
        assert m, f"{path.name}: badge {url} does not point at a notebook in the repository"
        assert m.group(1) == settings.repository(), f"{path.name}: {url} is not {settings.repository()}"
        assert m.group(2) == settings.ref(), f"{path.name}: {url} does not open {settings.ref()}, the reference the " \
                                             "install cell takes nbutils from: run python -m nbutils.kaggle table | sync"
        assert (ROOT / m.group(3)).exists(), f"{path.name}: {m.group(3)} does not exist"


def test_notebooks_carry_their_badges_and_the_bootstrap_cell():
    for nb in chain.STAGES:
        text = (ROOT / "notebooks" / f"{nb.notebook}.py").read_text()
        assert badges.badges_markdown(nb.notebook) in text, f"{nb.notebook}.py: badges differ; run python -m nbutils.kaggle sync"
        assert install.bootstrap_cell_source() in text, \
            f"{nb.notebook}.py: install cell differs from bootstrap_cell_source(); run python -m nbutils.kaggle sync"


def test_each_notebook_opens_at_the_reference_its_install_cell_installs():
    """A badge on a branch opened notebooks newer than the tagged nbutils they installed (03 called a function that
    tag lacks); the opened notebook and the installed nbutils must be one commit's."""
    for nb in chain.STAGES:
        text = (ROOT / "notebooks" / f"{nb.notebook}.py").read_text()
        opened = {m.group(1) for m in re.finditer(r"/blob/([\w.-]+)/notebooks/", text)}
        installed = set(re.findall(r"nbutils @ git\+https://github\.com/[\w.-]+/[\w.-]+@([\w./-]+)", text))
        assert opened and opened == installed, f"{nb.notebook}.py opens {opened} but installs nbutils at {installed}: " \
                                               "run python -m nbutils.kaggle sync, then make sync"


def test_sync_rewrites_badges_and_the_install_cell(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    old = ("# %% [markdown]\n# # Title\n#\n# [![Open in Colab](old)](old) [![Open in Kaggle](old)](old)\n\n# %%\n"
           "# Bootstrap nbutils (old)\nimport sys\nfrom nbutils.runtime.install import ensure_packages\n\n"
           "ensure_packages()  # old\n\n# %%\nx = 1\n")
    for nb in chain.STAGES:
        (tmp_path / "notebooks" / f"{nb.notebook}.py").write_text(old)
    assert len(badges.sync_notebooks(tmp_path)) == len(chain.STAGES)
    text = (tmp_path / "notebooks" / "03_eval.py").read_text()
    assert badges.badges_markdown("03_eval") in text and install.bootstrap_cell_source() in text
    assert text.endswith("# %%\nx = 1\n") and "(old)" not in text
    assert badges.sync_notebooks(tmp_path) == []  # idempotent


def test_the_colab_badge_opens_the_gpu_notebooks_on_a_t4():
    """Colab reads the runtime from the notebook's metadata: without it 02-05 opened on a CPU runtime. The metadata sits
    in each .py's jupytext header (notebook_metadata_filter keeps it both ways), so `make sync` writes it into the .ipynb."""
    import nbformat

    for nb in chain.STAGES:
        meta = nbformat.read(ROOT / "notebooks" / f"{nb.notebook}.ipynb", as_version=4).metadata
        want = ({"accelerator": "GPU", "colab": {"gpuType": "T4"}} if nb.gpu else {"accelerator": None, "colab": None})
        assert {k: meta.get(k) for k in want} == want, f"{nb.notebook}: add the jupytext header of 02's .py, then make sync"
        if nb.gpu:  # kept when the .py is written from the .ipynb too
            assert {"accelerator", "colab"} <= set(meta.jupytext.get("notebook_metadata_filter", "").split(","))
