"""The project's few addresses, in one place: a fork changes these lines (or sets the environment variables).

REPOSITORY/BRANCH build every badge and the Colab links; the install cell takes nbutils from REPOSITORY at `ref()`,
the tag of this package's version, so a notebook installs the nbutils it was built with. KAGGLE_OWNER is the Kaggle
account in the committed kernel metadata. After changing them (or the version in pyproject.toml), run
`python -m nbutils.kaggle sync` (metadata, notebook badges and install cell) and `make sync`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPOSITORY = "qlora-t4/notebook-suite"  # GitHub OWNER/REPO; $NBUTILS_REPOSITORY overrides it
BRANCH = "main"  # $NBUTILS_BRANCH overrides it
KAGGLE_OWNER = "your-kaggle-username"  # used when $KAGGLE_USERNAME (or kaggle.json) does not name one
DATASET_SLUG = "qlora-nbutils"  # the Kaggle dataset with the nbutils wheel and the offline wheelhouse


def repository() -> str:
    return os.environ.get("NBUTILS_REPOSITORY") or REPOSITORY


def branch() -> str:
    return os.environ.get("NBUTILS_BRANCH") or BRANCH


def package_version() -> str:
    """The version of the installed nbutils (pyproject.toml's, installed by `make setup`)."""
    from importlib.metadata import version

    return version("nbutils")


def ref() -> str:
    """The git reference the install cell takes nbutils from without an attached dataset: $NBUTILS_REF, else the tag
    of this package's version ("v0.1.0"), written into the cell by `python -m nbutils.kaggle sync`. A release tags
    that commit; a notebook saved months ago then still installs its own nbutils, never today's main."""
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
