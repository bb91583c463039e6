"""Colab and Kaggle one-click badges, the README's notebooks table, and the notebooks' generated parts
(badge line, install cell), every URL from nbutils.runtime.settings.

    python -m nbutils.kaggle table | sync      (see nbutils/kaggle/__main__.py)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbutils import chain
from nbutils.runtime import settings
from nbutils.runtime.install import BOOTSTRAP_CELL_METADATA, bootstrap_cell_source

ROOT = Path(__file__).resolve().parents[2]


def _blob_path(stem: str) -> str:
    # The install cell's own reference, not a branch: the notebook opened must be the one its nbutils was tagged with.
    return f"{settings.repository()}/blob/{settings.ref()}/notebooks/{chain.by_notebook(stem).notebook}.ipynb"


def colab_url(stem: str) -> str:
    return f"https://colab.research.google.com/github/{_blob_path(stem)}"


def kaggle_url(stem: str) -> str:
    return f"https://kaggle.com/kernels/welcome?src=https://github.com/{_blob_path(stem)}"


def badges_markdown(notebook_name: str) -> str:
    """'Open in Colab' and 'Open in Kaggle' badges for one notebook (title cell and README), from settings."""
    return (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook_name)}) "
            f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle_url(notebook_name)})")


def notebooks_table_markdown() -> str:
    """The README's notebooks table: what each does, its Kaggle kernel and accelerator, and its badges."""
    rows = ["| notebook | what it does | Kaggle kernel | accelerator | open |", "|---|---|---|---|---|"]
    for nb in chain.STAGES:
        rows.append(f"| `notebooks/{nb.notebook}` | {nb.what} | `{nb.slug}` | {'T4 GPU' if nb.gpu else 'CPU'} "
                    f"| {badges_markdown(nb.notebook)} |")
    return "\n".join(rows)


BADGE_LINE = re.compile(r"^# \[!\[Open in Colab\].*$", re.M)
# The install cell with its `# %%` line; the older first line ("# Bootstrap nbutils ...") is rewritten too.
BOOTSTRAP_BLOCK = re.compile(r"^# %%[^\n]*\n(?:# Bootstrap nbutils|# @title Install).*?^ensure_packages\(\).*?$\n", re.M | re.S)


def bootstrap_cell_header() -> str:
    """The install cell's `# %%` line in a jupytext percent file, carrying BOOTSTRAP_CELL_METADATA."""
    return "# %% " + " ".join(f"{k}={json.dumps(v)}" for k, v in BOOTSTRAP_CELL_METADATA.items()) + "\n"


def sync_notebooks(root: Path = ROOT) -> list[Path]:
    """Rewrite each notebook .py's badge line and install cell from settings (then `make sync` for the .ipynb)."""
    changed = []
    cell = bootstrap_cell_header() + "".join(f"{line}\n" for line in bootstrap_cell_source().splitlines())
    for nb in chain.STAGES:
        path = root / "notebooks" / f"{nb.notebook}.py"
        text = path.read_text()
        new = BADGE_LINE.sub(lambda _, s=nb.notebook: "# " + badges_markdown(s), text, count=1)
        new = BOOTSTRAP_BLOCK.sub(lambda _: cell, new, count=1)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed
