"""The project's few addresses, in one place: a fork changes these lines (or sets the environment variables).

Every badge opens the notebooks in REPOSITORY at `ref()`, and the install cell takes nbutils from REPOSITORY at the
same `ref()` (the tag of this package's version): the notebook a badge opens and the nbutils it installs are one
commit's. KAGGLE_OWNER is the Kaggle account in the committed kernel metadata. After changing them (or the version
in pyproject.toml), run `python -m nbutils.kaggle sync` (metadata, notebook badges and install cell), `make sync`, and
paste `python -m nbutils.kaggle table` into the README and docs/kaggle-colab.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPOSITORY = "qlora-t4/notebook-suite"  # GitHub OWNER/REPO; $NBUTILS_REPOSITORY overrides it
KAGGLE_OWNER = "your-kaggle-username"  # used when $KAGGLE_USERNAME (or kaggle.json) does not name one
DATASET_SLUG = "qlora-nbutils"  # the Kaggle dataset with the nbutils wheel and the offline wheelhouse


def repository() -> str:
    return os.environ.get("NBUTILS_REPOSITORY") or REPOSITORY


def package_version() -> str:
    """The version of the installed nbutils (pyproject.toml's, installed by `make setup`)."""
    from importlib.metadata import version

    return version("nbutils")


def ref() -> str:
    """The git reference the badges open the notebooks at and the install cell takes nbutils from (without an attached
    dataset): $NBUTILS_REF, else the tag of this package's version ("v0.1.0"), written into both by `python -m
    nbutils.kaggle sync`. One reference for both: a badge on `main` would open notebooks newer than the tagged
    nbutils they install, and call functions it lacks. A notebook saved months ago still installs its own nbutils."""
    return os.environ.get("NBUTILS_REF") or f"v{package_version()}"


def kaggle_config_dir() -> Path:
    """Where the kaggle client looks for kaggle.json (same rules as the client: env, ~/.kaggle, XDG)."""
    if os.environ.get("KAGGLE_CONFIG_DIR"):
        return Path(os.environ["KAGGLE_CONFIG_DIR"])
    home = Path.home() / ".kaggle"
    if home.exists():
        return home
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"


def kaggle_owner() -> str:
    """The Kaggle account to push to: $KAGGLE_USERNAME, else kaggle.json's username, else KAGGLE_OWNER."""
    if os.environ.get("KAGGLE_USERNAME"):
        return os.environ["KAGGLE_USERNAME"]
    try:
        return json.loads((kaggle_config_dir() / "kaggle.json").read_text())["username"]
    except (OSError, ValueError, KeyError, TypeError):
        return KAGGLE_OWNER
